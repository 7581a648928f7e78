// Zero-filled float storage for KV caches: an anonymous mapping marked for
// transparent huge pages (madvise(MADV_HUGEPAGE); best effort — kernels
// with THP off or in "never" mode keep 4 KiB pages). Decode attention walks
// a sequence's KV through its block table, touching a different 4 KiB page
// every few rows; 2 MiB pages cut the TLB misses of that walk (about 10 %
// of attention time per core on the development VM).
#ifndef TANDEM_CPU_WORKER_KV_HUGE_PAGE_ARRAY_H_
#define TANDEM_CPU_WORKER_KV_HUGE_PAGE_ARRAY_H_

#include <cstddef>
#include <utility>

#include "absl/status/statusor.h"

namespace tandem {

class HugePageArray {
 public:
  // `count` floats, all zero. ResourceExhausted if the memory cannot be had.
  static absl::StatusOr<HugePageArray> Allocate(size_t count);

  HugePageArray() = default;
  ~HugePageArray();
  HugePageArray(HugePageArray&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)),
        count_(std::exchange(o.count_, 0)) {}
  HugePageArray& operator=(HugePageArray&& o) noexcept;

  float* data() const { return p_; }
  size_t size() const { return count_; }

 private:
  HugePageArray(float* p, size_t bytes, size_t count) : p_(p), bytes_(bytes), count_(count) {}
  float* p_ = nullptr;
  size_t bytes_ = 0;  // of the mapping
  size_t count_ = 0;
};

}  // namespace tandem

#endif  // TANDEM_CPU_WORKER_KV_HUGE_PAGE_ARRAY_H_
