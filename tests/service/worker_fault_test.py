"""Faults through `tandem serve`. A client that disconnects mid-stream must
free its request (and KV) at once. A cpu_worker (computing half of the
routed experts) is killed while a completion streams. The stream must end
within a couple of seconds with an error event naming the cause (never a
silent truncation or a hang), the coordinator must keep serving, and once
`tandem serve` has restarted the cpu_worker, requests succeed again with the
same greedy output as before the fault.

usage: worker_fault_test.py TANDEM RANDOM_MOE_DIR
"""
import json
import re
import sys
import time
import urllib.request

from harness import Checks, Serve, pid_alive

PROMPT = "The river carried cold water past old stone houses"


def running(serve):
    with urllib.request.urlopen(serve.url + "/metrics", timeout=10) as r:
        body = r.read().decode()
    m = re.search(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", body, re.M)
    return float(m.group(1)) if m else -1


def main():
    tandem, model = sys.argv[1], sys.argv[2]
    checks = Checks()
    serve = Serve(tandem, model, "--cpu-experts", "4-per-layer", "--max-model-len", "4096")
    try:
        greedy = {"model": "model", "prompt": PROMPT, "max_tokens": 16, "temperature": 0,
                  "ignore_eos": True}
        status, before = serve.post("/v1/completions", greedy)
        checks.check("greedy completion before the fault", status == 200, str(before))

        # A client that goes away mid-stream: its request stops running at once.
        body = {"model": "model", "prompt": PROMPT, "max_tokens": 4000, "temperature": 0,
                "ignore_eos": True, "stream": True}
        req = urllib.request.Request(serve.url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        r = urllib.request.urlopen(req, timeout=120)
        for _ in range(5):
            r.readline()
        was_running = running(serve)
        r.close()
        left = time.time()
        while time.time() - left < 2 and running(serve) != 0:
            time.sleep(0.02)
        checks.check(f"a client that disconnects mid-stream frees its request within 2 s "
                     f"(running {was_running} -> {running(serve)} after "
                     f"{time.time() - left:.2f} s)", was_running == 1 and running(serve) == 0)

        cpu = serve.child_pids("cpu_worker")
        checks.check("one cpu_worker child", len(cpu) == 1, serve.log())

        # A long stream; kill the cpu_worker once tokens flow.
        body = {"model": "model", "prompt": PROMPT, "max_tokens": 4000, "temperature": 0,
                "ignore_eos": True}
        events, done, killed_at, ended_at = serve.stream_and_kill("/v1/completions", body, cpu[0])
        errors = [e["error"] for e in events if "error" in e]
        tokens = sum(1 for e in events if e.get("choices"))
        print(f"stream: {tokens} token events, then {errors}", flush=True)
        checks.check("the cpu_worker was killed mid-stream", killed_at is not None)
        checks.check("the stream ends with an error event and [DONE], not a silent cut",
                     len(errors) == 1 and done and tokens < 4000, str(events[-2:]))
        checks.check("the error names the lost worker",
                     errors and "cpu_worker" in errors[0].get("message", ""), str(errors))
        if killed_at is not None:
            checks.check(f"the stream ended within 2 s of the kill "
                         f"({ended_at - killed_at:.2f} s)", ended_at - killed_at < 2.0)
        checks.check("the killed cpu_worker is gone", not pid_alive(cpu[0]))

        # Serving resumes once the restarted cpu_worker has attached.
        status, after = serve.post_until_ok("/v1/completions", greedy, 60)
        restarted = serve.child_pids("cpu_worker")
        checks.check("tandem serve started a new cpu_worker",
                     len(restarted) == 2 and pid_alive(restarted[1]), str(restarted))
        checks.check("requests succeed again after the restart, with the same greedy text",
                     status == 200 and after["choices"][0]["text"] == before["choices"][0]["text"],
                     f"{status} {after}")
        checks.check("health is 200 again", serve.status("/health") == 200)
    finally:
        rc, alive, shm = serve.stop()
    checks.check("serve exits 0 on SIGTERM leaving no process or segment",
                 rc == 0 and not alive and not shm, f"rc={rc} alive={alive} shm={shm}")
    checks.finish()


if __name__ == "__main__":
    main()
