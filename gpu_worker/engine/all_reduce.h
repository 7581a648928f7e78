// The collective tensor-parallel ranks use after a row-parallel layer: an
// element-wise sum of a float buffer across every rank of the group. The
// CUDA device does it with NCCL; the host device with shared memory
// (shm_all_reduce.h), so the sharding logic runs and is tested on machines
// without GPUs.
#ifndef TANDEM_GPU_WORKER_ENGINE_ALL_REDUCE_H_
#define TANDEM_GPU_WORKER_ENGINE_ALL_REDUCE_H_

#include <cstdint>

#include "absl/status/status.h"

namespace tandem {

class AllReduce {
 public:
  virtual ~AllReduce() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data[0, n) <- the sum over ranks of every rank's data[0, n). Every rank
  // of the group calls it with the same n, in the same order of calls. Every
  // rank gets bit-identical results (the ranks' contributions are added in
  // rank order), so ranks that go on computing from the sum stay in step.
  // A peer that does not arrive within the implementation's timeout, or has
  // died, fails the call (kUnavailable / kDeadlineExceeded) on every rank
  // still waiting; the group is unusable afterwards.
  virtual absl::Status Sum(float* data, int64_t n) = 0;
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_ALL_REDUCE_H_
