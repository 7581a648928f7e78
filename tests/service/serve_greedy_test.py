"""Greedy outputs through `tandem serve` equal transformers' goldens and
`tandem generate`, token for token, for one golden checkpoint; for an MoE
checkpoint with the routed experts on the gpu_worker, all on the cpu_worker,
and half on each. The golden prompts run concurrently (one batch), streamed
and not.

usage: serve_greedy_test.py TANDEM MODEL_DIR
"""
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from harness import Checks, Serve, completion_ids, generate


def stream_ids(serve, body):
    status, events, done = serve.stream("/v1/completions", body)
    ids = []
    finish = None
    for e in events:
        for c in e.get("choices", []):
            lp = c.get("logprobs") or {}
            ids += [int(t.split(":", 1)[1]) for t in lp.get("tokens", [])]
            finish = c.get("finish_reason") or finish
    return status, ids, done, finish


def main():
    tandem, model = sys.argv[1], sys.argv[2]
    checks = Checks()
    golden = json.load(open(os.path.join(model, "golden.json")))
    config = json.load(open(os.path.join(model, "config.json")))
    cases = golden["greedy"]
    n = len(cases[0]["continuation"])

    # The reference: each prompt alone through `tandem generate`.
    for case in cases:
        ref = generate(tandem, model, prompt_ids=case["prompt"], max_tokens=n,
                       extra=["--ignore-eos"])
        checks.check(f"tandem generate equals the golden for {case['prompt'][:4]}...",
                     ref["token_ids"] == case["continuation"],
                     f"{ref['token_ids']} vs {case['continuation']}")

    experts = config.get("num_local_experts") or config.get("num_experts") or 0
    placements = ["none"]
    if experts:
        placements += ["all", f"{experts // 2}-per-layer"]
    for placement in placements:
        serve = Serve(tandem, model, "--cpu-experts", placement, "--max-num-seqs", "8")
        try:
            def body(case):
                return {"model": "model", "prompt": case["prompt"], "max_tokens": n,
                        "temperature": 0, "ignore_eos": True, "logprobs": 0,
                        "return_tokens_as_token_ids": True}

            with ThreadPoolExecutor(len(cases) * 2) as pool:
                plain = [pool.submit(serve.post, "/v1/completions", body(c)) for c in cases]
                streamed = [pool.submit(stream_ids, serve, body(c)) for c in cases]
                for case, p, s in zip(cases, plain, streamed):
                    status, resp = p.result()
                    got = completion_ids(resp) if status == 200 else resp
                    checks.check(f"[{placement}] served ids equal the golden "
                                 f"for {case['prompt'][:4]}...",
                                 status == 200 and got == case["continuation"],
                                 f"{status} {got} vs {case['continuation']}")
                    status, ids, done, finish = s.result()
                    checks.check(f"[{placement}] streamed ids equal the golden, "
                                 f"finish_reason length, [DONE]",
                                 status == 200 and ids == case["continuation"] and done
                                 and finish == "length",
                                 f"{status} {ids} {done} {finish}")
            if placement != "none":
                checks.check(f"[{placement}] a cpu_worker was started",
                             len(serve.child_pids("cpu_worker")) == 1, serve.log())
        finally:
            rc, alive, shm = serve.stop()
        checks.check(f"[{placement}] serve exits 0 on SIGTERM leaving no process or segment",
                     rc == 0 and not alive and not shm, f"rc={rc} alive={alive} shm={shm}")
    checks.finish()


if __name__ == "__main__":
    main()
