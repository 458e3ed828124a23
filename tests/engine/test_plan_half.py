"""Plans cover float16/bfloat16 programs: every op sample of ``samples.py`` run in each type (its floating inputs
rounded to it) gives the same results, reports and errors cold and replayed, on the recorded values and on
others; a half kernel's plan step runs it in float32 and rounds once, as the eager path does."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gradserve_server.engine.tensor import Tensor
from gradserve_server.engine.trace.cache import PlanCache
from gradserve_server.engine.trace.plan import Plan

from .samples import SAMPLES, Sample
from .test_plan import (
    PLANNED_OPS,
    PROGRAMS,
    _cases,
    _program,
    both_ways,
    draws,
    observe,
    planned,
    tape_mode,  # noqa: F401 - a fixture
)

HALF = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def _half_sample(sample: Sample, npdt: np.dtype) -> Sample | None:
    """The sample with its floating tensors rounded to ``npdt`` (None: it has none)."""
    found = []

    def conv(v):
        if isinstance(v, Tensor) and v.data.dtype.kind == "f":
            found.append(v)
            return Tensor(v.data.astype(np.float32).astype(npdt), requires_grad=v.requires_grad)
        if isinstance(v, list) and v and all(isinstance(x, Tensor) for x in v):
            return [conv(x) for x in v]
        return v
    args = tuple(conv(a) for a in sample.args)
    kwargs = {k: conv(v) for k, v in sample.kwargs.items()}
    return Sample(args, kwargs, gradgrad=sample.gradgrad) if found else None


def _perturbed(t):
    d = t.data
    if d.dtype not in HALF.values():
        return d
    rng = np.random.default_rng(d.size)
    return (d.astype(np.float32) * (1 + 0.05 * rng.standard_normal(d.shape)).astype(np.float32)).astype(d.dtype)


def _run_both_ways(name: str, sample: Sample, dtype: str):
    """(replayed at least once, routes): asserts cold == recorded == replayed, on two sets of values."""
    half = _half_sample(sample, HALF[dtype])
    if half is None:
        return None
    ops = _program(name, half, lambda t: t.data)
    cache, routes = PlanCache(), []
    a_cold, a_rec, _ = both_ways(ops, cache, routes)
    assert a_rec == a_cold
    b_cold, b_play, _ = both_ways(_program(name, half, _perturbed), cache, routes)
    assert b_play == b_cold  # replayed on other values
    assert observe(planned(cache, routes), ops) == a_cold
    entry = next(iter(cache._entries.values()), None)
    return isinstance(entry, Plan) and any(r.name == "replayed" for r in routes), routes


@pytest.mark.parametrize("dtype", list(HALF))
@pytest.mark.parametrize("name,sample", _cases())
def test_every_op_sample_in_half_precision_runs_the_same_cold_and_replayed(name, sample, dtype):
    _run_both_ways(name, sample, dtype)


@pytest.mark.parametrize("dtype", list(HALF))
def test_the_benchmark_ops_replay_in_half_precision_not_just_run_cold(dtype):
    """No ``half_precision`` route any more: the benchmark ops' half programs are planned and replayed."""
    cold = {}
    for name in PLANNED_OPS:
        results = [_run_both_ways(name, sample, dtype) for sample in SAMPLES.get(name, ())]
        results = [r for r in results if r is not None]
        if results and not any(replayed for replayed, _ in results):
            cold[name] = sorted({r.reason for _, routes in results for r in routes})
        assert all(r.reason != "half_precision" for _, routes in results for r in routes)
    assert not cold, cold


def _in(dtype: str, ops: list) -> list:
    """``ops`` with its float tensor ops (those without a dtype of their own) made in ``dtype``."""
    out = []
    for o in ops:
        if o["op"] == "tensor" and "dtype" not in o["kwargs"] and \
                any(isinstance(v, float) for v in np.ravel(np.asarray(o["args"][0], dtype=object))):
            o = {**o, "kwargs": {**o["kwargs"], "dtype": dtype}}
        out.append(o)
    return out


@pytest.mark.parametrize("dtype", list(HALF))
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_programs_in_half_precision_replay_bit_for_bit_on_new_values(name, dtype, tape_mode):  # noqa: F811
    r = draws(7)
    cache = PlanCache()
    results = []
    for _ in range(4):
        c, p, _ = both_ways(_in(dtype, PROGRAMS[name](r)), cache)
        assert p == c
        results.append(c[0])
    if results[0] == "ok":
        assert cache.misses == 1 and cache.hits == 3, cache.stats()
