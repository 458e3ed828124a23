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
    out.append(m.multinomial(m.tensor([[0.1, 0.6, 0.3], [1.0, 1.0, 1.0]]), 2))
    out += [m.rand_like(m.ones(2, 2)), m.randn_like(m.ones(3), dtype=m.float64), m.randint_like(m.ones(4), 3, 9)]
    out += [m.normal(0.0, 2.0, (5,)), m.normal(m.tensor([1.0, 2.0]), 0.5), m.bernoulli(m.full((6,), 0.4))]
    out += [m.empty(7).uniform_(-2, 2, generator=g), m.zeros(3, 4).t().normal_(), m.zeros(8).bernoulli_(0.25)]
    # torch.utils.data's RandomSampler: a seed drawn from the default generator, then a generator of its own
    seed = int(m.empty((), dtype=m.int64).random_().item())
    out.append(m.randperm(10, generator=m.Generator().manual_seed(seed)))
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
    torch.set_rng_state(ts)
    gt.set_rng_state(ts)  # torch's own uint8 tensor, as it is
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


def test_torch_random_and_fork_rng(ctx):
    gt.random.manual_seed(3)
    with gt.random.fork_rng():
        inside = gt.rand(4)
    after = gt.rand(4)
    torch.random.manual_seed(3)
    with torch.random.fork_rng():
        want_inside = torch.rand(4)
    want_after = torch.rand(4)
    assert _same(inside, want_inside) and _same(after, want_after) and _same(inside, after)


def test_dropout_in_place_changes_its_input_as_torchs(ctx):
    gt.manual_seed(11)
    x = gt.ones(3, 6) * 1
    y = gt.nn.Dropout(0.5, inplace=True)(x)
    torch.manual_seed(11)
    tx = torch.ones(3, 6) * 1
    ty = torch.nn.Dropout(0.5, inplace=True)(tx)
    assert _same(x, tx) and _same(y, ty) and x._version == tx._version == 1
    assert y.grad_fn is None and ty.grad_fn is None
    w, tw = gt.ones(4, requires_grad=True), torch.ones(4, requires_grad=True)
    h, th = w * 2, tw * 2
    gt.nn.functional.dropout(h, 0.5, True, True)
    torch.nn.functional.dropout(th, 0.5, True, True)
    assert h.grad_fn.name() == th.grad_fn.name() == "MulBackward0"
    h.sum().backward()
    th.sum().backward()
    assert _same(w.grad, tw.grad)
