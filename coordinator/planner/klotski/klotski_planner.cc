#include "coordinator/planner/klotski/klotski_planner.h"

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/planner/klotski/klotski_pipeline.h"

namespace tandem::planner {
namespace {

constexpr int kCandidateBatchSizes[] = {4, 8, 16, 32, 64};
constexpr int64_t kKvBlockTokens = 16;

absl::Status CheckInput(const PlanInput& in) {
  if (in.model == nullptr || in.hardware == nullptr || in.workload == nullptr) {
    return absl::InvalidArgumentError(
        "Klotski: PlanInput needs a model, hardware and workload");
  }
  TANDEM_RETURN_IF_ERROR(in.workload->Validate());
  if (!in.hardware->has_gpu()) {
    return absl::FailedPreconditionError(
        "Klotski: runs everything on a GPU; the profile has none");
  }
  return absl::OkStatus();
}

int HotExperts(const ModelCost& m, const KlotskiOptions& o) {
  return o.hot_experts > 0 ? o.hot_experts
                           : static_cast<int>(m.config().num_experts_per_tok);
}

// One candidate, planned and simulated.
struct Candidate {
  KlotskiSolution solution;
  FamilyPlan plan;
};

absl::StatusOr<Candidate> PlanCandidate(const PlanInput& in,
                                        const KlotskiOptions& o, int bs) {
  const ModelCost& m = *in.model;
  const Workload& w = *in.workload;
  Candidate cand;
  TANDEM_ASSIGN_OR_RETURN(cand.solution, SolveKlotskiGroup(in, o, bs));
  const KlotskiSolution& s = cand.solution;

  TANDEM_ASSIGN_OR_RETURN(StepGraph prefill_graph,
                          BuildKlotskiStep(s.prefill, o.cold_buffers));
  TANDEM_ASSIGN_OR_RETURN(SimResult prefill_sim, Simulate(prefill_graph));
  TANDEM_ASSIGN_OR_RETURN(cand.plan.decode_step,
                          BuildKlotskiStep(s.decode, o.cold_buffers));
  TANDEM_ASSIGN_OR_RETURN(cand.plan.decode_sim,
                          Simulate(cand.plan.decode_step));
  const SimResult& sim = cand.plan.decode_sim;

  proto::Policy& p = cand.plan.policy;
  p.set_family(proto::KLOTSKI);
  const int64_t sequences = static_cast<int64_t>(s.n) * s.bs;
  p.set_batch_size(sequences);
  p.set_micro_batch_size(s.bs);
  p.set_num_micro_batches(s.n);
  p.set_pipeline_batches(s.n);
  p.set_hot_experts(s.decode.hot_experts);
  // The prefetcher works one layer ahead: the next layer's attention during
  // this layer's experts, the gate and hot experts during its attention.
  p.set_prefetch_depth(1);
  p.set_attention_on_gpu(true);
  p.set_ffn_on_gpu(true);
  p.set_weights_gpu_fraction(s.memory.gpu_resident_weights /
                             m.total_weight_bytes());
  p.set_kv_gpu_fraction(s.memory.placement.kv_on_gpu ? 1.0 : 0.0);
  p.set_kv_block_tokens(kKvBlockTokens);
  const int64_t kv_blocks =
      sequences *
      ((w.longest_prompt() + w.gen_len + kKvBlockTokens - 1) / kKvBlockTokens);
  p.set_gpu_kv_blocks(s.memory.placement.kv_on_gpu ? kv_blocks : 0);
  p.set_cpu_kv_blocks(s.memory.placement.kv_on_gpu ? 0 : kv_blocks);
  p.set_prefill_token_budget(static_cast<int64_t>(s.bs) * w.longest_prompt());
  p.set_prefill_gpu_tokens(static_cast<int64_t>(s.bs) * w.longest_prompt());
  for (int64_t l = 0; l < m.config().num_layers; ++l) {
    proto::LayerPolicy* lp = p.add_layers();
    lp->set_layer(static_cast<int32_t>(l));
    lp->set_attention_device(proto::GPU);
    lp->set_attention_weights_on_gpu(s.memory.placement.attention_resident);
    // Every routed expert lives on the host and is streamed to the GPU.
    lp->set_cg_fraction(1.0);
  }

  proto::Prediction* pred = p.mutable_prediction();
  const double decode_s = sim.makespan_s;
  const double prefill_s = prefill_sim.makespan_s;
  const double gen = static_cast<double>(w.gen_len);
  pred->set_decode_step_seconds(decode_s);
  // Every token waits for all n batches.
  pred->set_inter_token_latency_seconds(decode_s);
  pred->set_prefill_seconds(prefill_s);
  pred->set_throughput_tokens_per_s(static_cast<double>(sequences) * gen /
                                    (prefill_s + gen * decode_s));
  pred->set_bottleneck(std::string(ResourceName(sim.bottleneck())));
  pred->set_gpu_memory_bytes(
      static_cast<int64_t>(std::llround(s.memory.gpu_total())));
  pred->set_cpu_memory_bytes(
      static_cast<int64_t>(std::llround(s.memory.host_total())));
  for (int r = 0; r < kNumResources; ++r) {
    const double busy = sim.busy_s[r];
    if (busy > 0) {
      const std::string name(ResourceName(static_cast<Resource>(r)));
      (*pred->mutable_busy_seconds())[name] = busy;
    }
  }
  p.set_rationale(absl::StrFormat(
      "Klotski bs=%d n=%d K=%d: %s; KV on %s, attention %s; the GPU "
      "computes %.1f%% of the decode step, bound by %s",
      s.bs, s.n, s.decode.hot_experts,
      s.bubble_free ? "smallest n meeting deadlines (I)-(IV)"
                    : absl::StrCat("memory caps n before the deadlines hold (",
                                   s.decode_check.FirstFailure(), ")"),
      s.memory.placement.kv_on_gpu ? "GPU" : "host",
      s.memory.placement.attention_resident ? "resident" : "streamed",
      decode_s > 0 ? 100.0 * sim.busy(Resource::kGpu) / decode_s : 0.0,
      ResourceName(sim.bottleneck())));
  return cand;
}

}  // namespace

absl::StatusOr<KlotskiSolution> SolveKlotskiGroup(const PlanInput& in,
                                                  const KlotskiOptions& o,
                                                  int bs) {
  TANDEM_RETURN_IF_ERROR(CheckInput(in));
  if (bs < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Klotski: bs must be >= 1, got ", bs));
  }
  if (o.cold_buffers < 1 || o.max_groups < 1) {
    return absl::InvalidArgumentError(
        "Klotski: cold_buffers and max_groups must be >= 1");
  }
  const ModelCost& m = *in.model;
  const HardwareProfile& hw = *in.hardware;
  const Workload& w = *in.workload;
  const int hot = HotExperts(m, o);

  auto solve_at =
      [&](int n, const KlotskiMemory& mem) -> absl::StatusOr<KlotskiSolution> {
    KlotskiSolution s;
    s.bs = bs;
    s.n = n;
    s.memory = mem;
    TANDEM_ASSIGN_OR_RETURN(
        s.decode, KlotskiCostsFor(m, hw, w, KlotskiPhase::kDecode, bs, n,
                                  mem.placement, hot));
    TANDEM_ASSIGN_OR_RETURN(
        s.prefill, KlotskiCostsFor(m, hw, w, KlotskiPhase::kPrefill, bs, n,
                                   mem.placement, hot));
    TANDEM_ASSIGN_OR_RETURN(
        s.decode_check, CheckKlotskiInequalities(ToLayerTimes(s.decode), n));
    TANDEM_ASSIGN_OR_RETURN(
        s.prefill_check, CheckKlotskiInequalities(ToLayerTimes(s.prefill), n));
    s.bubble_free = s.decode_check.all() && s.prefill_check.all();
    return s;
  };

  std::optional<KlotskiSolution> largest_fitting;
  std::string first_misfit;
  for (int n = 1; n <= o.max_groups; ++n) {
    if (w.max_batch > 0 && static_cast<int64_t>(n) * bs > w.max_batch) break;
    const KlotskiMemory mem = KlotskiMemoryFor(m, hw, w, o, bs, n);
    // Memory grows with n in every placement, so the first misfit ends the
    // search.
    if (!mem.fits) {
      first_misfit = absl::StrCat("n=", n, ": ", mem.ToString());
      break;
    }
    TANDEM_ASSIGN_OR_RETURN(KlotskiSolution s, solve_at(n, mem));
    if (s.bubble_free) return s;
    largest_fitting = std::move(s);
  }
  if (!largest_fitting.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Klotski: no group of batches of ", bs, " fits",
                     first_misfit.empty() ? std::string(" (max_batch below bs)")
                                          : absl::StrCat(": ", first_misfit)));
  }
  return *std::move(largest_fitting);
}

absl::StatusOr<FamilyPlan> PlanKlotski(const PlanInput& in,
                                       const KlotskiOptions& o) {
  TANDEM_RETURN_IF_ERROR(CheckInput(in));
  const Workload& w = *in.workload;
  std::vector<int> sizes;
  if (o.per_batch_size > 0) {
    sizes.push_back(o.per_batch_size);
  } else {
    for (int bs : kCandidateBatchSizes) {
      if (w.max_batch == 0 || bs <= w.max_batch) sizes.push_back(bs);
    }
    if (sizes.empty()) sizes.push_back(static_cast<int>(w.max_batch));
  }

  std::optional<Candidate> best;
  std::string why_not;
  for (int bs : sizes) {
    absl::StatusOr<Candidate> cand = PlanCandidate(in, o, bs);
    if (!cand.ok()) {
      if (cand.status().code() != absl::StatusCode::kFailedPrecondition) {
        return cand.status();
      }
      why_not = std::string(cand.status().message());
      continue;
    }
    const proto::Prediction& pred = cand->plan.policy.prediction();
    if (w.objective == Objective::kThroughputUnderItlSlo &&
        pred.inter_token_latency_seconds() > w.slo_itl_s) {
      why_not = absl::StrFormat(
          "Klotski bs=%d n=%d: decode step %.3f s exceeds the ITL SLO %.3f s",
          bs, cand->solution.n, pred.inter_token_latency_seconds(),
          w.slo_itl_s);
      continue;
    }
    if (!best.has_value() ||
        pred.throughput_tokens_per_s() >
            best->plan.policy.prediction().throughput_tokens_per_s()) {
      best = *std::move(cand);
    }
  }
  if (!best.has_value()) return absl::FailedPreconditionError(why_not);
  return std::move(best->plan);
}

absl::StatusOr<FamilyPlan> PlanKlotski(const PlanInput& in) {
  return PlanKlotski(in, KlotskiOptions{});
}

}  // namespace tandem::planner
