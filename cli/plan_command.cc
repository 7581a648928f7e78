#include "cli/plan_command.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/flag_sources.h"
#include "common/checkpoint.h"
#include "common/hardware_profile.h"
#include "common/json_util.h"
#include "common/model_config.h"
#include "common/status_macros.h"
#include "common/tensor_names.h"
#include "coordinator/planner/cost/model_cost.h"
#include "coordinator/planner/search/plan_report.h"
#include "coordinator/planner/search/policy_search.h"
#include "cpu_worker/perf/host_profile.h"

namespace tandem::cli {
namespace {

absl::StatusOr<double> BytesPerElement(const std::string& name) {
  if (name == "bf16" || name == "fp16" || name == "f16") return 2.0;
  if (name == "f32") return 4.0;
  if (name == "int8" || name == "q8_0") return 34.0 / 32;  // GGUF Q8_0 block: 32 int8 + f16 scale
  if (name == "int4" || name == "q4_0") return 18.0 / 32;  // Q4_0: 32 nibbles + f16 scale
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (bf16, fp16, f32, int8, int4)"));
}

struct LoadedModel {
  ModelConfig config;
  double weight_bytes_per_element = 2;
};

// A config.json alone describes the shape (bf16 weights unless told);
// a checkpoint also says how its weights are stored.
absl::StatusOr<LoadedModel> LoadModel(const std::string& path) {
  LoadedModel m;
  if (absl::EndsWith(path, ".json")) {
    TANDEM_ASSIGN_OR_RETURN(nlohmann::json j, json_util::ReadFile(path));
    TANDEM_ASSIGN_OR_RETURN(m.config, ModelConfigFromHfJson(j, path));
    return m;
  }
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(path));
  m.config = ckpt->config();
  // Described only: a GGUF k-quant tensor is not converted for its dtype.
  absl::StatusOr<TensorView> t = m.config.IsMoeLayer(0)
                                     ? ckpt->DescribeExpertTensor(ExpertBase(0, "up"), 0)
                                     : ckpt->DescribeTensor("blk.0.ffn_up.weight");
  if (t.ok()) {
    m.weight_bytes_per_element = static_cast<double>(DTypeBlockBytes(t->dtype)) /
                                 static_cast<double>(DTypeBlockElems(t->dtype));
  }
  return m;
}

absl::Status Run(const PlanCommandOptions& o) {
  if (o.model.empty()) return absl::InvalidArgumentError("--model is required");
  planner::Workload w;
  if (o.workload == "offline") {
    w.objective = planner::Objective::kThroughput;
  } else if (o.workload == "online") {
    w.objective = planner::Objective::kThroughputUnderItlSlo;
    if (!(o.slo_itl_ms > 0)) {
      return absl::InvalidArgumentError("--workload online needs --slo-itl-ms > 0");
    }
  } else {
    return absl::InvalidArgumentError("--workload must be offline or online");
  }
  w.prompt_len = o.prompt_len;
  w.max_prompt_len = o.max_prompt_len;
  w.gen_len = o.gen_len;
  w.slo_itl_s = o.slo_itl_ms / 1e3;
  w.max_batch = o.max_batch;
  TANDEM_RETURN_IF_ERROR(w.Validate());
  if (o.gpu_memory_budget_gb < 0) {
    return absl::InvalidArgumentError("--gpu-memory-budget must be >= 0");
  }

  TANDEM_ASSIGN_OR_RETURN(LoadedModel lm, LoadModel(o.model));
  planner::CostOptions co;
  co.weight_bytes_per_element = lm.weight_bytes_per_element;
  if (o.weight_dtype != "auto") {
    TANDEM_ASSIGN_OR_RETURN(co.weight_bytes_per_element, BytesPerElement(o.weight_dtype));
  }
  TANDEM_ASSIGN_OR_RETURN(co.kv_bytes_per_element, BytesPerElement(o.kv_dtype));
  TANDEM_ASSIGN_OR_RETURN(planner::ModelCost model, planner::ModelCost::Create(lm.config, co));

  HardwareProfile hw;
  if (o.hardware == "host") {
    TANDEM_ASSIGN_OR_RETURN(hw, perf::LoadOrMeasureHostProfile());
  } else {
    TANDEM_ASSIGN_OR_RETURN(hw, LoadHardwareProfile(o.hardware));
  }
  planner::SearchOptions so;
  so.gpu_memory_budget_bytes = static_cast<int64_t>(o.gpu_memory_budget_gb * 1e9);
  TANDEM_ASSIGN_OR_RETURN(planner::SearchResult r, planner::SearchPolicy(model, hw, w, so));

  if (!o.trace.empty()) {
    std::ofstream out(o.trace, std::ios::binary | std::ios::trunc);
    out << planner::ChromeTraceJson(r.best.decode_step, r.best.decode_sim);
    if (!out.good()) return absl::PermissionDeniedError(absl::StrCat(o.trace, ": cannot write"));
  }
  if (o.json) {
    std::printf("%s\n", planner::PlanReportJson(r, model, hw, w).dump(2).c_str());
  } else {
    std::printf("%s", planner::FormatPlanReport(r, model, hw, w).c_str());
    if (!o.trace.empty()) std::printf("\ntrace of one decode step: %s\n", o.trace.c_str());
  }
  return absl::OkStatus();
}

}  // namespace

CLI::App* AddPlanCommand(CLI::App& app, PlanCommandOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "plan", "Search the execution policy for a model on a machine and a workload");
  cmd->add_option("--model", o.model, "HF model directory, .gguf file, or a config.json")->required();
  cmd->add_option("--hardware", o.hardware,
                  "Hardware profile JSON (see coordinator/planner/profiles/), or 'host' to measure this machine (cached)")
      ->capture_default_str();
  cmd->add_option("--workload", o.workload, "offline (throughput) or online (throughput under --slo-itl-ms)")
      ->capture_default_str();
  cmd->add_option("--prompt-len", o.prompt_len, "Average prompt tokens")->required();
  cmd->add_option("--max-prompt-len", o.max_prompt_len, "Longest prompt (default: --prompt-len)");
  cmd->add_option("--gen-len", o.gen_len, "Generated tokens per request")->required();
  cmd->add_option("--slo-itl-ms", o.slo_itl_ms, "Inter-token latency SLO in ms (online)");
  cmd->add_option("--gpu-memory-budget", o.gpu_memory_budget_gb, "Cap on each GPU's memory, GB");
  cmd->add_option("--max-batch", o.max_batch, "Most requests available at once (default: unbounded)");
  cmd->add_option("--weight-dtype", o.weight_dtype, "auto (the checkpoint's), bf16, fp16, f32, int8, int4")
      ->capture_default_str();
  cmd->add_option("--kv-dtype", o.kv_dtype, "KV cache element type: fp16, bf16, f32, int8, int4")
      ->capture_default_str();
  cmd->add_flag("--json", o.json, "Print the result as JSON");
  cmd->add_option("--trace", o.trace, "Write the chosen policy's decode step as Chrome-trace JSON");
  return cmd;
}

int RunPlan(const PlanCommandOptions& o) {
  const absl::Status s = Run(o);
  if (!s.ok()) {
    PrintCommandError("tandem plan", s);
    return 1;
  }
  return 0;
}

}  // namespace tandem::cli
