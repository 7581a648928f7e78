#!/usr/bin/env python3
"""Checks the container image and Kubernetes files against the built binary.

No Docker daemon or cluster is needed; what can drift without one is checked:
  - every `tandem` command line in deploy/ (the Dockerfile's CMD, the
    manifests' container args) names a subcommand and only flags that
    subcommand has (`tandem SUB --help`);
  - the runtime stage's package list holds every shared library the built
    binary links (ldd, then dpkg -S), and every name in it is a package;
  - the manifests parse, and their Services, ports and probes point at
    containers and ports that exist.

Usage: deploy_files_test.py --tandem BUILD/cli/tandem --repo SOURCE_DIR
"""

import argparse
import json
import os
import re
import subprocess
import sys

import yaml

# The Dockerfile is read as deploy/docker/chroot_build.py reads it.
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy",
                                "docker"))
from chroot_build import instructions  # noqa: E402

# In every debian:*-slim image (apt itself needs them).
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}
# CUDA's libraries come from NVIDIA's toolkit, not Debian; the CPU image is
# built without CUDA, so they are not among its libraries.
CUDA_LIB = re.compile(r"^lib(cuda|cudart|cublas|cublasLt|nccl|nvidia|nvrtc)")

failures = []
checks = 0


def check(ok, what):
    global checks
    checks += 1
    if not ok:
        failures.append(what)
        print("FAIL: " + what)


def subcommands(tandem, cache={}):
    """The subcommands `tandem --help` lists."""
    if not cache:
        r = subprocess.run([tandem, "--help"], capture_output=True, text=True, check=True)
        _, _, tail = r.stdout.partition("Subcommands:")
        cache["all"] = {line.split()[0] for line in tail.splitlines() if line.strip()}
    return cache["all"]


def flags_of(tandem, sub, cache={}):
    """The long and short flags `tandem SUB --help` lists; None for no such subcommand."""
    if sub not in subcommands(tandem):
        return None
    if sub not in cache:
        r = subprocess.run([tandem, sub, "--help"], capture_output=True, text=True)
        cache[sub] = None if r.returncode != 0 else set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", r.stdout))
    return cache[sub]


def check_command_line(tandem, argv, where):
    if not argv:
        check(False, "%s: an empty command line" % where)
        return
    sub, rest = argv[0], argv[1:]
    known = flags_of(tandem, sub)
    check(known is not None, "%s: `tandem %s` is not a subcommand" % (where, sub))
    if known is None:
        return
    for a in rest:
        if a.startswith("-") and not re.fullmatch(r"-?\d+(\.\d+)?", a):
            name = a.split("=", 1)[0]
            check(name in known, "%s: `tandem %s` has no flag %s" % (where, sub, name))


def runtime_packages(text):
    m = re.search(r"# runtime-packages-begin\n(.*?)# runtime-packages-end", text, re.S)
    if not m:
        return None
    words = m.group(1).replace("\\\n", " ").split()
    i = words.index("--no-install-recommends")
    pkgs = []
    for w in words[i + 1:]:
        if w == "&&":
            break
        pkgs.append(w)
    return pkgs


def linked_packages(tandem):
    """{package: [libraries]} of what the binary links; libraries of no package under None."""
    r = subprocess.run(["ldd", tandem], capture_output=True, text=True, check=True)
    out = {}
    for line in r.stdout.splitlines():
        m = re.match(r"\s*(\S+) => (\S+|not found)", line)
        if not m:
            continue
        lib, path = m.groups()
        check(path != "not found", "ldd %s: %s not found" % (tandem, lib))
        if path == "not found" or CUDA_LIB.match(lib):
            continue
        pkg = None
        for p in (path, os.path.realpath(path)):
            q = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
            if q.returncode == 0:
                pkg = q.stdout.split(":")[0]
                break
        out.setdefault(pkg, []).append(lib)
    return out


def check_dockerfile(tandem, path):
    text = open(path).read()
    ins = instructions(text)
    entry = [json.loads(r) for k, r in ins if k == "ENTRYPOINT"]
    cmd = [json.loads(r) for k, r in ins if k == "CMD"]
    check(entry and entry[-1] == ["tandem"], "Dockerfile: ENTRYPOINT is not [\"tandem\"]")
    check(bool(cmd), "Dockerfile: no CMD")
    if cmd:
        check_command_line(tandem, cmd[-1], "Dockerfile CMD")

    pkgs = runtime_packages(text)
    check(pkgs, "Dockerfile: no runtime package list between the markers")
    if not pkgs:
        return
    for p in pkgs:
        q = subprocess.run(["dpkg-query", "-W", "-f=${Package}", p], capture_output=True, text=True)
        check(q.returncode == 0, "Dockerfile: %s is not a package this Debian has installed" % p)
    for pkg, libs in sorted(linked_packages(tandem).items(), key=lambda kv: str(kv[0])):
        if pkg is None:
            check(False, "Dockerfile: %s belong to no Debian package" % ", ".join(libs))
        else:
            check(pkg in pkgs or pkg in BASE_PACKAGES,
                  "Dockerfile: the runtime stage lacks %s (for %s)" % (pkg, ", ".join(libs)))


def pod_templates(docs):
    for d in docs:
        if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            yield d, d["spec"]["template"]
        elif d.get("kind") == "Pod":
            yield d, d


def check_manifests(tandem, path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    check(len(docs) > 0, "%s: no documents" % path)
    templates = list(pod_templates(docs))
    for d in docs:
        check(all(k in d for k in ("apiVersion", "kind", "metadata")) and "name" in d["metadata"],
              "%s: a document without apiVersion, kind or metadata.name" % path)
    for owner, t in templates:
        name = owner["metadata"]["name"]
        labels = t["metadata"]["labels"]
        if owner.get("kind") != "Pod":
            sel = owner["spec"]["selector"]["matchLabels"]
            check(all(labels.get(k) == v for k, v in sel.items()),
                  "%s: the selector does not match the pod template's labels" % name)
        volumes = {v["name"] for v in t["spec"].get("volumes", [])}
        for c in t["spec"]["containers"]:
            where = "%s/%s" % (name, c["name"])
            if c["image"].split("/")[-1].startswith("tandem"):
                check(not c.get("command"), "%s: sets command; the image's ENTRYPOINT is tandem" % where)
                check_command_line(tandem, c.get("args", []), where)
            ports = {p.get("name") for p in c.get("ports", [])} | {p["containerPort"] for p in c.get("ports", [])}
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                pr = c.get(probe)
                if not pr:
                    continue
                for kind in ("httpGet", "grpc", "tcpSocket"):
                    if kind in pr:
                        check(pr[kind]["port"] in ports, "%s: %s's port %s is not declared" % (where, probe, pr[kind]["port"]))
                if "httpGet" in pr:
                    check(pr["httpGet"]["path"] in ("/health", "/ready", "/ping", "/metrics", "/version", "/v1/models"),
                          "%s: %s asks for %s, which the server does not serve" % (where, probe, pr["httpGet"]["path"]))
            for m in c.get("volumeMounts", []):
                check(m["name"] in volumes, "%s: mounts volume %s, which the pod does not have" % (where, m["name"]))
            res = c.get("resources", {})
            if res.get("requests") and res.get("limits"):
                for k in res["requests"]:
                    check(k in res["limits"], "%s: requests %s without a limit" % (where, k))
    for d in docs:
        if d.get("kind") != "Service":
            continue
        sel = d["spec"]["selector"]
        matched = [t for _, t in templates if all(t["metadata"]["labels"].get(k) == v for k, v in sel.items())]
        check(len(matched) == 1, "Service %s selects %d pod templates" % (d["metadata"]["name"], len(matched)))
        for p in d["spec"]["ports"]:
            tp = p.get("targetPort", p["port"])
            ok = any(tp in ({q.get("name") for q in c.get("ports", [])} | {q["containerPort"] for q in c.get("ports", [])})
                     for t in matched for c in t["spec"]["containers"])
            check(ok, "Service %s: targetPort %s is no container's port" % (d["metadata"]["name"], tp))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--repo", required=True)
    a = ap.parse_args()
    check_dockerfile(a.tandem, os.path.join(a.repo, "deploy/docker/Dockerfile"))
    kdir = os.path.join(a.repo, "deploy/kubernetes")
    for f in sorted(os.listdir(kdir)):
        if f.endswith(".yaml"):
            check_manifests(a.tandem, os.path.join(kdir, f))
    print("%d passed, %d failed" % (checks - len(failures), len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
