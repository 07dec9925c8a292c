"""Default marker hook of overlay (add-marker): wraps one module:attr so each call runs inside a
torch.profiler range named GEAK_TARGET::<target>, which the pipeline finds in a profile trace to
tell which kernels ran under which candidate seam.

Contract (as overlay_setup.py's seam_trace.py): install(target), target "module:attr" where attr
may be dotted (Class.method). Idempotent per target. Only plain Python callables are wrapped: a
Python stand-in for a builtin or a triton JIT object changes how its callers reach it, so those
are refused with one RuntimeError line (mark a Python caller of it instead). Without torch the
wrapper only calls through.
"""
import functools
import importlib
import inspect
import sys
import types

MARKER_PREFIX = "GEAK_TARGET::"
_INSTALLED = {}  # target -> the original callable
_RECORD_FUNCTION = []  # [torch.profiler.record_function or None], looked up on the first call


def _record_function():
    if not _RECORD_FUNCTION:
        try:
            import torch

            _RECORD_FUNCTION.append(torch.profiler.record_function)
        except Exception:
            _RECORD_FUNCTION.append(None)
    return _RECORD_FUNCTION[0]


def _wrappable(value):
    """A callable whose calling convention a Python wrapper keeps."""
    if isinstance(value, (types.FunctionType, types.MethodType, functools.partial)):
        return True
    if isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return False
    if any(hasattr(value, a) for a in ("fn", "cache", "warmup", "run", "__torch_dispatch__")):
        return False  # a JIT object: its callers read these off it
    return callable(value) and type(value).__module__ != "builtins"


def _owner_of(target):
    if not isinstance(target, str) or ":" not in target:
        raise ValueError("target must be module:attr, got %r" % (target,))
    module_name, attr = target.split(":", 1)
    owner = importlib.import_module(module_name)
    parts = attr.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    return owner, parts[-1]


def install(target):
    """Wraps target with a GEAK_TARGET::<target> profiler range; a second call does nothing."""
    if target in _INSTALLED:
        return
    owner, leaf = _owner_of(target)
    original = getattr(owner, leaf)
    if not _wrappable(original):
        raise RuntimeError(
            "cannot safely mark non-Python callable %s (%s.%s): mark a Python caller of it"
            % (target, type(original).__module__, type(original).__name__)
        )
    name = MARKER_PREFIX + target

    @functools.wraps(original)
    def marked(*args, **kwargs):
        rf = _record_function()
        if rf is None:
            return original(*args, **kwargs)
        with rf(name):
            return original(*args, **kwargs)

    try:
        marked.__signature__ = inspect.signature(original)
    except (TypeError, ValueError):
        pass
    _INSTALLED[target] = original
    setattr(owner, leaf, marked)
    sys.stderr.write("[seam_trace] marked %s\n" % target)
