#include "common/shm/huge_pages.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/mapped_file.h"

namespace tandem::shm {
namespace {

// Below this a store's page size costs too little to mention.
constexpr int64_t kWorthWarningBytes = int64_t{64} << 20;

// The selected word of a sysfs THP file ("always [advise] never" -> "advise").
std::string SelectedWord(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  const size_t open = line.find('[');
  if (open == std::string::npos) return "";
  const size_t close = line.find(']', open);
  if (close == std::string::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

}  // namespace

std::string ShmHugePagePolicy(const std::string& mounts, const std::string& shmem_enabled) {
  const std::string global = SelectedWord(shmem_enabled);
  std::ifstream in(mounts);
  if (!in) return "";
  std::string line, policy;
  bool found = false;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string device, mount_point, type, options;
    if (!(fields >> device >> mount_point >> type >> options) || mount_point != kShmMount) {
      continue;
    }
    found = true;  // a later line is a mount on top of this one
    policy = "never";
    for (absl::string_view o : absl::StrSplit(options, ',')) {
      if (absl::ConsumePrefix(&o, "huge=")) policy = std::string(o);
    }
  }
  if (!found) return "";
  if (global == "deny" || global == "force") return global;
  return policy;
}

absl::StatusOr<int64_t> ShmemHugePageBytes() { return SmapsRollupBytes("ShmemPmdMapped"); }

std::string WeightStorePageWarning(const std::string& what, int64_t store_bytes, int64_t huge_bytes,
                                   const std::string& policy) {
  if (store_bytes < kWorthWarningBytes || 2 * huge_bytes >= store_bytes) return "";
  const std::string size = absl::StrFormat("%.2f GB", static_cast<double>(store_bytes) / 1e9);
  const std::string slower = "the CPU streams 4 KiB pages 10-15% slower than 2 MiB ones";
  if (policy == "never") {
    return absl::StrCat(what, " (", size, " in ", kShmMount,
                        ") are on 4 KiB pages, as the mount has no huge= option (or huge=never); ",
                        slower, ". As root: mount -o remount,huge=advise ", kShmMount,
                        " (or add huge=advise to its fstab entry), then restart.");
  }
  if (policy == "deny") {
    return absl::StrCat(what, " (", size, " in ", kShmMount,
                        ") are on 4 KiB pages: ", kShmemEnabledPath, " is \"deny\"; ", slower, ".");
  }
  if (policy.empty()) {
    return absl::StrCat(what, " (", size, " in ", kShmMount, ") are on 4 KiB pages, and ",
                        kMountsPath, " does not say how ", kShmMount, " is mounted; ", slower, ".");
  }
  return absl::StrCat(what, " (", size, " in ", kShmMount, "): only ",
                      absl::StrFormat("%.2f GB", static_cast<double>(huge_bytes) / 1e9),
                      " on 2 MiB pages although the mount allows them (huge=", policy,
                      "); memory may be too fragmented for 2 MiB pages; ", slower, ".");
}

}  // namespace tandem::shm
