// Randomized simulation of the scheduler against a fake engine. Hundreds of
// requests arrive over time with random prompts, limits and aborts, on tiny
// KV pools so that preemption (and pool switching) is constant. The fake
// engine keeps a real paged KV store: every slot records which request (and
// which incarnation of it, reset by preemption) wrote which position, and a
// hash chain of the tokens so far; it "samples" a token from (request id,
// hash of all tokens in its context). So a wrong block table, start position
// or recompute changes the tokens, and each request's output must equal what
// it generates when run alone.
//
// A fresh seed each run; set TANDEM_SCHED_SIM_SEED=<seed> to replay one.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/status_macros.h"
#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"

namespace tandem::sched {
namespace {

constexpr int32_t kVocab = 64;
constexpr int32_t kEos = 0;

uint64_t Mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t Chain(uint64_t h, int32_t token) {
  return Mix(h ^ (static_cast<uint64_t>(token) << 20));
}
int32_t SampleToken(int64_t id, uint64_t h) {
  return static_cast<int32_t>(
      Mix(h + static_cast<uint64_t>(id) * 0x2545F4914F6CDD1Dull) % kVocab);
}
constexpr uint64_t kEmptyHash = 0x1234567;

// A paged KV store that checks what the scheduler asks of it.
class FakeEngine {
 public:
  FakeEngine(int64_t block_size, int64_t gpu_blocks, int64_t cpu_blocks)
      : bs_(block_size) {
    pools_[0].resize(gpu_blocks * block_size);
    pools_[1].resize(cpu_blocks * block_size);
  }

  // Workers drop the KV of preempted and finished requests.
  void Forget(const StepPlan& plan) {
    for (int64_t id : plan.preempted) {
      ++epoch_[id];
      len_[id] = 0;
    }
    for (const FinishedRequest& f : plan.finished) len_.erase(f.request_id);
  }

  std::vector<SampledToken> Run(const StepPlan& plan) {
    absl::flat_hash_map<int64_t, int64_t>
        block_owner;  // pool * 2^32 + block -> request
    std::vector<SampledToken> out;
    for (const ScheduledChunk& c : plan.chunks) {
      const int pool = static_cast<int>(c.pool);
      const int64_t n = static_cast<int64_t>(c.tokens.size());
      EXPECT_EQ(c.start_pos, len_[c.request_id]) << "request " << c.request_id;
      EXPECT_GE(static_cast<int64_t>(c.block_table.size()) * bs_,
                c.start_pos + n);
      for (int32_t b : c.block_table) {
        auto [it, fresh] =
            block_owner.emplace((int64_t{pool} << 32) + b, c.request_id);
        EXPECT_TRUE(fresh) << "block " << b << " shared by requests "
                           << it->second << " and " << c.request_id;
      }
      const int64_t epoch = epoch_[c.request_id];
      uint64_t h = kEmptyHash;
      for (int64_t p = 0; p < c.start_pos; ++p) {
        const Slot& s = SlotAt(c, p);
        if (s.request != c.request_id || s.epoch != epoch || s.pos != p) {
          ADD_FAILURE() << "request " << c.request_id << " reads position " << p
                        << " written by request " << s.request << " epoch "
                        << s.epoch << " pos " << s.pos;
          break;
        }
        h = s.hash;
      }
      for (int64_t i = 0; i < n; ++i) {
        h = Chain(h, c.tokens[i]);
        SlotAt(c, c.start_pos + i) = {c.request_id, epoch, c.start_pos + i, h};
      }
      len_[c.request_id] = c.start_pos + n;
      if (c.sample) out.push_back({c.request_id, SampleToken(c.request_id, h)});
    }
    return out;
  }

 private:
  struct Slot {
    int64_t request = -1;
    int64_t epoch = -1;
    int64_t pos = -1;
    uint64_t hash = 0;
  };
  Slot& SlotAt(const ScheduledChunk& c, int64_t pos) {
    std::vector<Slot>& pool = pools_[static_cast<int>(c.pool)];
    const int64_t slot = c.block_table[pos / bs_] * bs_ + pos % bs_;
    TANDEM_CHECK(slot >= 0 && slot < static_cast<int64_t>(pool.size()));
    return pool[slot];
  }

  int64_t bs_;
  std::array<std::vector<Slot>, 2> pools_;
  absl::flat_hash_map<int64_t, int64_t> epoch_, len_;
};

struct SimRequest {
  int64_t arrival_step = 0;
  std::vector<int32_t> prompt;
  SamplingParams params;
  std::optional<int32_t>
      text_stop_token;  // the frontend "finds a stop string" here
  std::optional<int64_t> abort_step;
  bool abort_in_flight = false;  // between Schedule and the step's results

  int64_t id = -1;
  std::vector<int32_t> generated;
  std::optional<FinishReason> reason;
  int finish_count = 0;
  int64_t finish_step = -1;
  int64_t first_scheduled = -1;
  int64_t oldest_since =
      -1;  // first step at which it was the oldest unfinished request
};

// What the request generates alone, with the KV of the largest pool.
std::pair<std::vector<int32_t>, FinishReason> Reference(
    const SimRequest& r, const SchedulerConfig& c) {
  const int64_t max_len = c.max_model_len;
  const int64_t max_blocks = std::max(c.num_gpu_blocks, c.num_cpu_blocks);
  std::vector<int32_t> gen;
  if (static_cast<int64_t>(r.prompt.size()) >= max_len)
    return {gen, FinishReason::kError};
  uint64_t h = kEmptyHash;
  for (int32_t t : r.prompt) h = Chain(h, t);
  int64_t tokens = static_cast<int64_t>(r.prompt.size());
  while (true) {
    if ((tokens + c.block_size - 1) / c.block_size > max_blocks)
      return {gen, FinishReason::kError};
    const int32_t t = SampleToken(r.id, h);
    gen.push_back(t);
    h = Chain(h, t);
    ++tokens;
    const SamplingParams& p = r.params;
    const auto& stops = p.stop_token_ids;
    if ((!p.ignore_eos && t == kEos) ||
        std::find(stops.begin(), stops.end(), t) != stops.end()) {
      return {gen, FinishReason::kStop};
    }
    if ((p.max_tokens && static_cast<int64_t>(gen.size()) >= *p.max_tokens) ||
        tokens >= max_len) {
      return {gen, FinishReason::kLength};
    }
    if (r.text_stop_token == t) return {gen, FinishReason::kStop};
  }
}

struct SimStats {
  int64_t steps = 0, preemptions = 0, max_wait_as_oldest = 0, cpu_chunks = 0,
          failed_steps = 0;
  double max_wait_per_context = 0;  // max over requests of wait / max_model_len
};

void RunSimulation(uint64_t seed, SimStats& stats) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {  // inclusive
    return lo +
           static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  auto chance = [&](int percent) { return uniform(1, 100) <= percent; };

  SchedulerConfig c;
  c.block_size = std::array<int64_t, 4>{1, 2, 4, 8}[uniform(0, 3)];
  c.max_model_len = uniform(16, 64);
  c.num_gpu_blocks = std::max<int64_t>(
      1, uniform(c.max_model_len / 2, 2 * c.max_model_len) / c.block_size);
  c.num_cpu_blocks =
      chance(50)
          ? 0
          : uniform(c.max_model_len / 2, 2 * c.max_model_len) / c.block_size;
  c.max_num_seqs = uniform(1, 12);
  c.max_num_batched_tokens = c.max_num_seqs + uniform(0, 40);
  c.eos_token_ids = {kEos};
  SCOPED_TRACE(::testing::Message()
               << "block_size " << c.block_size << " max_model_len "
               << c.max_model_len << " gpu_blocks " << c.num_gpu_blocks
               << " cpu_blocks " << c.num_cpu_blocks << " max_num_seqs "
               << c.max_num_seqs << " budget " << c.max_num_batched_tokens);
  auto created = Scheduler::Create(c);
  ASSERT_TRUE(created.ok()) << created.status();
  Scheduler& s = **created;
  FakeEngine engine(c.block_size, c.num_gpu_blocks, c.num_cpu_blocks);

  const int64_t num_requests = uniform(150, 300);
  std::vector<SimRequest> reqs(num_requests);
  for (SimRequest& r : reqs) {
    r.arrival_step = uniform(0, num_requests / 2);
    const int64_t len = chance(80) ? uniform(1, c.max_model_len / 2)
                                   : uniform(1, c.max_model_len + 4);
    for (int64_t i = 0; i < len; ++i)
      r.prompt.push_back(static_cast<int32_t>(uniform(1, kVocab - 1)));
    if (!chance(25)) r.params.max_tokens = uniform(1, 30);
    r.params.ignore_eos = chance(20);
    if (chance(30))
      r.params.stop_token_ids = {static_cast<int32_t>(uniform(0, kVocab - 1))};
    if (chance(20))
      r.text_stop_token = static_cast<int32_t>(uniform(0, kVocab - 1));
    if (chance(10)) {
      r.abort_step = r.arrival_step + uniform(0, 30);
      r.abort_in_flight = chance(50);
    }
  }
  std::stable_sort(reqs.begin(), reqs.end(),
                   [](const SimRequest& a, const SimRequest& b) {
                     return a.arrival_step < b.arrival_step;
                   });
  absl::flat_hash_map<int64_t, size_t> by_id;
  size_t next_arrival = 0;
  int64_t num_finished = 0;
  // No starvation. Once a request is the oldest unfinished one, nothing is
  // admitted ahead of it (the waiting queue is in arrival order and admission
  // stops at its head) and only requests admitted before it can preempt it;
  // those drain within about max_model_len steps, and its own prefill and
  // decodes take at most about 2 * max_model_len more. The worst case seen is
  // about 2 * max_model_len; preempting the oldest request instead of the
  // newest exceeds this bound.
  const int64_t starvation_bound = 4 * c.max_model_len + 16;

  auto record_finish = [&](const FinishedRequest& f, int64_t step) {
    auto it = by_id.find(f.request_id);
    ASSERT_NE(it, by_id.end()) << "unknown finished request " << f.request_id;
    SimRequest& r = reqs[it->second];
    ASSERT_EQ(r.finish_count, 0) << "request " << r.id << " finished twice";
    ++r.finish_count;
    r.reason = f.reason;
    r.finish_step = step;
    ++num_finished;
    ASSERT_EQ(s.GetRequest(r.id), nullptr);
    if (f.reason == FinishReason::kError) {
      EXPECT_FALSE(f.message.empty());
    }
  };

  for (int64_t step = 0; num_finished < num_requests; ++step) {
    ASSERT_LT(step, 100000)
        << "livelock: " << num_requests - num_finished << " unfinished";
    while (next_arrival < reqs.size() &&
           reqs[next_arrival].arrival_step <= step) {
      SimRequest& r = reqs[next_arrival];
      auto id = s.AddRequest(r.prompt, r.params);
      ASSERT_TRUE(id.ok()) << id.status();
      r.id = *id;
      by_id[r.id] = next_arrival++;
    }
    auto abort_due = [&](bool in_flight) {
      for (SimRequest& r : reqs) {
        if (r.id >= 0 && r.abort_step == step &&
            r.abort_in_flight == in_flight && s.GetRequest(r.id) != nullptr) {
          ASSERT_TRUE(s.Abort(r.id).ok());
        }
      }
    };
    abort_due(false);
    if (::testing::Test::HasFatalFailure()) return;
    // Starvation clock: the oldest unfinished request.
    for (SimRequest& r : reqs) {
      if (r.id >= 0 && r.finish_count == 0) {
        if (r.oldest_since < 0) r.oldest_since = step;
        break;
      }
    }

    auto planned = s.Schedule();
    ASSERT_TRUE(planned.ok()) << planned.status();
    const StepPlan& plan = *planned;
    for (const FinishedRequest& f : plan.finished) record_finish(f, step);
    if (::testing::Test::HasFatalFailure()) return;
    absl::flat_hash_set<int64_t> in_plan;
    int64_t tokens = 0;
    for (const ScheduledChunk& ch : plan.chunks) {
      ASSERT_TRUE(in_plan.insert(ch.request_id).second)
          << "request twice in a step";
      tokens += static_cast<int64_t>(ch.tokens.size());
      SimRequest& r = reqs[by_id.at(ch.request_id)];
      const Request* live = s.GetRequest(ch.request_id);
      ASSERT_NE(live, nullptr);
      ASSERT_EQ(live->kv_pool(), ch.pool);
      std::vector<int32_t> all = r.prompt;
      all.insert(all.end(), r.generated.begin(), r.generated.end());
      ASSERT_LE(ch.start_pos + static_cast<int64_t>(ch.tokens.size()),
                static_cast<int64_t>(all.size()));
      ASSERT_TRUE(std::equal(ch.tokens.begin(), ch.tokens.end(),
                             all.begin() + ch.start_pos))
          << "request " << r.id << " runs tokens it does not have";
      ASSERT_EQ(ch.sample,
                ch.start_pos + static_cast<int64_t>(ch.tokens.size()) ==
                    static_cast<int64_t>(all.size()));
      if (r.first_scheduled < 0) r.first_scheduled = step;
      if (ch.pool == KvPool::kCpu) ++stats.cpu_chunks;
    }
    for (int64_t id : plan.preempted) ASSERT_FALSE(in_plan.contains(id));
    ASSERT_EQ(tokens, plan.num_batched_tokens);
    ASSERT_LE(tokens, c.max_num_batched_tokens);
    ASSERT_LE(static_cast<int64_t>(plan.chunks.size()), c.max_num_seqs);
    engine.Forget(plan);

    if (!plan.empty()) {
      abort_due(true);
      if (::testing::Test::HasFatalFailure()) return;
      if (chance(2)) {
        ASSERT_TRUE(s.OnStepFailed(plan.step_id).ok());
        ++stats.failed_steps;
      } else {
        const std::vector<SampledToken> results = engine.Run(plan);
        auto updates = s.OnStepResult(plan.step_id, results);
        ASSERT_TRUE(updates.ok()) << updates.status();
        for (const RequestUpdate& u : *updates) {
          SimRequest& r = reqs[by_id.at(u.request_id)];
          r.generated.push_back(u.token);
          if (!u.finished && r.text_stop_token == u.token) {
            ASSERT_TRUE(s.Finish(r.id, FinishReason::kStop).ok());
          }
        }
      }
    }
    const absl::Status inv = s.CheckInvariants();
    ASSERT_TRUE(inv.ok()) << inv << " at step " << step;
    if (next_arrival == reqs.size() && s.num_unfinished() == 0 &&
        !s.step_in_flight()) {
      // Collect the last finishes.
      auto last = s.Schedule();
      ASSERT_TRUE(last.ok());
      ASSERT_TRUE(last->empty());
      for (const FinishedRequest& f : last->finished) record_finish(f, step);
      if (::testing::Test::HasFatalFailure()) return;
    }
    stats.steps = step + 1;
  }

  stats.preemptions += s.num_preemptions();
  EXPECT_EQ(s.num_used_blocks(KvPool::kGpu), 0);
  EXPECT_EQ(s.num_used_blocks(KvPool::kCpu), 0);
  for (const SimRequest& r : reqs) {
    SCOPED_TRACE(::testing::Message()
                 << "request " << r.id << " prompt " << r.prompt.size());
    ASSERT_EQ(r.finish_count, 1);
    const auto [tokens, reason] = Reference(r, c);
    if (r.reason == FinishReason::kAbort) {
      ASSERT_LE(r.generated.size(), tokens.size());
      EXPECT_TRUE(
          std::equal(r.generated.begin(), r.generated.end(), tokens.begin()));
    } else {
      EXPECT_EQ(r.generated, tokens);
      EXPECT_EQ(r.reason, reason)
          << FinishReasonName(*r.reason) << " vs " << FinishReasonName(reason);
    }
    if (r.oldest_since < 0) continue;  // finished before it was ever the oldest
    const int64_t waited = r.finish_step - r.oldest_since;
    stats.max_wait_as_oldest = std::max(stats.max_wait_as_oldest, waited);
    stats.max_wait_per_context =
        std::max(stats.max_wait_per_context,
                 static_cast<double>(waited) / c.max_model_len);
    EXPECT_LE(waited, starvation_bound)
        << "starved after becoming the oldest request";
  }
  // Admission is FCFS: nobody is first scheduled before an earlier arrival
  // that was still waiting.
  for (size_t j = 0; j < reqs.size(); ++j) {
    if (reqs[j].first_scheduled < 0) continue;
    for (size_t i = 0; i < j; ++i) {
      const int64_t done_by = reqs[i].first_scheduled >= 0
                                  ? reqs[i].first_scheduled
                                  : reqs[i].finish_step;
      ASSERT_LE(done_by, reqs[j].first_scheduled)
          << "request " << reqs[j].id << " admitted before the earlier "
          << reqs[i].id;
    }
  }
}

uint64_t MasterSeed() {
  if (const char* env = std::getenv("TANDEM_SCHED_SIM_SEED"))
    return std::strtoull(env, nullptr, 10);
  return (static_cast<uint64_t>(std::random_device{}()) << 32) ^
         std::random_device{}();
}

TEST(SchedulerSimTest, RandomWorkloadsMatchRunningAlone) {
  const uint64_t master = MasterSeed();
  SimStats total;
  for (int trial = 0; trial < 40; ++trial) {
    const uint64_t seed = master + trial;
    SCOPED_TRACE(::testing::Message()
                 << "seed " << seed
                 << " (replay: TANDEM_SCHED_SIM_SEED=" << seed << ", trial 0)");
    SimStats stats;
    RunSimulation(seed, stats);
    if (::testing::Test::HasFailure()) {
      std::printf("scheduler simulation failed with seed %llu\n",
                  static_cast<unsigned long long>(seed));
      return;
    }
    total.steps += stats.steps;
    total.preemptions += stats.preemptions;
    total.cpu_chunks += stats.cpu_chunks;
    total.failed_steps += stats.failed_steps;
    total.max_wait_as_oldest =
        std::max(total.max_wait_as_oldest, stats.max_wait_as_oldest);
    total.max_wait_per_context =
        std::max(total.max_wait_per_context, stats.max_wait_per_context);
  }
  std::printf(
      "master seed %llu: %lld steps, %lld preemptions, %lld CPU-pool chunks, "
      "%lld failed steps, longest wait as oldest request %lld steps (%.2f x "
      "max_model_len)\n",
      static_cast<unsigned long long>(master),
      static_cast<long long>(total.steps),
      static_cast<long long>(total.preemptions),
      static_cast<long long>(total.cpu_chunks),
      static_cast<long long>(total.failed_steps),
      static_cast<long long>(total.max_wait_as_oldest),
      total.max_wait_per_context);
  EXPECT_GT(total.preemptions, 0);
  EXPECT_GT(total.cpu_chunks, 0);
}

}  // namespace
}  // namespace tandem::sched
