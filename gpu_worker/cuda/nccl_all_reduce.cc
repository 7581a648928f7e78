#include "gpu_worker/cuda/nccl_all_reduce.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "gpu_worker/cuda/cuda_status.h"

namespace tandem::cuda {

absl::Status NcclStatus(ncclResult_t r, const char* stmt, const char* file, int line) {
  if (r == ncclSuccess) return absl::OkStatus();
  const auto code = r == ncclInvalidArgument || r == ncclInvalidUsage
                        ? absl::StatusCode::kInvalidArgument
                    : r == ncclRemoteError || r == ncclSystemError
                        ? absl::StatusCode::kUnavailable
                        : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(file, ":", line, ": ", stmt, ": ",
                                         ncclGetErrorString(r)));
}

absl::StatusOr<std::string> NewNcclGroupId() {
  ncclUniqueId id;
  TANDEM_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<NcclAllReduce>> NcclAllReduce::Create(const std::string& group_id,
                                                                     int rank, int size,
                                                                     int device) {
  ncclUniqueId id;
  if (group_id.size() != sizeof(id.internal)) {
    return absl::InvalidArgumentError(absl::StrCat("an NCCL group id is ", sizeof(id.internal),
                                                   " bytes, not ", group_id.size()));
  }
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL rank ", rank, " of ", size));
  }
  std::memcpy(id.internal, group_id.data(), sizeof(id.internal));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  absl::StatusOr<Stream> stream = Stream::Create();
  if (!stream.ok()) return stream.status();
  ncclComm_t comm = nullptr;
  TANDEM_NCCL_RETURN_IF_ERROR(ncclCommInitRank(&comm, size, id, rank));
  return std::unique_ptr<NcclAllReduce>(new NcclAllReduce(rank, size, comm, *std::move(stream)));
}

NcclAllReduce::~NcclAllReduce() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
}

absl::Status NcclAllReduce::Sum(float* data, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("all-reduce of a negative length");
  if (n == 0 || size_ == 1) return absl::OkStatus();
  TANDEM_NCCL_RETURN_IF_ERROR(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat32,
                                            ncclSum, comm_, stream_.get()));
  return stream_.Synchronize();
}

}  // namespace tandem::cuda
