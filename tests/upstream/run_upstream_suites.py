#!/usr/bin/env python3
"""Runs upstream GEAK's own unit suites of overlay_setup.py against the shim, unmodified.

    run_upstream_suites.py OVERLAY_BINARY SHIM DOCS_CLI_MD [--shared DIR]

Each suite runs as upstream lays it out (scripts/overlay_setup.py, capture_shapes.py and
seam_trace.py beside it, an empty e2e_store.py, the test files in scripts/tests/), first with
the upstream version each file was written for (v3, v7: which tests hold at all), then with the
shim driving OVERLAY_BINARY. Prints the tally of each. Passes when the shim fails exactly the
tests docs/cli.md lists under "Upstream tests the shim fails by design" (a listed test that now
passes fails the run too: the list must stay true). Exit 77 (skipped) without ../shared or pytest.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

SUITES = ("test_overlay_setup.py", "test_overlay_installers.py")
EXPECTED_ROW = re.compile(r"^\|\s*`(test_overlay_\w+\.py::[^`]+)`\s*\|")


def layout(root, tool, upstream):
    scripts = os.path.join(root, "scripts")
    os.makedirs(os.path.join(scripts, "tests"))
    shutil.copy(tool, os.path.join(scripts, "overlay_setup.py"))
    for hook in ("capture_shapes.py", "seam_trace.py"):
        shutil.copy(os.path.join(upstream, hook), scripts)
    open(os.path.join(scripts, "e2e_store.py"), "w").close()  # upstream's store client is not held here
    for suite in SUITES:
        shutil.copy(os.path.join(upstream, "tests", suite), os.path.join(scripts, "tests"))
    return scripts


def run(tool, upstream, env):
    """{test id: "passed" | "failed" | "skipped"} for one tool."""
    with tempfile.TemporaryDirectory(prefix="upstream-suites-") as root:
        scripts = layout(root, tool, upstream)
        xml = os.path.join(root, "results.xml")
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short", "--junitxml", xml, "tests"],
            cwd=scripts,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        if not os.path.exists(xml):
            raise SystemExit("pytest wrote no results for %s" % tool)
        results = {}
        for case in ET.parse(xml).iter("testcase"):
            parts = case.get("classname", "").split(".")  # tests.test_overlay_setup[.TestClass]
            test_id = "%s.py::%s" % (parts[1], "::".join(parts[2:] + [case.get("name")]))
            state = "passed"
            for child in case:
                if child.tag in ("failure", "error"):
                    state = "failed"
                elif child.tag == "skipped" and state == "passed":
                    state = "skipped"
            results[test_id] = state
        return results


def tally(results, suite):
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for test_id, state in results.items():
        if test_id.startswith(suite + "::"):
            counts[state] += 1
    return counts


def expected_failures(docs):
    with open(docs) as f:
        return {m.group(1) for m in (EXPECTED_ROW.match(line) for line in f) if m}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("shim")
    ap.add_argument("docs")
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
    a = ap.parse_args()
    upstream = os.path.join(os.path.abspath(a.shared), "reference", "upstream")
    if not os.path.isdir(os.path.join(upstream, "tests")):
        print("SKIP: upstream's suites are not here (%s/tests): they come with ../shared" % upstream)
        # CI (OVERLAY_REQUIRE_SHARED=1) has them: there a missing copy fails, never skips.
        return 1 if os.environ.get("OVERLAY_REQUIRE_SHARED", "0") != "0" else 77
    try:
        import pytest  # noqa: F401
    except ImportError:
        print("SKIP: pytest is not installed for %s (Debian: python3-pytest)" % sys.executable)
        return 77
    # Python's default bytecode writing, as a developer's run of upstream's suites has it, and then
    # the shim again with it off, as in serving images (issue 62: the tool wrote the runtime's
    # bytecode into each overlay then, which those suites list). The runtime's cache: this run's.
    cache = tempfile.mkdtemp(prefix="upstream-suites-cache-")
    env = dict(os.environ, OVERLAY_BIN=os.path.abspath(a.binary), OVERLAY_CACHE_DIR=cache)
    env.pop("OVERLAY_PYTHON", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    tools = [
        ("upstream v3", os.path.join(upstream, "overlay_setup.v3.py"), env),
        ("upstream v7", os.path.join(upstream, "overlay_setup.v7.py"), env),
        ("shim", os.path.abspath(a.shim), env),
        ("shim, no .pyc", os.path.abspath(a.shim), dict(env, PYTHONDONTWRITEBYTECODE="1")),
    ]
    try:
        results = {name: run(path, upstream, e) for name, path, e in tools}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print("%-28s %-12s %7s %7s %7s" % ("suite", "tool", "passed", "failed", "skipped"))
    for suite in SUITES:
        for name, _, _ in tools:
            c = tally(results[name], suite)
            print("%-28s %-12s %7d %7d %7d" % (suite, name, c["passed"], c["failed"], c["skipped"]))
    expected = expected_failures(a.docs)
    if not expected:
        print("FAIL: %s lists no upstream tests the shim fails by design (the table is gone?)" % a.docs)
        return 1
    bad = [judge(results[name], name, expected, a.docs) for name in ("shim", "shim, no .pyc")]
    return 1 if any(bad) else 0


def judge(shim, name, expected, docs):
    """Whether the shim's run (`name`) failed other tests than docs lists, or passed one it lists."""
    failed = {t for t, s in shim.items() if s == "failed"}
    unknown = sorted(t for t in expected if t not in shim)
    surprise = sorted(failed - expected)
    stale = sorted(t for t in expected - failed if t in shim)
    for t in surprise:
        print("FAIL: %s fails against the %s and is not listed in %s" % (t, name, docs))
    for t in stale:
        print("FAIL: %s is listed in %s as failing by design, but against the %s it %s" % (t, docs, name, shim[t]))
    for t in unknown:
        print("FAIL: %s is listed in %s but upstream's suites have no such test" % (t, docs))
    print(
        "%s: %d of %d upstream tests pass; %d fail by design (listed in %s)"
        % (
            name,
            sum(1 for s in shim.values() if s == "passed"),
            len(shim),
            len(failed & expected),
            os.path.basename(docs),
        )
    )
    return bool(surprise or stale or unknown)


if __name__ == "__main__":
    sys.exit(main())
