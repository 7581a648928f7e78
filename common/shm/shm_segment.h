// A named POSIX shared-memory segment (shm_open + mmap), RAII.
//
// Every segment starts with a 4 KiB SegmentHeader (magic, layout version,
// kind, total size, creator pid and start time, ready flag); the payload
// begins at offset kSegmentHeaderBytes, page-aligned for DMA. Offsets handed
// to peers (TensorHandle.offset) are always from the segment start.
//
// Lifecycle: the owner Create()s the segment (O_EXCL), initializes its
// payload, marks it ready, and passes the name to peers over the control
// plane; peers Open() it by name. The owner unlinks the name on destruction,
// or earlier with Unlink() once every peer has mapped it (mappings outlive the
// name). Segments of crashed owners are removed by RemoveStaleSegments().
#ifndef TANDEM_COMMON_SHM_SHM_SEGMENT_H_
#define TANDEM_COMMON_SHM_SHM_SEGMENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tandem::shm {

// Every Tandem segment name starts with this.
inline constexpr std::string_view kSegmentNamePrefix = "/tandem-";
// Bytes reserved at offset 0 for the SegmentHeader; the payload starts here.
inline constexpr int64_t kSegmentHeaderBytes = 4096;
inline constexpr uint64_t kSegmentMagic = 0x4d48534d444e4154ull;  // "TANDMSHM"
inline constexpr uint32_t kSegmentLayoutVersion = 1;

// What the payload holds, so that a peer cannot open a ring as a weight store.
enum class SegmentKind : uint32_t {
  kRaw = 1,          // caller-defined payload (activation buffers, ...)
  kSlotRing = 2,     // SlotRing
  kWeightStore = 3,  // HostWeightStore
};
std::string_view SegmentKindName(SegmentKind kind);

// The first bytes of every segment. Plain data; `ready` is accessed atomically.
struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t kind;          // SegmentKind
  uint64_t total_bytes;   // the whole segment: header + payload
  uint64_t header_bytes;  // kSegmentHeaderBytes
  int32_t creator_pid;
  uint32_t ready;               // 0 while the creator initializes the payload, then 1
  uint64_t creator_start_time;  // see ProcessIdentity
  uint64_t creator_pid_ns;      // see ProcessIdentity
  char name[256];               // as created, NUL-terminated (diagnostics)
};
static_assert(sizeof(SegmentHeader) <= kSegmentHeaderBytes);

// OK if `name` is "/tandem-" followed by 1..200 characters of [A-Za-z0-9._-].
absl::Status ValidateSegmentName(std::string_view name);

// "/tandem-<purpose>-<pid>-<n>", unique within this process (n counts up).
// `purpose` should be short and made of [A-Za-z0-9._-].
std::string MakeSegmentName(std::string_view purpose);

struct SegmentOptions {
  SegmentKind kind = SegmentKind::kRaw;
  // Layouts that initialize the payload before peers may use it pass false
  // and call MarkReady() afterwards; until then Open() fails kUnavailable.
  bool mark_ready = true;
  // Reserve the memory now (fallocate): a full /dev/shm is reported here as
  // kResourceExhausted instead of a SIGBUS on first touch.
  bool reserve = true;
};

class ShmSegment {
 public:
  enum class Access { kReadWrite, kReadOnly };

  // Creates a new segment of kSegmentHeaderBytes + payload_bytes. Errors:
  // kInvalidArgument (name, size), kAlreadyExists (name taken),
  // kResourceExhausted (no memory in /dev/shm).
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(std::string_view name,
                                                            int64_t payload_bytes,
                                                            const SegmentOptions& options = {});
  // Maps an existing segment. Errors: kInvalidArgument (name), kNotFound,
  // kUnavailable (the creator has not marked it ready yet: retry),
  // kFailedPrecondition (not a Tandem segment, other layout version, size
  // disagrees with its header, wrong kind when `expected_kind` is given).
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(std::string_view name,
                                                          Access access = Access::kReadWrite);
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(std::string_view name, Access access,
                                                          SegmentKind expected_kind);

  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Creator only: publishes the payload (release) so that Open() succeeds.
  void MarkReady();
  // Creator only: removes the name now; existing mappings stay valid and the
  // memory is freed when the last one goes. Idempotent. kFailedPrecondition
  // for a segment this process did not create.
  absl::Status Unlink();

  const std::string& name() const { return name_; }
  SegmentKind kind() const { return static_cast<SegmentKind>(header().kind); }
  bool is_owner() const { return owner_; }
  bool writable() const { return writable_; }
  bool unlinked() const { return unlinked_; }
  int32_t creator_pid() const { return header().creator_pid; }

  // The whole mapping (header included) and its size.
  uint8_t* base() const { return base_; }
  int64_t size() const { return size_; }
  // The payload: [kSegmentHeaderBytes, size()).
  uint8_t* payload() const { return base_ + kSegmentHeaderBytes; }
  int64_t payload_size() const { return size_ - kSegmentHeaderBytes; }
  const SegmentHeader& header() const { return *reinterpret_cast<const SegmentHeader*>(base_); }

  // True if [offset, offset + bytes) lies inside the segment's payload.
  bool ContainsPayloadRange(uint64_t offset, uint64_t bytes) const;

 private:
  ShmSegment(std::string name, uint8_t* base, int64_t size, bool owner, bool writable)
      : name_(std::move(name)), base_(base), size_(size), owner_(owner), writable_(writable) {}

  std::string name_;
  uint8_t* base_;
  int64_t size_;
  bool owner_;
  bool writable_;
  bool unlinked_ = false;
  int32_t owner_pid_ = 0;  // the process that created it (a fork child never unlinks)
};

// Unlinks every segment whose name starts with `prefix` (itself starting with
// "/tandem-") and whose header names a creator process that is gone (dead,
// zombie, or pid reused), plus empty or all-zero-header files older than a
// minute (a creator that died while creating). Live creators' segments and
// foreign files are left alone. Returns how many were removed.
absl::StatusOr<int> RemoveStaleSegments(std::string_view prefix);

// Names (with the leading '/') of the segments in /dev/shm starting with
// `prefix`, sorted. For diagnostics and tests.
std::vector<std::string> ListSegments(std::string_view prefix);

}  // namespace tandem::shm

#endif  // TANDEM_COMMON_SHM_SHM_SEGMENT_H_
