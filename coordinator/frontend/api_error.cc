#include "coordinator/frontend/api_error.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tandem::frontend {
namespace {

constexpr std::string_view kParamUrl = "tandem.frontend/param";
constexpr std::string_view kCodeUrl = "tandem.frontend/code";

std::optional<std::string> Payload(const absl::Status& status,
                                   std::string_view url) {
  auto p = status.GetPayload(absl::string_view(url.data(), url.size()));
  if (!p.has_value()) return std::nullopt;
  return std::string(*p);
}

}  // namespace

absl::Status WithParam(absl::Status status, std::string_view param) {
  if (!status.ok() && !param.empty())
    status.SetPayload(absl::string_view(kParamUrl.data(), kParamUrl.size()),
                      absl::Cord(std::string(param)));
  return status;
}

absl::Status WithCode(absl::Status status, std::string_view code) {
  if (!status.ok() && !code.empty())
    status.SetPayload(absl::string_view(kCodeUrl.data(), kCodeUrl.size()),
                      absl::Cord(std::string(code)));
  return status;
}

std::optional<std::string> ParamOf(const absl::Status& status) {
  return Payload(status, kParamUrl);
}
std::optional<std::string> CodeOf(const absl::Status& status) {
  return Payload(status, kCodeUrl);
}

absl::Status InvalidParam(std::string_view param, std::string_view message,
                          std::string_view code) {
  return WithCode(
      WithParam(absl::InvalidArgumentError(std::string(message)), param), code);
}

absl::Status WrongType(std::string_view param, std::string_view expected,
                       std::string_view got) {
  return InvalidParam(
      param,
      absl::StrCat("'", std::string(param), "' must be ", std::string(expected),
                   ", got ", std::string(got)),
      "invalid_type");
}

absl::Status MissingParam(std::string_view param) {
  return InvalidParam(param,
                      absl::StrCat("'", std::string(param), "' is required"),
                      "missing_required_parameter");
}

absl::Status ModelNotFound(std::string_view model) {
  return WithCode(
      WithParam(absl::NotFoundError(absl::StrCat(
                    "The model `", std::string(model), "` does not exist.")),
                "model"),
      "model_not_found");
}

absl::Status ContextLengthExceeded(std::string_view param,
                                   std::string_view message) {
  return InvalidParam(param, message, "context_length_exceeded");
}

bool IsOverload(const absl::Status& status) {
  return status.code() == absl::StatusCode::kResourceExhausted ||
         status.code() == absl::StatusCode::kUnavailable;
}

ApiError ToApiError(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  e.param = ParamOf(status);
  e.code = CodeOf(status);
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      e.http_status = 400;
      e.type = "invalid_request_error";
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      e.type = "authentication_error";
      if (!e.code) e.code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      e.http_status = 403;
      e.type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "invalid_request_error";
      if (!e.code) e.code = "not_found";
      break;
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "server_error";
      if (!e.code) e.code = "overloaded";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e.http_status = 504;
      e.type = "server_error";
      if (!e.code) e.code = "timeout";
      break;
    case absl::StatusCode::kCancelled:
      e.http_status = 499;
      e.type = "invalid_request_error";
      if (!e.code) e.code = "cancelled";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      if (!e.code) e.code = "internal_error";
      break;
  }
  if (e.message.empty()) e.message = e.type;
  return e;
}

std::string ErrorBody(const ApiError& error) {
  nlohmann::ordered_json inner;
  inner["message"] = error.message;
  inner["type"] = error.type;
  inner["param"] = error.param ? nlohmann::ordered_json(*error.param) : nullptr;
  inner["code"] = error.code ? nlohmann::ordered_json(*error.code) : nullptr;
  nlohmann::ordered_json body;
  body["error"] = std::move(inner);
  return body.dump(-1, ' ', false,
                   nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace tandem::frontend
