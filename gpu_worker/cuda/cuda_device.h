// The CUDA device: the engine's ops (gpu_worker/engine/device.h) on one GPU.
// Prepare copies the weights to GPU memory — linear weights in bf16 (bf16
// checkpoints as they are, GGUF blocks dequantized then rounded), f32
// checkpoints in f32, norms and biases in f32 — and the ops run on one
// stream: cuBLAS GEMMs with bf16 inputs and f32 accumulation (activations
// rounded to bf16 for bf16 weights), the kernels of kernels/ for the rest,
// activations and KV in f32. Per-call metadata is copied up on the same
// stream. Every CUDA and cuBLAS call is checked and its failure returned as
// a Status naming the statement and where.
#ifndef TANDEM_GPU_WORKER_CUDA_CUDA_DEVICE_H_
#define TANDEM_GPU_WORKER_CUDA_CUDA_DEVICE_H_

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gpu_worker/cuda/cublas_gemm.h"
#include "gpu_worker/cuda/cuda_resources.h"
#include "gpu_worker/cuda/kernels/act_dtype.h"
#include "gpu_worker/engine/device.h"

namespace tandem::cuda {

class CudaDevice final : public Device {
 public:
  // GPU `ordinal`. FailedPrecondition when there is no such GPU.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(int ordinal = 0);
  ~CudaDevice() override;

  std::string name() const override;
  bool host_memory() const override { return false; }
  ops::WeightLayout weight_layout() const override { return ops::WeightLayout::kForDevice; }
  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override;
  absl::Status CopyToHost(const void* src, size_t bytes, void* dst) override;
  absl::Status CopyToDevice(const void* src, size_t bytes, void* dst) override;
  absl::Status Synchronize() override { return stream_.Synchronize(); }
  // A CudaCopyEngine: its own stream and thread.
  absl::StatusOr<std::unique_ptr<CopyEngine>> NewCopyEngine() override;
  absl::Status Prepare(const ModelWeights& w, const std::vector<float>& inv_freq,
                       const std::vector<const ops::LinearWeight*>& streamed) override;

  absl::Status Embedding(const TensorView& table, const int32_t* ids, int64_t n,
                         float* out) override;
  absl::Status RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w, float eps,
                       float* out) override;
  absl::Status RowSumSquares(const float* x, int64_t rows, int64_t dim, float* out) override;
  absl::Status ScaleRms(float* x, int64_t rows, int64_t dim, const float* sumsq, int64_t full_dim,
                        float eps, const float* w) override;
  absl::Status AddScaled(const float* x, float scale, int64_t n, float* y) override;
  absl::Status AddBias(const float* bias, int64_t rows, int64_t width, float* y) override;
  absl::Status Zero(float* x, int64_t n) override;
  absl::Status Linear(const float* x, int64_t rows, const ops::LinearWeight& w,
                      const float* bias, float* y) override;
  absl::Status Mlp(const ops::MlpWeights& w, const float* x, int64_t rows, float* out) override;
  absl::Status Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                    const int64_t* positions, RopeStyle style) override;
  absl::Status Attend(const ops::PagedKvLayer& kv, const float* q, const float* k,
                      const float* v, int64_t heads, float scale,
                      const std::vector<AttentionChunk>& chunks, float* out) override;
  absl::Status RouteTopK(const float* logits, int64_t n, int64_t experts, int64_t k,
                         bool renormalize, int32_t* ids, float* weights) override;
  absl::Status GreedyPick(const float* logits, int64_t rows, int64_t vocab, int32_t* ids,
                          float* logprobs) override;
  absl::Status GatherRows(const float* x, int64_t width, const int64_t* rows, int64_t n,
                          float* out) override;
  absl::Status ScatterAddRows(const float* x, int64_t width, const int64_t* rows,
                              const float* scales, int64_t n, float* out) override;
  absl::Status RunExperts(const float* x, int64_t width, const std::vector<ExpertRun>& runs,
                          float* out) override;
  absl::Status SigmoidGateAdd(const float* x, const float* h, const float* gate, int64_t rows,
                              int64_t width, float* out) override;

  // Bytes of weights Prepare put on the GPU.
  int64_t weight_bytes() const { return weight_bytes_; }
  // Bytes of host memory Prepare pinned under the streamed weights (whole
  // pages), and why any were left pageable (empty if none were).
  int64_t pinned_bytes() const { return pinned_bytes_; }
  const std::string& pin_failure() const { return pin_failure_; }

 private:
  struct DeviceLinear {
    DeviceBuffer data;  // [n, k] in `type`
    ActType type = ActType::kBF16;
    int64_t n = 0, k = 0;
  };
  // What a GEMM reads: a prepared copy, or a staged weight in place.
  struct LinearView {
    const void* data = nullptr;  // [n, k] in `type`, device memory
    ActType type = ActType::kBF16;
    int64_t n = 0, k = 0;
  };
  struct DeviceTable {
    DeviceBuffer data;  // [vocab, hidden] in `type`
    ActType type = ActType::kF32;
  };
  // Per-call metadata buffers, one per purpose so an op can hold several.
  enum Slot { kSlot0, kSlot1, kSlot2, kSlot3, kSlot4, kSlot5, kSlots };

  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {}
  // Makes this device current on the calling thread (the engine may be
  // driven from different threads over its life).
  absl::Status Use() const;
  // Copies `bytes` of host memory into metadata slot `s` on the stream.
  absl::StatusOr<void*> Upload(Slot s, const void* host, size_t bytes);
  // Grows `b` to at least `bytes`, waiting for the stream before the old
  // memory is released (queued work may still read it).
  absl::Status Reserve(DeviceBuffer& b, size_t bytes);
  absl::StatusOr<const float*> Param(const float* host) const;
  // The prepared copy of `w`, or `w` itself where its data() is already in
  // this device's memory (a streamed weight in a staging buffer).
  absl::StatusOr<LinearView> Find(const ops::LinearWeight& w) const;
  absl::Status AddParam(const std::vector<float>& v);
  absl::Status AddLinear(const ops::LinearWeight& w);
  // Page-locks the host memory under the streamed weights, so that their
  // copies run as DMA without a driver bounce buffer. Best effort: a range
  // the driver refuses stays pageable (copies still work, slower), noted in
  // pin_failure_.
  void PinStreamed(const std::vector<const ops::LinearWeight*>& streamed);

  int ordinal_ = 0;
  bool prepared_ = false;
  Stream stream_;
  CublasHandle blas_;
  absl::flat_hash_map<const ops::LinearWeight*, DeviceLinear> linear_;
  absl::flat_hash_map<const float*, DeviceBuffer> params_;  // norms, biases, gates
  absl::flat_hash_map<const void*, DeviceTable> tables_;    // embeddings, by host data
  DeviceBuffer inv_freq_;  // [half]
  int64_t half_ = 0;
  int64_t weight_bytes_ = 0;
  std::vector<HostRegistration> pinned_;  // released before the weights' memory
  int64_t pinned_bytes_ = 0;
  std::string pin_failure_;
  std::array<DeviceBuffer, kSlots> meta_;
  DeviceBuffer x_bf16_;           // activations rounded for a bf16 GEMM
  DeviceBuffer gate_, up_;        // [rows, ffn] of Mlp and RunExperts
  DeviceBuffer expert_in_, expert_out_;  // [rows, width] of RunExperts, grouped by run
  DeviceBuffer group_ptrs_;       // RunExperts' grouped GEMMs' pointer arrays, three
  DeviceBuffer route_ids_, route_w_;  // [n, k] of RouteTopK
  DeviceBuffer pick_;                 // GreedyPick: [rows] ids, then [rows] log-probs
  std::vector<int32_t> pick_host_;    // the same, copied back in one piece
};

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_CUDA_DEVICE_H_
