#!/usr/bin/env python3
"""Entries that know their target (issue 62): each Python entry records the installed
distribution its target module belongs to (name, version, the .dist-info it was found as); when
that package changes under the overlay (upgraded, removed), `status` says so on the entry's line
and in its JSON, and every process the entry applies in says it once per distribution. Run
through the binary and through the shim, against real interpreters and a site directory laid
out as pip lays one out.

    OVERLAY_BIN=build/overlay distribution_test.py SHIM   (unittest arguments after it)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import through_both

PY = sys.executable
BIN = os.environ.get("OVERLAY_BIN", "")

CHANGED = "was made against fakepkg 1.0; this process has %s: the package changed under the overlay"


class Distribution(unittest.TestCase):
    tool = None  # argv prefix: the binary, or the shim run by python3

    def setUp(self):
        self.t = tempfile.mkdtemp(prefix="distribution-")
        self.addCleanup(shutil.rmtree, self.t, True)
        self.site = os.path.join(self.t, "site")
        self.env = {
            "OVERLAY_CACHE_DIR": os.path.join(self.t, "cache"),
            "OVERLAY_STATE_DIR": os.path.join(self.t, "state"),
            "OVERLAY_BIN": BIN,
            "OVERLAY_PYTHON": PY,
            "PYTHONPATH": os.pathsep.join([self.site, os.path.join(self.t, "plain")]),
        }
        self.write("site/fakepkg/__init__.py", "")
        self.write("site/fakepkg/ops.py", "def compute():\n    return 1\n")
        self.install("fakepkg", "1.0", record="fakepkg/__init__.py,,\nfakepkg/ops.py,,\n")
        # A distribution whose name is not its package's (PyYAML installs yaml): top_level.txt says.
        self.write("site/fyaml.py", "def load():\n    return 'stock'\n")
        self.install("Fake-Yaml", "2.0", top_level="fyaml\n")
        self.write("plain/loose.py", "def f():\n    return 'stock'\n")  # on PYTHONPATH, no distribution
        # A namespace package several distributions share (google.protobuf, google.api_core): none is its.
        self.write("site/nspkg/part.py", "def f():\n    return 'stock'\n")
        self.install("nspkg-part", "3.0", top_level="nspkg\n")
        self.write("impl/fast.py", "def compute():\n    return 2\n")

    def write(self, rel, text):
        p = os.path.join(self.t, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
        return p

    def install(self, name, version, record="", top_level=None, site="site"):
        info = "%s/%s-%s.dist-info" % (site, name.replace("-", "_"), version)
        self.write(
            info + "/METADATA",
            "Metadata-Version: 2.1\nName: %s\nVersion: %s\n\nThe long description.\n" % (name, version),
        )
        self.write(info + "/RECORD", record)
        if top_level is not None:
            self.write(info + "/top_level.txt", top_level)
        return os.path.join(self.t, info)

    def upgrade(self, to):
        for n in os.listdir(self.site):
            if n.startswith("fakepkg-") and n.endswith(".dist-info"):
                shutil.rmtree(os.path.join(self.site, n))
        if to:
            self.install("fakepkg", to, record="fakepkg/__init__.py,,\n")

    def run_tool(self, *args, ok=True):
        r = subprocess.run(self.tool + list(args), capture_output=True, text=True, env=dict(os.environ, **self.env))
        if ok:
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def add_rebind(self, ov="ov", target="fakepkg.ops:compute"):
        ov = os.path.join(self.t, ov)
        impl = "--impl-module fast --impl-attr compute --impl-file".split() + [os.path.join(self.t, "impl/fast.py")]
        self.run_tool("add-rebind", "--overlay", ov, "--target", target, *impl)
        return ov

    def manifest(self, ov):
        with open(os.path.join(ov, "_overlay_manifest.json")) as f:
            return json.load(f)

    def python(self, ov, code, site=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env.update(self.env, PYTHONPATH=os.pathsep.join([ov, site or self.site]))
        return subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, cwd=self.t)

    def status(self, ov):
        r = self.run_tool("--json", "status", "--overlay", ov)
        return {e["name"]: e["distribution"] for e in json.loads(r.stdout)["python"]}

    def test_each_kind_records_the_distribution_of_its_target(self):
        ov = self.add_rebind()
        info = os.path.join(self.site, "fakepkg-1.0.dist-info")
        made = {"name": "fakepkg", "version": "1.0", "dist_info": info}
        self.assertEqual(self.manifest(ov)["rebinds"][0]["distribution"], made)
        self.run_tool("add-marker", "--overlay", ov, "--target", "fakepkg.ops:compute")
        self.run_tool("add-marker", "--overlay", ov, "--target", "fyaml:load")
        self.run_tool("add-marker", "--overlay", ov, "--target", "loose:f")
        self.run_tool("add-marker", "--overlay", ov, "--target", "nspkg.part:f")
        self.run_tool("add-module", "--overlay", ov, "--module", "fakepkg.ops")
        m = self.manifest(ov)
        self.assertEqual(m["markers"][0]["distribution"], made)
        self.assertEqual(m["markers"][1]["distribution"]["name"], "Fake-Yaml")
        self.assertEqual(m["markers"][1]["distribution"]["version"], "2.0")
        self.assertNotIn("distribution", m["markers"][2])  # a folder on PYTHONPATH belongs to none
        self.assertNotIn("distribution", m["markers"][3])
        self.assertEqual(m["modules"][0]["distribution"], made)
        # Adding the same entry again changes nothing: the manifest keeps its bytes.
        with open(os.path.join(ov, "_overlay_manifest.json"), "rb") as f:
            before = f.read()
        self.add_rebind()
        with open(os.path.join(ov, "_overlay_manifest.json"), "rb") as f:
            self.assertEqual(f.read(), before)

    def test_a_package_upgraded_under_the_overlay_is_said_once_per_process_and_by_status(self):
        ov = self.add_rebind()
        self.run_tool("add-marker", "--overlay", ov, "--target", "fakepkg.ops:compute")
        code = "import fakepkg.ops\nprint(fakepkg.ops.compute())\n"
        r = self.python(ov, code)
        self.assertEqual(r.stdout, "2\n", r.stderr)
        self.assertNotIn("changed under the overlay", r.stderr)
        self.assertEqual(self.status(ov)["fakepkg.ops:compute"]["changed"], False)
        self.upgrade("1.1")
        r = self.python(ov, code)
        self.assertEqual(r.stdout, "2\n", r.stderr)  # it still applies: the warning is evidence, not a veto
        self.assertEqual(r.stderr.count(CHANGED % "fakepkg 1.1"), 1, r.stderr)
        d = self.status(ov)["fakepkg.ops:compute"]
        self.assertEqual((d["changed"], d["version"], d["installed_now"]), (True, "1.0", "1.1"))
        text = self.run_tool("status", "--overlay", ov).stdout
        self.assertIn("PACKAGE CHANGED: made against fakepkg 1.0, fakepkg 1.1 installed now", text)
        self.upgrade(None)  # removed
        r = self.python(ov, code)
        self.assertEqual(r.stderr.count(CHANGED % "no fakepkg installed"), 1, r.stderr)
        self.assertEqual(self.status(ov)["fakepkg.ops:compute"]["installed_now"], None)

    def test_the_same_version_elsewhere_is_the_same_package(self):
        # The overlay replayed where the package sits at another path: same version, nothing said.
        ov = self.add_rebind()
        other = os.path.join(self.t, "other")
        shutil.copytree(self.site, other)
        shutil.rmtree(self.site)
        r = self.python(ov, "import fakepkg.ops\nprint(fakepkg.ops.compute())\n", site=other)
        self.assertEqual(r.stdout, "2\n", r.stderr)
        self.assertNotIn("changed under the overlay", r.stderr)

    def test_merge_takes_one_entry_made_against_two_versions(self):
        a = self.add_rebind("a")
        self.upgrade("1.1")
        b = self.add_rebind("b")
        self.assertEqual(self.manifest(b)["rebinds"][0]["distribution"]["version"], "1.1")
        out = os.path.join(self.t, "merged")
        self.run_tool("merge", "--overlay", out, "--from", a, "--with", b)
        self.assertEqual(self.manifest(out)["rebinds"], self.manifest(a)["rebinds"])


class DistributionByTheShim(Distribution):
    pass


if __name__ == "__main__":
    through_both.main(Distribution, DistributionByTheShim)
