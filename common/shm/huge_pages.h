// Whether a shared-memory weight store got 2 MiB pages, and what to tell
// the operator when it did not. The CPU kernels stream weights 10-15%
// faster from 2 MiB pages (docs/PERFORMANCE.md). Segments live in /dev/shm,
// a tmpfs mount whose `huge=` option decides (default: never); the sysfs
// shmem_enabled file governs only the kernel's internal mount (SysV shm,
// memfd), except that its "deny" and "force" override every mount.
#ifndef TANDEM_COMMON_SHM_HUGE_PAGES_H_
#define TANDEM_COMMON_SHM_HUGE_PAGES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tandem::shm {

inline constexpr char kShmMount[] = "/dev/shm";
inline constexpr char kMountsPath[] = "/proc/self/mounts";
inline constexpr char kShmemEnabledPath[] = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";

// The huge-page policy /dev/shm segments get: the `huge=` option of the
// last (topmost) mount on /dev/shm in `mounts` ("never" where it has none,
// tmpfs's default), overridden by "deny" or "force" selected in
// `shmem_enabled`. Empty if no mount on /dev/shm is listed or `mounts`
// cannot be read.
std::string ShmHugePagePolicy(const std::string& mounts = kMountsPath,
                              const std::string& shmem_enabled = kShmemEnabledPath);

// Bytes of this process's shared-memory mappings on 2 MiB pages now
// (ShmemPmdMapped in /proc/self/smaps_rollup).
absl::StatusOr<int64_t> ShmemHugePageBytes();

// One line for the operator when a store of `store_bytes` has fewer than
// half of them on 2 MiB pages (`huge_bytes`) under `policy` (as above);
// empty when the pages are large, or the store too small to matter.
std::string WeightStorePageWarning(const std::string& what, int64_t store_bytes, int64_t huge_bytes,
                                   const std::string& policy);

}  // namespace tandem::shm

#endif  // TANDEM_COMMON_SHM_HUGE_PAGES_H_
