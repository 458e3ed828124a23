"""Limits that are plain 4xx answers, in process (the process-level behaviour, memory, CPU and hang-ups, is
tested against a real server in tests/deploy/test_resource_limits.py)."""

from __future__ import annotations

import shutil

import pytest

from tests.app.conftest import assert_problem, make_client, ok, run


def _summary(client, sid: str) -> dict:
    return ok(client.get(f"/v1/sessions/{sid}"))


def test_session_bytes_are_refused_before_the_allocation_with_nothing_applied():
    with make_client(max_bytes_per_session=1_000_000) as c:
        sid = c.post("/v1/sessions").json()["id"]
        ok(run(c, sid, [{"op": "ones", "args": [100_000], "out": "a"}]))  # 400 kB
        before = _summary(c, sid)
        r = run(c, sid, [{"op": "mul", "args": ["a", 2.0], "out": "b"},      # 800 kB held
                         {"op": "ones", "args": [100_000], "out": "c"}])      # would be 1.2 MB
        body = assert_problem(r, 422, "limit_exceeded")
        assert body["op_index"] == 1
        assert "GRADSERVE_MAX_BYTES_PER_SESSION" in body["detail"] and "1000000" in body["detail"]
        assert _summary(c, sid)["tensors"] == before["tensors"]


def test_a_loop_that_frees_what_it_made_fits_in_the_budget():
    """Bytes are counted while they are held, not summed over the run: 200 rebindings of a 400 kB result
    (80 MB allocated in all) fit in a 2 MB budget."""
    with make_client(max_bytes_per_session=2_000_000) as c:
        sid = c.post("/v1/sessions").json()["id"]
        ok(run(c, sid, [{"op": "ones", "args": [100_000], "out": "a"}]))
        ok(run(c, sid, [{"op": "mul", "args": ["a", 1.0], "out": "b"}, {"op": "exp", "args": ["b"], "out": "b"}],
               repeat=100))


def test_records_times_repeat_are_bounded_before_the_response_is_built():
    with make_client(max_response_bytes=200_000) as c:
        sid = c.post("/v1/sessions").json()["id"]
        ok(run(c, sid, [{"op": "zeros", "args": [1000], "out": "x"}]))
        before = _summary(c, sid)
        r = run(c, sid, [{"op": "add_", "args": ["x", 1.0]}], repeat=40, record=["x"])  # 40 x ~16 kB of JSON
        body = assert_problem(r, 422, "limit_exceeded")
        assert "GRADSERVE_MAX_RESPONSE_BYTES" in body["detail"] and "200000" in body["detail"]
        after = _summary(c, sid)
        assert (after["tensors"], after["node_count"]) == (before["tensors"], before["node_count"])
        assert ok(c.get(f"/v1/sessions/{sid}/tensors/x"))["version"] == 0  # nothing applied
        # base64 is ~3x smaller, and fewer repetitions fit
        ok(c.post(f"/v1/sessions/{sid}/ops?encoding=base64",
                  json={"ops": [{"op": "add_", "args": ["x", 1.0]}], "repeat": 20, "record": ["x"]}))


def test_reads_and_eval_answers_are_bounded_too():
    with make_client(max_response_bytes=100_000) as c:
        sid = c.post("/v1/sessions").json()["id"]
        assert_problem(run(c, sid, [{"op": "zeros", "args": [5000], "out": "x"},
                                    {"op": "zeros", "args": [5000], "out": "y"}]), 422, "limit_exceeded")
        ok(run(c, sid, [{"op": "zeros", "args": [5000], "out": "x"}]))
        ok(run(c, sid, [{"op": "zeros", "args": [5000], "out": "y"}]))
        ok(c.get(f"/v1/sessions/{sid}/tensors/x"))          # ~80 kB of JSON at most
        assert_problem(c.get(f"/v1/sessions/{sid}/tensors"), 422, "limit_exceeded")
        ok(c.get(f"/v1/sessions/{sid}/tensors?encoding=base64"))
        body = {"ops": [{"op": "zeros", "args": [5000], "out": "x"}, {"op": "zeros", "args": [5000], "out": "y"}]}
        assert_problem(c.post("/v1/eval", json=body), 422, "limit_exceeded")
        ok(c.post("/v1/eval", json={**body, "return": ["y"]}))


def test_deadline_is_504_with_nothing_applied():
    with make_client(request_deadline_seconds=0.3) as c:
        sid = c.post("/v1/sessions").json()["id"]
        ok(run(c, sid, [{"op": "randn", "args": [300, 300], "out": "a"}]))
        # tanh keeps the values finite, so every iteration is a real 300x300 matmul (seconds in all)
        r = run(c, sid, [{"op": "matmul", "args": ["a", "a"], "out": "b"}, {"op": "tanh", "args": ["b"], "out": "a"}],
                repeat=1000)
        body = assert_problem(r, 504, "deadline_exceeded")
        assert "GRADSERVE_REQUEST_DEADLINE_SECONDS" in body["detail"] and "0.3 s" in body["detail"]
        assert ok(c.get(f"/v1/sessions/{sid}/tensors/a"))["version"] == 0
        ok(run(c, sid, [{"op": "sum", "args": ["a"], "out": "s"}]))


def test_graph_drawings_are_bounded_by_a_node_limit():
    with make_client(max_graph_render_nodes=50) as c:
        sid = c.post("/v1/sessions").json()["id"]
        ops = [{"op": "tensor", "args": [1.0], "kwargs": {"requires_grad": True}, "out": "h"}]
        ops += [{"op": "mul", "args": ["h", 1.5], "out": "h"}] * 60
        ok(run(c, sid, ops))
        assert len(ok(c.get(f"/v1/sessions/{sid}/graph"))["nodes"]) == 61
        for fmt in ("svg", "dot", "mermaid"):
            for url in (f"/v1/sessions/{sid}/graph/{fmt}", f"/v1/sessions/{sid}/graph?format={fmt}"):
                body = assert_problem(c.get(url), 422, "limit_exceeded")
                assert "61 nodes" in body["detail"] and "GRADSERVE_MAX_GRAPH_RENDER_NODES" in body["detail"]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")
def test_graphviz_past_its_timeout_falls_back_to_the_builtin_layout():
    with make_client(graph_render_timeout_seconds=0.001) as c:
        sid = c.post("/v1/sessions").json()["id"]
        ok(run(c, sid, [{"op": "tensor", "args": [1.0], "kwargs": {"requires_grad": True}, "out": "x"},
                        {"op": "mul", "args": ["x", 2.0], "out": "y"}]))
        r = c.get(f"/v1/sessions/{sid}/graph?format=svg")
        assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
        assert 'font-family="monospace"' in r.text and "MulBackward0" in r.text  # the built-in layout's
    with make_client() as c:
        sid = c.post("/v1/sessions").json()["id"]
        ok(run(c, sid, [{"op": "tensor", "args": [1.0], "kwargs": {"requires_grad": True}, "out": "x"},
                        {"op": "mul", "args": ["x", 2.0], "out": "y"}]))
        assert "Generated by graphviz" in c.get(f"/v1/sessions/{sid}/graph?format=svg").text


# ----- a transform's result against the response limit, before any pass (issue 27) --------------------------
def transform_ops(transform: str, n: int = 1000) -> list[dict]:
    body = [{"op": "mul", "args": ["a", 2.0], "out": "b"}, *[{"op": "sin", "args": ["b"], "out": "b"}] * 40]
    if transform == "hessian":
        body.append({"op": "sum", "args": ["b"], "out": "b"})
    return [{"op": "ones", "out": "x", "args": [n], "kwargs": {"requires_grad": True}},
            {"op": "function", "out": "f", "kwargs": {"inputs": ["a"], "outputs": "b", "ops": body}},
            {"op": transform, "args": ["f", "x"], "out": "J"}]


@pytest.mark.parametrize("transform", ["jacobian", "hessian"])
def test_a_transform_result_over_the_response_limit_is_refused_before_any_pass(transform):
    import time

    client = make_client(max_response_bytes=2_000_000)
    started = time.monotonic()  # 1,000 passes of a 41-op body took 2.8 s before the 422 (a loaded machine)
    body = assert_problem(client.post("/v1/eval", json={"ops": transform_ops(transform), "return": ["J"]}), 422,
                          "limit_exceeded")
    assert time.monotonic() - started < 1.5
    assert "in the response would carry about 16000004 bytes" in body["detail"]  # (a hessian: its outer jacobian)
    assert "GRADSERVE_MAX_RESPONSE_BYTES" in body["detail"]
    session = client.post("/v1/sessions").json()["id"]  # a session shows what changed: J too
    assert_problem(client.post(f"/v1/sessions/{session}/ops", json={"ops": transform_ops(transform)}), 422,
                   "limit_exceeded")
    assert client.get(f"/v1/sessions/{session}").json()["tensors"] == {}  # nothing applied


def test_a_transform_result_the_response_does_not_show_is_computed():
    client = make_client(max_response_bytes=200_000)
    reduced = [*transform_ops("jacobian", 300), {"op": "sum", "args": ["J"], "out": "s"}]
    answer = ok(client.post("/v1/eval", json={"ops": reduced, "return": ["s"]}))  # J is not returned
    assert answer["tensors"]["s"]["shape"] == []
    session = client.post("/v1/sessions").json()["id"]
    ok(client.post(f"/v1/sessions/{session}/ops", json={"ops": [*reduced, {"op": "del", "args": ["J", "x"]}]}))
    assert "J" not in client.get(f"/v1/sessions/{session}").json()["tensors"]
    # rebound by a later op: the response shows the later value, not the jacobian
    rebound = [*transform_ops("jacobian", 300), {"op": "sum", "args": ["J"], "out": "J"}]
    assert ok(client.post("/v1/eval", json={"ops": rebound, "return": ["J"]}))["tensors"]["J"]["shape"] == []
