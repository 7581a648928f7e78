// Small JSON exchanges of the load generator with the server under test:
// /v1/models, /tokenize, /detokenize.
#ifndef TANDEM_COORDINATOR_LOADGEN_SERVER_EXCHANGE_H_
#define TANDEM_COORDINATOR_LOADGEN_SERVER_EXCHANGE_H_

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/loadgen/streaming_request.h"
#include "nlohmann/json.hpp"

namespace tandem::loadgen {

// POSTs `body` to `path` (GET when it is null) and returns the JSON answer.
// Unavailable when the server cannot be reached; FailedPrecondition for an
// HTTP error or an answer that is not JSON.
absl::StatusOr<nlohmann::json> Exchange(const ServerAddress& server, const std::string& path,
                                        const nlohmann::json& body);

}  // namespace tandem::loadgen

#endif  // TANDEM_COORDINATOR_LOADGEN_SERVER_EXCHANGE_H_
