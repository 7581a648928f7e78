"""Helpers for the service tests: start `tandem serve` as users do, talk to
it over HTTP, run `tandem generate` for reference outputs, and count checks.

Only the standard library here; the tests that need the `openai` client
import it themselves.
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


class Checks:
    """Counts checks; the summary line is what ctest's log shows last."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok: {name}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL: {name} {detail}", flush=True)
        return ok

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed", flush=True)
        sys.exit(0 if self.failed == 0 and self.passed > 0 else 1)


class Serve:
    """A `tandem serve` process on a free loopback port."""

    def __init__(self, tandem, model, *args, name="model", ready_timeout=180):
        self.tandem = tandem
        self.name = name
        self.stdout_lines = []
        self.stderr_lines = []
        cmd = [tandem, "serve", "--model", model, "--served-model-name", name,
               "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, errors="replace")
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout_lines),
                             daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr_lines),
                             daemon=True),
        ]
        for t in self._readers:
            t.start()
        self.url = None
        deadline = time.time() + ready_timeout
        while time.time() < deadline and self.url is None:
            for line in list(self.stdout_lines):
                m = re.match(r"serving .* on (http://\S+)$", line)
                if m:
                    self.url = m.group(1)
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.url is None:
            self.kill()
            raise RuntimeError("tandem serve did not start:\n" + "".join(self.stderr_lines))
        while time.time() < deadline:
            if self.status("/ready") == 200:
                return
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("tandem serve never became ready:\n" + "".join(self.stderr_lines))

    @staticmethod
    def _read(stream, lines):
        for line in stream:
            lines.append(line.rstrip("\n"))

    def status(self, path):
        return self.get_text(path, timeout=5)[0]

    def get_text(self, path, timeout=10):
        """Returns (status, body as text); status None if nothing answered."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, (e.read() or b"").decode()
        except OSError:
            return None, ""

    def post(self, path, body, timeout=300):
        """Returns (status, parsed JSON body)."""
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def stream(self, path, body, timeout=300):
        """Posts with stream=true; returns (status, [parsed data events], saw [DONE])."""
        body = dict(body, stream=True)
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        events, done = [], False
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                for raw in r:
                    line = raw.decode().strip()
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        done = True
                        break
                    events.append(json.loads(line[len("data: "):]))
                return r.status, events, done
        except urllib.error.HTTPError as e:
            return e.code, [json.loads(e.read() or b"{}")], False

    def post_until_ok(self, path, body, timeout):
        """Posts every half second until a 200 (a restarted worker is back) or
        `timeout` seconds pass; returns the last (status, response)."""
        deadline = time.time() + timeout
        while True:
            status, resp = self.post(path, body)
            if status == 200 or time.time() >= deadline:
                return status, resp
            time.sleep(0.5)

    def stream_and_kill(self, path, body, pid, after_events=5, timeout=120):
        """Streams `body` and SIGKILLs `pid` once `after_events` data events
        have arrived. Returns (events, saw [DONE], time of the kill or None,
        time the stream ended)."""
        body = dict(body, stream=True)
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        events, done, killed_at = [], False, None
        with urllib.request.urlopen(req, timeout=timeout) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                events.append(json.loads(line[len("data: "):]))
                if killed_at is None and len(events) >= after_events:
                    os.kill(pid, signal.SIGKILL)
                    killed_at = time.time()
        return events, done, killed_at, time.time()

    def child_pids(self, worker):
        """Pids of the children serve started as `worker` (gpu_worker, cpu_worker)."""
        pids = []
        for line in list(self.stderr_lines):
            m = re.search(rf"started {worker} \(pid (\d+)\)", line)
            if m:
                pids.append(int(m.group(1)))
        return pids

    def stop(self, timeout=30):
        """SIGTERM; returns (exit code, children still alive, leftover /dev/shm names)."""
        children = self.child_pids("gpu_worker") + self.child_pids("cpu_worker")
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = None
        alive = [p for p in children if pid_alive(p)]
        shm = [n for n in os.listdir("/dev/shm") if n.startswith(f"tandem-{self.proc.pid}-")]
        return rc, alive, shm

    def kill(self):
        children = self.child_pids("gpu_worker") + self.child_pids("cpu_worker")
        self.proc.kill()
        self.proc.wait()
        for p in children:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass

    def log(self):
        return "\n".join(self.stderr_lines[-40:])


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    # A zombie is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def generate(tandem, model, *, prompt=None, prompt_ids=None, max_tokens=16, extra=()):
    """`tandem generate --json`: the reference output of one request alone."""
    cmd = [tandem, "generate", "--model", model, "-n", str(max_tokens), "--json", *extra]
    if prompt_ids is not None:
        cmd += ["--prompt-ids", ",".join(str(i) for i in prompt_ids)]
    else:
        cmd += ["--prompt", prompt]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def completion_ids(response):
    """Token ids of a completion made with logprobs and return_tokens_as_token_ids."""
    tokens = response["choices"][0]["logprobs"]["tokens"]
    return [int(t.split(":", 1)[1]) for t in tokens]
