// ShmTensorHandle: where a tensor lies in shared memory. The plain C++ twin
// of proto/tensor.proto's TensorHandle (this library does not link protobuf;
// converting is field by field, and tandem::DType has the proto enum's order).
#ifndef TANDEM_COMMON_SHM_TENSOR_HANDLE_H_
#define TANDEM_COMMON_SHM_TENSOR_HANDLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/shm/shm_segment.h"
#include "common/tensor.h"

namespace tandem::shm {

struct ShmTensorHandle {
  std::string segment;  // shm name, e.g. "/tandem-weights-1234-0"
  uint64_t offset = 0;  // bytes from the segment start
  uint64_t bytes = 0;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // outermost first

  bool operator==(const ShmTensorHandle&) const = default;
};

// Bytes that `dtype` and `shape` take: kInvalidArgument for an unknown dtype,
// a negative dim, rank > 8, overflow, or partial quantization blocks.
absl::StatusOr<int64_t> ShapeBytes(DType dtype, const std::vector<int64_t>& shape);

// "/tandem-w-1-0@4096+64 bf16 [4, 8]" for logs and errors.
std::string HandleString(const ShmTensorHandle& h);

// Checks that dtype and shape describe exactly `bytes` (dims >= 0, whole
// quantization blocks). kInvalidArgument otherwise.
absl::Status ValidateHandleShape(const ShmTensorHandle& h);

// The handle's bytes in `segment` as a TensorView (named `name`). Checks that
// the handle names this segment, lies inside its payload and is consistent
// (kInvalidArgument otherwise): a handle from a peer is untrusted input.
absl::StatusOr<TensorView> ResolveHandle(const ShmSegment& segment, const ShmTensorHandle& h,
                                         std::string name = {});

// A handle for `bytes` at `data` inside `segment` (data must lie in it).
absl::StatusOr<ShmTensorHandle> MakeHandle(const ShmSegment& segment, const void* data, DType dtype,
                                           std::vector<int64_t> shape);

}  // namespace tandem::shm

#endif  // TANDEM_COMMON_SHM_TENSOR_HANDLE_H_
