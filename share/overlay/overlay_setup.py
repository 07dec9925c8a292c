#!/usr/bin/env python3
"""overlay_setup.py, as the `overlay` binary provides it: a drop-in for the pipeline's copy.

Run by path (python3 overlay_setup.py SUBCOMMAND ...) or as a module (python3 -m overlay_setup ...)
it runs the overlay binary with the same arguments: same stdout, stderr and exit status.
Imported, it offers what callers of the Python tool use:

    main(argv=None)                 run one command line (sys.argv[1:] by default)
    _ensure_overlay(dir, base="")   create the overlay (manifest, sitecustomize.py); seed it from
                                    base when it has no manifest; returns the manifest's path
    merge_overlays(output, sources) compose overlays into a fresh one (`overlay merge`)
    SITECUSTOMIZE                   the sitecustomize.py text the binary writes
    module_file(dotted)             the installed file of a module
    pkg_root(package)               the directory of a package

The binary is $OVERLAY_BIN, else the one in this file's install prefix (PREFIX/share/overlay/ ->
PREFIX/bin/overlay, or the scripts folder of the environment it was installed into), else
`overlay` on PATH. Standard library only; Python >= 3.8. Copied into a task folder it still works.
"""
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys

__all__ = ["main", "_ensure_overlay", "merge_overlays", "module_file", "pkg_root", "overlay_binary", "SITECUSTOMIZE"]


def _executable(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def overlay_binary():
    """The overlay binary this shim runs; SystemExit with one line when there is none."""
    env = os.environ.get("OVERLAY_BIN")
    if env:
        if not _executable(env):
            raise SystemExit("overlay_setup.py: OVERLAY_BIN is not an executable file: %s" % env)
        return env
    here = os.path.dirname(os.path.realpath(__file__))
    candidates = [os.path.join(os.path.dirname(os.path.dirname(here)), "bin", "overlay")]
    scripts = os.path.join(sys.prefix, "bin", "overlay")  # a wheel installs the binary as a script
    if os.path.commonpath([here, sys.prefix]) == sys.prefix:
        candidates.append(scripts)
    for c in candidates:
        if _executable(c):
            return c
    found = shutil.which("overlay")
    if found:
        return found
    raise SystemExit("overlay_setup.py: cannot find the overlay binary (set OVERLAY_BIN or put overlay on PATH)")


def _run(args, capture=False):
    cmd = [overlay_binary()] + list(args)
    if not capture:
        for stream in (sys.stdout, sys.stderr):  # what was printed before comes first
            try:
                stream.flush()
            except Exception:
                pass
        return subprocess.call(cmd)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", errors="surrogateescape")


def main(argv=None):
    """Runs one command line through the binary; SystemExit(status) when it fails."""
    argv = sys.argv[1:] if argv is None else list(argv)
    rc = _run(argv)
    if rc != 0:
        raise SystemExit(rc if rc > 0 else 128 - rc)


def _json_of(args, what):
    r = _run(["--json"] + list(args), capture=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "%s failed (exit %d)" % (what, r.returncode)
        raise SystemExit(last)
    if r.stderr:
        sys.stderr.write(r.stderr)
    return json.loads(r.stdout)


def _ensure_overlay(overlay, base=""):
    """The overlay exists with a manifest and a sitecustomize.py; returns the manifest's path."""
    args = ["ensure-overlay", "--overlay", os.fspath(overlay)]
    if base:
        args += ["--from", os.fspath(base)]
    return _json_of(args, "_ensure_overlay")["manifest"]


def merge_overlays(output, sources):
    """A fresh overlay at output holding the union of sources (one or two overlays)."""
    sources = [os.fspath(s) for s in sources if s]
    if not 1 <= len(sources) <= 2:
        raise ValueError("merge_overlays takes one or two source overlays")
    args = ["merge", "--overlay", os.fspath(output), "--with", sources[-1]]
    if len(sources) == 2:
        args += ["--from", sources[0]]
    r = _run(args, capture=True)
    if r.returncode != 0:
        raise ValueError(r.stderr.strip() or "merge failed (exit %d)" % r.returncode)
    return os.path.abspath(output)


def module_file(dotted):
    """Absolute path of the installed file backing a dotted module name."""
    spec = importlib.util.find_spec(dotted)
    if spec is None or not spec.origin or spec.origin in ("namespace", "built-in", "frozen"):
        raise SystemExit("cannot find a file for module %s" % dotted)
    return spec.origin


def pkg_root(package):
    """The directory a package (or module) lives in."""
    mod = importlib.import_module(package)
    f = getattr(mod, "__file__", None)
    if f:
        return os.path.dirname(f)
    paths = list(getattr(mod, "__path__", []))
    if not paths:
        raise SystemExit("cannot locate package root for %s" % package)
    return paths[0]


_TEXT = []


def __getattr__(name):  # PEP 562: SITECUSTOMIZE is asked of the binary when first read
    if name == "SITECUSTOMIZE":
        if not _TEXT:
            r = _run(["sitecustomize-text"], capture=True)
            if r.returncode != 0:
                raise AttributeError("SITECUSTOMIZE: overlay sitecustomize-text failed: %s" % r.stderr.strip())
            _TEXT.append(r.stdout)
        return _TEXT[0]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


if __name__ == "__main__":
    try:
        binary = overlay_binary()
    except SystemExit as e:
        sys.stderr.write("%s\n" % e)
        sys.exit(1)
    os.execv(binary, [binary] + sys.argv[1:])
