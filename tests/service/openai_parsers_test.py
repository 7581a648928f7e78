"""--reasoning-parser and --tool-call-parser through the official `openai`
client: reasoning_content, tool_calls and finish_reason "tool_calls" as the
client's own types read them, whole and streamed. The answer comes from the
fake backend (tandem_fake_openai_server --reply), since no test model writes
<think> or <tool_call>.

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

        content, reasoning, finish, streamed = "", "", None, {}
        for chunk in client.chat.completions.create(model="fake-model", messages=MESSAGES,
                                                    tools=TOOLS, max_tokens=150, stream=True):
            if not chunk.choices:
                continue
            d = chunk.choices[0].delta
            content += d.content or ""
            reasoning += (d.model_extra or {}).get("reasoning_content") or ""
            for tc in d.tool_calls or []:
                e = streamed.setdefault(tc.index, {"name": "", "arguments": ""})
                e["name"] += tc.function.name or ""
                e["arguments"] += tc.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
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
    checks.finish()


if __name__ == "__main__":
    main()
