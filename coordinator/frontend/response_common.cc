#include "coordinator/frontend/response_common.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::frontend {
namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 0 if ill-formed.
size_t ValidSequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

std::string DumpJson(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = ValidSequenceLength(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

int64_t Utf8Length(std::string_view s) {
  int64_t count = 0;
  for (size_t i = 0; i < s.size();) {
    size_t n = ValidSequenceLength(s, i);
    i += n == 0 ? 1 : n;
    ++count;
  }
  return count;
}

ResponseContext ResponseContext::From(const ParsedRequest& req, std::string id,
                                      int64_t created) {
  ResponseContext c;
  c.endpoint = req.endpoint;
  c.id = std::move(id);
  c.created = created;
  c.model = req.model;
  c.echo = req.echo;
  c.logprobs = req.logprobs;
  c.top_logprobs = req.top_logprobs;
  c.as_token_ids = req.return_tokens_as_token_ids;
  c.include_usage = req.include_usage;
  c.reasoning_parser = req.reasoning_parser;
  c.tool_call_parser = req.tool_call_parser;
  c.calls_finish_as_stop = req.tool_choice_named;
  return c;
}

ojson Usage::ToJson() const {
  ojson u;
  u["prompt_tokens"] = prompt_tokens;
  u["completion_tokens"] = completion_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  if (cached_tokens >= 0) {
    ojson details;
    details["cached_tokens"] = cached_tokens;
    u["prompt_tokens_details"] = std::move(details);
  }
  return u;
}

void Usage::Add(int64_t prompt, int64_t completion, int64_t cached) {
  prompt_tokens += prompt;
  completion_tokens += completion;
  if (cached >= 0) cached_tokens = std::max<int64_t>(cached_tokens, 0) + cached;
}

ChoiceState::ChoiceState(const ResponseContext& ctx, const PromptInput& prompt)
    : ctx_(ctx),
      prompt_(prompt),
      prompt_tokens_(static_cast<int64_t>(prompt.ids.size())) {}

ChoiceDelta ChoiceState::Apply(const GenerationEvent& e,
                               const TextProcessor& tp) {
  ChoiceDelta d;
  if (!started_) {
    started_ = true;
    if (ctx_.echo && ctx_.endpoint == Endpoint::kCompletions) {
      if (prompt_.text.has_value()) {
        d.text = *prompt_.text;
      } else {
        auto decoded = tp.Decode(prompt_.ids);
        if (decoded.ok()) d.text = std::move(*decoded);
      }
      if (ctx_.logprobs) d.logprobs = e.prompt_logprobs;
    }
  }
  d.text += e.text;
  completion_tokens_ += static_cast<int64_t>(e.token_ids.size());
  if (ctx_.logprobs) {
    d.logprobs.insert(d.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
  }
  if (e.finished) {
    finished_ = true;
    cached_prompt_tokens_ = e.cached_prompt_tokens;
    d.finished = true;
    d.finish_reason = std::string(FinishReasonName(e.finish_reason));
    if (e.stop_string.has_value()) {
      d.stop_reason = *e.stop_string;
    } else if (e.stop_token_id.has_value()) {
      d.stop_reason = *e.stop_token_id;
    }
  }
  return d;
}

ojson LogprobValue(float lp) {
  if (std::isnan(lp)) return nullptr;
  if (std::isinf(lp)) return lp < 0 ? -9999.0 : 0.0;
  return std::max(static_cast<double>(lp), -9999.0);
}

std::string LogprobFormatter::TokenString(int32_t id) const {
  if (ctx_.as_token_ids) return absl::StrCat("token_id:", id);
  return SanitizeUtf8(tp_.TokenText(id));
}

std::string LogprobFormatter::TokenBytes(int32_t id) const {
  if (ctx_.as_token_ids) return absl::StrCat("token_id:", id);
  return tp_.TokenText(id);
}

ojson LogprobFormatter::Completion(const std::vector<TokenLogprob>& entries,
                                   int64_t* offset) const {
  ojson tokens = ojson::array(), token_logprobs = ojson::array(),
        top = ojson::array(), offsets = ojson::array();
  for (const TokenLogprob& lp : entries) {
    std::string tok = TokenString(lp.id);
    tokens.push_back(tok);
    token_logprobs.push_back(LogprobValue(lp.logprob));
    offsets.push_back(*offset);
    *offset += Utf8Length(tok);
    if (std::isnan(lp.logprob)) {
      top.push_back(nullptr);
      continue;
    }
    ojson alts = ojson::object();
    const size_t n =
        std::min(lp.top.size(), static_cast<size_t>(ctx_.top_logprobs));
    for (size_t k = 0; k < n; ++k) {
      std::string key = TokenString(lp.top[k].first);
      if (!alts.contains(key)) alts[key] = LogprobValue(lp.top[k].second);
    }
    if (!alts.contains(tok)) alts[tok] = LogprobValue(lp.logprob);
    top.push_back(std::move(alts));
  }
  ojson out;
  out["text_offset"] = std::move(offsets);
  out["token_logprobs"] = std::move(token_logprobs);
  out["tokens"] = std::move(tokens);
  out["top_logprobs"] = std::move(top);
  return out;
}

namespace {
ojson BytesArray(const std::string& bytes) {
  ojson arr = ojson::array();
  for (unsigned char c : bytes) arr.push_back(static_cast<int>(c));
  return arr;
}
}  // namespace

ojson LogprobFormatter::Chat(const std::vector<TokenLogprob>& entries) const {
  ojson content = ojson::array();
  for (const TokenLogprob& lp : entries) {
    ojson item;
    item["token"] = TokenString(lp.id);
    item["logprob"] = LogprobValue(lp.logprob);
    item["bytes"] = BytesArray(TokenBytes(lp.id));
    ojson alts = ojson::array();
    const size_t n =
        std::min(lp.top.size(), static_cast<size_t>(ctx_.top_logprobs));
    for (size_t k = 0; k < n; ++k) {
      ojson alt;
      alt["token"] = TokenString(lp.top[k].first);
      alt["logprob"] = LogprobValue(lp.top[k].second);
      alt["bytes"] = BytesArray(TokenBytes(lp.top[k].first));
      alts.push_back(std::move(alt));
    }
    item["top_logprobs"] = std::move(alts);
    content.push_back(std::move(item));
  }
  ojson out;
  out["content"] = std::move(content);
  return out;
}

}  // namespace tandem::frontend
