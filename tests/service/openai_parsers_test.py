"""--reasoning-parser and --tool-call-parser through the official `openai`
client: reasoning_content, tool_calls and finish_reason "tool_calls" as the
client's own types read them, whole and streamed. The answer comes from the
fake backend (tandem_fake_openai_server --reply), since no test model writes
<think>, <tool_call>, [TOOL_CALLS] or Llama's JSON calls. Each of the three
tool-call formats is served by its own fake server.

  run.sh openai_parsers_test.py BUILD/coordinator/frontend/tandem_fake_openai_server
"""

import json
import subprocess
import sys

import openai

from harness import Checks

REPLY = ('<think>Which city?</think>Checking.<tool_call>\n'
         '{"name": "get_weather", "arguments": {"city": "Zürich", "days": [1, 2]}}\n</tool_call>')
TOOLS = [{"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
MESSAGES = [{"role": "user", "content": "Weather?"}]


ARGS = {"city": "Zürich", "days": [1, 2]}
# --tool-call-parser NAME: (the answer, its content as the client reads it,
# a check of the call's id).
FORMATS = {
    "mistral": ('Sure.[TOOL_CALLS] [{"name": "get_weather", "arguments": '
                '{"city": "Zürich", "days": [1, 2]}}]', "Sure.",
                lambda i: len(i) == 9 and i.isalnum()),
    "llama3_json": ('<|python_tag|>{"name": "get_weather", "parameters": '
                    '{"city": "Zürich", "days": [1, 2]}}', None,
                    lambda i: i.startswith("chatcmpl-tool-")),
}


def start(server, reply, *flags):
    proc = subprocess.Popen([server, "--port", "0", "--reply", reply, *flags],
                            stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline().rsplit(":", 1)[1])
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                           max_retries=0, timeout=30)
    return proc, client


def streamed_answer(client, **extra):
    """The streamed answer put together: (content, reasoning, finish_reason,
    {index: {"id", "name", "arguments"}})."""
    content, reasoning, finish, calls = "", "", None, {}
    for chunk in client.chat.completions.create(model="fake-model", messages=MESSAGES,
                                                tools=TOOLS, max_tokens=150, stream=True,
                                                **extra):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        reasoning += (d.model_extra or {}).get("reasoning_content") or ""
        for tc in d.tool_calls or []:
            e = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            e["id"] += tc.id or ""
            e["name"] += tc.function.name or ""
            e["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return content, reasoning, finish, calls


def check_format(server, checks, parser, reply, want_content, id_ok):
    proc, client = start(server, reply, "--tool-call-parser", parser)
    try:
        r = client.chat.completions.create(model="fake-model", messages=MESSAGES, tools=TOOLS,
                                           max_tokens=150)
        choice, m = r.choices[0], r.choices[0].message
        calls = m.tool_calls or []
        checks.check(f"{parser}: one call, finish_reason tool_calls, content {want_content!r}",
                     choice.finish_reason == "tool_calls" and m.content == want_content
                     and len(calls) == 1 and calls[0].function.name == "get_weather"
                     and json.loads(calls[0].function.arguments) == ARGS, m)
        checks.check(f"{parser}: the call's id has the model's form",
                     bool(calls) and id_ok(calls[0].id), calls)
        content, _, finish, streamed = streamed_answer(client)
        checks.check(f"{parser}: streamed, the same content, call and finish_reason",
                     content == (want_content or "") and finish == "tool_calls"
                     and list(streamed) == [0] and streamed[0]["name"] == "get_weather"
                     and id_ok(streamed[0]["id"])
                     and json.loads(streamed[0]["arguments"]) == ARGS, (content, finish, streamed))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def check_forced(server, checks):
    """tool_choice "required": the answer is the list of calls (no parser
    flag needed), whole and streamed piece by piece, the same calls."""
    reply = ('[{"name": "get_weather", "parameters": {"city": "Zürich", "days": [1, 2]}}, '
             '{"name": "get_weather", "parameters": {"city": "Bern"}}]')
    proc, client = start(server, reply)
    try:
        r = client.chat.completions.create(model="fake-model", messages=MESSAGES, tools=TOOLS,
                                           tool_choice="required", max_tokens=150)
        choice, m = r.choices[0], r.choices[0].message
        calls = m.tool_calls or []
        checks.check("tool_choice required: two calls, finish_reason tool_calls, no content",
                     choice.finish_reason == "tool_calls" and m.content is None
                     and len(calls) == 2 and json.loads(calls[0].function.arguments) == ARGS
                     and json.loads(calls[1].function.arguments) == {"city": "Bern"}, m)
        content, _, finish, streamed = streamed_answer(client, tool_choice="required")
        checks.check("tool_choice required, streamed: the same calls, put together by the client",
                     content == "" and finish == "tool_calls" and sorted(streamed) == [0, 1]
                     and all(streamed[i]["name"] == calls[i].function.name
                             and streamed[i]["arguments"] == calls[i].function.arguments
                             and streamed[i]["id"].startswith("chatcmpl-tool-")
                             for i in range(min(2, len(calls)))),
                     (content, finish, streamed, calls))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main():
    server, checks = sys.argv[1], Checks()
    proc = subprocess.Popen([server, "--port", "0", "--reply", REPLY, "--reasoning-parser", "qwen3",
                             "--tool-call-parser", "hermes"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        port = int(line.rsplit(":", 1)[1])
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                               max_retries=0, timeout=30)

        r = client.chat.completions.create(model="fake-model", messages=MESSAGES, tools=TOOLS,
                                           max_tokens=150)
        choice, m = r.choices[0], r.choices[0].message
        checks.check("finish_reason is tool_calls", choice.finish_reason == "tool_calls",
                     choice.finish_reason)
        checks.check("content is the text before the call", m.content == "Checking.", m.content)
        checks.check("reasoning_content holds the <think> part",
                     (m.model_extra or {}).get("reasoning_content") == "Which city?", m)
        calls = m.tool_calls or []
        checks.check("one tool call, typed by the client",
                     len(calls) == 1 and calls[0].type == "function"
                     and calls[0].function.name == "get_weather"
                     and calls[0].id.startswith("chatcmpl-tool-"), calls)
        if calls:
            checks.check("its arguments are the JSON the model wrote",
                         json.loads(calls[0].function.arguments)
                         == {"city": "Zürich", "days": [1, 2]}, calls[0].function.arguments)

        content, reasoning, finish, streamed = streamed_answer(client)
        checks.check("streamed: the same content, reasoning and finish_reason",
                     (content, reasoning, finish) == ("Checking.", "Which city?", "tool_calls"),
                     (content, reasoning, finish))
        checks.check("streamed: the same call",
                     list(streamed) == [0] and streamed[0]["name"] == "get_weather"
                     and json.loads(streamed[0]["arguments"]) == {"city": "Zürich", "days": [1, 2]},
                     streamed)

        r = client.chat.completions.create(model="fake-model", messages=MESSAGES, max_tokens=150)
        m = r.choices[0].message
        checks.check("without tools the calls stay text",
                     not m.tool_calls and "<tool_call>" in (m.content or "")
                     and r.choices[0].finish_reason == "stop", m)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    for parser, (reply, want_content, id_ok) in FORMATS.items():
        check_format(server, checks, parser, reply, want_content, id_ok)
    check_forced(server, checks)
    checks.finish()


if __name__ == "__main__":
    main()
