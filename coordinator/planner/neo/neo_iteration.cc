#include "coordinator/planner/neo/neo_iteration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::neo {
namespace {

// Evaluates the cost functions on sub-batches, failing on a bad figure.
class Evaluator {
 public:
  explicit Evaluator(const IterationCosts& c) : c_(c) {}

  // Recomputes the times of `b` from its counts.
  absl::Status Refresh(SubBatch& b, double prefill_attention_s) {
    b.linear_s =
        b.tokens > 0 ? Check(c_.gpu_linear_s(b.tokens), "GPU linear") : 0;
    const int64_t gpu_decodes = static_cast<int64_t>(b.gpu_decode_ids.size());
    b.gpu_attention_s =
        prefill_attention_s +
        (gpu_decodes > 0
             ? Check(c_.gpu_decode_attention_s(gpu_decodes, b.gpu_context),
                     "GPU attention")
             : 0);
    const int64_t cpu_decodes = static_cast<int64_t>(b.cpu_decode_ids.size());
    b.cpu_attention_s =
        cpu_decodes > 0
            ? Check(c_.cpu_decode_attention_s(cpu_decodes, b.cpu_context),
                    "CPU attention")
            : 0;
    return status_;
  }
  double Check(double s, const char* what) {
    if ((!std::isfinite(s) || s < 0) && status_.ok()) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat("Neo iteration: ", what, " cost is ", s));
    }
    return s;
  }
  const absl::Status& status() const { return status_; }

 private:
  const IterationCosts& c_;
  absl::Status status_;
};

double LayerTime(const SubBatch& b0, const SubBatch& b1) {
  return std::max(b0.linear_s, b1.cpu_attention_s) +
         std::max(b1.linear_s + b0.gpu_attention_s, b0.cpu_attention_s);
}

}  // namespace

absl::StatusOr<IterationPlan> PlanIteration(
    absl::Span<const PrefillRequest> prefills,
    absl::Span<const DecodeRequest> decodes, const IterationCosts& costs,
    int num_layers) {
  if (!costs.gpu_linear_s || !costs.gpu_decode_attention_s ||
      !costs.gpu_prefill_attention_s || !costs.cpu_decode_attention_s) {
    return absl::InvalidArgumentError(
        "Neo iteration: all four cost functions are needed");
  }
  if (num_layers < 1) {
    return absl::InvalidArgumentError("Neo iteration: layers must be >= 1");
  }
  std::unordered_set<int64_t> ids;
  for (const PrefillRequest& p : prefills) {
    if (p.prompt_len < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Neo iteration: prefill ", p.id, " is empty"));
    }
    if (!ids.insert(p.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("Neo iteration: request ", p.id, " twice"));
    }
  }
  for (const DecodeRequest& d : decodes) {
    if (d.context_len < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Neo iteration: decode ", d.id, " has context ", d.context_len));
    }
    if (!ids.insert(d.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("Neo iteration: request ", d.id, " twice"));
    }
  }

  Evaluator eval(costs);
  IterationPlan plan;
  SubBatch& b0 = plan.batch0;
  SubBatch& b1 = plan.batch1;
  // Steps 1-3: prefills and GPU decodes in batch-0.
  double prefill_attention_s = 0;
  for (const PrefillRequest& p : prefills) {
    b0.prefill_ids.push_back(p.id);
    b0.tokens += p.prompt_len;
    b0.prefill_tokens += p.prompt_len;
    prefill_attention_s += eval.Check(
        costs.gpu_prefill_attention_s(p.prompt_len), "prefill attention");
  }
  for (const DecodeRequest& d : decodes) {
    if (d.kv != KvLocation::kGpu) continue;
    b0.gpu_decode_ids.push_back(d.id);
    b0.tokens += 1;
    b0.gpu_context += d.context_len;
  }
  if (absl::Status s = eval.Refresh(b0, prefill_attention_s); !s.ok()) return s;
  if (absl::Status s = eval.Refresh(b1, 0); !s.ok()) return s;
  plan.gpu_only = b0;  // step 6's GPU-only candidate

  auto slack1 = [&] { return b0.linear_s - b1.cpu_attention_s; };
  auto slack0 = [&] {
    return b1.linear_s + b0.gpu_attention_s - b0.cpu_attention_s;
  };
  auto add = [&](SubBatch& b, const DecodeRequest& d, double pa) {
    b.cpu_decode_ids.push_back(d.id);
    b.tokens += 1;
    b.cpu_context += d.context_len;
    return eval.Refresh(b, pa);
  };
  auto remove = [&](SubBatch& b, const DecodeRequest& d, double pa) {
    b.cpu_decode_ids.pop_back();
    b.tokens -= 1;
    b.cpu_context -= d.context_len;
    return eval.Refresh(b, pa);
  };

  const bool no_gpu_work = b0.tokens == 0;
  // Step 4: CPU decodes, FCFS.
  int64_t failed_len = std::numeric_limits<int64_t>::max();
  for (const DecodeRequest& d : decodes) {
    if (d.kv != KvLocation::kCpu) continue;
    if (no_gpu_work) {  // the starvation guard: run it unhidden in batch-1
      if (absl::Status s = add(b1, d, 0); !s.ok()) return s;
      plan.starvation_guard = true;
      continue;
    }
    if (d.context_len >= failed_len) {
      plan.deferred_ids.push_back(d.id);
      continue;
    }
    const bool first_is_b1 = slack1() >= slack0();
    bool placed = false;
    for (int attempt = 0; attempt < 2 && !placed; ++attempt) {
      const bool to_b1 = (attempt == 0) == first_is_b1;
      SubBatch& b = to_b1 ? b1 : b0;
      const double pa = to_b1 ? 0 : prefill_attention_s;
      if (absl::Status s = add(b, d, pa); !s.ok()) return s;
      if (slack0() >= 0 && slack1() >= 0) {
        placed = true;
      } else if (absl::Status s = remove(b, d, pa); !s.ok()) {
        return s;
      }
    }
    if (!placed) {
      failed_len = d.context_len;
      plan.deferred_ids.push_back(d.id);
    }
  }

  plan.slack0_s = slack0();
  plan.slack1_s = slack1();
  const double layers = static_cast<double>(num_layers);
  plan.pipelined_iteration_s = layers * LayerTime(b0, b1);
  plan.gpu_only_iteration_s =
      layers * (plan.gpu_only.linear_s + plan.gpu_only.gpu_attention_s);
  auto rate = [](int64_t requests, double seconds) {
    return seconds > 0 ? static_cast<double>(requests) / seconds : 0.0;
  };
  plan.pipelined_rate =
      rate(b0.requests() + b1.requests(), plan.pipelined_iteration_s);
  plan.gpu_only_rate =
      rate(plan.gpu_only.requests(), plan.gpu_only_iteration_s);

  const bool any_cpu = !b0.cpu_decode_ids.empty() || !b1.cpu_decode_ids.empty();
  plan.pipelined = any_cpu && plan.pipelined_rate > plan.gpu_only_rate;
  if (plan.pipelined) {
    plan.cpu_attention_ids = b0.cpu_decode_ids;
    plan.cpu_attention_ids.insert(plan.cpu_attention_ids.end(),
                                  b1.cpu_decode_ids.begin(),
                                  b1.cpu_decode_ids.end());
  } else {
    // Every CPU decode waits: the ones placed in the candidate as well.
    plan.deferred_ids.clear();
    for (const DecodeRequest& d : decodes) {
      if (d.kv == KvLocation::kCpu) plan.deferred_ids.push_back(d.id);
    }
  }
  return plan;
}

}  // namespace tandem::neo
