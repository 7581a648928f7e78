#include "gpu_worker/experts/expert_residency_stats.h"

#include <cstddef>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

double Ratio(int64_t num, int64_t den) {
  return den > 0 ? static_cast<double>(num) / static_cast<double>(den) : 0.0;
}

// Writes the text exposition one family at a time.
class Writer {
 public:
  Writer(absl::string_view prefix, absl::string_view labels)
      : prefix_(prefix), labels_(labels) {}

  void Family(absl::string_view name, absl::string_view type,
              absl::string_view help) {
    absl::StrAppend(&out_, "# HELP ", prefix_, name, " ", help, "\n", "# TYPE ",
                    prefix_, name, " ", type, "\n");
  }
  // One series; `label` (e.g. layer="3") is joined with the common labels.
  template <typename T>
  void Sample(absl::string_view name, T value, absl::string_view label = "") {
    std::string all(labels_);
    if (!label.empty()) absl::StrAppend(&all, all.empty() ? "" : ",", label);
    absl::StrAppend(&out_, prefix_, name);
    if (!all.empty()) absl::StrAppend(&out_, "{", all, "}");
    absl::StrAppend(&out_, " ", value, "\n");
  }
  template <typename T>
  void Metric(absl::string_view name, absl::string_view type,
              absl::string_view help, T value) {
    Family(name, type, help);
    Sample(name, value);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string prefix_;
  std::string labels_;
  std::string out_;
};

}  // namespace

double LayerResidencyStats::hit_rate() const {
  return Ratio(hits, activations);
}

double LayerResidencyStats::prefetch_precision() const {
  return Ratio(prefetch_used, prefetch_issued);
}

void LayerResidencyStats::Add(const LayerResidencyStats& o) {
  plans += o.plans;
  activations += o.activations;
  hits += o.hits;
  misses += o.misses;
  gpu_computed += o.gpu_computed;
  cpu_computed += o.cpu_computed;
  loads += o.loads;
  admitted += o.admitted;
  evictions += o.evictions;
  prefetch_issued += o.prefetch_issued;
  prefetch_used += o.prefetch_used;
  prefetch_wasted += o.prefetch_wasted;
}

std::string RenderPrometheus(const ExpertResidencyStats& stats,
                             absl::string_view prefix,
                             absl::string_view labels) {
  Writer w(prefix, labels);
  const LayerResidencyStats& t = stats.total;
  w.Metric("_cache_hits_total", "counter",
           "Activated experts found resident in the GPU expert cache.", t.hits);
  w.Metric("_cache_misses_total", "counter",
           "Activated experts not resident in the GPU expert cache.", t.misses);
  w.Metric("_cache_loads_total", "counter",
           "Missed experts loaded to the GPU on demand.", t.loads);
  w.Metric("_cache_admitted_total", "counter",
           "On-demand loads kept resident by the score cache.", t.admitted);
  w.Metric("_cache_evictions_total", "counter",
           "Resident experts evicted (to loads and prefetches).", t.evictions);
  w.Metric("_gpu_computed_total", "counter",
           "Activated experts computed on the GPU.", t.gpu_computed);
  w.Metric("_cpu_computed_total", "counter",
           "Activated experts computed on the CPU.", t.cpu_computed);
  w.Metric("_prefetch_issued_total", "counter",
           "Experts prefetched for the next layer.", t.prefetch_issued);
  w.Metric("_prefetch_used_total", "counter",
           "Prefetched experts activated before being evicted.",
           t.prefetch_used);
  w.Metric("_prefetch_wasted_total", "counter",
           "Prefetched experts evicted before being activated.",
           t.prefetch_wasted);

  struct PerLayer {
    const char* name;
    const char* help;
    int64_t LayerResidencyStats::*field;
  };
  const PerLayer per_layer[] = {
      {"_layer_cache_hits_total", "Cache hits of one layer.",
       &LayerResidencyStats::hits},
      {"_layer_cache_misses_total", "Cache misses of one layer.",
       &LayerResidencyStats::misses},
      {"_layer_prefetch_issued_total", "Prefetches issued for one layer.",
       &LayerResidencyStats::prefetch_issued},
      {"_layer_prefetch_used_total", "Prefetches of one layer that were used.",
       &LayerResidencyStats::prefetch_used},
  };
  for (const PerLayer& m : per_layer) {
    w.Family(m.name, "counter", m.help);
    for (size_t l = 0; l < stats.layers.size(); ++l) {
      w.Sample(m.name, stats.layers[l].*m.field,
               absl::StrCat("layer=\"", l, "\""));
    }
  }

  w.Metric("_cache_resident", "gauge", "Experts resident in the GPU cache.",
           stats.resident);
  w.Metric("_cache_capacity", "gauge", "GPU expert cache slots.",
           stats.capacity);
  w.Metric("_cache_hit_ratio", "gauge", "Cache hits over activations.",
           t.hit_rate());
  w.Metric("_prefetch_precision", "gauge",
           "Prefetches used over prefetches issued.", t.prefetch_precision());
  w.Metric("_transition_precision", "gauge",
           "Transition-table predictions that the next layer activated.",
           stats.transition.precision());
  w.Metric("_transition_recall", "gauge",
           "Next-layer activations the transition table predicted.",
           stats.transition.recall());
  return w.Take();
}

}  // namespace tandem
