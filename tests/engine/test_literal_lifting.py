"""Lifted literals: a session list's floats are plan inputs, keyed by their type, not their value (engine.trace.plan
``_canonical``, engine.kernel ``Lit``). A list run with other floats replays the same plan; a float whose value
the run reads outside a kernel (a branch, a conversion, a value a graph node keeps) is pinned into the key;
ints, bools and everything else stay in the key. Whatever the route, every run gives the cold run's result and
session state bit for bit: each op sample with a float argument, and loops whose floats change every step
(Adam's bias corrections), run both ways."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve_server.engine as E
from gradserve_server.engine import kernel as K
from gradserve_server.engine.program import State, run_program
from gradserve_server.engine.trace.cache import PlanCache
from gradserve_server.engine.trace.plan import Plan, _Pinned

from .samples import SAMPLES
from .test_plan import _program, _same
from .test_session_plan import observe, snapshot

LIMITS = E.Limits()


def T(name, data, **kw):
    return {"op": "tensor", "out": name, "args": [data], "kwargs": kw}


def op(name, *args, out=None, no_grad=False, **kwargs):
    o = {"op": name, "args": list(args), "kwargs": kwargs}
    if out is not None:
        o["out"] = out
    if no_grad:
        o["no_grad"] = True
    return o


def cold(state, ops):
    return run_program(state, ops, limits=LIMITS)


def traced(cache, routes):
    def run(state, ops):
        try:
            res, route = E.dispatch(cache, state, ops, session=True, limits=LIMITS, extra=("json",))
        except E.EngineError as e:
            route = e.route
            raise
        finally:
            routes.append(route)
            assert route.name in E.ROUTES and route.reason in E.REASONS, route
        return res
    return run


class Twins:
    """One session run cold, its twin through the plan cache: every list observed both ways, compared."""

    def __init__(self, setup: list, cache: PlanCache | None = None):
        self.a, self.b = State(), State()
        run_program(self.a, setup)
        run_program(self.b, setup)
        self.cache = cache if cache is not None else PlanCache()
        self.routes: list = []

    def run(self, ops: list):
        want = observe(self.a, cold, ops)
        got = observe(self.b, traced(self.cache, self.routes), ops)
        assert got == want
        assert snapshot(self.b) == snapshot(self.a)
        return self.routes[-1]


def pins(cache: PlanCache) -> list:
    return [e.pins for e in cache._entries.values() if isinstance(e, _Pinned)]


def plans(cache: PlanCache) -> int:
    return sum(isinstance(e, Plan) for e in cache._entries.values())


# ----- Adam's step, as gradserve.torch sends it -------------------------------------------------------------
def adam_setup(rng, amsgrad=False):
    ops = [T("w", rng.standard_normal((4, 3)).tolist(), requires_grad=True),
           T("x", rng.standard_normal((5, 4)).tolist()),
           op("zeros_like", "w", out="m"), op("zeros_like", "w", out="v"),
           op("matmul", "x", "w", out="h"), op("sum", "h", out="loss0"), op("backward", "loss0"),
           op("bind", "w.grad", out="g0"), op("del", "h")]
    if amsgrad:
        ops.insert(4, op("zeros_like", "w", out="vm0"))
    return ops


def adam_step(k, lr=0.01, b1=0.9, b2=0.999, eps=1e-8, amsgrad=False, decoupled=0.0, schedule=False):
    """Iteration k: Adam's step k on the last gradient (torch's single-tensor update), then zero_grad, a forward
    and a backward (the list a training loop's request carries)."""
    bc1, bc2 = 1 - b1 ** k, 1 - b2 ** k
    lr = lr * 0.95 ** k if schedule else lr  # (an lr scheduler's decay)
    g = f"g{k - 1}"
    step = []
    if decoupled:
        step.append(op("mul_", "w", 1 - lr * decoupled, no_grad=True))
    step += [op("lerp_", "m", g, 1 - b1, no_grad=True), op("mul_", "v", b2, no_grad=True),
             op("addcmul_", "v", g, g, value=1 - b2, no_grad=True)]
    second = "v"
    if amsgrad:
        step += [op("maximum", f"vm{k - 1}", "v", out=f"vm{k}", no_grad=True), op("del", f"vm{k - 1}")]
        second = f"vm{k}"
    step += [op("sqrt", second, out=f"s{k}", no_grad=True), op("div", f"s{k}", bc2 ** 0.5, out=f"d{k}", no_grad=True),
             op("add_", f"d{k}", eps, no_grad=True), op("addcdiv_", "w", "m", f"d{k}", value=-(lr / bc1), no_grad=True)]
    return step + [op("zero_grad", ["w"], set_to_none=True),
                   op("matmul", "x", "w", out=f"h{k}"), op("tanh", f"h{k}", out=f"a{k}"),
                   op("sum", f"a{k}", out=f"l{k}"),
                   op("backward", f"l{k}"), op("bind", "w.grad", out=f"g{k}"),
                   op("del", f"s{k}", f"d{k}", g, f"h{k}", f"a{k}", "loss0" if k == 1 else f"l{k - 1}")]


@pytest.mark.parametrize("amsgrad,decoupled,schedule", [(False, 0.0, False), (True, 0.0, False), (False, 0.01, False),
                                                         (True, 0.01, False), (False, 0.01, True)],
                         ids=["adam", "adam-amsgrad", "adamw", "adamw-amsgrad", "adamw-lr-schedule"])
@pytest.mark.parametrize("segments", [False, True], ids=["whole", "segments"])
def test_an_adam_loop_replays_one_plan_though_its_bias_corrections_change_every_step(amsgrad, decoupled, schedule,
                                                                                     segments):
    tw = Twins(adam_setup(np.random.default_rng(0), amsgrad), PlanCache(record_after=2, segments=segments))
    routes = [tw.run(adam_step(k, amsgrad=amsgrad, decoupled=decoupled, schedule=schedule)) for k in range(1, 11)]
    # (names are canonical: step 1's list is the loop's, recorded at its first sighting as a training step; the
    # others replay; in segments: the update's and the forward and backward's plans, replayed in step 2, then the
    # whole list's, recorded in step 3: each one for every step)
    if segments:
        assert [(r.name, r.reason) for r in routes] == [("recorded", "segments"), ("replayed", "segments"),
                                                        ("recorded", "segments_fused")] + [("replayed", "plan_hit")] * 7
        assert tw.cache.hits == 2 + 7 and plans(tw.cache) == 3
    else:
        assert [(r.name, r.reason) for r in routes] == [("recorded", "training_step")] + [("replayed", "plan_hit")] * 9
        assert tw.cache.hits == 9 and plans(tw.cache) == 1
    # the step's floats (lerp's weight, mul_'s factor, addcmul's value, div's divisor, add_'s eps, addcdiv's
    # value; AdamW's decay factor, which an lr schedule changes every step) are all plan inputs: none is pinned
    assert not pins(tw.cache)


def test_a_lifted_literal_changing_every_step_gives_the_cold_values_to_the_last_bit():
    """addcdiv's value, div's divisor and lerp's weight over values that cross lerp's kernel branch (|w| < 0.5)
    and the float32 rounding of the divisor."""
    setup = [T(n, np.linspace(lo, hi, 12).reshape(3, 4).tolist()) for n, lo, hi in
             [("p", -2, 2), ("q", 1, 3), ("r", 0.5, 1.5)]]
    tw = Twins(setup)
    rng = np.random.default_rng(3)
    for w in [0.1, 0.49999999, 0.5, 0.9, -0.7, 1e-30, 3.0000001, 0.3]:
        d = float(rng.uniform(0.1, 10))
        ops = [op("lerp_", "p", "q", w, no_grad=True), op("div", "r", d, out="t"),
               op("addcdiv_", "p", "q", "t", value=w * 1e-3, no_grad=True),
               op("addcmul", "p", "q", "r", value=-w, out="u"),
               op("lerp", "u", "q", "r", out="z"), op("del", "t", "u")]
        tw.run(ops + [op("del", "z")])
    assert plans(tw.cache) == 1 and tw.cache.hits == 7 and not pins(tw.cache)


@pytest.mark.parametrize("dtype", ["int8", "int64", "bool", "float64"])
def test_a_lifted_float_is_read_as_the_float_it_is_whatever_the_tensors_dtype(dtype):
    """The kernels read a lifted float as the float (an int8 result of 300.7 overflows as the cold run's does, not as
    a float64 array's cast would wrap)."""
    data = [True, False, True] if dtype == "bool" else [1, 2, 3]
    tw = Twins([T("a", data, dtype=dtype), T("b", data, dtype=dtype), T("f", [0.5, 1.5, 2.5], dtype="float64")])
    for v in [2.5, 2.5, 300.7, -1e30, 2.5, float(2 ** 70), 0.25]:
        for o in ([op("addcmul", "a", "b", "b", value=v, out="z")], [op("addcdiv", "f", "f", "f", value=v, out="z")],
                  [op("lerp", "f", "f", v, out="z")], [op("div", "a", v, out="z")], [op("mul", "a", v, out="z")],
                  [op("add", "a", "b", alpha=v, out="z")]):
            tw.run(o + [op("del", "z")])


# ----- literals that must not be lifted ---------------------------------------------------------------------
def test_an_int_and_a_float_literal_are_different_plans_as_they_promote_differently():
    tw = Twins([T("n", [1, 2, 3]), T("x", [0.5, 1.5, 2.5])])
    for v in [2, 2.0, 3, 3.5, 2, True, 3.5]:
        tw.run([op("mul", "n", v, out="y"), op("add", "x", v, out="z"), op("del", "y", "z")])
    # int, float and bool lists are three structures; ints are keyed by value (2 and 3: two plans), the float is
    # lifted (2.0 and 3.5: one plan; int64 * float gives float32, converted by a kernel as for a float tensor)
    assert plans(tw.cache) == 4 and not pins(tw.cache)
    assert [r.name for r in tw.routes] == ["recorded"] * 3 + ["replayed"] * 2 + ["recorded", "replayed"]


def test_dims_and_sizes_stay_in_the_key():
    tw = Twins([T("x", np.arange(12.0).reshape(3, 4).tolist(), requires_grad=True)])
    for dim in [0, 1, 0, -1]:
        tw.run([op("sum", "x", dim, out="s"), op("mul", "s", 0.5, out="h"), op("sum", "h", out="l"),
                op("backward", "l"), op("del", "s", "h", "l"), op("zero_grad", ["x"])])
    assert plans(tw.cache) == 3 and tw.cache.hits == 1


def test_a_value_an_op_branches_on_is_pinned_and_each_value_gets_its_plan():
    """add's alpha (alpha=1 adds without a product), pow's exponent (-0.5: torch's rsqrt kernel) are read by the op
    before its kernel: pinned; replays of each value are the cold runs'."""
    tw = Twins([T("x", [0.0, -0.0, 4.0, 2.25, float("inf")]), T("y", [1.0, 2.0, 3.0, 4.0, 5.0])])
    for alpha, e in [(1.0, -0.5), (0.5, 2.5), (1.0, -0.5), (0.5, 2.5), (1.0, 2.5), (0.5, -0.5), (0.5, 2.0)]:
        tw.run([op("add", "x", "y", alpha=alpha, out="a"), op("pow", "x", e, out="b"), op("del", "a", "b")])
    assert pins(tw.cache) == [(0, 1)]
    assert plans(tw.cache) == 5 and tw.cache.hits == 2


def test_a_pinned_float_is_keyed_by_its_bits_so_minus_zero_and_nan_get_plans_of_their_own():
    """A pinned value is keyed as fragment keys type a literal (``key.literal_key``): -0.0 == 0.0 would replay
    alpha=0.0's plan for alpha=-0.0 (x + 0.0*y is 0.0 where x + -0.0*y is -0.0 for x = -0.0, y > 0), and a NaN
    (never == itself) would never find its plan."""
    tw = Twins([T("x", [-0.0, 1.0]), T("y", [1.0, 1.0])])
    for alpha in (0.0, 0.0, -0.0, -0.0, float("nan"), float("nan"), 0.0):
        tw.run([op("add", "x", "y", alpha=alpha, out="a"), op("del", "a")])
    assert pins(tw.cache) == [(0,)]
    assert plans(tw.cache) == 3 and tw.cache.hits == 4


def test_a_float_a_graph_node_keeps_is_pinned():
    """add's alpha saved on AddBackward0 (a session tensor's graph, rebuilt by a replay) is keyed by value."""
    tw = Twins([T("x", [1.0, 2.0], requires_grad=True), T("y", [3.0, 4.0], requires_grad=True)])
    for alpha in [0.25, 0.25, 0.75, 0.75, 0.25]:
        tw.run([op("add", "x", "y", alpha=alpha, out="z"), op("sum", "z", out="s"), op("backward", "s"),
                op("del", "s"), op("zero_grad", ["x", "y"])])
    # (the first list's state has no ``z``: a structure of its own)
    assert pins(tw.cache) == [(0,), (0,)]
    assert tw.cache.hits == 2


def test_a_recording_that_fails_with_stand_ins_gives_the_cold_run_s_error_or_result(monkeypatch):
    """A list that fails of itself gives the cold run's error (nothing cached); one that would fail only with the
    stand-ins (a type test that a Lit fails) runs cold, right, and is keyed by value from then on."""
    tw = Twins([T("x", [1.0, 2.0]), T("y", [1.0, 2.0, 3.0])])
    for _ in range(2):
        tw.run([op("add", "x", "y", alpha=0.5, out="z"), op("del", "z")])  # (a shape error, both ways)
    assert all(r.name == "recorded" for r in tw.routes) and not tw.cache._entries
    from gradserve_server.engine.ops import elementwise as EW

    real = EW._alpha_ok

    def strict(alpha, dtype):  # (a test only a real float passes)
        if type(alpha) is not float and type(alpha) is not int:
            raise TypeError("not a float")
        return real(alpha, dtype)
    monkeypatch.setattr(EW, "_alpha_ok", strict)
    routes = [tw.run([op("add", "x", "x", alpha=v, out="z"), op("del", "z")]) for v in (0.5, 0.5, 0.5)]
    assert routes[0] == E.Route("cold", "literal_escaped", "a float literal failed where a float does not")
    assert [r.name for r in routes[1:]] == ["recorded", "replayed"]


def test_no_stand_in_is_left_in_the_session_a_recording_ran_on():
    """A graph the recorded run leaves (held, not yet backwarded: its list runs cold after the recording) keeps
    the floats as floats: the session serialises, and reads back, as the cold twin's does."""
    from gradserve_server.engine.serialize import dumps, loads

    tw = Twins([T("x", [1.0, 2.0], requires_grad=True), T("y", [3.0, 4.0], requires_grad=True)])
    tw.run([op("add", "x", "y", alpha=0.5, out="z"), op("lerp", "z", "y", 0.25, out="h")])
    nodes, stack = [], [tw.b.tensors["h"].grad_fn]
    while stack:
        n = stack.pop()
        nodes.append(n)
        stack.extend(c for c, _ in n.next_functions if c is not None)
    assert all(type(v) is not K.Lit for n in nodes for v in n.saved.values())
    assert dumps(tw.b) == dumps(tw.a)
    assert snapshot(loads(dumps(tw.b))) == snapshot(loads(dumps(tw.a)))


def test_a_lit_reads_as_a_float_and_notes_every_read():
    rec = K.Recorder()
    lit = K.Lit(0.1, 0, rec)
    assert isinstance(lit, float) and lit.__class__ is float and type(lit).__name__ == "float"
    assert not rec.pins
    assert getattr(lit, "data", None) is None and not rec.pins  # (a missing attribute is not a read)
    assert lit * 2 == 0.2 and rec.pins == {0}
    rec.pins.clear()
    assert np.float32(lit) == np.float32(0.1) and rec.pins == {0}
    with pytest.raises(K.LiteralEscape):
        np.ones(2, np.float32) * lit  # (float64 where a Python float gives float32)
    assert rec.escaped


def test_an_escaping_literal_undoes_the_recording_and_runs_cold(monkeypatch):
    """A kernel not declared ``takes_literals`` that numpy would hand the Lit to directly: simulated by an op that
    multiplies by its float outside a kernel while recording."""
    from gradserve_server.engine.ops import common

    real = common.number_as

    def leaky(npdt, v):
        if type(v) is K.Lit:
            return np.ones((), npdt) * v  # numpy takes the Lit as an operand: LiteralEscape
        return real(npdt, v)
    monkeypatch.setattr(common, "number_as", leaky)
    tw = Twins([T("x", [1.0, 2.0], requires_grad=True)])
    routes = [tw.run([op("div", "x", v, out="y", no_grad=True), op("del", "y")]) for v in [3.0, 3.0, 7.0, 7.0, 7.0]]
    assert routes[0] == E.Route("cold", "literal_escaped", "numpy took a float literal as an operand")
    assert pins(tw.cache) == [(0,)]
    assert [r.name for r in routes[1:]] == ["recorded", "recorded", "replayed", "replayed"]


# ----- every op sample with a float argument, both ways, its floats changed ----------------------------------
def _float_places(o: dict) -> list:
    return [("a", i) for i, v in enumerate(o["args"]) if v.__class__ is float] + \
           [("k", k) for k, v in o["kwargs"].items() if v.__class__ is float]


def _with(o: dict, places: list, f) -> dict:
    o = {**o, "args": list(o["args"]), "kwargs": dict(o["kwargs"])}
    for where, i in places:
        (o["args"] if where == "a" else o["kwargs"])[i] = f(o["args"][i] if where == "a" else o["kwargs"][i])
    return o


def _literal_cases():
    out = []
    for name, samples in SAMPLES.items():
        spec = E.OPS.get(name)
        if spec is None or spec.inplace:
            continue
        for i, s in enumerate(samples):
            ops = _program(name, s, _same)
            if ops is not None and _float_places(next(o for o in ops if o["op"] == name)):
                out.append(pytest.param(name, s, id=f"{name}-{i}"))
    return out


@pytest.mark.parametrize("grad", [True, False], ids=["backward", "no_grad"])
@pytest.mark.parametrize("name,sample", _literal_cases())
def test_every_op_sample_with_a_float_runs_as_it_runs_cold_whatever_its_floats(name, sample, grad):
    """The sample as a session list (its inputs set up once; the op and a sum, then a backward, zero_grad first;
    or the op under no_grad, an optimizer step's way), run with its floats, with other floats, and with its own
    again: each run the cold run's, bit for bit."""
    ops = _program(name, sample, _same)
    setup = [o for o in ops if o["op"] == "tensor"]
    leaves = [o["out"] for o in setup if o["kwargs"]["requires_grad"]]
    call = next(o for o in ops if o["op"] == name)
    outs = call["out"] if isinstance(call["out"], list) else [call["out"]]
    first = next(o for o in ops if o["op"] == "sum")["args"][0]
    places = _float_places(call)

    def body(c):
        if not grad:
            return [{**c, "no_grad": True}, op("sum", first, out="s"), op("del", *outs, "s")]
        head = [op("zero_grad", leaves)] if leaves else []
        tail = [op("sum", first, out="s")] + ([op("backward", "s")] if leaves else [])
        return head + [c] + tail + [op("del", *outs, "s")]
    tw = Twins(setup)
    other = _with(call, places, lambda v: v * 0.75 + 0.03125)
    for c in (call, other, call, other):
        tw.run(body(c))


def test_a_lifted_literal_inside_a_tuple_argument_is_replaced_and_pinned():
    """``kernel.unlit``: a Lit anywhere in a tuple or list argument (a shape, an index) is replaced by its value
    and pinned; a flat tuple of plain values comes back as it is (the same object)."""
    rec = K.Recorder()
    lit = K.Lit(2.5, 3, rec)
    flat = (1, 2, Ellipsis)
    assert K.unlit(flat) is flat and not rec.pins
    got = K.unlit((1, (lit, 4)))
    assert got == (1, (2.5, 4)) and type(got[1][0]) is float and rec.pins == {3}
    assert K.unlit([lit]) == [2.5] and K._static_ok((1, (2, None), slice(1, 2))) and not K._static_ok((1, [2]))
