// API behaviour of ChatTemplate: context building, rendering, limits.
#include "coordinator/chat/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace tandem {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;

std::string RenderOrDie(const std::string& src, const Json& ctx) {
  auto t = ChatTemplate::Parse(src);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return "";
  auto out = t->Render(ctx);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "";
}

absl::Status RenderStatus(
    const std::string& src, const Json& ctx,
    const ChatTemplateLimits& limits = ChatTemplateLimits()) {
  auto t = ChatTemplate::Parse(src);
  if (!t.ok()) return t.status();
  return t->Render(ctx, limits).status();
}

constexpr const char* kChatML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
    "add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

TEST(ChatTemplate, RendersChatML) {
  auto t = ChatTemplate::Parse(kChatML);
  ASSERT_TRUE(t.ok()) << t.status();
  ChatTemplateInputs in;
  in.messages = {{"system", "Be brief."}, {"user", "Hi"}};
  in.add_generation_prompt = true;
  auto out = t->Apply(in);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out,
            "<|im_start|>system\nBe "
            "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, BothJsonFlavoursRender) {
  auto t = ChatTemplate::Parse("{{ d|tojson }}");
  ASSERT_TRUE(t.ok());
  // nlohmann::json sorts keys; ordered_json keeps them as given.
  EXPECT_EQ(*t->Render(nlohmann::json::parse(R"({"d": {"b": 1, "a": 2}})")),
            R"({"a": 2, "b": 1})");
  EXPECT_EQ(*t->Render(Json::parse(R"({"d": {"b": 1, "a": 2}})")),
            R"({"b": 1, "a": 2})");
}

TEST(ChatTemplate, ContextMustBeAnObject) {
  auto t = ChatTemplate::Parse("x");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Render(Json::array()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*t->Render(Json::object()), "x");
}

TEST(ChatTemplate, EmptyAndPlainTemplates) {
  EXPECT_EQ(RenderOrDie("", Json::object()), "");
  EXPECT_EQ(RenderOrDie("plain text\n", Json::object()),
            "plain text");  // one newline dropped
  EXPECT_EQ(RenderOrDie("two\n\n", Json::object()), "two\n");
}

TEST(ChatTemplate, SourceIsKept) {
  auto t = ChatTemplate::Parse(kChatML);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->source(), kChatML);
  ChatTemplate copy = *t;  // copyable, shares the parsed tree
  EXPECT_EQ(copy.source(), kChatML);
}

TEST(BuildChatContext, MatchesApplyChatTemplate) {
  ChatTemplateInputs in;
  ChatMessage m{"assistant", "hi"};
  m.extra =
      Json::parse(R"({"tool_calls": null, "reasoning": "why", "name": "bot"})");
  in.messages = {{"user", "q"}, m};
  in.bos_token = "<s>";
  in.extra_kwargs = Json::parse(R"({"enable_thinking": false})");
  const Json ctx = BuildChatContext(in);
  EXPECT_EQ(ctx["bos_token"], "<s>");
  EXPECT_FALSE(ctx.contains("eos_token"));
  EXPECT_TRUE(ctx["tools"].is_null());
  EXPECT_TRUE(ctx["documents"].is_null());
  EXPECT_EQ(ctx["add_generation_prompt"], false);
  EXPECT_EQ(ctx["enable_thinking"], false);
  // None-valued keys dropped; reasoning aliased to thinking (first) and
  // reasoning_content (last), as transformers does.
  EXPECT_EQ(
      ctx["messages"][1].dump(),
      R"({"thinking":"why","role":"assistant","content":"hi","reasoning":"why","name":"bot","reasoning_content":"why"})");
  EXPECT_EQ(ctx["messages"][0].dump(), R"({"role":"user","content":"q"})");
}

TEST(BuildChatContext, ExtraContentReplacesContent) {
  ChatTemplateInputs in;
  ChatMessage m{"assistant", "ignored"};
  m.extra = Json::parse(R"({"tool_calls": [], "content": null})");
  ChatMessage parts{"user", ""};
  parts.extra = Json::parse(R"({"content": [{"type": "text", "text": "hi"}]})");
  in.messages = {m, parts};
  const Json ctx = BuildChatContext(in);
  EXPECT_EQ(ctx["messages"][0].dump(),
            R"({"role":"assistant","tool_calls":[]})");
  EXPECT_EQ(ctx["messages"][1]["content"][0]["text"], "hi");
}

TEST(ChatTemplate, Qwen3StyleThinkingSwitch) {
  const std::string src =
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
      "{%- if enable_thinking is defined and enable_thinking is false %}"
      "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";
  auto t = ChatTemplate::Parse(src);
  ASSERT_TRUE(t.ok());
  ChatTemplateInputs in;
  in.messages = {{"user", "x"}};
  in.add_generation_prompt = true;
  EXPECT_EQ(*t->Apply(in), "<|im_start|>assistant\n");
  in.extra_kwargs = Json::parse(R"({"enable_thinking": false})");
  EXPECT_EQ(*t->Apply(in), "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplate, ConcurrentRendersShareOneTemplate) {
  auto t = ChatTemplate::Parse(kChatML);
  ASSERT_TRUE(t.ok());
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) {
        ChatTemplateInputs in;
        in.messages = {{"user", "thread " + std::to_string(i)}};
        auto out = t->Apply(in);
        if (out.ok() && *out == "<|im_start|>user\nthread " +
                                    std::to_string(i) + "<|im_end|>\n") {
          ++ok[i];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int n : ok) EXPECT_EQ(n, 200);
}

TEST(ChatTemplate, StrftimeNow) {
  const std::string year =
      RenderOrDie("{{ strftime_now('%Y') }}", Json::object());
  ASSERT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2024);
  EXPECT_EQ(
      RenderOrDie("{{ strftime_now('%d %b %Y')|length }}", Json::object()),
      "11");
}

TEST(ChatTemplate, LargeConversationRendersQuickly) {
  Json ctx = Json::object();
  ctx["messages"] = Json::array();
  for (int i = 0; i < 5000; ++i) {
    ctx["messages"].push_back({{"role", i % 2 ? "assistant" : "user"},
                               {"content", std::string(200, 'a' + i % 26)}});
  }
  auto t = ChatTemplate::Parse(kChatML);
  ASSERT_TRUE(t.ok());
  auto out = t->Render(ctx);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_GT(out->size(), 5000u * 200u);
}

// ---- limits: every one of them fails cleanly ----

TEST(ChatTemplateLimits, OutputSize) {
  ChatTemplateLimits lim;
  lim.max_output_bytes = 1000;
  const absl::Status st =
      RenderStatus("{% for i in range(100) %}{{ 'x' * 20 }}{% endfor %}",
                   Json::object(), lim);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("exceeds the limit"));
}

TEST(ChatTemplateLimits, HugeStringRepeat) {
  const absl::Status st =
      RenderStatus("{{ 'x' * 1000000000 }}", Json::object());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

// An empty string or list repeated a huge number of times is empty, at once: no step
// budget or output limit stops a loop of empty appends (the fuzz test found
// `{% if xs|string*99999999999 %}` spinning for minutes).
TEST(ChatTemplateLimits, EmptyRepeatedHugelyIsEmptyAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(RenderOrDie("[{{ '' * 99999999999 }}|{{ ([] * 99999999999)|length }}]", Json::object()),
            "[|0]");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(ChatTemplateLimits, StringDoubling) {
  const absl::Status st = RenderStatus(
      "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = "
      "ns.s ~ ns.s %}"
      "{% endfor %}{{ ns.s|length }}",
      Json::object());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateLimits, ListDoubling) {
  const absl::Status st = RenderStatus(
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = "
      "[ns.l, ns.l] %}"
      "{% endfor %}{{ ns.l|tojson|length }}",
      Json::object());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("limit"));
}

TEST(ChatTemplateLimits, DeepNesting) {
  const absl::Status st = RenderStatus(
      "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = "
      "[ns.l] %}"
      "{% endfor %}{{ ns.l }}",
      Json::object());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateLimits, Steps) {
  ChatTemplateLimits lim;
  lim.max_steps = 100000;
  const absl::Status st = RenderStatus(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% "
      "endfor %}",
      Json::object(), lim);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("steps"));
}

TEST(ChatTemplateLimits, DefaultStepsStopNestedHugeLoops) {
  const absl::Status st = RenderStatus(
      "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% "
      "endfor %}{% endfor %}",
      Json::object());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateLimits, InfiniteMacroRecursion) {
  const absl::Status st = RenderStatus(
      "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", Json::object());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()),
              ::testing::AnyOf(HasSubstr("macro calls nested"),
                               HasSubstr("recursion is too deep")));
}

TEST(ChatTemplateLimits, RecursionThroughCaller) {
  const absl::Status st = RenderStatus(
      "{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}",
      Json::object());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateLimits, StackLimitIsHonoured) {
  ChatTemplateLimits lim;
  lim.max_call_depth = 100000;
  lim.max_stack_bytes = 64 << 10;
  const absl::Status st =
      RenderStatus("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                   Json::object(), lim);
  EXPECT_THAT(std::string(st.message()), HasSubstr("recursion is too deep"));
}

TEST(ChatTemplateLimits, DeepJsonContext) {
  std::string deep(500, '[');
  deep += std::string(500, ']');
  Json ctx = Json::object();
  ctx["x"] = Json::parse(deep);
  const absl::Status st = RenderStatus("{{ x }}", ctx);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateLimits, NamespaceCycleIsHarmless) {
  EXPECT_EQ(RenderOrDie("{% set ns = namespace() %}{% set ns.me = ns %}{{ "
                        "ns.me.me is defined }}",
                        Json::object()),
            "True");
  EXPECT_THAT(
      RenderOrDie("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}",
                  Json::object()),
      HasSubstr("<Namespace {...}>"));
}

}  // namespace
}  // namespace tandem
