"""Op-level conformance with torch 2.13, table-driven (cases in ``conformance_cases.py``).

Each case's torch outcome is recorded in ``tests/fixtures/conformance_ops.json``: the engine must give the same
outcome for the torch code (through ``engine.torch_compat``, where ``x.op(...)`` is a method call and
``torch.op(...)`` a function call) and for the JSON program (the API's form). With torch installed, every
record is recomputed live, which proves the recorded data right.

    python -m tests.engine.test_conformance_ops --record     # re-record from the installed torch
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from gradserve_server.engine.errors import EngineError
from gradserve_server.engine.program import State, run_program
from gradserve_server.engine.torch_compat import F as EF
from gradserve_server.engine.torch_compat import torch as etorch

from .conformance_cases import CASES

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "conformance_ops.json"
RTOL = 1e-6


HALF = ("float16", "bfloat16")


def _encode(v):
    """A comparable record of a value: tensors as dtype, shape, values (float16/bfloat16 widened to float32,
    exactly) and grad_fn name."""
    if isinstance(v, (tuple, list)):
        return [_encode(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "_t"):  # the engine's torch facade
        t = v._t
        a = np.asarray(t.data)
        return {"dtype": t.dtype, "shape": list(t.shape), "values": (a.astype(np.float32) if t.dtype in HALF
                                                                      else a).tolist(),
                "grad_fn": t.grad_fn.name if t.grad_fn is not None else None}
    if hasattr(v, "detach"):  # a real torch tensor
        dt = str(v.dtype).removeprefix("torch.")
        t = v.detach()
        return {"dtype": dt, "shape": list(v.shape), "values": (t.float() if dt in HALF else t).numpy().tolist(),
                "grad_fn": type(v.grad_fn).__name__ if v.grad_fn is not None else None}
    return repr(v)


def _error(exc: BaseException) -> dict:
    if isinstance(exc, EngineError):
        return {"error": {"type": exc.exception, "message": exc.message}}
    return {"error": {"type": type(exc).__name__, "message": str(exc)}}


def run_code(code: str, torch_mod, functional) -> dict:
    ns = {"torch": torch_mod, "F": functional}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            exec(code, ns)
    except Exception as exc:  # noqa: BLE001 - the outcome is the exception
        return _error(exc)
    return {"value": _encode(ns["r"])}


def run_json_program(program: list, result: str = "r") -> dict:
    state = State()
    try:
        run_program(state, program)
    except EngineError as exc:
        return _error(exc)
    t = state.resolve(result) if result != "r" else state.tensors.get("r")
    if t is None:  # the op bound a fresh name: the last bound tensor
        t = list(state.tensors.values())[-1]
    return {"value": {"dtype": t.dtype, "shape": list(t.shape), "values": np.asarray(t.data).tolist(),
                      "grad_fn": t.grad_fn.name if t.grad_fn is not None else None}}


def _same_number(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if a == 0 and b == 0:
            return math.copysign(1, a) == math.copysign(1, b)  # +0 and -0 differ (torch leaves +0)
        return a == b or abs(a - b) <= RTOL * max(abs(a), abs(b))
    return a == b


def same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return _same_number(a, b)
    return a == b


@pytest.fixture(scope="module")
def recorded() -> dict:
    with open(FIXTURE) as f:
        return json.load(f)


def test_every_case_is_recorded(recorded):
    assert set(CASES) == set(recorded), sorted(set(CASES) ^ set(recorded))


@pytest.mark.parametrize("name", sorted(CASES))
def test_engine_matches_recorded_torch(name, recorded):
    got = run_code(CASES[name]["code"], etorch, EF)
    assert same(got, recorded[name]), f"{name}\n  engine: {got}\n  torch:  {recorded[name]}"


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if "program" in c))
def test_program_matches_recorded_torch(name, recorded):
    expect = recorded[name]
    got = run_json_program(CASES[name]["program"], CASES[name].get("result", "r"))
    if "value" in expect and isinstance(expect["value"], list):  # torch code bound a list: its first tensor
        expect = {"value": expect["value"][0]}
    assert same(got, expect), f"{name}\n  program: {got}\n  torch:   {expect}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_outcome_is_what_torch_does(name, recorded):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as TF
    live = run_code(CASES[name]["code"], torch, TF)
    assert same(live, recorded[name]), f"{name}: torch {torch.__version__} gives {live}"


def record() -> None:
    import torch
    import torch.nn.functional as TF
    out = {name: run_code(case["code"], torch, TF) for name, case in sorted(CASES.items())}
    FIXTURE.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(out)} cases from torch {torch.__version__} into {FIXTURE.name}")


if __name__ == "__main__":
    if "--record" in sys.argv:
        record()
