#include "common/hardware_profile.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cache_dir.h"
#include "common/status_macros.h"

namespace tandem {
namespace {

// The JSON form, field by field: key, unit scale (JSON value × scale = SI),
// and where the value lives. One table drives parsing, printing and the
// unknown-key check so they cannot drift apart.
constexpr double kGB = 1e9;
constexpr double kTera = 1e12;
constexpr double kMicro = 1e-6;

struct DoubleField {
  const char* key;
  double scale;
  std::function<double*(HardwareProfile&)> at;
};

const std::vector<DoubleField>& GpuFields() {
  static const auto* f = new std::vector<DoubleField>{
      {"bf16_tflops", kTera, [](HardwareProfile& p) { return &p.gpu.bf16_flops; }},
      {"f32_tflops", kTera, [](HardwareProfile& p) { return &p.gpu.f32_flops; }},
      {"int8_tops", kTera, [](HardwareProfile& p) { return &p.gpu.int8_ops; }},
      {"memory_bandwidth_gbs", kGB, [](HardwareProfile& p) { return &p.gpu.memory_bandwidth; }},
      {"launch_overhead_us", kMicro,
       [](HardwareProfile& p) { return &p.gpu.launch_overhead_s; }},
      {"interconnect_bandwidth_gbs", kGB,
       [](HardwareProfile& p) { return &p.gpu.interconnect_bandwidth; }},
  };
  return *f;
}

const std::vector<DoubleField>& CpuFields() {
  static const auto* f = new std::vector<DoubleField>{
      {"bf16_tflops", kTera, [](HardwareProfile& p) { return &p.cpu.bf16_flops; }},
      {"f32_tflops", kTera, [](HardwareProfile& p) { return &p.cpu.f32_flops; }},
      {"int8_tops", kTera, [](HardwareProfile& p) { return &p.cpu.int8_ops; }},
      {"memory_bandwidth_gbs", kGB, [](HardwareProfile& p) { return &p.cpu.memory_bandwidth; }},
      {"memory_bandwidth_per_thread_gbs", kGB,
       [](HardwareProfile& p) { return &p.cpu.memory_bandwidth_per_thread; }},
      {"attention_bandwidth_gbs", kGB,
       [](HardwareProfile& p) { return &p.cpu.attention_bandwidth; }},
      {"op_overhead_us", kMicro, [](HardwareProfile& p) { return &p.cpu.op_overhead_s; }},
  };
  return *f;
}

const std::vector<DoubleField>& LinkFields() {
  static const auto* f = new std::vector<DoubleField>{
      {"h2d_bandwidth_gbs", kGB, [](HardwareProfile& p) { return &p.link.h2d_bandwidth; }},
      {"h2d_latency_us", kMicro, [](HardwareProfile& p) { return &p.link.h2d_latency_s; }},
      {"d2h_bandwidth_gbs", kGB, [](HardwareProfile& p) { return &p.link.d2h_bandwidth; }},
      {"d2h_latency_us", kMicro, [](HardwareProfile& p) { return &p.link.d2h_latency_s; }},
  };
  return *f;
}

absl::StatusOr<double> ReadNumber(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected a number"));
  }
  double d = v.get<double>();
  if (!std::isfinite(d) || d < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": must be a finite number >= 0, got ", v.dump()));
  }
  return d;
}

// Reads one section ("gpu", "cpu", "link"): the numeric fields of `fields`,
// plus the extra keys `extra` handles (name, count, threads, memory_gb).
absl::Status ReadSection(
    const nlohmann::json& j, const std::string& section, const std::vector<DoubleField>& fields,
    const std::function<absl::StatusOr<bool>(const std::string&, const nlohmann::json&)>& extra,
    HardwareProfile& p) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("'", section, "': expected an object"));
  }
  for (const auto& [key, value] : j.items()) {
    const std::string where = absl::StrCat("'", section, ".", key, "'");
    auto it = std::find_if(fields.begin(), fields.end(),
                           [&](const DoubleField& f) { return key == f.key; });
    if (it != fields.end()) {
      TANDEM_ASSIGN_OR_RETURN(double d, ReadNumber(value, where));
      *it->at(p) = d * it->scale;
      continue;
    }
    TANDEM_ASSIGN_OR_RETURN(bool handled, extra(key, value));
    if (!handled) return absl::InvalidArgumentError(absl::StrCat(where, ": unknown field"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadString(const nlohmann::json& v, const std::string& where) {
  if (!v.is_string()) return absl::InvalidArgumentError(absl::StrCat(where, ": expected a string"));
  return v.get<std::string>();
}

absl::StatusOr<int64_t> ReadCount(const nlohmann::json& v, const std::string& where) {
  if (!v.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected an integer"));
  }
  int64_t n = v.get<int64_t>();
  if (n < 0 || n > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": out of range: ", n));
  }
  return n;
}

absl::Status RequirePositive(double v, std::string_view field) {
  if (!(v > 0) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("hardware profile: '", std::string(field), "' must be positive"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status HardwareProfile::Validate() const {
  if (cpu.threads < 1) {
    return absl::InvalidArgumentError("hardware profile: 'cpu.threads' must be at least 1");
  }
  TANDEM_RETURN_IF_ERROR(RequirePositive(static_cast<double>(cpu.memory_bytes), "cpu.memory_gb"));
  TANDEM_RETURN_IF_ERROR(RequirePositive(cpu.f32_flops, "cpu.f32_tflops"));
  TANDEM_RETURN_IF_ERROR(RequirePositive(cpu.memory_bandwidth, "cpu.memory_bandwidth_gbs"));
  if (gpu.count < 0) return absl::InvalidArgumentError("hardware profile: 'gpu.count' < 0");
  if (has_gpu()) {
    TANDEM_RETURN_IF_ERROR(
        RequirePositive(static_cast<double>(gpu.memory_bytes), "gpu.memory_gb"));
    TANDEM_RETURN_IF_ERROR(RequirePositive(gpu.bf16_flops, "gpu.bf16_tflops"));
    TANDEM_RETURN_IF_ERROR(RequirePositive(gpu.memory_bandwidth, "gpu.memory_bandwidth_gbs"));
    TANDEM_RETURN_IF_ERROR(RequirePositive(link.h2d_bandwidth, "link.h2d_bandwidth_gbs"));
    TANDEM_RETURN_IF_ERROR(RequirePositive(link.d2h_bandwidth, "link.d2h_bandwidth_gbs"));
  }
  return absl::OkStatus();
}

double HardwareProfile::CpuBandwidthPerThread() const {
  if (cpu.memory_bandwidth_per_thread > 0) return cpu.memory_bandwidth_per_thread;
  return cpu.threads > 0 ? cpu.memory_bandwidth / cpu.threads : 0;
}

double HardwareProfile::CpuAttentionBandwidth() const {
  return cpu.attention_bandwidth > 0 ? cpu.attention_bandwidth : cpu.memory_bandwidth;
}

absl::StatusOr<HardwareProfile> HardwareProfile::WithCpuThreads(int threads) const {
  if (threads < 1 || threads > cpu.threads) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CPU threads must be in [1, %d] for profile '%s', got %d", cpu.threads, name, threads));
  }
  HardwareProfile p = *this;
  const double f = static_cast<double>(threads) / cpu.threads;
  p.cpu.threads = threads;
  p.cpu.bf16_flops *= f;
  p.cpu.f32_flops *= f;
  p.cpu.int8_ops *= f;
  const double per_thread = CpuBandwidthPerThread();
  p.cpu.memory_bandwidth = std::min(cpu.memory_bandwidth, per_thread * threads);
  p.cpu.memory_bandwidth_per_thread = per_thread;
  // Attention is bandwidth-bound: it scales as the bandwidth does.
  if (cpu.attention_bandwidth > 0) {
    p.cpu.attention_bandwidth = cpu.attention_bandwidth * p.cpu.memory_bandwidth /
                                cpu.memory_bandwidth;
  }
  p.name = absl::StrCat(name, "@", threads, "t");
  return p;
}

HardwareProfile HardwareProfile::WithGpuMemory(int64_t bytes) const {
  HardwareProfile p = *this;
  p.gpu.memory_bytes = std::clamp<int64_t>(bytes, 0, p.gpu.memory_bytes);
  return p;
}

absl::StatusOr<HardwareProfile> HardwareProfileFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("hardware profile: expected a JSON object");
  HardwareProfile p;
  bool saw_cpu = false;
  for (const auto& [key, value] : j.items()) {
    if (key == "name" || key == "source") {
      TANDEM_ASSIGN_OR_RETURN(std::string s, ReadString(value, absl::StrCat("'", key, "'")));
      (key == "name" ? p.name : p.source) = s;
    } else if (key == "gpu") {
      TANDEM_RETURN_IF_ERROR(ReadSection(
          value, "gpu", GpuFields(),
          [&](const std::string& k, const nlohmann::json& v) -> absl::StatusOr<bool> {
            const std::string where = absl::StrCat("'gpu.", k, "'");
            if (k == "name") {
              TANDEM_ASSIGN_OR_RETURN(p.gpu.name, ReadString(v, where));
            } else if (k == "count") {
              TANDEM_ASSIGN_OR_RETURN(int64_t n, ReadCount(v, where));
              p.gpu.count = static_cast<int>(n);
            } else if (k == "memory_gb") {
              TANDEM_ASSIGN_OR_RETURN(double d, ReadNumber(v, where));
              p.gpu.memory_bytes = std::llround(d * kGB);
            } else {
              return false;
            }
            return true;
          },
          p));
    } else if (key == "cpu") {
      saw_cpu = true;
      TANDEM_RETURN_IF_ERROR(ReadSection(
          value, "cpu", CpuFields(),
          [&](const std::string& k, const nlohmann::json& v) -> absl::StatusOr<bool> {
            const std::string where = absl::StrCat("'cpu.", k, "'");
            if (k == "name") {
              TANDEM_ASSIGN_OR_RETURN(p.cpu.name, ReadString(v, where));
            } else if (k == "threads") {
              TANDEM_ASSIGN_OR_RETURN(int64_t n, ReadCount(v, where));
              p.cpu.threads = static_cast<int>(n);
            } else if (k == "memory_gb") {
              TANDEM_ASSIGN_OR_RETURN(double d, ReadNumber(v, where));
              p.cpu.memory_bytes = std::llround(d * kGB);
            } else {
              return false;
            }
            return true;
          },
          p));
    } else if (key == "link") {
      TANDEM_RETURN_IF_ERROR(ReadSection(
          value, "link", LinkFields(),
          [](const std::string&, const nlohmann::json&) -> absl::StatusOr<bool> { return false; },
          p));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("'", key, "': unknown field"));
    }
  }
  if (!saw_cpu) return absl::InvalidArgumentError("hardware profile: missing 'cpu' section");
  TANDEM_RETURN_IF_ERROR(p.Validate());
  return p;
}

nlohmann::json HardwareProfileToJson(const HardwareProfile& p) {
  HardwareProfile q = p;  // the field table hands out pointers into a mutable profile
  nlohmann::json j;
  j["name"] = p.name;
  j["source"] = p.source;
  auto section = [&](const std::vector<DoubleField>& fields) {
    nlohmann::json s = nlohmann::json::object();
    for (const DoubleField& f : fields) s[f.key] = *f.at(q) / f.scale;
    return s;
  };
  if (p.has_gpu()) {
    nlohmann::json g = section(GpuFields());
    g["name"] = p.gpu.name;
    g["count"] = p.gpu.count;
    g["memory_gb"] = static_cast<double>(p.gpu.memory_bytes) / kGB;
    j["gpu"] = g;
    j["link"] = section(LinkFields());
  }
  nlohmann::json c = section(CpuFields());
  c["name"] = p.cpu.name;
  c["threads"] = p.cpu.threads;
  c["memory_gb"] = static_cast<double>(p.cpu.memory_bytes) / kGB;
  j["cpu"] = c;
  if (!p.has_gpu() && (p.link.h2d_bandwidth > 0 || p.link.d2h_bandwidth > 0)) {
    j["link"] = section(LinkFields());
  }
  return j;
}

absl::StatusOr<HardwareProfile> LoadHardwareProfile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open hardware profile"));
  std::stringstream ss;
  ss << in.rdbuf();
  // ignore_comments: example profiles cite a source beside every figure.
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false,
                                           /*ignore_comments=*/true);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  absl::StatusOr<HardwareProfile> p = HardwareProfileFromJson(j);
  if (!p.ok()) {
    return absl::Status(p.status().code(), absl::StrCat(path, ": ", p.status().message()));
  }
  return p;
}

absl::Status SaveHardwareProfile(const HardwareProfile& p, const std::string& path) {
  // The cache directory may not exist yet.
  if (const size_t slash = path.rfind('/'); slash != std::string::npos && slash > 0) {
    std::error_code ec;
    std::filesystem::create_directories(path.substr(0, slash), ec);
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat(tmp, ": cannot write"));
    out << HardwareProfileToJson(p).dump(2) << "\n";
    if (!out.good()) return absl::DataLossError(absl::StrCat(tmp, ": write failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot rename into place"));
  }
  return absl::OkStatus();
}

std::string MachineProfileCachePath(std::string_view kind) {
  const std::string dir = TandemCacheDir();
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::snprintf(host, 8, "host");
  std::string cpu_model;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      cpu_model = line;
      break;
    }
  }
  const long threads = sysconf(_SC_NPROCESSORS_ONLN);
  const size_t key = std::hash<std::string>{}(absl::StrCat(cpu_model, "/", threads));
  return absl::StrFormat("%s/profiles/%s-%016x-%s.json", dir, host, key, std::string(kind));
}

}  // namespace tandem
