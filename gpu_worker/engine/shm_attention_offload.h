// AttentionOffload to a cpu_worker process through a ring pair of its own:
// <prefix>-attn-req (requests gpu→cpu) and <prefix>-attn-rep (replies),
// message format in common/shm/attention_wire.h. The gpu_worker side creates
// the rings; the cpu_worker (`tandem cpu-worker --attention`) opens them by
// name, and the session starts with a configure request carrying the cache
// shape, so the cpu_worker allocates exactly the KV the gpu_worker plans with.
//
// Why a ring pair separate from the expert rings: a SlotRing endpoint is
// single-threaded and requests are answered strictly in order, so sharing
// one pair would put a layer's attention behind its expert work (and vice
// versa) in one cpu_worker thread. With their own pair, attention is served
// by its own cpu_worker thread: attention-only and expert-only cpu_workers
// need nothing but the pair they serve, each pair gets slots sized for its
// rows (q/k/v rows are wider than hidden rows), and a pipeline that overlaps
// one micro-batch's CPU attention with another's CPU experts (Neo's
// asymmetric schedule) needs no protocol change.
//
// A layer's jobs are packed into as few slots as fit (a chunk too long for
// one slot is split across consecutive requests: the cpu_worker applies them
// in order); at most slot_count requests are outstanding, so neither side can
// block the other forever. Freed ids are queued and sent at the head of the
// next request. A dead cpu_worker is noticed by the ring's peer check
// (kUnavailable within tens of milliseconds); a live but silent one after
// `timeout`.
#ifndef TANDEM_GPU_WORKER_ENGINE_SHM_ATTENTION_OFFLOAD_H_
#define TANDEM_GPU_WORKER_ENGINE_SHM_ATTENTION_OFFLOAD_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/shm/slot_ring.h"
#include "cpu_worker/kv/cpu_attention.h"
#include "gpu_worker/engine/attention_offload.h"

namespace tandem {

struct ShmAttentionOptions {
  std::string name_prefix;  // "/tandem-<pid>-experts": rings get -attn-req / -attn-rep
  CpuAttentionShape shape;  // what the cpu_worker allocates
  int64_t slot_bytes = 8 << 20;
  int64_t slot_count = 2;
  absl::Duration timeout = absl::Seconds(10);  // a silent cpu_worker is gone after this
};

// Slot bytes that hold `tokens` tokens' q/k/v rows of `shape` in one request
// (and their output in one reply), with room for frees and entries.
int64_t AttentionSlotBytesFor(const CpuAttentionShape& shape, int64_t tokens);

class ShmAttentionOffload : public AttentionOffload {
 public:
  static absl::StatusOr<std::unique_ptr<ShmAttentionOffload>> Create(
      const ShmAttentionOptions& options);

  std::string request_ring() const { return options_.name_prefix + "-attn-req"; }
  std::string reply_ring() const { return options_.name_prefix + "-attn-rep"; }
  // Waits until the cpu_worker has opened both rings, then (once) sends the
  // cache shape and waits up to options.timeout for it to be accepted.
  // kDeadlineExceeded while nobody attached; the cpu_worker's refusal with
  // its own code.
  absl::Status WaitForWorker(absl::Duration timeout);

  absl::Status Submit(int64_t layer, const std::vector<AttentionJob>& jobs) override;
  absl::Status Collect(int64_t layer, const std::vector<AttentionJob>& jobs) override;
  void Free(int64_t seq_id) override { pending_frees_.push_back(seq_id); }

 private:
  // Rows [row, row + rows) of job `job`, within one request.
  struct Piece {
    size_t job;
    int64_t row;
    int64_t rows;
  };
  struct Message {
    uint64_t batch_id = 0;
    std::vector<int64_t> frees;
    std::vector<Piece> pieces;
    int64_t tokens = 0;
  };

  ShmAttentionOffload() = default;
  void Plan(const std::vector<AttentionJob>& jobs);
  absl::Status Send(int64_t layer, const Message& m, const std::vector<AttentionJob>& jobs);
  absl::Status ReceiveOne(const std::vector<AttentionJob>& jobs);
  absl::Status Configure();
  static absl::Status Gone(const absl::Status& s);

  ShmAttentionOptions options_;
  int64_t q_dim_ = 0, kv_dim_ = 0;
  std::unique_ptr<shm::SlotRing> requests_, replies_;
  bool attached_ = false, configured_ = false;
  std::vector<int64_t> pending_frees_;
  std::vector<Message> plan_;  // this layer's messages, in order
  size_t next_send_ = 0;       // first message of plan_ not sent
  std::deque<const Message*> in_flight_;
  int64_t layer_ = -1;
  uint64_t next_batch_ = 1;
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_SHM_ATTENTION_OFFLOAD_H_
