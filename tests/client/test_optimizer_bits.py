"""An optimizer's step, given the same gradients, leaves the parameters torch leaves, bit for bit: its updates
(``p.add_(g, alpha=-lr)``, ``addcmul_``, ``lerp_``) round once, as torch's fused CPU kernels do. The optimizers
that divide by a square root agree to an ulp or two: torch's vectorized ``sqrt`` is not correctly rounded
(docs/explanation/deviations.md, "Transcendental functions in the last bit")."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve.torch as gtorch

#: the steps made of multiplies and adds only
EXACT = {"sgd", "sgd-momentum-decay", "nesterov"}

OPTIMIZERS = {
    "sgd": lambda m, ps: m.optim.SGD(ps, lr=0.1),
    "sgd-momentum-decay": lambda m, ps: m.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3),
    "nesterov": lambda m, ps: m.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda m, ps: m.optim.Adam(ps, lr=1e-2),
    "adamw": lambda m, ps: m.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "rmsprop": lambda m, ps: m.optim.RMSprop(ps, lr=1e-2, momentum=0.5),
    "adagrad": lambda m, ps: m.optim.Adagrad(ps, lr=0.1),
}


def _steps(m, name: str, dtype) -> list:
    rng = np.random.default_rng(0)
    start = [rng.standard_normal((8, 4)).astype(dtype), rng.standard_normal(8).astype(dtype)]
    grads = [[rng.standard_normal(p.shape).astype(dtype) for p in start] for _ in range(4)]
    ps = [m.tensor(p, requires_grad=True) for p in start]
    opt = OPTIMIZERS[name](m, ps)
    for gs in grads:
        for p, g in zip(ps, gs):
            p.grad = m.tensor(g)
        opt.step()
    return [p.detach().numpy().copy() for p in ps]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_steps_bit_for_bit(ctx, name, dtype):
    torch = pytest.importorskip("torch")
    ours = _steps(gtorch, name, dtype)
    theirs = _steps(torch, name, dtype)
    for a, b in zip(ours, theirs):
        if name in EXACT:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_array_max_ulp(a, b, maxulp=2)
