#include "coordinator/loadgen/streaming_request.h"

#include <httplib.h>

#include <chrono>

#include "absl/strings/str_cat.h"

namespace tandem::loadgen {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The text a chunk adds: choices[0].text (completions) or
// choices[0].delta.content / reasoning_content (chat).
std::string ChunkText(const json& chunk, ApiEndpoint endpoint) {
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return "";
  const json& c = (*choices)[0];
  if (endpoint == ApiEndpoint::kCompletions) {
    const auto t = c.find("text");
    return t != c.end() && t->is_string() ? t->get<std::string>() : "";
  }
  const auto d = c.find("delta");
  if (d == c.end() || !d->is_object()) return "";
  std::string out;
  for (const char* key : {"reasoning_content", "content"}) {
    const auto t = d->find(key);
    if (t != d->end() && t->is_string()) out += t->get<std::string>();
  }
  if (d->contains("tool_calls")) out += " ";  // a call is output too
  return out;
}

// (json::value would throw on a field of another type: a server's answer
// is not trusted to be well formed.)
int64_t IntField(const json& object, const char* key, int64_t otherwise) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : otherwise;
}

}  // namespace

RequestRecord RunStreamingRequest(const ServerAddress& server, ApiEndpoint endpoint, json body,
                                  int64_t dataset_prompt_len) {
  RequestRecord r;
  r.prompt_len = dataset_prompt_len;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  httplib::Client client(server.base_url);
  client.set_connection_timeout(server.timeout_s, 0);
  client.set_read_timeout(server.timeout_s, 0);
  client.set_write_timeout(server.timeout_s, 0);
  httplib::Headers headers;
  if (!server.api_key.empty()) headers.emplace("Authorization", "Bearer " + server.api_key);

  SseParser sse;
  int64_t text_chunks = 0;
  bool usage_seen = false;
  std::string error_body;
  Clock::time_point last;
  const Clock::time_point start = Clock::now();
  auto on_data = [&](std::string_view data) {
    if (data == "[DONE]") return;
    const json chunk = json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (chunk.is_discarded()) {
      if (r.error.empty()) r.error = absl::StrCat("not JSON in the stream: ", std::string(data));
      return;
    }
    if (chunk.contains("error")) {
      if (r.error.empty()) r.error = chunk["error"].dump();
      return;
    }
    const auto usage = chunk.find("usage");
    if (usage != chunk.end() && usage->is_object()) {
      usage_seen = true;
      r.prompt_len = IntField(*usage, "prompt_tokens", r.prompt_len);
      r.output_len = IntField(*usage, "completion_tokens", 0);
    }
    if (ChunkText(chunk, endpoint).empty()) return;
    const Clock::time_point now = Clock::now();
    if (text_chunks == 0) {
      r.ttft_s = Seconds(now - start);
    } else {
      r.itl_s.push_back(Seconds(now - last));
    }
    last = now;
    ++text_chunks;
  };

  int status = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = endpoint == ApiEndpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
  req.headers = headers;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, size);
      return true;
    }
    sse.Feed(data, size, on_data);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = client.send(req, res, err);
  r.e2el_s = Seconds(Clock::now() - start);
  if (!sent) {
    r.error = absl::StrCat("request failed: ", httplib::to_string(err));
    return r;
  }
  if (status != 200) {
    r.error = absl::StrCat("HTTP ", status, ": ", error_body);
    return r;
  }
  if (!r.error.empty()) return r;
  if (!usage_seen) r.output_len = text_chunks;
  r.ok = true;
  return r;
}

}  // namespace tandem::loadgen
