#include "coordinator/frontend/json_fields.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/frontend/api_error.h"

namespace tandem::frontend {

using nlohmann::json;

std::string JsonTypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    default:
      return "invalid";
  }
}

absl::StatusOr<json> ParseRequestBody(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return InvalidParam("body", "The request body is not valid JSON.",
                        "invalid_json");
  }
  if (!j.is_object()) {
    return InvalidParam(
        "body",
        absl::StrCat("The request body must be a JSON object, got ",
                     JsonTypeName(j)),
        "invalid_type");
  }
  return j;
}

absl::StatusOr<int64_t> JsonToInt(const json& v, const std::string& name,
                                  int64_t min, int64_t max) {
  int64_t value = 0;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidParam(name,
                          absl::StrCat("'", name, "' is out of range: ", u));
    }
    value = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    value = v.get<int64_t>();
  } else if (v.is_number_float()) {
    // Accept 16.0 for 16, as OpenAI's (pydantic) validation does.
    double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || d < -9.2e18 || d > 9.2e18) {
      return WrongType(name, "an integer", absl::StrCat(d));
    }
    value = static_cast<int64_t>(d);
  } else {
    return WrongType(name, "an integer", JsonTypeName(v));
  }
  if (value < min || value > max) {
    std::string range = max == std::numeric_limits<int64_t>::max()
                            ? absl::StrCat(">= ", min)
                            : absl::StrCat("in [", min, ", ", max, "]");
    return InvalidParam(
        name, absl::StrCat("'", name, "' must be ", range, ", got ", value));
  }
  return value;
}

absl::StatusOr<double> JsonToNumber(const json& v, const std::string& name,
                                    double min, double max) {
  if (!v.is_number()) return WrongType(name, "a number", JsonTypeName(v));
  double d = v.get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    return InvalidParam(name, absl::StrCat("'", name, "' must be in [", min,
                                           ", ", max, "], got ", d));
  }
  return d;
}

const json* FieldReader::Find(std::string_view key) const {
  if (!obj_.is_object()) return nullptr;
  auto it = obj_.find(std::string(key));
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string FieldReader::Name(std::string_view key) const {
  return absl::StrCat(prefix_, std::string(key));
}

absl::StatusOr<std::optional<int64_t>> FieldReader::Int(std::string_view key,
                                                        int64_t min,
                                                        int64_t max) const {
  const json* v = Find(key);
  if (v == nullptr) return std::optional<int64_t>();
  auto r = JsonToInt(*v, Name(key), min, max);
  if (!r.ok()) return r.status();
  return std::optional<int64_t>(*r);
}

absl::StatusOr<std::optional<double>> FieldReader::Number(std::string_view key,
                                                          double min,
                                                          double max) const {
  const json* v = Find(key);
  if (v == nullptr) return std::optional<double>();
  auto r = JsonToNumber(*v, Name(key), min, max);
  if (!r.ok()) return r.status();
  return std::optional<double>(*r);
}

absl::StatusOr<std::optional<bool>> FieldReader::Bool(
    std::string_view key) const {
  const json* v = Find(key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean())
    return WrongType(Name(key), "a boolean", JsonTypeName(*v));
  return std::optional<bool>(v->get<bool>());
}

absl::StatusOr<std::optional<std::string>> FieldReader::String(
    std::string_view key) const {
  const json* v = Find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string())
    return WrongType(Name(key), "a string", JsonTypeName(*v));
  return std::optional<std::string>(v->get<std::string>());
}

absl::StatusOr<std::optional<uint64_t>> FieldReader::Bits64(
    std::string_view key) const {
  const json* v = Find(key);
  if (v == nullptr) return std::optional<uint64_t>();
  if (v->is_number_unsigned())
    return std::optional<uint64_t>(v->get<uint64_t>());
  if (v->is_number_integer()) {
    return std::optional<uint64_t>(static_cast<uint64_t>(v->get<int64_t>()));
  }
  auto r = JsonToInt(*v, Name(key), std::numeric_limits<int64_t>::min(),
                     std::numeric_limits<int64_t>::max());
  if (!r.ok()) return r.status();
  return std::optional<uint64_t>(static_cast<uint64_t>(*r));
}

absl::StatusOr<std::optional<std::vector<std::string>>>
FieldReader::StringOrList(std::string_view key) const {
  using Out = std::optional<std::vector<std::string>>;
  const json* v = Find(key);
  if (v == nullptr) return Out();
  if (v->is_string())
    return Out(std::vector<std::string>{v->get<std::string>()});
  if (!v->is_array()) {
    return WrongType(Name(key), "a string or a list of strings",
                     JsonTypeName(*v));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    if (!e.is_string()) {
      return WrongType(absl::StrCat(Name(key), "[", i, "]"), "a string",
                       JsonTypeName(e));
    }
    out.push_back(e.get<std::string>());
  }
  return Out(std::move(out));
}

absl::StatusOr<std::optional<std::vector<int64_t>>> FieldReader::IntList(
    std::string_view key, int64_t min, int64_t max) const {
  using Out = std::optional<std::vector<int64_t>>;
  const json* v = Find(key);
  if (v == nullptr) return Out();
  if (!v->is_array())
    return WrongType(Name(key), "a list of integers", JsonTypeName(*v));
  std::vector<int64_t> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    auto r = JsonToInt((*v)[i], absl::StrCat(Name(key), "[", i, "]"), min, max);
    if (!r.ok()) return r.status();
    out.push_back(*r);
  }
  return Out(std::move(out));
}

absl::StatusOr<const json*> FieldReader::Object(std::string_view key) const {
  const json* v = Find(key);
  if (v == nullptr) return v;
  if (!v->is_object())
    return WrongType(Name(key), "an object", JsonTypeName(*v));
  return v;
}

}  // namespace tandem::frontend
