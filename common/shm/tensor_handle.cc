#include "common/shm/tensor_handle.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::shm {
namespace {

// absl here is built without std::string_view support: bridge explicitly.
absl::string_view SV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr size_t kMaxRank = 8;

absl::StatusOr<int64_t> ShapeBytesOf(DType dtype, const std::vector<int64_t>& shape,
                                     std::string_view what) {
  if (DTypeBlockBytes(dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(SV(what), ": unknown dtype ", static_cast<int>(dtype)));
  }
  if (shape.size() > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat(SV(what), ": rank ", shape.size(), " exceeds ", kMaxRank));
  }
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && numel > std::numeric_limits<int64_t>::max() / 64 / d)) {
      return absl::InvalidArgumentError(absl::StrCat(SV(what), ": bad shape ", ShapeString(shape)));
    }
    numel *= d;
  }
  auto bytes = DTypeBytes(dtype, numel);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(SV(what), ": ", bytes.status().message()));
  }
  return *bytes;
}

}  // namespace

absl::StatusOr<int64_t> ShapeBytes(DType dtype, const std::vector<int64_t>& shape) {
  return ShapeBytesOf(dtype, shape, absl::StrCat(SV(DTypeName(dtype)), " ", ShapeString(shape)));
}

std::string HandleString(const ShmTensorHandle& h) {
  return absl::StrCat(h.segment, "@", h.offset, "+", h.bytes, " ", SV(DTypeName(h.dtype)), " ",
                      ShapeString(h.shape));
}

absl::Status ValidateHandleShape(const ShmTensorHandle& h) {
  TANDEM_ASSIGN_OR_RETURN(const int64_t bytes,
                          ShapeBytesOf(h.dtype, h.shape, absl::StrCat("handle ", HandleString(h))));
  if (static_cast<uint64_t>(bytes) != h.bytes) {
    return absl::InvalidArgumentError(absl::StrCat("handle ", HandleString(h), ": ",
                                                   SV(DTypeName(h.dtype)), ShapeString(h.shape),
                                                   " takes ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorView> ResolveHandle(const ShmSegment& segment, const ShmTensorHandle& h,
                                         std::string name) {
  if (h.segment != segment.name()) {
    return absl::InvalidArgumentError(
        absl::StrCat("handle ", HandleString(h), " resolved against segment ", segment.name()));
  }
  if (!segment.ContainsPayloadRange(h.offset, h.bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("handle ", HandleString(h),
                                                   " lies outside the segment's payload (",
                                                   segment.size(), " bytes)"));
  }
  TANDEM_RETURN_IF_ERROR(ValidateHandleShape(h));
  TensorView v;
  v.name = std::move(name);
  v.dtype = h.dtype;
  v.shape = h.shape;
  v.data = segment.base() + h.offset;
  v.nbytes = static_cast<int64_t>(h.bytes);
  return v;
}

absl::StatusOr<ShmTensorHandle> MakeHandle(const ShmSegment& segment, const void* data, DType dtype,
                                           std::vector<int64_t> shape) {
  TANDEM_ASSIGN_OR_RETURN(const int64_t bytes,
                          ShapeBytesOf(dtype, shape, absl::StrCat("tensor in ", segment.name())));
  const auto* p = static_cast<const uint8_t*>(data);
  if (p < segment.base() || p > segment.base() + segment.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pointer does not lie in shm segment ", segment.name()));
  }
  ShmTensorHandle h;
  h.segment = segment.name();
  h.offset = static_cast<uint64_t>(p - segment.base());
  h.bytes = static_cast<uint64_t>(bytes);
  h.dtype = dtype;
  h.shape = std::move(shape);
  if (!segment.ContainsPayloadRange(h.offset, h.bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("handle ", HandleString(h), " lies outside the segment's payload"));
  }
  return h;
}

}  // namespace tandem::shm
