// Scheduler: creation, request intake and Schedule() with its phases.
// Step results, finishing and invariants are in scheduler_state.cc.
#include "coordinator/scheduler/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::sched {

// The plan being built by one Schedule() call, and its remaining budget.
class Scheduler::StepBuilder {
 public:
  explicit StepBuilder(int64_t budget) : budget_(budget) {}

  int64_t budget() const { return budget_; }
  StepPlan& plan() { return plan_; }

  void Add(ScheduledChunk chunk) {
    const int64_t n = static_cast<int64_t>(chunk.tokens.size());
    TANDEM_CHECK(n > 0 && n <= budget_);
    budget_ -= n;
    plan_.num_batched_tokens += n;
    plan_.chunks.push_back(std::move(chunk));
  }
  // Takes back a preempted request's chunk, if it has one, and its tokens.
  void Remove(int64_t request_id) {
    auto it = std::find_if(
        plan_.chunks.begin(), plan_.chunks.end(),
        [&](const ScheduledChunk& c) { return c.request_id == request_id; });
    if (it == plan_.chunks.end()) return;
    const int64_t n = static_cast<int64_t>(it->tokens.size());
    budget_ += n;
    plan_.num_batched_tokens -= n;
    plan_.chunks.erase(it);
  }

 private:
  int64_t budget_;
  StepPlan plan_;
};

absl::Status SchedulerConfig::Validate() const {
  if (block_size <= 0)
    return absl::InvalidArgumentError("block_size must be > 0");
  if (num_gpu_blocks < 0 || num_cpu_blocks < 0 ||
      num_gpu_blocks + num_cpu_blocks == 0) {
    return absl::InvalidArgumentError(absl::StrCat("KV pools need blocks: gpu ",
                                                   num_gpu_blocks, ", cpu ",
                                                   num_cpu_blocks));
  }
  if (max_num_seqs <= 0)
    return absl::InvalidArgumentError("max_num_seqs must be > 0");
  if (max_num_batched_tokens < max_num_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_num_batched_tokens (", max_num_batched_tokens,
                     ") must be >= max_num_seqs (", max_num_seqs,
                     ") so that every running request gets a token each step"));
  }
  if (max_model_len < 2) {
    return absl::InvalidArgumentError(
        "max_model_len must be >= 2 (a prompt and one token)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const SchedulerConfig& config, std::unique_ptr<PlacementPolicy> policy) {
  TANDEM_RETURN_IF_ERROR(config.Validate());
  TANDEM_ASSIGN_OR_RETURN(
      BlockManager blocks,
      BlockManager::Create(config.block_size, config.num_gpu_blocks, config.num_cpu_blocks,
                           config.enable_prefix_caching));
  if (policy == nullptr) policy = std::make_unique<DefaultPlacementPolicy>();
  return std::unique_ptr<Scheduler>(
      new Scheduler(config, std::move(blocks), std::move(policy)));
}

Scheduler::Scheduler(SchedulerConfig config, BlockManager blocks,
                     std::unique_ptr<PlacementPolicy> policy)
    : config_(std::move(config)),
      blocks_(std::move(blocks)),
      policy_(std::move(policy)) {}

absl::StatusOr<int64_t> Scheduler::AddRequest(
    std::vector<int32_t> prompt_token_ids, SamplingParams params) {
  if (prompt_token_ids.empty())
    return absl::InvalidArgumentError("empty prompt");
  for (int32_t t : prompt_token_ids) {
    if (t < 0)
      return absl::InvalidArgumentError(absl::StrCat("negative token id ", t));
  }
  TANDEM_RETURN_IF_ERROR(params.Validate());
  const int64_t id = next_request_id_++;
  auto r = std::make_unique<Request>(
      id, std::move(prompt_token_ids),
      std::make_shared<const SamplingParams>(std::move(params)),
      /*arrival_seq=*/id);
  waiting_.push_back(r.get());  // the newest arrival: the queue stays sorted
  requests_.emplace(id, std::move(r));
  return id;
}

absl::StatusOr<StepPlan> Scheduler::Schedule() {
  if (in_flight_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", in_flight_->step_id, " is still in flight"));
  }
  StepBuilder step(config_.max_num_batched_tokens);
  // 1. Decodes, then 2. continuing prefills, each in admission order. Ids are
  // snapshotted because preemption edits running_ (victims come from its
  // tail) and an infeasible request may be finished (deleted) in place.
  for (const bool decodes : {true, false}) {
    for (int64_t id : running_ids()) {
      if (step.budget() == 0) break;
      auto it = requests_.find(id);
      if (it == requests_.end()) continue;
      Request* r = it->second.get();
      if (r->status() != RequestStatus::kRunning)
        continue;  // preempted meanwhile
      if ((r->num_uncomputed_tokens() == 1) != decodes) continue;
      ScheduleRunning(r, step);
    }
  }
  // 3. Admission; skipped after a preemption (vLLM v1): the freed blocks go
  // to the running requests that needed them, not to newcomers.
  if (step.plan().preempted.empty()) AdmitWaiting(step);

  StepPlan plan = std::move(step.plan());
  plan.finished = std::move(pending_finished_);
  pending_finished_.clear();
  if (!plan.chunks.empty()) {
    plan.step_id = next_step_id_++;
    InFlight f{plan.step_id, {}};
    f.chunks.reserve(plan.chunks.size());
    for (const ScheduledChunk& c : plan.chunks) {
      f.chunks.push_back(
          {c.request_id, static_cast<int64_t>(c.tokens.size()), c.sample});
    }
    in_flight_ = std::move(f);
  }
  return plan;
}

void Scheduler::ScheduleRunning(Request* r, StepBuilder& step) {
  const int64_t n = std::min(r->num_uncomputed_tokens(), step.budget());
  if (n <= 0) return;
  const int64_t target = r->num_computed_tokens() + n;
  const KvPool pool = *r->kv_pool();
  if (blocks_.BlocksForTokens(r->num_tokens()) > blocks_.num_blocks(pool)) {
    // It has outgrown its pool. Recompute on a pool that holds it, or give up.
    if (!PoolsThatFit(r->num_tokens()).empty()) {
      Preempt(r, step);
    } else {
      FinishInternal(r, FinishReason::kError,
                     absl::StrCat("the sequence (", r->num_tokens(),
                                  " tokens) outgrew every KV pool"));
    }
    return;
  }
  // Make room by preempting the newest admissions on this pool. The request
  // alone fits its pool, so this ends at the latest with itself as victim,
  // which happens only when older requests hold the blocks.
  while (!blocks_.CanAllocate(r->id(), pool, target)) {
    Request* victim = NewestRunningOn(pool);
    TANDEM_CHECK(victim != nullptr);
    Preempt(victim, step);
    if (victim == r) return;
  }
  TANDEM_CHECK(blocks_.Allocate(r->id(), pool, target).ok());
  AddChunk(r, n, step);
}

void Scheduler::AdmitWaiting(StepBuilder& step) {
  while (!waiting_.empty() && step.budget() > 0 &&
         num_running() < config_.max_num_seqs) {
    Request* r = waiting_.front();
    if (r->num_tokens() >=
        config_.max_model_len) {  // only a fresh prompt can be this long
      FinishInternal(
          r, FinishReason::kError,
          absl::StrCat("prompt too long: ", r->num_tokens(),
                       " tokens; the context limit of ", config_.max_model_len,
                       " must leave room for at least one generated token"));
      continue;
    }
    const int64_t need = r->num_tokens();
    const std::vector<KvPool> fit = PoolsThatFit(need);
    if (fit.empty()) {
      int64_t largest = 0;
      for (KvPool p : kAllKvPools)
        largest = std::max(largest, blocks_.num_blocks(p));
      FinishInternal(r, FinishReason::kError,
                     absl::StrCat("request needs KV for ", need,
                                  " tokens; the largest pool holds ",
                                  largest * blocks_.block_size()));
      continue;
    }
    int64_t n = std::min(r->num_tokens(), step.budget());
    PlacementContext ctx;
    ctx.blocks = &blocks_;
    ctx.candidates = fit;
    ctx.blocks_now = blocks_.BlocksForTokens(n);
    ctx.blocks_full = blocks_.BlocksForTokens(need + 1);
    const std::optional<KvPool> pool = policy_->ChoosePool(*r, ctx);
    // A cache hit on the chosen pool: its tokens count as computed, and the
    // chunk is what follows them (the last token always runs).
    PrefixMatch hit;
    if (pool.has_value() && blocks_.caches(*pool)) {
      hit = blocks_.FindCachedPrefix(*pool, *r, need - 1);
    }
    const int64_t cached = static_cast<int64_t>(hit.blocks.size()) * blocks_.block_size();
    if (cached > 0) n = std::min(need - cached, step.budget());
    const bool placed = pool.has_value() && std::find(fit.begin(), fit.end(), *pool) != fit.end() &&
                        blocks_.CanAllocate(r->id(), *pool, cached + n, &hit);
    if (!placed) {
      if (running_.empty()) {
        // Every block is free and the policy still says no: waiting cannot
        // help.
        FinishInternal(r, FinishReason::kError,
                       "the placement policy found no KV pool for it");
        continue;
      }
      break;  // FCFS: the head waits for blocks, and so does everyone behind it
    }
    waiting_.pop_front();
    TANDEM_CHECK(blocks_.Allocate(r->id(), *pool, cached + n, &hit).ok());
    if (blocks_.caches(*pool)) {
      prefix_queries_ += need;
      prefix_hits_ += cached;
    }
    r->Admit(*pool, next_admit_seq_++, cached);
    running_.push_back(r);
    AddChunk(r, n, step);
  }
}

void Scheduler::Preempt(Request* r, StepBuilder& step) {
  step.Remove(r->id());
  blocks_.Free(r->id());
  RemoveFromRunning(r);
  r->Preempt();
  InsertWaitingByArrival(r);
  ++num_preemptions_;
  step.plan().preempted.push_back(r->id());
}

Request* Scheduler::NewestRunningOn(KvPool pool) const {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if ((*it)->kv_pool() == pool) return *it;
  }
  return nullptr;
}

std::vector<KvPool> Scheduler::PoolsThatFit(int64_t num_tokens) const {
  std::vector<KvPool> out;
  const int64_t blocks = blocks_.BlocksForTokens(num_tokens);
  for (KvPool p : kAllKvPools) {
    if (blocks_.is_configured(p) && blocks <= blocks_.num_blocks(p))
      out.push_back(p);
  }
  return out;
}

void Scheduler::AddChunk(Request* r, int64_t num_tokens, StepBuilder& step) {
  ScheduledChunk c;
  c.request_id = r->id();
  c.start_pos = r->num_computed_tokens();
  c.tokens = r->tokens(c.start_pos, num_tokens);
  c.sample = c.start_pos + num_tokens == r->num_tokens();
  c.is_decode = num_tokens == 1 && c.sample && c.start_pos > 0;
  c.pool = *r->kv_pool();
  c.block_table = blocks_.BlockTable(r->id());
  if (r->num_prefix_hit_tokens() > 0 && c.start_pos == r->num_prefix_hit_tokens()) {
    c.shared_prefix_tokens = c.start_pos;
  }
  TANDEM_CHECK(blocks_.CapacityOf(r->id()) >= c.start_pos + num_tokens);
  c.sampling = r->sampling_ptr();
  step.Add(std::move(c));
}

}  // namespace tandem::sched
