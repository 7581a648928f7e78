// Where Tandem keeps what it derives on a machine and reuses across runs (measured
// hardware profiles, converted weights): $TANDEM_CACHE_DIR, else ~/.cache/tandem, else
// /tmp/tandem-cache.
#ifndef TANDEM_COMMON_CACHE_DIR_H_
#define TANDEM_COMMON_CACHE_DIR_H_

#include <string>

namespace tandem {

std::string TandemCacheDir();

}  // namespace tandem

#endif  // TANDEM_COMMON_CACHE_DIR_H_
