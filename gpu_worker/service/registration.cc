#include "gpu_worker/service/registration.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/grpc_status.h"

namespace tandem {

std::string LocalHostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

Registration::Registration(RegistrationOptions options) : options_(std::move(options)) {
  grpc::ChannelArguments args;
  // Notice a restarted coordinator within about a second, not grpc's minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  stub_ = proto::Registry::NewStub(grpc::CreateCustomChannel(
      options_.coordinator, grpc::InsecureChannelCredentials(), args));
}

absl::StatusOr<std::unique_ptr<Registration>> Registration::Start(RegistrationOptions options) {
  if (options.coordinator.empty()) {
    return absl::InvalidArgumentError("registration: no coordinator address");
  }
  if (options.self.address().empty()) {
    return absl::InvalidArgumentError("registration: the worker's own address is empty");
  }
  auto r = std::unique_ptr<Registration>(new Registration(std::move(options)));
  r->thread_ = std::thread([p = r.get()] { p->Loop(); });
  return r;
}

Registration::~Registration() { Stop(); }

void Registration::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (in_flight_ != nullptr) in_flight_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

bool Registration::WaitRegistered(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !worker_id_.empty(); };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

std::string Registration::worker_id() const {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}
int64_t Registration::registrations() const {
  absl::MutexLock lock(&mu_);
  return registrations_;
}
int64_t Registration::heartbeats() const {
  absl::MutexLock lock(&mu_);
  return heartbeats_;
}

void Registration::Log(const std::string& line) {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "registration: %s\n", line.c_str());
  }
}

bool Registration::Sleep(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_; };
  return !mu_.AwaitWithTimeout(absl::Condition(&stopping), d);
}

bool Registration::Register() {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return false;
    in_flight_ = &ctx;
  }
  proto::RegisterResponse resp;
  const grpc::Status s = stub_->Register(&ctx, options_.self, &resp);
  std::string line;
  {
    absl::MutexLock lock(&mu_);
    in_flight_ = nullptr;
    if (stop_) return false;
    if (s.ok() && !resp.worker_id().empty()) {
      worker_id_ = resp.worker_id();
      ++registrations_;
      // A zero or absurd interval is clamped: never a busy loop, never silence.
      const int64_t ms = resp.heartbeat_interval_ms() > 0 ? resp.heartbeat_interval_ms() : 1000;
      interval_ = absl::Milliseconds(std::clamp<int64_t>(ms, 10, 60000));
      line = absl::StrCat("registered with ", options_.coordinator, " as ", worker_id_);
    }
  }
  if (line.empty()) {
    line = s.ok() ? "the coordinator returned no worker id"
                  : FromGrpcStatus(s, absl::StrCat("Register with ", options_.coordinator))
                        .ToString();
    if (line == last_error_) return true;  // said already
    last_error_ = line;
  } else {
    last_error_.clear();
  }
  Log(line);
  return true;
}

void Registration::Heartbeat() {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  proto::HeartbeatRequest req;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    in_flight_ = &ctx;
    req.set_worker_id(worker_id_);
  }
  if (options_.steps_done) req.set_steps_done(options_.steps_done());
  proto::HeartbeatResponse resp;
  const grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
  {
    absl::MutexLock lock(&mu_);
    in_flight_ = nullptr;
    if (stop_) return;
    if (s.ok()) {
      ++heartbeats_;
      if (!resp.known()) worker_id_.clear();
    }
  }
  if (!s.ok()) {
    // Keep the id: a coordinator that comes back says whether it knows us.
    const std::string err =
        FromGrpcStatus(s, absl::StrCat("Heartbeat to ", options_.coordinator)).ToString();
    if (err != last_error_) Log(err);
    last_error_ = err;
    return;
  }
  last_error_.clear();
  if (!resp.known()) {
    Log(absl::StrCat("the coordinator forgot ", req.worker_id(), "; registering again"));
  }
}

void Registration::Loop() {
  for (;;) {
    bool registered;
    absl::Duration wait;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      registered = !worker_id_.empty();
      wait = interval_;
    }
    if (!registered) {
      if (!Register()) return;
      if (worker_id().empty() && !Sleep(options_.retry_interval)) return;
      continue;
    }
    if (!Sleep(wait)) return;
    Heartbeat();
  }
}

}  // namespace tandem
