"""Rate limits that hold across processes (issue 26, item 4) and a wrong-key budget that one guesser cannot turn
against the other clients behind its address (issue 27): two uvicorn processes on one real Redis, and a
second loopback address as another client."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.deploy.test_resources import KEY, OTHER_ADDRESS, client_from

OTHER_KEY = "rate-test-other-key-0123456789"


@pytest.fixture
def redis_env(redis_url, key_prefix) -> dict[str, str]:
    return {"GRADSERVE_STORE_URL": redis_url, "GRADSERVE_REDIS_KEY_PREFIX": key_prefix}


def test_a_keys_budget_is_exact_across_two_processes_on_one_redis(uvicorns, redis_env):
    env = {**redis_env, "GRADSERVE_API_KEYS": f"{KEY},{OTHER_KEY}", "GRADSERVE_RATE_LIMIT_PER_SECOND": "0.5",
           "GRADSERVE_RATE_LIMIT_BURST": "10"}
    a, b = uvicorns(env), uvicorns(env)
    urls = [a.url, b.url] * 10

    def get(url: str) -> int:
        return httpx.get(f"{url}/v1/sessions", headers={"X-API-Key": KEY}, timeout=10).status_code

    with ThreadPoolExecutor(8) as pool:  # concurrently, half to each process
        statuses = list(pool.map(get, urls))
    assert sorted(statuses) == [200] * 10 + [429] * 10  # per process it would have been 20 x 200
    refused = httpx.get(f"{b.url}/v1/sessions", headers={"X-API-Key": KEY})
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 20 and "10 requests in 20 s" in refused.json()["detail"]
    assert httpx.get(f"{a.url}/v1/sessions", headers={"X-API-Key": OTHER_KEY}).status_code == 200  # per key


def test_an_addresss_budget_is_exact_across_two_processes_on_one_redis(uvicorns, redis_env):
    env = {**redis_env, "GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND": "0.5", "GRADSERVE_CLIENT_RATE_LIMIT_BURST": "6"}
    a, b = uvicorns(env), uvicorns(env)
    with client_from("127.0.0.1", a.url) as one_a, client_from("127.0.0.1", b.url) as one_b, \
            client_from(OTHER_ADDRESS, b.url) as other:
        statuses = [c.get("/v1/sessions").status_code for _ in range(4) for c in (one_a, one_b)]
        assert statuses == [200] * 6 + [429] * 2
        assert other.get("/v1/sessions").status_code == 200  # another address has its own budget
        assert one_a.get("/healthz").status_code == 200  # health is never limited


def test_wrong_keys_lock_out_new_keys_from_the_address_but_not_the_clients_already_working(uvicorns, redis_env):
    env = {**redis_env, "GRADSERVE_API_KEYS": f"{KEY},{OTHER_KEY}", "GRADSERVE_AUTH_FAILURES_BURST": "3",
           "GRADSERVE_AUTH_FAILURES_PER_MINUTE": "1"}
    a, b = uvicorns(env), uvicorns(env)
    with client_from("127.0.0.1", a.url) as worker_a, client_from("127.0.0.1", b.url) as guesser_b, \
            client_from(OTHER_ADDRESS, a.url) as elsewhere:
        assert worker_a.get("/v1/sessions", headers={"X-API-Key": KEY}).status_code == 200  # working before
        wrong = [guesser_b.get("/v1/sessions", headers={"X-API-Key": f"guess-{i}"}).status_code for i in range(4)]
        assert wrong == [401, 401, 401, 429]  # the budget is shared by both processes
        # a key not seen from this address is refused whatever it is: no oracle for the guesser
        fresh = guesser_b.get("/v1/sessions", headers={"X-API-Key": OTHER_KEY})
        assert fresh.status_code == 429 and fresh.json()["code"] == "rate_limited"
        assert int(fresh.headers["retry-after"]) >= 1
        # the client that was working from the same address goes on, through either process
        for server in (worker_a, guesser_b):
            assert server.get("/v1/sessions", headers={"X-API-Key": KEY}).status_code == 200
        assert elsewhere.get("/v1/sessions", headers={"X-API-Key": OTHER_KEY}).status_code == 200


def test_limits_are_counted_in_the_process_with_the_memory_store(uvicorns):
    server = uvicorns({"GRADSERVE_API_KEYS": KEY, "GRADSERVE_RATE_LIMIT_PER_SECOND": "1",
                       "GRADSERVE_RATE_LIMIT_BURST": "3"})
    statuses = [httpx.get(f"{server.url}/v1/sessions", headers={"X-API-Key": KEY}).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]


def test_one_guesser_does_not_lock_out_the_working_clients_behind_its_address_with_the_memory_store(uvicorns):
    """Issue 27's shared NAT: after the address's wrong-key budget is spent, keys that already worked from it go
    on (counted in the process); keys new to it are refused whatever they are; other addresses are untouched."""
    server = uvicorns({"GRADSERVE_API_KEYS": f"{KEY},{OTHER_KEY}", "GRADSERVE_AUTH_FAILURES_BURST": "3",
                       "GRADSERVE_AUTH_FAILURES_PER_MINUTE": "1"})
    with client_from("127.0.0.1", server.url) as nat, client_from(OTHER_ADDRESS, server.url) as elsewhere:
        assert nat.get("/v1/sessions", headers={"X-API-Key": KEY}).status_code == 200  # a colleague, working
        wrong = [nat.get("/v1/sessions", headers={"X-API-Key": f"guess-{i}"}).status_code for i in range(12)]
        assert wrong[:3] == [401] * 3 and set(wrong[3:]) == {429}
        for _ in range(5):  # the colleague behind the same address is not locked out
            assert nat.get("/v1/sessions", headers={"X-API-Key": KEY}).status_code == 200
        fresh = nat.get("/v1/sessions", headers={"X-API-Key": OTHER_KEY})
        assert fresh.status_code == 429 and fresh.json()["code"] == "rate_limited"  # no oracle for the guesser
        assert elsewhere.get("/v1/sessions", headers={"X-API-Key": OTHER_KEY}).status_code == 200
