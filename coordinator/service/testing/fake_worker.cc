#include "coordinator/service/testing/fake_worker.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "proto/grpc_status.h"

namespace tandem::coord::testing {

int32_t FakeWorker::HashToken(const std::vector<int32_t>& context,
                              int64_t vocab, float temperature, uint64_t seed,
                              int64_t generated) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (int32_t t : context) {
    h ^= static_cast<uint64_t>(t) + 0x9e3779b97f4a7c15ull;
    h *= 1099511628211ull;
  }
  if (temperature > 0) {
    h ^= seed * 0xbf58476d1ce4e5b9ull + static_cast<uint64_t>(generated);
    h *= 1099511628211ull;
  }
  return static_cast<int32_t>(10 + h % static_cast<uint64_t>(vocab - 10));
}

grpc::Status FakeWorker::LoadModel(grpc::ServerContext* ctx,
                                   const proto::LoadModelRequest* req,
                                   proto::LoadModelResponse* resp) {
  absl::MutexLock lock(&mu_);
  ++load_calls_;
  last_load_ = *req;
  while (hold_loads_ && !ctx->IsCancelled()) {
    mu_.AwaitWithTimeout(
        absl::Condition(+[](bool* h) { return !*h; }, &hold_loads_),
        absl::Milliseconds(10));
  }
  if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
  if (fail_loads_ > 0) {
    --fail_loads_;
    return ToGrpcStatus(fail_load_status_);
  }
  if (req->max_context() <= 0 || req->kv_blocks() <= 0 ||
      req->block_size() <= 0) {
    return ToGrpcStatus(absl::InvalidArgumentError("fake: sizes must be > 0"));
  }
  max_context_ = req->max_context();
  block_size_ = req->block_size();
  const int64_t per_seq = (max_context_ + block_size_ - 1) / block_size_;
  const int64_t seqs =
      std::max<int64_t>(1, req->kv_blocks() * block_size_ / max_context_);
  total_blocks_ = per_seq * seqs;
  seqs_.clear();
  slots_.assign(static_cast<size_t>(total_blocks_ * block_size_), -1);
  loaded_ = true;
  ++loads_;
  resp->set_kv_blocks(total_blocks_);
  resp->set_weight_bytes(1234);
  resp->set_cpu_kv_tokens(req->cpu_kv_tokens());  // its "cpu_worker" holds what is asked
  return grpc::Status::OK;
}

grpc::Status FakeWorker::Drain(grpc::ServerContext*, const proto::DrainRequest*,
                               proto::DrainResponse*) {
  absl::MutexLock lock(&mu_);
  loaded_ = false;
  seqs_.clear();
  return grpc::Status::OK;
}

grpc::Status FakeWorker::Step(grpc::ServerContext* ctx,
                              const proto::StepPlan* plan,
                              proto::StepResult* result) {
  absl::MutexLock lock(&mu_);
  ++step_calls_;
  plans_.push_back(*plan);
  // Held: wait for release or for the caller to give up.
  while (hold_ && !ctx->IsCancelled()) {
    mu_.AwaitWithTimeout(absl::Condition(+[](bool* h) { return !*h; }, &hold_),
                         absl::Milliseconds(10));
  }
  if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
  if (step_delay_ > absl::ZeroDuration()) {
    const absl::Duration d = step_delay_;
    mu_.Unlock();
    absl::SleepFor(d);
    mu_.Lock();
  }
  if (fail_steps_ > 0) {
    --fail_steps_;
    return ToGrpcStatus(fail_step_status_);
  }
  const absl::Status s = RunStep(*plan, result);
  if (s.ok()) ++steps_;
  return ToGrpcStatus(s);
}

int64_t FakeWorker::BlocksFor(int64_t tokens) const {
  return (tokens + block_size_ - 1) / block_size_;
}

absl::Status FakeWorker::RunStep(const proto::StepPlan& plan,
                                 proto::StepResult* result) {
  for (int64_t id : plan.free_seq_ids()) {
    freed_.push_back(id);
    seqs_.erase(id);
  }
  result->set_step(plan.step());
  if (!loaded_) {
    return absl::FailedPreconditionError("fake: Step before LoadModel");
  }
  // Validate everything first, as the engine does.
  absl::flat_hash_set<int64_t> seen;
  int64_t blocks_after = UsedBlocksLocked();
  for (const proto::StepSequence& s : plan.sequences()) {
    if (!seen.insert(s.seq_id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("fake: sequence ", s.seq_id(), " twice"));
    }
    if (s.tokens().empty()) {
      return absl::InvalidArgumentError("fake: a sequence has no tokens");
    }
    for (int32_t t : s.tokens()) {
      if (t < 0 || t >= options_.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("fake: token id ", t, " outside the vocabulary"));
      }
    }
    auto it = seqs_.find(s.seq_id());
    const int64_t own = it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.tokens.size());
    const int64_t len = std::max(own, s.shared_prefix_tokens());
    if (s.shared_prefix_tokens() > 0 &&
        (s.start_pos() != s.shared_prefix_tokens() ||
         s.block_table_size() < BlocksFor(s.shared_prefix_tokens()))) {
      return absl::InvalidArgumentError(
          absl::StrCat("fake: sequence ", s.seq_id(), " has a bad shared prefix"));
    }
    for (int32_t b : s.block_table()) {
      if (b < 0 || b >= total_blocks_) {
        return absl::InvalidArgumentError(absl::StrCat("fake: block ", b, " outside the cache"));
      }
    }
    if (s.block_table_size() > 0 &&
        s.block_table_size() < BlocksFor(s.start_pos() + s.tokens_size())) {
      return absl::InvalidArgumentError("fake: the block table is too short");
    }
    if (s.start_pos() < 0 || s.start_pos() > len) {
      return absl::InvalidArgumentError(
          absl::StrCat("fake: sequence ", s.seq_id(), " starts at ",
                       s.start_pos(), " but holds ", len, " tokens"));
    }
    const int64_t end = s.start_pos() + s.tokens_size();
    if (end > max_context_) {
      return absl::InvalidArgumentError(
          absl::StrCat("fake: sequence ", s.seq_id(), " would reach ", end,
                       " tokens, past ", max_context_));
    }
    blocks_after += std::max<int64_t>(0, BlocksFor(end) - BlocksFor(len));
  }
  if (blocks_after > total_blocks_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "fake: KV cache full: ", blocks_after, " blocks of ", total_blocks_));
  }
  for (const proto::StepSequence& s : plan.sequences()) {
    std::vector<int32_t>& tokens = seqs_[s.seq_id()].tokens;
    auto slot = [&](int64_t pos) -> int32_t& {
      const int64_t block = s.block_table(static_cast<int>(pos / block_size_));
      return slots_[static_cast<size_t>(block * block_size_ + pos % block_size_)];
    };
    if (s.shared_prefix_tokens() > 0) {  // the context is what the blocks hold
      ++shared_prefix_steps_;
      tokens.clear();
      for (int64_t p = 0; p < s.shared_prefix_tokens(); ++p) tokens.push_back(slot(p));
    }
    // As in the engine: the sequence now ends where this chunk ends.
    tokens.resize(static_cast<size_t>(s.start_pos()));
    tokens.insert(tokens.end(), s.tokens().begin(), s.tokens().end());
    if (s.block_table_size() > 0) {
      for (int64_t p = s.start_pos(); p < static_cast<int64_t>(tokens.size()); ++p) {
        slot(p) = tokens[static_cast<size_t>(p)];
      }
    }
    proto::SequenceResult* r = result->add_results();
    r->set_seq_id(s.seq_id());
    if (!s.sample()) continue;
    int32_t token = NextToken(tokens, s);
    // A constraint: the scripted (or hashed) token when it is allowed,
    // else the lowest allowed id.
    const std::string& allowed = s.sampling().allowed_tokens();
    auto ok = [&](int64_t id) {
      return (static_cast<uint8_t>(allowed[static_cast<size_t>(id / 8)]) >> (id % 8)) & 1;
    };
    if (!allowed.empty()) {
      ++masked_samples_;
      if (static_cast<int64_t>(allowed.size()) != (options_.vocab_size + 7) / 8) {
        return absl::InvalidArgumentError("fake: allowed_tokens of the wrong size");
      }
      if (!options_.ignore_allowed_tokens && !ok(token)) {
        for (int64_t id = 0; id < options_.vocab_size; ++id) {
          if (ok(id)) {
            token = static_cast<int32_t>(id);
            break;
          }
        }
      }
    }
    r->set_token(token);
    r->set_logprob(-0.5f);
    for (int i = 0; i < s.sampling().top_logprobs(); ++i) {
      r->add_top_ids(static_cast<int32_t>((token + i) % options_.vocab_size));
      r->add_top_logprobs(-0.5f - static_cast<float>(i));
    }
  }
  result->set_step_seconds(0.001);
  return absl::OkStatus();
}

int32_t FakeWorker::NextToken(const std::vector<int32_t>& context,
                              const proto::StepSequence& s) const {
  const ScriptEntry* best = nullptr;
  for (const ScriptEntry& e : scripts_) {
    if (e.prompt.size() <= context.size() &&
        std::equal(e.prompt.begin(), e.prompt.end(), context.begin()) &&
        (best == nullptr || e.prompt.size() > best->prompt.size())) {
      best = &e;
    }
  }
  if (best != nullptr) {
    const size_t k = context.size() - best->prompt.size();
    if (k < best->continuation.size()) return best->continuation[k];
  }
  return HashToken(context, options_.vocab_size, s.sampling().temperature(),
                   s.sampling().seed(), s.generated());
}

void FakeWorker::Script(std::vector<int32_t> prompt,
                        std::vector<int32_t> continuation) {
  absl::MutexLock lock(&mu_);
  scripts_.push_back({std::move(prompt), std::move(continuation)});
}

void FakeWorker::FailSteps(int n, absl::Status status) {
  absl::MutexLock lock(&mu_);
  fail_steps_ = n;
  fail_step_status_ = std::move(status);
}

void FakeWorker::FailLoads(int n, absl::Status status) {
  absl::MutexLock lock(&mu_);
  fail_loads_ = n;
  fail_load_status_ = std::move(status);
}

void FakeWorker::SetStepDelay(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  step_delay_ = d;
}

void FakeWorker::HoldSteps(bool hold) {
  absl::MutexLock lock(&mu_);
  hold_ = hold;
}

void FakeWorker::HoldLoads(bool hold) {
  absl::MutexLock lock(&mu_);
  hold_loads_ = hold;
}

int64_t FakeWorker::steps() const {
  absl::MutexLock lock(&mu_);
  return steps_;
}
int64_t FakeWorker::loads() const {
  absl::MutexLock lock(&mu_);
  return loads_;
}
int64_t FakeWorker::load_calls() const {
  absl::MutexLock lock(&mu_);
  return load_calls_;
}
int64_t FakeWorker::step_calls() const {
  absl::MutexLock lock(&mu_);
  return step_calls_;
}
std::vector<proto::StepPlan> FakeWorker::plans() const {
  absl::MutexLock lock(&mu_);
  return plans_;
}
proto::LoadModelRequest FakeWorker::last_load() const {
  absl::MutexLock lock(&mu_);
  return last_load_;
}
std::vector<int64_t> FakeWorker::freed() const {
  absl::MutexLock lock(&mu_);
  return freed_;
}
int64_t FakeWorker::num_sequences() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(seqs_.size());
}
int64_t FakeWorker::used_blocks() const {
  absl::MutexLock lock(&mu_);
  return UsedBlocksLocked();
}
int64_t FakeWorker::UsedBlocksLocked() const {
  int64_t n = 0;
  for (const auto& [id, s] : seqs_) {
    n += BlocksFor(static_cast<int64_t>(s.tokens.size()));
  }
  return n;
}
int64_t FakeWorker::total_blocks() const {
  absl::MutexLock lock(&mu_);
  return total_blocks_;
}

bool FakeWorker::WaitSteps(int64_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return steps_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}
bool FakeWorker::WaitStepCalls(int64_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return step_calls_ >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}
bool FakeWorker::WaitLoads(int64_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return loads_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

// --- FakeWorkerServer ---

std::unique_ptr<FakeWorkerServer> FakeWorkerServer::Start(
    FakeWorker::Options options) {
  auto s = std::unique_ptr<FakeWorkerServer>(new FakeWorkerServer(options));
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&s->worker_);
  s->server_ = b.BuildAndStart();
  if (s->server_ == nullptr || port == 0) return nullptr;
  s->address_ = absl::StrCat("127.0.0.1:", port);
  return s;
}

FakeWorkerServer::~FakeWorkerServer() { Kill(); }

absl::Status FakeWorkerServer::RegisterWith(const std::string& registry_address,
                                            int32_t rank) {
  auto stub = proto::Registry::NewStub(grpc::CreateChannel(
      registry_address, grpc::InsecureChannelCredentials()));
  // The first Register happens here so that the caller knows it is done.
  proto::RegisterRequest req;
  req.set_kind(proto::WORKER_KIND_GPU);
  req.set_address(address_);
  req.set_device("fake");
  req.set_rank(rank);
  req.set_pid(0);
  req.set_hostname("localhost");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  proto::RegisterResponse resp;
  const grpc::Status s = stub->Register(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s, "fake worker Register");
  heartbeats_ = std::thread([this, req, resp, registry_address]() {
    auto hb = proto::Registry::NewStub(grpc::CreateChannel(
        registry_address, grpc::InsecureChannelCredentials()));
    std::string id = resp.worker_id();
    const absl::Duration interval =
        absl::Milliseconds(std::max<int64_t>(1, resp.heartbeat_interval_ms()));
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stop_heartbeats_),
                                 interval)) {
          return;
        }
      }
      grpc::ClientContext c;
      c.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(1));
      proto::HeartbeatRequest h;
      h.set_worker_id(id);
      proto::HeartbeatResponse hr;
      if (!hb->Heartbeat(&c, h, &hr).ok() || hr.known()) continue;
      grpc::ClientContext rc;
      rc.set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(1));
      proto::RegisterResponse again;
      if (hb->Register(&rc, req, &again).ok()) id = again.worker_id();
    }
  });
  return absl::OkStatus();
}

void FakeWorkerServer::StopHeartbeats() {
  {
    absl::MutexLock lock(&mu_);
    stop_heartbeats_ = true;
  }
  if (heartbeats_.joinable()) heartbeats_.join();
}

void FakeWorkerServer::Kill() {
  StopHeartbeats();
  if (server_ != nullptr) {
    worker_.HoldSteps(false);
    worker_.HoldLoads(false);
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    server_.reset();
  }
}

grpc::Status FakeWorker::NewTensorParallelGroup(grpc::ServerContext*,
                                                const proto::NewTensorParallelGroupRequest*,
                                                proto::NewTensorParallelGroupResponse* resp) {
  absl::MutexLock l(&mu_);
  ++group_id_calls_;
  if (!group_id_status_.ok()) return ToGrpcStatus(group_id_status_);
  resp->set_group_id(group_id_);
  return grpc::Status::OK;
}

void FakeWorker::SetGroupId(std::string id, absl::Status status) {
  absl::MutexLock l(&mu_);
  group_id_ = std::move(id);
  group_id_status_ = std::move(status);
}

int64_t FakeWorker::group_id_calls() const {
  absl::MutexLock l(&mu_);
  return group_id_calls_;
}

}  // namespace tandem::coord::testing
