"""Custom ``torch.autograd.Function`` subclasses through the client against a real server, compared with real
torch where it is installed: the programs below are written once over a ``torch`` module and run on both."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import gradserve.torch as gtorch


def _functions(torch):
    """The custom Functions of the programs, defined over ``torch`` (real torch or gradserve.torch)."""
    Function = torch.autograd.Function
    once_differentiable = torch.autograd.function.once_differentiable

    class MyExp(Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return grad * y

    class MyReLU(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.clamp(min=0)

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            grad_input = grad_output.clone()
            grad_input[x < 0] = 0
            return grad_input

    class LinearFunction(Function):
        @staticmethod
        def forward(ctx, input, weight, bias=None):
            ctx.save_for_backward(input, weight, bias)
            output = input.mm(weight.t())
            if bias is not None:
                output += bias.unsqueeze(0).expand_as(output)
            return output

        @staticmethod
        def backward(ctx, grad_output):
            input, weight, bias = ctx.saved_tensors
            grad_input = grad_weight = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_input = grad_output.mm(weight)
            if ctx.needs_input_grad[1]:
                grad_weight = grad_output.t().mm(input)
            if bias is not None and ctx.needs_input_grad[2]:
                grad_bias = grad_output.sum(0)
            return grad_input, grad_weight, grad_bias

    class MyCube(Function):  # the new style: forward without ctx, setup_context; a differentiable backward
        @staticmethod
        def forward(x, scale):
            return x ** 3 * scale

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, scale = inputs
            ctx.save_for_backward(x)
            ctx.scale = scale

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 3 * x ** 2 * ctx.scale, None

    class OnceSquare(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 2

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    class SortWithIndex(Function):  # a non-differentiable output and a non-tensor one
        @staticmethod
        def forward(ctx, x):
            values, index = x.sort()
            ctx.mark_non_differentiable(index)
            ctx.save_for_backward(index)
            ctx.shape = x.shape
            return values, index, 3

        @staticmethod
        def backward(ctx, grad_values, grad_index, grad_three):
            (index,) = ctx.saved_tensors
            grad = torch.zeros(ctx.shape, dtype=grad_values.dtype)
            grad[index] = grad_values
            return grad

    class TwoOutputs(Function):  # set_materialize_grads(False): the unused output's gradient is None
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            if g2 is None:
                return g1 * 2
            if g1 is None:
                return g2 * 3
            return g1 * 2 + g2 * 3

    class Scaled(Function):  # a tensor kept on ctx (not saved) and a number argument
        @staticmethod
        def forward(ctx, x, w, k):
            ctx.w = w
            ctx.k = k
            return x * w * k

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.w * ctx.k, None, None

    class Defaults(Function):  # an old-style default argument: extra None gradients are dropped
        @staticmethod
        def forward(ctx, x, b=None):
            return x * 2 if b is None else x * b

        @staticmethod
        def backward(ctx, grad):
            return grad * 2, None, None

    class NewDefaults(Function):  # setup_context: apply binds forward's defaults
        @staticmethod
        def forward(x, k=3.0):
            return x * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.k, None

    class TooFew(Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, grad):
            return grad

    class GradForNumber(Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, grad):
            return grad, grad

    class WrongShape(Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum()

        @staticmethod
        def backward(ctx, grad):
            return torch.ones(3, dtype=torch.float64)

    class Double(Function):  # in place: ctx.mark_dirty, the argument itself returned
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    return {c.__name__: c for c in (Defaults, NewDefaults, Double, MyExp, MyReLU, LinearFunction, MyCube,
                                    OnceSquare, SortWithIndex, TwoOutputs, Scaled, TooFew, GradForNumber,
                                    WrongShape)}


X = [0.5, -1.0, 2.0]
A = [[0.1, 0.2, -0.3], [0.4, -0.5, 0.6]]
W = [[1.0, -2.0, 0.5], [0.3, 0.7, -1.1], [0.2, 0.0, 0.9], [-0.4, 1.5, 0.6]]
B = [0.1, -0.2, 0.3, 0.4]


def _raised(fn) -> tuple:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the class and message are what is compared
        return (type(exc).__name__, str(exc))
    return None


def _arr(t):
    return None if t is None else np.asarray(t.detach().numpy(), dtype=np.float64).round(10).tolist()


def program(torch) -> dict:
    """Run every custom Function; what a user would print, as plain data."""
    fns = _functions(torch)
    out = {}
    f64 = torch.float64

    x = torch.tensor(X, dtype=f64, requires_grad=True)
    y = fns["MyExp"].apply(x)
    s = y.sum()
    s.backward()
    out["exp"] = (_arr(y), y.grad_fn.name(), _arr(x.grad), y.requires_grad)
    out["exp second backward"] = _raised(lambda: s.backward())
    y2 = fns["MyExp"].apply(x)
    y2.mul_(2)
    out["exp modified output"] = _raised(lambda: y2.sum().backward())
    with torch.no_grad():
        out["exp no_grad"] = fns["MyExp"].apply(x).requires_grad

    x = torch.tensor(X, dtype=f64, requires_grad=True)
    r = fns["MyReLU"].apply(x)
    (r * torch.tensor([1.0, 2.0, 3.0], dtype=f64)).sum().backward()
    out["relu"] = (_arr(r), r.grad_fn.name(), _arr(x.grad))

    a = torch.tensor(A, dtype=f64, requires_grad=True)
    w = torch.tensor(W, dtype=f64, requires_grad=True)
    b = torch.tensor(B, dtype=f64, requires_grad=True)
    o = fns["LinearFunction"].apply(a, w, b)
    (o ** 2).sum().backward()
    out["linear"] = (_arr(o), o.grad_fn.name(), _arr(a.grad), _arr(w.grad), _arr(b.grad))
    a2 = torch.tensor(A, dtype=f64)
    o2 = fns["LinearFunction"].apply(a2, w, None)
    o2.sum().backward()
    out["linear no bias"] = (_arr(o2), _arr(w.grad), a2.grad is None)

    x = torch.tensor(X, dtype=f64, requires_grad=True)
    c = fns["MyCube"].apply(x, 2.0)
    (g,) = torch.autograd.grad(c.sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    out["cube double backward"] = (_arr(c), c.grad_fn.name(), _arr(g), g.requires_grad, _arr(gg))

    x = torch.tensor(X, dtype=f64, requires_grad=True)
    q = fns["OnceSquare"].apply(x)
    (gq,) = torch.autograd.grad((q ** 2).sum(), x, create_graph=True)
    out["once"] = (_arr(gq), gq.grad_fn.name())
    out["once double backward"] = _raised(lambda: gq.sum().backward())

    x = torch.tensor([3.0, 1.0, 2.0], dtype=f64, requires_grad=True)
    values, index, three = fns["SortWithIndex"].apply(x)
    (values * torch.tensor([1.0, 10.0, 100.0], dtype=f64)).sum().backward()
    out["sort"] = (_arr(values), index.tolist(), three, index.requires_grad, index.grad_fn, values.grad_fn.name(),
                   _arr(x.grad))

    x = torch.tensor(X, dtype=f64, requires_grad=True)
    p, q2 = fns["TwoOutputs"].apply(x)
    p.sum().backward()
    g_first = _arr(x.grad)
    x.grad = None
    p, q2 = fns["TwoOutputs"].apply(x)
    (p + q2).sum().backward()
    out["materialize off"] = (g_first, _arr(x.grad), p.grad_fn.name())

    x = torch.tensor(X, dtype=f64, requires_grad=True)
    w = torch.tensor([2.0, 3.0, 4.0], dtype=f64)
    z = fns["Scaled"].apply(x, w, 0.5)
    z.sum().backward()
    out["ctx tensor"] = (_arr(z), _arr(x.grad))

    x = torch.tensor(X, dtype=f64, requires_grad=True)
    y = x * 1.0
    r = fns["Double"].apply(y)
    r.sum().backward()
    out["dirty"] = (r is y, _arr(r), r._version, r.grad_fn.name(), _arr(x.grad))
    out["dirty leaf"] = _raised(lambda: fns["Double"].apply(x).tolist())  # (the client raises at the read)
    z = torch.tensor(X, dtype=f64)
    out["dirty no grad"] = (fns["Double"].apply(z) is z, _arr(z), z.requires_grad)

    x = torch.tensor(X, dtype=f64, requires_grad=True)
    fns["Defaults"].apply(x).sum().backward()
    fns["NewDefaults"].apply(x).sum().backward()
    fns["NewDefaults"].apply(x, k=0.5).sum().backward()
    out["defaults"] = _arr(x.grad)
    out["defaults keyword"] = _raised(lambda: fns["Defaults"].apply(x, b=None).sum().backward())

    x = torch.tensor(X, dtype=f64, requires_grad=True)
    out["too few"] = _raised(lambda: fns["TooFew"].apply(x, 2.0).sum().backward())
    out["grad for number"] = _raised(lambda: fns["GradForNumber"].apply(x, 2.0).sum().backward())
    out["wrong shape"] = _raised(lambda: fns["WrongShape"].apply(x).backward())
    return out


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "custom_function.json"


def _plain(value):
    """JSON's shapes (tuples as lists): what the fixture holds."""
    return json.loads(json.dumps(value))


def torch_outcomes() -> dict:
    """What real torch prints for ``program`` and ``training``; regenerate the fixture with
    ``python -m tests.client.test_custom_function`` (torch installed)."""
    import torch
    return {"program": _plain(program(torch)), "training": training(torch)}


@pytest.fixture(scope="module")
def expected():
    """torch's outcomes: from torch when installed (and then the committed fixture must agree), else the fixture."""
    recorded = json.loads(FIXTURE.read_text())
    try:
        import torch  # noqa: F401
    except ImportError:
        return recorded
    live = torch_outcomes()
    assert live == recorded, "tests/fixtures/custom_function.json is stale: regenerate it"
    return live


def test_custom_functions_print_what_torch_prints(ctx, expected):
    got = _plain(program(gtorch))
    assert got.keys() == expected["program"].keys()
    for key in expected["program"]:
        assert got[key] == expected["program"][key], key


def test_a_custom_function_is_one_definition_and_one_apply(ctx):
    fns = _functions(gtorch)
    x = gtorch.tensor(X, dtype=gtorch.float64, requires_grad=True)
    h = x * 1.0  # nothing about h is known locally: apply still sends nothing (the bodies read no metadata)
    before = ctx.client.requests
    y = fns["MyExp"].apply(h)
    assert ctx.client.requests == before
    pending = [op["op"] for op in ctx.pending]
    assert pending[-2:] == ["autograd_function", "apply"]
    definition = ctx.pending[-2]["kwargs"]
    assert definition["name"] == "MyExp" and definition["saved"] == definition["outputs"]
    assert [op["op"] for op in definition["ops"]] == ["exp"]
    assert [op["op"] for op in definition["backward"][0]["ops"]] == ["mul"]
    assert y.grad_fn.name() == "MyExpBackward"


def test_reading_a_value_inside_forward_raises_a_clear_error(ctx):
    class Peek(gtorch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * x.sum().item()

        @staticmethod
        def backward(ctx, grad):
            return grad

    x = gtorch.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match="custom autograd.Function's forward or backward, is traced"):
        Peek.apply(x)


def test_metadata_of_an_argument_read_inside_the_bodies_is_asked_outside_the_trace(ctx):
    class Spread(gtorch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.shape = x.shape
            ctx.save_for_backward(w)
            return (x * w).sum()

        @staticmethod
        def backward(ctx, grad):
            (w,) = ctx.saved_tensors
            gx = (grad * w).expand(ctx.shape) if ctx.needs_input_grad[0] else None
            gw = grad.expand(w.shape) * 2 if ctx.needs_input_grad[1] else None  # a saved argument's shape
            return gx, gw

    x = gtorch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    h = x * 2.0                                   # shape and requires_grad known to the server only
    w = gtorch.tensor([10.0, 20.0]) * 1.0
    s = Spread.apply(h, w)
    s.backward()
    assert s.item() == 2 * 10 + 4 * 20 + 6 * 10 + 8 * 20
    assert x.grad.tolist() == [[20.0, 40.0], [20.0, 40.0]]
    assert s.grad_fn.name() == "SpreadBackward"


def training(torch) -> list:
    """A two-layer network built from the custom LinearFunction and MyReLU, trained by hand-written SGD for a few
    steps (the shape of torch's own custom-Function tutorial)."""
    fns = _functions(torch)
    rng = np.random.default_rng(0)
    f64 = torch.float64
    xs = torch.tensor(rng.standard_normal((8, 3)).tolist(), dtype=f64)
    ys = torch.tensor(rng.standard_normal((8, 1)).tolist(), dtype=f64)
    w1 = torch.tensor(rng.standard_normal((5, 3)).tolist(), dtype=f64, requires_grad=True)
    b1 = torch.tensor(rng.standard_normal(5).tolist(), dtype=f64, requires_grad=True)
    w2 = torch.tensor(rng.standard_normal((1, 5)).tolist(), dtype=f64, requires_grad=True)
    losses = []
    for _ in range(4):
        h = fns["MyReLU"].apply(fns["LinearFunction"].apply(xs, w1, b1))
        pred = fns["LinearFunction"].apply(h, w2)
        loss = ((pred - ys) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for p in (w1, b1, w2):
                p -= 0.1 * p.grad
                p.grad.zero_()
        losses.append(round(loss.item(), 10))
    return losses + _arr(w1)[0]


def test_a_network_of_custom_functions_trains_as_in_torch(ctx, expected):
    assert training(gtorch) == expected["training"]


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(torch_outcomes(), indent=1) + "\n")


def test_a_custom_function_inside_a_transform_and_with_batched_gradients(ctx):
    fns = _functions(gtorch)
    x = gtorch.tensor(X, dtype=gtorch.float64, requires_grad=True)
    J = gtorch.autograd.functional.jacobian(lambda u: fns["MyExp"].apply(u), x)
    np.testing.assert_allclose(J.numpy(), np.diag(np.exp(X)), rtol=1e-12)
    y = fns["MyExp"].apply(x)
    (rows,) = gtorch.autograd.grad(y, x, gtorch.eye(3, dtype=gtorch.float64), is_grads_batched=True)
    np.testing.assert_allclose(rows.numpy(), np.diag(np.exp(X)), rtol=1e-12)


def test_vjp_is_backward_s_alias(ctx):
    class Triple(gtorch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 3

        @staticmethod
        def vjp(ctx, grad):
            return grad * 3

    x = gtorch.tensor(X, requires_grad=True)
    Triple.apply(x).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0, 3.0]


def test_tensors_returned_inside_a_list_are_refused_clearly(ctx):
    class Listed(gtorch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return [x * 2]

        @staticmethod
        def backward(ctx, grad):
            return grad

    with pytest.raises(TypeError, match="Listed.forward returned tensors inside"):
        Listed.apply(gtorch.tensor(X, requires_grad=True))
