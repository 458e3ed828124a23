"""A bounded soak of a real server: several client threads for ``--seconds`` (default 120), mixed requests over
a shared session and private ones, light and heavy, some abandoned mid-request. Prints a Markdown table:
throughput, p50/p99 of light requests while heavy ones run, statuses, and the server's RSS at start, peak and
end (from /proc, after the sessions were deleted and a few idle seconds).

    .venv/bin/python bench/soak.py                 # ~2 minutes, memory store
    .venv/bin/python bench/soak.py --seconds 20    # short
    .venv/bin/python bench/soak.py --store redis://127.0.0.1:6379/0

Threads: ``--light`` clients (each: ``add_`` on the shared session, read it back, a few ops in a private
session of its own, now and then a new private session), ``--heavy`` clients (private sessions: a 256x256
matmul chain repeated, a backward through it, reading the gradients; every few rounds the session is deleted,
some are left to expire), and one abandoner (every ``--abandon-every`` seconds, a request cut off mid-body or
a heavy request whose client hangs up before the answer, made with a raw socket).
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def start_server(store: str, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSERVE_")}
    env.update(PYTHONPATH=str(ROOT), GRADSERVE_STORE_URL=store, GRADSERVE_ACCESS_LOG="false",
               GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND="0",  # one load generator, one address
               GRADSERVE_MAX_SESSIONS_PER_CLIENT="1000", GRADSERVE_SESSION_TTL_SECONDS="20",
               GRADSERVE_SWEEP_INTERVAL_SECONDS="5", GRADSERVE_REDIS_KEY_PREFIX=f"soak-{os.getpid()}:")
    cmd = [sys.executable, "-m", "uvicorn", "gradserve_server.app.main:app", "--host", "127.0.0.1", "--port", str(port),
           "--no-access-log", "--http", "gradserve_server.app.protocol:HTTPProtocol", "--log-level", "warning"]
    server = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    server.kill()
    raise SystemExit("the server did not start")


def matrix(rng: np.random.Generator, n: int) -> dict:
    data = (rng.standard_normal((n, n)) / n).astype(np.float32)
    return {"dtype": "float32", "shape": [n, n], "encoding": "base64",
            "data": base64.b64encode(data.tobytes()).decode()}


class Soak:
    def __init__(self, url: str, port: int, seconds: float, light: int, heavy: int, abandon_every: float,
                 settle: float = 0.0):
        self.url, self.port, self.seconds, self.settle = url, port, seconds, settle
        self.light_threads, self.heavy_threads, self.abandon_every = light, heavy, abandon_every
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.statuses: Counter[str] = Counter()
        self.light_ms: list[float] = []  # light requests that ran while a heavy one was in flight
        self.light_all_ms: list[float] = []
        self.heavy_ms: list[float] = []
        self.heavy_inflight = 0
        self.abandoned = Counter()
        self.private: set[str] = set()
        self.abandoned_session = ""
        self.drain_seconds = 0.0

    def record(self, status: int | str) -> None:
        with self.lock:
            self.statuses[str(status)] += 1

    def light(self, shared: str, i: int) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as c:
            own = c.post("/v1/sessions").json()["id"]
            self.private.add(own)
            c.post(f"/v1/sessions/{own}/ops", json={"ops": [
                {"op": "tensor", "out": "x", "args": [[1.0, 2.0, 3.0]], "kwargs": {"requires_grad": True}}]})
            n = 0
            while not self.stop.is_set():
                for method, path, body in (
                        ("POST", f"/v1/sessions/{shared}/ops", {"ops": [{"op": "add_", "args": ["count", 1]}]}),
                        ("GET", f"/v1/sessions/{shared}/tensors/count", None),
                        ("POST", f"/v1/sessions/{own}/ops", {"ops": [
                            {"op": "mul", "out": "y", "args": ["x", 2.0]}, {"op": "sum", "out": "s", "args": ["y"]},
                            {"op": "backward", "args": ["s"]}]}),
                        ("GET", f"/v1/sessions/{own}/tensors/x.grad", None)):
                    during_heavy = self.heavy_inflight > 0
                    started = time.perf_counter()
                    response = c.request(method, path, json=body)
                    elapsed = (time.perf_counter() - started) * 1000
                    self.record(response.status_code)
                    with self.lock:
                        self.light_all_ms.append(elapsed)
                        if during_heavy:
                            self.light_ms.append(elapsed)
                n += 1
                if n % 50 == 0:  # a new private session now and then; the old one deleted
                    self.record(c.delete(f"/v1/sessions/{own}").status_code)
                    self.private.discard(own)
                    own = c.post("/v1/sessions").json()["id"]
                    self.private.add(own)
                    c.post(f"/v1/sessions/{own}/ops", json={"ops": [
                        {"op": "tensor", "out": "x", "args": [[1.0, 2.0, 3.0]], "kwargs": {"requires_grad": True}}]})

    @staticmethod
    def heavy_body(rng: np.random.Generator, repeat: int = 3) -> dict:
        """Two 256x256 leaves, a chain of six matmuls (rebinding one name), tanh, sum, backward; repeated."""
        return {"ops": [
            {"op": "tensor", "out": "w", "args": [matrix(rng, 256)], "kwargs": {"requires_grad": True}},
            {"op": "tensor", "out": "v", "args": [matrix(rng, 256)], "kwargs": {"requires_grad": True}},
            *[{"op": "matmul", "out": "h", "args": ["h" if k else "w", "v"]} for k in range(6)],
            {"op": "tanh", "out": "t", "args": ["h"]}, {"op": "sum", "out": "s", "args": ["t"]},
            {"op": "backward", "args": ["s"]}], "repeat": repeat}

    def heavy(self, i: int) -> None:
        rng = np.random.default_rng(i)
        with httpx.Client(base_url=self.url, timeout=120) as c:
            rounds = 0
            while not self.stop.is_set():
                sid = c.post("/v1/sessions").json()["id"]
                self.private.add(sid)
                with self.lock:
                    self.heavy_inflight += 1
                started = time.perf_counter()
                try:
                    response = c.post(f"/v1/sessions/{sid}/ops", params={"encoding": "base64"},
                                      json=self.heavy_body(rng))
                finally:
                    with self.lock:
                        self.heavy_inflight -= 1
                self.record(response.status_code)
                self.heavy_ms.append((time.perf_counter() - started) * 1000)
                self.record(c.get(f"/v1/sessions/{sid}/tensors/w.grad", params={"encoding": "base64"}).status_code)
                rounds += 1
                if rounds % 4:  # every fourth is left to expire
                    self.record(c.delete(f"/v1/sessions/{sid}").status_code)
                    self.private.discard(sid)

    def abandoner(self) -> None:
        rng = np.random.default_rng(99)
        with httpx.Client(base_url=self.url, timeout=60) as c:
            sid = self.abandoned_session = c.post("/v1/sessions").json()["id"]
            self.private.add(sid)
        k = 0
        while not self.stop.wait(self.abandon_every):
            body = orjson.dumps(self.heavy_body(rng, repeat=1))
            head = (f"POST /v1/sessions/{sid}/ops HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode()
            with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
                if k % 2 == 0:  # mid-body: half the body, then gone
                    sock.sendall(head + body[: len(body) // 2])
                    time.sleep(0.05)
                    self.abandoned["mid-body"] += 1
                else:  # mid-compute: the whole request, then gone before the answer
                    sock.sendall(head + body)
                    time.sleep(0.05)
                    self.abandoned["mid-compute"] += 1
            k += 1

    def warm_up(self, shared: str) -> None:
        """One heavy and a few light requests at the clients' concurrency, their sessions deleted: what
        stays is the server's working set (imports, the thread pool's threads and their allocator arenas,
        BLAS buffers), not what the soak leaves behind."""
        def one(i: int) -> None:
            rng = np.random.default_rng(1000 + i)
            with httpx.Client(base_url=self.url, timeout=120) as c:
                sid = c.post("/v1/sessions").json()["id"]
                c.post(f"/v1/sessions/{sid}/ops", params={"encoding": "base64"}, json=self.heavy_body(rng, 1))
                c.post(f"/v1/sessions/{shared}/ops", json={"ops": [{"op": "add_", "args": ["count", 0]}]})
                c.delete(f"/v1/sessions/{sid}")

        threads = [threading.Thread(target=one, args=(i,)) for i in range(self.light_threads + self.heavy_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)

    def run(self, server_pid: int) -> dict:
        with httpx.Client(base_url=self.url, timeout=60) as c:
            shared = c.post("/v1/sessions").json()["id"]
            c.post(f"/v1/sessions/{shared}/ops", json={"ops": [
                {"op": "zeros", "args": [1], "kwargs": {"dtype": "int64"}, "out": "count"}]})
        rss = {"cold": rss_mib(server_pid)}
        self.warm_up(shared)
        time.sleep(2)
        rss["start"] = rss_mib(server_pid)
        peak = [rss["start"]]

        def monitor() -> None:
            while not self.stop.wait(0.2):
                peak.append(rss_mib(server_pid))

        threads = [threading.Thread(target=self.light, args=(shared, i)) for i in range(self.light_threads)]
        threads += [threading.Thread(target=self.heavy, args=(i,)) for i in range(self.heavy_threads)]
        threads += [threading.Thread(target=self.abandoner), threading.Thread(target=monitor)]
        started = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(self.seconds)
        self.stop.set()
        for t in threads:
            t.join(180)
        elapsed = time.monotonic() - started
        with httpx.Client(base_url=self.url, timeout=600) as c:
            # work abandoned mid-compute runs on (queued on its session's lock) until done: a read of that
            # session waits for it, so that the end RSS is measured on a quiet server
            drained = time.monotonic()
            c.get(f"/v1/sessions/{self.abandoned_session}")
            self.drain_seconds = time.monotonic() - drained
            for sid in list(self.private):
                c.delete(f"/v1/sessions/{sid}")
            c.delete(f"/v1/sessions/{shared}")
            time.sleep(3)  # the trim after the deletions
            rss["peak"] = max(peak)
            rss["end"] = rss_mib(server_pid)
            metrics = c.get("/metrics").text
            if self.settle:
                time.sleep(self.settle)  # past the periodic trim (GRADSERVE_MEMORY_TRIM_INTERVAL_SECONDS)
                rss["settled"] = rss_mib(server_pid)
        by_status = Counter()
        for line in metrics.splitlines():
            m = re.match(r'gradserve_requests_total\{.*status="(\d+)"\} (\S+)', line)
            if m:
                by_status[m.group(1)] += float(m.group(2))
        return {"elapsed": elapsed, "rss": rss, "server_statuses": by_status}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="how long the clients run (default 120)")
    parser.add_argument("--light", type=int, default=4, help="light client threads (default 4)")
    parser.add_argument("--heavy", type=int, default=2, help="heavy client threads (default 2)")
    parser.add_argument("--abandon-every", type=float, default=2.0, help="seconds between abandoned requests")
    parser.add_argument("--store", default="memory://", help="GRADSERVE_STORE_URL (default memory://)")
    parser.add_argument("--settle", type=float, default=35.0, help="idle seconds before a last RSS reading "
                        "(past the periodic trim; default 35, 0 skips it)")
    args = parser.parse_args()
    port = free_port()
    server = start_server(args.store, port)
    try:
        soak = Soak(f"http://127.0.0.1:{port}", port, args.seconds, args.light, args.heavy, args.abandon_every,
                    args.settle)
        result = soak.run(server.pid)
    finally:
        server.terminate()
        server.wait(30)
    statuses = result["server_statuses"]
    total = sum(statuses.values())
    rss = result["rss"]
    print(f"\nsoak: {args.seconds:g} s, {args.light} light + {args.heavy} heavy client threads + 1 abandoner, "
          f"store {args.store}, {os.cpu_count()} cores shared by clients and server\n")
    print("| measure | value |\n|---|---|")
    rows = [
        ("requests served (server's count)", f"{total:.0f}"),
        ("throughput", f"{total / result['elapsed']:.0f} req/s"),
        ("light requests while heavy ones ran", f"{len(soak.light_ms)} (of {len(soak.light_all_ms)})"),
        ("light p50 / p99 (heavy in flight)", f"{pct(soak.light_ms, 50):.1f} / {pct(soak.light_ms, 99):.1f} ms"),
        ("heavy requests, p50 / p99", f"{len(soak.heavy_ms)}, {pct(soak.heavy_ms, 50):.0f} / "
                                      f"{pct(soak.heavy_ms, 99):.0f} ms"),
        ("abandoned (mid-body / mid-compute)", f"{soak.abandoned['mid-body']} / {soak.abandoned['mid-compute']}"),
        ("abandoned work still running after the clients stopped", f"{soak.drain_seconds:.1f} s"),
        ("statuses (server)", ", ".join(f"{k}: {v:.0f}" for k, v in sorted(statuses.items()))),
        ("5xx", f"{sum(v for k, v in statuses.items() if k.startswith('5')):.0f}"),
        ("RSS cold / after warm-up (start) / peak / end", f"{rss['cold']:.0f} / {rss['start']:.0f} / "
                                                         f"{rss['peak']:.0f} / {rss['end']:.0f} MiB"),
        *([("RSS after idling", f"{rss['settled']:.0f} MiB ({args.settle:g} s more)")] if "settled" in rss else []),
    ]
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
