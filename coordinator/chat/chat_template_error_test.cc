// Every malformed template or failing render is a clear InvalidArgument
// status with a position, never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "coordinator/chat/chat_template.h"

namespace tandem {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string ParseError(const std::string& src) {
  auto t = ChatTemplate::Parse(src);
  EXPECT_FALSE(t.ok()) << "parsed: " << src;
  if (t.ok()) return "";
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(t.status().message());
}

std::string RenderError(const std::string& src,
                        const Json& ctx = Json::object()) {
  auto t = ChatTemplate::Parse(src);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return "";
  auto out = t->Render(ctx);
  EXPECT_FALSE(out.ok()) << "rendered: " << *out;
  if (out.ok()) return "";
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(out.status().message());
}

TEST(ChatTemplateSyntax, UnterminatedTags) {
  EXPECT_THAT(
      ParseError("ab\n{% if x %}yes"),
      AllOf(HasSubstr("Unexpected end of template"), HasSubstr("'endif'"),
            HasSubstr("innermost block that needs to be closed is 'if'")));
  EXPECT_THAT(ParseError("{% for m in messages %}{{ m }}"),
              HasSubstr("'endfor' or 'else'"));
  EXPECT_THAT(ParseError("{{ x"), HasSubstr("unexpected end of template"));
  EXPECT_THAT(ParseError("{% if x"), HasSubstr("unexpected end of template"));
  EXPECT_THAT(ParseError("\n\n  {# open"),
              AllOf(HasSubstr("line 3, column 3"),
                    HasSubstr("Missing end of comment tag")));
  EXPECT_THAT(ParseError("{% raw %}x"),
              HasSubstr("Missing end of raw directive"));
  EXPECT_THAT(ParseError("{{ 'abc }}"), HasSubstr("unexpected char"));
  EXPECT_THAT(ParseError("{% macro f() %}x"), HasSubstr("'endmacro'"));
  EXPECT_THAT(ParseError("{% set x %}x"), HasSubstr("'endset'"));
}

TEST(ChatTemplateSyntax, ReportsLineAndColumn) {
  EXPECT_THAT(ParseError("line one\n{{ ok }}\n   {{ 1 + }}"),
              HasSubstr("line 3, column 11"));
  EXPECT_THAT(
      ParseError("{{ a }}\n{% foo %}"),
      AllOf(HasSubstr("line 2, column 4"), HasSubstr("unknown tag 'foo'")));
}

TEST(ChatTemplateSyntax, UnknownFilterAndTest) {
  EXPECT_THAT(ParseError("{{ x | nosuch }}"),
              HasSubstr("No filter named 'nosuch'"));
  EXPECT_THAT(ParseError("{{ x is nosuch }}"),
              HasSubstr("No test named 'nosuch'"));
  EXPECT_THAT(ParseError("{% for m in messages %}{{ m|nosuch }}{% endfor %}"),
              HasSubstr("No filter named"));
  // Inside an if (jinja2's "soft" frame) it only fails when reached.
  auto t = ChatTemplate::Parse("{% if false %}{{ x|nosuch }}{% endif %}ok");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t->Render(Json::object()), "ok");
  EXPECT_THAT(RenderError("{% if true %}{{ x|nosuch }}{% endif %}"),
              HasSubstr("No filter named 'nosuch'"));
  // Filters jinja2 has that the subset leaves out are rejected the same way.
  EXPECT_THAT(ParseError("{{ x|groupby('a') }}"),
              HasSubstr("No filter named 'groupby'"));
}

TEST(ChatTemplateSyntax, Malformed) {
  for (const char* src : {
           "{{ }}",
           "{% %}",
           "{% endif %}",
           "{% if x %}{% endfor %}",
           "{% else %}",
           "{{ (1 + 2 }}",
           "{{ 1 + 2) }}",
           "{{ [1, 2 }}",
           "{{ {'a' 1} }}",
           "{{ 1 $ 2 }}",
           "{% for in x %}{% endfor %}",
           "{% for x y %}{% endfor %}",
           "{% set = 1 %}",
           "{% set 1 = 2 %}",
           "{% macro (a) %}{% endmacro %}",
           "{% macro f(a=1, b) %}{% endmacro %}",
           "{{ a is odd is even }}",
           "{{ f(a=1, 2) }}",
           "{{ '\\x4' }}",
           "{% break %}",
           "{% for x in y recursive %}{% endfor %}",
           "{% include 'other.jinja' %}",
           "{% extends 'base' %}",
           "{% call x %}{% endcall %}",
           "{{ x. }}",
           "{{ x[ }}",
           "{{ 99999999999999999999 }}",
           "{% if x %}{% elif %}{% endif %}",
           "{{ a ? b }}",
           "{%- -%}",
           "{{ 1 if }}",
           "{% with a %}{% endwith %}",
           "{% set ns.a.b = 1 %}",
       }) {
    SCOPED_TRACE(src);
    EXPECT_THAT(ParseError(src), HasSubstr("line 1, column"));
  }
}

TEST(ChatTemplateSyntax, DeepNestingIsRejectedNotCrashing) {
  EXPECT_THAT(ParseError("{{ " + std::string(5000, '(') + "1" +
                         std::string(5000, ')') + " }}"),
              HasSubstr("nested too deeply"));
  EXPECT_THAT(ParseError("{{ " + std::string(5000, '[') +
                         std::string(5000, ']') + " }}"),
              HasSubstr("nested too deeply"));
  std::string ifs;
  for (int i = 0; i < 3000; ++i) ifs += "{% if true %}";
  EXPECT_THAT(ParseError(ifs), HasSubstr("nested too deeply"));
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_THAT(ParseError(nots + "x }}"), HasSubstr("nested too deeply"));
  // Long left-associative chains make deep trees without parser recursion.
  std::string sum = "{{ 1";
  for (int i = 0; i < 20000; ++i) sum += " + 1";
  EXPECT_THAT(ParseError(sum + " }}"), HasSubstr("nested too deeply"));
  std::string filters = "{{ x";
  for (int i = 0; i < 20000; ++i) filters += "|trim";
  EXPECT_THAT(ParseError(filters + " }}"), HasSubstr("nested too deeply"));
  // Moderate nesting is fine.
  auto t = ChatTemplate::Parse("{{ " + std::string(40, '(') + "1" +
                               std::string(40, ')') + " }}");
  EXPECT_TRUE(t.ok()) << t.status();
}

TEST(ChatTemplateRender, RaiseException) {
  const std::string msg = RenderError(
      "{% if messages[0]['role'] == 'system' %}\n  {{ raise_exception('System "
      "role not "
      "supported') }}\n{% endif %}",
      Json::parse(R"({"messages": [{"role": "system", "content": ""}]})"));
  EXPECT_THAT(
      msg, AllOf(HasSubstr("System role not supported"), HasSubstr("line 2")));
  EXPECT_THAT(RenderError("{{ raise_exception('a' ~ 1) }}"), HasSubstr("a1"));
}

TEST(ChatTemplateRender, UndefinedErrorsLikeJinja) {
  EXPECT_THAT(RenderError("{{ foo.bar }}"),
              HasSubstr("UndefinedError: 'foo' is undefined"));
  EXPECT_THAT(RenderError("{{ m.x.y }}", Json::parse(R"({"m": {}})")),
              HasSubstr("'dict object' has no attribute 'x'"));
  EXPECT_THAT(RenderError("{{ foo + 1 }}"), HasSubstr("'foo' is undefined"));
  EXPECT_THAT(RenderError("{{ foo() }}"), HasSubstr("'foo' is undefined"));
  EXPECT_THAT(RenderError("{{ foo|tojson }}"),
              HasSubstr("not JSON serializable"));
  EXPECT_THAT(RenderError("{{ messages[0].content.strip() }}",
                          Json::parse(R"({"messages": [{"role": "user"}]})")),
              HasSubstr("has no attribute 'content'"));
}

TEST(ChatTemplateRender, TypeErrors) {
  EXPECT_THAT(RenderError("{{ 'a' + 1 }}"),
              HasSubstr("TypeError: can only concatenate str"));
  EXPECT_THAT(RenderError("{{ m.content + '!' }}",
                          Json::parse(R"({"m": {"content": null}})")),
              HasSubstr("TypeError"));
  EXPECT_THAT(RenderError("{{ 1 < 'a' }}"), HasSubstr("'<' not supported"));
  EXPECT_THAT(RenderError("{% for x in 3 %}{% endfor %}"),
              HasSubstr("not iterable"));
  EXPECT_THAT(RenderError("{{ 1 // 0 }}"), HasSubstr("ZeroDivisionError"));
  EXPECT_THAT(RenderError("{{ range(200000)|length }}"),
              HasSubstr("Range too big"));
  EXPECT_THAT(RenderError("{{ [].append(1) }}"), HasSubstr("unsafe"));
  EXPECT_THAT(RenderError("{{ 2 ** 100 }}"), HasSubstr("64 bits"));
}

TEST(ChatTemplateRender, ErrorInsideMacroPointsAtTheFailingExpression) {
  EXPECT_THAT(
      RenderError(
          "{% macro f(x) %}\n\n   {{ x.y.z }}{% endmacro %}{{ f(none) }}"),
      HasSubstr("line 3"));
}

TEST(ChatTemplateRender, ContentIsNeverInterpreted) {
  auto t = ChatTemplate::Parse("{{ messages[0].content }}");
  ASSERT_TRUE(t.ok());
  const std::string evil = "{{ raise_exception('x') }}{% for %}{#";
  Json ctx = Json::parse(R"({"messages": [{"role": "user"}]})");
  ctx["messages"][0]["content"] = evil;
  EXPECT_EQ(*t->Render(ctx), evil);
}

TEST(ChatTemplateRender, InvalidUtf8IsPreserved) {
  auto t =
      ChatTemplate::Parse("{{ s }}|{{ s|length }}|{{ s|upper }}|{{ s[::-1] }}");
  ASSERT_TRUE(t.ok());
  Json ctx = Json::object();
  ctx["s"] = std::string(
      "a\xff"
      "b");
  // nlohmann refuses to dump it, but the interpreter passes the bytes through.
  auto out = t->Render(ctx);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, std::string("a\xff"
                              "b|3|A\xff"
                              "B|b\xff"
                              "a"));
}

}  // namespace
}  // namespace tandem
