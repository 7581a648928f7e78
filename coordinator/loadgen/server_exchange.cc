#include "coordinator/loadgen/server_exchange.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"

namespace tandem::loadgen {

using nlohmann::json;

absl::StatusOr<json> Exchange(const ServerAddress& server, const std::string& path,
                              const json& body) {
  httplib::Client client(server.base_url);
  client.set_connection_timeout(30, 0);
  client.set_read_timeout(server.timeout_s, 0);
  httplib::Headers headers;
  if (!server.api_key.empty()) headers.emplace("Authorization", "Bearer " + server.api_key);
  httplib::Result res = body.is_null()
                            ? client.Get(path, headers)
                            : client.Post(path, headers, body.dump(), "application/json");
  if (!res) {
    return absl::UnavailableError(absl::StrCat("cannot reach ", server.base_url, path, ": ",
                                               httplib::to_string(res.error())));
  }
  if (res->status != 200) {
    return absl::FailedPreconditionError(
        absl::StrCat(server.base_url, path, " answered HTTP ", res->status, ": ", res->body));
  }
  json j = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::FailedPreconditionError(absl::StrCat(path, " answered with no JSON"));
  }
  return j;
}

}  // namespace tandem::loadgen
