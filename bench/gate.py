"""Speed gate: this tree's engine against another tree's (issue #22: "no workload more than 5% slower cold or 3%
slower replayed than before the redesign"), measured pair by pair on bench/engine.py's workloads, bench/functional.py's
(``f-`` rows: cold, and through the session's plan) and bench/norepeat.py's one-shot lists (``nr-`` rows: cold).

Timing whole processes cannot resolve a 20 us replay: start-up, imports and set-up cost seconds and vary by more
than the figure. So each tree gets one long-lived worker process (its own Python, its own ``bench/engine.py`` and
engine), which sets a workload up once and then times one column on request; the driver asks the two workers in
turn, A B B A A B ..., so only one of them runs at any time, a drift of the machine's speed hits both alike, and
each round gives one ratio A/B. Both workers are moved to the same processor for a round, each processor in
turn: a worker left where the scheduler put it can sit for the whole run on a processor another process keeps
busy (the numpy column, the same code in both, read 0.64 so). The rounds are spread over ``--spawns`` pairs of
fresh workers: a process can also be a few per cent slower than another for the whole of its life (where its
arrays fell in memory: numpy's column again, 1.06 with every round on one processor). A round's figure is the
minimum of ``--repeat`` timed calls (batches of calls for the microsecond workloads, as bench/engine.py times
them), their untimed preparation (the op list's fresh input arrays, a fresh plan cache for "cold") outside the
timed region. The report is the median and range of the per-round ratios, and each side's minimum over rounds.

The numpy and torch columns run the same code in both trees: their ratios show the noise level of the run.

    python bench/gate.py --vs ../other-tree                     # every workload and column, 7 rounds
    python bench/gate.py --vs ../other --only scalar --cols replayed --rounds 21
    python bench/gate.py --vs ../other --vs-python ../other/.venv/bin/python

``--vs`` is the other tree's root (its ``bench/engine.py`` is imported as it is: it need not have this file);
``--vs-python`` its interpreter (default: this one). The worker loads ``<root>/bench/engine.py``, which puts its own
tree first on ``sys.path``; the first lines printed say which engine each side imported.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

COLUMNS = ("direct", "cold", "replayed", "numpy", "torch")
#: bench/functional.py's workloads (issue #22: "bench/functional.py ... unchanged or better"), by key: its
#: workload's name (``WORKLOADS``), or None for its repeat loop. Their "cold" column is ``run_program`` on the
#: session's state (functional.py's "engine"), "replayed" the session's plan (its "planned"); no other column.
FUNCTIONAL = {
    "f-jac-rev": "jacobian 100->100 tanh, vectorize, reverse-mode",
    "f-jac-fwd": "jacobian 100->100 tanh, vectorize, forward-mode",
    "f-hessian": "hessian, 50 parameters (vectorize)",
    "f-hvp": "hvp, 50 parameters",
    "f-euler": None,
}

#: bench/norepeat.py's one-shot lists of ``NOREPEAT_OPS`` ops (issue #22: "bench/norepeat.py ... unchanged or
#: better"), by key: its list maker. One column, "cold": the list's first run as ``/v1/eval`` runs it (a fresh
#: ``PlanCache(record_after=2)``: composition tried, given up, the list run op by op).
NOREPEAT = {"nr-chain": "chain", "nr-mixed": "mixed", "nr-shapes": "shapes"}
NOREPEAT_OPS = 200


def _load_bench(root: Path, name: str):
    """``<root>/bench/<name>.py`` as a module of its own (engine.py, functional.py and norepeat.py put their own
    tree first on sys.path and import its engine)."""
    spec = importlib.util.spec_from_file_location(f"{name}_bench", root / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _functional_columns(F, key: str) -> dict:
    """A bench/functional.py workload's columns: its op on a session state holding the functions, run cold and
    through the session's plan cache (its first run records); the repeat loop as functional.py runs it."""
    import numpy as np  # (here: the worker has set OPENBLAS_NUM_THREADS)

    E = F.E
    cache = F.PlanCache()
    name = FUNCTIONAL[key]
    if name is not None:
        st = F.engine_state()
        ops = [F.WORKLOADS[name]]
        cols = {"cold": lambda: E.run_program(st, ops), "replayed": lambda: F.run_session_planned(cache, st, ops)}
    else:  # (the repeat workload's list from this tree's bench/euler.py, plain data: the other tree may predate it)
        euler = _load_bench(Path(__file__).resolve().parents[1], "euler")
        y0, step, n = np.random.default_rng(0).standard_normal(10), euler.STEP, euler.REPEAT

        def fresh():
            s = E.State()
            E.run_program(s, euler.state_ops(y0, np.zeros(1)))
            return s
        cols = {"cold": lambda: E.run_program(fresh(), step, repeat=n),
                "replayed": lambda: F.run_session_planned(cache, fresh(), step, repeat=n)}
    cols["replayed"]()  # records the plan
    return cols


def _norepeat_columns(N, key: str) -> dict:
    """A bench/norepeat.py list's "cold" column: a fresh list and plan cache each run, made untimed."""
    E = N.E
    limits = E.Limits()
    make = getattr(N, NOREPEAT[key])
    fresh: list = []

    def cold():
        ops, cache = fresh.pop() if fresh else (make(NOREPEAT_OPS), N.PlanCache(record_after=2))
        return N.run_planned(cache, E.State(), ops, limits=limits, control=E.Control(3600.0), respond="all",
                             extra=("json",))
    cold.prepare = lambda: fresh.append((make(NOREPEAT_OPS), N.PlanCache(record_after=2)))
    return {"cold": cold}


def worker(root: Path) -> None:
    """Serve timing requests on stdin, one JSON object a line: {"workload", "column", "repeat"} -> seconds."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    B = _load_bench(root, "engine")
    B.configure_malloc(B.Settings())
    specs = {key: (make, measure) for key, _name, make, _vs, _target, measure in B.SPECS}
    current = None  # (key, {column: callable}, undo_gc, timer)
    F = N = None  # bench/functional.py and bench/norepeat.py, loaded for their workloads

    def batched(fn, _quick):  # (a functional workload: batches of 20 calls, timed as _measure sets the timer)
        return B.timeit_batched(fn, 5, 20)
    out = sys.stdout
    print(json.dumps({"engine": B.E.__file__}), file=out, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        key, column, repeat = req["workload"], req["column"], req["repeat"]
        if current is None or current[0] != key:
            if current is not None:
                current[2]()
                current = None
                gc.collect()
            if key in FUNCTIONAL:
                if F is None:
                    F = _load_bench(root, "functional")
                cols, measure = _functional_columns(F, key), batched
            elif key in NOREPEAT:
                if N is None:
                    N = _load_bench(root, "norepeat")
                cols, measure = _norepeat_columns(N, key), lambda fn, _quick: B.timeit(fn, 5)
            else:
                make, measure = specs[key]
                eng, prog, npy, tor = make()
                prog.replayed()  # records the plan
                cols = {"direct": eng, "cold": prog.cold, "replayed": prog.replayed, "numpy": npy, "torch": tor}
            undo_gc = B.configure_gc()
            current = (key, cols, undo_gc, measure)
        fn = current[1].get(column)
        if fn is None:
            print(json.dumps({"seconds": None}), file=out, flush=True)
            continue
        seconds = _measure(B, current[3], fn, repeat)
        print(json.dumps({"seconds": seconds}), file=out, flush=True)


def _measure(B, measure, fn, repeat: int) -> float:
    """bench/engine.py's timer for the workload (batches of calls for the microsecond ones), with ``repeat``
    timed calls after one warm-up, their minimum taken instead of the median: on a shared machine another
    process's work only ever adds time, so the least disturbed call is the truest figure."""
    saved = B.timeit

    def timeit(f, _repeat, warmup=2):
        prepare = getattr(f, "prepare", None)
        best = float("inf")
        for i in range(1 + repeat):
            if prepare is not None:
                prepare()
            t0 = time.perf_counter()
            f()
            if i:
                best = min(best, time.perf_counter() - t0)
        return best
    B.timeit = timeit
    try:
        return measure(fn, True)
    finally:
        B.timeit = saved


class Worker:
    def __init__(self, python: str, root: Path):
        self.proc = subprocess.Popen([python, str(Path(__file__).resolve()), "--worker", str(root)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.engine = json.loads(self.proc.stdout.readline())["engine"]

    def time(self, workload: str, column: str, repeat: int):
        self.proc.stdin.write(json.dumps({"workload": workload, "column": column, "repeat": repeat}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"worker for {self.engine} died")
        return json.loads(line)["seconds"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def fmt(t):
    if t is None:
        return "-"
    return f"{t * 1e6:.1f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.2f} s"


def main() -> None:
    here = Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--vs", help="the other tree's root (B)")
    ap.add_argument("--vs-python", default=sys.executable, help="B's interpreter")
    ap.add_argument("--python", default=sys.executable, help="A's interpreter (A is this tree)")
    ap.add_argument("--only", default="", help="comma-separated workload keys (bench/engine.py's)")
    ap.add_argument("--cols", default=",".join(COLUMNS), help="comma-separated columns: " + ",".join(COLUMNS))
    ap.add_argument("--rounds", type=int, default=7, help="A/B pairs per cell")
    ap.add_argument("--repeat", type=int, default=3, help="timed calls (or batches) per round and side")
    ap.add_argument("--spawns", type=int, default=3, help="pairs of worker processes the rounds are spread over")
    opts = ap.parse_args()
    if opts.worker:
        return worker(Path(opts.worker))
    if not opts.vs:
        ap.error("--vs is required")
    cpus = sorted(os.sched_getaffinity(0))
    keys = [k for k in (*_spec_keys(), *FUNCTIONAL, *NOREPEAT) if not opts.only or k in opts.only.split(",")]
    cols = [c for c in opts.cols.split(",") if c]
    cells = {(k, c): ([], [], []) for k in keys for c in cols}  # (A times, B times, ratios)
    print(f"{opts.rounds} rounds a cell (A B, then B A, alternately) x {opts.repeat} calls a side, over "
          f"{opts.spawns} pairs of worker processes; ratio A/B of the rounds' minima: median (min-max) over rounds; "
          "A, B: minimum over rounds", flush=True)
    for spawn in range(opts.spawns):
        a, b = Worker(opts.python, here), Worker(opts.vs_python, Path(opts.vs).resolve())
        if not spawn:
            print(f"A: {a.engine}\nB: {b.engine}", flush=True)
        lo, hi = opts.rounds * spawn // opts.spawns, opts.rounds * (spawn + 1) // opts.spawns
        try:
            for key in keys:
                for col in cols:
                    ta, tb, ratios = cells[key, col]
                    for r in range(lo, hi):
                        order = (a, b) if r % 2 == 0 else (b, a)
                        cpu = {cpus[(r // 2) % len(cpus)]}  # (both on one processor, each processor in turn)
                        for w in order:
                            os.sched_setaffinity(w.proc.pid, cpu)
                        got = {id(w): w.time(key, col, opts.repeat) for w in order}
                        x, y = got[id(a)], got[id(b)]
                        if x is None or y is None:
                            break
                        ta.append(x)
                        tb.append(y)
                        ratios.append(x / y)
                    if spawn == opts.spawns - 1:
                        print(f"  {key:10} {col:9} " + _cell(ta, tb, ratios, absolute=True), flush=True)
        finally:
            a.close()
            b.close()
    width = 22
    print("\n| workload   | " + " | ".join(f"{c:>{width}}" for c in cols) + " |")
    print("|------------|" + "|".join("-" * (width + 2) for _ in cols) + "|")
    for key in keys:
        print(f"| {key:10} | " + " | ".join(f"{_cell(*cells[key, c]):>{width}}" for c in cols) + " |")
    print("\nminimum times over the rounds, A / B")
    print("| workload   | " + " | ".join(f"{c:>{width}}" for c in cols) + " |")
    print("|------------|" + "|".join("-" * (width + 2) for _ in cols) + "|")
    for key in keys:
        print(f"| {key:10} | " + " | ".join(f"{_times(*cells[key, c]):>{width}}" for c in cols) + " |")


def _cell(ta, tb, ratios, absolute=False) -> str:
    if not ratios:
        return "-"
    s = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
    if absolute:
        s += f"  A {fmt(min(ta))}  B {fmt(min(tb))}"
    return s


def _times(ta, tb, _ratios) -> str:
    return f"{fmt(min(ta))} / {fmt(min(tb))}" if ta and tb else "-"


def _spec_keys():
    # bench/engine.py's SPECS keys, in its order (not imported here: the driver loads no engine)
    return ["scalar", "mlp64", "mlp1024", "scalar10k", "chain", "hvp", "lstm", "rk4"]


if __name__ == "__main__":
    main()
