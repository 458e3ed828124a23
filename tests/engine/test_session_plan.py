"""Session op lists through plans (engine.trace.plan.run_session_planned): a list whose results carry no graph is
replayed, and the session state and result are the cold run's bit for bit; guards fall back, lists whose
results carry a graph stay cold, a failed list leaves the state as it was."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve_server.engine as E
from gradserve_server.engine.errors import EngineError
from gradserve_server.engine.program import State, run_program
from gradserve_server.engine.trace.cache import PlanCache, Unplannable
from gradserve_server.engine.trace.plan import Plan, run_session_planned

from .test_plan import _tensor_view

LIMITS = E.Limits()


def T(name, data, **kw):
    return {"op": "tensor", "out": name, "args": [data], "kwargs": kw}


def op(name, *args, out=None, **kwargs):
    return {"op": name, "args": list(args), "kwargs": kwargs, "out": out}


ENERGY = {"op": "function", "out": "energy", "kwargs": {"inputs": ["q"], "outputs": "e", "ops": [
    op("matmul", "A", "q", out="aq"), op("cosh", "aq", out="c"), op("log", "c", out="lc"),
    op("sum", "lc", out="s1"), op("pow", "q", 4, out="q4"), op("sum", "q4", out="s2"),
    op("div", "s2", 4.0, out="s3"), op("add", "s1", "s3", out="e")]}}


def setup_ops(rng):
    return [T("A", (rng.standard_normal((5, 5)) / 3).tolist(), dtype="float64"),
            T("p", rng.standard_normal(5).tolist(), dtype="float64", requires_grad=True),
            T("h0", rng.standard_normal((2, 3)).tolist()), ENERGY]


def observe(state, run, ops):
    try:
        res = run(state, ops)
    except EngineError as e:
        return ("error", type(e).__name__, e.code, e.message, e.op_index, e.op)
    return ("ok", [(o.index, o.op, o.bound) for o in res.ops], sorted(res.changed),
            [(r.op_index, r.op, [(e.name, _tensor_view(e.contribution)) for e in r.entries]) for r in res.autograd],
            list(res.warnings))


def snapshot(state):
    return ([(n, _tensor_view(t)) for n, t in state.tensors.items()], sorted(state.functions), state.counter,
            state.backward_passes, sorted(state.warned), state.held_bytes)


def cold(state, ops):
    return run_program(state, ops, limits=LIMITS)


def planned(cache):
    return lambda state, ops: run_session_planned(cache, state, ops, limits=LIMITS, extra=("json",))


def twin(seed=0):
    a, b = State(), State()
    run_program(a, setup_ops(np.random.default_rng(seed)))
    run_program(b, setup_ops(np.random.default_rng(seed)))
    return a, b


def same_both_ways(lists, cache):
    a, b = twin()
    for ops in lists:
        assert observe(b, planned(cache), ops) == observe(a, cold, ops)
        assert snapshot(b) == snapshot(a)
    return a, b


def test_a_repeated_hvp_over_a_session_function_is_replayed_bit_for_bit():
    rng = np.random.default_rng(1)
    cache = PlanCache()
    lists = [[T("v", rng.standard_normal(5).tolist(), dtype="float64"),
              op("hvp", "energy", "p", "v", out=["e", "Hv"])] for _ in range(5)]
    same_both_ways(lists, cache)
    # the first list records on the fresh session, the second on one holding e and Hv; the rest replay
    assert cache.misses == 2 and cache.hits == 3 and cache.fallbacks == 0
    assert sum(isinstance(e, Plan) for e in cache._entries.values()) == 2


def test_a_value_dependent_guard_falls_back_to_the_cold_error_and_the_state_stays():
    cache = PlanCache()
    good = [T("y", [1, 0]), op("cross_entropy", "h0", "y", out="loss")]
    bad = [T("y", [1, 9]), op("cross_entropy", "h0", "y", out="loss")]
    a, b = same_both_ways([good, good, good], cache)
    assert cache.hits >= 1
    before = snapshot(b)
    assert observe(b, planned(cache), bad) == observe(a, cold, bad)
    assert observe(b, planned(cache), bad)[0] == "error" and cache.fallbacks >= 1
    assert snapshot(b) == before == snapshot(a)
    assert observe(b, planned(cache), good) == observe(a, cold, good)
    assert snapshot(b) == snapshot(a)


@pytest.mark.parametrize("ops", [
    [op("mul", "p", 2.0, out="p2")],                                               # the result requires grad
    [op("hvp", "energy", "p", "p", out=["e", "Hv"], create_graph=True)],           # a graph on the results
    [op("mul", "p", "p", out="s")],                                  # a graph holding saved tensors
    [op("view", "h0", 6, out="d")],                                                # a view of a session tensor
], ids=["requires-grad", "create-graph", "saved", "view"])
def test_a_list_whose_results_carry_a_graph_stays_cold(ops):
    cache = PlanCache()
    same_both_ways([ops] * 3, cache)
    assert cache.hits == 0 and not any(isinstance(e, Plan) for e in cache._entries.values())


def test_a_session_holding_a_graph_or_a_gradient_runs_cold():
    cache = PlanCache()
    ops = [T("v", [1.0] * 5, dtype="float64"), op("hvp", "energy", "p", "v", out=["e", "Hv"])]
    a, b = twin()
    for s in (a, b):
        run_program(s, [op("sum", "p", out="s"), op("backward", "s")])
    for _ in range(3):
        assert observe(b, planned(cache), ops) == observe(a, cold, ops)
        assert snapshot(b) == snapshot(a)
    assert cache.hits == 0 and len(cache) == 0


def test_a_changed_function_definition_or_session_shape_is_a_new_key():
    cache = PlanCache()
    hvp = [T("v", [1.0] * 5, dtype="float64"), op("hvp", "energy", "p", "v", out=["e", "Hv"])]
    redefine = {**ENERGY, "kwargs": {**ENERGY["kwargs"], "ops": [*ENERGY["kwargs"]["ops"][:-1],
                                                                 op("sub", "s1", "s3", out="e")]}}
    a, b = same_both_ways([hvp, hvp, hvp], cache)
    for s in (a, b):
        run_program(s, [redefine])
    for _ in range(2):
        assert observe(b, planned(cache), hvp) == observe(a, cold, hvp)
        assert snapshot(b) == snapshot(a)
    assert not any(isinstance(e, Unplannable) for e in cache._entries.values())
    assert cache.hits == 2  # one replay of each definition's plan (each recorded on its first two runs)


def run_repeat(cache, **kw):
    if cache is None:
        return lambda state, ops: run_program(state, ops, limits=LIMITS, **kw)
    return lambda state, ops: run_session_planned(cache, state, ops, limits=LIMITS, extra=("json",), **kw)


STEP = [T("k", 0.5, dtype="float64"), op("mul", "x", "k", out="y"), op("add", "y", 0.1, out="x"),
        op("sum", "x", out="s"), op("neg", "s", out="ns"), op("add", "ns", 1.25, out="m"),
        op("relu", "m", out="r"), op("to", "r", dtype="bool", out="done")]  # done: s < 1.25, plannable ops


@pytest.mark.parametrize("kw", [{"repeat": 7}, {"repeat": 50, "until": "done"}, {"repeat": 1, "until": "done"},
                                {"repeat": 3, "until": "nope"}], ids=["repeat", "until", "until-once", "bad-until"])
def test_a_repeat_loop_replays_its_iterations_and_leaves_the_cold_state(kw):
    cache = PlanCache()
    a, b = twin()
    for s in (a, b):
        run_program(s, [T("x", [3.0, 2.0, 1.0], dtype="float64")])
    for _ in range(2):
        ra = observe(a, run_repeat(None, **kw), STEP)
        assert observe(b, run_repeat(cache, **kw), STEP) == ra
        assert snapshot(b) == snapshot(a)
        if ra[0] == "ok":
            assert run_repeat(None, **kw)(a, STEP).iterations == run_repeat(cache, **kw)(b, STEP).iterations
            assert snapshot(b) == snapshot(a)
    assert cache.hits > 0


def test_a_repeat_of_an_hvp_replays_and_a_loop_with_a_graph_stays_cold():
    cache = PlanCache()
    hvp = [T("v", [1.0, 0.5, 0.0, -1.0, 2.0], dtype="float64"), op("hvp", "energy", "p", "v", out=["e", "Hv"])]
    graph = [op("mul", "p", 2.0, out="p2")]
    a, b = twin()
    for ops in (hvp, graph, hvp):
        assert observe(b, run_repeat(cache, repeat=4), ops) == observe(a, run_repeat(None, repeat=4), ops)
        assert snapshot(b) == snapshot(a)
    # hvp: two recordings (fresh names, then rebound ones) and two replays; the graph loop aborts to cold, and
    # the session then holds p2's graph, so the last hvp loop runs cold
    assert cache.hits == 2 and cache.misses == 3


@pytest.mark.parametrize("max_bytes", [20_000, 40_000, 400_000, 4_000_000])
def test_a_repeat_loop_near_the_bytes_limit_gives_what_the_cold_loop_gives(max_bytes):
    """The cold loop keeps every iteration's arrays (its journal), a plan keeps one iteration's: a loop whose
    arrays could pass the limit runs cold, so the error (or its absence) is the cold loop's."""
    limits = E.Limits(max_bytes=max_bytes)
    step = [op("mul", "x", 0.5, out="y"), op("add", "y", 0.1, out="x")]
    cache = PlanCache()
    a, b = State(), State()
    for s in (a, b):
        run_program(s, [T("x", [1.0] * 1000, dtype="float64")])
    for _ in range(2):
        ra = observe(a, lambda st, ops: run_program(st, ops, limits=limits, repeat=30), step)
        rb = observe(b, lambda st, ops: run_session_planned(cache, st, ops, limits=limits, repeat=30), step)
        assert ra == rb
        assert snapshot(b) == snapshot(a)


@pytest.mark.parametrize("transform", [
    op("jacobian", "energy_grad", "p", vectorize=True, out="J"),
    op("jacobian", "energy_grad", "p", vectorize=True, strategy="forward-mode", out="J"),
    op("hessian", "energy", "p", vectorize=True, out="H"),
    op("jacobian", "energy", "p", vectorize=True, out="J"),
], ids=["jacobian-reverse", "jacobian-forward", "hessian", "jacobian-scalar"])
def test_vectorized_jacobians_and_hessians_of_a_session_function_replay_bit_for_bit(transform):
    """The standard basis, the batched duals and the Jacobian blocks are made by kernels: the lists plan."""
    tanh = {"op": "function", "out": "energy_grad", "kwargs": {"inputs": ["q"], "outputs": "y", "ops": [
        op("matmul", "A", "q", out="aq"), op("tanh", "aq", out="y")]}}
    cache = PlanCache()
    a, b = twin()
    for s in (a, b):
        run_program(s, [tanh])
    for i in range(4):
        v = [T("p", np.random.default_rng(i).standard_normal(5).tolist(), dtype="float64")]
        for ops in (v, [transform]):
            assert observe(b, planned(cache), ops) == observe(a, cold, ops)
            assert snapshot(b) == snapshot(a)
    mine = [e for k, e in cache._entries.items() if transform["op"].encode() in k[0]]
    assert mine and all(isinstance(e, Plan) for e in mine), [getattr(e, "reason", "") for e in mine]
    assert cache.hits >= 2 and cache.fallbacks == 0


@pytest.mark.parametrize("change", [op("sum", "x", 0, keepdim=True, out="x"), op("to", "x", dtype="float32", out="x")],
                         ids=["shape", "dtype"])
def test_a_repeat_loop_carries_the_next_key_and_a_changed_state_misses(change, monkeypatch):
    """Iteration k+1 looks its plan up by the key iteration k's plan carries (no key is built on a hit); a
    state whose shape or dtype changes after the first iteration is another key: it records, then replays."""
    import gradserve_server.engine.trace.plan as P
    built = []
    real = P._session_key
    monkeypatch.setattr(P, "_session_key", lambda *a: built.append(1) or real(*a))
    step = [op("mul", "x", 0.5, out="y"), op("add", "y", 0.25, out="x"), change]
    cache = PlanCache()
    a, b = State(), State()
    for s in (a, b):
        run_program(s, [T("x", [1.0, 2.0, 3.0], dtype="float64")])
    for n in (6, 6):
        ra = observe(a, run_repeat(None, repeat=n), step)
        assert observe(b, run_repeat(cache, repeat=n), step) == ra and ra[0] == "ok"
        assert snapshot(b) == snapshot(a)
    # first loop: three states (x changed; then y follows), each recorded once: the first under the key built
    # for it, the other two under the keys their predecessors carry (each recording builds its next key);
    # iterations 4..6 replay by the carried key. Second loop: one key built for the state met, six replays
    assert cache.misses == 3 and cache.hits == 3 + 6
    assert len(built) == (1 + 3) + 1


def test_a_list_recorded_unplannable_runs_cold_and_a_changed_state_plans(monkeypatch):
    import gradserve_server.engine.trace.plan as P
    built = []
    real = P._session_key
    monkeypatch.setattr(P, "_session_key", lambda *a: built.append(1) or real(*a))
    ops = [op("mul", "p", "p", out="p2"), op("sum", "p2", out="s"), op("del", "p2")]  # s's graph saves p
    cache = PlanCache()
    a, b = twin()
    for _ in range(4):
        assert observe(b, planned(cache), ops) == observe(a, cold, ops)
        assert snapshot(b) == snapshot(a)
        for s in (a, b):
            run_program(s, [op("del", "s")])
    # the first run records (unplannable: under its key and its pre-key); the others find the mark and run cold,
    # never recording again (the full key is made first: a list with a plan replays without its pre-key)
    assert len(built) == 4 and cache.misses == 1 and cache.hits == 0 and cache.unplannable == 3
    # p rebound to a leaf without requires_grad: another pre-key, the list plans
    for s in (a, b):
        run_program(s, [T("p", [1.0] * 5, dtype="float64")])
    for _ in range(3):
        assert observe(b, planned(cache), ops) == observe(a, cold, ops)
        assert snapshot(b) == snapshot(a)
    assert cache.hits >= 1


def test_a_chained_repeat_keeps_untouched_tensors_and_gives_the_cold_state():
    """Iterations but the last replay on a lazy state (no tensors built between them): a name the loop never
    rebinds keeps its tensor, a name rebound early and never again gets its tensor built once, the rest as cold."""
    step = [op("mul", "x", 0.5, out="y"), op("add", "y", "z", out="x"), op("exp", "x", out="w"),
            op("neg", "w", out="w")]
    cache = PlanCache()
    a, b = State(), State()
    for s in (a, b):
        run_program(s, [T("x", [1.0, 2.0, 3.0], dtype="float64"), T("z", [0.25, 0.5, 0.75], dtype="float64")])
    z = b.tensors["z"]
    for n in (1, 2, 9, 9):
        ra = observe(a, run_repeat(None, repeat=n), step)
        assert observe(b, run_repeat(cache, repeat=n), step) == ra and ra[0] == "ok"
        assert snapshot(b) == snapshot(a)
    assert b.tensors["z"] is z and cache.fallbacks == 0 and cache.hits >= 8 + 9


@pytest.mark.parametrize("n", [1, 2, 5, 40])
def test_an_until_loop_with_a_comparison_plans_and_stops_where_the_cold_loop_stops(n):
    """Comparisons and logical ops compute through kernels: an until condition plans, its iterations replay
    on a lazy state, and the loop stops at the cold loop's iteration with the cold loop's state."""
    step = [op("mul", "x", 0.5, out="x"), op("sum", "x", out="s"), op("lt", "s", 0.1, out="small"),
            op("gt", "s", -1.0, out="pos"), op("logical_and", "small", "pos", out="both"),
            op("logical_not", "both", out="go"), op("logical_not", "go", out="done")]
    cache = PlanCache()
    a, b = State(), State()
    for s in (a, b):
        run_program(s, [T("x", [3.0, 2.0, 1.0], dtype="float64")])
    for _ in range(2):
        ra = run_repeat(None, repeat=n, until="done")(a, step)
        rb = run_repeat(cache, repeat=n, until="done")(b, step)
        assert rb.iterations == ra.iterations and sorted(rb.changed) == sorted(ra.changed)
        assert snapshot(b) == snapshot(a)
        for s in (a, b):
            run_program(s, [op("mul", "x", 1000.0, out="x")])
    assert not any(isinstance(e, Unplannable) for e in cache._entries.values())
    assert cache.hits >= (1 if n > 2 else 0) and cache.fallbacks == 0


def test_a_long_planned_repeat_loop_checks_its_control_and_gives_the_cold_error():
    """Short plans never reach a replay's own deadline check: the planned loop checks every so many
    iterations, and a cancel mid-loop gives the cold loop's error with nothing applied."""
    from gradserve_server.engine.budget import Control
    from gradserve_server.engine.errors import CancelledError

    class CancelAt(Control):
        __slots__ = ("calls", "at")

        def check(self):
            self.calls += 1
            if self.calls >= self.at:
                self.cancel("test")
            super().check()

    step = [op("mul", "x", 0.5, out="y"), op("add", "y", 0.25, out="x")]
    cache = PlanCache()
    s = State()
    run_program(s, [T("x", [1.0, 2.0, 3.0], dtype="float64")])
    run_session_planned(cache, s, step, repeat=3)  # (records: the loop below replays from its first iteration)
    before = snapshot(s)
    control = CancelAt()
    control.calls, control.at = 0, 3
    with pytest.raises(CancelledError):
        run_session_planned(cache, s, step, repeat=100_000, control=control)
    assert snapshot(s) == before and control.calls < 100
