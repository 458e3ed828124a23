"""Client benchmark: gradserve.torch against hand-batched /ops requests and against local torch.

    python bench/client.py [--url http://127.0.0.1:8000] [--rounds 5] [--epochs 100] [--no-segments]

Four workloads, each run three ways: through ``gradserve.torch`` (torch code, one changed import), as raw
``POST /ops`` requests batched by hand (the least a program can send: one request per iteration, with
``return`` naming what it reads), and in local torch when it is importable.

- ``train``: the tutorial's linear regression (``y = w*x + b``, MSE, manual SGD under ``no_grad``, gradients
  zeroed in place), ``--epochs`` epochs, the loss read every epoch.
- ``mlp-sgd``: a 4-16-1 MLP (F.linear, relu, mse_loss) trained with ``optim.SGD(momentum=0.9)``.
- ``mlp-adam``: the same MLP with ``optim.Adam(lr=0.01)`` (torch's single-tensor update, op for op).
- ``wx+b``: the 10-op program: make ``x``, ``w``, ``b``, ``w*x``, ``+ b``, ``backward``, read ``y`` and the
  three gradients; once per iteration, with fresh tensors.

Reports requests per iteration and wall time per iteration (median over ``--rounds`` interleaved rounds),
the client's ratio to the raw loop (target <= 1.3x) and to local torch, the server's replayed requests per
iteration both ways (``gradserve_route_total{route="replayed"}`` in /metrics; 1.00: every iteration's request
replayed, a whole-list plan or its segments' plans),
the first iteration whose request replayed a plan on a fresh cache (round 0, read off the ``X-Gradserve-Route``
header; a raw loop's set-up request not counted),
and the CPU time the benchmark's own process spends per iteration both ways (the client's cost, which the
machine's load inflates less). A second table puts the raw round trip of the 10-op list on a session against
``POST /v1/eval`` of it (target <= 1.5x), a trivial FastAPI endpoint given the same body and ``GET /healthz``;
a third splits a client iteration's time: the client's own CPU (recording, encoding, decoding), a loopback
FastAPI round trip, and the server's share (what the raw loop takes beyond the round trip: session lock and
store, parsing, the engine, the response).
Without ``--url`` it starts its own server (uvicorn, one worker, rate limiting off) on a free port.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

import gradserve  # noqa: E402

X = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
Y = [2.0 * v + 1.0 for v in X]
LR = 0.01


# ----- train: the tutorial's loop --------------------------------------------------------------------------------
def train_torch_code(torch, epochs: int) -> float:
    """The same code for gradserve.torch and torch."""
    w = torch.tensor([0.5], requires_grad=True)
    b = torch.tensor([0.1], requires_grad=True)
    x, y = torch.tensor(X), torch.tensor(Y)
    loss_value = None
    for _ in range(epochs):
        loss = ((w * x + b - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            w -= LR * w.grad
            b -= LR * b.grad
        w.grad.zero_()
        b.grad.zero_()
        loss_value = loss.item()
    return loss_value


def train_raw(client: gradserve.Client, session: str, epochs: int) -> float:
    client.run_ops(session, [
        {"op": "tensor", "out": "w", "args": [[0.5]], "kwargs": {"requires_grad": True}},
        {"op": "tensor", "out": "b", "args": [[0.1]], "kwargs": {"requires_grad": True}},
        {"op": "tensor", "out": "x", "args": [X]}, {"op": "tensor", "out": "y", "args": [Y]}], returns=[])
    epoch = [
        {"op": "mul", "out": "wx", "args": ["w", "x"]}, {"op": "add", "out": "p", "args": ["wx", "b"]},
        {"op": "sub", "out": "d", "args": ["p", "y"]}, {"op": "pow", "out": "d2", "args": ["d", 2]},
        {"op": "mean", "out": "loss", "args": ["d2"]}, {"op": "backward", "args": ["loss"]},
        {"op": "mul", "out": "sw", "args": ["w.grad", LR], "no_grad": True},
        {"op": "sub_", "args": ["w", "sw"], "no_grad": True},
        {"op": "mul", "out": "sb", "args": ["b.grad", LR], "no_grad": True},
        {"op": "sub_", "args": ["b", "sb"], "no_grad": True},
        {"op": "zero_", "args": ["w.grad"]}, {"op": "zero_", "args": ["b.grad"]}]
    loss_value = None
    for _ in range(epochs):
        loss_value = client.run_ops(session, epoch, returns=["loss"])["tensors"]["loss"]["data"]
    return loss_value


# ----- mlp: a small MLP trained with SGD and momentum ---------------------------------------------------------------
def _fixed(shape: tuple, seed: int) -> list:
    import numpy as np

    return np.random.default_rng(seed).uniform(-0.5, 0.5, shape).astype("float32").tolist()


W1, B1, W2, B2 = _fixed((16, 4), 1), _fixed((16,), 2), _fixed((1, 16), 3), _fixed((1,), 4)
MX = _fixed((32, 4), 5)
MY = [[sum(r) * 0.5] for r in MX]
MLR, MOMENTUM = 0.05, 0.9


def mlp_torch_code(torch, epochs: int) -> float:
    """The same code for gradserve.torch and torch: F.linear, relu, mse_loss, optim.SGD(momentum=0.9)."""
    F = torch.nn.functional
    params = [torch.tensor(v, requires_grad=True) for v in (W1, B1, W2, B2)]
    w1, b1, w2, b2 = params
    x, y = torch.tensor(MX), torch.tensor(MY)
    opt = torch.optim.SGD(params, lr=MLR, momentum=MOMENTUM)
    value = None
    for _ in range(epochs):
        opt.zero_grad()
        loss = F.mse_loss(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y)
        loss.backward()
        opt.step()
        value = loss.item()
    return value


def mlp_adam_torch_code(torch, epochs: int) -> float:
    """The MLP with ``optim.Adam``: the same code for gradserve.torch and torch."""
    F = torch.nn.functional
    params = [torch.tensor(v, requires_grad=True) for v in (W1, B1, W2, B2)]
    w1, b1, w2, b2 = params
    x, y = torch.tensor(MX), torch.tensor(MY)
    opt = torch.optim.Adam(params, lr=ALR)
    value = None
    for _ in range(epochs):
        opt.zero_grad()
        loss = F.mse_loss(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y)
        loss.backward()
        opt.step()
        value = loss.item()
    return value


ALR, BETAS, EPS = 0.01, (0.9, 0.999), 1e-8


def mlp_adam_raw(client: gradserve.Client, session: str, epochs: int) -> float:
    """torch's single-tensor Adam by hand: ``exp_avg.lerp_(g, 1 - b1)``, ``exp_avg_sq.mul_(b2).addcmul_(g, g,
    value=1 - b2)``, ``p.addcdiv_(exp_avg, exp_avg_sq.sqrt() / sqrt(bc2) + eps, value=-lr / bc1)``: the bias
    corrections are the step's numbers, as the optimizer computes them."""
    names = ("w1", "b1", "w2", "b2")
    setup = [{"op": "tensor", "out": n, "args": [v], "kwargs": {"requires_grad": True}}
             for n, v in zip(names, (W1, B1, W2, B2))]
    setup += [{"op": "tensor", "out": "x", "args": [MX]}, {"op": "tensor", "out": "y", "args": [MY]}]
    setup += [{"op": "zeros_like", "out": f"{k}_{n}", "args": [n]} for n in names for k in ("m", "v")]
    client.run_ops(session, setup, returns=[])
    b1, b2 = BETAS
    value = None
    for step in range(1, epochs + 1):
        bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
        epoch = [{"op": "zero_grad", "args": [list(names)], "kwargs": {"set_to_none": True}},
                 {"op": "linear", "out": "h", "args": ["x", "w1", "b1"]}, {"op": "relu", "out": "r", "args": ["h"]},
                 {"op": "linear", "out": "o", "args": ["r", "w2", "b2"]},
                 {"op": "mse_loss", "out": "loss", "args": ["o", "y"]}, {"op": "backward", "args": ["loss"]}]
        for n in names:
            epoch += [{"op": "lerp_", "args": [f"m_{n}", f"{n}.grad", 1 - b1], "no_grad": True},
                      {"op": "mul_", "args": [f"v_{n}", b2], "no_grad": True},
                      {"op": "addcmul_", "args": [f"v_{n}", f"{n}.grad", f"{n}.grad"], "kwargs": {"value": 1 - b2},
                       "no_grad": True},
                      {"op": "sqrt", "out": "s", "args": [f"v_{n}"], "no_grad": True},
                      {"op": "div", "out": "d", "args": ["s", bc2 ** 0.5], "no_grad": True},
                      {"op": "add_", "args": ["d", EPS], "no_grad": True},
                      {"op": "addcdiv_", "args": [n, f"m_{n}", "d"], "kwargs": {"value": -ALR / bc1}, "no_grad": True}]
        value = client.run_ops(session, epoch, returns=["loss"])["tensors"]["loss"]["data"]
    return value


def mlp_raw(client: gradserve.Client, session: str, epochs: int) -> float:
    names = ("w1", "b1", "w2", "b2")
    setup = [{"op": "tensor", "out": n, "args": [v], "kwargs": {"requires_grad": True}}
             for n, v in zip(names, (W1, B1, W2, B2))]
    setup += [{"op": "tensor", "out": "x", "args": [MX]}, {"op": "tensor", "out": "y", "args": [MY]}]
    setup += [{"op": "zeros_like", "out": f"buf_{n}", "args": [n]} for n in names]  # 0.9 * 0 + g == g: torch's
    client.run_ops(session, setup, returns=[])                                     # first step, exactly
    epoch = [{"op": "zero_grad", "args": [list(names)], "kwargs": {"set_to_none": True}},
             {"op": "linear", "out": "h", "args": ["x", "w1", "b1"]}, {"op": "relu", "out": "r", "args": ["h"]},
             {"op": "linear", "out": "o", "args": ["r", "w2", "b2"]}, {"op": "mse_loss", "out": "loss",
                                                                        "args": ["o", "y"]},
             {"op": "backward", "args": ["loss"]}]
    for n in names:
        epoch += [{"op": "mul_", "args": [f"buf_{n}", MOMENTUM], "no_grad": True},
                  {"op": "add_", "args": [f"buf_{n}", f"{n}.grad"], "no_grad": True},
                  {"op": "add_", "args": [n, f"buf_{n}"], "kwargs": {"alpha": -MLR}, "no_grad": True}]
    value = None
    for _ in range(epochs):
        value = client.run_ops(session, epoch, returns=["loss"])["tensors"]["loss"]["data"]
    return value


# ----- wx+b: the 10-op program ------------------------------------------------------------------------------------
def wxb_torch_code(torch, iterations: int) -> tuple:
    out = None
    for _ in range(iterations):
        x = torch.tensor(2.0, requires_grad=True)
        w = torch.tensor(3.0, requires_grad=True)
        b = torch.tensor(1.0, requires_grad=True)
        wx = w * x
        y = wx + b
        y.backward()
        out = (y.item(), x.grad.item(), w.grad.item(), b.grad.item())
    return out


WXB = [{"op": "tensor", "out": "x", "args": [2.0], "kwargs": {"requires_grad": True}},
       {"op": "tensor", "out": "w", "args": [3.0], "kwargs": {"requires_grad": True}},
       {"op": "tensor", "out": "b", "args": [1.0], "kwargs": {"requires_grad": True}},
       {"op": "mul", "out": "wx", "args": ["w", "x"]}, {"op": "add", "out": "y", "args": ["wx", "b"]},
       {"op": "backward", "args": ["y"]}]


def wxb_raw(client: gradserve.Client, session: str, iterations: int) -> tuple:
    out = None
    for _ in range(iterations):
        t = client.run_ops(session, WXB, returns=["y", "x.grad", "w.grad", "b.grad"])["tensors"]
        out = tuple(t[n]["data"] for n in ("y", "x.grad", "w.grad", "b.grad"))
    return out


# ----- running -----------------------------------------------------------------------------------------------------
def timed(fn, *args) -> tuple[float, float, object]:
    """Wall time, this process's CPU time (the client's own cost, whatever the machine's load), result."""
    started, cpu = time.perf_counter(), time.process_time()
    result = fn(*args)
    return time.perf_counter() - started, time.process_time() - cpu, result


def plan_hits(url: str) -> float:
    """The server's runs that replayed so far (``gradserve_route_total{route="replayed"}`` in /metrics, over its
    reasons: a request whose list replayed a plan, or its segments' plans, counts once)."""
    text = httpx.get(f"{url}/metrics").text
    return sum(float(v) for v in re.findall(r'^gradserve_route_total\{[^}]*route="replayed"[^}]*\} (\S+)$', text, re.M))


class RouteSpy(httpx.HTTPTransport):
    """An httpx transport that asks each op list request for its route (``X-Gradserve-Debug: route``) and keeps
    (route, reason) per request, in order (tests/client/test_training_replay.py reads it too)."""

    def __init__(self):
        super().__init__()
        self.routes: list[tuple[str | None, str | None]] = []

    def handle_request(self, request):
        ops = request.method == "POST" and request.url.path.endswith("/ops")
        if ops:
            request.headers["x-gradserve-debug"] = "route"
        response = super().handle_request(request)
        if ops:
            m = re.match(r"(\w+); reason=([\w:]+)", response.headers.get("x-gradserve-route", ""))
            self.routes.append((m.group(1), m.group(2)) if m else (None, None))
        return response

    def first_replay(self, skip: int = 0) -> int | None:
        """The loop's first request (1-based, after ``skip`` set-up requests) that replayed a plan."""
        for i, (route, _) in enumerate(self.routes[skip:]):
            if route == "replayed":
                return i + 1
        return None


def run(url: str, rounds: int, epochs: int) -> list[tuple]:
    import gradserve.torch as gtorch

    try:
        import torch
    except ImportError:
        torch = None
    workloads = {"train": (train_torch_code, train_raw, epochs), "mlp-sgd": (mlp_torch_code, mlp_raw, epochs),
                 "mlp-adam": (mlp_adam_torch_code, mlp_adam_raw, epochs), "wx+b": (wxb_torch_code, wxb_raw, epochs)}
    rows = []
    for label, (torch_code, raw, n) in workloads.items():
        times: dict[str, list[float]] = {"client": [], "raw": [], "torch": [], "client_cpu": [], "raw_cpu": []}
        requests: dict[str, int] = {}
        hits: dict[str, float] = {}
        first: dict[str, int | None] = {}
        results = {}
        for r in range(rounds + 1):  # round 0 warms up (catalog, connections, server caches)
            # (round 0 meets the workload's lists first: where its loops first replay is read off its routes)
            spies = {"client": RouteSpy(), "raw": RouteSpy()} if r == 0 else {}
            with gradserve.session(client=gradserve.Client(url, transport=spies.get("client"))) as ctx:
                gtorch.sync()
                before, replays = ctx.client.requests, plan_hits(url)
                seconds, cpu, results["client"] = timed(torch_code, gtorch, n)
                requests["client"] = ctx.client.requests - before
                hits["client"] = plan_hits(url) - replays
            with gradserve.Client(url, transport=spies.get("raw")) as client:
                session = client.create_session()["id"]
                before, replays = client.requests, plan_hits(url)
                seconds_raw, cpu_raw, results["raw"] = timed(raw, client, session, n)
                requests["raw"] = client.requests - before
                hits["raw"] = plan_hits(url) - replays
                client.delete_session(session)
            if spies:
                # (the raw loops but wx+b send their set-up as a request of its own)
                first = {"client": spies["client"].first_replay(),
                         "raw": spies["raw"].first_replay(0 if label == "wx+b" else 1)}
            if torch is not None:
                seconds_torch, _, results["torch"] = timed(torch_code, torch, n)
            if r:
                times["client"].append(seconds / n)
                times["raw"].append(seconds_raw / n)
                times["client_cpu"].append(cpu / n)
                times["raw_cpu"].append(cpu_raw / n)
                if torch is not None:
                    times["torch"].append(seconds_torch / n)
        check(label, results)
        med = {k: statistics.median(v) for k, v in times.items() if v}
        rows.append((label, n, requests["client"] / n, requests["raw"] / n, med["client"], med["raw"],
                     med.get("torch"), med["client"] / med["raw"],
                     med["client"] / med["torch"] if "torch" in med else None, med["client_cpu"], med["raw_cpu"],
                     hits["client"] / n, hits["raw"] / n, first["client"], first["raw"]))
    return rows


def floors(url: str, trivial_url: str | None, rounds: int, n: int) -> list[tuple]:
    """The 10-op program's raw round trip on a session (``POST /ops``) against the same list one-shot
    (``POST /v1/eval``), a trivial FastAPI endpoint given the same body (``bench/trivial_app.py``: the floor of a
    loopback FastAPI request) and the server's ``GET /healthz``: ms per request, medians over rounds."""
    import httpx

    returns = ["y", "x.grad", "w.grad", "b.grad"]
    times: dict[str, list[float]] = {}
    with gradserve.Client(url) as client, httpx.Client() as plain:
        session = client.create_session()["id"]
        ways = {"session POST /ops": lambda: client.run_ops(session, WXB, returns=returns),
                "POST /v1/eval": lambda: client.eval(WXB, returns=returns),
                "gradserve GET /healthz": lambda: plain.get(f"{url}/healthz")}
        if trivial_url is not None:
            body = {"ops": WXB, "return": returns}
            ways["trivial FastAPI POST"] = lambda: plain.post(f"{trivial_url}/echo", json=body)
        for r in range(rounds + 1):
            for label, fn in ways.items():
                started = time.perf_counter()
                for _ in range(n):
                    fn()
                if r:
                    times.setdefault(label, []).append((time.perf_counter() - started) / n)
        client.delete_session(session)
    med = {k: statistics.median(v) for k, v in times.items()}
    return [(label, m, m / med["POST /v1/eval"]) for label, m in med.items()]


def floor_table(rows: list[tuple]) -> str:
    lines = ["| the 10-op program, one request | ms/request | / POST /v1/eval |", "|---|---|---|"]
    lines += [f"| {label} | {m * 1e3:.3f} | {ratio:.2f}x |" for label, m, ratio in rows]
    return "\n".join(lines)


def check(label: str, results: dict) -> None:
    """The three ways compute the same thing (float32 on both sides)."""
    want = results.get("torch") or results["raw"]
    for way, got in results.items():
        a = got if isinstance(got, tuple) else (got,)
        b = want if isinstance(want, tuple) else (want,)
        if any(abs(float(p) - float(q)) > 1e-4 * max(1.0, abs(float(q))) for p, q in zip(a, b)):
            raise SystemExit(f"{label}: {way} computed {got}, expected {want}")


def table(rows: list[tuple]) -> str:
    head = ("| workload | iterations | requests/iter (client) | requests/iter (raw) | ms/iter client | ms/iter raw "
            "| ms/iter torch | client / raw | client / torch | client-process CPU ms/iter: client, raw "
            "| replayed requests/iter: client, raw | first replayed iteration: client, raw |")
    lines = [head, "|" + "---|" * 12]
    for label, n, rc, rr, c, r, t, ratio, tratio, ccpu, rcpu, hc, hr, fc, fr in rows:
        lines.append(f"| {label} | {n} | {rc:.2f} | {rr:.2f} | {c * 1e3:.3f} | {r * 1e3:.3f} | "
                     f"{'n/a' if t is None else f'{t * 1e3:.4f}'} | {ratio:.2f}x | "
                     f"{'n/a' if tratio is None else f'{tratio:.0f}x'} | {ccpu * 1e3:.3f}, {rcpu * 1e3:.3f} | "
                     f"{hc:.2f}, {hr:.2f} | {fc or 'none'}, {fr or 'none'} |")
    return "\n".join(lines)


def breakdown(rows: list[tuple], floor_rows: list[tuple]) -> str:
    """Where an iteration's wall time goes, client and raw: this process's CPU (the client's recording, encoding
    and decoding; the raw loop's encoding and decoding), the loopback FastAPI round trips (the trivial endpoint's
    time per request, times the requests), and the server's share (the rest: session lock and store, parsing,
    the engine, the response; an approximation, the machine's other load lands there too)."""
    trivial = {label: m for label, m, _ in floor_rows}.get("trivial FastAPI POST")

    def ms(v):
        return "n/a" if v is None else f"{v * 1e3:.3f}"
    lines = ["| workload | way | ms/iter | process CPU | HTTP round trips | server |", "|" + "---|" * 6]
    for row in rows:
        label, _, req_client, req_raw, wall_client, wall_raw = row[:6]
        cpu_client, cpu_raw = row[9:11]
        for way, wall, cpu, req in (("client", wall_client, cpu_client, req_client),
                                    ("raw", wall_raw, cpu_raw, req_raw)):
            http = None if trivial is None else trivial * req
            server = None if http is None else wall - cpu - http
            lines.append(f"| {label} | {way} | {ms(wall)} | {ms(cpu)} | {ms(http)} | {ms(server)} |")
    return "\n".join(lines)


def _trivial_server():
    """bench/trivial_app.py under uvicorn (one worker, loopback), or None without FastAPI/uvicorn."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return None
    from tests.deploy.servers import Uvicorn, free_port

    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "bench.trivial_app:app", "--host", "127.0.0.1", "--port", str(port),
            "--no-access-log"]
    log = Path(tempfile.mkdtemp(prefix="gradserve-bench-")) / "trivial.log"
    return Uvicorn(argv, {}, port, log).start()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running server (default: start one)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--no-segments", action="store_true",
                    help="the started server plans session lists whole only (GRADSERVE_PLAN_SEGMENTS=false)")
    a = ap.parse_args()
    server = None
    if a.url is None:
        from tests.deploy.servers import Uvicorn

        log = Path(tempfile.mkdtemp(prefix="gradserve-bench-")) / "uvicorn.log"
        no_rate = {"GRADSERVE_RATE_LIMIT_PER_SECOND": "0", "GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND": "0",
                   **({"GRADSERVE_PLAN_SEGMENTS": "false"} if a.no_segments else {})}
        server = Uvicorn.for_app(no_rate, log).start()  # one load generator, one address
        a.url = server.url
    trivial = _trivial_server()
    try:
        rows = run(a.url, a.rounds, a.epochs)
        print(table(rows))
        print()
        floor_rows = floors(a.url, trivial.url if trivial else None, a.rounds, a.epochs)
        print(floor_table(floor_rows))
        print()
        print(breakdown(rows, floor_rows))
    finally:
        if server is not None:
            server.stop()
        if trivial is not None:
            trivial.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
