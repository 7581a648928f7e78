#include "gpu_worker/cuda/cuda_copy_engine.h"

#include "gpu_worker/cuda/cuda_status.h"

namespace tandem::cuda {

absl::StatusOr<std::unique_ptr<CudaCopyEngine>> CudaCopyEngine::Create(int device) {
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  absl::StatusOr<Stream> stream = Stream::Create();
  if (!stream.ok()) return stream.status();
  auto e = std::unique_ptr<CudaCopyEngine>(new CudaCopyEngine(*std::move(stream)));
  const cudaStream_t s = e->stream_.get();
  e->queue_ = std::make_unique<QueuedCopyEngine>([device, s](const CopyTask& t) -> absl::Status {
    // The queue's thread: the device is per thread in the runtime.
    TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(t.dst, t.src, t.bytes, cudaMemcpyDefault, s));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    return absl::OkStatus();
  });
  return e;
}

}  // namespace tandem::cuda
