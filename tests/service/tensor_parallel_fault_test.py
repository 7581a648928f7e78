"""A tensor-parallel group through `tandem serve --tensor-parallel 2`: the
model sharded over two gpu_workers gives the same greedy text as one
gpu_worker; when the rank-1 gpu_worker is killed while a completion streams,
the stream ends within a few seconds with an error event naming the lost
gpu_worker (its peer, blocked in the all-reduce, notices the death instead of
waiting out a timeout), and once `tandem serve` has restarted it the group is
loaded again and requests give the same text as before.

usage: tensor_parallel_fault_test.py TANDEM RANDOM_MOE_DIR
"""
import sys

from harness import Checks, Serve, pid_alive

PROMPT = [17, 923, 3318, 77, 1200, 5, 64, 2011]


def main():
    tandem, model = sys.argv[1], sys.argv[2]
    checks = Checks()
    greedy = {"model": "model", "prompt": PROMPT, "max_tokens": 16, "temperature": 0,
              "ignore_eos": True, "logprobs": 0, "return_tokens_as_token_ids": True}

    single = Serve(tandem, model)
    try:
        status, want = single.post("/v1/completions", greedy)
        checks.check("greedy completion on one gpu_worker", status == 200, str(want))
    finally:
        single.stop()

    serve = Serve(tandem, model, "--tensor-parallel", "2", "--max-model-len", "4096")
    try:
        gpus = serve.child_pids("gpu_worker")
        checks.check("two gpu_worker children", len(gpus) == 2, serve.log())
        status, before = serve.post("/v1/completions", greedy)
        checks.check("the group's greedy text equals one gpu_worker's",
                     status == 200 and before["choices"][0]["text"] == want["choices"][0]["text"],
                     f"{status} {before} vs {want}")

        body = {"model": "model", "prompt": PROMPT, "max_tokens": 3000, "temperature": 0,
                "ignore_eos": True}
        events, done, killed_at, ended_at = serve.stream_and_kill("/v1/completions", body, gpus[1])
        errors = [e["error"] for e in events if "error" in e]
        tokens = sum(1 for e in events if e.get("choices"))
        print(f"stream: {tokens} token events, then {errors}", flush=True)
        checks.check("rank 1 was killed mid-stream", killed_at is not None)
        checks.check("the stream ends with an error event and [DONE], not a silent cut",
                     len(errors) == 1 and done and tokens < 3000, str(events[-2:]))
        checks.check("the error names the lost gpu_worker",
                     bool(errors) and "gpu_worker" in errors[0].get("message", ""), str(errors))
        if killed_at is not None:
            checks.check(f"the stream ended within 5 s of the kill "
                         f"({ended_at - killed_at:.2f} s)", ended_at - killed_at < 5.0)

        status, after = serve.post_until_ok("/v1/completions", greedy, 90)
        restarted = serve.child_pids("gpu_worker")
        checks.check("tandem serve started a new rank-1 gpu_worker",
                     len(restarted) == 3 and pid_alive(restarted[2]), str(restarted))
        checks.check("requests succeed again with the same greedy text",
                     status == 200 and after["choices"][0]["text"] == want["choices"][0]["text"],
                     f"{status} {after}")
    finally:
        rc, alive, shm = serve.stop()
    checks.check("serve exits 0 on SIGTERM leaving no process or segment",
                 rc == 0 and not alive and not shm, f"rc={rc} alive={alive} shm={shm}")
    checks.finish()


if __name__ == "__main__":
    main()
