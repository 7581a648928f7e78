#!/usr/bin/env python3
"""Writes the chat-template goldens used by coordinator/chat/chat_template_golden_test.cc.

Oracle: Hugging Face transformers' own Jinja environment (the one
apply_chat_template uses: jinja2 ImmutableSandboxedEnvironment with
trim_blocks=True, lstrip_blocks=True, loopcontrols, the `generation` tag, and
transformers' tojson / raise_exception / strftime_now / namespace / dict),
obtained from transformers.utils.chat_template_utils._compile_jinja_template.

  /root/oracle-venv/bin/python tests/golden/make_chat_template_goldens.py \
      --smollm2-gguf /root/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --qwen3-config /work/shared/testdata/tokenizers/qwen3/tokenizer_config.json

Inputs (tests/data/chat_templates/templates/*.jinja):
  smollm2.jinja   copied by this script from the GGUF's tokenizer.chat_template
  qwen3.jinja     copied by this script from the Qwen3 tokenizer_config.json
  the others      written by hand in the style of the models' published
                  templates (Llama-2, Llama-3, Llama-3.1 with tools, Mixtral,
                  Qwen2 ChatML, Qwen2.5 with tools, OLMoE/Tulu, Gemma, Phi-3,
                  Mistral v0.3 with tools, DeepSeek-V3); byte-exact files, the
                  trailing newline included (jinja2 drops one, as the C++ does).

Outputs (tests/data/chat_templates/):
  <name>.json     one per template: {"name", "source", "template", "versions",
                  "cases": [...]}; each case has
                    "name", "inputs"  (messages / tools / documents /
                                       add_generation_prompt / special_tokens /
                                       kwargs, as given to apply_chat_template),
                    "context"         (the variables the template sees, built
                                       exactly as apply_chat_template and
                                       render_jinja_template build them: message
                                       keys whose value is None dropped,
                                       reasoning fields aliased, tools and
                                       documents None when absent),
                    and "expected" (the rendered text) or "error"
                    ({"type", "message"} of the exception jinja2 raised).
  features.json   small templates exercising one Jinja feature each, all
                  rendered with one shared "context", with the rendered text
                  or the error ({"phase": parse|render, "type", "message"}).

Every case is rendered twice, through compiled_template.render(**context) and
through transformers' render_jinja_template(...), and the two must agree. The
Qwen3 cases are also checked against AutoTokenizer.apply_chat_template on the
Qwen3 tokenizer directory. Nothing depends on the clock: strftime_now is only
exercised through formats that do not change between runs ("%%").
"""

import argparse
import copy
import json
import os
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils as ctu

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "data", "chat_templates"))
TEMPLATES = os.path.join(OUT, "templates")


def versions():
    return {
        "python": sys.version.split()[0],
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
    }


# ---------------------------------------------------------------- inputs ----

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather — in °C or °F.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": 'City, e.g. "Zürich"'},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "max_results": {"type": "integer", "default": 5, "minimum": 1.5},
                },
                "required": ["query"],
            },
            "return": {"type": "array"},
        },
    },
]

SYSTEM = {"role": "system", "content": "You are a terse assistant."}


def conv(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


GENERAL = {
    "single_user": conv(("user", "Hello!")),
    "system_user": [SYSTEM] + conv(("user", "What is 2+2?")),
    "multi_turn": [SYSTEM]
    + conv(("user", "What is 2+2?"), ("assistant", "4."), ("user", "And 3+3?")),
    "no_system_multi": conv(
        ("user", "Hi"), ("assistant", "Hello! How can I help?"), ("user", "Tell me a joke.")
    ),
    "ends_with_assistant": conv(("user", "Hi"), ("assistant", "Hello there.")),
    "unicode": conv(
        ("user", "Grüße aus Zürich! 你好，世界 🎉🚀 — naïve café\u200b «q» \"double\" 'single' \\back\\slash"),
        ("assistant", "Ответ: ✓ done.\n\tTabbed line\r\nCRLF line"),
        ("user", "emoji only: 👍🏽👨‍👩‍👧"),
    ),
    "jinja_in_content": conv(
        ("user", "{{ raise_exception('no') }} {% for x in y %} {# c #} {{- messages }} {%- endraw %}")
    ),
    "empty_content": [{"role": "system", "content": ""}]
    + conv(("user", ""), ("assistant", ""), ("user", "")),
    "whitespace_content": conv(
        ("user", "  leading and trailing spaces  \n\n"),
        ("assistant", "\n\nanswer with newlines\n"),
        ("user", "\t"),
    ),
    "control_chars": conv(("user", "bell\x07 nul\x00 esc\x1b del\x7f nbsp\xa0 ls\u2028 end")),
    "long": conv(*[("user" if i % 2 == 0 else "assistant", f"turn {i}: " + "word " * i) for i in range(10)]),
    "consecutive_users": conv(("user", "one"), ("user", "two")),
}

TOOL_CALL = {
    "id": "call12345",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}},
}
TOOL_CONVS = {
    "tools_no_calls": (TOOLS, conv(("user", "Hi"))),
    "tools_system": (TOOLS, [SYSTEM] + conv(("user", "What's the weather in Paris?"))),
    "tool_call": (
        TOOLS,
        [
            SYSTEM,
            {"role": "user", "content": "What's the weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
            {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": '{"temperature": 22}'},
            {"role": "assistant", "content": "It is 22 °C in Paris."},
        ],
    ),
    "tool_call_string_args": (
        TOOLS,
        [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {"id": "call00001", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'}},
                    {"id": "call00002", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"location": "Rome"}'}},
                ],
            },
            {"role": "tool", "tool_call_id": "call00001", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call00002", "content": "rainy"},
        ],
    ),
    "tool_call_null_content": (
        TOOLS,
        [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        ],
    ),
}

REASONING_CONVS = {
    "reasoning_content": conv(("user", "2+2?"))
    + [{"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."}]
    + conv(("user", "3+3?")),
    "reasoning_last": conv(("user", "2+2?"))
    + [{"role": "assistant", "content": "\n4", "reasoning_content": "\nThink.\n"}],
    "think_inline": conv(
        ("user", "Add 3 and 3."),
        ("assistant", "<think>\nadd them\n</think>\n\nThe answer is 6."),
        ("user", "Thanks"),
    ),
    "thinking_alias": conv(("user", "q"))
    + [{"role": "assistant", "content": "a", "thinking": "via the thinking key"}],
    "tool_response_user": conv(("user", "Start"))
    + [{"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]}]
    + conv(("user", "<tool_response>\nsunny\n</tool_response>"), ("assistant", "Done.")),
}

SPECIAL = {
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>", "pad_token": "<|im_end|>"},
    "qwen3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "llama2": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama31": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mixtral": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "qwen2": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "qwen25": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "olmoe": {"eos_token": "<|endoftext|>", "pad_token": "<|padding|>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"},
    "phi3": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"},
    "mistral_v03": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "deepseek_v3": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
}
SOURCES = {
    "smollm2": "SmolLM2-135M-Instruct GGUF tokenizer.chat_template (verbatim)",
    "qwen3": "Qwen3 tokenizer_config.json chat_template (verbatim)",
    "llama2": "hand-written: Llama-2-chat style (<<SYS>>, raise_exception on bad alternation)",
    "llama3": "hand-written: Llama-3-Instruct style",
    "llama31": "hand-written: Llama-3.1-Instruct style with tools (multi-line, {%- -%})",
    "mixtral": "hand-written: Mixtral-8x7B-Instruct style ([INST], raise_exception)",
    "qwen2": "hand-written: Qwen2-Instruct ChatML (newlines inside string literals)",
    "qwen25": "hand-written: Qwen2.5-Instruct style with tools",
    "olmoe": "hand-written: OLMoE / Tulu style",
    "gemma": "hand-written: Gemma style (no system role)",
    "phi3": "hand-written: Phi-3 style",
    "mistral_v03": "hand-written: Mistral-7B-Instruct-v0.3 style with tools",
    "deepseek_v3": "hand-written: DeepSeek-V3 style (namespace state machine, tool calls)",
}
TOOL_TEMPLATES = {"qwen3", "qwen25", "llama31", "mistral_v03", "deepseek_v3"}
REASONING_TEMPLATES = {"qwen3", "deepseek_v3"}


# ------------------------------------------------------------- rendering ----

def drop_none_keys(messages):
    """apply_chat_template drops the message keys whose value is None."""
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


def template_context(messages, tools, documents, agp, special, kwargs):
    """The variables apply_chat_template -> render_jinja_template pass to the template."""
    chat = ctu._plain_template_data(copy.deepcopy(drop_none_keys(messages)))
    chat = ctu._alias_reasoning_fields(chat)
    ctx = dict(ctu._plain_template_data(dict(special)))
    ctx.update(ctu._plain_template_data(dict(kwargs)))
    ctx.update(
        messages=chat,
        tools=ctu._plain_template_data(copy.deepcopy(tools)),
        documents=ctu._plain_template_data(copy.deepcopy(documents)),
        add_generation_prompt=agp,
    )
    return ctx


def render(source, ctx):
    try:
        tmpl = ctu._compile_jinja_template(source)
    except Exception as e:  # noqa: BLE001
        return {"phase": "parse", "type": type(e).__name__, "message": str(e)}
    try:
        return {"text": tmpl.render(**ctx)}
    except Exception as e:  # noqa: BLE001
        return {"phase": "render", "type": type(e).__name__, "message": str(e)}


def render_via_transformers(source, messages, tools, documents, agp, special, kwargs):
    try:
        out, _ = ctu.render_jinja_template(
            conversations=[drop_none_keys(copy.deepcopy(messages))], tools=copy.deepcopy(tools),
            documents=documents, chat_template=source, add_generation_prompt=agp,
            **{**special, **kwargs})
        return {"text": out[0]}
    except Exception as e:  # noqa: BLE001
        return {"type": type(e).__name__, "message": str(e)}


def make_case(name, source, messages, tools, agp, special, kwargs, documents=None):
    ctx = template_context(messages, tools, documents, agp, special, kwargs)
    r = render(source, ctx)
    t = render_via_transformers(source, messages, tools, documents, agp, special, kwargs)
    assert r.get("text") == t.get("text") and r.get("message") == t.get("message"), (name, r, t)
    case = {
        "name": name,
        "inputs": {
            "messages": messages, "tools": tools, "documents": documents,
            "add_generation_prompt": agp, "special_tokens": special, "kwargs": kwargs,
        },
        "context": ctx,
    }
    if "text" in r:
        case["expected"] = r["text"]
    else:
        case["error"] = {"type": r["type"], "message": r["message"]}
    return case


def model_cases(name, source):
    special = SPECIAL[name]
    cases = []
    for agp in (False, True):
        suffix = "_gen" if agp else ""
        for cname, msgs in GENERAL.items():
            cases.append(make_case(cname + suffix, source, msgs, None, agp, special, {}))
        if name in TOOL_TEMPLATES:
            for cname, (tools, msgs) in TOOL_CONVS.items():
                cases.append(make_case(cname + suffix, source, msgs, tools, agp, special, {}))
        if name in REASONING_TEMPLATES:
            for cname, msgs in REASONING_CONVS.items():
                cases.append(make_case(cname + suffix, source, msgs, None, agp, special, {}))
    if name == "qwen3":
        for think in (False, True):
            for cname in ("single_user", "multi_turn"):
                cases.append(make_case(f"{cname}_gen_enable_thinking_{str(think).lower()}", source,
                                       GENERAL[cname], None, True, special, {"enable_thinking": think}))
            cases.append(make_case(f"reasoning_content_gen_enable_thinking_{str(think).lower()}", source,
                                   REASONING_CONVS["reasoning_content"], None, True, special,
                                   {"enable_thinking": think}))
    if name == "llama31":
        cases.append(make_case("tools_in_system_message", source, TOOL_CONVS["tool_call"][1], TOOLS, True,
                               special, {"tools_in_user_message": False, "date_string": "01 Jan 2025"}))
        cases.append(make_case("builtin_tools", source, GENERAL["system_user"], None, True, special,
                               {"builtin_tools": ["code_interpreter", "brave_search", "wolfram_alpha"]}))
        cases.append(make_case("two_tool_calls_error", source, TOOL_CONVS["tool_call_string_args"][1], TOOLS,
                               True, special, {}))
    if name == "mistral_v03":
        bad = copy.deepcopy(TOOL_CONVS["tool_call"][1])
        bad[2]["tool_calls"][0]["id"] = "short"
        cases.append(make_case("bad_tool_call_id", source, bad, TOOLS, False, special, {}))
    return cases


# -------------------------------------------------------------- features ----

FEATURE_CTX = {
    "xs": [1, 2, 3],
    "d": {"a": 1, "items": 2, "b": {"c": [10, 20]}},
    "s": "héllo",
    "n": None,
    "f": 1.5,
    "t": True,
    "empty": [],
    "msgs": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo", "extra": {"k": [1, {"z": None}]}},
    ],
    "tools": [{"name": "f", "parameters": {"b": 1, "a": "é\n\"q\""}}],
}

# (name, template), all rendered with FEATURE_CTX. One feature per entry where possible.
FEATURES = [
    # output, literals, printing of Python objects
    ("print_scalars", "{{ 1 }}|{{ -2 }}|{{ 1.0 }}|{{ 1e16 }}|{{ 1e-5 }}|{{ 0.1 + 0.2 }}|{{ 1e22 }}|{{ -0.0 }}|{{ 1.5e-7 }}|{{ 12345.678 }}"),
    ("print_none_bool", "{{ none }}|{{ None }}|{{ true }}|{{ False }}|{{ n }}|{{ t }}"),
    ("print_containers", "{{ [1, 'a', None, true, 1.5, (1, 2), {'k': 'v'}] }}|{{ (1,) }}|{{ () }}|{{ {} }}|{{ 1, 2 }}"),
    ("print_string_repr", "{{ [\"it's\", 'a\"b', 'x\\ny', '\\\\', 'é', '\\x01', '\\u200b', \"both'\\\"\"] }}"),
    ("print_dict", "{{ d }}|{{ msgs[2] }}"),
    ("string_escapes", "{{ '\\x41\\u00e9\\U0001F600\\101\\t|\\a\\b\\f\\v\\0|\\q' }}"),
    ("string_concat_literals", "{{ 'a' 'b' \"c\" }}"),
    ("int_literals", "{{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }} {{ 1E3 }} {{ 2.5_0 }}"),
    ("unicode_literal", "{{ 'Grüße 🎉' }}{{ 'Grüße 🎉'|length }}"),
    # whitespace control
    ("ws_trim_blocks", "a\n{% if true %}\nyes\n{% endif %}\nb"),
    ("ws_lstrip_blocks", "a\n    {% if true %}\n    yes\n    {% endif %}\nb"),
    ("ws_minus", "a   {%- if true -%}   yes   {%- endif -%}   b"),
    ("ws_var_minus", "a \n {{- 'x' -}} \n b"),
    ("ws_plus", "a\n    {%+ if true +%}\nx{% endif %}\n"),
    ("ws_comment", "a {#- c -#} b\n  {# line comment #}\nc {# x #} d"),
    ("ws_var_no_trim", "{{ 'a' }}\n{{ 'b' }}\n"),
    ("ws_lstrip_not_var", "x\n    {{ 'y' }}"),
    ("ws_lstrip_midline", "x  {% if true %}y{% endif %}"),
    ("ws_trailing_newline", "text\n"),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n"),
    ("ws_unicode_space", "a\u3000{%- if true %}b{% endif -%}\u00a0\u2003c"),
    ("raw_block", "{% raw %}{{ not rendered }}{% if %}{% endraw %}|{%- raw -%}  x  {%- endraw -%}  |"),
    ("raw_lstrip", "a\n  {% raw %}\nr\n  {% endraw %}\nb"),
    # if / for
    ("if_elif_else", "{% for v in [0, 1, 2] %}{% if v == 0 %}zero{% elif v == 1 %}one{% else %}many{% endif %},{% endfor %}"),
    ("if_colon", "{% if true: %}ok{% endif %}"),
    ("loop_vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.depth }}{{ loop.depth0 }};{% endfor %}"),
    ("loop_prev_next", "{% for x in xs %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.previtem is defined }}]{% endfor %}"),
    ("loop_cycle", "{% for x in xs %}{{ loop.cycle('odd', 'even') }}{% endfor %}"),
    ("loop_else", "{% for x in empty %}x{% else %}none{% endfor %}|{% for x in xs %}{{ x }}{% else %}none{% endfor %}"),
    ("loop_filter", "{% for x in xs if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% else %}E{% endfor %}"),
    ("loop_filter_empty", "{% for x in xs if x > 5 %}{{ x }}{% else %}E{% endfor %}"),
    ("loop_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [(1, 2), [3, 4], 'xy'] %}{{ a }}{{ b }}{% endfor %}"),
    ("loop_dict_keys", "{% for k in d %}{{ k }}{% endfor %}"),
    ("loop_string", "{% for c in s %}{{ c }}.{% endfor %}"),
    ("loop_nested", "{% for x in xs %}{% for y in xs %}{{ loop.index }}{% endfor %}{{ loop.index }}|{% endfor %}"),
    ("loop_scope", "{% set y = 5 %}{% for x in xs %}{{ y }}{% set y = x %}{{ y }},{% endfor %}{{ y }}|{% for x in xs %}{% if loop.first %}{% set z = 1 %}{% endif %}{{ z }},{% endfor %}{{ z }}"),
    ("loop_var_restored", "{% set x = 'outer' %}{% for x in xs %}{% endfor %}{{ x }}"),
    ("loop_break_continue", "{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}|{% for x in xs %}{% for y in xs %}{% if y == 2 %}{% break %}{% endif %}{{ x }}{{ y }} {% endfor %}{% endfor %}"),
    ("loop_reverse_slice", "{% for m in msgs[::-1] %}{{ m.role }}{{ (msgs|length - 1) - loop.index0 }} {% endfor %}"),
    ("if_scope_leaks", "{% if true %}{% set q = 1 %}{% endif %}{{ q }}"),
    # set / namespace / with
    ("set_basic", "{% set a = 1 %}{% set b, c = 2, 3 %}{% set d2 = [a, b] %}{{ a }}{{ b }}{{ c }}{{ d2 }}"),
    ("set_block", "{% set x %}hello {{ s }}{% endset %}{{ x }}|{{ x|length }}|{% set y | upper | replace('L', '_') %}hello{% endset %}{{ y }}"),
    ("namespace", "{% set ns = namespace(a=1, b=[]) %}{% set ns.a = ns.a + 1 %}{% set ns.c = 'new' %}{{ ns.a }}{{ ns.c }}{{ ns.b }}{{ ns.missing }}|{{ ns }}"),
    ("namespace_in_loop", "{% set ns = namespace(total=0, last=none) %}{% for x in xs %}{% set ns.total = ns.total + x %}{% set ns.last = x %}{% endfor %}{{ ns.total }}{{ ns.last }}"),
    ("namespace_from_dict", "{% set ns = namespace(d) %}{{ ns.a }}{{ ns['a'] }}"),
    ("with_block", "{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]"),
    ("dict_global", "{{ dict(a=1, b=2) }}{{ dict([('x', 1)], y=2) }}{{ dict(d, a=5) }}"),
    # macros and call blocks
    ("macro_basic", "{% macro f(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }}|{{ f(1, 3) }}|{{ f(b=5, a=0) }}|{{ f() }}"),
    ("macro_default_refs_param", "{% macro f(a, b=a * 2) %}{{ a }}{{ b }}{% endmacro %}{{ f(3) }}"),
    ("macro_varargs_kwargs", "{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, z=4) }}"),
    ("macro_closure", "{% set z = 2 %}{% macro m() %}{{ z }}{% endmacro %}{% set z = 3 %}{{ m() }}"),
    ("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}"),
    ("macro_render_json", "{% macro render(v) %}{% if v is mapping %}{{ '{' }}{% for k, x in v.items() %}{{ k }}:{{ render(x) }}{% if not loop.last %},{% endif %}{% endfor %}{{ '}' }}{% elif v is string %}'{{ v }}'{% elif v is iterable %}[{% for x in v %}{{ render(x) }}{% endfor %}]{% else %}{{ v }}{% endif %}{% endmacro %}{{ render(msgs[2]) }}"),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ s }}{% endcall %}"),
    ("call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i, loop.index) }}{% endfor %}{% endmacro %}{% call(x, i) each(xs) %}{{ i }}:{{ x }} {% endcall %}"),
    ("filter_block", "{% filter upper %}abc {{ s }}{% endfilter %}|{% filter replace('a', 'b') | title %}aaa bbb{% endfilter %}"),
    ("block_tag", "{% block body %}in block {{ s }}{% endblock %}|{% block x scoped %}{% set q = 1 %}{% endblock x %}{{ q }}"),
    ("generation_tag", "{% for m in msgs %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}"),
    ("print_tag", "{% print 'a', 1 %}"),
    # operators
    ("arith", "{{ 1 + 2 }} {{ 7 - 10 }} {{ 3 * 4 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 0.5 }}"),
    ("arith_float", "{{ 1.5 // 0.4 }} {{ -1.5 % 0.4 }} {{ 7.0 / 2 }} {{ 1.5 + 1 }} {{ true + 1 }} {{ 3 * 1.0 }}"),
    ("arith_precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ 10 - 2 - 3 }} {{ 2 * 3 % 4 }} {{ not 1 == 2 }} {{ -(xs|length) }} {{ -1|abs }}"),
    ("string_ops", "{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ 3 * 'x' }} {{ 'ab' * 0 }} {{ [0] * 3 }} {{ xs + xs }} {{ (1,) + (2,) }}"),
    ("tilde_concat", "{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ [1] ~ u ~ 'z' }}"),
    ("percent_format", "{{ '%s-%d' % ('a', 3) }}|{{ '%05.2f|%-5s|%5s|%x|%X|%o|%r|%%|%i|%+d|% d|%e' % (3.14159, 'ab', 'cd', 255, 255, 8, 'q', 7, 5, 5, 12345.678) }}|{{ '%(a)s+%(b)s' % {'a': 1, 'b': 2} }}|{{ '%s' % 'one' }}|{{ '%.3s' % 'abcdef' }}|{{ '%c' % 65 }}|{{ '%d' % 3.9 }}"),
    ("str_format_method", "{{ '{0}{1}{0}'.format('a', 'b') }}|{{ '{x}-{y}'.format(x=1, y=2) }}|{{ '{:>5}|{:<5}|{:^5}|{:.2f}|{:05d}|{:,}|{:x}|{!r}|{{}}'.format('a', 'b', 'c', 3.14159, 42, 1234567, 255, 'q') }}|{{ '{0[0]}{1.a}'.format(xs, d) }}"),
    ("comparisons", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ [1] == [1] }} {{ (1,) == [1] }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2 }} {{ 1 <= 0 }} {{ none == none }} {{ d == {'a': 1, 'items': 2, 'b': {'c': [10, 20]}} }}"),
    ("in_operator", "{{ 'ab' in 'cabd' }} {{ 'x' not in 'abc' }} {{ 'a' in d }} {{ 2 in [1, 2] }} {{ 2 in (1, 2) }} {{ 'c' in d.b }} {{ 1 not in xs }} {{ 1 in u }} {{ u in xs }}"),
    ("logic", "{{ not true }} {{ not none }} {{ true and 5 }} {{ 0 or 'x' }} {{ none or 0 }} {{ '' and 1 }} {{ 1 and 2 and 3 }} {{ not xs }} {{ not empty }}"),
    ("ternary", "{{ 'a' if true }}|{{ 'a' if false }}|{{ 'a' if false else 'b' }}|{{ 1 if 0 else 2 if 0 else 3 }}|{{ 'y' if u is defined else 'n' }}"),
    ("is_not", "{{ n is not none }} {{ s is not string }} {{ u is not defined }} {{ not s is string }}"),
    # attribute / item access
    ("getattr_getitem", "{{ msgs[0].role }} {{ msgs[0]['content'] }} {{ msgs[-1].content|upper }} {{ d.b.c[1] }} {{ d['b']['c'][0] }} {{ d.b.c.1 }} {{ xs[5] }}|{{ d['zz'] }}|{{ xs[-1] }}"),
    ("attr_vs_item_priority", "{{ d['items'] }} {{ d.get('a') }} {{ d.items()|list|length }}"),
    ("slices", "{{ xs[0:2] }} {{ xs[::2] }} {{ xs[-2:] }} {{ xs[::-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ xs[5:] }} {{ xs[:-5] }} {{ 'abc'[1:] }} {{ (1, 2, 3)[1:] }} {{ xs[1::-1] }}"),
    ("string_index", "{{ s[0] }}{{ s[1] }}{{ s[-1] }}|{{ 'abc'[5] }}|"),
    ("undefined_print", "[{{ u }}][{{ d.zz }}][{{ msgs[0].nothere }}][{{ n.foo }}][{{ xs[9] }}]"),
    ("undefined_tests", "{{ u is defined }} {{ u is undefined }} {{ d.a is defined }} {{ d.zz is defined }} {{ u is none }} {{ u is string }} {{ u is iterable }} {{ u is sequence }} {{ u is callable }}"),
    ("undefined_ops_ok", "{{ u|length }} {{ u|list }} {{ u|default('dflt') }} {{ u|string }} {{ u|trim }} {{ u|upper }} {{ u|join(',') }} {{ u == u }} {{ u != 1 }} {{ u|first is defined }} {{ u|items|list }} {{ u|sum }} {{ u|sort }} {{ u|unique|list }} {{ u|reverse|list }} {{ u|select|list }} {{ u|map('upper')|list }} {{ u|wordcount }} {{ u|center(3) }}{% for x in u %}x{% endfor %} {{ not u }} {{ u or 'or' }} {{ u and 1 }}"),
    # filters
    ("f_trim", "[{{ '  ab  '|trim }}][{{ 'xxabxx'|trim('x') }}][{{ ' \u3000 a\n'|trim }}][{{ 5|trim }}]"),
    ("f_case", "{{ 'hello world'|title }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'a-b c(d[e<f'|title }}|{{ 'ÉCOLE'|lower }}|{{ 'straße'|upper }}|{{ 'mIxEd'|upper }}|{{ 1|upper }}"),
    ("f_replace", "{{ 'aaa'|replace('a', 'b') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'abc'|replace('', '-') }}|{{ 123|replace('2', 'x') }}"),
    ("f_length_count", "{{ xs|length }} {{ d|count }} {{ s|length }} {{ ''|length }} {{ (1, 2)|length }} {{ msgs|length }}"),
    ("f_default", "{{ none|default('x') }}|{{ u|default('x') }}|{{ ''|default('x', true) }}|{{ u|d('y') }}|{{ 0|default(5, boolean=true) }}|{{ u|default }}|{{ false|default('no') }}"),
    ("f_first_last", "{{ xs|first }} {{ xs|last }} {{ []|first }}|{{ 'abc'|first }} {{ 'abc'|last }} {{ d|first }} {{ d|last }} {{ (msgs|selectattr('role', 'equalto', 'user')|first).content }}"),
    ("f_join", "{{ xs|join }}|{{ xs|join(', ') }}|{{ msgs|join(',', attribute='role') }}|{{ 'abc'|join('-') }}|{{ [1, none, 'a']|join('/') }}"),
    ("f_list", "{{ 'ab'|list }} {{ d|list }} {{ (1, 2)|list }} {{ xs|list }}"),
    ("f_tojson", "{{ msgs|tojson }}|{{ tools|tojson }}|{{ 'é\n\"\\\\</script>'|tojson }}|{{ 1.0|tojson }}|{{ none|tojson }}|{{ (1, 'a')|tojson }}|{{ {1: 'a', true: 2, none: 3, 1.5: 4}|tojson }}"),
    ("f_tojson_indent", "{{ msgs[2]|tojson(indent=2) }}|{{ xs|tojson(indent=0) }}|{{ []|tojson(indent=2) }}|{{ {}|tojson(indent=2) }}|{{ tools|tojson(indent='\t') }}"),
    ("f_tojson_options", "{{ {'b': 1, 'a': [1, 2, {'c': none}]}|tojson(sort_keys=true) }}|{{ 'é😀'|tojson(ensure_ascii=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ d|tojson(indent=1, separators=(',', ' = ')) }}"),
    ("f_string_int_float", "{{ 5|string }}{{ none|string }}{{ xs|string }}|{{ '3'|int + 1 }} {{ '3.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ '0x1A'|int(base=16) }} {{ ' 12 '|int }} {{ '1_000'|int }} {{ true|int }} {{ none|int }}|{{ '3.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ ' 1e3 '|float }} {{ 'nan'|float }} {{ '-inf'|float }}"),
    ("f_items_dictsort", "{{ d|items|list }}|{{ {'b': 1, 'A': 2, 'a': 3}|dictsort }}|{{ {'b': 1, 'a': 3}|dictsort(by='value', reverse=true) }}|{{ {'b': 1, 'A': 2}|dictsort(true) }}"),
    ("f_selectattr", "{{ msgs|selectattr('role', 'equalto', 'user')|list }}|{{ msgs|rejectattr('role', 'equalto', 'user')|map(attribute='role')|list }}|{{ msgs|selectattr('extra')|list|length }}|{{ msgs|selectattr('role', 'in', ['user', 'system'])|list|length }}"),
    ("f_select_reject", "{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('odd')|list }}|{{ [0, 1, '', none, 'a']|select|list }}|{{ [1, 5, 9]|select('gt', 4)|list }}|{{ ['a', 1]|select('string')|list }}"),
    ("f_map", "{{ msgs|map(attribute='role')|join(',') }}|{{ xs|map('string')|join('-') }}|{{ ['a', 'b']|map('upper')|list }}|{{ msgs|map(attribute='name', default='anon')|list }}|{{ [[1, 2], [3]]|map('length')|list }}|{{ msgs[2:]|map(attribute='extra.k.0')|list }}"),
    ("f_generators_truthy", "{% if msgs|selectattr('role', 'equalto', 'nobody') %}T{% else %}F{% endif %}{% if msgs|selectattr('role', 'equalto', 'nobody')|list %}T{% else %}F{% endif %}{% if []|map('upper') %}T{% else %}F{% endif %}"),
    ("f_unique", "{{ [1, 2, 1, 'a', 'A', 'b']|unique|list }}|{{ ['a', 'A']|unique(case_sensitive=true)|list }}|{{ msgs|unique(attribute='role')|map(attribute='content')|list }}"),
    ("f_reverse", "{{ [1, 2, 3]|reverse|list }}|{{ 'abc'|reverse }}|{{ (1, 2)|reverse|list }}|{{ xs|map('string')|reverse|list }}"),
    ("f_sort", "{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'a', 'C']|sort }} {{ ['b', 'A', 'a']|sort(case_sensitive=true) }} {{ [{'a': 2, 'b': 1}, {'a': 1, 'b': 2}, {'a': 1, 'b': 1}]|sort(attribute='a,b') }} {{ msgs|sort(attribute='role')|map(attribute='role')|list }}"),
    ("f_min_max_sum", "{{ xs|min }} {{ xs|max }} {{ xs|sum }} {{ ['b', 'A', 'c']|max }} {{ ['b', 'A', 'c']|min }} {{ [{'a': 2}, {'a': 1}]|max(attribute='a') }} {{ [{'p': 1.5}, {'p': 2}]|sum(attribute='p') }} {{ [[1], [2]]|sum(start=[]) }} {{ []|max }}|{{ xs|sum(start=10) }}"),
    ("f_round_abs", "{{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 2.675|round(2) }} {{ 3|round }} {{ 3.3|round(0, 'ceil') }} {{ 3.7|round(1, 'floor') }} {{ -2.5|round }} {{ 1234.5|round(-2) }} {{ -3|abs }} {{ -3.5|abs }} {{ 42.55|round|int }}"),
    ("f_wordcount_center", "{{ 'a b  c, d-e'|wordcount }} {{ ''|wordcount }} [{{ 'ab'|center(7) }}] [{{ 'abc'|center(6) }}]"),
    ("f_escape_safe_striptags", "{{ '<a href=\"x\">&\\'</a>'|escape }}|{{ '<b>'|e }}|{{ '<b>'|safe }}|{{ 5|safe }}|{{ '<b>x</b>  &amp;\n y <!-- c -->z'|striptags }}"),
    ("f_indent", "{{ 'l1\nl2\n\nl4'|indent(2) }}|{{ 'l1\nl2'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'a\nb'|indent('> ') }}|{{ 'x'|indent }}"),
    ("f_truncate", "{{ 'foo bar baz qux'|truncate(9) }}|{{ 'foo bar baz qux'|truncate(9, true) }}|{{ 'foo bar baz qux'|truncate(11) }}|{{ 'foo bar baz qux'|truncate(11, false, '...', 0) }}|{{ 'short'|truncate(3, end='') }}"),
    ("f_format", "{{ '%s, %s!'|format('Hi', 'you') }}|{{ '%(a)s'|format(a=1) }}|{{ '%5.1f'|format(3.14159) }}"),
    ("f_batch_slice", "{{ xs|batch(2)|list }} {{ xs|batch(2, 'x')|list }} {{ [1, 2, 3, 4, 5]|slice(2)|list }} {{ xs|slice(2, 0)|list }}"),
    ("f_attr", "{{ d|attr('a') }}|{{ msgs[0]|attr('role') }}|{{ (d|attr('items'))()|list|length }}"),
    ("f_chained", "{{ msgs|selectattr('role', 'ne', 'system')|map(attribute='content')|map('upper')|join(' / ') }}"),
    # tests
    ("tests_types", "{{ xs is iterable }} {{ 1 is number }} {{ true is number }} {{ true is integer }} {{ 1 is integer }} {{ 1.0 is float }} {{ 1 is float }} {{ 'a' is string }} {{ d is mapping }} {{ xs is mapping }} {{ xs is sequence }} {{ s is sequence }} {{ d is sequence }} {{ n is none }} {{ true is boolean }} {{ 1 is boolean }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ range is callable }} {{ s.upper is callable }} {{ 1 is callable }}"),
    ("tests_numbers", "{{ 3 is odd }} {{ 4 is even }} {{ 3.0 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ -3 is odd }}"),
    ("tests_compare", "{{ 'a' is eq 'a' }} {{ 1 is equalto 1.0 }} {{ [1, 2]|select('==', 2)|list }} {{ [1, 2]|reject('<', 2)|list }} {{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ 2 is ge 2 }} {{ 2 is le 1 }} {{ 2 is ne 2 }} {{ 2 is greaterthan 1 }} {{ 2 is lessthan 1 }} {{ 1 is in xs }} {{ 5 is in xs }} {{ 'e' is in s }}"),
    ("tests_case_sameas", "{{ 'abc' is lower }} {{ 'Abc' is lower }} {{ 'ABC' is upper }} {{ '12' is upper }} {{ none is sameas none }} {{ true is sameas true }} {{ xs is sameas xs }} {{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ s is escaped }}"),
    ("tests_is_not_chain", "{{ 1 is number and 2 is odd }} {{ u is defined or 1 }} {{ (n is none) if true else 0 }}"),
    # methods
    ("str_methods", "{{ s.upper() }} {{ s.startswith('hé') }} {{ s.endswith(('x', 'lo')) }} {{ s.startswith('l', 2) }} [{{ ' a b '.strip() }}] {{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'a\nb\r\nc'.splitlines() }} {{ ''.split(',') }}"),
    ("str_methods2", "{{ 'abc'.replace('b', 'X') }} {{ 'abcb'.find('b') }} {{ 'abcb'.rfind('b') }} {{ 'abcb'.find('z') }} {{ 'abcb'.count('b') }} {{ 'hé-llo'.index('l') }} {{ '-'.join(['a', 'b']) }} {{ 'aBc'.lower() }} {{ 'ab cd'.title() }} {{ 'aB'.swapcase() }} {{ 'xxyxx'.strip('x') }} {{ '  x'.lstrip() }}{{ 'x  '.rstrip() }}| {{ 'abc'.capitalize() }}"),
    ("str_methods3", "{{ '12'.isdigit() }} {{ 'a1'.isalnum() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} {{ 'AB'.isupper() }} {{ 'ab'.islower() }} {{ ''.isdigit() }} {{ 'Ab Cd'.istitle() }} [{{ 'ab'.center(6, '*') }}] [{{ 'ab'.ljust(4) }}] [{{ 'ab'.rjust(4) }}] {{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.py'.removesuffix('.py') }}"),
    ("dict_list_methods", "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 5) }} {{ d.keys()|list }} {{ d.values()|list|length }} {{ xs.index(2) }} {{ xs.count(2) }} {{ d.copy() == d }} {% for k, v in d.items() %}{{ k }}{% endfor %}"),
    ("range_global", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} {% for i in range(2) %}{{ i }}{% endfor %} {{ range(3)|length }}"),
    ("strftime_constant", "{{ strftime_now('%%') }}|{{ strftime_now('') }}"),
    ("unsafe_method_is_undefined", "[{{ xs.append }}][{{ d.pop }}][{{ d.update is defined }}]"),
    # real-template idioms
    ("idiom_system_extract", "{% if msgs[0]['role'] == 'system' %}{% set sys = msgs[0]['content'] %}{% set rest = msgs[1:] %}{% else %}{% set rest = msgs %}{% endif %}{{ sys }}|{% for m in rest %}{{ m.role }}{% endfor %}"),
    ("idiom_think_split", "{% set c = '<think>\nreason\n</think>\n\nanswer' %}{{ c.split('</think>')[-1].lstrip('\n') }}|{{ c.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') }}"),
    ("idiom_tool_args", "{% for tc in [{'function': {'name': 'f', 'arguments': {'x': 1, 'é': 'ü'}}}, {'function': {'name': 'g', 'arguments': '{\"y\": 2}'}}] %}{% if tc.function %}{% set tc = tc.function %}{% endif %}{{ tc.name }}:{% if tc.arguments is string %}{{ tc.arguments }}{% else %}{{ tc.arguments|tojson }}{% endif %};{% endfor %}"),
    ("idiom_alternation_check", "{% for m in msgs[1:] %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}BAD{% endif %}{% endfor %}ok"),
    ("idiom_last_user_index", "{% set ns = namespace(idx=-1) %}{% for m in msgs %}{% if m.role == 'user' %}{% set ns.idx = loop.index0 %}{% endif %}{% endfor %}{{ ns.idx }}"),
    ("content_not_interpreted", "{{ '{{ x }} {% if %}' }}{{ s }}"),
]

# Templates that jinja2 rejects or that fail while rendering. The C++ must
# fail the same way (parse vs render) with a clear status.
FEATURE_ERRORS = [
    ("err_raise_exception", "{{ raise_exception('Custom failure: roles must alternate') }}"),
    ("err_raise_in_branch", "{% for m in msgs %}{% if m.role == 'assistant' %}{{ raise_exception('no assistant: ' ~ m.content) }}{% endif %}{% endfor %}"),
    ("err_undefined_attr_of_undefined", "{{ u.x }}"),
    ("err_undefined_nested", "{{ d.zz.y }}"),
    ("err_undefined_arith", "{{ u + 1 }}"),
    ("err_undefined_compare", "{{ u < 1 }}"),
    ("err_undefined_call", "{{ u() }}"),
    ("err_undefined_tojson", "{{ u|tojson }}"),
    ("err_undefined_int", "{{ u|int }}"),
    ("err_undefined_float", "{{ u|float }}"),
    ("err_undefined_neg", "{{ -u }}"),
    ("err_undefined_indent", "{{ u|indent }}"),
    ("err_undefined_method", "{{ msgs[0].nothere.strip() }}"),
    ("err_type_concat", "{{ 'a' + 1 }}"),
    ("err_neg_binds_before_filter", "{{ -xs|length }}"),
    ("err_type_compare", "{{ 1 < 'a' }}"),
    ("err_none_plus_str", "{{ n + 'x' }}"),
    ("err_not_callable", "{{ xs() }}"),
    ("err_not_iterable", "{% for x in 5 %}{% endfor %}"),
    ("err_unpack", "{% set a, b = [1] %}"),
    ("err_zero_div", "{{ 10 // 0 }}"),
    ("err_zero_mod", "{{ 5 % 0 }}"),
    ("err_zero_truediv", "{{ 1 / 0 }}"),
    ("err_range_too_big", "{{ range(100001)|list }}"),
    ("err_unsafe_append", "{{ xs.append(4) }}"),
    ("err_macro_too_many_args", "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}"),
    ("err_macro_bad_kwarg", "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, z=2) }}"),
    ("err_ns_underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}"),
    ("err_ns_underscore_ctor", "{% set ns = namespace(_a=1) %}"),
    ("err_set_attr_non_namespace", "{% set d.x = 1 %}"),
    ("err_unknown_filter_in_if", "{% if true %}{{ xs|nosuchfilter }}{% endif %}"),
    ("err_str_index_method", "{{ 'abc'.index('z') }}"),
    ("err_split_empty_sep", "{{ 'abc'.split('') }}"),
    ("err_tojson_generator", "{{ xs|map('string')|tojson }}"),
    ("err_length_generator", "{{ xs|map('string')|length }}"),
    ("err_bad_slice_index", "{{ xs[:u] }}"),
    ("err_items_not_mapping", "{{ xs|items|list }}"),
    ("err_percent_too_few", "{{ '%s %s' % ('a',) }}"),
    ("err_percent_too_many", "{{ '%s' % ('a', 'b') }}"),
    ("err_format_missing_key", "{{ '{x}'.format(y=1) }}"),
    ("err_map_no_args", "{{ xs|map|list }}"),
    ("err_round_method", "{{ 1.5|round(0, 'nearest') }}"),
    # syntax errors (jinja2 fails in from_string)
    ("syntax_unterminated_block", "{% if true %}x"),
    ("syntax_unterminated_for", "{% for x in xs %}{{ x }}"),
    ("syntax_unterminated_var", "{{ x"),
    ("syntax_unterminated_string", "{{ 'abc }}"),
    ("syntax_unterminated_comment", "{# never closed"),
    ("syntax_unterminated_raw", "{% raw %}abc"),
    ("syntax_empty_var", "{{ }}"),
    ("syntax_unknown_tag", "{% foo %}"),
    ("syntax_unknown_filter", "{{ xs|nosuchfilter }}"),
    ("syntax_unknown_test", "{{ xs is nosuchtest }}"),
    ("syntax_stray_endif", "{% endif %}"),
    ("syntax_mismatched_end", "{% if true %}{% endfor %}"),
    ("syntax_bad_for", "{% for %}{% endfor %}"),
    ("syntax_bad_paren", "{{ (1 + 2 }}"),
    ("syntax_extra_paren", "{{ 1 + 2) }}"),
    ("syntax_bad_char", "{{ 1 $ 2 }}"),
    ("syntax_else_without_if", "{% else %}"),
    ("syntax_break_outside_loop", "{% break %}"),
    ("syntax_assign_to_literal", "{% set 1 = 2 %}"),
    ("syntax_macro_default_order", "{% macro f(a=1, b) %}{% endmacro %}"),
    ("syntax_chained_is", "{{ 1 is odd is even }}"),
    ("syntax_test_swallows_if", "{{ n is none if true else 0 }}"),
    ("syntax_bad_escape", "{{ '\\x4' }}"),
    ("syntax_call_block_needs_call", "{% call foo %}{% endcall %}"),
]


def feature_cases():
    cases = []
    seen = set()
    problems = []
    for entry in FEATURES + FEATURE_ERRORS:
        name, src = entry
        assert name not in seen, name
        seen.add(name)
        r = render(src, copy.deepcopy(FEATURE_CTX))
        case = {"name": name, "template": src}
        if "text" in r:
            if name.startswith(("err_", "syntax_")):
                problems.append((name, r))
            case["expected"] = r["text"]
        else:
            if not name.startswith(("err_", "syntax_")) or (
                    (r["phase"] == "parse") != name.startswith("syntax_")):
                problems.append((name, r))
            case["error"] = {"phase": r["phase"], "type": r["type"], "message": r["message"]}
        cases.append(case)
    assert not problems, "\n".join(map(str, problems))
    return cases


# ------------------------------------------------------------------ main ----

def extract_smollm2(gguf_path):
    import gguf  # noqa: PLC0415

    reader = gguf.GGUFReader(gguf_path)
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def write(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def check_qwen3_tokenizer(qwen3_dir, cases, source):
    from transformers import AutoTokenizer  # noqa: PLC0415

    tok = AutoTokenizer.from_pretrained(qwen3_dir)
    assert tok.chat_template == source
    for c in cases:
        inp = c["inputs"]
        try:
            got = tok.apply_chat_template(inp["messages"], tools=inp["tools"], tokenize=False,
                                          add_generation_prompt=inp["add_generation_prompt"], **inp["kwargs"])
        except Exception as e:  # noqa: BLE001
            assert "error" in c and c["error"]["message"] == str(e), (c["name"], e)
            continue
        assert c.get("expected") == got, c["name"]
    print(f"  qwen3: {len(cases)} cases agree with AutoTokenizer.apply_chat_template")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--smollm2-gguf", default="/root/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--qwen3-config", default="/work/shared/testdata/tokenizers/qwen3/tokenizer_config.json")
    args = ap.parse_args()
    print("versions:", versions())

    templates_dir = os.path.join(args.out, "templates")
    os.makedirs(templates_dir, exist_ok=True)
    with open(os.path.join(templates_dir, "smollm2.jinja"), "w", encoding="utf-8") as f:
        f.write(extract_smollm2(args.smollm2_gguf))
    with open(args.qwen3_config, encoding="utf-8") as f:
        qwen3_source = json.load(f)["chat_template"]
    with open(os.path.join(templates_dir, "qwen3.jinja"), "w", encoding="utf-8") as f:
        f.write(qwen3_source)

    for name in sorted(SPECIAL):
        with open(os.path.join(templates_dir, name + ".jinja"), encoding="utf-8", newline="") as f:
            source = f.read()
        cases = model_cases(name, source)
        if name == "qwen3":
            check_qwen3_tokenizer(os.path.dirname(args.qwen3_config), cases, source)
        write(os.path.join(args.out, name + ".json"), {
            "name": name, "source": SOURCES[name], "versions": versions(),
            "template": source, "cases": cases,
        })
        n_err = sum("error" in c for c in cases)
        print(f"  {name}: {len(cases)} cases ({n_err} raise)")
    feats = feature_cases()
    write(os.path.join(args.out, "features.json"),
          {"versions": versions(), "context": FEATURE_CTX, "cases": feats})
    print(f"  features: {len(feats)} cases ({sum('error' in c for c in feats)} errors)")


if __name__ == "__main__":
    main()
