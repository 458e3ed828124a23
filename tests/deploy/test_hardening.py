"""Issue 27 against a real server process: integers outside int64, response limits on what is sent, bounds
that hold before the work (transforms, function bodies under the deadline), a plan cache no key can observe
or flush for another, and cheap requests that stay cheap."""

from __future__ import annotations

import httpx
import pytest

from tests.deploy.servers import Uvicorn


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = Uvicorn.for_app({"GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND": "0", "GRADSERVE_ACCESS_LOG": "false"},
                              tmp_path_factory.mktemp("hardening") / "uvicorn.log").start()
    yield started
    started.kill()


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def run_eval(client: httpx.Client, ops: list[dict], **extra) -> httpx.Response:
    return client.post("/v1/eval", json={"ops": ops, **extra})


def assert_problem(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code, body
    return body


# ----- integers outside int64 --------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [[18446744073709551617], [-(2**63) - 1], 2**64, [[1, 2**70]], [True, 2**64]])
def test_integers_outside_int64_in_tensor_data_are_refused_as_torch_refuses_them(client, data):
    body = assert_problem(run_eval(client, [{"op": "tensor", "out": "z", "args": [data]}]), 422,
                          "invalid_tensor_data")
    assert body["exception"] == "ValueError" and body["detail"] == "Overflow when unpacking long long"
    sid = client.post("/v1/sessions").json()["id"]
    response = client.post(f"/v1/sessions/{sid}/ops", json={"ops": [{"op": "tensor", "out": "z", "args": [data]}]})
    assert_problem(response, 422, "invalid_tensor_data")
    assert client.get(f"/v1/sessions/{sid}/tensors").json()["tensors"] == {}  # nothing applied


def test_large_integers_beside_a_float_or_with_a_float_dtype_are_just_large_numbers(client):
    mixed = run_eval(client, [{"op": "tensor", "out": "z", "args": [[1.5, 18446744073709551616]]},
                              {"op": "tensor", "out": "f", "args": [2**64], "kwargs": {"dtype": "float64"}},
                              {"op": "tensor", "out": "edge", "args": [[2**63 - 1, -(2**63)]]}])
    assert mixed.status_code == 200, mixed.text
    tensors = mixed.json()["tensors"]
    assert tensors["z"]["dtype"] == "float32" and tensors["z"]["data"] == [1.5, 1.8446744e19]
    assert tensors["f"]["data"] == 1.8446744073709552e19
    assert tensors["edge"]["dtype"] == "int64" and tensors["edge"]["data"] == [2**63 - 1, -(2**63)]


# ----- response limits on what is sent ---------------------------------------------------------------------
def test_names_returned_at_meta_or_auto_level_count_as_what_is_sent(uvicorns):
    small = uvicorns({"GRADSERVE_MAX_RESPONSE_BYTES": "400000"})  # 100,000 float32 in JSON is ~1 MB
    with httpx.Client(base_url=small.url, timeout=30) as c:
        sid = c.post("/v1/sessions").json()["id"]
        ops = [{"op": "randn", "out": n, "args": [100_000]} for n in ("a", "b", "c")]
        meta = c.post(f"/v1/sessions/{sid}/ops", json={"ops": ops, "return": {"a": "meta", "b": "auto",
                                                                              "c": "meta"}})
        assert meta.status_code == 200, meta.text
        assert len(meta.content) < 2000 and meta.json()["tensors"]["b"]["shape"] == [100_000]
        assert "data" not in meta.json()["tensors"]["b"]
        # the same tensors in full are still refused before anything is applied
        full = c.post(f"/v1/sessions/{sid}/ops", json={"ops": [{"op": "randn", "out": "d", "args": [100_000]}],
                                                       "return": {"d": "full"}})
        assert_problem(full, 422, "limit_exceeded")
        assert set(c.get(f"/v1/sessions/{sid}").json()["tensors"]) == {"a", "b", "c"}  # nothing applied


# ----- plan metrics ----------------------------------------------------------------------------------------
def plan_counter(client: httpx.Client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f"gradserve_plan_{name}_total "):
            return float(line.split()[1])
    raise AssertionError(name)


def test_a_deferred_session_run_is_counted_as_deferred_not_unplannable(client):
    sid = client.post("/v1/sessions").json()["id"]
    made = client.post(f"/v1/sessions/{sid}/ops", json={"ops": [{"op": "tensor", "out": "x", "args": [[1.0, 2.0]]}]})
    assert made.status_code == 200
    before = {name: plan_counter(client, name) for name in ("deferred", "unplannable", "misses", "hits")}
    step = {"ops": [{"op": "mul", "out": "y", "args": ["x", 3.0]}], "no_grad": True}
    # deferred (the state holds x), deferred (x and y: another key), recorded, replayed
    for _ in range(4):
        assert client.post(f"/v1/sessions/{sid}/ops", json=step).status_code == 200
    after = {name: plan_counter(client, name) for name in before}
    assert {k: after[k] - before[k] for k in before} == {"deferred": 2, "unplannable": 0, "misses": 1, "hits": 1}
