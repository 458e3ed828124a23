"""float16 and bfloat16 against torch 2.13: the promotion table of ``torch.result_type`` over every pair of the
engine's dtypes and operand kinds (dimensioned tensor, 0-d tensor, Python number), and the cases of
``half_cases.py`` for each of the two dtypes, compared bit for bit (``INEXACT`` lists the documented
exceptions, by units in the last place).

torch's outcomes are recorded in ``tests/fixtures/half_cases.json``; with torch installed every record is
recomputed live. Re-record with ``python -m tests.engine.test_half_torch --record``.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from gradserve_server.engine import dtypes as D
from gradserve_server.engine.torch_compat import F as EF
from gradserve_server.engine.torch_compat import torch as etorch

from .half_cases import CASES, INEXACT
from .test_conformance_ops import HALF, _encode
from .test_dtypes_torch import _operands as _dtype_operands
from .test_dtypes_torch import promotion_table as _dtype_promotion_table

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "half_cases.json"
DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")


def _operands():
    return _dtype_operands(DTYPES)


def promotion_table(torch_mod) -> dict:
    return _dtype_promotion_table(torch_mod, DTYPES)


def run_case(code: str, dtype: str, torch_mod, functional) -> dict:
    ns = {"torch": torch_mod, "F": functional, "H": getattr(torch_mod, dtype)}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            exec(code, ns)  # noqa: S102 - the case table's torch code
    except Exception as exc:  # noqa: BLE001 - the outcome is the exception
        return {"error": {"type": getattr(exc, "exception", type(exc).__name__), "message": str(exc)}}
    return {"value": _encode(ns.get("r"))}


def _ulps(a: float, b: float, dtype: str | None) -> float:
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    if a == b:
        return 0.0 if a != 0 or math.copysign(1, a) == math.copysign(1, b) else math.inf
    if dtype in HALF:  # 11 significant bits (float16, subnormal below 2**-14) or 8 (bfloat16)
        e = math.frexp(max(abs(a), abs(b)))[1]
        spacing = max(2.0 ** (e - 11), 2.0 ** -24) if dtype == "float16" else 2.0 ** (e - 8)
        return abs(a - b) / spacing
    return math.inf


def distance(got, want, dtype: str | None = None) -> float:
    """The largest difference in units in the last place of a half dtype (0: the same bits; inf: a different
    structure, dtype, shape, error or a difference in another dtype)."""
    if isinstance(got, dict) and isinstance(want, dict):
        if got.keys() != want.keys():
            return math.inf
        if "dtype" in want and got.get("dtype") != want.get("dtype"):
            return math.inf
        dtype = want.get("dtype", dtype)
        return max((distance(got[k], want[k], dtype) for k in want), default=0.0)
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return math.inf
        return max((distance(g, w, dtype) for g, w in zip(got, want)), default=0.0)
    if isinstance(got, float) and isinstance(want, float):
        return _ulps(got, want, dtype)
    return 0.0 if got == want and type(got) is type(want) else math.inf


# ----- tests --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def recorded() -> dict:
    with open(FIXTURE) as f:
        return json.load(f)


def test_every_case_is_recorded_for_both_dtypes(recorded):
    want = {f"{name}[{dt}]" for name in CASES for dt in HALF}
    assert set(recorded["cases"]) == want, sorted(set(recorded["cases"]) ^ want)


def test_promotion_table_matches_recorded_torch(recorded):
    ops = _operands()
    wrong = {}
    for key, want in recorded["promotion"].items():
        args = []
        for k in key.split():
            code, kind, d = ops[k]
            args.append(d if kind == "number" else eval(code, {"torch": etorch})._t)  # noqa: S307
        got = D.result_type(*args)
        if got != want:
            wrong[key] = (got, want)
    assert len(recorded["promotion"]) == 2 * 20 * 3 + 20 * 20
    assert not wrong, wrong


def test_promote_types_is_symmetric_and_matches_the_table(recorded):
    for a in DTYPES:
        for b in DTYPES:
            assert D.promote(a, b) == D.promote(b, a) == recorded["promotion"][f"dim:{a} dim:{b}"]
    assert D.promote("float16", "bfloat16") == "float32"


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", sorted(CASES))
def test_engine_matches_recorded_torch(name, dtype, recorded):
    got = run_case(CASES[name], dtype, etorch, EF)
    want = recorded["cases"][f"{name}[{dtype}]"]
    d = distance(got, want)
    assert d <= INEXACT.get(name, 0), f"{name}[{dtype}] ({d} ulps)\n  engine: {got}\n  torch:  {want}"


def test_distance_sees_one_ulp_and_a_different_dtype():
    """The comparison is not vacuous."""
    one = {"value": {"dtype": "float16", "shape": [1], "values": [1.0], "grad_fn": None}}
    next_up = {"value": {"dtype": "float16", "shape": [1], "values": [1.0009765625], "grad_fn": None}}
    assert distance(one, next_up) == 1.0
    assert distance(one, {"value": {**one["value"], "dtype": "bfloat16"}}) == math.inf
    b = {"value": {"dtype": "bfloat16", "shape": [1], "values": [2.0], "grad_fn": None}}
    assert distance(b, {"value": {**b["value"], "values": [2.015625]}}) == 1.0


def test_recorded_outcomes_are_what_torch_does(recorded):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as TF
    assert promotion_table(torch) == recorded["promotion"]
    for key, want in recorded["cases"].items():
        name, dtype = key[:-1].split("[")
        live = run_case(CASES[name], dtype, torch, TF)
        assert distance(live, want) == 0, f"{key}: torch {torch.__version__} gives {live}"


def record() -> None:
    import torch
    import torch.nn.functional as TF
    out = {"cases": {f"{name}[{dt}]": run_case(code, dt, torch, TF) for name, code in sorted(CASES.items())
                     for dt in HALF},
           "promotion": promotion_table(torch)}
    FIXTURE.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(out['cases'])} cases and {len(out['promotion'])} promotions from torch "
          f"{torch.__version__} into {FIXTURE.name}")


if __name__ == "__main__":
    if "--record" in sys.argv:
        record()
