#include "cpu_worker/perf/host_profile.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/host_memory.h"
#include "common/status_macros.h"
#include "cpu_worker/kv/cpu_kv_cache.h"
#include "cpu_worker/ops/attention.h"
#include "cpu_worker/perf/machine_info.h"
#include "cpu_worker/perf/machine_probe.h"
#include "cpu_worker/perf/timing.h"

namespace tandem::perf {
namespace {

// The start-up profiler keeps the best sample of a few: the machine's
// capability, not a moment when a neighbour held a core (machine_probe.h).
double Best(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double Least(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// Runs the OpenMP regions of its scope with `threads` threads, then restores
// the previous count (the ICV belongs to the calling thread, which is the
// one that opens the probes' parallel regions).
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~ScopedOmpThreads() { omp_set_num_threads(saved_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

absl::Status CheckOptions(const HostProfileOptions& o) {
  if (o.bandwidth_bytes < 4096 || o.copy_bytes <= 0) {
    return absl::InvalidArgumentError("host profile: bandwidth buffers must be >= 4096 bytes");
  }
  if (o.gemm_m <= 0 || o.gemm_n <= 0 || o.gemm_k <= 0 || o.int8_n <= 0 || o.int8_k <= 0) {
    return absl::InvalidArgumentError("host profile: GEMM sizes must be positive");
  }
  if (o.int8_k % 32 != 0) {
    return absl::InvalidArgumentError("host profile: int8_k must be a multiple of 32 (Q8_0)");
  }
  if (o.attention_sequences < 0 || (o.attention_sequences > 0 && o.attention_context <= 0)) {
    return absl::InvalidArgumentError(
        "host profile: attention needs sequences >= 0 and a positive context");
  }
  if (o.repeats <= 0 || o.warmup < 0) {
    return absl::InvalidArgumentError("host profile: repeats must be > 0 and warmup >= 0");
  }
  return absl::OkStatus();
}

// KV bytes per second that CPU decode attention reads, through the kernels
// the cpu_worker runs (ops::WriteKv + ops::AttendSequence over a paged
// CpuKvCache, as CpuAttention::Run calls them): one decode token for each of
// `sequences` sequences of `context` cached positions, in one layer. The
// head layout is Mixtral-8x7B's and LLaMA-2-70B's (32 q / 8 kv heads of
// 128): GQA's 4 query heads per KV head set how much compute rides on each
// byte, so the figure holds for the models the planner mostly sees.
absl::StatusOr<double> MeasureAttentionGbs(const HostProfileOptions& o) {
  constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 16;
  const int64_t seqs = o.attention_sequences;
  const int64_t context = o.attention_context;
  const int64_t keys = context + 1;  // the decode token's own key included
  const int64_t row = kKvHeads * kHeadDim;
  CpuKvShape shape;
  shape.num_layers = 1;
  shape.kv_heads = kKvHeads;
  shape.head_dim = kHeadDim;
  shape.block_size = kBlock;
  shape.capacity_tokens = seqs * ((keys + kBlock - 1) / kBlock * kBlock);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<CpuKvCache> cache, CpuKvCache::Create(shape));
  std::vector<std::pair<int64_t, int64_t>> needs;
  for (int64_t s = 0; s < seqs; ++s) needs.push_back({s, keys});
  TANDEM_RETURN_IF_ERROR(cache->Reserve(needs));

  // Values do not change the work: one pool of small numbers for every
  // sequence's context keeps the set-up cheap.
  std::vector<float> pool(static_cast<size_t>(context * row));
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<float>(i % 17) * 0.01f;
  const ops::PagedKvLayer kv = cache->Layer(0);
  for (int64_t s = 0; s < seqs; ++s) {
    ops::WriteKv(kv, cache->BlockTable(s).data(), 0, context, pool.data(), pool.data());
    cache->SetWritten(s, 0, context);
  }
  std::vector<float> q(static_cast<size_t>(kHeads * kHeadDim), 0.01f);
  std::vector<float> kv_row(static_cast<size_t>(row), 0.02f);
  std::vector<float> out(static_cast<size_t>(seqs * kHeads * kHeadDim));
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  auto pass = [&] {
    for (int64_t s = 0; s < seqs; ++s) {
      const int32_t* table = cache->BlockTable(s).data();
      ops::WriteKv(kv, table, context, 1, kv_row.data(), kv_row.data());
      ops::AttendSequence(q.data(), 1, kHeads, kv, table, context, scale,
                          out.data() + s * kHeads * kHeadDim);
    }
  };
  // K and V of every key of every sequence, f32 (the CPU cache's dtype).
  const double bytes = 2.0 * static_cast<double>(seqs * keys * row) * sizeof(float);
  return Best(Rates(bytes, TimeRepeats(o.warmup, o.repeats, pass)));
}

std::string HostName() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "host";
  return host;
}

}  // namespace

HostProfileOptions QuickHostProfileOptions() {
  HostProfileOptions o;
  o.bandwidth_bytes = int64_t{8} << 20;
  o.copy_bytes = int64_t{4} << 20;
  o.gemm_m = 64;
  o.gemm_n = 256;
  o.gemm_k = 256;
  o.int8_n = 256;
  o.int8_k = 256;
  o.attention_sequences = 4;
  o.attention_context = 256;
  // One warm-up call keeps oneDNN's primitive creation out of the figure.
  o.warmup = 1;
  o.repeats = 1;
  return o;
}

int64_t HostMemoryBytes() {
  // A container sees the host's MemTotal; what it may use is its cgroup's
  // limit.
  const int64_t total = MeminfoBytes("MemTotal");
  const int64_t limit = CgroupLimitBytes();
  if (limit <= 0) return total;
  return total > 0 ? std::min(total, limit) : limit;
}

absl::StatusOr<HardwareProfile> MeasureHostProfile(const HostProfileOptions& o) {
  TANDEM_RETURN_IF_ERROR(CheckOptions(o));
  const MachineInfo machine = DescribeMachine();
  const int threads = omp_get_max_threads();
  const std::string host = HostName();

  HardwareProfile p;
  p.name = o.name.empty() ? absl::StrCat("host-", host) : o.name;
  p.gpu.count = 0;  // the host device: no GPU
  p.cpu.name = machine.cpu_model.empty() ? "unknown CPU" : machine.cpu_model;
  p.cpu.threads = threads;
  p.cpu.memory_bytes = HostMemoryBytes();
  if (p.cpu.memory_bytes <= 0) p.cpu.memory_bytes = machine.memory_bytes;

  // Memory: all threads, then one thread (the per-thread figure bounds the
  // bandwidth of a CPU pool cut down by WithCpuThreads).
  TANDEM_ASSIGN_OR_RETURN(std::vector<double> all,
                          ReadBandwidthGbs(o.bandwidth_bytes, o.warmup, o.repeats));
  p.cpu.memory_bandwidth = Best(all) * 1e9;
  {
    ScopedOmpThreads one(1);
    TANDEM_ASSIGN_OR_RETURN(std::vector<double> single,
                            ReadBandwidthGbs(o.bandwidth_bytes, o.warmup, o.repeats));
    // One thread cannot read faster than all of them; a noisy sample that
    // says otherwise would make WithCpuThreads(1) the fastest CPU.
    p.cpu.memory_bandwidth_per_thread = std::min(Best(single) * 1e9, p.cpu.memory_bandwidth);
  }

  // Compute.
  TANDEM_ASSIGN_OR_RETURN(GemmMeasurement f32, MeasureGemm(GemmKind::kF32, o.gemm_m, o.gemm_n,
                                                           o.gemm_k, o.warmup, o.repeats));
  p.cpu.f32_flops = Best(f32.gflops) * 1e9;
  TANDEM_ASSIGN_OR_RETURN(GemmMeasurement bf16, MeasureGemm(GemmKind::kBF16, o.gemm_m, o.gemm_n,
                                                            o.gemm_k, o.warmup, o.repeats));
  p.cpu.bf16_flops = Best(bf16.gflops) * 1e9;
  // int8 weights run on the int8 kernel only at small batches; its rate
  // there is the int8 figure (0 = unknown where the kernel takes no rows).
  std::string int8_path = "none";
  if (const int64_t rows = Int8KernelMaxRows(); rows > 0) {
    TANDEM_ASSIGN_OR_RETURN(GemmMeasurement i8, MeasureGemm(GemmKind::kInt8, rows, o.int8_n,
                                                            o.int8_k, o.warmup, o.repeats));
    p.cpu.int8_ops = Best(i8.gflops) * 1e9;
    int8_path = absl::StrCat(i8.path, " at ", rows, " rows");
  }
  TANDEM_ASSIGN_OR_RETURN(std::vector<double> call_us, LinearCallOverheadUs(o.warmup, o.repeats));
  p.cpu.op_overhead_s = Least(call_us) * 1e-6;

  // CPU decode attention; skipped = unknown (0), read as the bandwidth.
  if (o.attention_sequences > 0) {
    TANDEM_ASSIGN_OR_RETURN(const double gbs, MeasureAttentionGbs(o));
    p.cpu.attention_bandwidth = gbs;
  }

  // The host device's "link": copying an activation or a weight page to the
  // "device" is a one-thread memcpy in the same memory. No fixed cost worth
  // modelling next to the operator call above: latency 0.
  TANDEM_ASSIGN_OR_RETURN(std::vector<double> copy,
                          CopyBandwidthGbs(o.copy_bytes, o.warmup, o.repeats));
  p.link.h2d_bandwidth = p.link.d2h_bandwidth = Best(copy) * 1e9;

  p.source = absl::StrCat("measured on ", host, " by MeasureHostProfile (", threads,
                          " OpenMP threads, kernels ", machine.kernel_isa, "; read ",
                          o.bandwidth_bytes >> 20, " MiB; GEMM ", o.gemm_m, "x", o.gemm_n, "x",
                          o.gemm_k, ": ", bf16.path, "; int8: ", int8_path, ")");
  TANDEM_RETURN_IF_ERROR(p.Validate());
  return p;
}

absl::StatusOr<HardwareProfile> LoadOrMeasureHostProfileAt(const std::string& path,
                                                           const HostProfileOptions& options) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    // Reused only if it is a host profile (a GPU profile's link is PCIe, not
    // a memcpy) taken with the thread count the kernels use now (the path's
    // key covers the CPU model and the online CPUs, not OMP_NUM_THREADS).
    absl::StatusOr<HardwareProfile> cached = LoadHardwareProfile(path);
    if (cached.ok() && !cached->has_gpu() && cached->cpu.threads == omp_get_max_threads()) {
      return cached;
    }
  }
  TANDEM_ASSIGN_OR_RETURN(HardwareProfile p, MeasureHostProfile(options));
  // A cache that cannot be written (read-only home, no disk) costs a
  // re-measure next time, not this start-up.
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  (void)SaveHardwareProfile(p, path);
  return p;
}

absl::StatusOr<HardwareProfile> LoadOrMeasureHostProfile(const HostProfileOptions& options) {
  return LoadOrMeasureHostProfileAt(MachineProfileCachePath(), options);
}

}  // namespace tandem::perf
