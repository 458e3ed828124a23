"""Issue 24's ops through gradserve.torch on a real server, in the shape model code has: a small CNN block
(conv2d, batch_norm in train and eval mode with running statistics, max/avg/adaptive pooling), attention with
scaled_dot_product_attention, and the tensor utilities (tensor_split, repeat_interleave, movedim, unique,
nonzero, allclose, addcmul/addcdiv) with torch's types and results; compared with torch when it is installed."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve.torch as torch
import gradserve.torch.nn.functional as F

RNG = np.random.default_rng(24)
X = RNG.standard_normal((2, 3, 6, 6))
W = RNG.standard_normal((4, 3, 3, 3)) * 0.3
Q = RNG.standard_normal((2, 2, 3, 4))
K = RNG.standard_normal((2, 2, 5, 4))
V = RNG.standard_normal((2, 2, 5, 4))


def _cnn(mod, functional, training: bool):
    x = mod.tensor(X.tolist(), dtype=mod.float64, requires_grad=True)
    w = mod.tensor(W.tolist(), dtype=mod.float64, requires_grad=True)
    gamma = mod.ones(4, dtype=mod.float64, requires_grad=True)
    beta = mod.zeros(4, dtype=mod.float64, requires_grad=True)
    rm, rv = mod.zeros(4, dtype=mod.float64), mod.ones(4, dtype=mod.float64)
    h = functional.conv2d(x, w, padding=1)
    h = functional.batch_norm(h, rm, rv, gamma, beta, training=training, momentum=0.2)
    h = functional.max_pool2d(functional.relu(h), 2)
    h = functional.avg_pool2d(h, 2, ceil_mode=True) + functional.adaptive_avg_pool2d(h, (2, 2))
    loss = (h ** 2).sum()
    loss.backward()
    return {"h": h, "loss": loss, "x.grad": x.grad, "w.grad": w.grad, "gamma.grad": gamma.grad,
            "beta.grad": beta.grad, "rm": rm, "rv": rv}


@pytest.mark.parametrize("training", [True, False])
def test_a_cnn_block_trains_with_batch_norm_and_pooling(ctx, training):
    got = _cnn(torch, F, training)
    assert got["h"].grad_fn.name() == "AddBackward0" and tuple(got["h"].shape) == (2, 4, 2, 2)
    if training:  # the running statistics moved (momentum 0.2 of the batch's)
        assert not np.allclose(got["rm"].tolist(), 0) and not np.allclose(got["rv"].tolist(), 1)
    else:
        assert got["rm"].tolist() == [0.0] * 4 and got["rv"].tolist() == [1.0] * 4
    real = pytest.importorskip("torch")
    ref = _cnn(real, real.nn.functional, training)
    for key, r in ref.items():
        np.testing.assert_allclose(np.array(got[key].tolist()), np.array(r.detach().tolist()), rtol=1e-9,
                                   atol=1e-11, err_msg=key)


def _attention(mod, functional):
    q, k, v = (mod.tensor(a.tolist(), dtype=mod.float64, requires_grad=True) for a in (Q, K, V))
    fused = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    math = functional.scaled_dot_product_attention(q[0], k[0], v[0], attn_mask=k[0, 0, :, :3].T > 0)
    (fused.sum() + (math * math).sum()).backward()
    return fused, math, q.grad, k.grad, v.grad


def test_attention_takes_torch_s_routes_and_gradients(ctx):
    fused, math, gq, gk, gv = _attention(torch, F)
    assert fused.grad_fn.name() == "ScaledDotProductFlashAttentionForCpuBackward0"
    assert math.grad_fn.name() == "UnsafeViewBackward0"
    real = pytest.importorskip("torch")
    for g, r in zip((fused, math, gq, gk, gv), _attention(real, real.nn.functional)):
        np.testing.assert_allclose(np.array(g.tolist()), np.array(r.detach().tolist()), rtol=1e-9, atol=1e-11)


def test_tensor_utilities_return_what_torch_returns(ctx):
    x = torch.tensor([[3.0, 1.0, 2.0, 1.0], [0.0, 5.0, 2.0, 3.0]], requires_grad=True)
    parts = torch.tensor_split(x, 3, dim=1)
    assert isinstance(parts, tuple) and [tuple(p.shape) for p in parts] == [(2, 2), (2, 1), (2, 1)]
    assert parts[0].grad_fn.name() == "SliceBackward0"
    r = x.repeat_interleave(2, dim=0)
    assert tuple(r.shape) == (4, 4) and r.grad_fn.name() == "ViewBackward0"
    assert x.movedim(0, 1).tolist() == [[3.0, 0.0], [1.0, 5.0], [2.0, 2.0], [1.0, 3.0]]
    u, counts = torch.unique(x.detach(), return_counts=True)
    assert u.tolist() == [0.0, 1.0, 2.0, 3.0, 5.0] and counts.tolist() == [1, 2, 2, 2, 1]
    assert torch.unique(x.detach()).tolist() == [0.0, 1.0, 2.0, 3.0, 5.0]
    rows, cols = torch.nonzero(x > 2, as_tuple=True)
    assert rows.tolist() == [0, 1, 1] and cols.tolist() == [0, 1, 3]
    assert torch.nonzero(x > 2).tolist() == [[0, 0], [1, 1], [1, 3]]
    same = torch.allclose(x, x + 1e-9)
    assert same is True and torch.allclose(x, x + 1) is False
    assert torch.argsort(x[0]).tolist() == [1, 3, 2, 0]
    assert (x > 4).any().item() is True and (x >= 0).all().item() is True
    y = torch.addcdiv(torch.addcmul(x, x, x, value=0.5), x, x + 1)
    y.sum().backward()
    xs = np.array([[3.0, 1.0, 2.0, 1.0], [0.0, 5.0, 2.0, 3.0]])
    np.testing.assert_allclose(x.grad.tolist(), 1 + xs + 1 / (xs + 1) ** 2, rtol=1e-6)
    values, indices = F.max_pool2d(x.reshape(1, 1, 2, 4), 2, return_indices=True)
    assert values.tolist() == [[[[5.0, 3.0]]]] and indices.tolist() == [[[[5, 7]]]]


def test_tensor_new_constructors_follow_the_tensor(ctx):
    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    z = x.new_zeros(2, 3)
    assert z.dtype == torch.float64 and tuple(z.shape) == (2, 3) and z.tolist() == [[0.0] * 3] * 2
    assert x.new_full((2,), 7).tolist() == [7.0, 7.0] and x.new_ones(1).dtype == torch.float64
    assert x.new_tensor([1, 2]).dtype == torch.float64
