"""The tape a plan replays (gradserve_server/engine/trace/tape.py ``Tape``, the executor plans and compose's fragments
share): constants folded when the plan is built, kernels called through their direct forms, intermediates written
into registers (buffers a replay reuses), copies left out. Each is only an optimisation: a replay gives the cold
run's bits and layouts (tests/engine/test_plan.py runs the op suite and the programs both ways); here, each
mechanism is shown to be used, to keep an intermediate's buffer while a view of it lives, to refuse a direct form
that does not give the kernel's bits, and to keep concurrent replays of one plan apart."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import gradserve_server.engine.kernel as K
import gradserve_server.engine.trace.plan as plan_module
import gradserve_server.engine.trace.tape as tape_module
from gradserve_server.engine.ops import backward as BW
from gradserve_server.engine.ops import shape as S
from gradserve_server.engine.program import State, run_program
from gradserve_server.engine.trace.cache import PlanCache
from gradserve_server.engine.trace.plan import Plan

from .test_plan import LIMITS, PROGRAMS, T, both_ways, cold, draws, observe, op, planned
from .test_plan import _tensor_view as _view


def _tape_plan(fn, inputs, interpreted=False):
    """The plan of ``fn(*inputs)`` (kcalls of kernels on arrays; its returned arrays are the result the
    caller sees), and the result's slots."""
    with K.recording() as rec:
        for a in inputs:
            rec.add_input(a)
        outs = fn(*inputs)
    assert rec.reason is None, rec.reason
    keep = {rec.slot_of(o) for o in outs}
    tape = tape_module.Tape(rec, keep, {})
    if interpreted:
        code, kernels, consts, steps = (), [], [], tape_module.interpreted(tape.steps)
    else:
        (code, kernels, consts), steps = tape_module.compile_tape(tape.steps), []
    plan = Plan(code, kernels, consts, steps, rec.n, tuple(rec.inputs), [], [], [], [], [], 0, regs=tape.regs,
                pool_cap=2)
    return plan, tape, [rec.slot_of(o) for o in outs]


def _bits(a):
    return a.dtype.str, a.shape, a.strides, a.tobytes()


@pytest.mark.parametrize("interpreted", [False, True])
def test_a_register_is_not_reused_while_a_view_of_its_array_lives(interpreted):
    def fn(x, y):
        a = K.kcall(np.multiply, x, y)         # an intermediate: a register
        v = K.kcall(S._view, a, (6,))      # a view of it, alive until the end
        b = K.kcall(np.multiply, x, x)         # same shape and dtype: may not take a's register while v lives
        w = K.kcall(S._view, b, (6,))
        return (K.kcall(np.add, w, v),)
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    plan, tape, (out,) = _tape_plan(fn, [x, y], interpreted)
    assert len(tape.regs) == 2
    for _ in range(3):
        x2, y2 = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
        buf = tape_module.replay(plan, [x2, y2], None)
        assert _bits(buf[out]) == _bits(fn(x2, y2)[0])


@pytest.mark.parametrize("interpreted", [False, True])
def test_registers_are_reused_once_their_arrays_die(interpreted):
    def fn(x):
        h = x
        for _ in range(6):
            h = K.kcall(np.sin, K.kcall(np.multiply, h, x))  # each result dies at the next step
        return (K.kcall(np.add, h, x),)
    x = np.arange(4, dtype=np.float64)
    plan, tape, (out,) = _tape_plan(fn, [x], interpreted)
    # a product writes over the sine it multiplies (an exact ufunc may); a sine goes to the other buffer
    assert len(tape.regs) == 2
    assert [st[6] for st in tape.steps[:4]] == [0, 1, 1, 0]
    for k in range(3):
        buf = tape_module.replay(plan, [x + k], None)
        assert _bits(buf[out]) == _bits(fn(x + k)[0])


def _wrong(a, b):
    return a + b


_wrong.direct = lambda a, b: (np.subtract, (a, b))  # a direct form that does not give the kernel's result


def test_a_direct_form_that_does_not_give_the_kernels_bits_is_not_used():
    def fn(x, y):
        return (K.kcall(_wrong, K.kcall(np.multiply, x, y), y),)
    x, y = np.ones(3), np.full(3, 2.0)
    plan, tape, (out,) = _tape_plan(fn, [x, y])
    assert [st[0] for st in tape.steps] == [np.multiply, _wrong]
    buf = tape_module.replay(plan, [x * 3, y], None)
    assert _bits(buf[out]) == _bits(fn(x * 3, y)[0])


def test_a_literal_and_its_cast_are_constants_of_the_plan_and_read_only():
    def fn(x):
        lit = K.kcall(K.literal, 1.01, None)            # float64 0-d
        c = K.kcall(K.astype, lit, np.dtype(np.float32))
        return (K.kcall(np.multiply, x, c),)
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    plan, tape, (out,) = _tape_plan(fn, [x])
    assert [st[0] for st in tape.steps] == [np.multiply]
    const = tape.steps[0][1][1]
    assert const.dtype == np.float32 and not const.flags.writeable
    buf = tape_module.replay(plan, [x * 2], None)
    assert _bits(buf[out]) == _bits(fn(x * 2)[0]) and buf[out].flags.writeable


def test_a_constant_that_reaches_the_caller_is_made_on_every_replay():
    def fn(x):
        one = K.kcall(K.ones, (3,), np.dtype(np.float32))
        return one, K.kcall(np.add, x, one)
    x = np.zeros(3, np.float32)
    plan, tape, (a, _) = _tape_plan(fn, [x])
    assert tape.steps[0][0] is K.ones
    b1, b2 = tape_module.replay(plan, [x], None), tape_module.replay(plan, [x], None)
    assert b1[a] is not b2[a] and b1[a].flags.writeable


def _fragment(fn, inputs):
    """``tape.fragment`` of ``fn(*inputs)`` (its returned arrays escape), and the slots returned."""
    with K.recording() as rec:
        for a in inputs:
            rec.add_input(a)
        outs = fn(*inputs)
    ret = [rec.slot_of(o) for o in outs]
    return tape_module.fragment(rec, ret), ret


def _repeats(x, y):
    a = K.kcall(np.multiply, x, y)
    b = K.kcall(np.multiply, x, y)   # the same call again: made once
    c = K.kcall(np.sin, a)
    return (K.kcall(np.add, c, K.kcall(np.sin, b)),)


def test_a_fragment_gets_the_optimisers_common_calls_and_folded_constants():
    x, y = np.linspace(-1, 1, 4), np.full(4, 3.0)
    (steps, nbytes, _, consts), ret = _fragment(_repeats, [x, y])
    assert [st[0] for st in steps] == [np.multiply, np.sin, np.add]
    assert nbytes == 3 * x.nbytes  # (the arrays its remaining steps make)
    f = tape_module.compile_fragment(steps, 2, ret, "repeats")
    for k in range(3):
        assert _bits(f(x + k, y)[0]) == _bits(_repeats(x + k, y)[0])

    def lit(x):
        c = K.kcall(K.astype, K.kcall(K.literal, 1.01, None), np.dtype(np.float32))
        return (K.kcall(np.multiply, x, c),)
    x32 = x.astype(np.float32)
    (steps, _, _, consts), ret = _fragment(lit, [x32])
    assert [st[0] for st in steps] == [np.multiply] and len(consts) == 2
    assert _bits(tape_module.compile_fragment(steps, 1, ret)(x32 * 2)[0]) == _bits(lit(x32 * 2)[0])


@pytest.mark.parametrize("fn", [
    lambda x: (K.kcall(np.sin, x),),
    lambda x: (K.kcall(np.sum, x),),  # (a 0-d result: converted)
    lambda x: (K.kcall(np.multiply, x, 2.5),),
    lambda x: K.kcall(np.divmod, x, 0.5),  # (several outputs)
    lambda x: (K.kcall(np.add, x, x),),
], ids=["unary", "zero_d", "literal", "multi", "same_input"])
def test_a_one_call_fragment_takes_the_short_way_to_the_optimisers_steps(fn):
    """A fragment of one call reading an input has nothing to fold or merge: ``fragment`` skips the optimiser,
    and gives what it would (``optimised``), bytes and sizes included."""
    x = np.linspace(-1, 1, 4)
    (steps, nbytes, maxsize, consts), ret = _fragment(fn, [x])
    assert len(steps) == 1 and not consts
    with K.recording() as rec:
        rec.add_input(x)
        outs = fn(x)
    full, consts = tape_module.optimised(rec, [rec.slot_of(o) for o in outs])
    assert [(*st, -1, ()) for st in full] == steps and not consts
    assert nbytes == sum(o.nbytes for o in outs) and maxsize == max(o.size for o in outs)


def test_a_call_whose_result_escapes_is_not_merged_nor_folded():
    def fn(x, y):
        one = K.kcall(K.ones, (4,), np.dtype(np.float64))
        return K.kcall(np.multiply, x, y), K.kcall(np.multiply, x, y), K.kcall(np.add, x, one), one
    (steps, _, _, consts), ret = _fragment(fn, [np.ones(4), np.full(4, 2.0)])
    assert [st[0] for st in steps] == [K.ones, np.multiply, np.multiply, np.add] and not consts
    a, b, c, one = tape_module.compile_fragment(steps, 2, ret)(np.ones(4), np.full(4, 2.0))
    assert a is not b and c.tolist() == [2.0] * 4 and one is not c


def test_a_long_fragment_is_interpreted_with_the_compiled_ones_results(monkeypatch):
    def fn(x):
        h = x
        for _ in range(6):
            h = K.kcall(np.add, K.kcall(np.sin, h), K.kcall(np.sum, h))  # (a 0-d sum: a numpy scalar made an array)
        return h, K.kcall(np.sum, h)
    x = np.linspace(0, 1, 5)
    (steps, _, _, _), ret = _fragment(fn, [x])
    compiled = tape_module.compile_fragment(steps, 1, ret, "long")
    assert compiled.__code__.co_filename.startswith("<gradserve fragment")
    monkeypatch.setattr(tape_module, "FRAGMENT_CODEGEN_MAX", len(steps) - 1)
    looped = tape_module.compile_fragment(steps, 1, ret, "long")
    assert looped.__class__ is tape_module._Interpreted  # (the loop; its steps where cache.footprint counts them)
    assert plan_module.footprint(looped) > 100 * len(steps)  # (a step's tuple alone: ~100 bytes)
    for k in range(2):
        want = fn(x + k)
        for got in (compiled(x + k), looped(x + k)):
            assert [_bits(g) for g in got] == [_bits(w) for w in want] and got[1].__class__ is np.ndarray


CHAIN = [T("x", None, requires_grad=True)] + [
    op("sin", "x", out="s"), op("mul", "s", 1.01, out="m"), op("add", "m", 0.1, out="a"), op("tanh", "a", out="h"),
    op("exp", "h", out="e"), op("sum", "e", out="total"), op("backward", "total")]


def _chain(rng, n=20_000):
    ops = [dict(o) for o in CHAIN]
    ops[0] = T("x", rng.standard_normal(n).astype(np.float32).tolist(), dtype="float32", requires_grad=True)
    return ops


def _recorded_chain(seed):
    """(cache, its plan of the chain, the rng) after one run of the chain both ways (the same observations)."""
    cache = PlanCache()
    rng = np.random.default_rng(seed)
    c, p, _ = both_ways(_chain(rng), cache)
    assert c == p
    plan = next(iter(cache._entries.values()))
    assert isinstance(plan, Plan) and plan.regs
    return cache, plan, rng


def test_the_chain_plan_folds_its_literals_and_writes_its_backward_into_registers():
    cache, plan, rng = _recorded_chain(1)
    assert K.literal not in plan.kernels and np.multiply in plan.kernels
    for _ in range(2):
        c, p, _ = both_ways(_chain(rng), cache)
        assert c == p
    assert cache.hits == 2 and len(plan.pool) == 1


@pytest.mark.parametrize("tape_mode", ["compiled", "interpreted"])
def test_one_plan_replayed_by_many_threads_at_once_gives_each_its_cold_result(tape_mode, monkeypatch):
    if tape_mode == "interpreted":
        monkeypatch.setattr(tape_module, "COMPILE_MAX_STEPS", 0)
    cache, plan, _ = _recorded_chain(2)
    programs = [[_chain(np.random.default_rng(100 + 10 * t + k)) for k in range(6)] for t in range(4)]
    expected = [[observe(cold, ops) for ops in progs] for progs in programs]
    got: list = [None] * len(programs)
    start = threading.Barrier(len(programs))

    def worker(t):
        start.wait()
        got[t] = [observe(planned(cache), ops) for ops in programs[t]]
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(len(programs))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert got == expected
    assert cache.hits == sum(len(p) for p in programs) and cache.fallbacks == 0
    assert len(plan.pool) <= max(plan.pool_cap, len(programs))


def test_the_op_suite_exercises_registers_direct_calls_and_constants():
    """The op samples' plans (tests/engine/test_plan.py replays them all both ways) use each mechanism, so the
    suite checks it on every op that meets it."""
    from .test_plan import recorded_samples
    regs = direct = folded = 0
    for name in ("add", "mul", "sub", "div", "matmul", "relu", "sin", "tanh", "sigmoid", "exp", "linear",
                 "cross_entropy", "embedding", "mse_loss", "outer", "pow"):
        for _, ops, cache in recorded_samples(name):
            plan = next(iter(cache._entries.values()), None)
            if isinstance(plan, Plan):
                regs += bool(plan.regs)
                direct += any(k.__class__ is np.ufunc for k in plan.kernels)
                folded += K.literal not in plan.kernels and any(
                    o.get("op") in ("mul", "add", "sub", "div", "pow") and any(isinstance(a, float) for a in o["args"])
                    for o in ops)
    assert regs >= 10 and direct >= 20 and folded >= 1, (regs, direct, folded)


# ----- a response of some names (/v1/eval's "return"): the other names' arrays are the plan's to reuse -------------
def _shown_run(cache, respond):
    def run(state, ops):
        return plan_module.run_planned(cache, state, ops, limits=LIMITS, respond=respond, extra=("json",))
    return run


def _expected_names(ops, respond):
    """What a run showing ``respond`` leaves: those names (``x`` of ``x.grad``), the ``out`` names of ``grad``
    ops and the names each autograd pass reached, in the order the full run leaves its names."""
    state = State()
    res = run_program(state, ops, limits=LIMITS, respond="all")
    keep = {n.partition(".")[0] for n in respond}
    for o in ops:
        if o["op"] == "grad":
            keep.update(o["out"] if isinstance(o["out"], list) else [o["out"]])
    keep.update(e.name for r in res.autograd for e in r.entries)
    return [n for n in state.tensors if n in keep]


@pytest.mark.parametrize("interpreted", [False, True])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_run_showing_some_names_keeps_those_and_the_reports_names_cold_and_replayed(name, interpreted, monkeypatch):
    if interpreted:
        monkeypatch.setattr(tape_module, "COMPILE_MAX_STEPS", 0)
    r = draws(11)
    ops = PROGRAMS[name](r)
    outs = [o["out"] for o in ops if isinstance(o.get("out"), str)]
    for respond in ([outs[-1]], [outs[0], f"{outs[0]}.grad"], [], ["nope"], outs[::2]):
        cache = PlanCache()
        for k in range(4):
            ops = PROGRAMS[name](r)
            c = observe(_shown_run(None, respond), ops)
            p = observe(_shown_run(cache, respond), ops)
            assert p == c and c[0] == "ok", (respond, k)
            assert [n for n, _ in c[1]] == _expected_names(ops, respond)
        assert cache.misses == 1 and cache.hits == 3, cache.stats()


@pytest.mark.parametrize("tape_mode", ["compiled", "interpreted"])
def test_the_chain_showing_its_loss_and_gradient_reuses_its_intermediates_and_never_a_result(tape_mode, monkeypatch):
    """Returning only the loss and x.grad, the chain's forward intermediates (named, but not shown) go into
    registers with its backward, tanh's backward included: a register is never what a result holds, so the
    results of earlier replays stay what their cold runs give however many replays follow."""
    if tape_mode == "interpreted":
        monkeypatch.setattr(tape_module, "COMPILE_MAX_STEPS", 0)
    respond = ["total", "x.grad"]
    cache = PlanCache()
    rng = np.random.default_rng(4)
    observe(_shown_run(cache, respond), _chain(rng))
    plan = next(iter(cache._entries.values()))
    kernels = plan.kernels if plan.code else [st[1] for chunk in plan.steps for st in chunk]
    assert isinstance(plan, Plan) and BW._tanh_backward_into in kernels
    everything = PlanCache()
    observe(planned(everything), _chain(np.random.default_rng(4)))
    shown_all = next(iter(everything._entries.values()))
    assert len(plan.regs) > len(shown_all.regs)  # (s, m, a, h: shown without "return", so kept apart there)
    runs = []
    for k in range(6):
        ops = _chain(np.random.default_rng(50 + k))
        state = State()
        res = _shown_run(cache, respond)(state, ops)
        runs.append((ops, state, res))
    assert cache.hits == 6
    for ops, state, res in runs:  # (read only now: after every later replay)
        c = observe(_shown_run(None, respond), ops)
        assert [(n, _view(t)) for n, t in state.tensors.items()] == c[1]
        assert [[(e.name, _view(e.contribution)[:3]) for e in r.entries] for r in res.autograd] == \
            [[(n, v) for n, v, _, _ in es] for _, _, es in c[4]]


@pytest.mark.parametrize("tape_mode", ["compiled", "interpreted"])
def test_relu_writes_into_a_register_by_keyword(tape_mode, monkeypatch):
    """relu's np.maximum (its hidden layer not shown) writes into a register passed as ``out=``: numpy deprecates
    a third positional argument for np.maximum, which would warn on every replay."""
    import warnings
    if tape_mode == "interpreted":
        monkeypatch.setattr(tape_module, "COMPILE_MAX_STEPS", 0)
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((32, 16)).astype(np.float32)
    ops = [T("x", x.tolist(), dtype="float32"), T("w", w.tolist(), dtype="float32", requires_grad=True),
           op("matmul", "x", "w", out="z"), op("relu", "z", out="h"), op("sum", "h", out="s"), op("backward", "s")]
    cache = PlanCache()
    observe(_shown_run(cache, ["s", "w.grad"]), ops)
    plan = next(iter(cache._entries.values()))
    if tape_mode == "interpreted":
        assert any(st[1] is np.maximum and st[4] >= 0 for chunk in plan.steps for st in chunk)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            assert observe(_shown_run(cache, ["s", "w.grad"]), ops) == observe(_shown_run(None, ["s", "w.grad"]), ops)
    assert cache.hits == 2 and cache.fallbacks == 0
