"""Engine benchmark: median time per workload, its ratio to a hand-written numpy forward+backward of the
same computation (the practical floor) and to torch eager when torch is importable.

    python bench/engine.py            # full run
    python bench/engine.py --quick    # fewer repeats

Targets (issue #2): scalar <= 0.7x torch; MLP <= 1.15x numpy; 10k scalar ops <= 1.0x torch;
20-op elementwise chain over 1M values <= 1.15x numpy; Hessian-vector product <= 1.0x torch.

All three run single-threaded: torch is pinned to one thread, and OpenBLAS's worker threads (numpy's and so
the engine's matmuls) make timings erratic on small machines and penalise whoever calls BLAS less densely
(the threads go to sleep between calls). Set OPENBLAS_NUM_THREADS to override. Objects alive after set-up
(torch's and numpy's modules, the workloads' inputs) are moved out of the garbage collector's reach
(gc.freeze), so the engine's collections do not pay for traversing torch's heap.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads OpenBLAS

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine as E  # noqa: E402
from engine.ops import elementwise as EW  # noqa: E402
from engine.ops import linalg as LA
from engine.ops import nn as NN
from engine.ops import reduction as R
from engine.ops import shape as S

try:
    import torch
    import torch.nn.functional as TF
    torch.set_num_threads(1)
except ImportError:  # torch is not a dependency
    torch = None


def timeit(fn, repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def timeit_batched(fn, repeat: int, inner: int) -> float:
    """Median over ``repeat`` batches of ``inner`` calls (for microsecond workloads)."""
    def batch():
        for _ in range(inner):
            fn()
    return timeit(batch, repeat) / inner


# ----- 1. scalar y = w*x + b ---------------------------------------------------------------------------------
def scalar_workloads():
    w, x, b = (E.tensor(v, requires_grad=True) for v in (3.0, 2.0, 1.0))

    def eng():
        w.grad = x.grad = b.grad = None
        E.backward(w * x + b)

    wn, xn, bn = np.float32(3.0), np.float32(2.0), np.float32(1.0)

    def npy():
        y = wn * xn + bn
        g = np.float32(1.0)
        return y, g * xn, g * wn, g

    tor = None
    if torch is not None:
        tw, tx, tb = (torch.tensor(v, requires_grad=True) for v in (3.0, 2.0, 1.0))

        def tor():
            tw.grad = tx.grad = tb.grad = None
            (tw * tx + tb).backward()
    return eng, npy, tor


# ----- 2. MLP 784-256-256-10, relu, cross-entropy ------------------------------------------------------------------
def mlp_workloads(batch: int):
    rng = np.random.default_rng(0)
    dims = [784, 256, 256, 10]
    Ws = [(rng.standard_normal((dims[i], dims[i + 1])) * np.sqrt(2 / dims[i])).astype(np.float32) for i in range(3)]
    bs = [np.zeros(dims[i + 1], np.float32) for i in range(3)]
    X = rng.standard_normal((batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, batch)

    ew = [E.tensor(W, requires_grad=True) for W in Ws]
    eb = [E.tensor(b_, requires_grad=True) for b_ in bs]
    ex, ey = E.tensor(X), E.tensor(y)

    def eng():
        h = ex
        for i in range(3):
            h = LA.matmul(h, ew[i]) + eb[i]
            if i < 2:
                h = EW.relu(h)
        loss = NN.cross_entropy(h, ey)
        for p in ew + eb:
            p.grad = None
        E.backward(loss)

    def npy():
        acts = [X]
        pre = []
        h = X
        for i in range(3):
            z = h @ Ws[i] + bs[i]
            pre.append(z)
            h = np.maximum(z, 0) if i < 2 else z
            acts.append(h)
        m = h.max(axis=1, keepdims=True)
        e = np.exp(h - m)
        s = e.sum(axis=1, keepdims=True)
        logp = h - m - np.log(s)
        loss = -logp[np.arange(batch), y].mean()
        g = e / s
        g[np.arange(batch), y] -= 1
        g /= batch
        grads = []
        for i in (2, 1, 0):
            if i < 2:
                g = g * (pre[i] > 0)
            grads.append((acts[i].T @ g, g.sum(0)))
            if i:
                g = g @ Ws[i].T
        return loss, grads

    tor = None
    if torch is not None:
        tw = [torch.tensor(W, requires_grad=True) for W in Ws]
        tb = [torch.tensor(b_, requires_grad=True) for b_ in bs]
        tx, ty = torch.tensor(X), torch.tensor(y)

        def tor():
            h = tx
            for i in range(3):
                h = h @ tw[i] + tb[i]
                if i < 2:
                    h = torch.relu(h)
            loss = TF.cross_entropy(h, ty)
            for p in tw + tb:
                p.grad = None
            loss.backward()
    return eng, npy, tor


# ----- 3. 10,000 scalar ops -------------------------------------------------------------------------------------------
GROUPS = 1000  # 1000 groups x (4 softplus + 4 mul + stack + softmax + sum) + final stack/sum = 11,002 ops


def scalar_graph_workloads():
    rng = np.random.default_rng(1)
    vals = rng.standard_normal(GROUPS * 4).astype(np.float32)
    params = [E.tensor(float(v), requires_grad=True) for v in vals]

    def eng():
        outs = []
        for g in range(GROUPS):
            items = [EW.mul(EW.softplus(params[4 * g + j]), 0.5) for j in range(4)]
            outs.append(R.sum(NN.softmax(S.stack(items), 0) * EW.mul(items[0], 1.0)))
        total = R.sum(S.stack(outs))
        for p in params:
            p.grad = None
        E.backward(total)

    def npy():
        grads = np.zeros(GROUPS * 4, np.float32)
        total = np.float32(0)
        for g in range(GROUPS):
            v = vals[4 * g:4 * g + 4]
            sp = np.log1p(np.exp(v))
            a = sp * np.float32(0.5)
            e = np.exp(a - a.max())
            sm = e / e.sum()
            k = a[0] * np.float32(1.0)
            total += (sm * k).sum()
            gsm = np.full(4, k, np.float32)
            ga = sm * (gsm - (gsm * sm).sum())
            ga[0] += sm.sum()
            grads[4 * g:4 * g + 4] = ga * np.float32(0.5) / (np.float32(1) + np.exp(-v))
        return total, grads

    tor = None
    if torch is not None:
        tparams = [torch.tensor(float(v), requires_grad=True) for v in vals]

        def tor():
            outs = []
            for g in range(GROUPS):
                items = [TF.softplus(tparams[4 * g + j]) * 0.5 for j in range(4)]
                outs.append((torch.softmax(torch.stack(items), 0) * (items[0] * 1.0)).sum())
            total = torch.stack(outs).sum()
            for p in tparams:
                p.grad = None
            total.backward()
    return eng, npy, tor


# ----- 4. 20 elementwise ops over 1M float32 ----------------------------------------------------------------------
def chain_workloads():
    rng = np.random.default_rng(2)
    X = rng.standard_normal(1_000_000).astype(np.float32)
    ex = E.tensor(X, requires_grad=True)
    c1, c2 = np.float32(1.01), np.float32(0.1)

    def eng():
        h = ex
        for _ in range(5):
            h = EW.tanh(EW.add(EW.mul(EW.sin(h), 1.01), 0.1))
        ex.grad = None
        E.backward(R.sum(h))

    def npy():
        h = X
        saved = []
        for _ in range(5):
            s = np.sin(h)
            t = np.tanh(s * c1 + c2)
            saved.append((h, t))
            h = t
        total = h.sum()
        g = np.ones_like(X)
        for hin, t in reversed(saved):
            g = g * (np.float32(1) - t * t)
            g = g * c1
            g = g * np.cos(hin)
        return total, g

    tor = None
    if torch is not None:
        tx = torch.tensor(X, requires_grad=True)

        def tor():
            h = tx
            for _ in range(5):
                h = torch.tanh(torch.sin(h) * 1.01 + 0.1)
            tx.grad = None
            h.sum().backward()
    return eng, npy, tor


# ----- 5. Hessian-vector product of a small MLP via create_graph -----------------------------------------------------
def hvp_workloads():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((16, 10)).astype(np.float32)
    Y = rng.standard_normal((16, 1)).astype(np.float32)
    W1 = (rng.standard_normal((10, 32)) * 0.3).astype(np.float32)
    W2 = (rng.standard_normal((32, 1)) * 0.3).astype(np.float32)
    V1 = rng.standard_normal(W1.shape).astype(np.float32)
    V2 = rng.standard_normal(W2.shape).astype(np.float32)
    ew1, ew2 = E.tensor(W1, requires_grad=True), E.tensor(W2, requires_grad=True)
    ex, ey, ev1, ev2 = E.tensor(X), E.tensor(Y), E.tensor(V1), E.tensor(V2)

    def eng():
        out = LA.matmul(EW.tanh(LA.matmul(ex, ew1)), ew2)
        loss = R.mean((out - ey) ** 2)
        g1, g2 = E.grad(loss, [ew1, ew2], create_graph=True)
        dot = R.sum(g1 * ev1) + R.sum(g2 * ev2)
        return E.grad(dot, [ew1, ew2])

    n = X.shape[0]

    def npy():
        # forward
        a = X @ W1
        h = np.tanh(a)
        out = h @ W2
        r = out - Y
        # gradient
        go = 2 * r / n
        dh = go @ W2.T
        da = dh * (1 - h * h)
        g1 = X.T @ da
        # R-operator (Pearlmutter) along (V1, V2)
        Ra = X @ V1
        Rh = (1 - h * h) * Ra
        Rout = Rh @ W2 + h @ V2
        Rgo = 2 * Rout / n
        Rg2 = Rh.T @ go + h.T @ Rgo
        Rdh = Rgo @ W2.T + go @ V2.T
        Rda = Rdh * (1 - h * h) + dh * (-2 * h * Rh)
        Rg1 = X.T @ Rda
        return g1, Rg1, Rg2

    tor = None
    if torch is not None:
        tw1, tw2 = torch.tensor(W1, requires_grad=True), torch.tensor(W2, requires_grad=True)
        tx, ty, tv1, tv2 = (torch.tensor(a) for a in (X, Y, V1, V2))

        def tor():
            out = torch.tanh(tx @ tw1) @ tw2
            loss = ((out - ty) ** 2).mean()
            g1, g2 = torch.autograd.grad(loss, [tw1, tw2], create_graph=True)
            dot = (g1 * tv1).sum() + (g2 * tv2).sum()
            return torch.autograd.grad(dot, [tw1, tw2])
    return eng, npy, tor


def check_hvp_matches_numpy():
    eng, npy, _ = hvp_workloads()
    h1, h2 = eng()
    _, r1, r2 = npy()
    assert np.allclose(h1.data, r1, rtol=1e-4, atol=1e-5) and np.allclose(h2.data, r2, rtol=1e-4, atol=1e-5), \
        "engine HVP disagrees with the numpy R-operator"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    opts = ap.parse_args()
    q = opts.quick
    check_hvp_matches_numpy()
    rows = []
    specs = [
        ("scalar y = w*x + b", scalar_workloads, "torch", 0.7, lambda f: timeit_batched(f, 7 if q else 21, 200)),
        ("MLP 784-256-256-10 batch 64", lambda: mlp_workloads(64), "numpy", 1.15,
         lambda f: timeit(f, 7 if q else 31)),
        ("MLP 784-256-256-10 batch 1024", lambda: mlp_workloads(1024), "numpy", 1.15,
         lambda f: timeit(f, 5 if q else 15)),
        ("10k scalar ops graph", scalar_graph_workloads, "torch", 1.0, lambda f: timeit(f, 3 if q else 7, 1)),
        ("20 elementwise ops x 1M", chain_workloads, "numpy", 1.15, lambda f: timeit(f, 3 if q else 9, 1)),
        ("HVP small MLP (create_graph)", hvp_workloads, "torch", 1.0,
         lambda f: timeit_batched(f, 7 if q else 21, 20)),
    ]
    for name, make, vs, target, measure in specs:
        eng, npy, tor = make()
        gc.collect()
        gc.freeze()
        te = measure(eng)
        tn = measure(npy)
        tt = measure(tor) if tor is not None else None
        ratio_target = te / (tt if vs == "torch" else tn) if (vs == "numpy" or tt) else None
        rows.append((name, te, tn, tt, vs, target, ratio_target))

    def fmt(t):
        if t is None:
            return "-"
        return f"{t * 1e6:.1f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms"

    head = (f"| {'workload':32} | {'engine':>10} | {'numpy':>10} | {'torch':>10} | {'x numpy':>8} | "
            f"{'x torch':>8} | target | met |")
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    for name, te, tn, tt, vs, target, rt in rows:
        xt = f"{te / tt:.2f}" if tt else "-"
        met = "-" if rt is None else ("yes" if rt <= target else "no")
        print(f"| {name:32} | {fmt(te):>10} | {fmt(tn):>10} | {fmt(tt):>10} | {te / tn:8.2f} | {xt:>8} | "
              f"<={target}x {vs} | {met} |")


if __name__ == "__main__":
    main()
