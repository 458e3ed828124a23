"""Session lists a client sends replay: with ``return`` (every sync of the torch client sends one), and
training loops (forward, backward, an optimizer's in-place step under no_grad, zero_grad), each replay bit
for bit the cold run: values, gradients, versions, grad_fn names, the autograd report, errors."""

from __future__ import annotations

import gradserve_server.engine as E
from gradserve_server.engine.errors import EngineError
from gradserve_server.engine.plan import PlanCache, run_session_planned
from gradserve_server.engine.program import State, run_program

from .test_plan import _tensor_view

LIMITS = E.Limits()


def T(name, data, **kw):
    return {"op": "tensor", "out": name, "args": [data], "kwargs": kw}


def op(name, *args, out=None, no_grad=False, **kwargs):
    o = {"op": name, "args": list(args), "kwargs": kwargs, "out": out}
    if no_grad:
        o["no_grad"] = True
    return o


def observe(state, run, ops, returns=()):
    try:
        res = run(state, ops, returns)
    except EngineError as e:
        return ("error", type(e).__name__, e.code, e.message, e.op_index, e.op)
    return ("ok", [(o.index, o.op, o.bound) for o in res.ops], sorted(res.changed),
            [(r.op_index, r.op, [(e.name, _tensor_view(e.contribution)) for e in r.entries]) for r in res.autograd],
            list(res.warnings), {n: _tensor_view(t) for n, t in res.returned.items()})


def snapshot(state):
    return ([(n, _tensor_view(t)) for n, t in state.tensors.items()], sorted(state.functions), state.counter,
            state.backward_passes, sorted(state.warned), state.held_bytes)


def cold(state, ops, returns=()):
    return run_program(state, ops, limits=LIMITS, returns=returns)


def planned(cache):
    return lambda state, ops, returns=(): run_session_planned(cache, state, ops, limits=LIMITS, returns=returns,
                                                              respond=list(returns), extra=("json",))


def test_a_list_with_return_replays_and_returns_what_the_cold_run_returns():
    cache = PlanCache()
    a, b = State(), State()
    setup = [T("w", [[0.5, -1.0], [2.0, 0.25]], requires_grad=True), T("x", [[1.0, 2.0]])]
    run_program(a, setup)
    run_program(b, setup)
    for i in range(5):
        ops = [T("v", [float(i), 1.0]), op("mul", "x", "v", out="xv"), op("sum", "xv", out="s")]
        returns = ("s", "xv", "w", "w.grad", "nothing")
        assert observe(b, planned(cache), ops, returns) == observe(a, cold, ops, returns)
        assert snapshot(b) == snapshot(a)
    # the first run records on a session without v, xv, s; the second on one holding them; the rest replay
    assert cache.hits == 3 and cache.misses == 2
