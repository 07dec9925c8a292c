#!/usr/bin/env python3
"""The generated overlay runtime, round two, in real interpreters: the vLLM worker extension in
real spawned workers, the ROCm helper guard, rebinding static and class methods, a typo said
plainly, a module already imported refused, helper processes silent.

    OVERLAY_BIN=build/overlay runtime_test.py   (unittest arguments after it)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

PY = sys.executable
BIN = os.environ.get("OVERLAY_BIN", "")

# A worker shaped as vLLM's WorkerWrapperBase.init_worker treats one (vllm/v1/worker/
# worker_base.py): resolve the extension by its qualified name, refuse any of its attributes the
# worker class already has, append it to the worker class's bases, build the worker.
WORKERLIB = """
import importlib, os, sys


def resolve_obj_by_qualname(qualname):
    module_name, obj_name = qualname.rsplit(".", 1)
    return getattr(importlib.import_module(module_name), obj_name)


class WorkerBase:  # vLLM's Worker derives from WorkerBase (appending to bases of object alone cannot work)
    pass


class Worker(WorkerBase):
    def execute_model(self):
        import ovw_target
        return ovw_target.compute()


def init_worker(worker_class, extension_qualname):
    ext = resolve_obj_by_qualname(extension_qualname)
    extended = []
    if ext not in worker_class.__bases__:
        for attr in dir(ext):
            if attr.startswith("__"):
                continue
            assert not hasattr(worker_class, attr), "conflicts: %s" % attr
            if callable(getattr(ext, attr)):
                extended.append(attr)
        worker_class.__bases__ = worker_class.__bases__ + (ext,)
    return worker_class(), extended


def worker_main(queue, import_target_first):
    if import_target_first:  # vLLM has imported much before it builds the worker
        import ovw_target  # noqa: F401
    worker, extended = init_worker(Worker, "_overlay_worker_ext.OverlayWorkerExtension")
    ext = sys.modules["_overlay_worker_ext"]
    seen = getattr(sys, "_overlay_sitecustomize_seen", {"overlays": set()})["overlays"]
    queue.put({"result": worker.execute_model(), "extended": extended, "status": worker.overlay_status(),
               "applied_on_import": ext.APPLIED_ON_IMPORT, "pid": os.getpid(),
               "env_has_overlay": os.environ.get("PYTHONPATH", ""), "seen": len(seen)})
"""

PARENT = """
import multiprocessing as mp, os, sys
sys.path.insert(0, sys.argv[1])  # the overlay, on sys.path but not in the environment
sys.path.insert(0, sys.argv[2])  # workerlib
import workerlib
if __name__ == "__main__":
    if sys.argv[3] == "env":
        os.environ["PYTHONPATH"] = sys.argv[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=workerlib.worker_main, args=(q, sys.argv[4] == "imported"))
    p.start()
    print(__import__("json").dumps(q.get(timeout=60)))
    p.join(60)
    sys.exit(p.exitcode)
"""


def run(argv, env=None, check=True, cwd=None):
    r = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (argv, r.returncode, r.stdout, r.stderr))
    return r


class Case(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="runtime-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        # The runtime's cache (bytecode, start-up plans) of this test alone, for the tool too.
        self.cache = os.path.join(self.tmp, "cache")
        self.addCleanup(os.environ.__setitem__, "OVERLAY_CACHE_DIR", os.environ.get("OVERLAY_CACHE_DIR", ""))
        os.environ["OVERLAY_CACHE_DIR"] = self.cache
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OVERLAY_DISABLE")}

    def plans(self):
        d = os.path.join(self.cache, "runtime")
        return [os.path.join(d, p) for p in os.listdir(d) if p.startswith("plan.")] if os.path.isdir(d) else []

    def write(self, rel, text):
        p = os.path.join(self.tmp, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(textwrap.dedent(text))
        return p

    def overlay(self, *calls):
        o = os.path.join(self.tmp, "O")
        for c in calls:
            run([BIN, c[0], "--overlay", o] + c[1:])
        return o

    def py(self, code, overlay, extra_path=(), env=None, argv0=None, cwd=None):
        e = dict(self.env, **(env or {}))
        e["PYTHONPATH"] = os.pathsep.join([overlay] + list(extra_path))
        if argv0:  # a script by that name (relative: under the test's folder)
            script = os.path.join(self.tmp, argv0)
            os.makedirs(os.path.dirname(script), exist_ok=True)
            with open(script, "w") as f:
                f.write(code)
            return run([PY, script], env=e, check=False, cwd=cwd)
        return run([PY, "-c", code], env=e, check=False, cwd=cwd)


class WorkerExtension(Case):
    """Item 9: a spawned TP worker whose environment lacks the overlay applies it through the
    extension, once; one that has it does nothing more."""

    def setUp(self):
        super().setUp()
        lib = os.path.join(self.tmp, "lib")
        self.write("lib/ovw_target.py", "def compute():\n    return 'stock'\n")
        self.write("lib/workerlib.py", WORKERLIB)
        impl = self.write("impl/ovw_impl.py", "def compute():\n    return 'fast'\n")
        self.o = self.overlay(
            [
                "add-rebind",
                "--target",
                "ovw_target:compute",
                "--impl-module",
                "ovw_impl",
                "--impl-attr",
                "compute",
                "--impl-file",
                impl,
            ],
            ["add-worker-modules"],
        )
        self.lib = lib
        self.parent = self.write("parent.py", PARENT)

    def spawn(self, env_mode, imported):
        r = run([PY, self.parent, self.o, self.lib, env_mode, imported], env=self.env)
        return json.loads(r.stdout.strip().splitlines()[-1])

    def live_records_of(self, pid):
        live = os.path.join(self.o, "_stats")
        return (
            [n for n in os.listdir(live) if n.startswith("%d-" % pid) and n.endswith(".json")]
            if os.path.isdir(live)
            else []
        )

    def test_worker_without_the_overlay_in_its_environment_applies_it_once(self):
        for imported in ("fresh", "imported"):
            with self.subTest(target=imported):
                got = self.spawn("noenv", imported)
                self.assertEqual(got["env_has_overlay"], "")  # the worker really lacked it
                self.assertEqual(got["result"], "fast")
                self.assertTrue(got["applied_on_import"])
                self.assertEqual(got["extended"], ["overlay_status"])
                self.assertEqual(got["status"]["overlay"], self.o)
                self.assertTrue(got["status"]["applied"])
                self.assertEqual(got["seen"], 1)
                self.assertEqual(len(self.live_records_of(got["pid"])), 1, "one application, one record")

    def test_worker_that_has_the_overlay_does_nothing_more(self):
        got = self.spawn("env", "fresh")
        self.assertEqual(got["env_has_overlay"], self.o)
        self.assertEqual(got["result"], "fast")
        self.assertFalse(got["applied_on_import"])  # its sitecustomize.py applied it at start
        self.assertEqual(got["seen"], 1)
        self.assertEqual(len(self.live_records_of(got["pid"])), 1)

    def test_without_the_extension_a_spawned_worker_runs_stock_code(self):
        # The claim the extension exists for: the same worker, not extended, is stock.
        code = "import sys; sys.path.insert(0, %r); import ovw_target; print(ovw_target.compute())" % self.lib
        r = run([PY, "-c", code], env=self.env)
        self.assertEqual(r.stdout.strip(), "stock")


class Runtime(Case):
    def test_rocm_helpers_are_skipped_and_say_so(self):
        self.write("lib/ovr_mod.py", "X = 1\n")
        o = self.overlay(["add-rebind", "--target", "ovr_mod:X", "--impl-module", "ovr_mod", "--impl-attr", "X"])
        code = "import ovr_mod\nprint('ran')\n"
        helpers = [os.path.join(self.tmp, "helpers", n) for n in ("roc-obj", "rocminfo")]
        opt = "/opt/rocm-overlay-test-%d" % os.getpid()  # a path under /opt/rocm*, where one may be made
        try:
            os.makedirs(opt + "/bin")
            self.addCleanup(shutil.rmtree, opt, True)
            helpers.append(opt + "/bin/tool.py")
        except OSError:
            pass
        for name in helpers:
            with self.subTest(helper=name):
                r = self.py(code, o, [os.path.join(self.tmp, "lib")], argv0=name)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("[overlay] skipped for ROCm toolchain helper", r.stderr)
                self.assertNotIn("rebound", r.stderr)
        r = self.py(code, o, [os.path.join(self.tmp, "lib")], argv0="serve.py")
        self.assertIn("[overlay] rebound ovr_mod:X", r.stderr)
        self.assertNotIn("skipped", r.stderr)

    def test_a_task_dirs_unittest_py_is_hidden_while_the_overlay_applies(self):
        self.write("lib/ovu_mod.py", "def f():\n    return 'stock'\n")
        impl = self.write(
            "impl/ovu_impl.py", "from unittest import mock\n\ndef f():\n    return 'fast:' + mock.__name__\n"
        )
        o = self.overlay(
            [
                "add-rebind",
                "--target",
                "ovu_mod:f",
                "--impl-module",
                "ovu_impl",
                "--impl-attr",
                "f",
                "--impl-file",
                impl,
            ]
        )
        task = os.path.join(self.tmp, "task")
        self.write("task/unittest.py", "raise SystemExit('the task driver was imported as unittest')\n")
        code = "import sys, ovu_mod\nprint(ovu_mod.f(), sys.path[0] == %r)\n" % task
        r = self.py(code, o, [os.path.join(self.tmp, "lib")], argv0=os.path.join("task", "leg_runner.py"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["fast:unittest.mock", "True"])  # hidden, then put back

    def test_static_and_class_methods_keep_their_kind(self):
        self.write(
            "lib/ovs_mod.py",
            """\
            class K:
                @staticmethod
                def s(x):
                    return ('stock', x)

                @classmethod
                def c(cls, x):
                    return ('stock', cls.__name__, x)
            """,
        )
        impl = self.write(
            "impl/ovs_impl.py",
            """\
            def s(x):
                return ('fast', x)

            def c(cls, x):
                return ('fast', cls.__name__, x)
            """,
        )
        o = self.overlay(
            [
                "add-rebind",
                "--target",
                "ovs_mod:K.s",
                "--impl-module",
                "ovs_impl",
                "--impl-attr",
                "s",
                "--impl-file",
                impl,
            ],
            ["add-rebind", "--target", "ovs_mod:K.c", "--impl-module", "ovs_impl", "--impl-attr", "c"],
        )
        code = "import ovs_mod\nk = ovs_mod.K()\nprint(k.s(1), ovs_mod.K.s(2), k.c(3), ovs_mod.K.c(4))\n"
        r = self.py(code, o, [os.path.join(self.tmp, "lib")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "('fast', 1) ('fast', 2) ('fast', 'K', 3) ('fast', 'K', 4)")

    def test_a_typo_is_said_plainly(self):
        self.write("lib/ovt_mod.py", "def real():\n    pass\n")
        o = self.overlay(["add-rebind", "--target", "ovt_mod:reall", "--impl-module", "ovt_mod", "--impl-attr", "real"])
        r = self.py("import ovt_mod", o, [os.path.join(self.tmp, "lib")])
        self.assertIn(
            "[overlay] rebind FAILED ovt_mod:reall: AttributeError: ovt_mod has no attribute 'reall'", r.stderr
        )
        self.assertNotIn("circular import", r.stderr)

    def test_a_module_imported_before_the_overlay_registers_is_refused(self):
        lib = os.path.join(self.tmp, "lib")
        self.write("lib/ovi_mod.py", "WHO = 'stock'\n")
        patched = self.write("patched.py", "WHO = 'patched'\n")
        o = self.overlay(["add-module", "--module", "ovi_mod", "--patched-file", patched], ["add-worker-modules"])
        # Applied late (as in a worker through _overlay_apply) after the module was imported.
        code = (
            "import sys; sys.path[:0] = [%r]; import ovi_mod; sys.path.insert(0, %r); import _overlay_apply; "
            "_overlay_apply.apply(); import ovi_mod as again; print(ovi_mod is again, again.WHO)" % (lib, o)
        )
        r = run([PY, "-c", code], env=self.env)
        self.assertEqual(r.stdout.strip(), "True stock")
        self.assertIn(
            "[overlay] module registration FAILED ovi_mod: target already imported before overlay registration",
            r.stderr,
        )

    # Issue 52 (the newest upstream): the finder is in sys.meta_path by its upstream name in every
    # process that runs the overlay, whatever its manifest claims, a probe's included.
    def test_the_overlay_finder_is_installed_even_where_nothing_is_claimed(self):
        self.write("lib/ovf_mod.py", "X = 1\n")
        code = (
            "import sys\nnames = [type(f).__name__ for f in sys.meta_path]\n"
            "ours = sys.meta_path[names.index('_OverlayFinder')] if '_OverlayFinder' in names else None\n"
            "print(names.count('_OverlayFinder'), len(ours.state.modules))\n"
        )
        lib = [os.path.join(self.tmp, "lib")]
        empty = os.path.join(self.tmp, "empty")
        run([BIN, "ensure-overlay", "--overlay", empty])
        with open(os.path.join(empty, "_overlay_manifest.json")) as f:
            self.assertEqual(json.load(f), {"modules": [], "rebinds": [], "markers": [], "captures": []})
        r = self.py(code, empty, lib)
        self.assertEqual(r.stdout, "1 0\n", r.stderr)
        self.assertEqual(r.stderr, "")  # a baseline leg says nothing
        patched = self.write("patched.py", "X = 2\n")
        o = self.overlay(["add-module", "--module", "ovf_mod", "--patched-file", patched])
        self.assertEqual(self.py(code, o, lib).stdout, "1 1\n")
        # A ROCm probe: the finder, claiming nothing; the probe runs to its end (exit 0, its output).
        r = self.py(code + "import ovf_mod\nprint('probe ran', ovf_mod.X)\n", o, lib, argv0="helpers/rocminfo")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "1 0\nprobe ran 1\n")
        self.assertIn("[overlay] skipped for ROCm toolchain helper", r.stderr)
        # Turned off, or a manifest that cannot be read: installed all the same, claiming nothing.
        self.assertEqual(self.py(code, o, lib, env={"OVERLAY_DISABLE": "1"}).stdout, "1 0\n")
        with open(os.path.join(o, "_overlay_manifest.json"), "w") as f:
            f.write("{not json")
        r = self.py(code, o, lib)
        self.assertEqual(r.stdout, "1 0\n")
        self.assertIn("cannot read manifest", r.stderr)

    # Issue 52: the pipeline's adapters run the overlay's sitecustomize.py again (runpy.run_path).
    # A module target imported stock before is left alone and said so, each time; one imported
    # through the overlay is not; a module entry added since is served; nothing applies twice.
    def test_running_the_overlay_again_registers_again(self):
        lib = os.path.join(self.tmp, "lib")
        self.write("lib/ovs_stock.py", "WHO = 'stock'\n")
        self.write("lib/ovs_mod.py", "WHO = 'stock'\n")
        self.write("lib/ovs_late.py", "WHO = 'stock'\n")
        self.write("lib/ovs_reb.py", "def f():\n    return 'stock'\n")
        impl = self.write("impl/ovs_impl.py", "CALLS = []\n\ndef f():\n    CALLS.append(1)\n    return 'fast'\n")
        patched = self.write("patched.py", "WHO = 'patched'\n")
        o = self.overlay(
            ["add-module", "--module", "ovs_stock", "--patched-file", patched],
            ["add-module", "--module", "ovs_mod", "--patched-file", patched],
            [
                "add-rebind",
                "--target",
                "ovs_reb:f",
                "--impl-module",
                "ovs_impl",
                "--impl-attr",
                "f",
                "--impl-file",
                impl,
            ],
        )
        code = textwrap.dedent(
            """\
            import runpy, subprocess, sys
            sys.path.insert(0, %r)
            import ovs_stock            # stock: the overlay is not registered yet
            sys.path.insert(0, %r)
            site = %r + "/sitecustomize.py"
            runpy.run_path(site)        # first registration
            import ovs_mod, ovs_reb
            subprocess.run([%r, "add-module", "--overlay", %r, "--module", "ovs_late", "--patched-file", %r], check=True,
                           stdout=subprocess.DEVNULL)
            runpy.run_path(site)        # again, as an adapter does
            import ovs_late
            print(ovs_stock.WHO, ovs_mod.WHO, ovs_late.WHO, ovs_reb.f(), type(ovs_reb.f).__name__)
            print(sum(type(f).__name__ == "_OverlayFinder" for f in sys.meta_path))
            """
            % (lib, o, o, BIN, o, patched)
        )
        r = run([PY, "-c", code], env=self.env)
        self.assertEqual(r.stdout, "stock patched patched fast function\n1\n", r.stderr)
        failed = "[overlay] module registration FAILED %s: target already imported before overlay registration"
        self.assertEqual(r.stderr.count(failed % "ovs_stock"), 2, r.stderr)
        self.assertNotIn(failed % "ovs_mod", r.stderr)
        self.assertEqual(r.stderr.count("[overlay] rebound ovs_reb:f"), 1, r.stderr)

    # Issue 52: a patched module whose import raises raises at every import; nothing half-made is
    # cached in sys.modules.
    def test_a_patched_module_that_raises_raises_at_every_import(self):
        self.write("lib/ovx_mod.py", "WHO = 'stock'\n")
        broken = self.write("broken.py", "raise RuntimeError('candidate broke')\n")
        o = self.overlay(["add-module", "--module", "ovx_mod", "--patched-file", broken])
        code = textwrap.dedent(
            """\
            import sys
            for attempt in range(2):
                try:
                    import ovx_mod
                    print("imported", ovx_mod.WHO)
                except RuntimeError as e:
                    print("raised", e, "ovx_mod" in sys.modules)
            """
        )
        r = self.py(code, o, [os.path.join(self.tmp, "lib")])
        self.assertEqual(r.stdout, "raised candidate broke False\nraised candidate broke False\n", r.stderr)

    def test_a_process_that_imports_no_target_says_nothing(self):
        self.write("lib/ovq_a.py", "def f():\n    pass\n")
        self.write("lib/ovq_b.py", "def f():\n    pass\n")
        o = self.overlay(
            ["add-rebind", "--target", "ovq_a:f", "--impl-module", "ovq_a", "--impl-attr", "f"],
            ["add-rebind", "--target", "ovq_b:f", "--impl-module", "ovq_b", "--impl-attr", "f"],
        )
        lib = [os.path.join(self.tmp, "lib")]
        quiet = self.py("pass", o, lib)
        self.assertEqual((quiet.returncode, quiet.stderr), (0, ""))
        tracker = self.py("import multiprocessing.resource_tracker", o, lib)
        self.assertEqual(tracker.stderr, "")
        partial = self.py("import ovq_a", o, lib)  # it engaged: what did not apply is worth a line
        self.assertIn("rebind ovq_b:f never applied: module never imported", partial.stderr)
        # The start-up plan is used, and a manifest edited behind the tool's back is read afresh.
        env = {"PYTHONDONTWRITEBYTECODE": ""}
        self.py("pass", o, lib, env=env)
        self.assertTrue(self.plans())
        self.assertFalse(os.path.exists(os.path.join(o, "__pycache__", "_overlay_plan.cpython-311.marshal")))
        with open(os.path.join(o, "_overlay_manifest.json")) as f:
            m = json.load(f)
        m["rebinds"][1]["target"] = "ovq_b:missing"
        with open(os.path.join(o, "_overlay_manifest.json"), "w") as f:
            json.dump(m, f, indent=2)
        r = self.py("import ovq_b", o, lib, env=env)
        self.assertIn("ovq_b:missing", r.stderr)

    # Issue 62: the runtime's ~510 start-up objects triggered a generation-1 collection that walked
    # every object the interpreter had made (0.2-0.8 ms a process). The interpreter's objects are
    # moved to the oldest generation first, so a start under the overlay collects no more than a
    # bare one; the collector is left as found, and objects someone froze before stay frozen.
    def test_the_start_collects_no_more_than_a_bare_start(self):
        self.write("lib/ovg_a.py", "def f():\n    pass\n")
        o = self.overlay(["add-rebind", "--target", "ovg_a:f", "--impl-module", "ovg_a", "--impl-attr", "f"])
        lib = [os.path.join(self.tmp, "lib")]
        code = (
            "import gc; s = gc.get_stats()\n"
            "print(s[1]['collections'] + s[2]['collections'], gc.isenabled(), gc.get_freeze_count() > 0, "
            "gc.get_threshold())"
        )
        env = {"PYTHONDONTWRITEBYTECODE": ""}  # bytecode cached, as Python does by default
        bare = run([PY, "-c", code], env=dict(self.env, PYTHONPATH=lib[0], **env)).stdout
        if not bare.startswith("0 "):
            self.skipTest("a bare start of this interpreter collects already: %s" % bare.strip())
        self.py("pass", o, lib, env=env)  # fills the caches
        under = self.py(code, o, lib, env=env)
        self.assertEqual((under.stdout, under.stderr), (bare, ""))
        # A bootstrap that froze objects and then runs the overlay's file: they stay frozen.
        boot = self.write(
            "boot/sitecustomize.py",
            "import gc, runpy\ngc.freeze()\nrunpy.run_path(%r)\n" % os.path.join(o, "sitecustomize.py"),
        )
        r = self.py(code, os.path.dirname(boot), [o] + lib, env=env)
        self.assertEqual(r.stderr, "")
        self.assertIn(" True True ", r.stdout, "the runtime unfroze what the bootstrap froze")

    # Issue 50: the start-up plan was keyed on (length, CRC-32, Adler-32) of the manifest's bytes,
    # so other bytes with those sums (a hand edit of the same length can have them) were served the
    # plan of the old ones. A plan made from other bytes that carries those sums is not used now.
    def test_a_plan_made_from_other_bytes_is_not_used(self):
        import marshal
        import zlib

        self.write("lib/ovp_a.py", "def f():\n    return 'stock'\n")
        self.write("lib/ovp_impl.py", "def g():\n    return 'patched'\n")
        o = self.overlay(["add-rebind", "--target", "ovp_a:f", "--impl-module", "ovp_impl", "--impl-attr", "g"])
        lib = [os.path.join(self.tmp, "lib")]
        env = {"PYTHONDONTWRITEBYTECODE": ""}
        self.assertEqual(self.py("import ovp_a; print(ovp_a.f())", o, lib, env=env).stdout.strip(), "patched")
        plans = self.plans()
        self.assertTrue(plans)
        with open(os.path.join(o, "_overlay_manifest.json"), "rb") as f:
            raw = f.read()
        # What a colliding edit would meet: a plan of other bytes under this manifest's sums.
        forged = (
            (len(raw), zlib.crc32(raw), zlib.adler32(raw)),
            {"modules": [], "captures": []},
            [("ovp_a", "f", "ovp_impl", "nowhere", False)],
        )
        for p in plans:
            with open(p, "wb") as f:
                f.write(marshal.dumps(forged))
        r = self.py("import ovp_a; print(ovp_a.f())", o, lib, env=env)
        self.assertEqual(r.stdout.strip(), "patched", r.stderr)
        self.assertNotIn("nowhere", r.stderr)

    # Issue 50: a process that cannot write to its overlay (here its _stats is not a directory)
    # says so once, while it runs, as soon as something applied; `engaged` would otherwise blame
    # PYTHONPATH. A process that applies nothing stays silent.
    def test_a_process_that_cannot_record_itself_says_so_while_it_runs(self):
        self.write("lib/ovw_a.py", "def f():\n    return 'stock'\n")
        self.write("lib/ovw_impl.py", "def g():\n    return 'patched'\n")
        o = self.overlay(["add-rebind", "--target", "ovw_a:f", "--impl-module", "ovw_impl", "--impl-attr", "g"])
        shutil.rmtree(os.path.join(o, "_stats"), ignore_errors=True)
        with open(os.path.join(o, "_stats"), "w") as f:
            f.write("not a directory\n")
        lib = [os.path.join(self.tmp, "lib")]
        quiet = self.py("pass", o, lib)
        self.assertEqual(quiet.stderr, "")
        r = self.py("import sys, ovw_a; print(ovw_a.f()); sys.stderr.write('RUNNING\\n'); sys.stderr.flush()", o, lib)
        self.assertEqual(r.stdout.strip(), "patched", r.stderr)
        said = r.stderr.find("cannot record live applications in %s" % o)
        self.assertNotEqual(said, -1, r.stderr)
        self.assertLess(said, r.stderr.index("RUNNING"), r.stderr)
        self.assertEqual(r.stderr.count("cannot record live applications"), 1, r.stderr)

    # Issue 51: a process without json and _json (python3-minimal) parses the manifest with the
    # runtime's own parser. It must read every document as json.loads does: random documents
    # (seeded: RUNTIME_JSON_SEED replays one) of the shapes a manifest holds, escapes, surrogate
    # pairs and lone surrogates, numbers, nesting, both ensure_ascii forms and indents; and it must
    # refuse a document cut short.
    def test_the_plain_json_parser_reads_what_json_loads_reads(self):
        import random

        o = self.overlay(["add-rebind", "--target", "ovj_a:f", "--impl-module", "ovj_impl", "--impl-attr", "g"])
        ns = {"__name__": "_overlay_precompile", "_OVERLAY_PRECOMPILE": True}
        with open(os.path.join(o, "sitecustomize.py")) as f:
            exec(compile(f.read(), "sitecustomize.py", "exec"), ns)
        parse = ns["_parse_json_plain"]
        seed = int(os.environ.get("RUNTIME_JSON_SEED", random.randrange(1 << 30)))
        rng = random.Random(seed)
        alphabet = 'ab/\\"\n\t\x00\x1f \u00e9\u2028\ud83d\ude00\udcff{}[]:,' + "\U0001F600"

        def text():
            return "".join(rng.choice(alphabet) for _ in range(rng.randrange(8)))

        def value(depth):
            k = rng.randrange(9 if depth < 4 else 6)
            if k == 0:
                return None
            if k == 1:
                return rng.random() < 0.5
            if k == 2:
                return rng.randrange(-(10**12), 10**12)
            if k == 3:
                return rng.uniform(-1e6, 1e6) * 10 ** rng.randrange(-20, 20)
            if k in (4, 5):
                return text()
            if k in (6, 7):
                return {text(): value(depth + 1) for _ in range(rng.randrange(4))}
            return [value(depth + 1) for _ in range(rng.randrange(4))]

        for i in range(400):
            doc = json.dumps(value(0), ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 0, 2]))
            self.assertEqual(parse(doc), json.loads(doc), "seed %d, document %d: %r" % (seed, i, doc))
            if len(doc) > 1:
                cut = doc[: rng.randrange(1, len(doc))]
                try:
                    json.loads(cut)
                except ValueError:
                    with self.assertRaises(Exception, msg="seed %d: %r" % (seed, cut)):
                        parse(cut)

    # Issue 51: the live record grows linearly in the modules a process imports. 300 modules with
    # a rebind each, all imported: the bytes the process writes stay linear (each key once, not
    # the whole record after every module: 300 x 300 keys), and `overlay engaged` still reads
    # every application from the record while the process runs.
    # Review of issue 62's start from the plan: a rebind whose implementation module another thread
    # is still executing took the half-made module from sys.modules and said `rebind FAILED ...
    # partially initialized module` (1 run in 5 with three threads). It waits for it now.
    def test_a_rebind_waits_for_an_implementation_another_thread_is_importing(self):
        self.write("lib/ovt_a.py", "def f():\n    return 'stock'\n")
        self.write("lib/ovt_impl.py", "import time\ntime.sleep(0.4)\n\ndef g():\n    return 'fast'\n")
        o = self.overlay(["add-rebind", "--target", "ovt_a:f", "--impl-module", "ovt_impl", "--impl-attr", "g"])
        code = textwrap.dedent(
            """\
            import threading, time
            t = threading.Thread(target=__import__, args=("ovt_impl",))
            t.start()
            time.sleep(0.1)  # ovt_impl is executing in t
            import ovt_a
            t.join()
            print(ovt_a.f())
            """
        )
        r = self.py(code, o, [os.path.join(self.tmp, "lib")])
        self.assertEqual((r.stdout, r.returncode), ("fast\n", 0), r.stderr)
        self.assertNotIn("FAILED", r.stderr)

    def test_a_process_importing_many_targets_writes_each_key_once(self):
        n = 300
        for i in range(n):
            self.write("lib/ovm_%d.py" % i, "def f():\n    return 'stock'\n")
        self.write("lib/ovm_impl.py", "def g():\n    return 'patched'\n")
        o = self.overlay(["add-rebind", "--target", "ovm_0:f", "--impl-module", "ovm_impl", "--impl-attr", "g"])
        man = os.path.join(o, "_overlay_manifest.json")
        with open(man) as f:
            m = json.load(f)
        m["rebinds"] = [{"target": "ovm_%d:f" % i, "impl_module": "ovm_impl", "impl_attr": "g"} for i in range(n)]
        with open(man, "w") as f:
            json.dump(m, f, indent=2)
        code = (
            textwrap.dedent(
                """
            import json, os, subprocess, sys
            def written():
                with open("/proc/self/io") as f:
                    return int([l for l in f if l.startswith("wchar:")][0].split()[1])
            before = written()
            mods = [__import__("ovm_%d" % i) for i in range(__N__)]
            after = written()
            sys.stderr.flush()
            r = subprocess.run([__BIN__, "--json", "engaged", "--overlay", __O__, "--pid", str(os.getpid())], capture_output=True, text=True)
            procs = json.loads(r.stdout).get("python_processes", [])
            print(json.dumps({"bytes": after - before, "patched": sum(m.f() == "patched" for m in mods),
                              "applied": len(procs[0]["applied"]) if procs else -1,
                              "pending": len(procs[0]["pending"]) if procs else -1}))
        """
            )
            .replace("__N__", str(n))
            .replace("__BIN__", repr(BIN))
            .replace("__O__", repr(o))
        )
        r = self.py(code, o, [os.path.join(self.tmp, "lib")])
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        got = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(got["patched"], n, got)
        self.assertEqual(got["applied"], n, (got, r.stderr[-500:]))
        self.assertEqual(got["pending"], 0, got)
        # stderr's "[overlay] rebound ..." lines and the record: ~150 bytes a module, linear; the
        # whole record rewritten after each module wrote ~40 times that (n * n * 25 / 2).
        self.assertLess(got["bytes"], 400 * n, got)


if __name__ == "__main__":
    if not BIN:
        sys.exit("set OVERLAY_BIN to the overlay binary")
    unittest.main(verbosity=2)
