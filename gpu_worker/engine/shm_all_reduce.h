// AllReduce over POSIX shared memory for tensor-parallel ranks of the host
// device: processes (or threads) on one machine that share a segment by name.
//
// Each rank copies its contribution (up to `capacity_floats` at a time) into
// its own slot, waits at a barrier for every rank, then sums all the slots in
// rank order into its buffer — so every rank computes the same bits. Slots
// are double-buffered (alternate calls use alternate halves), which lets a
// single barrier per chunk suffice: a rank that races ahead writes the other
// half, and cannot come back to this one before the slow rank has passed the
// next barrier, i.e. finished reading.
//
// The barrier spins briefly, then sleeps on a futex. A waiting rank gives up
// after `timeout` (kDeadlineExceeded) or as soon as it sees a peer process
// die (kUnavailable); either way it marks the group failed so that every
// other rank fails fast instead of waiting out its own timeout. A rank that
// is destroyed marks the group as left, for the same reason. A failed group
// stays failed: the ranks must build a new one.
#ifndef TANDEM_GPU_WORKER_ENGINE_SHM_ALL_REDUCE_H_
#define TANDEM_GPU_WORKER_ENGINE_SHM_ALL_REDUCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/shm/shm_segment.h"
#include "gpu_worker/engine/all_reduce.h"

namespace tandem {

struct ShmAllReduceOptions {
  // Floats per rank per round; larger sums go in several rounds. The segment
  // holds 2 * size * capacity floats.
  int64_t capacity_floats = int64_t{1} << 18;
  // How long a rank waits for its peers, at a barrier and (ranks > 0) for
  // rank 0 to create the segment.
  absl::Duration timeout = absl::Seconds(60);
  // Polled while a rank > 0 waits for rank 0 to create the group: true ends
  // the wait with kCancelled (e.g. the LoadModel call was cancelled).
  std::function<bool()> cancelled;
};

class ShmAllReduce : public AllReduce {
 public:
  static constexpr int kMaxRanks = 64;

  // Joins the group `name` (a shm segment name, "/tandem-..."; rank 0
  // creates it and removes the name when it goes, the others open it,
  // waiting up to options.timeout for it to appear). Errors: bad rank, size
  // or capacity (kInvalidArgument); a segment of another group size or
  // capacity (kFailedPrecondition); the rank already taken (kAlreadyExists);
  // rank 0 never came (kDeadlineExceeded). size 1 needs no segment.
  static absl::StatusOr<std::unique_ptr<ShmAllReduce>> Create(const std::string& name, int rank,
                                                              int size,
                                                              const ShmAllReduceOptions& options);
  ~ShmAllReduce() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status Sum(float* data, int64_t n) override;

 private:
  ShmAllReduce(int rank, int size, const ShmAllReduceOptions& options)
      : rank_(rank), size_(size), options_(options) {}
  struct Control;
  Control& control() const;
  float* slot(int parity, int rank) const;
  absl::Status Barrier();
  // Marks the group failed (so peers stop waiting) and returns `why`.
  absl::Status Fail(absl::Status why);

  int rank_;
  int size_;
  ShmAllReduceOptions options_;
  int64_t stride_ = 0;  // floats between slots (capacity rounded up to a cache line)
  int parity_ = 0;
  bool joined_ = false;  // this rank holds its place in the group
  std::unique_ptr<shm::ShmSegment> segment_;
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_SHM_ALL_REDUCE_H_
