// Status helpers used across Tandem. Errors are absl::Status; nothing throws.
#ifndef TANDEM_COMMON_STATUS_MACROS_H_
#define TANDEM_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TANDEM_CONCAT_INNER_(a, b) a##b
#define TANDEM_CONCAT_(a, b) TANDEM_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` yields a non-OK status.
#define TANDEM_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status tandem_status_ = (expr);          \
    if (!tandem_status_.ok()) return tandem_status_; \
  } while (0)

// `TANDEM_ASSIGN_OR_RETURN(auto x, Foo());` binds the value or returns the error.
#define TANDEM_ASSIGN_OR_RETURN(lhs, expr) \
  TANDEM_ASSIGN_OR_RETURN_IMPL_(TANDEM_CONCAT_(tandem_statusor_, __LINE__), lhs, expr)

#define TANDEM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

// Always-on invariant check for programming errors (never for bad input).
#define TANDEM_CHECK(cond)                                              \
  do {                                                                  \
    if (!(cond)) ::tandem::internal::CheckFailed(__FILE__, __LINE__, #cond); \
  } while (0)

namespace tandem::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond);
}  // namespace tandem::internal

#endif  // TANDEM_COMMON_STATUS_MACROS_H_
