"""Sessions: create, list, describe, delete, expiry; and reading their tensors."""

from __future__ import annotations

import base64
import math
import warnings

import numpy as np

from tests.app.conftest import assert_problem, make_client, ok, run, tensor


def test_create_session_returns_201_with_location_and_unguessable_id(client):
    r = client.post("/v1/sessions")
    assert r.status_code == 201
    body = r.json()
    assert r.headers["location"] == f"/v1/sessions/{body['id']}"
    assert len(base64.urlsafe_b64decode(body["id"] + "==")) * 8 >= 128
    assert body["created_at"] < body["expires_at"]
    assert body["ttl_seconds"] == 3600
    assert client.post("/v1/sessions").json()["id"] != body["id"]


def test_list_sessions_shows_created_sessions(client, session):
    other = client.post("/v1/sessions").json()["id"]
    ids = {s["id"] for s in ok(client.get("/v1/sessions"))["sessions"]}
    assert {session, other} <= ids


def test_session_summary_reports_tensors_nodes_backward_passes_and_memory(client, session):
    ok(run(client, session, [tensor("x", [1.0, 2.0]), {"op": "mul", "out": "y", "args": ["x", "x"]},
                             {"op": "sum", "out": "s", "args": ["y"]}, {"op": "backward", "args": ["s"]}]))
    body = ok(client.get(f"/v1/sessions/{session}"))
    assert set(body["tensors"]) == {"x", "y", "s"}
    assert body["tensors"]["x"] == {"shape": [2], "dtype": "float32", "requires_grad": True, "is_leaf": True,
                                    "grad_fn": None, "has_grad": True, "version": 0}
    assert body["tensors"]["y"]["grad_fn"] == "MulBackward0"
    assert body["backward_passes"] == 1
    assert body["memory_bytes"] >= 8
    assert body["node_count"] >= 0


def test_empty_session_summary(client, session):
    body = ok(client.get(f"/v1/sessions/{session}"))
    assert body["tensors"] == {} and body["backward_passes"] == 0 and body["node_count"] == 0


def test_delete_session_returns_204_then_404(client, session):
    r = client.delete(f"/v1/sessions/{session}")
    assert r.status_code == 204 and r.content == b""
    assert_problem(client.get(f"/v1/sessions/{session}"), 404, "session_not_found")
    assert_problem(client.delete(f"/v1/sessions/{session}"), 404, "session_not_found")


def test_unknown_session_is_404_on_every_session_route(client):
    for method, path in [("get", ""), ("get", "/tensors"), ("get", "/tensors/x"), ("get", "/graph")]:
        assert_problem(getattr(client, method)(f"/v1/sessions/nope{path}"), 404, "session_not_found")
    assert_problem(run(client, "nope", [tensor("x", 1.0)]), 404, "session_not_found")
    assert_problem(client.post("/v1/sessions/nope/backward", json={"tensor": "y"}), 404, "session_not_found")


def test_too_many_sessions_is_429():
    with make_client(max_sessions=2) as c:
        c.post("/v1/sessions"), c.post("/v1/sessions")
        r = c.post("/v1/sessions")
        body = assert_problem(r, 429, "too_many_sessions")
        assert "GRADSERVE_MAX_SESSIONS" in body["detail"]
        assert r.headers["retry-after"]


def test_sessions_expire_after_ttl_and_access_slides_the_ttl():
    with make_client(session_ttl_seconds=100) as c:
        now = [1000.0]
        c.app.state.store._clock = lambda: now[0]
        sid = c.post("/v1/sessions").json()["id"]
        now[0] += 80
        ok(c.get(f"/v1/sessions/{sid}"))  # renews
        now[0] += 80
        ok(c.get(f"/v1/sessions/{sid}"))
        now[0] += 101
        assert_problem(c.get(f"/v1/sessions/{sid}"), 404, "session_not_found")


def test_sweep_frees_expired_sessions_and_makes_room():
    with make_client(session_ttl_seconds=10, max_sessions=1) as c:
        now = [0.0]
        c.app.state.store._clock = lambda: now[0]
        c.post("/v1/sessions")
        assert_problem(c.post("/v1/sessions"), 429, "too_many_sessions")
        now[0] = 11
        assert c.app.state.store.sweep() == 1
        assert c.post("/v1/sessions").status_code == 201


def test_tensor_view_has_torch_fields_and_grad_is_null_before_backward(client, session):
    ok(run(client, session, [tensor("x", 2.0)]))
    view = ok(client.get(f"/v1/sessions/{session}/tensors/x"))
    assert view == {"name": "x", "shape": [], "dtype": "float32", "data": 2.0, "requires_grad": True,
                    "is_leaf": True, "grad_fn": None, "grad": None, "retains_grad": False, "version": 0,
                    "grad_accumulations": 0}


def test_list_tensors_returns_every_view(client, session):
    ok(run(client, session, [tensor("x", [1.0, 2.0]), tensor("n", [1, 2], requires_grad=False)]))
    body = ok(client.get(f"/v1/sessions/{session}/tensors"))
    assert set(body["tensors"]) == {"x", "n"}
    assert body["tensors"]["n"]["dtype"] == "int64" and body["tensors"]["n"]["data"] == [1, 2]


def test_grad_is_addressable_as_name_dot_grad(client, session):
    ok(run(client, session, [tensor("x", [1.0, 2.0]), {"op": "sum", "out": "s", "args": ["x"]},
                             {"op": "backward", "args": ["s"]}]))
    view = ok(client.get(f"/v1/sessions/{session}/tensors/x.grad"))
    assert view["name"] == "x.grad" and view["data"] == [1.0, 1.0] and view["is_leaf"] is True


def test_grad_of_tensor_without_gradient_is_404_grad_not_set(client, session):
    ok(run(client, session, [tensor("x", 1.0)]))
    assert_problem(client.get(f"/v1/sessions/{session}/tensors/x.grad"), 404, "grad_not_set")


def test_grad_of_non_leaf_is_404_with_torchs_warning_in_the_problem_not_the_server_log(client, session):
    """torch warns when the .grad of a non-leaf is read (and gives None): the problem body carries the warning;
    nothing goes to the server's Python warnings."""
    ok(run(client, session, [tensor("x", [1.0, 2.0], requires_grad=True), {"op": "mul", "out": "y", "args": ["x", 2.0]},
                             {"op": "sum", "out": "s", "args": ["y"]}, {"op": "backward", "args": ["s"]}]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        body = assert_problem(client.get(f"/v1/sessions/{session}/tensors/y.grad"), 404, "grad_not_set")
    assert body["warnings"][0].startswith("The .grad attribute of a Tensor that is not a leaf Tensor is being "
                                          "accessed.")
    assert not [w for w in caught if "not a leaf" in str(w.message)]
    # a leaf without a gradient: no warning (torch gives None silently)
    ok(run(client, session, [tensor("z", 1.0, requires_grad=True)]))
    assert "warnings" not in assert_problem(client.get(f"/v1/sessions/{session}/tensors/z.grad"), 404,
                                            "grad_not_set")


def test_unknown_tensor_name_is_404(client, session):
    body = assert_problem(client.get(f"/v1/sessions/{session}/tensors/nope"), 404, "unknown_tensor")
    assert "nope" in body["detail"]


def test_base64_encoding_of_tensor_view_round_trips_exactly(client, session):
    values = np.array([0.1, -2.5, 1e-30, 3.4e38], dtype=np.float32)
    ok(run(client, session, [tensor("x", values.tolist())]))
    view = ok(client.get(f"/v1/sessions/{session}/tensors/x", params={"encoding": "base64"}))
    data = view["data"]
    assert data["dtype"] == "float32" and data["shape"] == [4] and data["encoding"] == "base64"
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(data["data"]), "<f4"), values)


def test_json_float32_values_are_written_in_shortest_round_trip_form(client, session):
    ok(run(client, session, [tensor("x", [0.1, 1e-5, 16777217.0])]))
    raw = client.get(f"/v1/sessions/{session}/tensors/x").content
    assert b'"data":[0.1,0.00001,16777216.0]' in raw


def test_nonfinite_values_travel_as_strings_both_ways(client, session):
    ok(run(client, session, [tensor("x", ["NaN", "Infinity", "-Infinity", 1.5])]))
    view = ok(client.get(f"/v1/sessions/{session}/tensors/x"))
    assert view["data"] == ["NaN", "Infinity", "-Infinity", 1.5]
    b64 = ok(client.get(f"/v1/sessions/{session}/tensors/x", params={"encoding": "base64"}))["data"]
    got = np.frombuffer(base64.b64decode(b64["data"]), "<f4")
    assert math.isnan(got[0]) and got[1] == np.inf and got[2] == -np.inf


def test_unknown_encoding_is_422(client, session):
    assert_problem(client.get(f"/v1/sessions/{session}/tensors", params={"encoding": "xml"}), 422,
                   "validation_error")
