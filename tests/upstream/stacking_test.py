#!/usr/bin/env python3
"""Python overlays stacked in one process (issue 62), written by the binary and by the shim:

* two overlays with entries on one module (a candidate's rebind, a profiling overlay's marker)
  compose without recursion, in either order on PYTHONPATH, and as `merge` of the two does;
* a module whose import needs most of the stack imports through both finders;
* two overlays rebinding one target: `engaged` judges the one whose implementation the process
  runs ENGAGED and the other NOT_ENGAGED;
* a loader directory whose sitecustomize.py runs each overlay's with runpy.run_path (the fusion
  integrator's stacking) says no FAILED for an entry that then applies.

    OVERLAY_BIN=build/overlay stacking_test.py SHIM   (unittest arguments after it)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import through_both

PY = sys.executable
BIN = os.environ.get("OVERLAY_BIN", "")

# Its body needs 900 frames of the default 1,000: an import reached at a depth of 100 or more
# (finders asking each other) fails with RecursionError.
TARGET = """
import sys


def _deep(n):
    return 0 if n == 0 else 1 + _deep(n - 1)


DEPTH = _deep(900)


def compute():
    return 1
"""


class Stacking(unittest.TestCase):
    tool = None  # argv prefix: the binary, or the shim run by python3

    def setUp(self):
        self.t = tempfile.mkdtemp(prefix="stacking-")
        self.addCleanup(shutil.rmtree, self.t, True)
        self.env = {
            "OVERLAY_CACHE_DIR": os.path.join(self.t, "cache"),
            "OVERLAY_STATE_DIR": os.path.join(self.t, "state"),
            "OVERLAY_BIN": BIN,
        }
        self.write("site/ovl_target.py", TARGET)
        self.write("impl/fast.py", "def compute():\n    return 2\n")
        self.write("impl/faster.py", "def compute():\n    return 3\n")

    def write(self, rel, text):
        p = os.path.join(self.t, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(textwrap.dedent(text))
        return p

    def run_tool(self, *args):
        e = dict(os.environ, **self.env)
        r = subprocess.run([*self.tool, *args], capture_output=True, text=True, env=e, cwd=self.t)
        self.assertEqual(r.returncode, 0, "%s: %s%s" % (args, r.stdout, r.stderr))
        return r

    def rebind(self, name, impl):
        ov = os.path.join(self.t, name)
        self.run_tool(
            "add-rebind",
            "--overlay",
            ov,
            "--target",
            "ovl_target:compute",
            "--impl-module",
            impl,
            "--impl-attr",
            "compute",
            "--impl-file",
            os.path.join(self.t, "impl", impl + ".py"),
        )
        return ov

    def marker(self, name):
        ov = os.path.join(self.t, name)
        self.run_tool("add-marker", "--overlay", ov, "--target", "ovl_target:compute")
        return ov

    def python(self, roots, code, cwd=None):
        e = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        e.update(self.env)
        e["PYTHONPATH"] = os.pathsep.join([*roots, os.path.join(self.t, "site")])
        return subprocess.run([PY, "-c", code], capture_output=True, text=True, env=e, cwd=cwd or self.t)

    WHAT_RUNS = (
        "import ovl_target as t\n"
        "f = t.compute\n"
        "inner = getattr(f, '__wrapped__', None)\n"
        "print(t.compute(), t.DEPTH, 'marked' if inner else 'plain', getattr(inner or f, '__module__', None))\n"
    )

    def test_a_rebind_and_a_marker_compose_in_either_order_as_merged(self):
        cand, prof = self.rebind("cand", "fast"), self.marker("prof")
        merged = os.path.join(self.t, "merged")
        self.run_tool("merge", "--overlay", merged, "--with", cand, "--with", prof)
        seen = {}
        for label, roots in (("cand:prof", [cand, prof]), ("prof:cand", [prof, cand]), ("merged", [merged])):
            r = self.python(roots, self.WHAT_RUNS)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertNotIn("RecursionError", r.stderr)
            self.assertNotIn("cannot prepare", r.stderr)
            self.assertNotIn("FAILED", r.stderr)
            seen[label] = r.stdout
        self.assertEqual(seen["merged"], "2 900 marked fast\n", seen)
        self.assertEqual(seen, {k: seen["merged"] for k in seen})

    def test_two_rebinds_of_one_target_engaged_says_which_runs(self):
        old, new = self.rebind("old", "fast"), self.rebind("new", "faster")
        code = "import ovl_target, sys, time\nprint(ovl_target.compute(), flush=True)\ntime.sleep(60)\n"
        e = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        e.update(self.env, PYTHONPATH=os.pathsep.join([old, new, os.path.join(self.t, "site")]))
        p = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
        self.addCleanup(p.stderr.close)
        self.addCleanup(p.stdout.close)
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        runs = p.stdout.readline().strip()
        self.assertIn(runs, ("2", "3"))
        winner, loser = (old, new) if runs == "2" else (new, old)
        verdicts = {}
        deadline = time.time() + 20
        while time.time() < deadline:
            verdicts = {
                ov: subprocess.run(
                    [BIN, "engaged", "--overlay", ov, "--pid", str(p.pid)],
                    capture_output=True,
                    text=True,
                    env=dict(os.environ, **self.env),
                )
                for ov in (winner, loser)
            }
            if verdicts[winner].returncode == 0 and verdicts[loser].returncode == 1:
                break
            time.sleep(0.2)
        last = {ov: (r.stdout.strip().splitlines() or [""])[-1] for ov, r in verdicts.items()}
        self.assertTrue(last[winner].startswith("ENGAGED"), verdicts[winner].stdout)
        self.assertTrue(last[loser].startswith("NOT_ENGAGED"), verdicts[loser].stdout)
        self.assertIn("replaced by another overlay's entry", last[loser])
        # The one applied last wins: the later on PYTHONPATH (docs/cli.md).
        self.assertEqual(runs, "3")

    def test_a_run_path_loader_says_no_failed_for_an_entry_that_applies(self):
        cand = self.rebind("cand", "fast")
        prof = self.marker("prof")
        loader = os.path.join(self.t, "loader")
        # The fusion integrator's stacking: one loader first on PYTHONPATH runs each overlay's
        # sitecustomize.py, then puts the overlays on sys.path.
        self.write(
            "loader/sitecustomize.py",
            "import runpy, sys\n"
            "ROOTS = %r\n"
            "for r in ROOTS:\n"
            "    runpy.run_path(r + '/sitecustomize.py')\n"
            "sys.path[1:1] = ROOTS\n" % [cand, prof],
        )
        r = self.python([loader], self.WHAT_RUNS)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout, "2 900 marked fast\n", r.stderr)
        self.assertNotIn("FAILED", r.stderr)
        # An implementation that is nowhere to be found is still said, when its target imports.
        os.unlink(os.path.join(cand, "fast.py"))
        r = self.python([loader], self.WHAT_RUNS)
        self.assertIn("rebind FAILED ovl_target:compute", r.stderr)
        self.assertLess(r.stderr.index("rebind FAILED"), r.stderr.index("marked ovl_target:compute"), r.stderr)

    def test_many_overlays_look_up_a_missing_module_a_few_times(self):
        # Finders that asked each other re-asked every finder behind them: 8 overlays with an
        # entry on a module that does not exist made one failed import 767,216 lookups. Now each
        # overlay's finder asks once (the import system asks the next when one finds nothing),
        # and the import system once more: 9.
        roots = []
        for i in range(8):
            ov = os.path.join(self.t, "m%d" % i)
            self.run_tool("add-marker", "--overlay", ov, "--target", "ovl_missing:f")
            roots.append(ov)
        code = (
            "import sys\n"
            "class Count:\n"
            "    n = 0\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        Count.n += name == 'ovl_missing'\n"
            "sys.meta_path.append(Count())\n"
            "try:\n"
            "    import ovl_missing\n"
            "except ModuleNotFoundError:\n"
            "    print('missing', Count.n)\n"
        )
        r = self.python(roots, code)
        self.assertEqual(r.stdout, "missing 9\n", r.stderr)

    def test_two_threads_importing_two_targets(self):
        # The guard that marks a target's import in the environment was one count for the
        # process with the saved value on one entry's object: the second thread's import raised,
        # and the mark stayed set, so every later child ran stock code.
        self.write("site/ovl_slow.py", "import time\ntime.sleep(0.3)\n\ndef compute():\n    return 1\n")
        self.write("impl/slowfast.py", "def compute():\n    return 5\n")
        ov = self.rebind("cand", "fast")
        self.run_tool(
            "add-rebind",
            "--overlay",
            ov,
            "--target",
            "ovl_slow:compute",
            "--impl-module",
            "slowfast",
            "--impl-attr",
            "compute",
            "--impl-file",
            os.path.join(self.t, "impl", "slowfast.py"),
        )
        code = (
            "import os, subprocess, sys, threading, time\n"
            "errors = []\n"
            "def imp(name):\n"
            "    try:\n"
            "        __import__(name)\n"
            "    except BaseException as e:\n"
            "        errors.append(repr(e))\n"
            "a = threading.Thread(target=imp, args=('ovl_slow',)); a.start(); time.sleep(0.1)\n"
            "b = threading.Thread(target=imp, args=('ovl_target',)); b.start(); a.join(); b.join()\n"
            "import ovl_slow, ovl_target\n"
            "child = subprocess.run([sys.executable, '-c', 'import ovl_target; print(ovl_target.compute())'],\n"
            "                       capture_output=True, text=True).stdout.strip()\n"
            "print(errors, ovl_slow.compute(), ovl_target.compute(), child, os.environ.get(%r))\n"
            % "OVERLAY_IMPORTING_TARGET"
        )
        r = self.python([ov], code)
        self.assertEqual(r.stdout, "[] 5 2 2 None\n", r.stderr)

    def test_a_reloaded_target_gets_its_entries_again(self):
        ov = self.rebind("cand", "fast")
        r = self.python([ov], "import importlib, ovl_target as t\nimportlib.reload(t)\nprint(t.compute())\n")
        self.assertEqual(r.stdout, "2\n", r.stderr)

    def test_one_implementation_module_name_in_two_overlays_replaces_nothing(self):
        a, b = self.rebind("a", "fast"), self.rebind("b", "fast")
        r = self.python([a, b], "import ovl_target\nprint(ovl_target.compute())\n")
        self.assertEqual(r.stdout, "2\n", r.stderr)
        self.assertNotIn("is replaced", r.stderr)

    def test_a_module_file_replaced_by_another_overlays_says_so(self):
        self.write("patched/one/ovl_target.py", "def compute():\n    return 11\n\nDEPTH = 0\n")
        self.write("patched/two/ovl_target.py", "def compute():\n    return 22\n\nDEPTH = 0\n")
        ovs = []
        for n in ("one", "two"):
            ov = os.path.join(self.t, "mod_" + n)
            self.run_tool(
                "add-module",
                "--overlay",
                ov,
                "--module",
                "ovl_target",
                "--patched-file",
                os.path.join(self.t, "patched", n, "ovl_target.py"),
            )
            ovs.append(ov)
        r = self.python(ovs, "import ovl_target\nprint(ovl_target.compute())\n")
        self.assertEqual(r.stdout, "22\n", r.stderr)
        self.assertIn("module ovl_target of %s is replaced by the module of %s" % (ovs[0], ovs[1]), r.stderr)


class StackingByTheShim(Stacking):
    pass


if __name__ == "__main__":
    through_both.main(Stacking, StackingByTheShim)
