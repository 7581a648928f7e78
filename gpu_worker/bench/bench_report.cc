#include "gpu_worker/bench/bench_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tandem::bench {
namespace {

using nlohmann::ordered_json;

ordered_json SummaryJson(const perf::Summary& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"runs", s.n}};
}

ordered_json PeakJson(const PeakFigure& p, const char* unit) {
  ordered_json j;
  j[unit] = SummaryJson(p.value);
  j["path"] = p.path;
  if (p.bytes > 0) j["buffer_bytes"] = p.bytes;
  if (p.m > 0) j["shape"] = {{"m", p.m}, {"n", p.n}, {"k", p.k}};
  return j;
}

// A memory-bound unit that reads less than this many times the L3 can be served partly
// from the cache across units (the dense part of an MoE step, hot experts):
// its DRAM roofline is then no bound, and a fraction above 1 no error.
constexpr double kCacheMultiple = 4;

bool CacheBound(const Figure& f, int64_t l3_bytes) {
  return l3_bytes > 0 && f.roofline.memory_seconds >= f.roofline.compute_seconds &&
         f.work.bytes < kCacheMultiple * static_cast<double>(l3_bytes);
}

ordered_json FigureJson(const Figure& f, int64_t l3_bytes) {
  ordered_json j;
  j["sequences"] = f.sequences;
  j["tokens"] = f.tokens;
  j["context"] = f.context;
  j["keys"] = f.keys;
  j["tokens_per_s"] = SummaryJson(f.rate);
  j["flops_per_unit"] = f.work.flops;
  j["bytes_per_unit"] = f.work.bytes;
  j["tokens_per_unit"] = f.unit_tokens;
  j["peak"] = PeakKindName(f.peak_kind);
  j["peak_gflops"] = f.peak_gflops;
  if (f.expert_peak_differs) {
    j["expert_flops_per_unit"] = f.work.expert_flops;
    j["expert_peak"] = PeakKindName(f.expert_peak_kind);
    j["expert_peak_gflops"] = f.expert_peak_gflops;
  }
  j["read_gbs"] = f.read_gbs;
  j["read_gbs_source"] = f.sampled_read_gbs > 0 ? "sampled" : "peak";
  j["roofline_memory_s"] = f.roofline.memory_seconds;
  j["roofline_compute_s"] = f.roofline.compute_seconds;
  j["roofline_tokens_per_s"] = f.roofline_rate;
  j["fraction"] = f.fraction;
  j["bound"] = f.roofline.bound();
  j["within_4x_l3"] = CacheBound(f, l3_bytes);
  if (!f.experts_source.empty()) {
    j["experts_per_layer"] = f.experts_per_layer;
    j["experts_source"] = f.experts_source;
  }
  return j;
}

ordered_json FiguresJson(const std::vector<Figure>& v, int64_t l3_bytes) {
  ordered_json a = ordered_json::array();
  for (const Figure& f : v) a.push_back(FigureJson(f, l3_bytes));
  return a;
}

std::string Si(double v, const char* unit) {
  if (v >= 1e9) return absl::StrFormat("%.2f G%s", v / 1e9, unit);
  if (v >= 1e6) return absl::StrFormat("%.2f M%s", v / 1e6, unit);
  if (v >= 1e3) return absl::StrFormat("%.2f k%s", v / 1e3, unit);
  return absl::StrFormat("%.0f %s", v, unit);
}

std::string PeakLine(const char* name, const PeakFigure& p, const char* unit) {
  std::string shape = p.bytes > 0 ? absl::StrFormat("%d MiB buffer", p.bytes >> 20)
                                  : absl::StrFormat("%dx%dx%d", p.m, p.n, p.k);
  return absl::StrFormat("  %-16s %9.1f %-7s [%.1f .. %.1f]  %s; %s\n", name, p.value.median, unit,
                         p.value.min, p.value.max, shape, p.path);
}

std::string FigureRow(const std::string& label, const Figure& f, bool moe, int64_t l3_bytes) {
  std::string experts;
  if (moe) {
    experts = f.experts_source.empty() ? "          "
                                       : absl::StrFormat(" %4.2f %-5s", f.experts_per_layer,
                                                         f.experts_source.substr(0, 5));
  }
  return absl::StrFormat("  %-22s %10.1f %10.1f %10.1f %11.1f %7.1f%%%s %-7s %6.1f %9s %9s%s\n",
                         label, f.rate.median, f.rate.min, f.rate.max, f.roofline_rate,
                         100 * f.fraction, CacheBound(f, l3_bytes) ? "*" : " ", f.roofline.bound(),
                         f.read_gbs, Si(f.work.bytes, "B"), Si(f.work.flops, "F"), experts);
}

}  // namespace

std::string PpLabel(const Figure& f) { return absl::StrCat("pp N=", f.tokens); }
std::string TgLabel(const Figure& f) { return absl::StrCat("tg ctx=", f.context, " +", f.tokens); }
std::string DecodeLabel(const Figure& f) {
  return absl::StrCat("decode B=", f.sequences, " ctx=", f.context);
}

ordered_json ReportJson(const BenchReport& r) {
  ordered_json j;
  const perf::MachineInfo& m = r.machine;
  j["machine"] = {{"cpu_model", m.cpu_model},
                  {"logical_cpus", m.logical_cpus},
                  {"omp_threads", m.omp_threads},
                  {"memory_bytes", m.memory_bytes},
                  {"l3_bytes", m.l3_bytes},
                  {"probed_features", m.probed_features},
                  {"cpuinfo_flags", m.cpuinfo_flags},
                  {"kernel_isa", m.kernel_isa},
                  {"bf16_gemm", m.bf16_gemm},
                  {"stream_prefetch", m.stream_prefetch},
                  {"packed_prefetch", m.packed_prefetch},
                  {"omp_wait_policy", m.omp_wait_policy},
                  {"gomp_spincount", m.gomp_spincount}};
  j["settings"] = {{"repeats", r.repeats}, {"warmup", r.warmup}};
  j["peaks"] = {{"read_bandwidth", PeakJson(r.bandwidth, "gbs")},
                {"read_bandwidth_after", PeakJson(r.bandwidth_after, "gbs")},
                {"gemm_f32", PeakJson(r.gemm_f32, "gflops")},
                {"gemm_bf16", PeakJson(r.gemm_bf16, "gflops")},
                {"gemm_int8", PeakJson(r.gemm_int8, "gflops")},
                {"gemm_int8_q4", PeakJson(r.gemm_int8_q4, "gflops")}};
  j["roofline"] = {{"read_gbs", r.roofline.read_gbs},
                   {"f32_gflops", r.roofline.f32_gflops},
                   {"bf16_gflops", r.roofline.bf16_gflops},
                   {"int8_gflops", r.roofline.int8_gflops}};
  const ModelConfig& c = r.model.config;
  const ModelCosts& k = r.model.costs;
  j["model"] = {{"source", r.model.source},
                {"path", r.model.path},
                {"format", r.model.format},
                {"arch", c.arch_name},
                {"weight_storage", k.weight_storage},
                {"compute", r.model.compute},
                {"device", r.model.device},
                {"streamed_layers", r.model.streamed_layers},
                {"streamed_bytes", r.model.streamed_bytes},
                {"params", k.total_params},
                {"weight_bytes", k.total_weight_bytes},
                {"hidden", c.hidden_size},
                {"layers", c.num_layers},
                {"intermediate", c.is_moe() ? c.moe_intermediate_size : c.intermediate_size},
                {"heads", c.num_heads},
                {"kv_heads", c.num_kv_heads},
                {"head_dim", c.head_dim},
                {"vocab", c.vocab_size},
                {"experts", c.num_experts},
                {"experts_per_tok", c.num_experts_per_tok},
                {"dense_weight_bytes", k.dense_bytes + k.lm_head_bytes},
                {"expert_bytes", k.expert_bytes},
                {"kv_bytes_per_token", k.kv_bytes_per_token},
                {"write_seconds", r.model.write_seconds},
                {"load_seconds", r.model.load_seconds},
                {"huge_page_bytes", r.model.huge_page_bytes}};
  const int64_t l3 = m.l3_bytes;
  j["pp"] = FiguresJson(r.engine.pp, l3);
  j["tg"] = FigureJson(r.engine.tg, l3);
  j["decode"] = FiguresJson(r.engine.decode, l3);
  j["attention"] = FiguresJson(r.attention, l3);
  if (r.device_profile.has_value()) {
    const HardwareProfile& d = *r.device_profile;
    j["device_profile"] = {{"name", d.gpu.name},
                           {"memory_bytes", d.gpu.memory_bytes},
                           {"hbm_gbs", d.gpu.memory_bandwidth / 1e9},
                           {"bf16_tflops", d.gpu.bf16_flops / 1e12},
                           {"f32_tflops", d.gpu.f32_flops / 1e12},
                           {"int8_tops", d.gpu.int8_ops / 1e12},
                           {"launch_overhead_us", d.gpu.launch_overhead_s * 1e6},
                           {"h2d_gbs", d.link.h2d_bandwidth / 1e9},
                           {"h2d_latency_us", d.link.h2d_latency_s * 1e6},
                           {"d2h_gbs", d.link.d2h_bandwidth / 1e9},
                           {"d2h_latency_us", d.link.d2h_latency_s * 1e6}};
  }
  if (r.prediction.has_value()) {
    const PlannerPrediction& p = *r.prediction;
    ordered_json figures = ordered_json::array();
    for (const PredictedFigure& f : p.figures) {
      figures.push_back({{"figure", f.figure},
                         {"measured_tokens_per_s", f.measured},
                         {"predicted_tokens_per_s", f.predicted},
                         {"measured_over_predicted", f.predicted > 0 ? f.measured / f.predicted : 0},
                         {"bottleneck", f.bottleneck}});
    }
    j["prediction"] = {{"profile", p.profile},
                       {"profile_source", p.profile_source},
                       {"weights_gpu_fraction", p.weights_gpu_fraction},
                       {"figures", std::move(figures)}};
  }
  return j;
}

std::string ReportTable(const BenchReport& r) {
  const perf::MachineInfo& m = r.machine;
  std::string s;
  absl::StrAppendFormat(
      &s, "Machine: %s, %d logical CPUs, %d OpenMP threads, %.1f GiB, L3 %d MiB\n",
      m.cpu_model.empty() ? "unknown CPU" : m.cpu_model, m.logical_cpus, m.omp_threads,
      static_cast<double>(m.memory_bytes) / (1 << 30), m.l3_bytes >> 20);
  absl::StrAppendFormat(
      &s,
      "  kernels: %s; bf16 GEMM: %s; GEMV prefetch into %s (packed quantized: %s); "
      "OMP_WAIT_POLICY=%s "
      "GOMP_SPINCOUNT=%s\n",
      m.kernel_isa, m.bf16_gemm ? "yes" : "no", m.stream_prefetch, m.packed_prefetch,
      m.omp_wait_policy.empty() ? "(unset)" : m.omp_wait_policy,
      m.gomp_spincount.empty() ? "(unset)" : m.gomp_spincount);
  absl::StrAppendFormat(&s, "  cpuinfo: %s\n", absl::StrJoin(m.cpuinfo_flags, " "));
  absl::StrAppendFormat(&s, "Peaks (median [min .. max] of %d runs after %d warm-up):\n", r.repeats,
                        r.warmup);
  s += PeakLine("read bandwidth", r.bandwidth, "GB/s");
  s += PeakLine("  again after", r.bandwidth_after, "GB/s");
  s += PeakLine("GEMM f32", r.gemm_f32, "GFLOP/s");
  s += PeakLine("GEMM bf16", r.gemm_bf16, "GFLOP/s");
  s += PeakLine("GEMM int8", r.gemm_int8, "GFLOP/s");
  s += PeakLine("GEMM int8 Q4_0", r.gemm_int8_q4, "GFLOP/s");
  absl::StrAppendFormat(&s,
                        "  rooflines use the best run of each: %.1f GB/s; f32 %.1f, bf16 %.1f, "
                        "int8 %.1f GFLOP/s; the bandwidth sampled after each figure's runs "
                        "(GB/s column) replaces the first\n",
                        r.roofline.read_gbs, r.roofline.f32_gflops, r.roofline.bf16_gflops,
                        r.roofline.int8_gflops);

  const ModelConfig& c = r.model.config;
  const ModelCosts& k = r.model.costs;
  const bool moe = c.is_moe();
  absl::StrAppendFormat(
      &s, "Model: %s (%s, %s): %s params, %s of weights (%s; compute %s)\n", r.model.source,
      c.arch_name, r.model.format, Si(static_cast<double>(k.total_params), ""),
      Si(static_cast<double>(k.total_weight_bytes), "B"), k.weight_storage, r.model.compute);
  absl::StrAppendFormat(&s, "  hidden %d, %d layers, ffn %d, heads %d/%d x %d, vocab %d",
                        c.hidden_size, c.num_layers,
                        moe ? c.moe_intermediate_size : c.intermediate_size, c.num_heads,
                        c.num_kv_heads, c.head_dim, c.vocab_size);
  if (moe) absl::StrAppendFormat(&s, ", %d experts top-%d", c.num_experts, c.num_experts_per_tok);
  if (r.model.device != "host" || r.model.streamed_layers > 0) {
    absl::StrAppendFormat(&s, "\n  engine on %s, FFN of %d layers streamed from host memory",
                          r.model.device, r.model.streamed_layers);
    if (r.model.device != "host") {
      absl::StrAppend(&s, "; roofline fractions below are against this machine's CPU figures");
    }
  }
  if (r.model.write_seconds > 0) {
    absl::StrAppendFormat(&s, "\n  written in %.1f s", r.model.write_seconds);
  }
  absl::StrAppendFormat(&s, "\n  loaded in %.1f s", r.model.load_seconds);
  if (r.model.huge_page_bytes >= 0) {
    absl::StrAppendFormat(&s, "; %s of it mapped on 2 MiB pages",
                          Si(static_cast<double>(r.model.huge_page_bytes), "B"));
  }
  absl::StrAppendFormat(
      &s, "\n  read per decode step: %s dense + %s per routed expert; KV %s per token\n",
      Si(static_cast<double>(k.dense_bytes + k.lm_head_bytes), "B"),
      Si(static_cast<double>(k.expert_bytes), "B"),
      Si(static_cast<double>(k.kv_bytes_per_token), "B"));

  s += "\nFigures: tokens/s (median, min, max); roofline = slower of bytes/bandwidth and "
       "FLOPs/peak per unit; GB/s = the read bandwidth its roofline uses\n";
  absl::StrAppendFormat(&s, "  %-22s %10s %10s %10s %11s %8s  %-7s %6s %9s %9s%s\n", "figure",
                        "median", "min", "max", "roofline", "fraction", "bound", "GB/s", "bytes/u",
                        "FLOPs/u", moe ? " experts/layer" : "");
  for (const Figure& f : r.engine.pp) {
    s += FigureRow(PpLabel(f), f, moe, m.l3_bytes);
  }
  s += FigureRow(TgLabel(r.engine.tg), r.engine.tg, moe, m.l3_bytes);
  for (const Figure& f : r.engine.decode) {
    s += FigureRow(DecodeLabel(f), f, moe, m.l3_bytes);
  }
  for (const Figure& f : r.attention) {
    s += FigureRow(absl::StrCat("attention ctx=", f.context, " S=", f.sequences), f, false,
                   m.l3_bytes);
  }
  s += "  (u = unit: a prefill, a decode step, an attention pass over all layers; attention "
       "tokens/s = sequences' decode tokens per second)\n"
       "  (*: the unit reads less than 4x the L3, so part of it may come from the cache and the "
       "DRAM roofline is no bound)\n";
  for (const Figure& f : r.engine.decode) {
    if (!f.expert_peak_differs) continue;
    absl::StrAppendFormat(&s,
                          "  (decode B=%d: the routed experts' %s of the FLOPs/u at the %s peak, "
                          "their few rows each taking that kernel; the rest at %s)\n",
                          f.sequences, Si(f.work.expert_flops, "F"),
                          PeakKindName(f.expert_peak_kind), PeakKindName(f.peak_kind));
  }
  if (r.device_profile.has_value()) {
    const HardwareProfile& d = *r.device_profile;
    absl::StrAppendFormat(
        &s,
        "\nDevice %s, measured: %.1f GiB; HBM %.1f GB/s; GEMM bf16 %.1f, f32 %.1f TFLOP/s, "
        "int8 %.1f TOP/s; launch %.1f us; host-to-device %.1f GB/s (%.1f us), device-to-host "
        "%.1f GB/s (%.1f us)\n",
        d.gpu.name, static_cast<double>(d.gpu.memory_bytes) / (1 << 30),
        d.gpu.memory_bandwidth / 1e9, d.gpu.bf16_flops / 1e12, d.gpu.f32_flops / 1e12,
        d.gpu.int8_ops / 1e12, d.gpu.launch_overhead_s * 1e6, d.link.h2d_bandwidth / 1e9,
        d.link.h2d_latency_s * 1e6, d.link.d2h_bandwidth / 1e9, d.link.d2h_latency_s * 1e6);
  }
  if (r.prediction.has_value()) {
    const PlannerPrediction& p = *r.prediction;
    absl::StrAppendFormat(&s,
                          "\nPlanner's prediction (MoE-Lightning performance model at the "
                          "engine's placement, r_w %.3f) on profile %s (%s):\n",
                          p.weights_gpu_fraction, p.profile, p.profile_source);
    absl::StrAppendFormat(&s, "  %-22s %10s %10s %9s  %s\n", "figure", "measured", "predicted",
                          "meas/pred", "bound");
    for (const PredictedFigure& f : p.figures) {
      absl::StrAppendFormat(&s, "  %-22s %10.1f %10.1f %9.3f  %s\n", f.figure, f.measured,
                            f.predicted, f.predicted > 0 ? f.measured / f.predicted : 0,
                            f.bottleneck);
    }
  }
  return s;
}

}  // namespace tandem::bench
