#include "common/status_macros.h"

#include <cstdio>
#include <cstdlib>

namespace tandem::internal {

void CheckFailed(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "%s:%d: invariant violated: %s\n", file, line, cond);
  std::abort();
}

}  // namespace tandem::internal
