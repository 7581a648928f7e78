#include "common/shm/slot_ring.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::shm {
namespace {

// absl here is built without std::string_view support: bridge explicitly.
absl::string_view SV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr uint64_t kRingMagic = 0x474e4952444e4154ull;  // "TANDRING"
constexpr int64_t kMaxSlotCount = 65536;
constexpr int64_t kMaxSlotBytes = int64_t{1} << 32;
constexpr uint64_t kPage = 4096;

// Bits of Header::closed.
constexpr uint32_t kProducerClosed = 1;
constexpr uint32_t kConsumerClosed = 2;
constexpr uint32_t kProducerDied = 4;  // set by the consumer that noticed
constexpr uint32_t kConsumerDied = 8;  // set by the producer that noticed

constexpr uint64_t RoundUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

int RoleIndex(RingRole r) { return r == RingRole::kProducer ? 0 : 1; }
const char* RoleName(RingRole r) { return r == RingRole::kProducer ? "producer" : "consumer"; }

SteadyClock::time_point DeadlineAfter(SteadyClock::time_point now, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return now;
  if (timeout >= absl::Hours(24 * 365)) return SteadyClock::time_point::max();
  return now + absl::ToChronoNanoseconds(timeout);
}

}  // namespace

// The shared ring header, at the start of the payload. The fields each side
// writes on the hot path sit on their own cache lines.
struct SlotRing::Header {
  uint64_t magic;
  uint64_t slot_count;
  uint64_t slot_bytes;
  uint64_t slot_stride;
  uint64_t slots_offset;           // Slot array, from the segment start
  uint64_t data_offset;            // slot payloads, from the segment start (page-aligned)
  alignas(64) uint32_t closed;     // kProducerClosed | kConsumerClosed | k*Died
  uint32_t attach_bell;            // bumped (and woken) when a side attaches or closes
  int32_t pid[2];                  // by RoleIndex: 0 free, -1 being claimed, else the pid
  uint64_t start_time[2];          // ProcessIdentity::start_time of pid[i]
  uint64_t pid_ns[2];              // ProcessIdentity::pid_ns of pid[i]
  alignas(64) uint32_t data_bell;  // producer -> sleeping consumer
  uint32_t consumer_waiting;
  alignas(64) uint32_t space_bell;  // consumer -> sleeping producer
  uint32_t producer_waiting;
};

struct alignas(64) SlotRing::Slot {
  uint64_t seq;    // 2p: free for message p; 2p + 1: holds message p
  uint64_t bytes;  // message length, valid while seq is odd
};

namespace {

struct Layout {
  uint64_t slots_offset, data_offset, stride, total;
};

template <typename Header, typename Slot>
Layout ComputeLayout(uint64_t count, uint64_t bytes) {
  Layout l;
  l.slots_offset = kSegmentHeaderBytes + RoundUp(sizeof(Header), 64);
  l.data_offset = RoundUp(l.slots_offset + count * sizeof(Slot), kPage);
  l.stride = RoundUp(bytes, bytes >= kPage ? kPage : 64);
  l.total = l.data_offset + count * l.stride;
  return l;
}

}  // namespace

SlotRing::SlotRing(std::unique_ptr<ShmSegment> segment, RingRole role,
                   const RingEndpointOptions& endpoint)
    : segment_(std::move(segment)),
      role_(role),
      spin_(absl::ToChronoNanoseconds(std::max(endpoint.spin, absl::ZeroDuration()))),
      peer_check_(
          absl::ToChronoNanoseconds(std::max(endpoint.peer_check_interval, absl::Milliseconds(1)))),
      next_peer_check_(SteadyClock::now() + peer_check_) {
  const Header& h = header();
  slot_count_ = h.slot_count;
  slot_bytes_ = h.slot_bytes;
  slot_stride_ = h.slot_stride;
  slots_ = segment_->base() + h.slots_offset;
  data_ = segment_->base() + h.data_offset;
  data_offset_ = h.data_offset;
}

absl::StatusOr<std::unique_ptr<SlotRing>> SlotRing::Create(std::string_view name, RingRole role,
                                                           const RingOptions& options,
                                                           const RingEndpointOptions& endpoint) {
  if (options.slot_count < 1 || options.slot_count > kMaxSlotCount || options.slot_bytes < 1 ||
      options.slot_bytes > kMaxSlotBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring ", SV(name), ": ", options.slot_count, " slots of ", options.slot_bytes,
                     " bytes; want 1..", kMaxSlotCount, " slots of 1..", kMaxSlotBytes, " bytes"));
  }
  const auto count = static_cast<uint64_t>(options.slot_count);
  const auto bytes = static_cast<uint64_t>(options.slot_bytes);
  const Layout l = ComputeLayout<Header, Slot>(count, bytes);
  SegmentOptions seg_options;
  seg_options.kind = SegmentKind::kSlotRing;
  seg_options.mark_ready = false;
  TANDEM_ASSIGN_OR_RETURN(
      auto segment,
      ShmSegment::Create(name, static_cast<int64_t>(l.total) - kSegmentHeaderBytes, seg_options));
  // The segment is zero-filled: all flags, pids and bells start at 0.
  auto* h = reinterpret_cast<Header*>(segment->payload());
  h->slot_count = count;
  h->slot_bytes = bytes;
  h->slot_stride = l.stride;
  h->slots_offset = l.slots_offset;
  h->data_offset = l.data_offset;
  auto* slots = reinterpret_cast<Slot*>(segment->base() + l.slots_offset);
  for (uint64_t i = 0; i < count; ++i) slots[i].seq = 2 * i;
  h->magic = kRingMagic;
  segment->MarkReady();  // release: publishes everything above
  return Attach(std::move(segment), role, endpoint);
}

absl::StatusOr<std::unique_ptr<SlotRing>> SlotRing::Open(std::string_view name, RingRole role,
                                                         const RingEndpointOptions& endpoint) {
  TANDEM_ASSIGN_OR_RETURN(
      auto segment, ShmSegment::Open(name, ShmSegment::Access::kReadWrite, SegmentKind::kSlotRing));
  if (static_cast<size_t>(segment->payload_size()) < sizeof(Header)) {
    return absl::FailedPreconditionError(absl::StrCat("ring ", SV(name), ": segment too small"));
  }
  const auto* h = reinterpret_cast<const Header*>(segment->payload());
  bool ok = h->magic == kRingMagic && h->slot_count >= 1 &&
            h->slot_count <= static_cast<uint64_t>(kMaxSlotCount) && h->slot_bytes >= 1 &&
            h->slot_bytes <= static_cast<uint64_t>(kMaxSlotBytes);
  if (ok) {
    const Layout l = ComputeLayout<Header, Slot>(h->slot_count, h->slot_bytes);
    ok = l.slots_offset == h->slots_offset && l.data_offset == h->data_offset &&
         l.stride == h->slot_stride && l.total == static_cast<uint64_t>(segment->size());
  }
  if (!ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("ring ", SV(name), ": ring header does not match its segment"));
  }
  return Attach(std::move(segment), role, endpoint);
}

absl::StatusOr<std::unique_ptr<SlotRing>> SlotRing::Attach(std::unique_ptr<ShmSegment> segment,
                                                           RingRole role,
                                                           const RingEndpointOptions& endpoint) {
  std::unique_ptr<SlotRing> ring(new SlotRing(std::move(segment), role, endpoint));
  Header& h = ring->header();
  if (ring->closed_bits() != 0) return ring->ClosedError("attaching");
  const int i = RoleIndex(role);
  int32_t expected = 0;
  if (!Atomic(h.pid[i]).compare_exchange_strong(expected, -1, std::memory_order_acq_rel)) {
    return absl::FailedPreconditionError(absl::StrCat("ring ", ring->name(), ": already has a ",
                                                      RoleName(role), " (pid ", expected, ")"));
  }
  const ProcessIdentity self = ProcessIdentity::Self();
  h.start_time[i] = self.start_time;
  h.pid_ns[i] = self.pid_ns;
  Atomic(h.pid[i]).store(self.pid, std::memory_order_release);
  ring->attached_pid_ = self.pid;
  Atomic(h.attach_bell).fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&h.attach_bell);
  return ring;
}

SlotRing::~SlotRing() {
  if (attached_pid_ == static_cast<int32_t>(::getpid())) Close();
}

SlotRing::Header& SlotRing::header() const {
  return *reinterpret_cast<Header*>(segment_->payload());
}

SlotRing::Slot& SlotRing::slot(uint64_t pos) const {
  return reinterpret_cast<Slot*>(slots_)[pos % slot_count_];
}

uint8_t* SlotRing::slot_data(uint64_t pos) const {
  return data_ + (pos % slot_count_) * slot_stride_;
}

uint32_t SlotRing::closed_bits() const {
  return Atomic(header().closed).load(std::memory_order_acquire);
}

bool SlotRing::SlotFree() const {
  return Atomic(slot(write_pos_).seq).load(std::memory_order_acquire) == 2 * write_pos_;
}

bool SlotRing::MessageReady() const {
  return Atomic(slot(read_pos_).seq).load(std::memory_order_acquire) == 2 * read_pos_ + 1;
}

ProcessIdentity SlotRing::Peer() const {
  const int other = 1 - RoleIndex(role_);
  Header& h = header();
  const int32_t pid = Atomic(h.pid[other]).load(std::memory_order_acquire);
  if (pid <= 0) return {};
  return ProcessIdentity{pid, h.start_time[other], h.pid_ns[other]};
}

bool SlotRing::closed() const { return closed_bits() != 0; }

bool SlotRing::peer_attached() const { return Peer().pid > 0; }

absl::Status SlotRing::ClosedError(const char* what) const {
  const uint32_t bits = closed_bits();
  const char* why = "closed";
  if (bits & (role_ == RingRole::kProducer ? kProducerClosed : kConsumerClosed)) {
    why = "closed by this side";
  } else if (bits & (kProducerDied | kConsumerDied)) {
    why = role_ == RingRole::kProducer ? "the consumer process died" : "the producer process died";
  } else if (bits & (kProducerClosed | kConsumerClosed)) {
    why = role_ == RingRole::kProducer ? "closed by the consumer" : "closed by the producer";
  }
  return absl::UnavailableError(absl::StrCat("ring ", name(), ": ", SV(what), ": ", why));
}

// Sleep protocol (the waker is Ring()):
//   waiter: seen = bell; waiting = 1; fence(seq_cst); if ready() return;
//           FUTEX_WAIT(bell, seen)
//   waker:  publish (release); fence(seq_cst); if waiting: ++bell, FUTEX_WAKE
// The two fences make the waiter see the publication or the waker see the
// waiting flag. If the waker bumps the bell before the waiter sleeps,
// FUTEX_WAIT finds bell != seen and returns at once, so no wakeup is lost.
// Close() bumps every bell unconditionally, after setting `closed`.
template <typename Ready>
absl::Status SlotRing::Await(Ready ready, uint32_t* bell, uint32_t* waiting, absl::Duration timeout,
                             const char* what) {
  const auto start = SteadyClock::now();
  const auto deadline = DeadlineAfter(start, timeout);
  if (spin_.count() > 0 && deadline > start) {
    const auto spin_end = std::min(deadline, start + spin_);
    for (uint32_t i = 1;; ++i) {
      if (ready()) return absl::OkStatus();
      if ((i & 31) == 0) {
        if (closed_bits() != 0 || SteadyClock::now() >= spin_end) break;
        // On an oversubscribed machine the peer may be waiting for this very
        // core: let it run (a cheap syscall when nothing else is runnable).
        sched_yield();
      }
      CpuRelax();
    }
  }
  auto waiting_flag = Atomic(*waiting);
  for (;;) {
    const uint32_t seen = Atomic(*bell).load(std::memory_order_acquire);
    waiting_flag.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ready()) {
      waiting_flag.store(0, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    if (closed_bits() != 0) {
      waiting_flag.store(0, std::memory_order_relaxed);
      return ClosedError(what);
    }
    auto now = SteadyClock::now();
    // The check time is kept across calls, so a caller that loops on short
    // timeouts still notices a dead peer.
    if (now >= next_peer_check_) {
      const ProcessIdentity peer = Peer();
      if (peer.pid > 0 && !IsProcessAlive(peer)) {
        Atomic(header().closed)
            .fetch_or(role_ == RingRole::kProducer ? kConsumerDied : kProducerDied,
                      std::memory_order_seq_cst);
        continue;  // recheck ready(): a consumer still drains committed messages
      }
      now = SteadyClock::now();
      next_peer_check_ = now + peer_check_;
    }
    if (now >= deadline) {
      waiting_flag.store(0, std::memory_order_relaxed);
      return absl::DeadlineExceededError(absl::StrCat(
          "ring ", name(), ": ", SV(what), ": nothing after ", absl::FormatDuration(timeout)));
    }
    FutexWait(bell, seen, std::min(deadline, next_peer_check_) - now);
  }
}

void SlotRing::Ring(uint32_t* bell, uint32_t* waiting) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (Atomic(*waiting).load(std::memory_order_relaxed) != 0) {
    Atomic(*bell).fetch_add(1, std::memory_order_release);
    FutexWake(bell, 1);
  }
}

absl::StatusOr<absl::Span<uint8_t>> SlotRing::Reserve(int64_t bytes, absl::Duration timeout) {
  if (role_ != RingRole::kProducer) {
    return absl::FailedPreconditionError(
        absl::StrCat("ring ", name(), ": Reserve() on a consumer"));
  }
  if (bytes < 0 || static_cast<uint64_t>(bytes) > slot_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring ", name(), ": message of ", bytes, " bytes, slots hold ", slot_bytes_));
  }
  if (closed_bits() != 0) return ClosedError("reserving a slot");
  if (!SlotFree()) {
    Header& h = header();
    TANDEM_RETURN_IF_ERROR(Await([this] { return SlotFree(); }, &h.space_bell, &h.producer_waiting,
                                 timeout, "waiting for a free slot"));
    if (closed_bits() != 0) return ClosedError("reserving a slot");
  }
  reserved_ = bytes;
  return absl::Span<uint8_t>(slot_data(write_pos_), static_cast<size_t>(bytes));
}

absl::Status SlotRing::Commit(int64_t bytes) {
  if (role_ != RingRole::kProducer || reserved_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("ring ", name(), ": Commit() without a Reserve()"));
  }
  if (bytes < 0 || bytes > reserved_) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring ", name(), ": Commit(", bytes, ") after Reserve(", reserved_, ")"));
  }
  reserved_ = -1;
  if (closed_bits() != 0) return ClosedError("committing");
  Slot& s = slot(write_pos_);
  s.bytes = static_cast<uint64_t>(bytes);
  Atomic(s.seq).store(2 * write_pos_ + 1, std::memory_order_release);
  ++write_pos_;
  Header& h = header();
  Ring(&h.data_bell, &h.consumer_waiting);
  return absl::OkStatus();
}

absl::Status SlotRing::Send(absl::Span<const uint8_t> message, absl::Duration timeout) {
  TANDEM_ASSIGN_OR_RETURN(absl::Span<uint8_t> dst,
                          Reserve(static_cast<int64_t>(message.size()), timeout));
  if (!message.empty()) std::memcpy(dst.data(), message.data(), message.size());
  return Commit(static_cast<int64_t>(message.size()));
}

absl::StatusOr<RingMessage> SlotRing::Wait(absl::Duration timeout) {
  if (role_ != RingRole::kConsumer) {
    return absl::FailedPreconditionError(absl::StrCat("ring ", name(), ": Wait() on a producer"));
  }
  if (closed_bits() & kConsumerClosed) return ClosedError("waiting for a message");
  if (read_pos_ - release_pos_ >= slot_count_) {
    return absl::FailedPreconditionError(absl::StrCat("ring ", name(), ": all ", slot_count_,
                                                      " slots are held; Release() one first"));
  }
  if (!MessageReady()) {
    Header& h = header();
    TANDEM_RETURN_IF_ERROR(Await([this] { return MessageReady(); }, &h.data_bell,
                                 &h.consumer_waiting, timeout, "waiting for a message"));
  }
  const uint64_t bytes = slot(read_pos_).bytes;
  if (bytes > slot_bytes_) {
    return absl::DataLossError(
        absl::StrCat("ring ", name(), ": message ", read_pos_, " claims ", bytes, " bytes"));
  }
  RingMessage msg;
  msg.seq = read_pos_;
  msg.data = absl::Span<const uint8_t>(slot_data(read_pos_), static_cast<size_t>(bytes));
  msg.offset = data_offset_ + (read_pos_ % slot_count_) * slot_stride_;
  ++read_pos_;
  return msg;
}

absl::Status SlotRing::Release() {
  if (role_ != RingRole::kConsumer || release_pos_ == read_pos_) {
    return absl::FailedPreconditionError(
        absl::StrCat("ring ", name(), ": Release() without a message held"));
  }
  Atomic(slot(release_pos_).seq).store(2 * (release_pos_ + slot_count_), std::memory_order_release);
  ++release_pos_;
  Header& h = header();
  Ring(&h.space_bell, &h.producer_waiting);
  return absl::OkStatus();
}

void SlotRing::Close() {
  Header& h = header();
  Atomic(h.closed).fetch_or(role_ == RingRole::kProducer ? kProducerClosed : kConsumerClosed,
                            std::memory_order_seq_cst);
  for (uint32_t* bell : {&h.data_bell, &h.space_bell, &h.attach_bell}) {
    Atomic(*bell).fetch_add(1, std::memory_order_seq_cst);
    FutexWakeAll(bell);
  }
}

absl::Status SlotRing::WaitForPeer(absl::Duration timeout) {
  Header& h = header();
  const auto deadline = DeadlineAfter(SteadyClock::now(), timeout);
  for (;;) {
    const uint32_t seen = Atomic(h.attach_bell).load(std::memory_order_acquire);
    if (peer_attached()) return absl::OkStatus();
    if (closed_bits() != 0) return ClosedError("waiting for the peer");
    const auto now = SteadyClock::now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "ring ", name(), ": no ",
          RoleName(role_ == RingRole::kProducer ? RingRole::kConsumer : RingRole::kProducer),
          " attached"));
    }
    FutexWait(&h.attach_bell, seen, std::min(deadline - now, std::chrono::nanoseconds(100000000)));
  }
}

}  // namespace tandem::shm
