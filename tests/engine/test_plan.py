"""Plans (gradserve_server/engine/trace/plan.py): every program runs cold and through the plan cache (recorded, then
replayed on the same and on other input values), and everything a client can observe must be the same bit for bit:
values, gradients, grad_fn names, flags, versions, accumulation counts, the autograd report, warnings, errors and
their op index. The op suite is the per-op samples (tests/engine/samples.py), each made into an op list; then guards
(a value-dependent error on a replay falls back to the cold run), unplannable programs, and the cache's bounds."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

import gradserve_server.engine as E
import gradserve_server.engine.trace.key as keyer
import gradserve_server.engine.trace.plan as plan_module
import gradserve_server.engine.trace.tape as tape_module
from gradserve_server.engine.errors import EngineError
from gradserve_server.engine.program import State, run_program
from gradserve_server.engine.tensor import Tensor
from gradserve_server.engine.trace.cache import PlanCache, Unplannable
from gradserve_server.engine.trace.key import _plannable_op
from gradserve_server.engine.trace.plan import Plan, run_planned

from .samples import SAMPLES, _call

LIMITS = E.Limits()


def _tensor_view(t):
    if t is None:
        return None
    g = t._grad
    # (the layout too: strides, and whether a caller may write into it)
    return (t.data.dtype.str, t.data.shape, t.data.strides, t.data.flags.writeable, t.data.tobytes(),
            bool(t.requires_grad), t.grad_fn is None,
            None if t.grad_fn is None else t.grad_fn.name, bool(t.retains_grad), int(t.version),
            int(t.grad_accumulations), _tensor_view(g))


def observe(run, ops):
    """Everything a one-shot run shows (the namespace, the report, warnings) or its error."""
    state = State()
    try:
        res = run(state, ops)
    except EngineError as e:
        return ("error", type(e).__name__, e.code, e.message, e.op_index, e.op)
    return ("ok", [(n, _tensor_view(t)) for n, t in state.tensors.items()],
            [(o.index, o.op, o.bound) for o in res.ops], sorted(res.changed),
            [(r.op_index, r.op, [(e.name, _tensor_view(e.contribution)[:3], _tensor_view(e.grad),
                                  e.grad_accumulations) for e in r.entries]) for r in res.autograd],
            list(res.warnings), state.backward_passes)


def cold(state, ops):
    return run_program(state, ops, limits=LIMITS, respond="all")


def traced(cache, routes: list | None = None, **kw):
    """A one-shot run through the one dispatch (``engine.trace.dispatch``: replayed, recorded, composed, cold or fallen
    back), the route of each run appended to ``routes`` (that of a run that raised too: its error's ``route``)."""
    kw = {"limits": LIMITS, "respond": "all", "extra": ("json",), **kw}

    def run(state, ops):
        try:
            res, route = E.dispatch(cache, state, ops, **kw)
        except EngineError as e:
            route = e.route
            raise
        finally:
            if routes is not None:
                routes.append(route)
            assert route.name in E.ROUTES and route.reason in E.REASONS, route
        return res
    return run


def planned(cache, routes: list | None = None):
    return traced(cache, routes)


def both_ways(ops, cache=None, routes: list | None = None):
    """Cold and planned observations of ``ops`` (the route of the planned run appended to ``routes``); the
    cache is returned for its counters."""
    cache = cache if cache is not None else PlanCache()
    return observe(cold, ops), observe(planned(cache, routes), ops), cache


# ----- the op suite as op lists -------------------------------------------------------------------------
def _lit(v):
    return v.tolist() if isinstance(v, np.ndarray) else v


def _program(name, sample, values):
    """``name`` called on the sample's inputs as a one-shot op list: inputs as tensor ops (their data from
    ``values``), the op, then a backward of the sum of its first float output (and, for samples torch
    differentiates twice, a create_graph grad and a backward through it)."""
    ops, k = [], [0]

    def tensor(t):
        n = f"t{k[0]}"
        k[0] += 1
        ops.append({"op": "tensor", "out": n, "args": [_lit(values(t))],
                    "kwargs": {"dtype": t.dtype, "requires_grad": bool(t.requires_grad)}})
        return n

    def arg(v):
        if isinstance(v, Tensor):
            return tensor(v)
        if isinstance(v, list) and v and all(isinstance(x, Tensor) for x in v):
            return [tensor(x) for x in v]
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float, bool)) for x in v):
            return list(v)
        raise TypeError
    try:
        args = [arg(a) for a in sample.args]
        kwargs = {kk: arg(v) for kk, v in sample.kwargs.items()}
    except TypeError:
        return None
    try:
        result = _call(name, sample.args, sample.kwargs)
    except Exception:  # noqa: BLE001 - the program shows the error (both ways)
        result = None
    if isinstance(result, tuple):
        outs = [f"y{i}" for i in range(len(result))]
        first = next((o for o, r in zip(outs, result) if isinstance(r, Tensor) and r.data.dtype.kind == "f"), outs[0])
        ops.append({"op": name, "args": args, "kwargs": kwargs, "out": outs})
    else:
        first = "y"
        ops.append({"op": name, "args": args, "kwargs": kwargs, "out": "y"})
    ops.append({"op": "sum", "args": [first], "out": "s"})
    leaves = [o["out"] for o in ops if o["op"] == "tensor" and o["kwargs"]["requires_grad"]]
    if sample.gradgrad and leaves:
        ops.append({"op": "grad", "args": ["s", leaves], "kwargs": {"create_graph": True, "allow_unused": True,
                                                                    "retain_graph": True},
                    "out": [f"g{i}" for i in range(len(leaves))]})
    ops.append({"op": "backward", "args": ["s"]})
    return ops


def _same(t):
    return t.data


def _perturbed(t):
    d = t.data
    if d.dtype.kind != "f":
        return d
    rng = np.random.default_rng(d.size)
    return d * (1 + 0.01 * rng.standard_normal(d.shape)).astype(d.dtype)


def _cases():
    out = []
    for name, samples in SAMPLES.items():
        spec = E.OPS.get(name)
        if spec is None or spec.inplace:
            continue
        for i, s in enumerate(samples):
            if _program(name, s, _same) is not None:  # (a few samples pass slices or tuples: no JSON form)
                out.append(pytest.param(name, s, id=f"{name}-{i}"))
    return out


@pytest.fixture(params=["compiled", "interpreted"])
def tape_mode(request, monkeypatch):
    """Plans run as compiled code, or (long tapes) interpreted step by step."""
    if request.param == "interpreted":
        monkeypatch.setattr(tape_module, "COMPILE_MAX_STEPS", 0)
    return request.param


@pytest.mark.parametrize("name,sample", _cases())
def test_every_op_sample_runs_the_same_cold_and_replayed(name, sample, tape_mode):
    """The eager interpreter and the one dispatch agree bit for bit (results, reports, errors), and the
    dispatch says which way each run went, as its cache saw it."""
    ops = _program(name, sample, _same)
    cache = PlanCache()
    routes: list = []
    a_cold, a_rec, _ = both_ways(ops, cache, routes)
    assert a_rec == a_cold  # the recording run is the cold run
    other = _program(name, sample, _perturbed)
    b_cold, b_play, _ = both_ways(other, cache, routes)
    assert b_play == b_cold  # replayed on other values
    assert observe(planned(cache, routes), ops) == a_cold  # and again on the first ones
    entry = next(iter(cache._entries.values()), None)
    if a_cold[0] == "ok" and isinstance(entry, Plan):
        assert cache.hits >= 1
    first, *later = routes
    if isinstance(entry, Plan):
        assert first.name == "recorded"
        assert all(r.name in ("replayed", "fallback") for r in later), routes
        assert sum(r.name == "replayed" for r in later) == cache.hits
        assert sum(r.name == "fallback" for r in later) == cache.fallbacks
    elif isinstance(entry, Unplannable):  # (recorded, found unplannable: every run says why)
        assert all(r == E.Route("cold", entry.code, entry.reason) for r in routes[1:]), routes
        assert first.name == "cold" and first.reason == entry.code
    elif a_cold[0] == "error":  # (a run that raises records nothing: each run records again, or is cold)
        assert all(r.name in ("recorded", "cold") for r in routes), routes
    else:  # (never keyed: an op no plan replays)
        assert all(r.name == "cold" for r in routes), routes


PLANNED_OPS = ["add", "sub", "mul", "pow", "neg", "exp", "log", "sin", "cos", "tanh", "sigmoid", "relu", "softplus",
               "sum", "mean", "matmul", "mm", "addmm", "reshape", "view", "t", "transpose", "expand", "cat", "stack",
               "narrow", "select", "chunk", "log_softmax", "softmax", "linear", "mse_loss", "embedding",
               "cross_entropy",
               "nll_loss", "dot", "mv", "bmm", "squeeze", "unsqueeze", "split", "to", "clone", "contiguous", "getitem",
               "sqrt", "expm1", "log1p", "reciprocal", "tan", "sinh", "cosh", "outer"]


@pytest.mark.parametrize("name", PLANNED_OPS)
def test_the_benchmark_ops_are_replayed_not_just_run_cold(name):
    """The ops the benchmarks need compile into plans (a sample of each is replayed, not run cold)."""
    replayed = 0
    for sample, _, cache in recorded_samples(name):
        observe(planned(cache), _program(name, sample, _perturbed))
        replayed += cache.hits
    assert replayed >= 1


def recorded_samples(name):
    """(sample, its op list, a cache that ran it once) for each sample of ``name`` that makes an op list."""
    for sample in SAMPLES[name]:
        ops = _program(name, sample, _same)
        if ops is None:
            continue
        cache = PlanCache()
        observe(planned(cache), ops)
        yield sample, ops, cache


# ----- programs ----------------------------------------------------------------------------------------
def T(name, data, **kw):
    return {"op": "tensor", "out": name, "args": [data], "kwargs": kw}


def op(name, *args, out=None, **kwargs):
    return {"op": name, "args": list(args), "kwargs": kwargs, "out": out}


def mlp(x, w, b, target):
    return [T("x", x), T("w", w, requires_grad=True), T("b", b, requires_grad=True), T("y", target),
            op("matmul", "x", "w", out="z"), op("add", "z", "b", out="a"), op("relu", "a", out="h"),
            op("cross_entropy", "h", "y", out="loss"), op("backward", "loss")]


def draws(seed: int):
    """Float32-exact values in [-2, 2), one per call: the numbers the ``PROGRAMS`` lists are written with."""
    rng = np.random.default_rng(seed)
    return lambda: float(np.float32(rng.uniform(-2, 2)))


PROGRAMS = {
    "scalar": lambda r: [T("w", r(), requires_grad=True), T("x", r(), requires_grad=True),
                         T("b", r(), requires_grad=True), op("mul", "w", "x", out="t"), op("add", "t", "b", out="y"),
                         op("backward", "y")],
    "mlp": lambda r: mlp([[r(), r(), r()], [r(), r(), r()]], [[r(), r()], [r(), r()], [r(), r()]], [r(), r()],
                         [1, 0]),
    "hvp": lambda r: [T("x", [[r(), r()], [r(), r()]]), T("w", [[r()], [r()]], requires_grad=True),
                      op("matmul", "x", "w", out="a"), op("tanh", "a", out="h"), op("pow", "h", 2, out="h2"),
                      op("mean", "h2", out="loss"), op("grad", "loss", ["w"], create_graph=True, out=["g"]),
                      T("v", [[1.0], [0.5]]), op("mul", "g", "v", out="p"), op("sum", "p", out="s"),
                      op("grad", "s", ["w"], out=["hv"])],
    "accumulate": lambda r: [T("x", [r(), r()], requires_grad=True), op("exp", "x", out="e"),
                             op("sum", "e", out="s"), op("backward", "s", retain_graph=True), op("backward", "s"),
                             op("bind", "x.grad", out="gx")],
    "retain_and_views": lambda r: [T("x", [[r(), r(), r()], [r(), r(), r()]], requires_grad=True),
                                   op("t", "x", out="xt"), op("retain_grad", "xt"),
                                   op("reshape", "xt", -1, out="f"), op("chunk", "f", 2, 0, out=["c0", "c1"]),
                                   op("mul", "c0", "c1", out="m"), op("sigmoid", "m", out="s"),
                                   op("sum", "s", out="tot"), op("backward", "tot"), op("del", "f")],
    "mixed_dtypes": lambda r: [T("x", [r(), r()], dtype="float64", requires_grad=True), T("k", [2, 3]),
                               op("mul", "x", "k", out="y"), op("add", "y", 0.5, out="z"),
                               op("sum", "z", out="s"), op("backward", "s")],
    "no_grad_flag": lambda r: [T("x", [r(), r()], requires_grad=True),
                               {"op": "mul", "args": ["x", 2.0], "out": "y", "no_grad": True},
                               op("sum", "y", out="s")],
    "embedding": lambda r: [T("w", [[r(), r()], [r(), r()], [r(), r()]], requires_grad=True), T("i", [2, 0, 2]),
                            op("embedding", "i", "w", out="e"), op("sum", "e", out="s"), op("backward", "s")],
    # the benchmark's scalar graph in small: stack's and sum's and mean's VJPs, gradients of one input summed
    # (m0, and the leaf p0 used twice)
    "scalar_graph": lambda r: [T("p0", r(), requires_grad=True), T("p1", r(), requires_grad=True),
                               T("p2", r(), requires_grad=True), op("softplus", "p0", out="s0"),
                               op("mul", "s0", 0.5, out="m0"), op("softplus", "p1", out="s1"),
                               op("mul", "s1", 0.5, out="m1"), op("mul", "p2", "p0", out="m2"),
                               op("stack", ["m0", "m1", "m2"], out="st"), op("softmax", "st", 0, out="sm"),
                               op("mul", "m0", 1.0, out="k"), op("mul", "sm", "k", out="q"), op("sum", "q", out="o"),
                               op("mean", "st", out="mu"), op("add", "o", "mu", out="tot"), op("backward", "tot")],
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_programs_replay_bit_for_bit_on_new_values(name, tape_mode):
    r = draws(7)
    cache = PlanCache()
    for _ in range(4):
        ops = PROGRAMS[name](r)
        c, p, _ = both_ways(ops, cache)
        assert p == c and c[0] == "ok"
    assert cache.misses == 1 and cache.hits == 3, cache.stats()


def test_an_index_out_of_bounds_on_a_replay_gives_the_cold_error_with_its_op_index(tape_mode):
    cache = PlanCache()
    good = PROGRAMS["embedding"](lambda: 0.5)
    c, p, _ = both_ways(good, cache)
    assert c == p and cache.misses == 1
    bad = [dict(o) for o in good]
    bad[1] = T("i", [2, 7, 0])  # same shapes and dtypes: the plan's key matches, the kernel's guard fires
    c, p, _ = both_ways(bad, cache)
    assert c[0] == "error" and c[1:] == p[1:]
    assert c[3] == "index out of range in self" and c[4] == 2
    assert cache.fallbacks == 1 and cache.hits == 0


def test_a_target_out_of_range_on_a_replay_falls_back_to_the_cold_error():
    cache = PlanCache()
    w = [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]
    good = mlp([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], w, [0.0, 0.0], [1, 0])
    assert both_ways(good, cache)[:2] == both_ways(good, PlanCache())[:2]
    bad = mlp([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], w, [0.0, 0.0], [1, 5])
    c, p, _ = both_ways(bad, cache)
    assert c == p and c[0] == "error" and c[3] == "Target 5 is out of bounds." and c[4] == 7
    assert cache.fallbacks == 1


def test_programs_with_unplannable_ops_stay_cold_and_correct():
    rng = np.random.default_rng(3)
    for ops in ([T("x", [1.0, -2.0], requires_grad=True), op("abs", "x", out="y"),   # no kernel (yet)
                 op("sum", "y", out="s"), op("backward", "s")],
                [T("x", [[1.0, 2.0], [3.0, 4.0]], requires_grad=True), T("i", [1, 0]),
                 op("getitem", "x", "i", out="y"), op("sum", "y", out="s"), op("backward", "s")]):
        cache = PlanCache()
        for _ in range(3):
            c, p, _ = both_ways(ops, cache)
            assert c == p and c[0] == "ok"
        assert cache.hits == 0 and cache.unplannable >= 2, cache.stats()
        ops = [dict(o) for o in ops]
        ops[0] = T("x", (np.array(ops[0]["args"][0]) + rng.standard_normal()).tolist(), requires_grad=True)


def test_an_in_place_op_through_a_kernel_replays_bit_for_bit():
    cache = PlanCache()
    for v in (1.0, 2.0, 3.0, 4.0):
        ops = [T("x", [1.0, v], requires_grad=True), op("clone", "x", out="y"), op("add_", "y", 1.0),
               op("mul_", "y", "x"), op("sum", "y", out="s"), op("backward", "s")]
        c, p, _ = both_ways(ops, cache)
        assert c == p and c[0] == "ok"
    assert cache.hits == 3 and cache.unplannable == 0, cache.stats()


def test_a_warning_makes_a_program_unplannable():
    ops = [T("x", [1.0, 2.0], requires_grad=True), op("mul", "x", 2.0, out="y"), op("sum", "y", out="s"),
           op("backward", "s"), op("bind", "y.grad", out="g")]  # reading a non-leaf's .grad warns
    cache = PlanCache()
    for _ in range(2):
        c, p, _ = both_ways(ops, cache)
        assert c == p and c[-2]
    assert cache.hits == 0
    assert isinstance(next(iter(cache._entries.values())), Unplannable)


def test_errors_are_never_cached_and_stay_exact():
    ops = [T("x", [1.0, 2.0], requires_grad=True), op("mul", "x", "nope", out="y")]
    cache = PlanCache()
    for _ in range(2):
        c, p, _ = both_ways(ops, cache)
        assert c == p and c[0] == "error" and c[4] == 1
    assert len(cache) == 0


def test_a_different_structure_is_a_different_plan():
    cache = PlanCache()
    for shape_ops in ([T("x", [1.0, 2.0], requires_grad=True)], [T("x", [[1.0, 2.0]], requires_grad=True)],
                      [T("x", [1.0, 2.0])], [T("x", [1, 2])], [T("x", [1.0, 2.0], dtype="float64")]):
        ops = shape_ops + [op("mul", "x", 3, out="y"), op("sum", "y", out="s")]
        c, p, _ = both_ways(ops, cache)
        assert c == p
    assert cache.misses == 5 and cache.hits == 0 and len(cache) == 5


def test_the_cache_is_bounded_in_entries_and_bytes():
    cache = PlanCache(max_entries=3)
    for k in range(5):
        both_ways([T("x", [1.0] * (k + 1), requires_grad=True), op("sum", "x", out="s"), op("backward", "s")],
                  cache)
    assert len(cache) == 3 and cache.evictions == 2
    # the oldest went first: the first program is recorded again, the last is replayed
    both_ways([T("x", [1.0] * 5, requires_grad=True), op("sum", "x", out="s"), op("backward", "s")], cache)
    assert cache.hits == 1
    both_ways([T("x", [1.0], requires_grad=True), op("sum", "x", out="s"), op("backward", "s")], cache)
    assert cache.misses == 6
    small = PlanCache(max_bytes=20_000)  # (a plan of these holds about 7 KB, measured)
    for k in range(4):
        both_ways([T("x", [1.0] * (k + 1), requires_grad=True), op("exp", "x", out="e"), op("sum", "e", out="s"),
                   op("backward", "s")], small)
    assert 0 < small.bytes <= 20_000 and small.evictions >= 1 and len(small) < 4
    tiny = PlanCache(max_bytes=4000)  # a plan that cannot fit is not kept; the list is marked to run cold
    for _ in range(2):
        both_ways([T("x", [1.0, 2.0], requires_grad=True), op("exp", "x", out="e"), op("sum", "e", out="s"),
                   op("backward", "s")], tiny)
    assert tiny.hits == 0 and tiny.misses == 1 and tiny.unplannable == 1
    assert isinstance(next(iter(tiny._entries.values())), Unplannable)
    off = PlanCache(max_entries=0)
    both_ways(PROGRAMS["scalar"](lambda: 1.0), off)
    assert len(off) == 0


def test_preset_inputs_get_their_gradients_on_a_replay():
    """The benchmark's form (engine API): named leaf tensors given in the state are the plan's inputs."""
    w = E.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    x = E.tensor([[1.0, 2.0]])
    ops = [op("matmul", "x", "w", out="y"), op("tanh", "y", out="h"), op("sum", "h", out="s"), op("backward", "s")]
    cache = PlanCache()
    grads = []
    for _ in range(3):
        w.grad = None
        state = State()
        state.tensors = {"w": w, "x": x}
        run_planned(cache, state, ops, limits=LIMITS)
        grads.append(w.grad.data.copy())
        assert state.tensors["w"] is w and state.tensors["h"].grad_fn.name == "TanhBackward0"
    w.grad = None
    state = State()
    state.tensors = {"w": w, "x": x}
    run_program(state, ops, limits=LIMITS)
    assert cache.hits == 2 and all(g.tobytes() == w.grad.data.tobytes() for g in grads)


def _perturb_literal(v, rng):
    if isinstance(v, list):
        return [_perturb_literal(x, rng) for x in v]
    if isinstance(v, float):
        return v * (1 + 0.01 * rng.standard_normal())
    return v


def test_fuzz_programs_of_plannable_ops_replay_as_they_run_cold(tape_mode):
    """The differential fuzzer's programs (tests/fuzz/generator.py), their plannable ops kept: recorded, then
    replayed on the same and on perturbed tensor data, each compared with a cold run."""
    pytest.importorskip("torch", reason="the fuzzer's generator builds its programs by running them in torch")
    from tests.fuzz.generator import generate
    rng = np.random.default_rng(5)
    replays = 0
    for seed in range(150):
        program = [o for o in generate(seed)[0] if _plannable_op(o)]
        cache = PlanCache()
        for ops in (program, program, [
                {**o, "args": [_perturb_literal(o["args"][0], rng), *o["args"][1:]]} if o["op"] == "tensor" else o
                for o in program]):
            c, p, _ = both_ways(ops, cache)
            assert p == c, seed
        replays += cache.hits
    assert replays >= 40


# ----- the per-request costs: input ops made directly, a lazy namespace and result -----------------------------
def _input_cases():
    f32max = float(np.finfo(np.float32).max)
    datas = [3.0, -0.0, 0.1, 1e-45, 1e-40, 3.3999e38, 3.4e38, f32max, 3.5e38, 1e300, float("nan"), float("inf"),
             -float("inf"), 0, -7, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, True, False,
             [1.0, 2.5], [[1, 2], [3, 4]], [True, False], [1, 2.5], [], [[]], [1e39, 0.5], ["NaN", 1.0], [[1.0], 2.0],
             np.array(2.5, np.float32), np.array([1.5, -2.0], np.float64), np.arange(6, dtype=np.int64).reshape(2, 3),
             np.array([True, False]), np.arange(4, dtype=np.int32), np.array([1.0, 2.0], np.float16),
             np.arange(8.0, dtype=np.float32)[::2], np.asfortranarray(np.ones((2, 3), np.float32)),
             np.array([1.0, 2.0], ">f4"), np.array([1e39, 1.0]), "x", None, {"a": 1}]
    ro = np.array([1.0, 2.0], np.float32)
    ro.flags.writeable = False
    datas.append(ro)
    kwargs = [{}, {"requires_grad": True}, {"requires_grad": False}, {"dtype": None}, {"requires_grad": 1},
              {"dtype": "float32"}, {"dtype": "torch.float64", "requires_grad": True}, {"dtype": "int64"},
              {"dtype": "long", "requires_grad": True}, {"dtype": "bool"}, {"dtype": "float128"}, {"device": "cpu"}]
    return [(d, k) for d in datas for k in kwargs]


def _array_facts(a):
    return (a.dtype.str, a.shape, a.strides, a.flags.c_contiguous, a.flags.writeable, a.tobytes())


def test_input_tensor_ops_give_the_arrays_the_op_gives_or_leave_the_run_cold():
    """``_key`` makes the inputs of tensor ops itself (a Python number or an array of a kept dtype by
    as_array's steps, lists through as_array): each array is the one the op makes, bit for bit and in layout;
    an op the program refuses gives no key (the cold run reports it)."""
    checked = 0
    for data, kwargs in _input_cases():
        ops = [{"op": "tensor", "args": [data], "kwargs": dict(kwargs), "out": "x"}]
        made = keyer._key(State(), ops, ())
        state = State()
        try:
            run_program(state, [{"op": "tensor", "args": [data], "kwargs": dict(kwargs), "out": "x"}])
        except EngineError:
            assert made is None, (data, kwargs)
            continue
        if made is None:
            continue
        (text, metas, _), inputs = made
        t = state.tensors["x"]
        assert _array_facts(inputs[0]) == _array_facts(t.data), (data, kwargs)
        assert inputs[0] is not data
        assert metas == ((t.data.shape, t.data.dtype.str, t._requires_grad),)
        checked += 1
    assert checked > 150


def test_a_float_input_casts_to_float32_as_the_op_casts_it():
    """Python floats (the common eval input) around float32's rounding points and range, one op each."""
    rng = np.random.default_rng(11)
    f = (rng.standard_normal(100) * 10.0 ** rng.integers(-38, 38, 100)).astype(np.float32)
    ties = (f.astype(np.float64) + np.nextafter(f, np.float32(np.inf)).astype(np.float64)) / 2  # exact halfway
    vals = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-45, 38, 200), ties, np.nextafter(ties, 0),
                           [2.0**-149 * 0.5, 2.0**-149 * 1.5, 3.4028235e38, -3.3e38]])
    ops = [T(f"x{i}", float(v)) for i, v in enumerate(vals)]
    ops += [T("a", np.arange(3.0, dtype=np.float32), requires_grad=True), T("i", np.arange(3)),
            T("d", 0.5, dtype="float64", requires_grad=True), T("k", 3), T("f", True)]
    (_, metas, _), inputs = keyer._key(State(), ops, ())
    with pytest.MonkeyPatch.context() as mp:  # (the common forms never take the general way)
        mp.setattr(keyer, "_run_inputs", None)
        assert keyer._key(State(), ops[-5:] + [T("s", 2.5, requires_grad=True)], ()) is not None
    state = State()
    run_program(state, ops)
    assert [a.tobytes() for a in inputs] == [t.data.tobytes() for t in state.tensors.values()]
    assert all(m == ((), "<f4", False) for m in metas[:len(vals)])
    assert metas[len(vals):] == (((3,), "<f4", True), ((3,), "<i8", False), ((), "<f8", True), ((), "<i8", False),
                                 ((), "|b1", False))


def _replayed_state(ops, cache=None):
    cache = cache if cache is not None else PlanCache()
    run = planned(cache)
    run(State(), ops)  # records
    state = State()
    res = run(state, ops)
    assert cache.hits >= 1
    return state, res


def test_a_replayed_namespace_is_made_on_first_read_and_keeps_what_it_made():
    ops = PROGRAMS["retain_and_views"](lambda: 0.75)
    cold_state = State()
    cold(cold_state, ops)
    state, res = _replayed_state(ops)
    ns = state.tensors
    assert isinstance(ns, plan_module._Namespace) and not ns._built  # nothing made yet
    assert list(ns) == list(cold_state.tensors) and len(ns) == len(cold_state.tensors)
    assert "m" in ns and "nope" not in ns and ns.get("nope") is None and ns.get("nope", 5) == 5
    m = ns["m"]
    assert ns["m"] is m and ns.get("m") is m and state.resolve("m") is m
    assert list(ns._built) == ["m"]  # a name not read is never made
    assert _tensor_view(m) == _tensor_view(cold_state.tensors["m"])
    assert _tensor_view(state.resolve("x.grad")) == _tensor_view(cold_state.resolve("x.grad"))
    assert state.resolve("x.grad") is ns["x"].grad
    with pytest.raises(EngineError):
        state.resolve("nope")
    assert [(n, _tensor_view(t)) for n, t in ns.items()] == \
        [(n, _tensor_view(t)) for n, t in cold_state.tensors.items()]
    assert all(ns[n] is t for n, t in ns.items())


def test_a_replayed_namespace_changes_as_a_dict_does():
    ops = PROGRAMS["scalar"](lambda: 1.5)
    cold_state = State()
    cold(cold_state, ops)
    state, _ = _replayed_state(ops)
    y = state.tensors["y"]
    for s in (state, cold_state):
        s.tensors["q"] = s.tensors["x"]
        del s.tensors["b"]
        s.tensors["t"] = s.tensors["w"]
    assert list(state.tensors) == list(cold_state.tensors) == ["w", "x", "t", "y", "q"]
    assert [(n, _tensor_view(t)) for n, t in state.tensors.items()] == \
        [(n, _tensor_view(t)) for n, t in cold_state.tensors.items()]
    assert state.tensors["y"] is y and state.tensors["q"] is state.tensors["x"]
    state2, _ = _replayed_state(ops)
    state2.tensors["extra"] = state2.tensors["w"]
    assert list(state2.tensors)[-1] == "extra" and dict(state2.tensors) == state2.tensors.copy()
    assert state2.tensors.pop("extra") is state2.tensors["w"] and "extra" not in state2.tensors


def test_a_replayed_result_makes_its_outcomes_on_first_access_and_each_replay_its_own():
    ops = PROGRAMS["hvp"](lambda: 0.5)
    cache = PlanCache()
    state, res = _replayed_state(ops, cache)
    assert res._ops is None and res._autograd is None and res._changed is None
    cold_res = cold(State(), ops)
    assert [(o.index, o.op, o.bound) for o in res.ops] == [(o.index, o.op, o.bound) for o in cold_res.ops]
    assert res.ops is res.ops and res.autograd is res.autograd and sorted(res.changed) == sorted(cold_res.changed)
    res.ops[0].bound.append("changed by the caller")
    res.changed.append("changed by the caller")
    res.autograd[0].entries.clear()
    again = planned(cache)(State(), ops)
    assert [(o.index, o.op, o.bound) for o in again.ops] == [(o.index, o.op, o.bound) for o in cold_res.ops]
    assert sorted(again.changed) == sorted(cold_res.changed) and again.autograd[0].entries
    res.ops = []
    assert res.ops == []


def test_a_replayed_tensor_has_every_slot_a_tensor_has():
    """``_tensor`` sets Tensor's slots itself: a slot added to Tensor must be set there too."""
    ops = PROGRAMS["accumulate"](lambda: 0.5)
    state, _ = _replayed_state(ops)
    made = [state.tensors[n] for n in state.tensors]
    made += [t._grad for t in made if t._grad is not None]
    ref = Tensor(np.zeros(2, np.float32))
    slots = [s for s in Tensor.__slots__ if s != "__weakref__"]
    for t in made:
        for s in slots:
            getattr(t, s)  # (AttributeError: a slot _tensor does not set)
        assert t.data.__class__ is np.ndarray
        for s in ("output_nr", "_base", "_accumulator", "_wrapped", "_fw_grad", "_creation", "_attr_version"):
            assert getattr(t, s) == getattr(ref, s), s


def test_grads_of_grads_replay_as_they_run_cold(tape_mode):
    """A create_graph gradient that retains its own gradient (the gradient of a gradient), in a namespace
    built lazily on a replay."""
    def program(r):
        return [T("x", [r(), r()], requires_grad=True), op("pow", "x", 3, out="y"), op("sum", "y", out="s"),
                op("grad", "s", ["x"], create_graph=True, out=["g"]), op("retain_grad", "g"),
                op("mul", "g", "g", out="gg"), op("sum", "gg", out="s2"), op("backward", "s2")]
    cache = PlanCache()
    rng = np.random.default_rng(2)
    for _ in range(3):
        ops = program(lambda: float(np.float32(rng.uniform(-2, 2))))
        c, p, _ = both_ways(ops, cache)
        assert p == c and c[0] == "ok"
    assert cache.hits == 2
    cold_state = State()
    cold(cold_state, ops)
    state, _ = _replayed_state(ops, cache)
    g = state.resolve("g")
    assert g.retains_grad and g.grad is state.resolve("g").grad
    assert _tensor_view(g.grad) == _tensor_view(cold_state.resolve("g").grad)
    assert _tensor_view(state.resolve("x.grad")) == _tensor_view(cold_state.resolve("x.grad"))
    assert list(state.tensors._built) == ["g", "x"]


def test_kernels_that_branch_on_values_replay_each_branch_as_it_runs_cold(tape_mode):
    """Kernels whose path depends on the values (softplus of one value on either side of its threshold, its
    backward with a gradient too large for the short path, an inner size of 1 in mm with signed zeros and
    infinities) replay, on any values, exactly what the cold run computes: a plan recorded on one branch
    replays the others."""
    inf, nan = float("inf"), float("nan")

    def softplus(x, k):
        return [T("x", x, requires_grad=True), T("k", k), op("softplus", "x", out="s"), op("mul", "s", "k", out="y"),
                op("backward", "y")]

    def outer(a, b):
        return [T("a", a, requires_grad=True), T("b", b, requires_grad=True), op("mm", "a", "b", out="p"),
                op("sum", "p", out="s"), op("backward", "s")]
    for dtype in ("float32", "float64"):
        cache = PlanCache()
        for x in (0.5, 25.0, 20.0, 19.99, -30.0, -1e30, inf, -inf, nan, -0.0):
            for k in (2.0, 3e38, -inf, nan, 1e-45):
                ops = softplus(x, k)
                for t in ops[:2]:
                    t["kwargs"]["dtype"] = dtype
                c, p, _ = both_ways(ops, cache)
                assert p == c and c[0] == "ok"
        assert cache.misses == 1 and cache.hits == 49, cache.stats()
    cache = PlanCache()  # (64, 1) @ (1, 64): large enough for the elementwise kernel
    rng = np.random.default_rng(3)
    for special in ([1.0, -2.0, 0.0], [-0.0, inf, nan], [1e30, -1e-30, 3.0]):
        col = [[v] for v in special + rng.standard_normal(61).tolist()]
        row = [rng.permutation(special + [-0.0] + rng.standard_normal(60).tolist()).tolist()]
        c, p, _ = both_ways(outer(col, row), cache)
        assert p == c and c[0] == "ok"
    assert cache.hits == 2, cache.stats()


def test_a_cache_that_records_at_the_second_sighting_runs_the_first_cold_and_unrecorded():
    """``PlanCache(record_after=2)``: the first run of a structure is the cold run itself (nothing recorded,
    counted as deferred), the second records, the third replays; every result the cold run's."""
    ops = [T("x", [1.0, -2.0, 3.0], requires_grad=True), op("tanh", "x", out="y"), op("sum", "y", out="s"),
           op("backward", "s")]
    cache = PlanCache(record_after=2)
    seen = []
    for _ in range(4):
        c, p, _ = both_ways(ops, cache)
        assert p == c and c[0] == "ok"
        seen.append((cache.deferred, cache.misses, cache.hits))
    assert seen == [(1, 0, 0), (1, 1, 0), (1, 1, 1), (1, 1, 2)]
    assert len(cache) == 1  # (the sighting's marker replaced by the plan)


# ----- inputs handed over (engine.Owned): kept by a one-shot replay instead of copied, where nothing can tell ----
def _owned_copy(data):
    """A fresh array of the data's own (owning its memory), in the data's layout, or the data itself."""
    if not isinstance(data, np.ndarray):
        return data
    a = np.empty_like(data, order="K")
    a[...] = data
    a.flags.writeable = data.flags.writeable
    return a


def test_owned_input_arrays_are_kept_only_when_the_copy_would_be_them():
    """``_key`` of a one-shot run keeps an ``Owned`` array (no copy) exactly when the op's copy would have its
    dtype, layout and flags (C-contiguous, writable, owning its memory, a kept native dtype the op asks for);
    otherwise it makes what the op makes, as for a plain array. A run of the op itself always copies."""
    kept = copied = 0
    for data, kwargs in _input_cases():
        arr = _owned_copy(data)
        owned = E.Owned(arr)
        made = keyer._key(State(), [{"op": "tensor", "args": [owned], "kwargs": dict(kwargs), "out": "x"}],
                                (), adopt=True)
        plain = keyer._key(State(), [{"op": "tensor", "args": [arr], "kwargs": dict(kwargs), "out": "x"}], ())
        state = State()
        try:
            run_program(state, [{"op": "tensor", "args": [E.Owned(arr)], "kwargs": dict(kwargs), "out": "x"}])
        except EngineError as e:
            with pytest.raises(EngineError) as plain_error:
                run_program(State(), [{"op": "tensor", "args": [arr], "kwargs": dict(kwargs), "out": "x"}])
            assert (e.code, e.message) == (plain_error.value.code, plain_error.value.message)
            assert made is None and plain is None, (data, kwargs)
            continue
        t = state.tensors["x"]
        assert t.data is not arr  # the cold op copies, as for any array
        if made is None:
            assert plain is None
            continue
        (_, metas, _), inputs = made
        assert metas == plain[0][1] == ((t.data.shape, t.data.dtype.str, t._requires_grad),)
        assert _array_facts(inputs[0]) == _array_facts(t.data), (data, kwargs)
        if inputs[0] is arr:
            kept += 1
            assert isinstance(data, np.ndarray) and arr.base is None and arr.flags.c_contiguous
            assert arr.flags.writeable and owned.taken
        else:
            copied += 1
            assert not owned.taken
    assert kept >= 20 and copied >= 100


def test_an_owned_array_is_kept_once_and_only_by_a_one_shot_run():
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3).copy()
    owned = E.Owned(a)
    ops = [T("x", owned, requires_grad=True), T("y", owned)]
    (_, _, _), inputs = keyer._key(State(), ops, (), adopt=True)
    assert inputs[0] is a and inputs[1] is not a and _array_facts(inputs[1]) == _array_facts(a)
    b = np.ones(3, np.float32)
    (_, _, _), inputs = keyer._key(State(), [T("x", E.Owned(b))], ())  # (a session's key: adopt=False)
    assert inputs[0] is not b
    # a plain array is the caller's: a tensor op over it copies, cold and replayed
    cache = PlanCache()
    for _ in range(3):
        x = np.ones((2, 3), np.float32)
        state = State()
        planned(cache)(state, [T("x", x, requires_grad=True), op("mul", "x", 2.0, out="y"), op("sum", "y", out="s"),
                               op("backward", "s")])
        assert state.tensors["x"].data is not x and not np.shares_memory(state.tensors["x"].data, x)
    assert cache.hits == 2


def test_a_cold_run_never_writes_into_an_owned_array():
    """A run of the op itself copies the array (an in-place op then changes the copy): a list run cold (a
    session, a loop, a list a plan does not cover) behaves as torch.tensor over it."""
    a = np.arange(3.0, dtype=np.float32)
    ops = [T("x", E.Owned(a)), op("add_", "x", 1.0), op("mul", "x", 2.0, out="y")]
    cache = PlanCache()
    for _ in range(2):
        state = State()
        planned(cache)(state, [dict(o) for o in ops])
        assert state.tensors["x"].data.tolist() == [1.0, 2.0, 3.0]
    assert a.tolist() == [0.0, 1.0, 2.0]
    state = State()
    run_program(state, [dict(o) for o in ops], repeat=3)
    assert state.tensors["y"].data.tolist() == [2.0, 4.0, 6.0] and a.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("name", ["mlp", "scalar", "hvp", "embedding", "mixed_dtypes"])
def test_owned_inputs_replay_bit_for_bit_and_are_kept(name, tape_mode):
    """The programs with their inputs handed over as the service hands decoded payloads: cold and planned runs
    observe the same (values, layouts, flags); the replays keep the arrays (no copy), the cold runs copy."""
    r = draws(8)
    cache = PlanCache()
    for i in range(4):
        lists = PROGRAMS[name](r)
        arrays = {}
        for o in lists:
            if o["op"] == "tensor":
                dt = o["kwargs"].get("dtype")
                a = np.array(o["args"][0], dtype=None if dt else (np.float32 if isinstance(
                    np.asarray(o["args"][0]).flat[0].item(), float) else None))
                arrays[o["out"]] = a
        def handed(lists=lists, arrays=arrays):
            return [{**o, "args": [E.Owned(arrays[o["out"]].copy())]} if o["op"] == "tensor" else o for o in lists]
        c = observe(cold, handed())
        ops = handed()
        state = State()
        planned(cache)(state, ops)
        p = observe(lambda s, _: planned(cache)(s, handed()), None)
        assert p == c and c[0] == "ok"
        if i:
            for o in ops:
                if o["op"] == "tensor" and o["out"] in state.tensors:
                    assert state.tensors[o["out"]].data is o["args"][0].array
    assert cache.misses == 1 and cache.hits >= 6, cache.stats()


def test_an_owned_inputs_key_is_the_plain_arrays_and_an_owned_elsewhere_gives_none():
    """The key leaves an Owned input's data out as it leaves any data out (one plan for both forms); an Owned
    that is not a tensor op's data is not keyed (the list runs cold, which refuses it as the op does)."""
    a = np.ones((2, 3), np.float32)
    rest = [op("mul", "x", 2.0, out="y"), op("sum", "y", out="s")]
    key_owned = keyer._key(State(), [T("x", E.Owned(a.copy()), requires_grad=True), *rest], (), adopt=True)
    key_plain = keyer._key(State(), [T("x", a.copy(), requires_grad=True), *rest], ())
    key_list = keyer._key(State(), [T("x", a.tolist(), requires_grad=True), *rest], ())
    assert key_owned[0] == key_plain[0] == key_list[0]
    assert keyer._key(State(), [T("x", E.Owned(a.copy())), op("mul", "x", E.Owned(a.copy()), out="y")], (),
                            adopt=True) is None


@pytest.mark.parametrize("obj", [
    [{"op": "mul", "args": ["x", 2.0], "kwargs": {}, "out": "y"}],
    [{"op": "sum", "args": ["x"], "kwargs": {"dim": [0, 1], "keepdim": True}, "out": "s", "no_grad": True}],
    [{"op": "mul", "args": ["x", np.float32(0.5), np.arange(3)], "out": "y"}],
    [{"op": "f", "kwargs": {1: 2, "a": {3.5: None}}}],                    # keys that are not strings
    [{"op": "f", "kwargs": {"a": {(1, 2): 0}}}],                          # (not even orjson's non-str keys)
    [{"op": "f", "args": [object()]}],                                   # (not serializable)
])
def test_the_key_text_is_orjsons_with_non_str_keys(obj):
    """``_dumps`` tries without OPT_NON_STR_KEYS first (faster): the same bytes as with it, or the same error (a
    ``null`` the caller did not announce is followed by its value's bits: test_plan_keys.py)."""
    option = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    try:
        want = orjson.dumps(obj, option=option)
    except TypeError:
        with pytest.raises(TypeError):
            keyer._dumps(obj)
        assert keyer._dumps_owned(obj, [0], 0) is None
        return
    nulls = want.count(b"null")
    assert keyer._dumps(obj, nulls=nulls) == want
    assert keyer._dumps(obj) == (want + b"\0n" if nulls else want)
    owned = [{"op": "tensor", "args": [E.Owned(np.ones(2))], "out": "x"}, *obj]
    left = [1]
    assert keyer._dumps_owned(owned, left, 1 + nulls) == orjson.dumps([{**owned[0], "args": [None]}, *obj],
                                                                            option=option)
    assert left == [0]


@pytest.mark.parametrize("layout", ["first", "interleaved", "last", "none", "all"])
def test_scan_finds_the_input_ops_wherever_they_are(layout):
    t = {"op": "tensor", "args": [1.0], "out": "x"}
    m = {"op": "mul", "args": ["x", 2.0], "out": "x"}
    ops = {"first": [t, t, m, m], "interleaved": [t, m, t, m], "last": [m, m, t], "none": [m, m],
           "all": [t, t, t]}[layout]
    assert keyer._scan(ops) == [i for i, o in enumerate(ops) if o["op"] == "tensor"]
