"""Where a client iteration's time goes: the MLP loop of bench/client.py (F.linear, relu, mse_loss,
optim.SGD(momentum=0.9), loss.item()) through gradserve.torch against a uvicorn server, split into

- the client process's CPU time: recording ops, encoding the request, httpx, decoding the response;
- the server's CPU time, measured on a second run of the loop against the service in-process (an httpx mock
  transport that calls it): parsing and validating the request, then the run on the held session (load, lock,
  engine, views, serialisation, save);
- the rest of the wall time: loopback HTTP, uvicorn and FastAPI, middleware, and waiting for a CPU.

CPU times rather than wall times where they can be had: on a loaded machine they scatter far less.

    python bench/breakdown.py [--epochs 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import gradserve  # noqa: E402
from bench.client import mlp_torch_code  # noqa: E402


def measure_client(url: str, epochs: int) -> tuple[float, float, float]:
    """Requests, wall ms and client-process CPU ms per iteration."""
    import gradserve.torch as gtorch

    with gradserve.session(client=gradserve.Client(url)) as ctx:
        mlp_torch_code(gtorch, 5)
        before = ctx.client.requests
        started, cpu = time.perf_counter(), time.process_time()
        mlp_torch_code(gtorch, epochs)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        requests = ctx.client.requests - before
    return requests / epochs, wall / epochs * 1e3, cpu / epochs * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running server (default: start one)")
    ap.add_argument("--epochs", type=int, default=200)
    a = ap.parse_args()
    server = None
    if a.url is None:
        import tempfile

        from tests.deploy.servers import Uvicorn

        log = Path(tempfile.mkdtemp(prefix="gradserve-bench-")) / "uvicorn.log"
        server = Uvicorn.for_app({"GRADSERVE_RATE_LIMIT_PER_SECOND": "0",
                                  "GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND": "0"}, log).start()
        a.url = server.url
    try:
        requests, wall, client_cpu = measure_client(a.url, a.epochs)
    finally:
        if server is not None:
            server.stop()
    server_side = replay_run(a.epochs)
    work = client_cpu + server_side["parse"] + server_side["run"]
    rows = [("client process CPU: recording, encoding, httpx, decoding", client_cpu),
            ("server CPU: parse and validate", server_side["parse"]),
            ("server CPU: run on the held session (load, lock, engine, views, save)", server_side["run"]),
            ("the rest: loopback HTTP, uvicorn, FastAPI, middleware, waiting for a CPU", wall - work)]
    print(f"| MLP iteration ({a.epochs} epochs, {requests:.2f} requests/iter) | ms/iter | share |")
    print("|---|---|---|")
    for label, ms in rows:
        print(f"| {label} | {ms:.3f} | {100 * ms / wall:.0f}% |")
    print(f"| total (wall) | {wall:.3f} | 100% |")
    return 0


def replay_run(epochs: int) -> dict[str, float]:
    """The loop against the service in-process (a mock transport calling it): CPU ms per request of parsing and
    of running, means (process_time ticks are coarse: a median of single requests would round)."""
    import httpx

    from gradserve_server.app.main import create_app

    service = create_app().state.service
    parse, run = [], []

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "POST" and path == "/v1/sessions":
            return httpx.Response(201, json=service.create_session())
        if request.method == "DELETE":
            service.delete_session(path.rsplit("/", 1)[-1])
            return httpx.Response(204)
        sid = path.split("/")[3]
        t0 = time.process_time()
        parsed = service.parse_ops(request.content)
        t1 = time.process_time()
        out = service.run_ops(sid, parsed, request.url.params.get("encoding", "json"))
        t2 = time.process_time()
        parse.append(t1 - t0)
        run.append(t2 - t1)
        return httpx.Response(200, content=out, headers={"content-type": "application/json"})

    import gradserve.torch as gtorch  # (its catalog was fetched by the first run)

    with gradserve.session(client=gradserve.Client("http://in-process", transport=httpx.MockTransport(handler))):
        mlp_torch_code(gtorch, 5)
        parse.clear()
        run.clear()
        mlp_torch_code(gtorch, epochs)
    return {"parse": statistics.mean(parse) * 1e3, "run": statistics.mean(run) * 1e3}


if __name__ == "__main__":
    raise SystemExit(main())
