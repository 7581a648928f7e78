#include "coordinator/planner/moe_lightning/cgopipe_graph.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::planner::ml {
namespace {

constexpr TaskId kNone = -1;
// Algorithm 1 issues W_CtoPin(i+1, j+2) with W_PintoG(i+1, j): the staging
// copy runs two pages ahead of the DMA.
constexpr int kStageAhead = 2;

class Builder {
 public:
  Builder(const LayerTimes& t, const PolicyPoint& p, int layers)
      : t_(t),
        p_(p),
        layers_(std::max(1, layers)),
        n_(static_cast<int>(std::max<int64_t>(1, t.num_micro_batches))),
        pre_(Grid()),
        attn_done_(Grid()),
        post_(Grid()),
        end_(Grid()),
        cpu_ffn_(Grid()),
        page_(layers_ + 1, std::vector<TaskId>(n_, kNone)),
        stage_(layers_ + 3, std::vector<TaskId>(n_, kNone)) {}

  CgoPipeGraph Build() {
    // Prologue: layer 0's pages (in the steady state they arrived during
    // the previous step's last layer) and the first micro-batches' front
    // halves, each followed (two hops) by the staging copy of one of the
    // next layer's first two pages, W_CtoPin(2, j) in Algorithm 1. Those
    // copies too are the previous step's work in the steady state.
    const size_t before = g_.graph.size();
    for (int j = 0; j < n_; ++j) IssuePage(0, j);
    for (size_t id = before; id < g_.graph.size(); ++id) {
      g_.carried_in.push_back(static_cast<TaskId>(id));
    }
    g_.layers = layers_;
    // With a host FFN share a micro-batch's next PreAttn waits for its FFN
    // to come back from the CPU, after its PostAttn; issued two ahead it
    // would sit in the GPU stream in front of other micro-batches' PostAttn
    // and starve the CPU. There the lookahead is one. (The paper runs the
    // FFN on the GPU; this order is ours.)
    const bool host_ffn = t_.cpu_ffn_ub > 0;
    const int ahead = host_ffn ? 1 : std::min(2, n_);
    for (int k = 0; k < std::max(ahead, kStageAhead); ++k) {
      if (k < ahead) IssueFront(k / n_, k % n_);
      if (k < kStageAhead) {
        const TaskId id = IssueStage(n_ + k);
        if (id != kNone) g_.carried_in.push_back(id);
      }
    }
    for (int i = 0; i < layers_; ++i) {
      for (int j = 0; j < n_; ++j) {
        TaskId ready = attn_done_[i][j];
        if (!p_.attention_on_gpu) {
          ready = Add(Name("LoadH", i, j), Resource::kH2d, t_.hidden_load_ub,
                      {ready});
        }
        // Layer i+1's pages even after the last simulated layer: they are
        // real traffic of that layer's time (the next layer, or the next
        // step's first), and leaving them out would flatter it.
        IssuePage(i + 1, j);
        std::vector<TaskId> deps = {ready};
        if (t_.page_load > 0) deps.push_back(page_[i][n_ - 1]);
        deps.push_back(Add(Name("launch PostAttn", i, j), Resource::kLaunch,
                           t_.launch_post_ub));
        post_[i][j] = Add(Name("PostAttn", i, j), Resource::kGpu,
                          t_.post_attention_ub, deps);
        end_[i][j] = post_[i][j];
        if (host_ffn) {
          TaskId off = Add(Name("OffloadFFN", i, j), Resource::kD2h,
                           t_.ffn_offload_ub, {post_[i][j]});
          cpu_ffn_[i][j] =
              Add(Name("CPUFFN", i, j), Resource::kCpu, t_.cpu_ffn_ub, {off});
          end_[i][j] = kNone;  // LoadFFN goes out with the next front half
        }
        const int k = i * n_ + j + ahead;
        if (k < layers_ * n_) IssueFront(k / n_, k % n_);
        // W_CtoPin(i+1, j+2): the copy of the page two after the one just
        // sent, wrapping into the layer after (the last simulated layer
        // copies the first pages of one more: its real work).
        IssueStage((i + 1) * n_ + j + kStageAhead);
      }
      if (host_ffn && i + 1 == layers_) {
        for (int j = 0; j < n_; ++j) FinishHostFfn(i, j);
      }
    }
    // Read at the end: with a host FFN share a layer's last LoadFFN is
    // issued during the next layer.
    for (int i = 0; i < layers_; ++i) g_.layer_end.push_back(end_[i][n_ - 1]);
    return std::move(g_);
  }

 private:
  std::vector<std::vector<TaskId>> Grid() const {
    return std::vector<std::vector<TaskId>>(layers_,
                                            std::vector<TaskId>(n_, kNone));
  }

  static std::string Name(const char* what, int i, int j) {
    return absl::StrCat(what, "(L", i, ",ub", j, ")");
  }

  // Adds a task, dropping missing dependencies. A zero-time task is not
  // added: its one dependency (or kNone) stands in for it; with several it
  // becomes a zero-time join on its resource.
  TaskId Add(std::string name, Resource r, double seconds,
             std::vector<TaskId> deps = {}) {
    deps.erase(std::remove(deps.begin(), deps.end(), kNone), deps.end());
    if (!(seconds > 0)) {
      // Pass the dependencies through instead of adding an empty task.
      if (deps.empty()) return kNone;
      if (deps.size() == 1) return deps[0];
      return g_.graph.Add(std::move(name), r, 0, std::move(deps));
    }
    return g_.graph.Add(std::move(name), r, seconds, std::move(deps));
  }

  // Two hops: the CPU copy of page q (flattened: layer q / n, page q % n)
  // into pinned memory, issued once. Algorithm 1 copies two pages ahead of
  // the DMA, so three pinned pages are live (the paper's example: page 2 in
  // DMA while page 4 is copied); the copy into a slot waits for the DMA
  // that last read it, three pages earlier.
  TaskId IssueStage(int q) {
    if (!(t_.page_stage > 0) || !(t_.page_load > 0)) return kNone;
    const int i = q / n_, j = q % n_;
    if (i >= static_cast<int>(stage_.size()) || stage_[i][j] != kNone)
      return kNone;
    std::vector<TaskId> deps;
    const int slot = q - (kStageAhead + 1);
    if (slot >= 0 && slot / n_ < static_cast<int>(page_.size()))
      deps.push_back(page_[slot / n_][slot % n_]);
    stage_[i][j] =
        Add(Name("CtoPin", i, j), Resource::kCpu, t_.page_stage, deps);
    return stage_[i][j];
  }

  void IssuePage(int i, int j) {
    if (!(t_.page_load > 0)) return;
    std::vector<TaskId> deps;
    // Double buffer: layer i's pages overwrite layer i-2's, free once its
    // last PostAttn (the last GPU reader) is done.
    if (i >= 2) deps.push_back(post_[i - 2][n_ - 1]);
    if (t_.page_stage > 0) {
      IssueStage(i * n_ + j);  // layer 0's, in the prologue
      deps.push_back(stage_[i][j]);
    }
    page_[i][j] = Add(Name("PintoG", i, j), Resource::kH2d, t_.page_load, deps);
  }

  // The FFN output's trip back to the GPU. Issued just before the
  // micro-batch's next front half rather than right after its CPU FFN: the
  // H2D stream is in order, and a copy waiting for the CPU would hold up
  // the other micro-batches' transfers queued behind it.
  void FinishHostFfn(int i, int j) {
    end_[i][j] = Add(Name("LoadFFN", i, j), Resource::kH2d, t_.ffn_load_ub,
                     {cpu_ffn_[i][j]});
  }

  void IssueFront(int i, int j) {
    if (i >= 1 && t_.cpu_ffn_ub > 0) FinishHostFfn(i - 1, j);
    std::vector<TaskId> deps;
    if (i >= 1)
      deps.push_back(end_[i - 1][j]);  // the residual of this micro-batch
    if (t_.attention_pages > 0 && t_.page_load > 0) {
      // Wait for the pages that hold the attention weights. If the launcher
      // has not issued all of them yet (attention weights larger than the
      // pages issued so far), wait for the last one issued: the real
      // launcher would stall there, which this under-counts.
      int last = std::min(n_, static_cast<int>(t_.attention_pages)) - 1;
      while (last >= 0 && page_[i][last] == kNone) --last;
      if (last >= 0) deps.push_back(page_[i][last]);
    }
    if (p_.attention_on_gpu) {
      deps.push_back(Add(Name("LoadKV", i, j), Resource::kH2d, t_.kv_load_ub));
    }
    deps.push_back(
        Add(Name("launch PreAttn", i, j), Resource::kLaunch, t_.launch_pre_ub));
    pre_[i][j] =
        Add(Name("PreAttn", i, j), Resource::kGpu, t_.pre_attention_ub, deps);
    if (p_.attention_on_gpu) {
      Add(Name("OffloadKV", i, j), Resource::kD2h, t_.kv_offload_ub,
          {pre_[i][j]});
      attn_done_[i][j] = pre_[i][j];
    } else {
      TaskId off = Add(Name("OffloadQKV", i, j), Resource::kD2h,
                       t_.qkv_offload_ub, {pre_[i][j]});
      attn_done_[i][j] = Add(Name("CPUAttn", i, j), Resource::kCpu,
                             t_.cpu_attention_ub, {off});
    }
  }

  const LayerTimes& t_;
  const PolicyPoint& p_;
  const int layers_;
  const int n_;
  std::vector<std::vector<TaskId>> pre_, attn_done_, post_, end_, cpu_ffn_,
      page_, stage_;
  CgoPipeGraph g_;
};

}  // namespace

CgoPipeGraph BuildCgoPipeGraph(const LayerTimes& t, const PolicyPoint& p,
                               int layers) {
  return Builder(t, p, layers).Build();
}

double SteadyLayerSeconds(const CgoPipeGraph& g, const SimResult& r) {
  if (g.layer_end.empty()) return 0;
  auto end = [&](TaskId id) {
    return id >= 0 && static_cast<size_t>(id) < r.timings.size()
               ? r.timings[id].end_s
               : 0.0;
  };
  const size_t layers = g.layer_end.size();
  if (layers == 1) return r.makespan_s;
  // The last layer issues no front halves for the layer after it, so its
  // GPU has less queued; with three or more layers it is left out too.
  const size_t last = layers >= 3 ? layers - 2 : layers - 1;
  return (end(g.layer_end[last]) - end(g.layer_end.front())) /
         static_cast<double>(last);
}

double LayerBusySeconds(const CgoPipeGraph& g, const SimResult& r,
                        Resource resource) {
  if (g.layers < 1) return 0;
  double busy = r.busy(resource);
  for (TaskId id : g.carried_in) {
    const Task& t = g.graph.tasks()[id];
    if (t.resource == resource) busy -= t.duration_s;
  }
  return busy / g.layers;
}

}  // namespace tandem::planner::ml
