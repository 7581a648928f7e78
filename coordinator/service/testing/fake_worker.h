// An in-process gpu_worker for the coordinator's tests: a proto::Worker
// service that keeps sequences the way the engine does (tokens by position,
// start_pos contiguous with the cache, KV blocks from a pool sized by the
// same rule as the real worker, so a driver that forgets to free runs out),
// and "samples" deterministic tokens: a scripted continuation when the
// context starts with a scripted prompt, else a hash of the context (mixed
// with seed and the generated count when temperature > 0). Faults can be
// injected: failing, slow or held steps and loads.
//
// FakeWorkerServer serves one on 127.0.0.1 (ephemeral port) and can register
// it with a Registry and heartbeat like the real worker, or go silent/die.
#ifndef TANDEM_COORDINATOR_SERVICE_TESTING_FAKE_WORKER_H_
#define TANDEM_COORDINATOR_SERVICE_TESTING_FAKE_WORKER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "proto/worker.grpc.pb.h"

namespace tandem::coord::testing {

class FakeWorker final : public proto::Worker::Service {
 public:
  struct Options {
    int64_t vocab_size = 1000;
    // Sample as if sampling.allowed_tokens were empty (a broken worker).
    bool ignore_allowed_tokens = false;
  };
  FakeWorker() : FakeWorker(Options()) {}
  explicit FakeWorker(Options options) : options_(options) {}

  grpc::Status LoadModel(grpc::ServerContext* ctx,
                         const proto::LoadModelRequest* req,
                         proto::LoadModelResponse* resp) override;
  grpc::Status Step(grpc::ServerContext* ctx, const proto::StepPlan* plan,
                    proto::StepResult* result) override;
  grpc::Status Drain(grpc::ServerContext* ctx, const proto::DrainRequest* req,
                     proto::DrainResponse* resp) override;
  // An empty id (a host-device worker: the coordinator names the group)
  // unless SetGroupId gave another answer.
  grpc::Status NewTensorParallelGroup(grpc::ServerContext* ctx,
                                      const proto::NewTensorParallelGroupRequest* req,
                                      proto::NewTensorParallelGroupResponse* resp) override;

  // The token rule without a script: 10 + hash(context, ...) % (vocab - 10),
  // so ids 0..9 (EOS and friends) only come from scripts.
  static int32_t HashToken(const std::vector<int32_t>& context, int64_t vocab,
                           float temperature, uint64_t seed,
                           int64_t generated);

  // --- controls ---
  // After `prompt`, generated token k is continuation[k] (the hash rule
  // past its end).
  void Script(std::vector<int32_t> prompt, std::vector<int32_t> continuation);
  void FailSteps(int n, absl::Status status);  // the next n Steps fail
  void FailLoads(int n, absl::Status status);  // the next n LoadModels fail
  void SetStepDelay(absl::Duration d);
  // While held, Steps (LoadModels) wait until released or cancelled.
  void HoldSteps(bool hold);
  void HoldLoads(bool hold);
  // NewTensorParallelGroup answers `id` (a GPU rank 0 naming its NCCL
  // group), or fails with `status` if it is not OK.
  void SetGroupId(std::string id, absl::Status status = absl::OkStatus());
  int64_t group_id_calls() const;

  // --- observations ---
  int64_t steps() const;  // Steps run (successful)
  int64_t loads() const;  // successful LoadModels
  int64_t step_calls() const;  // Step calls received, including failed
  int64_t load_calls() const;  // LoadModel calls received, including failed
  std::vector<proto::StepPlan> plans() const;  // every Step received
  proto::LoadModelRequest last_load() const;
  std::vector<int64_t> freed() const;  // every free_seq_id received
  int64_t num_sequences() const;       // sequences holding KV
  int64_t used_blocks() const;
  int64_t total_blocks() const;
  bool WaitSteps(int64_t n, absl::Duration timeout) const;
  // Tokens sampled under a non-empty sampling.allowed_tokens.
  int64_t masked_samples() const {
    absl::MutexLock lock(&mu_);
    return masked_samples_;
  }
  // Sequences run from a shared prefix (StepSequence.shared_prefix_tokens).
  int64_t shared_prefix_steps() const {
    absl::MutexLock lock(&mu_);
    return shared_prefix_steps_;
  }
  bool WaitStepCalls(int64_t n, absl::Duration timeout) const;
  bool WaitLoads(int64_t n, absl::Duration timeout) const;

 private:
  struct Sequence {
    std::vector<int32_t> tokens;
  };
  struct ScriptEntry {
    std::vector<int32_t> prompt, continuation;
  };
  absl::Status RunStep(const proto::StepPlan& plan, proto::StepResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int32_t NextToken(const std::vector<int32_t>& context,
                    const proto::StepSequence& s) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t BlocksFor(int64_t tokens) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t UsedBlocksLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;
  int64_t max_context_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t block_size_ ABSL_GUARDED_BY(mu_) = 16;
  int64_t total_blocks_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<int64_t, Sequence> seqs_ ABSL_GUARDED_BY(mu_);
  // The token each KV slot was written with, through the plans' block
  // tables ([block * block_size + slot], -1: never written): a sequence
  // that starts from a shared prefix reads its context from there, so a
  // wrong table gives other tokens.
  std::vector<int32_t> slots_ ABSL_GUARDED_BY(mu_);
  int64_t shared_prefix_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t masked_samples_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<ScriptEntry> scripts_ ABSL_GUARDED_BY(mu_);
  int fail_steps_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fail_step_status_ ABSL_GUARDED_BY(mu_);
  int fail_loads_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fail_load_status_ ABSL_GUARDED_BY(mu_);
  absl::Duration step_delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_loads_ ABSL_GUARDED_BY(mu_) = false;
  std::string group_id_ ABSL_GUARDED_BY(mu_);
  absl::Status group_id_status_ ABSL_GUARDED_BY(mu_);
  int64_t group_id_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t step_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t loads_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t load_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<proto::StepPlan> plans_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> freed_ ABSL_GUARDED_BY(mu_);
  proto::LoadModelRequest last_load_ ABSL_GUARDED_BY(mu_);
};

// A FakeWorker behind a gRPC server on 127.0.0.1, optionally registered
// with a coordinator's Registry (heartbeats on a thread of its own).
class FakeWorkerServer {
 public:
  static std::unique_ptr<FakeWorkerServer> Start(
      FakeWorker::Options options = {});
  ~FakeWorkerServer();  // Kill()

  FakeWorker& worker() { return worker_; }
  const std::string& address() const { return address_; }

  // Registers as a rank-`rank` gpu_worker and heartbeats as told; registers
  // again when the registry answers known=false.
  absl::Status RegisterWith(const std::string& registry_address,
                            int32_t rank = 0);
  // Goes silent (the server keeps answering): the registry should declare
  // it dead.
  void StopHeartbeats();
  // Stops heartbeating and serving; calls in flight are cancelled.
  void Kill();

 private:
  FakeWorkerServer(FakeWorker::Options options) : worker_(options) {}
  void HeartbeatLoop(std::string registry_address, int32_t rank);

  FakeWorker worker_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  absl::Mutex mu_;
  bool stop_heartbeats_ ABSL_GUARDED_BY(mu_) = false;
  std::thread heartbeats_;
};

}  // namespace tandem::coord::testing

#endif  // TANDEM_COORDINATOR_SERVICE_TESTING_FAKE_WORKER_H_
