"""The one dispatch's routes (engine/trace/route.py, engine/trace/dispatch.py) and generated code a traceback can read
(engine/trace/sources.py): each route and a representative reason as the engine gives them, and the source line
(with the op it comes from) of a replayed plan and of a composed fragment."""

from __future__ import annotations

import gc
import inspect
import linecache
import re
import traceback

import pytest

import gradserve_server.engine as E
import gradserve_server.engine.trace.plan as plan_module
from gradserve_server.engine import kernel as K
from gradserve_server.engine.program import State
from gradserve_server.engine.trace import route as R
from gradserve_server.engine.trace import sources
from gradserve_server.engine.trace.cache import PlanCache, Unplannable

from .test_compose import _scalar_graph
from .test_plan import PROGRAMS, T, draws, traced

LIMITS = E.Limits()


def run(cache, ops, **kw):
    routes: list = []
    try:
        traced(cache, routes, **kw)(State(), ops)
    except E.EngineError:
        pass
    return routes[0]


def test_a_traceback_through_a_replay_whose_kernel_raises_shows_the_generated_line_and_its_op(monkeypatch):
    cache = PlanCache()
    good = PROGRAMS["embedding"](lambda: 0.5)
    assert run(cache, good) == R.RECORDED
    caught = []
    fallback = plan_module._fallback
    monkeypatch.setattr(plan_module, "_fallback", lambda e: caught.append(e) or fallback(e))
    bad = [dict(o) for o in good]
    bad[1] = T("i", [2, 7, 0])  # an index out of range: the same key, the replayed kernel raises
    route = run(cache, bad)
    assert route.name == "fallback" and route.reason == "kernel_raised"
    assert route.detail.startswith("op 2 embedding (")  # (the type, never the message: it may quote values)
    frames = [f for f in traceback.extract_tb(caught[0].__traceback__) if f.filename.startswith("<gradserve plan ")]
    assert len(frames) == 1
    assert frames[0].line.startswith("b[") and frames[0].line.endswith("# op 2 embedding (_embedding_kernel)")
    assert "# op 2 embedding" in "".join(traceback.format_exception(caught[0]))


def test_a_plans_source_lives_as_long_as_the_plan():
    cache = PlanCache(max_entries=1)
    r = draws(1)
    assert run(cache, PROGRAMS["scalar"](r)) == R.RECORDED
    plan = next(iter(cache._entries.values()))
    name = plan.code[0].__code__.co_filename
    assert name.startswith(sources.PREFIX) and "# op " in "".join(linecache.getlines(name))
    assert plan.nbytes >= sources.source_bytes(name) > 0  # (the plan's footprint counts it)
    del plan
    assert run(cache, PROGRAMS["embedding"](r)) == R.RECORDED  # evicts the first plan
    gc.collect()
    assert name not in linecache.cache


def test_a_composed_fragment_has_its_source_and_op_in_linecache():
    cache = PlanCache(record_after=1_000_000)
    r = draws(2)
    assert run(cache, _scalar_graph(30, r)) == R.COMPOSED
    assert run(cache, _scalar_graph(30, r)) == R.COMPOSED  # (a fragment is compiled at its first hit)
    texts = ["".join(linecache.getlines(n)) for n in list(linecache.cache) if n.startswith("<gradserve fragment ")]
    assert any("# op stack (_stack_arrays)" in t for t in texts) and any("# op MulBackward0 (" in t for t in texts)


def test_a_fragment_source_another_partition_compiled_is_shared_and_still_readable():
    """A fragment's compiled maker comes from the process-wide memo of sources (``tape.shared_maker``) when any
    partition compiled that source before; its ``linecache`` entry is registered again if newer entries pushed it
    out, so a traceback through it still reads the line and its op."""
    r = draws(2)
    ops = _scalar_graph(30, r)
    first, second = PlanCache(record_after=1_000_000), PlanCache(record_after=1_000_000)
    for cache in (first, first, second, second):
        assert run(cache, ops) == R.COMPOSED
    makers = [{id(m): m for m in c._entries.values() if getattr(m, "__name__", "") == "make"} for c in
              (first, second)]
    shared = set(makers[0]) & set(makers[1])
    assert shared  # (the same compiled makers, each partition's entry)
    name = makers[0][shared.pop()].__code__.co_filename
    assert name.startswith("<gradserve fragment ")
    del linecache.cache[name]  # (as if MAX_ENTRIES newer sources had pushed it out)
    third = PlanCache(record_after=1_000_000)
    assert run(third, ops) == R.COMPOSED and third.fragments  # (it compiles nothing: all from the memo)
    assert "# op " in "".join(linecache.getlines(name))


def test_each_cold_route_says_why():
    r = draws(3)
    short = PROGRAMS["scalar"](r)
    assert run(None, short) == R.COLD_DISABLED
    assert run(PlanCache(), short, repeat=2) == R.COLD_OPTIONS
    rounding = [T("x", [1.0, 2.0]), {"op": "div", "args": ["x", 2.0], "kwargs": {"rounding_mode": "floor"}, "out": "y"}]
    assert run(PlanCache(), rounding) == R.COLD_UNPLANNABLE  # (a rounding mode is value-dependent numpy)
    deferred = PlanCache(record_after=2)
    assert run(deferred, short) == R.COLD_SHORT  # (a first sighting too short to compose)
    assert run(deferred, short) == R.RECORDED
    assert run(deferred, short) == R.REPLAYED
    warns = [T("x", [1.0, 2.0], requires_grad=True), {"op": "mul", "args": ["x", 2.0], "out": "y"},
             {"op": "sum", "args": ["y"], "out": "s"}, {"op": "backward", "args": ["s"]},
             {"op": "bind", "args": ["y.grad"], "out": "g"}]
    cache = PlanCache()
    first, again = run(cache, warns), run(cache, warns)
    assert (first.name, first.reason) == ("cold", "warning") and again == first


def test_a_long_list_whose_forms_do_not_repeat_gives_up_composing_and_says_so():
    ops = [T(f"x{i}", [0.5] * (i + 1)) for i in range(120)]
    ops += [{"op": "exp", "args": [f"x{i}"], "out": f"y{i}"} for i in range(120)]
    route = run(PlanCache(record_after=2), ops)
    assert (route.name, route.reason) == ("cold", "not_composable:misses")
    assert route.detail == "op 120 exp"


def test_the_vocabularies_are_closed_and_every_refusal_names_its_code():
    assert set(R.ROUTES) == {"replayed", "recorded", "composed", "cold", "fallback"}
    for route in vars(R).values():
        if isinstance(route, R.Route):
            assert route.name in R.ROUTES and route.reason in R.REASONS
    # the recorder and the plan builder give a code where they refuse (no message is read back)
    rec = K.Recorder()
    rec.bad("non_static_argument", "f got a non-static argument list")
    rec.bad("warning", "a later refusal does not replace the first")
    assert (rec.code, rec.reason) == ("non_static_argument", "f got a non-static argument list")
    with pytest.raises(AssertionError):
        Unplannable("no such reason", "x")
    src = inspect.getsource(plan_module) + inspect.getsource(K)
    for code in re.findall(r'(?:Unplannable|bad)\("([a-z_:]+)"', src):
        assert code in R.REASONS, code


def test_the_header_value_is_printable_ascii_and_bounded():
    value = R.Route("cold", "warning", 'a "quoted"\nline é' + "x" * 500).header()
    assert value.startswith('cold; reason=warning; detail="a ?quoted??line ?')
    assert value.isascii() and value.isprintable() and len(value) < 260
    assert R.REPLAYED.header() == "replayed; reason=plan_hit"
