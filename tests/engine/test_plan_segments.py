"""Segment plans (engine.trace.plan ``_segments``, ``_run_segments``, ``_Fuse``): a training loop's session list runs
as its prefix under no_grad (the last update, zero_grad, or the tensors and optimizer state the first request
makes), its grad-mode part (forward, backward, gradients bound to names) and its trailing ``del`` s, each part keyed
on the session tensors it names, so the grad-mode part the first request recorded replays in the second; once
every part replayed, the next run records the whole list's plan (route recorded/segments_fused), which every later
run replays as one plan, as without segments. Every run is compared with the eager interpreter's
(state in its order, versions, gradients, graphs, accumulation counts, held bytes; result, ``changed``, autograd
report; error) bit for bit, failures included: a part that fails after another ran leaves the session as it was
and the list's cold run gives its error at its index."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve_server.engine as E
from gradserve_server.engine.trace.cache import PlanCache
from gradserve_server.engine.trace.plan import _FUSE, Plan, _segments

from .test_literal_lifting import T, Twins, op
from .test_plan_training import adam, body, loop, setup, sgd


def routes_of(tw: Twins, lists: list) -> list:
    return [(r.name, r.reason) for r in map(tw.run, lists)]


@pytest.mark.parametrize("record_after", [1, 2, 3])
@pytest.mark.parametrize("update", ["sgd", "adam"])
def test_a_training_loop_replays_from_its_second_request(update, record_after):
    make = sgd if update == "sgd" else adam
    tw = Twins([], PlanCache(record_after=record_after))
    routes = routes_of(tw, loop(make, 8))
    # the second request replays its forward and backward (its update recorded), the third both; the fourth records
    # the whole list's plan, which every later one replays
    assert routes == [("recorded", "segments"), ("replayed", "segments"), ("replayed", "segments"),
                      ("recorded", "segments_fused")] + [("replayed", "plan_hit")] * 4, routes
    assert tw.cache.fallbacks == 0
    assert _FUSE not in tw.cache._entries.values()


def test_the_cuts():
    lists = loop(sgd, 3)
    n = len(setup()) + 1  # (the tensors, the optimizer's state and zero_grad)
    assert _segments(lists[0], {}) == [(0, n, False), (n, len(lists[0]) - 1, False),
                                       (len(lists[0]) - 1, len(lists[0]), True)]
    up, end = len(sgd(1)) + 1, len(lists[1]) - 2  # (the update and zero_grad; two dels end it)
    assert _segments(lists[1], {}) == [(0, up, False), (up, end, False), (end, len(lists[1]), True)]
    fwd = body(1)[1:]
    assert _segments(fwd, {}) == [(0, len(fwd) - 1, False), (len(fwd) - 1, len(fwd), True)]
    assert _segments(fwd[:-1], {}) is None  # one part only: planned whole
    assert _segments([op("add_", "w1", 1.0, no_grad=True)], {}) is None  # no backward
    # a part that unbinds a name and binds it again: its place in the order is not a merge's
    assert _segments(body(1)[:-1] + [op("del", "h1"), op("relu", "x", out="h1"), op("sum", "h1", out="s"),
                                      op("backward", "s"), op("del", "s")], {}) is None


def test_a_failing_forward_after_the_update_leaves_the_state_and_gives_the_cold_error():
    """The second request's update runs (recorded), then its grad-mode part fails: the update is undone, the whole
    list's cold run gives the error at its index."""
    lists = loop(sgd, 3)
    tw = Twins([], PlanCache(record_after=2))
    tw.run(lists[0])
    k = len(sgd(1)) + 2
    bad = lists[1][:k] + [op("add", "x", "w1", out="oops")] + lists[1][k:]  # (16, 3) + (8, 3)
    failed = tw.run(bad)
    assert (failed.name, failed.reason) == ("fallback", "segments")
    # the same request as sent next: the state was left as it was (the update's plan, recorded before the failure,
    # kept: both parts replay, and the next request fuses them)
    assert routes_of(tw, lists[1:]) == [("replayed", "segments"), ("recorded", "segments_fused")]


#: the routes of ``test_an_index_out_of_range_gives_the_cold_error_and_state``'s requests
EMBEDDING_ROUTES = [("cold", "first_sighting"), ("recorded", "segments"), ("replayed", "segments"),
                    ("recorded", "segments_fused"), ("replayed", "plan_hit")]


@pytest.mark.parametrize("at", [2, 3, 5])
def test_an_index_out_of_range_gives_the_cold_error_and_state(at):
    """A kernel that raises (an index out of range, known from the values only: the structure is the loop's) in
    the grad-mode part, after the update ran: in segments (2: a replay's guard, after the update's part replayed),
    in the run that fuses them (3: the whole list recording) or in the whole list's plan (5: its guard). The update
    is put back, the error and the session are the cold run's, and the same request sent next goes on as the loop
    would have (the fusing run that failed fuses then)."""
    rng = np.random.default_rng(3)
    made = [T("w", rng.standard_normal((5, 3)).tolist(), requires_grad=True), T("i", [0, 2, 4]),
            T("shift", [0]), op("zeros_like", "w", out="buf", no_grad=True)]

    def request(k: int) -> list:
        head = [op("mul_", "buf", 0.9, no_grad=True), op("add_", "buf", f"g{k - 1}", no_grad=True),
                op("add_", "w", "buf", alpha=-0.1, no_grad=True), op("add_", "i", "shift", no_grad=True),
                op("zero_grad", ["w"], set_to_none=True)] if k else []
        return head + [op("embedding", "i", "w", out=f"e{k}"), op("sum", f"e{k}", out=f"l{k}"),
                       op("backward", f"l{k}"), op("bind", "w.grad", out=f"g{k}")] + \
            [op("del", f"e{k}", *([f"g{k - 1}", f"l{k - 1}"] if k else []))]
    tw = Twins(made, PlanCache(record_after=2))
    # (the first request plans whole: no update in it, its first sighting; the second, a training step, records its
    # segments, the third replays them, the fourth records the whole list)
    assert routes_of(tw, [request(k) for k in range(at)]) == EMBEDDING_ROUTES[:at]
    tw.run([op("fill_", "shift", 9, no_grad=True)])  # i + 9: out of range for 5 rows
    failed = tw.run(request(at))
    assert (failed.name, failed.reason) == {2: ("fallback", "segments"), 3: ("recorded", "segments_fused"),
                                            5: ("fallback", "kernel_raised")}[at]
    assert tw.cache.fallbacks == (at != 3)
    tw.run([op("fill_", "shift", 0, no_grad=True)])
    assert routes_of(tw, [request(at)]) == [EMBEDDING_ROUTES[min(at, 4)]]


def test_names_keep_their_places():
    """A part that rebinds a session name keeps its place; new names come last, in the order bound; names the
    tail unbinds go (the session's order, compared, is the cold run's)."""
    tw = Twins(setup(), PlanCache(record_after=2))
    for i in range(4):
        tw.run([op("add_", "w1", 0.0, no_grad=True), op("mul", "x", 2.0, out="x2", no_grad=True),
                *body(i)[1:-1], op("relu", "y", out="y"), op("del", f"h{i}"), op("del", f"g{i - 1}_w1", "x2")])


@pytest.mark.parametrize("max_bytes", range(2300, 2900, 25))
def test_a_limit_the_whole_list_meets_is_the_cold_run_s_error(max_bytes):
    """The parts' own runs count only their tensors: a list whose whole run would pass the session's bytes runs
    whole, cold, and gives that error (the state as it was): for every bound between none passing and all
    passing, each request gives what the cold run gives."""
    limits = E.Limits(max_bytes=max_bytes)
    a, b = E.State(), E.State()
    cache = PlanCache(record_after=2)
    for ops in loop(sgd, 4):
        got = []
        for state, run in ((a, lambda s, o: E.run_program(s, o, limits=limits)),
                           (b, lambda s, o: E.dispatch(cache, s, o, session=True, limits=limits)[0])):
            try:
                run(state, ops)
                got.append(("ok", list(state.tensors), state.held_bytes))
            except E.EngineError as e:
                got.append(("error", e.code, e.message, e.op_index, list(state.tensors), state.held_bytes))
        assert got[0] == got[1]


def test_the_limits_checked_range_meets_errors_and_passes():
    """(the range above is not empty on either side: some bound fails a request, some passes them all)"""
    outcomes = set()
    for max_bytes in (2400, 2875):
        state = E.State()
        try:
            for ops in loop(sgd, 4):
                E.run_program(state, ops, limits=E.Limits(max_bytes=max_bytes))
            outcomes.add("ok")
        except E.EngineError:
            outcomes.add("error")
    assert outcomes == {"ok", "error"}


def test_a_list_that_plans_whole_is_not_cut():
    """A forward and backward on fresh tensors, sent again and again (no update: no training step): its whole
    list plans, as before segments."""
    rng = np.random.default_rng(5)
    tw = Twins([], PlanCache(record_after=2))
    lists = [[T("w", rng.standard_normal(3).tolist(), requires_grad=True), T("x", rng.standard_normal(3).tolist()),
              op("mul", "w", "x", out="y"), op("sum", "y", out="s"), op("backward", "s"), op("del", "y")]
             for _ in range(5)]
    routes = routes_of(tw, lists)
    assert all(reason != "segments" for _, reason in routes) and routes[-1] == ("replayed", "plan_hit"), routes


def test_without_segments_the_loop_plans_whole():
    tw = Twins([], PlanCache(record_after=2, segments=False))
    routes = routes_of(tw, loop(sgd, 4))
    assert routes[1:] == [("recorded", "training_step"), ("replayed", "plan_hit"), ("replayed", "plan_hit")]


def test_a_segment_whose_tensors_alias_others_plans_whole():
    """A session name that aliases a part's tensor (the same tensor under another name, which the list never
    names): the list is not cut, it plans whole as before."""
    lists = loop(sgd, 5)
    tw = Twins(lists[0] + [op("bind", "w1", out="alias")], PlanCache(record_after=2))
    routes = routes_of(tw, lists[1:])
    assert all(reason != "segments" for _, reason in routes) and routes[-1] == ("replayed", "plan_hit"), routes


@pytest.mark.parametrize("entries", [1, 2, 3])
def test_a_small_cache_evicts_and_stays_exact(entries):
    """Segment plans, the fuse marker and the whole list's plan are entries of one table, bounded as plans are:
    with room for fewer than the loop needs, entries are evicted and every run is still the cold run's."""
    tw = Twins([], PlanCache(record_after=2, max_entries=entries))
    routes_of(tw, loop(adam, 8))
    assert len(tw.cache) <= entries


def test_a_failure_after_a_part_that_wrote_a_session_tensor_puts_it_back():
    """The grad-mode part writes a session tensor in place (a count kept beside the model) and the op after it
    fails: the count, the update before it and everything else are as they were, and the error is the cold
    run's."""
    rng = np.random.default_rng(7)
    made = [T("w", rng.standard_normal((4, 3)).tolist(), requires_grad=True),
            T("x", rng.standard_normal((6, 4)).tolist()), T("rm", [0.0] * 3), T("rv", [1.0, 2.0, 3.0]),
            op("zeros_like", "w", out="buf", no_grad=True)]

    def request(k: int, bad: bool = False) -> list:
        head = [op("add_", "buf", f"g{k - 1}", no_grad=True), op("add_", "w", "buf", alpha=-0.1, no_grad=True),
                op("zero_grad", ["w"], set_to_none=True)] if k else []
        tail = [op("add", "x", "w", out="oops")] if bad else []  # (6, 4) + (4, 3)
        return head + [op("matmul", "x", "w", out=f"h{k}"), op("add_", "rm", 1.0),
                       op("mul", f"h{k}", "rv", out=f"n{k}"), op("sum", f"n{k}", out=f"l{k}"),
                       op("backward", f"l{k}"), op("bind", "w.grad", out=f"g{k}"),
                       *tail, op("del", f"h{k}", f"n{k}", *([f"g{k - 1}", f"l{k - 1}"] if k else []))]
    tw = Twins(made, PlanCache(record_after=2))
    routes = routes_of(tw, [request(k) for k in range(3)])
    assert routes[-1] == ("replayed", "segments"), routes
    failed = tw.run(request(3, bad=True))
    assert (failed.name, failed.reason) == ("fallback", "segments")
    assert routes_of(tw, [request(3), request(4)]) == [("recorded", "segments_fused"), ("replayed", "plan_hit")]


def _accounted(cache: PlanCache) -> bool:
    return cache.bytes == sum(cache._sizes.values()) + sum(cache._fsizes.values())


@pytest.mark.parametrize("update", ["sgd", "adam"])
def test_the_fusing_run_replaces_the_marker_with_the_whole_list_s_plan(update):
    """Once every part replayed, the whole list's key holds the fuse marker (a few bytes, counted); the next run
    records the whole list's plan in its place (under that key, or under its pinned floats' key, the marker
    replaced by the pins: the bytes counted, the marker's given back), and later runs replay that plan: what each
    leaves is the cold run's."""
    lists = loop(sgd if update == "sgd" else adam, 6)
    tw = Twins([], PlanCache(record_after=2))
    routes_of(tw, lists[:3])
    (key,) = [k for k, e in tw.cache._entries.items() if e is _FUSE]
    assert _accounted(tw.cache)
    before, sizes = tw.cache.bytes, dict(tw.cache._sizes)
    assert routes_of(tw, lists[3:4]) == [("recorded", "segments_fused")]
    assert _FUSE not in tw.cache._entries.values() and _accounted(tw.cache)
    made = [k for k in tw.cache._sizes if k not in sizes]
    plans = [tw.cache._entries[k] for k in [key, *made] if isinstance(tw.cache._entries[k], Plan)]
    assert len(plans) == 1
    assert tw.cache.bytes == before - sizes[key] + tw.cache._sizes[key] + sum(tw.cache._sizes[k] for k in made)
    assert routes_of(tw, lists[4:]) == [("replayed", "plan_hit")] * 2
    assert tw.cache.hits >= 2
