"""Bitwise ops over HTTP: ``bitwise_and`` and its operator name ``__and__`` act on bits (int16 ``6 & 3`` is 2),
``~`` of a float is torch's TypeError and ``bitwise_or`` of a float16 its NotImplementedError, as problems (the
engine-level checks against torch over every dtype pair are in tests/engine/test_bitwise_torch.py)."""

from __future__ import annotations

from .conftest import assert_problem, ok, run


def _ints(name: str, values: list, dtype: str = "int16") -> dict:
    return {"op": "tensor", "out": name, "args": [values], "kwargs": {"dtype": dtype}}


def test_bitwise_ops_act_on_bits(client, session):
    body = ok(run(client, session, [_ints("a", [6, -3, 0]), _ints("b", [3, 5, 7]),
                                    {"op": "bitwise_and", "out": "c", "args": ["a", "b"]},
                                    {"op": "__and__", "out": "d", "args": ["a", "b"]},
                                    {"op": "bitwise_xor", "out": "e", "args": ["a", 1]},
                                    {"op": "__invert__", "out": "f", "args": ["a"]}]))
    t = body["tensors"]
    assert t["c"]["data"] == t["d"]["data"] == [2, 5, 0] and t["c"]["dtype"] == "int16"
    assert t["e"]["data"] == [7, -4, 1] and t["f"]["data"] == [-7, 2, -1]


def test_bitwise_ops_of_floats_are_torchs_problems(client, session):
    ok(run(client, session, [{"op": "tensor", "out": "x", "args": [[1.0, 2.0]], "kwargs": {"dtype": "float16"}}]))
    body = assert_problem(run(client, session, [{"op": "__invert__", "out": "y", "args": ["x"]}]), 422,
                          detail="~ (operator.invert) is only implemented on integer and Boolean-type tensors")
    assert body["exception"] == "TypeError"
    body = assert_problem(run(client, session, [{"op": "bitwise_or", "out": "y", "args": ["x", 1]}]), 422,
                          detail="\"bitwise_or_cpu\" not implemented for 'Half'")
    assert body["exception"] == "NotImplementedError"
