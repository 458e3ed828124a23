"""torch.save / torch.load between real torch and the client (skipped without torch): a checkpoint torch
writes loads in the client and trains on as torch does; the client's files load in torch with
``weights_only=True``, the default."""

from __future__ import annotations

import io

import numpy as np
import pytest

import gradserve.torch as gtorch

torch = pytest.importorskip("torch")


def _mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.Tanh(), lib.nn.Linear(4, 1))


def _step(lib, model, opt, x, y):
    opt.zero_grad()
    loss = lib.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def test_torch_checkpoint_loads_in_the_client_and_back_and_training_goes_on_as_in_torch(ctx, tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 1)).astype(np.float32)
    torch.manual_seed(0)
    model = _mlp(torch)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(3):
        _step(torch, model, opt, torch.tensor(x), torch.tensor(y))
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, tmp_path / "torch.pt")

    # the client loads torch's file and trains on
    ckpt = gtorch.load(tmp_path / "torch.pt")
    assert ckpt["epoch"] == 3
    cmodel = _mlp(gtorch)
    cmodel.load_state_dict(ckpt["model"])
    copt = gtorch.optim.Adam(cmodel.parameters(), lr=0.05)
    copt.load_state_dict(ckpt["optimizer"])
    client_losses = [_step(gtorch, cmodel, copt, gtorch.tensor(x), gtorch.tensor(y)) for _ in range(3)]
    torch_losses = [_step(torch, model, opt, torch.tensor(x), torch.tensor(y)) for _ in range(3)]
    np.testing.assert_allclose(client_losses, torch_losses, rtol=1e-5)

    # ... saves, and torch (weights_only=True, its default) loads the client's file and trains on
    gtorch.save({"model": cmodel.state_dict(), "optimizer": copt.state_dict(), "epoch": 6}, tmp_path / "client.pt")
    back = torch.load(tmp_path / "client.pt")
    assert back["epoch"] == 6 and list(back["model"]) == list(model.state_dict())
    assert back["model"]._metadata == model.state_dict()._metadata
    for k, v in model.state_dict().items():
        torch.testing.assert_close(back["model"][k], v, rtol=1e-5, atol=1e-6)
    theirs = opt.state_dict()
    assert back["optimizer"]["param_groups"] == theirs["param_groups"]
    for i, state in theirs["state"].items():
        assert list(back["optimizer"]["state"][i]) == list(state)
        for k, v in state.items():
            torch.testing.assert_close(back["optimizer"]["state"][i][k], v, rtol=1e-5, atol=1e-6, msg=f"{i} {k}")
    model2 = _mlp(torch)
    model2.load_state_dict(back["model"])
    opt2 = torch.optim.Adam(model2.parameters(), lr=0.05)
    opt2.load_state_dict(back["optimizer"])
    np.testing.assert_allclose(_step(torch, model2, opt2, torch.tensor(x), torch.tensor(y)),
                               _step(torch, model, opt, torch.tensor(x), torch.tensor(y)), rtol=1e-5)


def test_tensors_of_every_client_dtype_and_containers_load_in_torch(ctx):
    obj = {"f": gtorch.tensor([[1.5, -2.0]]), "d": gtorch.tensor([0.1], dtype=gtorch.float64),
           "i": gtorch.tensor([3, -1]), "b": gtorch.tensor([True, False]), "s": gtorch.tensor(4.0),
           "p": gtorch.nn.Parameter(gtorch.ones(2)), "g": gtorch.zeros(2).requires_grad_(),
           "meta": [gtorch.Size([2, 3]), gtorch.float64, (1, "x", None)], "e": gtorch.zeros(0, 3)}
    buf = io.BytesIO()
    gtorch.save(obj, buf)
    buf.seek(0)
    back = torch.load(buf)
    assert back["f"].tolist() == [[1.5, -2.0]] and back["f"].dtype == torch.float32
    assert back["d"].dtype == torch.float64 and back["i"].dtype == torch.int64 and back["b"].tolist() == [True, False]
    assert back["s"].shape == torch.Size([]) and back["s"].item() == 4.0
    assert isinstance(back["p"], torch.nn.Parameter) and back["p"].requires_grad
    assert back["g"].requires_grad and back["g"].is_leaf
    assert back["meta"] == [torch.Size([2, 3]), torch.float64, (1, "x", None)]
    assert back["e"].shape == torch.Size([0, 3])


def test_a_torch_view_and_shared_storage_load_with_torch_s_values(ctx):
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    obj = {"t": base.t(), "slice": base[1:3, ::2], "again": base, "col": base[:, 5]}
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    back = gtorch.load(buf)
    for k, v in obj.items():
        assert back[k].tolist() == v.tolist() and back[k].dtype == gtorch.float64


def test_sgd_momentum_state_moves_between_the_client_and_torch(ctx):
    x, y = np.ones((4, 3), dtype=np.float32), np.zeros((4, 1), dtype=np.float32)
    torch.manual_seed(1)
    model = _mlp(torch)
    start = io.BytesIO()
    torch.save(model.state_dict(), start)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    cmodel = _mlp(gtorch)
    cmodel.load_state_dict(gtorch.load(io.BytesIO(start.getvalue())))
    copt = gtorch.optim.SGD(cmodel.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    for _ in range(2):
        _step(torch, model, opt, torch.tensor(x), torch.tensor(y))
        _step(gtorch, cmodel, copt, gtorch.tensor(x), gtorch.tensor(y))
    buf = io.BytesIO()
    gtorch.save(copt.state_dict(), buf)
    buf.seek(0)
    ours, theirs = torch.load(buf), opt.state_dict()
    assert ours["param_groups"] == theirs["param_groups"] and list(ours["state"]) == list(theirs["state"])
    for i, state in theirs["state"].items():
        torch.testing.assert_close(ours["state"][i]["momentum_buffer"], state["momentum_buffer"], rtol=1e-5,
                                   atol=1e-6)


def test_a_torch_tensor_of_a_dtype_the_server_lacks_fails_clearly(ctx):
    buf = io.BytesIO()
    torch.save({"ok": torch.ones(1), "complex": torch.ones(2, dtype=torch.complex64)}, buf)
    buf.seek(0)
    with pytest.raises(RuntimeError, match="stored as torch.ComplexFloatStorage; the server's dtypes are float32, "):
        gtorch.load(buf)


def _bits(t):
    """A torch tensor's bits (float16/bfloat16 as int16), to compare values exactly: -0.0 and NaN payloads too."""
    return t.detach().contiguous().view(torch.int16).tolist()


#: NaNs of both signs, quiet and signalling, with payloads (their bits, as int16), per type
_NANS = {"float16": [0x7C01, 0x7E55, -0x01FF, 0x7FFF, 0x7E00], "bfloat16": [0x7FC1, -0x007F, 0x7F81, 0x7FFF, 0x7FC0]}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_tensors_and_state_dicts_move_between_torch_and_the_client_bit_for_bit(ctx, dtype):
    tdt, gdt = getattr(torch, dtype), getattr(gtorch, dtype)
    torch.manual_seed(3)
    x = torch.randn(5, 7) * 300
    special = torch.tensor([0.0, -0.0, 1e-8, 65504.0, 7e4, float("inf"), float("nan"), 2**-25, -3e38])
    model = torch.nn.Sequential(torch.nn.Linear(7, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).to(tdt)
    nans = torch.tensor(_NANS[dtype], dtype=torch.int16).view(tdt)
    obj = {"x": x.to(tdt), "view": x.to(tdt).t()[2:5], "special": special.to(tdt), "model": model.state_dict(),
           "p": torch.nn.Parameter(x[0].to(tdt)), "leaf": x[1].to(tdt).requires_grad_(), "dtype": tdt,
           "nans": nans.clone(), "nan_leaf": nans.clone().requires_grad_(), "nan_param": torch.nn.Parameter(nans)}
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    ours = gtorch.load(buf)
    assert ours["dtype"] is gdt and isinstance(ours["p"], gtorch.nn.Parameter) and ours["leaf"].requires_grad
    assert ours["x"].dtype is gdt and ours["model"]["0.weight"].dtype is gdt
    # the client computes on what it loaded as torch does, and its file loads in torch with the same bits
    cmodel = gtorch.nn.Sequential(gtorch.nn.Linear(7, 4), gtorch.nn.Tanh(), gtorch.nn.Linear(4, 2)).to(gdt)
    cmodel.load_state_dict(ours["model"])
    ours["y"] = cmodel(ours["x"]).detach()
    out = io.BytesIO()
    gtorch.save(ours, out)
    out.seek(0)
    back = torch.load(out)
    assert back["dtype"] is tdt and isinstance(back["p"], torch.nn.Parameter) and back["leaf"].requires_grad
    assert back["nan_leaf"].requires_grad and isinstance(back["nan_param"], torch.nn.Parameter)
    for k in ("x", "view", "special", "p", "leaf", "nans", "nan_leaf", "nan_param"):
        assert back[k].dtype is tdt and _bits(back[k]) == _bits(obj[k]), k
    assert list(back["model"]) == list(model.state_dict())
    for k, v in model.state_dict().items():
        assert back["model"][k].dtype is tdt and _bits(back["model"][k]) == _bits(v), k
    assert back["y"].dtype is tdt
    torch.testing.assert_close(back["y"], model(obj["x"]).detach(), atol=0, rtol=0)
