// Streams the weights of host-resident layers (ScheInfer's CG part, the
// FFN weights MoE-Lightning pages in) into a double-buffered staging area
// just ahead of use: while layer i computes from one buffer, the next
// streamed layer's weights land in the other, copied page by page on the
// copy engine (copy_engine.h) so activation transfers are never stuck behind
// a whole layer. The caller owns the staging memory (GPU memory on the CUDA
// device, host memory on the host device).
//
// Protocol, per step: Prefetch the first two streamed layers (in streamed
// order); for each streamed layer in that order, Acquire it (waits until
// its pages have landed; returns where each of its matrices now lies), run
// it, Release it (which prefetches the layer two further on, wrapping round
// to the first layers of the next step). Acquire of a layer that is not
// next is a FailedPrecondition; a failed copy fails the Acquire with its
// status and Reset() returns the pager to its initial state (waiting for
// copies in flight first), so the next step can start clean.
#ifndef TANDEM_GPU_WORKER_ENGINE_WEIGHT_PAGER_H_
#define TANDEM_GPU_WORKER_ENGINE_WEIGHT_PAGER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gpu_worker/engine/copy_engine.h"

namespace tandem {

struct StreamedLayer {
  int64_t layer = 0;  // the model layer (for messages and Acquire)
  // Host bytes of each matrix streamed for the layer, in the order the
  // staged addresses come back.
  struct Matrix {
    const void* src = nullptr;
    size_t bytes = 0;
  };
  std::vector<Matrix> matrices;
  size_t bytes() const;
};

struct WeightPagerStats {
  int64_t layers_streamed = 0;
  int64_t pages = 0;
  int64_t bytes = 0;
  double acquire_wait_seconds = 0;  // time Acquire spent waiting for pages
};

class WeightPager {
 public:
  // `layers` in the order they run (each layer once); two staging buffers
  // of `slot_bytes` each (at least the largest layer's bytes, checked);
  // pages of `page_bytes`; copies on `engine` (not owned, outlives this).
  static absl::StatusOr<std::unique_ptr<WeightPager>> Create(std::vector<StreamedLayer> layers,
                                                            void* slot0, void* slot1,
                                                            size_t slot_bytes, size_t page_bytes,
                                                            CopyEngine* engine);
  // Waits for copies in flight.
  ~WeightPager();

  // The layers streamed, in order.
  const std::vector<StreamedLayer>& layers() const { return layers_; }
  bool IsStreamed(int64_t layer) const;

  // Starts the step: prefetches the first (up to) two layers unless they are
  // already on their way (prefetched at the end of the previous step).
  void BeginStep();
  // Waits until `layer`'s pages have landed; the staged address of each of
  // its matrices, in order.
  absl::StatusOr<std::vector<const void*>> Acquire(int64_t layer);
  // The layer's buffer may be reused: prefetches the layer two further on.
  void Release(int64_t layer);
  // Back to the initial state after a failure (or to stop streaming).
  void Reset();

  WeightPagerStats stats() const;

 private:
  struct Fetch {
    size_t index;      // into layers_
    int slot;          // staging buffer
    int64_t pending;   // pages not landed yet
    absl::Status status;
  };
  WeightPager(std::vector<StreamedLayer> layers, void* slot0, void* slot1, size_t page_bytes,
              CopyEngine* engine);
  struct PageCopy {
    CopyTask task;
    std::shared_ptr<Fetch> fetch;
  };
  // Books the fetch of layers_[index] into the next slot; returns its page
  // copies, which Issue() queues once mu_ is released.
  std::vector<PageCopy> StartFetch(size_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Issue(const std::vector<PageCopy>& copies) ABSL_LOCKS_EXCLUDED(mu_);
  void WaitIdle() ABSL_LOCKS_EXCLUDED(mu_);

  const std::vector<StreamedLayer> layers_;
  uint8_t* const slots_[2];
  const size_t page_bytes_;
  CopyEngine* const engine_;

  mutable absl::Mutex mu_;
  // Fetches in flight or staged, oldest first (at most two); the shared_ptr
  // keeps a fetch alive for copy callbacks still to run.
  std::deque<std::shared_ptr<Fetch>> fetches_ ABSL_GUARDED_BY(mu_);
  int next_slot_ ABSL_GUARDED_BY(mu_) = 0;
  size_t next_index_ ABSL_GUARDED_BY(mu_) = 0;  // the layer to fetch next
  int64_t pages_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  WeightPagerStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_WEIGHT_PAGER_H_
