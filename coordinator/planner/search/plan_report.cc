#include "coordinator/planner/search/plan_report.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"

namespace tandem::planner {
namespace {

std::string Seconds(double s) {
  if (s >= 1) return absl::StrFormat("%.2f s", s);
  if (s >= 1e-3) return absl::StrFormat("%.1f ms", s * 1e3);
  return absl::StrFormat("%.0f us", s * 1e6);
}

// Mean of a per-layer fraction over the layers.
double MeanFraction(const proto::Policy& p, double (proto::LayerPolicy::*get)() const) {
  if (p.layers_size() == 0) return 0;
  double s = 0;
  for (const proto::LayerPolicy& l : p.layers()) s += (l.*get)();
  return s / p.layers_size();
}

nlohmann::json PolicyJson(const proto::Policy& p) {
  std::string text;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(p, &text, o).ok()) return nlohmann::json();
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? nlohmann::json() : j;
}

}  // namespace

std::string DescribePolicy(const proto::Policy& p) {
  std::string s = absl::StrFormat("attention on %s, FFN on %s", p.attention_on_gpu() ? "GPU" : "CPU",
                                  p.ffn_on_gpu() ? "GPU" : "CPU");
  absl::StrAppendFormat(&s, ", N=%d", p.batch_size());
  if (p.num_micro_batches() > 1) {
    absl::StrAppendFormat(&s, " (%d x %d)", p.num_micro_batches(), p.micro_batch_size());
  }
  const double gg = MeanFraction(p, &proto::LayerPolicy::gg_fraction);
  const double cg = MeanFraction(p, &proto::LayerPolicy::cg_fraction);
  const double cc = MeanFraction(p, &proto::LayerPolicy::cc_fraction);
  absl::StrAppendFormat(&s, ", FFN weights GG/CG/CC %.2f/%.2f/%.2f", gg, cg, cc);
  if (p.family() == proto::MOE_LIGHTNING) {
    absl::StrAppendFormat(&s, ", r_w=%.2f r_c=%.2f", p.weights_gpu_fraction(), p.kv_gpu_fraction());
  }
  if (p.prefill_gpu_tokens() > 0 && p.family() == proto::SCHEINFER) {
    absl::StrAppendFormat(&s, ", n_g=%d", p.prefill_gpu_tokens());
  }
  if (p.pipeline_batches() > 0) {
    absl::StrAppendFormat(&s, ", n=%d batches, %d hot experts", p.pipeline_batches(), p.hot_experts());
  }
  if (p.cache_score_alpha() > 0) {
    absl::StrAppendFormat(&s, ", expert cache alpha=%.2f", p.cache_score_alpha());
  }
  if (p.cpu_attention_sequences() > 0) {
    absl::StrAppendFormat(&s, ", %d sequences with CPU attention", p.cpu_attention_sequences());
  }
  return s;
}

std::string FormatPlanReport(const SearchResult& r, const ModelCost& model,
                             const HardwareProfile& hw, const Workload& w) {
  const proto::Policy& p = r.best.policy;
  const proto::Prediction& pr = p.prediction();
  std::string s;
  absl::StrAppendFormat(&s, "model:     %s, %.1fB parameters, %.1f GB of weights\n",
                        model.config().arch_name.empty() ? "model" : model.config().arch_name,
                        static_cast<double>(model.total_params()) / 1e9,
                        model.total_weight_bytes() / 1e9);
  if (hw.has_gpu()) {
    absl::StrAppendFormat(&s, "hardware:  %s: %d x %s %.1f GB, %s %d threads %.0f GB, PCIe %.1f GB/s\n",
                          hw.name, hw.gpu.count, hw.gpu.name, hw.gpu.memory_bytes / 1e9, hw.cpu.name,
                          hw.cpu.threads, hw.cpu.memory_bytes / 1e9, hw.link.h2d_bandwidth / 1e9);
  } else {
    absl::StrAppendFormat(&s, "hardware:  %s: no GPU, %s %d threads %.0f GB\n", hw.name,
                          hw.cpu.name, hw.cpu.threads, hw.cpu.memory_bytes / 1e9);
  }
  absl::StrAppendFormat(&s, "workload:  %s, prompt %d, generate %d",
                        w.objective == Objective::kThroughput ? "offline throughput" : "online",
                        w.prompt_len, w.gen_len);
  if (w.objective == Objective::kThroughputUnderItlSlo) {
    absl::StrAppendFormat(&s, ", inter-token latency SLO %s", Seconds(w.slo_itl_s));
  }
  absl::StrAppend(&s, "\n\n");
  absl::StrAppendFormat(&s, "policy:    %s — %s\n", FamilyName(p.family()), DescribePolicy(p));
  absl::StrAppendFormat(&s, "predicted: %.2f tokens/s; decode step %s, inter-token latency %s, prefill %s\n",
                        pr.throughput_tokens_per_s(), Seconds(pr.decode_step_seconds()),
                        Seconds(pr.inter_token_latency_seconds()), Seconds(pr.prefill_seconds()));
  absl::StrAppendFormat(&s, "bottleneck: %s", pr.bottleneck());
  if (!pr.busy_seconds().empty()) {
    absl::StrAppend(&s, " (busy per decode step:");
    for (const char* res : {"gpu", "h2d", "d2h", "cpu", "launch"}) {
      auto it = pr.busy_seconds().find(res);
      if (it != pr.busy_seconds().end()) absl::StrAppend(&s, " ", res, " ", Seconds(it->second));
    }
    absl::StrAppend(&s, ")");
  }
  absl::StrAppend(&s, "\n");
  absl::StrAppendFormat(&s, "memory:    GPU %.1f GB, CPU %.1f GB\n", pr.gpu_memory_bytes() / 1e9,
                        pr.cpu_memory_bytes() / 1e9);
  if (!p.rationale().empty()) absl::StrAppendFormat(&s, "why:       %s\n", p.rationale());
  if (!r.meets_slo) {
    absl::StrAppend(&s, "warning:   no policy meets the latency SLO; this is the lowest-latency one\n");
  }
  absl::StrAppend(&s, "\nall families:\n");
  absl::StrAppendFormat(&s, "  %-14s %12s %12s %12s %-10s %s\n", "family", "tokens/s", "ITL",
                        "prefill", "bottleneck", "policy");
  for (const FamilyOutcome& o : r.outcomes) {
    if (!o.status.ok()) {
      absl::StrAppendFormat(&s, "  %-14s %12s  %s\n", FamilyName(o.family), "-",
                            std::string(o.status.message()));
      continue;
    }
    const proto::Prediction& q = o.plan.policy.prediction();
    absl::StrAppendFormat(&s, "  %-14s %12.2f %12s %12s %-10s %s%s\n", FamilyName(o.family),
                          q.throughput_tokens_per_s(), Seconds(q.inter_token_latency_seconds()),
                          Seconds(q.prefill_seconds()), q.bottleneck(),
                          DescribePolicy(o.plan.policy), o.meets_slo ? "" : " [misses SLO]");
  }
  return s;
}

nlohmann::json PlanReportJson(const SearchResult& r, const ModelCost& model,
                              const HardwareProfile& hw, const Workload& w) {
  nlohmann::json j;
  j["model"] = {{"arch", model.config().arch_name},
                {"params", model.total_params()},
                {"weight_bytes", model.total_weight_bytes()}};
  j["hardware"] = HardwareProfileToJson(hw);
  j["workload"] = {{"objective", w.objective == Objective::kThroughput ? "offline" : "online"},
                   {"prompt_len", w.prompt_len},
                   {"max_prompt_len", w.longest_prompt()},
                   {"gen_len", w.gen_len},
                   {"slo_itl_s", w.slo_itl_s}};
  j["best"] = PolicyJson(r.best.policy);
  j["meets_slo"] = r.meets_slo;
  nlohmann::json fams = nlohmann::json::array();
  for (const FamilyOutcome& o : r.outcomes) {
    nlohmann::json f;
    f["family"] = FamilyName(o.family);
    if (o.status.ok()) {
      f["status"] = "ok";
      f["meets_slo"] = o.meets_slo;
      f["policy"] = PolicyJson(o.plan.policy);
    } else {
      f["status"] = std::string(o.status.message());
    }
    fams.push_back(std::move(f));
  }
  j["families"] = std::move(fams);
  return j;
}

}  // namespace tandem::planner
