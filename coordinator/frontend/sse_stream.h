// Server-sent-event framing of a streaming response, as OpenAI sends it:
//   data: {"id":…,"object":"text_completion"|"chat.completion.chunk",
//          "created":…,"model":…,"choices":[{"index":i,…}]}\n\n
// The same id and created throughout. Chat: the first chunk of each choice
// carries delta {"role":"assistant","content":""}, then {"content":…}
// deltas; the last chunk of a choice has finish_reason. With include_usage
// every chunk has "usage":null and a final chunk with "choices":[] carries
// the usage. The stream ends with "data: [DONE]\n\n". Events that add no text,
// no log-probs and do not finish produce no chunk.
#ifndef TANDEM_COORDINATOR_FRONTEND_SSE_STREAM_H_
#define TANDEM_COORDINATOR_FRONTEND_SSE_STREAM_H_

#include <string>
#include <vector>

#include "coordinator/frontend/api_error.h"
#include "coordinator/frontend/reasoning_splitter.h"
#include "coordinator/frontend/response_common.h"
#include "coordinator/frontend/tool_call_extractor.h"

namespace tandem::frontend {

class SseStream {
 public:
  // `ctx`, `prompts` and `tp` must outlive the stream.
  SseStream(const ResponseContext& ctx, const std::vector<PromptInput>& prompts,
            const TextProcessor& tp);

  // Frames to send before any event (chat: the role chunks).
  std::string Start();
  // Frames for one event of `choice` (possibly none).
  std::string Event(size_t choice, const GenerationEvent& e);
  // The usage chunk (if asked for) and [DONE].
  std::string End();
  // An error event, as vLLM sends one mid-stream: data: {"error":{…}}.
  static std::string ErrorFrame(const ApiError& error);
  static std::string Frame(const ojson& chunk);

  Usage usage() const;
  bool AllFinished() const;

 private:
  ojson Chunk(ojson choices, bool usage_null) const;

  const ResponseContext& ctx_;
  const TextProcessor& tp_;
  std::vector<ChoiceState> choices_;
  std::vector<ReasoningSplitter> splitters_;  // one per choice
  std::vector<ToolCallExtractor> extractors_;  // one per choice
};

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_SSE_STREAM_H_
