// The engine's mixture-of-experts step: route the tokens, decide where each
// activated expert runs (the expert cache's plan, or the placement the
// expert offload claims), send the CPU's experts to the offload first so it
// works while the device runs its own, then add the offload's results.
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gpu_worker/engine/engine.h"

namespace tandem {

// Routed experts (+ the shared expert): reads h_, writes out_. Each expert
// runs once over all the tokens routed to it.
absl::Status Engine::Moe(int64_t layer, const LayerWeights& lw, int64_t rows) {
  MoeRoute& route = moe_route_;  // its vectors keep their capacity from step to step
  TANDEM_RETURN_IF_ERROR(RouteMoe(layer, lw, rows, route));
  TANDEM_RETURN_IF_ERROR(SubmitRemoteExperts(layer, route));
  TANDEM_RETURN_IF_ERROR(RunLocalExperts(layer, lw, rows, route));
  if (lw.has_shared_expert) {
    const int64_t hidden = config().hidden_size;
    TANDEM_RETURN_IF_ERROR(Grow(ex_out_, rows * hidden));
    TANDEM_RETURN_IF_ERROR(
        dev_->Mlp(lw.shared, FfnIn(), rows, ex_out_.data()));
    TANDEM_RETURN_IF_ERROR(dev_->SigmoidGateAdd(ex_out_.data(), FfnIn(),
                                                lw.shared_gate.data(), rows,
                                                hidden, FfnOut()));
  }
  return CollectRemoteExperts(layer, route);
}

absl::Status Engine::RouteMoe(int64_t layer, const LayerWeights& lw,
                              int64_t rows, MoeRoute& route) {
  const ModelConfig& c = config();
  const int64_t experts = c.num_experts, k = c.num_experts_per_tok;
  TANDEM_RETURN_IF_ERROR(Grow(router_logits_, rows * experts));
  route_ids_.resize(static_cast<size_t>(rows * k));
  if (static_cast<int64_t>(route_w_.size()) < rows * k) {
    route_w_.resize(static_cast<size_t>(rows * k));
  }
  TANDEM_RETURN_IF_ERROR(
      dev_->Linear(FfnIn(), rows, lw.router, nullptr, router_logits_.data()));
  TANDEM_RETURN_IF_ERROR(dev_->RouteTopK(router_logits_.data(), rows, experts,
                                         k, c.norm_topk_prob, route_ids_.data(),
                                         route_w_.data()));
  route.tokens.resize(static_cast<size_t>(experts));
  route.weights.resize(static_cast<size_t>(experts));
  for (auto& t : route.tokens) t.clear();
  for (auto& w : route.weights) w.clear();
  route.local_order.clear();
  route.jobs.clear();
  route.remote_rows.clear();
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const size_t r = static_cast<size_t>(t * k + j);
      route.tokens[static_cast<size_t>(route_ids_[r])].push_back(t);
      route.weights[static_cast<size_t>(route_ids_[r])].push_back(route_w_[r]);
    }
  }
  route.on_cpu.assign(static_cast<size_t>(experts), 0);
  if (cache_ != nullptr) {
    const size_t routed = static_cast<size_t>(rows * k);
    TANDEM_ASSIGN_OR_RETURN(
        route.plan, cache_->Plan(static_cast<int>(layer),
                                 absl::MakeConstSpan(route_ids_.data(), routed),
                                 absl::MakeConstSpan(route_w_.data(), routed),
                                 static_cast<int>(k)));
    for (int e : route.plan.cpu) route.on_cpu[static_cast<size_t>(e)] = 1;
    route.local_order = route.plan.gpu_hits;
    route.local_order.insert(route.local_order.end(),
                             route.plan.gpu_loads.begin(),
                             route.plan.gpu_loads.end());
    return absl::OkStatus();
  }
  for (int64_t e = 0; e < experts; ++e) {
    // Asked only of experts with tokens (bench/expert_usage.h relies on it).
    if (route.tokens[static_cast<size_t>(e)].empty()) continue;
    if (offload_ != nullptr && offload_->IsRemote(layer, e)) {
      route.on_cpu[static_cast<size_t>(e)] = 1;
    } else {
      route.local_order.push_back(static_cast<int>(e));
    }
  }
  return absl::OkStatus();
}

// The offload's experts: their rows gathered into one host buffer and
// submitted, so the offload works while the device runs the local experts
// (on a GPU the device's ops are queued, so both sides truly run at once).
absl::Status Engine::SubmitRemoteExperts(int64_t layer, MoeRoute& route) {
  if (offload_ == nullptr) return absl::OkStatus();
  const int64_t hidden = config().hidden_size;
  for (size_t e = 0; e < route.tokens.size(); ++e) {
    if (route.on_cpu[e] == 0 || route.tokens[e].empty()) continue;
    route.remote_rows.insert(route.remote_rows.end(), route.tokens[e].begin(),
                             route.tokens[e].end());
  }
  const int64_t total = static_cast<int64_t>(route.remote_rows.size());
  if (total == 0) return absl::OkStatus();
  if (static_cast<int64_t>(remote_in_.size()) < total * hidden) {
    remote_in_.resize(static_cast<size_t>(total * hidden));
  }
  if (static_cast<int64_t>(remote_out_.size()) < total * hidden) {
    remote_out_.resize(static_cast<size_t>(total * hidden));
  }
  int64_t at = 0;
  for (size_t e = 0; e < route.tokens.size(); ++e) {
    if (route.on_cpu[e] == 0 || route.tokens[e].empty()) continue;
    ExpertJob job;
    job.expert = static_cast<int32_t>(e);
    job.rows = static_cast<int64_t>(route.tokens[e].size());
    job.input = remote_in_.data() + at * hidden;
    job.output = remote_out_.data() + at * hidden;
    at += job.rows;
    route.jobs.push_back(job);
  }
  if (dev_->host_memory()) {
    TANDEM_RETURN_IF_ERROR(dev_->GatherRows(
        FfnIn(), hidden, route.remote_rows.data(), total, remote_in_.data()));
  } else {
    TANDEM_RETURN_IF_ERROR(Grow(remote_dev_, total * hidden));
    TANDEM_RETURN_IF_ERROR(dev_->GatherRows(FfnIn(), hidden,
                                            route.remote_rows.data(), total,
                                            remote_dev_.data()));
    TANDEM_RETURN_IF_ERROR(dev_->CopyToHost(
        remote_dev_.data(), static_cast<size_t>(total * hidden) * sizeof(float),
        remote_in_.data()));
  }
  return offload_->Submit(layer, route.jobs);
}

// The device's experts. Without the expert cache they are all resident and
// run in one RunExperts call, which a GPU batches into grouped GEMMs. With
// it, the cache hits run together first; each loaded expert then runs on
// its own once its copy is issued, so the GPU computes one while the next
// is still crossing the link (the loads' order is the plan's).
absl::Status Engine::RunLocalExperts(int64_t layer, const LayerWeights& lw,
                                     int64_t rows, MoeRoute& route) {
  const int64_t hidden = config().hidden_size;
  TANDEM_RETURN_IF_ERROR(dev_->Zero(FfnOut(), rows * hidden));
  const size_t count = route.local_order.size();
  const size_t hits = cache_ != nullptr ? route.plan.gpu_hits.size() : count;
  std::vector<ops::MlpWeights>& cached = route.cached;
  std::vector<ExpertRun>& runs = route.runs;
  cached.resize(cache_ != nullptr ? count : 0);
  runs.clear();
  for (size_t i = 0; i < count; ++i) {
    const int e = route.local_order[i];
    const ops::MlpWeights* w = &lw.experts[static_cast<size_t>(e)];
    if (cache_ != nullptr) {
      if (i == hits && !runs.empty()) {
        TANDEM_RETURN_IF_ERROR(dev_->RunExperts(FfnIn(), hidden, runs, FfnOut()));
        runs.clear();
      }
      TANDEM_ASSIGN_OR_RETURN(cached[i], i < hits ? cache_->Weights(layer, e)
                                                  : cache_->Load(layer, e));
      w = &cached[i];
    } else if (w->gate.rows() == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "expert ", e, " of layer ", layer,
          " is not loaded here and the expert offload does not claim it"));
    }
    const std::vector<int64_t>& toks = route.tokens[static_cast<size_t>(e)];
    runs.push_back({w, toks.data(), route.weights[static_cast<size_t>(e)].data(),
                    static_cast<int64_t>(toks.size())});
    if (i >= hits) {
      TANDEM_RETURN_IF_ERROR(dev_->RunExperts(FfnIn(), hidden, runs, FfnOut()));
      runs.clear();
    }
  }
  if (!runs.empty()) {
    TANDEM_RETURN_IF_ERROR(dev_->RunExperts(FfnIn(), hidden, runs, FfnOut()));
  }
  if (cache_ != nullptr) TANDEM_RETURN_IF_ERROR(cache_->Finish(route.plan));
  return absl::OkStatus();
}

// The offload's results go up to the device, then each job's rows are added
// in: remote contributions last, so the sum equals the all-local one up to
// the rounding of a different order of additions.
absl::Status Engine::CollectRemoteExperts(int64_t layer,
                                          const MoeRoute& route) {
  if (route.jobs.empty()) return absl::OkStatus();
  const int64_t hidden = config().hidden_size;
  TANDEM_RETURN_IF_ERROR(offload_->Collect(layer, route.jobs));
  const float* results = remote_out_.data();
  if (!dev_->host_memory()) {
    TANDEM_RETURN_IF_ERROR(dev_->CopyToDevice(
        remote_out_.data(),
        route.remote_rows.size() * static_cast<size_t>(hidden) * sizeof(float),
        remote_dev_.data()));
    results = remote_dev_.data();
  }
  for (const ExpertJob& job : route.jobs) {
    const size_t e = static_cast<size_t>(job.expert);
    TANDEM_RETURN_IF_ERROR(
        dev_->ScatterAddRows(results + (job.output - remote_out_.data()),
                             hidden, route.tokens[e].data(),
                             route.weights[e].data(), job.rows, FfnOut()));
  }
  return absl::OkStatus();
}

}  // namespace tandem
