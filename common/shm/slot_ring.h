// SlotRing: a single-producer single-consumer ring of fixed-size slots in a
// shared-memory segment, used between processes (gpu_worker <-> cpu_worker)
// for activations, q/k/v and expert inputs/outputs.
//
// Each slot carries a 64-bit sequence word (after Vyukov's bounded queue,
// doubled so that one slot works too): slot i starts at 2i; the producer may
// write message p into slot p % N when its word == 2p and publishes it by
// storing 2p + 1 (release); the consumer reads it when the word == 2p + 1
// (acquire) and frees the slot by storing 2(p + N) (release). The two sides
// never share a counter, only the slot they hand over, and a stale or torn
// hand-over is impossible: each value is written once per lap.
//
// Doorbells: a side that finds nothing to do spins for RingEndpointOptions::
// spin, then sleeps on a futex word in the shared header (FUTEX_WAIT without
// FUTEX_PRIVATE_FLAG). The other side only makes a syscall (FUTEX_WAKE) when
// the sleeper has announced itself, so a busy ring costs no syscalls.
//
// Failure: Close() (also run by the destructor) sets a shared flag and wakes
// both futexes; the other side then gets kUnavailable (the consumer first
// drains what was already committed). A peer that dies without closing is
// noticed by a sleeper that checks the peer's pid every peer_check_interval
// (kUnavailable), or by the caller's timeout (kDeadlineExceeded).
//
// Zero copy: Reserve() hands the producer the slot's memory; Wait() hands the
// consumer the same bytes. A ring is one session: endpoints do not reattach.
// An endpoint object is not thread-safe; use it from one thread at a time.
#ifndef TANDEM_COMMON_SHM_SLOT_RING_H_
#define TANDEM_COMMON_SHM_SLOT_RING_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/shm/shm_segment.h"
#include "common/shm/shm_sync.h"

namespace tandem::shm {

enum class RingRole { kProducer, kConsumer };

// Shape of a ring, fixed by its creator.
struct RingOptions {
  int64_t slot_count = 8;        // 1 .. 65536
  int64_t slot_bytes = 1 << 20;  // the largest message, 1 .. 4 GiB
};

// Per-endpoint behaviour (not shared).
struct RingEndpointOptions {
  // Busy-poll this long before sleeping on the futex (yielding the core every
  // few microseconds, so an oversubscribed machine still makes progress).
  // Zero: sleep at once.
  absl::Duration spin = absl::Microseconds(20);
  // While sleeping, check this often that the peer process is still alive.
  absl::Duration peer_check_interval = absl::Milliseconds(20);
};

// A committed message as the consumer sees it; valid until its Release().
struct RingMessage {
  uint64_t seq = 0;                // 0, 1, 2, ... in commit order
  absl::Span<const uint8_t> data;  // in the slot: no copy
  uint64_t offset = 0;             // of data[0] from the segment start
};

class SlotRing {
 public:
  // Creates the segment `name` and attaches as `role`; the peer Open()s it.
  static absl::StatusOr<std::unique_ptr<SlotRing>> Create(std::string_view name, RingRole role,
                                                          const RingOptions& options,
                                                          const RingEndpointOptions& endpoint = {});
  // Attaches to an existing ring as `role`. kFailedPrecondition if the role is
  // already taken or the segment is not a ring; kUnavailable if it is closed.
  static absl::StatusOr<std::unique_ptr<SlotRing>> Open(std::string_view name, RingRole role,
                                                        const RingEndpointOptions& endpoint = {});

  ~SlotRing();  // Close()s (only in the process that attached)
  SlotRing(const SlotRing&) = delete;
  SlotRing& operator=(const SlotRing&) = delete;

  // --- producer ---
  // Waits up to `timeout` for a free slot and returns `bytes` of it to write
  // into. Calling it again before Commit() returns the same slot.
  // kInvalidArgument if bytes > slot_bytes(); kUnavailable if closed or the
  // consumer died; kDeadlineExceeded if the ring stayed full.
  absl::StatusOr<absl::Span<uint8_t>> Reserve(int64_t bytes, absl::Duration timeout);
  // Publishes the first `bytes` (<= the reserved size) of the reserved slot.
  absl::Status Commit(int64_t bytes);
  // Reserve + copy + Commit, for callers that already have the bytes.
  absl::Status Send(absl::Span<const uint8_t> message, absl::Duration timeout);

  // --- consumer ---
  // Waits up to `timeout` for the next message. Several may be held at once
  // (up to slot_count()); Release() frees the oldest. kUnavailable once the
  // producer closed or died and every committed message has been returned;
  // kDeadlineExceeded if nothing arrived.
  absl::StatusOr<RingMessage> Wait(absl::Duration timeout);
  absl::Status Release();

  // --- both ---
  // Marks this side closed and wakes the peer. Idempotent.
  void Close();
  // True once either side has closed.
  bool closed() const;
  // True once the other role has attached (it may since have closed).
  bool peer_attached() const;
  // Waits until the other role has attached (kDeadlineExceeded otherwise).
  absl::Status WaitForPeer(absl::Duration timeout);
  // Creator only: removes the segment name (e.g. once the peer attached), so
  // nothing is left in /dev/shm even if both processes crash later.
  absl::Status UnlinkName() { return segment_->Unlink(); }

  RingRole role() const { return role_; }
  int64_t slot_count() const { return static_cast<int64_t>(slot_count_); }
  int64_t slot_bytes() const { return static_cast<int64_t>(slot_bytes_); }
  // Producer: messages committed; consumer: messages returned by Wait().
  uint64_t position() const { return role_ == RingRole::kProducer ? write_pos_ : read_pos_; }
  const ShmSegment& segment() const { return *segment_; }
  const std::string& name() const { return segment_->name(); }

 private:
  struct Header;
  struct Slot;

  SlotRing(std::unique_ptr<ShmSegment> segment, RingRole role, const RingEndpointOptions& endpoint);
  static absl::StatusOr<std::unique_ptr<SlotRing>> Attach(std::unique_ptr<ShmSegment> segment,
                                                          RingRole role,
                                                          const RingEndpointOptions& endpoint);

  Header& header() const;
  Slot& slot(uint64_t pos) const;
  uint8_t* slot_data(uint64_t pos) const;
  uint32_t closed_bits() const;
  bool SlotFree() const;
  bool MessageReady() const;
  ProcessIdentity Peer() const;
  // Waits until ready() holds; see the .cc for the sleep protocol.
  template <typename Ready>
  absl::Status Await(Ready ready, uint32_t* bell, uint32_t* waiting, absl::Duration timeout,
                     const char* what);
  absl::Status ClosedError(const char* what) const;
  static void Ring(uint32_t* bell, uint32_t* waiting);

  std::unique_ptr<ShmSegment> segment_;
  RingRole role_;
  std::chrono::nanoseconds spin_;
  std::chrono::nanoseconds peer_check_;
  int32_t attached_pid_ = 0;  // the process whose endpoint this is
  // When a sleeper next checks that the peer process is alive.
  SteadyClock::time_point next_peer_check_;
  uint64_t slot_count_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t slot_stride_ = 0;
  uint8_t* slots_ = nullptr;  // slot headers
  uint8_t* data_ = nullptr;   // slot payloads
  uint64_t data_offset_ = 0;  // of data_ from the segment start
  // Producer.
  uint64_t write_pos_ = 0;
  int64_t reserved_ = -1;  // bytes reserved in slot(write_pos_), -1: none
  // Consumer.
  uint64_t read_pos_ = 0;     // next message to return
  uint64_t release_pos_ = 0;  // oldest message still held
};

}  // namespace tandem::shm

#endif  // TANDEM_COMMON_SHM_SLOT_RING_H_
