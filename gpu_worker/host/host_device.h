// The host device: the engine's ops on the CPU kernels of cpu_worker/ops,
// in host memory (transparent huge pages). It computes with the weights
// where ModelWeights holds them, so Prepare copies nothing. The reference
// the CUDA device is tested against, and the device of CPU-only
// deployments and of every test machine without a GPU.
#ifndef TANDEM_GPU_WORKER_HOST_HOST_DEVICE_H_
#define TANDEM_GPU_WORKER_HOST_HOST_DEVICE_H_

#include <string>
#include <vector>

#include "cpu_worker/kv/huge_page_array.h"
#include "gpu_worker/engine/device.h"

namespace tandem {

class HostDevice : public Device {
 public:
  std::string name() const override { return "host"; }
  bool host_memory() const override { return true; }
  ops::WeightLayout weight_layout() const override { return ops::WeightLayout::kCpuPacked; }
  absl::StatusOr<DeviceMemory> Allocate(size_t bytes) override;
  absl::Status CopyToHost(const void* src, size_t bytes, void* dst) override;
  absl::Status CopyToDevice(const void* src, size_t bytes, void* dst) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
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
  absl::Status LinearGroup(const ops::LinearCall* calls, int64_t count) override;
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

 private:
  bool prepared_ = false;
  std::vector<float> inv_freq_;
  ops::MlpScratch mlp_scratch_;
  HugePageArray expert_in_, expert_out_;  // [rows, width] of the runs RunExperts groups
  std::vector<ops::MlpCall> expert_calls_;
  std::vector<ops::DecodeQuery> decode_queries_;
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_HOST_HOST_DEVICE_H_
