"""/v1/eval of a list without a plan, composed from per-op fragments (engine/compose.py): the response is the
cold run's byte for byte (a server with plans off as the reference), and /metrics counts the composed runs."""

from __future__ import annotations

import base64
import re

import numpy as np

from .conftest import make_client


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{name}(?:_total)? ([0-9.e+-]+)$", text, re.M)
    assert m, name
    return float(m.group(1))


def _scalar_graph(rng, groups: int, b64: bool) -> list:
    """bench/engine.py's 10k-op graph in small (softplus, mul by literals, stack, softmax, sum, backward); the
    inputs as JSON numbers or as base64 payloads."""
    def value(v):
        if not b64:
            return float(v)
        return {"dtype": "float32", "shape": [], "encoding": "base64",
                "data": base64.b64encode(np.float32(v).tobytes()).decode()}
    ops = [{"op": "tensor", "args": [value(v)], "kwargs": {"requires_grad": True}, "out": f"p{i}"}
           for i, v in enumerate(np.round(rng.standard_normal(4 * groups), 4))]
    for g in range(groups):
        items = []
        for j in range(4):
            ops += [{"op": "softplus", "args": [f"p{4 * g + j}"], "out": f"s{g}_{j}"},
                    {"op": "mul", "args": [f"s{g}_{j}", 0.5], "out": f"m{g}_{j}"}]
            items.append(f"m{g}_{j}")
        ops += [{"op": "stack", "args": [items], "out": f"st{g}"},
                {"op": "softmax", "args": [f"st{g}", 0], "out": f"sm{g}"},
                {"op": "mul", "args": [items[0], 1.0], "out": f"k{g}"},
                {"op": "mul", "args": [f"sm{g}", f"k{g}"], "out": f"q{g}"},
                {"op": "sum", "args": [f"q{g}"], "out": f"o{g}"}]
    ops += [{"op": "stack", "args": [[f"o{g}" for g in range(groups)]], "out": "all"},
            {"op": "sum", "args": ["all"], "out": "total"}, {"op": "backward", "args": ["total"]}]
    return ops


def test_a_repetitive_eval_is_composed_and_answers_byte_for_byte_what_the_cold_engine_does():
    rng = np.random.default_rng(0)
    bodies = []
    for b64 in (False, True):
        ops = _scalar_graph(rng, 30, b64)
        bodies += [{"ops": ops}, {"ops": ops, "return": ["total", "p0.grad", "sm3", "all"]}]
    # (the default server: a structure's plan is recorded at its second run; the first is composed)
    with make_client() as composing, make_client(plan_cache_entries=0) as cold:
        for body in bodies:
            for encoding in ("json", "base64"):
                a = composing.post(f"/v1/eval?encoding={encoding}", json=body)
                b = cold.post(f"/v1/eval?encoding={encoding}", json=body)
                assert a.status_code == b.status_code == 200
                assert a.content == b.content
        text = composing.get("/metrics").text
        # every body's first sighting per encoding composed; its second (same structure) recorded a plan
        assert _metric(text, "gradserve_plan_composed") >= 4
        assert _metric(text, "gradserve_plan_fragment_hits") > 10 * _metric(text, "gradserve_plan_fragment_misses")
        assert _metric(text, "gradserve_plan_cache_fragments") > 0


def test_a_composed_eval_that_fails_gives_the_cold_problem():
    rng = np.random.default_rng(1)
    ops = _scalar_graph(rng, 10, False)
    ops.insert(len(ops) - 1, {"op": "embedding", "args": ["total", "total"], "out": "bad"})
    with make_client() as composing, make_client(plan_cache_entries=0) as cold:
        a = composing.post("/v1/eval", json={"ops": ops})
        b = cold.post("/v1/eval", json={"ops": ops})
        assert a.status_code == b.status_code == 422
        # the same problem, but for its per-request id
        pa, pb = a.json(), b.json()
        assert {k: v for k, v in pa.items() if k not in ("instance", "request_id")} == \
            {k: v for k, v in pb.items() if k not in ("instance", "request_id")}
        assert pa["op_index"] == len(ops) - 2
