// One measured figure of `tandem bench` and where it stands against its
// roofline.
#ifndef TANDEM_GPU_WORKER_BENCH_FIGURE_H_
#define TANDEM_GPU_WORKER_BENCH_FIGURE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cpu_worker/perf/timing.h"
#include "gpu_worker/bench/model_costs.h"

namespace tandem::bench {

// The machine's peaks the rooflines are drawn with: the best run of each
// measurement. Noise only ever slows a run down, so the best run is the
// estimate of what the machine can do; a median peak on a loaded machine
// would put figures taken in a quieter moment above their roofline.
struct Peaks {
  double read_gbs = 0;
  double f32_gflops = 0;
  double bf16_gflops = 0;
  double int8_gflops = 0;
};

// Samples the machine's read bandwidth now, in GB/s (a short sweep). The
// memory roofline of a figure is drawn with the median of samples taken
// right after each of its timed runs, as its rate is the median of those
// runs. On the AMD EPYC VM both the sweep and the engine's decode rate moved
// by a quarter from one second to the next (sweeps of 31 and 58 GB/s a few
// seconds apart), so a figure held against a sweep taken minutes earlier,
// at the start of the bench, came out between 56% and 103% of its roofline
// for the same code. Empty: the run's peak is used.
using BandwidthSampler = std::function<double()>;

// The samples of one figure: one after each timed run.
class RunSamples {
 public:
  explicit RunSamples(const BandwidthSampler& sampler) : sampler_(sampler) {}

  // Call right after a timed run.
  void AfterRun() {
    if (sampler_) samples_.push_back(sampler_());
  }

  // Median of the samples, 0 if none was taken.
  double Median() const { return perf::Summarize(samples_).median; }

 private:
  const BandwidthSampler& sampler_;
  std::vector<double> samples_;
};

// Which GEMM peak bounds a figure's compute: the kernels its weights take.
// kInt8OrBf16: the faster of the two, for batches of quantized weights that
// the int8 kernel takes where the bf16 GEMM could take them instead
// (ops::internal::PackedQuantTakesEveryBatch), so that neither kernel's
// figure is scored against a slower bound than the machine offers.
enum class PeakKind { kF32, kBF16, kInt8, kInt8OrBf16 };

inline double PeakOf(const Peaks& p, PeakKind k) {
  switch (k) {
    case PeakKind::kF32:
      return p.f32_gflops;
    case PeakKind::kBF16:
      return p.bf16_gflops;
    case PeakKind::kInt8:
      return p.int8_gflops;
    case PeakKind::kInt8OrBf16:
      return p.int8_gflops > p.bf16_gflops ? p.int8_gflops : p.bf16_gflops;
  }
  return 0;
}

inline const char* PeakKindName(PeakKind k) {
  return k == PeakKind::kF32    ? "f32"
         : k == PeakKind::kBF16 ? "bf16"
         : k == PeakKind::kInt8 ? "int8"
                                : "int8|bf16";
}

struct Figure {
  int64_t sequences = 1;  // sequences per step (decode batch, attention sequences)
  int64_t tokens = 0;     // pp: prompt tokens; tg: tokens generated per run
  int64_t context = 0;    // tokens each sequence holds before the step (tg: at its start)
  double keys = 0;        // keys each decode token attends over (mean for tg)
  // Tokens per second (aggregate over the batch); for attention alone,
  // decode tokens whose attention over every layer completes per second.
  perf::Summary rate;
  Work work;                            // of one unit: a prefill, a decode step, one attention pass
  double unit_tokens = 0;               // tokens one unit produces
  PeakKind peak_kind = PeakKind::kF32;  // which GEMM peak bounds its compute
  double peak_gflops = 0;               // the compute peak the figure is held against
  // The routed experts' own peak (work.expert_flops), where their few rows
  // each take another kernel than the batch's dense part; else peak_kind's.
  PeakKind expert_peak_kind = PeakKind::kF32;
  bool expert_peak_differs = false;
  double expert_peak_gflops = 0;
  double sampled_read_gbs = 0;          // median bandwidth sampled after its runs (0: none)
  double read_gbs = 0;                  // the bandwidth its memory roofline is drawn with
  Roofline roofline;                    // of one unit
  double roofline_rate = 0;             // tokens/s at the roofline
  double fraction = 0;                  // rate.median / roofline_rate
  // MoE: distinct routed experts per layer whose weights a unit reads, and
  // how that number was obtained ("router" = recorded from the routing,
  // "exact" = one token routes to exactly top-k, "expected" = uniform
  // routing estimate).
  double experts_per_layer = 0;
  std::string experts_source;
};

// Fills read_gbs, peak_gflops, expert_peak_gflops, roofline, roofline_rate
// and fraction from work, unit_tokens, the peak kinds, rate and
// sampled_read_gbs (the bandwidth
// sampled after the figure's runs where there is one, else the peak's).
inline void Score(Figure& f, const Peaks& peaks) {
  f.read_gbs = f.sampled_read_gbs > 0 ? f.sampled_read_gbs : peaks.read_gbs;
  f.peak_gflops = PeakOf(peaks, f.peak_kind);
  f.expert_peak_gflops = f.expert_peak_differs ? PeakOf(peaks, f.expert_peak_kind) : 0;
  f.roofline = RooflineOf(f.work, f.read_gbs, f.peak_gflops, f.expert_peak_gflops);
  const double s = f.roofline.seconds();
  f.roofline_rate = s > 0 ? f.unit_tokens / s : 0;
  f.fraction = f.roofline_rate > 0 ? f.rate.median / f.roofline_rate : 0;
}

}  // namespace tandem::bench

#endif  // TANDEM_GPU_WORKER_BENCH_FIGURE_H_
