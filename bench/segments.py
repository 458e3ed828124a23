"""Segments against whole-list plans on the engine, per request of a client training loop.

    python bench/segments.py [--rounds 9] [--requests 200]

The request lists are gradserve.torch's own: the 4-16-1 MLP loop of tests/client/test_training_replay.py with SGD
(momentum) and Adam, captured from the client against a server started here (plans off). They run on fresh
engine sessions through ``engine.trace.dispatch`` with segments on and off (``PlanCache(segments=...)``; off is the
whole-list planning a server with ``GRADSERVE_PLAN_SEGMENTS=false`` does). Printed per optimizer: the CPU time of
requests 1 to 5 and of the steady state (each run's median from request 11 on), medians of ``--rounds`` fresh
runs alternating on and off, with the routes; then the steady state of both sessions in one run, their requests
interleaved one by one, so that machine noise hits both alike (across runs it varies by tens of percent on a
shared machine).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gradserve  # noqa: E402
import gradserve.torch as gtorch  # noqa: E402
import gradserve_server.engine as E  # noqa: E402
from gradserve_server.engine.trace.cache import PlanCache  # noqa: E402

OPTIMIZERS = ("SGD", "Adam")
LIMITS = E.Limits(max_response_bytes=8 << 20)


class _Capture(httpx.HTTPTransport):
    """Keeps the JSON body of every op list request."""

    def __init__(self):
        super().__init__()
        self.bodies: list[dict] = []

    def handle_request(self, request):
        if request.method == "POST" and request.url.path.endswith("/ops"):
            self.bodies.append(json.loads(request.content))
        return super().handle_request(request)


def capture(requests: int) -> dict[str, list[dict]]:
    """The op list requests of each optimizer's loop, as gradserve.torch sends them."""
    from tests.client.test_training_replay import train
    from tests.deploy.servers import Uvicorn

    log = Path(tempfile.mkdtemp(prefix="gradserve-bench-")) / "uvicorn.log"
    server = Uvicorn.for_app({"GRADSERVE_RATE_LIMIT_PER_SECOND": "0", "GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND": "0",
                              "GRADSERVE_PLAN_CACHE_ENTRIES": "0"}, log).start()
    try:
        out = {}
        for name in OPTIMIZERS:
            spy = _Capture()
            with gradserve.session(client=gradserve.Client(server.url, transport=spy)):
                train(gtorch, name, requests)
            out[name] = spy.bodies[:requests]
        return out
    finally:
        server.stop()


def request(cache: PlanCache, state: E.State, body: dict) -> tuple[float, E.Route]:
    """One request's run as the service makes it (the JSON encoding's key, its limits): CPU seconds, route."""
    shown = body.get("return") or {}
    t0 = time.process_time()
    res, route = E.dispatch(cache, state, body["ops"], session=True, extra=("json",), limits=LIMITS,
                            returns=tuple(shown), respond=[n for n, how in shown.items() if how == "full"])
    res.changed, res.autograd, res.ops  # noqa: B018 (what the response reads)
    return time.process_time() - t0, route


def fresh(segments: bool) -> tuple[PlanCache, E.State]:
    return PlanCache(256, 64 << 20, 2, segments=segments), E.State()


def run(bodies: list[dict], segments: bool) -> tuple[list[float], list[str]]:
    cache, state = fresh(segments)
    times, routes = [], []
    for body in bodies:
        t, route = request(cache, state, body)
        times.append(t)
        routes.append(f"{route.name}/{route.reason}")
    return times, routes


def interleaved(bodies: list[dict]) -> dict[bool, float]:
    """Both sessions' steady requests (from the 11th) one by one, in alternating order: median CPU seconds."""
    sessions = {on: fresh(on) for on in (True, False)}
    for body in bodies[:10]:
        for cache, state in sessions.values():
            request(cache, state, body)
    times: dict[bool, list] = {True: [], False: []}
    for i, body in enumerate(bodies[10:]):
        for on in ((True, False) if i % 2 else (False, True)):
            times[on].append(request(*sessions[on], body)[0])
    return {on: statistics.median(t) for on, t in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--requests", type=int, default=200)
    a = ap.parse_args()
    lists = capture(max(a.requests, 12))
    for name in OPTIMIZERS:
        runs: dict[bool, list] = {True: [], False: []}
        for r in range(a.rounds):
            for on in ((True, False) if r % 2 else (False, True)):
                runs[on].append(run(lists[name], on))
        print(f"\n{name}: CPU ms, medians of {a.rounds} alternating runs (steady: each run's median from request 11)")
        print("| plans | req 1 | req 2 | req 3 | req 4 | req 5 | steady | routes of requests 1-5 |")
        print("|---|---|---|---|---|---|---|---|")
        for on in (False, True):
            per = [statistics.median(t[i] for t, _ in runs[on]) * 1e3 for i in range(5)]
            steady = statistics.median(statistics.median(t[10:]) for t, _ in runs[on]) * 1e3
            print(f"| {'segments' if on else 'whole'} | " + " | ".join(f"{v:.2f}" for v in per) +
                  f" | {steady:.3f} | {', '.join(runs[on][0][1][:5])} |")
        both = interleaved(lists[name])
        print(f"steady, one run, interleaved: whole {both[False] * 1e3:.3f} ms, segments {both[True] * 1e3:.3f} ms "
              f"(segments / whole {both[True] / both[False]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
