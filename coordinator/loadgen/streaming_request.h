// One streamed benchmark request to an OpenAI-compatible server: it sends
// the body with "stream": true and stream_options.include_usage, reads the
// SSE events as they arrive, and times the chunks that carry text: the
// first gives the time to first token, each later one an inter-token
// latency (as `vllm bench serve` counts them), the usage chunk the token
// counts.
#ifndef TANDEM_COORDINATOR_LOADGEN_STREAMING_REQUEST_H_
#define TANDEM_COORDINATOR_LOADGEN_STREAMING_REQUEST_H_

#include <string>

#include "coordinator/loadgen/request_record.h"
#include "nlohmann/json.hpp"

namespace tandem::loadgen {

struct ServerAddress {
  std::string base_url;  // "http://127.0.0.1:8000"
  std::string api_key;   // sent as "Authorization: Bearer" when not empty
  int timeout_s = 600;   // for each request
};

enum class ApiEndpoint { kCompletions, kChat };

// Runs the request: `body` is the JSON request without the stream fields.
// A transport failure, an HTTP error or an error event in the stream gives
// ok = false with the reason.
RequestRecord RunStreamingRequest(const ServerAddress& server, ApiEndpoint endpoint,
                                  nlohmann::json body, int64_t dataset_prompt_len);

// Incremental parser of an SSE body: feed it bytes as they arrive; each
// complete "data: ..." event goes to the callback (the payload, without
// "data: "). Comments and other fields are skipped.
class SseParser {
 public:
  template <typename F>
  void Feed(const char* data, size_t size, F&& on_data) {
    buffer_.append(data, size);
    size_t end;
    while ((end = buffer_.find("\n\n")) != std::string::npos) {
      std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      size_t pos = 0;
      while (pos <= event.size()) {
        size_t nl = event.find('\n', pos);
        if (nl == std::string::npos) nl = event.size();
        std::string_view line(event.data() + pos, nl - pos);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.substr(0, 5) == "data:") {
          line.remove_prefix(5);
          if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
          on_data(line);
        }
        pos = nl + 1;
      }
    }
  }

 private:
  std::string buffer_;
};

}  // namespace tandem::loadgen

#endif  // TANDEM_COORDINATOR_LOADGEN_STREAMING_REQUEST_H_
