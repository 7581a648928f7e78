// ExpertOffload to a cpu_worker process through two shared-memory rings
// (requests gpu→cpu, replies cpu→gpu). The gpu_worker side creates the rings;
// the cpu_worker opens them by name. A layer's jobs are packed into as few
// ring slots as fit; at most slot_count requests are outstanding, so neither
// side can block the other forever.
#ifndef TANDEM_GPU_WORKER_ENGINE_SHM_EXPERT_OFFLOAD_H_
#define TANDEM_GPU_WORKER_ENGINE_SHM_EXPERT_OFFLOAD_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/shm/slot_ring.h"
#include "gpu_worker/engine/expert_offload.h"

namespace tandem {

struct ShmOffloadOptions {
  std::string name_prefix;           // "/tandem-<pid>-experts": rings get -req / -rep
  int64_t hidden = 0;
  int64_t slot_bytes = 8 << 20;
  int64_t slot_count = 4;
  absl::Duration timeout = absl::Seconds(10);  // a silent cpu_worker is gone after this
};

class ShmExpertOffload : public ExpertOffload {
 public:
  // remote[layer] lists the experts the cpu_worker computes.
  static absl::StatusOr<std::unique_ptr<ShmExpertOffload>> Create(
      const ShmOffloadOptions& options, std::vector<std::vector<int32_t>> remote);

  std::string request_ring() const { return options_.name_prefix + "-req"; }
  std::string reply_ring() const { return options_.name_prefix + "-rep"; }
  // Waits until the cpu_worker has opened both rings.
  absl::Status WaitForWorker(absl::Duration timeout);

  bool IsRemote(int64_t layer, int64_t expert) const override;
  absl::Status Submit(int64_t layer, const std::vector<ExpertJob>& jobs) override;
  absl::Status Collect(int64_t layer, const std::vector<ExpertJob>& jobs) override;

 private:
  // Rows [row, row + rows) of job `job`, within one request.
  struct Piece {
    size_t job;
    int64_t row;
    int64_t rows;
  };
  struct Message {
    uint64_t batch_id;
    std::vector<Piece> pieces;
  };

  ShmExpertOffload() = default;
  absl::Status Send(int64_t layer, const Message& m, const std::vector<ExpertJob>& jobs);
  absl::Status ReceiveOne(const std::vector<ExpertJob>& jobs);
  static absl::Status Gone(const absl::Status& s);

  ShmOffloadOptions options_;
  std::vector<std::vector<bool>> remote_;
  std::unique_ptr<shm::SlotRing> requests_, replies_;
  std::vector<Message> plan_;         // this layer's messages, in order
  size_t next_send_ = 0;              // first message of plan_ not sent
  std::deque<const Message*> in_flight_;
  int64_t layer_ = -1;
  uint64_t next_batch_ = 1;
};

}  // namespace tandem

#endif  // TANDEM_GPU_WORKER_ENGINE_SHM_EXPERT_OFFLOAD_H_
