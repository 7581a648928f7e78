"""Greedy outputs through `tandem serve` equal transformers' goldens and
`tandem generate`, token for token, for one golden checkpoint; for an MoE
checkpoint with the routed experts on the gpu_worker, all on the cpu_worker,
half on each, and all spread over three cpu_workers; with a GPU KV pool of one sequence, so that the other
requests hold their KV on the cpu_worker and run attention there (Neo); and
with the model sharded over two gpu_workers (tensor parallelism). The
golden prompts run concurrently (one batch), streamed and not.

usage: serve_greedy_test.py TANDEM MODEL_DIR
"""
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
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


class CpuBlockWatcher:
    """Polls /metrics for the most CPU KV blocks in use at once."""

    def __init__(self, serve):
        self.serve, self.peak, self.done = serve, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            try:
                with urllib.request.urlopen(self.serve.url + "/metrics", timeout=5) as r:
                    body = r.read().decode()
                m = re.search(r'^tandem_kv_blocks_used\{pool="cpu"\} (\S+)$', body, re.M)
                if m:
                    self.peak = max(self.peak, int(float(m.group(1))))
            except OSError:
                pass
            time.sleep(0.002)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.peak


def expert_cache_events(serve):
    """/metrics' status and its expert cache counters by event."""
    status, text = serve.get_text("/metrics")
    return status, {m.group(1): float(m.group(2)) for m in re.finditer(
        r'tandem_expert_cache_events\{event="(\w+)"[^}]*\} (\S+)', text)}


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
    placements = [("none", [])]
    if experts:
        placements += [("all", ["--cpu-experts", "all"]),
                       (f"{experts // 2}-per-layer", ["--cpu-experts", f"{experts // 2}-per-layer"]),
                       ("all-on-3-workers", ["--cpu-experts", "all", "--cpu-workers", "3"]),
                       # llama.cpp's spelling: every expert of layer 0 on the cpu_worker
                       ("n-cpu-moe-1", ["--n-cpu-moe", "1"]),
                       # llama.cpp's -ot: layer 0's experts on the gpu_worker, the rest on
                       # the cpu_worker (the first matching rule wins)
                       ("override-tensor", ["-ot", "blk\\.0\\.ffn=GPU,exps=CPU"])]
    # A GPU pool of one sequence: the other requests must go to the CPU pool.
    blocks = (max(len(c["prompt"]) for c in cases) + n + 15) // 16
    cpu_kv = ["--max-model-len", str(blocks * 16), "--kv-blocks", str(blocks),
              "--cpu-kv-blocks", str(8 * blocks)]
    placements.append(("cpu-kv", cpu_kv))
    # Neo's two asymmetric sub-batches, chosen per step on a profile whose
    # GPU is slow enough that CPU attention hides behind it.
    slow_gpu = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                            "profiles", "slow_gpu.json")
    placements.append(("cpu-kv+neo-sub-batches",
                       cpu_kv + ["--neo-sub-batches", "--hardware", slow_gpu]))
    # MoE-Lightning's schedule by flags: every request's attention on the
    # cpu_worker, steps in micro-batches of one sequence pipelined against it.
    placements.append(("cpu-kv-only+micro-batch-1",
                       cpu_kv + ["--kv-pool", "cpu", "--micro-batch-size", "1"]))
    # The model sharded over two gpu_workers (host-device tensor parallelism).
    placements.append(("tensor-parallel-2", ["--tensor-parallel", "2"]))
    if not experts:  # half of every MLP's rows on the gpu_worker's CPU (ScheInfer's CC)
        placements.append(("cpu-ffn-half", ["--cpu-ffn-fraction", "0.5"]))
        # The same with ScheInfer's prefill token assignment: the CPU rows
        # of each prefill's first 4 tokens on the device (CG').
        placements.append(("cpu-ffn-half+prefill-gpu-4",
                           ["--cpu-ffn-fraction", "0.5", "--prefill-gpu-tokens", "4"]))
        # n_g re-solved by the coordinator for each prefill step, from a
        # test profile whose CPU is slow enough that Eq. 15 sends rows to the
        # device even for these tiny models.
        profile = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                               "profiles", "slow_cpu.json")
        placements.append(("cpu-ffn-half+prefill-gpu-auto",
                           ["--cpu-ffn-fraction", "0.5", "--prefill-gpu-tokens", "auto",
                            "--hardware", profile]))
    if experts:  # CPU attention on the first of two cpu_workers sharing the experts
        placements.append(("cpu-kv+experts-on-2-workers",
                           cpu_kv + ["--cpu-experts", "all", "--cpu-workers", "2"]))
        # One expert per layer in the gpu_worker's cache; the rest loaded or
        # computed on its CPU as each step's split decides.
        placements.append(("expert-cache-1", ["--gpu-expert-cache", "1"]))
        # The same with the CPU's share on a cpu_worker holding every expert.
        placements.append(("expert-cache-1+cpu-worker",
                           ["--gpu-expert-cache", "1", "--cpu-experts", "all"]))
    # A planner policy (`tandem serve --policy`): ScheInfer's per-layer
    # shares, as `tandem plan --json` prints them, differing by layer.
    layers = config["num_hidden_layers"]
    policy = {"family": "SCHEINFER", "batch_size": 8, "kv_block_tokens": 16, "layers": []}
    for layer in range(layers):
        if experts:  # half or a quarter of each layer's routed experts (or rows) on the CPU;
            # layer 0's GPU part streamed
            cc = 0.5 if layer % 2 else 0.25
            gg, cg = (0.0, 1 - cc) if layer == 0 else (1 - cc, 0.0)
            policy["layers"].append({"layer": layer, "gg_fraction": gg, "cg_fraction": cg,
                                     "cc_fraction": cc})
        else:  # a quarter or half of the rows on the CPU; layer 0's GPU part streamed
            cc = 0.5 if layer % 2 else 0.25
            gg, cg = (0.0, 1 - cc) if layer == 0 else (1 - cc, 0.0)
            policy["layers"].append({"layer": layer, "gg_fraction": gg, "cg_fraction": cg,
                                     "cc_fraction": cc})
    if not experts:
        policy["prefill_gpu_tokens"] = 4
    work = os.environ.get("TMPDIR", "/tmp")
    policy_file = os.path.join(work, f"policy-{os.getpid()}.json")
    with open(policy_file, "w") as f:
        json.dump({"model": "test", "best": policy}, f)
    placements.append(("policy-scheinfer", ["--policy", policy_file]))
    # MoE-Lightning's policy: attention on the CPU, micro-batches of 2, the
    # FFN of the odd layers streamed (r_w below 1).
    ml = {"family": "MOE_LIGHTNING", "batch_size": 8, "micro_batch_size": 2,
          "num_micro_batches": 4, "attention_on_gpu": False, "ffn_on_gpu": True,
          "kv_block_tokens": 16, "cpu_kv_blocks": 8 * blocks,
          "layers": [{"layer": layer, "gg_fraction": 0.25 if layer % 2 else 1.0,
                      "cg_fraction": 0.75 if layer % 2 else 0.0, "cc_fraction": 0.0}
                     for layer in range(layers)]}
    ml_file = os.path.join(work, f"policy-ml-{os.getpid()}.json")
    with open(ml_file, "w") as f:
        json.dump(ml, f)
    placements.append(("policy-moe-lightning", ["--policy", ml_file, "--max-model-len",
                                                str(blocks * 16)]))
    if experts:  # Klotski's: one hot expert per layer, every expert on the device
        kl = {"family": "KLOTSKI", "batch_size": 8, "pipeline_batches": 2, "hot_experts": 1,
              "kv_block_tokens": 16,
              "layers": [{"layer": layer, "gg_fraction": 0.0, "cg_fraction": 1.0,
                          "cc_fraction": 0.0} for layer in range(layers)]}
        kl_file = os.path.join(work, f"policy-klotski-{os.getpid()}.json")
        with open(kl_file, "w") as f:
            json.dump(kl, f)
        placements.append(("policy-klotski", ["--policy", kl_file]))

    for placement, args in placements:
        serve = Serve(tandem, model, *args, "--max-num-seqs", "8")
        cpu_blocks = (CpuBlockWatcher(serve)
                      if placement.startswith("cpu-kv") or placement == "policy-moe-lightning"
                      else None)
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
            if (placement.startswith("cpu-ffn-half+prefill-gpu")
                    or (placement == "policy-scheinfer" and not experts)):
                status, text = serve.get_text("/metrics")
                m = re.search(r'tandem_prefill_gpu_rows_total\{[^}]*\} (\S+)', text)
                rows = float(m.group(1)) if m else -1
                # Each prefill step gives the device its first 4 rows (fixed
                # n_g), or what Eq. 15 solves (auto, on a CPU slow enough
                # that it solves for some): at least one step did.
                checks.check(f"[{placement}] /metrics counts the prefill rows whose CPU "
                             f"rows ran on the device ({rows})",
                             status == 200 and rows >= 4, text[-400:])
            if placement == "policy-scheinfer":
                line = next((l for l in serve.stdout_lines if l.startswith("policy ")), "")
                want = (["1 streamed layers", "--cpu-experts "] if experts
                        else ["CPU MLP rows per layer, 1 streamed layers"])
                checks.check(f"[{placement}] serve applied the policy ({line.strip()})",
                             "SCHEINFER" in line and all(w in line for w in want),
                             "\n".join(serve.stdout_lines))
            if placement in ("policy-moe-lightning", "policy-klotski"):
                line = next((l for l in serve.stdout_lines if l.startswith("policy ")), "")
                want = (["--micro-batch-size 2", "--kv-pool cpu", "streamed layers"]
                        if placement == "policy-moe-lightning"
                        else ["--gpu-expert-cache 1", "--expert-prefetch 1", "--gpu-experts-only"])
                checks.check(f"[{placement}] serve applied the policy ({line.strip()})",
                             all(w in line for w in want), "\n".join(serve.stdout_lines))
            if placement == "policy-klotski":
                status, counts = expert_cache_events(serve)
                checks.check(f"[{placement}] every activated expert ran on the device: "
                             f"misses loaded, none on the CPU",
                             status == 200 and counts.get("loads", 0) > 0
                             and counts.get("cpu_computed", -1) == 0
                             and counts.get("gpu_computed", 0) == counts.get("activations", -1),
                             str(counts))
            if placement in ("cpu-kv+neo-sub-batches", "cpu-kv-only+micro-batch-1",
                             "policy-moe-lightning"):
                status, text = serve.get_text("/metrics")
                m = re.search(r'tandem_micro_batched_steps_total\{[^}]*\} (\S+)', text)
                steps = float(m.group(1)) if m else -1
                if placement == "cpu-kv+neo-sub-batches" and steps == 0:
                    # Neo splits a step only when its sequences' shapes make
                    # it pay, which depends on how the concurrent requests
                    # happened to arrive (on a loaded machine they can come
                    # one or two steps apart): send the batch once more.
                    with ThreadPoolExecutor(len(cases)) as pool:
                        for status2, _ in pool.map(
                                lambda c: serve.post("/v1/completions", body(c)), cases):
                            checks.check(f"[{placement}] the batch sent again is served",
                                         status2 == 200, str(status2))
                    status, text = serve.get_text("/metrics")
                    m = re.search(r'tandem_micro_batched_steps_total\{[^}]*\} (\S+)', text)
                    steps = float(m.group(1)) if m else -1
                checks.check(f"[{placement}] some steps ran as several micro-batches ({steps})",
                             status == 200 and steps > 0, text[-400:])
            if placement.startswith("tensor-parallel"):
                checks.check(f"[{placement}] 2 gpu_workers started",
                             len(serve.child_pids("gpu_worker")) == 2, serve.log())
            if placement.startswith("expert-cache"):
                status, counts = expert_cache_events(serve)
                checks.check(f"[{placement}] /metrics counts the cache's activations, "
                             f"hits + misses adding up, some computed on the CPU",
                             status == 200 and counts.get("activations", 0) > 0
                             and counts.get("hits", -1) + counts.get("misses", -1)
                             == counts["activations"] and counts.get("cpu_computed", 0) > 0,
                             str(counts))
            no_cpu_worker = (placement in ("none", "expert-cache-1", "policy-klotski")
                             or placement.startswith("cpu-ffn-half")
                             or (placement == "policy-scheinfer" and not experts)
                             or placement.startswith("tensor-parallel"))
            if not no_cpu_worker:
                want = 3 if "3-workers" in placement else 2 if "2-workers" in placement else 1
                checks.check(f"[{placement}] {want} cpu_worker(s) started",
                             len(serve.child_pids("cpu_worker")) == want, serve.log())
            if cpu_blocks is not None:
                peak = cpu_blocks.stop()
                checks.check(f"[{placement}] requests held KV on the cpu_worker "
                             f"(peak {peak} blocks)", peak > 0)
        finally:
            rc, alive, shm = serve.stop()
        checks.check(f"[{placement}] serve exits 0 on SIGTERM leaving no process or segment",
                     rc == 0 and not alive and not shm, f"rc={rc} alive={alive} shm={shm}")
    # A policy that cannot run as given, or that does not fit the model:
    # serve refuses it at once, saying why, and starts nothing.
    no_cpu_kv = dict(ml, cpu_kv_blocks=0)
    wrong_layers = dict(policy, layers=policy["layers"][:-1])
    for name, pol, needle in (("moe-lightning without CPU KV", no_cpu_kv, "CPU KV blocks"),
                              ("layer count", wrong_layers, "layers")):
        with open(policy_file, "w") as f:
            json.dump(pol, f)
        r = subprocess.run([tandem, "serve", "--model", model, "--port", "0",
                            "--policy", policy_file], capture_output=True, text=True, timeout=60)
        checks.check(f"[policy {name}] serve refuses it: exit {r.returncode}, "
                     f"'{r.stderr.strip()[:160]}'",
                     r.returncode != 0 and needle in r.stderr and "--policy" in r.stderr)
    for f in [policy_file, ml_file] + ([kl_file] if experts else []):
        os.remove(f)
    checks.finish()


if __name__ == "__main__":
    main()
