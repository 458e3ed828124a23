"""The PyTorch oracle (a committed copy of ``shared/oracle/catalog.json`` in ``tests/fixtures``, or
``$GRADSERVE_ORACLE``): loading it, running
its Python programs against ``engine.torch_compat``, encoding values the way the oracle recorded them, and
comparing recorded values with tolerances (rtol 1e-5, atol 1e-6 for floats; "nan"/"inf" strings)."""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import re
import warnings
from pathlib import Path

import numpy as np

from gradserve_server.engine.errors import EngineError
from gradserve_server.engine.torch_compat import F, GradFn, Size, Tensor, torch

FIXTURE_PATH = Path(__file__).resolve().parents[1] / "fixtures" / "oracle_catalog.json"
SHARED_PATH = Path(__file__).resolve().parents[3] / "shared" / "oracle" / "catalog.json"
CATALOG_PATH = Path(os.environ.get("GRADSERVE_ORACLE", FIXTURE_PATH))
RTOL, ATOL = 1e-5, 1e-6
TRIGGERED = " (Triggered internally"
# repr strings are compared only once the engine can print tensors (gradserve_server/engine/printing.py), and only for
# tensors whose values are identical to torch's
ENGINE_PRINTS = importlib.util.find_spec("gradserve_server.engine.printing") is not None


@functools.cache
def catalog() -> dict:
    with open(CATALOG_PATH) as f:
        return json.load(f)


def entries(section: str) -> list[dict]:
    return catalog()[section]  # a missing catalog must fail the run, not empty it


def namespace() -> dict:
    """A fresh namespace with ``torch``, ``F`` and the prelude's tensors."""
    ns = {"torch": torch, "F": F}
    exec(catalog()["meta"]["prelude"], ns)
    return ns


# ----- errors and warnings ------------------------------------------------------------------------------

def error_record(exc: BaseException) -> dict:
    """torch's (type, message) for an exception: EngineError carries torch's type name."""
    if isinstance(exc, EngineError):
        return {"type": exc.exception, "message": exc.message}
    return {"type": type(exc).__name__, "message": str(exc)}


def warning_records(caught) -> list[dict]:
    return [{"category": w.category.__name__, "message": str(w.message)} for w in caught]


def strip_triggered(message: str) -> str:
    i = message.find(TRIGGERED)
    return message if i < 0 else message[:i]


# ----- encoding values as the oracle did -----------------------------------------------------------------

def _number(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return v


def tensor_values(t) -> object:
    arr = np.asarray(t._t.data if isinstance(t, Tensor) else t.data)
    if arr.dtype.kind == "f":
        obj = arr.astype(np.float64).tolist()
        return _map_numbers(obj)
    return arr.tolist()


def _map_numbers(obj):
    if isinstance(obj, list):
        return [_map_numbers(x) for x in obj]
    return _number(obj)


def encode_tensor(t: Tensor) -> dict:
    e = t._t
    out = {"shape": list(e.data.shape), "dtype": e.dtype, "requires_grad": e.requires_grad,
           "is_leaf": e.is_leaf, "grad_fn": None if e.grad_fn is None else e.grad_fn.name,
           "value": tensor_values(t)}
    if ENGINE_PRINTS:
        out["repr"] = repr(t)
    return out


def encode(v):
    if isinstance(v, Tensor):
        return {"tensor": encode_tensor(v)}
    if isinstance(v, GradFn):
        return {"node": type(v).__name__}
    if isinstance(v, Size):
        return {"torch.Size": list(v)}
    if isinstance(v, (list, tuple)):
        return [encode(x) for x in v]
    if isinstance(v, dict):
        return {k: encode(x) for k, x in v.items()}
    if isinstance(v, str):
        return re.sub(r" at 0x[0-9a-f]+>", " at 0x\u2026>", v)
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        v = v.item()
    return _number(v)


# ----- comparing ----------------------------------------------------------------------------------------

def values_close(expected, actual) -> bool:
    """Nested lists of numbers (with "nan"/"inf" strings) equal within RTOL/ATOL, same nesting."""
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(
            values_close(e, a) for e, a in zip(expected, actual))
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected == actual and type(expected) is type(actual)
    if isinstance(expected, (int, float, str)) and isinstance(actual, (int, float, str)):
        try:
            e, a = float(expected), float(actual)
        except ValueError:
            return expected == actual
        if math.isnan(e) or math.isnan(a):
            return math.isnan(e) and math.isnan(a)
        if math.isinf(e) or math.isinf(a):
            return e == a
        return abs(e - a) <= ATOL + RTOL * abs(e)
    return expected == actual


def diff(expected, actual, path: str = "") -> list[str]:
    """Differences between an oracle-encoded value and an encoded actual value (empty when they match)."""
    if isinstance(expected, dict) and "tensor" in expected and len(expected) == 1:
        if not (isinstance(actual, dict) and "tensor" in actual):
            return [f"{path}: expected a tensor, got {actual!r}"]
        exp, act = expected["tensor"], actual["tensor"]
        out = []
        for key in ("shape", "dtype", "requires_grad", "is_leaf", "grad_fn"):
            if exp[key] != act[key]:
                out.append(f"{path}.{key}: expected {exp[key]!r}, got {act[key]!r}")
        if not values_close(exp["value"], act["value"]):
            out.append(f"{path}.value: expected {exp['value']!r}, got {act['value']!r}")
        # repr is compared when the values are identical: a last-ulp difference shows in 4 printed digits
        if ENGINE_PRINTS and exp["value"] == act["value"] and exp.get("repr") != act.get("repr"):
            out.append(f"{path}.repr: expected {exp.get('repr')!r}, got {act.get('repr')!r}")
        return out
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(expected) != set(actual):
            return [f"{path}: expected {expected!r}, got {actual!r}"]
        return [d for k in expected for d in diff(expected[k], actual[k], f"{path}.{k}")]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(expected) != len(actual):
            return [f"{path}: expected {expected!r}, got {actual!r}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in diff(e, a, f"{path}[{i}]")]
    if not values_close(expected, actual):
        return [f"{path}: expected {expected!r}, got {actual!r}"]
    return []


# ----- running a program --------------------------------------------------------------------------------

def run_program(code: str) -> dict:
    """Run an oracle program with ``R(label, value)`` and ``E(label, fn)``; return what the oracle recorded:
    records, the exception raised at top level (type, message) and the warnings outside ``E``."""
    records: list[dict] = []

    def R(label, value):
        records.append({"label": label, "value": encode(value)})

    def E(label, fn):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                value = fn()
            except Exception as exc:  # noqa: BLE001 - recorded and compared with torch's
                rec = {"label": label, "ok": False, "error": error_record(exc)}
            else:
                rec = {"label": label, "ok": True, "value": encode(value)}
                if caught:
                    rec["warnings"] = warning_records(caught)
        records.append(rec)
        return rec

    ns = {"torch": torch, "F": F, "R": R, "E": E}
    raised = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(compile(code, "<oracle program>", "exec"), ns)
        except Exception as exc:  # noqa: BLE001
            raised = error_record(exc)
    return {"records": records, "raised": raised, "warnings": warning_records(caught)}
