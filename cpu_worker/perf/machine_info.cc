#include "cpu_worker/perf/machine_info.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/linear.h"
#include "cpu_worker/ops/stream_prefetch.h"

namespace tandem::perf {
namespace {

// The extensions that decide which kernels run; the rest of the flag list
// is noise in a report.
bool FlagOfInterest(const std::string& f) {
  return absl::StartsWith(f, "avx512") || absl::StartsWith(f, "amx") || f == "avx_vnni" ||
         f == "avx2" || f == "fma" || f == "f16c";
}

// "model name" and "flags" of the first processor in /proc/cpuinfo.
void ReadCpuinfo(MachineInfo* m) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  bool have_model = false, have_flags = false;
  while (std::getline(in, line) && !(have_model && have_flags)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key(absl::StripAsciiWhitespace(line.substr(0, colon)));
    const std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    if (key == "model name" && !have_model) {
      m->cpu_model = value;
      have_model = true;
    } else if (key == "flags" && !have_flags) {
      for (absl::string_view f : absl::StrSplit(value, ' ', absl::SkipEmpty())) {
        std::string s(f);
        if (FlagOfInterest(s)) m->cpuinfo_flags.push_back(s);
      }
      have_flags = true;
    }
  }
}

// The first line of a small sysfs file, stripped; "" if unreadable.
std::string ReadLine(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return std::string(absl::StripAsciiWhitespace(line));
}

// A sysfs cache size: "32768K", "2M", or plain bytes; 0 if malformed.
int64_t ParseCacheSize(absl::string_view s) {
  int64_t unit = 1;
  if (absl::ConsumeSuffix(&s, "K")) {
    unit = int64_t{1} << 10;
  } else if (absl::ConsumeSuffix(&s, "M")) {
    unit = int64_t{1} << 20;
  } else if (absl::ConsumeSuffix(&s, "G")) {
    unit = int64_t{1} << 30;
  }
  int64_t v = 0;
  if (s.empty() || !absl::SimpleAtoi(s, &v) || v <= 0) return 0;
  return v * unit;
}

}  // namespace

int64_t L3BytesFromSysfs(const std::string& cache_dir) {
  // The error_code forms throughout: a directory that vanishes or cannot be
  // read ends the walk instead of throwing.
  std::error_code ec;
  int64_t best = 0;
  for (std::filesystem::directory_iterator it(cache_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::filesystem::path& p = it->path();
    if (!absl::StartsWith(p.filename().string(), "index")) continue;
    if (ReadLine(p / "level") != "3") continue;
    best = std::max(best, ParseCacheSize(ReadLine(p / "size")));
  }
  return best;
}

MachineInfo DescribeMachine() {
  MachineInfo m;
  ReadCpuinfo(&m);
  m.logical_cpus = sysconf(_SC_NPROCESSORS_ONLN);
  m.omp_threads = omp_get_max_threads();
  m.memory_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  m.l3_bytes = L3BytesFromSysfs("/sys/devices/system/cpu/cpu0/cache");
  if (m.l3_bytes == 0) {
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    m.l3_bytes = l3 > 0 ? l3 : 0;
  }
  m.probed_features = ops::CpuFeaturesString(ops::HostCpuFeatures());
  m.kernel_isa = ops::KernelIsaName(ops::MaxKernelIsa());
  m.bf16_gemm = ops::CpuHasBf16();
  m.stream_prefetch = ops::PrefetchLevelName(ops::StreamPrefetchLevel());
  m.packed_prefetch = ops::PrefetchLevelName(ops::PackedPrefetchLevel());
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  m.omp_wait_policy = wait != nullptr ? wait : "";
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  m.gomp_spincount = spin != nullptr ? spin : "";
  return m;
}

}  // namespace tandem::perf
