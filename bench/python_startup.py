#!/usr/bin/env python3
"""What a Python overlay costs every process it reaches, as ratios to a bare start in the same
run, interleaved round by round; v3's overlay for the same entries printed beside. It reports; it
does not assert (exit 0 whatever the ratios; --check exits 1 when a target is missed).

  bench/python_startup.py --overlay build/overlay [--rounds 30] [--v3 PATH] [--entries 2000]

  * `python3 -c pass` under a 2-entry overlay whose targets it never imports (a tokenizer, a
    resource tracker, a compiler helper): target <= 1.10x bare and <= +3 ms.
  * `python3 -c pass` under a 2,000-entry overlay (every entry a rebind of module T): target
    <= 1.5x bare.
  * For reference, no target: `python3 -c "import T"` under the 2,000-entry overlay, so that all
    2,000 apply, against the same import bare (linear in entries: the live record is written once
    per imported module, not once per entry).

  * The floor of any overlay, no target: a directory holding only a `sitecustomize.py` of `pass`.
    With PYTHONDONTWRITEBYTECODE=1 and sources only under the root (a source-proving launch refuses
    a .pyc), the interpreter compiles that file at every start, and its first compile() builds the
    AST module's ~120 node types (PyAST_Check, once per process): ~1.5 ms that no overlay avoids.
    Our overlay's cost is printed over that floor too.

Both with bytecode caching as Python does by default (one warm-up run writes the caches), and
with PYTHONDONTWRITEBYTECODE=1 (common in serving images: no process writes a .pyc or the plan;
every cache removed first, then the overlays written once more by the tool, which writes the
runtime's bytecode and the plan itself), with the same targets. Our runtime's caches are outside
the overlays (OVERLAY_CACHE_DIR, this run's); after each pass the overlays are checked to hold no
.pyc, beyond the interpreter's own cache of the sitecustomize.py file where writing is on.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def make_overlays(binary, v3, work, entries):
    """Overlays of 2 and `entries` rebinds of ovb_target.f<i>, made by overlay and (when given) by v3."""
    lib = os.path.join(work, "lib")
    write(os.path.join(lib, "ovb_target.py"), "".join("def f%d(x):\n    return x\n\n" % i for i in range(entries)))
    impl = write(
        os.path.join(work, "impl", "ovb_impl.py"),
        "".join("def f%d(x):\n    return x + 1\n\n" % i for i in range(entries)),
    )
    made = {}
    tools = [("overlay", [binary])] + ([("v3", [PY, v3])] if v3 else [])
    env = dict(os.environ, OVERLAY_BIN=binary)
    for tool, cmd in tools:
        for n in (2, entries):
            o = os.path.join(work, "%s-%d" % (tool, n))
            for i in range(2):
                subprocess.run(
                    cmd
                    + [
                        "add-rebind",
                        "--overlay",
                        o,
                        "--target",
                        "ovb_target:f%d" % i,
                        "--impl-module",
                        "ovb_impl",
                        "--impl-attr",
                        "f%d" % i,
                    ]
                    + (["--impl-file", impl] if i == 0 else []),
                    env=env,
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
            if n > 2:  # the rest written in the manifest's own format (both tools read it), not 2,000 runs
                man = os.path.join(o, "_overlay_manifest.json")
                with open(man) as f:
                    m = json.load(f)
                m["rebinds"] = [
                    {"target": "ovb_target:f%d" % i, "impl_module": "ovb_impl", "impl_attr": "f%d" % i}
                    for i in range(n)
                ]
                with open(man, "w") as f:
                    json.dump(m, f, indent=2)
            made[(tool, n)] = o
    return lib, made


def one(code, pythonpath, env):
    e = dict(env, PYTHONPATH=pythonpath)
    t0 = time.perf_counter()
    r = subprocess.run([PY, "-c", code], env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit("bench: %s under %s exited %d: %s" % (code, pythonpath, r.returncode, r.stderr.decode()[-300:]))
    return dt, r.stderr.decode()


def measure(cases, rounds, env):
    """{case: [seconds]}: every case once per round, in turn, so drift hits all alike."""
    for name, (code, path) in cases.items():
        one(code, path, env)  # warm-up: page cache, .pyc, the start-up plan
    times = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (code, path) in cases.items():
            times[name].append(one(code, path, env)[0])
    return times


def report(title, times, made, entries):
    med = {k: statistics.median(v) for k, v in times.items()}
    print("\n%s (median of %d runs each)" % (title, len(next(iter(times.values())))))
    print("  %-44s %9s %8s %9s  %s" % ("case", "ms", "ratio", "+ms", "target"))
    rows = [
        ("bare: -c pass", "bare-pass", None, None),
        ("floor: a sitecustomize.py of `pass`", "floor-pass", "bare-pass", None),
        ("overlay, 2 entries: -c pass", "overlay-2-pass", "bare-pass", (1.10, 3.0)),
        ("v3, 2 entries: -c pass", "v3-2-pass", "bare-pass", None),
        ("overlay, %d entries: -c pass" % entries, "overlay-n-pass", "bare-pass", (1.5, None)),
        ("v3, %d entries: -c pass" % entries, "v3-n-pass", "bare-pass", None),
        ("bare: import ovb_target", "bare-import", None, None),
        ("overlay, %d entries: import ovb_target" % entries, "overlay-n-import", "bare-import", None),
        ("v3, %d entries: import ovb_target" % entries, "v3-n-import", "bare-import", None),
    ]
    missed = []
    for label, key, base, target in rows:
        if key not in med:
            continue
        ms = med[key] * 1e3
        if base is None:
            print("  %-44s %9.1f" % (label, ms))
            continue
        ratio, plus = med[key] / med[base], (med[key] - med[base]) * 1e3
        verdict = ""
        if target:
            ok = ratio <= target[0] and (target[1] is None or plus <= target[1])
            verdict = "<= %.2fx%s: %s" % (
                target[0],
                " and +%.0f ms" % target[1] if target[1] else "",
                "met" if ok else "MISSED",
            )
            if not ok:
                missed.append(label)
        print("  %-44s %9.1f %7.2fx %+8.1f  %s" % (label, ms, ratio, plus, verdict))
    if "floor-pass" in med:
        ours, floor = med["overlay-2-pass"], med["floor-pass"]
        print(
            "  %-44s %9s %7.2fx %+8.1f  (what the runtime adds to any overlay's floor)"
            % ("overlay, 2 entries, over the floor", "", ours / floor, (ours - floor) * 1e3)
        )
    return missed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--overlay", required=True, help="the overlay binary")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument(
        "--v3", default=os.path.join(HERE, "..", "..", "shared", "reference", "upstream", "overlay_setup.v3.py")
    )
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    a = ap.parse_args()
    v3 = a.v3 if os.path.isfile(a.v3) else None
    work = tempfile.mkdtemp(prefix="py-startup-")
    # The runtime's cache (its bytecode and the start-up plans: outside every overlay), this run's.
    os.environ["OVERLAY_CACHE_DIR"] = os.path.join(work, "cache")
    try:
        lib, made = make_overlays(os.path.abspath(a.overlay), v3, work, a.entries)
        floor = os.path.dirname(write(os.path.join(work, "floor", "sitecustomize.py"), "pass\n"))
        cases = {
            "bare-pass": ("pass", lib),
            "floor-pass": ("pass", floor + os.pathsep + lib),
            "overlay-2-pass": ("pass", made[("overlay", 2)] + os.pathsep + lib),
            "overlay-n-pass": ("pass", made[("overlay", a.entries)] + os.pathsep + lib),
            "bare-import": ("import ovb_target", lib),
            "overlay-n-import": ("import ovb_target", made[("overlay", a.entries)] + os.pathsep + lib),
        }
        if v3:
            cases["v3-2-pass"] = ("pass", made[("v3", 2)] + os.pathsep + lib)
            cases["v3-n-pass"] = ("pass", made[("v3", a.entries)] + os.pathsep + lib)
            cases["v3-n-import"] = ("import ovb_target", made[("v3", a.entries)] + os.pathsep + lib)
        base_env = {
            k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "OVERLAY_DISABLE")
        }
        # What a process that imports none of the targets prints: nothing.
        _, noise = one("pass", made[("overlay", 2)] + os.pathsep + lib, base_env)
        print(
            "python3 %s, %d entries; stderr of -c pass under the 2-entry overlay: %s"
            % (sys.version.split()[0], a.entries, repr(noise) if noise else "none")
        )
        missed = report("bytecode cached (Python's default)", measure(cases, a.rounds, base_env), made, a.entries)
        for d, dirs, _ in os.walk(work):  # what the default run cached goes
            if "__pycache__" in dirs:
                shutil.rmtree(os.path.join(d, "__pycache__"))
        shutil.rmtree(os.environ["OVERLAY_CACHE_DIR"], True)
        # What the tool writes when it writes an overlay (the runtime's bytecode and the start-up
        # plan, for the interpreters it knows): one more add-rebind of an entry each overlay has
        # (the manifest keeps its bytes). v3's overlays get nothing: no process may write either.
        for (tool, n), o in made.items():
            if tool == "overlay":
                subprocess.run(
                    [
                        os.path.abspath(a.overlay),
                        "add-rebind",
                        "--overlay",
                        o,
                        "--target",
                        "ovb_target:f0",
                        "--impl-module",
                        "ovb_impl",
                        "--impl-attr",
                        "f0",
                    ],
                    check=True,
                    stdout=subprocess.DEVNULL,
                    env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
                )  # as in the image: the tool writes both
        missed += report(
            "PYTHONDONTWRITEBYTECODE=1 (no process writes .pyc or the plan; the overlay as the tool wrote it)",
            measure(cases, a.rounds, dict(base_env, PYTHONDONTWRITEBYTECODE="1")),
            made,
            a.entries,
        )
        if noise:
            missed.append("silent helper process")
        return 1 if a.check and missed else 0
    finally:
        shutil.rmtree(work, True)


if __name__ == "__main__":
    sys.exit(main())
