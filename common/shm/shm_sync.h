// Cross-process synchronization primitives for the shared-memory data plane:
// futex wait/wake on 32-bit words that live in a MAP_SHARED mapping, a CPU
// relax hint for spin loops, and process identities that survive pid reuse
// (for detecting a dead peer).
#ifndef TANDEM_COMMON_SHM_SHM_SYNC_H_
#define TANDEM_COMMON_SHM_SHM_SYNC_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tandem::shm {

using SteadyClock = std::chrono::steady_clock;

// Atomics over words in shared memory: lock-free atomics are address-free, so
// two processes mapping the same page at different addresses agree.
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);
static_assert(std::atomic_ref<int32_t>::is_always_lock_free);

template <typename T>
inline std::atomic_ref<T> Atomic(T& word) {
  return std::atomic_ref<T>(word);
}

// Result of a FutexWait.
enum class FutexResult {
  kWoken,     // a FUTEX_WAKE arrived (or a spurious wakeup/signal: recheck)
  kChanged,   // *word != expected when the kernel looked
  kTimedOut,  // the relative timeout passed
};

// Sleeps while *word == expected, for at most `timeout` (negative or zero:
// returns kTimedOut at once unless the word changed). Shared (not
// FUTEX_PRIVATE_FLAG): the word may be mapped by other processes.
FutexResult FutexWait(uint32_t* word, uint32_t expected, std::chrono::nanoseconds timeout);

// Wakes up to `count` waiters on `word` in any process. Returns how many woke.
int FutexWake(uint32_t* word, int count);
int FutexWakeAll(uint32_t* word);

// Spin-loop hint (PAUSE / YIELD).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

// A process as (pid, start time in clock ticks since boot, field 22 of
// /proc/<pid>/stat; a recycled pid has a different start time) and the pid
// namespace the pid means something in (inode of /proc/self/ns/pid).
struct ProcessIdentity {
  int32_t pid = 0;
  uint64_t start_time = 0;
  uint64_t pid_ns = 0;  // 0: unknown

  static ProcessIdentity Self();
  // The identity of a process visible from here, or pid 0 if there is none.
  static ProcessIdentity Of(int32_t pid);
};

// False if the process is gone, is a zombie (killed but not yet reaped), or
// its pid now belongs to a different process. pid <= 0 is never alive. A
// process of another pid namespace (containers sharing /dev/shm but not
// pids), or any process when /proc is unreadable, counts as alive: callers
// then rely on timeouts.
bool IsProcessAlive(const ProcessIdentity& id);

}  // namespace tandem::shm

#endif  // TANDEM_COMMON_SHM_SHM_SYNC_H_
