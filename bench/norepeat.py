"""What a one-shot list whose op forms never repeat pays for the composition attempt (engine.trace.compose).

The first ``/v1/eval`` run of a list without a plan (``run_planned`` with a fresh ``PlanCache(record_after=2)``, as
the service sets it) tries to compose it from per-op fragments when it has at least ``compose._MIN_OPS`` ops; a
list whose forms never repeat gives up and runs cold. This prints that run's median time with composition on and
off (``PlanCache(..., fragment_entries=0)``), measured interleaved in one process, and their ratio, for lists of
100, 200 and 1,000 ops of two kinds: ``chain`` (a new literal each op: ``y_i = y_{i-1} * c_i`` on a 3-vector, a
sum and a backward), ``mixed`` (the same through four ops in turn, on inputs of a shape of their own each 25
ops) and ``shapes`` (one op written alike on inputs of a shape of their own each). The docs' figure for
composed runs is this table's ratio column: the median over runs of (on / off), each pair run back to back.

    python bench/norepeat.py            # 100 / 200 / 1,000 ops
    python bench/norepeat.py --quick    # fewer repeats
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gradserve_server.engine as E  # noqa: E402
from gradserve_server.app.config import Settings  # noqa: E402
from gradserve_server.app.memory import configure_gc, configure_malloc  # noqa: E402
from gradserve_server.engine.trace.cache import PlanCache
from gradserve_server.engine.trace.plan import run_planned  # noqa: E402


def chain(n: int) -> list:
    """``n`` ops (the input left out): ``n - 2`` muls by a literal of their own, a sum, a backward."""
    ops = [{"op": "tensor", "args": [E.Owned(np.array([1.5, -0.5, 0.25], dtype=np.float32))],
            "kwargs": {"requires_grad": True}, "out": "x"}]
    y = "x"
    for i in range(n - 2):
        ops.append({"op": "mul", "args": [y, 1.0 + i / 1024], "out": f"y{i}"})
        y = f"y{i}"
    return ops + [{"op": "sum", "args": [y], "out": "s"}, {"op": "backward", "args": ["s"]}]


def mixed(n: int) -> list:
    """``n`` ops (inputs left out): add, mul, sub, div by a literal of their own in turn, on a new input of another
    shape each 25 ops, a sum of each such part, a stack of the sums, their sum, a backward."""
    ops = []
    parts = []
    names = ("add", "mul", "sub", "div")
    count = i = 0
    y = None
    while count < n - 3:
        if i % 25 == 0 or count == n - 4:
            if y is not None:
                ops.append({"op": "sum", "args": [y], "out": f"p{len(parts)}"})
                parts.append(f"p{len(parts)}")
                count += 1
                if count == n - 3:
                    break
            ops.append({"op": "tensor", "args": [E.Owned(np.full(len(parts) + 2, 0.5, dtype=np.float32))],
                        "kwargs": {"requires_grad": True}, "out": f"x{len(parts)}"})
            y = f"x{len(parts)}"
        ops.append({"op": names[i % 4], "args": [y, 1.0 + i / 1024], "out": f"y{i}"})
        y = f"y{i}"
        count += 1
        i += 1
    ops.append({"op": "stack", "args": [parts], "out": "ps"})
    ops.append({"op": "sum", "args": ["ps"], "out": "s"})
    ops.append({"op": "backward", "args": ["s"]})
    return ops


def shapes(n: int) -> list:
    """``n`` ops (inputs left out): ``x_i * 2.0`` on inputs of a shape of their own each, then the sums of the
    first quarter of the products stacked, a sum, a backward: the same op written each time (names aside, the
    ops look alike), every op a form of its own."""
    ops = []
    m = (n - 3) * 4 // 5  # (m products, then the sums of the first n - 3 - m)
    for i in range(m):
        ops.append({"op": "tensor", "args": [E.Owned(np.full(i + 1, 0.5, dtype=np.float32))],
                    "kwargs": {"requires_grad": True}, "out": f"x{i}"})
        ops.append({"op": "mul", "args": [f"x{i}", 2.0], "out": f"y{i}"})
    sums = [f"s{i}" for i in range(n - 3 - m)]
    ops += [{"op": "sum", "args": [f"y{i}"], "out": s} for i, s in enumerate(sums)]
    ops.append({"op": "stack", "args": [sums], "out": "ps"})
    ops.append({"op": "sum", "args": ["ps"], "out": "s"})
    ops.append({"op": "backward", "args": ["s"]})
    return ops


def measure(make, n: int, repeat: int) -> tuple:
    """The first run of ``make(n)``, composition on and off, back to back (in turn which first): the median
    times, the median of each pair's ratio (on / off: steadier than the ratio of medians on a busy machine),
    and the on-run's cache counters (of its last run)."""
    limits = E.Limits()
    on, off, ratios = [], [], []
    stats = None
    for i in range(repeat + 3):
        pair = {}
        for mode in ((True, False) if i % 2 else (False, True)):
            ops = make(n)
            cache = PlanCache(record_after=2) if mode else PlanCache(record_after=2, fragment_entries=0)
            t0 = time.perf_counter()
            run_planned(cache, E.State(), ops, limits=limits, control=E.Control(3600.0), respond="all",
                        extra=("json",))
            pair[mode] = time.perf_counter() - t0
            if mode:
                stats = cache.stats()
        if i >= 3:
            on.append(pair[True])
            off.append(pair[False])
            ratios.append(pair[True] / pair[False])
    return statistics.median(on), statistics.median(off), statistics.median(ratios), stats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", default="100,200,1000")
    opts = ap.parse_args()
    print(f"{configure_malloc(Settings())} (the server's: app.memory.configure_malloc)\n", flush=True)
    undo = configure_gc()
    print("| list | ops | compose off | compose on | on/off | misses | uncomposable |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, make in (("chain", chain), ("mixed", mixed), ("shapes", shapes)):
        for n in map(int, opts.sizes.split(",")):
            repeat = max(31, (20000 if not opts.quick else 4000) // n)
            t_on, t_off, ratio, st = measure(make, n, repeat)
            print(f"| {name} | {n} | {t_off * 1e3:.3f} ms | {t_on * 1e3:.3f} ms | {ratio:.3f} | "
                  f"{st['fragment_misses']} | {st['uncomposable']} |", flush=True)
    undo()


if __name__ == "__main__":
    main()
