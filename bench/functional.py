"""torch.autograd.functional benchmark: the transform actions run through the engine (``run_program`` on a
state that holds the function definition) against torch eager when importable; median time and ratio.

    python bench/functional.py            # full run
    python bench/functional.py --quick    # fewer repeats

Workloads (issue 12): the Jacobian of a 100->100 tanh layer by ``vectorize=True`` with the reverse and the
forward strategy, the Hessian of a 50-parameter function, and a Hessian-vector product. Target: each at most
1.5x torch eager. Single-threaded, as bench/engine.py (torch pinned to one thread, OpenBLAS to one).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads OpenBLAS

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gradserve_server.engine as E  # noqa: E402
from bench import euler  # noqa: E402  (the repeat workload, as data)
from bench.engine import timeit, torch  # noqa: E402  (the same timer; torch pinned to one thread, or None)
from gradserve_server.app.memory import configure_gc  # noqa: E402
from gradserve_server.engine.trace.cache import PlanCache
from gradserve_server.engine.trace.plan import run_session_planned  # noqa: E402

RNG = np.random.default_rng(0)
W = RNG.standard_normal((100, 100)) / 10
B = RNG.standard_normal(100)
X = RNG.standard_normal(100)
P = RNG.standard_normal(50)
A = RNG.standard_normal((50, 50)) / 7
V = RNG.standard_normal(50)

_lit = euler.float64_tensor


def engine_state() -> E.State:
    """layer(x) = tanh(W x + b); energy(p) = sum(log(cosh(A p))) + sum(p^4) / 4 (a 50-parameter scalar)."""
    st = E.State()
    E.run_program(st, [
        _lit("W", W), _lit("b", B), _lit("x", X), _lit("A", A), _lit("p", P), _lit("v", V),
        {"op": "function", "out": "layer", "kwargs": {"inputs": ["u"], "outputs": "y", "ops": [
            {"op": "matmul", "args": ["W", "u"], "out": "h"}, {"op": "add", "args": ["h", "b"], "out": "h2"},
            {"op": "tanh", "args": ["h2"], "out": "y"}]}},
        {"op": "function", "out": "energy", "kwargs": {"inputs": ["q"], "outputs": "e", "ops": [
            {"op": "matmul", "args": ["A", "q"], "out": "aq"}, {"op": "cosh", "args": ["aq"], "out": "c"},
            {"op": "log", "args": ["c"], "out": "lc"}, {"op": "sum", "args": ["lc"], "out": "s1"},
            {"op": "pow", "args": ["q", 4], "out": "q4"}, {"op": "sum", "args": ["q4"], "out": "s2"},
            {"op": "div", "args": ["s2", 4.0], "out": "s3"}, {"op": "add", "args": ["s1", "s3"], "out": "e"}]}},
    ])
    return st


WORKLOADS = {
    "jacobian 100->100 tanh, vectorize, reverse-mode":
        {"op": "jacobian", "args": ["layer", "x"], "kwargs": {"vectorize": True}, "out": "J"},
    "jacobian 100->100 tanh, vectorize, forward-mode":
        {"op": "jacobian", "args": ["layer", "x"], "kwargs": {"vectorize": True, "strategy": "forward-mode"},
         "out": "J"},
    "hessian, 50 parameters (vectorize)":
        {"op": "hessian", "args": ["energy", "p"], "kwargs": {"vectorize": True}, "out": "H"},
    "hvp, 50 parameters":
        {"op": "hvp", "args": ["energy", "p", "v"], "out": ["e", "Hv"]},
}


def torch_workloads():
    Wt, Bt, Xt, At, Pt, Vt = (torch.tensor(a) for a in (W, B, X, A, P, V))
    F = torch.autograd.functional

    def layer(u):
        return torch.tanh(Wt @ u + Bt)

    def energy(q):
        return torch.log(torch.cosh(At @ q)).sum() + (q ** 4).sum() / 4

    return {
        "jacobian 100->100 tanh, vectorize, reverse-mode": lambda: F.jacobian(layer, Xt, vectorize=True),
        "jacobian 100->100 tanh, vectorize, forward-mode":
            lambda: F.jacobian(layer, Xt, vectorize=True, strategy="forward-mode"),
        "hessian, 50 parameters (vectorize)": lambda: F.hessian(energy, Pt, vectorize=True),
        "hvp, 50 parameters": lambda: F.hvp(energy, Pt, Vt),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    repeat = 7 if args.quick else 31
    st = engine_state()
    tw = torch_workloads() if torch is not None else {}
    # check the values agree before timing
    for name, op in WORKLOADS.items():
        E.run_program(st, [op])
        if name in tw:
            ours = st.tensors[op["out"] if isinstance(op["out"], str) else op["out"][1]].data
            theirs = tw[name]()
            theirs = (theirs[1] if isinstance(theirs, tuple) else theirs).detach().numpy()
            np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)
    configure_gc()  # the server's collector settings (app.memory), kept until the process ends
    cache = PlanCache()
    print(f"{'workload':<50} {'engine ms':>10} {'planned ms':>10} {'torch ms':>10} {'ratio':>7} {'planned':>8}")
    for name, op in WORKLOADS.items():
        ops = [op]
        t_eng = timeit(lambda ops=ops: E.run_program(st, ops), repeat)
        # the session's plan (engine.trace.plan.run_session_planned: a replay when the list plans, else cold)
        t_pl = timeit(lambda ops=ops: run_session_planned(cache, st, ops), repeat)
        if name in tw:
            t_tor = timeit(tw[name], repeat)
            print(f"{name:<50} {t_eng * 1e3:>10.3f} {t_pl * 1e3:>10.3f} {t_tor * 1e3:>10.3f} {t_eng / t_tor:>6.2f}x "
                  f"{t_pl / t_tor:>7.2f}x")
        else:
            print(f"{name:<50} {t_eng * 1e3:>10.3f} {t_pl * 1e3:>10.3f} {'-':>10} {'-':>7} {'-':>8}")
    # a `repeat` loop of a session list without a graph (an explicit Euler step of dy/dt = -y^3 + sin(t) on a
    # 10-dimensional state, 200 steps): every iteration replays the plan the first recorded
    y0 = RNG.standard_normal(10)
    step, n = euler.STEP, euler.REPEAT

    def fresh():
        s = E.State()
        E.run_program(s, euler.state_ops(y0, np.zeros(1)))
        return s
    t_cold = timeit(lambda: E.run_program(fresh(), step, repeat=n), repeat)
    t_rep = timeit(lambda: run_session_planned(cache, fresh(), step, repeat=n), repeat)
    a, b = fresh(), fresh()
    E.run_program(a, step, repeat=n)
    run_session_planned(cache, b, step, repeat=n)
    assert a.tensors["y"].data.tobytes() == b.tensors["y"].data.tobytes()
    line = f"{'repeat 200 of an Euler step (10-dim)':<50} {t_cold * 1e3:>10.3f} {t_rep * 1e3:>10.3f}"
    if torch is not None:
        def tor():
            y, t = torch.tensor(y0), torch.zeros(1, dtype=torch.float64)
            for _ in range(200):
                y, t = y + (torch.sin(t) - y ** 3) * 0.01, t + 0.01
            return y
        t_tor = timeit(tor, repeat)
        line += f" {t_tor * 1e3:>10.3f} {t_cold / t_tor:>6.2f}x {t_rep / t_tor:>7.2f}x"
    print(line)
    print(f"plans: {cache.stats()}")


if __name__ == "__main__":
    main()
