#include "gpu_worker/bench/engine_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/cpu_features.h"
#include "cpu_worker/ops/quant_packed.h"
#include "cpu_worker/perf/machine_probe.h"
#include "gpu_worker/engine/generator.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kBlock = 16;
// Sequence ids: one for pp, one for tg, a range for the decode batches.
constexpr int64_t kPpSeq = 1;
constexpr int64_t kTgSeq = 2;
constexpr int64_t kFirstDecodeSeq = 1000;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Deterministic token ids in [3, vocab) (ids 0-2 are often special).
std::vector<int32_t> Tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint32_t s = seed * 2654435761u + 1;
  const int64_t span = std::max<int64_t>(1, vocab - 3);
  for (int32_t& x : t) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<int32_t>(3 + static_cast<int64_t>(s >> 8) % span) % static_cast<int32_t>(vocab);
  }
  return t;
}

double Seconds(Clock::time_point t0) {
  return std::max(1e-9, std::chrono::duration<double>(Clock::now() - t0).count());
}

// `warmup` untimed, then `repeats` timed runs, each followed by a bandwidth
// sample (figure.h) whose median goes to `*read_gbs`. Each run reports its
// own seconds, so setup inside it (freeing a sequence) stays out of the time.
absl::StatusOr<std::vector<double>> SampledRuns(
    const EngineBenchOptions& o, const std::function<absl::StatusOr<double>()>& run,
    double* read_gbs) {
  for (int i = 0; i < o.warmup; ++i) TANDEM_RETURN_IF_ERROR(run().status());
  std::vector<double> s;
  RunSamples samples(o.sample_read_gbs);
  for (int i = 0; i < o.repeats; ++i) {
    TANDEM_ASSIGN_OR_RETURN(double t, run());
    s.push_back(t);
    samples.AfterRun();
  }
  *read_gbs = samples.Median();
  return s;
}

bool Quantized(const ModelCosts& c) {
  return c.weight_storage != "f32" && c.weight_storage != "bf16" && c.weight_storage != "f16";
}

// Prefill runs bf16 GEMMs where the CPU has them (bf16 weights, and
// quantized ones dequantized to bf16 panels); elsewhere 16-bit and
// quantized weights widen panels for the f32 GEMM, whose peak is the bound.
// Quantized weights packed for the int8 kernel on a VNNI CPU take it at
// every batch: the faster of its peak and the bf16 GEMM's.
PeakKind PrefillPeak(const ModelCosts& c) {
  if (c.weight_storage == "f32" || c.weight_storage == "f16") return PeakKind::kF32;
  if (Quantized(c) && ops::internal::PackedQuantTakesEveryBatch()) {
    return ops::CpuHasBf16() ? PeakKind::kInt8OrBf16 : PeakKind::kInt8;
  }
  return ops::CpuHasBf16() ? PeakKind::kBF16 : PeakKind::kF32;
}

// Quantized weights run the int8 kernels up to a few rows; larger batches
// as prefill does (in bf16 on dequantized weights: the AMX kernel up to 32
// rows, prefill's dequantizing GEMM above; or the int8 kernel where it
// takes every batch). The attention projections and the LM head see all
// `batch` rows (a routed expert fewer: this is the choice for the dense
// part).
PeakKind DecodePeak(const ModelCosts& c, int64_t batch) {
  return Quantized(c) && batch <= perf::Int8KernelMaxRows() ? PeakKind::kInt8 : PrefillPeak(c);
}

// A routed expert of a decode step sees batch * top-k / (distinct experts
// per layer) rows on average, and takes the kernel for that many: at B = 16
// over 8 experts top-2 about 4, the int8 kernel, where the batch's dense
// part runs in bf16.
void SetDecodePeaks(const ModelCosts& c, int64_t batch, Figure& f) {
  f.peak_kind = DecodePeak(c, batch);
  if (c.moe_layers == 0 || f.experts_per_layer <= 0) return;
  const double rows = static_cast<double>(batch * c.experts_per_tok) / f.experts_per_layer;
  f.expert_peak_kind =
      DecodePeak(c, static_cast<int64_t>(std::ceil(rows - 1e-9)));
  f.expert_peak_differs = f.expert_peak_kind != f.peak_kind;
}

// Distinct experts (summed over layers) one unit read: the recorded mean
// when the router was observed, else the uniform-routing estimate for
// `tokens` tokens per layer.
void SetExperts(const ModelCosts& c, double recorded_sum, int64_t units, int64_t tokens, Figure* f,
                double* experts_read) {
  *experts_read = 0;
  if (c.moe_layers == 0) return;
  if (units > 0 && recorded_sum > 0) {
    *experts_read = recorded_sum / static_cast<double>(units);
    f->experts_source = "router";
  } else {
    *experts_read = ExpectedDistinctExperts(c.num_experts, c.experts_per_tok, tokens) *
                    static_cast<double>(c.moe_layers);
    f->experts_source = "expected";
  }
  f->experts_per_layer = *experts_read / static_cast<double>(c.moe_layers);
}

absl::StatusOr<Figure> Prefill(Engine& engine, ExpertUsage* usage, const ModelCosts& costs,
                               const Peaks& peaks, const EngineBenchOptions& o, int64_t n) {
  SequenceChunk chunk;
  chunk.seq_id = kPpSeq;
  chunk.tokens = Tokens(n, engine.config().vocab_size, static_cast<uint32_t>(n));
  double experts = 0;
  int64_t units = 0;
  auto run = [&]() -> absl::StatusOr<double> {
    engine.FreeSequence(kPpSeq);
    if (usage != nullptr) usage->Reset();
    const auto t0 = Clock::now();
    TANDEM_RETURN_IF_ERROR(engine.Step({chunk}).status());
    const double s = Seconds(t0);
    if (usage != nullptr) experts += static_cast<double>(usage->distinct());
    ++units;
    return s;
  };
  Figure f;
  absl::StatusOr<std::vector<double>> secs = SampledRuns(o, run, &f.sampled_read_gbs);
  engine.FreeSequence(kPpSeq);
  if (!secs.ok()) return secs.status();
  f.tokens = n;
  f.unit_tokens = static_cast<double>(n);
  f.rate = perf::Summarize(perf::Rates(static_cast<double>(n), *secs));
  double read = 0;
  SetExperts(costs, experts, units, n, &f, &read);
  f.work = PrefillWork(costs, n, read);
  f.peak_kind = PrefillPeak(costs);
  Score(f, peaks);
  return f;
}

absl::StatusOr<Figure> Generation(Engine& engine, const ModelCosts& costs, const Peaks& peaks,
                                  const EngineBenchOptions& o) {
  const std::vector<int32_t> prompt = Tokens(o.context, engine.config().vocab_size, 7);
  GenerationParams params;
  params.max_tokens = o.tg_tokens;
  params.ignore_eos = true;  // greedy sampling (the default parameters)
  auto run = [&]() -> absl::StatusOr<double> {
    TANDEM_ASSIGN_OR_RETURN(GenerationResult r, Generate(engine, kTgSeq, prompt, params));
    if (static_cast<int64_t>(r.tokens.size()) != o.tg_tokens) {
      return absl::InternalError(
          absl::StrCat("tg: generated ", r.tokens.size(), " of ", o.tg_tokens, " tokens"));
    }
    return std::max(1e-9, r.decode_seconds);
  };
  Figure f;
  TANDEM_ASSIGN_OR_RETURN(std::vector<double> secs, SampledRuns(o, run, &f.sampled_read_gbs));
  f.tokens = o.tg_tokens;
  f.context = o.context;
  // decode_seconds holds tg_tokens samplings and tg_tokens - 1 engine
  // steps; step i attends over context + i + 1 keys.
  const int64_t steps = o.tg_tokens - 1;
  f.keys = static_cast<double>(o.context) + static_cast<double>(steps + 1) / 2;
  f.unit_tokens = 1;
  f.rate = perf::Summarize(perf::Rates(static_cast<double>(steps), secs));
  double read = 0;
  if (costs.moe_layers > 0) {
    // One token routes to exactly top-k distinct experts per layer.
    read = static_cast<double>(costs.experts_per_tok * costs.moe_layers);
    f.experts_per_layer = static_cast<double>(costs.experts_per_tok);
    f.experts_source = "exact";
  }
  f.work = DecodeWork(costs, 1, f.keys, read);
  f.peak_kind = DecodePeak(costs, 1);
  Score(f, peaks);
  return f;
}

// Gives sequences kFirstDecodeSeq .. + count `context` tokens each, a few
// sequences per step so that a step stays prefill-sized.
absl::Status PrefillDecodeSequences(Engine& engine, const EngineBenchOptions& o, int64_t count) {
  const int64_t per_step = std::max<int64_t>(1, 512 / std::max<int64_t>(1, o.context));
  for (int64_t first = 0; first < count; first += per_step) {
    std::vector<SequenceChunk> batch;
    for (int64_t i = first; i < std::min(count, first + per_step); ++i) {
      SequenceChunk c;
      c.seq_id = kFirstDecodeSeq + i;
      c.tokens = Tokens(o.context, engine.config().vocab_size, static_cast<uint32_t>(100 + i));
      batch.push_back(std::move(c));
    }
    TANDEM_RETURN_IF_ERROR(engine.Step(batch).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<Figure> Decode(Engine& engine, ExpertUsage* usage, const ModelCosts& costs,
                              const Peaks& peaks, const EngineBenchOptions& o, int64_t b) {
  // One batch per step, tokens varied per step so routing varies too.
  std::vector<std::vector<SequenceChunk>> steps(static_cast<size_t>(o.decode_steps));
  for (int64_t s = 0; s < o.decode_steps; ++s) {
    const std::vector<int32_t> ids =
        Tokens(b, engine.config().vocab_size, static_cast<uint32_t>(5000 + 131 * b + s));
    for (int64_t i = 0; i < b; ++i) {
      SequenceChunk c;
      c.seq_id = kFirstDecodeSeq + i;
      c.start_pos = o.context;  // re-run the same position: the context stays fixed
      c.tokens = {ids[static_cast<size_t>(i)]};
      steps[static_cast<size_t>(s)].push_back(std::move(c));
    }
  }
  double experts = 0;
  int64_t units = 0;
  auto run = [&]() -> absl::StatusOr<double> {
    double recorded = 0;
    const auto t0 = Clock::now();
    for (const auto& step : steps) {
      if (usage != nullptr) usage->Reset();
      TANDEM_RETURN_IF_ERROR(engine.Step(step).status());
      if (usage != nullptr) recorded += static_cast<double>(usage->distinct());
    }
    const double s = Seconds(t0);
    experts += recorded;
    units += o.decode_steps;
    return s;
  };
  Figure f;
  TANDEM_ASSIGN_OR_RETURN(std::vector<double> secs, SampledRuns(o, run, &f.sampled_read_gbs));
  f.sequences = b;
  f.context = o.context;
  f.keys = static_cast<double>(o.context + 1);
  f.unit_tokens = static_cast<double>(b);
  f.rate = perf::Summarize(perf::Rates(static_cast<double>(b * o.decode_steps), secs));
  double read = 0;
  SetExperts(costs, experts, units, b, &f, &read);
  f.work = DecodeWork(costs, b, f.keys, read);
  SetDecodePeaks(costs, b, f);
  Score(f, peaks);
  return f;
}

}  // namespace

absl::Status ValidateEngineBenchOptions(const EngineBenchOptions& o) {
  auto all_positive = [](const std::vector<int64_t>& v) {
    return !v.empty() && std::all_of(v.begin(), v.end(), [](int64_t x) { return x > 0; });
  };
  if (!all_positive(o.pp_tokens) || !all_positive(o.batches)) {
    return absl::InvalidArgumentError("pp token counts and batch sizes must be positive");
  }
  if (o.context <= 0 || o.decode_steps <= 0 || o.repeats <= 0 || o.warmup < 0) {
    return absl::InvalidArgumentError("context, decode steps and repeats must be positive");
  }
  if (o.tg_tokens < 2) return absl::InvalidArgumentError("tg needs at least 2 tokens");
  return absl::OkStatus();
}

EngineOptions EngineOptionsFor(const EngineBenchOptions& o, ops::ComputeType compute) {
  const int64_t max_pp = *std::max_element(o.pp_tokens.begin(), o.pp_tokens.end());
  const int64_t max_b = *std::max_element(o.batches.begin(), o.batches.end());
  const int64_t tg_len = o.context + o.tg_tokens + 1;
  const int64_t decode_len = o.context + 1;
  EngineOptions e;
  e.compute = compute;
  e.block_size = kBlock;
  e.max_context = CeilDiv(std::max({max_pp, tg_len, decode_len}), kBlock) * kBlock;
  // pp, tg and the decode batches run one after the other; the pool must
  // hold the largest of them at once.
  const int64_t blocks = std::max(
      {CeilDiv(max_pp, kBlock), CeilDiv(tg_len, kBlock), max_b * CeilDiv(decode_len, kBlock)});
  e.max_sequences = CeilDiv(blocks, e.max_context / kBlock);
  return e;
}

absl::StatusOr<EngineFigures> RunEngineBench(Engine& engine, ExpertUsage* usage,
                                             const ModelCosts& costs, const Peaks& peaks,
                                             const EngineBenchOptions& o) {
  TANDEM_RETURN_IF_ERROR(ValidateEngineBenchOptions(o));
  EngineFigures r;
  for (int64_t n : o.pp_tokens) {
    TANDEM_ASSIGN_OR_RETURN(Figure f, Prefill(engine, usage, costs, peaks, o, n));
    r.pp.push_back(f);
  }
  TANDEM_ASSIGN_OR_RETURN(r.tg, Generation(engine, costs, peaks, o));

  const int64_t max_b = *std::max_element(o.batches.begin(), o.batches.end());
  absl::Status s = PrefillDecodeSequences(engine, o, max_b);
  for (int64_t b : o.batches) {
    if (!s.ok()) break;
    absl::StatusOr<Figure> f = Decode(engine, usage, costs, peaks, o, b);
    if (f.ok()) {
      r.decode.push_back(*f);
    } else {
      s = f.status();
    }
  }
  for (int64_t i = 0; i < max_b; ++i) engine.FreeSequence(kFirstDecodeSeq + i);
  if (!s.ok()) return s;
  return r;
}

}  // namespace tandem::bench
