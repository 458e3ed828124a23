"""Engine benchmark: median time per workload, its ratio to a hand-written numpy forward+backward of the
same computation (the practical floor) and to torch eager when torch is importable.

Each workload runs three ways: "direct" (engine ops called from Python, as a library user would), "cold"
(the same computation as a JSON-shaped op list, as ``/v1/eval`` runs a list it has never seen: through
``engine.trace.plan.run_planned`` with a fresh plan cache per run, ``PlanCache(record_after=2)`` as the service
sets it, so nothing is carried between runs: no plan, and the per-op fragments of ``engine.trace.compose`` only
within the run) and "replayed" (the same op list through one plan cache: its first run records a plan of
kernel calls, later runs replay it). Both run the ``/v1/eval`` form: the inputs are ``tensor`` ops over the
data as the service hands it to the engine after decoding a base64 payload: a fresh array of the op's own,
handed over (``engine.Owned``), which a one-shot run keeps instead of copying. Those arrays are made before
each timed run, outside the timed region (the decoding is the service's, not the engine's: the service
decodes base64 straight into them); nothing else is left out of the timed region. Both have the byte budget
(default limits) and a deadline.

    python bench/engine.py            # full run
    python bench/engine.py --quick    # fewer repeats
    python bench/engine.py --only lstm,rk4

Targets (issue #13): scalar <= 0.7x torch; MLP batch 64 <= 1.15x numpy; MLP batch 1024 and the 1M-element
chain <= 1.10x numpy; 10k scalar ops <= 1.0x torch cold and <= 0.5x torch replayed; Hessian-vector product
<= 1.0x torch; LSTM (hidden 128, sequence 100) <= 1.0x torch replayed; RK4 ODE (1,000 steps, 10-d state) and its
gradient <= 1.0x torch. "met" is judged on each engine column (direct and cold against the cold target,
replayed against the replayed one).

All three run single-threaded: torch is pinned to one thread, and OpenBLAS's worker threads (numpy's and so
the engine's matmuls) make timings erratic on small machines and penalise whoever calls BLAS less densely
(the threads go to sleep between calls). Set OPENBLAS_NUM_THREADS to override. glibc's malloc is set up as
the server sets it (``app.memory.configure_malloc`` with the server's settings, GRADSERVE_MALLOC_* from the
environment; the first line printed says what was set): with glibc's dynamic defaults, freeing a run's
arrays of a few MiB hands them back to the system and the next run faults every page in again (the chain's
cold column: ~22,000 page faults, 88 MiB, per run). The cyclic garbage collector is set up as the server
sets it (``app.memory.configure_gc``) for each workload: objects alive after set-up (torch's and numpy's
modules, the workloads' inputs; in the server, the framework and the engine's tables) are frozen out of its
reach, and its youngest generation is collected after 5,000 net allocations instead of 700.
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

import gradserve_server.engine as E  # noqa: E402
from gradserve_server.app.config import Settings  # noqa: E402
from gradserve_server.app.memory import configure_gc, configure_malloc  # noqa: E402
from gradserve_server.engine.ops import elementwise as EW  # noqa: E402
from gradserve_server.engine.ops import linalg as LA
from gradserve_server.engine.ops import nn as NN
from gradserve_server.engine.ops import nn_functional as NF
from gradserve_server.engine.ops import reduction as R
from gradserve_server.engine.ops import shape as S
from gradserve_server.engine.trace.cache import PlanCache
from gradserve_server.engine.trace.plan import run_planned  # noqa: E402

try:
    import torch
    import torch.nn.functional as TF
    torch.set_num_threads(1)
except ImportError:  # torch is not a dependency
    torch = None


def timeit(fn, repeat: int, warmup: int = 2) -> float:
    """Median time of ``fn()``; ``fn.prepare()``, when it has one, runs before each call, untimed."""
    prepare = getattr(fn, "prepare", None)
    for _ in range(warmup):
        if prepare is not None:
            prepare()
        fn()
    times = []
    for _ in range(repeat):
        if prepare is not None:
            prepare()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def timeit_batched(fn, repeat: int, inner: int) -> float:
    """Median over ``repeat`` batches of ``inner`` calls (for microsecond workloads)."""
    def batch():
        for _ in range(inner):
            fn()
    prepare = getattr(fn, "prepare", None)
    if prepare is not None:
        def prepare_batch():
            for _ in range(inner):
                prepare()
        batch.prepare = prepare_batch
    return timeit(batch, repeat) / inner


def program(inputs: dict, ops: list, params=(), returns=None):
    """The workload as an op list through run_program, as the service runs it (fresh namespace over the
    inputs, the default limits as the byte budget, a deadline): cold, nothing is reused between calls.
    ``run.replayed`` is the same through a plan cache (engine.trace.plan, as ``/v1/eval`` runs): its first call
    records the plan, later calls replay it. ``returns``: the request's ``return`` (the names the response
    shows, the values the numpy floor computes); None: a request without one, whose response shows every
    named tensor (each intermediate is then a result the run must keep)."""
    limits = E.Limits()
    respond = "all" if returns is None else list(returns)

    def run():
        for p in params:
            p.grad = None
        state = E.State()
        state.tensors = dict(inputs)
        return E.run_program(state, ops, limits=limits, control=E.Control(3600.0), respond=respond)

    cache = PlanCache()

    def eval_ops():
        # the /v1/eval form: the inputs are tensor ops over their data as the app hands it to the engine after
        # decoding a base64 payload (a fresh array of the op's own, handed over: engine.Owned)
        return [{"op": "tensor", "args": [E.Owned(np.array(t.data, order="C"))],
                 "kwargs": {"requires_grad": bool(t.requires_grad)}, "out": n} for n, t in inputs.items()] + ops

    ready: list = []  # op lists made by ``replayed.prepare`` (outside the timed region), one per run

    def replayed():
        return run_planned(cache, E.State(), ready.pop() if ready else eval_ops(), limits=limits,
                           control=E.Control(3600.0), respond=respond, extra=("json",))
    replayed.prepare = lambda: ready.append(eval_ops())
    fresh: list = []  # (op list, a fresh plan cache) made by ``cold.prepare``, one per run

    def cold():
        ops_, cache_ = fresh.pop() if fresh else (eval_ops(), PlanCache(record_after=2))
        return run_planned(cache_, E.State(), ops_, limits=limits, control=E.Control(3600.0), respond=respond,
                           extra=("json",))
    cold.prepare = lambda: fresh.append((eval_ops(), PlanCache(record_after=2)))
    run.replayed = replayed
    run.cold = cold
    run.cache = cache
    return run


def _op(op, *args, out=None, **kwargs):
    return {"op": op, "args": list(args), "kwargs": kwargs, "out": out}


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
    prog = program({"w": w, "x": x, "b": b}, [_op("mul", "w", "x", out="t"), _op("add", "t", "b", out="y"),
                                              _op("backward", "y")], (w, x, b))
    return eng, prog, npy, tor


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
    inputs = {"x": ex, "y": ey, **{f"w{i}": ew[i] for i in range(3)}, **{f"b{i}": eb[i] for i in range(3)}}
    ops = []
    h = "x"
    for i in range(3):
        ops += [_op("matmul", h, f"w{i}", out=f"z{i}"), _op("add", f"z{i}", f"b{i}", out=f"a{i}")]
        h = f"a{i}"
        if i < 2:
            ops.append(_op("relu", h, out=f"h{i}"))
            h = f"h{i}"
    ops += [_op("cross_entropy", h, "y", out="loss"), _op("backward", "loss")]
    # a training step's request: the loss and the parameters' gradients (what the numpy floor computes)
    returns = ["loss", *(f"{p}{i}.grad" for p in "wb" for i in range(3))]
    return eng, program(inputs, ops, ew + eb, returns=returns), npy, tor


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
    inputs = {f"p{i}": p for i, p in enumerate(params)}
    ops = []
    for g in range(GROUPS):
        items = []
        for j in range(4):
            ops += [_op("softplus", f"p{4 * g + j}", out=f"s{g}_{j}"), _op("mul", f"s{g}_{j}", 0.5, out=f"m{g}_{j}")]
            items.append(f"m{g}_{j}")
        ops += [_op("stack", items, out=f"st{g}"), _op("softmax", f"st{g}", 0, out=f"sm{g}"),
                _op("mul", items[0], 1.0, out=f"k{g}"), _op("mul", f"sm{g}", f"k{g}", out=f"q{g}"),
                _op("sum", f"q{g}", out=f"o{g}")]
    ops += [_op("stack", [f"o{g}" for g in range(GROUPS)], out="all"), _op("sum", "all", out="total"),
            _op("backward", "total")]
    return eng, program(inputs, ops, params), npy, tor


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
    ops = []
    h = "x"
    for i in range(5):
        ops += [_op("sin", h, out=f"s{i}"), _op("mul", f"s{i}", 1.01, out=f"m{i}"),
                _op("add", f"m{i}", 0.1, out=f"a{i}"), _op("tanh", f"a{i}", out=f"h{i}")]
        h = f"h{i}"
    ops += [_op("sum", h, out="total"), _op("backward", "total")]
    # the request a client makes for this loss and its gradient (/v1/eval's "return"): the floor's two results
    return eng, program({"x": ex}, ops, (ex,), returns=["total", "x.grad"]), npy, tor


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
    ops = [_op("matmul", "x", "w1", out="a"), _op("tanh", "a", out="h"), _op("matmul", "h", "w2", out="out"),
           _op("sub", "out", "y", out="r"), _op("pow", "r", 2, out="r2"), _op("mean", "r2", out="loss"),
           _op("grad", "loss", ["w1", "w2"], create_graph=True, out=["g1", "g2"]),
           _op("mul", "g1", "v1", out="p1"), _op("sum", "p1", out="s1"), _op("mul", "g2", "v2", out="p2"),
           _op("sum", "p2", out="s2"), _op("add", "s1", "s2", out="dot"),
           _op("grad", "dot", ["w1", "w2"], out=["h1", "h2"])]
    inputs = {"x": ex, "y": ey, "w1": ew1, "w2": ew2, "v1": ev1, "v2": ev2}
    return eng, program(inputs, ops), npy, tor

# ----- 6. character LSTM: hidden 128, sequence 100, embedding input, cross-entropy over every step ----------------
VOCAB, HIDDEN, SEQ = 65, 128, 100


def lstm_workloads():
    rng = np.random.default_rng(4)
    H, V, T = HIDDEN, VOCAB, SEQ
    k = 1 / np.sqrt(H)
    Wx = rng.uniform(-k, k, (V, 4 * H)).astype(np.float32)   # the embedding: one row of input weights per char
    Wh = rng.uniform(-k, k, (H, 4 * H)).astype(np.float32)
    bg = rng.uniform(-k, k, 4 * H).astype(np.float32)
    Wy = rng.uniform(-k, k, (H, V)).astype(np.float32)
    by = np.zeros(V, np.float32)
    chars = rng.integers(0, V, T + 1)
    xs, ys = chars[:-1], chars[1:]

    ewx, ewh, ebg, ewy, eby = (E.tensor(a, requires_grad=True) for a in (Wx, Wh, bg, Wy, by))
    ex, ey = E.tensor(xs), E.tensor(ys)
    h0, c0 = E.tensor(np.zeros((1, H), np.float32)), E.tensor(np.zeros((1, H), np.float32))
    params = [ewx, ewh, ebg, ewy, eby]

    def eng():
        xw = NF.embedding(ex, ewx)        # (T, 4H): x_t @ W_x for one-hot x_t
        h, c = h0, c0
        hs = []
        for t in range(T):
            gates = LA.matmul(h, ewh) + xw[t] + ebg
            i, f, g, o = S.chunk(gates, 4, 1)
            c = EW.sigmoid(f) * c + EW.sigmoid(i) * EW.tanh(g)
            h = EW.sigmoid(o) * EW.tanh(c)
            hs.append(h)
        logits = LA.matmul(S.cat(hs, 0), ewy) + eby
        loss = NN.cross_entropy(logits, ey)
        for p in params:
            p.grad = None
        E.backward(loss)

    def npy():
        sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
        xw = Wx[xs]
        h = np.zeros((1, H), np.float32)
        c = np.zeros((1, H), np.float32)
        cache = []
        hs = []
        for t in range(T):
            z = h @ Wh + xw[t] + bg
            i, f, g, o = sig(z[:, :H]), sig(z[:, H:2 * H]), np.tanh(z[:, 2 * H:3 * H]), sig(z[:, 3 * H:])
            c_prev, h_prev = c, h
            c = f * c + i * g
            tc = np.tanh(c)
            h = o * tc
            cache.append((h_prev, c_prev, i, f, g, o, tc))
            hs.append(h)
        Hs = np.concatenate(hs, 0)
        logits = Hs @ Wy + by
        m = logits.max(1, keepdims=True)
        e = np.exp(logits - m)
        s_ = e.sum(1, keepdims=True)
        loss = -(logits - m - np.log(s_))[np.arange(T), ys].mean()
        gl = e / s_
        gl[np.arange(T), ys] -= 1
        gl /= T
        gWy, gby = Hs.T @ gl, gl.sum(0)
        gH = gl @ Wy.T
        gWh = np.zeros_like(Wh)
        gz_all = np.empty((T, 4 * H), np.float32)
        gh = np.zeros((1, H), np.float32)
        gc = np.zeros((1, H), np.float32)
        for t in reversed(range(T)):
            h_prev, c_prev, i, f, g, o, tc = cache[t]
            gh = gh + gH[t:t + 1]
            go = gh * tc
            gc = gc + gh * o * (1 - tc * tc)
            gi, gf, gg = gc * g, gc * c_prev, gc * i
            gz = np.concatenate([gi * i * (1 - i), gf * f * (1 - f), gg * (1 - g * g), go * o * (1 - o)], 1)
            gz_all[t] = gz[0]
            gWh += h_prev.T @ gz
            gh = gz @ Wh.T
            gc = gc * f
        gbg = gz_all.sum(0)
        gWx = np.zeros_like(Wx)
        np.add.at(gWx, xs, gz_all)
        return loss, gWx, gWh, gbg, gWy, gby

    tor = None
    if torch is not None:
        twx, twh, tbg, twy, tby = (torch.tensor(a, requires_grad=True) for a in (Wx, Wh, bg, Wy, by))
        tx, ty = torch.tensor(xs), torch.tensor(ys)
        th0, tc0 = torch.zeros(1, H), torch.zeros(1, H)
        tparams = [twx, twh, tbg, twy, tby]

        def tor():
            xw = TF.embedding(tx, twx)
            h, c = th0, tc0
            hs = []
            for t in range(T):
                gates = h @ twh + xw[t] + tbg
                i, f, g, o = torch.chunk(gates, 4, 1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                hs.append(h)
            loss = TF.cross_entropy(torch.cat(hs, 0) @ twy + tby, ty)
            for p in tparams:
                p.grad = None
            loss.backward()

    inputs = {"x": ex, "y": ey, "wx": ewx, "wh": ewh, "bg": ebg, "wy": ewy, "by": eby, "h0": h0, "c0": c0}
    ops = [_op("embedding", "x", "wx", out="xw")]
    h, c = "h0", "c0"
    for t in range(T):
        ops += [_op("matmul", h, "wh", out=f"hw{t}"), _op("getitem", "xw", t, out=f"x{t}"),
                _op("add", f"hw{t}", f"x{t}", out=f"z{t}"), _op("add", f"z{t}", "bg", out=f"gates{t}"),
                _op("chunk", f"gates{t}", 4, 1, out=[f"i{t}", f"f{t}", f"g{t}", f"o{t}"]),
                _op("sigmoid", f"f{t}", out=f"sf{t}"), _op("mul", f"sf{t}", c, out=f"fc{t}"),
                _op("sigmoid", f"i{t}", out=f"si{t}"), _op("tanh", f"g{t}", out=f"tg{t}"),
                _op("mul", f"si{t}", f"tg{t}", out=f"ig{t}"), _op("add", f"fc{t}", f"ig{t}", out=f"c{t}"),
                _op("sigmoid", f"o{t}", out=f"so{t}"), _op("tanh", f"c{t}", out=f"tc{t}"),
                _op("mul", f"so{t}", f"tc{t}", out=f"h{t}")]
        h, c = f"h{t}", f"c{t}"
    ops += [_op("cat", [f"h{t}" for t in range(T)], 0, out="hs"), _op("matmul", "hs", "wy", out="ly"),
            _op("add", "ly", "by", out="logits"), _op("cross_entropy", "logits", "y", out="loss"),
            _op("backward", "loss")]
    eng.params = params
    return eng, program(inputs, ops, params), npy, tor


def check_gradients(make, rtol=1e-3, atol=1e-5):
    """The engine's gradients (direct and through run_program) agree with the hand-written numpy ones."""
    eng, prog, npy, _ = make()
    ref = npy()[1:]
    for run in (eng, prog):
        run()
        for p, r in zip(eng.params, ref):
            assert np.allclose(p.grad.data, r, rtol=rtol, atol=atol), f"{make.__name__}: gradients disagree"


# ----- 7. explicit RK4 integration of dy/dt = tanh(W y + b) - a y, 1,000 steps, 10-d state ------------------------
ODE_DIM, ODE_STEPS, ODE_H, ODE_DECAY = 10, 1000, 0.01, 0.1


def rk4_workloads():
    rng = np.random.default_rng(5)
    n, h, a = ODE_DIM, ODE_H, ODE_DECAY
    W = (rng.standard_normal((n, n)) * 0.5 / np.sqrt(n)).astype(np.float32)
    b = (rng.standard_normal(n) * 0.1).astype(np.float32)
    y0 = rng.standard_normal(n).astype(np.float32)
    ew, eb, ey0 = E.tensor(W, requires_grad=True), E.tensor(b, requires_grad=True), E.tensor(y0)
    h2, h6 = h / 2, h / 6

    def eng():
        def f(y):
            return EW.tanh(LA.matmul(ew, y) + eb) - y * a
        y = ey0
        for _ in range(ODE_STEPS):
            k1 = f(y)
            k2 = f(y + k1 * h2)
            k3 = f(y + k2 * h2)
            k4 = f(y + k3 * h)
            y = y + (k1 + k2 * 2 + k3 * 2 + k4) * h6
        ew.grad = eb.grad = None
        E.backward(R.sum(y * y))

    f32 = np.float32
    hh, hh2, hh6, aa = f32(h), f32(h2), f32(h6), f32(a)

    def npy():
        def f(y):
            s = np.tanh(W @ y + b)
            return s - aa * y, s
        y = y0
        tape = []
        for _ in range(ODE_STEPS):
            y1 = y
            k1, s1 = f(y1)
            y2 = y + hh2 * k1
            k2, s2 = f(y2)
            y3 = y + hh2 * k2
            k3, s3 = f(y3)
            y4 = y + hh * k3
            k4, s4 = f(y4)
            tape.append(((y1, s1), (y2, s2), (y3, s3), (y4, s4)))
            y = y + hh6 * (k1 + 2 * k2 + 2 * k3 + k4)
        loss = (y * y).sum()
        gW = np.zeros_like(W)
        gb = np.zeros_like(b)
        gy = 2 * y

        def vjp(u, ys):
            yy, s = ys
            d = u * (1 - s * s)
            gW.__iadd__(np.outer(d, yy))
            gb.__iadd__(d)
            return W.T @ d - aa * u
        for st in reversed(tape):
            gk4 = hh6 * gy
            gk3 = 2 * gk4
            gk2 = 2 * gk4
            gk1 = gk4
            g4 = vjp(gk4, st[3])
            gk3 = gk3 + hh * g4
            g3 = vjp(gk3, st[2])
            gk2 = gk2 + hh2 * g3
            g2 = vjp(gk2, st[1])
            gk1 = gk1 + hh2 * g2
            g1 = vjp(gk1, st[0])
            gy = gy + g4 + g3 + g2 + g1
        return loss, gW, gb

    tor = None
    if torch is not None:
        tw, tb, ty0 = torch.tensor(W, requires_grad=True), torch.tensor(b, requires_grad=True), torch.tensor(y0)

        def tor():
            def f(y):
                return torch.tanh(tw @ y + tb) - y * a
            y = ty0
            for _ in range(ODE_STEPS):
                k1 = f(y)
                k2 = f(y + k1 * h2)
                k3 = f(y + k2 * h2)
                k4 = f(y + k3 * h)
                y = y + (k1 + k2 * 2 + k3 * 2 + k4) * h6
            tw.grad = tb.grad = None
            (y * y).sum().backward()

    ops = []

    def f_ops(y, tag):
        ops.extend([_op("matmul", "W", y, out=f"{tag}m"), _op("add", f"{tag}m", "b", out=f"{tag}z"),
                    _op("tanh", f"{tag}z", out=f"{tag}s"), _op("mul", y, a, out=f"{tag}d"),
                    _op("sub", f"{tag}s", f"{tag}d", out=f"{tag}k")])
        return f"{tag}k"
    y = "y0"
    for st in range(ODE_STEPS):
        p = f"n{st}"
        k1 = f_ops(y, p + "a")
        ops += [_op("mul", k1, h2, out=p + "u1"), _op("add", y, p + "u1", out=p + "y2")]
        k2 = f_ops(p + "y2", p + "b")
        ops += [_op("mul", k2, h2, out=p + "u2"), _op("add", y, p + "u2", out=p + "y3")]
        k3 = f_ops(p + "y3", p + "c")
        ops += [_op("mul", k3, h, out=p + "u3"), _op("add", y, p + "u3", out=p + "y4")]
        k4 = f_ops(p + "y4", p + "d")
        ops += [_op("mul", k2, 2, out=p + "v2"), _op("mul", k3, 2, out=p + "v3"),
                _op("add", k1, p + "v2", out=p + "w1"), _op("add", p + "w1", p + "v3", out=p + "w2"),
                _op("add", p + "w2", k4, out=p + "w3"),
                _op("mul", p + "w3", h6, out=p + "w4"), _op("add", y, p + "w4", out=p + "y")]
        y = p + "y"
    ops += [_op("mul", y, y, out="sq"), _op("sum", "sq", out="loss"), _op("backward", "loss")]
    eng.params = (ew, eb)
    return eng, program({"W": ew, "b": eb, "y0": ey0}, ops, (ew, eb)), npy, tor


def check_hvp_matches_numpy():
    eng, _, npy, _ = hvp_workloads()
    h1, h2 = eng()
    _, r1, r2 = npy()
    assert np.allclose(h1.data, r1, rtol=1e-4, atol=1e-5) and np.allclose(h2.data, r2, rtol=1e-4, atol=1e-5), \
        "engine HVP disagrees with the numpy R-operator"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated keys: " + ",".join(k for k, *_ in SPECS))
    opts = ap.parse_args()
    q = opts.quick
    only = set(filter(None, opts.only.split(",")))
    print(f"{configure_malloc(Settings())} (the server's: app.memory.configure_malloc)\n", flush=True)
    check_hvp_matches_numpy()
    rows = []
    for key, name, make, vs, target, measure in SPECS:
        if only and key not in only:
            continue
        if key in ("lstm", "rk4"):
            check_gradients(make)
        eng, prog, npy, tor = make()
        undo_gc = configure_gc()  # (the server's collector settings)
        te = measure(eng, q)
        tp = measure(prog.cold, q)
        prog.replayed()  # records the plan
        tr = measure(prog.replayed, q)
        if not prog.cache.hits:
            name += " (unplanned)"
        tn = measure(npy, q)
        tt = measure(tor, q) if tor is not None else None
        rows.append((name, te, tp, tr, tn, tt, vs, target))
        undo_gc()
        del eng, prog, npy, tor
        gc.collect()

    def fmt(t):
        if t is None:
            return "-"
        return f"{t * 1e6:.1f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.2f} s"

    def ratio(t, base):
        return "-" if base is None else f"{t / base:.2f}"

    cols = ["workload", "direct", "cold", "replayed", "numpy", "torch", "cold/np", "cold/tor", "repl/np", "repl/tor",
            "target cold/repl", "met dir/cold/repl"]
    widths = [32, 9, 9, 9, 9, 9, 7, 8, 7, 8, 22, 17]
    print("| " + " | ".join(f"{c:>{w}}" if i else f"{c:{w}}" for i, (c, w) in enumerate(zip(cols, widths))) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for name, te, tp, tr, tn, tt, vs, target in rows:
        base = tt if vs == "torch" else tn
        cold_target, repl_target = target

        def met(t, goal, base=base):
            return "-" if base is None else ("yes" if t / base <= goal else f"no {t / base / goal:.1f}x")
        goal = f"<={cold_target}/{repl_target}x {vs}" if cold_target != repl_target else f"<={cold_target}x {vs}"
        vals = [name, fmt(te), fmt(tp), fmt(tr), fmt(tn), fmt(tt), ratio(tp, tn), ratio(tp, tt), ratio(tr, tn),
                ratio(tr, tt), goal, f"{met(te, cold_target)}/{met(tp, cold_target)}/{met(tr, repl_target)}"]
        print("| " + " | ".join(f"{v:>{w}}" if i else f"{v:{w}}" for i, (v, w) in enumerate(zip(vals, widths))) + " |")
    print("\n'direct': engine ops called from Python; 'cold': the op list as /v1/eval runs it the first time (a fresh "
          "plan cache\nper run: composed from per-op fragments, trace.compose, or run op by op); 'replayed': the "
          "same op list\nthrough a plan cache after its first run recorded the plan. 'no Nx': the column is N times "
          "its target (ratio / target).")


#: (key, name, workloads, baseline, (target cold, target replayed), timer)
SPECS = [
    ("scalar", "scalar y = w*x + b", scalar_workloads, "torch", (0.7, 0.7),
     lambda f, q: timeit_batched(f, 7 if q else 21, 200)),
    ("mlp64", "MLP 784-256-256-10 batch 64", lambda: mlp_workloads(64), "numpy", (1.15, 1.15),
     lambda f, q: timeit(f, 7 if q else 31)),
    ("mlp1024", "MLP 784-256-256-10 batch 1024", lambda: mlp_workloads(1024), "numpy", (1.10, 1.10),
     lambda f, q: timeit(f, 5 if q else 15)),
    ("scalar10k", "10k scalar ops graph", scalar_graph_workloads, "torch", (1.0, 0.5),
     lambda f, q: timeit(f, 3 if q else 7, 1)),
    ("chain", "20 elementwise ops x 1M", chain_workloads, "numpy", (1.10, 1.10),
     lambda f, q: timeit(f, 3 if q else 9, 1)),
    ("hvp", "HVP small MLP (create_graph)", hvp_workloads, "torch", (1.0, 1.0),
     lambda f, q: timeit_batched(f, 7 if q else 21, 20)),
    ("lstm", "LSTM h128 seq100", lstm_workloads, "torch", (1.0, 1.0), lambda f, q: timeit(f, 3 if q else 9, 1)),
    ("rk4", "RK4 ODE 1000 steps 10-d", rk4_workloads, "torch", (1.0, 1.0), lambda f, q: timeit(f, 3 if q else 5, 1)),
]


if __name__ == "__main__":
    main()
