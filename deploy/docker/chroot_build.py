#!/usr/bin/env python3
"""Builds a Dockerfile of deploy/docker/ without a Docker daemon, in chroots.

Where Docker has no daemon or no registry (the build machines), this runs the
file's instructions on Debian root filesystems made with debootstrap, so the
image's install steps, build and runtime libraries are checked on the same
clean base the image starts from. Root only (chroot, mount).

  deploy/docker/chroot_build.py --work /var/tmp/tandem-image \\
      --run "serve --help" --run "generate --model /models/m.gguf --prompt Hi -n 8" \\
      --mount ~/.cache/tandem/models:/models

Each --run gives the image's arguments (as after `docker run IMAGE`), run with
its ENTRYPOINT, USER and ENV in the final stage. Supported instructions: ARG,
FROM (debian:<suite>[-slim] only), WORKDIR, ENV, COPY (also --from=stage),
RUN (shell form), USER; EXPOSE, LABEL, ENTRYPOINT and CMD are recorded.
"""

import argparse
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def instructions(text):
    """(keyword, rest) per instruction; comments and continuations handled."""
    out, cur = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if cur and s.startswith("#"):
            continue  # a comment inside a continued RUN
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        key, _, rest = cur.partition(" ")
        out.append((key.upper(), rest.strip()))
        cur = ""
    return out


def expand(s, args):
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), s)


def ignored(rel, patterns):
    parts = rel.split(os.sep)
    for p in patterns:
        p = p.lstrip("/")
        if p.startswith("**/"):
            if any(fnmatch.fnmatch(x, p[3:]) for x in parts):
                return True
        elif fnmatch.fnmatch(parts[0], p) or fnmatch.fnmatch(rel, p):
            return True
    return False


class Stage:
    def __init__(self, root):
        self.root, self.workdir, self.user, self.env = root, "/", None, {}
        self.entrypoint, self.cmd = [], []

    def host(self, path):
        return os.path.join(self.root, os.path.join(self.workdir, path).lstrip("/"))

    def chroot(self, argv, mounts=()):
        """Runs argv in the stage with /proc, /dev and the given binds mounted."""
        binds = [("/dev", "dev")] + [(h, c.lstrip("/")) for h, c in mounts]
        done = []
        try:
            subprocess.run(["mount", "-t", "proc", "proc", os.path.join(self.root, "proc")], check=True)
            done.append(os.path.join(self.root, "proc"))
            for h, c in binds:
                target = os.path.join(self.root, c)
                os.makedirs(target, exist_ok=True)
                # Recursive (/dev/pts, /dev/shm), and nothing unmounted
                # inside propagates back to this machine's /dev.
                subprocess.run(["mount", "--rbind", "--make-rslave", h, target], check=True)
                done.append(target)
            env = {"PATH": PATH, "HOME": "/root", **self.env}
            user = []
            if self.user:
                # Numeric, from the stage's own passwd: chroot(1) would look a
                # name up in this machine's.
                for line in open(os.path.join(self.root, "etc/passwd")):
                    f = line.split(":")
                    if self.user in (f[0], f[2]):
                        user = ["--userspec=%s:%s" % (f[2], f[3])]
                        env["HOME"] = f[5]
                if not user:
                    sys.exit("chroot_build: no user %s in the image" % self.user)
            inner = "cd %s && exec %s" % (shlex.quote(self.workdir), shlex.join(argv))
            return subprocess.run(["chroot", *user, self.root, "/bin/sh", "-c", inner], env=env).returncode
        finally:
            for d in reversed(done):
                subprocess.run(["umount", "-l", d])


def base_rootfs(image, work):
    m = re.fullmatch(r"debian:(\w+)(-slim)?", image)
    if not m:
        sys.exit("chroot_build: only debian:<suite>[-slim] bases are supported, not " + image)
    cached = os.path.join(work, "base-" + m.group(1))
    if not os.path.isdir(os.path.join(cached, "etc")):
        subprocess.run(["debootstrap", "--variant=minbase", m.group(1), cached,
                        "http://deb.debian.org/debian"], check=True)
        # The official images carry the updates and security suites too.
        with open(os.path.join(cached, "etc/apt/sources.list"), "w") as f:
            for suite, uri in ((m.group(1), "debian"), (m.group(1) + "-updates", "debian"),
                               (m.group(1) + "-security", "debian-security")):
                f.write("deb http://deb.debian.org/%s %s main\n" % (uri, suite))
    return cached


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--file", default=os.path.join(here, "Dockerfile"))
    ap.add_argument("--context", default=os.path.dirname(os.path.dirname(here)))
    ap.add_argument("--work", required=True, help="a directory for the root filesystems")
    ap.add_argument("--run", action="append", default=[], help="image arguments to run at the end")
    ap.add_argument("--mount", action="append", default=[], help="HOST:CONTAINER bind for --run")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("chroot_build: needs root (chroot, mount)")
    os.makedirs(a.work, exist_ok=True)
    dockerignore = os.path.join(a.context, ".dockerignore")
    patterns = []
    if os.path.exists(dockerignore):
        patterns = [l.strip() for l in open(dockerignore) if l.strip() and not l.startswith("#")]

    args, stages, named, cur = {}, [], {}, None
    for key, rest in instructions(open(a.file).read()):
        rest = expand(rest, args)
        print("chroot_build: %s %s" % (key, rest[:120]), flush=True)
        if key == "ARG":
            k, _, v = rest.partition("=")
            args.setdefault(k, v)
        elif key == "FROM":
            image, _, name = rest.partition(" AS ")
            root = os.path.join(a.work, "stage%d" % len(stages))
            shutil.rmtree(root, ignore_errors=True)
            subprocess.run(["cp", "-a", base_rootfs(image.strip(), a.work), root], check=True)
            shutil.copy("/etc/resolv.conf", os.path.join(root, "etc/resolv.conf"))
            cur = Stage(root)
            stages.append(cur)
            if name:
                named[name.strip()] = cur
        elif key == "WORKDIR":
            cur.workdir = os.path.join(cur.workdir, rest)
            os.makedirs(cur.host("."), exist_ok=True)
        elif key == "ENV":
            k, _, v = rest.partition("=")
            cur.env[k] = v
        elif key == "USER":
            cur.user = rest
        elif key == "COPY":
            words = shlex.split(rest)
            src_stage = None
            if words[0].startswith("--from="):
                src_stage = named[words.pop(0)[len("--from="):]]
            *srcs, dst = words
            for s in srcs:
                if src_stage:
                    src = os.path.join(src_stage.root, s.lstrip("/"))
                else:
                    src = os.path.join(a.context, s)
                target = cur.host(dst)
                if os.path.isdir(src):
                    def skip(d, names, base=src):
                        rel = os.path.relpath(d, a.context) if not src_stage else None
                        return [n for n in names if rel is not None and
                                ignored(os.path.normpath(os.path.join(rel, n)), patterns)]
                    shutil.copytree(src, target, ignore=skip, dirs_exist_ok=True, symlinks=True)
                else:
                    if dst.endswith("/"):
                        target = os.path.join(target, os.path.basename(s))
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    shutil.copy2(src, target)
        elif key == "RUN":
            rc = cur.chroot(["/bin/sh", "-c", rest])
            if rc != 0:
                sys.exit("chroot_build: RUN failed (exit %d): %s" % (rc, rest))
        elif key in ("ENTRYPOINT", "CMD"):
            setattr(cur, key.lower(), json.loads(rest))
        elif key in ("EXPOSE", "LABEL"):
            pass
        else:
            sys.exit("chroot_build: unsupported instruction " + key)

    final = stages[-1]
    mounts = [tuple(m.split(":", 1)) for m in a.mount]
    for r in a.run:
        argv = final.entrypoint + (shlex.split(r) if r else final.cmd)
        print("chroot_build: run %s" % shlex.join(argv), flush=True)
        rc = final.chroot(argv, mounts)
        if rc != 0:
            sys.exit("chroot_build: %s exited %d" % (shlex.join(argv), rc))
    print("chroot_build: done; the final stage is %s" % final.root)


if __name__ == "__main__":
    main()
