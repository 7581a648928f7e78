// The CUDA device's copy engine: copy_engine.h's two queues worked through
// on a dedicated copy stream, one copy at a time (cudaMemcpyAsync, then the
// stream is synchronised before the next), so an activation transfer queued
// as urgent waits behind at most one weight page. Sources of weight pages
// should be pinned (HostRegistration) for the copies to run as DMA.
#ifndef TANDEM_GPU_WORKER_CUDA_CUDA_COPY_ENGINE_H_
#define TANDEM_GPU_WORKER_CUDA_CUDA_COPY_ENGINE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "gpu_worker/cuda/cuda_resources.h"
#include "gpu_worker/engine/copy_engine.h"

namespace tandem::cuda {

class CudaCopyEngine final : public CopyEngine {
 public:
  static absl::StatusOr<std::unique_ptr<CudaCopyEngine>> Create(int device);

  void Copy(const CopyTask& task, bool urgent, Done done) override {
    queue_->Copy(task, urgent, std::move(done));
  }
  // For tests: hold queued copies.
  void Pause(bool paused) { queue_->Pause(paused); }
  cudaStream_t stream() const { return stream_.get(); }

 private:
  explicit CudaCopyEngine(Stream stream) : stream_(std::move(stream)) {}
  Stream stream_;
  std::unique_ptr<QueuedCopyEngine> queue_;  // declared last: stops before the stream goes
};

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_CUDA_COPY_ENGINE_H_
