#include "cpu_worker/kv/huge_page_array.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace tandem {

absl::StatusOr<HugePageArray> HugePageArray::Allocate(size_t count) {
  if (count == 0) return HugePageArray();
  if (count > std::numeric_limits<size_t>::max() / sizeof(float)) {
    return absl::ResourceExhaustedError(absl::StrCat("an array of ", count, " floats"));
  }
  // Whole 2 MiB pages, so the tail can be a huge page too.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (count * sizeof(float) + kHuge - 1) / kHuge * kHuge;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", bytes, " bytes for a KV cache: ", std::strerror(errno)));
  }
#ifdef MADV_HUGEPAGE
  (void)madvise(p, bytes, MADV_HUGEPAGE);  // advice only: 4 KiB pages work as well
#endif
  return HugePageArray(static_cast<float*>(p), bytes, count);
}

HugePageArray::~HugePageArray() {
  if (p_ != nullptr) munmap(p_, bytes_);
}

HugePageArray& HugePageArray::operator=(HugePageArray&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) munmap(p_, bytes_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    count_ = std::exchange(o.count_, 0);
  }
  return *this;
}

}  // namespace tandem
