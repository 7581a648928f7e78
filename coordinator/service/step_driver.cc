// StepDriver: construction, the public API and request bookkeeping. The loop
// itself (steps, model loads, worker loss) is in step_driver_loop.cc.
#include "coordinator/service/step_driver.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::coord {

absl::StatusOr<std::unique_ptr<StepDriver>> StepDriver::Create(
    StepDriverConfig config) {
  if (absl::Status s = config.model.Validate(); !s.ok()) return s;
  if (config.max_waiting < 0) {
    return absl::InvalidArgumentError("max_waiting must be >= 0");
  }
  if (config.step_timeout <= absl::ZeroDuration() ||
      config.load_timeout <= absl::ZeroDuration() ||
      config.load_retry_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "step_timeout and load_timeout must be > 0, load_retry_interval >= 0");
  }
  if (config.tokenizer != nullptr && config.vocab_size > 0 &&
      config.tokenizer->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tokenizer has ", config.tokenizer->vocab_size(),
        " tokens, more than the model's vocabulary of ", config.vocab_size));
  }
  if (config.num_cpu_kv_blocks < 0 ||
      config.num_cpu_kv_blocks * config.model.block_size > config.model.cpu_kv_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_cpu_kv_blocks (", config.num_cpu_kv_blocks, ") must be >= 0 and fit in the "
        "cpu_worker's model.cpu_kv_tokens (", config.model.cpu_kv_tokens, ")"));
  }
  if (config.tensor_parallel < 1 || config.tensor_parallel > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor_parallel must be in [1, 64], not ", config.tensor_parallel));
  }
  if (config.tensor_parallel > 1) {
    if (config.model.uses_cpu_worker()) {
      return absl::InvalidArgumentError(
          "tensor parallelism does not combine with CPU experts or CPU attention yet");
    }
    if (config.tp_group_prefix.rfind("/tandem-", 0) != 0) {
      return absl::InvalidArgumentError(
          "tensor_parallel > 1 needs tp_group_prefix, a shm name starting \"/tandem-\"");
    }
  }
  sched::SchedulerConfig sc;
  sc.block_size = config.model.block_size;
  sc.num_gpu_blocks = config.model.KvBlocksAfterRounding();
  sc.num_cpu_blocks = config.num_cpu_kv_blocks;
  sc.max_num_batched_tokens = config.max_num_batched_tokens;
  sc.max_num_seqs = config.max_num_seqs;
  sc.max_model_len = config.model.max_context;
  sc.eos_token_ids = config.eos_token_ids;
  sc.enable_prefix_caching = config.enable_prefix_caching;
  if (config.cpu_kv_only && config.num_cpu_kv_blocks == 0) {
    return absl::InvalidArgumentError("cpu_kv_only needs a CPU KV pool (num_cpu_kv_blocks)");
  }
  absl::StatusOr<std::unique_ptr<sched::Scheduler>> scheduler = sched::Scheduler::Create(
      sc, config.cpu_kv_only ? std::make_unique<sched::FixedPlacementPolicy>(sched::KvPool::kCpu)
                             : nullptr);
  if (!scheduler.ok()) return scheduler.status();
  std::unique_ptr<structured::TokenMasker> masker;
  if (config.tokenizer != nullptr) {
    absl::StatusOr<std::unique_ptr<structured::TokenMasker>> m =
        structured::TokenMasker::FromTokenizer(
            *config.tokenizer,
            config.vocab_size > 0 ? config.vocab_size : config.tokenizer->vocab_size(),
            config.eos_token_ids);
    if (m.ok()) masker = *std::move(m);  // else JSON mode is refused per request
  }
  auto driver = std::unique_ptr<StepDriver>(
      new StepDriver(std::move(config), *std::move(scheduler)));
  driver->masker_ = std::move(masker);
  driver->thread_ = std::thread([d = driver.get()] { d->Loop(); });
  return driver;
}

StepDriver::StepDriver(StepDriverConfig config,
                       std::unique_ptr<sched::Scheduler> scheduler)
    : config_(std::move(config)), scheduler_(std::move(scheduler)) {}

StepDriver::~StepDriver() { Stop(); }

void StepDriver::Log(const std::string& line) const {
  if (config_.log) {
    config_.log(line);
  } else {
    std::fprintf(stderr, "tandem coordinator: %s\n", line.c_str());
  }
}

void StepDriver::Wake() {
  stalled_ = false;
  cv_.Signal();
}

void StepDriver::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (step_ctx_ != nullptr) step_ctx_->TryCancel();
    for (grpc::ClientContext* c : peer_step_ctxs_) c->TryCancel();
    for (PendingLoad* l : loads_) l->Cancel();
    cv_.Signal();
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (int64_t id : ids) {
    (void)scheduler_->Finish(id, FinishReason::kAbort);
    FinishLive(id, FinishReason::kAbort,
               absl::UnavailableError("the coordinator is shutting down"));
  }
  DeliverOutbox();
}

absl::StatusOr<int64_t> StepDriver::Submit(GenerationRequest request,
                                           EventCallback on_event) {
  if (on_event == nullptr) {
    return absl::InvalidArgumentError("Submit: no event callback");
  }
  if (absl::Status s = ValidateGenerationRequest(
          request, config_.vocab_size, config_.tokenizer != nullptr);
      !s.ok()) {
    return s;
  }
  const int64_t prompt_len = static_cast<int64_t>(request.prompt_ids.size());
  if (prompt_len >= config_.model.max_context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt has ", prompt_len, " tokens; the context limit of ",
        config_.model.max_context,
        " must leave room for at least one generated token"));
  }
  if ((request.params.json_object || request.params.json_schema != nullptr) && masker_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "response_format ", request.params.json_object ? "json_object" : "json_schema",
        " needs the model's tokenizer (with an end-of-generation token); this server has none"));
  }
  GenerationParams params = std::move(request.params);
  if (!params.seed.has_value()) {
    if (config_.default_seed.has_value()) {
      params.seed = config_.default_seed;
    } else {
      thread_local std::mt19937_64 rng{std::random_device{}()};
      params.seed = rng();
    }
  }
  const auto arrival =
      request.arrival_time.value_or(std::chrono::steady_clock::now());

  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return absl::UnavailableError("the coordinator is shutting down");
  }
  if (state_ == WorkerState::kLoadFailed) {
    return absl::UnavailableError(
        absl::StrCat("the model could not be loaded: ", load_error_.message()));
  }
  if (scheduler_->num_waiting() >= config_.max_waiting) {
    return absl::ResourceExhaustedError(
        absl::StrCat(scheduler_->num_waiting(),
                     " requests are already waiting; try again later"));
  }
  absl::StatusOr<int64_t> id = scheduler_->AddRequest(
      std::move(request.prompt_ids), ToSchedulerParams(params));
  if (!id.ok()) return id.status();
  LiveRequest live;
  live.callback = std::make_shared<EventCallback>(std::move(on_event));
  live.seed = *params.seed;
  live.output = std::make_unique<RequestOutput>(*id, prompt_len, params,
                                                config_.tokenizer.get());
  // The grammar reads the schema that live.params keeps.
  if (params.json_schema != nullptr) {
    live.json.emplace(params.json_schema.get());
  } else if (params.json_object) {
    live.json.emplace(structured::CompiledSchema::AnyObject().get());
  }
  live.params = std::move(params);
  live.arrival = arrival;
  live_.emplace(*id, std::move(live));
  Wake();
  return *id;
}

absl::Status StepDriver::Abort(int64_t request_id) {
  absl::MutexLock lock(&mu_);
  if (!live_.contains(request_id)) {
    return absl::NotFoundError(
        absl::StrCat("request ", request_id, " is unknown or finished"));
  }
  (void)scheduler_->Abort(request_id);  // frees its KV now
  FinishLive(request_id, FinishReason::kAbort, absl::OkStatus());
  Wake();
  return absl::OkStatus();
}

bool StepDriver::ready() const {
  absl::MutexLock lock(&mu_);
  return state_ == WorkerState::kReady;
}

DriverMetrics StepDriver::metrics() const {
  absl::MutexLock lock(&mu_);
  DriverMetrics m = metrics_;
  m.num_waiting = scheduler_->num_waiting();
  m.num_running = scheduler_->num_running();
  m.gpu_kv_blocks_used = scheduler_->num_used_blocks(sched::KvPool::kGpu);
  m.gpu_kv_blocks_total = scheduler_->num_total_blocks(sched::KvPool::kGpu);
  m.gpu_kv_usage = scheduler_->kv_usage(sched::KvPool::kGpu);
  m.cpu_kv_blocks_used = scheduler_->num_used_blocks(sched::KvPool::kCpu);
  m.cpu_kv_blocks_total = scheduler_->num_total_blocks(sched::KvPool::kCpu);
  m.cpu_kv_usage = scheduler_->kv_usage(sched::KvPool::kCpu);
  m.num_preemptions = scheduler_->num_preemptions();
  m.num_requests_finished = scheduler_->num_finished();
  m.prefix_cache_queries = scheduler_->num_prefix_cache_queries();
  m.prefix_cache_hits = scheduler_->num_prefix_cache_hits();
  if (masker_ != nullptr) {
    m.structured_masks_cached = masker_->cache_hits();
    m.structured_masks_computed = masker_->cache_misses();
  }
  m.ready = state_ == WorkerState::kReady;
  m.worker_id = current_ ? current_->id : "";
  m.worker_address = current_ ? current_->address : "";
  return m;
}

// --- workers ---

void StepDriver::OnWorkerRegistered(const WorkerInfo& worker) {
  if (worker.kind != proto::WORKER_KIND_GPU) {
    Log(absl::StrCat("worker ", worker.id,
                     " is a cpu_worker; the step driver does not call it"));
    return;
  }
  if (worker.rank < 0 || worker.rank >= config_.tensor_parallel) {
    Log(absl::StrCat("gpu_worker ", worker.id, " has rank ", worker.rank,
                     "; the model is served on ", config_.tensor_parallel,
                     " rank(s), so it is not used"));
    return;
  }
  absl::MutexLock lock(&mu_);
  candidates_.push_back({worker.id, worker.address, worker.rank});
  if (!current_.has_value() || state_ == WorkerState::kLoadFailed) {
    SelectWorker();
  }
}

void StepDriver::OnWorkerDead(const WorkerInfo& worker,
                              absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  std::erase_if(candidates_,
                [&](const Worker& w) { return w.id == worker.id; });
  if (!InUse(worker.id)) {
    // A spare rank: a group that was waiting for it stays incomplete.
    return;
  }
  loss_ = absl::UnavailableError(absl::StrCat(
      "gpu_worker ", worker.id, " at ", worker.address, " was lost (",
      reason, ")"));
  if (step_ctx_ != nullptr) step_ctx_->TryCancel();
  for (grpc::ClientContext* c : peer_step_ctxs_) c->TryCancel();
  for (PendingLoad* l : loads_) l->Cancel();
  SelectWorker();
}

bool StepDriver::InUse(const std::string& id) const {
  if (current_.has_value() && current_->id == id) return true;
  return std::any_of(peers_.begin(), peers_.end(),
                     [&](const Worker& w) { return w.id == id; });
}

void StepDriver::SelectWorker() {
  ++worker_epoch_;
  stub_.reset();
  peer_stubs_.clear();
  load_error_ = absl::OkStatus();
  current_.reset();
  peers_.clear();
  // The most recently registered candidate of each rank.
  std::vector<std::optional<Worker>> by_rank(static_cast<size_t>(config_.tensor_parallel));
  for (const Worker& w : candidates_) by_rank[static_cast<size_t>(w.rank)] = w;
  const bool complete = std::all_of(by_rank.begin(), by_rank.end(),
                                    [](const auto& w) { return w.has_value(); });
  if (!complete) {
    state_ = WorkerState::kNone;
  } else {
    current_ = by_rank[0];
    for (size_t r = 1; r < by_rank.size(); ++r) peers_.push_back(*by_rank[r]);
    state_ = WorkerState::kNeedLoad;
    next_load_ = absl::InfinitePast();
  }
  Wake();
}

// --- requests ---

void StepDriver::Emit(int64_t request_id, LiveRequest& live,
                      GenerationEvent event) {
  outbox_.push_back({request_id, live.callback, std::move(event)});
}

void StepDriver::FinishLive(int64_t request_id, FinishReason reason,
                            absl::Status status) {
  auto it = live_.find(request_id);
  if (it == live_.end()) return;
  Emit(request_id, it->second,
       it->second.output->TakeFinalEvent(reason, std::move(status)));
  live_.erase(it);
}

void StepDriver::FailRequests(const std::vector<int64_t>& ids,
                              const absl::Status& status) {
  for (int64_t id : ids) {
    (void)scheduler_->Finish(id, FinishReason::kError,
                             std::string(status.message()));
    FinishLive(id, FinishReason::kError, status);
  }
}

void StepDriver::TakeFinished(
    const std::vector<sched::FinishedRequest>& finished) {
  for (const sched::FinishedRequest& f : finished) {
    pending_free_.push_back(f.request_id);
    if (!live_.contains(f.request_id)) continue;  // finished by the driver
    // The scheduler gave up on it (its KV cannot fit in any pool).
    FinishLive(f.request_id, f.reason,
               f.reason == FinishReason::kError
                   ? absl::ResourceExhaustedError(f.message)
                   : absl::OkStatus());
  }
}

}  // namespace tandem::coord
