"""The plan cache's bytes are the bytes its plans really hold, and evicting them gives those bytes back
(issue 27): measured with tracemalloc around real recorded plans."""

from __future__ import annotations

import gc
import tracemalloc

from gradserve_server import engine
from gradserve_server.engine.trace.cache import PlanCache, PlanCaches
from gradserve_server.engine.trace.plan import run_planned

LIMITS = engine.Limits(max_elements_per_tensor=4_000_000, max_bytes=256 << 20, max_response_bytes=128 << 20)


def structure(k: int) -> list[dict]:
    return [{"op": "tensor", "out": "w", "args": [[[0.5, -1.0], [2.0, 0.25]]], "kwargs": {"requires_grad": True}},
            {"op": "tanh", "out": "h", "args": ["w"]},
            *[{"op": "mul", "out": "h", "args": ["h", 1.0 + i / 100]} for i in range(k)],
            {"op": "sum", "out": "s", "args": ["h"]}, {"op": "backward", "args": ["s"]}]


def fill(cache: PlanCache, n: int) -> None:
    """``n`` plans, each recorded and replayed once (a replay leaves its register set to the next)."""
    for k in range(n):
        for _ in range(2):
            run_planned(cache, engine.State(), structure(10 + k), limits=LIMITS, respond="all")


def test_the_bytes_counted_are_the_bytes_held_and_eviction_returns_them():
    # (in a fresh interpreter: what the process's memos hold after the earlier tests of a worker varies, and a
    # measure of what eviction gives back must not depend on it)
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = "from tests.engine.test_plan_memory import measure_bytes_held; measure_bytes_held()"
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]


def measure_bytes_held() -> None:
    """The cache's bytes against tracemalloc's around twelve recorded plans, and what evicting them gives back."""
    cache = PlanCache(max_entries=10_000, max_bytes=1 << 40, record_after=1, fragment_entries=0)
    fill(cache, 12)  # warm: the process's own small memos (of constants' keys) fill once, then stay
    while cache.evict_oldest():
        pass
    gc.collect()
    gc.disable()
    try:
        tracemalloc.start()
        start = tracemalloc.get_traced_memory()[0]
        fill(cache, 12)
        gc.collect()  # the runs' own garbage (graphs with cycles): what is left is what the cache holds
        held = tracemalloc.get_traced_memory()[0] - start
        counted = cache.bytes
        assert 0.75 * held <= counted <= 1.25 * held, (counted, held)  # 2.2x under before the fix
        while cache.evict_oldest():
            pass
        gc.collect()
        assert cache.bytes == 0 and tracemalloc.get_traced_memory()[0] - start < 0.15 * held
    finally:
        tracemalloc.stop()
        gc.enable()


def test_a_partition_that_floods_the_bound_evicts_its_own_plans_first():
    caches = PlanCaches(partitions=4, max_entries=1000, max_bytes=2 << 20, record_after=1, fragment_entries=0)
    quiet, noisy = caches.of("key:a"), caches.of("key:b")
    fill(quiet, 3)
    kept = len(quiet)
    fill(noisy, 120)
    assert len(quiet) == kept and caches.stats()["bytes"] <= 2 << 20
    assert caches.stats()["evictions"] > 0 and caches.stats()["partitions"] == 2
    for name in ("key:c", "key:d", "key:e"):  # a fifth partition drops the least recently used whole
        caches.of(name)
    assert caches.stats()["partitions"] == 4 and caches.of("key:a") is not quiet
