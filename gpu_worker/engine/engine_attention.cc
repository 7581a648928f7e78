// The engine's self-attention, one micro-batch at a time (RunLayer in
// engine.cc orders the pieces): the q/k/v projections, the offloaded
// sequences' jobs, the local sequences' attention over the paged cache and
// the offloaded output's way back. The pieces read h_ and fill attn_ in the
// micro-batch's rows; o_proj is FinishLayer's.
#include <cmath>

#include "common/status_macros.h"
#include "gpu_worker/engine/engine.h"

namespace tandem {

absl::Status Engine::Project(int64_t l, const MicroBatch& mb) {
  const ModelConfig& c = config();
  const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
  const int64_t rows = mb.rows;
  const int64_t qd = heads_ * c.head_dim, kvd = kv_heads_ * c.head_dim;
  const float* h = h_.data() + mb.row0 * c.hidden_size;
  float* const q = q_.data() + mb.row0 * qd;
  float* const k = k_.data() + mb.row0 * kvd;
  float* const v = v_.data() + mb.row0 * kvd;
  const int64_t* pos = positions_.data() + mb.row0;
  const float* qb = lw.q_bias.empty() ? nullptr : lw.q_bias.data();
  const float* kb = lw.k_bias.empty() ? nullptr : lw.k_bias.data();
  const float* vb = lw.v_bias.empty() ? nullptr : lw.v_bias.data();
  const ops::LinearCall qkv[] = {
      {h, rows, &lw.q, qb, q}, {h, rows, &lw.k, kb, k}, {h, rows, &lw.v, vb, v}};
  TANDEM_RETURN_IF_ERROR(dev_->LinearGroup(qkv, 3));
  const float eps = c.rms_norm_eps;
  if (c.qk_norm == QkNorm::kPerHead) {
    TANDEM_RETURN_IF_ERROR(
        dev_->RmsNorm(q, rows * heads_, c.head_dim, lw.q_norm.data(), eps, q));
    TANDEM_RETURN_IF_ERROR(dev_->RmsNorm(k, rows * kv_heads_, c.head_dim,
                                         lw.k_norm.data(), eps, k));
  } else if (c.qk_norm == QkNorm::kFull && tp_ != nullptr) {
    TANDEM_RETURN_IF_ERROR(
        ShardedFullNorm(q, rows, qd, c.q_dim(), lw.q_norm.data()));
    TANDEM_RETURN_IF_ERROR(
        ShardedFullNorm(k, rows, kvd, c.kv_dim(), lw.k_norm.data()));
  } else if (c.qk_norm == QkNorm::kFull) {
    TANDEM_RETURN_IF_ERROR(
        dev_->RmsNorm(q, rows, qd, lw.q_norm.data(), eps, q));
    TANDEM_RETURN_IF_ERROR(
        dev_->RmsNorm(k, rows, kvd, lw.k_norm.data(), eps, k));
  }
  TANDEM_RETURN_IF_ERROR(
      dev_->Rope(q, rows, heads_, c.head_dim, pos, c.rope_style));
  return dev_->Rope(k, rows, kv_heads_, c.head_dim, pos, c.rope_style);
}

// A chunk's rows are contiguous in q_/k_/v_/attn_: jobs point into them
// (host memory), or into host copies of them made here.
absl::Status Engine::StageJobs(const std::vector<SequenceChunk>& batch,
                               const MicroBatch& mb, OffloadedAttention& o) {
  const ModelConfig& c = config();
  const int64_t qd = heads_ * c.head_dim, kvd = kv_heads_ * c.head_dim;
  o.jobs.clear();
  int64_t tok = mb.row0, staged = 0;
  for (size_t i = mb.chunk0; i < mb.chunk1; ++i) {
    const SequenceChunk& s = batch[i];
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (s.cpu_attention) {
      o.jobs.push_back({s.seq_id, s.start_pos, n, q_.data() + tok * qd,
                        k_.data() + tok * kvd, v_.data() + tok * kvd,
                        attn_.data() + tok * qd});
      staged += n;
    }
    tok += n;
  }
  if (o.jobs.empty() || dev_->host_memory()) return absl::OkStatus();
  const size_t need = static_cast<size_t>(staged * (2 * qd + 2 * kvd));
  if (o.host.size() < need) o.host.resize(need);
  float* at = o.host.data();
  for (AttentionJob& j : o.jobs) {
    auto down = [&](const float* src, int64_t width) -> absl::StatusOr<float*> {
      float* dst = at;
      at += j.tokens * width;
      TANDEM_RETURN_IF_ERROR(dev_->CopyToHost(
          src, static_cast<size_t>(j.tokens * width) * sizeof(float), dst));
      return dst;
    };
    TANDEM_ASSIGN_OR_RETURN(j.q, down(j.q, qd));
    TANDEM_ASSIGN_OR_RETURN(j.k, down(j.k, kvd));
    TANDEM_ASSIGN_OR_RETURN(j.v, down(j.v, kvd));
    j.out = at;  // the device rows it goes back to are found by position
    at += j.tokens * qd;
  }
  return absl::OkStatus();
}

absl::Status Engine::AttendLocal(int64_t l,
                                 const std::vector<SequenceChunk>& batch,
                                 const MicroBatch& mb) {
  const ModelConfig& c = config();
  chunks_.clear();
  int64_t tok = mb.row0;
  for (size_t i = mb.chunk0; i < mb.chunk1; ++i) {
    const SequenceChunk& s = batch[i];
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (!s.cpu_attention)
      chunks_.push_back({tok, n, s.start_pos, &kv_->BlockTable(s.seq_id)});
    tok += n;
  }
  if (chunks_.empty()) return absl::OkStatus();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  return dev_->Attend(kv_->Layer(l), q_.data(), k_.data(), v_.data(), heads_,
                      scale, chunks_, attn_.data());
}

absl::Status Engine::CollectJobs(int64_t l,
                                 const std::vector<SequenceChunk>& batch,
                                 const MicroBatch& mb, OffloadedAttention& o) {
  if (o.jobs.empty()) return absl::OkStatus();
  TANDEM_RETURN_IF_ERROR(attn_offload_->Collect(l, o.jobs));
  if (dev_->host_memory()) return absl::OkStatus();
  // Back to the jobs' rows of attn_, in batch order.
  const int64_t qd = heads_ * config().head_dim;
  size_t j = 0;
  int64_t tok = mb.row0;
  for (size_t i = mb.chunk0; i < mb.chunk1; ++i) {
    const SequenceChunk& s = batch[i];
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (s.cpu_attention) {
      TANDEM_RETURN_IF_ERROR(dev_->CopyToDevice(
          o.jobs[j++].out, static_cast<size_t>(n * qd) * sizeof(float),
          attn_.data() + tok * qd));
    }
    tok += n;
  }
  return absl::OkStatus();
}

}  // namespace tandem
