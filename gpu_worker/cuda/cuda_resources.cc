#include "gpu_worker/cuda/cuda_resources.h"

#include "gpu_worker/cuda/cuda_status.h"

namespace tandem::cuda {

absl::StatusOr<Stream> Stream::Create() {
  cudaStream_t s = nullptr;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

Stream::~Stream() {
  if (s_ != nullptr) cudaStreamDestroy(s_);
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_ != nullptr) cudaStreamDestroy(s_);
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}

absl::Status Stream::Synchronize() const {
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s_));
  return absl::OkStatus();
}

absl::StatusOr<Event> Event::Create(bool timing) {
  cudaEvent_t e = nullptr;
  TANDEM_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return Event(e);
}

Event::~Event() {
  if (e_ != nullptr) cudaEventDestroy(e_);
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_ != nullptr) cudaEventDestroy(e_);
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}

absl::Status Event::Record(const Stream& s) const {
  TANDEM_CUDA_RETURN_IF_ERROR(cudaEventRecord(e_, s.get()));
  return absl::OkStatus();
}

absl::Status Event::WaitOn(const Stream& s) const {
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(s.get(), e_, 0));
  return absl::OkStatus();
}

absl::Status Event::Synchronize() const {
  TANDEM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e_));
  return absl::OkStatus();
}

absl::StatusOr<float> Event::ElapsedMs(const Event& start, const Event& end) {
  float ms = 0;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.e_, end.e_));
  return ms;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  void* p = nullptr;
  if (bytes > 0) TANDEM_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  return DeviceBuffer(p, bytes);
}

DeviceBuffer::~DeviceBuffer() {
  if (p_ != nullptr) cudaFree(p_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) cudaFree(p_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

absl::StatusOr<HostRegistration> HostRegistration::Register(void* p, size_t bytes,
                                                            unsigned flags) {
  if (p == nullptr || bytes == 0) return HostRegistration();
  TANDEM_CUDA_RETURN_IF_ERROR(cudaHostRegister(p, bytes, flags));
  return HostRegistration(p);
}

HostRegistration::~HostRegistration() {
  if (p_ != nullptr) cudaHostUnregister(p_);
}

HostRegistration& HostRegistration::operator=(HostRegistration&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) cudaHostUnregister(p_);
    p_ = std::exchange(o.p_, nullptr);
  }
  return *this;
}

}  // namespace tandem::cuda
