// The CUDA device's AllReduce: NCCL, one communicator per tensor-parallel
// group, one process (or thread) per GPU. Sum() takes a device pointer and
// reduces in place on the rank's stream, waiting for it (the engine's next
// kernel needs the sum). NCCL's ring all-reduce hands every rank the same
// bits, as AllReduce promises.
//
// The group's id is an ncclUniqueId (128 bytes) made once, by rank 0's
// worker (NewNcclGroupId), and handed to every rank in
// LoadModelRequest.tensor_parallel.group_id by the coordinator.
#ifndef TANDEM_GPU_WORKER_CUDA_NCCL_ALL_REDUCE_H_
#define TANDEM_GPU_WORKER_CUDA_NCCL_ALL_REDUCE_H_

#include <nccl.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpu_worker/cuda/cuda_resources.h"
#include "gpu_worker/engine/all_reduce.h"

namespace tandem::cuda {

absl::Status NcclStatus(ncclResult_t r, const char* stmt, const char* file, int line);

// A fresh group id (the bytes of an ncclUniqueId).
absl::StatusOr<std::string> NewNcclGroupId();

class NcclAllReduce final : public AllReduce {
 public:
  // Joins the group on `device` (blocks until every rank has joined, at
  // most `timeout`: DeadlineExceeded after it). InvalidArgument for a
  // malformed id or rank. The communicator is NCCL's non-blocking kind, so
  // that a late or dead peer fails Sum() after `timeout` (DeadlineExceeded)
  // or as soon as NCCL reports it (Unavailable); the group is then aborted
  // and every later Sum() fails (FailedPrecondition).
  static absl::StatusOr<std::unique_ptr<NcclAllReduce>> Create(
      const std::string& group_id, int rank, int size, int device,
      absl::Duration timeout = absl::Seconds(60));
  ~NcclAllReduce() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // `data` is device memory.
  absl::Status Sum(float* data, int64_t n) override;

 private:
  NcclAllReduce(int rank, int size, ncclComm_t comm, Stream stream, absl::Duration timeout)
      : rank_(rank), size_(size), comm_(comm), stream_(std::move(stream)), timeout_(timeout) {}
  // Aborts the communicator (it is unusable after a failure) and returns s.
  absl::Status Fail(absl::Status s);

  int rank_, size_;
  ncclComm_t comm_;  // null once aborted
  Stream stream_;
  absl::Duration timeout_;
};

}  // namespace tandem::cuda

#define TANDEM_NCCL_RETURN_IF_ERROR(stmt)                                                  \
  do {                                                                                     \
    ::absl::Status tandem_nccl_s_ = ::tandem::cuda::NcclStatus((stmt), #stmt, __FILE__,    \
                                                               __LINE__);                  \
    if (!tandem_nccl_s_.ok()) return tandem_nccl_s_;                                       \
  } while (0)

#endif  // TANDEM_GPU_WORKER_CUDA_NCCL_ALL_REDUCE_H_
