// Tandem's release version, as `tandem --version` and GET /version print it.
#ifndef TANDEM_COMMON_VERSION_H_
#define TANDEM_COMMON_VERSION_H_

namespace tandem {

inline constexpr char kVersion[] = "0.1.0";

}  // namespace tandem

#endif  // TANDEM_COMMON_VERSION_H_
