#include "gpu_worker/bench/bench_runner.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/amx_linear.h"
#include "cpu_worker/ops/bf16_packed.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/linear.h"
#include "cpu_worker/ops/quant_packed.h"
#include "cpu_worker/perf/machine_info.h"
#include "cpu_worker/perf/machine_probe.h"
#include "gpu_worker/bench/expert_usage.h"
#include "gpu_worker/bench/model_costs.h"
#include "gpu_worker/engine/engine.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

absl::StatusOr<PeakFigure> Gemm(perf::GemmKind kind, int64_t m, int64_t s, const BenchOptions& o) {
  TANDEM_ASSIGN_OR_RETURN(perf::GemmMeasurement g,
                          perf::MeasureGemm(kind, m, s, s, o.warmup, o.repeats));
  PeakFigure p;
  p.value = perf::Summarize(g.gflops);
  p.path = g.path;
  p.m = g.m;
  p.n = g.n;
  p.k = g.k;
  return p;
}

absl::StatusOr<PeakFigure> Bandwidth(const BenchOptions& o, int threads) {
  if (o.progress) {
    o.progress(absl::StrCat("measuring read bandwidth (", o.bandwidth_bytes >> 20, " MiB, ",
                            threads, " threads)"));
  }
  TANDEM_ASSIGN_OR_RETURN(std::vector<double> bw,
                          perf::ReadBandwidthGbs(o.bandwidth_bytes, o.warmup, o.repeats));
  PeakFigure p;
  p.value = perf::Summarize(bw);
  p.bytes = o.bandwidth_bytes;
  p.path = perf::ReadSweepDescription();
  return p;
}

void Rescore(std::vector<Figure>& figures, const Peaks& p) {
  for (Figure& f : figures) Score(f, p);
}

absl::Status MeasureMachine(const BenchOptions& o, BenchReport* r) {
  auto say = [&o](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  r->machine = perf::DescribeMachine();
  TANDEM_ASSIGN_OR_RETURN(r->bandwidth, Bandwidth(o, static_cast<int>(r->machine.omp_threads)));
  const int64_t s = o.gemm_size;
  // The int8 peaks' batches (why: int8_peak below). Packed at load, the
  // int8 kernel takes prefill too.
  const int64_t int8_rows = perf::Int8KernelMaxRows();
  std::vector<int64_t> int8_batches = {int8_rows};
  if (int8_rows > 4) int8_batches.push_back(4);
  if (perf::Int8KernelTakesRows(s) && s > int8_rows) int8_batches.push_back(s);
  say(absl::StrCat("measuring GEMM peaks (", s, "^3 f32 and bf16, int8 at ",
                   absl::StrJoin(int8_batches, ", "), " rows)"));
  TANDEM_ASSIGN_OR_RETURN(r->gemm_f32, Gemm(perf::GemmKind::kF32, s, s, o));
  TANDEM_ASSIGN_OR_RETURN(r->gemm_bf16, Gemm(perf::GemmKind::kBF16, s, s, o));
  // The int8 kernel passes its rows of x four or three at a time against two
  // or four weight rows (quant_packed_kernel.inc, quant_gemv_avx512.cc), so
  // one pass of 4 rows can outrun two of 8 (on the AMD EPYC VM decode B = 4 once
  // read 108% of an 8-row peak), and where it takes prefill, a prompt's
  // slices of 100-136 rows outrun 32 (on the Zen 4 VM dense Q8_0 prefill of
  // 512 tokens read 103-109% of the 32-row peak): each peak is the fastest
  // of these. Q4_0 weights take the same kernels with half the weight loads
  // (packed, at 1.2-1.4x Q8_0's rate on the AMD EPYC VM), so they get a peak
  // of their own.
  auto int8_peak = [&](perf::GemmKind kind) -> absl::StatusOr<PeakFigure> {
    PeakFigure best;
    for (int64_t m : int8_batches) {
      TANDEM_ASSIGN_OR_RETURN(PeakFigure p, Gemm(kind, m, s, o));
      if (m == int8_batches.front() || p.value.max > best.value.max) best = p;
    }
    return best;
  };
  TANDEM_ASSIGN_OR_RETURN(r->gemm_int8, int8_peak(perf::GemmKind::kInt8));
  TANDEM_ASSIGN_OR_RETURN(r->gemm_int8_q4, int8_peak(perf::GemmKind::kInt8Q4));
  return absl::OkStatus();
}

// The buffer of the bandwidth samples around the figures, at least.
constexpr int64_t kSampleBytes = int64_t{256} << 20;

}  // namespace

absl::StatusOr<BenchReport> RunBench(const BenchOptions& options) {
  BenchOptions o = options;
  o.engine.repeats = o.attention.repeats = o.repeats;
  o.engine.warmup = o.attention.warmup = o.warmup;
  TANDEM_RETURN_IF_ERROR(ValidateEngineBenchOptions(o.engine));
  if (o.synthetic.has_value() == !o.model_path.empty()) {
    return absl::InvalidArgumentError("give exactly one of a model path and a synthetic model");
  }
  if (o.synthetic.has_value()) TANDEM_RETURN_IF_ERROR(SyntheticConfig(*o.synthetic).status());
  auto say = [&o](const std::string& s) {
    if (o.progress) o.progress(s);
  };

  BenchReport r;
  r.repeats = o.repeats;
  r.warmup = o.warmup;
  TANDEM_RETURN_IF_ERROR(MeasureMachine(o, &r));
  // Provisional for the bandwidth: every figure is scored again once it has
  // been measured a second time, after them.
  // (The int8 peak is Q4_0's for models of 4-bit weights, once they are
  // loaded.)
  Peaks peaks{r.bandwidth.value.max, r.gemm_f32.value.max, r.gemm_bf16.value.max,
              r.gemm_int8.value.max};
  // The bandwidth is sampled again after every timed run of every figure
  // (figure.h), from a smaller buffer kept for the run: 8x the L3 at least,
  // so a DRAM figure (on the AMD EPYC VM, 32 MiB L3, sweeps of 64 and 128
  // MiB read 25% and 8% faster than 1 GiB, 256 MiB the same). A sample is
  // one repeat (20 ms of sweeps, the fastest), close to the run it follows.
  const int64_t sample_bytes = std::min(
      o.bandwidth_bytes, std::max(kSampleBytes, 8 * static_cast<int64_t>(r.machine.l3_bytes)));
  TANDEM_ASSIGN_OR_RETURN(perf::ReadSweep sampler, perf::ReadSweep::Create(sample_bytes));
  o.engine.sample_read_gbs = o.attention.sample_read_gbs = [&sampler] {
    return sampler.Measure(/*warmup=*/0, /*repeats=*/1)[0];
  };

  // Declared before the engine: the files go only after the engine that
  // maps them.
  std::optional<ScratchDir> scratch;
  std::string path = o.model_path;
  if (o.synthetic.has_value()) {
    TANDEM_ASSIGN_OR_RETURN(ScratchDir dir, ScratchDir::Create("tandem_bench"));
    scratch.emplace(std::move(dir));
    say(absl::StrCat("writing a synthetic ", o.synthetic->moe ? "moe" : "dense", " model to ",
                     scratch->path()));
    const auto t0 = Clock::now();
    TANDEM_ASSIGN_OR_RETURN(path, WriteSyntheticModel(*o.synthetic, scratch->path()));
    r.model.write_seconds = Since(t0);
    r.model.source = absl::StrCat("synthetic ", o.synthetic->moe ? "moe" : "dense");
  } else {
    r.model.source = o.model_path;
  }
  r.model.path = path;

  say("loading the model");
  const auto t0 = Clock::now();
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(path));
  r.model.format = ckpt->format() == CheckpointFormat::kGguf ? "gguf" : "hf";
  r.model.config = ckpt->config();

  // Attention alone first: it needs only the shapes, and its KV comes and
  // goes before the engine's weights and cache are resident.
  say("measuring CPU decode attention alone");
  TANDEM_ASSIGN_OR_RETURN(r.attention, RunAttentionBench(r.model.config, peaks, o.attention));

  // Outlives the engine, which holds it as its expert offload.
  std::unique_ptr<ExpertUsage> usage;
  EngineOptions eo = EngineOptionsFor(o.engine, o.compute);
  eo.device = o.device;
  eo.weight_budget_bytes = o.weight_budget_bytes;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(std::move(ckpt), eo));
  r.model.load_seconds = Since(t0);
  if (!engine->load_notice().empty()) say(engine->load_notice());
  r.model.device = o.device_name;
  if (engine->weight_pager() != nullptr) {
    for (const StreamedLayer& l : engine->weight_pager()->layers()) {
      r.model.streamed_layers += 1;
      r.model.streamed_bytes += static_cast<double>(l.bytes());
    }
  }
  TANDEM_ASSIGN_OR_RETURN(r.model.costs,
                          ComputeModelCosts(engine->checkpoint(), engine->weights()));
  const std::string& st = r.model.costs.weight_storage;
  const ops::WeightStorage first = engine->weights().layers.empty()
                                       ? ops::WeightStorage::kF32
                                       : engine->weights().layers[0].q.storage();
  if (first == ops::WeightStorage::kBF16Packed && ops::internal::PackedBf16Widens()) {
    r.model.compute =
        "bf16, packed at load in oneDNN's layout; widened to f32 in the packed kernel's registers "
        "for every batch (no AVX512-BF16)";
  } else if (first == ops::WeightStorage::kBF16Packed) {
    r.model.compute = absl::StrCat(
        "bf16, packed at load in oneDNN's layout; the packed bf16 kernel in decode up to ",
        ops::internal::kPackedBf16KernelMaxRows, " rows, oneDNN's GEMM above");
  } else if (!engine->weights().layers.empty() && engine->weights().layers[0].q.packed_quant()) {
    const std::string type(DTypeName(engine->weights().layers[0].q.block_type()));
    r.model.compute = absl::StrCat(
        type, " packed for the int8 kernel at load (",
        ops::MaxKernelIsa() >= ops::KernelIsa::kAvx512Vnni ? "vpdpbusd" : "no VNNI: vpmaddubsw",
        ops::internal::PackedQuantTakesEveryBatch()
            ? "); int8 at every batch, prefill included"
            : absl::StrCat("); int8 in decode up to ", perf::Int8KernelMaxRows(),
                           " rows, dequantized to ", ops::CpuHasBf16() ? "bf16" : "f32",
                           " above and in prefill"));
  } else if (st == "f32" || (st == "bf16" && ops::CpuHasBf16())) {
    r.model.compute = st;
  } else if (st == "bf16" || st == "f16") {
    r.model.compute = absl::StrCat(st, " widened to f32");
  } else {
    const bool int8_tiles =
        ops::internal::QuantUsesAmxInt8Kernel(perf::Int8KernelMaxRows() + 1, 32);
    r.model.compute = absl::StrCat(
        "int8 kernels in decode up to ", perf::Int8KernelMaxRows(), " rows",
        int8_tiles ? absl::StrCat(", on AMX int8 tiles up to ", ops::internal::kAmxMaxRows)
                   : std::string(),
        ", dequantized to ", ops::CpuHasBf16() ? "bf16" : "f32", " above and in prefill");
  }
  if (st == "q4_0" || st == "q4_1") peaks.int8_gflops = r.gemm_int8_q4.value.max;
  if (r.model.config.is_moe()) {
    usage = std::make_unique<ExpertUsage>(r.model.config.num_experts);
    engine->SetExpertOffload(usage.get());
  }
  say("measuring the engine: pp, tg, batched decode");
  TANDEM_ASSIGN_OR_RETURN(r.engine,
                          RunEngineBench(*engine, usage.get(), r.model.costs, peaks, o.engine));
  // The page size matters to the streaming kernels (mapped_file.h).
  if (absl::StatusOr<int64_t> huge = FileHugePageBytes(); huge.ok()) {
    r.model.huge_page_bytes = *huge;
  }
  engine.reset();  // its KV cache and scratch go before the second sweep's buffer

  TANDEM_ASSIGN_OR_RETURN(r.bandwidth_after, Bandwidth(o, static_cast<int>(r.machine.omp_threads)));
  r.roofline = peaks;
  r.roofline.read_gbs = std::max(r.bandwidth.value.max, r.bandwidth_after.value.max);
  Rescore(r.engine.pp, r.roofline);
  Score(r.engine.tg, r.roofline);
  Rescore(r.engine.decode, r.roofline);
  Rescore(r.attention, r.roofline);
  return r;
}

}  // namespace tandem::bench
