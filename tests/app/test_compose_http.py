"""/v1/eval of a list without a plan, composed from per-op fragments (gradserve_server/engine/trace/compose.py): the
response is the cold run's byte for byte (a server with plans off as the reference), and /metrics counts the composed
runs."""

from __future__ import annotations

import base64

import numpy as np

from tests.engine.test_compose import _scalar_graph as scalar_graph

from .conftest import make_client
from .test_plans import metric as _metric
from .test_plans import same_evals


def _scalar_graph(rng, groups: int, b64: bool) -> list:
    """bench/engine.py's 10k-op graph in small (tests/engine/test_compose.py's); the inputs as JSON numbers or
    as base64 payloads."""
    def value(v):
        if not b64:
            return float(v)
        return {"dtype": "float32", "shape": [], "encoding": "base64",
                "data": base64.b64encode(np.float32(v).tobytes()).decode()}
    values = iter(np.round(rng.standard_normal(4 * groups), 4))
    return scalar_graph(groups, lambda: value(next(values)))


def test_a_repetitive_eval_is_composed_and_answers_byte_for_byte_what_the_cold_engine_does():
    rng = np.random.default_rng(0)
    bodies = []
    for b64 in (False, True):
        ops = _scalar_graph(rng, 30, b64)
        bodies += [{"ops": ops}, {"ops": ops, "return": ["total", "p0.grad", "sm3", "all"]}]
    # (the default server: a structure's plan is recorded at its second run; the first is composed)
    with make_client() as composing, make_client(plan_cache_entries=0) as cold:
        same_evals(composing, cold, bodies)
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


def test_composition_can_be_turned_off_and_the_list_then_runs_op_by_op():
    body = {"ops": _scalar_graph(np.random.default_rng(1), 10, False)}  # (133 ops)
    with make_client(plan_fragment_entries=0) as off, make_client(plan_cache_entries=0) as cold:
        same_evals(off, cold, [body])
        text = off.get("/metrics").text
        assert _metric(text, "gradserve_plan_composed") == 0
        assert _metric(text, "gradserve_plan_fragment_misses") == 0
        assert _metric(text, "gradserve_plan_cache_fragments") == 0
        assert _metric(text, "gradserve_plan_deferred") >= 1  # (plans stay on: the list was seen, to record later)
    with make_client() as on:
        on.post("/v1/eval", json=body)
        assert _metric(on.get("/metrics").text, "gradserve_plan_composed") == 1
