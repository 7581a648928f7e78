#include "cli/generate_command.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/child_process.h"
#include "cli/flag_sources.h"
#include "common/checkpoint.h"
#include "common/status_macros.h"
#include "common/tokenizer/tokenizer.h"
#include "cpu_worker/service/expert_server.h"
#include "gpu_worker/device_spec.h"
#include "gpu_worker/engine/engine.h"
#include "gpu_worker/engine/generator.h"
#include "gpu_worker/engine/local_attention_offload.h"
#include "gpu_worker/engine/shm_attention_offload.h"
#include "gpu_worker/engine/shm_expert_offload.h"
#include "nlohmann/json.hpp"

namespace tandem::cli {
namespace {

// Options of this file only (GenerateOptions lives in a header shared with
// other commands' owners): where the sequence's attention and KV live.
struct CpuAttentionFlags {
  std::string where = "none";  // none | local (in-process CPU KV) | worker (cpu-worker child)
};
CpuAttentionFlags& AttentionFlags() {
  static CpuAttentionFlags flags;
  return flags;
}

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(piece), &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt-ids: '", std::string(piece), "' is not a token id"));
    }
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError("--prompt-ids: no token ids given");
  return ids;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const Checkpoint& ckpt) {
  if (ckpt.gguf() != nullptr) return Tokenizer::FromGguf(*ckpt.gguf());
  if (ckpt.tokenizer_json_path().empty()) {
    return absl::NotFoundError(
        absl::StrCat(ckpt.path(), ": no tokenizer.json; use --prompt-ids"));
  }
  return Tokenizer::FromHfFiles(ckpt.tokenizer_json_path(), ckpt.tokenizer_config_path());
}

// A cpu_worker child and the offloads that reach it. Declared so that the
// rings close (offloads) before the child is reaped.
struct CpuWorkerChild {
  std::unique_ptr<ChildProcess> child;
  std::unique_ptr<ShmExpertOffload> experts;       // null: experts all local
  std::unique_ptr<ShmAttentionOffload> attention;  // null: attention local
};

// Waits for the child to attach to `offload`'s rings, noticing if it dies.
template <typename Offload>
absl::Status WaitForChild(Offload& offload, ChildProcess& child) {
  for (;;) {
    absl::Status s = offload.WaitForWorker(absl::Milliseconds(200));
    if (s.ok()) return s;
    if (!absl::IsDeadlineExceeded(s)) return s;
    if (auto rc = child.Poll()) {
      return absl::UnavailableError(absl::StrCat("the cpu_worker exited with status ", *rc,
                                                 " before serving"));
    }
  }
}

// Spawns one cpu_worker serving the experts in `placement` (if any) and,
// with `attention`, the sequence's CPU attention over a KV cache of one
// full context.
absl::StatusOr<CpuWorkerChild> StartCpuWorker(const GenerateOptions& o, const Engine& engine,
                                              const ExpertPlacement* placement, bool attention) {
  const ModelConfig& c = engine.config();
  const std::string prefix = absl::StrCat("/tandem-", getpid(), "-cpu");
  CpuWorkerChild w;
  if (placement != nullptr) {
    ShmOffloadOptions so;
    so.name_prefix = prefix;
    so.hidden = c.hidden_size;
    // One slot holds a whole prefill chunk's routed rows (512 tokens x top-k).
    so.slot_bytes =
        std::max<int64_t>(1 << 20, (512 * c.num_experts_per_tok + 64) * c.hidden_size * 4);
    so.slot_count = 2;
    TANDEM_ASSIGN_OR_RETURN(w.experts, ShmExpertOffload::Create(so, *placement));
  }
  if (attention) {
    ShmAttentionOptions ao;
    ao.name_prefix = prefix;
    ao.shape = CpuAttentionShapeFor(c, 16, engine.max_context());
    ao.slot_bytes = AttentionSlotBytesFor(ao.shape, 512);  // a whole prefill chunk
    TANDEM_ASSIGN_OR_RETURN(w.attention, ShmAttentionOffload::Create(ao));
  }
  std::vector<std::string> args = {"cpu-worker", "--model", o.model, "--cpu-experts",
                                   placement != nullptr ? o.cpu_experts : "none",
                                   "--expert-rings", prefix, "--dtype", o.dtype};
  if (attention) args.push_back("--attention");
  TANDEM_ASSIGN_OR_RETURN(w.child, ChildProcess::SpawnSelf(args));
  if (w.experts) TANDEM_RETURN_IF_ERROR(WaitForChild(*w.experts, *w.child));
  if (w.attention) TANDEM_RETURN_IF_ERROR(WaitForChild(*w.attention, *w.child));
  return w;
}

absl::Status Run(const GenerateOptions& o) {
  if (o.prompt.empty() == o.prompt_ids.empty()) {
    return absl::InvalidArgumentError("give exactly one of --prompt and --prompt-ids");
  }
  if (o.temperature < 0) return absl::InvalidArgumentError("--temperature must be >= 0");
  if (o.top_p <= 0 || o.top_p > 1) return absl::InvalidArgumentError("--top-p must be in (0, 1]");
  if (o.top_k < 0) return absl::InvalidArgumentError("--top-k must be >= 0");
  if (o.max_tokens < 0) return absl::InvalidArgumentError("--max-tokens must be >= 0");
  if (o.max_context < 0) return absl::InvalidArgumentError("--max-context must be >= 0");

  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(o.model));
  // Past the positions the model was trained for its outputs are not the
  // model's: refused, as serve refuses --max-model-len there.
  if (const int64_t positions = ckpt->config().max_position;
      positions > 0 && o.max_context > positions) {
    return absl::InvalidArgumentError(absl::StrCat("--max-context ", o.max_context,
                                                   " is more than the model's context (",
                                                   positions, " positions)"));
  }
  // The tokenizer is needed for text in or out; ids-only runs work without.
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = LoadTokenizer(*ckpt);
  if (!tok.ok() && !o.prompt.empty()) return tok.status();

  std::vector<int32_t> prompt;
  if (!o.prompt.empty()) {
    prompt = (*tok)->Encode(o.prompt, /*add_bos=*/true, /*parse_special=*/!o.no_special);
  } else {
    TANDEM_ASSIGN_OR_RETURN(prompt, ParseIds(o.prompt_ids));
  }

  GenerationParams params;
  params.max_tokens = o.max_tokens;
  params.sampling.temperature = o.temperature;
  params.sampling.top_k = o.top_k;
  params.sampling.top_p = o.top_p;
  params.sampling.seed = o.seed;
  params.ignore_eos = o.ignore_eos;
  const std::string& cpu_attention = AttentionFlags().where;
  if (cpu_attention != "none" && cpu_attention != "local" && cpu_attention != "worker") {
    return absl::InvalidArgumentError("--cpu-attention must be none, local or worker");
  }
  params.cpu_attention = cpu_attention != "none";
  for (int64_t id : ckpt->config().eos_token_ids) params.eos_ids.push_back(static_cast<int32_t>(id));
  if (tok.ok()) {
    for (int32_t id : (*tok)->eos_ids()) params.eos_ids.push_back(id);
  }

  EngineOptions eo;
  eo.max_sequences = 1;
  eo.max_context = o.max_context;
  if (o.dtype == "f32") {
    eo.compute = ops::ComputeType::kF32;
  } else if (o.dtype == "quantized") {
    eo.compute = ops::ComputeType::kQuantized;
  } else if (o.dtype != "auto" && o.dtype != "bf16") {
    return absl::InvalidArgumentError("--dtype must be auto, bf16, f32 or quantized");
  }
  TANDEM_ASSIGN_OR_RETURN(eo.device, DeviceFactoryFor(o.device));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(std::move(ckpt), eo));
  if (!engine->load_notice().empty()) {
    std::fprintf(stderr, "tandem generate: %s\n", engine->load_notice().c_str());
  }

  // Routed experts placed on the CPU, and with --cpu-attention worker the
  // sequence's attention and KV, run in a cpu_worker child process reached
  // through shared-memory rings; --cpu-attention local keeps that KV in an
  // in-process CPU cache instead.
  CpuWorkerChild cpu_worker;
  std::unique_ptr<LocalAttentionOffload> local_attention;
  std::optional<ExpertPlacement> placement;
  if (o.cpu_experts != "none") {
    TANDEM_RETURN_IF_ERROR(CheckCpuExpertsApply(o.cpu_experts, engine->config()));
    TANDEM_ASSIGN_OR_RETURN(placement, ParseCpuExperts(o.cpu_experts, engine->config()));
  }
  if (placement.has_value() || cpu_attention == "worker") {
    TANDEM_ASSIGN_OR_RETURN(cpu_worker,
                            StartCpuWorker(o, *engine, placement ? &*placement : nullptr,
                                           cpu_attention == "worker"));
    if (cpu_worker.experts) engine->SetExpertOffload(cpu_worker.experts.get());
    if (cpu_worker.attention) engine->SetAttentionOffload(cpu_worker.attention.get());
  }
  if (cpu_attention == "local") {
    TANDEM_ASSIGN_OR_RETURN(local_attention,
                            LocalAttentionOffload::Create(CpuAttentionShapeFor(
                                engine->config(), 16, engine->max_context())));
    engine->SetAttentionOffload(local_attention.get());
  }

  std::unique_ptr<StreamingDetokenizer> detok;
  if (tok.ok() && !o.json) detok = std::make_unique<StreamingDetokenizer>(**tok);
  auto on_token = [&](const GeneratedToken& t) {
    if (detok) {
      std::cout << detok->Push(t.id) << std::flush;
    }
    return true;
  };
  TANDEM_ASSIGN_OR_RETURN(GenerationResult r, Generate(*engine, 0, prompt, params, on_token));

  if (!o.json) {
    if (detok) {
      std::cout << detok->Flush() << std::endl;
    } else {
      for (const auto& t : r.tokens) std::cout << t.id << (&t == &r.tokens.back() ? "\n" : ",");
    }
    return absl::OkStatus();
  }
  nlohmann::ordered_json j;
  j["prompt_ids"] = prompt;
  nlohmann::ordered_json toks = nlohmann::ordered_json::array();
  std::vector<int32_t> ids;
  for (const auto& t : r.tokens) {
    nlohmann::ordered_json e;
    e["id"] = t.id;
    if (tok.ok()) e["piece"] = (*tok)->TokenPiece(t.id);
    e["logprob"] = t.logprob;
    toks.push_back(e);
    ids.push_back(t.id);
  }
  j["token_ids"] = ids;
  if (tok.ok()) j["text"] = (*tok)->Decode(ids);
  j["tokens"] = toks;
  j["finish_reason"] = r.finish_reason;
  j["usage"] = {{"prompt_tokens", r.prompt_tokens},
                {"completion_tokens", static_cast<int64_t>(r.tokens.size())}};
  j["timing"] = {{"prefill_seconds", r.prefill_seconds}, {"decode_seconds", r.decode_seconds}};
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  return absl::OkStatus();
}

}  // namespace

CLI::App* AddGenerateCommand(CLI::App& app, GenerateOptions& o) {
  CLI::App* cmd = app.add_subcommand("generate", "Generate a continuation of one prompt in this process");
  cmd->add_option("--model,-m", o.model, "Model: a Hugging Face directory or a .gguf file")->required();
  cmd->add_option("--prompt,-p", o.prompt, "Prompt text (special tokens like <|im_start|> are recognised)");
  cmd->add_option("--prompt-ids", o.prompt_ids, "Prompt as comma-separated token ids");
  cmd->add_option("--max-tokens,-n", o.max_tokens, "Tokens to generate at most")->capture_default_str();
  cmd->add_option("--temperature,-t", o.temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o.top_k, "Keep the k most likely tokens; 0 = all")->capture_default_str();
  cmd->add_option("--top-p", o.top_p, "Nucleus sampling mass")->capture_default_str();
  cmd->add_option("--seed,-s", o.seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--device", o.device,
                  "Device the engine runs on: host (CPU kernels), cuda or cuda:N (GPU N; builds "
                  "with CUDA)")
      ->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "GEMM dtype: auto (bf16 for bf16 weights where the CPU has it), bf16, f32, quantized (GGUF blocks computed in place)")->capture_default_str();
  cmd->add_option("--max-context", o.max_context, "Context length; 0 = the model's (at most 8192)");
  cmd->add_option("--cpu-experts", o.cpu_experts, "Routed experts computed by a cpu_worker process: none, all or N-per-layer")->capture_default_str();
  cmd->add_option("--cpu-attention", AttentionFlags().where, "Where the sequence's attention and KV live (Neo): none (here, as usual), local (an in-process CPU KV cache) or worker (a cpu_worker process)")->capture_default_str();
  cmd->add_flag("--json", o.json, "Print token ids, pieces and log-probs as JSON");
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Keep generating past end-of-sequence tokens");
  cmd->add_flag("--no-special", o.no_special, "Treat special-token text in the prompt as plain text");
  return cmd;
}

int RunGenerate(const GenerateOptions& opts) {
  const absl::Status s = Run(opts);
  if (!s.ok()) {
    PrintCommandError("tandem generate", s);
    return 1;
  }
  return 0;
}

}  // namespace tandem::cli
