"""Default capture hook of overlay (add-capture): records the shapes a function is called with in
a live process and a small reference I/O oracle, for turning a hot kernel into a standalone test.

Contract (as overlay_setup.py's capture_shapes.py): install(target, out_dir, max_cases=5), target
"module:attr". It writes, into out_dir (or out_dir/capture.pid-P.rank-R/ when several processes
capture into one out_dir, or CAPTURE_PROCESS_UNIQUE=1 / GEAK_SELECTION_TRACE is set):

* meta.json: target, process_id, rank, module, attr, num_cases, total_calls_observed,
  regimes_covered, cases (one per recorded case: sig, regime, input_shapes, input_dtypes, count),
  shape_counts (every distinct call signature with its count, most frequent first),
  num_distinct_shapes, call_sequence (the first 256 calls: sig, in_graph), graph_replayed,
  in_graph_calls, reference_io, reference_io_sha256, oracle_complete, build, note;
* reference_io.pt (torch.save of {"target", "records"}; when torch is importable): the inputs and
  output of up to max_cases distinct signatures, plus one more per regime (decode: leading dim <=
  CAPTURE_DECODE_LEAD_MAX, default 256; prefill: larger) not yet covered.

Cases are recorded only from eager calls: while a CUDA graph is being captured a call is counted
and sequenced, never snapshotted (a device copy there is illegal). meta.json is rewritten every
CAPTURE_FLUSH_EVERY calls (64; 1 under GEAK_SELECTION_TRACE) and at exit, each time atomically.
Only plain Python callables are wrapped (CAPTURE_WRAP_UNSAFE=1 forces it). CAPTURE_TARGET,
CAPTURE_OUT and CAPTURE_MAX install it when this module is imported. It never raises into the
function's caller.
"""
import atexit
import functools
import hashlib
import importlib
import inspect
import json
import os
import sys
import threading
import types

_CAPTURES = {}  # target -> _Capture
_SEQUENCE_CAP = 256


def _log(msg):
    try:
        sys.stderr.write("[capture_shapes] %s\n" % msg)
    except Exception:
        pass


def _torch():
    """torch when it can be imported (the oracle needs it), else None."""
    try:
        import torch

        return torch
    except Exception:
        return None


def _rank():
    for key in ("RANK", "LOCAL_RANK", "TP_RANK", "SLURM_PROCID"):
        if key in os.environ:
            return str(os.environ[key])
    return "unknown"


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except OSError:
        return True


def _claim(out_dir):
    """True when this process may write out_dir itself: no other live process has claimed it."""
    os.makedirs(out_dir, exist_ok=True)
    claim = os.path.join(out_dir, ".capture.owner")
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                with open(claim) as f:
                    owner = int(f.read().strip() or "0")
            except (OSError, ValueError):
                owner = 0
            if owner == os.getpid():
                return True
            if owner > 0 and _pid_alive(owner):
                return False
            try:
                os.unlink(claim)  # a dead process's claim
            except OSError:
                pass
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def _release(out_dir):
    """Drops this process's claim on out_dir, if it holds it."""
    claim = os.path.join(out_dir, ".capture.owner")
    try:
        with open(claim) as f:
            mine = f.read().strip() == str(os.getpid())
        if mine:
            os.unlink(claim)
    except (OSError, ValueError):
        pass


def _process_out_dir(out_dir):
    per_process = "capture.pid-%d.rank-%s" % (os.getpid(), _rank())
    if os.environ.get("CAPTURE_PROCESS_UNIQUE") == "1" or os.environ.get("GEAK_SELECTION_TRACE"):
        return os.path.join(out_dir, per_process)
    return out_dir if _claim(out_dir) else os.path.join(out_dir, per_process)


def _is_tensor(torch, x):
    if torch is not None:
        return torch.is_tensor(x)
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _walk_tensors(torch, obj, visit):
    if _is_tensor(torch, obj):
        visit(obj)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _walk_tensors(torch, v, visit)
    elif isinstance(obj, dict):
        for v in obj.values():
            _walk_tensors(torch, v, visit)


def _signature(torch, args, kwargs):
    def one(v):
        if _is_tensor(torch, v):
            return "T%s:%s" % (tuple(int(d) for d in v.shape), v.dtype)
        if v is None or isinstance(v, (bool, int, float)):
            return repr(v)
        return type(v).__name__

    parts = [one(a) for a in args] + ["%s=%s" % (k, one(kwargs[k])) for k in sorted(kwargs)]
    return "|".join(parts)


def _shapes_dtypes(torch, args, kwargs):
    shapes, dtypes = [], set()

    def visit(t):
        shapes.append([int(d) for d in t.shape])
        dtypes.add(str(t.dtype))

    _walk_tensors(torch, list(args) + list(kwargs.values()), visit)
    return {"input_shapes": shapes, "input_dtypes": sorted(dtypes)}


def _regime(torch, args, kwargs, decode_lead_max):
    first = []
    _walk_tensors(torch, list(args) + list(kwargs.values()), lambda t: first.append(t) if not first else None)
    if not first or len(first[0].shape) == 0:
        return "decode"
    return "decode" if int(first[0].shape[0]) <= decode_lead_max else "prefill"


def _in_graph_capture(torch):
    try:
        return torch is not None and bool(torch.cuda.is_current_stream_capturing())
    except Exception:
        return False


def _snapshot(torch, x):
    """A copy later in-place ops cannot change: tensors detached and cloned to the CPU."""
    if torch is not None and torch.is_tensor(x):
        return {
            "__tensor__": True,
            "data": x.detach().to("cpu").clone(),
            "dtype": str(x.dtype),
            "device": str(x.device),
            "shape": list(x.shape),
            "contiguous": bool(x.is_contiguous()),
        }
    if isinstance(x, (list, tuple)):
        return type(x)(_snapshot(torch, v) for v in x)
    if isinstance(x, dict):
        return {k: _snapshot(torch, v) for k, v in x.items()}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return {"__tensor__": True, "data": None, "dtype": str(x.dtype), "shape": [int(d) for d in x.shape]}
    return {"__repr__": repr(x)[:200]}


def _wrappable(fn):
    """A callable whose calling convention a Python wrapper keeps."""
    if isinstance(fn, (types.FunctionType, types.MethodType, functools.partial)):
        return True
    if isinstance(fn, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return False
    if any(hasattr(fn, a) for a in ("fn", "cache", "warmup", "run", "__torch_dispatch__")):
        return False
    return callable(fn) and type(fn).__module__ != "builtins"


class _Capture:
    def __init__(self, target, module, attr, orig, out_dir, max_cases):
        self.target, self.module, self.attr, self.orig = target, module, attr, orig
        self.out_dir, self.max_cases = out_dir, max_cases
        self.lock = threading.Lock()
        self.torch = _torch()
        self.calls = 0
        self.in_graph_calls = 0
        self.shape_counts, self.shape_meta, self.sequence = {}, {}, []
        self.records, self.seen, self.regimes = [], set(), set()
        self.decode_lead_max = int(os.environ.get("CAPTURE_DECODE_LEAD_MAX", "256"))
        every = "1" if os.environ.get("GEAK_SELECTION_TRACE") else os.environ.get("CAPTURE_FLUSH_EVERY", "64")
        self.flush_every = max(1, int(every))
        self.oracle_records, self.oracle_sha = 0, None
        try:
            self.record_function = self.torch.profiler.record_function if self.torch is not None else None
        except Exception:
            self.record_function = None

    def call(self, args, kwargs):
        if self.record_function is not None:
            with self.record_function("GEAK_TARGET::" + self.target):
                out = self.orig(*args, **kwargs)
        else:
            out = self.orig(*args, **kwargs)
        in_graph = _in_graph_capture(self.torch)
        try:
            self.observe(args, kwargs, out, in_graph)
            if not in_graph and self.calls % self.flush_every == 0:
                self.flush()
        except Exception as e:  # never break the caller because capture failed
            _log("capture error (ignored): %s: %s" % (type(e).__name__, e))
        return out

    def observe(self, args, kwargs, out, in_graph):
        t = self.torch
        sig = _signature(t, args, kwargs)
        with self.lock:
            self.calls += 1
            self.in_graph_calls += 1 if in_graph else 0
            self.shape_counts[sig] = self.shape_counts.get(sig, 0) + 1
            if sig not in self.shape_meta:
                self.shape_meta[sig] = _shapes_dtypes(t, args, kwargs)
            if len(self.sequence) < _SEQUENCE_CAP:
                self.sequence.append({"sig": sig, "in_graph": in_graph})
            if in_graph or sig in self.seen:
                return
            regime = _regime(t, args, kwargs, self.decode_lead_max)
            if len(self.records) >= self.max_cases and regime in self.regimes:
                return
            self.seen.add(sig)
            self.regimes.add(regime)
            self.records.append(
                {
                    "sig": sig,
                    "regime": regime,
                    "args": _snapshot(t, args),
                    "kwargs": _snapshot(t, kwargs),
                    "output": _snapshot(t, out),
                }
            )
        _log("recorded case %d (%s): %s" % (len(self.records), regime, sig))

    def _write_oracle(self, records):
        path = os.path.join(self.out_dir, "reference_io.pt")
        tmp = "%s.tmp-%d-%d" % (path, os.getpid(), threading.get_ident())
        self.torch.save({"target": self.target, "records": records}, tmp)
        os.replace(tmp, path)
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        self.oracle_sha, self.oracle_records = h.hexdigest(), len(records)

    def meta(self, records, counts):
        cases = []
        for r in records:
            shapes, dtypes = [], set()

            def visit(o):
                if isinstance(o, dict) and o.get("__tensor__"):
                    shapes.append(o["shape"])
                    dtypes.add(o["dtype"])
                elif isinstance(o, (list, tuple)):
                    for v in o:
                        visit(v)
                elif isinstance(o, dict):
                    for v in o.values():
                        visit(v)

            visit(r["args"])
            visit(r["kwargs"])
            cases.append(
                {
                    "sig": r["sig"],
                    "regime": r["regime"],
                    "input_shapes": shapes,
                    "input_dtypes": sorted(dtypes),
                    "count": counts.get(r["sig"], 0),
                }
            )
        histogram = [dict({"sig": s, "count": n}, **self.shape_meta.get(s, {})) for s, n in counts.items()]
        histogram.sort(key=lambda e: e["count"], reverse=True)
        return {
            "target": self.target,
            "process_id": os.getpid(),
            "rank": _rank(),
            "module": self.module.__name__,
            "attr": self.attr,
            "num_cases": len(records),
            "total_calls_observed": self.calls,
            "regimes_covered": sorted(self.regimes),
            "cases": cases,
            "shape_counts": histogram,
            "num_distinct_shapes": len(counts),
            "call_sequence": list(self.sequence),
            "graph_replayed": self.in_graph_calls > 0,
            "in_graph_calls": self.in_graph_calls,
            "reference_io": "reference_io.pt" if self.oracle_sha else None,
            "reference_io_sha256": self.oracle_sha,
            "oracle_complete": self.oracle_sha is not None,
            "build": False,
            "note": "Oracle captured from the unmodified function. Do not edit it during optimisation.",
        }

    def flush(self):
        with self.lock:
            records, counts = list(self.records), dict(self.shape_counts)
        if not counts:
            return
        os.makedirs(self.out_dir, exist_ok=True)
        if self.torch is not None and records and len(records) > self.oracle_records:
            try:
                self._write_oracle(records)
            except Exception as e:
                _log("oracle write failed (meta.json still written): %s: %s" % (type(e).__name__, e))
        path = os.path.join(self.out_dir, "meta.json")
        tmp = "%s.tmp-%d-%d" % (path, os.getpid(), threading.get_ident())
        with open(tmp, "w") as f:
            json.dump(self.meta(records, counts), f, indent=2, default=str)
        os.replace(tmp, path)

    def flush_at_exit(self):
        try:
            self.flush()
            _log("flushed %d case(s) of %s -> %s" % (len(self.records), self.target, self.out_dir))
        except Exception as e:
            _log("flush at exit failed: %s: %s" % (type(e).__name__, e))
        _release(self.out_dir)


def _stand_in(cap):
    orig = cap.orig

    @functools.wraps(orig)
    def captured(*args, **kwargs):
        return cap.call(args, kwargs)

    try:
        captured.__signature__ = inspect.signature(orig)
    except (TypeError, ValueError):
        pass
    return captured


def install(target, out_dir, max_cases=5):
    """Wraps target (module:attr) so its calls are recorded into out_dir; idempotent per target."""
    if target in _CAPTURES:
        return
    if not isinstance(target, str) or ":" not in target:
        raise ValueError("target must be module:attr, got %r" % (target,))
    module_name, attr = target.split(":", 1)
    module = importlib.import_module(module_name)
    owner, leaf = module, attr
    for part in attr.split(".")[:-1]:
        owner = getattr(owner, part)
    leaf = attr.split(".")[-1]
    orig = getattr(owner, leaf)
    if not _wrappable(orig) and os.environ.get("CAPTURE_WRAP_UNSAFE") != "1":
        raise RuntimeError(
            "refusing to wrap non-Python callable %s (%s.%s): hook a Python caller of it, "
            "or set CAPTURE_WRAP_UNSAFE=1" % (target, type(orig).__module__, type(orig).__name__)
        )
    cap = _Capture(target, module, attr, orig, _process_out_dir(os.path.abspath(out_dir)), int(max_cases))
    _CAPTURES[target] = cap
    setattr(owner, leaf, _stand_in(cap))
    atexit.register(cap.flush_at_exit)
    _log("hooked %s; recording up to %d cases -> %s" % (target, cap.max_cases, cap.out_dir))


def install_from_env():
    """CAPTURE_TARGET=module:attr CAPTURE_OUT=DIR [CAPTURE_MAX=5]: install without a manifest."""
    target, out = os.environ.get("CAPTURE_TARGET"), os.environ.get("CAPTURE_OUT")
    if target and out:
        install(target, out, int(os.environ.get("CAPTURE_MAX", "5")))


if os.environ.get("CAPTURE_TARGET") and os.environ.get("CAPTURE_OUT"):
    try:
        install_from_env()
    except Exception as _e:
        _log("install from CAPTURE_TARGET failed: %s: %s" % (type(_e).__name__, _e))
