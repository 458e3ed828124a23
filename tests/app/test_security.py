"""API keys, ownership, per-key quotas and rate limits, CORS, and the limit on op executions."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging

import pytest
from limits.aio.storage import MemoryStorage

from gradserve_server.app.auth import KeyRing, RateLimiter
from gradserve_server.app.openapi_dump import render
from tests.app.conftest import assert_problem, make_client, ok, run, tensor

ALICE, BOB = "alice-key-0123456789abcdef", "bob-key-0123456789abcdef"
A = {"Authorization": f"Bearer {ALICE}"}
B = {"X-API-Key": BOB}


@pytest.fixture
def keyed():
    with make_client(api_keys=f"{ALICE}, sha256:{hashlib.sha256(BOB.encode()).hexdigest()}") as c:
        yield c


def session_of(client, headers) -> str:
    r = client.post("/v1/sessions", headers=headers)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_keys_are_kept_only_as_digests():
    ring = KeyRing(f"{ALICE},sha256:{'ab' * 32}")
    assert ring.digests == (hashlib.sha256(ALICE.encode()).hexdigest(), "ab" * 32)
    assert ring.owner(ALICE) == ring.digests[0] and ring.owner("nope") is None
    with pytest.raises(ValueError, match="64 hex"):
        KeyRing("sha256:xyz")
    assert ALICE not in repr(make_client(api_keys=ALICE).app.state.settings)


@pytest.mark.parametrize("method,path", [("GET", "/v1/sessions"), ("POST", "/v1/sessions"), ("GET", "/v1/ops"),
                                         ("POST", "/v1/eval"), ("GET", "/v1/sessions/x/tensors"),
                                         ("DELETE", "/v1/sessions/x"), ("GET", "/v2/unknown")])
def test_protected_routes_need_a_key(keyed, method, path):
    body = assert_problem(keyed.request(method, path), 401, "unauthorized")
    assert "Bearer" in body["detail"]
    r = keyed.request(method, path, headers={"Authorization": "Bearer wrong"})
    assert_problem(r, 401, "unauthorized", "the API key is not valid")
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert_problem(keyed.request(method, path, headers={"Authorization": f"Basic {ALICE}"}), 401, "unauthorized")


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/docs", "/redoc", "/openapi.json",
                                  "/static/swagger-ui.css", "/metrics"])
def test_health_docs_and_metrics_stay_open(keyed, path):
    assert keyed.get(path).status_code == 200


def test_metrics_can_require_a_key():
    with make_client(api_keys=ALICE, metrics_require_key=True) as c:
        assert_problem(c.get("/metrics"), 401, "unauthorized")
        assert c.get("/metrics", headers=A).status_code == 200


def test_a_session_belongs_to_its_key_and_is_404_for_any_other(keyed):
    sid = session_of(keyed, A)
    ok(run_as(keyed, sid, A, [tensor("x", [1.0, 2.0])]))
    mine = ok(keyed.get(f"/v1/sessions/{sid}/tensors", headers=A))
    foreign = [("GET", f"/v1/sessions/{sid}", None), ("GET", f"/v1/sessions/{sid}/tensors", None),
               ("GET", f"/v1/sessions/{sid}/tensors/x", None), ("GET", f"/v1/sessions/{sid}/graph", None),
               ("POST", f"/v1/sessions/{sid}/ops", {"ops": [{"op": "mul_", "args": ["x", 2]}]}),
               ("POST", f"/v1/sessions/{sid}/backward", {"tensor": "x"}),
               ("POST", f"/v1/sessions/{sid}/zero_grad", {}),
               ("DELETE", f"/v1/sessions/{sid}", None)]
    missing = keyed.get("/v1/sessions/does-not-exist", headers=B).json()
    for method, path, body in foreign:
        problem = assert_problem(keyed.request(method, path, headers=B, json=body), 404, "session_not_found")
        # exactly what an unknown id gets: nothing tells that the session exists
        assert problem["detail"] == missing["detail"].replace("does-not-exist", sid)
    assert ok(keyed.get(f"/v1/sessions/{sid}/tensors", headers=A)) == mine
    assert [s["id"] for s in ok(keyed.get("/v1/sessions", headers=A))["sessions"]] == [sid]
    assert ok(keyed.get("/v1/sessions", headers=B))["sessions"] == []
    assert keyed.delete(f"/v1/sessions/{sid}", headers=A).status_code == 204


def run_as(client, sid, headers, ops):
    return client.post(f"/v1/sessions/{sid}/ops", json={"ops": ops}, headers=headers)


def test_inline_fast_path_also_checks_the_owner(keyed):
    sid = session_of(keyed, A)
    small = {"ops": [tensor("x", 1.0)]}  # small enough for the event loop
    assert_problem(keyed.post(f"/v1/sessions/{sid}/ops", json=small, headers=B), 404, "session_not_found")
    ok(keyed.post(f"/v1/sessions/{sid}/ops", json=small, headers=A))


def test_each_key_has_a_session_quota():
    with make_client(api_keys=f"{ALICE},{BOB}", max_sessions_per_key=2) as c:
        first = session_of(c, A)
        session_of(c, A)
        r = c.post("/v1/sessions", headers=A)
        assert_problem(r, 429, "session_quota_exceeded")
        assert int(r.headers["retry-after"]) > 0
        session_of(c, B)  # another key is not affected
        assert c.delete(f"/v1/sessions/{first}", headers=A).status_code == 204
        session_of(c, A)


def test_open_server_has_no_key_quota_but_the_global_limit_and_a_quota_per_address():
    with make_client(max_sessions_per_key=1, max_sessions=3) as c:
        for _ in range(3):
            session_of(c, {})
        assert_problem(c.post("/v1/sessions"), 429, "too_many_sessions")
    with make_client(max_sessions_per_client=2) as c:  # TestClient's requests all come from one address
        session_of(c, {})
        session_of(c, {})
        body = assert_problem(c.post("/v1/sessions"), 429, "session_quota_exceeded")
        assert "GRADSERVE_MAX_SESSIONS_PER_CLIENT" in body["detail"]


def test_rate_limit_is_per_key_with_retry_after():
    with make_client(api_keys=f"{ALICE},{BOB}", rate_limit_per_second=0.5, rate_limit_burst=3) as c:
        for _ in range(3):
            ok(c.get("/v1/sessions", headers=A))
        r = c.get("/v1/sessions", headers=A)
        assert_problem(r, 429, "rate_limited")
        assert r.headers["retry-after"] == "6"  # 3 requests in any 6 s: the oldest leaves the window in 6 s
        ok(c.get("/v1/sessions", headers=B))
        assert c.get("/healthz").status_code == 200  # open routes are not limited


def test_rate_limit_is_a_moving_window_of_burst_requests():
    limiter = RateLimiter(MemoryStorage(), rate=2, burst=4)
    assert limiter.window == 2 and limiter.describe() == "4 requests in 2 s"

    async def go():
        taken = [await limiter.take("k") for _ in range(5)]
        return taken, await limiter.take("other"), await RateLimiter(MemoryStorage(), 0, 1).take("k")

    taken, other, disabled = asyncio.run(go())
    assert taken[:4] == [0, 0, 0, 0] and 1 < taken[4] <= 2
    assert other == 0 and disabled == 0  # per identity; rate 0 disables


def test_open_server_says_so_at_start(caplog):
    with caplog.at_level(logging.WARNING, logger="gradserve"), make_client():
        pass
    assert any("OPEN" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gradserve"), make_client(api_keys=ALICE):
        pass
    assert not any("OPEN" in r.getMessage() for r in caplog.records)
    assert all(ALICE not in r.getMessage() for r in caplog.records)


def test_cors_is_off_by_default_and_configurable():
    with make_client() as c:
        r = c.get("/healthz", headers={"Origin": "https://example.org"})
        assert "access-control-allow-origin" not in r.headers
    with make_client(api_keys=ALICE, cors_allow_origins="https://example.org") as c:
        pre = c.options("/v1/sessions", headers={"Origin": "https://example.org",
                                                 "Access-Control-Request-Method": "POST",
                                                 "Access-Control-Request-Headers": "authorization"})
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "https://example.org"
        r = c.get("/v1/sessions", headers={"Origin": "https://example.org", **A})
        assert r.headers["access-control-allow-origin"] == "https://example.org"
        assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
        other = c.get("/v1/sessions", headers={"Origin": "https://evil.example", **A})
        assert "access-control-allow-origin" not in other.headers


def test_openapi_documents_security_schemes_and_401_429():
    doc = json.loads(render())
    assert set(doc["components"]["securitySchemes"]) == {"bearerAuth", "apiKeyHeader"}
    ops = doc["paths"]["/v1/sessions/{session_id}/ops"]["post"]
    assert ops["security"] == [{}, {"bearerAuth": []}, {"apiKeyHeader": []}]  # open by default
    assert {"401", "429"} <= set(ops["responses"])
    assert doc["paths"]["/healthz"]["get"]["security"] == []
    with make_client(api_keys=ALICE) as c:
        keyed_doc = c.get("/openapi.json").json()
    assert keyed_doc["paths"]["/v1/eval"]["post"]["security"] == [{"bearerAuth": []}, {"apiKeyHeader": []}]
    links = doc["paths"]["/v1/sessions"]["post"]["responses"]["201"]["links"]
    assert links["RunOps"]["parameters"] == {"session_id": "$response.body#/id"}


def test_op_executions_are_limited_before_anything_runs(client, session):
    ok(run(client, session, [tensor("x", 1.0, requires_grad=False)]))
    mul = {"op": "mul_", "args": ["x", 1.0]}
    ok(run(client, session, [mul] * 100, repeat=1000))  # exactly 100,000
    r = run(client, session, [mul] * 101, repeat=1000)
    body = assert_problem(r, 422, "limit_exceeded")
    assert "GRADSERVE_MAX_OP_EXECUTIONS" in body["detail"]
    assert ok(client.get(f"/v1/sessions/{session}/tensors/x"))["version"] == 100_000
    with make_client(max_op_executions=10) as c:
        assert_problem(c.post("/v1/eval", json={"ops": [tensor("x", 1.0)] * 11}), 422, "limit_exceeded")
        ok(c.post("/v1/eval", json={"ops": [tensor("x", 1.0)] * 10}))
