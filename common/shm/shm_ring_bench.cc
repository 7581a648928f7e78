// Cross-process SlotRing benchmarks: round-trip latency (ping over one ring,
// echo over another, from a fork()ed child) and one-way bandwidth (the child
// reads every byte), for 4 KiB and 1 MiB slots.
//
//   ninja -C build shm_ring_bench && build/common/shm/shm_ring_bench
#include <unistd.h>

#include <cstring>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/shm/slot_ring.h"
#include "common/shm/testing/shm_test_util.h"

namespace tandem::shm {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(30);

RingEndpointOptions Endpoint(bool spin) {
  RingEndpointOptions e;
  e.spin = spin ? absl::Microseconds(50) : absl::ZeroDuration();
  return e;
}

std::unique_ptr<SlotRing> MakeRing(const std::string& name, RingRole role, int64_t count,
                                   int64_t bytes, bool spin) {
  RingOptions options;
  options.slot_count = count;
  options.slot_bytes = bytes;
  auto ring = SlotRing::Create(name, role, options, Endpoint(spin));
  if (!ring.ok()) {
    std::fprintf(stderr, "%s\n", ring.status().ToString().c_str());
    std::abort();
  }
  return *std::move(ring);
}

// Args: slot bytes, message bytes, spin (1) or sleep-only (0).
void BM_RoundTrip(benchmark::State& state) {
  const int64_t slot = state.range(0), msg = state.range(1);
  const bool spin = state.range(2) != 0;
  const std::string prefix = testing::UniquePrefix("bench");
  auto ping = MakeRing(prefix + "ping", RingRole::kProducer, 4, slot, spin);
  auto pong = MakeRing(prefix + "pong", RingRole::kConsumer, 4, slot, spin);
  auto child = testing::ForkedChild::Start([prefix, spin] {
    auto in = SlotRing::Open(prefix + "ping", RingRole::kConsumer, Endpoint(spin));
    auto out = SlotRing::Open(prefix + "pong", RingRole::kProducer, Endpoint(spin));
    if (!in.ok() || !out.ok()) return 2;
    for (;;) {  // echo: copy the ping slot into a pong slot
      auto m = (*in)->Wait(kTimeout);
      if (!m.ok()) return 0;  // closed
      auto dst = (*out)->Reserve(static_cast<int64_t>(m->data.size()), kTimeout);
      if (!dst.ok()) return 3;
      std::memcpy(dst->data(), m->data.data(), m->data.size());
      if (!(*out)->Commit(static_cast<int64_t>(m->data.size())).ok()) return 4;
      if (!(*in)->Release().ok()) return 5;
    }
  });
  (void)ping->WaitForPeer(kTimeout);
  (void)pong->WaitForPeer(kTimeout);
  (void)ping->UnlinkName();
  (void)pong->UnlinkName();
  std::vector<uint8_t> src(static_cast<size_t>(msg), 0x5a);
  for (auto _ : state) {
    auto dst = ping->Reserve(msg, kTimeout);
    if (!dst.ok()) {
      state.SkipWithError(dst.status().ToString().c_str());
      break;
    }
    std::memcpy(dst->data(), src.data(), src.size());
    (void)ping->Commit(msg);
    auto echo = pong->Wait(kTimeout);
    if (!echo.ok()) {
      state.SkipWithError(echo.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(echo->data.data());
    (void)pong->Release();
  }
  state.SetBytesProcessed(state.iterations() * msg * 2);
  ping->Close();
  (void)child.Wait(kTimeout);
}

// Args: slot bytes (= message bytes), slot count.
void BM_Stream(benchmark::State& state) {
  const int64_t slot = state.range(0), count = state.range(1);
  const std::string prefix = testing::UniquePrefix("bench");
  auto data = MakeRing(prefix + "data", RingRole::kProducer, count, slot, true);
  auto ack = MakeRing(prefix + "ack", RingRole::kConsumer, 2, 64, true);
  auto child = testing::ForkedChild::Start([prefix] {
    auto in = SlotRing::Open(prefix + "data", RingRole::kConsumer, Endpoint(true));
    auto out = SlotRing::Open(prefix + "ack", RingRole::kProducer, Endpoint(true));
    if (!in.ok() || !out.ok()) return 2;
    uint64_t sum = 0;
    for (;;) {
      auto m = (*in)->Wait(kTimeout);
      if (!m.ok()) return 0;
      if (m->data.empty()) {  // end of a batch: acknowledge
        if (!(*out)->Send({}, kTimeout).ok()) return 3;
      }
      const uint8_t* p = m->data.data();
      for (size_t i = 0; i + 8 <= m->data.size(); i += 64) {  // touch every cache line
        uint64_t w;
        std::memcpy(&w, p + i, 8);
        sum += w;
      }
      benchmark::DoNotOptimize(sum);
      if (!(*in)->Release().ok()) return 4;
    }
  });
  (void)data->WaitForPeer(kTimeout);
  (void)ack->WaitForPeer(kTimeout);
  (void)data->UnlinkName();
  (void)ack->UnlinkName();
  std::vector<uint8_t> src(static_cast<size_t>(slot), 0x3c);
  for (auto _ : state) {
    auto dst = data->Reserve(slot, kTimeout);
    if (!dst.ok()) {
      state.SkipWithError(dst.status().ToString().c_str());
      break;
    }
    std::memcpy(dst->data(), src.data(), src.size());
    (void)data->Commit(slot);
  }
  // Count the time until the child has read everything.
  (void)data->Send({}, kTimeout);
  auto done = ack->Wait(kTimeout);
  if (done.ok()) (void)ack->Release();
  state.SetBytesProcessed(state.iterations() * slot);
  data->Close();
  (void)child.Wait(kTimeout);
}

BENCHMARK(BM_RoundTrip)
    ->ArgNames({"slot", "msg", "spin"})
    ->Args({4096, 64, 1})
    ->Args({4096, 4096, 1})
    ->Args({4096, 64, 0})
    ->Args({1 << 20, 64, 1})
    ->Args({1 << 20, 1 << 20, 1})
    ->Args({1 << 20, 1 << 20, 0})
    ->UseRealTime();

BENCHMARK(BM_Stream)
    ->ArgNames({"slot", "count"})
    ->Args({4096, 64})
    ->Args({1 << 20, 4})
    ->Args({1 << 20, 16})
    ->UseRealTime();

}  // namespace
}  // namespace tandem::shm

BENCHMARK_MAIN();
