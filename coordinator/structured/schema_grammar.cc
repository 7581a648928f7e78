#include "coordinator/structured/schema_grammar.h"

#include <algorithm>

namespace tandem::structured {
namespace {

using Kind = SchemaNode::Kind;

// Unions of unions (and $refs, which are unions of one) are followed this
// deep when a value starts; a schema that is nothing but a cycle of them
// admits no value.
constexpr int kMaxUnionNesting = 16;

uint64_t Bit(uint32_t i) { return uint64_t{1} << i; }

}  // namespace

SchemaGrammar::SchemaGrammar(const CompiledSchema* schema)
    : schema_(schema), schema_id_(schema->id()) {
  paths_.emplace_back();
}

bool SchemaGrammar::Feed(std::string_view bytes) {
  for (char c : bytes) {
    if (!Feed(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool SchemaGrammar::Feed(uint8_t b) {
  // Paths are stepped in place; those a union starts go to `more`.
  Paths more;
  size_t kept = 0;
  for (size_t i = 0; i < paths_.size(); ++i) {
    if (!Step(paths_[i], b, &more)) continue;
    if (kept != i) paths_[kept] = std::move(paths_[i]);
    ++kept;
  }
  if (kept != paths_.size()) paths_.erase(paths_.begin() + kept, paths_.end());
  if (more.empty()) return kept > 0;
  for (Path& p : more) paths_.push_back(std::move(p));
  // The same reading reached twice (two alternatives that agree) counts once.
  Paths unique;
  for (Path& p : paths_) {
    if (std::find(unique.begin(), unique.end(), p) == unique.end() &&
        static_cast<int>(unique.size()) < kMaxPaths) {
      unique.push_back(std::move(p));
    }
  }
  paths_ = std::move(unique);
  return !paths_.empty();
}

bool SchemaGrammar::IsComplete() const {
  for (const Path& p : paths_) {
    if (p.started && p.frames.empty()) return true;
    if (p.frames.size() != 1) continue;
    // A top-level number or enum value that could go on but may end here.
    const Frame& f = p.frames.back();
    if (f.phase == kNumber && p.number.MayEnd() &&
        (!node(f.node).bounds || p.bounded.InBounds(*node(f.node).bounds))) {
      return true;
    }
    if (f.phase == kAnyValue && p.any.IsComplete()) return true;
    if (f.phase == kEnum && f.lo < f.hi && node(f.node).values[f.lo].size() == f.pos) return true;
  }
  return false;
}

void SchemaGrammar::Pop(Path* p) {
  p->frames.pop_back();
  p->string = StringLexer();
  p->number = NumberLexer();
  p->bounded = BoundedNumber();
  p->any = JsonGrammar();
}

bool SchemaGrammar::Space(Path* p) {
  if (p->spaces >= JsonGrammar::kMaxWhitespaceRun) return false;
  ++p->spaces;
  return true;
}

int32_t SchemaGrammar::ItemNode(const SchemaNode& n, uint32_t index) const {
  return index < n.prefix_items.size() ? n.prefix_items[index] : n.items;
}

bool SchemaGrammar::MayAddItem(const SchemaNode& n, uint32_t count) const {
  return (n.max < 0 || count < n.max) && ItemNode(n, count) >= 0;
}

bool SchemaGrammar::MayClose(const SchemaNode& n, uint64_t seen) const {
  for (size_t i = 0; i < n.properties.size(); ++i) {
    if (n.properties[i].required && !(seen & Bit(static_cast<uint32_t>(i)))) return false;
  }
  return true;
}

bool SchemaGrammar::MayAddKey(const SchemaNode& n, uint32_t next_rank) const {
  return n.additional >= 0 || n.next_keys[next_rank] != 0;
}

bool SchemaGrammar::StartValue(Path& p, int32_t id, uint8_t b, Paths* more) const {
  // The concrete nodes the value may be of: unions flattened.
  absl::InlinedVector<int32_t, 4> concrete;
  absl::InlinedVector<std::pair<int32_t, int>, 4> todo = {{id, 0}};
  while (!todo.empty()) {
    const auto [n, nesting] = todo.back();
    todo.pop_back();
    if (node(n).kind != Kind::kUnion) {
      if (std::find(concrete.begin(), concrete.end(), n) == concrete.end()) concrete.push_back(n);
      continue;
    }
    if (nesting >= kMaxUnionNesting) continue;
    const auto& alts = node(n).alternatives;
    for (auto it = alts.rbegin(); it != alts.rend(); ++it) todo.push_back({*it, nesting + 1});
  }
  if (concrete.empty() || static_cast<int>(p.frames.size()) >= kMaxDepth) return false;
  // The other alternatives start from copies; `p` takes the first.
  for (size_t i = 1; i < concrete.size(); ++i) {
    Path q = p;
    if (StartConcrete(q, concrete[i], b, more)) more->push_back(std::move(q));
  }
  return StartConcrete(p, concrete[0], b, more);
}

bool SchemaGrammar::StartConcrete(Path& p, int32_t id, uint8_t b, Paths* more) const {
  const SchemaNode& n = node(id);
  Frame f;
  f.node = id;
  switch (n.kind) {
    case Kind::kNever:
    case Kind::kUnion:
      return false;
    case Kind::kAny:
    case Kind::kAnyObject:
      p.any = JsonGrammar(/*object_only=*/n.kind == Kind::kAnyObject);
      if (!p.any.Feed(b)) return false;
      if (p.any.Closed()) {  // a one-byte value? (none is, but be exact)
        p.any = JsonGrammar();
        break;
      }
      f.phase = kAnyValue;
      p.frames.push_back(f);
      break;
    case Kind::kObject:
      if (b != '{') return false;
      f.phase = kObjOpen;
      p.frames.push_back(f);
      break;
    case Kind::kArray:
      if (b != '[') return false;
      f.phase = kArrOpen;
      p.frames.push_back(f);
      break;
    case Kind::kString:
      if (b != '"') return false;
      f.phase = kString;
      // lo: the pattern's automaton state (0 when there is none).
      if (n.pattern != nullptr) f.lo = static_cast<uint32_t>(n.pattern->start());
      p.frames.push_back(f);
      break;
    case Kind::kNumber:
    case Kind::kInteger:
      p.number = NumberLexer(/*integer_only=*/n.kind == Kind::kInteger);
      if (p.number.Feed(b) != NumberLexer::Step::kMore) return false;
      if (n.bounds && !p.bounded.Feed(b, *n.bounds, n.kind == Kind::kInteger)) return false;
      f.phase = kNumber;
      p.frames.push_back(f);
      break;
    case Kind::kEnum:
      f.phase = kEnum;
      f.hi = static_cast<uint32_t>(n.values.size());
      p.frames.push_back(f);
      return Step(p, b, more);  // the first byte narrows the values
  }
  return true;
}

bool SchemaGrammar::Step(Path& p, uint8_t b, Paths* more) const {
  if (p.frames.empty()) {
    if (p.started) return false;  // nothing follows the value
    if (IsJsonSpace(b) && !schema_->raw()) {
      return Space(&p);
    }
    p.spaces = 0;
    p.started = true;
    return StartValue(p, schema_->root(), b, more);
  }
  Frame& f = p.frames.back();
  const SchemaNode& n = node(f.node);
  const bool space = IsJsonSpace(b);
  switch (f.phase) {
    case kAnyValue:
      if (p.any.IsComplete()) {
        // A number that may end: the byte continues it, or it is the parent's.
        JsonGrammar longer = p.any;
        if (!longer.Feed(b)) {
          Pop(&p);
          return Step(p, b, more);
        }
        p.any = longer;
      } else if (!p.any.Feed(b)) {
        return false;
      }
      if (p.any.Closed()) Pop(&p);
      return true;

    case kString: {
      const bool escape = p.string.InEscape();
      const StringLexer::Step step = p.string.Feed(b);
      switch (step) {
        case StringLexer::Step::kBad:
          return false;
        case StringLexer::Step::kClose:
          if (f.count < n.min) return false;
          if (n.pattern != nullptr && !n.pattern->Accepting(static_cast<int32_t>(f.lo))) {
            return false;
          }
          Pop(&p);
          return true;
        case StringLexer::Step::kStart:
          if (n.max >= 0 && f.count >= n.max) return false;
          // Counted only as far as a bound reads it.
          if (n.max >= 0 || f.count < n.min) ++f.count;
          break;
        case StringLexer::Step::kMore:
          break;
      }
      if (n.pattern == nullptr) return true;
      // The pattern reads the string's decoded bytes: an escape's character,
      // not the escape (a \u escape is refused: write the character).
      uint8_t decoded = b;
      if (step == StringLexer::Step::kStart && b == '\\') return true;
      if (escape) {
        switch (b) {
          case 'b':
            decoded = '\b';
            break;
          case 'f':
            decoded = '\f';
            break;
          case 'n':
            decoded = '\n';
            break;
          case 'r':
            decoded = '\r';
            break;
          case 't':
            decoded = '\t';
            break;
          case 'u':
            return false;
          default:  // " \ /
            break;
        }
      }
      const int32_t next = n.pattern->Next(static_cast<int32_t>(f.lo), decoded);
      if (next < 0) return false;
      f.lo = static_cast<uint32_t>(next);
      return true;
    }

    case kNumber:
      switch (p.number.Feed(b)) {
        case NumberLexer::Step::kBad:
          return false;
        case NumberLexer::Step::kMore:
          return !n.bounds || p.bounded.Feed(b, *n.bounds, n.kind == Kind::kInteger);
        case NumberLexer::Step::kEnd:
          if (n.bounds && !p.bounded.InBounds(*n.bounds)) return false;
          Pop(&p);
          return Step(p, b, more);
      }
      return false;

    case kEnum: {
      // [lo, hi) share their first pos bytes, so those with byte b next
      // are a run within it.
      uint32_t lo = f.lo;
      while (lo < f.hi && (n.values[lo].size() <= f.pos || uint8_t(n.values[lo][f.pos]) != b)) {
        ++lo;
      }
      uint32_t hi = lo;
      while (hi < f.hi && n.values[hi].size() > f.pos && uint8_t(n.values[hi][f.pos]) == b) ++hi;
      if (lo == hi) {
        // No value goes on with b: one that is whole ends here (the shortest,
        // first in order), and b is the parent's.
        if (f.lo < f.hi && n.values[f.lo].size() == f.pos && f.pos > 0) {
          Pop(&p);
          return Step(p, b, more);
        }
        return false;
      }
      f.lo = lo;
      f.hi = hi;
      ++f.pos;
      // The one value left is whole: it ends now rather than at the next byte.
      if (hi - lo == 1 && n.values[lo].size() == f.pos) Pop(&p);
      return true;
    }

    case kObjOpen:
    case kObjKey:
    case kObjAfter:
      if (space) {
        return Space(&p);
      }
      p.spaces = 0;
      if (b == '}' && f.phase != kObjKey) {
        if (!MayClose(n, f.seen)) return false;
        Pop(&p);
      } else if (b == ',' && f.phase == kObjAfter) {
        if (!MayAddKey(n, f.count)) return false;
        f.phase = kObjKey;
      } else if (b == '"' && f.phase != kObjAfter) {
        if (!MayAddKey(n, f.count)) return false;
        f.phase = kObjInKey;
        f.lo = 0;
        f.hi = static_cast<uint32_t>(n.properties.size());
        f.pos = 0;
        f.extra_ok = n.additional >= 0;
      } else {
        return false;
      }
      return true;

    case kObjInKey: {
      const StringLexer::Step step = p.string.Feed(b);
      if (step == StringLexer::Step::kBad) return false;
      if (step == StringLexer::Step::kClose) {
        const bool declared = f.lo < f.hi && n.properties[f.lo].name.size() == f.pos;
        if (declared) {
          // Given already, or out of the declared order.
          if (!(n.next_keys[f.count] & Bit(f.lo))) return false;
          f.seen |= Bit(f.lo);
          f.count = static_cast<uint32_t>(n.properties[f.lo].rank) + 1;
          f.child = n.properties[f.lo].node;
        } else if (f.extra_ok) {
          f.child = n.additional;
        } else {
          return false;
        }
        f.phase = kObjColon;
        f.lo = f.hi = f.pos = 0;
        f.extra_ok = false;
        p.string = StringLexer();
        return true;
      }
      // An undeclared key is written without escapes, so that it cannot
      // spell a declared name another way.
      if (b == '\\' && step == StringLexer::Step::kStart) f.extra_ok = false;
      uint32_t lo = f.lo;
      while (lo < f.hi && (n.properties[lo].name.size() <= f.pos ||
                           uint8_t(n.properties[lo].name[f.pos]) != b)) {
        ++lo;
      }
      uint32_t hi = lo;
      while (hi < f.hi && n.properties[hi].name.size() > f.pos &&
             uint8_t(n.properties[hi].name[f.pos]) == b) {
        ++hi;
      }
      bool fresh = false;  // a declared name that may come next is still possible
      for (uint32_t i = lo; i < hi && !fresh; ++i) fresh = (n.next_keys[f.count] & Bit(i)) != 0;
      if (!fresh && !f.extra_ok) return false;
      // With undeclared keys allowed, the names given already stay in the
      // range: written again in full, they are duplicates.
      if (lo == hi) {
        f.lo = f.hi = f.pos = 0;
      } else {
        f.lo = lo;
        f.hi = hi;
        ++f.pos;
      }
      return true;
    }

    case kObjColon:
      if (space) {
        return Space(&p);
      }
      if (b != ':') return false;
      p.spaces = 0;
      f.phase = kObjValue;
      return true;

    case kObjValue: {
      if (space) {
        return Space(&p);
      }
      p.spaces = 0;
      const int32_t child = f.child;
      f.child = 0;
      f.phase = kObjAfter;
      return StartValue(p, child, b, more);
    }

    case kArrOpen:
    case kArrValue:
    case kArrAfter: {
      if (space) {
        return Space(&p);
      }
      p.spaces = 0;
      if (b == ']' && f.phase != kArrValue) {
        if (f.count < n.min) return false;
        Pop(&p);
        return true;
      }
      if (f.phase == kArrAfter) {
        if (b != ',' || !MayAddItem(n, f.count)) return false;
        f.phase = kArrValue;
        return true;
      }
      if (!MayAddItem(n, f.count)) return false;
      const int32_t item = ItemNode(n, f.count);
      // Counted only as far as the bounds and the prefix items read it.
      const uint32_t cap = n.max >= 0 ? static_cast<uint32_t>(n.max)
                                      : static_cast<uint32_t>(std::max<int64_t>(
                                            n.min, static_cast<int64_t>(n.prefix_items.size())));
      if (f.count < cap) ++f.count;
      f.phase = kArrAfter;
      return StartValue(p, item, b, more);
    }
  }
  return false;
}

}  // namespace tandem::structured
