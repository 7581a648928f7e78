// Non-throwing accessors for tokenizer.json / tokenizer_config.json values.
#ifndef TANDEM_COMMON_TOKENIZER_JSON_UTIL_H_
#define TANDEM_COMMON_TOKENIZER_JSON_UTIL_H_

#include <optional>
#include <string>

#include "nlohmann/json.hpp"

namespace tandem::tok {

inline bool JsonBool(const nlohmann::json& j, const char* key, bool dflt) {
  if (!j.is_object()) return dflt;
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : dflt;
}

inline std::optional<std::string> JsonString(const nlohmann::json& j,
                                             const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

// A token given as "text" or {"content": "text", ...} (tokenizer_config.json).
inline std::optional<std::string> JsonTokenContent(const nlohmann::json& j,
                                                   const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  return JsonString(*it, "content");
}

}  // namespace tandem::tok

#endif  // TANDEM_COMMON_TOKENIZER_JSON_UTIL_H_
