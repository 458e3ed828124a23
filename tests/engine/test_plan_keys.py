"""Whole-list plan keys tell every float literal apart (issue #22, one keyer): the key of an op list is its JSON
text (orjson's), which writes inf, -inf and every NaN as ``null``, as it writes None. Through the engine API
(which, unlike HTTP's strict JSON, takes non-finite numbers), a plan recorded for ``x * inf`` must not replay for
``x * -inf``, ``x * nan`` or ``x * None``; the text key carries those values' bits (``key.null_bits``), as the
per-op fragment keys (``key.literal_key``) do."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

import gradserve_server.engine as E
from gradserve_server.engine.errors import EngineError
from gradserve_server.engine.program import State, run_program
from gradserve_server.engine.trace.cache import PlanCache
from gradserve_server.engine.trace.key import _dumps

LIMITS = E.Limits()
_NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_0000_0BAD))[0]


def _ops(c, data=(1.0, -2.0, 0.0), owned=False):
    # owned: the input's data as /v1/eval hands it over (an ``Owned`` array, left out of the text by orjson's hook)
    x = E.Owned(np.array(data)) if owned else list(data)
    return [{"op": "tensor", "args": [x], "out": "x"}, {"op": "mul", "args": ["x", c], "out": "y"},
            {"op": "add", "args": ["y", 1], "out": "z"}]


def _observe(run, ops):
    state = State()
    try:
        run(state, ops)
    except EngineError as e:
        return ("error", e.code, e.message)
    return ("ok", [(n, t.data.dtype.str, t.data.tobytes()) for n, t in state.tensors.items()])


def _cold(state, ops):
    return run_program(state, ops, limits=LIMITS, respond="all")


@pytest.mark.parametrize("owned", [False, True])
@pytest.mark.parametrize("order", [(math.inf, -math.inf, math.nan, _NAN_PAYLOAD, None, 2.0, -0.0, 0.0),
                                   (math.nan, _NAN_PAYLOAD, -math.inf, math.inf, 0.0, -0.0, None)])
def test_a_plan_replays_only_for_the_bits_it_was_recorded_for(order, owned):
    # (a replay looks its plan up by the bare text first, checking the text's nulls on a miss only: a text with a
    # non-finite float's null never finds a plan that way, whatever was recorded before it)
    cache = PlanCache()
    routes = []

    def traced(state, ops):
        res, route = E.dispatch(cache, state, ops, limits=LIMITS, respond="all")
        routes.append(route.name)
        return res

    for c in order * 2:  # (each value twice over: the second pass replays what the first recorded)
        assert _observe(traced, _ops(c, owned=owned)) == _observe(_cold, _ops(c, owned=owned)), (c, routes)
    assert "replayed" in routes


def test_the_text_key_keeps_a_finite_lists_bytes():
    ops = _ops(2.5)
    text = _dumps(ops)
    assert b"\0" not in text and text.startswith(b"[")  # (no suffix: the cost is one search for "null")
    keys = {_dumps(_ops(c)) for c in (math.inf, -math.inf, math.nan, _NAN_PAYLOAD, None, np.float64(math.inf))}
    assert len(keys) == 5  # (np.float64(inf) is inf)
    assert _dumps([None, math.inf]) != _dumps([math.inf, None])
    backward = [*_ops(2.5), {"op": "backward", "args": ["z"], "out": None}]  # (a None out: no walk, no suffix)
    assert b"\0" not in _dumps(backward)
    backward[1]["args"][1] = math.inf
    assert _dumps(backward).endswith(b"\0f" + struct.pack("<d", math.inf) + b"n")
    assert _dumps({"a": np.array([1.0, np.inf])}) != _dumps({"a": np.array([1.0, -np.inf])})
