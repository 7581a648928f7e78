#include "cli/bench_command.h"

#include <omp.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/bench_prediction.h"
#include "cli/flag_sources.h"
#include "common/hardware_profile.h"
#include "common/status_macros.h"
#include "gpu_worker/bench/bench_runner.h"
#include "gpu_worker/device_spec.h"

namespace tandem::cli {
namespace {

absl::StatusOr<DType> SyntheticDType(const std::string& s) {
  if (s.empty() || s == "bf16") return DType::kBF16;
  if (s == "f32") return DType::kF32;
  if (s == "f16") return DType::kF16;
  if (s == "q8_0") return DType::kQ8_0;
  if (s == "q4_0") return DType::kQ4_0;
  return absl::InvalidArgumentError("--dtype for a synthetic model: f32, bf16, f16, q8_0 or q4_0");
}

// Flags given as non-zero replace the kind's default shape.
void Override(int64_t flag, int64_t* field) {
  if (flag > 0) *field = flag;
}

absl::StatusOr<bench::BenchOptions> ToOptions(const BenchCommandOptions& c) {
  if (c.model.empty() == c.synthetic.empty()) {
    return absl::InvalidArgumentError("give exactly one of --model and --synthetic");
  }
  if (c.repeats <= 0 || c.warmup < 0 || c.threads < 0) {
    return absl::InvalidArgumentError("--repeats must be > 0, --warmup and --threads >= 0");
  }
  if (c.bandwidth_mib <= 0 || c.attn_mib < 0 || c.gemm_size <= 0 || c.gemm_size % 32 != 0) {
    return absl::InvalidArgumentError(
        "--bandwidth-mib must be > 0, --attn-mib >= 0, --gemm-size a positive multiple of 32");
  }
  // Checked before the minutes of measuring and writing a model that a bad
  // list entry would otherwise fail after.
  for (const auto& [flag, values] :
       {std::pair<const char*, const std::vector<int64_t>*>{"--pp", &c.pp},
        {"--batches", &c.batches},
        {"--attn-contexts", &c.attn_contexts}}) {
    for (int64_t v : *values) {
      if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(flag, " values must be > 0"));
    }
  }
  if (c.context <= 0 || c.tg_tokens <= 0 || c.decode_steps <= 0) {
    return absl::InvalidArgumentError("--context, --tg-tokens and --decode-steps must be > 0");
  }
  bench::BenchOptions o;
  if (!c.synthetic.empty()) {
    if (c.synthetic != "dense" && c.synthetic != "moe") {
      return absl::InvalidArgumentError("--synthetic must be dense or moe");
    }
    bench::SyntheticModelSpec s = c.synthetic == "moe" ? bench::MoeSpec() : bench::DenseSpec();
    TANDEM_ASSIGN_OR_RETURN(s.dtype, SyntheticDType(c.dtype));
    Override(c.hidden, &s.hidden_size);
    Override(c.layers, &s.num_layers);
    Override(c.intermediate, &s.intermediate_size);
    Override(c.heads, &s.num_heads);
    Override(c.kv_heads, &s.num_kv_heads);
    Override(c.vocab, &s.vocab_size);
    if (s.moe) {
      Override(c.experts, &s.num_experts);
      Override(c.top_k, &s.experts_per_tok);
    } else if (c.experts > 0 || c.top_k > 0) {
      return absl::InvalidArgumentError("--experts and --top-k are for --synthetic moe");
    }
    s.seed = c.seed;
    o.synthetic = s;
    // A quantized model is benchmarked on its quantized kernels.
    if (DTypeIsQuantized(s.dtype)) o.compute = ops::ComputeType::kQuantized;
  } else {
    o.model_path = c.model;
    if (c.dtype == "f32") {
      o.compute = ops::ComputeType::kF32;
    } else if (c.dtype == "quantized") {
      o.compute = ops::ComputeType::kQuantized;
    } else if (!c.dtype.empty() && c.dtype != "auto" && c.dtype != "bf16") {
      return absl::InvalidArgumentError("--dtype with --model: auto, bf16, f32 or quantized");
    }
  }
  o.device_name = c.device;  // its factory: Run()
  if (!(c.gpu_memory_budget_gb >= 0)) {
    return absl::InvalidArgumentError("--gpu-memory-budget must be >= 0 GB");
  }
  o.weight_budget_bytes = static_cast<int64_t>(c.gpu_memory_budget_gb * 1e9);  // as serve
  o.repeats = c.repeats;
  o.warmup = c.warmup;
  o.bandwidth_bytes = c.bandwidth_mib << 20;
  o.gemm_size = c.gemm_size;
  o.engine.pp_tokens = c.pp;
  o.engine.batches = c.batches;
  o.engine.context = c.context;
  o.engine.tg_tokens = c.tg_tokens;
  o.engine.decode_steps = c.decode_steps;
  o.attention.contexts = c.attn_contexts;
  o.attention.min_bytes = c.attn_mib << 20;
  o.progress = [](const std::string& s) { std::fprintf(stderr, "tandem bench: %s\n", s.c_str()); };
  return o;
}

absl::Status Run(const BenchCommandOptions& c) {
  TANDEM_ASSIGN_OR_RETURN(bench::BenchOptions o, ToOptions(c));
  TANDEM_ASSIGN_OR_RETURN(WorkerDevice device, WorkerDeviceFor(c.device));
  o.device = device.make;
  // A profile given is read now: a bad file fails before minutes of runs.
  std::optional<HardwareProfile> given;
  if (!c.hardware.empty()) {
    TANDEM_ASSIGN_OR_RETURN(given, LoadHardwareProfile(c.hardware));
    if (!given->has_gpu()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--hardware ", c.hardware, ": the profile has no GPU to predict the engine on"));
    }
  }
  if (c.threads > 0) omp_set_num_threads(c.threads);
  TANDEM_ASSIGN_OR_RETURN(bench::BenchReport r, bench::RunBench(o));
  // The device's own figures, measured once the engine has given its
  // memory back.
  if (device.measure != nullptr) {
    o.progress("measuring the device: HBM, PCIe, GEMM peaks");
    HardwareProfile d;
    TANDEM_RETURN_IF_ERROR(device.measure(&d));
    r.device_profile = d;
  }
  if (given.has_value()) {
    TANDEM_ASSIGN_OR_RETURN(r.prediction, PredictBenchFigures(r, *given));
  } else if (r.device_profile.has_value()) {
    TANDEM_ASSIGN_OR_RETURN(r.prediction,
                            PredictBenchFigures(r, BenchMachineProfile(r, *r.device_profile)));
  }
  if (!c.json_file.empty()) {
    std::ofstream f(c.json_file);
    f << bench::ReportJson(r).dump(2) << "\n";
    if (!f.good()) return absl::InternalError(c.json_file + ": cannot write the JSON report");
  }
  if (c.json) {
    std::cout << bench::ReportJson(r).dump(2) << std::endl;
  } else {
    std::cout << bench::ReportTable(r) << std::flush;
  }
  return absl::OkStatus();
}

}  // namespace

CLI::App* AddBenchCommand(CLI::App& app, BenchCommandOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "bench", "Benchmark the machine and the CPU engine on a model, against rooflines");
  cmd->add_option("--model,-m", o.model, "Model: a Hugging Face directory or a .gguf file");
  cmd->add_option("--synthetic", o.synthetic,
                  "Write a random model to a temporary directory instead: dense (~LLaMA-1B) or "
                  "moe (8 experts top-2, ~0.64B)");
  cmd->add_option("--dtype", o.dtype,
                  "Synthetic weights: f32, bf16 (default), f16, q8_0, q4_0 (computed on the "
                  "quantized kernels); with --model the GEMM dtype as for generate: auto, bf16, "
                  "f32, quantized (GGUF blocks computed in place)");
  cmd->add_option("--hidden", o.hidden, "Synthetic: hidden size");
  cmd->add_option("--layers", o.layers, "Synthetic: layers");
  cmd->add_option("--intermediate", o.intermediate, "Synthetic: MLP (per-expert for moe) width");
  cmd->add_option("--heads", o.heads, "Synthetic: attention heads");
  cmd->add_option("--kv-heads", o.kv_heads, "Synthetic: key/value heads");
  cmd->add_option("--vocab", o.vocab, "Synthetic: vocabulary size");
  cmd->add_option("--experts", o.experts, "Synthetic moe: experts per layer");
  cmd->add_option("--top-k", o.top_k, "Synthetic moe: experts per token");
  cmd->add_option("--seed", o.seed, "Synthetic: weight seed")->capture_default_str();
  cmd->add_option("--device", o.device,
                  "The engine's device: host (CPU kernels), cuda or cuda:N (builds with CUDA)")
      ->capture_default_str();
  cmd->add_option("--gpu-memory-budget", o.gpu_memory_budget_gb,
                  "GB of weights the device keeps resident; the FFN weights past it are streamed "
                  "from host memory (0: all resident)");
  cmd->add_option("--hardware", o.hardware,
                  "Hardware profile (JSON, as tandem plan takes) to predict the engine's figures "
                  "on; by default a GPU device's own measured figures");
  cmd->add_option("--repeats", o.repeats, "Timed runs per figure (median, min, max)")
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed runs before each figure")->capture_default_str();
  cmd->add_option("--threads", o.threads, "OpenMP threads; 0 = all cores")->capture_default_str();
  cmd->add_option("--pp", o.pp, "Prompt lengths for prompt processing")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--batches", o.batches, "Batch sizes for batched decode")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--attn-contexts", o.attn_contexts, "Context lengths for CPU attention alone")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--context", o.context, "Tokens in each sequence for tg and batched decode")
      ->capture_default_str();
  cmd->add_option("--tg-tokens", o.tg_tokens, "Tokens generated per tg run")->capture_default_str();
  cmd->add_option("--decode-steps", o.decode_steps, "Decode steps per timed batched-decode run")
      ->capture_default_str();
  cmd->add_option("--bandwidth-mib", o.bandwidth_mib, "Buffer of the bandwidth sweep (MiB)")
      ->capture_default_str();
  cmd->add_option("--attn-mib", o.attn_mib,
                  "KV bytes (MiB) attention alone reads per pass, at least (sets the sequences)")
      ->capture_default_str();
  cmd->add_option("--gemm-size", o.gemm_size, "M = N = K of the GEMM peaks")->capture_default_str();
  cmd->add_flag("--json", o.json, "Print the report as JSON");
  cmd->add_option("--json-file", o.json_file, "Also write the JSON report to this file");
  return cmd;
}

int RunBench(const BenchCommandOptions& opts) {
  const absl::Status s = Run(opts);
  if (!s.ok()) {
    PrintCommandError("tandem bench", s);
    return 1;
  }
  return 0;
}

}  // namespace tandem::cli
