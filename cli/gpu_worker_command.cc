#include "cli/gpu_worker_command.h"

#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/flag_sources.h"
#include "common/status_macros.h"
#include "gpu_worker/device_spec.h"
#include "gpu_worker/service/registration.h"
#include "gpu_worker/service/worker_service.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace tandem::cli {
namespace {

constexpr int kMaxMessageBytes = 256 << 20;  // prompt log-probs of long chunks
// After the drain only quick calls can be in flight (their responses get this
// long to go out). Also the longest an idle client connection that does not
// read the server's GOAWAY holds up the exit.
constexpr auto kShutdownGrace = std::chrono::seconds(1);

// "HOST:PORT" or "[v6]:PORT" → host part (as written) and port.
absl::Status SplitHostPort(const std::string& addr, std::string* host, int* port) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(addr.substr(colon + 1), port) || *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", addr, "' is not HOST:PORT"));
  }
  *host = addr.substr(0, colon);
  return absl::OkStatus();
}

// Where the coordinator should call: --advertise, else the listen host with
// the bound port (this machine's name for a wildcard host).
std::string AdvertisedAddress(const GpuWorkerOptions& o, const std::string& host, int port) {
  if (!o.advertise.empty()) return o.advertise;
  const bool wildcard = host == "0.0.0.0" || host == "[::]" || host == "::" || host == "*";
  return absl::StrCat(wildcard ? LocalHostname() : host, ":", port);
}

// Waits for SIGTERM/SIGINT (blocked in every thread, taken here) or Shutdown.
void WaitForStop(WorkerService& service, const sigset_t& stop_signals) {
  const timespec slice{0, 100 * 1000 * 1000};
  for (;;) {
    if (sigtimedwait(&stop_signals, nullptr, &slice) > 0) return;
    if (service.WaitForShutdown(absl::ZeroDuration())) return;
  }
}

absl::Status Run(const GpuWorkerOptions& o) {
  TANDEM_ASSIGN_OR_RETURN(WorkerDevice device, WorkerDeviceFor(o.device));
  if (o.rank < 0) return absl::InvalidArgumentError("--rank must be >= 0");
  if (o.threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  if (o.threads > 0) omp_set_num_threads(o.threads);
  std::string host;
  int port = 0;
  TANDEM_RETURN_IF_ERROR(SplitHostPort(o.listen, &host, &port));
  if (!o.coordinator.empty()) {
    std::string chost;
    int cport = 0;
    TANDEM_RETURN_IF_ERROR(SplitHostPort(o.coordinator, &chost, &cport));
  }

  // Before any thread exists, so that every thread (gRPC's too) inherits the
  // mask and the signals wait for WaitForStop.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  WorkerService service;
  service.SetDevice(std::move(device));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(o.listen, grpc::InsecureServerCredentials(), &bound);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", o.listen));
  }
  std::printf("listening on %s:%d\n", host.c_str(), bound);
  std::fflush(stdout);

  std::unique_ptr<Registration> registration;
  if (!o.coordinator.empty()) {
    RegistrationOptions ro;
    ro.coordinator = o.coordinator;
    ro.self.set_kind(proto::WORKER_KIND_GPU);
    ro.self.set_address(AdvertisedAddress(o, host, bound));
    ro.self.set_device(o.device);
    ro.self.set_rank(o.rank);
    ro.self.set_pid(getpid());
    ro.self.set_hostname(LocalHostname());
    ro.steps_done = [&service] { return service.steps_done(); };
    TANDEM_ASSIGN_OR_RETURN(registration, Registration::Start(std::move(ro)));
  }

  WaitForStop(service, stop_signals);
  if (registration) registration->Stop();
  if (auto* health = server->GetHealthCheckService()) health->SetServingStatus(false);
  service.DoShutdown();  // waits for the step in flight; later ones are refused
  server->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
  server->Wait();
  return absl::OkStatus();  // `service` closes its rings as it goes
}

}  // namespace

CLI::App* AddGpuWorkerCommand(CLI::App& app, GpuWorkerOptions& o) {
  CLI::App* cmd = app.add_subcommand("gpu-worker", "Run a gpu_worker: the engine behind a Worker gRPC service");
  cmd->add_option("--coordinator", o.coordinator, "HOST:PORT of the coordinator's Registry; empty: do not register");
  cmd->add_option("--listen", o.listen, "HOST:PORT to serve on; port 0 picks a free one")->capture_default_str();
  cmd->add_option("--advertise", o.advertise, "HOST:PORT the coordinator should call (default: the listen address)");
  cmd->add_option("--device", o.device,
                  "Device: host (CPU kernels), cuda or cuda:N (GPU N; builds with CUDA)")
      ->capture_default_str();
  cmd->add_option("--rank", o.rank, "Tensor-parallel rank")->capture_default_str();
  cmd->add_option("--threads", o.threads,
                  "OpenMP threads of the host device (0: all cores; tensor-parallel ranks on "
                  "one machine share them)")
      ->capture_default_str();
  return cmd;
}

int RunGpuWorker(const GpuWorkerOptions& opts) {
  const absl::Status s = Run(opts);
  if (!s.ok()) {
    PrintCommandError("tandem gpu-worker", s);
    return 1;
  }
  return 0;
}

}  // namespace tandem::cli
