"""The trace layer's one keyer (``engine.trace.key``): the pieces plans and fragments share give one answer
whichever of them asks."""

from __future__ import annotations

import numpy as np

from gradserve_server.engine.program import State
from gradserve_server.engine.trace.key import (
    _dropped_names,
    _key,
    _names,
    _pre_key,
    _tensor,
    _vjp_key,
)

from .test_plan import T, op


def _variables():
    a = np.ones((2, 3), np.float32)
    b = np.zeros((3,), np.float64)
    return {"a": (a, True, None, 0), "b": (b, False, None, 1), "c": (a[:, ::2], False, None, 2)}


def test_a_wide_ops_tensor_keys_are_the_narrow_rule_found_by_a_dict():
    """A tensor argument keys as its descriptor the first time and as its input index after, whether the indices
    are found by scanning (an op of a few tensors) or by a dict (a stack of many: ``seen``), also when the dict
    starts after some inputs were met."""
    ns = _variables()
    names = ["a", "b", "a", "c", "c", "b", "a"]
    narrow, vs_narrow = [], []
    for n in names:
        _tensor(n, ns, narrow, vs_narrow)
    wide, vs_wide, seen = [], [], {}
    for n in names:
        _tensor(n, ns, wide, vs_wide, seen)
    late, vs_late, seen = [], [], {}
    for i, n in enumerate(names):
        _tensor(n, ns, late, vs_late, seen if i >= 2 else None)
    assert narrow == wide == late
    assert len(narrow) == 16 and narrow[8] == 0 and narrow[13:] == [2, 1, 0]
    assert narrow[9:12] == [(2, 2), np.dtype(np.float32), (12, 8)]  # (a strided view keys its strides)
    assert [id(v) for v in vs_narrow] == [id(v) for v in vs_wide] == [id(ns[n]) for n in ("a", "b", "c")]


def test_the_pre_key_reads_the_list_text_the_full_key_reads():
    """A session list is remembered unplannable under its pre-key, whose text the full key reuses: both leave an
    input op's data out the same way (``_without_data``), for one argument or more."""
    ops = [T("x", [1.0, 2.0], requires_grad=True), {"op": "tensor", "args": [3.0, "float64"], "kwargs": {}, "out": "y"},
           op("mul", "x", 2.0, out="z"), op("add", "z", "y", out="w")]
    pre = _pre_key(State(), ops, ("extra",))
    full = _key(State(), ops, ("extra",))
    assert pre is not None and full is not None
    assert pre[0] == full[0][0]
    assert b"[1.0,2.0]" not in pre[0] and b'"float64"' in pre[0]


def test_the_strings_of_an_op_and_the_names_a_list_drops():
    o = {"op": "cat", "args": [["a", "b.grad"], 0], "kwargs": {"out_dtype": "float32", "n": [1, ("c",)]}, "out": "d"}
    assert _names(o) == ["a", "b.grad", "float32", "c"]
    ops = [op("mul", "x", 2.0, out="loss"), {"op": "del", "args": ["old"]}, op("add", "old2", 1.0, out="old2"),
           op("sum", "y.grad", out="y")]
    assert _dropped_names(ops) == {"loss", "old"}  # (old2 and y are read before they are bound)


def test_a_vjp_key_tells_a_gradient_that_is_a_saved_array():
    g = np.ones((2, 2), np.float32)
    s = np.zeros((2, 2), np.float32)
    assert _vjp_key([g], (s,), [g, s], 1) == ((2, 2), np.dtype(np.float32), (8, 4))
    aliased = _vjp_key([g], (g,), [g], 1)
    assert aliased == ((((2, 2), np.dtype(np.float32), (8, 4)),), (0, 0))
    assert _vjp_key([g, None], (s,), [g, s], 2) == ((((2, 2), np.dtype(np.float32), (8, 4)), None), (0, -1, 1))


def test_canonical_names_refuse_a_list_with_an_op_they_cannot_name_before_making_any():
    """A transform's call, an unknown or malformed op name (a list, an object, None): no canonical names (the
    list is keyed under its own), and no TypeError from an unhashable name; a session run of such a list gives
    the engine's own error."""
    import pytest

    from gradserve_server.engine.errors import EngineError
    from gradserve_server.engine.trace.cache import PlanCache
    from gradserve_server.engine.trace.key import _canonical
    from gradserve_server.engine.trace.plan import run_session_planned
    for bad in ([{"op": ["mul"], "args": []}], [{"op": {"a": 1}}], [{"op": None}], [3],
                [{"op": "jacobian", "args": ["f", "x"]}], [{"op": "no_such_op", "args": []}]):
        assert _canonical(bad, {}) is None
    assert _canonical([{"op": "mul", "args": ["x", 2.0], "out": "y"}], {}) is not None
    for bad in ([{"op": ["mul"], "args": []}], [{"op": {"a": 1}}]):
        with pytest.raises(EngineError):
            run_session_planned(PlanCache(), State(), bad)
