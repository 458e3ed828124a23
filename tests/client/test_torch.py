"""gradserve.torch against a real server: operators, reprs, grad mode, autograd, errors, round trips, name
release, optimizers and nn, session clean-up."""

from __future__ import annotations

import math
import traceback
import warnings

import numpy as np
import pytest

import gradserve
import gradserve.torch as torch
import gradserve.torch.nn.functional as F
from gradserve.torch import nn, optim


def sent(ctx) -> int:
    return ctx.client.requests


# ----- values, operators, printing ---------------------------------------------------------------------------
def test_the_issue_example_prints_torch_s_repr(ctx):
    x = torch.tensor([2.0, 3.0], requires_grad=True)
    y = x.pow(2).sum()
    y.backward()
    assert repr(x.grad) == "tensor([4., 6.])"
    assert repr(x) == "tensor([2., 3.], requires_grad=True)"
    assert repr(y) == "tensor(13., grad_fn=<SumBackward0>)"


def test_python_operators_and_reflected_forms(ctx):
    a = torch.tensor([1.0, 2.0, 4.0])
    b = torch.tensor([2.0, 2.0, 2.0])
    assert (a + b).tolist() == [3.0, 4.0, 6.0] and (1 + a).tolist() == [2.0, 3.0, 5.0]
    assert (a - b).tolist() == [-1.0, 0.0, 2.0] and (10 - a).tolist() == [9.0, 8.0, 6.0]
    assert (a * 3).tolist() == [3.0, 6.0, 12.0] and (3 * a).tolist() == [3.0, 6.0, 12.0]
    assert (a / b).tolist() == [0.5, 1.0, 2.0] and (8 / a).tolist() == [8.0, 4.0, 2.0]
    assert (a ** 2).tolist() == [1.0, 4.0, 16.0] and (2 ** a).tolist() == [2.0, 4.0, 16.0]
    assert (a @ b).item() == 14.0 and (-a).tolist() == [-1.0, -2.0, -4.0]
    assert (a > b).tolist() == [False, False, True] and (a == b).tolist() == [False, True, False]
    assert (a <= 2).tolist() == [True, True, False] and (a != b).tolist() == [True, False, True]
    assert abs(torch.tensor([-1.5])).tolist() == [1.5]


def test_indexing_reads_and_writes(ctx):
    m = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert m[0].tolist() == [1.0, 2.0, 3.0] and m[1, 2].item() == 6.0
    assert m[:, 1:].tolist() == [[2.0, 3.0], [5.0, 6.0]] and m[..., -1].tolist() == [3.0, 6.0]
    assert m[None].shape == torch.Size([1, 2, 3]) and m[[1, 0]].tolist() == [[4.0, 5.0, 6.0], [1.0, 2.0, 3.0]]
    assert m[m > 3].tolist() == [4.0, 5.0, 6.0]
    m[0, 0] = 10.0
    m[1] = torch.tensor([0.0, 0.0, 0.0])
    assert m.tolist() == [[10.0, 2.0, 3.0], [0.0, 0.0, 0.0]]


def test_in_place_operators_bump_the_version_and_keep_the_handle(ctx):
    x = torch.tensor([1.0, 2.0])
    y = x
    x += 1
    x *= 3
    assert x is y and x.tolist() == [6.0, 9.0] and x._version == 2


def test_shape_dtype_and_metadata(ctx):
    x = torch.zeros(2, 3, dtype=torch.float64)
    assert x.shape == (2, 3) and x.size() == torch.Size([2, 3]) and x.size(1) == 3 and x.dim() == 2
    assert repr(x.shape) == "torch.Size([2, 3])" and x.dtype is torch.float64 and repr(x.dtype) == "torch.float64"
    assert torch.tensor([1, 2]).dtype is torch.int64 and torch.tensor(True).dtype is torch.bool
    assert x.view(3, 2).shape == (3, 2) and x.reshape(-1).shape == (6,) and x.t().shape == (3, 2)
    assert torch.float is torch.float32 and torch.long is torch.int64 and torch.double is torch.float64
    assert x.numel() == 6 and len(x) == 2 and x.numpy().dtype == np.float64


def test_values_convert_like_torch(ctx):
    s = torch.tensor(2.5)
    assert float(s) == 2.5 and int(s) == 2 and bool(s) and f"{s:.2f}" == "2.50" and f"{s}" == "2.5"
    assert isinstance(torch.tensor([1.0]).item(), float) and torch.tensor([3]).item() == 3
    assert np.array_equal(torch.tensor([[1, 2]]).numpy(), np.array([[1, 2]]))
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"):
        bool(torch.tensor([1.0, 2.0]))
    with pytest.raises(RuntimeError, match=r"Can't call numpy\(\) on Tensor that requires grad"):
        torch.tensor([1.0], requires_grad=True).numpy()


def test_numpy_arrays_go_up_exactly(ctx):
    a = np.array([0.1, 1 / 3, np.nan, np.inf], dtype=np.float32)
    t = torch.tensor(a)
    assert t.dtype is torch.float32 and np.array_equal(t.numpy(), a, equal_nan=True)
    assert torch.tensor(np.arange(3.0)).dtype is torch.float64
    assert torch.tensor([float("nan"), 1.0]).isnan().tolist() == [True, False]


def test_tuple_results_max_with_dim_sort_and_split(ctx):
    m = torch.tensor([[1.0, 5.0], [7.0, 2.0]])
    values, indices = m.max(dim=1)
    assert values.tolist() == [5.0, 7.0] and indices.tolist() == [1, 0]
    assert torch.max(m).item() == 7.0
    assert m.sort(dim=1).values.tolist() == [[1.0, 5.0], [2.0, 7.0]]
    parts = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).split(2)
    assert [p.tolist() for p in parts] == [[1.0, 2.0], [3.0, 4.0], [5.0]]


def test_every_catalog_op_is_a_function_and_methods_where_the_catalog_says(ctx, http):
    catalog = http.ops_catalog()
    for entry in catalog:
        if entry["family"] == "autograd":
            continue
        if entry["name"] in ("bool", "float", "double", "half", "bfloat16", "long", "int", "short"):  # dtypes; methods
            assert isinstance(getattr(torch, entry["name"]), torch.dtype)
        elif "." in entry["name"]:  # a submodule's function: linalg.det is torch.linalg.det
            prefix, rest = entry["name"].split(".")
            assert callable(getattr(getattr(torch, prefix), rest)), entry["name"]
        for name in entry["functions"]:
            assert callable(getattr(torch, name)), name
        for name in entry["methods"]:
            assert callable(getattr(torch.tensor(1.0), name)), name
        for name in (entry["name"], *entry["aliases"]):  # (the op's other names: not torch's, so not the client's)
            dtype = isinstance(getattr(torch, name, None), torch.dtype)  # (torch.int: a dtype, not the op)
            if "." not in name and name not in entry["functions"] and not name.startswith("__") and not dtype:
                assert not hasattr(torch, name), name
            if name not in entry["methods"] and not name.startswith("__"):
                assert not hasattr(torch.tensor(1.0), name), name
    assert callable(F.mse_loss) and callable(F.relu) and callable(F.cross_entropy) and callable(F.softmax)
    assert callable(torch.linalg.vector_norm) and callable(torch.special.expm1)
    with pytest.raises(AttributeError):
        torch.no_such_op  # noqa: B018
    with pytest.raises(AttributeError):
        torch.tensor(1.0).no_such_method  # noqa: B018


# ----- autograd --------------------------------------------------------------------------------------------------
def test_grad_fn_leaf_flags_and_next_functions(ctx):
    x = torch.tensor([3.0], requires_grad=True)
    y = x ** 2
    z = y * 2 + 1
    assert x.is_leaf and x.grad_fn is None and x.requires_grad
    assert not y.is_leaf and y.grad_fn.name() == "PowBackward0" and z.grad_fn.name() == "AddBackward0"
    assert repr(y.grad_fn).startswith("<PowBackward0 object at 0x")
    (mul, _), (none, _) = z.grad_fn.next_functions
    assert mul.name() == "MulBackward0" and none is None
    (pow_, _), _ = mul.next_functions
    ((acc, _),) = pow_.next_functions
    assert acc.name() == "torch::autograd::AccumulateGrad" and type(acc).__name__ == "AccumulateGrad"


def test_retain_grad_detach_requires_grad_(ctx):
    x = torch.tensor(2.0, requires_grad=True)
    y = x * x
    y.retain_grad()
    assert y.retains_grad
    (y * 3).backward()
    assert y.grad.item() == 3.0 and x.grad.item() == 12.0
    d = y.detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    w = torch.tensor([1.0]).requires_grad_()
    assert w.requires_grad and w.is_leaf


def test_non_leaf_grad_warns_with_torch_s_text(ctx):
    x = torch.tensor([2.0], requires_grad=True)
    y = x ** 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert y.grad is None
    assert [str(w.message)[:50] for w in caught] == ["The .grad attribute of a Tensor that is not a leaf"]
    assert caught[0].category is UserWarning and caught[0].filename == __file__


def test_no_grad_and_enable_grad_as_context_managers_and_decorators(ctx):
    x = torch.tensor([1.0], requires_grad=True)
    with torch.no_grad():
        assert not torch.is_grad_enabled()
        y = x * 2
        with torch.enable_grad():
            z = x * 2
    assert torch.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None and z.requires_grad

    @torch.no_grad()
    def f(t):
        return t * 3

    assert not f(x).requires_grad and torch.is_grad_enabled()
    with torch.set_grad_enabled(False):
        assert not (x + 1).requires_grad


def test_backward_arguments_and_autograd_grad(ctx):
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    y.backward(torch.tensor([1.0, 0.5]), retain_graph=True)
    assert x.grad.tolist() == [2.0, 2.0]
    torch.autograd.backward([y.sum()], inputs=[x])
    assert x.grad.tolist() == [4.0, 6.0]
    t = torch.tensor(2.0, requires_grad=True)
    (dy,) = torch.autograd.grad(t ** 3, t, create_graph=True)
    (d2y,) = torch.autograd.grad(dy, t)
    assert dy.item() == 12.0 and d2y.item() == 12.0 and dy.grad_fn is not None
    u = torch.tensor(1.0, requires_grad=True)
    assert torch.autograd.grad(t * 2, [t, u], allow_unused=True)[1] is None


def test_grad_zero_and_set_to_none_and_assignment(ctx):
    x = torch.tensor([2.0, 3.0], requires_grad=True)
    x.pow(2).sum().backward()
    x.pow(2).sum().backward()
    assert repr(x.grad) == "tensor([ 8., 12.])"
    x.grad.zero_()
    assert repr(x.grad) == "tensor([0., 0.])"
    g = x.grad
    x.grad = None
    assert x.grad is None and g.tolist() == [0.0, 0.0]
    x.grad = torch.tensor([1.0, 1.0])
    assert x.grad.tolist() == [1.0, 1.0]


# ----- errors -------------------------------------------------------------------------------------------------------
def test_an_error_is_torch_s_class_and_message_and_points_at_the_line_that_made_the_op(ctx):
    # a value-dependent error (an index out of range): the client cannot know it, the server raises it
    a = torch.tensor([1.0, 2.0, 3.0])
    i = torch.tensor([5])
    c = a * 2
    bad = a[i]; line = traceback.extract_stack()[-1].lineno  # noqa: E702 - the line of the failing op
    later = c.sum()
    with pytest.raises(IndexError) as info:
        print(later)  # the sync point: a later line
    exc = info.value
    assert str(exc) == "index 5 is out of bounds for dimension 0 with size 3"
    assert type(exc).__name__ == "IndexError" and isinstance(exc, gradserve.ProblemError)
    assert exc.op_index == 3
    last = traceback.extract_tb(exc.__traceback__)[-1]
    assert (last.filename, last.lineno) == (__file__, line)
    assert "gradserve: op 3 of the 5 sent together failed (getitem)" in exc.__notes__[0]
    # the ops before the failing one are applied (as in eager torch); it and those after it are not
    assert c.tolist() == [2.0, 4.0, 6.0]
    with pytest.raises(RuntimeError, match="never computed"):
        bad.tolist()
    with pytest.raises(RuntimeError, match="never computed"):
        later.item()
    assert (c + 1).tolist() == [3.0, 5.0, 7.0]  # the session goes on


def test_error_classes_follow_torch(ctx):
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()
    with pytest.raises(IndexError):
        x.sum(dim=5).item()
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        x.add_(1)
        x.sum().backward()
    y = x.pow(2).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time") as info:
        y.backward()
    assert info.value.code == "graph_freed" and info.value.status == 409


# ----- round trips ---------------------------------------------------------------------------------------------------
def test_a_training_loop_costs_one_request_per_epoch(ctx):
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    y = torch.tensor([3.0, 5.0, 7.0, 9.0])
    w = torch.tensor([0.0], requires_grad=True)
    b = torch.tensor([0.0], requires_grad=True)
    torch.sync()
    before, losses = sent(ctx), []
    for _ in range(100):
        loss = ((w * x + b - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            w -= 0.05 * w.grad
            b -= 0.05 * b.grad
        w.grad.zero_()
        b.grad.zero_()
        losses.append(loss.item())
    assert sent(ctx) - before <= 101
    assert losses[-1] < 0.01 < losses[0] and abs(w.item() - 2.0) < 0.1


def test_a_sync_sends_pending_ops_as_one_request(ctx):
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    torch.sync()
    before = sent(ctx)
    z = ((x * 2 + 1).exp().log() - 1).sum()
    assert sent(ctx) == before
    assert z.item() == 6.0 and sent(ctx) == before + 1
    assert z.item() == 6.0 and z.requires_grad and z.grad_fn.name() == "SumBackward0"
    assert sent(ctx) == before + 1  # read from what came back


def test_dropped_handles_release_their_names_and_a_long_loop_stays_bounded(ctx, http):
    w = torch.tensor([0.5], requires_grad=True)
    x = torch.tensor([1.0, 2.0, 3.0])
    counts = []
    for i in range(200):
        loss = ((w * x - 1) ** 2).sum()
        loss.backward()
        with torch.no_grad():
            w -= 0.01 * w.grad
        w.grad = None
        if i % 50 == 49:
            torch.sync()
            counts.append(len(http.get_session(ctx.session_id)["tensors"]))
    assert max(counts) <= 12 and counts[-1] == counts[0], counts


def test_session_is_deleted_on_exit_of_gradserve_session(server, http):
    with gradserve.session(client=gradserve.Client(server.url)) as c:
        (torch.tensor([1.0]) * 2).tolist()  # (a literal alone is read without the server)
        sid = c.session_id
        assert http.get_session(sid)["id"] == sid
    with pytest.raises(gradserve.ProblemError) as info:
        http.get_session(sid)
    assert info.value.status == 404 and info.value.code == "session_not_found"


def test_session_cleanup_and_pending_errors_at_interpreter_exit(server, tmp_path):
    import subprocess
    import sys

    script = tmp_path / "prog.py"
    script.write_text("import gradserve.torch as torch\n"
                      "x = torch.tensor([1.0, 2.0], requires_grad=True)\n"
                      "y = x * 2\n"
                      "z = x[torch.tensor([7])]\n"
                      "print('done')\n")
    with gradserve.Client(server.url) as http:
        before = {s["id"] for s in http.list_sessions()}
        p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                           env={"GRADSERVE_URL": server.url, "PATH": "/usr/bin:/bin"})
        assert p.stdout == "done\n" and p.returncode == 1
        assert p.stderr.strip().splitlines()[-2] == "IndexError: index 7 is out of bounds for dimension 0 with size 2"
        assert f'{script}", line 4' in p.stderr
        assert "client/gradserve/" not in p.stderr  # the traceback shows the user's lines only
        assert {s["id"] for s in http.list_sessions()} == before


# ----- optimizers and nn ---------------------------------------------------------------------------------------------
def _quadratic(p):
    return ((p - torch.tensor([1.0, -2.0])) ** 2).sum()


def test_sgd_with_momentum_and_weight_decay_follows_torch_s_formula(ctx):
    p = torch.tensor([0.5, 0.5], requires_grad=True)
    opt = optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01)
    ref, buf = np.array([0.5, 0.5]), None
    for _ in range(5):
        opt.zero_grad()
        _quadratic(p).backward()
        opt.step()
        g = 2 * (ref - np.array([1.0, -2.0])) + 0.01 * ref
        buf = g if buf is None else 0.9 * buf + g
        ref = ref - 0.1 * buf
    assert np.allclose(p.detach().numpy(), ref, rtol=1e-5)


def test_adam_follows_torch_s_formula(ctx):
    p = torch.tensor([0.5, 0.5], requires_grad=True)
    opt = optim.Adam([p], lr=0.1)
    ref, m, v = np.array([0.5, 0.5]), 0.0, 0.0
    for step in range(1, 6):
        opt.zero_grad()
        _quadratic(p).backward()
        opt.step()
        g = 2 * (ref - np.array([1.0, -2.0]))
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        ref = ref - 0.1 / (1 - 0.9 ** step) * m / (np.sqrt(v) / math.sqrt(1 - 0.999 ** step) + 1e-8)
    assert np.allclose(p.detach().numpy(), ref, rtol=1e-5, atol=1e-6)


def test_optimizer_skips_parameters_without_grad_and_zero_grad_sets_none(ctx):
    p = torch.tensor([1.0], requires_grad=True)
    q = torch.tensor([1.0], requires_grad=True)
    opt = optim.SGD([p, q], lr=0.5)
    (p * 2).sum().backward()
    opt.step()
    assert p.item() == 0.0 and q.item() == 1.0 and q.grad is None
    opt.zero_grad()
    assert p.grad is None
    (p * 2).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert p.grad.tolist() == [0.0]


def test_nn_linear_trains_and_registers_its_parameters(ctx):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
    names = [n for n, _ in model.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    w = model._modules["0"].weight
    assert isinstance(w, nn.Parameter) and w.is_leaf and w.requires_grad and w.shape == (8, 2)
    assert np.all(np.abs(w.detach().numpy()) <= 1 / math.sqrt(2))
    assert repr(model._modules["0"]) == "Linear(in_features=2, out_features=8, bias=True)"
    assert repr(nn.Parameter(torch.tensor([1.0]))) == "Parameter containing:\ntensor([1.], requires_grad=True)"
    x = torch.tensor(np.random.default_rng(1).normal(size=(32, 2)).astype(np.float32))
    y = (x[:, 0:1] * 2 - x[:, 1:2]).tanh()
    opt = optim.Adam(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()
    losses = []
    torch.sync()
    before = sent(ctx)
    for _ in range(60):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]
    assert sent(ctx) - before == 60  # one request per iteration: the backward's


def test_cross_entropy_loss_matches_torch(ctx):
    logits = [[1.0, 2.0, 0.5], [0.1, 0.2, 3.0]]
    target = [1, 2]
    x = torch.tensor(logits, requires_grad=True)
    loss = nn.CrossEntropyLoss()(x, torch.tensor(target))
    loss.backward()
    real = pytest.importorskip("torch")
    rx = real.tensor(logits, requires_grad=True)
    rloss = real.nn.CrossEntropyLoss()(rx, real.tensor(target))
    rloss.backward()
    assert repr(loss) == repr(rloss) and repr(x.grad) == repr(rx.grad)


def test_reprs_match_real_torch(ctx):
    real = pytest.importorskip("torch")
    programs = ["torch.tensor([[1.0, 2.5], [3.0, 4.0]], requires_grad=True) * 2",
                "torch.tensor([1.0, 2.0], requires_grad=True).pow(2).sum()",
                "torch.tensor([1e-6, 1e3])", "torch.arange(12).reshape(3, 4)",
                "torch.tensor([0.1, 0.2], dtype=torch.float64)", "torch.tensor([1.0, 2.0]).exp()",
                "torch.tensor([True, False])", "torch.tensor(3.25, requires_grad=True)",
                "torch.tensor([[1.0, -2.0, 3.0], [0.5, 0.25, -1.0]], requires_grad=True).softmax(dim=1)",
                "torch.nn.functional.cross_entropy(torch.tensor([[1.0, -2.0, 3.0]], requires_grad=True), "
                "torch.tensor([2]))",
                "torch.where(torch.tensor([1.0, -2.0]) > 0, torch.tensor([1.0, -2.0], requires_grad=True), "
                "torch.zeros(2))",
                "torch.stack([torch.tensor([1.0, 2.0], requires_grad=True)] * 2, dim=1)",
                "torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)[0, 1:]",
                "torch.tensor([3.0, 4.0], requires_grad=True).norm()", "torch.linspace(0, 1, 5)",
                "torch.tensor([[1.0, 5.0], [7.0, 2.0]]).argmax(dim=1)", "torch.ones(2, 3).unsqueeze(0).shape"]
    for src in programs:
        assert repr(eval(src, {"torch": torch})) == repr(eval(src, {"torch": real})), src


def test_transpose_property_and_iteration(ctx):
    m = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert m.T.tolist() == [[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]]
    assert [row.tolist() for row in m] == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
