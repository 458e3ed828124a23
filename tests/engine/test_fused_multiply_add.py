"""torch's CPU kernels round ``a + alpha * b`` once (a fused multiply-add) in float32 and float64: add and sub
with ``alpha`` (an optimizer's ``p.add_(g, alpha=-lr)``), addcmul and lerp. Two roundings differ from that in
the last bit for about a quarter of the elements. ``ops.common.fma`` is checked against exact rational
arithmetic here (no torch needed), and the ops against torch where torch is installed."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import gradserve_server.engine as E
from gradserve_server.engine.ops.common import fma


def _exact(x, y, z, dtype) -> np.ndarray:
    """x * y + z rounded once to ``dtype``, through exact rationals (float64: Python's float() rounds a
    Fraction correctly; float32: the float64 rounding of an exact float32 sum is then rounded again, which is
    exact here: the values below keep the float64 result away from float32 ties)."""
    out = [float(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))) for a, b, c in
           zip(np.ravel(x), np.ravel(y), np.ravel(z))]
    return np.array(out).astype(dtype).reshape(np.shape(z))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fma_rounds_once(dtype):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(4000).astype(dtype)
    y = (rng.standard_normal(4000) * 7).astype(dtype)
    z = rng.standard_normal(4000).astype(dtype)
    got = fma(x, y, z, np.dtype(dtype))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, _exact(x, y, z, dtype))
    twice = x * y + z  # (what the kernels computed before: a quarter of the elements differ)
    assert (twice != got).mean() > 0.05


def test_fma_edges():
    f = np.float64
    got = fma(f(-0.0), f(0.0), f(-0.0), np.dtype(f))
    assert got == 0 and np.signbit(got)  # -0.0 * 0.0 + -0.0 is -0.0
    # a product beyond float64 whose fused sum is finite
    assert fma(f(2.0), f(1e308), f(-1e308), np.dtype(f)) == 1e308
    assert fma(f(2.0), f(1e308), f(-np.inf), np.dtype(f)) == -np.inf
    assert np.isnan(fma(f(np.nan), f(1.0), f(1.0), np.dtype(f)))
    assert fma(f(1e300), f(1e10), f(1.0), np.dtype(f)) == np.inf


def _run(ops):
    state = E.State()
    E.run_program(state, ops)
    return state.tensors["r"].data


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_ops_round_as_torch(dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    a, b, c, w = (rng.standard_normal(300) for _ in range(4))
    c = np.abs(c) + 0.5
    w = np.abs(w) % 1
    T = {k: torch.tensor(v, dtype=getattr(torch, dtype)) for k, v in dict(a=a, b=b, c=c, w=w).items()}
    inputs = [{"op": "tensor", "args": [v.tolist()], "kwargs": {"dtype": dtype}, "out": k}
              for k, v in dict(a=a, b=b, c=c, w=w).items()]
    cases = [
        ("add", ["a", "b"], {"alpha": -0.1}, torch.add(T["a"], T["b"], alpha=-0.1)),
        ("sub", ["a", "b"], {"alpha": 0.3}, torch.sub(T["a"], T["b"], alpha=0.3)),
        ("addcmul", ["a", "b", "c"], {"value": 0.37}, torch.addcmul(T["a"], T["b"], T["c"], value=0.37)),
        ("addcdiv", ["a", "b", "c"], {"value": 0.37}, torch.addcdiv(T["a"], T["b"], T["c"], value=0.37)),
        ("lerp", ["a", "b", 0.3], {}, torch.lerp(T["a"], T["b"], 0.3)),
        ("lerp", ["a", "b", 0.7], {}, torch.lerp(T["a"], T["b"], 0.7)),
        ("lerp", ["a", "b", "w"], {}, torch.lerp(T["a"], T["b"], T["w"])),
    ]
    for name, args, kwargs, want in cases:
        got = _run([*inputs, {"op": name, "args": args, "kwargs": kwargs, "out": "r"}])
        np.testing.assert_array_equal(got, want.numpy(), err_msg=f"{name} {args} {kwargs}")
    # the in-place step an optimizer takes
    got = _run([*inputs, {"op": "add_", "args": ["a", "b"], "kwargs": {"alpha": -0.01}, "out": "r"}])
    np.testing.assert_array_equal(got, T["a"].clone().add_(T["b"], alpha=-0.01).numpy())
