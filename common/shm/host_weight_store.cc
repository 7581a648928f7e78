#include "common/shm/host_weight_store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/shm/shm_sync.h"
#include "common/status_macros.h"

namespace tandem::shm {
namespace {

// absl here is built without std::string_view support: bridge explicitly.
absl::string_view SV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr uint64_t kStoreMagic = 0x4f545357444e4154ull;  // "TANDWSTO"
constexpr uint64_t kPage = 4096;
constexpr int64_t kMaxAlignment = int64_t{1} << 21;
constexpr int64_t kMaxTensors = int64_t{1} << 22;

constexpr uint64_t RoundUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

// At the start of the payload.
struct HostWeightStore::Header {
  uint64_t magic;
  uint64_t alignment;
  uint64_t max_tensors;
  uint64_t dir_offset;     // Entry array, from the segment start
  uint64_t data_offset;    // tensor data, from the segment start (page-aligned)
  uint64_t data_capacity;  // bytes
  uint64_t num_entries;    // atomic: entries [0, n) are fully written
  uint64_t used;           // atomic: bump pointer, bytes past data_offset
  uint32_t sealed;         // atomic
};

struct HostWeightStore::Entry {
  char name[kMaxWeightNameBytes + 1];  // NUL-terminated
  uint64_t offset;                     // from the segment start
  uint64_t bytes;
  uint32_t dtype;
  uint32_t rank;
  int64_t shape[kMaxWeightRank];
  uint32_t published;  // atomic
  uint32_t reserved;
};
static_assert(sizeof(char[kMaxWeightNameBytes + 1]) % 8 == 0);

namespace {

struct Layout {
  uint64_t dir_offset, data_offset, total;
};

template <typename Header, typename Entry>
Layout ComputeLayout(uint64_t max_tensors, uint64_t capacity, uint64_t alignment) {
  Layout l;
  l.dir_offset = kSegmentHeaderBytes + RoundUp(sizeof(Header), 64);
  l.data_offset =
      RoundUp(l.dir_offset + max_tensors * sizeof(Entry), std::max<uint64_t>(kPage, alignment));
  l.total = l.data_offset + RoundUp(capacity, kPage);
  return l;
}

bool ValidAlignment(uint64_t a) {
  return a >= 64 && a <= static_cast<uint64_t>(kMaxAlignment) && (a & (a - 1)) == 0;
}

}  // namespace

HostWeightStore::HostWeightStore(std::unique_ptr<ShmSegment> segment)
    : segment_(std::move(segment)) {}

HostWeightStore::Header& HostWeightStore::header() const {
  return *reinterpret_cast<Header*>(segment_->payload());
}

HostWeightStore::Entry& HostWeightStore::entry(uint64_t i) const {
  return reinterpret_cast<Entry*>(segment_->base() + header().dir_offset)[i];
}

absl::StatusOr<std::unique_ptr<HostWeightStore>> HostWeightStore::Create(
    std::string_view name, const WeightStoreOptions& options) {
  if (options.capacity_bytes < 0 || options.capacity_bytes > (int64_t{1} << 42) ||
      options.max_tensors < 1 || options.max_tensors > kMaxTensors ||
      !ValidAlignment(static_cast<uint64_t>(options.alignment))) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight store ", SV(name), ": capacity ", options.capacity_bytes,
                     ", max_tensors ", options.max_tensors, " (1..", kMaxTensors, "), alignment ",
                     options.alignment, " (a power of two, 64..", kMaxAlignment, ")"));
  }
  const auto capacity = static_cast<uint64_t>(options.capacity_bytes);
  const Layout l = ComputeLayout<Header, Entry>(static_cast<uint64_t>(options.max_tensors),
                                                capacity, static_cast<uint64_t>(options.alignment));
  SegmentOptions seg_options;
  seg_options.kind = SegmentKind::kWeightStore;
  seg_options.mark_ready = false;
  seg_options.reserve = options.reserve;
  TANDEM_ASSIGN_OR_RETURN(
      auto segment,
      ShmSegment::Create(name, static_cast<int64_t>(l.total) - kSegmentHeaderBytes, seg_options));
  auto* h = reinterpret_cast<Header*>(segment->payload());
  h->alignment = static_cast<uint64_t>(options.alignment);
  h->max_tensors = static_cast<uint64_t>(options.max_tensors);
  h->dir_offset = l.dir_offset;
  h->data_offset = l.data_offset;
  h->data_capacity = capacity;
  h->magic = kStoreMagic;
  segment->MarkReady();
  return std::unique_ptr<HostWeightStore>(new HostWeightStore(std::move(segment)));
}

absl::StatusOr<std::unique_ptr<HostWeightStore>> HostWeightStore::Open(std::string_view name,
                                                                       ShmSegment::Access access) {
  TANDEM_ASSIGN_OR_RETURN(auto segment, ShmSegment::Open(name, access, SegmentKind::kWeightStore));
  bool ok = static_cast<size_t>(segment->payload_size()) >= sizeof(Header);
  if (ok) {
    const auto* h = reinterpret_cast<const Header*>(segment->payload());
    ok = h->magic == kStoreMagic && ValidAlignment(h->alignment) && h->max_tensors >= 1 &&
         h->max_tensors <= static_cast<uint64_t>(kMaxTensors) &&
         h->data_capacity <= static_cast<uint64_t>(segment->size());
    if (ok) {
      const Layout l = ComputeLayout<Header, Entry>(h->max_tensors, h->data_capacity, h->alignment);
      ok = l.dir_offset == h->dir_offset && l.data_offset == h->data_offset &&
           l.total == static_cast<uint64_t>(segment->size());
    }
  }
  if (!ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("weight store ", SV(name), ": store header does not match its segment"));
  }
  return std::unique_ptr<HostWeightStore>(new HostWeightStore(std::move(segment)));
}

absl::Status HostWeightStore::CheckWriter(std::string_view what) const {
  if (!segment_->is_owner() || segment_->creator_pid() != static_cast<int32_t>(::getpid())) {
    return absl::FailedPreconditionError(absl::StrCat("weight store ", name(), ": ", SV(what),
                                                      ": only the creating process writes"));
  }
  if (sealed()) {
    return absl::FailedPreconditionError(
        absl::StrCat("weight store ", name(), ": ", SV(what), ": the store is sealed"));
  }
  return absl::OkStatus();
}

void HostWeightStore::RefreshIndex() const {
  Header& h = header();
  const uint64_t n = std::min(Atomic(h.num_entries).load(std::memory_order_acquire), h.max_tensors);
  for (; indexed_ < n; ++indexed_) {
    const Entry& e = entry(indexed_);
    index_.emplace(std::string(e.name, strnlen(e.name, sizeof(e.name))), indexed_);
  }
}

absl::StatusOr<uint64_t> HostWeightStore::Find(std::string_view name) const {
  auto it = index_.find(SV(name));
  if (it == index_.end()) {
    RefreshIndex();
    it = index_.find(SV(name));
  }
  if (it == index_.end()) {
    return absl::NotFoundError(
        absl::StrCat("weight store ", this->name(), ": no tensor \"", SV(name), "\""));
  }
  return it->second;
}

bool HostWeightStore::IsPublished(uint64_t i) const {
  return Atomic(entry(i).published).load(std::memory_order_acquire) != 0;
}

absl::StatusOr<ShmTensorHandle> HostWeightStore::EntryHandle(uint64_t i) const {
  const Entry& e = entry(i);
  if (e.rank > kMaxWeightRank || e.dtype > static_cast<uint32_t>(DType::kI32)) {
    return absl::DataLossError(absl::StrCat("weight store ", name(), ": corrupt entry ", i));
  }
  ShmTensorHandle handle;
  handle.segment = name();
  handle.offset = e.offset;
  handle.bytes = e.bytes;
  handle.dtype = static_cast<DType>(e.dtype);
  handle.shape.assign(e.shape, e.shape + e.rank);
  return handle;
}

absl::StatusOr<TensorView> HostWeightStore::EntryView(uint64_t i) const {
  TANDEM_ASSIGN_OR_RETURN(ShmTensorHandle handle, EntryHandle(i));
  const Entry& e = entry(i);
  return ResolveHandle(*segment_, handle, std::string(e.name, strnlen(e.name, sizeof(e.name))));
}

absl::StatusOr<WritableTensor> HostWeightStore::Allocate(std::string_view name, DType dtype,
                                                         std::vector<int64_t> shape) {
  if (name.empty() || name.size() > kMaxWeightNameBytes ||
      name.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("weight store ", this->name(),
                                                   ": bad tensor name \"", SV(name), "\" (1..",
                                                   kMaxWeightNameBytes, " bytes)"));
  }
  auto bytes = ShapeBytes(dtype, shape);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("weight store ", this->name(), ": tensor ",
                                                   SV(name), ": ", bytes.status().message()));
  }
  ShmTensorHandle handle;
  handle.segment = this->name();
  handle.bytes = static_cast<uint64_t>(*bytes);
  handle.dtype = dtype;
  handle.shape = std::move(shape);

  std::lock_guard<std::mutex> lock(mu_);
  TANDEM_RETURN_IF_ERROR(CheckWriter(absl::StrCat("allocating ", SV(name))));
  RefreshIndex();
  if (index_.contains(SV(name))) {
    return absl::AlreadyExistsError(
        absl::StrCat("weight store ", this->name(), ": tensor ", SV(name), " already exists"));
  }
  Header& h = header();
  const uint64_t n = indexed_;
  if (n >= h.max_tensors) {
    return absl::ResourceExhaustedError(
        absl::StrCat("weight store ", this->name(), ": no directory entry left for tensor ",
                     SV(name), " (max_tensors ", h.max_tensors, ")"));
  }
  auto used = Atomic(h.used);
  uint64_t start = RoundUp(used.load(std::memory_order_relaxed), h.alignment);
  if (handle.bytes == 0) start = std::min(start, h.data_capacity);  // takes no room
  if (start > h.data_capacity || handle.bytes > h.data_capacity - start) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "weight store ", this->name(), ": no room for tensor ", SV(name), " (", handle.bytes,
        " bytes; ", used.load(std::memory_order_relaxed), " of ", h.data_capacity, " bytes used)"));
  }
  handle.offset = h.data_offset + start;
  Entry& e = entry(n);
  std::memset(e.name, 0, sizeof(e.name));
  std::memcpy(e.name, name.data(), name.size());
  e.offset = handle.offset;
  e.bytes = handle.bytes;
  e.dtype = static_cast<uint32_t>(dtype);
  e.rank = static_cast<uint32_t>(handle.shape.size());
  std::copy(handle.shape.begin(), handle.shape.end(), e.shape);
  if (handle.bytes > 0) used.store(start + handle.bytes, std::memory_order_relaxed);
  Atomic(h.num_entries).store(n + 1, std::memory_order_release);
  index_.emplace(std::string(name), n);
  indexed_ = n + 1;

  WritableTensor out;
  out.data = absl::Span<uint8_t>(segment_->base() + handle.offset, handle.bytes);
  out.handle = std::move(handle);
  return out;
}

absl::Status HostWeightStore::Publish(std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  TANDEM_RETURN_IF_ERROR(CheckWriter(absl::StrCat("publishing ", SV(name))));
  TANDEM_ASSIGN_OR_RETURN(const uint64_t i, Find(name));
  Atomic(entry(i).published).store(1, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<ShmTensorHandle> HostWeightStore::Add(std::string_view name, DType dtype,
                                                     std::vector<int64_t> shape,
                                                     absl::Span<const uint8_t> bytes) {
  TANDEM_ASSIGN_OR_RETURN(WritableTensor t, Allocate(name, dtype, std::move(shape)));
  if (bytes.size() != t.data.size()) {
    // The entry stays allocated but unpublished; the name is used up.
    return absl::InvalidArgumentError(absl::StrCat("weight store ", this->name(), ": tensor ",
                                                   SV(name), " takes ", t.data.size(),
                                                   " bytes, got ", bytes.size()));
  }
  if (!bytes.empty()) std::memcpy(t.data.data(), bytes.data(), bytes.size());
  TANDEM_RETURN_IF_ERROR(Publish(name));
  return std::move(t.handle);
}

absl::Status HostWeightStore::Seal() {
  std::lock_guard<std::mutex> lock(mu_);
  TANDEM_RETURN_IF_ERROR(CheckWriter("sealing"));
  RefreshIndex();
  for (uint64_t i = 0; i < indexed_; ++i) {
    if (!IsPublished(i)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "weight store ", name(), ": cannot seal: tensor ", entry(i).name, " is unpublished"));
    }
  }
  Atomic(header().sealed).store(1, std::memory_order_release);
  return absl::OkStatus();
}

bool HostWeightStore::sealed() const {
  return Atomic(header().sealed).load(std::memory_order_acquire) != 0;
}

absl::StatusOr<TensorView> HostWeightStore::Lookup(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  TANDEM_ASSIGN_OR_RETURN(const uint64_t i, Find(name));
  if (!IsPublished(i)) {
    return absl::UnavailableError(absl::StrCat("weight store ", this->name(), ": tensor ", SV(name),
                                               " is allocated but not yet published"));
  }
  return EntryView(i);
}

absl::StatusOr<ShmTensorHandle> HostWeightStore::Handle(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  TANDEM_ASSIGN_OR_RETURN(const uint64_t i, Find(name));
  if (!IsPublished(i)) {
    return absl::UnavailableError(absl::StrCat("weight store ", this->name(), ": tensor ", SV(name),
                                               " is allocated but not yet published"));
  }
  return EntryHandle(i);
}

absl::StatusOr<TensorView> HostWeightStore::Resolve(const ShmTensorHandle& handle) const {
  return ResolveHandle(*segment_, handle);
}

std::vector<TensorView> HostWeightStore::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  RefreshIndex();
  std::vector<TensorView> out;
  for (uint64_t i = 0; i < indexed_; ++i) {
    if (!IsPublished(i)) continue;
    auto v = EntryView(i);
    if (v.ok()) out.push_back(*std::move(v));
  }
  return out;
}

int64_t HostWeightStore::num_tensors() const {
  return static_cast<int64_t>(
      std::min(Atomic(header().num_entries).load(std::memory_order_acquire), header().max_tensors));
}

int64_t HostWeightStore::capacity_bytes() const {
  return static_cast<int64_t>(header().data_capacity);
}

int64_t HostWeightStore::used_bytes() const {
  return static_cast<int64_t>(Atomic(header().used).load(std::memory_order_relaxed));
}

int64_t HostWeightStore::alignment() const { return static_cast<int64_t>(header().alignment); }

}  // namespace tandem::shm
