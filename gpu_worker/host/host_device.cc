#include "gpu_worker/host/host_device.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/status_macros.h"
#include "cpu_worker/kv/huge_page_array.h"
#include "cpu_worker/ops/elementwise.h"
#include "cpu_worker/ops/rope.h"
#include "cpu_worker/ops/router.h"
#include "cpu_worker/ops/sampling.h"

namespace tandem {
namespace {

class HostAllocation final : public DeviceAllocation {
 public:
  HostAllocation(HugePageArray a, size_t bytes) : a_(std::move(a)), bytes_(bytes) {}
  void* data() const override { return a_.data(); }
  size_t size() const override { return bytes_; }

 private:
  HugePageArray a_;
  size_t bytes_;
};

}  // namespace

absl::StatusOr<DeviceMemory> HostDevice::Allocate(size_t bytes) {
  TANDEM_ASSIGN_OR_RETURN(HugePageArray a,
                          HugePageArray::Allocate((std::max<size_t>(bytes, 1) + 3) / 4));
  return DeviceMemory(new HostAllocation(std::move(a), bytes));
}

absl::Status HostDevice::CopyToHost(const void* src, size_t bytes, void* dst) {
  if (src != dst) std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status HostDevice::CopyToDevice(const void* src, size_t bytes, void* dst) {
  if (src != dst) std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CopyEngine>> HostDevice::NewCopyEngine() {
  return std::unique_ptr<CopyEngine>(new HostCopyEngine());
}

absl::Status HostDevice::Prepare(const ModelWeights&, const std::vector<float>& inv_freq,
                                 const std::vector<const ops::LinearWeight*>&) {
  if (prepared_) return absl::FailedPreconditionError("host device: Prepare called twice");
  prepared_ = true;
  inv_freq_ = inv_freq;
  return absl::OkStatus();
}

absl::Status HostDevice::Embedding(const TensorView& table, const int32_t* ids, int64_t n,
                                   float* out) {
  ops::EmbeddingLookup(table, ids, n, out);
  return absl::OkStatus();
}

absl::Status HostDevice::RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w,
                                 float eps, float* out) {
  ops::RmsNorm(x, rows, dim, w, eps, out);
  return absl::OkStatus();
}

absl::Status HostDevice::RowSumSquares(const float* x, int64_t rows, int64_t dim, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;  // f32 squares summed in double, as ops::RmsNorm
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i] * x[r * dim + i]);
    out[r] = static_cast<float>(ss);
  }
  return absl::OkStatus();
}

absl::Status HostDevice::ScaleRms(float* x, int64_t rows, int64_t dim, const float* sumsq,
                                  int64_t full_dim, float eps, const float* w) {
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = 1.0f / std::sqrt(sumsq[r] / static_cast<float>(full_dim) + eps);
    for (int64_t i = 0; i < dim; ++i) x[r * dim + i] = w[i] * (x[r * dim + i] * inv);
  }
  return absl::OkStatus();
}

absl::Status HostDevice::AddScaled(const float* x, float scale, int64_t n, float* y) {
  ops::AddScaled(x, scale, n, y);
  return absl::OkStatus();
}

absl::Status HostDevice::AddBias(const float* bias, int64_t rows, int64_t width, float* y) {
  for (int64_t r = 0; r < rows; ++r) ops::AddScaled(bias, 1.0f, width, y + r * width);
  return absl::OkStatus();
}

absl::Status HostDevice::Zero(float* x, int64_t n) {
  std::fill_n(x, n, 0.0f);
  return absl::OkStatus();
}

absl::Status HostDevice::Linear(const float* x, int64_t rows, const ops::LinearWeight& w,
                                const float* bias, float* y) {
  ops::Linear(x, rows, w, bias, y);
  return absl::OkStatus();
}

absl::Status HostDevice::LinearGroup(const ops::LinearCall* calls, int64_t count) {
  ops::LinearGroup(calls, count);
  return absl::OkStatus();
}

absl::Status HostDevice::Mlp(const ops::MlpWeights& w, const float* x, int64_t rows,
                             float* out) {
  ops::RunMlp(w, x, rows, out, mlp_scratch_);
  return absl::OkStatus();
}

absl::Status HostDevice::Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                              const int64_t* positions, RopeStyle style) {
  ops::ApplyRope(x, tokens, heads, head_dim, positions, inv_freq_, style);
  return absl::OkStatus();
}

absl::Status HostDevice::Attend(const ops::PagedKvLayer& kv, const float* q, const float* k,
                                const float* v, int64_t heads, float scale,
                                const std::vector<AttentionChunk>& chunks, float* out) {
  const int64_t qd = heads * kv.head_dim, kvd = kv.kv_heads * kv.head_dim;
  // Prefill chunks attend one by one; the decode tokens (one query each) go
  // to AttendDecode together, so its threads share all their contexts
  // instead of splitting each short one.
  decode_queries_.clear();
  for (const AttentionChunk& c : chunks) {
    const int32_t* table = c.block_table->data();
    ops::WriteKv(kv, table, c.start_pos, c.n, k + c.row * kvd, v + c.row * kvd);
    if (c.n == 1) {
      decode_queries_.push_back({q + c.row * qd, table, c.start_pos + 1, out + c.row * qd});
    } else {
      ops::AttendSequence(q + c.row * qd, c.n, heads, kv, table, c.start_pos, scale,
                          out + c.row * qd);
    }
  }
  if (!decode_queries_.empty()) {
    ops::AttendDecode(decode_queries_.data(), static_cast<int64_t>(decode_queries_.size()), heads,
                      kv, scale);
  }
  return absl::OkStatus();
}

absl::Status HostDevice::RouteTopK(const float* logits, int64_t n, int64_t experts, int64_t k,
                                   bool renormalize, int32_t* ids, float* weights) {
  ops::RouteTopK(logits, n, experts, k, renormalize, ids, weights);
  return absl::OkStatus();
}

absl::Status HostDevice::GreedyPick(const float* logits, int64_t rows, int64_t vocab,
                                    int32_t* ids, float* logprobs) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * vocab;
    ids[r] = ops::ArgMax(row, vocab);
    logprobs[r] = ops::LogProb(row, vocab, ids[r]);
  }
  return absl::OkStatus();
}

absl::Status HostDevice::GatherRows(const float* x, int64_t width, const int64_t* rows,
                                    int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) std::copy_n(x + rows[i] * width, width, out + i * width);
  return absl::OkStatus();
}

absl::Status HostDevice::ScatterAddRows(const float* x, int64_t width, const int64_t* rows,
                                        const float* scales, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    ops::AddScaled(x + i * width, scales[i], width, out + rows[i] * width);
  }
  return absl::OkStatus();
}

// The fused MoE path of the CPU kernels: each run's rows gathered, one
// pass over each expert's weights for all of them. Runs of a few rows
// together (decode) go to RunMlps at once, which shares them out over the
// threads or groups their matrices' parallel regions; larger runs go alone,
// as the gathered rows grow with them and their matrices fill a region.
absl::Status HostDevice::RunExperts(const float* x, int64_t width,
                                    const std::vector<ExpertRun>& runs, float* out) {
  size_t first = 0;
  while (first < runs.size()) {
    size_t last = first;
    int64_t rows = 0;
    while (last < runs.size() &&
           (last == first || rows + runs[last].n <= ops::internal::kGroupMaxRows)) {
      rows += runs[last++].n;
    }
    const size_t need = static_cast<size_t>(rows * width);
    if (expert_in_.size() < need) {
      TANDEM_ASSIGN_OR_RETURN(expert_in_, HugePageArray::Allocate(need));
      TANDEM_ASSIGN_OR_RETURN(expert_out_, HugePageArray::Allocate(need));
    }
    expert_calls_.clear();
    int64_t at = 0;
    for (size_t i = first; i < last; ++i) {
      const ExpertRun& r = runs[i];
      if (r.n == 0) continue;
      float* in = expert_in_.data() + at * width;
      TANDEM_RETURN_IF_ERROR(GatherRows(x, width, r.rows, r.n, in));
      expert_calls_.push_back({r.weights, in, r.n, expert_out_.data() + at * width});
      at += r.n;
    }
    ops::RunMlps(expert_calls_.data(), static_cast<int64_t>(expert_calls_.size()), mlp_scratch_);
    at = 0;
    for (size_t i = first; i < last; ++i) {
      const ExpertRun& r = runs[i];
      if (r.n == 0) continue;
      TANDEM_RETURN_IF_ERROR(ScatterAddRows(expert_out_.data() + at * width, width, r.rows,
                                            r.scales, r.n, out));
      at += r.n;
    }
    first = last;
  }
  return absl::OkStatus();
}

absl::Status HostDevice::SigmoidGateAdd(const float* x, const float* h, const float* gate,
                                        int64_t rows, int64_t width, float* out) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* ht = h + t * width;
    double dot = 0;
    for (int64_t i = 0; i < width; ++i) dot += static_cast<double>(ht[i]) * gate[i];
    const float g = 1.0f / (1.0f + std::exp(-static_cast<float>(dot)));
    ops::AddScaled(x + t * width, g, width, out + t * width);
  }
  return absl::OkStatus();
}

}  // namespace tandem
