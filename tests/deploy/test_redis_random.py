"""The session's generators in the Redis store: two apps over one Redis (two processes) draw one stream,
torch's, and a failed op list leaves the stored generator as it was."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from gradserve_server.app.config import Settings
from gradserve_server.app.main import create_app
from tests.app.conftest import ok, run
from tests.engine.random_cases import FIXTURE, digest

_FIXTURE = {(r["seed"], r["case"]): r for r in json.loads(FIXTURE.read_text())["cases"]}


@pytest.fixture
def clients(redis_url, key_prefix):
    settings = Settings(store_url=redis_url, redis_key_prefix=key_prefix, lock_ttl_seconds=2, lock_wait_seconds=5)
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        yield a, b


def _digest(client, sid, name):
    body = ok(client.get(f"/v1/sessions/{sid}/tensors/{name}"))
    return digest(np.asarray(body["data"], dtype=body["dtype"]))


def test_the_generators_travel_with_the_session_between_processes(clients):
    a, b = clients
    sid = a.post("/v1/sessions").json()["id"]
    ok(run(a, sid, [{"op": "manual_seed", "args": [42]}, {"op": "randn", "args": [3], "out": "a"}]))
    assert run(b, sid, [{"op": "randn", "args": [2], "out": "x"}, {"op": "nope"}]).status_code >= 400
    ok(run(b, sid, [{"op": "randn", "args": [17], "out": "r"}]))  # the cached normal of a's request first
    assert _digest(a, sid, "r") == _FIXTURE[(42, "randn_after_odd[17,float32]")]["r"]
    ok(run(a, sid, [{"op": "manual_seed", "args": [1]}, {"op": "Generator", "out": "g"},
                    {"op": "manual_seed", "args": [7], "kwargs": {"generator": "g"}},
                    {"op": "rand", "args": [5], "kwargs": {"generator": "g"}, "out": "a"}]))
    ok(run(b, sid, [{"op": "randn", "args": [20], "kwargs": {"generator": "g"}, "out": "r"}]))
    assert _digest(b, sid, "r") == _FIXTURE[(1, "generator")]["r"]
