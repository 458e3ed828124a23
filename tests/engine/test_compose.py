"""Composed one-shot runs (gradserve_server/engine/trace/compose.py): a list without a plan runs from per-op
fragments, and everything a client can observe must be what the plain cold run gives, bit for bit: values, dtypes,
layouts, grads, grad_fn names, flags, versions, accumulation counts, op outcomes, changed, the autograd report, errors
and their op index. Each suite counts how many runs actually composed (the cache's counters), so that a suite cannot
pass by always giving up."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve_server.engine as E
import gradserve_server.engine.trace.cache as cache_module
import gradserve_server.engine.trace.compose as compose_module
import gradserve_server.engine.trace.key as trace_key_module
import gradserve_server.engine.trace.plan as plan_module
import gradserve_server.engine.trace.tape as tape_module
from gradserve_server.engine.errors import EngineError
from gradserve_server.engine.program import State, run_program
from gradserve_server.engine.registry import OPS
from gradserve_server.engine.trace.cache import PlanCache
from gradserve_server.engine.trace.key import _form, _key_of, _plannable_op, _scan
from gradserve_server.engine.trace.plan import run_planned

from .samples import SAMPLES
from .test_plan import PROGRAMS, _cases, _perturb_literal, _perturbed, _program, _same, draws, observe, traced

LIMITS = E.Limits()


#: the cost policy's defaults (each tested on its own below)
MIN_OPS, MISS_SLACK, MISS_EARLY = compose_module._MIN_OPS, compose_module._MISS_SLACK, compose_module._MISS_EARLY


@pytest.fixture(autouse=True)
def compose_short_lists(monkeypatch):
    """The machinery on short lists of new forms too: by default a list of fewer than ``_MIN_OPS`` ops runs cold,
    and a run gives up once its misses outnumber its hits by ``_MISS_SLACK``, or by ``_MISS_EARLY`` when the
    list does not look as if it repeats its forms."""
    monkeypatch.setattr(compose_module, "_MIN_OPS", 0)
    monkeypatch.setattr(compose_module, "_MISS_SLACK", 1000)
    monkeypatch.setattr(compose_module, "_MISS_EARLY", 1000)


def composer(cache, limits=LIMITS, respond="all", control=None, routes: list | None = None):
    """A one-shot run through ``cache`` that never records a plan: it composes, or runs cold (the one dispatch:
    each run's route appended to ``routes``)."""
    return traced(cache, routes, limits=limits, respond=respond, control=control)


def fresh_cache():
    return PlanCache(record_after=1_000_000)


def cold_with(limits=LIMITS, respond="all", control=None):
    """The plain cold one-shot run (no plan cache: ``run_program``, the names a ``return`` list does not show
    left out as every one-shot run leaves them out)."""
    def run(state, ops):
        return run_planned(None, state, ops, limits=limits, respond=respond, extra=("json",), control=control)
    return run


def both(ops, cache, routes: list | None = None, **kw):
    return observe(cold_with(**kw), ops), observe(composer(cache, routes=routes, **kw), ops)


# ----- programs ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_programs_compose_as_they_run_cold(name):
    r = draws(11)
    cache = fresh_cache()
    for _ in range(3):
        c, p = both(PROGRAMS[name](r), cache)
        assert p == c and c[0] == "ok"


def test_the_benchmark_programs_actually_compose():
    cache = fresh_cache()
    r = draws(3)
    for name in ("scalar", "scalar_graph", "embedding", "mixed_dtypes", "no_grad_flag"):
        for _ in range(2):
            c, p = both(PROGRAMS[name](r), cache)
            assert p == c
    assert cache.composed == 10 and cache.uncomposable == 0, cache.stats()
    assert cache.fragment_hits > cache.fragment_misses


def _scalar_graph(groups, r, respond_names=False):
    """bench/engine.py's 10k-op graph in small: softplus, mul by literals, stack, softmax, sum, backward; ``r()``
    gives each input's data (tests/app/test_compose_http.py sends it through HTTP)."""
    ops = [{"op": "tensor", "args": [r()], "kwargs": {"requires_grad": True}, "out": f"p{i}"}
           for i in range(4 * groups)]
    for g in range(groups):
        items = []
        for j in range(4):
            ops += [{"op": "softplus", "args": [f"p{4 * g + j}"], "out": f"s{g}_{j}"},
                    {"op": "mul", "args": [f"s{g}_{j}", 0.5], "out": f"m{g}_{j}"}]
            items.append(f"m{g}_{j}")
        ops += [{"op": "stack", "args": [items], "out": f"st{g}"},
                {"op": "softmax", "args": [f"st{g}", 0], "out": f"sm{g}"},
                {"op": "mul", "args": [items[0], 1.0], "out": f"k{g}"},
                {"op": "mul", "args": [f"sm{g}", f"k{g}"], "out": f"q{g}"},
                {"op": "sum", "args": [f"q{g}"], "out": f"o{g}"}]
    ops += [{"op": "stack", "args": [[f"o{g}" for g in range(groups)]], "out": "all"},
            {"op": "sum", "args": ["all"], "out": "total"}, {"op": "backward", "args": ["total"]}]
    return ops


@pytest.mark.parametrize("respond", ["all", "changed", ["total", "p0.grad", "p3.grad", "sm1", "nope"]])
def test_the_scalar_graph_composes_bit_for_bit_and_mostly_from_hits(respond):
    cache = fresh_cache()
    r = draws(5)
    for _ in range(2):
        c, p = both(_scalar_graph(40, r), cache, respond=respond)
        assert p == c and c[0] == "ok"
    assert cache.composed == 2
    assert cache.fragment_hits > 20 * cache.fragment_misses, cache.stats()


# ----- the op suite ------------------------------------------------------------------------------------------
def test_every_op_sample_composes_or_gives_up_and_matches_the_cold_run():
    """Each op sample as an op list (its inputs, the op, a backward of its sum; the create_graph ``grad`` of
    samples torch differentiates twice left out: composition does not cover ``grad``): composed with fresh
    fragments, from hits on other values, and from hits on the first values."""
    cache = fresh_cache()
    n = 0
    routes: list = []
    for param in _cases():
        name, sample = param.values
        for values in (_same, _perturbed, _same):
            ops = [o for o in _program(name, sample, values) if o["op"] != "grad"]
            c, p = both(ops, cache, routes)
            assert p == c, (name, sample)
            n += 1
    # (lists of ops without kernels never get here; views and composite ops give up; the rest compose)
    assert cache.composed >= 250, cache.stats()
    assert cache.composed + cache.uncomposable <= n
    # the routes say the same: each composed run, each give-up (with its code), the rest never tried
    assert sum(r.name == "composed" for r in routes) == cache.composed
    assert sum(r.reason.startswith("not_composable:") for r in routes) == cache.uncomposable
    assert {r.name for r in routes} <= {"composed", "cold"}


# ----- the fuzzer's programs ---------------------------------------------------------------------------------
def test_fuzz_programs_compose_as_they_run_cold():
    """The differential fuzzer's programs (tests/fuzz/generator.py), their plannable ops kept: composed (once
    with fresh fragments, again from hits, again on perturbed tensor data), each compared with a cold run."""
    pytest.importorskip("torch", reason="the fuzzer's generator builds its programs by running them in torch")
    from tests.fuzz.generator import generate
    rng = np.random.default_rng(5)
    cache = fresh_cache()
    for seed in range(300):
        # (in-place ops plan but never compose: fragments are of out-of-place ops)
        program = [o for o in generate(seed)[0] if _plannable_op(o) and not getattr(OPS.get(o["op"]), "inplace", 0)]
        perturbed = [{**o, "args": [_perturb_literal(o["args"][0], rng), *o["args"][1:]]} if o["op"] == "tensor"
                     else o for o in program]
        for ops in (program, program, perturbed):
            c, p = both(ops, cache)
            assert p == c, seed
    # (how many compose depends on the draw, which the catalog's ops shape: 200 and more of the 900 runs with the
    # catalog of 0ac3622, 189 with this one's)
    assert cache.composed >= 150, cache.stats()
    assert cache.fragment_hits > cache.fragment_misses, cache.stats()


# ----- giving up ---------------------------------------------------------------------------------------------
def test_an_index_out_of_range_gives_the_cold_error_with_its_op_index():
    cache = fresh_cache()
    good = PROGRAMS["embedding"](lambda: 0.5)
    c, p = both(good, cache)
    assert p == c and c[0] == "ok" and cache.composed == 1
    bad = [dict(o) for o in good]
    bad[1] = {**bad[1], "args": [[2, 0, 7]]}  # index 7 of 3 rows: the fragment's kernel raises on a hit
    c, p = both(bad, cache)
    assert p == c and c[0] == "error" and c[4] == 2
    assert cache.uncomposable == 1 and cache.fragment_hits >= 1


def test_limits_hold_exactly_as_cold():
    r = draws(1)
    ops = _scalar_graph(5, r)
    for limits in (E.Limits(max_bytes=200), E.Limits(max_nodes=20), E.Limits(max_response_bytes=500),
                   E.Limits(max_elements_per_tensor=3)):
        cache = fresh_cache()
        c, p = both(ops, cache, limits=limits)
        assert c[0] == "error" and p == c, limits
        assert cache.composed == 0
    # within the limits: composed
    cache = fresh_cache()
    c, p = both(ops, cache, limits=E.Limits(max_bytes=1 << 20, max_nodes=10_000, max_response_bytes=1 << 20))
    assert c[0] == "ok" and p == c and cache.composed == 1


def test_a_passed_deadline_gives_the_cold_error():
    cache = fresh_cache()
    ops = _scalar_graph(3, draws(2))
    control = E.Control(0.0)
    c, p = both(ops, cache, control=control)
    assert c[0] == "error" and c[1] == "DeadlineExceededError" and p[:4] == c[:4]
    assert cache.composed == 0


def _with_backward(ops, **kw):
    return [o for o in ops if o["op"] != "backward"] + [{"op": "backward", "args": ["tot"], "kwargs": kw}]


@pytest.mark.parametrize("variant", ["retain_grad", "retain_leaf", "gradient", "retain_graph", "positional"])
def test_retain_grad_and_backward_arguments_compose_as_they_run_cold(variant):
    r = draws(6)
    cache = fresh_cache()
    for _ in range(3):
        ops = PROGRAMS["scalar_graph"](r)
        if variant == "retain_grad":
            ops = ops[:-1] + [{"op": "retain_grad", "args": ["m0"]}, {"op": "retain_grad", "args": ["st"]},
                              {"op": "retain_grad", "args": ["st"]}, ops[-1], {"op": "bind", "args": ["p0.grad"],
                                                                             "out": "g0"}]
        elif variant == "retain_leaf":
            ops = ops[:-1] + [{"op": "retain_grad", "kwargs": {"self": "p1"}}, ops[-1]]
        elif variant == "gradient":
            ops = _with_backward(ops + [{"op": "tensor", "args": [r()], "out": "seed"}], gradient="seed")
        elif variant == "retain_graph":
            ops = _with_backward(ops, retain_graph=True, create_graph=False)
        else:
            ops = ops[:-1] + [{"op": "tensor", "args": [r()], "out": "seed"},
                              {"op": "backward", "args": [["tot"], "seed"]}]
        c, p = both(ops, cache)
        assert p == c and c[0] == "ok"
    # (the first run meets ~20 new fragments in 16 ops: it may give up early; the others compose)
    assert cache.composed >= 2, cache.stats()


@pytest.mark.parametrize("extra", [
    {"op": "retain_grad", "args": ["p9"]},                          # an unknown name (the cold error)
    {"op": "bind", "args": ["m0.grad"], "out": "g"},                # a non-leaf's .grad (torch warns)
    {"op": "view", "args": ["st", -1], "out": "v", "no_grad": True},  # a view under no_grad of a base with grad
    {"op": "backward", "args": ["o"], "kwargs": {"inputs": ["p0"]}},  # a backward pruned to inputs
    {"op": "grad", "args": ["o", ["p0"]], "out": ["g"]},           # grad
])
def test_what_it_does_not_cover_runs_cold(extra):
    r = draws(4)
    ops = PROGRAMS["scalar_graph"](r)
    ops = ops[:6] + [extra] + ops[6:]
    cache = fresh_cache()
    c, p = both(ops, cache)
    assert p == c
    assert cache.composed == 0 and cache.uncomposable == 1


def test_a_second_backward_runs_cold():
    ops = PROGRAMS["accumulate"](draws(1))
    cache = fresh_cache()
    c, p = both(ops, cache)
    assert p == c and c[0] == "ok" and cache.composed == 0


def _policy_defaults(monkeypatch):
    monkeypatch.setattr(compose_module, "_MISS_SLACK", MISS_SLACK)
    monkeypatch.setattr(compose_module, "_MISS_EARLY", MISS_EARLY)
    monkeypatch.setattr(compose_module, "_MIN_OPS", MIN_OPS)


@pytest.mark.parametrize("n", [100, 200, 2000])
def test_a_list_that_never_repeats_gives_up_before_recording_anything(monkeypatch, n):
    """Its forms (a new literal each op) cannot repeat: at its first miss without a hit (``_MISS_EARLY`` 0) it
    looks ahead and gives up there, before recording that op's fragment (nothing recorded, no miss counted), not
    after the slack a long list has (``_MISS_SLACK``, one more per ``_MISS_PER`` ops)."""
    _policy_defaults(monkeypatch)
    assert MISS_EARLY == 0
    ops = [{"op": "tensor", "args": [1.5], "kwargs": {"requires_grad": True}, "out": "x"}]
    for i in range(n):
        ops.append({"op": "mul", "args": ["x" if i == 0 else f"y{i - 1}", 1.0 + i / 1024], "out": f"y{i}"})
    cache = fresh_cache()
    c, p = both(ops, cache)
    assert p == c and c[0] == "ok"
    assert cache.composed == 0 and cache.uncomposable == 1
    assert cache.fragment_misses == 0 and cache.fragment_hits == 0 and cache.fragments == 0


def test_a_never_repeating_list_of_known_forms_composes_from_hits(monkeypatch):
    """The look-ahead is for a run's first miss before any hit: a list whose forms never repeat within it but
    are all known (another list recorded them) composes from hits alone."""
    _policy_defaults(monkeypatch)
    x = {"op": "tensor", "args": [[1.5, -2.0]], "kwargs": {"requires_grad": True}, "out": "x"}
    body = [{"op": "mul", "args": ["x" if i == 0 else f"y{i - 1}", 1.0 + i / 1024], "out": f"y{i}"}
            for i in range(120)]
    tail = [{"op": "sum", "args": ["y119"], "out": "s"}, {"op": "backward", "args": ["s"]}]
    cache = fresh_cache()
    # (the same forms, each in a loop that repeats it: composed, every form and its VJP recorded)
    for i in range(120):
        loop = [x] + [{"op": "mul", "args": ["x" if k == 0 else f"z{k - 1}", 1.0 + i / 1024], "out": f"z{k}"}
                      for k in range(110)] + [{"op": "sum", "args": ["z109"], "out": "s"}, tail[1]]
        both(loop, cache)
    assert cache.composed == 120 and cache.uncomposable == 0, cache.stats()
    misses = cache.fragment_misses
    c, p = both([x] + body + tail, cache)
    assert p == c and c[0] == "ok"
    assert cache.composed == 121 and cache.fragment_misses == misses, cache.stats()


def test_a_non_repeating_prologue_then_a_repeated_body_composes(monkeypatch):
    """Set-up ops of forms of their own (scalings of a constant by literals of their own), then a loop: the first
    miss looks ahead over the prologue into the body, sees it repeat, and the run composes from a fresh cache (a
    prologue's new forms count against the slack as any miss: a long list has one more per ``_MISS_PER`` ops)."""
    _policy_defaults(monkeypatch)
    ops = [{"op": "tensor", "args": [[0.5, -0.25, 1.0]], "kwargs": {"requires_grad": True}, "out": "y"},
           {"op": "tensor", "args": [[0.1, 0.2, 0.3]], "out": "c0"}]
    ops += [{"op": "mul", "args": ["c0", 1.0 + i / 8], "out": f"c{i + 1}"} for i in range(6)]
    ops += [{"op": "add", "args": ["y", "c6"], "out": "y0"}]
    for k in range(400):
        ops += [{"op": "mul", "args": [f"y{k}", "c3"], "out": f"a{k}"},
                {"op": "tanh", "args": [f"a{k}"], "out": f"b{k}"},
                {"op": "add", "args": [f"b{k}", f"y{k}"], "out": f"y{k + 1}"}]
    ops += [{"op": "sum", "args": ["y400"], "out": "s"}, {"op": "backward", "args": ["s"]}]
    assert not compose_module._repeats(ops[:9], 2)  # (the prologue alone does not repeat)
    cache = fresh_cache()
    c, p = both(ops, cache)
    assert p == c and c[0] == "ok"
    assert cache.composed == 1 and cache.fragment_misses >= 10, cache.stats()


@pytest.mark.parametrize("prologue", [6, 40])
def test_a_long_prologue_then_a_loop_composes_in_a_long_list(monkeypatch, prologue):
    """A prologue of more new forms than the look-ahead window tolerates (40 > ``_LOOK_AHEAD`` * 3 / 4), then a
    loop, in a list of more than ``_LOOK_AGAIN`` ops: the first look says no, the second, in the middle of the
    list, sees the loop; the slack of the long list covers the prologue's misses: composed from a fresh cache.
    A short list of the same prologue gives up at its first miss, recording nothing."""
    _policy_defaults(monkeypatch)
    head = [{"op": "tensor", "args": [[0.5, -0.25, 1.0]], "kwargs": {"requires_grad": True}, "out": "y"},
            {"op": "tensor", "args": [[0.1, 0.2, 0.3]], "out": "c0"}]
    head += [{"op": "mul", "args": [f"c{i}", 1.0 + i / 64], "out": f"c{i + 1}"} for i in range(prologue)]
    head += [{"op": "add", "args": ["y", f"c{prologue}"], "out": "y0"}]

    def body(steps):
        ops = []
        for k in range(steps):
            ops += [{"op": "mul", "args": [f"y{k}", "c3"], "out": f"a{k}"},
                    {"op": "tanh", "args": [f"a{k}"], "out": f"b{k}"},
                    {"op": "add", "args": [f"b{k}", f"y{k}"], "out": f"y{k + 1}"}]
        return ops + [{"op": "sum", "args": [f"y{steps}"], "out": "s"}, {"op": "backward", "args": ["s"]}]
    assert compose_module._LOOK_AGAIN < 1800 and compose_module._LOOK_AHEAD * 3 // 4 < 40
    cache = fresh_cache()
    c, p = both(head + body(1800), cache)
    assert p == c and c[0] == "ok"
    assert cache.composed == 1 and cache.fragment_misses >= prologue, cache.stats()
    if prologue == 40:
        short = fresh_cache()
        c, p = both(head + body(40), short)
        assert p == c and c[0] == "ok"
        assert short.uncomposable == 1 and short.fragment_misses == 0 and short.fragments == 0, short.stats()


@pytest.mark.parametrize("on", ["inputs", "leading inputs", "intermediates"])
def test_forms_that_differ_only_in_shape_give_up_early(monkeypatch, on):
    """The same op written each time, every op a new form (on a new input of another shape each time). On inputs
    (each before its op, or all at the head of the list) the look-ahead sees their shapes (``_repeats``: the
    names bound so far, the inputs' ``metas`` ahead): it gives up at the first miss, nothing recorded. On
    intermediates (``exp`` of each input, then ``* 2.0``) it cannot: the run gives up once its misses outnumber
    its hits by the slack, and counts the misses it recorded, no more."""
    _policy_defaults(monkeypatch)
    inputs, ops = [], []
    for i in range(120):
        inputs.append({"op": "tensor", "args": [[0.5] * (i + 1)], "kwargs": {"requires_grad": True},
                       "out": f"x{i}"})
        if on == "intermediates":
            ops += [{"op": "exp", "args": [f"x{i}"], "out": f"e{i}"},
                    {"op": "mul", "args": [f"e{i}", 2.0], "out": f"y{i}"}]
        else:
            ops.append({"op": "mul", "args": [f"x{i}", 2.0], "out": f"y{i}"})
    ops = inputs + ops if on == "leading inputs" else [o for pair in zip(inputs, ops) for o in pair] \
        if on == "inputs" else [o for k in range(120) for o in (inputs[k], ops[2 * k], ops[2 * k + 1])]
    cache = fresh_cache()
    c, p = both(ops, cache)
    assert p == c and c[0] == "ok"
    assert cache.composed == 0 and cache.uncomposable == 1
    recorded = MISS_SLACK if on == "intermediates" else 0
    assert cache.fragment_misses == recorded == cache.fragments, cache.stats()


def test_a_long_list_that_meets_all_its_forms_first_still_composes(monkeypatch):
    """An integrator's loop: its first step meets a dozen new forms (more than ``_MISS_EARLY`` and
    ``_MISS_SLACK``), then repeats them: the look-ahead sees the repetition, the slack of a long list covers
    the misses; composed from a fresh cache."""
    _policy_defaults(monkeypatch)
    ops = [{"op": "tensor", "args": [[0.5, -0.25, 1.0]], "kwargs": {"requires_grad": True}, "out": "y"},
           {"op": "tensor", "args": [[[0.1, 0.2, 0.0], [0.0, -0.3, 0.1], [0.2, 0.0, 0.1]]],
            "kwargs": {"requires_grad": True}, "out": "A"}]
    y = "y"
    for k in range(120):
        step = [("mv", ["A", y], "a"), ("tanh", [f"a{k}"], "b"), ("mul", [f"b{k}", 0.05], "c"),
                ("add", [y, f"c{k}"], "d"), ("sin", [f"d{k}"], "e"), ("mul", [f"e{k}", 0.01], "f"),
                ("sub", [f"d{k}", f"f{k}"], "g"), ("exp", [f"g{k}"], "h"), ("mul", [f"h{k}", 0.001], "i"),
                ("add", [f"g{k}", f"i{k}"], "y")]
        ops += [{"op": name, "args": args, "out": f"{out}{k}"} for name, args, out in step]
        y = f"y{k}"
    ops += [{"op": "sum", "args": [y], "out": "s"}, {"op": "backward", "args": ["s"]}]
    cache = fresh_cache()
    c, p = both(ops, cache)
    assert p == c and c[0] == "ok"
    assert cache.composed == 1, cache.stats()
    assert cache.fragment_misses > MISS_SLACK


def test_giving_up_leaves_owned_inputs_and_the_state_untouched():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    owned = E.Owned(data.copy())
    ops = [{"op": "tensor", "args": [owned], "kwargs": {"requires_grad": True}, "out": "x"},
           {"op": "exp", "args": ["x"], "out": "e"}, {"op": "sum", "args": ["e"], "out": "s"},
           {"op": "embedding", "args": ["x", "x"], "out": "bad"}]
    cache = fresh_cache()
    state = State()
    with pytest.raises(EngineError) as err:
        composer(cache)(state, ops)
    assert err.value.op_index == 3 and state.tensors == {} and state.backward_passes == 0
    assert owned.array.tobytes() == data.tobytes()


def _frags(cache, makers: bool = False) -> dict:
    """The fragments a ``PlanCache`` holds (key -> fragment, None for an uncomposable form; ``makers``: and the
    compiled code of its fragments' sources, ``PlanCache.maker``)."""
    return {k: cache.table[k] for k in list(cache._fsizes) if makers or k[0] is not trace_key_module._CODE}


def test_fragments_are_bounded(monkeypatch):
    cache = PlanCache(record_after=1_000_000)
    cache.fragment_entries = 4
    r = draws(2)
    for name in sorted(PROGRAMS):
        both(PROGRAMS[name](r), cache)
    assert cache.fragments <= 4 and cache.evictions > 0
    assert cache.stats()["fragments"] == len(_frags(cache, makers=True)) == cache.fragments


def test_fragments_share_the_caches_one_measured_bytes_bound_constants_and_vjps_included():
    """Fragments and plans are one table with one accounting: each fragment counted as ``footprint`` measures it
    and its key (its VJP fragments added as they come), within the one ``max_bytes``, least recently used out."""
    cache = PlanCache(record_after=1_000_000)
    r = draws(2)
    for name in sorted(PROGRAMS):
        both(PROGRAMS[name](r), cache)
    cache.settle()  # (the last run's fragments measured: what the next run's start does, ``records``)
    frags = _frags(cache)
    full = cache.bytes
    assert full == sum(cache._sizes.values()) + sum(cache._fsizes.values())
    assert any(f is not None and f.cbytes for f in frags.values())  # (constants: counted by footprint)
    assert any(f is not None and f.recipe is not None and f.recipe.vjps for f in frags.values())
    # the counted bytes are the true ones: what the entries hold now, measured again (code compiled since a
    # fragment was made replaces its steps: close, not equal)
    again = sum(plan_module.footprint((k, f)) for k, f in _frags(cache, makers=True).items())
    assert 0.8 * again <= sum(cache._fsizes.values()) <= 1.25 * again, (sum(cache._fsizes.values()), again)
    small = PlanCache(record_after=1_000_000, max_bytes=full // 3)
    for name in sorted(PROGRAMS):
        c, p = both(PROGRAMS[name](r), small)
        assert p == c
        small.settle()
        assert small.bytes <= full // 3
        assert small.bytes == sum(small._sizes.values()) + sum(small._fsizes.values())
    assert 0 < small.fragments < len(frags) and small.evictions > 0


def test_fragments_of_one_form_are_counted_by_one_measure_within_the_band_of_each_ones_re_measure():
    """``x[t]`` for t = 0..N (an LSTM's one-off forms) and a mul by a different float each time: fragments whose
    keys differ only in int or float literals are counted by their form's one measure plus their own constant
    arrays (``PlanCache._measure``); each count stays within the band of a re-measure of that fragment (its VJP
    fragments included), the memo lives only as long as the fragment it was measured on, and the bytes bound
    holds with a cache too small for them all."""
    rng = np.random.default_rng(5)
    ops = _lstm(rng, 24)
    ops[-1:-1] = [{"op": "mul", "args": [f"h{t}", 0.5 + t], "out": f"m{t}"} for t in range(24)]
    cache = fresh_cache()
    c, p = both(ops, cache)
    assert p == c and c[0] == "ok" and cache.composed == 1, cache.stats()
    cache.settle()
    frags = _frags(cache)
    getitems = [k for k in frags if k[0] == "getitem"]
    assert len(getitems) == 24 and 0 < len(cache._formed) < len(getitems)  # (most of them counted by the memo)
    for k, f in frags.items():
        again = plan_module.footprint((k, f))
        assert 0.8 * again <= cache._fsizes[k] <= 1.25 * again, (k, cache._fsizes[k], again)
    again = sum(plan_module.footprint((k, f)) for k, f in _frags(cache, makers=True).items())
    assert 0.95 * again <= sum(cache._fsizes.values()) <= 1.1 * again, (sum(cache._fsizes.values()), again)
    assert cache.bytes == sum(cache._fsizes.values()) + sum(cache._sizes.values())
    small = PlanCache(record_after=1_000_000, max_bytes=cache.bytes // 4)
    c, p = both(ops, small)
    small.settle()
    assert p == c and small.evictions > 0 and small.bytes <= cache.bytes // 4
    assert small.bytes == sum(small._fsizes.values()) + sum(small._sizes.values())
    assert set(small._forms) <= set(small._fsizes)  # (a memo entry goes with the fragment it was measured on)
    assert sorted(map(repr, small._formed)) == sorted(repr(f) for fs in small._forms.values() for f in fs)


def test_a_runs_new_fragments_are_measured_before_the_next_runs_work_and_the_bound_holds_then():
    """A composed run keeps its new fragments counted by their constant arrays and ``_UNMEASURED`` (``footprint``
    walks every object of each: not on the run's path); the next run of the partition that may add entries
    measures them first (``records``), so its work starts on measured bytes within the bound; ``stats`` settles
    too. A fragment evicted before it was measured is not counted again."""
    rng = np.random.default_rng(7)
    ops = _lstm(rng, 12)
    cache = fresh_cache()
    c, p = both(ops, cache)
    assert p == c and c[0] == "ok" and cache.composed == 1
    pending = len(cache._pending)
    assert pending > 0 and all(k in cache._fsizes for k, *_ in cache._pending)
    counted = cache.bytes
    assert counted == sum(cache._fsizes.values()) + sum(cache._sizes.values())
    cache.records((b"another list",))  # (the start of a run that may add entries)
    assert not cache._pending and cache.bytes != counted
    assert cache.bytes == sum(cache._fsizes.values()) + sum(cache._sizes.values())
    measured = {k: plan_module.footprint((k, f)) for k, f in _frags(cache, makers=True).items()}
    assert 0.9 * sum(measured.values()) <= sum(cache._fsizes.values()) <= 1.1 * sum(measured.values())
    # a cache too small for them: over the bound while they are unmeasured at most by what they were counted
    # less than they hold, within it once settled; evicted ones are not counted twice
    small = PlanCache(record_after=1_000_000, max_bytes=cache.bytes // 3)
    c, p = both(ops, small)
    assert p == c and small.evictions > 0
    small.stats()
    assert not small._pending and small.bytes <= cache.bytes // 3
    assert small.bytes == sum(small._fsizes.values()) + sum(small._sizes.values())


def test_a_fragment_hit_since_the_eviction_last_passed_it_is_kept_as_recently_used():
    """One eviction policy over plans and fragments: least recently used out; a fragment's hits (flagged by the
    composed run without a lock) count as uses when the eviction reaches it."""
    cache = PlanCache(max_entries=8, fragment_entries=3)
    a, b, c, d = (compose_module._Frag() for _ in range(4))
    for f in (a, b, c, d):
        f.used, f.graph, f.recipe, f.cbytes = False, None, None, 0
    for key, f in (("a", a), ("b", b), ("c", c)):
        cache.put_fragment((key,), f)
    a.used = True  # (a hit)
    cache.put_fragment(("d",), d)
    assert set(_frags(cache)) == {("a",), ("c",), ("d",)} and not a.used
    cache.put((b"plan",), cache_module._Seen(1))
    cache.put_fragment(("e",), None)  # (an uncomposable form: no flag)
    assert set(_frags(cache)) == {("a",), ("d",), ("e",)} and cache.get((b"plan",)) is not None
    assert len(cache) == 1 and cache.evictions == 2


def test_ops_of_the_suite_are_named_in_samples():
    # (the suite above covers the op samples: guard against it silently covering none)
    assert len(_cases()) > 100 and len(SAMPLES) > 50


def test_a_short_list_runs_cold_and_a_long_one_composes_by_default(monkeypatch):
    monkeypatch.setattr(compose_module, "_MIN_OPS", MIN_OPS)
    monkeypatch.setattr(compose_module, "_MISS_SLACK", MISS_SLACK)
    monkeypatch.setattr(compose_module, "_MISS_EARLY", MISS_EARLY)
    cache = fresh_cache()
    r = draws(8)
    for _ in range(2):
        c, p = both(PROGRAMS["scalar_graph"](r), cache)  # (13 ops)
        assert p == c
    assert cache.composed == cache.uncomposable == 0 and cache.fragment_misses == 0
    c, p = both(_scalar_graph(8, r), cache)  # (107 ops)
    assert p == c and cache.composed == 1


def _lstm(rng, steps: int) -> list:
    """bench/engine.py's LSTM in small: embedding, getitem, chunk (views), composite cross_entropy."""
    def m(*shape):
        return np.round(rng.standard_normal(shape), 3).astype(np.float32).tolist()
    H, V = 3, 5
    def ints():
        return [int(i) for i in rng.integers(0, V, steps)]
    ops = [T_("x", ints()), T_("y", ints()),
           T_("wx", m(V, 4 * H), requires_grad=True), T_("wh", m(H, 4 * H), requires_grad=True),
           T_("bg", m(4 * H), requires_grad=True), T_("wy", m(H, V), requires_grad=True),
           T_("h0", m(1, H)), T_("c0", m(1, H)),
           {"op": "embedding", "args": ["x", "wx"], "out": "xw"}]
    h, c = "h0", "c0"
    for t in range(steps):
        ops += [{"op": "matmul", "args": [h, "wh"], "out": f"hw{t}"},
                {"op": "getitem", "args": ["xw", t], "out": f"x{t}"},
                {"op": "add", "args": [f"hw{t}", f"x{t}"], "out": f"z{t}"},
                {"op": "add", "args": [f"z{t}", "bg"], "out": f"g{t}"},
                {"op": "chunk", "args": [f"g{t}", 4, 1], "out": [f"i{t}", f"f{t}", f"n{t}", f"o{t}"]},
                {"op": "sigmoid", "args": [f"f{t}"], "out": f"sf{t}"},
                {"op": "mul", "args": [f"sf{t}", c], "out": f"fc{t}"},
                {"op": "sigmoid", "args": [f"i{t}"], "out": f"si{t}"},
                {"op": "tanh", "args": [f"n{t}"], "out": f"tn{t}"},
                {"op": "mul", "args": [f"si{t}", f"tn{t}"], "out": f"ig{t}"},
                {"op": "add", "args": [f"fc{t}", f"ig{t}"], "out": f"c{t}"},
                {"op": "sigmoid", "args": [f"o{t}"], "out": f"so{t}"},
                {"op": "tanh", "args": [f"c{t}"], "out": f"tc{t}"},
                {"op": "mul", "args": [f"so{t}", f"tc{t}"], "out": f"h{t}"}]
        h, c = f"h{t}", f"c{t}"
    ops += [{"op": "cat", "args": [[f"h{t}" for t in range(steps)], 0], "out": "hs"},
            {"op": "matmul", "args": ["hs", "wy"], "out": "logits"},
            {"op": "cross_entropy", "args": ["logits", "y"], "out": "loss"}, {"op": "backward", "args": ["loss"]}]
    return ops


def T_(name, data, **kw):
    return {"op": "tensor", "out": name, "args": [data], "kwargs": kw}


@pytest.mark.parametrize("respond", ["all", ["loss", "wx.grad", "wh.grad", "c3"]])
def test_an_lstm_with_views_and_a_composite_loss_composes_bit_for_bit(respond, monkeypatch):
    monkeypatch.setattr(compose_module, "_MIN_OPS", MIN_OPS)
    monkeypatch.setattr(compose_module, "_MISS_SLACK", MISS_SLACK)
    monkeypatch.setattr(compose_module, "_MISS_EARLY", MISS_EARLY)
    rng = np.random.default_rng(3)
    cache = fresh_cache()
    for _ in range(3):
        c, p = both(_lstm(rng, 12), cache, respond=respond)
        assert p == c and c[0] == "ok"
    assert cache.composed >= 2, cache.stats()


# ----- the forward loop's shortcuts (each checked against the cold run) -----------------------------------------
@pytest.mark.parametrize("where", ["input", "late_input", "op", "deleted", "long", "not_ascii"])
def test_an_out_name_that_is_not_plain_gives_the_cold_error_and_op_index(where):
    """A name that is not a plain identifier anywhere (the inputs the list begins with are checked in bulk:
    ``compose._plain_names``; here an op whose form is a hit by then) gives the cold run's error, never a
    result."""
    ops = _scalar_graph(3, draws(7))
    bad = {"long": "x" * 65, "not_ascii": "\u00e91"}.get(where, "a.b")
    at = len(ops) - 3  # (after the third group's ops: every form met before)
    if where == "input":
        ops.insert(0, {"op": "tensor", "args": [1.0], "out": bad})
    elif where == "late_input":
        ops.insert(at, {"op": "tensor", "args": [1.0], "out": bad})
    else:
        ops.insert(at, {"op": "mul", "args": ["s2_1", 0.5], "out": bad})
        if where == "deleted":
            ops.insert(at + 1, {"op": "del", "args": [bad]})
    cache = fresh_cache()
    c, p = both(ops, cache)
    assert c[0] == "error" and p == c, (c, p)
    assert cache.composed == 0 and cache.uncomposable == 1, cache.stats()
    assert (cache.fragment_hits > 10) == (where != "input")  # (a leading input's name: given up at once)
    c, p = both([o for o in ops if bad not in (o.get("out"), *o.get("args", ()))], cache)  # (without it: composed)
    assert c[0] == "ok" and p == c and cache.composed == 1


def test_the_call_form_check_of_an_op_holds_on_hits_as_on_misses(monkeypatch):
    """div with a rounding mode is not composable (value-dependent numpy): ``compose`` checks a call form when it
    first meets its key (which holds what the check reads), a hit of that key passed it. (``run_planned`` refuses
    such a list before: ``compose`` is called here as it would be without that.)"""
    r = draws(5)
    ops = _scalar_graph(3, r)
    divs = [{"op": "div", "args": [f"m0_{j % 4}", 3.0], "out": f"d{j}"} for j in range(6)]
    cache = fresh_cache()
    c, p = both(ops[:-1] + divs + ops[-1:], cache)
    assert p == c and c[0] == "ok" and cache.composed == 1
    monkeypatch.setattr(plan_module, "_scan", lambda ops, plannable=True: _scan(ops, plannable=False))
    for mode in ("floor", "trunc", None):
        odd = {"op": "div", "args": ["m0_1", 3.0], "kwargs": {"rounding_mode": mode}, "out": "dm"}
        c, p = both(ops[:-1] + divs + [odd] + divs + ops[-1:], cache)
        assert p == c
    assert cache.composed == 1 and cache.uncomposable >= 2, cache.stats()  # (floor, trunc: given up)


def test_a_one_kernel_fragment_is_called_inline_as_its_function_would_be():
    """A fragment of one kernel call (``_Frag.k``: softplus, mul by a literal, sum...) is called by the loop,
    not through its compiled function: the same arrays (a ufunc's numpy scalar made a 0-d array)."""
    cache = fresh_cache()
    ops = _scalar_graph(4, draws(9))
    for _ in range(2):
        c, p = both(ops, cache)
        assert p == c and c[0] == "ok"
    frags = [f for f in _frags(cache).values() if f is not None]
    assert sum(f.k is not None for f in frags) >= 3 and any(f.k is None for f in frags)
    for f in frags:
        if f.k is not None:
            assert f.fn is None  # (never compiled: every hit called the kernel)
    assert cache.composed == 2 and cache.fragment_hits > 30


def test_short_tensor_lists_key_their_aliasing():
    """stack of a short list keys each name's layout, or the index of an earlier argument of the same variable:
    stack([a, a]) and stack([a, b]) of equal layouts are two forms (their backward differs)."""
    r = draws(2)
    ops = [{"op": "tensor", "args": [[r(), r()]], "kwargs": {"requires_grad": True}, "out": f"x{i}"}
           for i in range(4)]
    for i in range(4):
        a, b = f"x{i}", f"x{(i + 1) % 4}"
        ops += [{"op": "stack", "args": [[a, a]], "out": f"aa{i}"}, {"op": "stack", "args": [[a, b]], "out": f"ab{i}"},
                {"op": "stack", "args": [[b, a, b]], "out": f"bab{i}"},
                {"op": "bind", "args": [a], "out": f"y{i}"}, {"op": "stack", "args": [[a, f"y{i}"]], "out": f"ay{i}"},
                {"op": "mul", "args": [f"aa{i}", f"ab{i}"], "out": f"m{i}"},
                {"op": "add", "args": [f"m{i}", f"ay{i}"], "out": f"n{i}"}]
    ops += [{"op": "stack", "args": [[f"n{i}" for i in range(4)]], "out": "all"},
            {"op": "sum", "args": ["all"], "out": "tot"}, {"op": "backward", "args": ["tot"]}]
    cache = fresh_cache()
    for _ in range(2):
        c, p = both(ops, cache)
        assert p == c and c[0] == "ok"
    assert cache.composed == 2
    stacks = [k for k, f in _frags(cache).items() if k[0] == "stack" and f is not None]
    assert len(stacks) >= 3  # (aa, ab/ay, bab: three forms)


@pytest.mark.parametrize("layout", ["interleaved", "rebound", "leading_only"])
def test_inputs_bind_as_cold_wherever_they_are(layout):
    """The inputs a list begins with are bound in bulk, the others as the loop meets them: the same namespace,
    slots and leaves either way (an input name bound twice: the second one)."""
    r = draws(3)
    ops = _scalar_graph(3, r)
    if layout == "interleaved":
        ops = ops[:4] + ops[12:20] + ops[4:12] + ops[20:]
    elif layout == "rebound":
        ops = [ops[0], {**ops[1], "out": "p0"}] + ops[1:]
    cache = fresh_cache()
    for _ in range(2):
        c, p = both(ops, cache)
        assert p == c and c[0] == "ok"
    assert cache.composed == 2


def test_codegen_compiles_a_structure_once_and_binds_each_fragments_own_values():
    """``tape.compile_fragment``'s source depends only on the steps' structure: a second fragment of the same
    structure reuses the compiled code (``PlanCache.maker``, counted as the partition's entry; another partition
    binds the same code from ``tape.shared_maker`` and counts an entry of its own), with its own kernels and
    constants."""
    def steps(c):
        return [(np.multiply, (None, c), ((0, 0),), 1, False, True, -1, ()),
                (np.add, (None, None), ((0, 1), (1, 0)), 2, False, True, -1, ())]
    cache, other = PlanCache(), PlanCache()
    f1 = tape_module.compile_fragment(steps(np.float32(2.0)), 1, [2], maker=cache.maker)
    n, held = cache.fragments, cache.bytes
    assert n == 1 and held > 0
    f2 = tape_module.compile_fragment(steps(np.float32(3.0)), 1, [2], maker=cache.maker)
    assert cache.fragments == n and cache.bytes == held and f1.__code__ is f2.__code__
    f3 = tape_module.compile_fragment(steps(np.float32(3.0)), 1, [2], maker=other.maker)
    assert f3.__code__ is f1.__code__ and other.fragments == 1 and other.bytes == held
    x = np.asarray(np.float32(1.5))
    (a,), (b,) = f1(x), f2(x)
    assert a.__class__ is np.ndarray and a.tolist() == 1.5 * 2 + 1.5 and b.tolist() == 1.5 * 3 + 1.5


def test_the_inline_node_forms_make_the_nodes_the_general_code_makes():
    """``_Frag.mode``'s node forms (one edge; two inputs saved; an edge and none; an edge per input), with leaves
    (their accumulators made on the way, in order) and non-leaves on every edge: the cold run's grads, grad_fn
    names, report and counts; each form met on hits (checked: a form the loop stopped meeting would not test)."""
    r = draws(12)
    ops = [{"op": "tensor", "args": [r()], "kwargs": {"requires_grad": True}, "out": f"p{i}"} for i in range(12)]
    ops.append({"op": "tensor", "args": [r()], "out": "c"})  # (a leaf that does not require grad)
    for g in range(3):
        a, b, c, d = (f"p{4 * g + j}" for j in range(4))
        ops += [{"op": "exp", "args": [a], "out": f"e{g}"},                          # 1: a leaf's edge
                {"op": "mul", "args": [b, c], "out": f"bc{g}"},                        # 2: two leaves
                {"op": "mul", "args": [f"e{g}", f"bc{g}"], "out": f"ebc{g}"},          # 2: two nodes
                {"op": "mul", "args": [d, "c"], "out": f"dc{g}"},                      # 2: a leaf, no grad
                {"op": "mul", "args": [d, 2.0], "out": f"d2{g}"},                      # 3: a leaf and a literal
                {"op": "mul", "args": [f"ebc{g}", 3.0], "out": f"m{g}"},               # 3: a node and a literal
                {"op": "stack", "args": [[f"m{g}", a, f"dc{g}", f"d2{g}"]], "out": f"st{g}"},  # 4: mixed
                {"op": "stack", "args": [[b, c, d]], "out": f"sl{g}"},                 # 4: leaves only
                {"op": "sum", "args": [f"st{g}"], "out": f"s{g}"},                     # 1: a node's edge
                {"op": "sum", "args": [f"sl{g}"], "out": f"t{g}"}]
    ops += [{"op": "stack", "args": [[f"s{g}" for g in range(3)] + [f"t{g}" for g in range(3)]], "out": "all"},
            {"op": "sum", "args": ["all"], "out": "tot"}, {"op": "backward", "args": ["tot"]}]
    cache = fresh_cache()
    runs = []

    class Run(compose_module._Run):
        def __init__(self, *a):
            super().__init__(*a)
            runs.append(self)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(compose_module, "_Run", Run)
        for _ in range(2):
            c, p = both(ops, cache)
            assert p == c and c[0] == "ok"
    assert cache.composed == 2
    modes = {f.mode for f in _frags(cache).values() if f is not None}
    assert {1, 2, 3, 4} <= modes, modes
    # the accumulators the inline forms make (without ``_Acc.__init__``) have every field set
    accs = [e[0][0] for e in runs[-1].leaves.values()]
    assert len(accs) == 12
    assert all(acc.__class__ is compose_module._Acc and hasattr(acc, f) for acc in accs
               for f in compose_module._Acc.__slots__)


# ----- the composed backward's schedule (autograd._run_all with _Run.apply) ------------------------------------
def _multi_output_graph(groups, r):
    """Multi-output nodes (split, chunk) in the composed backward: a split whose outputs reach the loss along
    several paths (one output twice: its node gets its gradients as a list summed over several edges), a chunk
    of which one piece is used (its node's one edge delivers the list), a leaf used by several ops (its
    accumulator sums them), and after the backward the leaves' .grad bound twice and aliased."""
    ops = [{"op": "tensor", "args": [[r(), r(), r(), r()]], "kwargs": {"requires_grad": True}, "out": f"p{i}"}
           for i in range(2 * groups)]
    outs = []
    for g in range(groups):
        a, b = f"p{2 * g}", f"p{2 * g + 1}"
        ops += [{"op": "mul", "args": [a, b], "out": f"ab{g}"},
                {"op": "split", "args": [f"ab{g}", 1], "out": [f"u{g}_{j}" for j in range(4)]},
                {"op": "mul", "args": [f"u{g}_0", f"u{g}_1"], "out": f"x{g}"},
                {"op": "sin", "args": [f"u{g}_2"], "out": f"y{g}"},
                {"op": "mul", "args": [f"u{g}_0", 2.0], "out": f"z{g}"},
                {"op": "chunk", "args": [b, 2], "out": [f"c{g}_0", f"c{g}_1"]},
                {"op": "sum", "args": [f"c{g}_1"], "out": f"w{g}"},
                {"op": "stack", "args": [[f"x{g}", f"y{g}", f"z{g}"]], "out": f"s{g}"},
                {"op": "sum", "args": [f"s{g}"], "out": f"v{g}"},
                {"op": "add", "args": [f"v{g}", f"w{g}"], "out": f"o{g}"}]
        outs.append(f"o{g}")
    ops += [{"op": "stack", "args": [outs], "out": "all"}, {"op": "sum", "args": ["all"], "out": "tot"},
            {"op": "backward", "args": ["tot"]},
            {"op": "bind", "args": ["p0.grad"], "out": "g0"}, {"op": "bind", "args": ["p0.grad"], "out": "g1"},
            {"op": "bind", "args": ["g0"], "out": "g2"}, {"op": "bind", "args": ["p3.grad"], "out": "g3"}]
    return ops


@pytest.mark.parametrize("respond", ["all", ["tot", "g0", "g1", "g2", "p3.grad"]])
def test_multi_output_nodes_and_bound_grads_compose_as_they_run_cold(respond):
    cache = fresh_cache()
    r = draws(4)
    for _ in range(3):
        ops = _multi_output_graph(6, r)
        c, p = both(ops, cache, respond=respond)
        assert p == c and c[0] == "ok"
    assert cache.composed == 3, cache.stats()


def test_the_loop_keys_fragments_as_the_keyer_does():
    """``_compose``'s loop builds the commonest fragment keys inline (one tensor; a tensor and a number or another
    tensor), the rest through ``key._key_of``: every key it put in the cache is the one ``_key_of`` makes of
    that op on the cold run's tensors, so the keyer's one rule holds for every form."""
    cache = fresh_cache()
    ops = _scalar_graph(30, draws(5))
    c, p = both(ops, cache)
    assert p == c and cache.composed == 1
    state = State()
    run_program(state, ops)
    ns = {n: (t.data, t.requires_grad, None, 0) for n, t in state.tensors.items()}
    made = set()
    for op in ops:
        if op["op"] in ("tensor", "backward"):
            continue
        key, vs = [op["op"], True, 0], []
        _key_of(_form(op["op"]), op["args"], op.get("kwargs") or {}, ns, key, vs)
        if len(vs) <= tape_module.FRAGMENT_CODEGEN_MAX:  # (a wider op runs live: nothing kept)
            made.add(tuple(key))
    kept = {k for k in cache.table if k.__class__ is tuple and k and k[0].__class__ is str}
    assert kept == made and {k[0] for k in kept} == {"softplus", "mul", "stack", "softmax", "sum"}
