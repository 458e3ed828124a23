"""A backward without create_graph accumulates into an existing ``.grad`` in place (torch's AccumulateGrad), and
``zero_grad(set_to_none=False)`` zeroes it in place: the gradient a handle names is still the leaf's, so the client
keeps it (no ``bind`` of a new name, nothing asked for it) and the values read later are torch's."""

from __future__ import annotations

import pytest


def _ops_sent(ctx, monkeypatch) -> list:
    sent = []
    real = ctx.client.run_ops

    def spy(session_id, ops, **kwargs):
        sent.append([op["op"] for op in ops])
        return real(session_id, ops, **kwargs)
    monkeypatch.setattr(ctx.client, "run_ops", spy)
    return sent


def test_a_second_backward_keeps_the_gradient_handle_and_binds_nothing(ctx, monkeypatch):
    import gradserve.torch as torch

    w = torch.tensor([1.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    g = w.grad
    assert g.tolist() == [3.0, 3.0]
    sent = _ops_sent(ctx, monkeypatch)
    (w * w).sum().backward()  # accumulates in place: g is still w.grad
    assert w.grad is g
    assert g.shape == (2,) and g.dtype is torch.float32 and not g.requires_grad and g.is_leaf
    assert g.tolist() == [5.0, 7.0]
    assert not any("bind" in ops for ops in sent)


def test_an_existing_gradient_changed_in_place_is_torchs_tensor(ctx):
    import gradserve.torch as torch

    w = torch.tensor([1.0, 2.0], requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    (w ** 2).sum().backward()
    g = w.grad
    opt.zero_grad(set_to_none=False)  # zeroed in place
    assert w.grad is g and g.tolist() == [0.0, 0.0]
    (w * 2).sum().backward()
    assert w.grad is g and g.tolist() == [2.0, 2.0]
    opt.zero_grad()  # set to None: a later backward makes a new tensor
    assert w.grad is None
    (w * 4).sum().backward()
    assert w.grad is not g and w.grad.tolist() == [4.0, 4.0] and g.tolist() == [2.0, 2.0]


def test_create_graph_replaces_the_gradient_as_torch_does(ctx):
    import gradserve.torch as torch

    w = torch.tensor([1.0, 2.0], requires_grad=True)
    (w ** 2).sum().backward()
    g = w.grad
    (w ** 2).sum().backward(create_graph=True)  # old + new: a new tensor that requires grad
    assert w.grad is not g and w.grad.requires_grad
    assert w.grad.tolist() == [4.0, 8.0] and g.tolist() == [2.0, 4.0]


def test_the_kept_gradient_agrees_with_torch():
    torch = pytest.importorskip("torch")
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    g = w.grad
    (w * w).sum().backward()
    assert w.grad is g and g.tolist() == [5.0, 7.0]
    (w ** 2).sum().backward(create_graph=True)
    assert w.grad is not g and w.grad.requires_grad
