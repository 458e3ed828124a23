"""The rest of torch's surface in the client (issue 23 item 5): devices (cpu only, CUDA refused as torch without a
GPU refuses it), legacy constructors and Variable, Tensor.type, .data, numpy-style keyword names,
set_grad_enabled called as a function. Each against a real server; torch's values and messages where torch is
installed are compared in test_surface_torch.py."""

from __future__ import annotations

import pytest

import gradserve.torch as torch


# ----- devices ------------------------------------------------------------------------------------------------
def test_device_parses_prints_and_compares_as_torch_s():
    d = torch.device("cuda:1")
    assert (d.type, d.index, str(d), repr(d)) == ("cuda", 1, "cuda:1", "device(type='cuda', index=1)")
    assert torch.device("cpu") == torch.device("cpu") and torch.device("cpu") != "cpu"
    assert repr(torch.device("cpu", 0)) == "device(type='cpu', index=0)"
    assert torch.device(torch.device("cpu")) == torch.device("cpu")
    assert len({torch.device("cpu"), torch.device("cpu")}) == 1
    with pytest.raises(RuntimeError, match="^Expected one of cpu, cuda, .* at start of device string: gpu$"):
        torch.device("gpu")
    with pytest.raises(RuntimeError, match="^Device index must not be negative$"):
        torch.device("cuda", -1)


def test_tensors_are_on_the_cpu_and_move_there_as_themselves(ctx):
    x = torch.ones(2, 3)
    assert x.device == torch.device("cpu") and str(x.device) == "cpu" and not x.is_cuda and x.get_device() == -1
    assert x.to("cpu") is x and x.cpu() is x and x.to(torch.device("cpu")) is x and x.to(device="cpu") is x
    y = x.to("cpu", torch.float64)
    assert y.dtype == torch.float64 and y.tolist() == [[1.0] * 3] * 2
    assert x.to(torch.zeros(1, dtype=torch.int64)).dtype == torch.int64
    z = x.to(torch.float32, copy=True)
    assert z is not x and z.tolist() == x.tolist()


@pytest.mark.parametrize("call", [
    lambda: torch.zeros(2, device="cuda"),
    lambda: torch.ones(2).cuda(),
    lambda: torch.ones(2).to("cuda"),
    lambda: torch.ones(2).to(torch.device("cuda", 0)),
    lambda: torch.randn(2, device="cuda:0"),
    lambda: torch.FloatTensor([1.0], device="cuda"),
    lambda: torch.ones(2).type("torch.cuda.FloatTensor"),
])
def test_cuda_asked_for_fails_as_torch_without_cuda_does(ctx, call):
    with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled$"):
        call()


def test_device_keyword_is_accepted_by_every_op(ctx):
    cpu = torch.device("cpu")
    assert torch.linspace(0, 1, 3, device=cpu).tolist() == [0.0, 0.5, 1.0]
    assert torch.arange(3, device="cpu").tolist() == [0, 1, 2]
    assert torch.zeros(2, device=cpu, pin_memory=False).tolist() == [0.0, 0.0]
    assert torch.tensor([1.0], device="cpu").tolist() == [1.0]
    assert torch.full((2,), 3.0, device=None).tolist() == [3.0, 3.0]
    assert torch.ones_like(torch.zeros(2), device="cpu").tolist() == [1.0, 1.0]


def test_cuda_module_says_no_gpu():
    assert torch.cuda.is_available() is False and torch.cuda.device_count() == 0
    torch.cuda.manual_seed_all(0)  # a no-op, as torch's without a GPU
    with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled$"):
        torch.cuda.current_device()


def test_training_loop_written_for_any_device_runs(ctx):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.tensor([[1.0, 2.0, 3.0], [0.0, 1.0, 0.0]]).to(device)
    y = torch.tensor([[1.0], [0.0]]).to(device)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 10


# ----- legacy spellings ------------------------------------------------------------------------------------------
def test_legacy_constructors_make_tensors_of_their_dtype(ctx):
    assert repr(torch.Tensor([1, 2])) == "tensor([1., 2.])"
    assert torch.Tensor(2, 3).shape == torch.Size([2, 3]) and torch.Tensor(2, 3).dtype == torch.float32
    assert torch.Tensor().shape == torch.Size([0]) and torch.Tensor(torch.Size([4])).shape == torch.Size([4])
    assert repr(torch.LongTensor([1, 2])) == "tensor([1, 2])"
    assert torch.DoubleTensor(2).dtype == torch.float64 and torch.BoolTensor([True]).dtype == torch.bool
    assert repr(torch.FloatTensor([[1.5]])) == "tensor([[1.5000]])"
    assert isinstance(torch.zeros(1), torch.FloatTensor) and not isinstance(torch.zeros(1), torch.DoubleTensor)
    assert isinstance(torch.zeros(1), torch.Tensor)
    with pytest.raises(TypeError, match=r"^expected TensorOptions\(dtype=float, .*got TensorOptions\(dtype=double"):
        torch.FloatTensor(torch.ones(2, dtype=torch.float64))
    with pytest.raises(TypeError, match="received an invalid combination of arguments"):
        torch.Tensor([1.0], dtype=torch.float64)


def test_variable_is_a_new_leaf_sharing_its_data(ctx):
    t = torch.ones(2)
    v = torch.autograd.Variable(t, requires_grad=True)
    assert v is not t and v.is_leaf and v.requires_grad and not t.requires_grad
    assert isinstance(t, torch.autograd.Variable)
    (v * 3).sum().backward()
    assert v.grad.tolist() == [3.0, 3.0]


def test_tensor_type_names_and_converts(ctx):
    x = torch.zeros(2)
    assert x.type() == "torch.FloatTensor" and torch.tensor([1]).type() == "torch.LongTensor"
    assert x.type(torch.float64).dtype == torch.float64 and x.type("torch.LongTensor").tolist() == [0, 0]
    assert x.type(torch.DoubleTensor).type() == "torch.DoubleTensor"


def test_data_reads_a_detached_alias_and_assigns_values_without_history(ctx):
    w = torch.ones(2, requires_grad=True)
    d = w.data
    assert not d.requires_grad and d.tolist() == [1.0, 1.0]
    (w * 2).sum().backward()
    w.data -= 0.5 * w.grad.data  # the classic hand-written SGD step
    assert w.tolist() == [0.0, 0.0] and w.requires_grad and w.is_leaf
    w.data = torch.tensor([5.0, 6.0])
    assert w.tolist() == [5.0, 6.0] and w.is_leaf and w.grad_fn is None


def test_numpy_style_keyword_names(ctx):
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert x.sum(axis=1, keepdims=True).tolist() == [[3.0], [7.0]]
    assert torch.mean(x, axis=0).tolist() == [2.0, 3.0]
    assert torch.cat([x, x], axis=1).shape == torch.Size([2, 4])
    with pytest.raises(TypeError, match="multiple values for argument 'dim'"):
        x.sum(axis=0, dim=0)


# ----- grad mode -------------------------------------------------------------------------------------------------
def test_set_grad_enabled_called_as_a_function_changes_the_mode(ctx):
    try:
        mode = torch.set_grad_enabled(False)
        assert repr(mode) == "torch.autograd.grad_mode.set_grad_enabled(mode=False)"
        assert not torch.is_grad_enabled()
        x = torch.ones(2, requires_grad=True)
        assert (x * 2).requires_grad is False
        torch.set_grad_enabled(True)
        assert torch.is_grad_enabled() and (x * 2).requires_grad
    finally:
        torch.set_grad_enabled(True)


def test_set_grad_enabled_as_context_manager_and_decorator_restores_the_mode(ctx):
    with torch.set_grad_enabled(False):
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled()

    @torch.set_grad_enabled(False)
    def f():
        return torch.is_grad_enabled()

    assert torch.is_grad_enabled() and f() is False and torch.is_grad_enabled()
    with torch.no_grad():
        with torch.set_grad_enabled(True):
            assert torch.is_grad_enabled()
        assert not torch.is_grad_enabled()


def test_module_to_checks_the_device_and_converts_floating_parameters(ctx):
    model = torch.nn.Linear(2, 1)
    assert model.to("cpu") is model and model.cpu() is model and model.to(torch.device("cpu")) is model
    with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled$"):
        model.cuda()
    with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled$"):
        model.to("cuda")
    model.double()
    assert model.weight.dtype == torch.float64 and isinstance(model.weight, torch.nn.Parameter)
    assert model(torch.ones(1, 2, dtype=torch.float64)).dtype == torch.float64
    with pytest.raises(TypeError, match="only accepts floating point or complex dtypes, but got desired "
                                        "dtype=torch.int64$"):
        model.to(torch.int64)


def test_the_client_page_s_training_program_runs(ctx, tmp_path, monkeypatch):
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "tutorial" / "client.md").read_text()
    section = page[page.index("## Data, checkpoints, devices, `torch.func`, threads"):]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "client.md", "exec"), scope)  # noqa: S102 - the page's own example
    assert scope["per_sample"].shape == torch.Size([64, 3])
    saved = torch.load(tmp_path / "ckpt.pt")
    assert list(saved["model"]) == ["0.weight", "0.bias", "2.weight", "2.bias"] and saved["opt"]["state"][0]["step"]


def test_deepcopy_of_leaves_parameters_and_modules_as_torch(ctx):
    import copy

    x = torch.ones(2, requires_grad=True)
    x.grad = torch.tensor([1.0, 2.0])
    y = copy.deepcopy(x)
    assert y is not x and y.requires_grad and y.is_leaf and y.grad.tolist() == [1.0, 2.0]
    y.data -= 1
    assert x.tolist() == [1.0, 1.0] and y.tolist() == [0.0, 0.0]
    with pytest.raises(RuntimeError, match="^Only Tensors created explicitly by the user \\(graph leaves\\) support"):
        copy.deepcopy(x * 2)
    model = torch.nn.Linear(2, 1)
    best = copy.deepcopy(model)
    assert isinstance(best.weight, torch.nn.Parameter) and best.weight is not model.weight
    assert list(best.parameters())[0] is best.weight and best.weight.tolist() == model.weight.tolist()
    snapshot = copy.deepcopy(model.state_dict())
    with torch.no_grad():
        model.weight.add_(1.0)
    assert snapshot["weight"].tolist() == best.weight.tolist() != model.weight.tolist()


def test_linear_takes_device_and_dtype(ctx):
    assert torch.nn.Linear(2, 1, device="cpu").weight.device == torch.device("cpu")
    assert torch.nn.Linear(2, 1, dtype=torch.float64).bias.dtype == torch.float64
    with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled$"):
        torch.nn.Linear(2, 1, device="cuda")


def test_device_as_a_context_manager(ctx):
    with torch.device("cpu"):
        assert torch.ones(1).device == torch.device("cpu")
    with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled$"):
        with torch.device("cuda"):
            pass
