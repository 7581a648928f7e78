#include "cli/coordinator_runtime.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/override_tensor.h"
#include "common/checkpoint.h"
#include "common/hardware_profile.h"
#include "common/status_macros.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/frontend/grpc_client_service.h"
#include "coordinator/frontend/http_server.h"
#include "coordinator/frontend/metrics.h"
#include "coordinator/planner/neo/neo_sub_batches.h"
#include "coordinator/planner/scheinfer/prefill_assignment.h"
#include "coordinator/planner/search/serving_settings.h"
#include "coordinator/service/frontend_backend.h"
#include "coordinator/service/step_driver.h"
#include "coordinator/service/worker_registry.h"
#include "coordinator/text/token_id_text_processor.h"
#include "coordinator/text/tokenizer_text_processor.h"
#include "cpu_worker/service/expert_server.h"
#include "grpcpp/grpcpp.h"

namespace tandem::cli {

// Declared in the order they start; destroyed in reverse.
struct CoordinatorRuntime::Parts {
  std::string served_name;
  std::string registry_address;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<frontend::TextProcessor> text;
  std::unique_ptr<frontend::Metrics> metrics;  // before the driver that feeds it
  std::unique_ptr<coord::WorkerRegistry> registry;
  std::unique_ptr<grpc::Server> registry_server;
  std::unique_ptr<coord::StepDriver> driver;
  std::unique_ptr<coord::FrontendBackend> backend;
  std::unique_ptr<frontend::HttpServer> http;
  std::unique_ptr<frontend::GrpcClientService> grpc_service;
  std::unique_ptr<grpc::Server> grpc_server;  // after its service: destroyed first
  int grpc_port = 0;
  bool stopped = false;
};

namespace {

// A flag whose value is a count that must be given as > 0 (its field's 0
// means "not given": the default). CLI11's PositiveNumber would print the
// whole range of a double in its message.
const CLI::Validator kPositiveCount(
    [](std::string& v) -> std::string {
      int64_t n = 0;
      if (absl::SimpleAtoi(v, &n) && n > 0) return "";
      return absl::StrCat("must be a whole number > 0, got ", v);
    },
    "> 0");

// A layer count, 0 included.
const CLI::Validator kLayerCount(
    [](std::string& v) -> std::string {
      int64_t n = 0;
      if (absl::SimpleAtoi(v, &n) && n >= 0) return "";
      return absl::StrCat("must be a whole number >= 0, got ", v);
    },
    ">= 0");

// A flag whose empty value would mean "not given" (the default).
const CLI::Validator kNonEmpty(
    [](std::string& v) -> std::string { return v.empty() ? "must not be empty" : ""; }, "");

// The model's tokenizer; nullptr (served by token ids) when it ships none.
absl::StatusOr<std::shared_ptr<const Tokenizer>> OpenTokenizer(const Checkpoint& ckpt,
                                                              const std::string& model) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t;
  if (ckpt.gguf() != nullptr) {
    t = Tokenizer::FromGguf(*ckpt.gguf());
  } else if (!ckpt.tokenizer_json_path().empty()) {
    t = Tokenizer::FromHfFiles(ckpt.tokenizer_json_path(), ckpt.tokenizer_config_path());
  } else {
    std::fprintf(stderr,
                 "tandem: %s has no tokenizer.json; serving by token ids only (text prompts "
                 "and chat get HTTP 400)\n",
                 model.c_str());
    return std::shared_ptr<const Tokenizer>();
  }
  if (!t.ok()) return t.status();
  return std::shared_ptr<const Tokenizer>(std::move(*t));
}

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat(what, " ", path, ": cannot read"));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// What workers dial: the registry's bound port on loopback when it listens
// on every address.
std::string DialAddress(const std::string& listen, int port) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  return absl::StrCat(host, ":", port);
}

}  // namespace

void AddCoordinatorFlags(CLI::App* cmd, CoordinatorOptions& o) {
  cmd->add_option("--model,-m", o.model, "Model: a Hugging Face directory or a .gguf file")->required();
  cmd->add_option("--served-model-name", o.served_model_name,
                  "Model name in the API (default: --model)")
      ->check(kNonEmpty);
  cmd->add_option("--host", o.host, "HTTP address to listen on")->capture_default_str();
  cmd->add_option("--port", o.port, "HTTP port (0: any free port)")->capture_default_str();
  cmd->add_option("--api-key", o.api_key, "Require Authorization: Bearer KEY");
  cmd->add_option("--grpc-port", o.grpc_port, "Port of the client gRPC API on --host (0: any free port; -1: off)")->capture_default_str();
  CLI::Option* cpu_experts =
      cmd->add_option("--cpu-experts", o.cpu_experts,
                      "Routed experts on a cpu_worker: none, all, N-per-layer, first-N-layers or "
                      "one count per layer N0,N1,...")
          ->capture_default_str();
  // llama.cpp's names for the same placements (llama-server -cmoe/-ncmoe).
  cmd->add_flag_callback(
         "--cpu-moe", [&o] { o.cpu_experts = "all"; },
         "llama.cpp's name for --cpu-experts all: every routed expert on the cpu_worker")
      ->excludes(cpu_experts);
  cmd->add_option_function<int64_t>(
         "--n-cpu-moe",
         [&o](const int64_t& n) {
           o.cpu_experts = n == 0 ? "none" : absl::StrCat("first-", n, "-layers");
         },
         "llama.cpp's name for --cpu-experts first-N-layers: every routed expert of layers "
         "0..N-1 on the cpu_worker")
      ->check(kLayerCount)
      ->excludes(cpu_experts)
      ->excludes("--cpu-moe");
  cmd->add_option("--override-tensor", o.override_tensor,
                  "llama.cpp's REGEX=BUFFER rules (-ot) for the routed-expert tensors "
                  "blk.N.ffn_{gate,up,down}_exps.weight: CPU puts a layer's experts on the "
                  "cpu_worker, CUDA0/GPU keeps them on the gpu_worker; the first matching rule "
                  "wins, e.g. \"blk\\.(1[0-9])\\.ffn_.*_exps=CPU\"")
      ->excludes(cpu_experts)
      ->excludes("--cpu-moe")
      ->excludes("--n-cpu-moe");
  cmd->add_option("--n-gpu-layers", o.n_gpu_layers,
                  "llama.cpp's -ngl, accepted when it keeps every layer on the device (a count "
                  "of at least the model's layers, all or auto), as Tandem does; for fewer, "
                  "Tandem moves FFN weights instead (--cpu-experts, --override-tensor, "
                  "--cpu-ffn-fraction, --gpu-memory-budget)");
  cmd->add_option("--cpu-workers", o.cpu_workers,
                  "cpu_worker processes sharing the CPU experts (expert e on worker e % K)")
      ->capture_default_str();
  cmd->add_option("--tensor-parallel,--tp", o.tensor_parallel,
                  "gpu_worker ranks the model is sharded over (Megatron tensor parallelism; "
                  "the coordinator waits for ranks 0..N-1 to register)")
      ->capture_default_str();
  cmd->add_option("--gpu-expert-cache", o.gpu_expert_cache,
                  "Routed experts per MoE layer the gpu_worker keeps in device slots (HybriMoE "
                  "score cache, Klotski prefetch); the rest stay in host memory and each step "
                  "splits the activated ones between the device and the CPU (0: off)")
      ->capture_default_str();
  cmd->add_option("--cpu-ffn-fraction", o.cpu_ffn_fraction,
                  "Fraction of every dense MLP's intermediate rows the gpu_worker computes on "
                  "its CPU while the device computes the rest (ScheInfer's CC part; whole blocks "
                  "of 32 rows; 0: none)")
      ->capture_default_str();
  cmd->add_option("--prefill-gpu-tokens", o.prefill_gpu_tokens,
                  "ScheInfer's token assignment n_g: in a step holding a prefill, the CPU rows of "
                  "the first N tokens run on the device from a copy of their weights, the rest on "
                  "the CPU (needs --cpu-ffn-fraction; 0: all on the CPU); 'auto' re-solves N for "
                  "each prefill step (ScheInfer Eq. 15) from --hardware's profile")
      ->capture_default_str();
  cmd->add_option("--hardware", o.hardware,
                  "Hardware profile JSON (as tandem plan takes) for --prefill-gpu-tokens auto");
  cmd->add_option("--gpu-memory-budget", o.gpu_memory_budget_gb,
                  "GB of weights the gpu_worker keeps resident; the FFN weights of the layers "
                  "past it are streamed from host memory before use (0: all resident)")
      ->capture_default_str();
  cmd->add_option("--cpu-kv-blocks", o.cpu_kv_blocks,
                  "KV blocks of 16 tokens on a cpu_worker: requests placed there run "
                  "attention on the CPU (0: none)")
      ->capture_default_str();
  cmd->add_option("--micro-batch-size", o.micro_batch_size,
                  "MoE-Lightning's mu: a step of more sequences runs as micro-batches of this "
                  "many, pipelined so that the CPU attention of one overlaps the device's work "
                  "on its neighbours (0: one micro-batch)")
      ->capture_default_str();
  cmd->add_option("--kv-pool", o.kv_pool,
                  "Where requests' KV, and so their decode attention, goes: auto (the GPU's "
                  "pool first, the CPU's when it fills: Neo) or cpu (every request on the CPU "
                  "pool: MoE-Lightning's CPU attention; needs --cpu-kv-blocks)")
      ->capture_default_str();
  cmd->add_flag("--gpu-experts-only", o.gpu_experts_only,
                  "With --gpu-expert-cache: every activated expert runs on the device, the "
                  "misses copied in turn (Klotski), none on the CPU");
  cmd->add_option("--expert-prefetch", o.expert_prefetch,
                  "With --gpu-expert-cache: experts of the next layer prefetched per layer "
                  "(Klotski's hot experts; 0: one)")
      ->capture_default_str();
  cmd->add_flag("--neo-sub-batches", o.neo_sub_batches,
                  "Neo's two asymmetric sub-batches: a step with CPU decodes runs as batch-0 "
                  "(prefills, GPU decodes, a few CPU decodes) and batch-1 (the other CPU "
                  "decodes), chosen per step by Neo's rule on --hardware's profile, so that "
                  "batch-1's CPU attention overlaps batch-0's linear layers (needs "
                  "--cpu-kv-blocks and --hardware)");
  cmd->add_option("--max-model-len", o.max_model_len,
                  "Context length, at most the model's (default: the model's, at most 8192)")
      ->check(kPositiveCount);
  cmd->add_option("--max-num-seqs", o.max_num_seqs, "Sequences per step at most")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "Tokens per step at most")->capture_default_str();
  cmd->add_option("--kv-blocks", o.kv_blocks,
                  "KV cache blocks of 16 tokens (default: enough for max-num-seqs/4 full "
                  "contexts)")
      ->check(kPositiveCount);
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o.enable_prefix_caching,
                "Share the KV of prompts' equal openings between requests (full blocks of 16 "
                "tokens on the GPU pool; vLLM's automatic prefix caching); usage then reports "
                "prompt_tokens_details.cached_tokens (default: on)");
  cmd->add_option("--chat-template", o.chat_template, "File with a Jinja chat template overriding the model's");
  cmd->add_option("--reasoning-parser", o.reasoning_parser,
                  "Split chat answers into reasoning_content and content at </think>: qwen3 or "
                  "deepseek_r1 (vLLM's names)")
      ->check(CLI::IsMember({"qwen3", "deepseek_r1"}));
  cmd->add_option("--tool-call-parser", o.tool_call_parser,
                  "Return the tool calls in chat answers to requests with tools as "
                  "message.tool_calls, in the format of: hermes (<tool_call>: Hermes, Qwen2.5, "
                  "Qwen3), mistral ([TOOL_CALLS]: Mistral, Mixtral-8x22B), llama3_json or "
                  "llama4_json (JSON answers: Llama 3.1-3.3, Llama 4); vLLM's names")
      ->check(CLI::IsMember({"hermes", "mistral", "llama3_json", "llama4_json"}));
  cmd->add_flag("--enable-auto-tool-choice", o.enable_auto_tool_choice,
                "Accepted as vLLM's: tool_choice \"auto\" is always served; "
                "--tool-call-parser turns the parsing on");
  cmd->add_option("--policy", o.policy,
                  "A planner policy to execute: `tandem plan --json` output (its best policy) or "
                  "a Policy as JSON, of any schedule family. It sets the CPU rows and streamed "
                  "layers per layer, the CPU experts and expert cache (Klotski's on the device "
                  "only), the KV pools, MoE-Lightning's micro-batches, n_g and the batch "
                  "limits; flags given beside it win");
  // Which settings the command line gave, so that a policy leaves them be.
  for (const char* alias : {"--cpu-moe", "--n-cpu-moe", "--override-tensor"}) {
    cmd->get_option(alias)->each([&o](const std::string&) { o.given.insert("--cpu-experts"); });
  }
  for (const char* name : {"--cpu-experts", "--gpu-expert-cache", "--cpu-ffn-fraction",
                           "--prefill-gpu-tokens", "--gpu-memory-budget", "--cpu-kv-blocks",
                           "--max-num-seqs", "--max-num-batched-tokens", "--kv-blocks",
                           "--micro-batch-size", "--kv-pool", "--gpu-experts-only",
                           "--expert-prefetch", "--neo-sub-batches"}) {
    cmd->get_option(name)->each([&o, name](const std::string&) { o.given.insert(name); });
  }
}

absl::Status CheckNGpuLayers(const std::string& value, const ModelConfig& c) {
  if (value.empty() || value == "all" || value == "auto") return absl::OkStatus();
  int64_t n = 0;
  if (!absl::SimpleAtoi(value, &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--n-gpu-layers must be a count, all or auto, got '", value, "'"));
  }
  if (n < 0 || n >= c.num_layers) return absl::OkStatus();  // llama.cpp: -1 is all
  return absl::InvalidArgumentError(absl::StrCat(
      "--n-gpu-layers ", n, " of the model's ", c.num_layers,
      " layers: Tandem keeps every layer's attention on the device and moves FFN weights "
      "instead; use --cpu-experts, --n-cpu-moe or --override-tensor (routed experts), "
      "--cpu-ffn-fraction (dense MLP rows) or --gpu-memory-budget (streamed from host memory)"));
}

absl::Status ApplyOverrideTensor(CoordinatorOptions* o) {
  if (o->override_tensor.empty()) return absl::OkStatus();
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(o->model));
  TANDEM_ASSIGN_OR_RETURN(o->cpu_experts,
                          CpuExpertsFromOverrides(o->override_tensor, ckpt->config()));
  return absl::OkStatus();
}

absl::Status ApplyPolicyFile(CoordinatorOptions* o) {
  if (o->policy.empty()) return absl::OkStatus();
  TANDEM_ASSIGN_OR_RETURN(std::string text, ReadFile(o->policy, "--policy"));
  absl::StatusOr<proto::Policy> policy = planner::ParsePolicyJson(text);
  if (!policy.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--policy ", o->policy, ": ",
                                                   policy.status().message()));
  }
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(o->model));
  absl::StatusOr<planner::ServingSettings> s = planner::SettingsFromPolicy(*policy, ckpt->config());
  if (!s.ok()) {
    return absl::Status(s.status().code(),
                        absl::StrCat("--policy ", o->policy, ": ", s.status().message()));
  }
  std::vector<std::string> set;
  auto free = [&](const char* flag) { return o->given.count(flag) == 0; };
  if (free("--cpu-ffn-fraction") && !s->cpu_ffn_rows.empty()) {
    o->cpu_ffn_rows = s->cpu_ffn_rows;
    set.push_back("CPU MLP rows per layer");
  }
  if (free("--gpu-memory-budget") && !s->streamed_ffn_layers.empty()) {
    o->streamed_ffn_layers = s->streamed_ffn_layers;
    set.push_back(absl::StrCat(s->streamed_ffn_layers.size(), " streamed layers"));
  }
  if (free("--cpu-experts") && s->cpu_experts != "none") {
    o->cpu_experts = s->cpu_experts;
    set.push_back(absl::StrCat("--cpu-experts ", s->cpu_experts));
  }
  auto count = [&](const char* flag, int64_t v, auto* field) {
    if (v <= 0 || !free(flag)) return;
    *field = static_cast<std::remove_pointer_t<decltype(field)>>(v);
    set.push_back(absl::StrCat(flag, " ", v));
  };
  count("--gpu-expert-cache", s->expert_cache_slots, &o->gpu_expert_cache);
  count("--cpu-kv-blocks", s->cpu_kv_blocks, &o->cpu_kv_blocks);
  count("--max-num-seqs", s->max_num_seqs, &o->max_num_seqs);
  count("--max-num-batched-tokens", s->max_num_batched_tokens, &o->max_num_batched_tokens);
  count("--kv-blocks", s->kv_blocks, &o->kv_blocks);
  count("--micro-batch-size", s->micro_batch_size, &o->micro_batch_size);
  count("--expert-prefetch", s->expert_prefetch, &o->expert_prefetch);
  if (free("--kv-pool") && s->kv_pool != "auto") {
    o->kv_pool = s->kv_pool;
    set.push_back(absl::StrCat("--kv-pool ", s->kv_pool));
  }
  if (free("--gpu-experts-only") && s->gpu_experts_only) {
    o->gpu_experts_only = true;
    set.push_back("--gpu-experts-only");
  }
  if (free("--neo-sub-batches") && s->neo_sub_batches) {
    // The per-step rule needs the machine's figures.
    if (o->hardware.empty()) {
      set.push_back("not Neo's sub-batches (they need --hardware)");
    } else {
      o->neo_sub_batches = true;
      set.push_back("--neo-sub-batches");
    }
  }
  if (free("--prefill-gpu-tokens") && s->prefill_gpu_tokens > 0) {
    o->prefill_gpu_tokens = absl::StrCat(s->prefill_gpu_tokens);
    set.push_back(absl::StrCat("--prefill-gpu-tokens ", s->prefill_gpu_tokens));
  }
  std::printf("policy %s: %s; %s\n", o->policy.c_str(),
              proto::ScheduleFamily_Name(policy->family()).c_str(),
              set.empty() ? "nothing beyond the defaults" : absl::StrJoin(set, ", ").c_str());
  return absl::OkStatus();
}

namespace {

// --prefill-gpu-tokens: a fixed n_g in the load request, or "auto": the
// driver re-solves n_g for each prefill step under the running split
// (every dense layer's CC share; the device's rows counted as streamed when
// a GPU memory budget is set, since the worker then streams the layers past
// it).
absl::Status SetPrefillTokenAssignment(const CoordinatorOptions& o, const ModelConfig& cfg,
                                       coord::StepDriverConfig* dc) {
  const bool automatic = o.prefill_gpu_tokens == "auto";
  int64_t fixed = 0;
  if (!automatic && !absl::SimpleAtoi(o.prefill_gpu_tokens, &fixed)) {
    return absl::InvalidArgumentError(absl::StrCat("--prefill-gpu-tokens: '", o.prefill_gpu_tokens,
                                                   "' is neither a number nor auto"));
  }
  if (fixed < 0) return absl::InvalidArgumentError("--prefill-gpu-tokens must not be negative");
  if ((automatic || fixed > 0) && dc->model.cpu_ffn_rows.empty()) {
    return absl::InvalidArgumentError(
        "--prefill-gpu-tokens assigns the prefill tokens of --cpu-ffn-fraction's rows: give both");
  }
  if (!automatic && !o.hardware.empty() && !o.neo_sub_batches) {
    return absl::InvalidArgumentError(
        "--hardware is for --prefill-gpu-tokens auto and --neo-sub-batches");
  }
  dc->model.prefill_gpu_tokens = fixed;
  if (!automatic) return absl::OkStatus();
  if (o.hardware.empty()) {
    return absl::InvalidArgumentError(
        "--prefill-gpu-tokens auto needs --hardware PROFILE.json (the GPU, CPU and PCIe figures "
        "Eq. 15 weighs)");
  }
  TANDEM_ASSIGN_OR_RETURN(HardwareProfile hw, LoadHardwareProfile(o.hardware));
  std::vector<planner::scheinfer::RunningMlpSplit> splits;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const int64_t rows = dc->model.cpu_ffn_rows[static_cast<size_t>(l)];
    const bool streamed = o.gpu_memory_budget_gb > 0 ||
                          std::find(o.streamed_ffn_layers.begin(), o.streamed_ffn_layers.end(),
                                    l) != o.streamed_ffn_layers.end();
    splits.push_back(
        {static_cast<double>(rows) / static_cast<double>(cfg.intermediate_size), streamed});
  }
  TANDEM_ASSIGN_OR_RETURN(planner::scheinfer::PrefillAssigner assigner,
                          planner::scheinfer::PrefillAssigner::Create(cfg, hw, std::move(splits)));
  // The driver calls it from its one thread.
  auto shared = std::make_shared<planner::scheinfer::PrefillAssigner>(std::move(assigner));
  dc->prefill_gpu_tokens = [shared](int64_t tokens) { return shared->GpuTokens(tokens); };
  return absl::OkStatus();
}

// --neo-sub-batches: the driver splits each step with CPU decodes into
// Neo's batch-0 and batch-1 (planner/neo/neo_sub_batches.h).
absl::Status SetNeoSubBatches(const CoordinatorOptions& o, const ModelConfig& cfg,
                              coord::StepDriverConfig* dc) {
  if (!o.neo_sub_batches) return absl::OkStatus();
  if (o.cpu_kv_blocks == 0 || o.hardware.empty()) {
    return absl::InvalidArgumentError(
        "--neo-sub-batches needs a CPU KV pool (--cpu-kv-blocks) and --hardware PROFILE.json "
        "(the costs of Neo's per-step rule)");
  }
  if (o.micro_batch_size > 0 || o.tensor_parallel > 1) {
    return absl::InvalidArgumentError(
        "--neo-sub-batches does not combine with --micro-batch-size or --tensor-parallel");
  }
  TANDEM_ASSIGN_OR_RETURN(HardwareProfile hw, LoadHardwareProfile(o.hardware));
  absl::StatusOr<std::unique_ptr<planner::NeoSubBatcher>> b =
      planner::NeoSubBatcher::Create(cfg, hw);
  if (!b.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--hardware ", o.hardware, ": ",
                                                   b.status().message()));
  }
  std::shared_ptr<planner::NeoSubBatcher> shared = *std::move(b);
  dc->sub_batches = [shared](absl::Span<const planner::StepSequenceShape> step) {
    return shared->Split(step);
  };
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorRuntime>> CoordinatorRuntime::Start(
    const CoordinatorOptions& o) {
  if (o.port < 0 || o.port > 65535 || o.grpc_port < -1 || o.grpc_port > 65535) {
    return absl::InvalidArgumentError("--port must be in 0..65535 and --grpc-port in -1..65535");
  }
  if (o.max_num_seqs <= 0 || o.max_num_batched_tokens <= 0) {
    return absl::InvalidArgumentError("--max-num-seqs and --max-num-batched-tokens must be > 0");
  }
  auto p = std::make_unique<Parts>();
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(o.model));
  const ModelConfig cfg = ckpt->config();
  TANDEM_ASSIGN_OR_RETURN(p->tokenizer, OpenTokenizer(*ckpt, o.model));
  if (p->tokenizer != nullptr) {
    std::string chat_template;
    if (!o.chat_template.empty()) {
      TANDEM_ASSIGN_OR_RETURN(chat_template, ReadFile(o.chat_template, "--chat-template"));
    }
    TANDEM_ASSIGN_OR_RETURN(p->text, TokenizerTextProcessor::Create(p->tokenizer, chat_template));
  } else {
    p->text = std::make_unique<TokenIdTextProcessor>(cfg.vocab_size);
  }
  TANDEM_ASSIGN_OR_RETURN(const frontend::ToolCallParser tool_call_parser,
                          frontend::ParseToolCallParser(o.tool_call_parser));
  // A parser keyed on a special token is useless with a model that has none
  // (Mixtral-8x7B-Instruct has no [TOOL_CALLS]): say so now, as vLLM does,
  // rather than answer every tool request with text.
  const std::string_view call_token = frontend::ToolCallToken(tool_call_parser);
  if (!call_token.empty() && p->tokenizer != nullptr &&
      !p->tokenizer->TokenToId(call_token).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tool-call-parser ", o.tool_call_parser, ": the model's vocabulary has no ",
                     std::string(call_token), " token, so it cannot call tools in that format"));
  }

  TANDEM_ASSIGN_OR_RETURN(p->registry, coord::WorkerRegistry::Create());
  int registry_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.registry_listen, grpc::InsecureServerCredentials(), &registry_port);
  builder.RegisterService(p->registry.get());
  p->registry_server = builder.BuildAndStart();
  if (p->registry_server == nullptr || registry_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot start the worker registry on ", o.registry_listen));
  }
  p->registry_address = DialAddress(o.registry_listen, registry_port);

  coord::StepDriverConfig dc;
  dc.model.model_path = o.model;
  // Past the positions the model was trained for its outputs are not the
  // model's (and the default KV cache grows with it): refused, as vLLM
  // refuses it.
  if (cfg.max_position > 0 && o.max_model_len > cfg.max_position) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-model-len ", o.max_model_len, " is more than the model's context (",
                     cfg.max_position, " positions)"));
  }
  dc.model.max_context =
      o.max_model_len > 0 ? o.max_model_len : std::min<int64_t>(cfg.max_position, 8192);
  if (cfg.sliding_window > 0) {
    dc.model.max_context = std::min(dc.model.max_context, cfg.sliding_window);
  }
  dc.model.kv_blocks = o.kv_blocks > 0 ? o.kv_blocks
                                       : (dc.model.max_context + 15) / 16 *
                                             std::max<int64_t>(4, o.max_num_seqs / 4);
  if (o.cpu_kv_blocks < 0) return absl::InvalidArgumentError("--cpu-kv-blocks must be >= 0");
  TANDEM_RETURN_IF_ERROR(CheckCpuExpertsApply(o.cpu_experts, cfg));
  TANDEM_RETURN_IF_ERROR(CheckNGpuLayers(o.n_gpu_layers, cfg));
  if (o.cpu_experts != "none" || o.cpu_kv_blocks > 0) {
    if (o.rings.empty()) {
      return absl::InvalidArgumentError("a cpu_worker needs its ring name prefix (--rings)");
    }
    TANDEM_ASSIGN_OR_RETURN(dc.model.cpu_experts, ParseCpuExperts(o.cpu_experts, cfg));
    dc.model.data_segment = o.rings;
    dc.model.cpu_kv_tokens = o.cpu_kv_blocks * dc.model.block_size;
    dc.model.cpu_workers = o.cpu_workers;
    dc.num_cpu_kv_blocks = o.cpu_kv_blocks;
  }
  if (!(o.gpu_memory_budget_gb >= 0)) {
    return absl::InvalidArgumentError("--gpu-memory-budget must be >= 0");
  }
  dc.model.weight_budget_bytes = static_cast<int64_t>(o.gpu_memory_budget_gb * 1e9);
  if (o.gpu_memory_budget_gb > 0 && !o.streamed_ffn_layers.empty()) {
    return absl::InvalidArgumentError(
        "--gpu-memory-budget and a policy's streamed layers both say which layers stream");
  }
  dc.model.streamed_ffn_layers = o.streamed_ffn_layers;
  if (o.gpu_expert_cache < 0) return absl::InvalidArgumentError("--gpu-expert-cache must be >= 0");
  if (o.gpu_expert_cache > 0 && !cfg.is_moe()) {
    return absl::InvalidArgumentError("--gpu-expert-cache is for mixture-of-experts models");
  }
  if (o.gpu_expert_cache > cfg.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat("--gpu-expert-cache ", o.gpu_expert_cache,
                                                   " of ", cfg.num_experts, " experts per layer"));
  }
  if (o.gpu_expert_cache > 0 &&
      ((o.cpu_experts != "none" && o.cpu_experts != "all") || o.tensor_parallel > 1 ||
       o.gpu_memory_budget_gb > 0 || !o.streamed_ffn_layers.empty())) {
    return absl::InvalidArgumentError(
        "--gpu-expert-cache places the routed experts itself: it combines with --cpu-experts "
        "all (the cpu_workers then compute the CPU's share) but not with a fixed placement, "
        "--tensor-parallel or --gpu-memory-budget");
  }
  dc.model.expert_cache_slots = o.gpu_expert_cache;
  if ((o.gpu_experts_only || o.expert_prefetch != 0) && o.gpu_expert_cache == 0) {
    return absl::InvalidArgumentError("--gpu-experts-only and --expert-prefetch need --gpu-expert-cache");
  }
  if (o.expert_prefetch < 0) return absl::InvalidArgumentError("--expert-prefetch must be >= 0");
  dc.model.experts_on_device_only = o.gpu_experts_only;
  dc.model.expert_prefetch = o.expert_prefetch;
  if (o.micro_batch_size < 0) return absl::InvalidArgumentError("--micro-batch-size must be >= 0");
  if (o.micro_batch_size > 0 && (o.gpu_expert_cache > 0 || o.tensor_parallel > 1)) {
    return absl::InvalidArgumentError(
        "--micro-batch-size does not combine with --gpu-expert-cache (its plan covers a whole "
        "step) or --tensor-parallel");
  }
  dc.model.micro_batch_size = o.micro_batch_size;
  if (o.kv_pool != "auto" && o.kv_pool != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv-pool must be auto or cpu, not '", o.kv_pool, "'"));
  }
  if (o.kv_pool == "cpu" && o.cpu_kv_blocks == 0) {
    return absl::InvalidArgumentError("--kv-pool cpu needs a CPU pool (--cpu-kv-blocks)");
  }
  dc.cpu_kv_only = o.kv_pool == "cpu";
  if (!(o.cpu_ffn_fraction >= 0 && o.cpu_ffn_fraction < 1)) {
    return absl::InvalidArgumentError("--cpu-ffn-fraction must be in [0, 1)");
  }
  if (o.cpu_ffn_fraction > 0 && !o.cpu_ffn_rows.empty()) {
    return absl::InvalidArgumentError(
        "--cpu-ffn-fraction and a policy's CPU rows per layer both set the CC part");
  }
  if (!o.cpu_ffn_rows.empty()) {
    if (o.tensor_parallel > 1) {
      return absl::InvalidArgumentError("a policy's CPU rows do not combine with --tensor-parallel");
    }
    if (static_cast<int64_t>(o.cpu_ffn_rows.size()) != cfg.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("CPU rows for ", o.cpu_ffn_rows.size(),
                                                     " layers; the model has ", cfg.num_layers));
    }
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      const int64_t rows = o.cpu_ffn_rows[static_cast<size_t>(l)];
      if (rows < 0 || rows % 32 != 0 || rows >= cfg.intermediate_size ||
          (rows > 0 && cfg.IsMoeLayer(l))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer ", l, ": ", rows, " CPU rows is not a whole number of 32-row blocks of its "
            "dense MLP, short of all of it"));
      }
    }
    dc.model.cpu_ffn_rows = o.cpu_ffn_rows;
  }
  if (o.cpu_ffn_fraction > 0) {
    if (o.tensor_parallel > 1) {
      return absl::InvalidArgumentError("--cpu-ffn-fraction does not combine with --tensor-parallel");
    }
    // Whole blocks of 32 rows (GGUF blocks split only there), per dense layer.
    const int64_t rows =
        static_cast<int64_t>(o.cpu_ffn_fraction * static_cast<double>(cfg.intermediate_size)) /
        32 * 32;
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      dc.model.cpu_ffn_rows.push_back(cfg.IsMoeLayer(l) ? 0 : rows);
    }
  }
  TANDEM_RETURN_IF_ERROR(SetPrefillTokenAssignment(o, cfg, &dc));
  TANDEM_RETURN_IF_ERROR(SetNeoSubBatches(o, cfg, &dc));
  dc.tensor_parallel = o.tensor_parallel;
  if (o.tensor_parallel > 1) {
    // Names of the ranks' all-reduce groups (one per load attempt).
    dc.tp_group_prefix = absl::StrCat("/tandem-", getpid(), "-tp");
  }
  dc.max_num_seqs = o.max_num_seqs;
  dc.enable_prefix_caching = o.enable_prefix_caching;
  dc.max_num_batched_tokens = std::max(o.max_num_batched_tokens, o.max_num_seqs);
  for (int64_t id : cfg.eos_token_ids) dc.eos_token_ids.push_back(static_cast<int32_t>(id));
  if (p->tokenizer != nullptr) {
    for (int32_t id : p->tokenizer->eos_ids()) dc.eos_token_ids.push_back(id);
  }
  dc.vocab_size = cfg.vocab_size;
  dc.tokenizer = p->tokenizer;
  p->served_name = o.served_model_name.empty() ? o.model : o.served_model_name;
  p->metrics = std::make_unique<frontend::Metrics>(p->served_name);
  dc.on_step = [m = p->metrics.get()](const coord::StepStats& s) {
    if (!s.ok) return;
    m->ObserveWorkerStep("gpu_worker", s.worker_seconds);
    m->AddPrefillGpuRows(s.prefill_gpu_rows);
    m->ObserveMicroBatches(s.micro_batches);
  };
  TANDEM_ASSIGN_OR_RETURN(p->driver, coord::StepDriver::Create(std::move(dc)));
  p->registry->SetListener(p->driver.get());
  // Scheduler gauges are read when scraped, so they are never stale.
  p->metrics->SetCollectHook([m = p->metrics.get(), d = p->driver.get()] {
    const coord::DriverMetrics dm = d->metrics();
    m->SetNumRequestsRunning(dm.num_running);
    m->SetNumRequestsWaiting(dm.num_waiting);
    m->SetKvCacheUsage(dm.gpu_kv_usage);
    m->SetKvBlocks("gpu", dm.gpu_kv_blocks_used, dm.gpu_kv_blocks_total);
    m->SetKvBlocks("cpu", dm.cpu_kv_blocks_used, dm.cpu_kv_blocks_total);
    m->SetPrefixCacheTotals(dm.prefix_cache_queries, dm.prefix_cache_hits);
    m->SetStructuredMaskTotals(dm.structured_masks_cached, dm.structured_masks_computed);
    for (const auto& [event, count] : dm.expert_cache) m->SetExpertCacheEvent(event, count);
  });

  p->backend = std::make_unique<coord::FrontendBackend>(p->driver.get());
  frontend::HttpServerOptions ho;
  ho.host = o.host;
  ho.port = o.port;
  ho.api_key = o.api_key;
  ho.parse.served_model_names = {p->served_name};
  ho.parse.max_context = p->driver->max_context();
  ho.parse.vocab_size = cfg.vocab_size;
  TANDEM_ASSIGN_OR_RETURN(ho.parse.reasoning_parser,
                          frontend::ParseReasoningParser(o.reasoning_parser));
  ho.parse.tool_call_parser = tool_call_parser;
  TANDEM_ASSIGN_OR_RETURN(p->http, frontend::HttpServer::Create(ho, p->backend.get(),
                                                                p->text.get(), p->metrics.get()));
  TANDEM_RETURN_IF_ERROR(p->http->Start());

  if (o.grpc_port >= 0) {
    frontend::GrpcClientServiceOptions go;
    go.parse = ho.parse;
    // Null without a tokenizer: text prompts and stop strings are refused
    // at once rather than by the driver.
    TANDEM_ASSIGN_OR_RETURN(
        p->grpc_service,
        frontend::GrpcClientService::Create(go, p->backend.get(),
                                            p->tokenizer != nullptr ? p->text.get() : nullptr,
                                            p->metrics.get()));
    grpc::ServerBuilder gb;
    gb.AddListeningPort(absl::StrCat(o.host, ":", o.grpc_port), grpc::InsecureServerCredentials(),
                        &p->grpc_port);
    gb.RegisterService(p->grpc_service.get());
    p->grpc_server = gb.BuildAndStart();
    if (p->grpc_server == nullptr || p->grpc_port == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot start the gRPC API on ", o.host, ":", o.grpc_port));
    }
  }
  return std::unique_ptr<CoordinatorRuntime>(new CoordinatorRuntime(std::move(p)));
}

CoordinatorRuntime::CoordinatorRuntime(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}

CoordinatorRuntime::~CoordinatorRuntime() { Stop(); }

void CoordinatorRuntime::Stop() {
  if (parts_ == nullptr || parts_->stopped) return;
  parts_->stopped = true;
  parts_->http->Stop(std::chrono::seconds(2));
  // Streams still open at the deadline are cancelled, aborting their requests.
  if (parts_->grpc_server) {
    parts_->grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  parts_->registry->SetListener(nullptr);
  parts_->metrics->SetCollectHook(nullptr);
  parts_->driver->Stop();
  parts_->registry_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

const std::string& CoordinatorRuntime::registry_address() const { return parts_->registry_address; }
int CoordinatorRuntime::http_port() const { return parts_->http->port(); }
int CoordinatorRuntime::grpc_port() const { return parts_->grpc_port; }
const std::string& CoordinatorRuntime::served_name() const { return parts_->served_name; }

}  // namespace tandem::cli
