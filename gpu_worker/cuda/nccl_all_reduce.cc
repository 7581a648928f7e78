#include "gpu_worker/cuda/nccl_all_reduce.h"

#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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

namespace {

// Waits for the communicator's pending operation (its creation, a
// collective's enqueueing, a finalize) to leave ncclInProgress.
absl::Status WaitForComm(ncclComm_t comm, absl::Time deadline, const char* what) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    TANDEM_NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm, &state));
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclStatus(state, what, __FILE__, __LINE__);
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": the NCCL group did not answer in time (a peer is late or gone)"));
    }
    std::this_thread::yield();
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclAllReduce>> NcclAllReduce::Create(const std::string& group_id,
                                                                     int rank, int size,
                                                                     int device,
                                                                     absl::Duration timeout) {
  ncclUniqueId id;
  if (group_id.size() != sizeof(id.internal)) {
    return absl::InvalidArgumentError(absl::StrCat("an NCCL group id is ", sizeof(id.internal),
                                                   " bytes, not ", group_id.size()));
  }
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL rank ", rank, " of ", size));
  }
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("an NCCL group's timeout must be positive");
  }
  std::memcpy(id.internal, group_id.data(), sizeof(id.internal));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  absl::StatusOr<Stream> stream = Stream::Create();
  if (!stream.ok()) return stream.status();
  // A non-blocking communicator: a blocking one waits for ever in
  // ncclCommInitRank for a rank that never comes, and its all-reduce
  // kernel spins for ever on a peer that died, which AllReduce promises
  // to turn into an error.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  absl::Status joined = r == ncclSuccess || r == ncclInProgress
                            ? absl::OkStatus()
                            : NcclStatus(r, "ncclCommInitRankConfig", __FILE__, __LINE__);
  if (joined.ok()) {
    joined = WaitForComm(comm, absl::Now() + timeout, "joining the NCCL group");
  }
  if (!joined.ok()) {
    if (comm != nullptr) ncclCommAbort(comm);
    return joined;
  }
  return std::unique_ptr<NcclAllReduce>(
      new NcclAllReduce(rank, size, comm, *std::move(stream), timeout));
}

NcclAllReduce::~NcclAllReduce() {
  if (comm_ == nullptr) return;
  // Finalize flushes what was issued; a group whose peers are gone cannot
  // finish that, and destroying it would wait for ever: abort it instead.
  const ncclResult_t r = ncclCommFinalize(comm_);
  if ((r == ncclSuccess || r == ncclInProgress) &&
      WaitForComm(comm_, absl::Now() + timeout_, "ncclCommFinalize").ok()) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
}

absl::Status NcclAllReduce::Fail(absl::Status s) {
  ncclCommAbort(comm_);
  comm_ = nullptr;
  return s;
}

absl::Status NcclAllReduce::Sum(float* data, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("all-reduce of a negative length");
  if (n == 0 || size_ == 1) return absl::OkStatus();
  if (comm_ == nullptr) {
    return absl::FailedPreconditionError(
        "the NCCL group failed earlier and was aborted; it cannot be used again");
  }
  const absl::Time deadline = absl::Now() + timeout_;
  const ncclResult_t r = ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat32, ncclSum,
                                       comm_, stream_.get());
  if (r != ncclSuccess && r != ncclInProgress) {
    return Fail(NcclStatus(r, "ncclAllReduce", __FILE__, __LINE__));
  }
  if (absl::Status s = WaitForComm(comm_, deadline, "ncclAllReduce"); !s.ok()) {
    return Fail(std::move(s));
  }
  // The engine's next kernel needs the sum: wait for the stream, watching
  // the group for a peer's failure and the clock for one that hangs.
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream_.get());
    if (q == cudaSuccess) return absl::OkStatus();
    if (q != cudaErrorNotReady) {
      return Fail(CudaStatus(q, "cudaStreamQuery after ncclAllReduce", __FILE__, __LINE__));
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t g = ncclCommGetAsyncError(comm_, &state);
    if (g != ncclSuccess) return Fail(NcclStatus(g, "ncclCommGetAsyncError", __FILE__, __LINE__));
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail(absl::UnavailableError(absl::StrCat(
          "all-reduce: the NCCL group failed (", ncclGetErrorString(state), ")")));
    }
    if (absl::Now() >= deadline) {
      return Fail(absl::DeadlineExceededError(absl::StrCat(
          "all-reduce of ", n, " floats: no answer from the NCCL group in ",
          absl::FormatDuration(timeout_), " (a peer is late or gone)")));
    }
    std::this_thread::yield();
  }
}

}  // namespace tandem::cuda
