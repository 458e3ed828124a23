"""Session lists a client sends replay: with ``return`` (every sync of the torch client sends one), and
training loops (forward, backward, an optimizer's in-place step under no_grad, zero_grad), each replay bit
for bit the cold run: values, gradients, versions, grad_fn names, the autograd report, errors."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve_server.engine as E
from gradserve_server.engine.errors import EngineError
from gradserve_server.engine.program import State, run_program
from gradserve_server.engine.trace.cache import PlanCache
from gradserve_server.engine.trace.plan import run_session_planned

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
            [(r.op_index, r.op, [(e.name, _tensor_view(e.contribution), _tensor_view(e.grad), e.grad_accumulations)
                                 for e in r.entries]) for r in res.autograd],
            list(res.warnings), {n: _tensor_view(t) for n, t in res.returned.items()})


def _graph(t):
    """A tensor's graph as its nodes' names, edges and saved slots (whether freed), depth first; an
    AccumulateGrad as the name of the session tensor it accumulates into (identity, not just a name)."""
    out, stack, seen = [], [t.grad_fn], set()
    while stack:
        n = stack.pop()
        if n is None:
            out.append(None)
            continue
        if id(n) in seen:
            out.append(("seen", n.name))
            continue
        seen.add(id(n))
        out.append((n.name, [nr for _, nr in n.next_functions], sorted((k, getattr(v, "freed", v))
                                                                       for k, v in n.saved.items())))
        if n.name == "AccumulateGrad":
            out.append(n.variable is not None and n.variable._accumulator is n)
        stack.extend(c for c, _ in n.next_functions)
    return out


def snapshot(state):
    return ([(n, _tensor_view(t), _graph(t), t.output_nr) for n, t in state.tensors.items()],
            sorted(state.functions), state.counter, state.backward_passes, sorted(state.warned), state.held_bytes,
            # which names hold the same tensor, the same gradient or the same version counter
            [(n, [m for m, u in state.tensors.items() if u is t or u is t._grad],
              [m for m, u in state.tensors.items() if u._vc is t._vc]) for n, t in state.tensors.items()])


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


def _mlp_setup(rng):
    return [T("w1", rng.uniform(-0.5, 0.5, (8, 4)).tolist(), requires_grad=True),
            T("b1", rng.uniform(-0.5, 0.5, 8).tolist(), requires_grad=True),
            T("w2", rng.uniform(-0.5, 0.5, (1, 8)).tolist(), requires_grad=True),
            T("b2", rng.uniform(-0.5, 0.5, 1).tolist(), requires_grad=True),
            T("x", rng.uniform(-1, 1, (16, 4)).tolist()), T("y", rng.uniform(-1, 1, (16, 1)).tolist())]


PARAMS = ("w1", "b1", "w2", "b2")


def _forward(loss="loss"):
    return [op("linear", "x", "w1", "b1", out="h"), op("relu", "h", out="r"), op("linear", "r", "w2", "b2", out="o"),
            op("mse_loss", "o", "y", out=loss), op("backward", loss)]


def sgd_momentum_epoch(first: bool):
    """One iteration of a raw loop: zero_grad (set_to_none), forward, backward, torch's SGD(momentum=0.9) step
    under no_grad (the first step's buffer a detached clone of the gradient, as torch makes it)."""
    ops = [op("zero_grad", list(PARAMS), set_to_none=True), *_forward()]
    for p in PARAMS:
        if first:
            ops += [op("clone", f"{p}.grad", out=f"buf_{p}", no_grad=True),
                    op("detach", f"buf_{p}", out=f"buf_{p}", no_grad=True)]
        else:
            ops += [op("mul_", f"buf_{p}", 0.9, no_grad=True),
                    op("add_", f"buf_{p}", f"{p}.grad", alpha=1, no_grad=True)]
        ops.append(op("add_", p, f"buf_{p}", alpha=-0.05, no_grad=True))
    return ops + [op("del", "h", "r", "o")]


def twin(setup):
    a, b = State(), State()
    run_program(a, setup)
    run_program(b, setup)
    return a, b


def test_an_sgd_momentum_training_loop_replays_from_its_second_iteration_bit_for_bit():
    rng = np.random.default_rng(0)
    cache = PlanCache(segments=False)  # (the whole-list counts; segments: test_plan_segments.py)
    a, b = twin(_mlp_setup(rng))
    for i in range(6):
        ops = sgd_momentum_epoch(i == 0)
        returns = ("loss", "w1", "w1.grad", "buf_w1")
        want = observe(a, cold, ops, returns)
        assert observe(b, planned(cache), ops, returns) == want and want[0] == "ok", want
        assert snapshot(b) == snapshot(a)
        assert [t.version for t in b.tensors.values()] == [t.version for t in a.tensors.values()]
    # the first list (buffers made) records, then the loop's list records once and replays
    assert cache.hits == 4 and cache.misses == 2, cache.stats()
    # the replayed loss carries the cold run's graph, its saved tensors freed: a second backward fails as cold
    again = [op("backward", "loss")]
    assert observe(b, planned(cache), again) == observe(a, cold, again)
    assert observe(a, cold, again)[0] == "error"



def client_epoch(i: int):
    """What gradserve.torch sends for one iteration of a loop with SGD(momentum=0.9): the previous step's
    update (it reads the gradients bound last time), zero_grad, forward, backward, the new gradients bound,
    the names the client dropped deleted; every name new (the client's counter), so only canonical names
    repeat."""
    ops = []
    for p in PARAMS:
        if i == 1:
            ops += [op("clone", f"g{p}{i - 1}", out=f"c{p}", no_grad=True),
                    op("detach", f"c{p}", out=f"buf{p}", no_grad=True)]
        elif i > 1:
            ops += [op("mul_", f"buf{p}", 0.9, no_grad=True),
                    op("add_", f"buf{p}", f"g{p}{i - 1}", alpha=1, no_grad=True)]
        if i:
            ops.append(op("add_", p, f"buf{p}", alpha=-0.05, no_grad=True))
    ops += [op("zero_grad", list(PARAMS), set_to_none=True), op("linear", "x", "w1", "b1", out=f"h{i}"),
            op("relu", f"h{i}", out=f"r{i}"), op("linear", f"r{i}", "w2", "b2", out=f"o{i}"),
            op("mse_loss", f"o{i}", "y", out=f"loss{i}"), op("backward", f"loss{i}")]
    ops += [op("bind", f"{p}.grad", out=f"g{p}{i}") for p in PARAMS]
    gone = [f"h{i}", f"r{i}", f"o{i}"] + ([f"loss{i - 1}"] + [f"g{p}{i - 1}" for p in PARAMS] if i else [])
    gone += [f"c{p}" for p in PARAMS] if i == 1 else []
    return ops + [op("del", *gone)], (f"loss{i}", *(f"{p}.grad" for p in PARAMS))


def test_a_client_loop_under_new_names_each_iteration_replays_bit_for_bit():
    rng = np.random.default_rng(1)
    cache = PlanCache(segments=False)  # (the whole-list counts; segments: test_plan_segments.py)
    a, b = twin(_mlp_setup(rng))
    for i in range(7):
        ops, returns = client_epoch(i)
        want = observe(a, cold, ops, returns)
        assert observe(b, planned(cache), ops, returns) == want and want[0] == "ok", want
        assert snapshot(b) == snapshot(a)
    # iterations 0 and 1 are lists of their own; from 2 on the same list under other names: recorded, replayed
    assert cache.hits == 4 and cache.misses == 3, cache.stats()


def test_a_replay_that_fails_after_writing_in_place_leaves_the_session_as_the_cold_error_does():
    cache = PlanCache()
    a, b = twin(_mlp_setup(np.random.default_rng(2)) + [T("target", [0, 1]), T("z", [[0.5, 1.0], [2.0, -1.0]])])
    step = lambda t: [op("mul_", "w1", 0.5, no_grad=True), op("add_", "b1", 1.0, no_grad=True),  # noqa: E731
                      T("t", t), op("cross_entropy", "z", "t", out="ce")]
    for _ in range(3):
        assert observe(b, planned(cache), step([0, 1])) == observe(a, cold, step([0, 1]))
    assert cache.hits == 1
    before = snapshot(b)
    want = observe(a, cold, step([0, 7]))
    assert observe(b, planned(cache), step([0, 7])) == want and want[0] == "error" and want[4] == 3
    assert cache.fallbacks == 1
    assert snapshot(b) == snapshot(a) == before
    assert [t.data.tobytes() for t in b.tensors.values()] == [t.data.tobytes() for t in a.tensors.values()]


def tutorial_epoch():
    """The tutorial's loop: MSE of w*x+b, backward, a manual SGD step under no_grad, gradients zeroed in place."""
    return [op("mul", "w", "x", out="wx"), op("add", "wx", "b", out="p"), op("sub", "p", "y", out="d"),
            op("pow", "d", 2, out="d2"), op("mean", "d2", out="loss"), op("backward", "loss"),
            op("mul", "w.grad", 0.01, out="sw", no_grad=True), op("sub_", "w", "sw", no_grad=True),
            op("mul", "b.grad", 0.01, out="sb", no_grad=True), op("sub_", "b", "sb", no_grad=True),
            op("zero_", "w.grad"), op("zero_", "b.grad")]


def test_the_tutorial_loop_replays_bit_for_bit():
    cache = PlanCache()
    xs = [1.0, 2.0, 3.0, 4.0]
    a, b = twin([T("w", [0.5], requires_grad=True), T("b", [0.1], requires_grad=True), T("x", xs),
                 T("y", [2 * v + 1 for v in xs])])
    for _ in range(6):
        want = observe(a, cold, tutorial_epoch(), ("loss",))
        assert observe(b, planned(cache), tutorial_epoch(), ("loss",)) == want and want[0] == "ok", want
        assert snapshot(b) == snapshot(a)
    assert cache.hits >= 3, cache.stats()


FORWARD = [op("linear", "x", "w1", "b1", out="h"), op("relu", "h", out="r"), op("linear", "r", "w2", "b2", out="o"),
           op("mse_loss", "o", "y", out="loss")]


@pytest.mark.parametrize("ops", [
    [*FORWARD, op("backward", "loss")],                                                  # gradients accumulate in place
    [op("zero_grad", list(PARAMS)), *FORWARD, op("backward", "loss")],                   # zeroed in place, then summed
    [op("set_grad", "w1", None), *FORWARD, op("backward", "loss"), op("bind", "w1.grad", out="g")],
    [*FORWARD, op("retain_grad", "o"), op("backward", "loss")],                          # a retained graph: cold
    [*FORWARD, op("backward", "loss", retain_graph=True)],                               # saved tensors kept: cold
    [op("detach", "w1", out="d"), op("mul_", "d", 0.5, no_grad=True)],                   # a view of the session: cold
    [op("mul_", "w1", 0.5, no_grad=True), op("sub_", "b1", "b2", no_grad=True), op("clone", "b1", out="c")],
    [*FORWARD, op("backward", "loss"), op("add_", "w1", "w1.grad", alpha=-0.1, no_grad=True),
     op("zero_", "w1.grad"), op("del", "h", "r")],
], ids=["accumulate", "zero-in-place", "set-grad-bind", "retain", "retain-graph", "detach", "in-place", "step"])
def test_session_lists_with_gradients_and_in_place_writes_replay_or_run_cold_exactly(ops):
    cache = PlanCache()
    a, b = twin(_mlp_setup(np.random.default_rng(3)))
    for _ in range(5):
        want = observe(a, cold, ops, ("loss", "w1.grad"))
        assert observe(b, planned(cache), ops, ("loss", "w1.grad")) == want and want[0] == "ok", want
        assert snapshot(b) == snapshot(a)


def test_a_kept_gradient_bound_to_a_new_name_each_iteration_is_the_same_tensor_after_a_replay():
    """The torch client's tutorial loop: ``w.grad`` is summed and zeroed in place, and each iteration binds it to
    a new name (deleting the last): after a replay that name holds the session's very gradient tensor."""
    cache = PlanCache()
    xs = [1.0, 2.0, 3.0, 4.0]
    a, b = twin([T("w", [0.5], requires_grad=True), T("x", xs), T("y", [2 * v + 1 for v in xs])])
    for i in range(6):
        ops = [op("mul", "w", "x", out=f"p{i}"), op("sub", f"p{i}", "y", out=f"d{i}"),
               op("pow", f"d{i}", 2, out=f"e{i}"), op("mean", f"e{i}", out=f"loss{i}"), op("backward", f"loss{i}"),
               op("bind", "w.grad", out=f"g{i}"),
               op("mul", f"g{i}", 0.01, out=f"s{i}", no_grad=True), op("sub_", "w", f"s{i}", no_grad=True),
               op("zero_", f"g{i}"),
               op("del", f"p{i}", f"d{i}", f"e{i}", f"s{i}", *([f"g{i - 1}", f"loss{i - 1}"] if i else []))]
        want = observe(a, cold, ops, (f"loss{i}", f"g{i}"))
        assert observe(b, planned(cache), ops, (f"loss{i}", f"g{i}")) == want and want[0] == "ok", want
        assert snapshot(b) == snapshot(a)
        assert b.tensors[f"g{i}"] is b.tensors["w"]._grad
    assert cache.hits >= 3, cache.stats()


def test_a_list_naming_a_tensor_where_a_literal_goes_is_keyed_under_its_own_names():
    """An index that names a tensor is not read by name position: such a list keeps its own names in its key, so
    two sessions whose names sit in other orders never share a plan."""
    from gradserve_server.engine.trace.key import _canonical

    s = State()
    run_program(s, [T("a", [1.0, 2.0, 3.0]), T("i", [0, 2])])
    assert _canonical([op("getitem", "a", "i", out="z")], s.tensors) is None
    assert _canonical([op("mse_loss", "a", "a", reduction="sum", out="z")], s.tensors) is not None
    cache = PlanCache()
    for first in ("a", "i"):
        a, b = State(), State()
        setup = [T("a", [1.0, 2.0, 3.0]), T("i", [0, 2])] if first == "a" else [T("i", [0, 2]), T("a", [1.0, 2.0, 3.0])]
        run_program(a, setup)
        run_program(b, setup)
        for _ in range(3):
            ops = [op("getitem", "a", "i", out="z")]
            assert observe(b, planned(cache), ops) == observe(a, cold, ops)
            assert snapshot(b) == snapshot(a)
