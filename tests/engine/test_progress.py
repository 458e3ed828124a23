"""A request's progress on its Control: ops run of ops x repeat, for the app's progress route."""

from __future__ import annotations

import gradserve_server.engine as E
from gradserve_server.engine.trace.cache import PlanCache
from gradserve_server.engine.trace.plan import run_session_planned

OPS = [{"op": "mul", "args": ["a", 2.0], "out": "b"}, {"op": "add", "args": ["b", 1.0], "out": "a"}]


def _state():
    state = E.State()
    E.run_program(state, [{"op": "ones", "args": [3], "out": "a"}])
    return state


def test_a_cold_run_counts_every_op_of_every_pass():
    control = E.Control(60)
    E.run_program(_state(), OPS * 3, control=control)
    assert (control.done, control.total) == (6, 6)
    control = E.Control(60)
    E.run_program(_state(), OPS, repeat=5, control=control)
    assert (control.done, control.total) == (10, 10)


def test_a_planned_repeat_loop_reports_the_whole_loop():
    seen = []

    class Watching(E.Control):
        __slots__ = ()

        def check(self):
            seen.append((self.done, self.total))
            super().check()

    control = Watching(60)
    state = _state()
    run_session_planned(PlanCache(64, 1 << 20, 1), state, OPS, repeat=200, control=control)
    assert control.total == 400 and 0 < control.done <= 400
    assert seen and all(total == 400 and 0 <= done <= 400 for done, total in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert state.tensors["a"].data.tolist()[0] > 1e3  # the loop ran
