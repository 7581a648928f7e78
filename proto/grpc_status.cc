#include "proto/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

// Both enums are google.rpc.Code: OK = 0 ... UNAUTHENTICATED = 16.
constexpr int kMaxCode = 16;

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(s.code());
  if (code <= 0 || code > kMaxCode) {
    return grpc::Status(grpc::StatusCode::UNKNOWN, std::string(s.message()));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(code), std::string(s.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& s, absl::string_view context) {
  if (s.ok()) return absl::OkStatus();
  const int code = static_cast<int>(s.error_code());
  const absl::StatusCode c = code > 0 && code <= kMaxCode ? static_cast<absl::StatusCode>(code)
                                                          : absl::StatusCode::kUnknown;
  if (context.empty()) return absl::Status(c, s.error_message());
  return absl::Status(c, absl::StrCat(context, ": ", s.error_message()));
}

}  // namespace tandem
