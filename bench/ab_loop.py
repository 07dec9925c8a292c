#!/usr/bin/env python3
"""The optimisation loop's cost in builds and wall time (issue 51), against its floor in one run.

Each cycle is the A/B step a kernel-optimisation agent runs: a REF leg (the stock code runs),
add-native of the candidate with its build, the candidate's leg, revert. The candidates come as
A, B, A again, C, B again: a repeated one was built before and needs no build (the build store),
and no REF leg needs one (revert leaves the install's build nothing to redo).

Two examples:
  jit    a torch cpp_extension JIT extension (a .cu where CUDA is there, else a .cpp), run by
         loading it as a serving stack does (`torch.utils.cpp_extension.load`); skipped without torch
  cmake  a CMake + Ninja shared library and the program that links it

Before the loop, the tracer's cost on the example's build (issue 61): the build run plainly and
under `overlay __trace-build`, in turn (bench/trace_cost.py), with the ratio against its target.

Builds are counted, not guessed: the compiler is a wrapper first on PATH (CMake is configured
with it; torch's JIT gets a CUDA_HOME whose bin/nvcc is one) that logs every compile. Per cycle it prints the compiles, the wall time, and the floor:
one compile of the changed translation unit (measured here by hand) plus the two legs' runs: a
new candidate's cycle cannot go below it, a repeated one's can (no compile). Then the same loop through overlay_setup.py (--reference) beside it.

    bench/ab_loop.py --overlay build/overlay [--reference ../shared/reference/overlay_setup.py]
                     [--python /usr/bin/python3] [--example jit|cmake|both]
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ORDER = ["A", "B", "A", "C", "B"]
VALUES = {"stock": "4", "A": "7", "B": "9", "C": "11"}

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from revert_next_build import BODY as JIT_BODY  # noqa: E402  (the same one-kernel extension)
import trace_cost  # noqa: E402

JIT_LOAD = """import os, sys
import torch.utils.cpp_extension as ce
here = os.path.dirname(os.path.abspath(__file__))
m = ce.load(name='loop_ext', sources=[os.path.join(here, 'csrc', sys.argv[1])])
print(int(float(m.value()[0])))
"""
CMAKE_LISTS = """cmake_minimum_required(VERSION 3.16)
project(loop CXX)
add_library(kern SHARED src/kern.cpp src/other.cpp)
add_executable(run src/main.cpp)
target_link_libraries(run kern)
"""
# A unit that takes a real compiler a second or so, as a kernel's does (a regex instantiated).
CMAKE_KERN = (
    "#include <regex>\n#include <string>\nint other();\n"
    'int value() { return std::regex_match(std::string("k"), std::regex("k")) ? VALUE + other() * 0 : -1; }\n'
)
CMAKE_OTHER = "int other() { return 1; }\n"
CMAKE_MAIN = '#include <cstdio>\nint value();\nint main() { std::printf("%d\\n", value()); }\n'


def run(argv, env, cwd=None):
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s%s" % (" ".join(argv), r.stdout[-2000:], r.stderr[-3000:]))
    return time.perf_counter() - t0, r


class Compiles:
    """A compiler wrapper first on PATH that logs each call; count() says how many compiled."""

    def __init__(self, w):
        self.log = os.path.join(w, "compiles.log")
        self.bin = os.path.join(w, "bin")
        os.makedirs(self.bin)
        open(self.log, "w").close()
        for name in ("c++", "g++", "nvcc"):
            real = shutil.which(name)
            if real is not None:
                self.wrap(os.path.join(self.bin, name), real)

    def wrap(self, path, real):
        """Writes at path a wrapper of the compiler real that logs each compile (-c)."""
        # A compile nvcc hands its host compiler is not counted again (AB_LOOP_IN_COMPILE).
        with open(path, "w") as f:
            f.write(
                '#!/bin/sh\nif [ -z "$AB_LOOP_IN_COMPILE" ]; then case " $* " in *" -c "*) echo %s >> %s;; esac; fi\n'
                'AB_LOOP_IN_COMPILE=1 exec %s "$@"\n'
                % (shlex.quote(os.path.basename(path)), shlex.quote(self.log), shlex.quote(real))
            )
        os.chmod(path, 0o755)

    def cuda_home(self, w, python, env):
        """torch's JIT runs $CUDA_HOME/bin/nvcc by its absolute path, never the nvcc on PATH: a
        CUDA_HOME beside torch's whose bin/nvcc is a wrapper and whose every other entry is a link
        to the real one's. Returns it, or None where torch names no CUDA_HOME."""
        probe = [python, "-c", "from torch.utils.cpp_extension import CUDA_HOME; print(CUDA_HOME or '')"]
        real = subprocess.run(probe, capture_output=True, text=True, env=env).stdout.strip()
        if not real or not os.path.isfile(os.path.join(real, "bin", "nvcc")):
            return None
        home = os.path.join(w, "cuda")
        os.makedirs(os.path.join(home, "bin"))
        for sub, skip in (("", "bin"), ("bin", "nvcc")):
            for e in os.listdir(os.path.join(real, sub)):
                if e != skip:
                    os.symlink(os.path.join(real, sub, e), os.path.join(home, sub, e))
        self.wrap(os.path.join(home, "bin", "nvcc"), os.path.join(real, "bin", "nvcc"))
        return home

    def count(self):
        with open(self.log) as f:
            return sum(1 for _ in f)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def setup_jit(w, python, env, compiles):
    probe = subprocess.run(
        [python, "-c", "import torch; print(int(torch.cuda.is_available()))"], capture_output=True, text=True, env=env
    )
    if probe.returncode != 0:
        return None
    ext = "cu" if probe.stdout.strip() == "1" else "cpp"
    if ext == "cu":
        home = compiles.cuda_home(w, python, env)
        if home is None:
            sys.exit(
                "ab_loop jit: torch sees a GPU but names no CUDA_HOME with bin/nvcc: its compiles cannot be counted"
            )
        env["CUDA_HOME"] = home
    src = os.path.join(w, "pkg", "csrc", "fill." + ext)
    write(src, "#define VALUE %s\n" % VALUES["stock"] + JIT_BODY[ext])
    for c in ("A", "B", "C"):
        write(os.path.join(w, "cand", c, "fill." + ext), "#define VALUE %s\n" % VALUES[c] + JIT_BODY[ext])
    write(os.path.join(w, "pkg", "load.py"), JIT_LOAD)
    env["TORCH_EXTENSIONS_DIR"] = os.path.join(w, "te")
    leg = [python, os.path.join(w, "pkg", "load.py"), "fill." + ext]
    return {
        "name": "jit (%s)" % ext,
        "src": src,
        "leg": leg,
        "build": leg,
        "build_cwd": os.path.join(w, "pkg"),
        "cand": lambda c: os.path.join(w, "cand", c, "fill." + ext),
        "invalidate": lambda: shutil.rmtree(env["TORCH_EXTENSIONS_DIR"], ignore_errors=True),
    }


def setup_cmake(w, env, compiles):
    proj = os.path.join(w, "proj")
    write(os.path.join(proj, "CMakeLists.txt"), CMAKE_LISTS)
    src = os.path.join(proj, "src", "kern.cpp")
    write(src, "#define VALUE %s\n" % VALUES["stock"] + CMAKE_KERN)
    write(os.path.join(proj, "src", "other.cpp"), CMAKE_OTHER)
    write(os.path.join(proj, "src", "main.cpp"), CMAKE_MAIN)
    for c in ("A", "B", "C"):
        write(os.path.join(w, "cand", c, "kern.cpp"), "#define VALUE %s\n" % VALUES[c] + CMAKE_KERN)
    bdir = os.path.join(proj, "build")
    run(
        ["cmake", "-S", proj, "-B", bdir, "-G", "Ninja", "-DCMAKE_CXX_COMPILER=" + os.path.join(compiles.bin, "c++")],
        env,
    )
    build = ["cmake", "--build", bdir]
    return {
        "name": "cmake",
        "src": src,
        "leg": [os.path.join(bdir, "run")],
        "build": build,
        "build_cwd": bdir,
        "cand": lambda c: os.path.join(w, "cand", c, "kern.cpp"),
        "invalidate": lambda: os.utime(src),
    }


def floor_parts(ex, env, compiles):
    """The stock build (first), a warm leg (the run's floor) and one compile of the changed unit by hand."""
    first, _ = run(ex["build"], env, ex["build_cwd"])
    leg, _ = run(ex["leg"], env)
    with open(ex["src"]) as f:
        stock = f.read()
    with open(ex["cand"]("C")) as f:
        changed = f.read()
    write(ex["src"], changed)
    n0 = compiles.count()
    unit, _ = run(ex["build"], env, ex["build_cwd"])
    units = compiles.count() - n0
    write(ex["src"], stock)
    run(ex["build"], env, ex["build_cwd"])
    return first, leg, unit, units


def loop(ex, tool, env, compiles, args_for_add, revert):
    rows = []
    seen = set()
    for c in ORDER:
        n0 = compiles.count()
        t0 = time.perf_counter()
        _, ref = run(ex["leg"], env)
        # Dated now: overlay_setup.py copies the candidate with its mtime (shutil.copy2), and an
        # older one than the last build's outputs would never be compiled (this tool dates it now).
        os.utime(ex["cand"](c))
        run(args_for_add(ex["cand"](c)), env)
        _, cand = run(ex["leg"], env)
        run(revert, env)
        wall = time.perf_counter() - t0
        if ref.stdout.strip() != VALUES["stock"] or cand.stdout.strip() != VALUES[c]:
            sys.exit(
                "%s: wrong values in cycle %s: REF %s, candidate %s"
                % (tool, c, ref.stdout.strip(), cand.stdout.strip())
            )
        rows.append((c, c in seen, compiles.count() - n0, wall))
        seen.add(c)
    return rows


def bench(ex, a, env, compiles, w):
    if a.trace_rounds > 0:
        plain, traced = trace_cost.measure(
            a.overlay, ex["build"], ex["build_cwd"], env, ex["invalidate"], a.trace_rounds, w
        )
        print("ab_loop " + trace_cost.line("%s, traced build" % ex["name"], plain, traced), flush=True)
    if a.trace_only:
        return
    first, leg, unit, units = floor_parts(ex, env, compiles)
    _, d = run([a.overlay, "--json", "discover", "--target", ex["src"], "--root", w], env)
    disc = json.loads(d.stdout)["candidates"][0]
    flags = [f for f in disc["add_native_args"]]
    if not disc["build_cmds"]:  # a JIT cache: the load is the build
        flags += ["--build-cmd", shlex.join(ex["build"]), "--build-cwd", ex["build_cwd"]]
    print(
        "ab_loop %s: stock build %.2f s, a leg %.2f s, one compile of the changed unit %.2f s (%d compile(s))"
        % (ex["name"], first, leg, unit, units)
    )
    results = {}
    ov = os.path.join(w, "ov-overlay")
    results["overlay"] = loop(
        ex,
        "overlay",
        env,
        compiles,
        lambda p: [a.overlay, "add-native", "--overlay", ov, "--patched-file", p, *flags],
        [a.overlay, "revert", "--overlay", ov],
    )
    if a.reference:
        ref_flags, cmds = [], []
        for flag, value in zip(flags[::2], flags[1::2]):  # overlay_setup.py takes one --build-cmd, run by a shell
            if flag == "--build-cmd":
                cmds.append(value)
            elif flag in ("--target", "--artifact", "--invalidate-cache", "--build-cwd"):
                ref_flags += [flag, value]
        if cmds:
            ref_flags += ["--build-cmd", " && ".join(cmds)]
        ovp = os.path.join(w, "ov-script")
        py = [sys.executable, a.reference]
        results["overlay_setup.py"] = loop(
            ex,
            "overlay_setup.py",
            env,
            compiles,
            lambda p: [*py, "add-native", "--overlay", ovp, "--patched-file", p, *ref_flags],
            [*py, "revert", "--overlay", ovp],
        )
    for tool, rows in results.items():
        print("ab_loop %s through %s:" % (ex["name"], tool))
        print("  cycle  repeat  compiles  wall s   floor s  wall/floor")
        for c, repeat, n, wall in rows:
            floor = 2 * leg + unit
            print(
                "  %-5s  %-6s  %8d  %6.2f  %8.2f  %9.2fx" % (c, "yes" if repeat else "no", n, wall, floor, wall / floor)
            )
        total = sum(r[3] for r in rows)
        tfloor = sum(2 * leg + unit for r in rows)
        print(
            "  total: %d compiles (one per new candidate: %d), %.2f s (floor %.2f s, %.2fx)"
            % (sum(r[2] for r in rows), units * len(set(ORDER)), total, tfloor, total / tfloor)
        )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--overlay", required=True, help="the overlay binary")
    ap.add_argument("--reference", help="overlay_setup.py, to run the same loop through it beside")
    ap.add_argument("--python", default="/usr/bin/python3", help="the interpreter with torch (jit)")
    ap.add_argument("--example", choices=["jit", "cmake", "both"], default="both")
    ap.add_argument("--trace-rounds", type=int, default=3, help="builds plain and traced, each, for the tracer's cost")
    ap.add_argument("--trace-only", action="store_true", help="the tracer's cost only, not the loop")
    a = ap.parse_args()
    a.overlay = os.path.abspath(a.overlay)
    for name in ["cmake", "jit"] if a.example == "both" else [a.example]:
        with tempfile.TemporaryDirectory(prefix="overlay-ab-loop-") as w:
            compiles = Compiles(w)
            env = dict(
                os.environ,
                OVERLAY_STATE_DIR=os.path.join(w, "state"),
                PATH=compiles.bin + os.pathsep + os.environ["PATH"],
            )
            ex = setup_jit(w, a.python, env, compiles) if name == "jit" else setup_cmake(w, env, compiles)
            if ex is None:
                print("ab_loop jit: skipped: %s has no torch" % a.python)
                continue
            bench(ex, a, env, compiles, w)


if __name__ == "__main__":
    main()
