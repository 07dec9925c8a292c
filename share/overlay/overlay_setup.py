#!/usr/bin/env python3
"""overlay_setup.py, as the `overlay` binary provides it: a drop-in for the pipeline's copy.

Run by path (python3 overlay_setup.py SUBCOMMAND ...) or as a module (python3 -m overlay_setup ...)
it runs the overlay binary with the same arguments: same stdout, stderr and exit status.
Imported, it offers the module API of upstream's overlay_setup.py (v3, and v7's additions):

    main(argv=None)                 run one command line (sys.argv[1:] by default); output goes
                                    through sys.stdout/sys.stderr; failure: SystemExit(status),
                                    whose str() is the error line
    cmd_add_module(a)               add-module from an argparse-style namespace (also
    cmd_add_rebind(a)               cmd_add_rebind, cmd_add_capture, cmd_add_marker,
    cmd_add_installer(a)            cmd_add_installer: the same attribute names as upstream's)
    cmd_add_hook(a)                 the forks' post-import hook, and their two vLLM shorthands
    cmd_add_vllm_phase_annotation(a), cmd_add_vllm_semantic_capture(a)   (files beside this file)
    cmd_check(a)                    where a.module resolves from in this interpreter, and whether
                                    the overlay shadows it
    _try_apply(patch, target_file=None, cwd=None)   upstream's patch ladder (patch, git apply),
                                    through subprocess.run; cmd_add_module applies a.patch with it
    _ensure_overlay(dir, base="")   create the overlay (manifest, sitecustomize.py) if missing;
                                    seed it from base when it has no manifest; returns the
                                    manifest's path; FileExistsError when dir is a file,
                                    PermissionError when it cannot be written, OverlayError (a
                                    RuntimeError, never SystemExit) naming any other reason
    _load_man(path), _save_man(path, m)   read / write a manifest (written whole, atomically)
    merge_overlays(output, sources) compose any number of overlays into a fresh one; ValueError
    SITECUSTOMIZE                   the sitecustomize.py text the binary writes
    LEGACY_SITECUSTOMIZE            the runtime as it was before installers (still recognised)
    module_file(dotted), pkg_root(package)

The binary is asked with this interpreter as the Python that locates modules (OVERLAY_PYTHON,
unless the caller set it). add-capture and add-marker without a hook file copy the
capture_shapes.py / seam_trace.py that sit beside this file, as upstream does, when there are
such files; else the binary's own. The binary is $OVERLAY_BIN, else the one in this file's
install prefix (PREFIX/share/overlay/ -> PREFIX/bin/overlay, or the scripts folder of the
environment it was installed into), else `overlay` on PATH. Standard library only; Python >= 3.8.
"""
import argparse
import errno
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys

__all__ = [
    "main",
    "OverlayError",
    "_ensure_overlay",
    "_load_man",
    "_save_man",
    "merge_overlays",
    "module_file",
    "pkg_root",
    "overlay_binary",
    "cmd_add_module",
    "cmd_add_rebind",
    "cmd_add_capture",
    "cmd_add_marker",
    "cmd_add_installer",
    "cmd_add_hook",
    "cmd_add_vllm_phase_annotation",
    "cmd_add_vllm_semantic_capture",
    "cmd_check",
    "_try_apply",
    "SITECUSTOMIZE",
    "LEGACY_SITECUSTOMIZE",
]

_HERE = os.path.dirname(os.path.realpath(__file__))


def _executable(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def overlay_binary():
    """The overlay binary this shim runs; SystemExit with one line when there is none."""
    env = os.environ.get("OVERLAY_BIN")
    if env:
        if not _executable(env):
            raise SystemExit("overlay_setup.py: OVERLAY_BIN is not an executable file: %s" % env)
        return env
    candidates = [os.path.join(os.path.dirname(os.path.dirname(_HERE)), "bin", "overlay")]
    scripts = os.path.join(sys.prefix, "bin", "overlay")  # a wheel installs the binary as a script
    if os.path.commonpath([_HERE, sys.prefix]) == sys.prefix:
        candidates.append(scripts)
    for c in candidates:
        if _executable(c):
            return c
    found = shutil.which("overlay")
    if found:
        return found
    raise SystemExit("overlay_setup.py: cannot find the overlay binary (set OVERLAY_BIN or put overlay on PATH)")


class OverlayExit(SystemExit):
    """A failed command: .code is the binary's exit status, str() its error line."""

    def __init__(self, code, message):
        super().__init__(code)
        self.message = message

    def __str__(self):
        return self.message


class OverlayError(RuntimeError):
    """A failed call of the module API that returns a value (_ensure_overlay): an exception an
    importing agent can catch, where the cmd_* functions end the run as upstream's do.
    str() is the binary's error line, .code its exit status."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def _env():
    env = dict(os.environ)
    if sys.executable:
        env.setdefault("OVERLAY_PYTHON", sys.executable)
    return env


def _is_real(stream, original):
    try:
        return stream is original and stream.fileno() >= 0
    except Exception:
        return False


def _write(stream, data):
    text = data.decode("utf-8", "surrogateescape")
    try:
        stream.write(text)
    except UnicodeEncodeError:
        stream.write(data.decode("utf-8", "replace"))


def _pump_stderr(pipe, straight, chunks):
    """Reads the binary's stderr to its end: each chunk kept (the error line a SystemExit carries)
    and, where stderr is the process's own, written to descriptor 2 as it comes (a long build
    streams)."""
    while True:
        chunk = os.read(pipe.fileno(), 65536)
        if not chunk:
            return
        chunks.append(chunk)
        if straight:
            os.write(2, chunk)


def _call(args, echo_out=True, echo_err=True):
    """Runs the binary; returns (status, stdout bytes, stderr bytes). What it prints goes through
    sys.stdout/sys.stderr (straight to the descriptors where those are the process's own, so a
    long build streams); stderr is read by this process either way, so a failure's SystemExit
    names the binary's error line. subprocess.Popen, not subprocess.run: a caller's mock of run
    stays theirs."""
    import threading

    cmd = [overlay_binary()] + [os.fspath(a) for a in args]
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # what was printed before comes first
        except Exception:
            pass
    out_straight = echo_out and _is_real(sys.stdout, sys.__stdout__)
    err_straight = echo_err and _is_real(sys.stderr, sys.__stderr__)
    p = subprocess.Popen(cmd, stdout=None if out_straight else subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    chunks = []
    pump = threading.Thread(target=_pump_stderr, args=(p.stderr, err_straight, chunks), daemon=True)
    pump.start()
    out = p.stdout.read() if p.stdout is not None else b""
    p.wait()
    pump.join()
    p.stderr.close()
    if p.stdout is not None:
        p.stdout.close()
    err = b"".join(chunks)
    if echo_out and out and not out_straight:
        _write(sys.stdout, out)
    if echo_err and err and not err_straight:
        _write(sys.stderr, err)
    return p.returncode, out, err


def _last_line(err, fallback):
    lines = [l for l in err.decode("utf-8", "replace").splitlines() if l.strip()]
    return lines[-1] if lines else fallback


def _status(rc):
    return rc if rc > 0 else 128 - rc


def _run_or_exit(args, **echo):
    rc, out, err = _call(args, **echo)
    if rc != 0:
        raise OverlayExit(_status(rc), _last_line(err, "overlay %s failed (exit %d)" % (args[0] if args else "", rc)))
    return out


def _beside(name):
    """Upstream's hook file that sits beside this script, if any (add-capture/add-marker copy it)."""
    p = os.path.join(_HERE, name)
    return p if os.path.isfile(p) else ""


def _flag(argv, name):
    """The value of --name in argv (either form), or None."""
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1 :]
    return None


def _completed(argv):
    """argv with what upstream decides in its own process filled in: the installed module
    add-module copies, the hook files beside the script."""
    if not argv:
        return argv
    verb, argv = argv[0], list(argv)
    # (The legacy --package/--subpath pair is left to the binary, which asks this same interpreter.)
    module = _flag(argv, "--module")
    if (
        verb in ("add-module", "copy-subtree")
        and module
        and _flag(argv, "--patched-file") is None
        and _flag(argv, "--src-file") is None
        and _flag(argv, "--python") is None
    ):
        argv += ["--src-file", module_file(module)]
    for v, flag, name in (
        ("add-capture", "--capture-file", "capture_shapes.py"),
        ("add-marker", "--marker-file", "seam_trace.py"),
    ):
        if verb == v and _flag(argv, flag) is None and _beside(name):
            argv += [flag, _beside(name)]
    return argv


def main(argv=None):
    """Runs one command line through the binary; OverlayExit (a SystemExit) when it fails."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "check" and _flag(argv, "--python") is None and "--json" not in argv:
        return _main_check(argv[1:])
    if argv and argv[0] in _FILES_BESIDE_VERBS:
        return _main_vllm(argv[0], argv[1:])  # wire the files beside this script, as the fork does
    _run_or_exit(_completed(argv))


def _main_check(args):
    p = argparse.ArgumentParser(prog="overlay_setup.py check")
    p.add_argument("--module", required=True)
    p.add_argument("--path-only", action="store_true", dest="path_only")
    cmd_check(p.parse_args(args))


def _get(a, name, default=""):
    v = getattr(a, name, default)
    return default if v is None else v


def _common(verb, a):
    args = [verb, "--overlay", os.fspath(a.overlay)]
    if _get(a, "base"):
        args += ["--from", os.fspath(a.base)]
    return args


def _try_apply(patch, target_file=None, cwd=None):
    """Upstream's patch ladder, run as upstream runs it (subprocess.run, so a caller's mock or
    wrapper sees every attempt): for a target file `patch FILE -i PATCH`, then `git apply
    --unsafe-paths --directory=DIR PATCH`; in a cwd `git apply PATCH`, then `patch -p1 -i PATCH`
    (cwd handed to every attempt). A tool that is not installed falls through to the next; the
    first zero exit wins. True when one did; nothing to try is False."""
    attempts = []
    if target_file:
        attempts += [
            ["patch", target_file, "-i", patch],
            ["git", "apply", "--unsafe-paths", "--directory=%s" % os.path.dirname(target_file), patch],
        ]
    if cwd:
        attempts += [["git", "apply", patch], ["patch", "-p1", "-i", patch]]
    for argv in attempts:
        try:
            r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
        except FileNotFoundError:
            continue
        if r.returncode == 0:
            return True
    return False


def _patched_copy(a):
    """add-module --patch as upstream does it: the source copied to the overlay's _patched/ file,
    the diff applied there with _try_apply. Returns that file. A diff that does not apply ends the
    run (SystemExit, `failed to apply patch`) with the manifest unchanged: a module it names keeps
    the code it had (its file put back), a new one's unpatched copy is left inert, as upstream
    leaves it, and a reject file the attempt made is removed."""
    src = _get(a, "src_file") or module_file(a.module)
    if os.path.basename(os.fspath(src)) == "__init__.py":  # the binary's refusal, before anything is written
        _run_or_exit(["add-module", "--overlay", os.fspath(a.overlay), "--module", a.module, "--src-file", src])
    _ensure_overlay(a.overlay, _get(a, "base"))
    dst = os.path.join(os.fspath(a.overlay), "_patched", a.module + ".py")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    previous = None
    if os.path.isfile(dst):
        with open(dst, "rb") as f:
            previous = f.read()
    litter = [p for p in (dst + ".rej", dst + ".orig") if not os.path.lexists(p)]
    shutil.copy2(src, dst)
    if _try_apply(os.path.abspath(os.fspath(a.patch)), target_file=dst):
        return dst
    for p in litter:
        if os.path.lexists(p):
            os.unlink(p)
    if previous is not None:
        with open(dst, "wb") as f:
            f.write(previous)
    raise OverlayExit(1, "failed to apply patch %s to %s" % (a.patch, dst))


def cmd_add_module(a):
    args = _common("add-module", a) + ["--module", a.module]
    if _get(a, "patched_file"):
        args += ["--patched-file", a.patched_file]
    elif _get(a, "patch"):
        args += ["--patched-file", _patched_copy(a)]
    else:
        args += ["--src-file", _get(a, "src_file") or module_file(a.module)]
    _run_or_exit(args)


def cmd_add_rebind(a):
    args = _common("add-rebind", a) + ["--target", a.target, "--impl-module", a.impl_module, "--impl-attr", a.impl_attr]
    if _get(a, "impl_file"):
        args += ["--impl-file", a.impl_file]
    if _get(a, "impl_dir"):
        args += ["--impl-dir", a.impl_dir]
    _run_or_exit(args)


def cmd_add_capture(a):
    args = _common("add-capture", a) + ["--target", a.target, "--out", a.out, "--max", str(int(_get(a, "max", 5)))]
    hook = _get(a, "capture_file") or _beside("capture_shapes.py")
    if hook:
        args += ["--capture-file", hook]
    _run_or_exit(args)


def cmd_add_marker(a):
    args = _common("add-marker", a) + ["--target", a.target]
    hook = _get(a, "marker_file") or _beside("seam_trace.py")
    if hook:
        args += ["--marker-file", hook]
    _run_or_exit(args)


def cmd_add_installer(a):
    args = _common("add-installer", a) + [
        "--id",
        a.id,
        "--module",
        a.module,
        "--callable",
        _get(a, "callable", "install"),
    ]
    for t in _get(a, "target", []) or []:
        args += ["--target", t]
    for k in _get(a, "kernel", []) or []:
        args += ["--kernel", k]
    _run_or_exit(args)


def cmd_add_hook(a):
    """add-hook: after a.module finishes importing, a.impl_module.a.impl_attr() runs (the forks')."""
    args = _common("add-hook", a) + [
        "--module",
        a.module,
        "--impl-module",
        a.impl_module,
        "--impl-attr",
        _get(a, "impl_attr", "install") or "install",
    ]
    if _get(a, "impl_file"):
        args += ["--impl-file", a.impl_file]
    _run_or_exit(args)


_VLLM_RUNNER = "vllm.v1.worker.gpu_model_runner"
# The fork's verbs that take their files from beside the script: run in this process.
_FILES_BESIDE_VERBS = ("add-vllm-phase-annotation", "add-vllm-semantic-capture", "add-triton-launch-probe")
_SEMANTIC_FILES = ("vllm_semantic_capture.py", "semantic_runtime_capture.py", "vllm_phase_annotate.py")


def _script_dir():
    # Beside this file as it was reached (upstream's abspath, not its real path): the scripts
    # folder the pipeline lays the hook files into.
    return os.path.dirname(os.path.abspath(__file__))


def cmd_add_vllm_phase_annotation(a):
    """The fork's shorthand: vllm_phase_annotate.py (a.impl_file, else beside this file) wired as a
    post-import hook (install()) on a.module, vLLM's model runner by default. A missing file ends
    the run before anything is written."""
    impl = _get(a, "impl_file") or os.path.join(_script_dir(), "vllm_phase_annotate.py")
    if not os.path.exists(impl):
        raise SystemExit("vllm_phase_annotate.py not found at %s" % impl)
    a.module = _get(a, "module") or _VLLM_RUNNER
    a.impl_file, a.impl_module, a.impl_attr = impl, "vllm_phase_annotate", "install"
    cmd_add_hook(a)


_TRITON_JIT = "triton.runtime.jit"


def cmd_add_triton_launch_probe(a):
    """The fork's add-triton-launch-probe: its triton_launch_probe.py (beside this file only) wired
    as a post-import hook (install()) on a.module, Triton's JIT module by default. A missing probe
    ends the run before anything is written."""
    probe = os.path.join(_script_dir(), "triton_launch_probe.py")
    if not os.path.exists(probe):
        raise SystemExit("triton_launch_probe.py not found at %s" % probe)
    module = _get(a, "module") or _TRITON_JIT
    _run_or_exit(_common("add-triton-launch-probe", a) + ["--module", module, "--probe-file", probe])


def cmd_add_vllm_semantic_capture(a):
    """The fork's semantic shape probe: its three modules (beside this file) copied into the
    overlay together, vllm_semantic_capture.install() wired as a post-import hook on a.module. A
    missing one ends the run before anything is written."""
    here = _script_dir()
    missing = [n for n in _SEMANTIC_FILES if not os.path.exists(os.path.join(here, n))]
    if missing:
        raise SystemExit("missing capture module(s) beside overlay_setup.py: %s" % ", ".join(missing))
    _ensure_overlay(a.overlay, _get(a, "base"))
    for name in _SEMANTIC_FILES:
        shutil.copy2(os.path.join(here, name), os.path.join(os.fspath(a.overlay), name))
    a.module = _get(a, "module") or _VLLM_RUNNER
    a.impl_file, a.impl_module, a.impl_attr = "", "vllm_semantic_capture", "install"
    cmd_add_hook(a)


def _main_vllm(verb, args):
    p = argparse.ArgumentParser(prog="overlay_setup.py " + verb)
    p.add_argument("--overlay", required=True)
    p.add_argument("--module", default=_VLLM_RUNNER)
    p.add_argument("--from", dest="base", default="")
    if verb == "add-triton-launch-probe":
        p.set_defaults(module=_TRITON_JIT)
        return cmd_add_triton_launch_probe(p.parse_args(args))
    if verb == "add-vllm-phase-annotation":
        p.add_argument("--impl-file", default="", dest="impl_file")
        return cmd_add_vllm_phase_annotation(p.parse_args(args))
    return cmd_add_vllm_semantic_capture(p.parse_args(args))


def _in_overlay(path):
    d = os.path.dirname(os.path.abspath(path))
    while True:
        if os.path.isfile(os.path.join(d, "_overlay_manifest.json")):
            return True
        up = os.path.dirname(d)
        if up == d:
            return False
        d = up


def cmd_check(a):
    """As `overlay check`, asked of this interpreter as it is now (its sys.path and sys.modules):
    OVERLAY_ACTIVE for an overlay's _patched/ file, INJECTED for another file of an overlay,
    INSTALL otherwise (upstream calls every plain top-level module INJECTED)."""
    f = module_file(a.module)
    if getattr(a, "path_only", False):
        print(f)
        return
    print("%s -> %s" % (a.module, f))
    if os.sep + "_patched" + os.sep in f:
        print("OVERLAY_ACTIVE")
    elif os.path.isabs(f) and _in_overlay(f):
        print("INJECTED")
    else:
        print("INSTALL (overlay not shadowing this module)")


def _ensure_overlay(overlay, base=""):
    """The overlay exists with a manifest and a sitecustomize.py; returns the manifest's path.
    Silent, as upstream's; FileExistsError when overlay is a file, PermissionError when it
    cannot be written, OverlayError with the binary's reason otherwise (a path with ':', which
    PYTHONPATH would split)."""
    overlay = os.fspath(overlay)
    if os.path.exists(overlay) and not os.path.isdir(overlay):
        raise FileExistsError(errno.EEXIST, "overlay is not a directory", overlay)
    args = ["ensure-overlay", "--overlay", overlay]
    if base:
        args += ["--from", os.fspath(base)]
    try:
        rc, _, err = _call(args, echo_out=False, echo_err=False)
    except SystemExit as e:  # no binary to run: an error the importing agent can catch, never its exit
        raise OverlayError(127, str(e)) from None
    if rc != 0:
        line = _last_line(err, "ensure-overlay failed (exit %d)" % rc)
        if "Permission denied" in line or "Read-only file system" in line:
            raise PermissionError(errno.EACCES, line, overlay)
        raise OverlayError(_status(rc), line)
    return os.path.join(overlay, "_overlay_manifest.json")


def _load_man(man):
    with open(man) as fh:
        return json.load(fh)


def _save_man(man, m):
    """Writes the manifest as upstream does (json, indent 2), whole or not at all, under the
    overlay's lock (the binary's: flock on the overlay directory)."""
    import fcntl

    man = os.fspath(man)
    d = os.path.dirname(os.path.abspath(man))
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        tmp = "%s.%d.tmp" % (man, os.getpid())
        try:
            with open(tmp, "w") as fh:
                json.dump(m, fh, indent=2)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, man)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    finally:
        os.close(fd)


def merge_overlays(output, sources):
    """A fresh overlay at output holding the union of sources (any number, in order); ValueError
    naming the conflict when they disagree, with nothing written."""
    sources = [os.fspath(s) for s in sources if s]
    if not sources:
        raise ValueError("merge_overlays needs at least one source overlay")
    args = ["merge", "--overlay", os.fspath(output)]
    for s in sources:
        args += ["--with", s]
    rc, _, err = _call(args, echo_out=False, echo_err=False)
    if rc != 0:
        raise ValueError(_last_line(err, "merge failed (exit %d)" % rc))
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


_TEXTS = {}


def __getattr__(name):  # PEP 562: the texts are asked of the binary when first read
    flags = {"SITECUSTOMIZE": [], "LEGACY_SITECUSTOMIZE": ["--legacy"]}
    if name in flags:
        if name not in _TEXTS:
            rc, out, err = _call(["sitecustomize-text"] + flags[name], echo_out=False, echo_err=False)
            if rc != 0:
                raise AttributeError(
                    "%s: overlay sitecustomize-text failed: %s" % (name, _last_line(err, "exit %d" % rc))
                )
            _TEXTS[name] = out.decode("utf-8")
        return _TEXTS[name]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


if __name__ == "__main__":
    if sys.argv[1:2] and sys.argv[1] in _FILES_BESIDE_VERBS:
        main()  # the shim's own verbs (they wire the files beside it); SystemExit says why not
        sys.exit(0)
    try:
        binary = overlay_binary()
        argv = _completed(sys.argv[1:])
    except SystemExit as e:
        sys.stderr.write("%s\n" % e)
        sys.exit(1)
    env = _env()
    os.execve(binary, [binary] + argv, env)
