#include "gpu_worker/engine/shm_all_reduce.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/shm/shm_sync.h"
#include "common/status_macros.h"

namespace tandem {

using shm::Atomic;

// The first 4 KiB of the payload; the slots follow.
struct ShmAllReduce::Control {
  uint32_t size;
  uint32_t pad0;
  uint64_t capacity;
  alignas(64) uint32_t count;       // ranks arrived at the current barrier
  alignas(64) uint32_t generation;  // barriers completed
  alignas(64) uint32_t failed;      // kFailed* below
  uint32_t joined[kMaxRanks];
  struct Peer {
    int32_t pid;
    uint32_t pad;
    uint64_t start_time;
    uint64_t pid_ns;
  } peers[kMaxRanks];
};

namespace {

constexpr int64_t kControlBytes = 4096;
constexpr uint32_t kFailedNone = 0;
constexpr uint32_t kFailedTimeout = 1;
constexpr uint32_t kFailedPeerDied = 2;
constexpr uint32_t kFailedLeft = 3;
// Spins before sleeping on the futex: a decode step's all-reduce is a few
// tens of microseconds apart on every rank, so a short spin avoids a
// sleep/wake round trip there without burning a core while a peer lags.
constexpr int kSpins = 4000;
constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);

const char* FailureText(uint32_t f) {
  switch (f) {
    case kFailedTimeout:
      return "a rank timed out waiting for its peers";
    case kFailedPeerDied:
      return "a rank's process died";
    case kFailedLeft:
      return "a rank left the group";
    default:
      return "failed";
  }
}

}  // namespace

ShmAllReduce::Control& ShmAllReduce::control() const {
  return *reinterpret_cast<Control*>(segment_->payload());
}

float* ShmAllReduce::slot(int parity, int rank) const {
  float* base = reinterpret_cast<float*>(segment_->payload() + kControlBytes);
  return base + (static_cast<int64_t>(parity) * size_ + rank) * stride_;
}

absl::StatusOr<std::unique_ptr<ShmAllReduce>> ShmAllReduce::Create(
    const std::string& name, int rank, int size, const ShmAllReduceOptions& options) {
  static_assert(sizeof(Control) <= kControlBytes);
  if (size < 1 || size > kMaxRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-reduce group size ", size, " is outside [1, ", kMaxRanks, "]"));
  }
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-reduce rank ", rank, " is outside [0, ", size, ")"));
  }
  if (options.capacity_floats <= 0 || options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("all-reduce capacity and timeout must be positive");
  }
  auto ar = std::unique_ptr<ShmAllReduce>(new ShmAllReduce(rank, size, options));
  if (size == 1) return ar;
  ar->stride_ = (options.capacity_floats + 15) / 16 * 16;
  const int64_t bytes = kControlBytes + 2 * int64_t{size} * ar->stride_ * 4;
  if (rank == 0) {
    shm::SegmentOptions so;
    so.mark_ready = false;
    TANDEM_ASSIGN_OR_RETURN(ar->segment_, shm::ShmSegment::Create(name, bytes, so));
    Control& c = ar->control();
    c.size = static_cast<uint32_t>(size);
    c.capacity = static_cast<uint64_t>(options.capacity_floats);
    ar->segment_->MarkReady();
  } else {
    const absl::Time deadline = absl::Now() + options.timeout;
    while (true) {
      auto seg = shm::ShmSegment::Open(name);
      if (seg.ok()) {
        ar->segment_ = *std::move(seg);
        break;
      }
      const bool retry = absl::IsNotFound(seg.status()) || absl::IsUnavailable(seg.status());
      if (!retry) return seg.status();
      if (options.cancelled && options.cancelled()) {
        return absl::CancelledError(absl::StrCat("all-reduce rank ", rank,
                                                 ": cancelled while waiting for group ", name));
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("all-reduce rank ", rank, ": group ", name, " was not created within ",
                         absl::FormatDuration(options.timeout), " (", seg.status().message(),
                         ")"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (ar->segment_->payload_size() != bytes) {
      return absl::FailedPreconditionError(
          absl::StrCat("all-reduce group ", name, " is ", ar->segment_->payload_size(),
                       " bytes, not the ", bytes, " of ", size, " ranks of ",
                       options.capacity_floats, " floats"));
    }
    const Control& c = ar->control();
    if (c.size != static_cast<uint32_t>(size) ||
        c.capacity != static_cast<uint64_t>(options.capacity_floats)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "all-reduce group ", name, " has ", c.size, " ranks of ", c.capacity,
          " floats; this rank asked for ", size, " of ", options.capacity_floats));
    }
  }
  Control& c = ar->control();
  uint32_t expected = 0;
  if (!Atomic(c.joined[rank]).compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    return absl::AlreadyExistsError(
        absl::StrCat("all-reduce group ", name, ": rank ", rank, " has already joined"));
  }
  const shm::ProcessIdentity self = shm::ProcessIdentity::Self();
  c.peers[rank].start_time = self.start_time;
  c.peers[rank].pid_ns = self.pid_ns;
  Atomic(c.peers[rank].pid).store(self.pid, std::memory_order_release);
  ar->joined_ = true;
  return ar;
}

ShmAllReduce::~ShmAllReduce() {
  if (!joined_) return;
  Control& c = control();
  uint32_t none = kFailedNone;
  Atomic(c.failed).compare_exchange_strong(none, kFailedLeft, std::memory_order_acq_rel);
  shm::FutexWakeAll(&c.generation);
}

absl::Status ShmAllReduce::Fail(absl::Status why) {
  Control& c = control();
  uint32_t none = kFailedNone;
  const uint32_t code = absl::IsDeadlineExceeded(why) ? kFailedTimeout : kFailedPeerDied;
  Atomic(c.failed).compare_exchange_strong(none, code, std::memory_order_acq_rel);
  shm::FutexWakeAll(&c.generation);
  return why;
}

absl::Status ShmAllReduce::Barrier() {
  Control& c = control();
  const uint32_t gen = Atomic(c.generation).load(std::memory_order_acquire);
  if (Atomic(c.count).fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(size_)) {
    // Last to arrive: reset for the next barrier, then release the others
    // (they cannot arrive at the next one before they see the new generation).
    Atomic(c.count).store(0, std::memory_order_relaxed);
    Atomic(c.generation).store(gen + 1, std::memory_order_release);
    shm::FutexWakeAll(&c.generation);
    return absl::OkStatus();
  }
  const auto timeout = absl::ToChronoNanoseconds(options_.timeout);
  const auto start = shm::SteadyClock::now();
  auto next_check = start + kLivenessPeriod;
  for (int spins = 0; Atomic(c.generation).load(std::memory_order_acquire) == gen;) {
    if (const uint32_t f = Atomic(c.failed).load(std::memory_order_acquire); f != kFailedNone) {
      // The last rank may have released this barrier, finished and left
      // between the generation check above and this load: the barrier then
      // completed, and this rank has all it needs from it.
      if (Atomic(c.generation).load(std::memory_order_acquire) != gen) break;
      return absl::UnavailableError(
          absl::StrCat("all-reduce rank ", rank_, ": the group failed: ", FailureText(f)));
    }
    if (spins < kSpins) {
      ++spins;
      shm::CpuRelax();
      continue;
    }
    const auto now = shm::SteadyClock::now();
    if (now - start >= timeout) {
      return Fail(absl::DeadlineExceededError(
          absl::StrCat("all-reduce rank ", rank_, " waited ",
                       absl::FormatDuration(options_.timeout), " for its ", size_ - 1,
                       " peers at a barrier")));
    }
    if (now >= next_check) {
      next_check = now + kLivenessPeriod;
      for (int r = 0; r < size_; ++r) {
        const auto& p = c.peers[r];
        const int32_t pid = Atomic(const_cast<int32_t&>(p.pid)).load(std::memory_order_acquire);
        if (pid == 0) continue;  // not joined yet: only the timeout applies
        if (!shm::IsProcessAlive({pid, p.start_time, p.pid_ns})) {
          return Fail(absl::UnavailableError(absl::StrCat(
              "all-reduce rank ", rank_, ": rank ", r, " (pid ", pid, ") is gone")));
        }
      }
    }
    shm::FutexWait(&c.generation, gen,
                   std::min<std::chrono::nanoseconds>(timeout - (now - start),
                                                      std::chrono::milliseconds(20)));
  }
  return absl::OkStatus();
}

absl::Status ShmAllReduce::Sum(float* data, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("all-reduce of a negative length");
  if (size_ == 1 || n == 0) return absl::OkStatus();
  if (const uint32_t f = Atomic(control().failed).load(std::memory_order_acquire);
      f != kFailedNone) {
    return absl::FailedPreconditionError(
        absl::StrCat("all-reduce rank ", rank_, ": the group has failed (", FailureText(f),
                     "); build a new one"));
  }
  for (int64_t off = 0; off < n; off += options_.capacity_floats) {
    const int64_t len = std::min(options_.capacity_floats, n - off);
    std::memcpy(slot(parity_, rank_), data + off, static_cast<size_t>(len) * 4);
    TANDEM_RETURN_IF_ERROR(Barrier());
    // Rank order, left to right: (((s0 + s1) + s2) + ...), the same on every rank.
    float* out = data + off;
    std::memcpy(out, slot(parity_, 0), static_cast<size_t>(len) * 4);
    for (int r = 1; r < size_; ++r) {
      const float* s = slot(parity_, r);
      for (int64_t i = 0; i < len; ++i) out[i] += s[i];
    }
    parity_ ^= 1;
  }
  return absl::OkStatus();
}

}  // namespace tandem
