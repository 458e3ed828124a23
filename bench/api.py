"""API benchmark: HTTP throughput under wrk, and tensor transfer/parse costs against their floors.

    python bench/api.py [--duration 5] [--connections 16] [--rounds 3] [--size 1000000] [--skip-http]

Starts uvicorn (one worker, uvloop + httptools) on 127.0.0.1 serving the app plus a trivial FastAPI
endpoint with a pydantic model (the framework ceiling), drives each endpoint with Debian's `wrk`
(`apt-get install wrk`) and a Lua script for the POST body, and prints one table. The machine this was
written for has two cores, shared by wrk and the server: wrk runs one thread (`wrk -t1 -c16`); every run
is bounded (`-d`), the endpoints are interleaved over `--rounds` and the median run is reported. Targets: eval >= 0.6x
and session op list + backward >= 0.4x the trivial endpoint's requests/s; JSON tensors within 1.5x of
orjson, base64 within 1.5x of raw base64, a 10,000-op list parsed and validated within 3x of orjson.loads.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import orjson
import pybase64
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LINEAR = [
    {"op": "tensor", "out": "x", "args": [2.0], "kwargs": {"requires_grad": True}},
    {"op": "tensor", "out": "w", "args": [3.0], "kwargs": {"requires_grad": True}},
    {"op": "tensor", "out": "b", "args": [1.0], "kwargs": {"requires_grad": True}},
    {"op": "mul", "out": "wx", "args": ["w", "x"]},
    {"op": "add", "out": "y", "args": ["wx", "b"]},
    {"op": "backward", "args": ["y"]},
]


# the servers' JSON access logs (one line per request, on stderr) go here, not into the bench's table
SERVER_LOG = tempfile.NamedTemporaryFile(prefix="gradserve-bench-", suffix=".log", delete=False)


class Echo(BaseModel):
    """The ceiling endpoint's body. At module level: with postponed annotations a class local to
    ``bench_app`` cannot be resolved, and FastAPI would read ``body`` as a query parameter (every request
    a 422)."""

    a: float
    b: float


def bench_app():
    """The app plus the framework-ceiling endpoint on the same server (uvicorn factory: bench.api:bench_app).

    The ceiling is a bare FastAPI app with one pydantic endpoint, dispatched by path in front of gradserve's
    app: it measures the framework alone, so gradserve's own middleware (body limit, request ids, access
    logs, metrics, keys) counts against gradserve, not against the ceiling."""
    from fastapi import FastAPI

    from gradserve_server.app.main import create_app

    app = create_app()
    bare = FastAPI()

    @bare.post("/bench/trivial")
    def trivial(body: Echo) -> Echo:
        return Echo(a=body.b, b=body.a)

    async def dispatch(scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/bench/trivial":
            await bare(scope, receive, send)
        else:
            await app(scope, receive, send)  # lifespan and everything else: gradserve's app

    return dispatch


# ----- transfer and parse costs (in process) ------------------------------------------------------------
def best_of(fn, repeat: int = 7, min_seconds: float = 0.5) -> float:
    """The fastest of at least ``repeat`` calls and ``min_seconds`` of calls (at most 200): millisecond
    figures on a shared two-core machine need more than seven tries to find a quiet one."""
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < repeat or (time.perf_counter() - started < min_seconds and len(times) < 200):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def transfer_rows(size: int) -> list[tuple[str, float, float, float]]:
    from gradserve_server.app import views
    from gradserve_server.app.config import Settings
    from gradserve_server.app.service import SessionService
    from gradserve_server.app.store.memory import MemoryStore

    settings = Settings(max_body_bytes=1 << 30, max_elements_per_tensor=max(size, 4_000_000))
    service = SessionService(MemoryStore(max_sessions=1, ttl_seconds=60), settings)
    arr = np.random.default_rng(0).standard_normal(size).astype(np.float32)
    values = arr.tolist()

    class View:  # a tensor as views.tensor_view reads it
        shape, dtype, data, requires_grad, grad_fn = arr.shape, "float32", arr, False, None
        retains_grad, version, grad_accumulations, grad, _grad = False, 0, 0, None, None

    rows = []
    json_body = orjson.dumps({"ops": [{"op": "tensor", "out": "x", "args": [values]}]})
    rows.append((f"JSON in ({size:,} float32)", best_of(lambda: orjson.loads(json_body)),
                 best_of(lambda: service.parse_ops(json_body)), 1.5))
    rows.append((f"JSON out ({size:,} float32)", best_of(lambda: orjson.dumps(values)),
                 best_of(lambda: views.dump(views.tensor_view("x", View, "json"))), 1.5))
    raw = arr.astype("<f4").tobytes()
    encoded = base64.b64encode(raw)
    payload = {"dtype": "float32", "shape": [size], "encoding": "base64", "data": encoded.decode()}
    b64_body = orjson.dumps({"ops": [{"op": "tensor", "out": "x", "args": [payload]}]})
    app_in = best_of(lambda: service.parse_ops(b64_body))
    app_out = best_of(lambda: views.dump(views.tensor_view("x", View, "base64")))
    rows.append((f"base64 in ({size:,} float32)", best_of(lambda: base64.b64decode(encoded, validate=True)),
                 app_in, 1.5))
    rows.append((f"base64 out ({size:,} float32)", best_of(lambda: base64.b64encode(raw)), app_out, 1.5))
    # the same against the SIMD codec the service uses (no target: what the service adds on top of the decode)
    rows.append(("  in, against pybase64's decode", best_of(lambda: pybase64.b64decode(encoded, validate=True)),
                 app_in, None))
    rows.append(("  out, against pybase64's encode", best_of(lambda: pybase64.b64encode(raw)), app_out, None))
    ops = [{"op": "mul", "out": f"t{i}", "args": [f"t{i - 1}" if i else "x", 2.0]} for i in range(10_000)]
    ops_body = orjson.dumps({"ops": ops})
    rows.append(("10,000-op list parse+validate", best_of(lambda: orjson.loads(ops_body)),
                 best_of(lambda: service.parse_ops(ops_body)), 3.0))
    return rows


# ----- HTTP load --------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(url: str, body: bytes | None = None) -> bytes:
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET",
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read()


def wait_until_up(url: str, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            request(url)
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server did not come up at {url}")


LUA = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [==[{body}]==]
"""


def wrk(url: str, body: bytes, duration: int, connections: int, tmp: Path, lua: str = "") -> dict:
    """One bounded wrk run (one thread: the machine has two cores, shared by wrk and the server)."""
    script = tmp / "post.lua"
    script.write_text(LUA.format(body=body.decode()) + lua)
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--timeout", "5s", "--latency", "-s", str(script),
           url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=duration + 30).stdout
    failed = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if failed:
        raise RuntimeError(f"{url}: {failed.group(1)} failed requests\n{out}")
    errors = re.search(r"Socket errors: .*", out)
    if errors and re.search(r"(read|write|timeout) [1-9]", errors.group(0)):
        raise RuntimeError(f"{url}: {errors.group(0)}\n{out}")

    def ms(label: str) -> float:
        value, unit = re.search(rf"^\s+{label}\s+([\d.]+)(us|ms|s)\s*$", out, re.M).groups()
        return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]

    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), "p50": ms("50%"),
            "p99": ms("99%")}


def median_run(runs: list[dict]) -> dict:
    """The run with the median requests/s (its own latencies, so the three figures belong together)."""
    return sorted(runs, key=lambda r: r["rps"])[len(runs) // 2]


HTTP_TARGETS = {"trivial": None, "eval": 0.6, "ops": 0.4}
HTTP_LABELS = {"trivial": "trivial FastAPI + pydantic (ceiling)", "eval": "POST /v1/eval  y = w*x + b, 3 grads",
               "ops": "POST /ops  y = w*x + b + backward"}


def http_rows(duration: int, connections: int, rounds: int) -> list[tuple[str, dict, float | None]]:
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get update && apt-get install -y wrk")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADSERVE_MAX_NODES_PER_SESSION": "1000000",
           "GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND": "0"}  # one load generator: no per-address rate
    cmd = [sys.executable, "-m", "uvicorn", "bench.api:bench_app", "--factory", "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1", "--loop", "uvloop", "--http", "httptools",
           "--no-access-log", "--log-level", "warning"]
    server = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=SERVER_LOG)  # the JSON access log (stderr)
    try:
        wait_until_up(f"{base}/healthz")
        sid = orjson.loads(request(f"{base}/v1/sessions", b""))["id"]
        bodies = {
            "trivial": (f"{base}/bench/trivial", b'{"a": 1.0, "b": 2.0}'),
            "eval": (f"{base}/v1/eval", orjson.dumps({"ops": LINEAR, "return": ["y", "x.grad", "w.grad", "b.grad"]})),
            "ops": (f"{base}/v1/sessions/{sid}/ops", orjson.dumps({"ops": LINEAR})),
        }
        # each endpoint answers correctly before it is loaded
        assert orjson.loads(request(*bodies["trivial"])) == {"a": 2.0, "b": 1.0}
        assert orjson.loads(request(*bodies["eval"]))["tensors"]["x.grad"]["data"] == 3.0
        assert orjson.loads(request(*bodies["ops"]))["tensors"]["x"]["grad"] == 3.0
        runs: dict[str, list[dict]] = {key: [] for key in bodies}
        with tempfile.TemporaryDirectory() as tmp:
            for url, body in bodies.values():  # warm-up
                wrk(url, body, 1, connections, Path(tmp))
            for _ in range(rounds):  # interleaved, so that drift hits every endpoint alike
                for key, (url, body) in bodies.items():
                    runs[key].append(wrk(url, body, duration, connections, Path(tmp)))
    finally:
        server.terminate()
        server.wait(timeout=10)
    return [(HTTP_LABELS[key], median_run(runs[key]), HTTP_TARGETS[key]) for key in bodies]


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="wrk runs per endpoint (the median is shown)")
    parser.add_argument("--size", type=int, default=1_000_000, help="elements of the transfer tensors")
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--store", choices=["redis"], help="instead: the Redis store against the memory store "
                        "(see 'Store mode' at the end of this file)")
    parser.add_argument("--redis-url", help="with --store redis: an existing Redis (default: start redis-server)")
    args = parser.parse_args()
    if args.store == "redis":
        return store_main(args)

    failed = False
    print(f"{'transfer / parse (best of >= 7)':40} {'floor s':>9} {'app s':>9} {'ratio':>7} {'target':>7}  result")
    for label, floor, app_time, target in transfer_rows(args.size):
        ratio = app_time / floor
        failed |= target is not None and ratio > target
        print(f"{label:40} {floor:9.4f} {app_time:9.4f} {ratio:6.2f}x {'<=' + str(target) + 'x' if target else '':>7}  "
              f"{verdict(ratio <= target) if target else ''}")
    if not args.skip_http:
        rows = http_rows(args.duration, args.connections, args.rounds)
        ceiling = rows[0][1]["rps"]
        title = f"HTTP (wrk -t1 -c{args.connections}, {args.duration} s, median of {args.rounds})"
        print(f"\n{title:40} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'ratio':>7} {'target':>7}  result")
        for label, r, target in rows:
            ratio = r["rps"] / ceiling
            met = target is None or ratio >= target
            failed |= not met
            print(f"{label:40} {r['rps']:9.0f} {r['p50']:8.2f} {r['p99']:8.2f} {ratio:6.2f}x "
                  f"{'>=' + str(target) + 'x' if target else '':>7}  {verdict(met) if target else ''}")
        print(f"\nwrk and the server share this machine's {os.cpu_count()} cores (one wrk thread, one uvicorn "
              "worker); ratios are to the ceiling measured in the same run.")
    print("all targets met" if not failed else "some targets MISSED")
    return 1 if failed else 0


# ===== Store mode (--store redis) ======================================================================
# Session op list + backward (y = w * x, s = y.sum(), s.backward(): x.grad and w.grad accumulate) with the
# memory store and with the Redis store, for sessions of a few bytes up to about 1 MiB of tensors (x, w,
# their grads and y; data as base64 both ways). One uvicorn worker per store, both up at once, runs
# interleaved. The request path rotates over 3 x `connections` sessions (wrk's request() has no connection
# identity: one counter for all of its connections). With only as many sessions as connections, any request
# overtaken by another (which the event-loop path allows: it awaits Redis mid-request) put two requests on
# one session, the second queueing on the first's lock, and the queueing fed itself; with three times as many
# it takes 32 overtakes. So the figures are the per-request cost of each store, not queueing on one
# session's lock. Target: the Redis store's latency (p50 and p99) at most 1.5x the memory store's.
STORE_TARGET = 1.5
SESSIONS_PER_CONNECTION = 3
STORE_SIZES = {"scalar": 1, "64 KiB": 64 * 1024 // 20, "1 MiB": 1024 * 1024 // 20}  # 5 tensors of n float32

ROTATE_LUA = """
paths = {{{paths}}}
counter = 0
request = function()
  counter = counter + 1
  return wrk.format(nil, paths[(counter % #paths) + 1])
end
"""

STEP = [{"op": "mul", "out": "y", "args": ["w", "x"]}, {"op": "sum", "out": "s", "args": ["y"]},
        {"op": "backward", "args": ["s"]}]


def start_redis(tmp: Path) -> tuple[subprocess.Popen, str]:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not installed (apt-get install -y redis-server), or pass --redis-url")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                             "no", "--dir", str(tmp)], stdout=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def start_store_server(store_url: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADSERVE_STORE_URL": store_url,
           "GRADSERVE_REDIS_KEY_PREFIX": f"bench-{os.getpid()}:", "GRADSERVE_MAX_NODES_PER_SESSION": "1000000",
           "GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND": "0"}
    cmd = [sys.executable, "-m", "uvicorn", "gradserve_server.app.main:app", "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1", "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--log-level", "warning"]
    server = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=SERVER_LOG)  # the JSON access log (stderr)
    base = f"http://127.0.0.1:{port}"
    wait_until_up(f"{base}/healthz")
    return server, base


def sized_sessions(base: str, n: int, count: int) -> tuple[list[str], int]:
    """``count`` sessions holding x and w of ``n`` float32 each, one step run; their paths and bytes held."""
    data = base64.b64encode(np.linspace(-1, 1, n, dtype=np.float32).tobytes()).decode()
    payload = {"dtype": "float32", "shape": [n], "encoding": "base64", "data": data}
    paths = []
    for _ in range(count):
        sid = orjson.loads(request(f"{base}/v1/sessions", b""))["id"]
        request(f"{base}/v1/sessions/{sid}/ops", orjson.dumps({"ops": [
            {"op": "tensor", "out": "x", "args": [payload], "kwargs": {"requires_grad": True}},
            {"op": "tensor", "out": "w", "args": [payload], "kwargs": {"requires_grad": True}}, *STEP]}))
        paths.append(f"/v1/sessions/{sid}/ops?encoding=base64")
    nbytes = orjson.loads(urllib.request.urlopen(f"{base}/v1/sessions/{sid}", timeout=10).read())["memory_bytes"]
    return paths, nbytes


def store_main(args) -> int:
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get update && apt-get install -y wrk")
    body = orjson.dumps({"ops": STEP})
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        redis_proc, redis_url = (None, args.redis_url) if args.redis_url else start_redis(tmp)
        servers = {}
        try:
            for store, url in (("memory", "memory://"), ("redis", redis_url)):
                servers[store] = start_store_server(url)
            plans, held = {}, {}
            for size, n in STORE_SIZES.items():
                for store, (_, base) in servers.items():
                    paths, held[size] = sized_sessions(base, n, SESSIONS_PER_CONNECTION * args.connections)
                    lua = ROTATE_LUA.format(paths=", ".join(f'"{p}"' for p in paths))
                    plans[(size, store)] = (f"{base}{paths[0]}", lua)
                    wrk(f"{base}{paths[0]}", body, 1, args.connections, tmp, lua)  # warm-up
            for _ in range(args.rounds):  # interleaved, so that drift hits both stores alike
                for key, (url, lua) in plans.items():
                    results.setdefault(key, []).append(wrk(url, body, args.duration, args.connections, tmp, lua))
        finally:
            for server, _ in servers.values():
                server.terminate()
                server.wait(timeout=10)
            if redis_proc is not None:
                redis_proc.kill()
                redis_proc.wait(timeout=10)

    failed = False
    print(f"session op list + backward, ?encoding=base64 (wrk -t1 -c{args.connections}, {args.duration} s, "
          f"median of {args.rounds}; {SESSIONS_PER_CONNECTION * args.connections} sessions in rotation)")
    print(f"{'session tensors':>20} | {'memory req/s':>12} {'p50 ms':>7} {'p99 ms':>7} | {'redis req/s':>11} "
          f"{'p50 ms':>7} {'p99 ms':>7} | {'p50 x':>6} {'p99 x':>6}  target <={STORE_TARGET}x")
    for size in STORE_SIZES:
        m, r = median_run(results[(size, "memory")]), median_run(results[(size, "redis")])
        p50, p99 = r["p50"] / m["p50"], r["p99"] / m["p99"]
        met = p50 <= STORE_TARGET and p99 <= STORE_TARGET
        failed |= not met
        label = f"{size} ({held[size]:,} B)"
        print(f"{label:>20} | {m['rps']:12.0f} {m['p50']:7.2f} {m['p99']:7.2f} | {r['rps']:11.0f} {r['p50']:7.2f} "
              f"{r['p99']:7.2f} | {p50:5.2f}x {p99:5.2f}x  {verdict(met)}")
    print(f"\nwrk, uvicorn and redis-server share this machine's {os.cpu_count()} cores.")
    print("all targets met" if not failed else "some targets MISSED")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
