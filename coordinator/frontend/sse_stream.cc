#include "coordinator/frontend/sse_stream.h"

#include <utility>

namespace tandem::frontend {

SseStream::SseStream(const ResponseContext& ctx,
                     const std::vector<PromptInput>& prompts,
                     const TextProcessor& tp)
    : ctx_(ctx), tp_(tp) {
  choices_.reserve(prompts.size());
  for (const PromptInput& p : prompts) {
    choices_.emplace_back(ctx, p);
    splitters_.emplace_back(ctx.endpoint == Endpoint::kChat ? ctx.reasoning_parser
                                                            : ReasoningParser::kNone);
    extractors_.emplace_back(ctx.endpoint == Endpoint::kChat ? ctx.tool_call_parser
                                                             : ToolCallParser::kNone);
  }
}

std::string SseStream::Frame(const ojson& chunk) {
  std::string s = "data: ";
  s += DumpJson(chunk);
  s += "\n\n";
  return s;
}

std::string SseStream::ErrorFrame(const ApiError& error) {
  return "data: " + ErrorBody(error) + "\n\n";
}

ojson SseStream::Chunk(ojson choices, bool usage_null) const {
  const bool chat = ctx_.endpoint == Endpoint::kChat;
  ojson c;
  c["id"] = ctx_.id;
  c["object"] = chat ? "chat.completion.chunk" : "text_completion";
  c["created"] = ctx_.created;
  c["model"] = ctx_.model;
  c["choices"] = std::move(choices);
  if (usage_null) c["usage"] = nullptr;
  return c;
}

std::string SseStream::Start() {
  if (ctx_.endpoint != Endpoint::kChat) return "";
  std::string out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    ojson delta;
    delta["role"] = "assistant";
    delta["content"] = "";
    ojson choice;
    choice["index"] = i;
    choice["delta"] = std::move(delta);
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = nullptr;
    out += Frame(Chunk(ojson::array({std::move(choice)}), ctx_.include_usage));
  }
  return out;
}

std::string SseStream::Event(size_t index, const GenerationEvent& e) {
  if (index >= choices_.size() || choices_[index].finished()) return "";
  ChoiceState& state = choices_[index];
  ChoiceDelta d = state.Apply(e, tp_);
  const bool has_logprobs = ctx_.logprobs && !d.logprobs.empty();
  // The text's reasoning and content parts (all content without a parser).
  ReasoningPiece piece = splitters_[index].Push(d.text);
  if (d.finished) {
    ReasoningPiece rest = splitters_[index].Flush();
    piece.reasoning += rest.reasoning;
    piece.content += rest.content;
  }
  // Content up to a tool call streams; the calls come whole at the end,
  // but forced ones, which stream as they are written.
  std::vector<ToolCallDelta> deltas;
  piece.content = extractors_[index].Push(piece.content, &deltas);
  std::vector<ToolCall> calls;
  if (d.finished) piece.content += extractors_[index].Finish(&calls);
  const bool called = !calls.empty() || (d.finished && extractors_[index].streamed_calls());
  if (piece.reasoning.empty() && piece.content.empty() && deltas.empty() && !has_logprobs &&
      !d.finished) {
    return "";
  }

  LogprobFormatter fmt(tp_, ctx_);
  ojson choice;
  choice["index"] = index;
  if (ctx_.endpoint == Endpoint::kChat) {
    ojson delta = ojson::object();
    if (!piece.reasoning.empty()) delta["reasoning_content"] = piece.reasoning;
    if (!piece.content.empty() || (has_logprobs && piece.reasoning.empty())) {
      delta["content"] = piece.content;
    }
    if (!deltas.empty()) delta["tool_calls"] = ToolCallDeltasJson(deltas);
    if (!calls.empty()) delta["tool_calls"] = ToolCallsJson(calls, /*with_index=*/true);
    choice["delta"] = std::move(delta);
    choice["logprobs"] = has_logprobs ? fmt.Chat(d.logprobs) : ojson(nullptr);
  } else {
    choice["text"] = piece.content;
    if (has_logprobs) {
      int64_t offset = state.text_offset();
      choice["logprobs"] = fmt.Completion(d.logprobs, &offset);
      state.set_text_offset(offset);
    } else {
      choice["logprobs"] = nullptr;
    }
  }
  choice["finish_reason"] = called       ? ojson(ctx_.calls_finish_as_stop ? "stop" : "tool_calls")
                            : d.finished ? ojson(d.finish_reason)
                                         : ojson(nullptr);
  choice["stop_reason"] = d.stop_reason;
  return Frame(Chunk(ojson::array({std::move(choice)}), ctx_.include_usage));
}

std::string SseStream::End() {
  std::string out;
  if (ctx_.include_usage) {
    ojson c = Chunk(ojson::array(), false);
    c["usage"] = usage().ToJson();
    out += Frame(c);
  }
  out += "data: [DONE]\n\n";
  return out;
}

Usage SseStream::usage() const {
  Usage u;
  for (const ChoiceState& c : choices_) {
    u.Add(c.prompt_tokens(), c.completion_tokens(), c.cached_prompt_tokens());
  }
  return u;
}

bool SseStream::AllFinished() const {
  for (const ChoiceState& c : choices_) {
    if (!c.finished()) return false;
  }
  return true;
}

}  // namespace tandem::frontend
