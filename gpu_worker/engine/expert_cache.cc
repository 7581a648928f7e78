#include "gpu_worker/engine/expert_cache.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gpu_worker/engine/model_weights.h"

namespace tandem {
namespace {

// A CPU time no GPU schedule reaches (the split wants finite times).
constexpr double kNeverSeconds = 1e30;

int64_t Aligned(int64_t n) { return (n + 63) / 64 * 64; }

const ops::LinearWeight* Matrix(const ops::MlpWeights& m, int i) {
  return i == 0 ? &m.gate : i == 1 ? &m.up : &m.down;
}

}  // namespace

experts::ExpertCosts ExpertCache::DefaultCosts(int64_t expert_bytes, int64_t flops_per_token,
                                               double link_gbs, double gpu_tflops,
                                               double cpu_gflops) {
  // A GPU expert reads its weights from HBM at about 2 TB/s at least once;
  // the CPU side is compute-only, and nothing has a fixed cost.
  HardwareProfile hw;
  hw.gpu.memory_bandwidth = 2e12;
  hw.gpu.bf16_flops = gpu_tflops * 1e12;
  hw.cpu.bf16_flops = cpu_gflops * 1e9;
  hw.link.h2d_bandwidth = link_gbs * 1e9;
  return CostsFromProfile(hw, expert_bytes, flops_per_token);
}

experts::ExpertCosts ExpertCache::CostsFromProfile(const HardwareProfile& hw, int64_t expert_bytes,
                                                   int64_t flops_per_token) {
  // What the profile lacks comes from DefaultCosts' arguments' defaults.
  auto or_default = [](double v, double d) { return v > 0 ? v : d; };
  const double hbm = or_default(hw.gpu.memory_bandwidth, 2e12);
  const double gpu_flops = or_default(hw.gpu.bf16_flops, 100e12);
  const double cpu_flops = or_default(hw.cpu.bf16_flops, or_default(hw.cpu.f32_flops, 200e9));
  const double link = or_default(hw.link.h2d_bandwidth, 25e9);
  const double bytes = static_cast<double>(expert_bytes);
  const double flops = static_cast<double>(flops_per_token);
  const double launch = hw.gpu.launch_overhead_s;
  // Without a CPU bandwidth figure the CPU side is compute-only.
  const double cpu_read_s = hw.cpu.memory_bandwidth > 0 ? bytes / hw.cpu.memory_bandwidth : 0;
  const double cpu_fixed = hw.cpu.op_overhead_s;
  experts::ExpertCosts c;
  c.gpu_compute_s = [=](int64_t t) {
    return launch + std::max(bytes / hbm, flops * static_cast<double>(t) / gpu_flops);
  };
  c.cpu_compute_s = [=](int64_t t) {
    return cpu_fixed + std::max(cpu_read_s, flops * static_cast<double>(t) / cpu_flops);
  };
  c.transfer_s = hw.link.h2d_latency_s + bytes / link;
  return c;
}

absl::StatusOr<std::unique_ptr<ExpertCache>> ExpertCache::Create(
    const ModelConfig& config, const std::vector<LayerWeights>& layers, Device& device,
    CopyEngine& copies, const ExpertCacheOptions& options) {
  if (!config.is_moe()) return absl::InvalidArgumentError("an expert cache needs an MoE model");
  if (options.capacity_per_layer < 1 || options.capacity_per_layer > config.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat("expert cache: ", options.capacity_per_layer,
                                                   " slots per layer of ", config.num_experts,
                                                   " experts"));
  }
  int64_t expert_bytes = 0, flops = 0;
  for (const LayerWeights& l : layers) {
    if (!l.moe) continue;
    for (const ops::MlpWeights& e : l.experts) {
      int64_t b = 0;
      for (int i = 0; i < 3; ++i) {
        const ops::LinearWeight* w = Matrix(e, i);
        if (w->rows() == 0) {
          return absl::InvalidArgumentError(
              "expert cache: every routed expert must be loaded (none left to remote_experts)");
        }
        if (!device.host_memory() && w->quantized()) {
          return absl::UnimplementedError(absl::StrCat(
              "expert cache on device ", device.name(),
              ": routed experts in GGUF blocks are not computed in place there"));
        }
        b += Aligned(w->nbytes());
        flops = 2 * (e.gate.rows() * e.gate.cols() * 2 + e.down.rows() * e.down.cols());
      }
      expert_bytes = std::max(expert_bytes, b);
    }
  }
  ExpertResidencyOptions ro;
  ro.num_layers = static_cast<int>(config.num_layers);
  ro.num_experts = static_cast<int>(config.num_experts);
  ro.capacity_per_layer = options.capacity_per_layer;
  ro.alpha = options.alpha;
  ro.prefetch_budget = options.prefetch_budget;
  TANDEM_ASSIGN_OR_RETURN(ExpertResidency residency, ExpertResidency::Create(ro));
  experts::ExpertCosts costs = options.costs;
  if (costs.gpu_compute_s == nullptr || costs.cpu_compute_s == nullptr) {
    costs = options.profile.has_value() ? CostsFromProfile(*options.profile, expert_bytes, flops)
                                        : DefaultCosts(expert_bytes, flops);
  }
  if (!options.cpu_share) {
    // The split's CPU side never finishes first, so it takes nothing.
    costs.cpu_compute_s = [](int64_t) { return kNeverSeconds; };
  }
  auto c = std::unique_ptr<ExpertCache>(
      new ExpertCache(layers, device, copies, std::move(residency), std::move(costs)));
  c->capacity_ = options.capacity_per_layer;
  c->expert_bytes_ = expert_bytes;
  const size_t n_layers = static_cast<size_t>(config.num_layers);
  TANDEM_ASSIGN_OR_RETURN(
      c->slots_, device.Allocate(n_layers * static_cast<size_t>(c->capacity_ + 1) *
                                 static_cast<size_t>(expert_bytes)));
  c->slot_of_.assign(n_layers, std::vector<int>(static_cast<size_t>(config.num_experts), -1));
  c->free_.resize(n_layers);
  for (auto& f : c->free_) {
    for (int s = c->capacity_ - 1; s >= 0; --s) f.push_back(s);
  }
  c->hit_slot_.assign(static_cast<size_t>(config.num_experts), -1);
  absl::MutexLock l(&c->mu_);
  c->valid_.assign(n_layers, std::vector<char>(static_cast<size_t>(c->capacity_), 0));
  c->prefetch_pending_.assign(n_layers, 0);
  return c;
}

ExpertCache::~ExpertCache() {
  // Copies in flight write into slots_.
  for (size_t l = 0; l < slot_of_.size(); ++l) (void)WaitPrefetches(static_cast<int>(l));
}

uint8_t* ExpertCache::SlotData(int layer, int slot) const {
  const int64_t index = static_cast<int64_t>(layer) * (capacity_ + 1) + (slot < 0 ? capacity_ : slot);
  return static_cast<uint8_t*>(slots_->data()) + index * expert_bytes_;
}

ops::MlpWeights ExpertCache::At(int layer, int expert, uint8_t* at) const {
  const ops::MlpWeights& e =
      layers_[static_cast<size_t>(layer)].experts[static_cast<size_t>(expert)];
  ops::MlpWeights w;
  int64_t off = 0;
  ops::LinearWeight* out[3] = {&w.gate, &w.up, &w.down};
  for (int i = 0; i < 3; ++i) {
    *out[i] = Matrix(e, i)->WithData(at + off);
    off += Aligned(Matrix(e, i)->nbytes());
  }
  return w;
}

void ExpertCache::CopyIn(int layer, int expert, uint8_t* at,
                         std::function<void(absl::Status)> done) {
  const ops::MlpWeights& e =
      layers_[static_cast<size_t>(layer)].experts[static_cast<size_t>(expert)];
  struct Join {
    std::atomic<int> left{3};
    absl::Mutex mu;
    absl::Status first;
    std::function<void(absl::Status)> done;
  };
  auto join = std::make_shared<Join>();
  join->done = std::move(done);
  int64_t off = 0;
  for (int i = 0; i < 3; ++i) {
    const ops::LinearWeight* w = Matrix(e, i);
    copies_.Copy({at + off, w->data(), static_cast<size_t>(w->nbytes())}, /*urgent=*/false,
                 [join](absl::Status s) {
                   {
                     absl::MutexLock l(&join->mu);
                     if (join->first.ok()) join->first = s;
                   }
                   if (--join->left == 0) join->done(join->first);
                 });
    off += Aligned(w->nbytes());
  }
}

absl::Status ExpertCache::CopyNow(int layer, int expert, uint8_t* at) {
  absl::Mutex mu;
  bool landed = false;
  absl::Status result;
  CopyIn(layer, expert, at, [&](absl::Status s) {
    absl::MutexLock l(&mu);
    result = s;
    landed = true;
  });
  absl::MutexLock l(&mu);
  mu.Await(absl::Condition(&landed));
  return result;
}

absl::StatusOr<int> ExpertCache::TakeSlot(int layer, int expert) {
  std::vector<int>& f = free_[static_cast<size_t>(layer)];
  if (f.empty()) {
    return absl::InternalError(absl::StrCat("expert cache: no free slot in layer ", layer,
                                            " for expert ", expert));
  }
  const int s = f.back();
  f.pop_back();
  slot_of_[static_cast<size_t>(layer)][static_cast<size_t>(expert)] = s;
  absl::MutexLock l(&mu_);
  valid_[static_cast<size_t>(layer)][static_cast<size_t>(s)] = 0;
  return s;
}

void ExpertCache::FreeSlot(int layer, int expert) {
  int& s = slot_of_[static_cast<size_t>(layer)][static_cast<size_t>(expert)];
  if (s < 0) return;
  free_[static_cast<size_t>(layer)].push_back(s);
  s = -1;
}

absl::Status ExpertCache::WaitPrefetches(int layer) {
  absl::MutexLock l(&mu_);
  int* pending = &prefetch_pending_[static_cast<size_t>(layer)];
  mu_.Await(absl::Condition(+[](int* p) { return *p == 0; }, pending));
  return absl::OkStatus();
}

absl::StatusOr<LayerPlan> ExpertCache::Plan(int layer, absl::Span<const int32_t> ids,
                                            absl::Span<const float> weights, int top_k) {
  if (layer < 0 || layer >= static_cast<int>(slot_of_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("expert cache: layer ", layer));
  }
  TANDEM_RETURN_IF_ERROR(WaitPrefetches(layer));
  const int experts = static_cast<int>(slot_of_[0].size());
  const absl::Span<const int> id_span(reinterpret_cast<const int*>(ids.data()), ids.size());
  TANDEM_ASSIGN_OR_RETURN(std::vector<ExpertActivation> activated,
                          SummarizeRouting(experts, top_k, id_span, weights));
  LayerRouting routing;
  routing.activated = std::move(activated);
  routing.token_experts = id_span;
  routing.top_k = top_k;
  TANDEM_ASSIGN_OR_RETURN(LayerPlan plan, residency_.PlanLayer(layer, routing, costs_));

  // The hits' slots as they are now, filled where a copy never landed (a
  // step that failed after planning).
  std::fill(hit_slot_.begin(), hit_slot_.end(), -1);
  for (int e : plan.gpu_hits) {
    int s = slot_of_[static_cast<size_t>(layer)][static_cast<size_t>(e)];
    if (s < 0) {
      TANDEM_ASSIGN_OR_RETURN(s, TakeSlot(layer, e));
    }
    bool valid;
    {
      absl::MutexLock l(&mu_);
      valid = valid_[static_cast<size_t>(layer)][static_cast<size_t>(s)] != 0;
    }
    if (!valid) {
      TANDEM_RETURN_IF_ERROR(CopyNow(layer, e, SlotData(layer, s)));
      absl::MutexLock l(&mu_);
      valid_[static_cast<size_t>(layer)][static_cast<size_t>(s)] = 1;
    }
    hit_slot_[static_cast<size_t>(e)] = s;
  }
  // The cache after this layer: evicted slots go to the admitted loads
  // (filled by Load, after the hits have run).
  for (int e : plan.evictions) FreeSlot(layer, e);
  for (int e : plan.admitted) TANDEM_RETURN_IF_ERROR(TakeSlot(layer, e).status());
  if (layer + 1 < static_cast<int>(slot_of_.size())) {
    for (int e : plan.prefetch_evictions) FreeSlot(layer + 1, e);
    for (int e : plan.prefetch) TANDEM_RETURN_IF_ERROR(TakeSlot(layer + 1, e).status());
  }
  return plan;
}

absl::StatusOr<ops::MlpWeights> ExpertCache::Weights(int layer, int expert) const {
  const int s = hit_slot_[static_cast<size_t>(expert)];
  if (s < 0) {
    return absl::InternalError(
        absl::StrCat("expert cache: expert ", expert, " of layer ", layer, " is not a hit"));
  }
  return At(layer, expert, SlotData(layer, s));
}

absl::StatusOr<ops::MlpWeights> ExpertCache::Load(int layer, int expert) {
  // The hits (and the previous load, in the scratch slot) may still be
  // queued on the device, reading the slots about to be overwritten.
  if (!device_.host_memory()) TANDEM_RETURN_IF_ERROR(device_.Synchronize());
  const int s = slot_of_[static_cast<size_t>(layer)][static_cast<size_t>(expert)];
  uint8_t* at = SlotData(layer, s);  // s = -1: not admitted, the scratch slot
  TANDEM_RETURN_IF_ERROR(CopyNow(layer, expert, at));
  if (s >= 0) {
    absl::MutexLock l(&mu_);
    valid_[static_cast<size_t>(layer)][static_cast<size_t>(s)] = 1;
  }
  return At(layer, expert, at);
}

absl::Status ExpertCache::Finish(const LayerPlan& plan) {
  const int next = plan.layer + 1;
  if (next >= static_cast<int>(slot_of_.size())) return absl::OkStatus();
  for (int e : plan.prefetch) {
    const int s = slot_of_[static_cast<size_t>(next)][static_cast<size_t>(e)];
    if (s < 0) continue;  // displaced again since (not by this engine's order)
    {
      absl::MutexLock l(&mu_);
      ++prefetch_pending_[static_cast<size_t>(next)];
    }
    CopyIn(next, e, SlotData(next, s), [this, next, s](absl::Status st) {
      absl::MutexLock l(&mu_);
      // A failed prefetch leaves the slot marked missing: filled on use.
      if (st.ok()) valid_[static_cast<size_t>(next)][static_cast<size_t>(s)] = 1;
      --prefetch_pending_[static_cast<size_t>(next)];
    });
  }
  return absl::OkStatus();
}

}  // namespace tandem
