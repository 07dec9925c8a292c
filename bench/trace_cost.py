#!/usr/bin/env python3
"""What tracing a build costs (issue 61): the same build run plainly and under the tracer, in turn.

`overlay __trace-build` is the process add-native runs each build command under: it stops every
process of the build at each system call that names a file, notes what it looked at and keeps
what it changes. The floor is the build itself, run without it; the ratio is the tracer's cost.
Each round invalidates the build first (the caller says how: a source touched, a JIT cache
removed), so every timed run compiles the same thing.

Used by bench/run.py (a CMake + Ninja library of a few C++ units) and bench/ab_loop.py (its two
examples, the torch JIT's included); alone:

    bench/trace_cost.py --overlay build/overlay [--rounds 3]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def measure(overlay, build, cwd, env, invalidate, rounds, work):
    """Medians of the build plain and traced (seconds), alternating, `rounds` each."""
    plain, traced = [], []
    for r in range(rounds):
        for mode in ("plain", "traced"):
            invalidate()
            out = os.path.join(work, "trace-%d-%s" % (r, mode))
            argv = build
            if mode == "traced":
                argv = [
                    overlay,
                    "__trace-build",
                    "--out",
                    out + ".json",
                    "--backups",
                    out,
                    "--prefix",
                    "b",
                    "--",
                    *build,
                ]
            t0 = time.perf_counter()
            p = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            took = time.perf_counter() - t0
            if p.returncode != 0:
                sys.exit("trace_cost: %s build failed: %s" % (mode, p.stderr[-2000:]))
            (plain if mode == "plain" else traced).append(took)
            shutil.rmtree(out, ignore_errors=True)
    return statistics.median(plain), statistics.median(traced)


def line(name, plain, traced, target=1.10):
    return "%-22s %10.3f s traced vs %.3f s plain: %.3f x (target <= %.2f)" % (
        name,
        traced,
        plain,
        traced / plain,
        target,
    )


UNITS = 4
LISTS = "cmake_minimum_required(VERSION 3.16)\nproject(tc CXX)\nadd_library(k SHARED %s)\n"
UNIT = (
    "#include <regex>\n#include <string>\n#include <map>\n"
    'int f%d() { std::map<std::string, int> m{{"k", %d}}; return std::regex_match(std::string("k"), std::regex("k")) ?'
    ' m["k"] : -1; }\n'
)


def cmake_example(work, env):
    """A CMake + Ninja shared library of a few C++ units, each a second or so of a real compile.
    Returns (build argv, cwd, invalidate) or None without cmake and ninja."""
    if not shutil.which("cmake") or not shutil.which("ninja"):
        return None
    proj = os.path.join(work, "tc")
    os.makedirs(os.path.join(proj, "src"), exist_ok=True)
    srcs = []
    for i in range(UNITS):
        p = os.path.join(proj, "src", "u%d.cpp" % i)
        with open(p, "w") as f:
            f.write(UNIT % (i, i))
        srcs.append("src/u%d.cpp" % i)
    with open(os.path.join(proj, "CMakeLists.txt"), "w") as f:
        f.write(LISTS % " ".join(srcs))
    bdir = os.path.join(proj, "build")
    subprocess.run(["cmake", "-S", proj, "-B", bdir, "-G", "Ninja"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", bdir], check=True, env=env, stdout=subprocess.DEVNULL)

    def invalidate():
        subprocess.run(["ninja", "-C", bdir, "-t", "clean"], check=True, env=env, stdout=subprocess.DEVNULL)

    return ["ninja", "-C", bdir], bdir, invalidate


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--overlay", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="overlay-trace-cost-") as w:
        ex = cmake_example(w, dict(os.environ))
        if ex is None:
            print("trace_cost: skipped: needs cmake and ninja")
            return
        plain, traced = measure(os.path.abspath(a.overlay), ex[0], ex[1], dict(os.environ), ex[2], a.rounds, w)
        print(line("traced build (cmake)", plain, traced))


if __name__ == "__main__":
    main()
