// absl::Status <-> grpc::Status: the one place where the two meet. The codes
// are the same google.rpc.Code numbers on both sides; messages pass through.
// Servers return ToGrpcStatus(s) from their handlers; clients turn a failed
// call into FromGrpcStatus(s, "what and where") and carry on in absl.
#ifndef TANDEM_PROTO_GRPC_STATUS_H_
#define TANDEM_PROTO_GRPC_STATUS_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace tandem {

grpc::Status ToGrpcStatus(const absl::Status& s);

// `context` (e.g. "Step on 10.0.0.2:7001"), when given, prefixes the message
// as "context: message".
absl::Status FromGrpcStatus(const grpc::Status& s, absl::string_view context = {});

}  // namespace tandem

#endif  // TANDEM_PROTO_GRPC_STATUS_H_
