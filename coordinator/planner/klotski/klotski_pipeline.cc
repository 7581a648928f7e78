#include "coordinator/planner/klotski/klotski_pipeline.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::planner {

absl::StatusOr<StepGraph> BuildKlotskiStep(const KlotskiCosts& c,
                                           int cold_buffers) {
  if (c.n < 1 || c.num_layers < 1 || cold_buffers < 1 || c.hot_experts < 0 ||
      c.cold_experts < 0 ||
      c.cold_revealed_by.size() != static_cast<size_t>(c.cold_experts)) {
    return absl::InvalidArgumentError(
        "Klotski pipeline: costs do not describe a step");
  }
  const int n = c.n;
  const int hot = c.hot_experts;
  const int cold = c.cold_experts;
  const bool kv_loads = c.kv_load_s > 0;
  // With KV streaming, the hot prefetch is cut into one chunk per batch so
  // that it interleaves with the KV loads; otherwise one chunk per expert.
  const int chunks = hot == 0 ? 0 : (kv_loads ? n : hot);
  const double chunk_s = chunks > 0 ? hot * c.expert_io_s / chunks : 0;
  // Hot expert j has fully arrived with chunk ceil((j+1)·chunks/K) − 1;
  // chunk i carries bytes of experts floor(i·K/chunks) .. ceil((i+1)·K/chunks)
  // − 1.
  auto last_chunk_of = [&](int j) {
    return static_cast<int>(
               std::ceil(static_cast<double>(j + 1) * chunks / hot - 1e-9)) -
           1;
  };
  auto experts_of_chunk = [&](int i) {
    const int first = static_cast<int>(
        std::floor(static_cast<double>(i) * hot / chunks + 1e-9));
    const int last = static_cast<int>(std::ceil(
                         static_cast<double>(i + 1) * hot / chunks - 1e-9)) -
                     1;
    return std::make_pair(first, std::max(first, last));
  };

  StepGraph g;
  g.Add("embedding", Resource::kGpu, c.embedding_s);
  std::vector<TaskId>
      attention_history;  // every layer's attention tasks, in order
  std::vector<TaskId> previous_hot(static_cast<size_t>(hot), -1);

  for (int l = 0; l < c.num_layers; ++l) {
    const std::string layer = absl::StrCat("L", l, " ");
    TaskId attention_weights = -1;
    if (c.attention_io_s > 0) {
      // Two attention buffers: layer l's reuses layer l−2's.
      std::vector<TaskId> deps;
      if (l >= 2) {
        deps.push_back(attention_history[static_cast<size_t>((l - 1) * n) - 1]);
      }
      attention_weights = g.Add(layer + "attention weights", Resource::kH2d,
                                c.attention_io_s, deps);
    }

    std::vector<TaskId> chunk_ids(static_cast<size_t>(chunks), -1);
    int next_chunk = 0;
    auto add_chunk = [&]() {
      const int i = next_chunk++;
      std::vector<TaskId> deps;
      const auto [first, last] = experts_of_chunk(i);
      for (int j = first; j <= last && j < hot; ++j) {
        if (previous_hot[j] >= 0) {
          deps.push_back(previous_hot[j]);  // its buffer is free
        }
      }
      chunk_ids[i] = g.Add(absl::StrCat(layer, "hot prefetch ", i),
                           Resource::kH2d, chunk_s, deps);
    };

    std::vector<TaskId> attention(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) {
      std::vector<TaskId> deps;
      if (kv_loads) {
        std::vector<TaskId> kv_deps;
        const size_t global = attention_history.size();
        if (global >= 2) {
          kv_deps.push_back(attention_history[global - 2]);  // double buffer
        }
        deps.push_back(g.Add(absl::StrCat(layer, "b", k, " KV load"),
                             Resource::kH2d, c.kv_load_s, kv_deps));
      }
      if (next_chunk < chunks) add_chunk();
      if (attention_weights >= 0) deps.push_back(attention_weights);
      attention[k] = g.Add(absl::StrCat(layer, "b", k, " attention"),
                           Resource::kGpu, c.attention_compute_s, deps);
      attention_history.push_back(attention[k]);
      if (c.kv_store_s > 0) {
        g.Add(absl::StrCat(layer, "b", k, " KV store"), Resource::kD2h,
              c.kv_store_s, {attention[k]});
      }
    }
    while (next_chunk < chunks) add_chunk();

    std::vector<TaskId> gate(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) {
      gate[k] = g.Add(absl::StrCat(layer, "b", k, " gate"), Resource::kGpu,
                      c.gate_s, {attention[k]});
    }

    std::vector<TaskId> cold_load(static_cast<size_t>(cold), -1);
    std::vector<TaskId> cold_compute(static_cast<size_t>(cold), -1);
    auto add_cold_load = [&](int m) {
      std::vector<TaskId> deps = {gate[c.cold_revealed_by[m]]};
      if (m >= cold_buffers) {
        deps.push_back(cold_compute[m - cold_buffers]);  // a free buffer
      }
      cold_load[m] = g.Add(absl::StrCat(layer, "cold expert ", m, " load"),
                           Resource::kH2d, c.expert_io_s, deps);
    };
    for (int m = 0; m < std::min(cold, cold_buffers); ++m) add_cold_load(m);

    if (c.shared_expert_s > 0) {
      g.Add(layer + "shared expert", Resource::kGpu, c.shared_expert_s,
            {gate[n - 1]});
    }
    for (int j = 0; j < hot; ++j) {
      // Under uniform routing fewer than K experts may be active; the spare
      // hot experts were loaded for nothing and compute nothing.
      const double used = std::clamp(c.active_experts - j, 0.0, 1.0);
      previous_hot[j] = g.Add(absl::StrCat(layer, "hot expert ", j),
                              Resource::kGpu, used * c.expert_compute_s,
                              {chunk_ids[last_chunk_of(j)], gate[n - 1]});
    }
    for (int m = 0; m < cold; ++m) {
      cold_compute[m] =
          g.Add(absl::StrCat(layer, "cold expert ", m), Resource::kGpu,
                c.expert_compute_s, {cold_load[m]});
      if (m + cold_buffers < cold) add_cold_load(m + cold_buffers);
    }
  }
  g.Add("final norm + LM head", Resource::kGpu, c.head_s);
  return g;
}

}  // namespace tandem::planner
