// Python's multi-character case mappings (see py_casing_data.cc).
#ifndef TANDEM_COORDINATOR_CHAT_PY_CASING_DATA_H_
#define TANDEM_COORDINATOR_CHAT_PY_CASING_DATA_H_

#include <cstddef>

namespace tandem::jinja {

struct SpecialCase {
  char32_t cp;
  char32_t to[3];  // zero-padded
};

// Sorted by cp.
extern const SpecialCase kSpecialUpper[];
extern const size_t kSpecialUpperSize;
extern const SpecialCase kSpecialLower[];
extern const size_t kSpecialLowerSize;
extern const SpecialCase kSpecialTitle[];
extern const size_t kSpecialTitleSize;

}  // namespace tandem::jinja

#endif  // TANDEM_COORDINATOR_CHAT_PY_CASING_DATA_H_
