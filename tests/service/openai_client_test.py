"""The official `openai` Python client against `tandem serve`: a streaming
chat completion and a non-streaming completion (text equal to `tandem
generate`), model listing, log-probs and error types — with the default
SmolLM2 model, and with a random MoE checkpoint (real tokenizer and chat
template) whose routed experts are half on the cpu_worker.

usage: openai_client_test.py TANDEM RANDOM_MOE_DIR   (TANDEM_SMOLLM2_GGUF set; the
       MoE directory made by make_random_moe.py)
"""
import os
import sys

import openai

from harness import Checks, Serve, generate


def exercise(checks, tandem, model, label, serve_args, expect_in_chat=None):
    serve = Serve(tandem, model, *serve_args, name=label)
    try:
        client = openai.OpenAI(base_url=serve.url + "/v1", api_key="unused", max_retries=0,
                               timeout=300)
        ids = [m.id for m in client.models.list().data]
        checks.check(f"[{label}] models.list names the model", ids == [label], str(ids))

        messages = [{"role": "user", "content": "What is the capital of France?"}]
        stream = client.chat.completions.create(
            model=label, messages=messages, max_tokens=24, temperature=0, stream=True,
            stream_options={"include_usage": True})
        pieces, finish, usage = [], None, None
        for chunk in stream:
            for c in chunk.choices:
                pieces.append(c.delta.content or "")
                finish = c.finish_reason or finish
            usage = chunk.usage or usage
        streamed = "".join(pieces)
        full = client.chat.completions.create(model=label, messages=messages, max_tokens=24,
                                              temperature=0)
        text = full.choices[0].message.content
        checks.check(f"[{label}] streamed chat equals the non-streamed answer",
                     streamed == text and len(text) > 0, f"{streamed!r} vs {text!r}")
        checks.check(f"[{label}] streamed chat has a finish reason and usage",
                     finish in ("stop", "length") and usage is not None
                     and usage.completion_tokens == full.usage.completion_tokens,
                     f"{finish} {usage}")
        if expect_in_chat:
            checks.check(f"[{label}] chat answer mentions {expect_in_chat}",
                         expect_in_chat in text, repr(text))

        prompt = "The capital of France is"
        comp = client.completions.create(model=label, prompt=prompt, max_tokens=12,
                                         temperature=0, logprobs=2, extra_body={"ignore_eos": True})
        ref = generate(tandem, model, prompt=prompt, max_tokens=12, extra=["--ignore-eos"])
        choice = comp.choices[0]
        checks.check(f"[{label}] completion text equals tandem generate",
                     choice.text == ref["text"], f"{choice.text!r} vs {ref['text']!r}")
        lp = choice.logprobs
        checks.check(f"[{label}] completion log-probs: one per token, top-2 each",
                     len(lp.token_logprobs) == 12 and all(2 <= len(t) <= 3 for t in lp.top_logprobs)
                     and all(abs(a - b["logprob"]) < 1e-3
                             for a, b in zip(lp.token_logprobs, ref["tokens"])),
                     f"{lp.token_logprobs} vs {[t['logprob'] for t in ref['tokens']]}")
        checks.check(f"[{label}] completion usage",
                     comp.usage.completion_tokens == 12
                     and comp.usage.prompt_tokens == len(ref["prompt_ids"]), str(comp.usage))

        try:
            client.completions.create(model="no-such-model", prompt="x", max_tokens=2)
            checks.check(f"[{label}] unknown model raises NotFoundError", False)
        except openai.NotFoundError as e:
            checks.check(f"[{label}] unknown model raises NotFoundError", e.status_code == 404)
        try:
            client.completions.create(model=label, prompt="x", max_tokens=-3)
            checks.check(f"[{label}] max_tokens=-3 raises BadRequestError", False)
        except openai.BadRequestError as e:
            checks.check(f"[{label}] max_tokens=-3 raises BadRequestError", e.status_code == 400)
    finally:
        rc, alive, shm = serve.stop()
    checks.check(f"[{label}] serve exits 0 on SIGTERM leaving no process or segment",
                 rc == 0 and not alive and not shm, f"rc={rc} alive={alive} shm={shm}")
    return serve


def main():
    tandem, moe = sys.argv[1], sys.argv[2]
    checks = Checks()
    smollm2 = os.environ.get("TANDEM_SMOLLM2_GGUF", "")
    if checks.check("TANDEM_SMOLLM2_GGUF names the default model (deploy/test.sh sets it)",
                    os.path.isfile(smollm2), repr(smollm2)):
        exercise(checks, tandem, smollm2, "smollm2", [], expect_in_chat="Paris")

    serve = exercise(checks, tandem, moe, "random-moe", ["--cpu-experts", "4-per-layer"])
    checks.check("[random-moe] experts ran on a cpu_worker child",
                 len(serve.child_pids("cpu_worker")) == 1, serve.log())
    checks.finish()


if __name__ == "__main__":
    main()
