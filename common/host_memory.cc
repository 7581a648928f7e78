#include "common/host_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"

namespace tandem {
namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A number of bytes from a one-value file (cgroup limits and usage); 0 if
// absent, unreadable or "max" (no limit).
int64_t ReadValueFile(const char* path) {
  std::ifstream in(path);
  std::string s;
  if (!(in >> s)) return 0;
  int64_t v = 0;
  return absl::SimpleAtoi(s, &v) && v > 0 ? v : 0;
}

// The rest of the first line of `text` that starts with `name` and then
// `separator`, trimmed; empty if there is none.
absl::string_view LineValue(std::string_view text, std::string_view name,
                            absl::string_view separator) {
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    absl::string_view line(text.data() + at, end - at);
    at = end + 1;
    if (absl::ConsumePrefix(&line, absl::string_view(name.data(), name.size())) &&
        absl::ConsumePrefix(&line, separator)) {
      return absl::StripAsciiWhitespace(line);
    }
  }
  return {};
}

// A "name value" line of a cgroup memory.stat text; 0 if absent.
int64_t StatValue(std::string_view stat, std::string_view name) {
  int64_t v = 0;
  return absl::SimpleAtoi(LineValue(stat, name, " "), &v) && v > 0 ? v : 0;
}

}  // namespace

int64_t ParseMeminfoBytes(std::string_view meminfo, std::string_view field) {
  absl::string_view value = LineValue(meminfo, field, ":");
  absl::ConsumeSuffix(&value, "kB");
  int64_t kb = 0;
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(value), &kb) && kb > 0 ? kb * 1024 : 0;
}

int64_t MeminfoBytes(std::string_view field) {
  return ParseMeminfoBytes(ReadFile("/proc/meminfo"), field);
}

int64_t CgroupLimitBytes() {
  // v1's "unlimited" is a huge number, which the min() of the callers drops.
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    const int64_t limit = ReadValueFile(path);
    if (limit > 0) return limit;
  }
  return 0;
}

int64_t AvailableMemoryBytes() {
  const std::string meminfo = ReadFile("/proc/meminfo");
  if (meminfo.empty()) return -1;
  const int64_t available = ParseMeminfoBytes(meminfo, "MemAvailable");
  const int64_t limit = CgroupLimitBytes();
  if (limit <= 0) return available;
  // What the cgroup holds, less its page cache (which it gives back first).
  int64_t usage = ReadValueFile("/sys/fs/cgroup/memory.current");
  int64_t cache = StatValue(ReadFile("/sys/fs/cgroup/memory.stat"), "file");
  if (usage == 0) {
    usage = ReadValueFile("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    cache = StatValue(ReadFile("/sys/fs/cgroup/memory/memory.stat"), "cache");
  }
  const int64_t held = std::max<int64_t>(0, usage - cache);
  return std::min(available, std::max<int64_t>(0, limit - held));
}

}  // namespace tandem
