// The coordinator's parts, started together: the worker Registry (gRPC), the
// step driver, and the OpenAI-compatible HTTP API. `tandem coordinator` runs
// it on its own (workers started elsewhere register with it); `tandem serve`
// runs it and supervises its workers as child processes.
#ifndef TANDEM_CLI_COORDINATOR_RUNTIME_H_
#define TANDEM_CLI_COORDINATOR_RUNTIME_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "common/model_config.h"

namespace tandem::cli {

struct CoordinatorOptions {
  std::string model;
  std::string served_model_name;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string registry_listen = "127.0.0.1:50051";  // where workers register
  int grpc_port = -1;                 // the client gRPC API; 0: any free port, -1: off
  std::string cpu_experts = "none";
  // llama.cpp's --override-tensor rules (override_tensor.h); they set
  // cpu_experts in ApplyOverrideTensor.
  std::vector<std::string> override_tensor;
  // llama.cpp's --n-gpu-layers: "" (not given), a count, "all" or "auto".
  std::string n_gpu_layers;
  int cpu_workers = 1;                // cpu_worker processes sharing the CPU experts
  int64_t cpu_kv_blocks = 0;          // Neo's CPU KV pool on the cpu_worker; 0: none
  int tensor_parallel = 1;            // gpu_worker ranks the model is sharded over
  double gpu_memory_budget_gb = 0;    // resident weight bytes on the gpu_worker; 0: all
  int gpu_expert_cache = 0;           // expert cache slots per MoE layer; 0: off
  double cpu_ffn_fraction = 0;        // dense MLP rows on the gpu_worker's CPU; 0: none
  // ScheInfer's n_g: prefill rows whose CC part runs on the GPU; a number,
  // or "auto" (re-solved per prefill step from --hardware's profile).
  std::string prefill_gpu_tokens = "0";
  std::string hardware;               // hardware profile JSON (for auto n_g)
  int64_t micro_batch_size = 0;       // MoE-Lightning's mu; 0: one micro-batch per step
  std::string kv_pool = "auto";       // "auto" (GPU first, Neo) or "cpu" (every request)
  bool gpu_experts_only = false;      // the expert cache runs every expert on the device
  int expert_prefetch = 0;            // experts prefetched per layer; 0: the cache's default
  bool neo_sub_batches = false;       // Neo's two asymmetric sub-batches per step
  bool enable_prefix_caching = true;  // vLLM's default
  std::string rings;                  // shared-memory ring prefix for the cpu_worker
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 16;
  int64_t max_num_batched_tokens = 2048;
  int64_t kv_blocks = 0;
  std::string chat_template;  // a file
  std::string reasoning_parser;  // "", qwen3, deepseek_r1
  std::string tool_call_parser;  // "", hermes
  bool enable_auto_tool_choice = false;  // vLLM's flag; accepted, changes nothing
  // A planner policy (`tandem plan --json` output or a bare Policy): see
  // ApplyPolicyFile. What it sets lands in the fields above and in these
  // two, which take the place of --cpu-ffn-fraction and
  // --gpu-memory-budget when filled.
  std::string policy;
  std::vector<int64_t> cpu_ffn_rows;         // per layer
  std::vector<int64_t> streamed_ffn_layers;  // FFN weights streamed (CG)
  // The coordinator flags given on the command line (long names), which a
  // policy does not override.
  std::set<std::string> given;
};

// Reads o->policy (when set) and applies what the workers execute of it
// (planner::SettingsFromPolicy) to the settings not given as flags. Prints
// one line saying what it set. An error for a policy that is unreadable,
// does not fit the model, or has a schedule the workers do not run.
absl::Status ApplyPolicyFile(CoordinatorOptions* o);

// Turns o->override_tensor (when given) into o->cpu_experts, from the
// model's config.
absl::Status ApplyOverrideTensor(CoordinatorOptions* o);

// llama.cpp's --n-gpu-layers: OK when it keeps every layer on the device;
// an error saying which of Tandem's flags to use otherwise.
absl::Status CheckNGpuLayers(const std::string& value, const ModelConfig& config);

// The flags both commands share.
void AddCoordinatorFlags(CLI::App* cmd, CoordinatorOptions& o);

class CoordinatorRuntime {
 public:
  // Opens the model's config and tokenizer (a model without one is served
  // by token ids), starts the registry, the driver and the HTTP server.
  static absl::StatusOr<std::unique_ptr<CoordinatorRuntime>> Start(const CoordinatorOptions& o);
  ~CoordinatorRuntime();  // Stop()

  // Stops HTTP first (no new requests), then the driver (requests end with
  // an error), then the registry. Idempotent.
  void Stop();

  const std::string& registry_address() const;
  int http_port() const;
  int grpc_port() const;
  const std::string& served_name() const;

 private:
  struct Parts;
  explicit CoordinatorRuntime(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace tandem::cli

#endif  // TANDEM_CLI_COORDINATOR_RUNTIME_H_
