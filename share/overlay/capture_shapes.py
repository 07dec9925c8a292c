"""Default capture hook of overlay: records the shapes of the first calls of a function.

For up to `max` calls of the target it records, for each argument and for the return value,
its type and (duck-typed: anything with .shape / .dtype) shape, dtype and size; when torch is
importable, tensor arguments are saved with torch.save. Records go to <out>/meta.json (rewritten
after each captured call). It never raises into the caller.
"""
import functools
import json
import os
import sys
import threading

_lock = threading.Lock()


def _describe(v):
    d = {"type": type(v).__name__}
    try:
        if hasattr(v, "shape"):
            d["shape"] = [int(x) for x in tuple(v.shape)]
        if hasattr(v, "dtype"):
            d["dtype"] = str(v.dtype)
        if hasattr(v, "numel"):
            d["numel"] = int(v.numel())
        elif hasattr(v, "size") and isinstance(getattr(v, "size"), int):
            d["size"] = int(v.size)
        if isinstance(v, (int, float, bool, str)) and len(repr(v)) < 200:
            d["value"] = v
        if isinstance(v, (list, tuple)) and len(v) <= 16:
            d["items"] = [_describe(x) for x in v]
    except Exception as e:
        d["error"] = "%s: %s" % (type(e).__name__, e)
    return d


def _save_tensors(out, index, args, kwargs, result):
    try:
        import torch
    except Exception:
        return None
    try:
        payload = {"args": [a for a in args if isinstance(a, torch.Tensor)],
                   "kwargs": {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)},
                   "result": result if isinstance(result, torch.Tensor) else None}
        path = os.path.join(out, "call_%d.pt" % index)
        torch.save(payload, path)
        return os.path.basename(path)
    except Exception as e:
        return "save failed: %s: %s" % (type(e).__name__, e)


def install(owner, attr, target, out, limit=5):
    """Wraps owner.attr so its first `limit` calls are recorded into out/meta.json."""
    fn = getattr(owner, attr)
    state = {"records": [], "seen": 0}

    def record(args, kwargs, result, error):
        with _lock:
            if state["seen"] >= limit:
                return
            state["seen"] += 1
            index = state["seen"] - 1
        try:
            os.makedirs(out, exist_ok=True)
            rec = {"call": index,
                   "args": [_describe(a) for a in args],
                   "kwargs": {k: _describe(v) for k, v in kwargs.items()},
                   "result": _describe(result) if error is None else None,
                   "error": error}
            saved = _save_tensors(out, index, args, kwargs, result)
            if saved:
                rec["tensors"] = saved
            with _lock:
                state["records"].append(rec)
                meta = {"target": target, "max": limit, "calls": state["records"]}
                tmp = os.path.join(out, ".meta.json.tmp")
                with open(tmp, "w") as f:
                    json.dump(meta, f, indent=1, default=str)
                os.replace(tmp, os.path.join(out, "meta.json"))
        except Exception as e:
            try:
                sys.stderr.write("[overlay] capture %s: %s: %s\n" % (target, type(e).__name__, e))
            except Exception:
                pass

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if state["seen"] >= limit:
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:
            record(args, kwargs, None, "%s: %s" % (type(e).__name__, e))
            raise
        record(args, kwargs, result, None)
        return result

    wrapper.__overlay_capture__ = True
    setattr(owner, attr, wrapper)
    return wrapper
