// Typed, exception-free reads of request fields. Absent and null fields read
// as nullopt (OpenAI treats null as "default"); a field of the wrong type or
// out of range is an InvalidParam status naming it.
#ifndef TANDEM_COORDINATOR_FRONTEND_JSON_FIELDS_H_
#define TANDEM_COORDINATOR_FRONTEND_JSON_FIELDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::frontend {

// "string", "integer", "number", "boolean", "array", "object", "null".
std::string JsonTypeName(const nlohmann::json& v);

// Parses an untrusted body; never throws. InvalidParam(param "body") when the
// text is not JSON or is not an object.
absl::StatusOr<nlohmann::json> ParseRequestBody(std::string_view body);

// Converts one value; `name` is used in errors.
absl::StatusOr<int64_t> JsonToInt(const nlohmann::json& v,
                                  const std::string& name, int64_t min,
                                  int64_t max);
absl::StatusOr<double> JsonToNumber(const nlohmann::json& v,
                                    const std::string& name, double min,
                                    double max);

class FieldReader {
 public:
  // `obj` must outlive the reader; `prefix` is prepended to names in errors
  // ("stream_options." -> "stream_options.include_usage").
  explicit FieldReader(const nlohmann::json& obj, std::string prefix = "")
      : obj_(obj), prefix_(std::move(prefix)) {}

  // nullptr when absent or null.
  const nlohmann::json* Find(std::string_view key) const;
  std::string Name(std::string_view key) const;

  absl::StatusOr<std::optional<int64_t>> Int(std::string_view key, int64_t min,
                                             int64_t max) const;
  absl::StatusOr<std::optional<double>> Number(std::string_view key, double min,
                                               double max) const;
  absl::StatusOr<std::optional<bool>> Bool(std::string_view key) const;
  absl::StatusOr<std::optional<std::string>> String(std::string_view key) const;
  // Any 64-bit integer, signed or not, as its two's-complement bits (seed).
  absl::StatusOr<std::optional<uint64_t>> Bits64(std::string_view key) const;
  // A string or a list of strings (stop).
  absl::StatusOr<std::optional<std::vector<std::string>>> StringOrList(
      std::string_view key) const;
  // A list of integers in [min, max] (stop_token_ids).
  absl::StatusOr<std::optional<std::vector<int64_t>>> IntList(
      std::string_view key, int64_t min, int64_t max) const;
  // An object (returns nullptr if absent/null).
  absl::StatusOr<const nlohmann::json*> Object(std::string_view key) const;

 private:
  const nlohmann::json& obj_;
  std::string prefix_;
};

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_JSON_FIELDS_H_
