#include "common/cache_dir.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace tandem {

std::string TandemCacheDir() {
  if (const char* d = std::getenv("TANDEM_CACHE_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    return absl::StrCat(h, "/.cache/tandem");
  }
  return "/tmp/tandem-cache";
}

}  // namespace tandem
