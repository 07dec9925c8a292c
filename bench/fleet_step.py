#!/usr/bin/env python3
"""What a fleet step costs over a one-node step (issue 42), measured in one run.

Starts the 3-node Slurm of tests/fleet/slurm_cluster.sh on this host (root), with a copy of the
CPU example install per node. Inside one `salloc -k -N3` it then times, ROUNDS times each:

  floor     srun -N3 --ntasks-per-node=1 --overlap true: one engine step, nothing in it
  one-node  overlay exec --ref on this host's own copy of the install (the same path; each node's
            copy is mounted over it only in that node's namespace): the step as one agent runs it
  fleet     overlay --json fleet exec --slurm --ref on the 3 nodes, CMD an srun of the example

and prints the medians, the ratio fleet / one-node, and where the fleet step's time goes: each
phase (from the document's phase_s, ref and cand), and how much of it is the engine's floor.

    sudo bench/fleet_step.py --overlay build/overlay [--rounds 5]
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
SRC = os.path.dirname(HERE)
CLUSTER = os.path.join(SRC, "tests", "fleet", "slurm_cluster.sh")


def run(argv, **kw):
    return subprocess.run(argv, check=True, **kw)


def timed(argv, **kw):
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit("fleet_step: %s exited %d:\n%s" % (" ".join(argv[:4]), r.returncode, r.stderr[-2000:]))
    return dt, r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--overlay", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    a = ap.parse_args()
    binary = os.path.abspath(a.overlay)
    if a.inner:
        return measure(binary, a.work, a.rounds)
    if os.geteuid() != 0:
        sys.exit("fleet_step: needs root (slurmd, mount namespaces)")
    work = tempfile.mkdtemp(prefix="overlay-fleet-bench.")
    cluster, install = os.path.join(work, "cluster"), os.path.join(work, "install")
    os.environ.update(SLURM_CONF=os.path.join(cluster, "slurm.conf"), OVERLAY_STATE_DIR=os.path.join(work, "state"))
    try:
        os.makedirs(install)
        for p in ("src", "CMakeLists.txt"):
            s = os.path.join(SRC, "examples", "cpu_smoke", p)
            (shutil.copytree if os.path.isdir(s) else shutil.copy)(s, os.path.join(install, p))
        run(
            ["cmake", "-S", install, "-B", install + "/build", "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"],
            stdout=subprocess.DEVNULL,
        )
        run(["cmake", "--build", install + "/build"], stdout=subprocess.DEVNULL)
        for k in (1, 2, 3):
            os.makedirs(os.path.join(cluster, "node%d" % k))
            run(["cp", "-a", install, os.path.join(cluster, "node%d" % k, "root")])
        run(["bash", CLUSTER, "up", cluster, install, os.environ["OVERLAY_STATE_DIR"], "3"])
        # The measurements run inside one allocation, as an agent's would.
        run(
            [
                "salloc",
                "-k",
                "-N3",
                sys.executable,
                os.path.abspath(__file__),
                "--inner",
                "--overlay",
                binary,
                "--work",
                work,
                "--rounds",
                str(a.rounds),
            ],
            stderr=subprocess.DEVNULL,
        )
    finally:
        subprocess.run(["bash", CLUSTER, "down", cluster])
        shutil.rmtree(work, ignore_errors=True)


def step_flags(install, overlay):
    return [
        "--overlay",
        overlay,
        "--patched-file",
        os.path.join(SRC, "examples/cpu_smoke/patched/kernel.cpp"),
        "--target",
        install + "/src/kernel.cpp",
        "--artifact",
        install + "/build/CMakeFiles/kernel.dir/src/kernel.cpp.o",
        "--artifact",
        install + "/build/libkernel.so",
        "--build-cmd",
        "cmake --build %s/build" % install,
        "--build-cwd",
        install + "/build",
    ]


def measure(binary, work, rounds):
    # This host's own view of the install path is a copy of its own (each node's is bind-mounted
    # over it in the node's namespace): the one-node step runs there.
    install = local = os.path.join(work, "install")
    floor, one, fleet, phases = [], [], [], []
    for _ in range(rounds):
        floor.append(timed(["srun", "-N3", "--ntasks-per-node=1", "--overlap", "true"])[0])
        one.append(
            timed([binary, "exec", "--ref"] + step_flags(local, local + "/ov") + ["--", local + "/build/smoke"])[0]
        )
        dt, out = timed(
            [binary, "--json", "fleet", "exec", "--slurm", "--ref"]
            + step_flags(install, install + "/ov")
            + ["--", "srun", "-N3", "--ntasks-per-node=1", "--overlap", install + "/build/smoke"]
        )
        fleet.append(dt)
        doc = json.loads(out)
        if doc["outcome"] != "ok":
            sys.exit("fleet_step: fleet exec outcome %s" % doc["outcome"])
        p = dict(doc["phase_s"])
        p["ref"], p["cand"] = doc["ref"]["wall_s"], doc["cand"]["wall_s"]
        p["rest"] = dt - sum(p.values())
        phases.append(p)
    med = statistics.median
    f, o, fl = med(fleet), med(one), med(floor)
    print("fleet step on 3 nodes vs one-node step (median of %d rounds, CPU example install, this host)" % rounds)
    print("  engine floor (srun -N3 true)      %7.3f s" % fl)
    print("  one-node exec --ref               %7.3f s" % o)
    print("  fleet exec --ref (3 nodes)        %7.3f s   ratio %.2f x one-node, +%.3f s" % (f, f / o, f - o))
    print("  where the fleet step's time goes:")
    for k in ("ref", "apply", "verify", "cand", "revert", "clean", "rest"):
        note = "  (process start, scontrol show hostnames, reading the answers)" if k == "rest" else ""
        print("    %-7s %7.3f s%s" % (k, med([p.get(k, 0.0) for p in phases]), note))
    engine_steps = 4 + 2  # apply, verify, revert, clean; ref and cand are srun steps of their own
    print(
        "  six srun steps at the floor: %.3f s (%.0f%% of the fleet step)"
        % (engine_steps * fl, 100 * engine_steps * fl / f)
    )


if __name__ == "__main__":
    main()
