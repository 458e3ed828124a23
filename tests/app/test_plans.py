"""/v1/eval through compiled plans (gradserve_server/engine/trace/plan.py): a repeated op list is replayed, and the
response is the cold run's byte for byte (with plans turned off as the reference); guards, unplannable lists and the
cache's counters in /metrics, all through the HTTP API."""

from __future__ import annotations

import base64
import re

import numpy as np
import orjson

import gradserve_server.engine as E

from .conftest import assert_problem, make_client, ok


def T(name, data, **kw):
    return {"op": "tensor", "out": name, "args": [data], "kwargs": kw}


def op(name, *args, out=None, **kwargs):
    return {"op": name, "args": list(args), "kwargs": kwargs, "out": out}


def mlp(rng, target=(1, 0)):
    def m(*shape):
        return np.round(rng.standard_normal(shape), 3).tolist()
    return [T("x", m(2, 3)), T("w", m(3, 4), requires_grad=True), T("b", m(4), requires_grad=True),
            T("y", list(target)), op("matmul", "x", "w", out="z"), op("add", "z", "b", out="a"),
            op("tanh", "a", out="h"), op("cross_entropy", "h", "y", out="loss"), op("backward", "loss"),
            op("mul", "loss", 2.0, out="l2")]


def planning(**overrides):
    """A server that records a structure's plan at its first run (the tests below count replays from the
    second request on; the default, a plan recorded at the second run, is tested on its own)."""
    return make_client(**{"plan_record_after": 1, **overrides})


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{name}(?:_total)? ([0-9.e+-]+)$", text, re.M)
    assert m, name
    return float(m.group(1))


def same_evals(client, cold, bodies) -> None:
    """Each body through ``/v1/eval`` in each encoding: ``client`` answers byte for byte what ``cold`` (a server
    with plans off) answers."""
    for body in bodies:
        for encoding in ("json", "base64"):
            a = client.post(f"/v1/eval?encoding={encoding}", json=body)
            b = cold.post(f"/v1/eval?encoding={encoding}", json=body)
            assert a.status_code == b.status_code == 200
            assert a.content == b.content


def test_a_repeated_eval_is_replayed_and_answers_byte_for_byte_what_the_cold_engine_does():
    rng = np.random.default_rng(0)
    bodies = [{"ops": mlp(rng)} for _ in range(4)]
    bodies.append({"ops": bodies[0]["ops"], "return": ["loss", "w.grad", "h"]})
    bodies.append({"ops": bodies[1]["ops"], "return": ["loss", "w.grad", "h"]})
    with planning() as planned, make_client(plan_cache_entries=0) as cold:
        same_evals(planned, cold, bodies)
        text = planned.get("/metrics").text
        # one recording per (structure, return, encoding): 4 keys; every other request replayed
        assert metric(text, "gradserve_plan_misses") == 4
        assert metric(text, "gradserve_plan_hits") == 8
        assert metric(text, "gradserve_plan_fallbacks") == 0
        assert metric(text, "gradserve_plan_cache_entries") == 4
        assert metric(text, "gradserve_plan_cache_bytes") > 0
        assert "gradserve_plan" not in cold.get("/metrics").text


def test_a_guard_on_a_replay_gives_the_cold_problem_with_its_op_index_and_counts_a_fallback():
    rng = np.random.default_rng(1)
    with planning() as c:
        ok(c.post("/v1/eval", json={"ops": mlp(rng)}))
        ok(c.post("/v1/eval", json={"ops": mlp(rng)}))
        body = assert_problem(c.post("/v1/eval", json={"ops": mlp(rng, target=(1, 9))}), 422)
        assert body["detail"] == "Target 9 is out of bounds." and body["op_index"] == 7
        text = c.get("/metrics").text
        assert metric(text, "gradserve_plan_hits") == 1 and metric(text, "gradserve_plan_fallbacks") == 1
        # the plan stays: the next good request is replayed again
        ok(c.post("/v1/eval", json={"ops": mlp(rng)}))
        assert metric(c.get("/metrics").text, "gradserve_plan_hits") == 2


def test_an_unplannable_eval_stays_correct_and_is_counted():
    ops = [T("x", [[1.0, -2.0], [3.0, 4.0]], requires_grad=True), op("abs", "x", out="a"),
           op("clone", "a", out="c"), op("mul_", "c", 2.0), op("sum", "c", out="s"), op("backward", "s")]
    with planning() as c, make_client(plan_cache_entries=0) as cold:
        for _ in range(3):
            a, b = c.post("/v1/eval", json={"ops": ops}), cold.post("/v1/eval", json={"ops": ops})
            assert a.status_code == 200 and a.content == b.content
        text = c.get("/metrics").text
        assert metric(text, "gradserve_plan_unplannable") == 3 and metric(text, "gradserve_plan_hits") == 0


def test_the_plan_cache_is_bounded_by_its_settings():
    with planning(plan_cache_entries=2) as c:
        for n in range(1, 5):
            ok(c.post("/v1/eval", json={"ops": [T("x", [1.0] * n, requires_grad=True), op("sum", "x", out="s"),
                                                op("backward", "s")]}))
        text = c.get("/metrics").text
        assert metric(text, "gradserve_plan_cache_entries") == 2 and metric(text, "gradserve_plan_evictions") == 2


def test_a_repeated_session_list_without_a_graph_is_replayed_and_answers_what_the_cold_engine_does():
    rng = np.random.default_rng(3)
    energy = {"op": "function", "out": "energy", "kwargs": {"inputs": ["q"], "outputs": "e", "ops": [
        op("matmul", "A", "q", out="aq"), op("tanh", "aq", out="t"), op("sum", "t", out="s1"),
        op("pow", "q", 4, out="q4"), op("sum", "q4", out="s2"), op("div", "s2", 4.0, out="s3"),
        op("add", "s1", "s3", out="e")]}}
    setup = [T("A", np.round(rng.standard_normal((4, 4)), 3).tolist(), dtype="float64"),
             T("p", np.round(rng.standard_normal(4), 3).tolist(), dtype="float64", requires_grad=True),
             T("h0", np.round(rng.standard_normal((2, 3)), 3).tolist()), energy]
    lists = [[T("v", np.round(rng.standard_normal(4), 3).tolist(), dtype="float64"),
              op("hvp", "energy", "p", "v", out=["e", "Hv"])] for _ in range(4)]
    lists += [[T("y", [1, 0]), op("cross_entropy", "h0", "y", out="loss")]] * 3
    lists += [[T("y", [1, 9]), op("cross_entropy", "h0", "y", out="loss")]]     # a guard: the cold problem
    lists += [[op("mul", "p", 2.0, out="p2")]] * 2                                # requires grad: stays cold
    with planning() as planned, make_client(plan_cache_entries=0) as cold:
        sa, sb = (c.post("/v1/sessions").json()["id"] for c in (planned, cold))
        ok(planned.post(f"/v1/sessions/{sa}/ops", json={"ops": setup}))
        ok(cold.post(f"/v1/sessions/{sb}/ops", json={"ops": setup}))
        for ops in lists:
            for encoding in ("json", "base64"):
                a = planned.post(f"/v1/sessions/{sa}/ops?encoding={encoding}", json={"ops": ops})
                b = cold.post(f"/v1/sessions/{sb}/ops?encoding={encoding}", json={"ops": ops})
                assert a.status_code == b.status_code
                if a.status_code == 200:
                    assert a.content.replace(sa.encode(), b"") == b.content.replace(sb.encode(), b"")
                else:
                    assert a.json()["detail"] == b.json()["detail"] and a.json()["op_index"] == b.json()["op_index"]
                assert planned.get(f"/v1/sessions/{sa}/tensors?encoding=base64").content == \
                    cold.get(f"/v1/sessions/{sb}/tensors?encoding=base64").content
        text = planned.get("/metrics").text
        assert metric(text, "gradserve_plan_hits") >= 6
        assert metric(text, "gradserve_plan_fallbacks") == 2


def test_a_session_repeat_until_loop_through_plans_answers_what_the_cold_engine_does():
    step = [T("k", 0.5, dtype="float64"), op("mul", "x", "k", out="y"), op("add", "y", 0.1, out="x"),
            op("sum", "x", out="s"), op("neg", "s", out="ns"), op("add", "ns", 1.25, out="m"),
            op("relu", "m", out="r"), op("to", "r", dtype="bool", out="done")]
    bodies = [{"ops": step, "repeat": 40, "until": "done"}, {"ops": step, "repeat": 3},
              {"ops": step, "repeat": 5, "until": "missing"}, {"ops": step, "repeat": 6, "until": "done"}]
    with planning() as planned, make_client(plan_cache_entries=0) as cold:
        sa, sb = (c.post("/v1/sessions").json()["id"] for c in (planned, cold))
        for c, s in ((planned, sa), (cold, sb)):
            ok(c.post(f"/v1/sessions/{s}/ops", json={"ops": [T("x", [3.0, 2.0, 1.0], dtype="float64")]}))
        for body in bodies * 2:
            a = planned.post(f"/v1/sessions/{sa}/ops", json=body)
            b = cold.post(f"/v1/sessions/{sb}/ops", json=body)
            assert a.status_code == b.status_code
            if a.status_code == 200:
                assert a.content.replace(sa.encode(), b"") == b.content.replace(sb.encode(), b"")
            else:  # (a problem carries its request's own id)
                assert {k: v for k, v in a.json().items() if k not in ("instance", "request_id")} == \
                    {k: v for k, v in b.json().items() if k not in ("instance", "request_id")}
            assert planned.get(f"/v1/sessions/{sa}/tensors?encoding=base64").content == \
                cold.get(f"/v1/sessions/{sb}/tensors?encoding=base64").content
        assert metric(planned.get("/metrics").text, "gradserve_plan_hits") > 10


def test_session_jacobians_hessians_and_a_comparison_until_loop_replay_and_answer_what_the_cold_engine_does():
    rng = np.random.default_rng(5)
    layer = {"op": "function", "out": "layer", "kwargs": {"inputs": ["u"], "outputs": "y", "ops": [
        op("matmul", "W", "u", out="h"), op("tanh", "h", out="y")]}}
    energy = {"op": "function", "out": "energy", "kwargs": {"inputs": ["q"], "outputs": "e", "ops": [
        op("matmul", "W", "q", out="wq"), op("cosh", "wq", out="c"), op("log", "c", out="lc"),
        op("sum", "lc", out="s1"), op("pow", "q", 4, out="q4"), op("sum", "q4", out="s2"),
        op("add", "s1", "s2", out="e")]}}
    setup = [T("W", np.round(rng.standard_normal((4, 4)), 3).tolist(), dtype="float64"), layer, energy]
    bodies = []
    for _ in range(3):
        bodies += [{"ops": [T("x", np.round(rng.standard_normal(4), 3).tolist(), dtype="float64")]},
                   {"ops": [op("jacobian", "layer", "x", vectorize=True, out="J")]},
                   {"ops": [op("jacobian", "layer", "x", vectorize=True, strategy="forward-mode", out="Jf")]},
                   {"ops": [op("hessian", "energy", "x", vectorize=True, out="H")]}]
    halve = [op("mul", "x", 0.5, out="x"), op("sum", "x", out="s"), op("mul", "s", "s", out="a"),
             op("lt", "a", 1e-12, out="done")]
    bodies += [{"ops": halve, "repeat": 30, "until": "done"}] * 2
    with planning() as planned, make_client(plan_cache_entries=0) as cold:
        sa, sb = (c.post("/v1/sessions").json()["id"] for c in (planned, cold))
        ok(planned.post(f"/v1/sessions/{sa}/ops", json={"ops": setup}))
        ok(cold.post(f"/v1/sessions/{sb}/ops", json={"ops": setup}))
        for body in bodies:
            a = planned.post(f"/v1/sessions/{sa}/ops?encoding=base64", json=body)
            b = cold.post(f"/v1/sessions/{sb}/ops?encoding=base64", json=body)
            assert a.status_code == b.status_code == 200
            assert a.content.replace(sa.encode(), b"") == b.content.replace(sb.encode(), b"")
            assert planned.get(f"/v1/sessions/{sa}/tensors?encoding=base64").content == \
                cold.get(f"/v1/sessions/{sb}/tensors?encoding=base64").content
        text = planned.get("/metrics").text
        # each transform replays on its third run (recorded on fresh names, then on rebound ones); the loops'
        # iterations replay
        assert metric(text, "gradserve_plan_hits") >= 3 + 10
        assert metric(text, "gradserve_plan_fallbacks") == 0


def test_a_replayed_eval_answers_each_return_form_byte_for_byte_what_the_cold_engine_does():
    """A replay's namespace is made lazily (only the tensors a response reads): every form of ``return`` (a
    subset, gradients, gradients of gradients, the same name twice, none, an unknown name or reference), and
    values whose autograd report cannot name them (NaN is not equal to itself), answer as the cold run does."""
    def body(x, ret):
        ops = [T("x", x, requires_grad=True), op("pow", "x", 3, out="y"), op("sum", "y", out="s"),
               op("grad", "s", ["x"], create_graph=True, out=["g"]), op("retain_grad", "g"),
               op("mul", "g", "g", out="gg"), op("sum", "gg", out="s2"), op("backward", "s2"),
               op("mul", "x", 2.0, out="x2"), op("sum", "x2", out="s3"), op("backward", "s3")]
        return {"ops": ops} if ret is None else {"ops": ops, "return": ret}
    returns = [None, ["s"], ["g.grad", "x.grad"], ["x.grad", "x.grad", "y"], ["gg", "g", "x"], ["nope"], ["x.nope"]]
    with planning() as planned, make_client(plan_cache_entries=0) as cold:
        for x in ([0.5, -1.5], [2.0, 0.25], ["NaN", 1.0], [1.0, "Infinity"]):
            for ret in returns:
                for encoding in ("json", "base64"):
                    a = planned.post(f"/v1/eval?encoding={encoding}", json=body(x, ret))
                    b = cold.post(f"/v1/eval?encoding={encoding}", json=body(x, ret))
                    assert a.status_code == b.status_code, (x, ret)
                    if a.status_code == 200:
                        assert a.content == b.content, (x, ret)
                    else:
                        assert {k: v for k, v in a.json().items() if k not in ("instance", "request_id")} == \
                            {k: v for k, v in b.json().items() if k not in ("instance", "request_id")}
        assert metric(planned.get("/metrics").text, "gradserve_plan_hits") >= 2 * 2 * len(returns)


def test_by_default_a_structure_run_once_is_not_recorded_the_second_run_records_and_later_runs_replay():
    """GRADSERVE_PLAN_RECORD_AFTER (2): a one-off op list never pays for recording a plan; a repeated one is
    recorded at its second run and replayed from the third on, each answer the cold engine's byte for byte.
    A repeat loop records at its first iteration."""
    rng = np.random.default_rng(7)
    bodies = [{"ops": mlp(rng)} for _ in range(4)]
    with make_client() as planned, make_client(plan_cache_entries=0) as cold:
        for i, body in enumerate(bodies):
            a, b = planned.post("/v1/eval", json=body), cold.post("/v1/eval", json=body)
            assert a.status_code == b.status_code == 200 and a.content == b.content
            text = planned.get("/metrics").text
            assert metric(text, "gradserve_plan_deferred") == 1
            assert metric(text, "gradserve_plan_misses") == (0 if i == 0 else 1)
            assert metric(text, "gradserve_plan_hits") == max(0, i - 1)
        sid = planned.post("/v1/sessions").json()["id"]
        ok(planned.post(f"/v1/sessions/{sid}/ops", json={"ops": [T("v", [1.0, 2.0])]}))
        ok(planned.post(f"/v1/sessions/{sid}/ops", json={
            "ops": [op("mul", "v", 0.5, out="v")], "repeat": 5, "no_grad": True}))
        text = planned.get("/metrics").text
        assert metric(text, "gradserve_plan_misses") == 2 and metric(text, "gradserve_plan_hits") >= 2 + 3
        assert ok(planned.get(f"/v1/sessions/{sid}/tensors/v"))["data"] == [1.0 / 32, 2.0 / 32]


def test_an_eval_returning_some_names_is_replayed_with_its_other_names_reused_and_answers_as_cold():
    """With ``return``, the names a response does not show are the run's own (a plan reuses their buffers): the
    answer is still the cold engine's byte for byte, and the autograd report still names where each pass's
    gradient is (a ``grad`` op's ``out``, ``x.grad``), shown or not."""
    def body(rng, ret):
        x = np.round(rng.standard_normal(20_000), 3).astype(np.float32).tolist()
        ops = [T("x", x, dtype="float32", requires_grad=True)]
        h = "x"
        for i in range(3):
            ops += [op("sin", h, out=f"s{i}"), op("mul", f"s{i}", 1.01, out=f"m{i}"),
                    op("add", f"m{i}", 0.1, out=f"a{i}"), op("tanh", f"a{i}", out=f"h{i}")]
            h = f"h{i}"
        ops += [op("sum", h, out="total"), op("grad", "total", ["x"], retain_graph=True, out=["dx"]),
                op("backward", "total")]
        return {"ops": ops, "return": ret}
    rng = np.random.default_rng(5)
    with planning() as planned, make_client(plan_cache_entries=0) as cold:
        for ret in (["total", "x.grad"], ["total"], ["h1", "dx"]):
            for _ in range(3):
                b = body(rng, ret)
                a, c = planned.post("/v1/eval?encoding=base64", json=b), cold.post("/v1/eval?encoding=base64", json=b)
                assert a.status_code == c.status_code == 200 and a.content == c.content
                got = a.json()
                assert set(got["tensors"]) == set(ret)
                assert [[e["contribution"] for e in r["entries"]] for r in got["autograd"]] == [["dx"], ["x.grad"]]
        assert metric(planned.get("/metrics").text, "gradserve_plan_hits") == 3 * 2


def _b64(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a)
    return {"dtype": str(a.dtype), "shape": list(a.shape), "encoding": "base64",
            "data": base64.b64encode(a.astype(a.dtype.newbyteorder("<")).tobytes()).decode()}


def test_base64_inputs_are_handed_over_and_answer_byte_for_byte_what_the_cold_engine_does():
    """Tensor ops whose data is a base64 payload (small, and large enough to be lifted out of the body and
    decoded in several pieces): the data is decoded into arrays handed over to the engine, which a replay keeps;
    every answer is the cold engine's byte for byte, including an in-place op over such an input and a payload
    that is not plain base64 (the usual decoding's problem)."""
    rng = np.random.default_rng(9)

    def body(n, k, inplace=False):
        x = rng.standard_normal((n, k)).astype(np.float32)
        w = rng.standard_normal((k, 3)).astype(np.float64).astype(np.float32)
        ops = [T("x", _b64(x)), T("w", _b64(w), requires_grad=True), T("y", _b64(rng.integers(0, 3, n))),
               op("matmul", "x", "w", out="z"), op("relu", "z", out="h"), op("cross_entropy", "h", "y", out="loss"),
               op("backward", "loss")]
        if inplace:
            ops.insert(3, op("mul_", "x", 0.5))
        return {"ops": ops}
    with planning() as planned, make_client(plan_cache_entries=0) as cold:
        for n, k in ((4, 5), (4, 5), (4, 5), (300, 200), (300, 200), (300, 200)):
            for inplace in (False, True):
                b = body(n, k, inplace)
                for encoding in ("json", "base64"):
                    ra = planned.post(f"/v1/eval?encoding={encoding}", json=b)
                    rb = cold.post(f"/v1/eval?encoding={encoding}", json=b)
                    assert ra.status_code == rb.status_code == 200 and ra.content == rb.content
        assert metric(planned.get("/metrics").text, "gradserve_plan_hits") >= 8
        bad = body(300, 200)
        bad["ops"][0]["args"][0]["data"] = bad["ops"][0]["args"][0]["data"][:5000] + " " + \
            bad["ops"][0]["args"][0]["data"][5001:]
        ra, rb = planned.post("/v1/eval", json=bad), cold.post("/v1/eval", json=bad)
        assert ra.status_code == rb.status_code == 422
        assert_problem(ra, 422, "invalid_tensor_payload")
        assert ra.json()["detail"] == rb.json()["detail"]


def test_only_a_one_shot_runs_tensor_op_payloads_are_handed_over_and_a_replay_keeps_them():
    """The service hands a payload over (``engine.Owned``: a fresh array of its own) only where it is a tensor
    op's data in /v1/eval; a session's ops and other ops' payloads are the usual read-only arrays (copied by the
    engine). A replayed eval keeps each handed-over array as its input tensor's data."""
    from gradserve_server.engine import Owned
    from gradserve_server.engine.trace.plan import run_planned
    rng = np.random.default_rng(10)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    body = {"ops": [T("x", _b64(x), requires_grad=True), op("mul", "x", 2.0, out="y"),
                    op("sum", "y", out="s"), op("backward", "s")]}
    raw = orjson.dumps(body)
    with planning() as client:
        service = client.app.state.service
        ev = service.parse_eval(orjson.dumps({"ops": [*body["ops"], op("where", _b64(x > 0), "x", 0.0, out="m")]}))
        owned, other = ev["ops"][0]["args"][0], ev["ops"][-1]["args"][0]
        assert isinstance(owned, Owned) and owned.array.flags.writeable and owned.array.base is None
        assert owned.array.tobytes() == x.tobytes()
        assert isinstance(other, np.ndarray) and not other.flags.writeable  # (not a tensor op's data)
        session_ops = service.parse_ops(raw)["ops"]
        assert isinstance(session_ops[0]["args"][0], np.ndarray) and not session_ops[0]["args"][0].flags.writeable
        for i in range(3):
            ev = service.parse_eval(raw)
            arr = ev["ops"][0]["args"][0].array
            state = E.State()
            run_planned(service.plans.of(""), state, ev["ops"], limits=service._limits(), respond="all",
                        extra=("json",))
            assert (state.tensors["x"].data is arr) == (i > 0)  # (the first run records, cold: a copy)
            assert state.tensors["x"].grad.data.tolist() == np.full_like(x, 2.0).tolist()
