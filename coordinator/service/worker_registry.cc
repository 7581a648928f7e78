#include "coordinator/service/worker_registry.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/grpc_status.h"

namespace tandem::coord {

const char* WorkerKindName(proto::WorkerKind kind) {
  switch (kind) {
    case proto::WORKER_KIND_GPU:
      return "gpu";
    case proto::WORKER_KIND_CPU:
      return "cpu";
    default:
      return "?";
  }
}

absl::StatusOr<std::unique_ptr<WorkerRegistry>> WorkerRegistry::Create(
    WorkerRegistryOptions options) {
  if (options.heartbeat_interval <= absl::ZeroDuration() ||
      options.dead_after <= options.heartbeat_interval) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker registry: need 0 < heartbeat_interval (",
        absl::FormatDuration(options.heartbeat_interval), ") < dead_after (",
        absl::FormatDuration(options.dead_after), ")"));
  }
  auto r = std::unique_ptr<WorkerRegistry>(
      new WorkerRegistry(std::move(options)));
  r->monitor_ = std::thread([p = r.get()] { p->Monitor(); });
  return r;
}

WorkerRegistry::WorkerRegistry(WorkerRegistryOptions options)
    : options_(std::move(options)) {}

WorkerRegistry::~WorkerRegistry() { Stop(); }

void WorkerRegistry::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (monitor_.joinable()) monitor_.join();
}

void WorkerRegistry::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "tandem coordinator: %s\n", line.c_str());
  }
}

grpc::Status WorkerRegistry::Register(grpc::ServerContext*,
                                      const proto::RegisterRequest* req,
                                      proto::RegisterResponse* resp) {
  absl::StatusOr<proto::RegisterResponse> r = DoRegister(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status WorkerRegistry::Heartbeat(grpc::ServerContext*,
                                       const proto::HeartbeatRequest* req,
                                       proto::HeartbeatResponse* resp) {
  *resp = DoHeartbeat(*req);
  return grpc::Status::OK;
}

absl::StatusOr<proto::RegisterResponse> WorkerRegistry::DoRegister(
    const proto::RegisterRequest& req) {
  if (req.kind() != proto::WORKER_KIND_GPU &&
      req.kind() != proto::WORKER_KIND_CPU) {
    return absl::InvalidArgumentError("Register: the worker kind is missing");
  }
  if (req.address().empty()) {
    return absl::InvalidArgumentError("Register: the worker address is empty");
  }
  absl::MutexLock listener_lock(&listener_mu_);
  std::vector<WorkerInfo> replaced;
  WorkerInfo info;
  {
    absl::MutexLock lock(&mu_);
    // The same address again: that process restarted (or re-registers after
    // being forgotten); its old entry is gone.
    for (auto it = order_.begin(); it != order_.end();) {
      const WorkerInfo& w = workers_.at(*it);
      if (w.address == req.address() && w.kind == req.kind()) {
        replaced.push_back(w);
        workers_.erase(*it);
        it = order_.erase(it);
      } else {
        ++it;
      }
    }
    info.id = absl::StrCat(WorkerKindName(req.kind()), "-", next_id_++);
    info.kind = req.kind();
    info.address = req.address();
    info.device = req.device();
    info.rank = req.rank();
    info.pid = req.pid();
    info.hostname = req.hostname();
    info.registered_at = info.last_heartbeat = absl::Now();
    workers_[info.id] = info;
    order_.push_back(info.id);
  }
  for (const WorkerInfo& old : replaced) {
    const std::string reason =
        absl::StrCat("re-registered at ", old.address, " as ", info.id);
    Log(absl::StrCat("worker ", old.id, " replaced: ", reason));
    if (listener_ != nullptr) listener_->OnWorkerDead(old, reason);
  }
  Log(absl::StrCat("worker ", info.id, " registered: ", req.device(), " rank ",
                   req.rank(), " at ", req.address(), " (pid ", req.pid(),
                   " on ", req.hostname(), ")"));
  if (listener_ != nullptr) listener_->OnWorkerRegistered(info);

  proto::RegisterResponse resp;
  resp.set_worker_id(info.id);
  resp.set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(options_.heartbeat_interval));
  return resp;
}

proto::HeartbeatResponse WorkerRegistry::DoHeartbeat(
    const proto::HeartbeatRequest& req) {
  proto::HeartbeatResponse resp;
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(req.worker_id());
  resp.set_known(it != workers_.end());
  if (it != workers_.end()) {
    it->second.last_heartbeat = absl::Now();
    it->second.steps_done = req.steps_done();
  }
  return resp;
}

void WorkerRegistry::SetListener(WorkerListener* listener) {
  absl::MutexLock listener_lock(&listener_mu_);
  listener_ = listener;
  if (listener_ == nullptr) return;
  for (const WorkerInfo& w : workers()) listener_->OnWorkerRegistered(w);
}

bool WorkerRegistry::Expire(const std::string& worker_id,
                            absl::string_view reason) {
  absl::MutexLock listener_lock(&listener_mu_);
  WorkerInfo info;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(worker_id);
    if (it == workers_.end()) return false;
    info = std::move(it->second);
    workers_.erase(it);
    order_.erase(std::find(order_.begin(), order_.end(), worker_id));
  }
  Log(absl::StrCat("worker ", info.id, " at ", info.address,
                   " declared dead: ", reason));
  if (listener_ != nullptr) listener_->OnWorkerDead(info, reason);
  return true;
}

std::vector<std::pair<WorkerInfo, std::string>> WorkerRegistry::CollectDead(
    absl::Time now) {
  std::vector<std::pair<WorkerInfo, std::string>> dead;
  for (auto it = order_.begin(); it != order_.end();) {
    auto w = workers_.find(*it);
    const absl::Duration silent = now - w->second.last_heartbeat;
    if (silent > options_.dead_after) {
      dead.emplace_back(std::move(w->second),
                        absl::StrCat("no heartbeat for ",
                                     absl::FormatDuration(absl::Trunc(
                                         silent, absl::Milliseconds(1)))));
      workers_.erase(w);
      it = order_.erase(it);
    } else {
      ++it;
    }
  }
  return dead;
}

void WorkerRegistry::Monitor() {
  const absl::Duration period =
      std::min(options_.dead_after / 4, absl::Milliseconds(100));
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), period)) return;
    }
    absl::MutexLock listener_lock(&listener_mu_);
    std::vector<std::pair<WorkerInfo, std::string>> dead;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      dead = CollectDead(absl::Now());
    }
    for (const auto& [info, reason] : dead) {
      Log(absl::StrCat("worker ", info.id, " at ", info.address,
                       " declared dead: ", reason));
      if (listener_ != nullptr) listener_->OnWorkerDead(info, reason);
    }
  }
}

std::vector<WorkerInfo> WorkerRegistry::workers() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerInfo> out;
  out.reserve(order_.size());
  for (const std::string& id : order_) out.push_back(workers_.at(id));
  return out;
}

std::optional<WorkerInfo> WorkerRegistry::Find(
    const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return std::nullopt;
  return it->second;
}

bool WorkerRegistry::WaitForWorkers(proto::WorkerKind kind, int n,
                                    absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    int count = 0;
    for (const auto& [id, w] : workers_) count += w.kind == kind ? 1 : 0;
    return count >= n;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

}  // namespace tandem::coord
