"""vectorize=True and is_grads_batched=True run one batched pass (gradserve_server/engine/batching.py) and agree with
torch 2.13's
vmap; a function with an op that has no batching rule falls back to the per-entry loop, with the same values."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from gradserve_server import engine
from gradserve_server.engine import autograd
from gradserve_server.engine import functional as EF
from gradserve_server.engine import tensor as E

torch = pytest.importorskip("torch")
TF = torch.autograd.functional
T = torch.tensor

#: the engine's functions under torch's names, for functions written once for both
EN = SimpleNamespace(tensor=E, stack=engine.OPS["stack"].fn, cat=engine.OPS["cat"].fn)
RNG = np.random.default_rng(21)
W = RNG.standard_normal((5, 4))
M = RNG.standard_normal((3, 4))
X = RNG.standard_normal(4)
Y = RNG.standard_normal((4, 2))


def batched(mod):
    """Ops that all have rules: mv/mm/matmul, t, transpose, unsqueeze/squeeze, sum over a dim, stack, cat,
    select/slice, expand, elementwise with broadcasting."""
    def f(x, y):
        h = (mod.tensor(W) @ x).tanh()                       # (5,)
        m = (mod.tensor(M) * x).sum(1)                        # (3,)
        p = (x.unsqueeze(1) * y).t() @ mod.tensor(W).t()      # (2, 5)
        q = mod.stack([h[1:4], m], 0).transpose(0, 1)         # (3, 2)
        r = mod.cat([h, m, p.sum(0), y[1].expand(3, 2).sum(0)])
        return (r.sin() * 2 + q.sum() ** 2, (p + h).exp() / 3)
    return f


def fallback(mod):
    """cumprod has no batching rule: the transforms loop."""
    def f(x, y):
        return ((mod.tensor(W) @ x).cumprod(0) * x.sum(), (x.unsqueeze(1) * y).cumprod(1))
    return f


def check(ours, theirs):
    if isinstance(theirs, (tuple, list)):
        assert isinstance(ours, type(theirs)) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            check(a, b)
        return
    assert ours.shape == tuple(theirs.shape)
    assert ours.requires_grad == theirs.requires_grad
    want = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else theirs.data
    np.testing.assert_allclose(ours.data, want, rtol=1e-10, atol=1e-12)


@pytest.fixture
def passes(monkeypatch):
    """Which path each transform took: 'batched' or 'loop' (reverse: _grad_batched_pass; forward: _jvp_batched)."""
    seen = []
    real_rev, real_fwd = autograd._grad_batched_pass, EF._jvp_batched

    def rev(*a):
        r = real_rev(*a)
        seen.append("loop" if r is None else "batched")
        return r

    def fwd(*a):
        r = real_fwd(*a)
        seen.append("loop" if r is None else "batched")
        return r

    monkeypatch.setattr(autograd, "_grad_batched_pass", rev)
    monkeypatch.setattr(EF, "_jvp_batched", fwd)
    return seen


@pytest.mark.parametrize("strategy", ["reverse-mode", "forward-mode"])
@pytest.mark.parametrize("make, path", [(batched, "batched"), (fallback, "loop")])
def test_jacobian_vectorize_matches_torch(passes, strategy, make, path):
    ours = EF.jacobian(make(EN), (E(X), E(Y)), vectorize=True, strategy=strategy)
    check(ours, TF.jacobian(make(torch), (T(X), T(Y)), vectorize=True, strategy=strategy))
    assert passes == [path]


def test_jacobian_vectorize_create_graph_is_differentiable_again(passes):
    def f(mod):
        return lambda x: (mod.tensor(W) @ x).tanh()
    x, xt = E(X).requires_grad_(), T(X).requires_grad_()
    ours = EF.jacobian(f(EN), x, vectorize=True, create_graph=True)
    theirs = TF.jacobian(f(torch), xt, vectorize=True, create_graph=True)
    check(ours, theirs)
    check(engine.grad((ours ** 2).sum(), x), torch.autograd.grad((theirs ** 2).sum(), xt))
    assert passes == ["batched"]


def energy(mod):
    """Every op on its double-backward graph has a rule."""
    def f(q):
        a = mod.tensor(W.T @ W / 9)
        return (a @ q).cosh().log().sum() + (q ** 4).sum() / 4 + ((mod.tensor(W) @ q).tanh() ** 2).sum()
    return f


def energy_prod(mod):
    """prod has no batching rule: the outer jacobian falls back to its loop."""
    def f(q):
        return (q ** 4).sum() / 4 + (q[:2] * q[1:3]).prod()
    return f


@pytest.mark.parametrize("kw", [{"vectorize": True}, {"vectorize": True, "outer_jacobian_strategy": "forward-mode"},
                                {"vectorize": True, "create_graph": True}])
@pytest.mark.parametrize("make, path", [(energy, "batched"), (energy_prod, "loop")])
def test_hessian_vectorize_matches_torch(passes, kw, make, path):
    check(EF.hessian(make(EN), E(X), **kw), TF.hessian(make(torch), T(X), **kw))
    assert passes == [path]


@pytest.mark.parametrize("create_graph", [False, True])
def test_is_grads_batched_matches_torch(passes, create_graph):
    g = RNG.standard_normal((6, 5))
    x, xt = E(X).requires_grad_(), T(X).requires_grad_()
    z, zt = E(Y).requires_grad_(), T(Y).requires_grad_()
    y, yt = (E(W) @ x).sin() * 2, (T(W) @ xt).sin() * 2
    kw = dict(retain_graph=True, is_grads_batched=True, create_graph=create_graph)
    ours = engine.grad(y, [x, z], E(g), allow_unused=True, **kw)
    theirs = torch.autograd.grad(yt, [xt, zt], T(g), allow_unused=True, **kw)
    assert ours[1] is None and theirs[1] is None
    check(ours[0], theirs[0])
    check(engine.grad(y, [x, z], E(g), materialize_grads=True, **kw),
          torch.autograd.grad(yt, [xt, zt], T(g), materialize_grads=True, **kw))
    if create_graph:
        check(engine.grad(ours[0].sum(), x), torch.autograd.grad(theirs[0].sum(), xt))
    assert passes == ["batched", "batched"]


def test_is_grads_batched_falls_back_with_the_loops_values(passes):
    g = RNG.standard_normal((3, 5))
    x, xt = E(X).requires_grad_(), T(X).requires_grad_()
    y, yt = (E(W) @ x).cumprod(0), (T(W) @ xt).cumprod(0)
    check(engine.grad(y, x, E(g), is_grads_batched=True), torch.autograd.grad(yt, xt, T(g), is_grads_batched=True))
    assert passes == ["loop"]


def test_a_retained_gradient_falls_back_to_the_loop(passes):
    """retain_grad hooks write .grad per entry: the batched pass leaves them to the loop."""
    x = E(X).requires_grad_()
    h = E(W) @ x
    h.retain_grad()
    y = h.tanh()
    xt = T(X).requires_grad_()
    ht = T(W) @ xt
    ht.retain_grad()
    yt = ht.tanh()
    g = RNG.standard_normal((2, 5))
    check(engine.grad(y, x, E(g), is_grads_batched=True), torch.autograd.grad(yt, xt, T(g), is_grads_batched=True))
    assert passes == ["loop"]
    assert (h.grad is None) == (ht.grad is None)


def test_a_function_that_unpacks_its_own_duals_falls_back(passes):
    """forward-mode jacobian of a function that sees its dual inputs' primal (unpack_dual): the loop."""
    from gradserve_server.engine import forward_ad as fw

    def f(x):
        return fw.unpack_dual(x).primal * x
    ours = EF.jacobian(f, E(X), vectorize=True, strategy="forward-mode")
    np.testing.assert_allclose(ours.data, np.diag(X), rtol=1e-12)
    assert passes == ["loop"]


@pytest.mark.parametrize("strategy", ["reverse-mode", "forward-mode"])
def test_a_batch_over_the_element_limit_falls_back_to_one_entry_at_a_time(passes, strategy):
    """The batched pass holds (batch, 20, 4) intermediates, over a limit of 100 elements per tensor that each
    entry's (20, 4) fits: the transform loops instead of failing."""
    from gradserve_server.engine.grad_mode import Limits, limits
    c = RNG.standard_normal((20, 4))

    def f(mod):
        return lambda x: (x.unsqueeze(0) * mod.tensor(c)).tanh().sum(0)
    with limits(Limits(max_elements_per_tensor=100)):
        ours = EF.jacobian(f(EN), E(X), vectorize=True, strategy=strategy)
    check(ours, TF.jacobian(f(torch), T(X), vectorize=True, strategy=strategy))
    check(EF.jacobian(f(EN), E(X), vectorize=True, strategy=strategy), ours)  # unlimited: one batched pass
    assert passes == ["loop", "batched"]


def test_an_error_in_the_batched_pass_leaves_the_answer_to_the_loop(passes, monkeypatch):
    """Whatever fails in a batched pass (here a rule that raises), the loop answers, or raises the per-entry
    error torch would."""
    from gradserve_server.engine.batching import BATCH_JVP, BATCH_VJP
    from gradserve_server.engine.errors import ShapeError

    def broken(*a):
        raise ShapeError("a rule that fails")
    monkeypatch.setitem(BATCH_VJP, "TanhBackward0", broken)
    monkeypatch.setitem(BATCH_JVP, "TanhBackward0", broken)

    def f(mod):
        return lambda x: (mod.tensor(W) @ x).tanh()
    for strategy in ("reverse-mode", "forward-mode"):
        check(EF.jacobian(f(EN), E(X), vectorize=True, strategy=strategy),
              TF.jacobian(f(torch), T(X), vectorize=True, strategy=strategy))
    assert passes == ["loop", "loop"]
