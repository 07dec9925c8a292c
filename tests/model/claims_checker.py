#!/usr/bin/python3
"""A checker of claims, not of cases (issue 39).

hypothesis.stateful drives random interleavings on one machine, through the real binary: three
agents, each with its own overlay, running add-native (its build held open by a gate, so other
steps happen while it builds), verify-native, exec --ref and revert on two targets of a real
CMake + Ninja install; CI's gc-stale at any moment; a harness that rm -rf's or mv's an idle
agent's overlay; a package reinstall (the source dir replaced: a new inode); a hand edit of a
patched source; kill -9 of an agent mid-build. After each step, what the tool *said* is checked
against the disk:

* add-native exit 0 with its summary: the artifact was built from the candidate (the build stamps
  the source it compiled into the library: STAMP-...); a failure prints nothing on stdout;
* FRESH_BUILD_OK (checked N > 0): every tracked artifact carries its entry's candidate stamp;
* exec: the reference ran the stock library, the candidate the candidate's, and `install clean`
  only over original bytes;
* revert exit 0: every file it restored is original; `status --all --check-clean` exit 0 only when
  every source and artifact is original; gc-stale never reverts an agent whose add-native runs;
* at the end (every run finished, every overlay reverted): a file that is not original is one
  `status --all --check-clean` reports (no original lost without a line saying so).

Layers (issue 49): an integrator's overlay of accepted changes ("acc") that agents stack their
candidates on (add-native --over), fold candidates into (accept), kill -9 mid-fold, finalize
(export, revert --with-layers) and replay; the harness deletes and moves it too. Claims: a revert
puts back exactly what the entry found (the layer below's bytes, or the original); fold exit 0
moves every entry and changes no byte of the install; FRESH_BUILD_OK only over an artifact built
from its entry's candidate (or a layer above it, where one stands); finalize leaves the install
pristine or `status --all --check-clean` says which file is not; replay exit 0 runs the bundle's
candidates, and FRESH_BUILD_OK.

Containers, copies and neighbours (issue 50), where this runs as root with PID namespaces: an
agent may run in a container (a PID namespace whose pid 1 lives until the container ends; its
add-natives run inside it with --owner-pid 1); while that pid 1 lives, gc-stale (run on the host)
never reverts the agent's entries. An idle agent's overlay is archived (cp -a under runs/) and the
copy reverted: the agent's files and record stay as they are. Another account (nobody) flocks an
agent's overlay directory: revert and gc-stale never wait out their lock timeout for it.

What the build read and wrote (issue 61): both libraries include a header found through two include
dirs (the first one empty until a rule shadows the header there) and a header a generator makes from
a config file, and the stamp each library carries ends with their tags ("...-h03-g01"). A rule edits
them between steps: new bytes of the same size with the mtime set back (cp -p), a plain edit, a
shadowing header added or removed, the generator's config changed. Claims: whatever add-native,
exec or replay built or served (`store: hit`) carries the candidate and the tags as they are now —
a record is never served whose inputs differ; a revert that says the install's build has nothing
more to redo than before the apply leaves `ninja -n` with the very work it had before the apply.

Usage: claims_checker.py OVERLAY_BIN [--examples N] [--steps N] [--seed S]
A failure prints the seed and the steps (hypothesis' own reproduction); --seed replays it.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

try:
    from hypothesis import HealthCheck, Phase, settings, seed as hseed
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
except ImportError as _missing:  # ctest counts 77 as skipped (SKIP_RETURN_CODE)
    print("claims_checker: skipped: %s: it needs hypothesis (Debian: python3-hypothesis)" % _missing)
    sys.exit(77)

OVERLAY = None
WORK = None
TEMPLATE = None
STATS = {
    "steps": 0,
    "claims": 0,
    "examples": 0,
    "in_flight_steps": 0,
    "layered": 0,
    "folds": 0,
    "failed_builds": 0,
    "failed_builds_kept": 0,
    "failed_builds_left": 0,
    "folds_killed": 0,
    "finalized": 0,
    "replayed": 0,
    "reused": 0,
    "in_container": 0,
    "in_time_ns": 0,
    "defaulted_cwd": 0,
    "with_cache": 0,
    "replays_through_link": 0,
    "copies": 0,
    "neighbour_locks": 0,
    "again": 0,
    "served": 0,
    "execs": 0,
    "execs_ok": 0,
    "header_edits": 0,
    "nothing_more_checked": 0,
}
CONTAINERS = False  # root with unshare/nsenter/setpriv: containers and a second account
TIME_NS = False  # containers may have a time namespace of their own (unshare --time, a CRIU restore)
AGENTS = ("a1", "a2", "a3")
ACC = "acc"  # the integrator's overlay of accepted changes (issue 49)
TARGETS = ("ka", "kb")
STAMP = re.compile(rb"STAMP-[A-Za-z0-9-]+")


def kernel(stamp):
    """A candidate's source: its stamp, then the tags of the headers it read (kh.h, the generated gen.h)."""
    return '#include "kh.h"\n#include "gen.h"\nextern "C" const char* stamp() { return "%s-" HTAG "-" GTAG; }\n' % stamp


GEN_SH = 'mkdir -p "$(dirname "$2")" && printf \'#define GTAG "%s"\\n\' "$(cat "$1")" > "$2"\n'


def header(tag):
    return '#define HTAG "%s"\n' % tag


def make_template(root):
    """A real CMake + Ninja install: libka.so and libkb.so, each built from its own source, both
    including kh.h (from include/, unless include0/ searched first holds one) and gen.h, which a
    custom command generates from gen.txt."""
    os.makedirs(os.path.join(root, "inst/src"))
    os.makedirs(os.path.join(root, "inst/include0"))
    with open(os.path.join(root, "inst/CMakeLists.txt"), "w") as f:
        f.write(
            "cmake_minimum_required(VERSION 3.16)\nproject(k CXX)\n"
            "set(GEN ${CMAKE_BINARY_DIR}/gen/gen.h)\n"
            "add_custom_command(OUTPUT ${GEN} COMMAND sh ${CMAKE_SOURCE_DIR}/gen.sh ${CMAKE_SOURCE_DIR}/gen.txt ${GEN}"
            " DEPENDS ${CMAKE_SOURCE_DIR}/gen.txt ${CMAKE_SOURCE_DIR}/gen.sh)\n"
            "include_directories(include0 include ${CMAKE_BINARY_DIR}/gen)\n"
            "add_library(ka SHARED src/ka.cpp ${GEN})\nadd_library(kb SHARED src/kb.cpp ${GEN})\n"
        )
    write_text(os.path.join(root, "inst/include/kh.h"), header("h00"))
    write_text(os.path.join(root, "inst/gen.txt"), "g00")
    write_text(os.path.join(root, "inst/gen.sh"), GEN_SH)
    for t in TARGETS:
        with open(os.path.join(root, "inst/src", t + ".cpp"), "w") as f:
            f.write(kernel("STAMP-orig-" + t))
        write_text(os.path.join(root, "inst/jit", t, "kernel.bin"), "jit-orig-" + t)
    inst = os.path.join(root, "inst")
    subprocess.run(
        ["cmake", "-S", inst, "-B", inst + "/build", "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(["cmake", "--build", inst + "/build"], check=True, stdout=subprocess.DEVNULL)


def write_text(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def stamp_of(path):
    try:
        with open(path, "rb") as f:
            m = STAMP.search(f.read())
        return m.group(0).decode() if m else None
    except FileNotFoundError:
        return None


def kill_group(p):
    """kill -9 of a process started in its own session, and of everything it started there."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # already gone


def log(*what):
    """$OVERLAY_CLAIMS_LOG: every command the checker runs, with what it said (for a replay)."""
    if LOG:
        with open(LOG, "a") as f:
            f.write(" | ".join(str(w) for w in what).replace("\n", "\\n") + "\n")


LOG = os.environ.get("OVERLAY_CLAIMS_LOG")


def can_contain():
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("unshare", "nsenter", "setpriv", "flock")):
        return False
    r = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", "echo $$"], capture_output=True, text=True
    )
    return r.returncode == 0 and r.stdout.strip() == "1"


def can_shift_time():
    r = subprocess.run(["unshare", "--time", "--boottime", "100000", "true"], capture_output=True)
    return r.returncode == 0


def child_of(pid):
    """The first child of pid (unshare --fork's child: the container's pid 1), or None."""
    for _ in range(500):
        try:
            with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                kids = f.read().split()
            if kids:
                return int(kids[0])
        except OSError:
            return None
        time.sleep(0.01)
    return None


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


class Claims(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        STATS["examples"] += 1
        if LOG:  # one example per file, the last three kept: hypothesis replays a failure after it
            for i in (2, 1):
                if os.path.exists(LOG + (".%d" % (i - 1) if i > 1 else "")):
                    os.replace(LOG + (".%d" % (i - 1) if i > 1 else ""), LOG + ".%d" % i)
            open(LOG, "w").close()
        self.root = os.path.join(WORK, "run")
        shutil.rmtree(self.root, ignore_errors=True)
        # Same path every example: the copied build dir's absolute paths stay right.
        subprocess.run(["cp", "-a", TEMPLATE, self.root], check=True)
        self.inst = os.path.join(self.root, "inst")
        self.env = dict(os.environ, OVERLAY_STATE_DIR=os.path.join(self.root, "state"), OVERLAY_LOCK_TIMEOUT="20")
        self.original = {}
        for t in TARGETS:
            self.original[self.src(t)] = read(self.src(t))
            self.original[self.lib(t)] = read(self.lib(t))
            self.original[self.jit(t)] = read(self.jit(t))
        self.overlay = {a: os.path.join(self.root, "runs", a, "ov") for a in AGENTS + (ACC,)}
        for a in AGENTS + (ACC,):
            os.makedirs(os.path.dirname(self.overlay[a]), exist_ok=True)
        self.proc = {}  # agent -> (Popen, target, stamp, gate)
        self.n = 0
        self.stamps = {}  # a candidate source's SHA-256 -> the stamp its build carries
        self.exec_done = {}  # target -> [(candidate file, stamp)] exec built and ran (issue 51)
        self.before_start = {}  # agent -> the entries its overlay had when its add-native started
        self.container = (
            {}
        )  # agent -> (unshare Popen, the container's pid 1 as the host sees it, its PID namespace inode)
        self.neighbour = None  # (Popen of nobody's flock, the overlay directory it locks)
        self.work_before = {}  # agent -> (target, ninja -n's work for it right before its add-native)
        self.applied_before = {}  # target -> [(candidate file, stamp)] apply_and_revert applied
        self.time_ns = {}  # agent -> whether its container has a time namespace of its own

    # ---- helpers
    def tags(self):
        """The tags a build now compiles in: kh.h as the compiler finds it first, and gen.txt's."""
        shadow = os.path.join(self.inst, "include0", "kh.h")
        h = read(shadow if os.path.exists(shadow) else os.path.join(self.inst, "include", "kh.h")).decode()
        return re.search(r'HTAG "([a-z0-9]+)"', h).group(1) + "-" + read(os.path.join(self.inst, "gen.txt")).decode()

    def built(self, stamp):
        """The stamp a library built now from the candidate stamped `stamp` carries."""
        return stamp + "-" + self.tags()

    def ninja_work(self, t):
        """The edges `ninja -n` would run for lib<t>.so, as it prints them (in order)."""
        r = subprocess.run(
            ["ninja", "-C", os.path.join(self.inst, "build"), "-n", "lib%s.so" % t], capture_output=True, text=True
        )
        return [l.split("] ", 1)[-1] for l in r.stdout.splitlines() if l.startswith("[")]

    def src(self, t):
        return os.path.join(self.inst, "src", t + ".cpp")

    def lib(self, t):
        return os.path.join(self.inst, "build", "lib" + t + ".so")

    def jit(self, t):
        """A JIT's cache of target t: the candidate's build copies its library there (issue 63:
        caches kept aside, folds killed with them, overlays deleted with them applied)."""
        return os.path.join(self.inst, "jit", t, "kernel.bin")

    def tool(self, *args):
        r = subprocess.run([OVERLAY, *args], env=self.env, capture_output=True, text=True, timeout=120)
        log("run", args, "exit %d" % r.returncode, r.stdout[-300:], r.stderr[-600:])
        return r

    def claim(self, ok, what, *detail):
        STATS["claims"] += 1
        if not ok:
            # Printed here too: hypothesis replays a failing run to report it, and background
            # timing can make the replay differ (then it reports only "Flaky").
            message = "FALSE CLAIM: " + what + "\n" + "\n".join(str(d) for d in detail)
            print(message, flush=True)
            STATS["false_claims"] = STATS.get("false_claims", 0) + 1
            raise AssertionError(message)

    def fresh_candidate(self, agent, t):
        self.n += 1
        stamp = "STAMP-%s-%s-%d" % (agent, t, self.n)
        path = os.path.join(self.root, "cand", "%s-%d.cpp" % (agent, self.n))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(kernel(stamp))
        self.stamps[hashlib.sha256(kernel(stamp).encode()).hexdigest()] = stamp
        return path, stamp

    def manifest_at(self, overlay):
        try:
            with open(os.path.join(overlay, "_overlay_manifest.json")) as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):
            return None

    def manifest(self, agent):
        try:
            with open(os.path.join(self.overlay[agent], "_overlay_manifest.json")) as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):
            return None

    def applied(self, agent):
        m = self.manifest(agent)
        return bool(m and m.get("natives"))

    def busy_targets(self):
        return {t for (_, t, _, _) in self.proc.values()}

    def idle(self, agent):
        return agent not in self.proc

    def add_args(self, agent, t, patched, gate=None, over=False, defaulted=False, cache=False):
        """add-native's arguments; `defaulted`: no --build-cwd (the build runs where the tool was
        started, which the caller makes the install: issue 63, a cwd nobody named)."""
        build = "cmake --build build --target " + t
        if cache:
            build += " && mkdir -p jit/%s && cp build/lib%s.so jit/%s/kernel.bin" % (t, t, t)
        if gate:
            build = "sh -c 'while [ ! -e %s ]; do sleep 0.01; done; %s'" % (gate, build)
        elif cache:
            build = "sh -c '%s'" % build
        layer = ["--over", self.overlay[ACC]] if over else []
        return [
            "add-native",
            "--overlay",
            self.overlay[agent],
            *layer,
            "--target",
            self.src(t),
            "--patched-file",
            patched,
            "--artifact",
            self.lib(t),
            *([] if defaulted else ["--build-cwd", self.inst]),
            *(["--invalidate-cache", os.path.dirname(self.jit(t))] if cache else []),
            "--build-cmd",
            build,
        ]

    # ---- the agents
    @rule(
        agent=st.sampled_from(AGENTS),
        t=st.sampled_from(TARGETS),
        over=st.sampled_from((True, True, False)),
        reuse=st.sampled_from((False, False, True)),
        defaulted=st.sampled_from((False, False, True)),
        cache=st.booleans(),
    )
    def start_add_native(self, agent, t, over, reuse, defaulted, cache):
        """A candidate, stacked on the accepted overlay's changes (--over) or not; now and then into
        the agent's overlay while it still has entries (issue 50: agents reuse their overlay)."""
        if not self.idle(agent) or (self.applied(agent) and not reuse):
            return
        STATS["reused"] += self.applied(agent)
        self.before_start[agent] = self.entry_ids(agent)
        self.work_before[agent] = (t, self.ninja_work(t)) if not self.proc and not self.applied(agent) else None
        patched, stamp = self.fresh_candidate(agent, t)
        gate = os.path.join(self.root, "gate-%d" % self.n)
        defaulted = defaulted and agent not in self.container  # nsenter --mount moves the cwd
        STATS["defaulted_cwd"] += defaulted
        args = self.add_args(agent, t, patched, gate, over, defaulted, cache)
        STATS["with_cache"] += cache
        cmd = [OVERLAY, *args]
        if agent in self.container:  # inside the agent's container, owned by its pid 1
            cmd = [
                "nsenter",
                "--target",
                str(self.container[agent][1]),
                "--pid",
                "--mount",
                *(["--time"] if self.time_ns.get(agent) else []),
                "--",
                OVERLAY,
                *args,
                "--owner-pid",
                "1",
            ]
            STATS["in_container"] += 1
            STATS["in_time_ns"] += bool(self.time_ns.get(agent))
        p = subprocess.Popen(
            cmd,
            env=self.env,
            cwd=self.inst if defaulted else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        log("start", agent, stamp, args, "from the install" if defaulted else "")
        self.proc[agent] = (p, t, stamp, gate)

    @rule(agent=st.sampled_from(AGENTS))
    def finish_add_native(self, agent):
        if self.idle(agent):
            return
        p, t, stamp, gate = self.proc.pop(agent)
        open(gate, "w").close()
        out, err = p.communicate(timeout=120)
        log("finish", agent, stamp, "exit %d" % p.returncode, out[-300:], err[-600:])
        if p.returncode == 0:
            STATS["layered"] += "taken as layers" in err
            self.claim(
                "add-native " in out and "OVERLAY_DIR=" in out, "add-native exit 0 without its summary", out, err
            )
            self.claim(
                stamp_of(self.lib(t)) == self.built(stamp),
                "add-native succeeded but the artifact was not built from the candidate and the headers as they are",
                "artifact stamp %s, candidate %s" % (stamp_of(self.lib(t)), self.built(stamp)),
                err,
            )
        else:
            self.claim(out == "", "a failed add-native printed on stdout", out, err)

    @rule(agent=st.sampled_from(AGENTS))
    def kill_9(self, agent):
        if self.idle(agent):
            return
        p, _, stamp, _ = self.proc.pop(agent)
        kill_group(p)
        p.communicate(timeout=60)
        log("kill -9", agent, stamp)

    @rule(agent=st.sampled_from(AGENTS))
    def verify(self, agent):
        r = self.tool("verify-native", "--overlay", self.overlay[agent])
        m = re.search(r"FRESH_BUILD_OK \(checked (\d+)\)", r.stdout)
        if not m or int(m.group(1)) == 0:
            return
        m = self.manifest(agent) or {}
        # A layer stacked above (add-native --over this overlay) rebuilt the artifact again: it
        # carries that layer's candidate, whose own verify speaks for it.
        covered = {p for u in m.get("layers_above", []) if self.records_entry(u) for p in u["paths"]}
        # An overlay reused on one target holds two entries for its artifact: the newest built it.
        newest = {}
        for e in m.get("natives", []):
            for s in e["sources"]:
                for a in e["artifacts"]:
                    newest[a["path"]] = self.stamps.get(s.get("patched_sha256"))
        for path, cand in newest.items():
            if path in covered:
                continue
            self.claim(
                cand is not None and (stamp_of(path) or "").startswith(cand + "-"),
                "FRESH_BUILD_OK but an artifact does not carry its entry's candidate",
                path,
                stamp_of(path),
                cand,
                r.stdout,
            )

    def records_entry(self, upper):
        """Whether the overlay an upper-layer reference names still records that entry."""
        try:
            with open(os.path.join(upper["overlay"], "_overlay_manifest.json")) as f:
                return any(e.get("id") == upper["entry"] for e in json.load(f).get("natives", []))
        except (FileNotFoundError, ValueError):
            return False

    @rule(agent=st.sampled_from(AGENTS), t=st.sampled_from(TARGETS))
    def exec_ab(self, agent, t):
        if not self.idle(agent) or self.applied(agent) or t in self.busy_targets():
            return
        patched, stamp = self.fresh_candidate(agent, t)
        if self.exec_step(agent, t, patched, stamp)[1]:  # its candidate ran (exit 122 too: not clean after)
            self.exec_done.setdefault(t, []).append((patched, stamp))

    @rule(agent=st.sampled_from(AGENTS), t=st.sampled_from(TARGETS), which=st.integers(0, 3))
    def exec_ab_again(self, agent, t, which):
        """An ABAB confirmation (issue 51): a candidate exec built and ran before, run again. The
        build store may put its outputs back instead of building: what runs must still be that
        candidate, and the reference the stock code."""
        done = self.exec_done.get(t, [])
        if not done or not self.idle(agent) or self.applied(agent) or t in self.busy_targets():
            return
        patched, stamp = done[which % len(done)]
        r, _ = self.exec_step(agent, t, patched, stamp)
        STATS["again"] += 1
        STATS["served"] += "store: hit" in r.stderr

    def exec_step(self, agent, t, patched, stamp):
        self.n += 1
        record = os.path.join(self.root, "exec-%d.txt" % self.n)
        args = self.add_args(agent, t, patched)
        args[0] = "exec"
        # The object file too: an untracked one holds the candidate after the revert, and exec
        # would end 122 (not clean) every time, leaving its exit-0 claims untested.
        args += ["--artifact", os.path.join(self.inst, "build", "CMakeFiles", t + ".dir", "src", t + ".cpp.o")]
        cmd = "grep -aoE 'STAMP-[A-Za-z0-9-]+' %s | head -n 1 >> %s" % (self.lib(t), record)
        r = self.tool(*args, "--ref", "--", "sh", "-c", cmd)
        STATS["execs"] += 1
        STATS["execs_ok"] += r.returncode == 0
        runs = read(record).decode().split() if read(record) else []
        if "exec: ref " in r.stdout:
            self.claim(
                runs[:1] != [] and runs[0].startswith("STAMP-orig-%s-" % t),
                "exec's reference did not run the stock library",
                runs,
                r.stdout,
                r.stderr,
            )
        if r.returncode == 0:
            self.claim(
                len(runs) == 2 and runs[1] == self.built(stamp),
                "exec exit 0 but its candidate did not run the candidate built with the headers as they are",
                runs,
                stamp,
                r.stdout,
                r.stderr,
            )
        if "exec: install clean" in r.stdout:
            self.claim(
                read(self.src(t)) == self.original[self.src(t)] and read(self.lib(t)) == self.original[self.lib(t)],
                "exec said install clean over bytes that are not original",
                r.stdout,
            )
        if "exec: cand exit 0" in r.stdout:  # whatever exec's own exit (122: not clean after), the candidate ran it
            self.claim(
                len(runs) == 2 and runs[1] == self.built(stamp),
                "exec ran its candidate but not the candidate's code built with the headers as they are",
                runs,
                stamp,
                r.stdout,
                r.stderr,
            )
        return r, len(runs) == 2 and runs[1] == self.built(stamp)

    @rule(agent=st.sampled_from(AGENTS), t=st.sampled_from(TARGETS))
    def kill_9_exec_mid_candidate(self, agent, t):
        """exec kill -9'd while its candidate runs: nothing may call the install clean until
        gc-stale (the owner is dead) has put it back."""
        if not self.idle(agent) or self.applied(agent) or t in self.busy_targets():
            return
        patched, _ = self.fresh_candidate(agent, t)
        ready = os.path.join(self.root, "cand-running-%d" % self.n)
        args = self.add_args(agent, t, patched)
        args[0] = "exec"
        p = subprocess.Popen(
            [OVERLAY, *args, "--", "sh", "-c", "touch %s; sleep 60" % ready],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(3000):
            if os.path.exists(ready) or p.poll() is not None:
                break
            time.sleep(0.01)
        kill_group(p)  # it may have ended (refused) before
        p.wait()
        if not os.path.exists(ready):
            return  # refused (the target held), or failed before its candidate
        r = self.tool("status", "--all", "--check-clean")
        self.claim(
            r.returncode != 0 or read(self.src(t)) == self.original[self.src(t)],
            "status --all --check-clean exit 0 while a killed exec's patch is in place",
            r.stdout,
        )
        g = self.tool("gc-stale", "--root", os.path.join(self.root, "runs"))
        if g.returncode == 0 and self.manifest(agent) is not None and not self.applied(agent):
            self.claim(
                read(self.src(t)) == self.original[self.src(t)],
                "gc-stale reverted a killed exec but its source is not original",
                g.stdout,
                g.stderr,
            )

    @rule(agent=st.sampled_from(AGENTS), delay_ms=st.integers(0, 8))
    def kill_9_revert_midway(self, agent, delay_ms):
        """revert kill -9'd at a random instant: what it leaves, the next revert (or gc-stale) finishes."""
        if not self.idle(agent) or not self.applied(agent):
            return
        p = subprocess.Popen(
            [OVERLAY, "revert", "--overlay", self.overlay[agent]],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(delay_ms / 1000.0)
        kill_group(p)
        p.wait()

    @rule(agent=st.sampled_from(AGENTS))
    def revert(self, agent):
        if not self.idle(agent):
            return
        m = self.manifest(agent)
        r = self.tool("revert", "--overlay", self.overlay[agent])
        if self.neighbour and self.neighbour[1] == self.overlay[agent]:
            self.claim(
                "locked by another" not in r.stderr,
                "revert waited out its lock timeout for another account's flock",
                r.stderr,
            )
        if r.returncode != 0 or not m:
            return
        self.nothing_more_to_redo(agent, m, r)
        # Another agent's add-native in flight on the same target may take the file once this
        # revert lets it go, and swap its candidate in before the check below reads it (seen:
        # seed 673430012, STAMP-a2-kb-6 read after a3's revert): there the file is original or that
        # candidate, and nothing else. Every other file this revert restored must be original.
        # A layer (add-native --over) puts back the bytes it found: the layer below's.
        in_flight = {t: stamp for (_, t, stamp, _) in self.proc.values()}
        target_of = {p: t for t in TARGETS for p in (self.src(t), self.lib(t))}
        covered = {p for u in m.get("layers_above", []) if self.records_entry(u) for p in u["paths"]}
        # A fold killed after it committed is finished by this revert (docs/cli.md): the entries it
        # names went to the overlay it names, which keeps them applied (seed 4141577133).
        fo = m.get("fold_out") or {}
        received = {e.get("id") for e in (self.manifest_at(fo["into"]) or {}).get("natives", [])} if fo else set()
        folded = {i for i in fo.get("entries", []) if i in received}
        for e in m.get("natives", []):
            if e.get("id") in folded:
                continue
            items = [(i["install_path"], i["sha256"]) for i in e["sources"]] + [
                (i["path"], i.get("sha256") if i.get("existed") else None) for i in e["artifacts"]
            ]
            for path, found in items:
                if path in covered:
                    continue  # refused: nothing of this overlay was reverted
                taker = in_flight.get(target_of.get(path))
                now = read(path)
                put_back = now is not None and found is not None and hashlib.sha256(now).hexdigest() == found
                self.claim(
                    now == self.original[path] or put_back or (taker is not None and stamp_of(path) == taker),
                    "revert exit 0 but a file it restored holds neither the original nor what its entry found",
                    path,
                    stamp_of(path),
                    taker,
                    r.stderr,
                )

    @rule(agent=st.sampled_from(AGENTS), t=st.sampled_from(TARGETS), again=st.booleans())
    def apply_and_revert(self, agent, t, again):
        """add-native of a candidate (one applied before, or a fresh one) and its revert, back to back on
        an idle install: what runs is the candidate built with the headers as they are now, whether built
        or served from the store; a revert that says nothing more to redo leaves ninja -n as it was."""
        if self.proc or not self.idle(agent) or self.applied(agent):
            return
        done = self.applied_before.get(t, [])
        patched, stamp = done[-1] if again and done else self.fresh_candidate(agent, t)
        work = self.ninja_work(t)
        r = self.tool(*self.add_args(agent, t, patched))
        if r.returncode != 0:
            return  # refused: the target is held, say
        self.applied_before.setdefault(t, []).append((patched, stamp))
        STATS["again"] += 1 if again and done else 0
        STATS["served"] += "store: hit" in r.stderr
        self.claim(
            stamp_of(self.lib(t)) == self.built(stamp),
            "add-native (%s) but the artifact is not the candidate built with the headers as they are"
            % ("served" if "store: hit" in r.stderr else "built"),
            stamp_of(self.lib(t)),
            self.built(stamp),
            r.stderr,
        )
        m = self.manifest(agent)
        rv = self.tool("revert", "--overlay", self.overlay[agent])
        if rv.returncode == 0 and m and len(m.get("natives", [])) == 1 and not m.get("layers_above"):
            if "nothing more to redo than before the apply" in rv.stderr:
                STATS["nothing_more_checked"] += 1
                now = self.ninja_work(t)
                self.claim(
                    now == work,
                    "revert said the install's build has nothing more to redo than before the apply, but ninja -n "
                    "differs",
                    "before the apply: %s" % work,
                    "after the revert: %s" % now,
                    rv.stderr,
                )

    def nothing_more_to_redo(self, agent, m, r):
        """A revert of the one entry an add-native made on an idle install, that says the install's
        build has nothing more to redo than before the apply: ninja -n has the very work it had."""
        before = self.work_before.pop(agent, None)
        if before is None or self.proc or len(m.get("natives", [])) != 1 or m.get("layers_above"):
            return
        t, work = before
        if "nothing more to redo than before the apply" not in r.stderr:
            return
        STATS["nothing_more_checked"] += 1
        now = self.ninja_work(t)
        self.claim(
            now == work,
            "revert said the install's build has nothing more to redo than before the apply, but ninja -n differs",
            "before the apply: %s" % work,
            "after the revert: %s" % now,
            r.stderr,
        )

    @rule(kind=st.sampled_from(("same_size_mtime_kept", "plain", "shadow", "gen")))
    def edit_header(self, kind):
        """A header both libraries read changes under the install (nothing building): its bytes with
        the same size and the mtime set back, a plain edit, a header of the same name added to (or
        removed from) the include dir searched first, or the generator's config."""
        if self.proc:
            return
        self.n += 1
        STATS["header_edits"] += 1
        tag = "%02d" % (self.n % 100)
        kh, shadow, gen = (os.path.join(self.inst, p) for p in ("include/kh.h", "include0/kh.h", "gen.txt"))
        if kind == "shadow":
            if os.path.exists(shadow):
                os.remove(shadow)
            else:
                write_text(shadow, header("s" + tag))
        elif kind == "gen":
            write_text(gen, "g" + tag)
        else:
            st_before = os.stat(kh)
            write_text(kh, header("h" + tag))
            if kind == "same_size_mtime_kept":
                os.utime(kh, ns=(st_before.st_atime_ns, st_before.st_mtime_ns))
        log("edit", kind, self.tags())

    # ---- the integrator (issue 49): accept by fold, finalize, replay
    def install_bytes(self):
        return {p: read(p) for p in self.original}

    @initialize(t=st.sampled_from(TARGETS + (None,)))
    def accepted_so_far(self, t):
        """Most runs are under way: the accepted overlay already holds a change (or none yet)."""
        if t is not None:
            self.integrator_applies(t)

    @rule(t=st.sampled_from(TARGETS))
    def integrator_applies(self, t):
        """The integrator applies an accepted change to the accepted overlay itself (or a replay does)."""
        if t in self.busy_targets():
            return
        patched, stamp = self.fresh_candidate(ACC, t)
        r = self.tool(*self.add_args(ACC, t, patched))
        if r.returncode == 0:
            self.claim(
                stamp_of(self.lib(t)) == self.built(stamp),
                "add-native succeeded but the artifact was not built from the candidate and the headers as they are",
                stamp_of(self.lib(t)),
                self.built(stamp),
                r.stderr,
            )

    @rule(agent=st.sampled_from(AGENTS))
    def fold_into_accepted(self, agent):
        if not self.idle(agent) or not self.applied(agent) or ACC in self.proc:
            return
        ids = self.entry_ids(agent)
        before = self.install_bytes()
        r = self.tool("fold", "--from", self.overlay[agent], "--into", self.overlay[ACC])
        busy = {p for t in self.busy_targets() for p in (self.src(t), self.lib(t), self.jit(t))}
        if r.returncode == 0:
            STATS["folds"] += 1
            self.claim(not self.applied(agent), "fold exit 0 but the candidate still has entries", r.stdout, r.stderr)
            self.claim(self.applied(ACC), "fold exit 0 but the accepted overlay records nothing", ids, r.stdout)
            after = self.install_bytes()
            for p, data in before.items():
                if p not in busy:
                    self.claim(after[p] == data, "fold changed a byte of the install", p, stamp_of(p), r.stdout)

    @rule(agent=st.sampled_from(AGENTS), t=st.sampled_from(TARGETS), keep=st.booleans())
    def add_native_whose_build_fails(self, agent, t, keep):
        """A candidate that does not compile (issue 63): its add-native fails and prints nothing on
        stdout; while its entry stays (the sources swapped, the build failed), no verify says
        FRESH_BUILD_OK of it and fold refuses it, changing nothing. Then it is reverted at once, as
        an agent does, or (`keep`) left applied while other agents build, get killed and are
        reverted in any order."""
        if not self.idle(agent) or self.applied(agent) or t in self.busy_targets():
            return
        self.n += 1
        patched = os.path.join(self.root, "cand", "%s-%d-broken.cpp" % (agent, self.n))
        os.makedirs(os.path.dirname(patched), exist_ok=True)
        with open(patched, "w") as f:
            f.write('#include "kh.h"\nextern "C" const char* stamp() { return NOT_DECLARED_%d; }\n' % self.n)
        # What the revert of this entry is judged against (its "nothing more to redo"), as for every
        # add-native: the work ninja -n has now, not what it had before an earlier one.
        self.work_before[agent] = (t, self.ninja_work(t)) if not self.proc else None
        r = self.tool(*self.add_args(agent, t, patched))
        STATS["failed_builds"] += 1
        self.claim(r.returncode != 0, "add-native exit 0 for a candidate that does not compile", r.stdout, r.stderr)
        self.claim(r.stdout == "", "a failed add-native printed on stdout", r.stdout, r.stderr)
        if not self.applied(agent):
            return  # refused before the swap (the target held)
        STATS["failed_builds_kept"] += 1
        v = self.tool("verify-native", "--overlay", self.overlay[agent])
        self.claim("FRESH_BUILD_OK" not in v.stdout, "FRESH_BUILD_OK for a candidate whose build failed", v.stdout)
        if ACC not in self.proc:
            before = self.install_bytes()
            f = self.tool("fold", "--from", self.overlay[agent], "--into", self.overlay[ACC])
            self.claim(
                f.returncode != 0 and self.applied(agent) and f.stdout == "",
                "fold accepted a candidate whose build failed",
                f.stdout,
                f.stderr,
            )
            self.claim(self.install_bytes() == before, "a refused fold changed a byte of the install", f.stderr)
        # Left applied, its build's bookkeeping (Ninja's log, a regenerated header) and the other
        # agents' went back in an order that left the log newer than the header: seed 502486540,
        # example 683 (docs/reliability.md). Kept, it is reverted by a later rule.
        if keep:
            STATS["failed_builds_left"] += 1
            return
        m = self.manifest(agent)
        rv = self.tool("revert", "--overlay", self.overlay[agent])
        if m:
            self.nothing_more_to_redo(agent, m, rv)

    @rule(agent=st.sampled_from(AGENTS), delay_ms=st.integers(0, 10))
    def kill_9_fold(self, agent, delay_ms):
        """fold kill -9'd at a random instant: the next verb on the candidate settles it."""
        if not self.idle(agent) or not self.applied(agent) or ACC in self.proc:
            return
        p = subprocess.Popen(
            [OVERLAY, "fold", "--from", self.overlay[agent], "--into", self.overlay[ACC]],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(delay_ms / 1000.0)
        kill_group(p)
        p.wait()
        log("fold killed", agent, delay_ms)
        STATS["folds_killed"] += 1

    @rule(replay=st.booleans(), through_link=st.booleans())
    def finalize(self, replay, through_link):
        """export the accepted overlay, revert it with its layers: the install is pristine, or
        status --all --check-clean names the file that is not. Then, on a pristine install, replay."""
        if self.proc or not self.applied(ACC):
            return
        self.n += 1
        bundle = os.path.join(self.root, "final-%d" % self.n)
        e = self.tool("export", "--overlay", self.overlay[ACC], "--out", bundle)
        r = self.tool("revert", "--overlay", self.overlay[ACC], "--with-layers")
        if r.returncode != 0:
            return
        STATS["finalized"] += 1
        lost = [p for p, d in self.original.items() if read(p) != d]
        if lost and not any(self.applied(a) for a in AGENTS):
            s = self.tool("status", "--all", "--check-clean")
            self.claim(
                s.returncode != 0 and all(p in s.stdout for p in lost),
                "finalize left files that are not original, and status --all --check-clean does not name them",
                lost,
                s.stdout,
            )
        if e.returncode != 0 or not replay or lost or any(self.applied(a) for a in AGENTS):
            return
        with open(os.path.join(bundle, "bundle.json")) as f:
            want = {
                os.path.join(self.inst, x["path"]): x["patched_sha256"]
                for en in json.load(f)["entries"]
                for x in en["files"]
            }
        if through_link:
            self.replay_through_a_link(bundle)
        rep = self.overlay[ACC] + "-replayed-%d" % self.n
        p = self.tool("replay", "--bundle", bundle, "--overlay", rep)
        if p.returncode == 0:
            STATS["replayed"] += 1
            self.claim("FRESH_BUILD_OK" in p.stdout, "replay exit 0 without FRESH_BUILD_OK", p.stdout, p.stderr)
            for path, sha in want.items():
                t = next(t for t in TARGETS if self.src(t) == path)
                self.claim(
                    hashlib.sha256(read(path)).hexdigest() == sha
                    and stamp_of(self.lib(t)) == self.built(self.stamps.get(sha, "?")),
                    "replay exit 0 but the install does not run the bundle's candidate built with the headers as they are",
                    path,
                    stamp_of(self.lib(t)),
                    p.stdout,
                )
        self.tool("revert", "--overlay", rep)
        self.claim(
            all(read(x) == d for x, d in self.original.items()),
            "the replay's revert did not leave the install pristine",
        )

    def replay_through_a_link(self, bundle):
        """Issue 63: the install's src/ is a symlink to a directory outside the root (a vendored
        tree linked in). The bundle's plain relative paths lead out of the root through it: replay
        refuses, writes nothing there, and records nothing."""
        src, outside = os.path.join(self.inst, "src"), os.path.join(self.root, "outside-src")
        os.rename(src, outside)
        os.symlink(outside, src)
        before = {n: read(os.path.join(outside, n)) for n in os.listdir(outside)}
        try:
            rep = self.overlay[ACC] + "-through-link-%d" % self.n
            p = self.tool("replay", "--bundle", bundle, "--overlay", rep)
            STATS["replays_through_link"] += 1
            self.claim(
                p.returncode != 0 and "FRESH_BUILD_OK" not in p.stdout,
                "replay went through a symlinked directory out of its root",
                p.stdout,
                p.stderr,
            )
            self.claim(
                {n: read(os.path.join(outside, n)) for n in os.listdir(outside)} == before,
                "replay changed a file outside its root",
                p.stderr,
            )
            self.claim(not os.path.exists(os.path.join(rep, "_overlay_manifest.json")), "a refused replay recorded")
        finally:
            os.unlink(src)
            os.rename(outside, src)

    # ---- CI and the harness
    def entry_ids(self, agent):
        return {e.get("id") for e in (self.manifest(agent) or {}).get("natives", [])}

    @rule()
    def gc_stale(self):
        # The entries recorded by add-natives still running: none may be reverted (an entry leaves
        # the record only when it is reverted; its bytes may still be on their way in meanwhile).
        # An overlay reused while it had entries of a dead run: those are stale, gc-stale's to revert.
        live = {a: self.entry_ids(a) - self.before_start.get(a, set()) for a in self.proc}
        owned = {a: self.owned_by_container(a) for a in self.container}
        r = self.tool("--json", "gc-stale", "--root", os.path.join(self.root, "runs"))
        doc = json.loads(r.stdout)
        self.claim(
            "overlays" in doc and doc["reverted"] == sum(o["outcome"] == "reverted" for o in doc["overlays"]),
            "gc-stale's count is not its overlays' verdicts",
            r.stdout,
        )
        for a, ids in live.items():
            if a in self.proc:
                self.claim(
                    ids <= self.entry_ids(a),
                    "gc-stale reverted the entry of an add-native in flight",
                    a,
                    r.stdout,
                    r.stderr,
                )
        for a, ids in owned.items():
            self.claim(
                ids <= self.entry_ids(a),
                "gc-stale reverted an entry whose owner (its container's pid 1) is alive",
                a,
                ids,
                r.stdout,
                r.stderr,
            )
        if self.neighbour:
            self.claim(
                "locked by another" not in r.stderr, "gc-stale waited out another account's flock", r.stdout, r.stderr
            )

    def owned_by_container(self, agent):
        """The agent's entries owned by its live container's pid 1 (that namespace's number 1)."""
        _, _, ns = self.container[agent]
        return {
            e.get("id")
            for e in (self.manifest(agent) or {}).get("natives", [])
            if (e.get("owner") or {}).get("pid") == 1 and (e.get("owner") or {}).get("pid_ns", ns) == ns
        }

    # ---- containers, copies and neighbours (issue 50)
    @rule(agent=st.sampled_from(AGENTS), shifted=st.booleans())
    def container_starts(self, agent, shifted):
        """The agent moves into a container: a PID namespace whose pid 1 lives until it ends; now
        and then in a time namespace of its own too (issue 63: its start times shifted for readers
        inside), where the agent's add-natives run."""
        if not CONTAINERS or agent in self.container or not self.idle(agent):
            return
        shift = ["--time", "--boottime", "100000"] if shifted and TIME_NS else []
        p = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", *shift, "sleep", "100000"], start_new_session=True
        )
        init = child_of(p.pid)
        if init is None:
            kill_group(p)
            p.wait()
            return
        self.container[agent] = (p, init, os.stat("/proc/%d/ns/pid" % init).st_ino)
        self.time_ns[agent] = bool(shift)
        log("container", agent, "pid 1 is", init)

    @rule(agent=st.sampled_from(AGENTS))
    def container_ends(self, agent):
        if agent not in self.container or not self.idle(agent):
            return
        p, _, _ = self.container.pop(agent)
        kill_group(p)
        p.wait()
        log("container ends", agent)

    @rule(agent=st.sampled_from(AGENTS + (ACC,)))
    def archive_copy(self, agent):
        """cp -a of an idle overlay that records changes, under runs/ (gc-stale's root), then a revert
        of the copy: the original's files and record are left as they are."""
        if not self.idle(agent) or not self.applied(agent) or self.proc:
            return
        self.n += 1
        copy = os.path.join(self.root, "runs", "archive-%d" % self.n, "ov")
        os.makedirs(os.path.dirname(copy))
        subprocess.run(["cp", "-a", self.overlay[agent], copy], check=True)
        STATS["copies"] += 1
        m = self.manifest(agent)
        paths = {i["install_path"] for e in m["natives"] for i in e["sources"]} | {
            i["path"] for e in m["natives"] for i in e["artifacts"]
        }
        before = {p: read(p) for p in paths}
        r = self.tool("revert", "--overlay", copy)
        changed = [p for p in paths if read(p) != before[p]]
        self.claim(
            not changed,
            "a revert of an archived copy changed files the original overlay records",
            changed,
            r.stdout,
            r.stderr,
        )
        self.claim(self.manifest(agent) == m, "a revert of an archived copy changed the original's record", r.stderr)

    @rule(agent=st.sampled_from(AGENTS + (ACC,)))
    def neighbour_flocks(self, agent):
        """Another account (nobody) holds a flock on the overlay directory until it lets go."""
        if not CONTAINERS or self.neighbour or not os.path.isdir(self.overlay[agent]):
            return
        d = self.overlay[agent]
        ready = os.path.join(self.root, "neighbour-%d" % self.n)
        ino = os.stat(d).st_ino
        p = subprocess.Popen(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "flock", d, "sleep", "100000"],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(300):
            if ino in self.flocked_inodes() or p.poll() is not None:
                break
            time.sleep(0.01)
        self.neighbour = (p, d)
        STATS["neighbour_locks"] += 1
        log("nobody flocks", d)

    @staticmethod
    def flocked_inodes():
        """The inodes /proc/locks shows flocked ("1: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF")."""
        try:
            with open("/proc/locks") as f:
                return {int(w[5].rsplit(":", 1)[1]) for w in (l.split() for l in f) if len(w) > 5 and w[1] == "FLOCK"}
        except (OSError, ValueError):
            return set()

    @rule()
    def neighbour_lets_go(self):
        if self.neighbour:
            kill_group(self.neighbour[0])
            self.neighbour[0].wait()
            self.neighbour = None

    @rule(agent=st.sampled_from(AGENTS + (ACC,)))
    def harness_rm_overlay(self, agent):
        if self.idle(agent):
            shutil.rmtree(self.overlay[agent], ignore_errors=True)
            log("rm -rf", self.overlay[agent])

    @rule(agent=st.sampled_from(AGENTS + (ACC,)))
    def harness_mv_overlay(self, agent):
        if self.idle(agent) and os.path.isdir(self.overlay[agent]):
            self.n += 1
            moved = os.path.join(self.root, "runs", agent, "ov-moved-%d" % self.n)
            os.rename(self.overlay[agent], moved)
            log("mv", self.overlay[agent], moved)
            self.overlay[agent] = moved

    @rule()
    def reinstall_package(self):
        """pip reinstall: the source dir replaced by a fresh one holding the original sources."""
        if self.proc:
            return
        self.n += 1
        src = os.path.join(self.inst, "src")
        os.rename(src, src + ".old-%d" % self.n)
        os.makedirs(src)
        for t in TARGETS:
            with open(self.src(t), "wb") as f:
                f.write(self.original[self.src(t)])

    @rule(t=st.sampled_from(TARGETS))
    def hand_edit_patched_source(self, t):
        """An engineer edits a source an overlay patched (a third version)."""
        if t in self.busy_targets() or read(self.src(t)) == self.original[self.src(t)]:
            return
        self.n += 1
        with open(self.src(t), "w") as f:
            f.write(kernel("STAMP-hand-%d" % self.n))

    @rule()
    def status_all_check_clean(self):
        # Files an add-native in flight may be swapping while status reads are left out: status
        # speaks of the moment it looked.
        busy = {p for t in self.busy_targets() for p in (self.src(t), self.lib(t), self.jit(t))}
        r = self.tool("status", "--all", "--check-clean")
        if r.returncode == 0:
            for path, data in self.original.items():
                if path in busy:
                    continue
                self.claim(
                    read(path) == data,
                    "status --all --check-clean exit 0 over a file that is not original",
                    path,
                    stamp_of(path),
                    r.stdout,
                )

    @invariant()
    def count_step(self):
        STATS["steps"] += 1
        STATS["in_flight_steps"] += 1 if self.proc else 0  # a step taken while some add-native builds

    def teardown(self):
        try:
            for agent in list(self.proc):
                self.finish_add_native(agent)
            for agent in AGENTS:
                self.tool("revert", "--overlay", self.overlay[agent])
            self.tool("revert", "--overlay", self.overlay[ACC], "--with-layers")
            lost = [p for p, d in self.original.items() if read(p) != d]
            if lost:
                r = self.tool("status", "--all", "--check-clean")
                self.claim(r.returncode != 0, "files are not original, and nothing says so", lost, r.stdout)
        finally:
            for p, *_ in self.proc.values():
                kill_group(p)
            for p, *_ in list(self.container.values()) + ([self.neighbour] if self.neighbour else []):
                kill_group(p)
                p.wait()


def main():
    global OVERLAY, WORK, TEMPLATE, CONTAINERS, TIME_NS
    ap = argparse.ArgumentParser()
    ap.add_argument("overlay")
    ap.add_argument("--examples", type=int, default=12)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    OVERLAY = os.path.abspath(a.overlay)
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(
        "claims checker: seed %d (replay: --seed %d), %d examples of up to %d steps"
        % (seed, seed, a.examples, a.steps),
        flush=True,
    )
    CONTAINERS = can_contain()
    TIME_NS = CONTAINERS and can_shift_time()
    with tempfile.TemporaryDirectory(prefix="overlay-claims-") as work:
        WORK = work
        os.chmod(work, 0o755)  # another account (nobody) can reach the overlays, as on a shared machine
        # Configured where every example runs (CMake's cache names its own directory), then kept
        # aside as the template each example copies back.
        TEMPLATE = os.path.join(work, "template")
        make_template(os.path.join(work, "run"))
        os.rename(os.path.join(work, "run"), TEMPLATE)
        # No shrinking: the system under test has background processes and timing, so a replay
        # can differ; the failing run's own steps are what is printed.
        Claims.TestCase.settings = settings(
            max_examples=a.examples,
            stateful_step_count=a.steps,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            derandomize=False,
            phases=[Phase.explicit, Phase.generate],
            print_blob=False,
        )
        test = hseed(seed)(Claims.TestCase)
        result = None
        try:
            import unittest

            suite = unittest.defaultTestLoader.loadTestsFromTestCase(test)
            result = unittest.TextTestRunner(stream=sys.stdout, verbosity=0).run(suite)
        finally:
            print(
                "claims checker: %d examples, %d steps (%d while an add-native was building), %d claims checked, seed %d"
                % (STATS["examples"], STATS["steps"], STATS["in_flight_steps"], STATS["claims"], seed),
                flush=True,
            )
            print(
                "claims checker: layers: %d candidates stacked, %d folds (%d killed mid-fold), %d finalized, %d replayed "
                "(%d more refused: through a symlinked directory out of the root)"
                % (
                    STATS["layered"],
                    STATS["folds"],
                    STATS["folds_killed"],
                    STATS["finalized"],
                    STATS["replayed"],
                    STATS["replays_through_link"],
                ),
                flush=True,
            )
            print(
                "claims checker: %d add-natives into an overlay that still had entries, %d with the build cwd "
                "defaulted, %d invalidating a cache, %d in a container with a time namespace of its own"
                % (STATS["reused"], STATS["defaulted_cwd"], STATS["with_cache"], STATS["in_time_ns"]),
                flush=True,
            )
            print(
                "claims checker: %d candidates that do not compile (%d kept with their failed build, %d of "
                "them left applied)"
                % (STATS["failed_builds"], STATS["failed_builds_kept"], STATS["failed_builds_left"]),
                flush=True,
            )
            print(
                "claims checker: %d header edits (same size and mtime kept, plain, shadowing, generator); %d reverts' "
                "'nothing more to redo' checked against ninja -n"
                % (STATS["header_edits"], STATS["nothing_more_checked"]),
                flush=True,
            )
            print(
                "claims checker: %d exec steps (%d exit 0); %d candidates applied again (exec, add-native), %d of them "
                "served from the build store" % (STATS["execs"], STATS["execs_ok"], STATS["again"], STATS["served"]),
                flush=True,
            )
            print(
                "claims checker: containers %s: %d add-natives in a container, %d archived copies reverted, %d flocks by nobody"
                % (
                    "on" if CONTAINERS else "off (not root, or no unshare/nsenter/setpriv)",
                    STATS["in_container"],
                    STATS["copies"],
                    STATS["neighbour_locks"],
                ),
                flush=True,
            )
    # The exit-0 claims of exec are claims only where some exec step exits 0.
    untested = STATS["execs"] >= 10 and STATS["execs_ok"] == 0
    if untested:
        print("claims checker: no exec step exited 0: the claims about a successful exec went untested", flush=True)
    sys.exit(0 if result and result.wasSuccessful() and not untested else 1)


if __name__ == "__main__":
    main()
