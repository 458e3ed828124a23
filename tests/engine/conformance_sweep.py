"""A systematic sweep of the op catalog against torch on edge inputs (needs torch; not part of the test run).

For every op with sample inputs (``tests/engine/samples.py``), each sample is called as it is and with one
tensor argument at a time replaced by: a 0-d tensor, an empty tensor, the same values with NaN and inf, an
int64 and a bool version, ``None``, a Python float, a list. The same call runs in torch and in the engine
(through ``engine.torch_compat``: ``torch.op(...)``/``F.op(...)`` for functions, ``x.op(...)`` for
method-only ops) and the outcomes are compared: value, dtype, shape and grad_fn name, or exception type and
message. Differences are counted by class and listed.

    python -m tests.engine.conformance_sweep            # summary by class and op
    python -m tests.engine.conformance_sweep -v         # and every difference
"""

from __future__ import annotations

import math
import sys
import warnings
from collections import Counter, defaultdict

import numpy as np
import torch
import torch.nn.functional as TF

from gradserve_server import engine
from gradserve_server.engine.errors import EngineError

try:
    from gradserve_server.engine.signature import call_form
except ImportError:  # an engine before the argument parser (for a baseline run)
    def call_form(name, spec):
        return spec.inplace or name in ("view", "expand", "expand_as", "repeat", "contiguous", "to")
from gradserve_server.engine.tensor import Tensor as ETensor
from gradserve_server.engine.torch_compat import F as EF
from gradserve_server.engine.torch_compat import torch as etorch
from gradserve_server.engine.torch_compat import unwrap, wrap

from .samples import SAMPLES

_SKIP = {"getitem", "setitem", "rpow", "rtruediv", "rmatmul"}  # no torch function
# random ops: their samples reseed the engine's generator only (tests/engine/test_random.py compares with torch)
_SKIP |= {"dropout", "rand", "randn", "bernoulli", "bernoulli_", "uniform_", "normal_", "normal", "random_",
          "exponential_"}


def _variants(value: ETensor):
    d = value.data
    yield "0-d", ETensor(np.asarray(d.reshape(-1)[0] if d.size else 0.5, d.dtype))
    yield "empty", ETensor(np.zeros((0,) + d.shape[1:], d.dtype))
    if d.dtype.kind == "f" and d.size:
        nan = d.copy()
        nan.reshape(-1)[0] = np.nan
        if d.size > 1:
            nan.reshape(-1)[-1] = np.inf
        yield "nan/inf", ETensor(nan)
    if d.dtype.kind == "f":
        yield "int64", ETensor(np.round(d * 3).astype(np.int64))
        yield "bool", ETensor(d > 0)
    if d.dtype.kind in "fi" and "--dtypes" in sys.argv:  # the narrow integer types, with values that wrap
        for t in (np.int32, np.int16, np.int8):
            yield t.__name__, ETensor(np.round(d * 50).astype(np.int64).astype(t))
        yield "uint8", ETensor(np.abs(np.round(d * 100)).astype(np.int64).astype(np.uint8))
    yield "None", None
    yield "float", 1.5
    yield "list", [1, 2]


def _to_torch(v, requires_grad: bool):
    if isinstance(v, ETensor):
        t = torch.from_numpy(np.array(v.data, copy=True))
        if requires_grad and t.dtype.is_floating_point:
            t.requires_grad_(True)
        return t
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, ETensor) for x in v):
        return type(v)(_to_torch(x, requires_grad) for x in v)
    return v


def _to_engine(v, requires_grad: bool):
    if isinstance(v, ETensor):
        t = ETensor(np.array(v.data, copy=True))
        if requires_grad and t.data.dtype.kind == "f":
            t.requires_grad = True
        return wrap(t)
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, ETensor) for x in v):
        return type(v)(_to_engine(x, requires_grad) for x in v)
    return v


def _encode(v):
    if isinstance(v, (tuple, list)):
        return tuple(_encode(x) for x in v)
    if isinstance(v, torch.Tensor):
        return ("tensor", str(v.dtype).removeprefix("torch."), tuple(v.shape), v.detach().numpy().copy(),
                type(v.grad_fn).__name__ if v.grad_fn is not None else None)
    e = unwrap(v)
    if isinstance(e, ETensor):
        return ("tensor", e.dtype, tuple(e.shape), np.array(e.data, copy=True),
                e.grad_fn.name if e.grad_fn is not None else None)
    return ("value", v)


def _call(mod, functional, name: str, args, kwargs, method: bool):
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if method:
                return ("ok", _encode(getattr(args[0], name)(*args[1:], **kwargs)))
            nn = engine.OPS[name].family == "nn" and hasattr(TF, name)
            fn = getattr(functional, name) if nn or not hasattr(torch, name) else getattr(mod, name)
            return ("ok", _encode(fn(*args, **kwargs)))
    except EngineError as exc:
        return ("error", exc.exception, exc.message)
    except Exception as exc:  # noqa: BLE001 - the outcome is the exception
        return ("error", type(exc).__name__, str(exc))


def _compare(a, b) -> str | None:
    """None when equal, else the class of the difference."""
    if a[0] != b[0]:
        return "torch refuses, engine accepts" if a[0] == "error" else "engine refuses, torch accepts"
    if a[0] == "error":
        if a[1] != b[1]:
            return "error type"
        return None if a[2] == b[2] else "error message"
    return _compare_values(a[1], b[1])


def _compare_values(x, y) -> str | None:
    if isinstance(x, tuple) and x and x[0] == "tensor" and isinstance(y, tuple) and y and y[0] == "tensor":
        if x[1] != y[1]:
            return "dtype"
        if x[2] != y[2]:
            return "shape"
        xa, ya = np.asarray(x[3]), np.asarray(y[3])
        if xa.dtype.kind == "f":
            if not np.allclose(xa, ya, rtol=1e-5, atol=1e-6, equal_nan=True):
                return "value"
        elif not np.array_equal(xa, ya):
            return "value"
        if x[4] != y[4]:
            return "grad_fn"
        return None
    if isinstance(x, tuple) and isinstance(y, tuple) and (not x or x[0] != "value"):
        if len(x) != len(y):
            return "structure"
        for p, q in zip(x, y):
            r = _compare_values(p, q)
            if r:
                return r
        return None
    if isinstance(x, tuple) and x and x[0] == "value" and isinstance(y, tuple) and y and y[0] == "value":
        p, q = x[1], y[1]
        if isinstance(p, float) and isinstance(q, float) and math.isnan(p) and math.isnan(q):
            return None
        return None if p == q else "value"
    return "structure"


def sweep():
    names = sorted({e["name"] for e in engine.op_catalog() if e["family"] != "autograd"})
    diffs = []
    calls = 0
    for name in names:
        if name in _SKIP or name not in SAMPLES:
            continue
        spec = engine.OPS[name]
        method = call_form(name, spec)
        for sample in SAMPLES[name]:
            positions = [i for i, a in enumerate(sample.args) if isinstance(a, ETensor)]
            cases = [("as is", None, None)]
            for i in positions:
                for label, v in _variants(sample.args[i]):
                    cases.append((f"arg {i} {label}", i, v))
            for label, i, v in cases:
                args = list(sample.args)
                if i is not None:
                    args[i] = v
                rg = not spec.inplace
                targs = [_to_torch(a, rg) for a in args]
                eargs = [_to_engine(a, rg) for a in args]
                tkw = {k: _to_torch(v, False) for k, v in sample.kwargs.items()}
                ekw = {k: _to_engine(v, False) for k, v in sample.kwargs.items()}
                if method and not isinstance(targs[0], torch.Tensor):
                    continue  # no method call on a non-tensor
                calls += 1
                a = _call(torch, TF, name, targs, tkw, method)
                b = _call(etorch, EF, name, eargs, ekw, method)
                cls = _compare(a, b)
                if cls:
                    diffs.append((cls, name, f"{sample!r} {label}", a, b))
    return calls, diffs


def _show(outcome) -> str:
    if outcome[0] == "error":
        return f"{outcome[1]}: {outcome[2][:160]!r}"
    return repr(outcome[1])[:160]


def main(argv) -> None:
    calls, diffs = sweep()
    by_class = Counter(d[0] for d in diffs)
    ops_by_class = defaultdict(Counter)
    for cls, name, *_ in diffs:
        ops_by_class[cls][name] += 1
    print(f"{calls} calls, {len(diffs)} differences")
    print("| class | count | ops (count) |")
    print("|---|---|---|")
    for cls, n in by_class.most_common():
        ops = ", ".join(f"{o} ({c})" for o, c in ops_by_class[cls].most_common())
        print(f"| {cls} | {n} | {ops} |")
    if "-v" in argv:
        for cls, name, where, a, b in diffs:
            print(f"\n[{cls}] {name} {where}\n  torch : {_show(a)}\n  engine: {_show(b)}")


if __name__ == "__main__":
    main(sys.argv[1:])
