#include "cli/serve_command.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/child_process.h"
#include "common/checkpoint.h"
#include "common/status_macros.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/frontend/http_server.h"
#include "coordinator/frontend/metrics.h"
#include "coordinator/service/frontend_backend.h"
#include "coordinator/service/step_driver.h"
#include "coordinator/service/worker_registry.h"
#include "coordinator/text/tokenizer_text_processor.h"
#include "cpu_worker/service/expert_server.h"
#include "grpcpp/grpcpp.h"

namespace tandem::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

// One supervised worker: started again when it ends, while serving.
struct Supervised {
  std::string name;
  std::vector<std::string> args;
  std::unique_ptr<ChildProcess> child;
  absl::Status Start() {
    TANDEM_ASSIGN_OR_RETURN(child, ChildProcess::SpawnSelf(args));
    std::fprintf(stderr, "tandem serve: started %s (pid %d)\n", name.c_str(), child->pid());
    return absl::OkStatus();
  }
};

absl::Status Run(const ServeOptions& o) {
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);

  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(o.model));
  const ModelConfig cfg = ckpt->config();
  std::shared_ptr<const Tokenizer> tokenizer;
  {
    absl::StatusOr<std::unique_ptr<Tokenizer>> t =
        ckpt->gguf() != nullptr
            ? Tokenizer::FromGguf(*ckpt->gguf())
            : (ckpt->tokenizer_json_path().empty()
                   ? absl::StatusOr<std::unique_ptr<Tokenizer>>(
                         absl::NotFoundError(absl::StrCat(o.model, ": no tokenizer.json")))
                   : Tokenizer::FromHfFiles(ckpt->tokenizer_json_path(),
                                            ckpt->tokenizer_config_path()));
    if (!t.ok()) return t.status();
    tokenizer = std::move(*t);
  }
  std::string chat_template;
  if (!o.chat_template.empty()) {
    std::ifstream f(o.chat_template);
    if (!f) return absl::NotFoundError(absl::StrCat("--chat-template ", o.chat_template));
    std::stringstream ss;
    ss << f.rdbuf();
    chat_template = ss.str();
  }
  TANDEM_ASSIGN_OR_RETURN(auto text, TokenizerTextProcessor::Create(tokenizer, chat_template));

  // The worker registry, on an ephemeral loopback port.
  TANDEM_ASSIGN_OR_RETURN(auto registry, coord::WorkerRegistry::Create());
  int registry_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &registry_port);
  builder.RegisterService(registry.get());
  std::unique_ptr<grpc::Server> grpc_server = builder.BuildAndStart();
  if (grpc_server == nullptr || registry_port == 0) {
    return absl::UnavailableError("cannot start the worker registry on 127.0.0.1");
  }
  const std::string registry_addr = absl::StrCat("127.0.0.1:", registry_port);

  coord::StepDriverConfig dc;
  dc.model.model_path = o.model;
  dc.model.max_context = o.max_model_len > 0 ? o.max_model_len
                                             : std::min<int64_t>(cfg.max_position, 8192);
  if (cfg.sliding_window > 0) dc.model.max_context = std::min(dc.model.max_context, cfg.sliding_window);
  dc.model.kv_blocks = o.kv_blocks > 0 ? o.kv_blocks
                                       : (dc.model.max_context + 15) / 16 * std::max<int64_t>(4, o.max_num_seqs / 4);
  std::string ring_prefix;
  if (o.cpu_experts != "none") {
    TANDEM_ASSIGN_OR_RETURN(dc.model.cpu_experts, ParseCpuExperts(o.cpu_experts, cfg));
    ring_prefix = absl::StrCat("/tandem-", getpid(), "-experts");
    dc.model.data_segment = ring_prefix;
  }
  dc.max_num_seqs = o.max_num_seqs;
  dc.max_num_batched_tokens = std::max(o.max_num_batched_tokens, o.max_num_seqs);
  for (int64_t id : cfg.eos_token_ids) dc.eos_token_ids.push_back(static_cast<int32_t>(id));
  for (int32_t id : tokenizer->eos_ids()) dc.eos_token_ids.push_back(id);
  dc.vocab_size = cfg.vocab_size;
  dc.tokenizer = tokenizer;
  TANDEM_ASSIGN_OR_RETURN(auto driver, coord::StepDriver::Create(std::move(dc)));
  registry->SetListener(driver.get());

  coord::FrontendBackend backend(driver.get());
  const std::string name = o.served_model_name.empty() ? o.model : o.served_model_name;
  frontend::Metrics metrics(name);
  frontend::HttpServerOptions ho;
  ho.host = o.host;
  ho.port = o.port;
  ho.api_key = o.api_key;
  ho.parse.served_model_names = {name};
  ho.parse.max_context = driver->max_context();
  ho.parse.vocab_size = cfg.vocab_size;
  TANDEM_ASSIGN_OR_RETURN(auto http, frontend::HttpServer::Create(ho, &backend, text.get(), &metrics));
  TANDEM_RETURN_IF_ERROR(http->Start());
  std::printf("serving %s on http://%s:%d\n", name.c_str(), o.host.c_str(), http->port());
  std::fflush(stdout);

  std::vector<Supervised> workers;
  workers.push_back({"gpu_worker", {"gpu-worker", "--listen", "127.0.0.1:0", "--coordinator",
                                    registry_addr, "--device", "host"}, nullptr});
  if (!ring_prefix.empty()) {
    workers.push_back({"cpu_worker", {"cpu-worker", "--model", o.model, "--cpu-experts",
                                      o.cpu_experts, "--expert-rings", ring_prefix}, nullptr});
  }
  for (auto& w : workers) TANDEM_RETURN_IF_ERROR(w.Start());

  while (!g_stop.load()) {
    absl::SleepFor(absl::Milliseconds(100));
    for (auto& w : workers) {
      if (auto rc = w.child->Poll()) {
        std::fprintf(stderr, "tandem serve: %s exited with status %d; restarting\n",
                     w.name.c_str(), *rc);
        // A lost cpu_worker also needs the gpu_worker's rings anew: the
        // driver reloads the model when its step fails, recreating them.
        TANDEM_RETURN_IF_ERROR(w.Start());
      }
    }
  }
  std::fprintf(stderr, "tandem serve: stopping\n");
  http->Stop(std::chrono::seconds(2));
  registry->SetListener(nullptr);
  driver->Stop();
  for (auto& w : workers) w.child.reset();  // SIGTERM, then SIGKILL after 5 s
  grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return absl::OkStatus();
}

}  // namespace

CLI::App* AddServeCommand(CLI::App& app, ServeOptions& o) {
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over the OpenAI-compatible HTTP API");
  cmd->add_option("--model,-m", o.model, "Model: a Hugging Face directory or a .gguf file")->required();
  cmd->add_option("--served-model-name", o.served_model_name, "Model name in the API (default: --model)");
  cmd->add_option("--host", o.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o.port, "Port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", o.api_key, "Require Authorization: Bearer KEY");
  cmd->add_option("--cpu-experts", o.cpu_experts, "Routed experts on a cpu_worker: none, all or N-per-layer")->capture_default_str();
  cmd->add_option("--max-model-len", o.max_model_len, "Context length (default: the model's, at most 8192)");
  cmd->add_option("--max-num-seqs", o.max_num_seqs, "Sequences per step at most")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "Tokens per step at most")->capture_default_str();
  cmd->add_option("--kv-blocks", o.kv_blocks, "KV cache blocks of 16 tokens (default: enough for max-num-seqs/4 full contexts)");
  cmd->add_option("--chat-template", o.chat_template, "File with a Jinja chat template overriding the model's");
  return cmd;
}

int RunServe(const ServeOptions& opts) {
  const absl::Status s = Run(opts);
  if (!s.ok()) {
    std::fprintf(stderr, "tandem serve: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace tandem::cli
