// POST /tokenize and POST /detokenize, as vLLM serves them, and llama.cpp's
// POST /apply-template (outside /v1, so
// not behind --api-key, as in vLLM):
//
//   /tokenize    {"prompt": "text", "add_special_tokens": true}
//             or {"messages": [...], "add_generation_prompt": true, "tools": ...,
//                 "add_special_tokens": false}   (the chat prompt, rendered as
//                 /v1/chat/completions renders it)
//             -> {"count": N, "max_model_len": L, "tokens": [...],
//                 "token_strs": null | ["▁Hello", ...]}   (return_token_strs)
//   /detokenize  {"tokens": [...]} -> {"prompt": "text"}
//   /apply-template (llama.cpp's) {"messages": [...], ...} -> {"prompt": "text"}
//                the chat prompt as text, rendered as for /v1/chat/completions
//
// "model", when given, must name the served model (404 otherwise). The
// counts let a client check a prompt against max_model_len before sending.
#ifndef TANDEM_COORDINATOR_FRONTEND_TOKENIZE_ENDPOINTS_H_
#define TANDEM_COORDINATOR_FRONTEND_TOKENIZE_ENDPOINTS_H_

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/frontend/generation_backend.h"
#include "coordinator/frontend/request_parser.h"
#include "nlohmann/json.hpp"

namespace tandem::frontend {

// The response body, or the error (with its param) for the request.
absl::StatusOr<std::string> TokenizeResponse(const nlohmann::json& body,
                                             const ParseOptions& options,
                                             const TextProcessor& text);
absl::StatusOr<std::string> ApplyTemplateResponse(const nlohmann::json& body,
                                                  const ParseOptions& options,
                                                  const TextProcessor& text);
absl::StatusOr<std::string> DetokenizeResponse(const nlohmann::json& body,
                                               const ParseOptions& options,
                                               const TextProcessor& text);

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_TOKENIZE_ENDPOINTS_H_
