#include "coordinator/chat/chat_template.h"

#include <utility>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "coordinator/chat/ast.h"
#include "coordinator/chat/builtins.h"
#include "coordinator/chat/interpreter.h"
#include "coordinator/chat/lexer.h"
#include "coordinator/chat/parser.h"
#include "coordinator/chat/str_cat.h"

namespace tandem {
namespace {

using jinja::Body;
using jinja::Cat;
using jinja::Expr;
using jinja::ExprKind;
using jinja::Stmt;
using jinja::StmtKind;
using jinja::Value;

constexpr int kMaxJsonDepth = 128;

template <typename Json>
absl::StatusOr<Value> FromJson(const Json& j, int depth) {
  if (depth > kMaxJsonDepth) {
    return absl::InvalidArgumentError(Cat(
        "chat template context nested deeper than ", kMaxJsonDepth, " levels"));
  }
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return Value::None();
    case nlohmann::json::value_t::boolean:
      return Value::Bool(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::Int(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX))
        return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::Float(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::String(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) {
        TANDEM_ASSIGN_OR_RETURN(Value v, FromJson(x, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        TANDEM_ASSIGN_OR_RETURN(Value v, FromJson(it.value(), depth + 1));
        items.emplace_back(Value::String(it.key()), std::move(v));
      }
      return Value::Dict(std::move(items));
    }
    case nlohmann::json::value_t::binary:
      return absl::InvalidArgumentError("binary JSON values are not supported");
  }
  return absl::InvalidArgumentError("unknown JSON value");
}

// jinja2 reports an unknown filter or test when it compiles the template,
// except inside `if` statements and conditional expressions ("soft" frames),
// where it fails only if the filter is actually called.
class NameChecker {
 public:
  explicit NameChecker(const std::string& source) : source_(source) {}

  absl::Status Body(const jinja::Body& body, bool soft) {
    for (const auto& s : body) TANDEM_RETURN_IF_ERROR(Statement(*s, soft));
    return absl::OkStatus();
  }

 private:
  absl::Status Statement(const Stmt& s, bool soft) {
    if (s.kind == StmtKind::kIf) {
      for (const auto& [cond, body] : s.branches) {
        TANDEM_RETURN_IF_ERROR(E(cond.get(), true));
        TANDEM_RETURN_IF_ERROR(Body(body, true));
      }
      return Body(s.else_body, true);
    }
    // Loops, macros, blocks and `with` open inner (hard) frames in jinja2.
    TANDEM_RETURN_IF_ERROR(E(s.expr.get(), soft));
    TANDEM_RETURN_IF_ERROR(E(s.filter.get(), soft));
    TANDEM_RETURN_IF_ERROR(E(s.cond.get(), false));
    for (const auto& d : s.defaults) TANDEM_RETURN_IF_ERROR(E(d.get(), false));
    for (const auto& v : s.with_values)
      TANDEM_RETURN_IF_ERROR(E(v.get(), soft));
    TANDEM_RETURN_IF_ERROR(Body(s.body, false));
    return Body(s.else_body, false);
  }

  absl::Status E(const Expr* e, bool soft) {
    if (e == nullptr) return absl::OkStatus();
    if (e->kind == ExprKind::kCond) soft = true;
    if (!soft && (e->kind == ExprKind::kFilter || e->kind == ExprKind::kTest)) {
      const bool known = e->kind == ExprKind::kFilter
                             ? jinja::FindFilter(e->name) != nullptr
                             : jinja::FindTest(e->name) != nullptr;
      if (!known) {
        const jinja::SourcePos p = jinja::PosOf(source_, e->offset);
        return absl::InvalidArgumentError(
            Cat("template syntax error at line ", p.line, ", column ", p.column,
                ": No ", e->kind == ExprKind::kFilter ? "filter" : "test",
                " named '", e->name,
                "' (not supported by Tandem's Jinja subset, or not a Jinja "
                "builtin)."));
      }
    }
    TANDEM_RETURN_IF_ERROR(E(e->a.get(), soft));
    TANDEM_RETURN_IF_ERROR(E(e->b.get(), soft));
    TANDEM_RETURN_IF_ERROR(E(e->c.get(), soft));
    for (const auto& x : e->items) TANDEM_RETURN_IF_ERROR(E(x.get(), soft));
    for (const auto& [op, x] : e->compare)
      TANDEM_RETURN_IF_ERROR(E(x.get(), soft));
    for (const auto& x : e->call.args) TANDEM_RETURN_IF_ERROR(E(x.get(), soft));
    for (const auto& [k, x] : e->call.kwargs)
      TANDEM_RETURN_IF_ERROR(E(x.get(), soft));
    TANDEM_RETURN_IF_ERROR(E(e->call.dyn_args.get(), soft));
    return E(e->call.dyn_kwargs.get(), soft);
  }

  const std::string& source_;
};

void SetToken(nlohmann::ordered_json& ctx, const char* name,
              const std::optional<std::string>& v) {
  if (v) ctx[name] = *v;
}

template <typename Json>
absl::StatusOr<std::string> RenderImpl(const jinja::Template& tmpl,
                                       const Json& context,
                                       const ChatTemplateLimits& limits) {
  if (!context.is_object()) {
    return absl::InvalidArgumentError(
        "chat template context must be a JSON object");
  }
  jinja::Globals globals;
  for (auto it = context.begin(); it != context.end(); ++it) {
    TANDEM_ASSIGN_OR_RETURN(Value v, FromJson(it.value(), 1));
    globals[it.key()] = std::move(v);
  }
  jinja::RenderLimits rl;
  rl.max_output_bytes = limits.max_output_bytes;
  rl.max_steps = limits.max_steps;
  rl.max_call_depth = limits.max_call_depth;
  rl.max_stack_bytes = limits.max_stack_bytes;
  rl.max_total_string_bytes = limits.max_total_string_bytes;
  rl.max_container_nodes = limits.max_container_nodes;
  jinja::Interpreter interp(tmpl, rl);
  absl::StatusOr<std::string> out = interp.Render(std::move(globals));
  if (!out.ok() && out.status().code() != absl::StatusCode::kInvalidArgument) {
    return absl::InvalidArgumentError(out.status().message());
  }
  return out;
}

}  // namespace

nlohmann::ordered_json BuildChatContext(const ChatTemplateInputs& inputs) {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  SetToken(ctx, "bos_token", inputs.bos_token);
  SetToken(ctx, "eos_token", inputs.eos_token);
  SetToken(ctx, "unk_token", inputs.unk_token);
  SetToken(ctx, "sep_token", inputs.sep_token);
  SetToken(ctx, "pad_token", inputs.pad_token);
  SetToken(ctx, "cls_token", inputs.cls_token);
  SetToken(ctx, "mask_token", inputs.mask_token);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  static constexpr const char* kReasoning[] = {"reasoning_content", "thinking",
                                               "reasoning"};
  for (const ChatMessage& m : inputs.messages) {
    nlohmann::ordered_json msg = nlohmann::ordered_json::object();
    msg["role"] = m.role;
    if (!m.extra.is_object() || !m.extra.contains("content"))
      msg["content"] = m.content;
    if (m.extra.is_object()) {
      for (auto it = m.extra.begin(); it != m.extra.end(); ++it)
        msg[it.key()] = it.value();
    }
    // apply_chat_template drops the keys whose value is None (OpenAI clients
    // send "content": null next to tool_calls).
    for (auto it = msg.begin(); it != msg.end();) {
      it = it->is_null() ? msg.erase(it) : std::next(it);
    }
    // transformers: message = {"thinking": r, **message, "reasoning_content":
    // r} where r is the first non-null of reasoning_content, thinking,
    // reasoning.
    const nlohmann::ordered_json* reasoning = nullptr;
    for (const char* key : kReasoning) {
      auto it = msg.find(key);
      if (it != msg.end() && !it->is_null()) {
        reasoning = &*it;
        break;
      }
    }
    if (reasoning != nullptr) {
      const nlohmann::ordered_json r = *reasoning;
      nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
      aliased["thinking"] = r;
      for (auto it = msg.begin(); it != msg.end(); ++it)
        aliased[it.key()] = it.value();
      aliased["reasoning_content"] = r;
      msg = std::move(aliased);
    }
    messages.push_back(std::move(msg));
  }
  ctx["messages"] = std::move(messages);
  ctx["tools"] =
      inputs.tools.is_null() ? nlohmann::ordered_json() : inputs.tools;
  ctx["documents"] =
      inputs.documents.is_null() ? nlohmann::ordered_json() : inputs.documents;
  ctx["add_generation_prompt"] = inputs.add_generation_prompt;
  if (inputs.extra_kwargs.is_object()) {
    for (auto it = inputs.extra_kwargs.begin(); it != inputs.extra_kwargs.end();
         ++it) {
      ctx[it.key()] = it.value();
    }
  }
  return ctx;
}

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string source) {
  TANDEM_ASSIGN_OR_RETURN(std::shared_ptr<const jinja::Template> tmpl,
                          jinja::ParseTemplate(source));
  TANDEM_RETURN_IF_ERROR(NameChecker(tmpl->source).Body(tmpl->body, false));
  return ChatTemplate(std::move(source), std::move(tmpl));
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const nlohmann::json& context) const {
  return RenderImpl(*tmpl_, context, ChatTemplateLimits());
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const nlohmann::ordered_json& context) const {
  return RenderImpl(*tmpl_, context, ChatTemplateLimits());
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const nlohmann::ordered_json& context,
    const ChatTemplateLimits& limits) const {
  return RenderImpl(*tmpl_, context, limits);
}

absl::StatusOr<std::string> ChatTemplate::Apply(
    const ChatTemplateInputs& inputs) const {
  return Render(BuildChatContext(inputs));
}

}  // namespace tandem
