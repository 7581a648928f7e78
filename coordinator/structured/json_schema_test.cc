// Compiling JSON Schema: what is enforced compiles, what is not is an
// InvalidArgument that names the keyword and where it stands.
#include "coordinator/structured/json_schema.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::structured {
namespace {

using ::testing::HasSubstr;

absl::Status CompileError(const std::string& schema) {
  auto s = CompiledSchema::Parse(schema);
  return s.ok() ? absl::OkStatus() : s.status();
}

TEST(JsonSchemaTest, CompilesWhatIsEnforced) {
  for (const char* ok : {
           R"({})",
           R"(true)",
           R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
               "age": {"type": "integer"}}, "required": ["name"], "title": "Person"})",
           R"({"type": ["string", "null"], "description": "maybe"})",
           R"({"type": "integer", "minimum": 1, "maximum": 5})",
           R"({"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "maxLength": 20})",
           R"({"properties": {"a": {"format": "date-time"}, "b": {"format": "email"},
               "c": {"format": "uuid"}, "d": {"format": "uri"}, "e": {"format": "hostname"},
               "f": {"format": "ipv4"}, "g": {"format": "date"}, "h": {"format": "time"}}})",
           R"({"exclusiveMinimum": 0, "exclusiveMaximum": 1.5e3})",
           R"({"type": "number", "minimum": 0, "exclusiveMinimum": true})",
           R"({"enum": ["a", 1, null, [1, 2], {"k": true}]})",
           R"({"const": "fixed"})",
           R"({"type": "array", "items": {"$ref": "#/$defs/node"}, "minItems": 1, "maxItems": 3,
               "$defs": {"node": {"anyOf": [{"type": "number"}, {"$ref": "#"}]}}})",
           R"({"prefixItems": [{"type": "boolean"}], "items": false})",
           R"({"type": "object", "additionalProperties": {"type": "integer"}})",
           R"({"allOf": [{"$ref": "#/definitions/x"}], "definitions": {"x": {"type": "null"}}})",
       }) {
    EXPECT_TRUE(CompiledSchema::Parse(ok).ok()) << ok << ": " << CompileError(ok);
  }
}

TEST(JsonSchemaTest, RefusesWhatIsNotEnforcedAndSaysWhere) {
  struct Case {
    const char* schema;
    const char* message;
  };
  for (const Case& c : {
           Case{R"({"type": "string", "pattern": "(a"})", "$: 'pattern': an unclosed '('"},
           Case{R"({"type": "string", "pattern": "(a)\\1"})", "backreferences"},
           Case{R"j({"type": "string", "pattern": "(?=a)"})j", "lookaround"},
           Case{R"({"type": "string", "pattern": "[é]"})", "non-ASCII characters in a class"},
           Case{R"({"type": "string", "pattern": "a{2,1}"})", "m < n"},
           Case{R"({"type": "string", "pattern": "^[^\\s\\S]$"})", "matches no string"},
           Case{R"({"properties": {"when": {"type": "string", "format": "duration"}}})",
                "$.properties.when: 'format' \"duration\" is not supported"},
           Case{R"({"type": "string", "format": "date", "pattern": "a"})",
                "'pattern' beside 'format'"},
           Case{R"({"type": "array", "items": {"type": "integer", "multipleOf": 2}})",
                "$.items: 'multipleOf' is not supported"},
           Case{R"({"type": "integer", "minimum": 0.5, "maximum": 0.9})",
                "no integer lies within the schema's bounds"},
           Case{R"({"type": "number", "exclusiveMinimum": 1, "maximum": 1})",
                "no number lies within"},
           Case{R"({"type": "number", "minimum": "0"})", "'minimum' must be a number"},
           Case{R"({"anyOf": [{"type": "string"}, {"not": {}}]})",
                "$.anyOf[1]: 'not' is not supported"},
           Case{R"({"$ref": "https://example.com/s.json"})", "only local '$ref's"},
           Case{R"({"$ref": "#/$defs/missing"})", "names nothing"},
           Case{R"({"type": "object", "required": ["x"]})",
                "required property 'x' is not among 'properties'"},
           Case{R"({"type": "strin"})", "unknown type 'strin'"},
           Case{R"({"type": "string", "enum": [1, 2]})", "no value of 'enum'"},
           Case{R"({"type": "string", "minLength": 3, "maxLength": 2})", "minimum count"},
           Case{R"({"prefixItems": [{}], "items": false, "minItems": 2})", "'minItems' is more"},
           Case{R"({"anyOf": [{"type": "string"}], "type": "string"})", "'anyOf' beside 'type'"},
           Case{R"({"allOf": [{"type": "string"}, {"maxLength": 2}]})", "'allOf' of more"},
           Case{R"({"maxItems": -1})", "'maxItems' must be a non-negative integer"},
           Case{R"(3)", "a schema must be an object or a boolean"},
           Case{R"({"type": "object", )", "not valid JSON"},
       }) {
    const absl::Status s = CompileError(c.schema);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.schema;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.schema;
  }
  // Deep nesting is refused, not followed until the stack runs out.
  std::string deep = "{}";
  for (int i = 0; i < 200; ++i) deep = R"({"type": "array", "items": )" + deep + "}";
  EXPECT_THAT(std::string(CompileError(deep).message()), HasSubstr("nest deeper"));
  nlohmann::json many = {{"type", "object"}, {"properties", nlohmann::json::object()}};
  for (int i = 0; i <= CompiledSchema::kMaxProperties; ++i) {
    many["properties"]["p" + std::to_string(i)] = nlohmann::json::object();
  }
  EXPECT_THAT(std::string(CompileError(many.dump()).message()), HasSubstr("more than 64"));
}

// The same text (up to whitespace) gives the same compiled schema, so
// requests that send it share token masks; another text has an id of its
// own (properties declared in another order are another schema).
TEST(JsonSchemaTest, TheSameSchemaTextGivesTheSameCompiledSchema) {
  auto a = CompiledSchema::Parse(R"({"type": "object", "properties": {"x": {"type": "string"}}})");
  auto b = CompiledSchema::Parse(R"({"type":"object","properties":{"x":{"type":"string"}}})");
  auto c = CompiledSchema::Parse(R"({"type": "object", "properties": {"y": {"type": "string"}}})");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_NE((*a)->id(), (*c)->id());
  auto xy = CompiledSchema::Parse(R"({"properties": {"x": {}, "y": {}}})");
  auto yx = CompiledSchema::Parse(R"({"properties": {"y": {}, "x": {}}})");
  ASSERT_TRUE(xy.ok() && yx.ok());
  EXPECT_NE((*xy)->id(), (*yx)->id());
  EXPECT_NE((*a)->id(), CompiledSchema::AnyObject()->id());
  EXPECT_EQ(CompiledSchema::AnyObject()->id(), CompiledSchema::AnyObject()->id());
  auto yes = CompiledSchema::Choice({"yes", "no"});
  auto yes_again = CompiledSchema::Choice({"yes", "no"});
  auto other = CompiledSchema::Choice({"yes", "maybe"});
  // A choice of one string of two is not the two choices.
  auto joined = CompiledSchema::Choice({"yes2:no"});
  ASSERT_TRUE(yes.ok() && yes_again.ok() && other.ok() && joined.ok());
  EXPECT_EQ(yes->get(), yes_again->get());
  EXPECT_NE((*yes)->id(), (*other)->id());
  EXPECT_NE((*yes)->id(), (*joined)->id());
  EXPECT_NE((*yes)->id(), (*a)->id());
  // A schema that fails fails again (failures are not kept), and the
  // choices are checked whatever is interned.
  EXPECT_FALSE(CompiledSchema::Parse(R"({"multipleOf": 3})").ok());
  EXPECT_FALSE(CompiledSchema::Parse(R"({"multipleOf": 3})").ok());
  EXPECT_FALSE(CompiledSchema::Choice({"yes", ""}).ok());
}

}  // namespace
}  // namespace tandem::structured
