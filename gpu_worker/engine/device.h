// The engine's device: where a worker's activations, KV cache and resident
// weights live and where the layer loop's ops run. Two implement it:
// HostDevice (host_device.h) runs the CPU kernels of cpu_worker/ops, so the
// whole engine runs, and is tested, without a GPU; CudaDevice
// (gpu_worker/cuda/cuda_device.h) runs CUDA kernels and cuBLAS.
//
// Conventions of every op:
//  * activation and KV pointers are device memory from Allocate, f32;
//  * weights are named by the host objects of the engine's ModelWeights
//    (a LinearWeight, a norm or bias vector's data): Prepare makes the
//    device's own copy of each (none on the host device) and the ops compute
//    from it, so the layer loop reads the same on every device. A
//    LinearWeight whose data() is already in device memory (streamed into
//    a staging buffer) is computed in place;
//  * small per-call metadata (token ids, positions, block tables, row
//    indices, routing results) is in host memory;
//  * ops are ordered as issued; CopyToHost waits for what came before;
//  * a device serves one engine, one op at a time: its ops keep scratch.
#ifndef TANDEM_GPU_WORKER_ENGINE_DEVICE_H_
#define TANDEM_GPU_WORKER_ENGINE_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "common/tensor.h"
#include "cpu_worker/ops/attention.h"
#include "cpu_worker/ops/linear.h"
#include "cpu_worker/ops/mlp.h"
#include "gpu_worker/engine/copy_engine.h"

namespace tandem {

struct ModelWeights;

// Memory a device allocated; released with this object.
class DeviceAllocation {
 public:
  virtual ~DeviceAllocation() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;  // bytes
};
using DeviceMemory = std::unique_ptr<DeviceAllocation>;

class Device;
// Makes a device for one engine (each engine owns its own: its weights,
// streams and scratch).
using DeviceFactory = std::function<absl::StatusOr<std::unique_ptr<Device>>()>;

// One sequence's chunk of a step's local attention: its rows of q/k/v/out
// are [row, row + n), at positions start_pos ... of the sequence whose
// block table (host memory, covering start_pos + n positions) is given.
struct AttentionChunk {
  int64_t row = 0;
  int64_t n = 0;
  int64_t start_pos = 0;
  const std::vector<int32_t>* block_table = nullptr;
};

// One expert's part of a MoE step (Device::RunExperts): the rows of x it
// reads and of out it adds to (host memory, distinct within the run), and
// their routing weights.
struct ExpertRun {
  const ops::MlpWeights* weights = nullptr;
  const int64_t* rows = nullptr;
  const float* scales = nullptr;
  int64_t n = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  // "host", "cuda:0", ...
  virtual std::string name() const = 0;
  // True when device memory is ordinary host memory (the host device): the
  // engine then hands activations to its expert and attention offloads in
  // place, else through host copies, and waits for the device's queued ops
  // before a tensor-parallel sum and before a staging buffer is refilled.
  virtual bool host_memory() const = 0;
  // How the engine loads the weights this device computes with
  // (ops::WeightLayout): the host device's CPU kernels take bf16 weights
  // packed for them; a device that copies the row-major bytes and computes
  // f32 and bf16 weights only (CUDA) asks for kForDevice.
  virtual ops::WeightLayout weight_layout() const = 0;

  // Zeroed memory. ResourceExhausted when the device has no more.
  virtual absl::StatusOr<DeviceMemory> Allocate(size_t bytes) = 0;
  // Copies `bytes` of device memory at `src` to host memory `dst` once the
  // ops issued before have run.
  virtual absl::Status CopyToHost(const void* src, size_t bytes, void* dst) = 0;
  // Copies `bytes` of host memory at `src` to device memory `dst`, after the
  // ops issued before; `src` may be reused when it returns. On CUDA that
  // holds for pageable memory (the runtime has staged the bytes by then);
  // page-locked memory is read later, on the stream, so only memory that
  // never changes may be pinned: PinStreamed's weights are the only such
  // memory, and every mutable source (activations, results in shared
  // memory) stays pageable.
  virtual absl::Status CopyToDevice(const void* src, size_t bytes, void* dst) = 0;

  // Waits until the ops issued before have run.
  virtual absl::Status Synchronize() = 0;
  // The copy engine that streams host-resident weights into this device's
  // memory (weight_pager.h), page by page on its own queue or stream.
  virtual absl::StatusOr<std::unique_ptr<CopyEngine>> NewCopyEngine() = 0;

  // Makes the device's copies of every weight of `w` but the `streamed`
  // ones (they stay in host memory and are staged before use), and of the
  // RoPE frequencies `inv_freq` (rotary_dim / 2 values). Once, before any
  // op (FailedPrecondition the second time); `w` outlives the device.
  virtual absl::Status Prepare(const ModelWeights& w, const std::vector<float>& inv_freq,
                               const std::vector<const ops::LinearWeight*>& streamed) = 0;

  // out[r] = table[ids[r]] for r < n (ids in range, validated by the caller).
  virtual absl::Status Embedding(const TensorView& table, const int32_t* ids, int64_t n,
                                 float* out) = 0;
  // out = x * rsqrt(mean(x^2) + eps) * w over rows of `dim` (out may be x).
  virtual absl::Status RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w,
                               float eps, float* out) = 0;
  // out[r] = the sum of x[r, i]^2 over i < dim, for r < rows (out device
  // memory): the first half of an RMSNorm whose row is split over
  // tensor-parallel ranks (OLMoE's q/k norm over the whole projection).
  virtual absl::Status RowSumSquares(const float* x, int64_t rows, int64_t dim, float* out) = 0;
  // x[r, i] = w[i] * (x[r, i] / sqrt(sumsq[r] / full_dim + eps)) in place:
  // the second half, once the ranks' sums are added (sumsq device memory,
  // w a vector of the weights).
  virtual absl::Status ScaleRms(float* x, int64_t rows, int64_t dim, const float* sumsq,
                                int64_t full_dim, float eps, const float* w) = 0;
  // y += scale * x over n elements.
  virtual absl::Status AddScaled(const float* x, float scale, int64_t n, float* y) = 0;
  // y[r] += bias for r < rows, rows of `width` (bias a vector of the
  // weights).
  virtual absl::Status AddBias(const float* bias, int64_t rows, int64_t width, float* y) = 0;
  // x = 0 over n elements.
  virtual absl::Status Zero(float* x, int64_t n) = 0;
  // y[rows, N] = x[rows, K] · w^T (+ bias[N], a vector of the weights).
  virtual absl::Status Linear(const float* x, int64_t rows, const ops::LinearWeight& w,
                              const float* bias, float* y) = 0;
  // Linear for each call, the same results; a device may run them together
  // (the host device: in one parallel region, where ops::LinearGroup can).
  virtual absl::Status LinearGroup(const ops::LinearCall* calls, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      const ops::LinearCall& c = calls[i];
      if (absl::Status s = Linear(c.x, c.m, *c.w, c.bias, c.y); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  // out[rows, hidden] = down(silu(gate(x)) * up(x)).
  virtual absl::Status Mlp(const ops::MlpWeights& w, const float* x, int64_t rows,
                           float* out) = 0;
  // Rotates x [tokens, heads, head_dim] in place, token t at positions[t],
  // with the frequencies given to Prepare (ops::ApplyRope).
  virtual absl::Status Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                            const int64_t* positions, RopeStyle style) = 0;
  // Writes each chunk's k/v rows [n, kv_heads * head_dim] into the cache
  // layer through its block table, then attends its queries causally over
  // the sequence's keys 0 .. their own position: out rows like q
  // [rows, heads * head_dim]. Query head h reads KV head h / (heads /
  // kv_heads).
  virtual absl::Status Attend(const ops::PagedKvLayer& kv, const float* q, const float* k,
                              const float* v, int64_t heads, float scale,
                              const std::vector<AttentionChunk>& chunks, float* out) = 0;
  // ops::RouteTopK over logits [n, experts]; ids and weights [n, k] are
  // written to host memory.
  virtual absl::Status RouteTopK(const float* logits, int64_t n, int64_t experts, int64_t k,
                                 bool renormalize, int32_t* ids, float* weights) = 0;
  // Greedy sampling of logits [rows, vocab]: ids[r] = ops::ArgMax of row r,
  // logprobs[r] = ops::LogProb of it (ids and logprobs host memory, written
  // once the ops before have run).
  virtual absl::Status GreedyPick(const float* logits, int64_t rows, int64_t vocab, int32_t* ids,
                                  float* logprobs) = 0;
  // out[i] = x[rows[i]] for i < n, rows of `width`.
  virtual absl::Status GatherRows(const float* x, int64_t width, const int64_t* rows, int64_t n,
                                  float* out) = 0;
  // out[rows[i]] += scales[i] * x[i] for i < n; rows distinct.
  virtual absl::Status ScatterAddRows(const float* x, int64_t width, const int64_t* rows,
                                      const float* scales, int64_t n, float* out) = 0;
  // For each run in order and i < run.n: out[run.rows[i]] += run.scales[i] *
  // Mlp(*run.weights)(x[run.rows[i]]), rows of `width`. A row may be in
  // several runs (a token's top-k experts); its additions happen in the
  // runs' order. Each run's weights are as Mlp takes them. One call lets a
  // device batch the experts (the CUDA device: one grouped GEMM per
  // projection over all the runs' rows instead of one GEMM per expert).
  virtual absl::Status RunExperts(const float* x, int64_t width, const std::vector<ExpertRun>& runs,
                                  float* out) = 0;
  // out[t] += sigmoid(h[t] · gate) * x[t] for t < rows (Qwen-MoE's shared
  // expert gate; `gate` [width] a vector of the weights, the dot in double
  // on the host device).
  virtual absl::Status SigmoidGateAdd(const float* x, const float* h, const float* gate,
                                      int64_t rows, int64_t width, float* out) = 0;
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_DEVICE_H_
