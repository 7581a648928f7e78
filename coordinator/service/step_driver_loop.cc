// StepDriver's loop: event delivery, model loads, steps and worker loss.
#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "coordinator/service/plan_conversion.h"
#include "coordinator/service/step_driver.h"
#include "proto/grpc_status.h"

namespace tandem::coord {
namespace {

// A Step failing with one of these means the worker (or its model) is gone:
// reload before going on.
bool IsWorkerFailure(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kFailedPrecondition:  // no model: it restarted
      return true;
    default:
      return false;
  }
}

// A LoadModel failing with one of these may succeed later.
bool IsRetryableLoadFailure(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
      .count();
}

}  // namespace

void StepDriver::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    if (!outbox_.empty() || !stats_out_.empty()) {
      DeliverOutbox();
      continue;
    }
    if (loss_.has_value()) {
      HandleWorkerLoss();
      continue;
    }
    if (state_ == WorkerState::kNeedLoad && absl::Now() >= next_load_) {
      LoadModel();
      continue;
    }
    if (state_ == WorkerState::kReady && !stalled_ &&
        scheduler_->num_unfinished() > 0) {
      RunStep();
      continue;
    }
    if (state_ == WorkerState::kNeedLoad) {
      cv_.WaitWithDeadline(&mu_, next_load_);
    } else {
      cv_.Wait(&mu_);
    }
  }
}

void StepDriver::DeliverOutbox() {
  std::vector<Outgoing> batch;
  batch.swap(outbox_);
  std::vector<StepStats> stats;
  stats.swap(stats_out_);
  mu_.Unlock();
  absl::flat_hash_set<int64_t> gone;  // consumers that went away
  for (Outgoing& o : batch) {
    if (gone.contains(o.request_id)) continue;
    const bool keep = (*o.callback)(o.event);
    if (!keep && !o.event.finished) gone.insert(o.request_id);
  }
  if (config_.on_step) {
    for (const StepStats& s : stats) config_.on_step(s);
  }
  mu_.Lock();
  for (int64_t id : gone) {
    if (live_.erase(id) == 0) continue;  // finished meanwhile
    (void)scheduler_->Abort(id);         // frees its KV now
    stalled_ = false;
  }
}

void StepDriver::LoadModel() {
  if (!current_.has_value()) {
    state_ = WorkerState::kNone;
    return;
  }
  state_ = WorkerState::kLoading;
  const Worker target = *current_;
  const int64_t epoch = worker_epoch_;
  // Rank 0 first, then its peers; with tensor parallelism every rank loads
  // at once (rank 0 creates the group the others join), by the name rank
  // 0's device gave it or, when it gives none (the host device), ours.
  std::vector<Worker> ranks = {target};
  ranks.insert(ranks.end(), peers_.begin(), peers_.end());
  std::string group = absl::StrCat(config_.tp_group_prefix, "-", ++tp_groups_);
  if (config_.tensor_parallel > 1) {
    // Rank 0's device may name the group itself (an NCCL id); asked without
    // the lock, as it is a call to another process.
    mu_.Unlock();
    absl::StatusOr<std::string> id =
        NewTensorParallelGroupId(target.address, config_.tensor_parallel);
    mu_.Lock();
    if (stopping_ || epoch != worker_epoch_) return;  // that worker is gone
    if (!id.ok()) {
      Log(absl::StrCat("gpu_worker ", target.id, " made no tensor-parallel group id (",
                       id.status().ToString(), "); the group loads as ", group));
    } else if (!id->empty()) {
      group = *std::move(id);
    }
  }
  std::vector<std::shared_ptr<proto::Worker::Stub>> stubs;
  std::vector<std::unique_ptr<PendingLoad>> loads;
  for (const Worker& w : ranks) {
    stubs.push_back(std::shared_ptr<proto::Worker::Stub>(
        proto::Worker::NewStub(MakeWorkerChannel(w.address))));
    proto::LoadModelRequest req = BuildLoadModelRequest(config_.model);
    if (config_.tensor_parallel > 1) {
      auto* tp = req.mutable_tensor_parallel();
      tp->set_rank(w.rank);
      tp->set_size(config_.tensor_parallel);
      tp->set_group_id(group);
    }
    Log(absl::StrCat("loading ", config_.model.model_path, " on gpu_worker ", w.id,
                     " at ", w.address,
                     config_.tensor_parallel > 1
                         ? absl::StrCat(" (rank ", w.rank, " of ", config_.tensor_parallel, ")")
                         : ""));
    loads.push_back(PendingLoad::Start(*stubs.back(), std::move(req), config_.load_timeout));
    loads_.push_back(loads.back().get());
  }
  mu_.Unlock();
  // A rank that fails makes the others' loads pointless (ranks > 0 would
  // wait for a group that rank 0 never forms): cancel them at once.
  for (bool all_done = false; !all_done;) {
    all_done = true;
    bool failed = false;
    for (auto& l : loads) {
      if (!l->Wait(absl::Milliseconds(20))) {
        all_done = false;
      } else if (!l->result().ok()) {
        failed = true;
      }
    }
    if (failed) {
      for (auto& l : loads) l->Cancel();
    }
  }
  mu_.Lock();
  loads_.clear();
  // Rank 0's response, or the failure that caused the others' (a rank
  // cancelled because another failed reports that one).
  absl::StatusOr<proto::LoadModelResponse> r = loads[0]->result();
  std::optional<absl::Status> cause;
  for (size_t i = 0; i < loads.size(); ++i) {
    const absl::Status s = loads[i]->result().status();
    if (s.ok() || (cause.has_value() && !absl::IsCancelled(*cause))) continue;
    if (cause.has_value() && absl::IsCancelled(s)) continue;
    cause = ranks.size() == 1
                ? s
                : absl::Status(s.code(), absl::StrCat("rank ", ranks[i].rank, ": ", s.message()));
  }
  if (cause.has_value()) r = *cause;
  if (stopping_ || epoch != worker_epoch_) return;  // that worker is gone
  const int64_t need = scheduler_->num_total_blocks(sched::KvPool::kGpu);
  if (r.ok() && r->kv_blocks() < need) {
    r = absl::FailedPreconditionError(absl::StrCat(
        "gpu_worker ", target.id, " holds ", r->kv_blocks(),
        " KV blocks; the scheduler plans for ", need));
  }
  const int64_t need_cpu_tokens =
      scheduler_->num_total_blocks(sched::KvPool::kCpu) * config_.model.block_size;
  if (r.ok() && r->cpu_kv_tokens() < need_cpu_tokens) {
    r = absl::FailedPreconditionError(absl::StrCat(
        "gpu_worker ", target.id, "'s cpu_worker holds ", r->cpu_kv_tokens(),
        " KV tokens; the scheduler plans for ", need_cpu_tokens));
  }
  if (r.ok()) {
    // KV cached for the previous worker is not on this one.
    scheduler_->ResetPrefixCache();
    stub_ = stubs[0];
    peer_stubs_.assign(stubs.begin() + 1, stubs.end());
    state_ = WorkerState::kReady;
    ++metrics_.num_model_loads;
    stalled_ = false;
    Log(absl::StrCat("gpu_worker ", target.id, " ready: ", r->weight_bytes(),
                     " bytes of weights, ", r->kv_blocks(), " KV blocks"));
    return;
  }
  metrics_.last_error = std::string(r.status().message());
  if (IsRetryableLoadFailure(r.status().code())) {
    // Retry on the newest worker of each rank: one restarted after a crash
    // has registered again before the registry declares the old one dead.
    SelectWorker();
    if (state_ != WorkerState::kNeedLoad) return;  // no complete group now
    next_load_ = absl::Now() + config_.load_retry_interval;
    Log(absl::StrCat("LoadModel on gpu_worker ", target.id, " failed (",
                     r.status().ToString(), "); retrying in ",
                     absl::FormatDuration(config_.load_retry_interval)));
    return;
  }
  state_ = WorkerState::kLoadFailed;
  load_error_ = r.status();
  Log(absl::StrCat("LoadModel on gpu_worker ", target.id,
                   " failed: ", r.status().ToString(),
                   "; waiting requests fail until another gpu_worker "
                   "registers"));
  FailRequests(scheduler_->waiting_ids(),
               absl::UnavailableError(absl::StrCat(
                   "the model could not be loaded: ", r.status().message())));
}

void StepDriver::HandleWorkerLoss() {
  const absl::Status cause = *std::move(loss_);
  loss_.reset();
  ++metrics_.num_worker_losses;
  metrics_.last_error = std::string(cause.message());
  const std::vector<int64_t> running = scheduler_->running_ids();
  Log(absl::StrCat(cause.message(), "; failing ", running.size(),
                   " running requests, ", scheduler_->num_waiting(),
                   " stay queued"));
  FailRequests(running,
               absl::UnavailableError(absl::StrCat(
                   cause.message(),
                   "; the request was running there and cannot resume")));
  pending_free_.clear();  // the next worker holds no sequences
  stalled_ = false;
}

proto::StepPlan StepDriver::BuildPlan(const sched::StepPlan& plan) {
  proto::StepPlan out;
  out.set_step(plan.step_id);
  static const GenerationParams kDefaults;
  // The sequences whose sampling a grammar holds, and their states: their
  // masks are made together below.
  std::vector<proto::StepSequence*> masked;
  std::vector<const structured::SchemaGrammar*> states;
  for (const sched::ScheduledChunk& c : plan.chunks) {
    const sched::Request* r = scheduler_->GetRequest(c.request_id);
    const int64_t generated = r != nullptr ? r->num_output_tokens() : 0;
    auto it = live_.find(c.request_id);
    if (it == live_.end()) {
      *out.add_sequences() = ToStepSequence(c, kDefaults, 0, generated);
      continue;
    }
    LiveRequest& live = it->second;
    proto::StepSequence* s = out.add_sequences();
    *s = ToStepSequence(c, live.params, live.seed, generated, config_.eos_token_ids);
    if (c.sample && live.json.has_value()) {
      masked.push_back(s);
      states.push_back(&*live.json);
    }
    live.output->set_queue_time(SecondsSince(live.arrival));
    if (config_.enable_prefix_caching && r != nullptr) {
      live.output->set_cached_prompt_tokens(r->num_cached_prompt_tokens());
    }
  }
  if (!states.empty()) {
    // Each state once, in parallel: a batch of structured requests would
    // otherwise wait for one mask after another (milliseconds each over a
    // large vocabulary).
    static const int kMaskThreads =
        static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
    std::vector<std::string> masks = masker_->AllowedMasks(states, kMaskThreads);
    for (size_t i = 0; i < masked.size(); ++i) {
      masked[i]->mutable_sampling()->set_allowed_tokens(std::move(masks[i]));
    }
  }
  out.mutable_free_seq_ids()->Add(pending_free_.begin(), pending_free_.end());
  pending_free_.clear();
  SplitSubBatches(plan, out);
  if (config_.prefill_gpu_tokens) {
    int64_t tokens = 0;
    bool prefill = false;
    for (const sched::ScheduledChunk& c : plan.chunks) {
      tokens += static_cast<int64_t>(c.tokens.size());
      prefill = prefill || c.tokens.size() > 1;
    }
    if (prefill) {
      absl::StatusOr<int64_t> n_g = config_.prefill_gpu_tokens(tokens);
      if (n_g.ok()) {
        out.set_prefill_gpu_tokens(*n_g);
      } else {
        Log(absl::StrCat("prefill token assignment for ", tokens,
                         " tokens: ", n_g.status().ToString()));
      }
    }
  }
  return out;
}

void StepDriver::SplitSubBatches(const sched::StepPlan& plan, proto::StepPlan& out) const {
  if (!config_.sub_batches) return;
  std::vector<planner::StepSequenceShape> shapes;
  bool cpu = false;
  for (const sched::ScheduledChunk& c : plan.chunks) {
    shapes.push_back({static_cast<int64_t>(c.tokens.size()), c.start_pos,
                      c.pool == sched::KvPool::kCpu});
    cpu = cpu || shapes.back().cpu_kv;
  }
  if (!cpu) return;
  absl::StatusOr<planner::StepSubBatches> split = config_.sub_batches(shapes);
  if (!split.ok() || split->order.size() != shapes.size()) {
    Log(absl::StrCat("Neo sub-batches for step ", plan.step_id, ": ",
                     split.ok() ? "a malformed order" : split.status().ToString(),
                     "; it runs as one batch"));
    return;
  }
  if (split->sizes.empty()) return;
  // The sequences batch-0 first (results are matched by id, not position).
  google::protobuf::RepeatedPtrField<proto::StepSequence> ordered;
  for (size_t i : split->order) *ordered.Add() = out.sequences(static_cast<int>(i));
  out.mutable_sequences()->Swap(&ordered);
  out.mutable_micro_batch_sizes()->Add(split->sizes.begin(), split->sizes.end());
}

void StepDriver::RunStep() {
  absl::StatusOr<sched::StepPlan> scheduled = scheduler_->Schedule();
  if (!scheduled.ok()) {  // only with a step in flight: a bug
    Log(absl::StrCat("Schedule failed: ", scheduled.status().ToString()));
    stalled_ = true;
    return;
  }
  const sched::StepPlan plan = *std::move(scheduled);
  TakeFinished(plan.finished);
  pending_free_.insert(pending_free_.end(), plan.preempted.begin(),
                       plan.preempted.end());
  if (plan.empty()) {
    stalled_ = true;  // nothing can run until something changes
    return;
  }
  const proto::StepPlan request = BuildPlan(plan);
  const Worker worker = *current_;
  const int64_t epoch = worker_epoch_;
  std::shared_ptr<proto::Worker::Stub> stub = stub_;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + config_.step_timeout));
  proto::StepResult result;
  step_ctx_ = &ctx;
  // The peers' calls start first (asynchronously), rank 0's runs here.
  std::vector<std::unique_ptr<grpc::ClientContext>> peer_ctxs;
  std::vector<proto::StepResult> peer_results(peer_stubs_.size());
  std::vector<grpc::Status> peer_rpcs(peer_stubs_.size());
  absl::BlockingCounter peers_done(static_cast<int>(peer_stubs_.size()));
  for (size_t i = 0; i < peer_stubs_.size(); ++i) {
    peer_ctxs.push_back(std::make_unique<grpc::ClientContext>());
    peer_ctxs.back()->set_deadline(absl::ToChronoTime(absl::Now() + config_.step_timeout));
    peer_step_ctxs_.push_back(peer_ctxs.back().get());
    peer_stubs_[i]->async()->Step(peer_ctxs.back().get(), &request, &peer_results[i],
                                  [&, i](grpc::Status st) {
                                    peer_rpcs[i] = std::move(st);
                                    peers_done.DecrementCount();
                                  });
  }
  mu_.Unlock();
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status rpc = stub->Step(&ctx, request, &result);
  peers_done.Wait();
  const double wall = SecondsSince(t0);
  mu_.Lock();
  step_ctx_ = nullptr;
  peer_step_ctxs_.clear();
  // A rank that failed where rank 0 did not (or failed otherwise) leaves the
  // group's KV inconsistent: the group is lost. All ranks failing alike on
  // a bad plan fail only the step.
  bool group_broken = false;
  for (size_t i = 0; i < peer_rpcs.size(); ++i) {
    if (peer_rpcs[i].error_code() == rpc.error_code()) continue;
    group_broken = true;
    if (rpc.ok() || !peer_rpcs[i].ok()) {
      const grpc::Status& bad = peer_rpcs[i].ok() ? rpc : peer_rpcs[i];
      rpc = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                         absl::StrCat("tensor-parallel rank ", peers_[i].rank, " (gpu_worker ",
                                      peers_[i].id, ") failed where rank 0 did not: ",
                                      bad.error_message()));
    }
    break;
  }

  if (stopping_ || epoch != worker_epoch_ || !rpc.ok()) {
    (void)scheduler_->OnStepFailed(plan.step_id);
    RecordStep(plan, wall, 0.0, /*ok=*/false);
    // Stopping, or the worker was declared dead meanwhile (loss_ is set).
    if (stopping_ || epoch != worker_epoch_) return;
    const absl::Status s = FromGrpcStatus(
        rpc, absl::StrCat("Step ", plan.step_id, " on gpu_worker ", worker.id,
                          " at ", worker.address));
    if (group_broken || IsWorkerFailure(s.code())) {
      loss_ = absl::UnavailableError(s.message());
      stub_.reset();
      peer_stubs_.clear();
      state_ = WorkerState::kNeedLoad;  // the same worker, unless it is dead
      next_load_ = absl::Now();
      return;
    }
    Log(absl::StrCat(s.ToString(), "; failing the step's ",
                     plan.chunks.size(), " requests"));
    // The worker may not have got to its frees: send them again (freeing
    // twice is harmless).
    pending_free_.insert(pending_free_.end(), request.free_seq_ids().begin(),
                         request.free_seq_ids().end());
    FailStep(plan, s);
    return;
  }
  // The micro-batches the worker ran: the step's own split (Neo), else mu's.
  const int64_t seqs = request.sequences_size();
  const int64_t mu = config_.model.micro_batch_size;
  const int64_t micro_batches = request.micro_batch_sizes_size() > 0
                                    ? request.micro_batch_sizes_size()
                                    : (mu > 0 ? (seqs + mu - 1) / mu : 1);
  RecordStep(plan, wall, result.step_seconds(), /*ok=*/true, result.prefill_gpu_rows(),
             micro_batches);
  if (result.has_expert_cache()) {
    const proto::ExpertCacheCounters& c = result.expert_cache();
    metrics_.expert_cache = {{"activations", c.activations()},
                             {"hits", c.hits()},
                             {"misses", c.misses()},
                             {"loads", c.loads()},
                             {"admitted", c.admitted()},
                             {"evictions", c.evictions()},
                             {"prefetch_issued", c.prefetch_issued()},
                             {"prefetch_used", c.prefetch_used()},
                             {"prefetch_wasted", c.prefetch_wasted()},
                             {"gpu_computed", c.gpu_computed()},
                             {"cpu_computed", c.cpu_computed()}};
  }
  ApplyResult(plan, result);
}

void StepDriver::ApplyResult(const sched::StepPlan& plan,
                             const proto::StepResult& result) {
  absl::flat_hash_map<int64_t, const proto::SequenceResult*> by_id;
  absl::StatusOr<std::vector<sched::SampledToken>> tokens =
      MatchResults(plan, result, &by_id);
  absl::StatusOr<std::vector<sched::RequestUpdate>> updates =
      tokens.ok() ? scheduler_->OnStepResult(plan.step_id, *tokens)
                  : tokens.status();
  if (!updates.ok()) {
    (void)scheduler_->OnStepFailed(plan.step_id);
    const absl::Status s = absl::InternalError(absl::StrCat(
        "bad result from the gpu_worker: ", updates.status().message()));
    Log(s.ToString());
    FailStep(plan, s);
    return;
  }
  for (const sched::RequestUpdate& u : *updates) {
    ++metrics_.generated_tokens;
    auto it = live_.find(u.request_id);
    if (it == live_.end()) continue;  // aborted while the step ran
    LiveRequest& live = it->second;
    if (live.json.has_value() && !masker_->IsEnd(u.token) &&
        !live.json->Feed(masker_->Bytes(u.token))) {
      // The worker sampled outside the mask it was sent.
      (void)scheduler_->Finish(u.request_id, FinishReason::kError);
      FinishLive(u.request_id, FinishReason::kError,
                 absl::InternalError(absl::StrCat("the gpu_worker sampled token ", u.token,
                                                  ", which breaks the JSON answer")));
      continue;
    }
    std::optional<TokenLogprob> logprob;
    if (live.params.top_logprobs >= 0) {
      logprob = ToTokenLogprob(*by_id.at(u.request_id));
    }
    const std::optional<FinishReason> finish =
        live.output->AddToken(u.token, logprob, u.finished);
    if (!finish.has_value()) {
      Emit(u.request_id, live, live.output->TakeEvent());
      continue;
    }
    if (!u.finished.has_value()) {  // a stop string: free its KV now
      (void)scheduler_->Finish(u.request_id, FinishReason::kStop);
    }
    FinishLive(u.request_id, *finish, absl::OkStatus());
  }
}

void StepDriver::FailStep(const sched::StepPlan& plan,
                          const absl::Status& status) {
  std::vector<int64_t> ids;
  ids.reserve(plan.chunks.size());
  for (const sched::ScheduledChunk& c : plan.chunks) ids.push_back(c.request_id);
  FailRequests(ids, status);
}

void StepDriver::RecordStep(const sched::StepPlan& plan, double wall_seconds,
                            double worker_seconds, bool ok, int64_t prefill_gpu_rows,
                            int64_t micro_batches) {
  StepStats s;
  s.step_id = plan.step_id;
  s.num_sequences = static_cast<int64_t>(plan.chunks.size());
  s.num_tokens = plan.num_batched_tokens;
  for (const sched::ScheduledChunk& c : plan.chunks) {
    const auto n = static_cast<int64_t>(c.tokens.size());
    (c.is_decode ? s.num_decode_tokens : s.num_prefill_tokens) += n;
  }
  s.wall_seconds = wall_seconds;
  s.worker_seconds = worker_seconds;
  s.prefill_gpu_rows = prefill_gpu_rows;
  s.micro_batches = micro_batches;
  s.ok = ok;
  if (ok) {
    ++metrics_.num_steps;
    metrics_.prompt_tokens += s.num_prefill_tokens;
    metrics_.step_seconds.Observe(wall_seconds);
  } else {
    ++metrics_.num_step_failures;
  }
  if (config_.on_step) stats_out_.push_back(s);
}

}  // namespace tandem::coord
