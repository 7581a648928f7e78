// HostWeightStore: many tensors in one shared-memory segment, owned by a
// cpu_worker and mapped (and pinned for DMA) by gpu_workers, so that CC and CG
// weights are the same bytes.
//
// The segment holds a small header, a fixed-size directory (name, offset,
// bytes, dtype, shape per tensor) and a data area filled by a bump allocator
// (alignment 64 bytes by default, 4096 for page-aligned DMA). A peer that
// opens the store by name can list and look up every tensor without any other
// channel.
//
// Writing is done by the creator process: Allocate() reserves a named tensor
// and returns its bytes to fill; Publish() makes it visible to lookups; Add()
// does both from a buffer; Seal() says the store is complete. Directory
// entries are published with release stores and read with acquire loads, so
// a peer may open and read the store while the creator is still loading.
// All methods are thread-safe.
#ifndef TANDEM_COMMON_SHM_HOST_WEIGHT_STORE_H_
#define TANDEM_COMMON_SHM_HOST_WEIGHT_STORE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "common/shm/shm_segment.h"
#include "common/shm/tensor_handle.h"
#include "common/tensor.h"

namespace tandem::shm {

inline constexpr size_t kMaxWeightNameBytes = 191;
inline constexpr size_t kMaxWeightRank = 8;

struct WeightStoreOptions {
  int64_t capacity_bytes = 0;  // room for tensor data (alignment padding included)
  int64_t max_tensors = 4096;  // directory entries (about 300 bytes each)
  int64_t alignment = 64;      // of every tensor; a power of two, 64 .. 2 MiB
  bool reserve = true;         // see SegmentOptions::reserve
};

// A tensor allocated but not yet published: fill `data`, then Publish().
struct WritableTensor {
  ShmTensorHandle handle;
  absl::Span<uint8_t> data;
};

class HostWeightStore {
 public:
  static absl::StatusOr<std::unique_ptr<HostWeightStore>> Create(std::string_view name,
                                                                 const WeightStoreOptions& options);
  // kFailedPrecondition if the segment is not a weight store (or is corrupt).
  static absl::StatusOr<std::unique_ptr<HostWeightStore>> Open(
      std::string_view name, ShmSegment::Access access = ShmSegment::Access::kReadOnly);

  HostWeightStore(const HostWeightStore&) = delete;
  HostWeightStore& operator=(const HostWeightStore&) = delete;

  // --- writer (the creator process) ---
  // Reserves `name`. kAlreadyExists for a duplicate name; kInvalidArgument for
  // a bad name/shape; kResourceExhausted (naming the tensor) when the data
  // area or the directory is full; kFailedPrecondition after Seal() or in a
  // process that did not create the store.
  absl::StatusOr<WritableTensor> Allocate(std::string_view name, DType dtype,
                                          std::vector<int64_t> shape);
  absl::Status Publish(std::string_view name);
  // Allocate + copy + Publish; `bytes` must match dtype and shape.
  absl::StatusOr<ShmTensorHandle> Add(std::string_view name, DType dtype,
                                      std::vector<int64_t> shape, absl::Span<const uint8_t> bytes);
  // Marks the store complete; kFailedPrecondition if a tensor is unpublished.
  absl::Status Seal();

  // --- readers (any process) ---
  bool sealed() const;
  // kNotFound for an unknown name; kUnavailable if allocated but unpublished.
  absl::StatusOr<TensorView> Lookup(std::string_view name) const;
  absl::StatusOr<ShmTensorHandle> Handle(std::string_view name) const;
  // A handle (e.g. from a proto) as a view into this store, bounds-checked.
  absl::StatusOr<TensorView> Resolve(const ShmTensorHandle& handle) const;
  // Published tensors in allocation order.
  std::vector<TensorView> List() const;
  int64_t num_tensors() const;  // allocated, published or not
  int64_t capacity_bytes() const;
  int64_t used_bytes() const;  // alignment padding included
  int64_t alignment() const;

  const ShmSegment& segment() const { return *segment_; }
  const std::string& name() const { return segment_->name(); }
  // Creator only: see ShmSegment::Unlink().
  absl::Status Unlink() { return segment_->Unlink(); }

 private:
  struct Header;
  struct Entry;

  explicit HostWeightStore(std::unique_ptr<ShmSegment> segment);
  Header& header() const;
  Entry& entry(uint64_t i) const;
  absl::Status CheckWriter(std::string_view what) const;
  // Indexes directory entries published since the last call. Needs mu_.
  void RefreshIndex() const;
  // The index of `name`, refreshing once on a miss. Needs mu_.
  absl::StatusOr<uint64_t> Find(std::string_view name) const;
  // Entry i as a handle / view, validated against the segment.
  absl::StatusOr<ShmTensorHandle> EntryHandle(uint64_t i) const;
  absl::StatusOr<TensorView> EntryView(uint64_t i) const;
  bool IsPublished(uint64_t i) const;

  std::unique_ptr<ShmSegment> segment_;
  mutable std::mutex mu_;
  mutable absl::flat_hash_map<std::string, uint64_t> index_;  // name -> entry
  mutable uint64_t indexed_ = 0;                              // entries in index_
};

}  // namespace tandem::shm

#endif  // TANDEM_COMMON_SHM_HOST_WEIGHT_STORE_H_
