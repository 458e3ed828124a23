"""Forward mode against real PyTorch (skipped without torch): the tangents of every expression of the
reverse-mode differential table, their dtypes (mixed-precision tangents included), and the errors of
torch.autograd.forward_ad with torch's exception types and messages."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

from gradserve_server.engine.errors import EngineError  # noqa: E402
from gradserve_server.engine.torch_compat import F as EF  # noqa: E402
from gradserve_server.engine.torch_compat import torch as etorch  # noqa: E402

from .test_torch_differential import EXPRESSIONS, _array, _namespace  # noqa: E402

DUALS = ("a", "b", "p", "v", "s", "w", "bias", "c3", "d3")


def _tangent_run(mod, functional, expr: str):
    ns = _namespace(mod, functional, 0)
    rng = np.random.default_rng(5)
    fw = mod.autograd.forward_ad
    with fw.dual_level():
        for k in DUALS:
            t = ns[k]
            ns[k] = fw.make_dual(t, mod.tensor(rng.standard_normal(tuple(t.shape)).astype(np.float32).tolist()))
        out = eval(expr, ns)  # noqa: S307 - fixed expressions
        primal, tangent = fw.unpack_dual(out)
        return (_array(primal), str(out.dtype).replace("torch.", ""),
                None if tangent is None else (_array(tangent), str(tangent.dtype).replace("torch.", "")))


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_tangents_match_torch(expr):
    ref = _tangent_run(torch, TF, expr)
    got = _tangent_run(etorch, EF, expr)
    np.testing.assert_allclose(got[0], ref[0], rtol=2e-5, atol=2e-6, equal_nan=True)
    assert got[1] == ref[1]
    if ref[2] is None:
        assert got[2] is None
        return
    assert got[2] is not None, "torch gives a tangent"
    assert got[2][1] == ref[2][1], "tangent dtype"
    np.testing.assert_allclose(got[2][0], ref[2][0], rtol=1e-4, atol=1e-5, equal_nan=True)


MIXED = ["x.exp()", "-x", "x.sum()", "x.softmax(0)", "torch.cat([x, x.detach()])", "x * 2.0", "x.double()",
         "x.float()", "x + torch.ones(3)", "x.floor()", "x.sin() * x", "x[1:]", "x.reshape(3, 1).expand(3, 2)"]


@pytest.mark.parametrize("primal_dtype, tangent_dtype", [("float32", "float64"), ("float64", "float32")])
@pytest.mark.parametrize("expr", MIXED)
def test_mixed_precision_tangent_dtypes_match_torch(expr, primal_dtype, tangent_dtype):
    def run(mod):
        fw = mod.autograd.forward_ad
        with fw.dual_level():
            x = fw.make_dual(mod.tensor([0.5, -1.0, 2.0], dtype=getattr(mod, primal_dtype)),
                             mod.tensor([1.0, 2.0, 3.0], dtype=getattr(mod, tangent_dtype)))
            out = eval(expr, {"x": x, "torch": mod})  # noqa: S307
            t = fw.unpack_dual(out).tangent
            return str(out.dtype), str(t.dtype), _array(t)

    ref, got = run(torch), run(etorch)
    assert got[0].replace("torch.", "") == ref[0].replace("torch.", "")
    assert got[1].replace("torch.", "") == ref[1].replace("torch.", "")
    np.testing.assert_allclose(got[2], ref[2], rtol=1e-6)


def _error(fn):
    try:
        fn()
    except (RuntimeError, ValueError, EngineError) as exc:
        if isinstance(exc, EngineError):
            return exc.exception, exc.message
        return type(exc).__name__, str(exc)
    return None


ERRORS = {
    "make_dual outside a level": lambda m, fw: fw.make_dual(m.ones(2), m.ones(2)),
    "make_dual at level 0 outside a level": lambda m, fw: fw.make_dual(m.ones(2), m.ones(2), level=0),
    "exit without a level": lambda m, fw: fw.exit_dual_level(),
}
IN_LEVEL_ERRORS = {
    "nested level": lambda m, fw: fw.enter_dual_level(),
    "exit another level": lambda m, fw: fw.exit_dual_level(level=1),
    "tangent size": lambda m, fw: fw.make_dual(m.ones(2, 3), m.ones(3)),
    "tangent rank": lambda m, fw: fw.make_dual(m.ones(3), m.ones(3, 1)),
    "integer tangent": lambda m, fw: fw.make_dual(m.ones(3), m.ones(3, dtype=m.int64)),
    "integer primal": lambda m, fw: fw.make_dual(m.ones(3, dtype=m.int64), m.ones(3)),
    "dual of a dual": lambda m, fw: fw.make_dual(fw.make_dual(m.ones(2), m.ones(2)), m.ones(2)),
    "dual tangent": lambda m, fw: fw.make_dual(m.ones(2), fw.make_dual(m.ones(2), m.ones(2))),
    "make_dual at another level": lambda m, fw: fw.make_dual(m.ones(2), m.ones(2), level=3),
    "make_dual at a negative level": lambda m, fw: fw.make_dual(m.ones(2), m.ones(2), level=-1),
    "unpack_dual at another level": lambda m, fw: fw.unpack_dual(fw.make_dual(m.ones(2), m.ones(2)), level=3),
    "in-place on a dual whose tangent is a leaf that requires grad": lambda m, fw: fw.make_dual(
        m.ones(2), m.ones(2, requires_grad=True)).mul_(2),
    "in-place on a view of a leaf": lambda m, fw: fw.make_dual(m.ones(2, requires_grad=True), m.ones(2)).mul_(2),
}


@pytest.mark.parametrize("case", list(ERRORS) + list(IN_LEVEL_ERRORS))
def test_errors_match_torch(case):
    def run(mod):
        fw = mod.autograd.forward_ad
        if case in ERRORS:
            return _error(lambda: ERRORS[case](mod, fw))
        with fw.dual_level():
            return _error(lambda: IN_LEVEL_ERRORS[case](mod, fw))

    ref = run(torch)
    assert ref is not None
    assert run(etorch) == ref


def test_no_grad_and_views_match_torch():
    def run(mod):
        fw = mod.autograd.forward_ad
        with fw.dual_level():
            d = fw.make_dual(mod.tensor([1.0, 2.0, 3.0]), mod.tensor([1.0, 1.0, 1.0]))
            with mod.no_grad():
                y = d * 3.0
            base = mod.ones(2, 3)
            row = base[1]
            base.mul_(fw.make_dual(mod.ones(2, 3), mod.ones(2, 3) * 2))  # the view made before sees the tangent
            z = mod.zeros(3)
            z.copy_(d)
            z.mul_(2.0)
            return [_array(fw.unpack_dual(t).tangent) for t in (y, row, base, z, d)]

    for g, r in zip(run(etorch), run(torch)):
        np.testing.assert_allclose(g, r)


def test_forward_over_reverse_matches_torch():
    def run(mod, functional):
        fw = mod.autograd.forward_ad
        x = mod.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
        with fw.dual_level():
            d = fw.make_dual(x, mod.tensor([[1.0, 0.5], [-1.0, 2.0]]))
            y = (functional.softmax(d, dim=1) * d.tanh()).sum() + (d @ d).sigmoid().sum()
            (g,) = mod.autograd.grad(y, x, create_graph=True)
            return _array(fw.unpack_dual(g).primal), _array(fw.unpack_dual(g).tangent)

    for g, r in zip(run(etorch, EF), run(torch, TF)):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)


def test_reverse_over_forward_matches_torch():
    """The tangent is differentiable: d/dx of <J(x) v, 1> (a Hessian-vector product in reverse)."""
    def run(mod, functional):
        fw = mod.autograd.forward_ad
        x = mod.tensor([0.5, -1.0, 2.0], requires_grad=True)
        v = mod.tensor([1.0, 0.5, -1.0])
        with fw.dual_level():
            y = (functional.softplus(fw.make_dual(x, v)) * x.exp()).sum()
            jv = fw.unpack_dual(y).tangent
        (h,) = mod.autograd.grad(jv, x)
        return _array(jv), _array(h)

    for g, r in zip(run(etorch, EF), run(torch, TF)):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)


def test_inplace_through_views_and_index_put_match_torch():
    """setitem through a view of a non-leaf (CopySlices), index_put with a dual value, an in-place op on a
    column view, and forward-over-reverse through all of it."""
    def run(mod):
        fw = mod.autograd.forward_ad
        out = []
        with fw.dual_level():
            x = mod.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
            y = x * 1
            d = fw.make_dual(mod.tensor([5.0, 6.0]), mod.tensor([1.0, -1.0]))
            y[0] = d
            out.append(fw.unpack_dual(y).tangent)
            z = mod.zeros(3)
            z[mod.tensor([0, 2])] = fw.make_dual(mod.tensor([1.0, 2.0]), mod.tensor([3.0, 4.0]))
            out.append(fw.unpack_dual(z).tangent)
            w = x * 2
            w[:, 1].mul_(d)
            out.append(fw.unpack_dual(w).tangent)
            s = (w * w).sum()
            out.append(fw.unpack_dual(s).tangent)
            (g,) = mod.autograd.grad(s, x, create_graph=True)
            out.append(fw.unpack_dual(g).tangent)
        return [_array(o) for o in out]

    for g, r in zip(run(etorch), run(torch)):
        np.testing.assert_allclose(g, r)
