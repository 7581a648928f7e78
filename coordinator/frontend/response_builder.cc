#include "coordinator/frontend/response_builder.h"

#include <utility>

#include "coordinator/frontend/reasoning_splitter.h"
#include "coordinator/frontend/tool_call_extractor.h"

namespace tandem::frontend {

ResponseBuilder::ResponseBuilder(const ResponseContext& ctx,
                                 const std::vector<PromptInput>& prompts,
                                 const TextProcessor& tp)
    : ctx_(ctx), tp_(tp) {
  choices_.reserve(prompts.size());
  for (const PromptInput& p : prompts) {
    choices_.push_back(Choice{ChoiceState(ctx, p), "", {}, "", nullptr});
  }
}

void ResponseBuilder::Add(size_t choice, const GenerationEvent& e) {
  if (choice >= choices_.size()) return;
  Choice& c = choices_[choice];
  if (c.state.finished()) return;
  ChoiceDelta d = c.state.Apply(e, tp_);
  c.text += d.text;
  for (auto& lp : d.logprobs) c.logprobs.push_back(std::move(lp));
  if (d.finished) {
    c.finish_reason = std::move(d.finish_reason);
    c.stop_reason = std::move(d.stop_reason);
  }
}

bool ResponseBuilder::AllFinished() const {
  for (const Choice& c : choices_) {
    if (!c.state.finished()) return false;
  }
  return true;
}

Usage ResponseBuilder::usage() const {
  Usage u;
  for (const Choice& c : choices_) {
    u.Add(c.state.prompt_tokens(), c.state.completion_tokens(), c.state.cached_prompt_tokens());
  }
  return u;
}

std::string ResponseBuilder::Json() const {
  const bool chat = ctx_.endpoint == Endpoint::kChat;
  LogprobFormatter fmt(tp_, ctx_);
  ojson body;
  body["id"] = ctx_.id;
  body["object"] = chat ? "chat.completion" : "text_completion";
  body["created"] = ctx_.created;
  body["model"] = ctx_.model;
  ojson choices = ojson::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    bool tool_calls = false;
    ojson choice;
    choice["index"] = i;
    if (chat) {
      ojson message;
      message["role"] = "assistant";
      // The answer's reasoning (--reasoning-parser) and tool calls
      // (--tool-call-parser) come out of its text; as vLLM's parsers, an
      // empty part reads null once either parser is on.
      ReasoningSplitter split(ctx_.reasoning_parser);
      ReasoningPiece a = split.Push(c.text), b = split.Flush();
      const std::string reasoning = a.reasoning + b.reasoning;
      ToolCallExtractor extract(ctx_.tool_call_parser);
      std::vector<ToolCall> calls;
      std::string content = extract.Push(a.content + b.content);
      content += extract.Finish(&calls);
      const bool parsed = ctx_.reasoning_parser != ReasoningParser::kNone || !calls.empty();
      message["content"] = parsed && content.empty() ? ojson(nullptr) : ojson(content);
      if (ctx_.reasoning_parser != ReasoningParser::kNone) {
        message["reasoning_content"] = reasoning.empty() ? ojson(nullptr) : ojson(reasoning);
      }
      if (!calls.empty()) message["tool_calls"] = ToolCallsJson(calls, /*with_index=*/false);
      tool_calls = !calls.empty();
      choice["message"] = std::move(message);
      choice["logprobs"] =
          ctx_.logprobs ? fmt.Chat(c.logprobs) : ojson(nullptr);
    } else {
      choice["text"] = c.text;
      int64_t offset = 0;
      choice["logprobs"] =
          ctx_.logprobs ? fmt.Completion(c.logprobs, &offset) : ojson(nullptr);
    }
    choice["finish_reason"] = tool_calls ? ojson(ctx_.calls_finish_as_stop ? "stop" : "tool_calls")
                              : c.finish_reason.empty() ? ojson(nullptr)
                                                        : ojson(c.finish_reason);
    choice["stop_reason"] = c.stop_reason;
    choices.push_back(std::move(choice));
  }
  body["choices"] = std::move(choices);
  body["usage"] = usage().ToJson();
  return DumpJson(body);
}

}  // namespace tandem::frontend
