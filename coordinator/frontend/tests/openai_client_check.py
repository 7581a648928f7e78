#!/usr/bin/env python3
"""Drives a live Tandem server with the official `openai` Python client and
checks that it accepts our framing: streamed chat (with include_usage and
log-probs), non-streamed chat, non-streamed and streamed completions (echo +
log-probs), and the error paths (400 and 404 become the client's typed
exceptions). Prints what it got; exits 1 on the first failed check.

  /root/oracle-venv/bin/python coordinator/frontend/tests/openai_client_check.py \
      --base-url http://127.0.0.1:PORT/v1 [--api-key KEY] [--model NAME]

Not part of ctest yet: integration tests may call it against a real server.
"""
import argparse
import sys

import openai


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}")
        sys.exit(1)
    print(f"ok: {what}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0)
    print(f"openai {openai.__version__} against {args.base_url}")

    models = client.models.list()
    ids = [m.id for m in models.data]
    print("models:", ids)
    check(len(ids) >= 1, "models.list returns at least one model")
    model = args.model or ids[0]

    # Streamed chat with usage and log-probs.
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        logprobs=True,
        top_logprobs=2,
    )
    text, finish, usage, roles, ids_seen, n_logprobs = "", None, None, [], set(), 0
    for chunk in stream:
        ids_seen.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            if c.delta.content:
                text += c.delta.content
            if c.logprobs and c.logprobs.content:
                n_logprobs += len(c.logprobs.content)
            if c.finish_reason:
                finish = c.finish_reason
    print(f"chat stream: text={text!r} finish={finish} usage={usage} roles={roles}")
    check(roles == ["assistant"], "first chat delta carries the role, once")
    check(len(ids_seen) == 1, "one id for the whole stream")
    check(finish in ("stop", "length"), "stream ends with a finish_reason")
    check(usage is not None and usage.completion_tokens > 0, "include_usage chunk parsed")
    check(usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, "usage adds up")
    check(n_logprobs == usage.completion_tokens, "one log-prob entry per streamed token")

    # Non-streamed chat.
    chat = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
        logprobs=True, top_logprobs=1)
    print("chat:", chat.choices[0].message, chat.choices[0].finish_reason, chat.usage)
    check(chat.choices[0].message.role == "assistant", "chat message role")
    check(chat.choices[0].logprobs.content[0].top_logprobs is not None, "chat log-probs")

    # Non-streamed completion with echo + log-probs (lm-eval loglikelihood shape).
    comp = client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=4, logprobs=1, echo=True,
        temperature=0)
    c0 = comp.choices[0]
    print("completion:", repr(c0.text), c0.finish_reason, comp.usage)
    check(c0.text.startswith("The capital of France is"), "echo prepends the prompt")
    lp = c0.logprobs
    check(len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset),
          "completion log-prob arrays line up")
    check(lp.token_logprobs[0] is None, "first prompt token has no log-prob")

    # Token-id prompt, streamed completion.
    text, finish, usage = "", None, None
    for chunk in client.completions.create(model=model, prompt=[72, 105], max_tokens=6,
                                           stream=True, stream_options={"include_usage": True}):
        for c in chunk.choices:
            text += c.text
            finish = c.finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage
    print(f"completion stream: text={text!r} finish={finish} usage={usage}")
    check(finish is not None and usage is not None, "completion stream finish + usage")

    # Errors come back as the client's typed exceptions.
    try:
        client.completions.create(model=model, prompt="x", max_tokens=-1)
        check(False, "max_tokens=-1 rejected")
    except openai.BadRequestError as e:
        print("400:", e.body)
        check(e.body.get("param") == "max_tokens" if isinstance(e.body, dict) else True,
              "400 names the param")
    try:
        client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
        check(False, "unknown model rejected")
    except openai.NotFoundError as e:
        print("404:", e.body)
        check(True, "unknown model -> NotFoundError")
    print("ALL OK")


if __name__ == "__main__":
    main()
