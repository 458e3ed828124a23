"""Issue 12's last ops through gradserve.torch on a real server: linalg.svd (a named tuple), svdvals and the
norms through them, the in-place index writes, F.pad circular, F.embedding max_norm, and reads inside
``with forward_ad.dual_level():`` (values and ``tangent=`` in repr, as torch prints them)."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve.torch as torch
import gradserve.torch.nn.functional as F
from gradserve.torch.autograd import forward_ad as fw

A = [[2.0, -1.0, 0.5], [0.3, 1.5, -2.0], [1.0, 0.2, 0.7], [-0.4, 0.9, 1.1]]


def test_svd_is_a_named_tuple_with_torch_s_shapes_and_gradient(ctx):
    a = torch.tensor(A, dtype=torch.float64, requires_grad=True)
    U, S, Vh = torch.linalg.svd(a)
    r = torch.linalg.svd(a, full_matrices=False)
    assert type(r).__name__ == "linalg_svd" and r._fields == ("U", "S", "Vh")
    assert tuple(U.shape) == (4, 4) and tuple(Vh.shape) == (3, 3) and tuple(r.U.shape) == (4, 3)
    assert U.grad_fn.name() == "LinalgSvdBackward0" and S.grad_fn.name() == "LinalgSvdBackward0"
    s = np.linalg.svd(np.array(A), compute_uv=False)
    np.testing.assert_allclose(S.tolist(), s, rtol=1e-12)
    rebuilt = (r.U * r.S) @ r.Vh
    np.testing.assert_allclose(rebuilt.tolist(), A, atol=1e-12)
    torch.linalg.svdvals(a).sum().backward()  # d sum(S) / dA = U Vh (reduced)
    u, _, vh = np.linalg.svd(np.array(A), full_matrices=False)
    np.testing.assert_allclose(a.grad.tolist(), u @ vh, atol=1e-12)


def test_matrix_norms_through_the_singular_values(ctx):
    pytest.importorskip("torch")
    import torch as real

    ref = real.tensor(A, dtype=real.float64, requires_grad=True)
    a = torch.tensor(A, dtype=torch.float64, requires_grad=True)
    for args, kwargs in (((2,), {}), ((-2,), {}), (("nuc",), {}), (("nuc",), {"keepdim": True})):
        want = real.linalg.matrix_norm(ref, *args, **kwargs)
        got = torch.linalg.matrix_norm(a, *args, **kwargs)
        assert got.grad_fn.name() == type(want.grad_fn).__name__
        np.testing.assert_allclose(got.tolist(), want.tolist(), rtol=1e-12)
        n1, n2 = torch.linalg.norm(a, *args, **kwargs), real.linalg.norm(ref, *args, **kwargs)
        np.testing.assert_allclose(n1.tolist(), n2.tolist(), rtol=1e-12)
        g_want, = real.autograd.grad(want.sum(), ref)
        g_got, = torch.autograd.grad(got.sum(), a)
        np.testing.assert_allclose(g_got.tolist(), g_want.tolist(), rtol=1e-10, atol=1e-12)
    with pytest.raises(RuntimeError, match=r"linalg.matrix_norm: Order 3 not supported."):
        torch.linalg.matrix_norm(a, 3).tolist()


def test_inplace_index_writes_bump_the_version_and_refuse_leaves(ctx):
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad=True)
    b = a * 1
    idx = torch.tensor([2, 0])
    b.index_fill_(0, idx, -1.0)
    assert b._version == 1 and b.grad_fn.name() == "IndexFillBackward0"
    b.index_add_(0, idx, torch.ones(2, 2), alpha=2.0)
    b.scatter_(1, torch.tensor([[1], [0], [1]]), 9.0)
    b.scatter_add_(0, torch.tensor([[0, 1]]), torch.tensor([[10.0, 20.0]]))
    b.index_copy_(0, torch.tensor([1]), torch.tensor([[7.0, 8.0]]))
    assert b._version == 5 and b.grad_fn.name() == "IndexCopyBackward0"
    assert b.tolist() == [[11.0, 9.0], [7.0, 8.0], [1.0, 9.0]]
    b.sum().backward()
    assert a.grad.tolist() == [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    row = (a * 1)[1]
    row.index_fill_(0, torch.tensor([0]), 0.0)
    assert row.grad_fn.name() == "AsStridedBackward0"
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        a.index_add_(0, idx, torch.ones(2, 2))
        a.tolist()  # ops are sent when a value is read: the error is raised there, pointing at the op's line
    assert a.tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]


def test_circular_pad_and_embedding_max_norm(ctx):
    x = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]], requires_grad=True)
    y = F.pad(x, (1, 2), mode="circular")
    assert y.tolist() == [[[4.0, 1.0, 2.0, 3.0, 4.0, 1.0, 2.0]]] and y.grad_fn.name() == "torch::autograd::CopySlices"
    y.backward(torch.arange(7.0).reshape(1, 1, 7))
    assert x.grad.tolist() == [[[6.0, 8.0, 3.0, 4.0]]]
    w = torch.tensor([[3.0, 4.0], [0.3, 0.4]], dtype=torch.float64, requires_grad=True)
    e = F.embedding(torch.tensor([0, 1, 0]), w, max_norm=1.0)
    assert w._version == 1  # renormalised in place under no_grad, as torch
    np.testing.assert_allclose(w.tolist(), [[0.6, 0.8], [0.3, 0.4]], rtol=1e-6)
    np.testing.assert_allclose(e.tolist(), [[0.6, 0.8], [0.3, 0.4], [0.6, 0.8]], rtol=1e-6)


def test_reads_inside_a_dual_level_work_and_show_the_tangent(ctx):
    with fw.dual_level():
        x = fw.make_dual(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
        y = x * 2
        assert repr(y) == "tensor([2., 4.], tangent=tensor([6., 8.]))"
        assert y.tolist() == [2.0, 4.0]
        z = y.exp().sum()  # the level goes on after the read: y's tangent is still there
        assert fw.unpack_dual(z).tangent.item() == pytest.approx(2 * (6 * np.exp(2.0) + 8 * np.exp(4.0)) / 2, rel=1e-6)
        w = fw.make_dual(torch.tensor(2.0), torch.tensor(5.0))
        assert repr(w) == "tensor(2., tangent=5.0)"
        assert repr(torch.tensor([1.0])) == "tensor([1.])"
    assert repr(y) == "tensor([2., 4.])"
    assert fw.unpack_dual(z).tangent is not None  # a handle; reading it after the level raises as before
