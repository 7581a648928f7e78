#include "common/tokenizer/pretokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/json_util.h"
#include "common/tokenizer/unicode.h"

namespace tandem::tok {

using Range = std::pair<size_t, size_t>;

namespace {

struct Part {
  size_t begin, end;
  bool is_match;
};
}  // namespace

void SplitByMatches(std::string_view text,
                    const std::vector<std::pair<size_t, size_t>>& matches,
                    SplitBehavior behavior, bool invert,
                    std::vector<std::pair<size_t, size_t>>* pieces) {
  // Cover the whole text with alternating gap/match parts.
  std::vector<Part> parts;
  parts.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b > prev) parts.push_back({prev, b, false});
    parts.push_back({b, e, true});
    prev = e;
  }
  if (prev < text.size()) parts.push_back({prev, text.size(), false});
  if (invert) {
    for (Part& p : parts) p.is_match = !p.is_match;
  }

  std::vector<std::pair<size_t, size_t>> out;
  out.reserve(parts.size());
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Part& p : parts) {
        if (!p.is_match) out.emplace_back(p.begin, p.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Part& p : parts) out.emplace_back(p.begin, p.end);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !out.empty()) {
          out.back().second = p.end;
        } else {
          out.emplace_back(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;  // "previous" in right-to-left order
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().first = it->begin;
        } else {
          out.emplace_back(it->begin, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.is_match == previous_match && !out.empty()) {
          out.back().second = p.end;
        } else {
          out.emplace_back(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      break;
    }
  }
  for (const auto& r : out) {
    if (r.second > r.first) pieces->push_back(r);
  }
}

struct PreTokenizer::Step {
  enum Kind { kSplitRegex, kSplitString, kDigits, kByteLevel, kMetaspace } kind;
  // Split
  std::unique_ptr<Regex> regex;
  std::string literal;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  // Digits
  bool individual_digits = false;
  // ByteLevel
  bool add_prefix_space = false;
  bool use_regex = true;
  // Metaspace
  std::string replacement = "\xE2\x96\x81";  // U+2581
  enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;
  bool split = true;
};

namespace {

struct Piece {
  std::string text;
  bool at_start;
};

const Regex& Gpt2Regex() {
  static const Regex* re =
      Regex::Create(std::string(kGpt2Regex)).value().release();
  return *re;
}

void FindLiteral(std::string_view text, std::string_view lit,
                 std::vector<Range>* out) {
  if (lit.empty()) return;
  size_t pos = 0;
  while ((pos = text.find(lit, pos)) != std::string_view::npos) {
    out->emplace_back(pos, pos + lit.size());
    pos += lit.size();
  }
}

void EmitSplit(const Piece& p, const std::vector<Range>& matches,
               SplitBehavior behavior, bool invert, std::vector<Piece>* out) {
  std::vector<Range> ranges;
  SplitByMatches(p.text, matches, behavior, invert, &ranges);
  for (const auto& [b, e] : ranges) {
    out->push_back({p.text.substr(b, e - b), p.at_start && b == 0});
  }
}

absl::StatusOr<SplitBehavior> ParseBehavior(const nlohmann::json& j) {
  if (!j.is_string())
    return absl::InvalidArgumentError("Split.behavior must be a string");
  const std::string& s = j.get_ref<const std::string&>();
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown Split.behavior '", s, "'"));
}

}  // namespace

PreTokenizer::~PreTokenizer() = default;

std::unique_ptr<PreTokenizer> PreTokenizer::Identity() {
  return std::unique_ptr<PreTokenizer>(new PreTokenizer());
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(
    const nlohmann::json& j) {
  auto pt = Identity();
  if (!j.is_null()) TANDEM_RETURN_IF_ERROR(pt->AddFromJson(j));
  return pt;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromRegexes(
    const std::vector<std::string>& regexes, bool byte_level) {
  auto pt = Identity();
  for (const std::string& r : regexes) {
    auto step = std::make_unique<Step>();
    step->kind = Step::kSplitRegex;
    TANDEM_ASSIGN_OR_RETURN(step->regex, Regex::Create(r));
    pt->steps_.push_back(std::move(step));
  }
  if (byte_level) {
    auto step = std::make_unique<Step>();
    step->kind = Step::kByteLevel;
    step->use_regex = false;
    pt->steps_.push_back(std::move(step));
    pt->byte_level_ = true;
  }
  return pt;
}

absl::Status PreTokenizer::AddFromJson(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(
        "pre_tokenizer must be an object with a string \"type\"");
  }
  const std::string& type = j["type"].get_ref<const std::string&>();
  auto step = std::make_unique<Step>();
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(
          "Sequence pre_tokenizer needs a \"pretokenizers\" array");
    }
    for (const auto& sub : *it) TANDEM_RETURN_IF_ERROR(AddFromJson(sub));
    return absl::OkStatus();
  } else if (type == "Split") {
    auto pat = j.find("pattern");
    if (pat == j.end() || !pat->is_object()) {
      return absl::InvalidArgumentError(
          "Split pre_tokenizer needs a \"pattern\" object");
    }
    if (pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      step->kind = Step::kSplitRegex;
      TANDEM_ASSIGN_OR_RETURN(
          step->regex, Regex::Create((*pat)["Regex"].get<std::string>()));
    } else if (pat->contains("String") && (*pat)["String"].is_string()) {
      step->kind = Step::kSplitString;
      step->literal = (*pat)["String"].get<std::string>();
    } else {
      return absl::InvalidArgumentError(
          "Split.pattern must hold a \"Regex\" or \"String\"");
    }
    if (!j.contains("behavior"))
      return absl::InvalidArgumentError("Split needs \"behavior\"");
    TANDEM_ASSIGN_OR_RETURN(step->behavior, ParseBehavior(j["behavior"]));
    step->invert = JsonBool(j, "invert", false);
  } else if (type == "ByteLevel") {
    step->kind = Step::kByteLevel;
    step->add_prefix_space = JsonBool(j, "add_prefix_space", true);
    step->use_regex = JsonBool(j, "use_regex", true);
    byte_level_ = true;
  } else if (type == "Digits") {
    step->kind = Step::kDigits;
    step->individual_digits = JsonBool(j, "individual_digits", false);
  } else if (type == "Metaspace") {
    step->kind = Step::kMetaspace;
    if (j.contains("replacement") && j["replacement"].is_string()) {
      step->replacement = j["replacement"].get<std::string>();
    }
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      const std::string s = j["prepend_scheme"].get<std::string>();
      if (s == "always")
        step->prepend = Step::kAlways;
      else if (s == "first")
        step->prepend = Step::kFirst;
      else if (s == "never")
        step->prepend = Step::kNever;
      else
        return absl::InvalidArgumentError(
            absl::StrCat("unknown prepend_scheme '", s, "'"));
    } else {
      step->prepend =
          JsonBool(j, "add_prefix_space", true) ? Step::kAlways : Step::kNever;
    }
    step->split = JsonBool(j, "split", true);
  } else if (type == "WhitespaceSplit") {
    step->kind = Step::kSplitRegex;
    TANDEM_ASSIGN_OR_RETURN(step->regex, Regex::Create("\\s+"));
    step->behavior = SplitBehavior::kRemoved;
  } else if (type == "Whitespace") {
    step->kind = Step::kSplitRegex;
    TANDEM_ASSIGN_OR_RETURN(step->regex, Regex::Create("\\w+|[^\\w\\s]+"));
    step->behavior = SplitBehavior::kRemoved;
    step->invert = true;
  } else {
    return absl::UnimplementedError(
        absl::StrCat("pre_tokenizer type '", type, "' is not supported"));
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

void PreTokenizer::Split(std::string_view segment, bool at_start,
                         std::vector<std::string>* words) const {
  if (segment.empty()) return;
  std::vector<Piece> pieces{{std::string(segment), at_start}};
  std::vector<Piece> next;
  std::vector<Range> matches;
  for (const auto& step : steps_) {
    next.clear();
    for (Piece& p : pieces) {
      matches.clear();
      switch (step->kind) {
        case Step::kSplitRegex:
          step->regex->FindAll(p.text, &matches);
          EmitSplit(p, matches, step->behavior, step->invert, &next);
          break;
        case Step::kSplitString:
          FindLiteral(p.text, step->literal, &matches);
          EmitSplit(p, matches, step->behavior, step->invert, &next);
          break;
        case Step::kDigits: {
          size_t i = 0;
          while (i < p.text.size()) {
            const Utf8Step st = Utf8At(p.text, i);
            const size_t len = st.kind == Utf8Step::kValid ? st.len : 1;
            if (st.kind == Utf8Step::kValid && IsNumeric(st.cp))
              matches.emplace_back(i, i + len);
            i += len;
          }
          EmitSplit(p, matches,
                    step->individual_digits ? SplitBehavior::kIsolated
                                            : SplitBehavior::kContiguous,
                    false, &next);
          break;
        }
        case Step::kByteLevel: {
          if (step->add_prefix_space && (p.text.empty() || p.text[0] != ' ')) {
            p.text.insert(0, 1, ' ');
          }
          const size_t first = next.size();
          if (step->use_regex) {
            Gpt2Regex().FindAll(p.text, &matches);
            EmitSplit(p, matches, SplitBehavior::kIsolated, false, &next);
          } else {
            next.push_back(std::move(p));
          }
          for (size_t k = first; k < next.size(); ++k)
            next[k].text = BytesToUnicode(next[k].text);
          break;
        }
        case Step::kMetaspace: {
          std::string t;
          t.reserve(p.text.size() + step->replacement.size());
          for (char c : p.text) {
            if (c == ' ')
              t += step->replacement;
            else
              t += c;
          }
          const bool starts =
              t.compare(0, step->replacement.size(), step->replacement) == 0;
          if (!starts && (step->prepend == Step::kAlways ||
                          (step->prepend == Step::kFirst && p.at_start))) {
            t.insert(0, step->replacement);
          }
          p.text = std::move(t);
          if (step->split) {
            FindLiteral(p.text, step->replacement, &matches);
            EmitSplit(p, matches, SplitBehavior::kMergedWithNext, false, &next);
          } else {
            next.push_back(std::move(p));
          }
          break;
        }
      }
    }
    pieces.swap(next);
  }
  for (Piece& p : pieces) {
    if (!p.text.empty()) words->push_back(std::move(p.text));
  }
}

// ---------------------------------------------------------------------------
// llama.cpp's regex sets (src/llama-vocab.cpp, llm_tokenizer_bpe).

std::vector<std::string> LlamaCppPreRegexes(std::string_view pre,
                                            bool* ignore_merges, bool* known) {
  static const std::string kGpt2(kGpt2Regex);
  static const std::string kLlama3 =
      "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}"
      "\\p{N}]?\\p{L}+|"
      "\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const std::string kQwen2 =
      "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}"
      "\\p{N}]?\\p{L}+|"
      "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const std::string kPoro = " ?[^(\\s|.,!?…。，、।۔،)]+";
  *ignore_merges = false;
  *known = true;
  auto is = [&](std::initializer_list<std::string_view> names) {
    for (auto n : names) {
      if (pre == n) return true;
    }
    return false;
  };
  if (is({"llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe"})) {
    *ignore_merges = pre != "dbrx" && pre != "smaug-bpe";
    return {kLlama3};
  }
  if (is({"tekken"})) {
    *ignore_merges = true;
    return {
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}"
        "\\p{Lm}\\p{Lo}\\p{M}]+|"
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}"
        "\\p{Lm}\\p{Lo}\\p{M}]*|"
        "\\p{N}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  }
  if (is({"qwen2", "stablelm2", "megrez", "hunyuan", "grok-2", "qwen35"}))
    return {kQwen2};
  if (is({"chatglm-bpe", "glm4"})) return {kLlama3};
  if (is({"gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "roberta-bpe",
          "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es",
          "jina-v2-de", "jina-v2-code", "trillion", "granite-docling",
          "exaone4"})) {
    return {kGpt2};
  }
  if (is({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
          "minerva-7b"})) {
    return {"\\p{N}", kGpt2};
  }
  if (is({"falcon"})) {
    return {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"};
  }
  if (is({"deepseek-coder"})) {
    return {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
            "[一-龥ࠀ-一가-퟿]+", "\\p{N}"};
  }
  if (is({"deepseek-v3", "hunyuan-dense"})) {
    return {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
            "[!\"#$%&'()*+,\\-./"
            ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
            "[\\p{L}\\p{M}]+| "
            "?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  }
  if (is({"poro-chat", "bloom", "gpt3-finnish"})) return {kPoro};
  if (is({"viking"})) return {kPoro, "\\p{N}"};
  if (is({"seed-coder"})) {
    return {
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{"
        "L}\\p{N}]?\\p{L}+|"
        "\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  }
  if (is({"gpt-4o", "minimax-m2"})) {
    return {
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}"
        "\\p{Lm}\\p{Lo}\\p{M}]+"
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}"
        "\\p{Lm}\\p{Lo}\\p{M}]+"
        "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,"
        "3}|"
        " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  }
  *known = pre.empty() || pre == "default";
  return {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"};
}

}  // namespace tandem::tok
