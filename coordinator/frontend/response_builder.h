// Non-streaming responses: folds the events of every choice and builds the
// final "text_completion" / "chat.completion" body.
#ifndef TANDEM_COORDINATOR_FRONTEND_RESPONSE_BUILDER_H_
#define TANDEM_COORDINATOR_FRONTEND_RESPONSE_BUILDER_H_

#include <string>
#include <vector>

#include "coordinator/frontend/response_common.h"

namespace tandem::frontend {

class ResponseBuilder {
 public:
  // `ctx`, `prompts` and `tp` must outlive the builder.
  ResponseBuilder(const ResponseContext& ctx,
                  const std::vector<PromptInput>& prompts,
                  const TextProcessor& tp);

  void Add(size_t choice, const GenerationEvent& e);
  bool AllFinished() const;
  Usage usage() const;
  // The response body (call once every choice has finished).
  std::string Json() const;

 private:
  struct Choice {
    ChoiceState state;
    std::string text;
    std::vector<TokenLogprob> logprobs;
    std::string finish_reason;
    ojson stop_reason;
  };
  const ResponseContext& ctx_;
  const TextProcessor& tp_;
  std::vector<Choice> choices_;
};

}  // namespace tandem::frontend

#endif  // TANDEM_COORDINATOR_FRONTEND_RESPONSE_BUILDER_H_
