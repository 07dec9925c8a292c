"""exec's receipts (issue 62): for each run of the command, what each of its processes executed.

Through the real binary: an install with a C library built by its own script, a Python module
beside it, and one diff changing both (exec's apply mode). The command is a Python program that
imports the module and loads the library, forks a worker (which ends by os._exit, as
multiprocessing's fork workers do), spawns one, and runs a C program linked against the library;
one more worker loads an untracked copy of the original library. The receipts must say that the
reference ran none of the candidate's code, naming the original's digest, and that in the
candidate every process that imported the module or mapped the library ran the candidate's bytes,
by their SHA-256, while the worker running the copy did not.
"""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import unittest

BIN = os.environ.get("OVERLAY_BIN", "overlay")
PY = "/usr/bin/python3"

PROGRAM = """
import ctypes, json, os, subprocess, sys, time, multiprocessing as mp
LIB, COPY, OUT = sys.argv[1], sys.argv[2], sys.argv[3]

def note(what):
    with open(os.path.join(OUT, "%d.json" % os.getpid()), "w") as f:
        json.dump(what, f)

def worker(q, lib):
    value = None
    if lib == LIB:
        import pmod
        value = pmod.VALUE
    k = ctypes.CDLL(lib).k()
    note({"role": "worker", "lib": lib, "value": value, "k": k})
    q.put(k)
    time.sleep(0.8)  # long enough to be sampled

if __name__ == "__main__":
    import pmod
    k = ctypes.CDLL(LIB).k()
    note({"role": "main", "value": pmod.VALUE, "k": k, "env": os.environ.get("OVERLAY_RECEIPTS")})
    procs = []
    for method, lib in (("fork", LIB), ("spawn", LIB), ("spawn", COPY)):
        ctx = mp.get_context(method)
        q = ctx.Queue()
        p = ctx.Process(target=worker, args=(q, lib))
        p.start()
        q.get()
        procs.append(p)
    subprocess.run([os.path.join(os.path.dirname(LIB), "worker")], check=True)
    for p in procs:
        p.join()
"""


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class ExecReceipts(unittest.TestCase):
    def setUp(self):
        self.t = tempfile.mkdtemp(prefix="exec-receipts-")
        self.addCleanup(shutil.rmtree, self.t, True)
        self.state = os.path.join(self.t, "state")
        self.env = dict(os.environ, OVERLAY_STATE_DIR=self.state, OVERLAY_CACHE_DIR=os.path.join(self.t, "cache"))
        self.inst = os.path.join(self.t, "inst")
        self.write(
            "inst/build.sh",
            """\
            #!/bin/sh
            set -e
            cd "$(dirname "$0")"
            cc -shared -fPIC -o build/libk.so src/k.c
            cc -o build/worker src/worker.c -Lbuild -lk -Wl,-rpath,"$PWD/build"
            """,
        )
        os.chmod(os.path.join(self.inst, "build.sh"), 0o755)
        os.makedirs(os.path.join(self.inst, "build"))
        self.write("inst/src/k.c", "int k(void) { return 1; }\n")
        self.write(
            "inst/src/worker.c",
            """\
            #include <unistd.h>
            int k(void);
            int main(void) { usleep(800000); return k() == 1 || k() == 2 ? 0 : 3; }
            """,
        )
        self.write("inst/py/pmod.py", "VALUE = 'stock'\n")
        subprocess.run([os.path.join(self.inst, "build.sh")], check=True)
        self.lib = os.path.join(self.inst, "build", "libk.so")
        self.original = sha(self.lib)
        self.copy = os.path.join(self.t, "copy", "libk.so")
        os.makedirs(os.path.dirname(self.copy))
        shutil.copy(self.lib, self.copy)
        for side, k, value in (("a", 1, "stock"), ("b", 2, "patched")):
            self.write("diffs/%s/src/k.c" % side, "int k(void) { return %d; }\n" % k)
            self.write("diffs/%s/py/pmod.py" % side, "VALUE = %r\n" % value)
        diff = subprocess.run(
            ["diff", "-ruN", "a", "b"], cwd=os.path.join(self.t, "diffs"), capture_output=True, text=True
        )
        self.write("change.diff", diff.stdout)
        self.write("prog.py", PROGRAM)
        self.ov = os.path.join(self.t, "ov")

    def write(self, rel, text):
        p = os.path.join(self.t, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(textwrap.dedent(text))
        return p

    def exec_(self, out, pre=(), flags=()):
        os.makedirs(out, exist_ok=True)
        argv = [BIN, *pre, "exec", *flags, "--ref", "--overlay", self.ov]
        argv += ["--patch", os.path.join(self.t, "change.diff"), "--patch-root", self.inst, "-p", "1"]
        argv += ["--python-root", os.path.join(self.inst, "py"), "--artifact", self.lib]
        argv += ["--build-cmd", os.path.join(self.inst, "build.sh")]
        argv += ["--", PY, os.path.join(self.t, "prog.py"), self.lib, self.copy, out]
        r = subprocess.run(argv, capture_output=True, text=True, env=dict(self.env, PYTHONPATH=self.inst + "/py"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def notes(self, out):
        got = {}
        for n in os.listdir(out):
            with open(os.path.join(out, n)) as f:
                got[int(n.split(".")[0])] = json.load(f)
        return got

    def test_each_run_says_whose_code_every_process_ran(self):
        out = os.path.join(self.t, "notes")  # both runs' notes: told apart by the pids each run's receipts name
        r = self.exec_(out, pre=["--json"])
        doc = json.loads(r.stdout)
        ref, cand = doc["ref"]["receipts"], doc["cand"]["receipts"]
        self.assertEqual((ref["problems"], cand["problems"]), ([], []))
        notes = self.notes(out)
        ref_notes = {pid: n for pid, n in notes.items() if pid in {p["pid"] for p in ref["processes"]}}
        cand_notes = {pid: n for pid, n in notes.items() if pid in {p["pid"] for p in cand["processes"]}}
        # Every process that ran the program's code is in its run's receipts: main and 3 workers.
        self.assertEqual((len(ref_notes), len(cand_notes)), (4, 4), (notes, ref, cand))

        # The reference: the original library wherever it is mapped, no overlay file: none of the
        # candidate's code.
        self.assertEqual(ref["summary"]["ran_candidate"], 0)
        self.assertEqual(ref["summary"]["with_runtime_receipt"], 0)
        ref_arts = [a for p in ref["processes"] for a in p["artifacts"]]
        self.assertGreaterEqual(len(ref_arts), 4)  # main, fork and spawn workers, the C worker
        for a in ref_arts:
            self.assertEqual((a["path"], a["sha256"], a["is"]), (self.lib, self.original, "original"))
        self.assertTrue(any(p["cmdline"].endswith("/worker") for p in ref["processes"]), ref["processes"])

        # The candidate: every process that imported the module or mapped the library ran the
        # candidate's bytes; the worker on the untracked copy ran none of it.
        patched_py = sha(os.path.join(self.t, "diffs/b/py/pmod.py"))
        by_pid = {p["pid"]: p for p in cand["processes"]}
        built = set()
        for pid, n in cand_notes.items():
            p = by_pid[pid]
            if n.get("lib") == self.copy:
                self.assertEqual((p["ran_candidate"], p["artifacts"], p["files"]), (False, [], []), p)
                continue
            self.assertEqual(n["value"], "patched", n)
            self.assertTrue(p["ran_candidate"], p)
            self.assertIn("runtime", p["seen_by"], p)  # the fork worker too, though it ends by os._exit
            files = [(f["path"], f["sha256"], f["candidate"]) for f in p["files"]]
            self.assertEqual(files, [(os.path.join(self.ov, "_patched", "pmod.py"), patched_py, True)])
            self.assertEqual([(a["path"], a["is"]) for a in p["artifacts"]], [(self.lib, "candidate")], p)
            built |= {a["sha256"] for a in p["artifacts"]}
        self.assertEqual(len(built), 1, built)
        self.assertNotIn(self.original, built)
        worker = [p for p in cand["processes"] if p["cmdline"].endswith("/worker")]
        self.assertEqual(len(worker), 1, cand["processes"])
        self.assertEqual(worker[0]["seen_by"], ["maps"])
        self.assertEqual([(a["is"], a["sha256"]) for a in worker[0]["artifacts"]], [("candidate", built.pop())])
        self.assertEqual(cand["summary"]["ran_candidate"], 4)  # main, two workers, the C worker
        manifests = {o["manifest_sha256"] for p in cand["processes"] for o in p["overlays"]}
        self.assertEqual(len(manifests), 1, manifests)  # one manifest, read by every process
        self.assertTrue(all(o["root"] == self.ov for p in cand["processes"] for o in p["overlays"]))
        # Kept outside the overlay, and gone once the step ended.
        self.assertEqual(os.listdir(os.path.join(self.state, "receipts")), [])
        for d, _, files in os.walk(self.ov):
            self.assertFalse([n for n in files if n.endswith(".jsonl")], d)

    def test_receipts_only_with_json_or_when_asked(self):
        plain = os.path.join(self.t, "plain")
        r = self.exec_(plain)
        self.assertNotIn(" receipts: ", r.stdout)
        mains = [n for n in self.notes(plain).values() if n["role"] == "main"]
        self.assertEqual([n["env"] for n in mains], [None, None])  # the runs' environment untouched
        r = self.exec_(os.path.join(self.t, "asked"), flags=["--receipts"])
        self.assertRegex(r.stdout, r"exec: ref receipts: \d+ process\(es\) seen; none of them ran the candidate's code")
        self.assertRegex(r.stdout, r"exec: cand receipts: \d+ process\(es\) seen; 4 ran the candidate's code")
        doc = json.loads(self.exec_(os.path.join(self.t, "off"), pre=["--json"], flags=["--no-receipts"]).stdout)
        self.assertEqual(("receipts" in doc["ref"], "receipts" in doc["cand"]), (False, False))
        argv = [BIN, "exec", "--receipts", "--no-receipts", "--overlay", os.path.join(self.t, "none")]
        r = subprocess.run(
            argv + ["--target", self.lib, "--patched-file", self.lib, "--", "true"],
            capture_output=True,
            text=True,
            env=self.env,
        )
        self.assertEqual(r.returncode, 2, r.stderr)  # the two flags exclude each other
        self.assertFalse(os.path.exists(os.path.join(self.t, "none")))


if __name__ == "__main__":
    unittest.main()
