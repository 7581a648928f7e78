// The coordinator's scheduler: continuous batching at iteration level, in the
// manner of vLLM v1, with Neo's two KV pools. Pure logic — no tensors, no
// threads, no I/O; the step driver owns it and calls it from one thread.
//
// The cycle is: AddRequest / Finish at any time; Schedule() returns the
// StepPlan for one iteration; the workers run it; OnStepResult() (or
// OnStepFailed()) closes the step. Only one step is in flight at a time, and
// num_computed_tokens advances when the step's results arrive.
//
// Schedule(), under a token budget (max_num_batched_tokens) and a cap on
// running requests (max_num_seqs):
//  1. running decodes (1 token each), oldest admission first;
//  2. running partial prefills (chunked: as many tokens as the budget left);
//  3. if nothing was preempted this step, admission of waiting requests in
//     arrival order while the placement policy finds KV blocks for their
//     first chunk. Admission is strict FCFS: the head waits, nobody passes it.
// A request that needs a block when its pool has none preempts the most
// recently admitted running request on that pool (possibly itself); the
// victim's KV is freed, num_computed_tokens goes to 0 and it re-enters the
// waiting queue at its arrival position — at the front, since every request
// ever admitted arrived before every request never admitted. The oldest
// admitted request on a pool is never a victim, so a request that fits its
// pool alone always progresses (no deadlock). A pool "fits" a request when
// its blocks could hold all the request's tokens. A request that has outgrown
// its pool is recomputed on a pool that fits it; one that fits no pool alone
// is finished with kError.
//
// With prefix caching, admission on the GPU pool first looks for the longest
// run of cached full blocks that starts the request's tokens (leaving at
// least its last token to run); those tokens count as computed, and the
// chunk tells the workers (shared_prefix_tokens). Blocks are indexed as their
// KV is computed, so a request preempted by recompute usually finds its own
// KV again when it returns.
//
// Every request is in exactly one of: the waiting queue, the running list,
// or finished (reported once in StepPlan::finished, then forgotten).
#ifndef TANDEM_COORDINATOR_SCHEDULER_SCHEDULER_H_
#define TANDEM_COORDINATOR_SCHEDULER_SCHEDULER_H_

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "coordinator/scheduler/block_manager.h"
#include "coordinator/scheduler/placement_policy.h"
#include "coordinator/scheduler/request.h"

namespace tandem::sched {

struct SchedulerConfig {
  int64_t block_size = 16;     // tokens per KV block
  int64_t num_gpu_blocks = 0;  // GPU KV pool
  int64_t num_cpu_blocks = 0;  // CPU KV pool; 0: none (no CPU attention)
  int64_t max_num_batched_tokens = 2048;  // token budget per step
  int64_t max_num_seqs = 128;             // running requests at most
  int64_t max_model_len = 4096;           // context limit: prompt + generated
  std::vector<int32_t> eos_token_ids;     // the model's end-of-generation ids
  bool enable_prefix_caching = false;     // share computed KV blocks (GPU pool)

  // InvalidArgument unless all sizes are positive (one pool may be 0) and
  // max_num_batched_tokens >= max_num_seqs (so every running request gets at
  // least one token each step: decodes never starve).
  absl::Status Validate() const;
};

// One request's part of a step.
struct ScheduledChunk {
  int64_t request_id = 0;
  std::vector<int32_t>
      tokens;             // ids at positions [start_pos, start_pos + size)
  int64_t start_pos = 0;  // == the request's tokens already in the KV cache
  // The chunk ends at the request's last known token: compute the logits of
  // its last row and sample the next token. False for a partial prefill.
  bool sample = false;
  bool is_decode = false;            // one token continuing a cached context
  KvPool pool = KvPool::kGpu;        // where its KV lives (kCpu: CPU attention)
  std::vector<int32_t> block_table;  // the whole table; covers start_pos + size
  // Positions [0, shared_prefix_tokens) are in the table's blocks already,
  // computed for other requests (prefix caching); set on the first chunk
  // after an admission with a cache hit, when start_pos equals it.
  int64_t shared_prefix_tokens = 0;
  std::shared_ptr<const SamplingParams> sampling;
};

struct FinishedRequest {
  int64_t request_id = 0;
  FinishReason reason = FinishReason::kStop;
  std::string message;  // why, for kError
};

struct StepPlan {
  int64_t step_id = -1;  // -1 for a plan with no chunks (nothing in flight)
  // Decodes first, then continuing prefills, then newly admitted prefills.
  std::vector<ScheduledChunk> chunks;
  int64_t num_batched_tokens =
      0;  // sum of chunk sizes <= max_num_batched_tokens
  // Preempted in this Schedule(): workers drop their KV for these.
  std::vector<int64_t> preempted;
  // Finished since the previous plan, whatever the cause (each exactly once).
  std::vector<FinishedRequest> finished;
  bool empty() const { return chunks.empty(); }
};

// A step's outcome for one request. Requests whose chunk had `sample` set
// must carry a token; the others may be omitted.
struct SampledToken {
  int64_t request_id = 0;
  std::optional<int32_t> token;
};

// What OnStepResult did to one sampled request (for streaming to clients).
struct RequestUpdate {
  int64_t request_id = 0;
  int32_t token = 0;                     // appended to its output
  std::optional<FinishReason> finished;  // set when this token ended it
};

class Scheduler {
 public:
  // `policy` nullptr: DefaultPlacementPolicy.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const SchedulerConfig& config,
      std::unique_ptr<PlacementPolicy> policy = nullptr);

  // Queues a request; returns its id (increasing with arrival, never reused).
  // InvalidArgument for an empty prompt, negative token ids or bad sampling
  // params. A prompt that leaves no room in the context limit is accepted and
  // finished with kError when it reaches the head of the queue.
  absl::StatusOr<int64_t> AddRequest(std::vector<int32_t> prompt_token_ids,
                                     SamplingParams params);

  // Plans the next step. FailedPrecondition while a step is in flight.
  absl::StatusOr<StepPlan> Schedule();

  // Closes the step `step_id`: advances num_computed_tokens of its requests,
  // appends sampled tokens and finishes requests that hit a stop condition
  // (their blocks are freed at once). Results of requests finished meanwhile
  // (Finish/Abort) are ignored. InvalidArgument (and nothing changes) for a
  // result naming a request not in the step, a duplicate, or a missing
  // token; FailedPrecondition when `step_id` is not the step in flight.
  absl::StatusOr<std::vector<RequestUpdate>> OnStepResult(
      int64_t step_id, absl::Span<const SampledToken> results);
  // The step was lost (worker failure): its requests keep their state and
  // blocks and are scheduled again by the next Schedule().
  absl::Status OnStepFailed(int64_t step_id);

  // Finishes a waiting or running request now and frees its KV: kAbort for a
  // client that went away, kStop for a stop string found by the frontend,
  // kError for a failure. NotFound if the request is unknown or finished.
  absl::Status Finish(int64_t request_id, FinishReason reason,
                      std::string message = "");
  absl::Status Abort(int64_t request_id) {
    return Finish(request_id, FinishReason::kAbort);
  }

  // Metrics.
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_running(KvPool pool) const;
  int64_t num_unfinished() const {
    return static_cast<int64_t>(requests_.size());
  }
  int64_t num_used_blocks(KvPool pool) const {
    return blocks_.num_used_blocks(pool);
  }
  int64_t num_total_blocks(KvPool pool) const {
    return blocks_.num_blocks(pool);
  }
  double kv_usage(KvPool pool) const { return blocks_.usage(pool); }
  int64_t num_preemptions() const {
    return num_preemptions_;
  }                                                       // since creation
  int64_t num_finished() const { return num_finished_; }  // since creation
  // Prefix caching, since creation: tokens of admitted requests looked up in
  // the cache, and those found (vLLM's prefix_cache_queries / _hits).
  int64_t num_prefix_cache_queries() const { return prefix_queries_; }
  int64_t num_prefix_cache_hits() const { return prefix_hits_; }
  // Forgets every cached block: the workers that held that KV are gone.
  void ResetPrefixCache() { blocks_.ClearPrefixCache(); }
  bool step_in_flight() const { return in_flight_.has_value(); }

  // nullptr once finished (or never added).
  const Request* GetRequest(int64_t request_id) const;
  // Ids in queue order.
  std::vector<int64_t> waiting_ids() const;
  std::vector<int64_t> running_ids() const;  // in admission order
  const BlockManager& block_manager() const { return blocks_; }
  const SchedulerConfig& config() const { return config_; }

  // Every request in exactly one queue with a matching status; waiting ones
  // hold no KV; running ones hold blocks on their pool covering their
  // computed tokens; block accounting exact. Internal error otherwise.
  absl::Status CheckInvariants() const;

 private:
  struct InFlightChunk {
    int64_t request_id;
    int64_t num_tokens;
    bool sample;
  };
  struct InFlight {
    int64_t step_id;
    std::vector<InFlightChunk> chunks;
  };
  class StepBuilder;  // one Schedule() call's state

  Scheduler(SchedulerConfig config, BlockManager blocks,
            std::unique_ptr<PlacementPolicy> policy);

  // Schedule() phases (scheduler.cc).
  void ScheduleRunning(Request* r, StepBuilder& step);
  void AdmitWaiting(StepBuilder& step);
  void Preempt(Request* r, StepBuilder& step);
  Request* NewestRunningOn(KvPool pool) const;
  std::vector<KvPool> PoolsThatFit(int64_t num_tokens) const;
  void AddChunk(Request* r, int64_t num_tokens, StepBuilder& step);

  // Bookkeeping (scheduler_state.cc).
  void FinishInternal(Request* r, FinishReason reason, std::string message);
  void RemoveFromRunning(const Request* r);
  void RemoveFromWaiting(const Request* r);
  void InsertWaitingByArrival(Request* r);

  SchedulerConfig config_;
  BlockManager blocks_;
  std::unique_ptr<PlacementPolicy> policy_;

  absl::flat_hash_map<int64_t, std::unique_ptr<Request>>
      requests_;                                   // unfinished
  std::deque<Request*> waiting_;                   // sorted by arrival_seq
  std::vector<Request*> running_;                  // sorted by admit_seq
  std::vector<FinishedRequest> pending_finished_;  // for the next plan
  std::optional<InFlight> in_flight_;

  int64_t next_request_id_ = 0;
  int64_t next_admit_seq_ = 0;
  int64_t next_step_id_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t num_finished_ = 0;
  int64_t prefix_queries_ = 0;
  int64_t prefix_hits_ = 0;
};

}  // namespace tandem::sched

#endif  // TANDEM_COORDINATOR_SCHEDULER_SCHEDULER_H_
