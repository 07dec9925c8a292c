#!/usr/bin/python3
"""A differential checker of the build store (issue 74): a served build is the build.

hypothesis.stateful drives random sequences of edits to one input of a real Make build, through
the real binary; after each, the same candidate is applied (built, or served: `store: hit`), its
outputs read, reverted, then applied with --rebuild on the very same state, read, reverted. The
claim: whatever the store serves is byte for byte what the build gives now — the program, what it
prints, the log it appends to — and every revert leaves the install as it was. The inputs edited,
one per step, are the shapes a store keyed by less than the build read gets wrong:

* a header's bytes, same size, mtime set back (cp -p, a tarball);
* a directory symlink two steps from the path the compiler opened retargeted (an alternative);
* a header created where the build looked first and found nothing (a shadowing include dir);
* a tuning table the build reads through a read-write open (`exec 3<>`), same size, mtime kept;
* the compiler, a wrapper script, rewritten in place at its path;
* an environment variable Open MPI's wrapper compilers read (OMPI_CFLAGS);
* lines appended to the log the build appends to, by someone else.

Usage: store_checker.py OVERLAY_BIN [--examples N] [--steps N] [--seed S]
A failure prints the seed and its steps; --seed replays it.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    from hypothesis import HealthCheck, Phase, settings, seed as hseed
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
except ImportError as _missing:
    print("store_checker: skipped: %s: it needs hypothesis (Debian: python3-hypothesis)" % _missing)
    sys.exit(77)

OVERLAY = ""
WORK = ""
STATS = {"examples": 0, "steps": 0, "served": 0, "compared": 0}

MAKEFILE = (
    "prog: k.c main.c\n"
    "\texec 3<>table.txt; read v <&3; ../bin/cxx -Iprobe -Iinc -DT=$$v -o prog k.c main.c && echo built >> build.log\n"
)
KERNEL = "#include <h.h>\n#ifndef E\n#define E 0\n#endif\n#ifndef W\n#define W 0\n#endif\nint value(void) { return %d + H * 100 + T * 10 + E + W * 1000; }\n"
MAIN = '#include <stdio.h>\nint value(void);\nint main(void) { printf("%d\\n", value()); return 0; }\n'
COMPILER = '#!/bin/sh\nexec cc %s$OMPI_CFLAGS "$@"\n'


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def rewrite_keeping_mtime(path, text):
    st = os.stat(path)
    write(path, text, st.st_mode & 0o7777)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def tree(root):
    """Every file below root (the overlay's and the state dir's aside) by its bytes and mode."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for n in sorted(files):
            p = os.path.join(d, n)
            if not os.path.islink(p):
                out[os.path.relpath(p, root)] = (sha(p), os.stat(p).st_mode & 0o7777)
    return out


class Store(RuleBasedStateMachine):
    @initialize()
    def setup(self):
        STATS["examples"] += 1
        self.t = tempfile.mkdtemp(prefix="ex-", dir=WORK)
        t = self.t
        self.pkg = os.path.join(t, "pkg")
        write(os.path.join(t, "pkgs/v1/h.h"), "#define H 1\n")
        write(os.path.join(t, "pkgs/v2/h.h"), "#define H 2\n")
        os.makedirs(os.path.join(t, "alt"))
        os.symlink("../pkgs/v1", os.path.join(t, "alt/inc"))
        os.makedirs(os.path.join(self.pkg, "probe"))
        os.symlink("../alt/inc", os.path.join(self.pkg, "inc"))
        write(os.path.join(self.pkg, "Makefile"), MAKEFILE)
        write(os.path.join(self.pkg, "k.c"), KERNEL % 4)
        write(os.path.join(self.pkg, "main.c"), MAIN)
        write(os.path.join(self.pkg, "table.txt"), "1\n")
        write(os.path.join(t, "k7.c"), KERNEL % 7)
        write(os.path.join(t, "bin/cxx"), COMPILER % "", 0o755)
        self.env = dict(os.environ, OVERLAY_STATE_DIR=os.path.join(t, "state"))
        self.env.pop("OMPI_CFLAGS", None)
        self.run(["make", "-s", "-C", self.pkg])
        self.log = []

    def run(self, argv, ok=True):
        r = subprocess.run(argv, env=self.env, capture_output=True, text=True, cwd=self.t)
        if ok and r.returncode != 0:
            raise AssertionError(
                "%s failed (%d):\n%s%s\nsteps: %s" % (argv, r.returncode, r.stdout, r.stderr, self.log)
            )
        return r

    def outputs(self):
        prog = os.path.join(self.pkg, "prog")
        printed = subprocess.run([prog], capture_output=True, text=True).stdout
        with open(os.path.join(self.pkg, "build.log")) as f:
            log = f.read()
        return {"prog": sha(prog), "prints": printed, "log": log}

    def apply_read_revert(self, rebuild):
        argv = [OVERLAY, "--json", "add-native", "--overlay", os.path.join(self.t, "ov")]
        argv += ["--target", os.path.join(self.pkg, "k.c"), "--patched-file", os.path.join(self.t, "k7.c")]
        argv += ["--artifact", os.path.join(self.pkg, "prog"), "--build-cmd", "make -C " + self.pkg]
        if rebuild:
            argv.append("--rebuild")
        a = json.loads(self.run(argv).stdout)
        out = self.outputs()
        self.run([OVERLAY, "revert", "--overlay", os.path.join(self.t, "ov")])
        return a["build"]["store"]["state"], out

    def check(self):
        """Applied as the loop applies it (built, or served where the store holds this state),
        then with --rebuild on the same state, then once more (served now): all three the same."""
        STATS["steps"] += 1
        before = tree(self.pkg)
        outcomes = []
        for rebuild in (False, True, False):
            state, out = self.apply_read_revert(rebuild)
            assert tree(self.pkg) == before, "revert left the install changed (store: %s); steps: %s" % (
                state,
                self.log,
            )
            outcomes.append((state, out))
        want = outcomes[1][1]
        for state, got in (outcomes[0], outcomes[2]):
            STATS["compared"] += 1
            STATS["served"] += state == "hit"
            assert got == want, "store: %s gave %s, the build gives %s; steps: %s" % (state, got, want, self.log)
        assert outcomes[2][0] == "hit", "the state just built was not served: %s; steps: %s" % (outcomes[2], self.log)

    @rule(h=st.integers(min_value=1, max_value=9))
    def same_size_header(self, h):
        self.log.append("header v1 -> H %d, mtime kept" % h)
        rewrite_keeping_mtime(os.path.join(self.t, "pkgs/v1/h.h"), "#define H %d\n" % h)
        self.check()

    @rule(v=st.sampled_from(["v1", "v2"]))
    def retarget_alternative(self, v):
        self.log.append("alt/inc -> %s" % v)
        link = os.path.join(self.t, "alt/inc")
        os.unlink(link)
        os.symlink("../pkgs/" + v, link)
        self.check()

    @rule(shadow=st.booleans())
    def shadowing_header(self, shadow):
        self.log.append("probe/h.h %s" % ("made" if shadow else "removed"))
        p = os.path.join(self.pkg, "probe/h.h")
        if shadow:
            write(p, "#define H 5\n")
        elif os.path.exists(p):
            os.unlink(p)
        self.check()

    @rule(v=st.integers(min_value=1, max_value=9))
    def table(self, v):
        self.log.append("table.txt -> %d, mtime kept" % v)
        rewrite_keeping_mtime(os.path.join(self.pkg, "table.txt"), "%d\n" % v)
        self.check()

    @rule(w=st.integers(min_value=0, max_value=3))
    def compiler_in_place(self, w):
        self.log.append("bin/cxx rewritten: -DW=%d" % w)
        write(os.path.join(self.t, "bin/cxx"), COMPILER % ("-DW=%d " % w), 0o755)
        self.check()

    @rule(e=st.sampled_from(["", "-DE=1", "-DE=2"]))
    def ompi_cflags(self, e):
        self.log.append("OMPI_CFLAGS=%r" % e)
        self.env["OMPI_CFLAGS"] = e
        self.check()

    @rule()
    def log_appended_elsewhere(self):
        self.log.append("a line appended to build.log")
        with open(os.path.join(self.pkg, "build.log"), "a") as f:
            f.write("a line from elsewhere\n")
        self.check()

    @rule()
    def again(self):
        self.log.append("nothing changed")
        self.check()

    def teardown(self):
        shutil.rmtree(self.t, ignore_errors=True)


def main():
    global OVERLAY, WORK
    ap = argparse.ArgumentParser()
    ap.add_argument("overlay")
    ap.add_argument("--examples", type=int, default=6)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    OVERLAY = os.path.abspath(a.overlay)
    if shutil.which("make") is None or shutil.which("cc") is None:
        print("store_checker: skipped: needs make and cc")
        return 77
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(
        "store checker: seed %d (replay: --seed %d), %d examples of up to %d steps" % (seed, seed, a.examples, a.steps),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="overlay-store-") as work:
        WORK = work
        Store.TestCase.settings = settings(
            max_examples=a.examples,
            stateful_step_count=a.steps,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.generate],
            print_blob=False,
        )
        import unittest

        suite = unittest.defaultTestLoader.loadTestsFromTestCase(hseed(seed)(Store.TestCase))
        result = unittest.TextTestRunner(stream=sys.stdout, verbosity=0).run(suite)
    print(
        "store checker: %d examples, %d steps, %d served builds compared with a --rebuild of the same state "
        "(%d compared in all), seed %d" % (STATS["examples"], STATS["steps"], STATS["served"], STATS["compared"], seed),
        flush=True,
    )
    if STATS["served"] == 0 and STATS["steps"] > 0:
        print("store checker: no build was served: the claim went untested", flush=True)
        return 1
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
