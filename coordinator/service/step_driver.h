// The step driver: the coordinator's generation loop. It owns the scheduler
// and drives the gpu_worker (rank 0) one StepPlan at a time:
//
//   Schedule() → proto::StepPlan → Worker.Step (with a deadline) → results
//   → Scheduler::OnStepResult → per request: detokenizer + stop strings →
//   GenerationEvent to the request's callback.
//
// One thread runs the loop; while there is nothing to do it sleeps on a
// condition variable (no polling). Events are delivered from that thread,
// outside the driver's lock, in order and one at a time per request.
//
// Workers. The driver hears of gpu_workers from the WorkerRegistry (it is a
// WorkerListener; or call OnWorkerRegistered directly). It serves on the
// first live rank-0 gpu_worker: calls its LoadModel with the configured
// ModelSpec, then steps. When that worker is lost — declared dead by the
// registry (the in-flight RPC is cancelled at once), or a Step fails with
// UNAVAILABLE / DEADLINE_EXCEEDED / FAILED_PRECONDITION (e.g. the worker
// restarted and has no model) — every running request finishes with kError
// and an UNAVAILABLE status saying so, waiting requests stay queued, and the
// driver loads the model on the next live gpu_worker (the same one again if
// the registry still holds it alive, retried every load_retry_interval).
// A Step that fails otherwise (a bad plan) fails only that step's requests.
// A LoadModel that fails for a reason retrying cannot fix (bad path,
// INVALID_ARGUMENT, NOT_FOUND...) fails the waiting requests and makes
// Submit return UNAVAILABLE until another gpu_worker registers.
//
// Tensor parallelism (config.tensor_parallel = N > 1): the driver serves on
// a group of N gpu_workers, one per rank 0..N-1 (the most recently
// registered live worker of each rank). LoadModel goes to every rank at
// once with the group's communicator id (a fresh shared-memory name per
// attempt, so a crashed attempt's segment never collides); every Step goes
// to every rank, and rank 0's result is used (all ranks sample the same
// tokens from the same logits). Any rank lost, or failing differently from
// the others, loses the whole group: its KV is inconsistent then.
//
// KV: the scheduler's GPU pool is the worker's cache size
// (ModelSpec::KvBlocksAfterRounding); requests finished, aborted or
// preempted since the last plan go to the worker in the next plan's
// free_seq_ids, before its sequences run.
#ifndef TANDEM_COORDINATOR_SERVICE_STEP_DRIVER_H_
#define TANDEM_COORDINATOR_SERVICE_STEP_DRIVER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/planner/neo/neo_sub_batches.h"
#include "coordinator/scheduler/scheduler.h"
#include "coordinator/service/driver_metrics.h"
#include "coordinator/service/generation_types.h"
#include "coordinator/service/model_loading.h"
#include "coordinator/service/request_output.h"
#include "coordinator/service/worker_registry.h"
#include "coordinator/structured/schema_grammar.h"
#include "coordinator/structured/token_mask.h"
#include "grpcpp/client_context.h"
#include "proto/worker.grpc.pb.h"

namespace tandem::coord {

struct StepDriverConfig {
  ModelSpec model;  // loaded on every gpu_worker the driver serves on
  // Scheduler limits (see coordinator/scheduler/scheduler.h). The context
  // limit is model.max_context; the GPU KV pool model.KvBlocksAfterRounding().
  int64_t max_num_batched_tokens = 2048;
  int64_t max_num_seqs = 64;
  // Neo's CPU KV pool; 0: none. Must fit in model.cpu_kv_tokens.
  int64_t num_cpu_kv_blocks = 0;
  // Every request's KV, and so its attention, on the CPU pool
  // (MoE-Lightning's CPU attention) instead of the GPU's first (Neo).
  bool cpu_kv_only = false;
  std::vector<int32_t> eos_token_ids;  // the model's end-of-generation ids
  // Share the KV of equal prompt openings between requests (the GPU pool's
  // full blocks; vLLM's automatic prefix caching). Usage then reports
  // cached_tokens.
  bool enable_prefix_caching = false;
  int64_t vocab_size = 0;  // > 0: Submit checks token ids against it
  // Submit returns kResourceExhausted while this many requests wait.
  int64_t max_waiting = 1024;
  // Optional: without one, events carry ids only and stop strings are
  // refused.
  std::shared_ptr<const Tokenizer> tokenizer;
  // Seed for requests that give none; nullopt: a random one per request.
  std::optional<uint64_t> default_seed;
  absl::Duration step_timeout = absl::Minutes(2);
  absl::Duration load_timeout = absl::Minutes(10);
  absl::Duration load_retry_interval = absl::Seconds(1);
  // Called on the driver's thread after every step (must not block).
  std::function<void(const StepStats&)> on_step;
  std::function<void(const std::string&)> log;  // default: stderr
  // Ranks of the tensor-parallel group the model is sharded over (>= 1).
  // Does not combine with CPU experts or CPU attention yet.
  int32_t tensor_parallel = 1;
  // With tensor_parallel > 1: the POSIX shm name prefix ("/tandem-...") of
  // the groups' all-reduce segments (the host device's communicator).
  std::string tp_group_prefix;
  // ScheInfer's n_g re-solved for each step that holds a prefill, from the
  // step's token count (planner/scheinfer/prefill_assignment.h); sent in
  // StepPlan.prefill_gpu_tokens. Null: the load-time value stands. A
  // failure is logged and the step goes without.
  std::function<absl::StatusOr<int64_t>(int64_t tokens)> prefill_gpu_tokens;
  // Neo's two asymmetric sub-batches (planner/neo/neo_sub_batches.h): for a
  // step holding a CPU-pool sequence, the order of its sequences and how
  // many each sub-batch holds (StepPlan.micro_batch_sizes). Null: one
  // batch. A failure is logged and the step runs as one batch.
  std::function<absl::StatusOr<planner::StepSubBatches>(
      absl::Span<const planner::StepSequenceShape>)>
      sub_batches;
};

class StepDriver final : public WorkerListener {
 public:
  // InvalidArgument for a bad config. Starts the loop thread; nothing is
  // served until a gpu_worker is known.
  static absl::StatusOr<std::unique_ptr<StepDriver>> Create(
      StepDriverConfig config);
  ~StepDriver() override;  // Stop()

  // Queues a request; returns its id (increasing, never reused). Requests
  // are queued while no worker is ready. Codes: InvalidArgument (bad ids or
  // params, prompt leaving no room in the context), ResourceExhausted
  // (max_waiting requests wait), Unavailable (stopping, or the model failed
  // to load). After OK, `on_event` gets the request's events (see
  // GenerationEvent); on error it is never called.
  absl::StatusOr<int64_t> Submit(GenerationRequest request,
                                 EventCallback on_event);
  // Finishes the request now with kAbort (its final event follows) and frees
  // its KV; the next plan tells the worker. NotFound if unknown or finished.
  absl::Status Abort(int64_t request_id);

  // Ends the loop (an RPC in flight is cancelled) and finishes every
  // request with kAbort and an UNAVAILABLE status. Idempotent.
  void Stop();

  // A gpu_worker is loaded and steps can run.
  bool ready() const;
  DriverMetrics metrics() const;
  int64_t max_context() const { return config_.model.max_context; }
  const StepDriverConfig& config() const { return config_; }

  // WorkerListener: only rank-0 gpu_workers are used (others are logged).
  void OnWorkerRegistered(const WorkerInfo& worker) override;
  void OnWorkerDead(const WorkerInfo& worker,
                    absl::string_view reason) override;

 private:
  enum class WorkerState { kNone, kNeedLoad, kLoading, kReady, kLoadFailed };
  struct Worker {
    std::string id;
    std::string address;
    int32_t rank = 0;
  };
  struct LiveRequest {
    std::shared_ptr<EventCallback> callback;
    GenerationParams params;
    uint64_t seed = 0;
    std::unique_ptr<RequestOutput> output;
    std::chrono::steady_clock::time_point arrival;
    // JSON mode or a JSON Schema: the answer so far, as the recognizer has
    // read it.
    std::optional<structured::SchemaGrammar> json;
  };
  struct Outgoing {
    int64_t request_id;
    std::shared_ptr<EventCallback> callback;
    GenerationEvent event;
  };

  StepDriver(StepDriverConfig config,
             std::unique_ptr<sched::Scheduler> scheduler);
  void Loop();
  void Log(const std::string& line) const;

  // Loop phases (step_driver_loop.cc); each is entered and left with mu_
  // held and may release it around an RPC or the callbacks.
  void DeliverOutbox() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoadModel() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleWorkerLoss() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Step pieces (step_driver_loop.cc).
  // Neo's sub-batches for the step (config_.sub_batches): reorders `out`'s
  // sequences and sets its micro_batch_sizes.
  void SplitSubBatches(const sched::StepPlan& plan, proto::StepPlan& out) const;
  proto::StepPlan BuildPlan(const sched::StepPlan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyResult(const sched::StepPlan& plan, const proto::StepResult& result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailStep(const sched::StepPlan& plan, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordStep(const sched::StepPlan& plan, double wall_seconds,
                  double worker_seconds, bool ok, int64_t prefill_gpu_rows = 0,
                  int64_t micro_batches = 1)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Bookkeeping (step_driver.cc).
  // Queues the request's final event and forgets it (the scheduler must
  // already have finished it).
  void FinishLive(int64_t request_id, FinishReason reason,
                  absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(int64_t request_id, LiveRequest& live, GenerationEvent event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finishes requests in the scheduler and here with kError.
  void FailRequests(const std::vector<int64_t>& ids, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The plan's finished requests: frees for the worker, final events for
  // those the scheduler finished on its own (kError).
  void TakeFinished(const std::vector<sched::FinishedRequest>& finished)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Picks the workers to serve on — the most recently registered live
  // candidate of each rank — if every rank has one.
  void SelectWorker() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True if `id` is the rank-0 worker in use or one of its peers.
  bool InUse(const std::string& id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void Wake() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StepDriverConfig config_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::unique_ptr<sched::Scheduler> scheduler_ ABSL_GUARDED_BY(mu_);
  // The vocabulary's bytes for JSON mode's masks; null without a tokenizer.
  std::unique_ptr<structured::TokenMasker> masker_;
  absl::flat_hash_map<int64_t, LiveRequest> live_ ABSL_GUARDED_BY(mu_);
  std::vector<Outgoing> outbox_ ABSL_GUARDED_BY(mu_);
  std::vector<StepStats> stats_out_ ABSL_GUARDED_BY(mu_);  // for on_step
  std::vector<int64_t> pending_free_ ABSL_GUARDED_BY(mu_);
  // Schedule() gave an empty plan with requests left: wait for a change.
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // The gpu_worker in use and the live rank-0 gpu_workers to fall back on.
  std::vector<Worker> candidates_ ABSL_GUARDED_BY(mu_);
  std::optional<Worker> current_ ABSL_GUARDED_BY(mu_);  // rank 0
  std::vector<Worker> peers_ ABSL_GUARDED_BY(mu_);      // ranks 1..N-1
  int64_t worker_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // bumped when it changes
  WorkerState state_ ABSL_GUARDED_BY(mu_) = WorkerState::kNone;
  absl::Time next_load_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::shared_ptr<proto::Worker::Stub> stub_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<proto::Worker::Stub>> peer_stubs_ ABSL_GUARDED_BY(mu_);
  int64_t tp_groups_ ABSL_GUARDED_BY(mu_) = 0;  // names each load attempt's group
  // Calls in flight, cancelled when their worker is lost or at Stop().
  grpc::ClientContext* step_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<grpc::ClientContext*> peer_step_ctxs_ ABSL_GUARDED_BY(mu_);
  std::vector<PendingLoad*> loads_ ABSL_GUARDED_BY(mu_);  // every rank's
  // Set when the worker in use was lost; HandleWorkerLoss() acts on it.
  std::optional<absl::Status> loss_ ABSL_GUARDED_BY(mu_);
  absl::Status load_error_ ABSL_GUARDED_BY(mu_);

  DriverMetrics metrics_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tandem::coord

#endif  // TANDEM_COORDINATOR_SERVICE_STEP_DRIVER_H_
