"""Two uvicorn processes on one Redis, as behind a load balancer: sessions are shared, concurrent backward
calls accumulate exactly, and sessions outlive the processes that served them."""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

STEP = [{"op": "mul", "out": "y", "args": ["w", "x"]}, {"op": "sum", "out": "s", "args": ["y"]},
        {"op": "backward", "args": ["s"]}]


@pytest.fixture
def app_env(redis_url, key_prefix) -> dict[str, str]:
    # a short lock TTL: a process killed while holding a session frees it within a second
    return {"GRADSERVE_STORE_URL": redis_url, "GRADSERVE_REDIS_KEY_PREFIX": key_prefix,
            "GRADSERVE_LOCK_TTL_SECONDS": "1", "GRADSERVE_LOCK_WAIT_SECONDS": "10"}


def x_view(url: str, sid: str) -> dict:
    response = httpx.get(f"{url}/v1/sessions/{sid}/tensors/x", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def post_step(url: str, sid: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/sessions/{sid}/ops", json={"ops": STEP}, timeout=15)


def test_two_processes_serve_one_set_of_sessions(uvicorns, app_env):
    a, b = uvicorns(app_env), uvicorns(app_env)

    # a graph built through one, backward through the other, grads read through either
    sid = httpx.post(f"{a.url}/v1/sessions").json()["id"]
    built = httpx.post(f"{a.url}/v1/sessions/{sid}/ops", json={"ops": [
        {"op": "tensor", "out": "x", "args": [[1.0, 2.0, 3.0]], "kwargs": {"requires_grad": True}},
        {"op": "tensor", "out": "w", "args": [[0.5, -1.0, 2.0]], "kwargs": {"requires_grad": True}},
        {"op": "mul", "out": "y", "args": ["w", "x"]}, {"op": "sum", "out": "s", "args": ["y"]}]})
    assert built.status_code == 200, built.text
    assert httpx.post(f"{b.url}/v1/sessions/{sid}/backward", json={"tensor": "s"}).status_code == 200
    for server in (a, b):
        assert x_view(server.url, sid)["grad"] == [0.5, -1.0, 2.0]
        assert httpx.get(f"{server.url}/v1/sessions/{sid}/tensors/w.grad").json()["data"] == [1.0, 2.0, 3.0]
    listed = {s["id"] for s in httpx.get(f"{b.url}/v1/sessions").json()["sessions"]}
    assert sid in listed and httpx.get(f"{a.url}/readyz").json()["sessions"] == len(listed)

    # concurrent backward calls spread over both processes accumulate exactly
    urls = itertools.cycle([a.url, b.url])
    targets = [next(urls) for _ in range(40)]
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda url: post_step(url, sid).status_code, targets))
    assert statuses == [200] * 40
    view = x_view(b.url, sid)
    assert view["grad_accumulations"] == 41
    assert view["grad"] == [0.5 * 41, -1.0 * 41, 2.0 * 41]

    # one process is killed mid-stream: the client (as a load balancer would) carries on through the other
    done = 0
    cut_off = 0
    killed = threading.Event()
    killer = threading.Timer(0.3, lambda: (a.kill(), killed.set()))
    killer.start()
    try:
        for _ in range(400):  # bounded: stops by itself
            target = a if not killed.is_set() and done % 2 == 0 else b
            try:
                response = post_step(target.url, sid)
            except httpx.TransportError:
                cut_off += 1  # killed mid-request: it may or may not have been applied
                continue
            assert response.status_code == 200, response.text
            done += 1
            if killed.is_set() and done >= 20:
                break
    finally:
        killer.cancel()
        killer.join()
    assert killed.is_set() and a.proc.poll() is not None
    view = x_view(b.url, sid)
    # every acknowledged backward is there exactly once; the one cut off by the kill at most once
    assert 41 + done <= view["grad_accumulations"] <= 41 + done + cut_off
    n = view["grad_accumulations"]
    assert view["grad"] == [0.5 * n, -1.0 * n, 2.0 * n]

    # both restarted: the sessions are still there, and work
    b.kill()
    a.start()
    b.start()
    for server in (a, b):
        assert x_view(server.url, sid)["grad_accumulations"] == n
    assert post_step(a.url, sid).status_code == 200
    assert x_view(b.url, sid)["grad_accumulations"] == n + 1
