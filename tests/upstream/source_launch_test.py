#!/usr/bin/env python3
"""Overlays through a source-proving launch (issue 62): the pipeline's newest launch no longer
trusts an overlay, it proves it. A bootstrap sitecustomize.py of our own, first on PYTHONPATH,
applies the launch's contract as the issue writes it:

* sys.dont_write_bytecode; a validating finder first in sys.meta_path;
* an inventory of every overlay root (OVERLAY_PYTHONPATH): any symlink or .pyc/.pyo fails the
  launch, the SHA-256 of every .py file and of _overlay_manifest.json is recorded, and every
  module imported from a root must be a file of the inventory with its digest;
* the next sitecustomize chained through PathFinder.find_spec as the module `sitecustomize`
  itself, then its finder put first again;
* at the ready and finished gates: the inventory unchanged, its finder still first, no process
  forked or exec'd after ready.

A failure prints `[FATAL] GEAK source runtime bootstrap failed: WHY` and exits 78.

    OVERLAY_BIN=build/overlay source_launch_test.py   (unittest arguments after it)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

PY = sys.executable
BIN = os.environ.get("OVERLAY_BIN", "")

BOOTSTRAP = r"""
import hashlib, os, sys
from importlib.machinery import PathFinder
from importlib.util import module_from_spec

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOTS = [os.path.abspath(r) for r in os.environ.get("OVERLAY_PYTHONPATH", "").split(os.pathsep) if r]
STATE = {"ready": False, "spawned": []}


def fatal(why):
    sys.stderr.write("[FATAL] GEAK source runtime bootstrap failed: %s\n" % why)
    sys.stderr.flush()
    os._exit(78)


def inventory():
    inv = {}
    for root in ROOTS:
        for d, dirs, files in os.walk(root):
            for n in dirs + files:
                p = os.path.join(d, n)
                if os.path.islink(p):
                    fatal("symlink in overlay root: " + p)
                if n.endswith((".pyc", ".pyo")):
                    fatal("bytecode in overlay root: " + p)
                if n in files and (n.endswith(".py") or n == "_overlay_manifest.json"):
                    with open(p, "rb") as f:
                        inv[p] = hashlib.sha256(f.read()).hexdigest()
    return inv


INVENTORY = inventory()


def under_root(path):
    path = os.path.abspath(path)
    return any(path == r or path.startswith(r + os.sep) for r in ROOTS)


class ValidatingFinder:
    def find_spec(self, name, path=None, target=None):
        for f in sys.meta_path:
            if f is self or not hasattr(f, "find_spec"):
                continue
            spec = f.find_spec(name, path, target)
            if spec is None:
                continue
            origin = getattr(spec, "origin", None)
            if isinstance(origin, str) and os.path.isabs(origin) and under_root(origin):
                with open(origin, "rb") as fh:
                    digest = hashlib.sha256(fh.read()).hexdigest()
                if INVENTORY.get(os.path.abspath(origin)) != digest:
                    fatal("module %s from %s is not in the inventory" % (name, origin))
            return None
        return None


FINDER = ValidatingFinder()
sys.meta_path.insert(0, FINDER)


def first():
    if sys.meta_path[0] is not FINDER:
        sys.meta_path.remove(FINDER)
        sys.meta_path.insert(0, FINDER)


def audit(event, args):
    if STATE["ready"] and event in ("os.fork", "os.exec", "os.posix_spawn", "subprocess.Popen", "os.system"):
        STATE["spawned"].append(event)


sys.addaudithook(audit)


def gate(name):
    if inventory() != INVENTORY:
        fatal("the overlay roots changed before the %s gate" % name)
    if sys.meta_path[0] is not FINDER:
        fatal("the validating finder is not first at the %s gate: %r" % (name, sys.meta_path[0]))
    if STATE["spawned"]:
        fatal("%s after ready" % STATE["spawned"][0])


class Gates:
    @staticmethod
    def ready():
        gate("ready")
        STATE["ready"] = True

    @staticmethod
    def finished():
        gate("finished")


sys.modules["source_launch"] = Gates
spec = PathFinder.find_spec("sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != HERE])
if spec is not None:
    mod = module_from_spec(spec)
    sys.modules["sitecustomize"] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException as e:
        fatal("chained sitecustomize raised %s: %s" % (type(e).__name__, e))
    Gates.chained = (mod.__name__, mod.__spec__.name, spec.origin)
first()
"""

# The program a launch runs: its target rebound, the two gates, what the chain ran.
PROGRAM = """
import sys, source_launch
import ovl_target
print("result", ovl_target.compute())
print("chained", *source_launch.chained)
source_launch.ready()
import ovl_late
print("late", ovl_late.VALUE)
source_launch.finished()
"""


def tool(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([BIN, *args], capture_output=True, text=True, env=e)


class SourceLaunch(unittest.TestCase):
    def setUp(self):
        self.t = tempfile.mkdtemp(prefix="source-launch-")
        self.addCleanup(shutil.rmtree, self.t, True)
        self.cache = os.path.join(self.t, "cache")
        self.env = {"OVERLAY_CACHE_DIR": self.cache, "OVERLAY_STATE_DIR": os.path.join(self.t, "state")}
        self.site = self.mk("site")
        self.write("site/ovl_target.py", "def compute():\n    return 1\n")
        self.write("site/ovl_late.py", "VALUE = 'stock'\n")
        self.boot = self.mk("boot")
        self.write("boot/sitecustomize.py", BOOTSTRAP)
        self.write("prog.py", PROGRAM)
        self.write("impl/fast.py", "def compute():\n    return 2\n")
        self.write("patched/ovl_late.py", "VALUE = 'patched'\n")

    def mk(self, rel):
        p = os.path.join(self.t, rel)
        os.makedirs(p, exist_ok=True)
        return p

    def write(self, rel, text):
        p = os.path.join(self.t, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(textwrap.dedent(text))
        return p

    def overlay(self, name, tool_env):
        ov = os.path.join(self.t, name)
        env = dict(self.env, **tool_env)
        r = tool(
            "add-rebind",
            "--overlay",
            ov,
            "--target",
            "ovl_target:compute",
            "--impl-module",
            "fast",
            "--impl-attr",
            "compute",
            "--impl-file",
            os.path.join(self.t, "impl/fast.py"),
            env=env,
        )
        self.assertEqual(r.returncode, 0, r.stderr)
        r = tool(
            "add-module",
            "--overlay",
            ov,
            "--module",
            "ovl_late",
            "--patched-file",
            os.path.join(self.t, "patched/ovl_late.py"),
            env=env,
        )
        self.assertEqual(r.returncode, 0, r.stderr)
        r = tool("add-marker", "--overlay", ov, "--target", "ovl_target:compute", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        return ov

    def bytecode_or_links(self, root):
        found = []
        for d, dirs, files in os.walk(root):
            for n in dirs + files:
                p = os.path.join(d, n)
                if os.path.islink(p) or n.endswith((".pyc", ".pyo")):
                    found.append(os.path.relpath(p, root))
        return found

    def launch(self, roots, env=None):
        e = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        e.update(self.env)
        e.update(env or {})
        e["PYTHONPATH"] = os.pathsep.join([self.boot, *roots, self.site])
        e["OVERLAY_PYTHONPATH"] = os.pathsep.join(roots)
        return subprocess.run([PY, os.path.join(self.t, "prog.py")], capture_output=True, text=True, env=e, cwd=self.t)

    def assert_launched(self, r, ov):
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("[FATAL]", r.stderr)
        self.assertIn("result 2", r.stdout, r.stderr)
        self.assertIn("late patched", r.stdout, r.stderr)
        self.assertIn("chained sitecustomize sitecustomize " + os.path.join(ov, "sitecustomize.py"), r.stdout)

    def test_overlays_written_with_bytecode_writing_off_pass(self):
        # Serving images set PYTHONDONTWRITEBYTECODE: the tool used to precompile into __pycache__.
        ov = self.overlay("ov", {"PYTHONDONTWRITEBYTECODE": "1"})
        self.assertEqual(self.bytecode_or_links(ov), [])
        self.assertTrue(os.listdir(os.path.join(self.cache, "runtime")), "nothing precompiled")
        for env in ({}, {"PYTHONDONTWRITEBYTECODE": "1"}):
            self.assert_launched(self.launch([ov], env), ov)
        self.assertEqual(self.bytecode_or_links(ov), [])

    def test_processes_write_no_bytecode_under_the_overlay(self):
        # A plain run (no bootstrap, bytecode writing on) imports the implementation module and
        # the patched module from the overlay: their bytecode goes to the runtime's cache. The
        # interpreter caches the sitecustomize.py stub itself before any of ours runs: the one
        # file the overlay cannot keep from it (docs/cli.md).
        ov = self.overlay("ov", {})
        e = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        e.update(self.env, PYTHONPATH=os.pathsep.join([ov, self.site]))
        r = subprocess.run(
            [PY, "-c", "import ovl_target, ovl_late; print(ovl_target.compute(), ovl_late.VALUE)"],
            capture_output=True,
            text=True,
            env=e,
            cwd=self.t,
        )
        self.assertEqual(r.stdout.split(), ["2", "patched"], r.stderr)
        left = [p for p in self.bytecode_or_links(ov) if not p.startswith("__pycache__/sitecustomize.")]
        self.assertEqual(left, [])
        shutil.rmtree(os.path.join(ov, "__pycache__"), ignore_errors=True)
        self.assert_launched(self.launch([ov]), ov)

    def test_an_older_overlays_bytecode_is_removed_by_the_next_add(self):
        ov = self.overlay("ov", {})
        pyc = self.write("ov/__pycache__/sitecustomize.cpython-311.pyc", "old")
        plan = self.write("ov/__pycache__/_overlay_plan.cpython-311.marshal", "old")
        self.write("ov/__pycache__/fast.cpython-311.pyc", "someone's")
        r = tool("add-marker", "--overlay", ov, "--target", "ovl_late:VALUE", env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(pyc) or os.path.exists(plan))
        self.assertTrue(os.path.exists(os.path.join(ov, "__pycache__/fast.cpython-311.pyc")))

    def test_a_changed_root_fails_the_launch(self):
        # The bootstrap can fail: a .py edited under the root after its inventory.
        ov = self.overlay("ov", {})
        self.write(
            "prog.py",
            PROGRAM.replace(
                "source_launch.ready()", "open(%r, 'a').write('#')\nsource_launch.ready()" % os.path.join(ov, "fast.py")
            ),
        )
        r = self.launch([ov])
        self.assertEqual(r.returncode, 78, r.stdout + r.stderr)
        self.assertIn("[FATAL] GEAK source runtime bootstrap failed", r.stderr)

    def test_the_runtime_never_displaces_a_finder_inserted_before_it(self):
        ov = self.overlay("ov", {})
        self.write("prog.py", PROGRAM.replace("source_launch.ready()", "source_launch.ready()\nimport json"))
        # The bootstrap puts its finder first once more after the chain; this one does not, so a
        # runtime that inserted itself at 0 would fail the ready gate.
        self.write("boot/sitecustomize.py", BOOTSTRAP.replace("\nfirst()\n", "\n"))
        self.assert_launched(self.launch([ov]), ov)

    def install(self):
        """A native install whose build cache holds what real ones do: a symlink and bytecode."""
        self.write("inst/src/kernel.cpp", "int kernel() { return 4; }\n")
        self.write("inst/lib/libk.so", "int kernel() { return 4; }\n")
        self.write("inst/cache/mod.so", "built")
        self.write("inst/cache/__pycache__/jit.cpython-311.pyc", "bytecode")
        os.symlink("mod.so", os.path.join(self.t, "inst/cache/latest"))
        self.write("patched/kernel.cpp", "int kernel() { return 7; }\n")
        return os.path.join(self.t, "inst")

    @staticmethod
    def build_flags(inst):
        """The install's artifact, its cache (invalidated) and its build."""
        artifact, cache = os.path.join(inst, "lib/libk.so"), os.path.join(inst, "cache")
        return [
            "--artifact",
            artifact,
            "--invalidate-cache",
            cache,
            "--build-cwd",
            inst,
            "--build-cmd",
            "cp src/kernel.cpp lib/libk.so",
        ]

    def add_native(self, ov, inst, *extra):
        r = tool(
            "add-native",
            "--overlay",
            ov,
            "--target",
            os.path.join(inst, "src/kernel.cpp"),
            "--patched-file",
            os.path.join(self.t, "patched/kernel.cpp"),
            *self.build_flags(inst),
            *extra,
            env=self.env,
        )
        self.assertEqual(r.returncode, 0, r.stderr)

    def assert_cache_back(self, inst):
        cache = os.path.join(inst, "cache")
        self.assertEqual(os.readlink(os.path.join(cache, "latest")), "mod.so")
        with open(os.path.join(cache, "__pycache__/jit.cpython-311.pyc")) as f:
            self.assertEqual(f.read(), "bytecode")
        with open(os.path.join(inst, "src/kernel.cpp")) as f:
            self.assertEqual(f.read(), "int kernel() { return 4; }\n")

    def test_a_mixed_native_and_python_candidate_passes_and_folds_and_replays(self):
        # The cache a native entry invalidates used to be moved into the overlay (_native_backup/),
        # its symlink and bytecode with it: a candidate with Python entries then failed the launch.
        inst = self.install()
        cand = os.path.join(self.t, "cand")
        self.add_native(cand, inst)
        self.overlay("cand", {})
        self.assertEqual(self.bytecode_or_links(cand), [])
        self.assert_launched(self.launch([cand]), cand)
        # Folded into the accepted overlay, which carries Python entries of its own.
        acc = self.overlay("acc", {})
        r = tool("fold", "--from", cand, "--into", acc, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.bytecode_or_links(acc), [])
        self.assert_launched(self.launch([acc]), acc)
        # Exported, reverted, replayed onto the pristine install: the same again.
        bundle = os.path.join(self.t, "bundle")
        r = tool("export", "--overlay", acc, "--out", bundle, "--root", inst, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = tool("revert", "--overlay", acc, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_cache_back(inst)
        replayed = self.overlay("replayed", {})
        r = tool("replay", "--bundle", bundle, "--overlay", replayed, "--root", inst, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.bytecode_or_links(replayed), [])
        self.assert_launched(self.launch([replayed]), replayed)
        r = tool("revert", "--overlay", replayed, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_cache_back(inst)

    def test_no_cache_snapshot_mode_puts_the_cache_under_the_root(self):
        # `--cache-snapshot move` renamed the cache into the overlay until issue 62's sixth part:
        # asked for by name, it brought the cache's symlink and bytecode under the root.
        inst = self.install()
        for mode in ("auto", "aside", "move", "tar"):
            with self.subTest(mode=mode):
                cand = os.path.join(self.t, "cand-" + mode)
                self.add_native(cand, inst, "--cache-snapshot", mode)
                self.overlay("cand-" + mode, {})
                self.assertEqual(self.bytecode_or_links(cand), [])
                self.assert_launched(self.launch([cand]), cand)
                r = tool("revert", "--overlay", cand, env=self.env)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assert_cache_back(inst)

    def test_a_mixed_candidate_through_apply_passes(self):
        # One diff: the kernel (a native entry) and a Python wrapper (a module entry).
        inst = self.install()
        self.write("inst/py/ovl_mixed.py", "VALUE = 'stock'\n")
        for side, kernel, value in (("a", 4, "stock"), ("b", 7, "patched")):
            self.write("diffs/%s/src/kernel.cpp" % side, "int kernel() { return %d; }\n" % kernel)
            self.write("diffs/%s/py/ovl_mixed.py" % side, "VALUE = %r\n" % value)
        diff = subprocess.run(
            ["diff", "-ruN", "a", "b"], cwd=os.path.join(self.t, "diffs"), capture_output=True, text=True
        )
        self.assertEqual(diff.returncode, 1, diff.stderr)
        self.write("change.diff", diff.stdout)
        ov = os.path.join(self.t, "ov")
        r = tool(
            "apply",
            "--overlay",
            ov,
            "--patch",
            os.path.join(self.t, "change.diff"),
            "--patch-root",
            inst,
            "-p",
            "1",
            "--python-root",
            os.path.join(inst, "py"),
            *self.build_flags(inst),
            env=self.env,
        )
        self.assertEqual(r.returncode, 0, r.stderr)
        self.overlay("ov", {})
        self.assertEqual(self.bytecode_or_links(ov), [])
        self.write("prog.py", PROGRAM + "import ovl_mixed\nprint('mixed', ovl_mixed.VALUE)\n")
        r = self.launch([ov])
        self.assert_launched(r, ov)
        self.assertIn("mixed patched", r.stdout)
        r = tool("revert", "--overlay", ov, env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_cache_back(inst)


if __name__ == "__main__":
    if not BIN:
        sys.exit("set OVERLAY_BIN to the overlay binary")
    unittest.main()
