"""Which way an op list ran (engine/trace/route.py), through the HTTP API: the `X-Gradserve-Route` header a request asks
for with `X-Gradserve-Debug: route`, the `gradserve_route_total{route,reason}` counter in /metrics and the access
log line's `engine_route`/`engine_reason`, for /v1/eval and session op lists."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve_server.engine as E

from .conftest import make_client, ok
from .test_compose_http import _scalar_graph
from .test_observability import log_lines, metric  # noqa: F401 - log_lines: a fixture
from .test_plans import T, mlp, op

DEBUG = {"X-Gradserve-Debug": "route"}


def route_of(response) -> tuple[str, str]:
    """(route, reason) of the response's X-Gradserve-Route header."""
    value = response.headers["x-gradserve-route"]
    name, _, rest = value.partition("; reason=")
    return name, rest.partition(";")[0]


@pytest.mark.parametrize("lane", [{}, {"inline_max_body_bytes": 0}], ids=["inline", "thread_pool"])
def test_an_eval_reports_cold_then_recorded_then_replayed_and_counts_each_route(lane):
    body = {"ops": mlp(np.random.default_rng(0))}
    with make_client(**lane) as c:  # (the default: a structure's plan recorded at its second run)
        seen = [route_of(ok_response(c.post("/v1/eval", json=body, headers=DEBUG))) for _ in range(3)]
        assert seen == [("cold", "short_list"), ("recorded", "no_plan"), ("replayed", "plan_hit")]
        text = c.get("/metrics").text
    assert metric(text, "gradserve_route_total", route="cold", reason="short_list") == 1
    assert metric(text, "gradserve_route_total", route="recorded", reason="no_plan") == 1
    assert metric(text, "gradserve_route_total", route="replayed", reason="plan_hit") == 1


def ok_response(response):
    assert response.status_code == 200, response.text
    return response


def test_the_route_header_is_absent_unless_asked_for():
    body = {"ops": mlp(np.random.default_rng(1))}
    with make_client() as c:
        for _ in range(2):
            r = c.post("/v1/eval", json=body)
            assert r.status_code == 200 and "x-gradserve-route" not in r.headers
        r = c.post("/v1/eval", json=body, headers={"X-Gradserve-Debug": "other"})
        assert "x-gradserve-route" not in r.headers
        r = c.post("/v1/eval", json=body, headers={"X-Gradserve-Debug": "timing, Route"})
        assert route_of(r) == ("replayed", "plan_hit")
        # not an op list: nothing ran, nothing to say
        assert "x-gradserve-route" not in c.get("/v1/ops", headers=DEBUG).headers
        # the body is the same whether asked or not
        assert c.post("/v1/eval", json=body).content == c.post("/v1/eval", json=body, headers=DEBUG).content


def test_a_long_first_sighting_is_composed_and_a_replay_whose_kernel_raises_falls_back():
    rng = np.random.default_rng(2)
    with make_client() as c:
        r = ok_response(c.post("/v1/eval", json={"ops": _scalar_graph(rng, 30, False)}, headers=DEBUG))
        assert route_of(r) == ("composed", "first_sighting")
        good = mlp(rng)
        for _ in range(2):
            ok(c.post("/v1/eval", json={"ops": good}))
        bad = [dict(o) for o in good]
        bad[3] = T("y", [1, 9])  # a target out of range: the same key, the replay's kernel raises
        r = c.post("/v1/eval", json={"ops": bad}, headers=DEBUG)
        assert r.status_code == 422 and r.json()["op_index"] == 7
        assert route_of(r) == ("fallback", "kernel_raised")
        # the detail names the op of the generated line that raised, never a value
        assert 'detail="op 7 cross_entropy' in r.headers["x-gradserve-route"]
        assert "9" not in r.headers["x-gradserve-route"].partition("detail=")[2].replace("op 7", "")
        text = c.get("/metrics").text
    assert metric(text, "gradserve_route_total", route="composed", reason="first_sighting") == 1
    assert metric(text, "gradserve_route_total", route="fallback", reason="kernel_raised") == 1
    assert metric(text, "gradserve_plan_fallbacks_total") == 1


def test_unplannable_lists_and_plans_off_say_why_they_ran_cold():
    # (a rounding mode is value-dependent numpy: no plan replays it)
    rounding = [T("x", [1.0, 2.0]), {"op": "div", "args": ["x", 2.0], "kwargs": {"rounding_mode": "floor"}, "out": "y"}]
    with make_client() as c:
        assert route_of(c.post("/v1/eval", json={"ops": rounding}, headers=DEBUG)) == ("cold", "unplannable_op")
    with make_client(plan_cache_entries=0) as c:
        assert route_of(c.post("/v1/eval", json={"ops": rounding}, headers=DEBUG)) == ("cold", "cache_disabled")
    with make_client(plan_record_after=1) as c:
        # a run that warns: recorded, found unplannable (remembered: the next run says why too)
        warns = [T("x", [1.0, 2.0], requires_grad=True), op("mul", "x", 2.0, out="y"), op("sum", "y", out="s"),
                 op("backward", "s"), op("bind", "y.grad", out="g")]  # (a non-leaf's .grad warns)
        first = c.post("/v1/eval", json={"ops": warns}, headers=DEBUG)
        assert first.status_code == 200 and first.json()["warnings"]
        assert route_of(first) == ("cold", "warning")
        assert route_of(c.post("/v1/eval", json={"ops": warns}, headers=DEBUG)) == ("cold", "warning")


def test_session_runs_report_their_route_and_deferred_runs_are_not_counted_unplannable():
    with make_client() as c:
        sid = c.post("/v1/sessions").json()["id"]
        ok(c.post(f"/v1/sessions/{sid}/ops", json={"ops": [T("w", [1.0, 2.0])]}))
        step = {"ops": [op("mul", "w", 2.0, out="w")]}
        seen = [route_of(c.post(f"/v1/sessions/{sid}/ops", json=step, headers=DEBUG)) for _ in range(3)]
        assert seen == [("cold", "first_sighting"), ("recorded", "no_plan"), ("replayed", "plan_hit")]
        r = c.post(f"/v1/sessions/{sid}/ops", json={**step, "repeat": 4}, headers=DEBUG)
        assert route_of(r) == ("replayed", "loop")
        r = c.post(f"/v1/sessions/{sid}/ops", json={**step, "record": ["w"]}, headers=DEBUG)
        assert route_of(r) == ("cold", "request_options")
        text = c.get("/metrics").text
    # (issue #27) a deferred session run is a first sighting, not an unplannable run
    assert metric(text, "gradserve_plan_deferred_total") >= 2
    assert metric(text, "gradserve_plan_unplannable_total") == 0
    assert metric(text, "gradserve_route_total", route="cold", reason="first_sighting") >= 2


def test_the_access_line_carries_the_route_and_reason(log_lines):  # noqa: F811 - the fixture
    body = {"ops": mlp(np.random.default_rng(3))}
    with make_client() as c:
        ok(c.post("/v1/eval", json=body))
        log_lines.clear()
        ok(c.post("/v1/eval", json=body))
        bad = [dict(o) for o in body["ops"]]
        bad[3] = T("y", [1, 9])
        assert c.post("/v1/eval", json={"ops": bad}).status_code == 422
        c.get("/healthz")
    access = [line for line in log_lines if line["logger"] == "gradserve.access"]
    assert [(a.get("engine_route"), a.get("engine_reason")) for a in access] == [
        ("recorded", "no_plan"), ("fallback", "kernel_raised"), (None, None)]
    assert access[1]["engine_detail"].startswith("op 7 cross_entropy")


@pytest.mark.parametrize("name", sorted(E.ROUTES))
def test_every_route_and_reason_is_documented(name):
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "explanation" / "plans.md").read_text()
    assert f"`{name}`" in page
    for reason in E.REASONS:
        assert f"`{reason}`" in page, reason
