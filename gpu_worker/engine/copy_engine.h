// Where weight pages and activation transfers are copied: a dedicated copy
// engine with two queues. Urgent copies (the small activation transfers a
// step waits on) go before every queued page, so an activation waits behind
// at most the one page in flight, never behind a whole layer's weights
// (MoE-Lightning's paging). The CUDA device runs the same discipline on its
// copy stream; HostCopyEngine, the host device's, runs copies with memcpy on
// its own thread — so the paging logic runs and is tested without a GPU.
#ifndef TANDEM_GPU_WORKER_ENGINE_COPY_ENGINE_H_
#define TANDEM_GPU_WORKER_ENGINE_COPY_ENGINE_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace tandem {

struct CopyTask {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

class CopyEngine {
 public:
  using Done = std::function<void(absl::Status)>;
  virtual ~CopyEngine() = default;
  // Queues a copy; `done` runs on the engine's thread once it has landed
  // (or failed). Copies of one queue land in the order they were queued.
  virtual void Copy(const CopyTask& task, bool urgent, Done done) = 0;
};

// The two queues and the thread that works through them one copy at a
// time with `copier` (which returns once the copy has landed). Devices
// differ only in the copier.
class QueuedCopyEngine : public CopyEngine {
 public:
  using Copier = std::function<absl::Status(const CopyTask&)>;
  explicit QueuedCopyEngine(Copier copier);
  // Runs what is queued, then stops.
  ~QueuedCopyEngine() override;
  QueuedCopyEngine(const QueuedCopyEngine&) = delete;
  QueuedCopyEngine& operator=(const QueuedCopyEngine&) = delete;

  void Copy(const CopyTask& task, bool urgent, Done done) override;

  // For tests: while paused, queued copies wait (the one in flight lands).
  void Pause(bool paused);

 private:
  struct Item {
    CopyTask task;
    Done done;
  };
  void Run();
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Copier copier_;
  mutable absl::Mutex mu_;
  std::deque<Item> urgent_ ABSL_GUARDED_BY(mu_);
  std::deque<Item> pages_ ABSL_GUARDED_BY(mu_);
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The host device's: memcpy.
class HostCopyEngine final : public QueuedCopyEngine {
 public:
  HostCopyEngine();
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_COPY_ENGINE_H_
