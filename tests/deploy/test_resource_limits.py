"""Resource safety against a real server process: memory read from /proc/<pid>/status, CPU time from
/proc/<pid>/stat, clients that hang up made with raw sockets (issue 10, items 1-2)."""

from __future__ import annotations

import json
import os
import socket
import time

import httpx
import pytest

TICKS = os.sysconf("SC_CLK_TCK")
#: one BLAS thread: the server's CPU time then measures the work of one request
SERVER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "GRADSERVE_LOG_LEVEL": "WARNING"}

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc (Linux)")


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of the process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def raw_post(port: int, path: str, body: dict) -> socket.socket:
    """Send a whole request and leave the connection open (the caller hangs up by closing it)."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def matmul_hours() -> dict:
    """repeat 1000 x 99 matmuls of 300x300 (of a session's ``a``): minutes of work unless it is stopped."""
    return {"ops": [{"op": "matmul", "args": ["a", "a"], "out": f"m{i}"} for i in range(99)], "repeat": 1000}


def session_with_a(c: httpx.Client) -> str:
    sid = c.post("/v1/sessions").json()["id"]
    r = c.post(f"/v1/sessions/{sid}/ops", json={"ops": [{"op": "randn", "args": [300, 300], "out": "a"}]})
    assert r.status_code == 200, r.text
    return sid


@pytest.fixture(params=["memory", "redis"])
def store_env(request) -> dict:
    if request.param == "memory":
        return {}
    url = request.getfixturevalue("redis_url")
    return {"GRADSERVE_STORE_URL": url, "GRADSERVE_REDIS_KEY_PREFIX": request.getfixturevalue("key_prefix")}


def test_op_limit_eval_of_large_tensors_is_refused_before_memory_grows(uvicorns):
    """A 64-op (and a GRADSERVE_MAX_OPS_PER_REQUEST-op) /eval of ones(4M) each: refused with 422 naming the
    byte budget; the process's peak RSS grows by about the budget (256 MiB), not by what was asked for."""
    server = uvicorns(SERVER_ENV)
    pid = server.proc.pid
    with httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.post("/v1/eval", json={"ops": [{"op": "ones", "args": [1000], "out": "w"}]}).status_code == 200
        before = status_kib(pid, "VmRSS")
        for n in (64, 10_000):  # 1.6 KB asking for 1 GB; the op limit asking for 160 GB
            body = {"ops": [{"op": "ones", "args": [4_000_000], "out": f"x{i}"} for i in range(n)]}
            r = c.post("/v1/eval", json=body)
            assert r.status_code == 422, r.text
            problem = r.json()
            assert problem["code"] == "limit_exceeded"
            assert "GRADSERVE_MAX_BYTES_PER_SESSION" in problem["detail"] and "268435456" in problem["detail"]
            assert problem["op_index"] == 16  # 16 x 16 MB fit, the 17th would not
        peak = status_kib(pid, "VmHWM")
        assert c.get("/healthz").status_code == 200
    grown_mib = (peak - before) / 1024
    assert grown_mib < 400, f"peak RSS grew by {grown_mib:.0f} MiB"


def test_abandoned_heavy_request_stops_and_frees_the_session(uvicorns, store_env):
    """A client sends minutes of matmuls and hangs up: within about a second the server stops computing
    (its CPU time stops growing) and the session answers at once, unchanged."""
    server = uvicorns({**SERVER_ENV, **store_env})
    pid = server.proc.pid
    with httpx.Client(base_url=server.url, timeout=30) as c:
        sid = session_with_a(c)
        sock = raw_post(server.port, f"/v1/sessions/{sid}/ops", matmul_hours())
        start = cpu_seconds(pid)
        time.sleep(1.0)
        busy = cpu_seconds(pid) - start
        assert busy > 0.05, f"the heavy request did not compute ({busy:.2f} s of CPU in 1 s)"
        sock.close()
        time.sleep(1.0)  # the engine stops at its next check (one matmul away)
        settled = cpu_seconds(pid)
        time.sleep(1.0)
        after = cpu_seconds(pid) - settled
        assert after < 0.05, f"the server kept computing for a client that hung up ({after:.2f} s of CPU in 1 s)"
        t0 = time.monotonic()
        r = c.post(f"/v1/sessions/{sid}/ops", json={"ops": [{"op": "add", "args": ["a", 1.0], "out": "b"}]})
        assert r.status_code == 200, r.text
        assert time.monotonic() - t0 < 1.0
        assert sorted(c.get(f"/v1/sessions/{sid}").json()["tensors"]) == ["a", "b"]  # no m0..m98 applied


def test_light_requests_answer_while_heavy_ones_run_and_a_full_queue_is_503(uvicorns):
    """One heavy slot, one queue place: both taken, /healthz, /readyz, a tensor read and a small op list
    still answer quickly; /readyz says saturated; one more heavy request is 503 server_busy with
    Retry-After at once; a read of the busy session is 409 after the lock wait. Hanging up frees the
    slots."""
    server = uvicorns({**SERVER_ENV, "GRADSERVE_MAX_HEAVY_REQUESTS": "1", "GRADSERVE_MAX_HEAVY_QUEUE": "1",
                       "GRADSERVE_LOCK_WAIT_SECONDS": "0.5"})
    with httpx.Client(base_url=server.url, timeout=30) as c:
        sid = c.post("/v1/sessions").json()["id"]
        x = {"op": "tensor", "args": [[1.0, 2.0]], "out": "x", "kwargs": {"requires_grad": True}}
        assert c.post(f"/v1/sessions/{sid}/ops", json={"ops": [x]}).status_code == 200
        heavy = [session_with_a(c) for _ in range(3)]
        running = raw_post(server.port, f"/v1/sessions/{heavy[0]}/ops", matmul_hours())
        deadline = time.monotonic() + 5
        while c.get("/readyz").json()["heavy"]["running"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        queued = raw_post(server.port, f"/v1/sessions/{heavy[1]}/ops", matmul_hours())
        while c.get("/readyz").status_code != 503 and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            timings = {}
            for name, call in {
                "healthz": lambda: c.get("/healthz"),
                "tensor": lambda: c.get(f"/v1/sessions/{sid}/tensors/x"),
                "small ops": lambda: c.post(f"/v1/sessions/{sid}/ops",
                                            json={"ops": [{"op": "mul", "args": ["x", 2.0], "out": "y"}]}),
            }.items():
                t0 = time.monotonic()
                r = call()
                timings[name] = time.monotonic() - t0
                assert r.status_code == 200, (name, r.text)
            assert max(timings.values()) < 1.0, timings
            ready = c.get("/readyz")
            assert ready.status_code == 503 and ready.json()["code"] == "server_busy"
            assert ready.json()["heavy"] == {"running": 1, "queued": 1, "slots": 1, "queue": 1}
            t0 = time.monotonic()
            busy = c.post(f"/v1/sessions/{heavy[2]}/ops", json=matmul_hours())
            assert time.monotonic() - t0 < 1.0
            assert busy.status_code == 503 and busy.json()["code"] == "server_busy", busy.text
            assert int(busy.headers["Retry-After"]) >= 1
            assert "GRADSERVE_MAX_HEAVY_QUEUE" in busy.json()["detail"]
            # a read of the session the running request holds waits GRADSERVE_LOCK_WAIT_SECONDS, not its deadline
            t0 = time.monotonic()
            held = c.get(f"/v1/sessions/{heavy[0]}/tensors/a")
            assert held.status_code == 409 and held.json()["code"] == "session_busy", held.text
            assert time.monotonic() - t0 < 2.0
        finally:
            running.close()
            queued.close()
        deadline = time.monotonic() + 5
        while c.get("/readyz").json().get("heavy", {}).get("running") and time.monotonic() < deadline:
            time.sleep(0.05)
        ready = c.get("/readyz")
        assert ready.status_code == 200 and ready.json()["heavy"]["running"] == 0, ready.text


def test_deadline_stops_a_heavy_request_with_nothing_applied(uvicorns, store_env):
    """Past GRADSERVE_REQUEST_DEADLINE_SECONDS: 504 deadline_exceeded, the session unchanged and free."""
    server = uvicorns({**SERVER_ENV, **store_env, "GRADSERVE_REQUEST_DEADLINE_SECONDS": "1"})
    with httpx.Client(base_url=server.url, timeout=30) as c:
        sid = session_with_a(c)
        t0 = time.monotonic()
        r = c.post(f"/v1/sessions/{sid}/ops", json=matmul_hours())
        took = time.monotonic() - t0
        assert r.status_code == 504, r.text
        assert r.json()["code"] == "deadline_exceeded" and "GRADSERVE_REQUEST_DEADLINE_SECONDS" in r.json()["detail"]
        assert took < 3.0, took
        assert list(c.get(f"/v1/sessions/{sid}").json()["tensors"]) == ["a"]
        r = c.post(f"/v1/sessions/{sid}/ops", json={"ops": [{"op": "sum", "args": ["a"], "out": "s"}]})
        assert r.status_code == 200, r.text
