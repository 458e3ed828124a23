"""gradserve.torch.nn's layers against torch.nn on a real server: the same seed gives the same initial parameters
(torch's reset_parameters through the session's generator), the same forward values and gradients, the same
state_dict keys and buffers, the same repr; plus the Module API model code uses (buffers, apply, children,
requires_grad_, ModuleList/ModuleDict/Sequential indexing). Without torch only the torch-free checks run."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import gradserve.torch as torch
import gradserve.torch.nn as nn


def _arr(t) -> np.ndarray:
    return np.array(t.detach().tolist(), dtype=np.float64)


def _build(mod, name: str):
    """A layer and an input for it, made the same way in both libraries (seed 0, float32)."""
    mod.manual_seed(0)
    n = mod.nn
    layers = {
        "conv2d": (lambda: n.Conv2d(3, 4, 3, stride=2, padding=1), (2, 3, 7, 7)),
        "conv1d": (lambda: n.Conv1d(2, 3, 2, dilation=2, padding_mode="circular", padding=1), (2, 2, 6)),
        "bn2d": (lambda: n.BatchNorm2d(3), (4, 3, 2, 2)),
        "bn1d": (lambda: n.BatchNorm1d(3, momentum=None), (5, 3)),
        "ln": (lambda: n.LayerNorm(4), (2, 3, 4)),
        "gn": (lambda: n.GroupNorm(2, 4), (2, 4, 3)),
        "emb": (lambda: n.Embedding(10, 3, padding_idx=1), None),
        "lstm": (lambda: n.LSTM(3, 4, num_layers=2, batch_first=True), (2, 5, 3)),
        "gru": (lambda: n.GRU(3, 4, bidirectional=True), (5, 2, 3)),
        "rnn": (lambda: n.RNN(3, 4, nonlinearity="relu"), (5, 3)),
        "lstmcell": (lambda: n.LSTMCell(3, 4), (2, 3)),
        "grucell": (lambda: n.GRUCell(3, 4), (2, 3)),
        "mha": (lambda: n.MultiheadAttention(8, 2, batch_first=True), (2, 5, 8)),
        "seq": (lambda: n.Sequential(n.Conv2d(1, 2, 3), n.MaxPool2d(2), n.Flatten(), n.Linear(8, 3), n.GELU(),
                                     n.Dropout(0.0), n.Linear(3, 2)), (2, 1, 6, 6)),
        "pools": (lambda: n.Sequential(n.AvgPool2d(2, ceil_mode=True), n.AdaptiveAvgPool2d((2, 1)), n.Upsample(
            scale_factor=2, mode="bilinear"), n.Unflatten(1, (1, 3)), n.Identity()), (2, 3, 5, 5)),
    }
    make, shape = layers[name]
    layer = make()
    if shape is None:
        x = mod.tensor([[1, 2, 1], [0, 9, 3]])
    else:
        x = mod.rand(*shape, requires_grad=True)
    return layer, x


def _run(mod, name: str, training: bool = True):
    layer, x = _build(mod, name)
    layer.train(training)
    out = layer(x, x, x) if name == "mha" else layer(x)
    first = out[0] if isinstance(out, tuple) else out
    loss = (first ** 2).sum()
    loss.backward()
    params = {k: (_arr(p), None if p.grad is None else _arr(p.grad)) for k, p in layer.named_parameters()}
    state = {k: _arr(v) for k, v in layer.state_dict().items()}
    return {"out": _arr(first), "params": params, "state": state, "repr": repr(layer),
            "x.grad": None if x.grad is None else _arr(x.grad)}


LAYERS = ["conv2d", "conv1d", "bn2d", "bn1d", "ln", "gn", "emb", "lstm", "gru", "rnn", "lstmcell", "grucell", "mha",
          "seq", "pools"]


@pytest.mark.parametrize("name", LAYERS)
def test_layer_matches_torch_from_the_same_seed(ctx, name):
    real = pytest.importorskip("torch")
    got, ref = _run(torch, name), _run(real, name)
    assert got["repr"] == ref["repr"]
    assert list(got["state"]) == list(ref["state"]) and list(got["params"]) == list(ref["params"])
    for key, (value, grad) in ref["params"].items():
        np.testing.assert_allclose(got["params"][key][0], value, rtol=1e-6, atol=1e-7, err_msg=key)
        np.testing.assert_allclose(got["params"][key][1], grad, rtol=2e-4, atol=2e-5, err_msg=key + ".grad")
    for key, value in ref["state"].items():
        np.testing.assert_allclose(got["state"][key], value, rtol=1e-5, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(got["out"], ref["out"], rtol=2e-5, atol=2e-6)
    if ref["x.grad"] is not None:
        np.testing.assert_allclose(got["x.grad"], ref["x.grad"], rtol=2e-4, atol=2e-5)


def test_batch_norm_eval_mode_uses_running_statistics(ctx):
    real = pytest.importorskip("torch")
    outs = []
    for mod in (torch, real):
        layer, x = _build(mod, "bn2d")
        layer(x)  # one training step moves the running statistics
        layer.eval()
        outs.append((_arr(layer(x)), _arr(layer.running_mean), _arr(layer.running_var),
                     int(layer.num_batches_tracked)))
    np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-6)
    np.testing.assert_allclose(outs[0][2], outs[1][2], rtol=1e-6)
    assert outs[0][3] == outs[1][3] == 1


def test_running_statistics_read_between_training_steps_are_the_newest(ctx):
    # batch_norm changes its running statistics in place on the server: a value the client read before is stale
    # after the next training step (the client had kept showing the first step's)
    layer = nn.BatchNorm1d(2)
    x = torch.arange(8.0).reshape(4, 2)
    xs = np.arange(8.0).reshape(4, 2)
    mean, var = np.zeros(2), np.ones(2)
    for k in range(1, 4):
        layer(x * k)
        mean = 0.9 * mean + 0.1 * (xs * k).mean(0)
        var = 0.9 * var + 0.1 * (xs * k).var(0, ddof=1)
        np.testing.assert_allclose(_arr(layer.running_mean), mean, rtol=1e-6)
        np.testing.assert_allclose(_arr(layer.running_var), var, rtol=1e-6)
    with torch.no_grad():  # (under no_grad too: the statistics are not autograd's)
        layer(x)
    mean = 0.9 * mean + 0.1 * xs.mean(0)
    np.testing.assert_allclose(_arr(layer.running_mean), mean, rtol=1e-6)
    layer.eval()
    layer(x * 5)  # (evaluation mode reads them and leaves them)
    np.testing.assert_allclose(_arr(layer.running_mean), mean, rtol=1e-6)
    assert int(layer.num_batches_tracked) == 4 and layer.running_mean._version == 1  # (reset_parameters' zero_)


def test_module_api_that_model_code_uses(ctx):
    model = nn.Sequential(collections.OrderedDict([("conv", nn.Conv2d(1, 2, 3)), ("bn", nn.BatchNorm2d(2)),
                                                   ("act", nn.ReLU())]))
    assert isinstance(model[0], nn.Conv2d) and isinstance(model[-1], nn.ReLU) and len(model) == 3
    assert isinstance(model[1:], nn.Sequential) and list(model[1:]._modules) == ["bn", "act"]
    assert [n for n, _ in model.named_buffers()] == ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    assert list(model.state_dict()) == ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean",
                                        "bn.running_var", "bn.num_batches_tracked"]
    seen = []
    model.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Conv2d", "BatchNorm2d", "ReLU", "Sequential"]
    assert [type(m).__name__ for m in model.children()] == ["Conv2d", "BatchNorm2d", "ReLU"]
    assert len(list(model.modules())) == 4
    model.requires_grad_(False)
    assert not any(p.requires_grad for p in model.parameters())
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    layers.append(nn.Tanh())
    assert len(layers) == 4 and isinstance(layers[-1], nn.Tanh) and len(list(layers.parameters())) == 6
    heads = nn.ModuleDict({"a": nn.Linear(2, 1), "b": nn.Linear(2, 3)})
    assert list(heads.keys()) == ["a", "b"] and "a" in heads and heads["b"].out_features == 3
    model.eval()
    assert not model.bn.training and not model.conv.training


def test_clip_grad_and_parameter_vectors(ctx):
    lin = nn.Linear(3, 2)
    (lin(torch.ones(4, 3)) * 10).sum().backward()
    grads = np.concatenate([_arr(p.grad).ravel() for p in lin.parameters()])
    total = nn.utils.clip_grad_norm_(lin.parameters(), 1.0)
    np.testing.assert_allclose(float(total), np.linalg.norm(grads), rtol=1e-5)
    clipped = np.concatenate([_arr(p.grad).ravel() for p in lin.parameters()])
    np.testing.assert_allclose(clipped, grads / (np.linalg.norm(grads) + 1e-6), rtol=1e-5)
    nn.utils.clip_grad_value_(lin.parameters(), 0.1)
    assert np.abs(np.concatenate([_arr(p.grad).ravel() for p in lin.parameters()])).max() <= 0.1 + 1e-7
    vec = nn.utils.parameters_to_vector(lin.parameters())
    assert tuple(vec.shape) == (8,)
    nn.utils.vector_to_parameters(torch.arange(8.0), lin.parameters())
    assert lin.weight.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and lin.bias.tolist() == [6.0, 7.0]


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    ((), {}, "Threshold.__init__() missing 2 required positional arguments: 'threshold' and 'value'"),
    ((0.1,), {}, "Threshold.__init__() missing 1 required positional argument: 'value'"),
    ((0.1, 2.0, True, 5), {}, "Threshold.__init__() takes from 3 to 4 positional arguments but 5 were given"),
    ((0.1, 2.0), {"bad": 1}, "Threshold.__init__() got an unexpected keyword argument 'bad'")])
def test_a_modules_required_arguments_are_required(args, kwargs, message):
    """torch 2.13's messages (Python's own, for ``nn.Threshold``'s signature); a module made without a server."""
    with pytest.raises(TypeError) as caught:
        nn.Threshold(*args, **kwargs)
    assert str(caught.value) == message
    assert repr(nn.Threshold(threshold=1.0, value=0.0)) == "Threshold(threshold=1.0, value=0.0)"
    t = pytest.importorskip("torch")
    with pytest.raises(TypeError) as theirs:
        t.nn.Threshold(*args, **kwargs)
    assert str(theirs.value) == message
