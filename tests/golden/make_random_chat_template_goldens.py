#!/usr/bin/env python3
"""Writes chat-template goldens for random conversations, in the format of
make_chat_template_goldens.py (same oracle: transformers' Jinja environment,
each case rendered directly and through render_jinja_template, which must
agree), into tests/data/chat_templates/random/<name>.json. Read by
coordinator/chat/chat_template_golden_test.cc.

  /root/oracle-venv/bin/python tests/golden/make_random_chat_template_goldens.py

Run make_chat_template_goldens.py first (it writes templates/*.jinja). The
conversations come from a seeded generator (--seed, --count): random text of
every script with Jinja-looking markup, quotes and backslashes; system, user,
assistant and tool turns, mostly well ordered and sometimes not (so the
templates' raise_exception paths run too); tool calls whose arguments are
JSON objects or strings holding every JSON type (floats such as 1e-07, 1e+21,
-0.0 and 2**53 + 1 included, which tojson must print as Python does);
reasoning fields; tools; add_generation_prompt and enable_thinking.
"""

import argparse
import json
import os
import random
import string
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_chat_template_goldens as g  # noqa: E402
from make_random_tokenizer_goldens import piece  # noqa: E402

MARKUP = ["{{ x }}", "{% if %}", "{#", "#}", "%}", "}}", "{{-", "\\", "\\n", '"', "'", "\\u00e9",
          "<|im_end|>", "</s>", "[INST]", "<think>", "</think>", "<tool_call>", "```json\n{}\n```"]


def text(r, max_pieces=6):
    out = ""
    for _ in range(r.randint(0, max_pieces)):
        out += r.choice(MARKUP) if r.random() < 0.25 else piece(r)
    return out.replace("\x00", "")  # NUL: no tokenizer input has one, and JSON tools lose it


def json_value(r, depth=0):
    k = r.randint(0, 9 if depth < 2 else 5)
    if k == 0:
        return r.choice([0, 1, -7, 42, 2**31, 2**53 + 1, -(2**63)])
    if k == 1:
        return r.choice([0.1, 1e-07, 1e21, 1e+100, 123.0, -0.0, 3.14159, 2.5e-5, 1.0 / 3])
    if k == 2:
        return r.choice([True, False, None])
    if k in (3, 4, 5):
        return text(r, 3)
    if k in (6, 7):
        return [json_value(r, depth + 1) for _ in range(r.randint(0, 3))]
    return {text(r, 1) or "k": json_value(r, depth + 1) for _ in range(r.randint(0, 3))}


def tool_call(r):
    name = r.choice(["get_weather", "search", text(r, 1) or "f"])
    args = {"location": text(r, 2)} if r.random() < 0.3 else json_value(r, 1)
    if not isinstance(args, dict):
        args = {"value": args}
    call = {"type": "function",
            "function": {"name": name, "arguments": json.dumps(args) if r.random() < 0.3 else args}}
    if r.random() < 0.9:  # Mistral wants 9 alphanumerics; sometimes it gets something else
        call["id"] = "".join(r.choice(string.ascii_letters + string.digits)
                             for _ in range(9 if r.random() < 0.8 else r.randint(1, 12)))
    return call


def conversation(r, tools_ok, reasoning_ok):
    msgs = []
    if r.random() < 0.4:
        msgs.append({"role": "system", "content": text(r)})
    turns = r.randint(1, 5)
    well_ordered = r.random() < 0.85
    for i in range(turns):
        role = ("user" if i % 2 == 0 else "assistant") if well_ordered else r.choice(
            ["user", "assistant", "system", "tool"])
        m = {"role": role, "content": text(r)}
        if role == "assistant":
            if reasoning_ok and r.random() < 0.3:
                m[r.choice(["reasoning_content", "thinking"])] = text(r, 3)
            if tools_ok and r.random() < 0.35:
                m["tool_calls"] = [tool_call(r) for _ in range(r.randint(1, 2))]
                if r.random() < 0.3:
                    m["content"] = None if r.random() < 0.5 else ""
                msgs.append(m)
                for c in m["tool_calls"]:
                    reply = {"role": "tool", "content": text(r, 3)}
                    if "id" in c:
                        reply["tool_call_id"] = c["id"]
                    msgs.append(reply)
                continue
        msgs.append(m)
    return msgs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=20261125)
    ap.add_argument("--count", type=int, default=40, help="conversations per template")
    args = ap.parse_args()
    out_dir = os.path.join(g.OUT, "random")
    os.makedirs(out_dir, exist_ok=True)
    for name in sorted(g.SPECIAL):
        with open(os.path.join(g.TEMPLATES, name + ".jinja"), encoding="utf-8", newline="") as f:
            source = f.read()
        r = random.Random("%d/%s" % (args.seed, name))
        tools_ok, reasoning_ok = name in g.TOOL_TEMPLATES, name in g.REASONING_TEMPLATES
        cases = []
        for i in range(args.count):
            msgs = conversation(r, tools_ok, reasoning_ok)
            tools = None
            if tools_ok and r.random() < 0.5:
                tools = r.sample(g.TOOLS, r.randint(1, len(g.TOOLS)))
            kwargs = {}
            if name == "qwen3" and r.random() < 0.5:
                kwargs["enable_thinking"] = r.random() < 0.5
            cases.append(g.make_case("random_%d" % i, source, msgs, tools, r.random() < 0.5,
                                     g.SPECIAL[name], kwargs))
        g.write(os.path.join(out_dir, name + ".json"), {
            "name": name, "source": g.SOURCES[name] + "; random conversations, seed %d" % args.seed,
            "generator": "tests/golden/make_random_chat_template_goldens.py",
            "versions": g.versions(), "template": source, "cases": cases,
        })
        print(f"  {name}: {len(cases)} cases ({sum('error' in c for c in cases)} raise)")


if __name__ == "__main__":
    main()
