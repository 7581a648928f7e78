// JSON Schema, compiled for constrained decoding (response_format
// json_schema): the schema's nodes flattened into a table that
// SchemaGrammar (schema_grammar.h) walks byte by byte.
//
// What is enforced: type (one or a list), enum, const, properties,
// required, additionalProperties (a schema, true, or false — and false when
// absent beside 'properties', as OpenAI's strict mode and vLLM's default
// backend take it, so the model writes the properties it was given), items, prefixItems,
// minItems, maxItems, minLength, maxLength, minimum, maximum,
// exclusiveMinimum, exclusiveMaximum (number_bounds.h), pattern (byte_dfa.h),
// format (date, time, date-time, uuid, ipv4, email, hostname, uri: each a
// pattern of the strings it allows, a subset of the RFCs' for the last
// three), anyOf, oneOf (as anyOf: that
// exactly one alternative matches is not checked), allOf of one schema, and
// $ref to "#", "#/$defs/…" or "#/definitions/…" (recursion included).
// Properties come in the order the schema declares them (as OpenAI's
// structured outputs and vLLM write them), each at most once, optional
// ones possibly left out; undeclared ones (where additionalProperties
// allows them) anywhere between. Keywords that only
// annotate (title, description, default, examples, …) are ignored. A
// keyword that would constrain the value in a way not enforced here
// (multipleOf, uniqueItems, another format, …) is an InvalidArgument naming it, so no
// answer claims a constraint it was not held to.
#ifndef TANDEM_COORDINATOR_STRUCTURED_JSON_SCHEMA_H_
#define TANDEM_COORDINATOR_STRUCTURED_JSON_SCHEMA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/structured/byte_dfa.h"
#include "coordinator/structured/number_bounds.h"
#include "nlohmann/json_fwd.hpp"

namespace tandem::structured {

struct SchemaNode {
  enum class Kind : uint8_t {
    kAny,        // any JSON value
    kAnyObject,  // any JSON object (response_format json_object)
    kNever,      // no value (the schema false)
    kObject,
    kArray,
    kString,
    kNumber,
    kInteger,
    kEnum,   // one of `values`, written exactly as serialized there
    kUnion,  // one of `alternatives`
  };
  struct Property {
    std::string name;  // as written in JSON, without the quotes (escapes included)
    int32_t node = 0;
    int32_t rank = 0;  // where the schema declares it: properties are written in that order
    bool required = false;
  };
  Kind kind = Kind::kAny;
  // kObject: sorted by name, at most kMaxProperties.
  std::vector<Property> properties;
  // kObject: next_keys[r], bit i for properties[i]: the declared properties
  // that may come next when the last one written has rank r - 1 (r = 0:
  // none yet), those after it up to the first required one.
  std::vector<uint64_t> next_keys;
  int32_t additional = -1;  // the node of other properties; -1: none allowed
  // kArray: the node of item i is prefix_items[i], then items (-1: no more).
  std::vector<int32_t> prefix_items;
  int32_t items = -1;
  // kArray: item counts; kString: character counts. max -1: no bound.
  int64_t min = 0, max = -1;
  // kString: pattern or format, as an automaton over the decoded bytes.
  std::shared_ptr<const ByteDfa> pattern;
  // kNumber, kInteger: minimum, maximum and their exclusive forms.
  std::optional<NumberBounds> bounds;
  // kEnum: compact serializations, sorted.
  std::vector<std::string> values;
  // kUnion: node ids (unions and all).
  std::vector<int32_t> alternatives;
};

class CompiledSchema {
 public:
  static constexpr int kMaxProperties = 64;
  static constexpr int kMaxNodes = 10000;
  // Values an anyOf (or a list of types) may take, flattened.
  static constexpr int kMaxAlternatives = 128;

  // Fails with InvalidArgument, naming the keyword and where it is
  // ("$.properties.age: 'minimum' is not supported"). A schema compiled
  // lately is given again, the same object, for the same text (and a
  // Choice for the same list): see schema_intern.h.
  static absl::StatusOr<std::shared_ptr<const CompiledSchema>> Compile(
      const nlohmann::ordered_json& schema);
  // The same; objects' keys sorted, so properties are declared by name.
  static absl::StatusOr<std::shared_ptr<const CompiledSchema>> Compile(
      const nlohmann::json& schema);
  // The same from text.
  static absl::StatusOr<std::shared_ptr<const CompiledSchema>> Parse(std::string_view text);
  // Any JSON object: response_format json_object.
  static std::shared_ptr<const CompiledSchema> AnyObject();
  // Not JSON: the text is exactly one of `choices` (vLLM's guided_choice),
  // with nothing before or after it. InvalidArgument when there are none
  // or one is empty.
  static absl::StatusOr<std::shared_ptr<const CompiledSchema>> Choice(
      const std::vector<std::string>& choices);

  const SchemaNode& node(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  int32_t root() const { return 0; }
  // The text is the root value's bytes alone (Choice): no whitespace before it.
  bool raw() const { return raw_; }
  // Unique among the compiled schemas of a process (never reused), so
  // token masks cached by state can name their schema.
  uint64_t id() const { return id_; }

 private:
  friend class SchemaCompiler;
  CompiledSchema();

  std::vector<SchemaNode> nodes_;
  uint64_t id_;
  bool raw_ = false;
};

}  // namespace tandem::structured

#endif  // TANDEM_COORDINATOR_STRUCTURED_JSON_SCHEMA_H_
