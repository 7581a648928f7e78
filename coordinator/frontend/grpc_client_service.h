// The client gRPC API (proto/client.proto, service tandem.proto.Tandem) over
// the same GenerationBackend / TextProcessor as the HTTP frontend:
//   Generate    server-streaming: one GenerateResponse per backend event
//               (token ids, text delta, log-probs); the last one carries
//               finish_reason and usage.
//   ListModels  the served model names with max_context.
//   Health      readiness (every worker has loaded its share).
// Validation is the HTTP path's (request_parser.h): the same ranges, the same
// context-length check, the same messages. Status codes: bad input
// INVALID_ARGUMENT, unknown model NOT_FOUND, overload RESOURCE_EXHAUSTED /
// UNAVAILABLE as the backend says, not ready UNAVAILABLE. A request that
// fails after it was accepted ends the stream with a last message
// (finish_reason "error", usage) and then the error status, never OK.
// A client that cancels (or whose stream breaks) aborts its backend request
// at once, so its KV is freed.
//
// Uses the synchronous gRPC API: Generate holds its gRPC thread while it
// waits for events, so the server's thread limit (ResourceQuota) bounds the
// concurrent streams. Handlers never throw.
#ifndef TANDEM_COORDINATOR_FRONTEND_GRPC_CLIENT_SERVICE_H_
#define TANDEM_COORDINATOR_FRONTEND_GRPC_CLIENT_SERVICE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "coordinator/frontend/generation_backend.h"
#include "coordinator/frontend/metrics.h"
#include "coordinator/frontend/request_parser.h"
#include "proto/client.grpc.pb.h"

namespace tandem::frontend {

struct GrpcClientServiceOptions {
  // Used: served_model_names (the first answers a request with model ""),
  // max_context and vocab_size (0: from the backend / text processor),
  // max_logprobs, max_stop_sequences. Not used: `defaults` and the
  // completion defaults, since proto3 scalars have no presence and 0 means
  // what client.proto says (temperature 0 = greedy, top_p 0 = all, ...).
  // The same ParseOptions as the HTTP server's can be passed.
  ParseOptions parse;
  // max_tokens for a request that leaves it 0; nullopt: the rest of the
  // context (clipped to fit beside the prompt either way).
  std::optional<int64_t> default_max_tokens;
  // Readiness for Health and for admitting Generate; null: backend->Ready().
  std::function<bool()> ready;
  // How often a waiting Generate checks whether its client has cancelled.
  std::chrono::milliseconds poll_interval{50};
};

class GrpcClientService final : public proto::Tandem::Service {
 public:
  // `backend` (required), `text` (null: the model has no tokenizer; text
  // prompts and stop strings are then rejected, token-id prompts work) and
  // `metrics` (optional: the HTTP server's, to count gRPC requests in the
  // same token / latency series) must outlive the service. InvalidArgument
  // without a served name, or when max_context / vocab_size cannot be known.
  static absl::StatusOr<std::unique_ptr<GrpcClientService>> Create(
      GrpcClientServiceOptions options, GenerationBackend* backend,
      const TextProcessor* text, Metrics* metrics = nullptr);

  grpc::Status Generate(
      grpc::ServerContext* context, const proto::GenerateRequest* request,
      grpc::ServerWriter<proto::GenerateResponse>* writer) override;
  grpc::Status ListModels(grpc::ServerContext* context,
                          const proto::ListModelsRequest* request,
                          proto::ListModelsResponse* response) override;
  grpc::Status Health(grpc::ServerContext* context,
                      const proto::HealthRequest* request,
                      proto::HealthResponse* response) override;

  // The backend request a GenerateRequest becomes (validated, max_tokens
  // resolved); the status the RPC fails with otherwise. Public for tests.
  absl::StatusOr<GenerationRequest> ToBackendRequest(
      const proto::GenerateRequest& request) const;

 private:
  GrpcClientService(GrpcClientServiceOptions options,
                    GenerationBackend* backend, const TextProcessor* text,
                    Metrics* metrics);
  bool IsReady() const;
  absl::Status RunGenerate(grpc::ServerContext* context,
                           const proto::GenerateRequest& request,
                           grpc::ServerWriter<proto::GenerateResponse>* writer);

  GrpcClientServiceOptions options_;
  GenerationBackend* backend_;
  const TextProcessor* text_;
  Metrics* metrics_;
};

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_GRPC_CLIENT_SERVICE_H_
