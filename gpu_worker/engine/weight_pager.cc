#include "gpu_worker/engine/weight_pager.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

// Matrices start on cache lines in the staging buffer.
constexpr size_t kAlign = 64;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Where each matrix of `l` lies in a staging buffer.
std::vector<size_t> Offsets(const StreamedLayer& l) {
  std::vector<size_t> off;
  size_t at = 0;
  for (const auto& m : l.matrices) {
    off.push_back(at);
    at += AlignUp(m.bytes);
  }
  return off;
}

}  // namespace

size_t StreamedLayer::bytes() const {
  size_t n = 0;
  for (const auto& m : matrices) n += AlignUp(m.bytes);
  return n;
}

absl::StatusOr<std::unique_ptr<WeightPager>> WeightPager::Create(
    std::vector<StreamedLayer> layers, void* slot0, void* slot1, size_t slot_bytes,
    size_t page_bytes, CopyEngine* engine) {
  if (layers.empty()) return absl::InvalidArgumentError("weight pager: no layers to stream");
  if (slot0 == nullptr || slot1 == nullptr || engine == nullptr || page_bytes == 0) {
    return absl::InvalidArgumentError(
        "weight pager: needs two staging buffers, a copy engine and a page size");
  }
  absl::flat_hash_set<int64_t> seen;
  for (const StreamedLayer& l : layers) {
    if (!seen.insert(l.layer).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("weight pager: layer ", l.layer, " is listed twice"));
    }
    if (l.bytes() > slot_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("weight pager: layer ", l.layer, " needs ",
                                                     l.bytes(), " staging bytes; a buffer holds ",
                                                     slot_bytes));
    }
    for (const auto& m : l.matrices) {
      if (m.src == nullptr && m.bytes > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("weight pager: layer ", l.layer, " has a matrix without bytes"));
      }
    }
  }
  return std::unique_ptr<WeightPager>(
      new WeightPager(std::move(layers), slot0, slot1, page_bytes, engine));
}

WeightPager::WeightPager(std::vector<StreamedLayer> layers, void* slot0, void* slot1,
                         size_t page_bytes, CopyEngine* engine)
    : layers_(std::move(layers)),
      slots_{static_cast<uint8_t*>(slot0), static_cast<uint8_t*>(slot1)},
      page_bytes_(page_bytes),
      engine_(engine) {}

WeightPager::~WeightPager() { WaitIdle(); }

bool WeightPager::IsStreamed(int64_t layer) const {
  return std::any_of(layers_.begin(), layers_.end(),
                     [&](const StreamedLayer& l) { return l.layer == layer; });
}

void WeightPager::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int64_t* n) { return *n == 0; }, &pages_in_flight_));
}

std::vector<WeightPager::PageCopy> WeightPager::StartFetch(size_t index) {
  auto fetch = std::make_shared<Fetch>();
  fetch->index = index;
  fetch->slot = next_slot_;
  next_slot_ ^= 1;
  const StreamedLayer& l = layers_[index];
  const std::vector<size_t> offsets = Offsets(l);
  std::vector<CopyTask> pages;
  for (size_t m = 0; m < l.matrices.size(); ++m) {
    const auto* src = static_cast<const uint8_t*>(l.matrices[m].src);
    uint8_t* dst = slots_[fetch->slot] + offsets[m];
    for (size_t at = 0; at < l.matrices[m].bytes; at += page_bytes_) {
      pages.push_back({dst + at, src + at, std::min(page_bytes_, l.matrices[m].bytes - at)});
    }
  }
  fetch->pending = static_cast<int64_t>(pages.size());
  pages_in_flight_ += fetch->pending;
  stats_.layers_streamed += 1;
  stats_.pages += fetch->pending;
  stats_.bytes += static_cast<int64_t>(l.bytes());
  fetches_.push_back(fetch);
  std::vector<PageCopy> out;
  for (const CopyTask& page : pages) out.push_back({page, fetch});
  return out;
}

void WeightPager::Issue(const std::vector<PageCopy>& copies) {
  for (const PageCopy& c : copies) {
    engine_->Copy(c.task, /*urgent=*/false, [this, fetch = c.fetch](absl::Status s) {
      absl::MutexLock lock(&mu_);
      if (!s.ok() && fetch->status.ok()) fetch->status = std::move(s);
      --fetch->pending;
      --pages_in_flight_;
    });
  }
}

void WeightPager::BeginStep() {
  std::vector<PageCopy> copies;
  {
    absl::MutexLock lock(&mu_);
    const size_t ahead = std::min<size_t>(2, layers_.size());
    while (fetches_.size() < ahead) {
      std::vector<PageCopy> c = StartFetch(next_index_);
      copies.insert(copies.end(), c.begin(), c.end());
      next_index_ = (next_index_ + 1) % layers_.size();
    }
  }
  Issue(copies);  // outside the lock: a copy engine may call back at once
}

absl::StatusOr<std::vector<const void*>> WeightPager::Acquire(int64_t layer) {
  absl::MutexLock lock(&mu_);
  if (fetches_.empty() || layers_[fetches_.front()->index].layer != layer) {
    return absl::FailedPreconditionError(absl::StrCat(
        "weight pager: layer ", layer, " acquired out of order (next: ",
        fetches_.empty() ? std::string("none") : absl::StrCat(layers_[fetches_.front()->index].layer),
        ")"));
  }
  std::shared_ptr<Fetch> f = fetches_.front();
  const auto t0 = std::chrono::steady_clock::now();
  mu_.Await(absl::Condition(+[](Fetch* x) { return x->pending == 0; }, f.get()));
  stats_.acquire_wait_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!f->status.ok()) {
    return absl::Status(f->status.code(), absl::StrCat("streaming layer ", layer, "'s weights: ",
                                                       f->status.message()));
  }
  const StreamedLayer& l = layers_[f->index];
  std::vector<const void*> out;
  for (size_t off : Offsets(l)) out.push_back(slots_[f->slot] + off);
  return out;
}

void WeightPager::Release(int64_t layer) {
  std::vector<PageCopy> copies;
  {
    absl::MutexLock lock(&mu_);
    if (fetches_.empty() || layers_[fetches_.front()->index].layer != layer) return;
    fetches_.pop_front();
    if (fetches_.size() < std::min<size_t>(2, layers_.size())) {
      copies = StartFetch(next_index_);
      next_index_ = (next_index_ + 1) % layers_.size();
    }
  }
  Issue(copies);
}

void WeightPager::Reset() {
  WaitIdle();
  absl::MutexLock lock(&mu_);
  fetches_.clear();
  next_index_ = 0;
  next_slot_ = 0;
}

WeightPagerStats WeightPager::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace tandem
