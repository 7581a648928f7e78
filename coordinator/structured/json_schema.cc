#include "coordinator/structured/json_schema.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "coordinator/structured/schema_intern.h"
#include "nlohmann/json.hpp"

namespace tandem::structured {
namespace {

using json = nlohmann::ordered_json;

std::atomic<uint64_t> next_schema_id{1};

// Validation keywords of JSON Schema (2020-12 and the drafts before it)
// whose constraints the grammar does not enforce.
constexpr absl::string_view kUnsupported[] = {
    "multipleOf",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "if",
    "then",
    "else",
    "not",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedItems",
    "unevaluatedProperties",
    "$dynamicRef",
    "$recursiveRef",
};

// Keywords that constrain a value; the others (title, description, $defs,
// …) are annotations or containers, which a $ref or an anyOf may stand
// beside.
constexpr absl::string_view kValidation[] = {
    "type",      "enum",        "const",           "properties", "required", "additionalProperties",
    "items",     "prefixItems", "additionalItems", "minItems",   "maxItems", "minLength",
    "maxLength", "anyOf",       "oneOf",           "allOf",      "$ref",     "pattern",
    "format",
};

constexpr int kMaxNesting = 64;

absl::Status Unsupported(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

}  // namespace

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root) : root_(root) {}

  absl::StatusOr<std::shared_ptr<const CompiledSchema>> Run() {
    schema_ = std::shared_ptr<CompiledSchema>(new CompiledSchema());
    refs_["#"] = 0;
    TANDEM_ASSIGN_OR_RETURN(int32_t root, NewNode("$"));
    TANDEM_RETURN_IF_ERROR(CompileInto(root_, "$", 0, root));
    TANDEM_RETURN_IF_ERROR(CheckUnionWidths());
    return std::shared_ptr<const CompiledSchema>(std::move(schema_));
  }

 private:
  // Every union, its nested unions flattened, has at most kMaxAlternatives
  // values: the recognizer follows them all at once.
  absl::Status CheckUnionWidths() const {
    const auto& nodes = schema_->nodes_;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].kind != SchemaNode::Kind::kUnion) continue;
      absl::flat_hash_map<int32_t, bool> seen;
      std::vector<std::pair<int32_t, int>> todo = {{static_cast<int32_t>(i), 0}};
      int width = 0;
      while (!todo.empty()) {
        const auto [n, depth] = todo.back();
        todo.pop_back();
        if (!seen.emplace(n, true).second || depth > 16) continue;
        const SchemaNode& node = nodes[static_cast<size_t>(n)];
        if (node.kind != SchemaNode::Kind::kUnion) {
          ++width;
          continue;
        }
        for (int32_t a : node.alternatives) todo.push_back({a, depth + 1});
      }
      if (width > CompiledSchema::kMaxAlternatives) {
        return absl::InvalidArgumentError(
            absl::StrCat("an anyOf of ", width, " alternatives; at most ",
                         CompiledSchema::kMaxAlternatives, " are supported"));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int32_t> NewNode(absl::string_view path) {
    if (schema_->nodes_.size() >= CompiledSchema::kMaxNodes) {
      return Unsupported(
          path, absl::StrCat("the schema has more than ", CompiledSchema::kMaxNodes, " nodes"));
    }
    schema_->nodes_.emplace_back();
    return static_cast<int32_t>(schema_->nodes_.size() - 1);
  }

  absl::StatusOr<int32_t> Compile(const json& s, const std::string& path, int nesting) {
    TANDEM_ASSIGN_OR_RETURN(int32_t id, NewNode(path));
    TANDEM_RETURN_IF_ERROR(CompileInto(s, path, nesting, id));
    return id;
  }

  // Compiles `s` into node `id` (already allocated, so that a $ref can name
  // it before it is done).
  absl::Status CompileInto(const json& s, const std::string& path, int nesting, int32_t id) {
    if (nesting > kMaxNesting) {
      return Unsupported(path, absl::StrCat("schemas nest deeper than ", kMaxNesting));
    }
    SchemaNode n;
    if (s.is_boolean()) {
      n.kind = s.get<bool>() ? SchemaNode::Kind::kAny : SchemaNode::Kind::kNever;
      return Set(id, std::move(n));
    }
    if (!s.is_object()) return Unsupported(path, "a schema must be an object or a boolean");
    for (absl::string_view k : kUnsupported) {
      if (s.contains(k)) {
        return Unsupported(path, absl::StrCat("'", k, "' is not supported in json_schema"));
      }
    }
    // $ref, anyOf/oneOf and allOf stand alone (beside annotations).
    for (absl::string_view k : {"$ref", "anyOf", "oneOf", "allOf"}) {
      if (!s.contains(k)) continue;
      for (absl::string_view other : kValidation) {
        if (other != k && s.contains(other)) {
          return Unsupported(path, absl::StrCat("'", k, "' beside '", other, "' is not supported"));
        }
      }
      const json& v = s.at(std::string(k));
      if (k == "$ref") return CompileRef(v, path, nesting, id);
      if (!v.is_array() || v.empty()) {
        return Unsupported(path, absl::StrCat("'", k, "' must be a non-empty array"));
      }
      if (k == "allOf") {
        if (v.size() != 1)
          return Unsupported(path, "'allOf' of more than one schema is not supported");
        return CompileInto(v[0], path + ".allOf[0]", nesting + 1, id);
      }
      n.kind = SchemaNode::Kind::kUnion;
      for (size_t i = 0; i < v.size(); ++i) {
        TANDEM_ASSIGN_OR_RETURN(
            int32_t alt, Compile(v[i], absl::StrCat(path, ".", k, "[", i, "]"), nesting + 1));
        n.alternatives.push_back(alt);
      }
      return Set(id, std::move(n));
    }

    std::vector<std::string> types;
    if (const auto t = s.find("type"); t != s.end()) {
      if (t->is_string()) {
        types.push_back(t->get<std::string>());
      } else if (t->is_array() && !t->empty()) {
        for (const json& e : *t) {
          if (!e.is_string()) return Unsupported(path, "'type' must be a string or strings");
          types.push_back(e.get<std::string>());
        }
      } else {
        return Unsupported(path, "'type' must be a string or a non-empty array of strings");
      }
    }
    if (s.contains("enum") || s.contains("const")) return CompileEnum(s, path, types, id);
    if (types.empty()) {
      // No type: what the other keywords apply to, or anything.
      const bool object =
          s.contains("properties") || s.contains("required") || s.contains("additionalProperties");
      const bool array = s.contains("items") || s.contains("prefixItems") ||
                         s.contains("minItems") || s.contains("maxItems");
      const bool string = s.contains("minLength") || s.contains("maxLength") ||
                          s.contains("pattern") || s.contains("format");
      const bool number = s.contains("minimum") || s.contains("maximum") ||
                          s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum");
      if (object + array + string + number > 1) {
        return Unsupported(path, "a schema without 'type' has keywords of several types");
      }
      if (object) types.push_back("object");
      if (array) types.push_back("array");
      if (string) types.push_back("string");
      if (number) types.push_back("number");
      if (types.empty()) return Set(id, std::move(n));  // kAny
    }
    if (types.size() == 1) return CompileTyped(s, path, nesting, types[0], id);
    n.kind = SchemaNode::Kind::kUnion;
    for (const std::string& t : types) {
      TANDEM_ASSIGN_OR_RETURN(int32_t alt, NewNode(path));
      TANDEM_RETURN_IF_ERROR(CompileTyped(s, path, nesting, t, alt));
      n.alternatives.push_back(alt);
    }
    return Set(id, std::move(n));
  }

  absl::Status CompileRef(const json& ref, const std::string& path, int nesting, int32_t id) {
    if (!ref.is_string() || ref.get<std::string>().empty() || ref.get<std::string>()[0] != '#') {
      return Unsupported(path, "only local '$ref's (\"#\", \"#/$defs/…\") are supported");
    }
    const std::string r = ref.get<std::string>();
    int32_t target;
    if (auto it = refs_.find(r); it != refs_.end()) {
      target = it->second;
    } else {
      const json* t = nullptr;
      try {
        t = &root_.at(json::json_pointer(r.substr(1)));
      } catch (const json::exception&) {
        return Unsupported(path, absl::StrCat("'$ref' \"", r, "\" names nothing in the schema"));
      }
      TANDEM_ASSIGN_OR_RETURN(target, NewNode(r));
      refs_[r] = target;
      TANDEM_RETURN_IF_ERROR(CompileInto(*t, r, nesting + 1, target));
    }
    // A union of one: the grammar follows it when a value starts (the
    // target may still be being compiled, so it is not copied).
    SchemaNode n;
    n.kind = SchemaNode::Kind::kUnion;
    n.alternatives.push_back(target);
    return Set(id, std::move(n));
  }

  absl::Status CompileEnum(const json& s, const std::string& path,
                           const std::vector<std::string>& types, int32_t id) {
    std::vector<json> values;
    if (const auto c = s.find("const"); c != s.end()) values.push_back(*c);
    if (const auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty())
        return Unsupported(path, "'enum' must be a non-empty array");
      if (!values.empty()) return Unsupported(path, "'enum' beside 'const' is not supported");
      values.assign(e->begin(), e->end());
    }
    SchemaNode n;
    n.kind = SchemaNode::Kind::kEnum;
    for (const json& v : values) {
      if (!types.empty() && std::find(types.begin(), types.end(), TypeOf(v)) == types.end() &&
          !(TypeOf(v) == "integer" &&
            std::find(types.begin(), types.end(), "number") != types.end())) {
        continue;  // a value of another type can never be given
      }
      n.values.push_back(v.dump());
    }
    if (n.values.empty()) return Unsupported(path, "no value of 'enum' has the schema's 'type'");
    std::sort(n.values.begin(), n.values.end());
    n.values.erase(std::unique(n.values.begin(), n.values.end()), n.values.end());
    return Set(id, std::move(n));
  }

  static std::string TypeOf(const json& v) {
    if (v.is_number_integer()) return "integer";
    if (v.is_number()) {
      // 2.0 is an integer to JSON Schema.
      const double d = v.get<double>();
      return d == static_cast<double>(static_cast<int64_t>(d)) ? "integer" : "number";
    }
    if (v.is_string()) return "string";
    if (v.is_boolean()) return "boolean";
    if (v.is_null()) return "null";
    if (v.is_array()) return "array";
    return "object";
  }

  absl::StatusOr<int64_t> Count(const json& s, absl::string_view key, const std::string& path,
                                int64_t absent) {
    const auto it = s.find(key);
    if (it == s.end()) return absent;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return Unsupported(path, absl::StrCat("'", key, "' must be a non-negative integer"));
    }
    return it->get<int64_t>();
  }

  absl::Status CompileTyped(const json& s, const std::string& path, int nesting,
                            const std::string& type, int32_t id) {
    SchemaNode n;
    if (type == "string") {
      n.kind = SchemaNode::Kind::kString;
      TANDEM_ASSIGN_OR_RETURN(n.min, Count(s, "minLength", path, 0));
      TANDEM_ASSIGN_OR_RETURN(n.max, Count(s, "maxLength", path, -1));
      TANDEM_RETURN_IF_ERROR(CompilePattern(s, path, &n));
    } else if (type == "number" || type == "integer") {
      n.kind = type == "number" ? SchemaNode::Kind::kNumber : SchemaNode::Kind::kInteger;
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        const auto it = s.find(k);
        if (it == s.end() || it->is_number()) continue;
        if (it->is_boolean() && std::string_view(k).substr(0, 9) == "exclusive")
          continue;  // draft 4
        return Unsupported(path, absl::StrCat("'", k, "' must be a number"));
      }
      bool empty = false;
      n.bounds = BoundsOf(s, type == "integer", &empty);
      if (empty) {
        return Unsupported(path, absl::StrCat("no ", type, " lies within the schema's bounds"));
      }
    } else if (type == "boolean" || type == "null") {
      n.kind = SchemaNode::Kind::kEnum;
      n.values = type == "null" ? std::vector<std::string>{"null"}
                                : std::vector<std::string>{"false", "true"};
    } else if (type == "object") {
      TANDEM_RETURN_IF_ERROR(CompileObject(s, path, nesting, &n));
    } else if (type == "array") {
      TANDEM_RETURN_IF_ERROR(CompileArray(s, path, nesting, &n));
    } else {
      return Unsupported(path, absl::StrCat("unknown type '", type, "'"));
    }
    if (n.max >= 0 && n.min > n.max) {
      return Unsupported(path, "the schema's minimum count is above its maximum");
    }
    return Set(id, std::move(n));
  }

  // pattern, or a format as the pattern of the strings it allows.
  absl::Status CompilePattern(const json& s, const std::string& path, SchemaNode* n) {
    const auto p = s.find("pattern");
    const auto f = s.find("format");
    if (p == s.end() && f == s.end()) return absl::OkStatus();
    if (p != s.end() && f != s.end()) {
      return Unsupported(path, "'pattern' beside 'format' is not supported");
    }
    std::string regex;
    if (p != s.end()) {
      if (!p->is_string()) return Unsupported(path, "'pattern' must be a string");
      regex = p->get<std::string>();
    } else {
      if (!f->is_string()) return Unsupported(path, "'format' must be a string");
      regex = FormatPattern(f->get<std::string>());
      if (regex.empty()) {
        return Unsupported(path, absl::StrCat("'format' \"", f->get<std::string>(),
                                              "\" is not supported (date, time, date-time, "
                                              "uuid, ipv4, email, hostname, uri)"));
      }
    }
    auto dfa = ByteDfa::FromPattern(regex);
    if (!dfa.ok()) return Unsupported(path, dfa.status().message());
    n->pattern = *std::move(dfa);
    return absl::OkStatus();
  }

  // RFC 3339 dates and times (the days of each month, leap years
  // included), RFC 4122 UUIDs, dotted IPv4, and subsets of RFC 5321
  // mailboxes, RFC 1123 host names and RFC 3986 URIs.
  static std::string FormatPattern(const std::string& format) {
    static const std::string kDate =
        "(\\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|"
        "02-(0[1-9]|1\\d|2[0-8]))|(\\d\\d(0[48]|[2468][048]|[13579][26])|"
        "([02468][048]|[13579][26])00)-02-29)";
    static const std::string kTime =
        "([01]\\d|2[0-3]):[0-5]\\d:([0-5]\\d|60)(\\.\\d+)?([Zz]|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
    static const std::string kLabel = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    static const std::string kUriChar = "([A-Za-z0-9\\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})";
    if (format == "date") return "^" + kDate + "$";
    if (format == "time") return "^" + kTime + "$";
    if (format == "date-time") return "^" + kDate + "[Tt]" + kTime + "$";
    if (format == "uuid") {
      return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
    }
    if (format == "ipv4") {
      return "^((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)$";
    }
    if (format == "hostname") return "^" + kLabel + "(\\." + kLabel + ")*$";
    if (format == "email") {
      return "^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@" + kLabel +
             "(\\." + kLabel + ")+$";
    }
    if (format == "uri") {
      return "^[A-Za-z][A-Za-z0-9+.-]*:" + kUriChar + "*(#" + kUriChar + "*)?$";
    }
    return "";
  }

  absl::Status CompileObject(const json& s, const std::string& path, int nesting, SchemaNode* n) {
    n->kind = SchemaNode::Kind::kObject;
    if (const auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) return Unsupported(path, "'properties' must be an object");
      if (p->size() > CompiledSchema::kMaxProperties) {
        return Unsupported(path, absl::StrCat("more than ", CompiledSchema::kMaxProperties,
                                              " properties in one object are not supported"));
      }
      for (const auto& [name, sub] : p->items()) {
        SchemaNode::Property prop;
        const std::string quoted = json(name).dump();
        prop.name = quoted.substr(1, quoted.size() - 2);
        TANDEM_ASSIGN_OR_RETURN(
            prop.node, Compile(sub, absl::StrCat(path, ".properties.", name), nesting + 1));
        n->properties.push_back(std::move(prop));
      }
    }
    for (size_t i = 0; i < n->properties.size(); ++i) {
      n->properties[i].rank = static_cast<int32_t>(i);
    }
    std::sort(n->properties.begin(), n->properties.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    if (const auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) return Unsupported(path, "'required' must be an array of names");
      for (const json& name : *r) {
        if (!name.is_string()) return Unsupported(path, "'required' must be an array of names");
        const std::string quoted = name.dump();
        const std::string encoded = quoted.substr(1, quoted.size() - 2);
        auto it = std::find_if(n->properties.begin(), n->properties.end(),
                               [&](const auto& p) { return p.name == encoded; });
        if (it == n->properties.end()) {
          return Unsupported(path, absl::StrCat("required property '", name.get<std::string>(),
                                                "' is not among 'properties'"));
        }
        it->required = true;
      }
    }
    // What may come next after the property of each rank: the following
    // ones up to and including the first required one.
    const size_t count = n->properties.size();
    std::vector<uint32_t> by_rank(count);
    for (size_t i = 0; i < count; ++i) by_rank[size_t(n->properties[i].rank)] = uint32_t(i);
    n->next_keys.assign(count + 1, 0);
    for (size_t r = 0; r <= count; ++r) {
      for (size_t q = r; q < count; ++q) {
        n->next_keys[r] |= uint64_t{1} << by_rank[q];
        if (n->properties[by_rank[q]].required) break;
      }
    }
    if (const auto a = s.find("additionalProperties"); a != s.end()) {
      if (!(a->is_boolean() && !a->get<bool>())) {
        TANDEM_ASSIGN_OR_RETURN(n->additional,
                                Compile(*a, path + ".additionalProperties", nesting + 1));
      }
    } else if (n->properties.empty()) {
      // {"type": "object"} alone: any object.
      TANDEM_ASSIGN_OR_RETURN(n->additional, NewNode(path));
    }
    return absl::OkStatus();
  }

  absl::Status CompileArray(const json& s, const std::string& path, int nesting, SchemaNode* n) {
    n->kind = SchemaNode::Kind::kArray;
    const json* prefix = nullptr;
    const json* rest = nullptr;
    std::string rest_path;
    if (const auto p = s.find("prefixItems"); p != s.end()) prefix = &*p;
    if (const auto i = s.find("items"); i != s.end()) {
      if (i->is_array()) {  // drafts before 2020-12: a tuple
        if (prefix != nullptr) return Unsupported(path, "'items' as an array beside 'prefixItems'");
        prefix = &*i;
        if (const auto a = s.find("additionalItems"); a != s.end()) rest = &*a;
        rest_path = path + ".additionalItems";
      } else {
        rest = &*i;
        rest_path = path + ".items";
      }
    }
    if (prefix != nullptr) {
      if (!prefix->is_array()) return Unsupported(path, "'prefixItems' must be an array");
      for (size_t i = 0; i < prefix->size(); ++i) {
        TANDEM_ASSIGN_OR_RETURN(
            int32_t item,
            Compile((*prefix)[i], absl::StrCat(path, ".prefixItems[", i, "]"), nesting + 1));
        n->prefix_items.push_back(item);
      }
    }
    if (rest == nullptr) {
      TANDEM_ASSIGN_OR_RETURN(n->items, NewNode(path));  // any items
    } else if (!(rest->is_boolean() && !rest->get<bool>())) {
      TANDEM_ASSIGN_OR_RETURN(n->items, Compile(*rest, rest_path, nesting + 1));
    }
    TANDEM_ASSIGN_OR_RETURN(n->min, Count(s, "minItems", path, 0));
    TANDEM_ASSIGN_OR_RETURN(n->max, Count(s, "maxItems", path, -1));
    if (n->items < 0) {
      const int64_t most = static_cast<int64_t>(n->prefix_items.size());
      if (n->min > most) {
        return Unsupported(path, "'minItems' is more than the items the schema allows");
      }
      n->max = n->max < 0 ? most : std::min(n->max, most);
    }
    return absl::OkStatus();
  }

  absl::Status Set(int32_t id, SchemaNode n) {
    schema_->nodes_[static_cast<size_t>(id)] = std::move(n);
    return absl::OkStatus();
  }

  const json& root_;
  std::shared_ptr<CompiledSchema> schema_;
  absl::flat_hash_map<std::string, int32_t> refs_;
};

CompiledSchema::CompiledSchema() : id_(next_schema_id.fetch_add(1)) {}

absl::StatusOr<std::shared_ptr<const CompiledSchema>> CompiledSchema::Compile(
    const nlohmann::json& schema) {
  return Compile(json(schema));
}

absl::StatusOr<std::shared_ptr<const CompiledSchema>> CompiledSchema::Compile(const json& schema) {
  // The compact serialization, in the order written, names the schema
  // (the order of its properties is part of it). The text was parsed, so it is valid UTF-8 and
  // `replace` never acts; it only keeps dump() from throwing.
  const std::string key =
      absl::StrCat("json:", schema.dump(-1, ' ', false, json::error_handler_t::replace));
  SchemaInterner& interned = SchemaInterner::Global();
  if (auto s = interned.Find(key)) return s;
  absl::StatusOr<std::shared_ptr<const CompiledSchema>> s = SchemaCompiler(schema).Run();
  if (!s.ok()) return s;
  return interned.Insert(key, *std::move(s));
}

absl::StatusOr<std::shared_ptr<const CompiledSchema>> CompiledSchema::Parse(std::string_view text) {
  json s = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (s.is_discarded()) return absl::InvalidArgumentError("the schema is not valid JSON");
  return Compile(s);
}

absl::StatusOr<std::shared_ptr<const CompiledSchema>> CompiledSchema::Choice(
    const std::vector<std::string>& choices) {
  if (choices.empty()) return absl::InvalidArgumentError("there are no choices");
  std::string key = "choice:";
  for (const std::string& c : choices) absl::StrAppend(&key, c.size(), ":", c);
  SchemaInterner& interned = SchemaInterner::Global();
  if (auto s = interned.Find(key)) return s;
  auto s = std::shared_ptr<CompiledSchema>(new CompiledSchema());
  s->raw_ = true;
  SchemaNode& n = s->nodes_.emplace_back();
  n.kind = SchemaNode::Kind::kEnum;
  for (const std::string& c : choices) {
    if (c.empty()) return absl::InvalidArgumentError("a choice is empty");
    n.values.push_back(c);
  }
  std::sort(n.values.begin(), n.values.end());
  n.values.erase(std::unique(n.values.begin(), n.values.end()), n.values.end());
  return interned.Insert(key, std::move(s));
}

std::shared_ptr<const CompiledSchema> CompiledSchema::AnyObject() {
  static const std::shared_ptr<const CompiledSchema> kAnyObject = [] {
    auto s = std::shared_ptr<CompiledSchema>(new CompiledSchema());
    s->nodes_.emplace_back().kind = SchemaNode::Kind::kAnyObject;
    return std::shared_ptr<const CompiledSchema>(std::move(s));
  }();
  return kAnyObject;
}

}  // namespace tandem::structured
