"""A bounded soak: several client threads, mixed requests over a shared session and private ones (some left
to expire), against the app in process. Every counted update is present at the end, every session is gone
once deleted or expired, and the process's memory is back near where it started. The soak runs in a fresh
interpreter (spawned), so that the heap the rest of the test run leaves fragmented does not blur the
measurement."""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import gc
import multiprocessing
import os
import threading
import time

import numpy as np

from tests.app.conftest import make_client, ok

THREADS = 4
ROUNDS = 30  # per thread, after a warm-up of WARMUP_ROUNDS
WARMUP_ROUNDS = 3
TTL = 2.0
DATA = np.zeros(64 * 1024, dtype=np.float32)  # 256 KiB of tensor data per private session
PAYLOAD = {"dtype": "float32", "shape": [DATA.size], "encoding": "base64",
           "data": base64.b64encode(DATA.tobytes()).decode()}


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def release_freed_memory() -> None:
    """Collect, then hand freed heap pages back to the OS (glibc keeps them otherwise), so that RSS shows
    what is still referenced rather than the allocator's high-water mark."""
    gc.collect()
    libc_name = ctypes.util.find_library("c")
    if libc_name:
        libc = ctypes.CDLL(libc_name)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)


def private_round(client, abandon: bool) -> None:
    sid = client.post("/v1/sessions").json()["id"]
    ok(client.post(f"/v1/sessions/{sid}/ops", params={"encoding": "base64"}, json={"ops": [
        {"op": "tensor", "out": "x", "args": [PAYLOAD], "kwargs": {"requires_grad": True}},
        {"op": "mul", "out": "y", "args": ["x", 2.0]}, {"op": "sum", "out": "s", "args": ["y"]},
        {"op": "backward", "args": ["s"]}]}))
    ok(client.get(f"/v1/sessions/{sid}/tensors/x.grad", params={"encoding": "base64"}))
    ok(client.get(f"/v1/sessions/{sid}/graph"))
    if not abandon:  # abandoned ones are left to expire
        assert client.delete(f"/v1/sessions/{sid}").status_code == 204


def run_threads(client, shared: str, rounds: int, abandon_every: int = 0) -> int:
    """THREADS clients, each ``rounds`` times: count += 1 in the shared session, read it, and a private
    session's life (every ``abandon_every``-th left to expire). Returns the increments made."""
    increments = [0] * THREADS
    errors: list[str] = []

    def worker(i: int) -> None:
        try:
            for r in range(rounds):
                ok(client.post(f"/v1/sessions/{shared}/ops", json={"ops": [{"op": "add_", "args": ["count", 1]}]}))
                increments[i] += 1
                ok(client.get(f"/v1/sessions/{shared}/tensors/count"))
                private_round(client, abandon=bool(abandon_every) and r % abandon_every == 0)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"{exc!s:.500}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    return sum(increments)


def soak() -> tuple[int, int]:
    """The soak itself; returns RSS (bytes) after the warm-up and at the end."""
    # one client address makes all the requests: no per-address rate
    with make_client(session_ttl_seconds=TTL, sweep_interval_seconds=0.2, access_log=False,
                     client_rate_limit_per_second=0) as client:
        shared = client.post("/v1/sessions").json()["id"]
        ok(client.post(f"/v1/sessions/{shared}/ops", json={"ops": [
            {"op": "zeros", "args": [1], "kwargs": {"dtype": "int64"}, "out": "count"}]}))
        # warm up at full concurrency: imports, caches, the thread pool's threads and their malloc arenas
        total = run_threads(client, shared, WARMUP_ROUNDS)
        release_freed_memory()
        start = rss_bytes()

        total += run_threads(client, shared, ROUNDS, abandon_every=6)
        assert total == THREADS * (WARMUP_ROUNDS + ROUNDS)
        assert ok(client.get(f"/v1/sessions/{shared}/tensors/count"))["data"] == [total]
        abandoned = THREADS * len(range(0, ROUNDS, 6))

        deadline = time.monotonic() + TTL + 5  # the abandoned sessions (and the idle shared one) expire
        while ok(client.get("/readyz"))["sessions"] > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ok(client.get("/readyz"))["sessions"] == 0
        metrics = client.get("/metrics").text
        assert f"gradserve_sessions_expired_total {abandoned + 1}.0" in metrics

        release_freed_memory()
        return start, rss_bytes()


def test_mixed_load_loses_no_update_and_leaks_no_memory():
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        start, end = pool.apply(soak)
    grown = end - start
    print(f"soak: RSS {start / 2**20:.1f} -> {end / 2**20:.1f} MiB")
    # THREADS * ROUNDS private sessions of 256 KiB (and their gradients and responses) went through
    assert grown < 24 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over the soak"
