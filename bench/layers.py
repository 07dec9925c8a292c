#!/usr/bin/env python3
"""What the optimisation loop's verbs cost (issue 49), measured against add-native in one run.

An install: SOURCES source files, an artifact of ARTIFACT_MIB MiB and a cache dir of CACHE_FILES
files; its "build" rewrites one byte of the artifact in place (the tool's own time is what is
measured, not a compiler's). Per round:

  add-native   the accepted change: every source, the artifact, the cache (the reference)
  stacked      a candidate on it, --over the accepted overlay: the same files (the artifact dated
               an hour back first: a candidate comes minutes after the accepted build, and an
               add-native right after a build waits out that second, layered or not)
  fold         that candidate folded into the accepted overlay (no build)
  export       the accepted overlay as a bundle
  revert       the accepted overlay (install pristine)
  replay       the bundle onto the pristine install (the same build)
  add-native'  the same files again, as a plain add-native with the same build, then
               verify-native (replay's floor: it applies, builds and verifies)

Prints the medians and the ratios fold / add-native and replay / add-native'.

    bench/layers.py --overlay build/overlay [--rounds 5] [--artifact-mib 64] [--sources 8] [--cache-files 2000]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BUILD = "sh -c 'printf x | dd of=lib/libk.so bs=1 seek=4096 conv=notrunc status=none'"


def make_install(root, sources, mib, cache_files):
    os.makedirs(os.path.join(root, "src"))
    os.makedirs(os.path.join(root, "lib"))
    os.makedirs(os.path.join(root, "cache"))
    for i in range(sources):
        with open(os.path.join(root, "src", "k%d.cu" % i), "w") as f:
            f.write("// kernel %d\n" % i + "int k%d() { return 4; }\n" % i * 200)
    with open(os.path.join(root, "lib", "libk.so"), "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(mib):
            f.write(block)
    for i in range(cache_files):
        d = os.path.join(root, "cache", "d%d" % (i // 100))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%d.o" % i), "wb") as f:
            f.write(b"o" * 4096)
    old = time.time() - 3600  # built an hour ago, as an installed library is
    os.utime(os.path.join(root, "lib", "libk.so"), (old, old))


def candidates(work, sources, value):
    d = os.path.join(work, "cand-%d" % value)
    os.makedirs(d, exist_ok=True)
    out = []
    for i in range(sources):
        p = os.path.join(d, "k%d.cu" % i)
        with open(p, "w") as f:
            f.write("// kernel %d\n" % i + ("int k%d() { return %d; }\n" % (i, value)) * 200)
        out.append(p)
    return out


def timed(binary, args, env):
    t0 = time.perf_counter()
    r = subprocess.run([binary, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit("layers bench: %s exited %d:\n%s" % (" ".join(args[:3]), r.returncode, r.stderr[-2000:]))
    return dt


def add_args(ov, root, files, extra=()):
    a = ["add-native", "--overlay", ov, *extra]
    for i, p in enumerate(files):
        a += ["--target", os.path.join(root, "src", "k%d.cu" % i), "--patched-file", p]
    return a + [
        "--artifact",
        os.path.join(root, "lib", "libk.so"),
        "--invalidate-cache",
        os.path.join(root, "cache"),
        "--build-cwd",
        root,
        "--build-cmd",
        BUILD,
    ]


def age(root):
    old = time.time() - 3600
    os.utime(os.path.join(root, "lib", "libk.so"), (old, old))


def one_round(binary, work, a):
    root, ev = os.path.join(work, "inst"), os.path.join(work, "ev")
    env = dict(os.environ, OVERLAY_STATE_DIR=os.path.join(work, "state"))
    acc, cand, rep, plain = (os.path.join(ev, n) for n in ("acc", "cand", "rep", "plain"))
    bundle = os.path.join(work, "bundle")
    t = {}
    age(root)
    t["add-native"] = timed(binary, add_args(acc, root, candidates(work, a.sources, 5)), env)
    age(root)
    t["stacked"] = timed(binary, add_args(cand, root, candidates(work, a.sources, 7), ["--over", acc]), env)
    t["fold"] = timed(binary, ["fold", "--from", cand, "--into", acc], env)
    t["export"] = timed(binary, ["export", "--overlay", acc, "--out", bundle], env)
    t["revert"] = timed(binary, ["revert", "--overlay", acc], env)
    age(root)
    t["replay"] = timed(binary, ["replay", "--bundle", bundle, "--overlay", rep], env)
    timed(binary, ["revert", "--overlay", rep], env)
    age(root)
    t["add-native'"] = timed(binary, add_args(plain, root, candidates(work, a.sources, 7)), env) + timed(
        binary, ["verify-native", "--overlay", plain], env
    )
    timed(binary, ["revert", "--overlay", plain], env)
    shutil.rmtree(ev)
    shutil.rmtree(bundle)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--overlay", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--artifact-mib", type=int, default=64)
    ap.add_argument("--sources", type=int, default=8)
    ap.add_argument("--cache-files", type=int, default=2000)
    ap.add_argument("--work")
    a = ap.parse_args()
    binary = os.path.abspath(a.overlay)
    work = a.work or tempfile.mkdtemp(prefix="overlay-layers-bench.")
    os.makedirs(work, exist_ok=True)
    try:
        make_install(os.path.join(work, "inst"), a.sources, a.artifact_mib, a.cache_files)
        rounds = [one_round(binary, work, a) for _ in range(a.rounds)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print(
        "layers bench: %d source(s), a %d MiB artifact, a cache of %d files; medians of %d round(s)"
        % (a.sources, a.artifact_mib, a.cache_files, a.rounds)
    )
    for k, v in med.items():
        print("  %-12s %8.1f ms" % (k, v * 1000))
    print("  fold / add-native       %6.2fx" % (med["fold"] / med["add-native"]))
    print("  stacked / add-native    %6.2fx" % (med["stacked"] / med["add-native"]))
    print("  replay / add-native'    %6.2fx" % (med["replay"] / med["add-native'"]))
    print("  export / add-native     %6.2fx" % (med["export"] / med["add-native"]))


if __name__ == "__main__":
    main()
