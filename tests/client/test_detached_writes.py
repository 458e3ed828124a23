"""A write through a detached alias (``w.detach()``, ``w.data``) changes ``w``'s values, never its autograd flags:
the client keeps what it knows of ``w``'s flags (torch's refusal of ``w.add_()`` is raised at its line, with nothing
sent), and asks for ``w``'s values again. ``w.detach()`` shares ``w``'s version counter, ``w.data`` does not (torch's
``variable_data``): a write through ``w.data`` between a forward that saved ``w`` and its backward is not refused."""

from __future__ import annotations

import pytest

from tests.client.test_grads_kept import _ops_sent as _requests


@pytest.mark.parametrize("alias", ["detach", "data"])
def test_a_write_through_a_detached_alias_keeps_the_leafs_flags(ctx, monkeypatch, alias):
    import gradserve.torch as torch

    w = torch.ones(3, requires_grad=True)
    sent = _requests(ctx, monkeypatch)
    (w.detach() if alias == "detach" else w.data).mul_(2)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        w.add_(1)
    assert sent == []  # (decided from the flags the client kept)
    assert w.requires_grad and w.is_leaf and sent == []
    assert w.tolist() == [2.0, 2.0, 2.0] and len(sent) == 1  # (the values are asked for again)


def test_a_new_leafs_version_is_known_without_asking(ctx, monkeypatch):
    import gradserve.torch as torch

    w = torch.ones(3, requires_grad=True)
    sent = _requests(ctx, monkeypatch)
    assert w._version == 0 and sent == []


@pytest.mark.parametrize("alias", ["detach", "data"])
def test_a_write_through_data_is_invisible_to_autograd(ctx, alias):
    """torch 2.13: through ``.data`` the gradient uses the new values (2w * x = [4, 8, 12]) and ``w._version`` stays
    0; through ``detach()`` the version moves to 1 and backward refuses the saved ``w``. A view made before keeps its
    node through ``.data`` (SelectBackward0), and a transposed leaf's gradient arrives."""
    import gradserve.torch as torch

    w = torch.ones(3, requires_grad=True)
    x = torch.tensor([1.0, 2.0, 3.0])
    y = (w * w * x).sum()
    (w.data if alias == "data" else w.detach()).mul_(2)
    if alias == "data":
        y.backward()
        assert w.grad.tolist() == [4.0, 8.0, 12.0] and w._version == 0
    else:
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()
        assert w._version == 1
    b = torch.ones(3, 2).t().requires_grad_()
    v = b[0]
    (b.data if alias == "data" else b.detach()).mul_(2)
    assert type(v.grad_fn).__name__ == ("SelectBackward0" if alias == "data" else "AsStridedBackward0")
    v.sum().backward()
    if alias == "data":
        assert b.grad.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
