#include "coordinator/structured/json_grammar.h"

namespace tandem::structured {
namespace {

constexpr std::string_view kLiterals[3] = {"true", "false", "null"};

}  // namespace

JsonGrammar::JsonGrammar(bool object_only) : object_only_(object_only) {}

bool JsonGrammar::Feed(std::string_view bytes) {
  for (char c : bytes) {
    if (!Feed(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool JsonGrammar::Push(bool object) {
  if (depth_ >= kMaxDepth) return false;
  const uint64_t bit = uint64_t{1} << depth_;
  stack_ = object ? (stack_ | bit) : (stack_ & ~bit);
  ++depth_;
  mode_ = object ? Mode::kKeyOrEnd : Mode::kValueOrEnd;
  return true;
}

bool JsonGrammar::EndValue() {
  mode_ = depth_ == 0 ? Mode::kDone : Mode::kAfterValue;
  return true;
}

bool JsonGrammar::Space() {
  if (spaces_ >= kMaxWhitespaceRun) return false;
  ++spaces_;
  return true;
}

std::pair<uint64_t, uint64_t> JsonGrammar::Key() const {
  // Only the containers still open count; the lexers and the rest only in
  // the modes that read them.
  const uint64_t stack = depth_ == 0 ? 0 : (stack_ & (~uint64_t{0} >> (64 - depth_)));
  uint64_t a = static_cast<uint64_t>(mode_);
  switch (mode_) {
    case Mode::kString:
      a = (a << 32) | string_.Key();
      a = (a << 1) | (string_is_key_ ? 1 : 0);
      break;
    case Mode::kNumber:
      a = (a << 32) | number_.Key();
      break;
    case Mode::kLiteral:
      a = (a << 16) | (uint64_t{literal_} << 8) | sub_;
      break;
    default:
      a = (a << 8) | spaces_;
  }
  a = (a << 8) | static_cast<uint8_t>(depth_);
  a = (a << 1) | (object_only_ ? 1 : 0);
  return {a, stack};
}

bool JsonGrammar::operator==(const JsonGrammar& o) const { return Key() == o.Key(); }

bool JsonGrammar::IsComplete() const {
  return mode_ == Mode::kDone || (mode_ == Mode::kNumber && depth_ == 0 && number_.MayEnd());
}

bool JsonGrammar::StartValue(uint8_t b) {
  spaces_ = 0;
  switch (b) {
    case '{':
      return Push(true);
    case '[':
      return Push(false);
    case '"':
      mode_ = Mode::kString;
      string_ = StringLexer();
      string_is_key_ = false;
      return true;
    case 't':
    case 'f':
    case 'n':
      mode_ = Mode::kLiteral;
      literal_ = b == 't' ? 0 : (b == 'f' ? 1 : 2);
      sub_ = 1;
      return true;
    default:
      if (!NumberLexer::Starts(b)) return false;
      mode_ = Mode::kNumber;
      number_ = NumberLexer();
      return number_.Feed(b) == NumberLexer::Step::kMore;
  }
}

bool JsonGrammar::Feed(uint8_t b) {
  switch (mode_) {
    case Mode::kStart:
      if (IsJsonSpace(b)) return Space();
      if (object_only_ && b != '{') return false;
      return StartValue(b);
    case Mode::kValue:
      return IsJsonSpace(b) ? Space() : StartValue(b);
    case Mode::kValueOrEnd:
      if (IsJsonSpace(b)) return Space();
      if (b == ']') {
        spaces_ = 0;
        --depth_;
        return EndValue();
      }
      return StartValue(b);
    case Mode::kKeyOrEnd:
    case Mode::kKey:
      if (IsJsonSpace(b)) return Space();
      spaces_ = 0;
      if (b == '}' && mode_ == Mode::kKeyOrEnd) {
        --depth_;
        return EndValue();
      }
      if (b != '"') return false;
      mode_ = Mode::kString;
      string_ = StringLexer();
      string_is_key_ = true;
      return true;
    case Mode::kColon:
      if (IsJsonSpace(b)) return Space();
      if (b != ':') return false;
      spaces_ = 0;
      mode_ = Mode::kValue;
      return true;
    case Mode::kAfterValue:
      if (IsJsonSpace(b)) return Space();
      spaces_ = 0;
      if (b == ',') {
        mode_ = InObject() ? Mode::kKey : Mode::kValue;
        return true;
      }
      if (b == (InObject() ? '}' : ']')) {
        --depth_;
        return EndValue();
      }
      return false;
    case Mode::kDone:
      return false;
    case Mode::kString:
      switch (string_.Feed(b)) {
        case StringLexer::Step::kBad:
          return false;
        case StringLexer::Step::kClose:
          if (string_is_key_) {
            mode_ = Mode::kColon;
            return true;
          }
          return EndValue();
        default:
          return true;
      }
    case Mode::kLiteral: {
      const std::string_view word = kLiterals[literal_];
      if (b != static_cast<uint8_t>(word[sub_])) return false;
      if (++sub_ == word.size()) return EndValue();
      return true;
    }
    case Mode::kNumber:
      switch (number_.Feed(b)) {
        case NumberLexer::Step::kMore:
          return true;
        case NumberLexer::Step::kBad:
          return false;
        case NumberLexer::Step::kEnd:
          // The byte ends the number and then counts in its own right.
          EndValue();
          return Feed(b);
      }
  }
  return false;
}

}  // namespace tandem::structured
