#!/usr/bin/env python3
"""Issue 62: a process whose overlay has a start-up plan in the runtime's cache starts the overlay
from the plan alone; the rest of the runtime loads at the first import of a module an entry waits
for, so a process that imports no target (a tokenizer, a resource tracker, a compiler helper)
never loads it. Tested as a claim: whatever a process does, what it prints, says and records is
what the whole runtime (no plan) makes it print, say and record, scenario by scenario.

    OVERLAY_BIN=build/overlay start_plan_test.py   (unittest arguments after it)
"""
import json
import os
import re
import shutil
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runtime_test import BIN, Case, run  # noqa: E402

# Printed first by every scenario (to stderr, before anything it imports): which runtime runs.
PROBE = (
    "import sys as _s\n"
    "_s.stderr.write('RUNTIME %s\\n' % ('whole' if '_overlay_main' in vars(_s.modules['sitecustomize']) else 'start'))\n"
    "_s.stderr.flush()\n"
)

# What processes of a serving stack do, each a scenario run under both starts.
SCENARIOS = {
    "nothing": "pass\n",
    "one target": "import ovz_a\nprint(ovz_a.f())\n",
    "both targets": "import ovz_a, ovz_b\nprint(ovz_a.f(), ovz_b.f())\n",
    "a module file served": "import ovz_mod\nprint(ovz_mod.WHO)\n",
    "reloaded": "import importlib, ovz_a\nimportlib.reload(ovz_a)\nprint(ovz_a.f())\n",
    "two threads at once": textwrap.dedent(
        """\
        import threading
        out = {}
        def imp(name):
            out[name] = __import__(name).f()
        ts = [threading.Thread(target=imp, args=(n,)) for n in ("ovz_a", "ovz_b")]
        [t.start() for t in ts]
        [t.join() for t in ts]
        print(sorted(out.items()))
        """
    ),
    "a forked child imports": textwrap.dedent(
        """\
        import os, sys
        pid = os.fork()
        if pid == 0:
            import ovz_b
            print("child", ovz_b.f())
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(0)
        os.waitpid(pid, 0)
        import ovz_a
        print("parent", ovz_a.f())
        """
    ),
    # Modules loaded without the import system's finders (by file path): the whole runtime never
    # sees them, so a start from the plan must not judge them later either (review of 128db5a).
    "targets loaded by file path": textwrap.dedent(
        """\
        import importlib.util as u, os, sys
        lib = os.environ["T_LIB"]
        for n in ("ovz_a", "ovz_mod"):
            s = u.spec_from_file_location(n, os.path.join(lib, n + ".py"))
            m = u.module_from_spec(s)
            sys.modules[n] = m
            s.loader.exec_module(m)
        import ovz_b
        print(sys.modules["ovz_a"].f(), sys.modules["ovz_mod"].WHO, ovz_b.f())
        """
    ),
    "engaged while it runs": textwrap.dedent(
        """\
        import os, subprocess, sys
        def engaged():
            sys.stderr.flush()
            r = subprocess.run([os.environ["T_BIN"], "engaged", "--overlay", os.environ["T_O"], "--pid",
                                str(os.getpid())], capture_output=True, text=True)
            return r.stdout
        print(engaged())
        import ovz_a
        print(engaged())
        """
    ),
    "the overlay run again by a loader": textwrap.dedent(
        """\
        import os, runpy
        runpy.run_path(os.path.join(os.environ["T_O"], "sitecustomize.py"))
        import ovz_a
        print(ovz_a.f())
        """
    ),
}


def norm(text):
    """Text with what differs between any two runs (pids, start times, record names) made equal."""
    return re.sub(r"\d+", "N", re.sub(r"-[0-9a-f]{8}\.json", "-X.json", text))


class StartPlan(Case):
    def setUp(self):
        super().setUp()
        self.lib = [os.path.join(self.tmp, "lib")]
        self.write("lib/ovz_a.py", "def f():\n    return 'stock'\n")
        self.write("lib/ovz_b.py", "def f():\n    return 'stock'\n")
        self.write("lib/ovz_mod.py", "WHO = 'stock'\n")
        impl = self.write("impl/ovz_impl.py", "def g():\n    return 'fast'\n")
        patched = self.write("patched/ovz_mod.py", "WHO = 'patched'\n")
        self.o = self.overlay(
            ["add-rebind", "--target", "ovz_a:f", "--impl-module", "ovz_impl", "--impl-attr", "g", "--impl-file", impl],
            ["add-rebind", "--target", "ovz_b:f", "--impl-module", "ovz_impl", "--impl-attr", "g"],
            ["add-module", "--module", "ovz_mod", "--patched-file", patched],
        )

    def run_once(self, code, planned):
        """(stdout, stderr lines, records left) of `code` under the overlay, started from its plan
        or (planned False: no plan in the cache, none written) by the whole runtime."""
        if not planned:
            for p in self.plans():
                os.unlink(p)
        elif not self.plans():  # a process with bytecode writing on makes it
            self.py("pass", self.o, self.lib, env={"PYTHONDONTWRITEBYTECODE": ""})
            self.assertTrue(self.plans(), "no start-up plan was written")
        shutil.rmtree(os.path.join(self.o, "_stats"), ignore_errors=True)
        env = {"PYTHONDONTWRITEBYTECODE": "1", "T_BIN": BIN, "T_O": self.o, "T_LIB": self.lib[-1]}
        r = self.py(PROBE + code, self.o, self.lib, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        said = r.stderr.splitlines()
        runtime = [line for line in said if line.startswith("RUNTIME ")]
        said = [runtime[0] if runtime else "RUNTIME none"] + [line for line in said if not line.startswith("RUNTIME ")]
        records = {}
        for d, _, files in os.walk(os.path.join(self.o, "_stats")):
            for f in files:
                with open(os.path.join(d, f)) as fh:
                    lines = [json.loads(line) for line in fh.read().splitlines()]
                for line in lines:
                    line.pop("pid", None)
                    line.pop("start_ticks", None)
                records.setdefault(os.path.relpath(d, self.o), []).append(lines)
        for v in records.values():
            v.sort(key=json.dumps)
        return r.stdout, said, records

    def differ(self, name, code):
        whole = self.run_once(code, False)
        start = self.run_once(code, True)
        self.assertEqual(whole[1][:1], ["RUNTIME whole"], (name, whole[1]))
        return whole, start

    def test_every_process_prints_says_and_records_what_the_whole_runtime_makes_it(self):
        for name, code in SCENARIOS.items():
            with self.subTest(scenario=name):
                whole, start = self.differ(name, code)
                self.assertEqual(start[1][:1], ["RUNTIME start"], (name, start[1]))
                self.assertEqual(norm(start[0]), norm(whole[0]), name)
                self.assertEqual(sorted(map(norm, start[1][1:])), sorted(map(norm, whole[1][1:])), name)
                self.assertEqual(start[2], whole[2], name)

    def test_a_process_importing_no_target_loads_only_the_start(self):
        self.run_once("pass", True)  # the plan
        code = textwrap.dedent(
            """\
            import json, os, sys
            live = os.path.join(os.environ["T_O"], "_stats", "live")
            names = os.listdir(live)
            with open(os.path.join(live, names[0])) as f:
                record = json.loads(f.read())
            with open("/proc/self/stat") as f:
                ticks = int(f.read().rsplit(")", 1)[1].split()[19])
            finders = [type(f).__name__ for f in sys.meta_path].count("_OverlayFinder")
            print(json.dumps([len(names), record["pid"] == os.getpid(), record["start_ticks"] == ticks,
                              record["applied"], record["failed"], record["pending"], finders]))
            """
        )
        out, err, records = self.run_once(code, True)
        self.assertEqual(err, ["RUNTIME start"])
        keys = ["module:ovz_mod", "rebind:ovz_a:f->ovz_impl.g", "rebind:ovz_b:f->ovz_impl.g"]
        self.assertEqual(json.loads(out), [1, True, True, [], [], keys, 1])
        self.assertEqual(records, {}, "a process that applied nothing leaves a record")

    def test_a_plan_made_by_another_runtime_text_is_not_used(self):
        # The plan holds the runtime's reading of the manifest (what a start must say, the live
        # record's keys): a sitecustomize.py of another version, over the same manifest bytes,
        # makes and uses its own.
        self.run_once("pass", True)
        site = os.path.join(self.o, "sitecustomize.py")
        with open(site) as f:
            text = f.read()
        marker = "_OVERLAY_RUNTIME_REST = r'''\n"
        self.assertIn(marker, text)
        with open(site, "w") as f:
            f.write(text.replace(marker, marker + "# another version of the rest\n"))
        plans = self.plans()
        _, said, _ = self.run_once("pass", True)  # the plan of the original text is there
        self.assertEqual(self.plans(), plans)
        self.assertEqual(said, ["RUNTIME whole"])

    def test_two_overlays_on_one_module_both_start_from_their_plans(self):
        # The second overlay's start looks ovz_a's package up through the first one's finder, and
        # the first one chains the second's sitecustomize.py: neither may load the first's rest.
        impl = self.write("impl2/ovz_impl2.py", "def h():\n    return 'second'\n")
        o2 = os.path.join(self.tmp, "O2")
        run(
            [
                BIN,
                "add-rebind",
                "--overlay",
                o2,
                "--target",
                "ovz_a:f",
                "--impl-module",
                "ovz_impl2",
                "--impl-attr",
                "h",
                "--impl-file",
                impl,
            ]
        )
        lib = [o2] + self.lib
        code = (
            "import sys\n"
            "print([hasattr(f, 'upgrade') for f in sys.meta_path if type(f).__name__ == '_OverlayFinder'])\n"
            "import ovz_a\nprint(ovz_a.f())\n"
        )
        cached = {"PYTHONDONTWRITEBYTECODE": ""}
        self.py("pass", self.o, lib, env=cached)  # both plans
        r = self.py(code, self.o, lib, env=cached)
        for p in self.plans():
            os.unlink(p)
        whole = self.py(code, self.o, lib, env={"PYTHONDONTWRITEBYTECODE": "1"})
        self.assertEqual(whole.stdout.splitlines()[0], "[False, False]", whole.stderr)
        self.assertEqual(r.stdout.splitlines()[0], "[True, True]", r.stderr)
        self.assertEqual(r.stdout.splitlines()[1:], whole.stdout.splitlines()[1:])
        self.assertEqual(sorted(r.stderr.splitlines()), sorted(whole.stderr.splitlines()))
        self.assertIn("is replaced by the rebind of", r.stderr)

    def test_a_start_that_says_or_runs_something_is_the_whole_runtimes(self):
        self.write("lib/ovz_inst.py", "def install():\n    print('installed')\n")
        man = os.path.join(self.o, "_overlay_manifest.json")
        with open(man) as f:
            good = f.read()

        def edit(change):
            m = json.loads(good)
            change(m)
            with open(man, "w") as f:
                json.dump(m, f, indent=2)

        shapes = {
            "a target not importable": lambda m: m["rebinds"].append(
                {"target": "ovz_gone:f", "impl_module": "ovz_impl", "impl_attr": "g"}
            ),
            "an implementation not importable": lambda m: m["rebinds"].append(
                {"target": "ovz_a:f", "impl_module": "ovz_nowhere", "impl_attr": "g"}
            ),
            "a malformed entry": lambda m: m["rebinds"].append({"target": "ovz_a"}),
            "a section this version does not apply": lambda m: m.update(futures=[{"x": 1}]),
            "an installer": lambda m: m.update(installers=[{"id": "i", "module": "ovz_inst"}]),
            "a patched file missing": lambda m: m["modules"].append({"module": "ovz_b", "file": "/nonexistent.py"}),
        }
        for name, change in shapes.items():
            with self.subTest(shape=name):
                edit(change)
                for p in self.plans():
                    os.unlink(p)
                whole, start = self.differ(name, "import ovz_a\nprint(ovz_a.f())\n")
                self.assertEqual(start, whole, name)
                self.assertGreater(len(whole[1]), 1, "%s: the start said nothing" % name)
        # A target imported before the overlay starts (a bootstrap's sitecustomize chains it
        # after importing one): caught up, as the whole runtime does.
        with open(man, "w") as f:
            f.write(good)
        boot = self.write(
            "boot/sitecustomize.py",
            "import ovz_a, runpy\nrunpy.run_path(%r, run_name='sitecustomize')\n"
            % os.path.join(self.o, "sitecustomize.py"),
        )
        self.lib = [self.o] + self.lib
        o, self.o = self.o, os.path.dirname(boot)
        try:
            env = {"PYTHONDONTWRITEBYTECODE": ""}
            self.py("pass", self.o, self.lib, env=env)
            r = self.py("import ovz_a\nprint(ovz_a.f())\n", self.o, self.lib, env=env)
        finally:
            self.o = o
        self.assertEqual((r.stdout, r.returncode), ("fast\n", 0), r.stderr)


if __name__ == "__main__":
    if not BIN:
        sys.exit("set OVERLAY_BIN to the overlay binary")
    unittest.main(verbosity=2)
