"""engine.functional (torch.autograd.functional over engine tensors) and grad(is_grads_batched=True) against
torch 2.13: values, return structures and error messages; repeat-until at the engine level."""

from __future__ import annotations

import numpy as np
import pytest

from gradserve_server import engine
from gradserve_server.engine import functional as EF
from gradserve_server.engine import tensor
from gradserve_server.engine.errors import EngineError

torch = pytest.importorskip("torch")
TF = torch.autograd.functional

RNG = np.random.default_rng(5)
W = RNG.standard_normal((4, 3))
B = RNG.standard_normal(4)
X0 = RNG.standard_normal(3)
Y0 = RNG.standard_normal(3)


def layer(mod, x):
    return (mod.tensor(W) @ x + mod.tensor(B)).tanh()


def energy(x, y):
    return (x * y).sin().sum() + (x ** 3).sum()


def check(ours, theirs, path="r"):
    if isinstance(theirs, (tuple, list)):
        assert isinstance(ours, type(theirs)) and len(ours) == len(theirs), (path, ours, theirs)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            check(a, b, f"{path}[{i}]")
        return
    assert ours.shape == tuple(theirs.shape), path
    assert ours.requires_grad == theirs.requires_grad, path
    np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=1e-10, atol=1e-12)


E, T = tensor, torch.tensor


@pytest.mark.parametrize("kw", [{}, {"vectorize": True}, {"vectorize": True, "strategy": "forward-mode"},
                                {"create_graph": True}])
def test_jacobian(kw):
    check(EF.jacobian(lambda x: layer(engine, x), E(X0), **kw), TF.jacobian(lambda x: layer(torch, x), T(X0), **kw))
    check(EF.jacobian(energy, (E(X0), E(Y0)), **kw), TF.jacobian(energy, (T(X0), T(Y0)), **kw))
    check(EF.jacobian(lambda x, y: (x * y, x.sum()), (E(X0), E(Y0)), **kw),
          TF.jacobian(lambda x, y: (x * y, x.sum()), (T(X0), T(Y0)), **kw))


@pytest.mark.parametrize("kw", [{}, {"vectorize": True}, {"vectorize": True, "outer_jacobian_strategy": "forward-mode"},
                                {"create_graph": True}])
def test_hessian(kw):
    check(EF.hessian(energy, (E(X0), E(Y0)), **kw), TF.hessian(energy, (T(X0), T(Y0)), **kw))
    check(EF.hessian(lambda x: energy(x, E(Y0)), E(X0), **kw), TF.hessian(lambda x: energy(x, T(Y0)), T(X0), **kw))


@pytest.mark.parametrize("create_graph", [False, True])
def test_vjp_jvp_vhp_hvp(create_graph):
    v = RNG.standard_normal(4)
    kw = {"create_graph": create_graph}
    check(EF.vjp(lambda x: layer(engine, x), E(X0), E(v), **kw), TF.vjp(lambda x: layer(torch, x), T(X0), T(v), **kw))
    check(EF.jvp(lambda x: layer(engine, x), E(X0), E(Y0), **kw), TF.jvp(lambda x: layer(torch, x), T(X0), T(Y0), **kw))
    for name in ("hvp", "vhp"):
        check(getattr(EF, name)(energy, (E(X0), E(Y0)), (E(Y0), E(X0)), **kw),
              getattr(TF, name)(energy, (T(X0), T(Y0)), (T(Y0), T(X0)), **kw))
    check(EF.vjp(energy, (E(X0), E(Y0))), TF.vjp(energy, (T(X0), T(Y0))))


def same_error(fe, ft):
    with pytest.raises(Exception) as theirs:
        ft()
    with pytest.raises(EngineError) as ours:
        fe()
    assert str(ours.value) == str(theirs.value)
    assert ours.value.exception == type(theirs.value).__name__


def test_errors_are_torchs():
    def both(fn, *args, **kw):
        conv = {"E": lambda a: tuple(E(x) for x in a) if isinstance(a, tuple) else E(a),
                "T": lambda a: tuple(T(x) for x in a) if isinstance(a, tuple) else T(a)}
        same_error(lambda: getattr(EF, fn)(kw.pop("fe", None) or kw["f"], *map(conv["E"], args),
                                           **{k: v for k, v in kw.items() if k not in ("f", "ft")}),
                   lambda: getattr(TF, fn)(kw.get("ft") or kw["f"], *map(conv["T"], args),
                                           **{k: v for k, v in kw.items() if k not in ("f", "ft")}))

    sin = lambda x: x.sin()  # noqa: E731
    both("jacobian", X0, f=sin, strategy="forward-mode")
    both("jacobian", X0, f=sin, strict=True, vectorize=True)
    both("jacobian", X0, f=sin, strict=True, strategy="forward-mode", vectorize=True)
    both("vjp", X0, f=sin)
    both("jvp", X0, Y0[:2], f=sin)
    both("jvp", (X0, Y0), (Y0,), f=lambda a, b: a * b)
    both("hvp", X0, Y0, f=sin)
    both("hessian", X0, f=lambda a: (a.sum(), a.sum()))
    both("jacobian", (X0, Y0), f=lambda a, b: a.sum(), strict=True)
    both("vjp", (X0, Y0), f=lambda a, b: a.sum(), strict=True)
    both("hessian", (X0, Y0), f=lambda a, b: a.sum() + b.sum(), strict=True)
    both("jvp", X0, Y0, f=lambda a: a.detach(), strict=True)


def test_grad_is_grads_batched():
    x = E(X0).requires_grad_()
    xt = T(X0).requires_grad_()
    g = RNG.standard_normal((5, 3))
    y, yt = (x.sin() * x), (xt.sin() * xt)
    check(engine.grad(y, x, E(g), retain_graph=True, is_grads_batched=True),
          torch.autograd.grad(yt, xt, T(g), retain_graph=True, is_grads_batched=True))
    for bad in (g[:, :2], g[0]):
        same_error(lambda bad=bad: engine.grad(y, x, E(bad), retain_graph=True, is_grads_batched=True),
                   lambda bad=bad: torch.autograd.grad(yt, xt, T(bad), retain_graph=True, is_grads_batched=True))
    z = E(Y0).requires_grad_()
    with pytest.raises(EngineError, match="appears to not have been used"):
        engine.grad(y, [x, z], E(g), retain_graph=True, is_grads_batched=True)
    res = engine.grad(y, [x, z], E(g), retain_graph=True, is_grads_batched=True, materialize_grads=True)
    assert res[1].shape == (3,) and not res[1].data.any()  # torch: zeros_like(input), unbatched
    # the graph is freed after the last pass unless retained
    engine.grad(y, x, E(g), is_grads_batched=True)
    with pytest.raises(EngineError, match="backward through the graph a second time"):
        engine.grad(y, x, E(g), is_grads_batched=True)


def test_repeat_until_is_atomic_and_counts():
    st = engine.State()
    engine.run_program(st, [{"op": "tensor", "args": [1.0], "out": "w"}])
    loop = [{"op": "mul", "args": ["w", 0.5], "out": "w"}, {"op": "lt", "args": ["w", 0.1], "out": "small"}]
    r = engine.run_program(st, loop, repeat=100, until="small")
    assert r.iterations == 4 and st.tensors["w"].item() == 0.0625
    with pytest.raises(EngineError, match="must be a bool tensor"):
        engine.run_program(st, loop + [{"op": "tensor", "args": [1.0], "out": "small"}], repeat=3, until="small")
    assert st.tensors["w"].item() == 0.0625 and st.tensors["small"].dtype == "bool"


def test_nothing_a_function_body_binds_outlives_the_call():
    st = engine.State()
    engine.run_program(st, [
        {"op": "tensor", "args": [[1.0, 2.0]], "out": "x"},
        {"op": "function", "out": "f", "kwargs": {"inputs": ["u"], "outputs": "y", "ops": [
            {"op": "function", "out": "inner", "kwargs": {"inputs": ["a"], "outputs": "a", "ops": []}},
            {"op": "mul", "args": ["u", "u"], "out": "y"}, {"op": "del", "args": ["x"]}]}},
        {"op": "jacobian", "args": ["f", "x"], "out": "J"}])
    assert set(st.functions) == {"f"} and set(st.tensors) == {"x", "J"}
    np.testing.assert_array_equal(st.tensors["J"].data, np.diag([2.0, 4.0]))
    with pytest.raises(EngineError) as err:  # a function that transforms itself: refused, not a crash
        engine.run_program(st, [{"op": "function", "out": "g", "kwargs": {"inputs": ["u"], "outputs": "y", "ops": [
            {"op": "jacobian", "args": ["g", "u"], "out": "y"}]}}, {"op": "jacobian", "args": ["g", "x"]}])
    assert err.value.code == "limit_exceeded" and "g" not in st.functions
