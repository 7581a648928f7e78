#include "coordinator/frontend/tokenize_endpoints.h"

#include <limits>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "coordinator/frontend/api_error.h"
#include "coordinator/frontend/json_fields.h"
#include "coordinator/frontend/response_common.h"

namespace tandem::frontend {
namespace {

using nlohmann::json;

absl::Status CheckModel(const FieldReader& r, const ParseOptions& options) {
  TANDEM_ASSIGN_OR_RETURN(auto model, r.String("model"));
  return ResolveModelName(model, options).status();
}

}  // namespace

absl::StatusOr<std::string> TokenizeResponse(const json& body, const ParseOptions& options,
                                             const TextProcessor& text) {
  if (!body.is_object()) return WrongType("body", "a JSON object", JsonTypeName(body));
  FieldReader r(body);
  TANDEM_RETURN_IF_ERROR(CheckModel(r, options));
  TANDEM_ASSIGN_OR_RETURN(auto add_special, r.Bool("add_special_tokens"));
  TANDEM_ASSIGN_OR_RETURN(auto return_strs, r.Bool("return_token_strs"));
  const bool chat = r.Find("messages") != nullptr;
  if (chat == (r.Find("prompt") != nullptr)) {
    return InvalidParam(chat ? "prompt" : "messages",
                        "Give either 'prompt' (text) or 'messages' (a chat), not both");
  }
  std::string prompt;
  std::string_view param = "prompt";
  if (chat) {
    TANDEM_ASSIGN_OR_RETURN(RenderedChat rendered, RenderChatPrompt(body, text));
    prompt = std::move(rendered.text);
    param = "messages";
  } else {
    TANDEM_ASSIGN_OR_RETURN(auto p, r.String("prompt"));
    prompt = std::move(*p);
  }
  // vLLM's defaults: the model's BOS for text, none for a rendered chat
  // (its template writes the special tokens itself).
  auto ids = text.Encode(prompt, add_special.value_or(!chat));
  if (!ids.ok()) return WithParam(ids.status(), param);
  ojson out;
  out["count"] = ids->size();
  out["max_model_len"] = options.max_context;
  out["tokens"] = *ids;
  if (return_strs.value_or(false)) {
    ojson strs = ojson::array();
    for (int32_t id : *ids) strs.push_back(text.TokenPiece(id));
    out["token_strs"] = std::move(strs);
  } else {
    out["token_strs"] = nullptr;
  }
  return DumpJson(out);
}

absl::StatusOr<std::string> ApplyTemplateResponse(const json& body, const ParseOptions& options,
                                                  const TextProcessor& text) {
  if (!body.is_object()) return WrongType("body", "a JSON object", JsonTypeName(body));
  FieldReader r(body);
  TANDEM_RETURN_IF_ERROR(CheckModel(r, options));
  TANDEM_ASSIGN_OR_RETURN(RenderedChat rendered, RenderChatPrompt(body, text));
  ojson out;
  out["prompt"] = std::move(rendered.text);
  return DumpJson(out);
}

absl::StatusOr<std::string> DetokenizeResponse(const json& body, const ParseOptions& options,
                                               const TextProcessor& text) {
  if (!body.is_object()) return WrongType("body", "a JSON object", JsonTypeName(body));
  FieldReader r(body);
  TANDEM_RETURN_IF_ERROR(CheckModel(r, options));
  TANDEM_ASSIGN_OR_RETURN(auto tokens,
                          r.IntList("tokens", 0, std::max<int64_t>(options.vocab_size, 1) - 1));
  if (!tokens.has_value()) return MissingParam("tokens");
  const std::vector<int32_t> ids(tokens->begin(), tokens->end());
  auto decoded = text.Decode(ids);
  if (!decoded.ok()) return WithParam(decoded.status(), "tokens");
  ojson out;
  out["prompt"] = *std::move(decoded);
  return DumpJson(out);
}

}  // namespace tandem::frontend
