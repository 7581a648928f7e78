// Small RAII owners of CUDA runtime resources — streams, events, device
// memory, host memory registered for DMA — created through Create()/
// Allocate() returning absl::StatusOr (every runtime call checked, with the
// statement and location in the error), released in their destructors.
// Move-only.
#ifndef TANDEM_GPU_WORKER_CUDA_CUDA_RESOURCES_H_
#define TANDEM_GPU_WORKER_CUDA_CUDA_RESOURCES_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::cuda {

class Stream {
 public:
  // A non-blocking stream (does not synchronise with the legacy default one).
  static absl::StatusOr<Stream> Create();
  Stream() = default;
  ~Stream();
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept;

  cudaStream_t get() const { return s_; }
  absl::Status Synchronize() const;

 private:
  explicit Stream(cudaStream_t s) : s_(s) {}
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  // `timing` events can be used with ElapsedMs; others are cheaper.
  static absl::StatusOr<Event> Create(bool timing = false);
  Event() = default;
  ~Event();
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept;

  cudaEvent_t get() const { return e_; }
  absl::Status Record(const Stream& s) const;
  // Makes `s` wait (on the device) for the work recorded before this event.
  absl::Status WaitOn(const Stream& s) const;
  absl::Status Synchronize() const;
  // Milliseconds between two recorded timing events.
  static absl::StatusOr<float> ElapsedMs(const Event& start, const Event& end);

 private:
  explicit Event(cudaEvent_t e) : e_(e) {}
  cudaEvent_t e_ = nullptr;
};

// Device memory. Allocation failure is kResourceExhausted.
class DeviceBuffer {
 public:
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes);
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;

  void* data() const { return p_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t size() const { return bytes_; }

 private:
  DeviceBuffer(void* p, size_t bytes) : p_(p), bytes_(bytes) {}
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Host memory someone else owns (e.g. the shared-memory weight store),
// page-locked with cudaHostRegister so that copies from it run as DMA at
// full PCIe speed, and unregistered on destruction. The memory must outlive
// this object.
class HostRegistration {
 public:
  // `flags`: cudaHostRegister's (cudaHostRegisterReadOnly for memory
  // mapped read-only, such as a checkpoint file).
  static absl::StatusOr<HostRegistration> Register(void* p, size_t bytes, unsigned flags = 0);
  HostRegistration() = default;
  ~HostRegistration();
  HostRegistration(HostRegistration&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  HostRegistration& operator=(HostRegistration&& o) noexcept;

 private:
  explicit HostRegistration(void* p) : p_(p) {}
  void* p_ = nullptr;
};

}  // namespace tandem::cuda

#endif  // TANDEM_GPU_WORKER_CUDA_CUDA_RESOURCES_H_
