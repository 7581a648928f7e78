// A byte-level recognizer of the JSON texts a compiled JSON Schema
// (json_schema.h) accepts, for constrained decoding: like JsonGrammar, it
// says before each byte whether that byte can continue a text the schema
// allows, and the state is a small value the token mask copies per
// vocabulary entry.
//
// The state is a set of paths, one per way the bytes so far can be read
// (an anyOf whose alternatives start alike keeps several until a byte
// tells them apart); each path is a stack of frames, one per value being
// written. A value of any JSON (kAny) is left to a JsonGrammar. Values nest
// to kMaxDepth. No union has more than kMaxPaths alternatives (the compiler
// refuses wider ones); only unions nested in unions that all stay alive
// could read more ways at once, and beyond kMaxPaths the later readings
// are dropped. Each live reading costs its own step per byte. Whitespace between
// tokens comes in runs of at most JsonGrammar::kMaxWhitespaceRun bytes.
#ifndef TANDEM_COORDINATOR_STRUCTURED_SCHEMA_GRAMMAR_H_
#define TANDEM_COORDINATOR_STRUCTURED_SCHEMA_GRAMMAR_H_

#include <cstdint>
#include <string_view>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "coordinator/structured/json_grammar.h"
#include "coordinator/structured/json_lex.h"
#include "coordinator/structured/json_schema.h"
#include "coordinator/structured/number_bounds.h"

namespace tandem::structured {

class SchemaGrammar {
 public:
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxPaths = CompiledSchema::kMaxAlternatives;

  // `schema` must outlive the grammar and every copy of it.
  explicit SchemaGrammar(const CompiledSchema* schema);

  // Feeds one byte; false (and the state is then unspecified) when it
  // cannot continue a text the schema allows.
  bool Feed(uint8_t byte);
  bool Feed(std::string_view bytes);
  // The value is whole: the text may end here.
  bool IsComplete() const;

  // Two states compare equal when they accept the same continuations (and
  // have the same schema), so token masks can be cached by state.
  bool operator==(const SchemaGrammar& o) const {
    return schema_id_ == o.schema_id_ && paths_ == o.paths_;
  }
  template <typename H>
  friend H AbslHashValue(H h, const SchemaGrammar& g) {
    h = H::combine(std::move(h), g.schema_id_, g.paths_.size());
    for (const Path& p : g.paths_) h = H::combine(std::move(h), p);
    return h;
  }

 private:
  enum Phase : uint8_t {
    kAnyValue,  // bytes go to the path's JsonGrammar
    kString,    // in a string's body
    kNumber,
    kEnum,      // matching `values` [lo, hi) of the node, pos bytes matched
    kObjOpen,   // after '{': a key or '}'
    kObjKey,    // after ',': a key
    kObjInKey,  // in a key: declared names [lo, hi) match its pos bytes
    kObjColon,  // after a key
    kObjValue,  // after ':'
    kObjAfter,  // after a value: ',' or '}'
    kArrOpen,   // after '[': an item or ']'
    kArrValue,  // after ',': an item
    kArrAfter,  // after an item: ',' or ']'
  };
  // Fields a phase does not use stay zero, so frames compare memberwise.
  struct Frame {
    int32_t node = 0;  // never a union
    uint8_t phase = 0;
    bool extra_ok = false;  // kObjInKey: the key may still be an undeclared one
    uint32_t lo = 0, hi = 0, pos = 0;
    // Items of an array, characters of a string (saturating); kObj*: the
    // rank of the last declared property given, plus one (0: none yet).
    uint32_t count = 0;
    int32_t child = 0;   // kObjColon, kObjValue: the node of the value to come
    uint64_t seen = 0;   // kObj*: declared properties given
    bool operator==(const Frame& o) const {
      return node == o.node && phase == o.phase && extra_ok == o.extra_ok && lo == o.lo &&
             hi == o.hi && pos == o.pos && count == o.count && child == o.child && seen == o.seen;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Frame& f) {
      return H::combine(std::move(h), f.node, f.phase, f.extra_ok, f.lo, f.hi, f.pos, f.count,
                        f.child, f.seen);
    }
  };
  struct Path {
    absl::InlinedVector<Frame, 4> frames;
    bool started = false;  // the top-level value has begun (frames empty after: it is whole)
    uint8_t spaces = 0;    // whitespace bytes since the last token
    StringLexer string;    // the top frame's string or key (default otherwise)
    NumberLexer number;    // the top frame's number (default otherwise)
    BoundedNumber bounded;  // the same, for its bounds (default unless bounded)
    JsonGrammar any;       // the top frame's kAnyValue (default otherwise)
    bool operator==(const Path& o) const {
      return started == o.started && spaces == o.spaces && string == o.string &&
             number == o.number && bounded == o.bounded && any == o.any && frames == o.frames;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Path& p) {
      h = H::combine(std::move(h), p.started, p.spaces, p.string.Key(), p.number.Key(), p.bounded,
                     p.any);
      return H::combine_contiguous(std::move(h), p.frames.data(), p.frames.size());
    }
  };
  using Paths = absl::InlinedVector<Path, 1>;

  const SchemaNode& node(int32_t id) const { return schema_->node(id); }
  // Advances `p` by `b` in place: false when `b` cannot follow. When a
  // value of a union starts, the readings of its other alternatives are
  // appended to `more`.
  bool Step(Path& p, uint8_t b, Paths* more) const;
  // A value of `node` starts with `b`.
  bool StartValue(Path& p, int32_t node, uint8_t b, Paths* more) const;
  bool StartConcrete(Path& p, int32_t node, uint8_t b, Paths* more) const;
  // The top frame's value is whole: pop it.
  static void Pop(Path* p);
  static bool Space(Path* p);
  // The node of array item `index` (-1: none may come).
  int32_t ItemNode(const SchemaNode& n, uint32_t index) const;
  bool MayAddItem(const SchemaNode& n, uint32_t count) const;
  // An object may close with the properties in `seen`.
  bool MayClose(const SchemaNode& n, uint64_t seen) const;
  // Another key could come (a declared one that may follow the last one
  // given, of rank next_rank - 1, or any other).
  bool MayAddKey(const SchemaNode& n, uint32_t next_rank) const;

  const CompiledSchema* schema_;
  uint64_t schema_id_;
  Paths paths_;
};

}  // namespace tandem::structured

#endif  // TANDEM_COORDINATOR_STRUCTURED_SCHEMA_GRAMMAR_H_
