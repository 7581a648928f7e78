// Helpers for the scheduler's unit tests.
#ifndef TANDEM_COORDINATOR_SCHEDULER_SCHEDULER_TEST_UTIL_H_
#define TANDEM_COORDINATOR_SCHEDULER_SCHEDULER_TEST_UTIL_H_

#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "coordinator/scheduler/scheduler.h"
#include "gtest/gtest.h"

namespace tandem::sched::testing {

inline SchedulerConfig Config(int64_t block_size, int64_t gpu_blocks,
                              int64_t cpu_blocks, int64_t budget,
                              int64_t max_seqs, int64_t max_model_len) {
  SchedulerConfig c;
  c.block_size = block_size;
  c.num_gpu_blocks = gpu_blocks;
  c.num_cpu_blocks = cpu_blocks;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.max_model_len = max_model_len;
  c.eos_token_ids = {0};
  return c;
}

inline std::unique_ptr<Scheduler> Make(
    const SchedulerConfig& c,
    std::unique_ptr<PlacementPolicy> policy = nullptr) {
  auto s = Scheduler::Create(c, std::move(policy));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Prompt of `len` tokens 100, 101, ...
inline std::vector<int32_t> Prompt(int64_t len) {
  std::vector<int32_t> p(len);
  std::iota(p.begin(), p.end(), 100);
  return p;
}

inline int64_t Add(Scheduler& s, int64_t prompt_len,
                   std::optional<int64_t> max_tokens = 100) {
  SamplingParams p;
  p.max_tokens = max_tokens;
  auto id = s.AddRequest(Prompt(prompt_len), p);
  EXPECT_TRUE(id.ok()) << id.status();
  return id.ok() ? *id : -1;
}

inline StepPlan MustSchedule(Scheduler& s) {
  auto plan = s.Schedule();
  EXPECT_TRUE(plan.ok()) << plan.status();
  const absl::Status inv = s.CheckInvariants();
  EXPECT_TRUE(inv.ok()) << inv;
  return plan.ok() ? std::move(plan).value() : StepPlan{};
}

// Reports `token` for every chunk that samples.
inline std::vector<RequestUpdate> Complete(Scheduler& s, const StepPlan& plan,
                                           int32_t token = 7) {
  std::vector<SampledToken> results;
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.sample) results.push_back({c.request_id, token});
  }
  auto updates = s.OnStepResult(plan.step_id, results);
  EXPECT_TRUE(updates.ok()) << updates.status();
  const absl::Status inv = s.CheckInvariants();
  EXPECT_TRUE(inv.ok()) << inv;
  return updates.ok() ? std::move(updates).value()
                      : std::vector<RequestUpdate>{};
}

// Schedule + Complete.
inline StepPlan Step(Scheduler& s, int32_t token = 7) {
  StepPlan plan = MustSchedule(s);
  if (!plan.empty()) Complete(s, plan, token);
  return plan;
}

inline const ScheduledChunk* ChunkOf(const StepPlan& plan, int64_t id) {
  for (const ScheduledChunk& c : plan.chunks) {
    if (c.request_id == id) return &c;
  }
  return nullptr;
}

inline std::vector<int64_t> ChunkIds(const StepPlan& plan) {
  std::vector<int64_t> ids;
  for (const ScheduledChunk& c : plan.chunks) ids.push_back(c.request_id);
  return ids;
}

inline std::vector<int64_t> FinishedIds(const StepPlan& plan) {
  std::vector<int64_t> ids;
  for (const FinishedRequest& f : plan.finished) ids.push_back(f.request_id);
  return ids;
}

}  // namespace tandem::sched::testing

#endif  // TANDEM_COORDINATOR_SCHEDULER_SCHEDULER_TEST_UTIL_H_
