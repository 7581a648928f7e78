#include "gpu_worker/engine/copy_engine.h"

#include <cstring>
#include <utility>

namespace tandem {

HostCopyEngine::HostCopyEngine() : thread_([this] { Run(); }) {}

HostCopyEngine::~HostCopyEngine() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    paused_ = false;
  }
  thread_.join();
}

void HostCopyEngine::Copy(const CopyTask& task, bool urgent, Done done) {
  absl::MutexLock lock(&mu_);
  (urgent ? urgent_ : pages_).push_back({task, std::move(done)});
}

void HostCopyEngine::Pause(bool paused) {
  absl::MutexLock lock(&mu_);
  paused_ = paused;
}

bool HostCopyEngine::Ready() const {
  return (!paused_ && (!urgent_.empty() || !pages_.empty())) ||
         (stopping_ && urgent_.empty() && pages_.empty());
}

void HostCopyEngine::Run() {
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &HostCopyEngine::Ready));
      if (urgent_.empty() && pages_.empty()) return;  // stopping, drained
      std::deque<Item>& q = !urgent_.empty() ? urgent_ : pages_;
      item = std::move(q.front());
      q.pop_front();
    }
    if (item.task.bytes > 0) std::memcpy(item.task.dst, item.task.src, item.task.bytes);
    if (item.done) item.done(absl::OkStatus());
  }
}

}  // namespace tandem
