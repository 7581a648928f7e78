// OpenAI-style API errors. Internally errors are absl::Status; the offending
// parameter and the OpenAI error code ride along as status payloads, so that
// parsers can return plain absl::Status and the HTTP layer can still answer
//   {"error":{"message":…,"type":…,"param":…,"code":…}}
// with the right HTTP status.
#ifndef TANDEM_COORDINATOR_FRONTEND_API_ERROR_H_
#define TANDEM_COORDINATOR_FRONTEND_API_ERROR_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace tandem::frontend {

// Status constructors. `param` is the request field at fault ("max_tokens",
// "messages[1].content"); `code` the OpenAI error code ("invalid_type").
absl::Status InvalidParam(std::string_view param, std::string_view message,
                          std::string_view code = "invalid_value");
absl::Status WrongType(std::string_view param, std::string_view expected,
                       std::string_view got);
absl::Status MissingParam(std::string_view param);
absl::Status ModelNotFound(std::string_view model);  // kNotFound -> 404
absl::Status ContextLengthExceeded(std::string_view param,
                                   std::string_view message);

// Attaches param/code to any status (no-op on OK).
absl::Status WithParam(absl::Status status, std::string_view param);
absl::Status WithCode(absl::Status status, std::string_view code);
std::optional<std::string> ParamOf(const absl::Status& status);
std::optional<std::string> CodeOf(const absl::Status& status);

struct ApiError {
  int http_status = 500;
  std::string message;
  std::string type;  // invalid_request_error, authentication_error, ...
  std::optional<std::string> param;
  std::optional<std::string> code;
};

// Status -> HTTP: InvalidArgument/OutOfRange/FailedPrecondition 400,
// Unauthenticated 401, PermissionDenied 403, NotFound 404,
// ResourceExhausted/Unavailable 503 (overload; callers add Retry-After),
// DeadlineExceeded 504, Cancelled 499, others 500.
ApiError ToApiError(const absl::Status& status);

// The JSON error body (never throws; invalid UTF-8 in messages is replaced).
std::string ErrorBody(const ApiError& error);

// True for statuses that mean "try again later" (503 + Retry-After).
bool IsOverload(const absl::Status& status);

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_API_ERROR_H_
