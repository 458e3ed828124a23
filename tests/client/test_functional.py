"""gradserve.torch.autograd.functional, forward_ad, grad(is_grads_batched) and the new ops' torch names,
against a real server (and real torch where importable)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradserve
import gradserve.torch as torch
import gradserve.torch.nn.functional as F
from gradserve.torch.autograd import forward_ad as fwAD
from gradserve.torch.autograd import functional as AF

RNG = np.random.default_rng(3)
W = RNG.standard_normal((4, 3))
X0 = RNG.standard_normal(3)
Y0 = RNG.standard_normal(3)


def sent(ctx) -> int:
    return ctx.client.requests


def g(x, y):
    return (x * y).sin().sum() + (x ** 3).sum()


def test_jacobian_is_one_request_and_matches_the_closed_form(ctx):
    w = torch.tensor(W)
    x = torch.tensor(X0)
    gradserve.sync()  # send the set-up first (w.shape is known without asking)
    before = sent(ctx)
    J = AF.jacobian(lambda u: (w @ u).tanh(), x)
    assert sent(ctx) == before + 1
    expected = (1 - np.tanh(W @ X0) ** 2)[:, None] * W
    np.testing.assert_allclose(J.numpy(), expected, rtol=1e-10)
    for kw in ({"vectorize": True}, {"vectorize": True, "strategy": "forward-mode"}):
        np.testing.assert_allclose(AF.jacobian(lambda u: (w @ u).tanh(), x, **kw).numpy(), expected, rtol=1e-10)


def test_structures_of_tuple_inputs_and_outputs(ctx):
    x, y = torch.tensor(X0), torch.tensor(Y0)
    J = AF.jacobian(lambda a, b: (a * b, a.sum()), (x, y))
    assert isinstance(J, tuple) and len(J) == 2 and all(isinstance(r, tuple) and len(r) == 2 for r in J)
    np.testing.assert_allclose(J[0][1].numpy(), np.diag(X0), rtol=1e-12)
    assert J[1][0].shape == (3,)
    H = AF.hessian(g, (x, y))
    assert len(H) == 2 and len(H[1]) == 2
    out, (vx, vy) = AF.vjp(g, (x, y))
    assert out.shape == () and vx.shape == (3,)
    out, jv = AF.jvp(lambda a: a.exp(), x, y)
    np.testing.assert_allclose(jv.numpy(), np.exp(X0) * Y0, rtol=1e-12)
    out, hv = AF.hvp(lambda a: g(a, torch.tensor(Y0)), x, y)
    out2, vh = AF.vhp(lambda a: g(a, torch.tensor(Y0)), x, y)
    np.testing.assert_allclose(hv.numpy(), vh.numpy(), rtol=1e-12)


def test_against_torch(ctx):
    real = pytest.importorskip("torch")
    TF = real.autograd.functional
    xs, ys = torch.tensor(X0), torch.tensor(Y0)
    xt, yt = real.tensor(X0), real.tensor(Y0)

    def check(ours, theirs):
        if isinstance(theirs, (tuple, list)):
            assert isinstance(ours, tuple) and len(ours) == len(theirs)
            for a, b in zip(ours, theirs):
                check(a, b)
        else:
            np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-10, atol=1e-12)

    check(AF.jacobian(g, (xs, ys), vectorize=True), TF.jacobian(g, (xt, yt), vectorize=True))
    check(AF.hessian(g, (xs, ys)), TF.hessian(g, (xt, yt)))
    check(AF.hessian(lambda a: g(a, ys), xs, vectorize=True, outer_jacobian_strategy="forward-mode"),
          TF.hessian(lambda a: g(a, yt), xt, vectorize=True, outer_jacobian_strategy="forward-mode"))
    check(AF.vjp(g, (xs, ys)), TF.vjp(g, (xt, yt)))
    check(AF.hvp(g, (xs, ys), (ys, xs)), TF.hvp(g, (xt, yt), (yt, xt)))
    check(AF.jvp(lambda a: a.sin() * 2, xs, ys), TF.jvp(lambda a: a.sin() * 2, xt, yt))


def test_errors_are_torchs_and_raised_at_the_call(ctx):
    x = torch.tensor(X0)
    with pytest.raises(RuntimeError, match=r"isonly implemented for `vectorize=True`"):
        AF.jacobian(lambda u: u.sin(), x, strategy="forward-mode")
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is independent of input 1"):
        AF.jacobian(lambda a, b: a.sum(), (x, torch.tensor(Y0)), strict=True)
    with pytest.raises(RuntimeError, match="The vector v can only be None"):
        AF.vjp(lambda u: u.sin(), x)
    with pytest.raises(RuntimeError, match="traced into one op list"):
        AF.jacobian(lambda u: u * u.sum().item(), x)
    # the session is fine afterwards
    assert (x * 2).tolist() == (X0 * 2).tolist()


def test_forward_ad_block_is_one_request(ctx):
    x, v = torch.tensor(X0), torch.tensor(Y0)
    gradserve.sync()
    before = sent(ctx)
    with fwAD.dual_level():
        d = fwAD.make_dual(x, v)
        y = (d * d).sin()
        p, t = fwAD.unpack_dual(y)
        unpacked = fwAD.unpack_dual(y)
    assert sent(ctx) == before + 1  # nothing read inside: the block is one request
    np.testing.assert_allclose(t.numpy(), np.cos(X0 ** 2) * 2 * X0 * Y0, rtol=1e-10)
    np.testing.assert_allclose(p.numpy(), np.sin(X0 ** 2), rtol=1e-10)
    assert unpacked.primal is not None and unpacked.tangent is not None


def test_forward_over_reverse_and_grad_is_grads_batched(ctx):
    x = torch.tensor(X0, requires_grad=True)
    v = torch.tensor(Y0)
    with fwAD.dual_level():
        d = fwAD.make_dual(x, v)
        (gr,) = torch.autograd.grad((d ** 3).sum(), d, create_graph=True)
        hv = fwAD.unpack_dual(gr).tangent
    np.testing.assert_allclose(hv.detach().numpy(), 6 * X0 * Y0, rtol=1e-10)
    w = torch.tensor(W)
    y = (w @ x).tanh()
    (J,) = torch.autograd.grad(y, x, torch.eye(4, dtype=torch.float64), is_grads_batched=True)
    np.testing.assert_allclose(J.numpy(), (1 - np.tanh(W @ X0) ** 2)[:, None] * W, rtol=1e-10)


def test_new_ops_under_torch_s_names(ctx):
    m = torch.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    assert torch.linalg.det(m).item() == pytest.approx(5.0)
    assert torch.det(m).item() == pytest.approx(5.0)
    np.testing.assert_allclose(torch.linalg.inv(m).numpy(), np.linalg.inv([[2.0, 1.0], [1.0, 3.0]]))
    assert torch.special.multigammaln(torch.tensor([2.5], dtype=torch.float64), 2).item() == pytest.approx(
        0.5 * math.log(math.pi) + math.lgamma(2.5) + math.lgamma(2.0), rel=1e-12)
    assert torch.special.gammaln(torch.tensor([5.0])).item() == pytest.approx(np.log(24.0), rel=1e-6)
    img = torch.tensor(np.ones((1, 1, 3, 3)))
    k = torch.tensor(np.ones((1, 1, 2, 2)))
    assert F.conv2d(img, k).tolist() == [[[[4.0, 4.0], [4.0, 4.0]]]]
    assert F.one_hot(torch.tensor([0, 2]), 3).tolist() == [[1, 0, 0], [0, 0, 1]]
    assert torch.linalg.vector_norm(torch.tensor([3.0, 4.0])).item() == pytest.approx(5.0)
    assert torch.einsum("ij,j->i", m, torch.tensor([1.0, 1.0], dtype=torch.float64)).tolist() == [3.0, 4.0]
