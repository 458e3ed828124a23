"""Bitwise ops (``&``, ``|``, ``^``, ``~``, ``<<``, ``>>`` and their ``bitwise_*`` functions) against torch 2.13:
on the bits of integers and bools with torch.result_type's dtype (the engine used to take ``&`` for logical_and:
int16 ``6 & 3`` was ``True``, not ``2``), a floating result type (a bool one, shifting) refused with torch's
exception and message, over every pair of the engine's dtypes and with numbers. torch's outcomes are in
``tests/fixtures/bitwise.json``, recomputed live when torch is installed. Re-record with
``python -m tests.engine.test_bitwise_torch --record``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gradserve_server.engine.torch_compat import torch as etorch

from .torch_cases import not_torchs, record, recorded_cases
from .view_dtype_cases import DTYPES

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bitwise.json"
_DATA = "a = torch.tensor([1, 6, -3, 0, 127]).to(A)\nb = torch.tensor([3, 5, -1, 7, -128]).to(B)\n"
CASES = {}
for _a in DTYPES:
    for _b in DTYPES:
        for _sym in ("&", "|", "^", "<<", ">>"):
            CASES[f"a {_sym} b[{_a},{_b}]"] = (_a, _b, f"r = a {_sym} b")
    for _code in ("r = ~a", "r = torch.bitwise_not(a)", "r = a & 6", "r = a | True", "r = a ^ 300", "r = a & 1.5",
                  "r = torch.bitwise_and(a, torch.tensor(2))", "r = torch.bitwise_xor(12, a)", "r = a.bitwise_or(5)",
                  "r = a << 3", "r = a >> 9", "r = torch.bitwise_left_shift(2, a)", "r = a.bitwise_right_shift(1)",
                  # in place: the result type must fit the target (checked before a floating type is refused)
                  "r = a.bitwise_and_(b)", "r = a.bitwise_or_(3)", "a ^= True\nr = a", "a <<= 1\nr = a",
                  "a >>= b\nr = a", "r = a.bitwise_not_()", "r = b.bitwise_xor_(a)"):
        CASES[f"{_code}[{_a}]"] = (_a, "int64", _code)


def run_case(key: str, torch_mod, suffix: str = "") -> dict:
    a, b, code = CASES[key]
    ns = {"torch": torch_mod, "A": getattr(torch_mod, a), "B": getattr(torch_mod, b)}
    try:
        exec(_DATA + code + suffix, ns)  # noqa: S102 - the table's torch code
    except Exception as exc:  # noqa: BLE001 - the outcome is the exception
        return {"error": {"type": getattr(exc, "exception", type(exc).__name__), "message": str(exc)}}
    r = ns["r"]
    return {"dtype": str(r.dtype).removeprefix("torch."), "value": r.tolist()}


@pytest.fixture(scope="module")
def recorded() -> dict:
    return recorded_cases(FIXTURE)


def test_every_case_is_recorded(recorded):
    assert sorted(recorded) == sorted(CASES)


def test_engine_matches_recorded_torch(recorded):
    wrong = {k: (g, recorded[k]) for k in CASES if (g := run_case(k, etorch)) != recorded[k]}
    assert not wrong, "\n".join(f"{k}\n  engine: {g}\n  torch:  {w}" for k, (g, w) in list(wrong.items())[:20])


def test_fixture_has_bits_and_refusals(recorded):
    assert recorded["a & b[int16,int16]"] == {"dtype": "int16", "value": [1, 4, -3, 0, 0]}
    assert recorded["r = ~a[float32]"]["error"]["type"] == "TypeError"
    assert recorded["a | b[float16,int64]"]["error"] == {
        "type": "NotImplementedError", "message": "\"bitwise_or_cpu\" not implemented for 'Half'"}


def test_recorded_outcomes_are_what_torch_does(recorded):
    wrong = not_torchs(CASES, run_case, recorded)
    assert not wrong, wrong[:20]


if __name__ == "__main__" and "--record" in sys.argv:
    record(FIXTURE, CASES, run_case)
