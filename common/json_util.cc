#include "common/json_util.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"

namespace tandem::json_util {

using nlohmann::json;

absl::StatusOr<json> Parse(std::string_view text, const std::string& source) {
  json j = json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
  }
  return j;
}

absl::StatusOr<json> ReadFile(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  const char* p = reinterpret_cast<const char*>(file->data());
  return Parse(std::string_view(p == nullptr ? "" : p, static_cast<size_t>(file->size())), path);
}

std::string TypeName(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "value";
}

const json* Find(const json& obj, const std::string& key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

namespace {
absl::Status WrongType(const json& v, const std::string& source, const std::string& what,
                       const char* expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": ", what, " must be ", expected, ", got ", TypeName(v)));
}
}  // namespace

absl::StatusOr<int64_t> AsInt(const json& v, const std::string& source, const std::string& what) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", what, " is out of range"));
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    // Python writes some integers as floats (e.g. 1e6); accept integral values.
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) {
      return static_cast<int64_t>(d);
    }
  }
  return WrongType(v, source, what, "an integer");
}

absl::StatusOr<double> AsDouble(const json& v, const std::string& source, const std::string& what) {
  if (v.is_number()) return v.get<double>();
  return WrongType(v, source, what, "a number");
}

absl::StatusOr<bool> AsBool(const json& v, const std::string& source, const std::string& what) {
  if (v.is_boolean()) return v.get<bool>();
  return WrongType(v, source, what, "a boolean");
}

absl::StatusOr<std::string> AsString(const json& v, const std::string& source,
                                     const std::string& what) {
  if (v.is_string()) return v.get<std::string>();
  return WrongType(v, source, what, "a string");
}

absl::StatusOr<std::vector<int64_t>> AsIntList(const json& v, const std::string& source,
                                               const std::string& what) {
  if (!v.is_array()) return WrongType(v, source, what, "a list of integers");
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    TANDEM_ASSIGN_OR_RETURN(int64_t x, AsInt(v[i], source, absl::StrCat(what, "[", i, "]")));
    out.push_back(x);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> AsIntOrIntList(const json& v, const std::string& source,
                                                    const std::string& what) {
  if (v.is_array()) return AsIntList(v, source, what);
  if (!v.is_number()) return WrongType(v, source, what, "an integer or a list of integers");
  TANDEM_ASSIGN_OR_RETURN(int64_t x, AsInt(v, source, what));
  return std::vector<int64_t>{x};
}

absl::StatusOr<std::optional<int64_t>> OptInt(const json& obj, const std::string& key,
                                              const std::string& source) {
  const json* v = Find(obj, key);
  if (v == nullptr) return std::optional<int64_t>();
  TANDEM_ASSIGN_OR_RETURN(int64_t x, AsInt(*v, source, absl::StrCat("key '", key, "'")));
  return std::optional<int64_t>(x);
}

absl::StatusOr<std::optional<double>> OptDouble(const json& obj, const std::string& key,
                                                const std::string& source) {
  const json* v = Find(obj, key);
  if (v == nullptr) return std::optional<double>();
  TANDEM_ASSIGN_OR_RETURN(double x, AsDouble(*v, source, absl::StrCat("key '", key, "'")));
  return std::optional<double>(x);
}

absl::StatusOr<std::optional<bool>> OptBool(const json& obj, const std::string& key,
                                            const std::string& source) {
  const json* v = Find(obj, key);
  if (v == nullptr) return std::optional<bool>();
  TANDEM_ASSIGN_OR_RETURN(bool x, AsBool(*v, source, absl::StrCat("key '", key, "'")));
  return std::optional<bool>(x);
}

absl::StatusOr<std::optional<std::string>> OptString(const json& obj, const std::string& key,
                                                     const std::string& source) {
  const json* v = Find(obj, key);
  if (v == nullptr) return std::optional<std::string>();
  TANDEM_ASSIGN_OR_RETURN(std::string x, AsString(*v, source, absl::StrCat("key '", key, "'")));
  return std::optional<std::string>(std::move(x));
}

}  // namespace tandem::json_util
