"""torch.func in the client (issue 23 item 5): grad, grad_and_value, vjp (eager, nesting), jacrev, jacfwd,
hessian, jvp (the server's transforms), vmap and functional_call, against a real server, with torch's values
(worked out by hand here; compared with live torch in test_surface_torch.py)."""

from __future__ import annotations

import pytest

import gradserve.torch as torch
from gradserve.torch import nn
from gradserve.torch.func import functional_call, grad, grad_and_value, hessian, jacfwd, jacrev, jvp, vjp, vmap


def test_grad_of_a_scalar_function_and_its_argnums(ctx):
    g = grad(lambda x: (x ** 3).sum())(torch.tensor([1.0, 2.0]))
    assert g.tolist() == [3.0, 12.0] and g.grad_fn is None and not g.requires_grad
    gx, gy = grad(lambda x, y: (x * y).sum(), argnums=(0, 1))(torch.ones(2), torch.full((2,), 3.0))
    assert gx.tolist() == [3.0, 3.0] and gy.tolist() == [1.0, 1.0]
    g, aux = grad(lambda x: ((x ** 2).sum(), x.mean()), has_aux=True)(torch.ones(2))
    assert g.tolist() == [2.0, 2.0] and aux.item() == 1.0
    (gv, value) = grad_and_value(lambda x: (x ** 2).sum())(torch.tensor([3.0]))
    assert gv.tolist() == [6.0] and value.item() == 9.0
    assert grad(lambda x, y: x.sum(), argnums=1)(torch.ones(2), torch.ones(3)).tolist() == [0.0, 0.0, 0.0]


def test_grad_nests_and_stays_differentiable_when_inputs_require_grad(ctx):
    assert grad(grad(lambda x: x ** 3))(torch.tensor(2.0)).item() == 12.0
    x = torch.ones(2, requires_grad=True)
    g = grad(lambda x: (x ** 3).sum())(x)
    assert g.grad_fn is not None
    g.sum().backward()
    assert x.grad.tolist() == [6.0, 6.0]


def test_grad_errors_are_torch_s(ctx):
    with pytest.raises(RuntimeError, match=r"^grad_and_value\(f\)\(\*args\): Expected f\(\*args\) to return a "
                                           r"scalar Tensor, got tensor with 1 dims\. Maybe you wanted"):
        grad(lambda x: x * 2)(torch.ones(2))
    with pytest.raises(RuntimeError, match="^Got argnum=1, but only 1 positional inputs$"):
        grad(lambda x: x.sum(), argnums=1)(torch.ones(2))
    with pytest.raises(RuntimeError, match="^only Tensors of floating point dtype can require gradients$"):
        grad(lambda x: x.sum())(torch.tensor([1, 2]))


def test_vjp_returns_the_output_and_a_reusable_vjp_fn(ctx):
    out, fn = vjp(lambda x: x ** 2, torch.tensor([1.0, 2.0]))
    assert out.tolist() == [1.0, 4.0] and out.grad_fn is None
    (g,) = fn(torch.ones(2))
    assert g.tolist() == [2.0, 4.0]
    assert fn(torch.tensor([1.0, 0.0]))[0].tolist() == [2.0, 0.0]


def test_jacobians_hessian_and_jvp_by_the_server_s_transforms(ctx):
    x = torch.tensor([1.0, 2.0])
    assert jacrev(lambda x: x ** 2)(x).tolist() == [[2.0, 0.0], [0.0, 4.0]]
    jx, jy = jacfwd(lambda x, y: x * y, argnums=(0, 1))(x, torch.ones(2))
    assert jx.tolist() == [[1.0, 0.0], [0.0, 1.0]] and jy.tolist() == [[1.0, 0.0], [0.0, 2.0]]
    assert hessian(lambda x: (x ** 3).sum())(x).tolist() == [[6.0, 0.0], [0.0, 12.0]]
    out, tangent = jvp(lambda x: x ** 2, (x,), (torch.ones(2),))
    assert out.tolist() == [1.0, 4.0] and tangent.tolist() == [2.0, 4.0]
    jac, aux = jacrev(lambda x: (x.sin(), x.sum()), has_aux=True)(torch.zeros(2))
    assert jac.tolist() == [[1.0, 0.0], [0.0, 1.0]] and aux.item() == 0.0
    with pytest.raises(RuntimeError, match=r"^jvp\(f, primals, tangents\): Expected primals to be a tuple"):
        jvp(lambda x: x, x, (x,))


def test_vmap_maps_in_dims_and_stacks_on_out_dims(ctx):
    x = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    w = torch.ones(2, 4)
    assert vmap(lambda r, w: r @ w, in_dims=(0, None))(x, w).tolist() == (x @ w).tolist()
    a, s = vmap(lambda r: (r * 2, r.sum()), out_dims=(1, 0))(x)
    assert a.shape == torch.Size([2, 3]) and a.tolist() == (x * 2).T.tolist() and s.tolist() == [1.0, 5.0, 9.0]
    assert vmap(lambda c: c.sum(), in_dims=1)(x).tolist() == [6.0, 9.0]
    per_sample = vmap(grad(lambda w, r: (r * w).sum() ** 2), in_dims=(None, 0))(torch.ones(2), x)
    assert per_sample.tolist() == [[0.0, 2.0], [20.0, 30.0], [72.0, 90.0]]
    with pytest.raises(ValueError, match=r"^vmap: Expected all tensors to have the same size in the mapped "
                                         r"dimension, got sizes \[3, 2\] for the mapped dimension$"):
        vmap(lambda a, b: a + b)(x, torch.ones(2, 2))
    with pytest.raises(ValueError, match="must only return Tensors, got type <class 'float'>"):
        vmap(lambda r: 1.0)(x)
    assert torch.vmap is vmap


def test_functional_call_swaps_parameters_for_one_call(ctx):
    model = nn.Linear(2, 1)
    weight = model.weight
    out = functional_call(model, {"weight": torch.ones(1, 2), "bias": torch.zeros(1)}, (torch.tensor([1.0, 2.0]),))
    assert out.tolist() == [3.0] and model.weight is weight
    assert functional_call(model, {"weight": torch.ones(1, 2), "bias": torch.zeros(1), "foo": torch.ones(1)},
                           torch.ones(2)).tolist() == [2.0]
    with pytest.raises(RuntimeError, match="Unexpected key\\(s\\): 'foo'"):
        functional_call(model, {"foo": torch.ones(1)}, torch.ones(2), strict=True)
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = torch.tensor([[1.0, 2.0], [3.0, -1.0]])

    def loss(p, sample):
        return functional_call(model, p, (sample,)).pow(2).sum()

    per_sample = vmap(grad(loss), in_dims=(None, 0))(params, x)  # torch.func's per-sample-gradients pattern
    assert set(per_sample) == {"weight", "bias"} and per_sample["weight"].shape == torch.Size([2, 1, 2])
    for i in range(2):
        model.zero_grad()
        model(x[i]).pow(2).sum().backward()
        assert per_sample["weight"][i].tolist() == model.weight.grad.tolist()
        assert per_sample["bias"][i].tolist() == model.bias.grad.tolist()
