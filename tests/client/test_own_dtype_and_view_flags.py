"""Two of torch's identities the client keeps at the line: a conversion to a tensor's own dtype (``x.float()`` of a
float32 tensor, ``x.long()`` of an int64 one) is the tensor itself, with nothing sent; and a view's
``requires_grad`` follows its base's, so a view made before ``v.requires_grad_()`` reads True after it (torch
2.13: ``w = v[1:]; v.requires_grad_(); w.requires_grad`` is True, ``w.is_leaf`` True, ``w.grad_fn`` None)."""

from __future__ import annotations

import pytest

from tests.client.test_grads_kept import _ops_sent as _requests


@pytest.mark.parametrize(("make", "method"), [("ones", "float"), ("ones", "double"), ("arange", "long"),
                                              ("ones", "half"), ("ones", "bool")])
def test_a_conversion_to_the_own_dtype_is_the_tensor_itself(ctx, monkeypatch, make, method):
    import gradserve.torch as torch

    x = torch.arange(3) if make == "arange" else torch.ones(3)
    if method == "double":
        x = x.double()
    elif method == "half":
        x = x.half()
    elif method == "bool":
        x = x.bool()
    x.tolist()
    sent = _requests(ctx, monkeypatch)
    y = getattr(x, method)()
    assert y is x and sent == []
    assert (x.double() is x) == (x.dtype == torch.float64)  # (another dtype: a new tensor)


def test_a_conversion_to_the_own_dtype_shares_the_leafs_flags_and_writes(ctx):
    import gradserve.torch as torch

    w = torch.ones(3, requires_grad=True)
    assert w.float() is w and w.float().is_leaf
    a = torch.ones(2, dtype=torch.float64)
    a.double().add_(1)
    assert a.tolist() == [2.0, 2.0] and a._version == 1


def test_a_views_requires_grad_follows_its_base(ctx):
    import gradserve.torch as torch

    v = torch.ones(4)
    w, u = v[1:], v.view(2, 2)
    assert not w.requires_grad
    v.requires_grad_()
    assert (w.requires_grad, w.is_leaf, w.grad_fn) == (True, True, None)
    assert u.requires_grad and u.is_leaf
    e = torch.ones(3, requires_grad=True)
    f = e[1:]
    e.detach().requires_grad_(False)  # (another autograd identity: e's view keeps its flags)
    assert f.requires_grad and f.grad_fn.name() == "SliceBackward0"


def test_the_same_against_torch(ctx):
    torch_ = pytest.importorskip("torch")
    import gradserve.torch as torch

    def program(t):
        x = t.ones(3)
        v = t.zeros(4)
        w = v[1:]
        v.requires_grad_()
        return [x.float() is x, x.double() is x, w.requires_grad, w.is_leaf, w.grad_fn is None,
                t.arange(3).long().dtype == t.int64]

    assert program(torch) == program(torch_)


@pytest.mark.parametrize("make", ["reshape_as", "view_as", "reshape"])
def test_an_inplace_op_on_a_no_grad_reshape_view_is_refused_at_its_line(ctx, monkeypatch, make):
    """A reshape of a contiguous leaf that requires grad, made under ``no_grad``, is a view of it (torch: requires
    grad, no grad_fn); an in-place op on it under grad mode is torch's no_grad-view error, at the line."""
    import gradserve.torch as torch

    c = torch.ones(2)
    r0 = c.detach().requires_grad_()
    with torch.no_grad():
        r2 = r0.reshape(2) if make == "reshape" else getattr(r0, make)(c)
    sent = _requests(ctx, monkeypatch)
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode and is being modified inplace"):
        r2.add_(1)
    assert sent == [] and r2.requires_grad and r2.grad_fn is None and sent == []


def test_an_inplace_op_on_a_view_made_before_its_base_required_grad_is_refused_at_its_line(ctx, monkeypatch):
    """torch 2.13: ``w = v[1:]; v.requires_grad_(); w.add_(1)`` raises "a view of a leaf Variable that requires grad
    is being used in an in-place operation.", with nothing changed; so does a view of the view."""
    import gradserve.torch as torch

    v = torch.ones(4)
    w = v[1:]
    u = w[:2]
    v.requires_grad_()
    sent = _requests(ctx, monkeypatch)
    for view in (w, u):
        with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad is being used in an "
                                               "in-place operation"):
            view.add_(1)
    assert sent == [] and w.requires_grad and w.is_leaf and sent == []
    assert v.detach().tolist() == [1.0] * 4


def test_a_view_changed_in_place_before_its_base_required_grad_gets_a_node(ctx):
    """torch 2.13: ``r = a.t().mul_(2); a.requires_grad_()`` leaves ``r`` a view whose version moved since it was
    made: read after, it is not a leaf, its node ``AsStridedBackward0``."""
    import gradserve.torch as torch

    a = torch.ones(4, 3)
    r = a.t().mul_(2)
    a.requires_grad_()
    assert (r.requires_grad, r.is_leaf, type(r.grad_fn).__name__) == (True, False, "AsStridedBackward0")
