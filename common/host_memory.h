// How much memory this machine, or this process's cgroup, has and has left,
// from /proc/meminfo and the cgroup's files (v2, else v1).
#ifndef TANDEM_COMMON_HOST_MEMORY_H_
#define TANDEM_COMMON_HOST_MEMORY_H_

#include <cstdint>
#include <string_view>

namespace tandem {

// A "Name:  N kB" line of a meminfo-format text, in bytes; 0 if absent.
int64_t ParseMeminfoBytes(std::string_view meminfo, std::string_view field);
// The same from /proc/meminfo ("MemTotal", "MemAvailable", ...).
int64_t MeminfoBytes(std::string_view field);

// The cgroup's memory limit in bytes (memory.max, else
// memory.limit_in_bytes); 0 where there is none ("max", or a file that
// cannot be read).
int64_t CgroupLimitBytes();

// Memory the process can still take without swapping or reaching its
// cgroup's limit: MemAvailable (free memory plus clean page cache and other
// memory the kernel reclaims), capped by the cgroup's limit less what the
// cgroup holds beyond its page cache. -1 where /proc/meminfo cannot be read.
int64_t AvailableMemoryBytes();

}  // namespace tandem

#endif  // TANDEM_COMMON_HOST_MEMORY_H_
