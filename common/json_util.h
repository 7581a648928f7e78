// Exception-free helpers around nlohmann::json for reading untrusted files:
// parsing never throws, and typed lookups check the value's kind first and
// return an error naming the source file and the key.
#ifndef TANDEM_COMMON_JSON_UTIL_H_
#define TANDEM_COMMON_JSON_UTIL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::json_util {

// Parses `text`; InvalidArgument "<source>: not valid JSON" on failure.
absl::StatusOr<nlohmann::json> Parse(std::string_view text, const std::string& source);

// Reads and parses a whole file: NotFound if it does not exist.
absl::StatusOr<nlohmann::json> ReadFile(const std::string& path);

// "string", "integer", "object", ... for error messages.
std::string TypeName(const nlohmann::json& v);

// The member `key` of `obj`, or nullptr if `obj` is not an object, lacks the
// key, or the value is null (JSON null means "use the default" in HF configs).
const nlohmann::json* Find(const nlohmann::json& obj, const std::string& key);

// Value conversions; `what` names the value in errors ("key 'x'").
absl::StatusOr<int64_t> AsInt(const nlohmann::json& v, const std::string& source,
                              const std::string& what);
absl::StatusOr<double> AsDouble(const nlohmann::json& v, const std::string& source,
                                const std::string& what);
absl::StatusOr<bool> AsBool(const nlohmann::json& v, const std::string& source,
                            const std::string& what);
absl::StatusOr<std::string> AsString(const nlohmann::json& v, const std::string& source,
                                     const std::string& what);
// An integer or a list of integers (as eos_token_id may be).
absl::StatusOr<std::vector<int64_t>> AsIntOrIntList(const nlohmann::json& v,
                                                    const std::string& source,
                                                    const std::string& what);
absl::StatusOr<std::vector<int64_t>> AsIntList(const nlohmann::json& v, const std::string& source,
                                               const std::string& what);

// Optional members: nullopt when absent or null, an error when of the wrong kind.
absl::StatusOr<std::optional<int64_t>> OptInt(const nlohmann::json& obj, const std::string& key,
                                              const std::string& source);
absl::StatusOr<std::optional<double>> OptDouble(const nlohmann::json& obj, const std::string& key,
                                                const std::string& source);
absl::StatusOr<std::optional<bool>> OptBool(const nlohmann::json& obj, const std::string& key,
                                            const std::string& source);
absl::StatusOr<std::optional<std::string>> OptString(const nlohmann::json& obj,
                                                     const std::string& key,
                                                     const std::string& source);

}  // namespace tandem::json_util

#endif  // TANDEM_COMMON_JSON_UTIL_H_
