"""Service overhead (a benchmark, not a test): single-request decode speed
through `tandem serve` (HTTP, SSE, coordinator, gRPC step per token) against
`tandem generate` on the same model, alternating, medians of the repeats.

usage: service_overhead.py TANDEM MODEL [TOKENS] [REPEATS]
"""
import json
import statistics
import sys
import time
import urllib.request

from harness import Serve, generate

PROMPT = "Once upon a time, in a small village by the sea,"


def main():
    tandem, model = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    serve = Serve(tandem, model)
    body = {"model": "model", "prompt": PROMPT, "max_tokens": n, "temperature": 0,
            "ignore_eos": True, "stream": True}
    gen, srv, ttft = [], [], []
    try:
        for rep in range(repeats):
            ref = generate(tandem, model, prompt=PROMPT, max_tokens=n, extra=["--ignore-eos"])
            gen.append((n - 1) / ref["timing"]["decode_seconds"])
            req = urllib.request.Request(serve.url + "/v1/completions",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            t0, times = time.time(), []
            with urllib.request.urlopen(req) as r:
                for raw in r:
                    if raw.startswith(b"data: {"):
                        times.append(time.time())
            # times[0]: first token; times[n-1]: the n-th token (a final usage-only
            # event, if any, is not counted).
            srv.append((n - 1) / (times[n - 1] - times[0]))
            ttft.append(times[0] - t0)
            print(f"repeat {rep}: generate {gen[-1]:.1f} tok/s, serve {srv[-1]:.1f} tok/s, "
                  f"time to first token {ttft[-1] * 1000:.0f} ms", flush=True)
    finally:
        serve.stop()
    g, s = statistics.median(gen), statistics.median(srv)
    print(f"median decode: generate {g:.1f} tok/s, serve {s:.1f} tok/s "
          f"(serve/generate {s / g:.3f}); serve time to first token "
          f"{statistics.median(ttft) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
