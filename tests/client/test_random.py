"""torch's random numbers through the client and a live server: a seeded program prints what torch prints
(rand/randn/randint/randperm, generators, dropout masks, nn.init, nn.Linear's initial weights, get/set state
with torch's own state bytes)."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve.torch as gt

torch = pytest.importorskip("torch")


def _np(t) -> np.ndarray:
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


def _same(a, b) -> bool:
    a, b = _np(a), _np(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def _program(m, F, nn, seed):
    """A seeded program in torch's own spelling, run with either module."""
    m.manual_seed(seed)
    out = [m.rand(3, 5), m.randn(17), m.randn(2, 3, dtype=m.float64), m.randint(0, 10, (6,)), m.randperm(9)]
    g = m.Generator().manual_seed(seed + 1)
    out += [m.rand(4, generator=g), m.randn(20, generator=g), m.randperm(5, generator=g)]
    x = m.ones(40)
    out += [F.dropout(x, 0.25), F.dropout(x, 0.5, training=True)]
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, 2))
    out += [p.detach() for p in model.parameters()]
    hidden = model[2](model[1](model[0](m.ones(4, 5)))) if hasattr(model, "__getitem__") else \
        model._modules["2"](model._modules["1"](model._modules["0"](m.ones(4, 5))))
    out.append(hidden.detach() == 0)  # the dropout mask (the matmul's last bit may differ: not a random number)
    w = m.zeros(6, 4)
    nn.init.xavier_uniform_(w)
    out.append(w.clone())
    nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    out.append(w.clone())
    nn.init.normal_(w, std=0.02)
    out.append(w.clone())
    out.append(m.multinomial(m.tensor([0.1, 0.6, 0.3]), 5, replacement=True))
    out.append(m.rand_like(m.ones(2, 2)))
    return out


@pytest.mark.parametrize("seed", [0, 1234])
def test_a_seeded_program_prints_torchs_numbers(ctx, seed):
    want = _program(torch, torch.nn.functional, torch.nn, seed)
    got = _program(gt, gt.nn.functional, gt.nn, seed)
    assert [i for i, (a, b) in enumerate(zip(want, got)) if not _same(a, b)] == []


def test_seed_state_and_initial_seed_as_torchs(ctx):
    assert gt.manual_seed(77) is gt.default_generator
    assert gt.initial_seed() == 77
    gt.randn(3)
    torch.manual_seed(77)
    torch.randn(3)
    state = gt.get_rng_state()
    assert state.shape == (5056,) and _same(state.numpy().astype(np.uint8), torch.get_rng_state())
    s = gt.seed()
    assert gt.initial_seed() == s and 0 <= s < 2**64


def test_a_state_taken_from_torch_is_set_in_gradserve_and_back(ctx):
    torch.manual_seed(5)
    torch.randn(7)  # leaves a cached normal in the state
    ts = torch.get_rng_state()
    gt.set_rng_state(gt.tensor(ts.numpy()))
    assert _same(gt.randn(5), torch.randn(5))
    back = gt.get_rng_state()
    torch.set_rng_state(torch.tensor(back.tolist(), dtype=torch.uint8))
    assert _same(gt.rand(4), torch.rand(4))


def test_generator_errors_are_torchs(ctx):
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
        gt.randint(5, 3, (2,)).tolist()
    with pytest.raises(RuntimeError, match="Expected a CPUGeneratorImplState of size 5056"):
        gt.set_rng_state(gt.zeros(10, dtype=gt.int64))
        gt.rand(1).tolist()
    with pytest.raises(ValueError):
        gt.manual_seed("a")
