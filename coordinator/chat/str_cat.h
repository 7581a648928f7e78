// Concatenation that accepts std::string_view. This Abseil build has its own
// absl::string_view (ABSL_OPTION_USE_STD_STRING_VIEW=0), so absl::StrCat does
// not take std::string_view pieces.
#ifndef TANDEM_COORDINATOR_CHAT_STR_CAT_H_
#define TANDEM_COORDINATOR_CHAT_STR_CAT_H_

#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/string_view.h"

namespace tandem::jinja {

namespace internal {
inline void CatPiece(std::string* out, std::string_view s) { out->append(s); }
inline void CatPiece(std::string* out, const char* s) { out->append(s); }
inline void CatPiece(std::string* out, const std::string& s) { out->append(s); }
inline void CatPiece(std::string* out, absl::string_view s) {
  out->append(s.data(), s.size());
}
template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
void CatPiece(std::string* out, T v) {
  out->append(std::to_string(v));
}
}  // namespace internal

template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  (internal::CatPiece(&out, args), ...);
  return out;
}

template <typename... Args>
void AppendCat(std::string* out, const Args&... args) {
  (internal::CatPiece(out, args), ...);
}

}  // namespace tandem::jinja

#endif  // TANDEM_COORDINATOR_CHAT_STR_CAT_H_
