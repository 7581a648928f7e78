#include "gpu_worker/engine/copy_engine.h"

#include <cstring>
#include <utility>

namespace tandem {

QueuedCopyEngine::QueuedCopyEngine(Copier copier)
    : copier_(std::move(copier)), thread_([this] { Run(); }) {}

QueuedCopyEngine::~QueuedCopyEngine() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    paused_ = false;
  }
  thread_.join();
}

void QueuedCopyEngine::Copy(const CopyTask& task, bool urgent, Done done) {
  absl::MutexLock lock(&mu_);
  (urgent ? urgent_ : pages_).push_back({task, std::move(done)});
}

void QueuedCopyEngine::Pause(bool paused) {
  absl::MutexLock lock(&mu_);
  paused_ = paused;
}

bool QueuedCopyEngine::Ready() const {
  return (!paused_ && (!urgent_.empty() || !pages_.empty())) ||
         (stopping_ && urgent_.empty() && pages_.empty());
}

void QueuedCopyEngine::Run() {
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &QueuedCopyEngine::Ready));
      if (urgent_.empty() && pages_.empty()) return;  // stopping, drained
      std::deque<Item>& q = !urgent_.empty() ? urgent_ : pages_;
      item = std::move(q.front());
      q.pop_front();
    }
    absl::Status s = item.task.bytes > 0 ? copier_(item.task) : absl::OkStatus();
    if (item.done) item.done(std::move(s));
  }
}

}  // namespace tandem

namespace tandem {

HostCopyEngine::HostCopyEngine()
    : QueuedCopyEngine([](const CopyTask& t) {
        std::memcpy(t.dst, t.src, t.bytes);
        return absl::OkStatus();
      }) {}

}  // namespace tandem
