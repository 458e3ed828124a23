"""Heavy work gives way to light requests (app.admission.Priority, issue 27's cheap path): a heavy request's
engine waits at its next check, without the GIL, while a light request is served; a cancel or the deadline
still stops it; the heavy lane's threads are nicer than the event loop's."""

from __future__ import annotations

import os
import threading
import time

import pytest

from gradserve_server import engine
from gradserve_server.app.admission import Priority, lower_priority
from tests.app.conftest import make_client, ok

BODY = [{"op": "tensor", "out": "x", "args": [[1.0, 2.0]]},
        *[{"op": "mul", "out": "x", "args": ["x", 1.0]} for _ in range(200)]]


def run_in_thread(control: engine.Control) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def work():
        started = time.monotonic()
        try:
            engine.run_program(engine.State(), BODY, control=control)
            outcome["ok"] = True
        except engine.EngineError as exc:
            outcome["error"] = exc.code
        outcome["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=work)
    thread.start()
    return thread, outcome


def test_heavy_work_waits_at_its_next_check_while_a_light_request_is_served():
    priority = Priority(pause_seconds=5.0)
    control = engine.Control(30)
    priority.watch(control)
    priority.enter()  # a light request arrives: the heavy run is asked to pause
    assert control.paused is not None and priority.pauses == 1
    thread, outcome = run_in_thread(control)
    time.sleep(0.3)
    assert thread.is_alive() and control.done <= 1  # waiting at its first check, not computing
    priority.leave()  # the light request is answered: the heavy run goes on
    thread.join(10)
    assert outcome["ok"] and control.done == len(BODY) and control.paused is None


def test_a_pause_is_bounded_and_a_cancel_during_it_still_stops_the_run():
    priority = Priority(pause_seconds=0.2)
    control = engine.Control(30)
    priority.watch(control)
    priority.enter()  # light work that never ends: each pause lasts at most pause_seconds
    thread, outcome = run_in_thread(control)
    thread.join(10)
    assert outcome["ok"] and 0.2 <= outcome["seconds"] < 5
    control2 = engine.Control(30)
    priority.watch(control2)  # (light work is still in flight: paused from the start)
    thread, outcome = run_in_thread(control2)
    time.sleep(0.05)
    control2.cancel("the client disconnected")
    thread.join(10)
    assert outcome["error"] == "cancelled"
    priority.leave()


def test_no_pause_when_turned_off():
    priority = Priority(pause_seconds=0)
    control = engine.Control(30)
    priority.watch(control)
    priority.enter()
    assert control.paused is None and priority.pauses == 0


def test_every_request_is_light_until_the_heavy_lane_takes_it():
    client = make_client(heavy_pause_seconds=0.1)
    priority = client.app.state.priority
    with client:
        assert client.get("/healthz").status_code == 200
        assert priority.light == 0  # left when answered
        ok(client.post("/v1/eval", json={"ops": [{"op": "randn", "out": "m", "args": [300, 300]},
                                                 {"op": "matmul", "out": "p", "args": ["m", "m"]},
                                                 {"op": "sum", "out": "s", "args": ["p"]}], "return": ["s"]}))
        assert priority.light == 0 and not priority.controls  # the heavy lane took it, and let it go
        assert client.app.state.heavy.executor._threads  # on a thread of its own (made nicer there)


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no per-thread niceness here")
def test_a_thread_is_made_nicer_never_less_nice():
    seen = {}

    def work():
        lower_priority(5)
        seen["after"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        lower_priority(3)  # never lowered again
        seen["again"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen["after"] >= 5 and seen["again"] == seen["after"]
