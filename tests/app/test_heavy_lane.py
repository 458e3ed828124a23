"""The heavy lane's threads (issue 27's cheap path): heavy requests run on threads of their own, made nicer
than the event loop's (``GRADSERVE_HEAVY_NICE``), never less nice again; the light lane stays in the thread pool."""

from __future__ import annotations

import os
import threading

import pytest

from gradserve_server.app.admission import lower_priority
from tests.app.conftest import make_client, ok

pytestmark = pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no per-thread niceness here")


def niceness_in_thread(*steps: int) -> list[int]:
    seen = []

    def work():
        for nice in steps:
            lower_priority(nice)
            seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return seen


def test_a_thread_is_made_nicer_never_less_nice():
    start = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert niceness_in_thread(start + 5, start + 3, 0) == [start + 5] * 3
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == start  # this thread: untouched


def heavy_thread_niceness(nice: int) -> int:
    client = make_client(heavy_nice=nice)
    heavy = client.app.state.heavy
    with client:
        ok(client.post("/v1/eval", json={"ops": [{"op": "randn", "out": "m", "args": [300, 300]},
                                                 {"op": "matmul", "out": "p", "args": ["m", "m"]},
                                                 {"op": "sum", "out": "s", "args": ["p"]}], "return": ["s"]}))
        (thread,) = heavy.executor._threads  # the heavy lane ran it on a thread of its own
        return os.getpriority(os.PRIO_PROCESS, thread.native_id)


def test_heavy_requests_run_on_nicer_threads_of_their_own():
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert heavy_thread_niceness(min(19, base + 7)) == min(19, base + 7)
    assert heavy_thread_niceness(0) == base  # 0 turns it off
    assert make_client().app.state.light.executor is None  # the light lane: the thread pool, as nice as the loop


def test_an_app_serves_heavy_requests_again_after_a_shutdown():
    """The lane's threads end with the app's lifespan; an app object that serves again (a second lifespan, or
    requests without one, as in-process test clients send) makes new ones instead of failing with a 500."""
    client = make_client()
    ops = {"ops": [{"op": "randn", "out": "m", "args": [200, 200]}, {"op": "matmul", "out": "p", "args": ["m", "m"]},
                   {"op": "sum", "out": "s", "args": ["p"]}], "return": ["s"]}
    for _ in range(2):
        with client:
            ok(client.post("/v1/eval", json=ops))
    ok(client.post("/v1/eval", json=ops))  # no lifespan at all
