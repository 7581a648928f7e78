#include "coordinator/frontend/grpc_client_service.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "coordinator/frontend/api_error.h"
#include "coordinator/frontend/generation_session.h"
#include "coordinator/frontend/response_common.h"
#include "coordinator/structured/json_schema.h"
#include "proto/grpc_status.h"

namespace tandem::frontend {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// Backend request ids only need to be unique among those in flight; random
// so that ids of a restarted coordinator do not repeat in logs either.
std::string NewGrpcRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrCat("grpc-", absl::StrFormat("%016x%016x", rng(), rng()));
}

// The JSON reader's message for an integer out of range (json_fields.cc).
absl::Status IntOutOfRange(std::string_view name, int64_t v, int64_t min,
                           int64_t max) {
  return InvalidParam(
      name, absl::StrCat("'", std::string(name), "' must be in [", min, ", ",
                         max, "], got ", v));
}

// client.proto's SamplingParams -> SamplingOptions (max_tokens aside). Maps
// the proto's "0 = default" conventions; the ranges are checked afterwards by
// ValidateSamplingOptions, the HTTP path's limits.
absl::StatusOr<SamplingOptions> ToSamplingOptions(
    const proto::SamplingParams& p, const ParseOptions& options) {
  SamplingOptions s;
  s.temperature = p.temperature();
  s.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  if (p.top_k() < -1 || p.top_k() > kInt32Max) {
    return IntOutOfRange("top_k", p.top_k(), -1, kInt32Max);
  }
  s.top_k = static_cast<int32_t>(p.top_k());
  if (p.has_seed()) s.seed = p.seed();
  for (const std::string& stop : p.stop()) {
    if (!stop.empty()) s.stop.push_back(stop);  // as the JSON reader does
  }
  s.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  s.ignore_eos = p.ignore_eos();
  // Unset means none: proto3 would otherwise read it as 0, asking every
  // request for the sampled token's log-prob.
  const int32_t top_logprobs = p.has_top_logprobs() ? p.top_logprobs() : -1;
  if (top_logprobs < -1 || top_logprobs > options.max_logprobs) {
    return IntOutOfRange("top_logprobs", top_logprobs, -1, options.max_logprobs);
  }
  s.logprobs = top_logprobs;
  for (const auto& [id, bias] : p.logit_bias()) s.logit_bias[id] = bias;
  switch (p.constraint_case()) {
    case proto::SamplingParams::kJsonSchema: {
      auto schema = structured::CompiledSchema::Parse(p.json_schema());
      if (!schema.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'json_schema': unsupported JSON Schema: ", schema.status().message()));
      }
      s.json_schema = *std::move(schema);
      break;
    }
    case proto::SamplingParams::kJsonObject:
      s.json_object = p.json_object();
      break;
    case proto::SamplingParams::kChoice: {
      const std::vector<std::string> choices(p.choice().choices().begin(),
                                             p.choice().choices().end());
      auto schema = structured::CompiledSchema::Choice(choices);
      if (!schema.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("'choice': ", schema.status().message()));
      }
      s.json_schema = *std::move(schema);
      break;
    }
    case proto::SamplingParams::CONSTRAINT_NOT_SET:
      break;
  }
  TANDEM_RETURN_IF_ERROR(ValidateSamplingOptions(s, options));
  return s;
}

// One streamed message from one backend event. Log-prob alternatives are
// cut to the `top_logprobs` asked for, as the HTTP responses do.
proto::GenerateResponse ToResponse(const GenerationEvent& e,
                                   int32_t top_logprobs) {
  proto::GenerateResponse out;
  out.mutable_token_ids()->Add(e.token_ids.begin(), e.token_ids.end());
  // Deltas hold back partial characters, so this is a no-op but for a
  // misbehaving backend; proto3 strings must be valid UTF-8 or the client
  // fails to parse the message.
  out.set_text(SanitizeUtf8(e.text));
  if (top_logprobs >= 0) {
    for (const TokenLogprob& lp : e.logprobs) {
      out.add_logprobs(lp.logprob);
      proto::TopLogprobs* top = out.add_top_logprobs();
      const size_t n =
          std::min(lp.top.size(), static_cast<size_t>(top_logprobs));
      for (size_t k = 0; k < n; ++k) {
        proto::TokenLogprob* entry = top->add_entries();
        entry->set_id(lp.top[k].first);
        entry->set_logprob(lp.top[k].second);
      }
    }
  }
  return out;
}

// Aborts the backend request on every way out of Generate that leaves it
// unfinished (client cancel, broken stream, an exception): closing the inbox
// makes the backend's next callback return false, and Cancel covers the
// time while no event is in flight. A finished request is left alone.
class AbortUnfinished {
 public:
  AbortUnfinished(std::shared_ptr<SessionInbox> inbox,
                  GenerationBackend* backend, std::string id)
      : inbox_(std::move(inbox)), backend_(backend), id_(std::move(id)) {}
  ~AbortUnfinished() {
    if (!inbox_->Close().empty()) backend_->Cancel(id_);
  }
  AbortUnfinished(const AbortUnfinished&) = delete;
  AbortUnfinished& operator=(const AbortUnfinished&) = delete;

 private:
  std::shared_ptr<SessionInbox> inbox_;
  GenerationBackend* backend_;
  std::string id_;
};

}  // namespace

GrpcClientService::GrpcClientService(GrpcClientServiceOptions options,
                                     GenerationBackend* backend,
                                     const TextProcessor* text,
                                     Metrics* metrics)
    : options_(std::move(options)),
      backend_(backend),
      text_(text),
      metrics_(metrics) {}

absl::StatusOr<std::unique_ptr<GrpcClientService>> GrpcClientService::Create(
    GrpcClientServiceOptions options, GenerationBackend* backend,
    const TextProcessor* text, Metrics* metrics) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("GrpcClientService needs a backend");
  }
  if (options.parse.served_model_names.empty()) {
    return absl::InvalidArgumentError(
        "GrpcClientService needs at least one served model name");
  }
  if (options.parse.max_context <= 0)
    options.parse.max_context = backend->max_context();
  if (options.parse.vocab_size <= 0 && text != nullptr)
    options.parse.vocab_size = text->vocab_size();
  if (options.parse.max_context <= 0 || options.parse.vocab_size <= 0) {
    return absl::InvalidArgumentError(
        "max_context and vocab_size must be positive (without a text "
        "processor, set parse.vocab_size)");
  }
  if (options.default_max_tokens.has_value() &&
      *options.default_max_tokens < 1) {
    return absl::InvalidArgumentError("default_max_tokens must be >= 1");
  }
  if (options.poll_interval <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("poll_interval must be positive");
  }
  return std::unique_ptr<GrpcClientService>(
      new GrpcClientService(std::move(options), backend, text, metrics));
}

bool GrpcClientService::IsReady() const {
  return options_.ready ? options_.ready() : backend_->Ready();
}

absl::StatusOr<GenerationRequest> GrpcClientService::ToBackendRequest(
    const proto::GenerateRequest& request) const {
  const ParseOptions& parse = options_.parse;
  // proto3: an empty model is an absent one (the default model).
  std::optional<std::string> model;
  if (!request.model().empty()) model = request.model();
  TANDEM_RETURN_IF_ERROR(ResolveModelName(model, parse).status());
  if (request.echo()) {
    // GenerateResponse has no field for prompt log-probs, and the step
    // driver does not compute them: refuse rather than silently drop.
    return InvalidParam("echo",
                        "'echo' (prompt log-probs) is not supported by the "
                        "gRPC API");
  }
  TANDEM_ASSIGN_OR_RETURN(SamplingOptions sampling,
                          ToSamplingOptions(request.sampling(), parse));
  if (!sampling.stop.empty() && text_ == nullptr) {
    return InvalidParam("stop",
                        "This model is served without a tokenizer, so it "
                        "cannot match stop strings; use stop_token_ids");
  }
  const int64_t max_tokens = request.sampling().max_tokens();
  if (max_tokens < 0) {
    return InvalidParam("max_tokens",
                        absl::StrCat("'max_tokens' must be >= 1 (0: the "
                                     "default), got ",
                                     max_tokens));
  }

  // Checked after the cheap fields: encoding a long text costs more.
  ParsedRequest parsed;  // one prompt, for the HTTP path's context check
  PromptInput& prompt = parsed.prompts.emplace_back();
  switch (request.prompt_case()) {
    case proto::GenerateRequest::kText: {
      if (text_ == nullptr) {
        return InvalidParam("text",
                            "This model is served without a tokenizer: send "
                            "the prompt as token_ids");
      }
      // BOS etc. as the model's tokenizer config asks, like a
      // /v1/completions text prompt.
      auto ids = text_->Encode(request.text(), /*add_special=*/true);
      if (!ids.ok()) return WithParam(ids.status(), "text");
      prompt.ids = std::move(*ids);
      break;
    }
    case proto::GenerateRequest::kTokenIds: {
      const auto& ids = request.token_ids().ids();
      for (int i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= parse.vocab_size) {
          return IntOutOfRange(absl::StrCat("token_ids[", i, "]"), ids[i], 0,
                               parse.vocab_size - 1);
        }
      }
      prompt.ids.assign(ids.begin(), ids.end());
      break;
    }
    default:
      return MissingParam("prompt");
  }
  if (prompt.ids.empty()) {
    return InvalidParam("prompt", "The prompt must contain at least one token");
  }
  parsed.sampling = sampling;
  TANDEM_RETURN_IF_ERROR(ResolveMaxTokens(
      max_tokens > 0 ? std::optional<int64_t>(max_tokens) : std::nullopt,
      options_.default_max_tokens, "prompt", "max_tokens", parse, &parsed));

  GenerationRequest out;
  out.request_id = NewGrpcRequestId();
  out.prompt_ids = std::move(prompt.ids);
  out.sampling = std::move(sampling);
  out.sampling.max_tokens = prompt.max_tokens;
  out.arrival_time = Clock::now();
  return out;
}

absl::Status GrpcClientService::RunGenerate(
    grpc::ServerContext* context, const proto::GenerateRequest& request,
    grpc::ServerWriter<proto::GenerateResponse>* writer) {
  const Clock::time_point arrival = Clock::now();
  if (!IsReady()) return absl::UnavailableError("The model is not ready yet.");
  TANDEM_ASSIGN_OR_RETURN(GenerationRequest g, ToBackendRequest(request));
  g.arrival_time = arrival;
  const std::string id = g.request_id;
  const int32_t top_logprobs = g.sampling.logprobs;
  const int64_t prompt_tokens = static_cast<int64_t>(g.prompt_ids.size());

  // The inbox (shared with the backend's callback, which may outlive this
  // call) queues events from the backend's thread for this one.
  auto inbox = std::make_shared<SessionInbox>(
      1, std::vector<int64_t>{prompt_tokens}, arrival, metrics_);
  absl::Status submitted = backend_->Submit(
      std::move(g),
      [inbox](const GenerationEvent& e) { return inbox->Push(0, e); });
  if (!submitted.ok()) {
    inbox->Close(/*count_aborts=*/false);
    return submitted;  // overload, unsupported option, ... as the backend says
  }
  AbortUnfinished abort_unfinished(inbox, backend_, id);

  int64_t completion_tokens = 0;
  while (true) {
    if (context->IsCancelled()) {
      return absl::CancelledError("the client cancelled the request");
    }
    auto events = inbox->Wait(options_.poll_interval);
    for (auto& [choice, e] : events) {
      completion_tokens += static_cast<int64_t>(e.token_ids.size());
      proto::GenerateResponse msg = ToResponse(e, top_logprobs);
      if (e.finished) {
        msg.set_finish_reason(
            e.status.ok() ? std::string(FinishReasonName(e.finish_reason))
                          : "error");
        msg.mutable_usage()->set_prompt_tokens(prompt_tokens);
        msg.mutable_usage()->set_completion_tokens(completion_tokens);
        if (e.cached_prompt_tokens >= 0) {
          msg.mutable_usage()->set_cached_prompt_tokens(e.cached_prompt_tokens);
        }
      } else if (msg.token_ids().empty() && msg.text().empty()) {
        continue;  // nothing to tell the client
      }
      if (!writer->Write(msg)) {
        return absl::CancelledError("the client stream is closed");
      }
      // A failure after acceptance ends the stream with its status (the
      // message above told the client how far it got).
      if (e.finished) return e.status;
    }
  }
}

grpc::Status GrpcClientService::Generate(
    grpc::ServerContext* context, const proto::GenerateRequest* request,
    grpc::ServerWriter<proto::GenerateResponse>* writer) {
  try {
    return ToGrpcStatus(RunGenerate(context, *request, writer));
  } catch (...) {
    // Nothing of ours throws; allocation might. Never let it reach gRPC.
    return grpc::Status(grpc::StatusCode::INTERNAL, "internal error");
  }
}

grpc::Status GrpcClientService::ListModels(
    grpc::ServerContext*, const proto::ListModelsRequest*,
    proto::ListModelsResponse* response) {
  for (const std::string& name : options_.parse.served_model_names) {
    proto::ModelInfo* m = response->add_models();
    m->set_id(name);
    m->set_max_context(options_.parse.max_context);
  }
  return grpc::Status::OK;
}

grpc::Status GrpcClientService::Health(grpc::ServerContext*,
                                       const proto::HealthRequest*,
                                       proto::HealthResponse* response) {
  const bool ready = IsReady();
  response->set_ready(ready);
  response->set_detail(ready ? "ready"
                             : "loading: the workers have not loaded the "
                               "model yet");
  return grpc::Status::OK;
}

}  // namespace tandem::frontend
