"""Results whose shape the op table declares (``shape``: conv, pooling, linear, cat, losses, pad, interpolate,
``new_zeros``...), and advanced indexing's, have it in the client without a request, so that ``x.view(x.size(0),
-1)`` after a convolution costs no round trip and a shape error after it comes at its line; the shape is the server's
result's, and torch's."""

from __future__ import annotations

import numpy as np
import pytest

from tests.client.test_grads_kept import _ops_sent as _requests

EXPRESSIONS = [
    "F.conv2d(x, w)", "F.conv2d(x, w, padding=1, stride=2)", "F.conv2d(x, w, padding='same', dilation=2)",
    "F.max_pool2d(x, 2)", "F.max_pool2d(x, 3, stride=2, ceil_mode=True)", "F.avg_pool2d(x, 2)",
    "F.adaptive_avg_pool2d(x, (1, 1))", "F.linear(m, m)", "F.linear(m, m, v[:5])", "F.softmax(m, dim=1)",
    "F.log_softmax(m, 1)", "F.cross_entropy(m, t)", "F.cross_entropy(m, t, reduction='none')", "F.mse_loss(m, m)",
    "F.embedding(i, e)", "torch.stack([m, m])", "torch.cat([m, m], 1)",
    "m.gather(1, torch.zeros(5, 2, dtype=torch.long))",
    "m.index_select(0, i)", "F.pad(x, (1, 1))", "F.interpolate(x, scale_factor=2)", "F.dropout(m, 0.5)",
    "F.layer_norm(m, (6,))", "F.batch_norm(x, torch.zeros(3), torch.ones(3))",
    "torch.bmm(torch.ones(2, 3, 4), torch.ones(2, 4, 5))", "m.new_zeros(3, 2)", "m.new_full((2,), 1.0)",
    "m.repeat(2, 1, 1)", "F.one_hot(i, 4)", "m.cumsum(1)", "torch.tril(m)", "torch.einsum('ij,kj->ik', m, m)",
    "torch.einsum('bchw,oc->bohw', x, w[:, :, 0, 0])", "torch.einsum('...j,j', m, v)",
    # advanced indexing (a copy: its shape from the index's; torch applies ints first, where numpy differs)
    "x[k]", "x[k, 1:3]", "x[:, i]", "x[torch.arange(2), i[:2]]", "x[..., i]", "x[k, :, i]", "x[0, :, i]",
    "x[j]", "x[j, 1]", "x[:, j, 2:5]", "x[1:2, [1, 2, 0]]", "x[[[0, 1], [1, 0]], 0]", "x[k, i, torch.tensor(2)]",
    "m[i]", "m[torch.tensor([[1], [2]]), i]",
]


def _inputs(torch):
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8) / 100
    w = torch.ones(4, 3, 3, 3) / 10
    m = torch.arange(30, dtype=torch.float32).reshape(5, 6) / 10
    v = torch.ones(6)
    i = torch.tensor([0, 2, 1])
    t = torch.tensor([0, 5, 1, 2, 3])
    e = torch.ones(10, 4)
    j, k = torch.tensor([[0, 1], [1, 0]]), torch.tensor([1, 0, 1])
    return {"torch": torch, "F": torch.nn.functional, "x": x, "w": w, "m": m, "v": v, "i": i, "t": t, "e": e, "j": j,
            "k": k}


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_a_declared_shape_is_known_without_a_request_and_is_the_servers(ctx, monkeypatch, expression):
    import gradserve.torch as torch

    names = _inputs(torch)
    for value in names.values():
        if isinstance(value, torch.Tensor):
            value.shape  # noqa: B018 - (the inputs are sent before the spy)
    sent = _requests(ctx, monkeypatch)
    y = eval(expression, names)  # noqa: S307 - (the test's own expressions)
    shape = tuple(y.shape)
    flat = y.reshape(-1)
    assert sent == [] and flat.shape == (int(np.prod(shape)),)
    assert np.array(y.tolist()).shape == shape  # (the values the server computed)


def test_the_declared_shapes_are_torchs(ctx):
    torch_ = pytest.importorskip("torch")
    import gradserve.torch as torch

    ours, theirs = _inputs(torch), _inputs(torch_)
    for expression in EXPRESSIONS:
        torch_.manual_seed(0)
        assert tuple(eval(expression, ours).shape) == tuple(eval(expression, theirs).shape), expression  # noqa: S307


def test_a_wrong_view_after_a_convolution_raises_at_its_line(ctx, monkeypatch):
    import gradserve.torch as torch
    import gradserve.torch.nn.functional as F

    x, w = torch.ones(2, 3, 8, 8), torch.ones(4, 3, 3, 3)
    x.shape, w.shape  # noqa: B018
    sent = _requests(ctx, monkeypatch)
    y = F.max_pool2d(F.relu(F.conv2d(x, w)), 2)
    with pytest.raises(RuntimeError, match=r"shape '\[2, 40\]' is invalid for input of size 72"):
        y.view(2, 40)
    assert sent == [] and y.view(y.size(0), -1).shape == (2, 36) and sent == []
