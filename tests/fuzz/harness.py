"""Replay a program in the engine (one ``run_program`` call per op, or one HTTP request per op) and compare
each step's outcome with torch's recorded outcome.

Outcomes are plain data (see ``torch_exec.snapshot_tensor``), so torch's side can be recorded once and
committed (``regressions.json``) and replayed without torch.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from gradserve_server.engine import State, run_program
from gradserve_server.engine.errors import EngineError, UnknownTensorError

from .allow import allowed

# ops whose outcome is a property of the op (value, argument checking, messages): conf-ops' area
AUTOGRAD_ACTIONS = {"backward", "grad", "retain_grad", "set_grad", "requires_grad_", "zero_grad"}
VIEW_OPS = {"view", "reshape", "t", "transpose", "permute", "expand", "expand_as", "squeeze", "unsqueeze",
            "select", "narrow", "getitem", "split", "chunk", "unbind", "flatten", "detach", "setitem"}

# float32 absolute tolerance: gradients that are zero in exact arithmetic (a softmax's sum) come out as
# rounding noise of order 1e-5 whose value depends on summation order
TOL = {"float32": (1e-4, 5e-5), "float64": (1e-9, 1e-12)}


def plain_array(a: np.ndarray):
    def conv(v):
        if isinstance(v, list):
            return [conv(x) for x in v]
        if isinstance(v, float):
            if math.isnan(v):
                return "NaN"
            if math.isinf(v):
                return "Infinity" if v > 0 else "-Infinity"
        return v
    return conv(a.tolist())


def snapshot_engine_tensor(t) -> dict:
    g = t._grad
    err = t.view_error()
    if err is not None:  # torch raises on reading grad_fn (and is_leaf) of such a view
        grad_fn = is_leaf = f"error: {err}"
    else:
        grad_fn = t.grad_fn.name if t.grad_fn is not None else None
        is_leaf = t.is_leaf
    return {"dtype": t.dtype, "shape": list(t.data.shape), "value": plain_array(t.data),
            "requires_grad": t.requires_grad, "is_leaf": is_leaf, "grad_fn": grad_fn,
            "retains_grad": t.retains_grad, "version": t._vc[0],
            "grad": None if g is None else {"dtype": g.dtype, "value": plain_array(g.data),
                                             "requires_grad": g.requires_grad}}


class EngineRunner:
    """The engine directly: a State, one ``run_program`` call per op."""

    def __init__(self):
        self.state = State()

    def step(self, op: dict) -> dict:
        err = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_program(self.state, [op])
        except UnknownTensorError as exc:
            err = ["UnknownTensor", exc.message]
        except EngineError as exc:
            err = [exc.exception, exc.message]
        return {"error": err, "tensors": {n: snapshot_engine_tensor(t) for n, t in self.state.tensors.items()}}


#: the fuzzer is one client address opening a session per program: the per-address fairness limits of an
#: open server (sessions per client, requests per second) are lifted for it
HTTP_RIG = {"max_sessions_per_client": 100_000, "client_rate_limit_per_second": 0.0}


class HttpRunner:
    """The app over HTTP (in-process TestClient): one POST /ops per op, then GET /tensors."""

    def __init__(self, client):
        self.client = client
        self.sid = client.post("/v1/sessions").json()["id"]

    def step(self, op: dict) -> dict:
        r = self.client.post(f"/v1/sessions/{self.sid}/ops", json={"ops": [op]})
        err = None
        if r.status_code != 200:
            body = r.json()
            exc = body.get("exception") or ("UnknownTensor" if body.get("code") == "unknown_tensor" else "Error")
            err = [exc, body.get("detail")]
        views = self.client.get(f"/v1/sessions/{self.sid}/tensors").json()["tensors"]
        tensors = {}
        for n, v in views.items():
            tensors[n] = {"dtype": v["dtype"], "shape": v["shape"], "value": v["data"],
                          "requires_grad": v["requires_grad"], "is_leaf": v["is_leaf"], "grad_fn": v["grad_fn"],
                          "retains_grad": v["retains_grad"], "version": v["version"],
                          "grad": None if v["grad"] is None else {"value": v["grad"]}}
        return {"error": err, "tensors": tensors, "http": True}


# ----- comparison ---------------------------------------------------------------------------------------


def _num(v):
    if isinstance(v, list):
        return [_num(x) for x in v]
    if isinstance(v, str):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[v]
    return v


def values_match(a, b, dtype: str) -> bool:
    x = np.asarray(_num(a), dtype=np.float64)
    y = np.asarray(_num(b), dtype=np.float64)
    if x.shape != y.shape:
        return False
    if dtype in TOL:
        rtol, atol = TOL[dtype]
        return bool(np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True))
    return bool(np.array_equal(x, y, equal_nan=True))


def compare_tensor(ref: dict, got: dict, mixed: bool = False, version_offset: int | None = 0) -> list:
    """The fields where ``got`` differs from ``ref``: (field, torch's, engine's)."""
    out = []
    for f in ("dtype", "shape", "requires_grad", "is_leaf", "grad_fn", "retains_grad"):
        if f in got and ref[f] != got[f]:
            out.append((f, ref[f], got[f]))
    if version_offset is not None and ref["version"] - got["version"] != version_offset:
        out.append(("version", ref["version"], got["version"]))
    if ref["dtype"] == got["dtype"] and ref["shape"] == got["shape"] and \
            not values_match(ref["value"], got["value"], "float32" if mixed and ref["dtype"] == "float64"
                             else ref["dtype"]):
        out.append(("value", ref["value"], got["value"]))
    rg, gg = ref["grad"], got["grad"]
    if (rg is None) != (gg is None):
        out.append(("grad", None if rg is None else "set", None if gg is None else "set"))
    elif rg is not None:
        for f in ("dtype", "requires_grad"):
            if f in gg and rg[f] != gg[f]:
                out.append((f"grad.{f}", rg[f], gg[f]))
        if not values_match(rg["value"], gg["value"], "float32" if mixed and rg["dtype"] == "float64"
                            else rg["dtype"]):
            out.append(("grad", rg["value"], gg["value"]))
    return out


_AUTOGRAD_WORDS = ("view", "leaf", "inplace", "in-place", "grad", "memory location", "version", "backward",
                   "graph", "Trying to")


def area_of(field: str, name: str, detail: str) -> str:
    """Who owns a mismatch: ``autograd`` (autograd state, views, in-place: this branch) or ``ops`` (an op's
    values, argument checking and messages)."""
    if field.startswith("error") and "Found dtype" in detail:
        return "ops"
    if field == "names":  # how many outputs an op gives
        return "autograd" if name in AUTOGRAD_ACTIONS else "ops"
    if name in AUTOGRAD_ACTIONS or field in ("requires_grad", "is_leaf", "retains_grad", "grad", "version",
                                              "grad.requires_grad", "grad.dtype"):
        return "autograd"
    if field.startswith("error"):
        op_level = "argument '" in detail or "Found dtype" in detail  # argument parsing, mixed-dtype kernels
        return "autograd" if any(w in detail for w in _AUTOGRAD_WORDS) and not op_level else "ops"
    if name in VIEW_OPS or name.endswith("_"):
        return "autograd"
    return "ops"


def compare_step(op: dict, ref: dict, got: dict, skip: dict | None = None, versions: dict | None = None) -> list:
    """Mismatches of one step: each ``{"class", "area", "detail"}``; allowed deviations are left out.
    ``skip`` maps a tensor name to fields not compared for it (see ``replay``). Versions are compared as
    changes: ``versions`` keeps, per name, torch's version minus the engine's when first seen (a tensor
    returned by a backward formula starts at the count of torch's internal in-place steps)."""
    name = op["op"]
    found = []
    skip = skip or {}
    versions = {} if versions is None else versions

    def add(field, detail, tensor=None):
        cls = f"{field}:{name}"
        if allowed(cls, op, ref, got, tensor):
            return
        found.append({"class": cls, "area": area_of(field, name, detail), "detail": detail})

    re_, ge = ref["error"], got["error"]
    if re_ is None and ge is not None:
        add("error-spurious", f"engine raised {ge[0]}: {ge[1]}")
    elif re_ is not None and ge is None:
        add("error-missing", f"torch raised {re_[0]}: {re_[1]}")
    elif re_ is not None:
        if re_[0] != ge[0]:
            add("error-type", f"torch {re_[0]}: {re_[1]} / engine {ge[0]}: {ge[1]}")
        elif re_[1] != ge[1]:
            add("error-message", f"torch: {re_[1]} / engine: {ge[1]}")
    if re_ is not None or ge is not None:
        return found  # after an error the engine's state is the one before (atomic); torch's may be half-applied
    rt, gt = ref["tensors"], got["tensors"]
    if set(rt) != set(gt):
        add("names", f"torch {sorted(rt)} / engine {sorted(gt)}")
    # values computed from float32 inputs carry float32 rounding even when stored as float64
    mixed = any(t["dtype"] == "float32" for t in rt.values())
    for n in rt:
        if n not in gt:
            continue
        if n not in versions and "version" in gt[n]:
            versions[n] = rt[n]["version"] - gt[n]["version"]
        for field, a, b in compare_tensor(rt[n], gt[n], mixed, versions.get(n)):
            if field not in skip.get(n, ()):
                add(field, f"{n}: torch {a!r} / engine {b!r}", n)
    return found


#: ops whose value is a LAPACK factorization of their first argument
_LAPACK = {"linalg.cholesky", "cholesky", "linalg.inv", "inverse", "linalg.solve", "linalg.det", "det", "logdet",
           "slogdet", "linalg.slogdet", "linalg.inv_ex", "linalg.cholesky_ex"}


def _ill_conditioned(op: dict, ref: dict) -> bool:
    """``op`` factors a matrix (or a batch) whose condition number exceeds 1 / (100 eps) of its dtype."""
    args = op.get("args") or []
    if op["op"] not in _LAPACK or not args or not isinstance(args[0], str):
        return False
    t = ref["tensors"].get(args[0])
    if t is None or t["dtype"] not in ("float32", "float64"):
        return False
    a = np.array(t["value"], dtype=object).astype(float)  # JSON's "NaN"/"inf" strings read as floats
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or a.size == 0 or not np.isfinite(a).all():
        return False
    with np.errstate(all="ignore"):
        cond = np.linalg.cond(a.reshape(-1, *a.shape[-2:]))
    return bool(np.any(~np.isfinite(cond) | (cond > 0.01 / np.finfo(t["dtype"]).eps)))


def _unstable(op: dict, skip: dict, ref: dict | None = None) -> None:
    """Fields that stop being comparable after ``op`` (docs/explanation/deviations.md):

    * the value of a LAPACK factorization (cholesky, inv, solve, det...) of an exactly or nearly singular
      matrix (``ref``: torch's outcome of the step): numpy's LAPACK (OpenBLAS) and torch's MKL round
      differently and the condition number magnifies it;

    * a tensor passed as ``gradient``/``grad_outputs``: torch's AccumulateGrad may keep (a view of) it as a
      leaf's ``.grad`` and later accumulate into it in place, changing its values and version; the engine
      gives every ``.grad`` its own buffer;
    """
    kw = op.get("kwargs") or {}
    args = op.get("args") or []
    # what is computed from such a tensor (a split of it, a sum) inherits the difference
    refs = []
    for a in (*args, *kw.values()):
        refs.extend(x for x in (a if isinstance(a, list) else [a]) if isinstance(x, str))
    if op["op"] not in ("backward", "grad") and (any("value" in skip.get(r.split(".")[0], ()) for r in refs)
                                                 or (ref is not None and _ill_conditioned(op, ref))):
        out = op.get("out")
        for n in (out if isinstance(out, list) else [out] if out else []):
            for m in (n, *(f"{n}_{i}" for i in range(16))):
                skip.setdefault(m, set()).update(("value", "version"))
    if op["op"] == "backward":
        g = kw.get("gradient", args[1] if len(args) > 1 else None)
    elif op["op"] == "grad":
        g = kw.get("grad_outputs", args[2] if len(args) > 2 else None)
    else:
        return
    for n in (g if isinstance(g, list) else [g]):
        if isinstance(n, str):
            skip.setdefault(n, set()).update(("value", "version"))


def replay(program: list[dict], expected: list[dict], runner) -> tuple[int, list[dict]]:
    """Run ``program`` in ``runner`` against torch's ``expected`` outcomes; stop at the first step with a
    mismatch or an error. Returns (steps run, mismatches of the first failing step)."""
    skip: dict[str, set] = {}
    versions: dict[str, int] = {}
    for i, (op, ref) in enumerate(zip(program, expected)):
        got = runner.step(op)
        _unstable(op, skip, ref)
        bad = compare_step(op, ref, got, skip, versions)
        if bad:
            for b in bad:
                b["step"] = i
            return i + 1, bad
        if ref["error"] is not None or got["error"] is not None:
            return i + 1, []
    return len(expected), []
