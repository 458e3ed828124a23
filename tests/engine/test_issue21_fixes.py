"""Issue 21's wrong numbers and refused valid calls, in the engine: each against torch 2.13's values (literals
read off torch, so the no-torch CI checks them too), then the same families against live torch where it is
installed (``importorskip``) over more inputs than the literals hold."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from gradserve_server.engine import OPS, Control, backward, dual_level, grad, make_dual, tensor, unpack_dual
from gradserve_server.engine.budget import Budget
from gradserve_server.engine.errors import DeadlineExceededError, EngineError
from gradserve_server.engine.forward_ad import tangent_of
from gradserve_server.engine.grad_mode import Limits
from gradserve_server.engine.signature import check_call

F = {name: spec.fn for name, spec in OPS.items()}


def t64(v, requires_grad=True):
    return tensor(np.array(v, dtype=np.float64), requires_grad=requires_grad)


def tangent(fn, primal, direction):
    """The JVP of ``fn`` at ``primal`` along ``direction`` (numpy arrays), as an array (zeros when None)."""
    with dual_level():
        out = fn(make_dual(t64(primal, False), t64(direction, False)))
        t = unpack_dual(out).tangent
        return np.zeros(out.shape) if t is None else t.data


# ----- wrong gradients ------------------------------------------------------------------------------------


def test_clamp_with_tensor_bounds_min_above_max_sends_gradient_and_tangent_to_max():
    x, lo, hi = t64([0.0, 5.0, -5.0]), t64([1.0, 1.0, 1.0]), t64([-1.0, -1.0, -1.0])
    y = F["clamp"](x, lo, hi)
    assert y.data.tolist() == [-1.0, -1.0, -1.0]
    gx, glo, ghi = grad(F["sum"](y), [x, lo, hi])
    assert (gx.data.tolist(), glo.data.tolist(), ghi.data.tolist()) == ([0, 0, 0], [0, 0, 0], [1, 1, 1])
    with dual_level():
        for k, want in enumerate(([0, 0, 0], [0, 0, 0], [1, 1, 1])):
            args = [make_dual(t64(a.data, False), t64(np.full(3, float(i == k)), False))
                    for i, a in enumerate((x, lo, hi))]
            assert unpack_dual(F["clamp"](*args)).tangent.data.tolist() == want


def test_clamp_ties_follow_torch_in_both_modes():
    # read off torch 2.13: x = [0, 1, 2, 3], bounds 1 and 2 (ties at 1 and 2)
    x, lo, hi = t64([0.0, 1.0, 2.0, 3.0]), t64([1.0] * 4), t64([2.0] * 4)
    g = grad(F["sum"](F["clamp"](x, lo, hi)), [x, lo, hi])
    assert [v.data.tolist() for v in g] == [[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 1]]
    # one bound: the VJP gives a tie to self, the forward formula to the bound (torch's clamp_jvp)
    assert grad(F["sum"](F["clamp"](x, lo)), [x, lo])[1].data.tolist() == [1, 0, 0, 0]
    with dual_level():
        d = make_dual(t64(x.data, False), t64(np.zeros(4), False))
        b = make_dual(t64(lo.data, False), t64(np.ones(4), False))
        assert unpack_dual(F["clamp"](d, b)).tangent.data.tolist() == [1, 1, 0, 0]
        c = make_dual(t64(hi.data, False), t64(np.ones(4), False))
        assert unpack_dual(F["clamp"](d, None, c)).tangent.data.tolist() == [0, 0, 1, 1]


def test_trace_backward_of_a_tall_matrix_has_ones_on_the_diagonal_only():
    x = t64(np.ones((4, 2)))
    assert grad(F["trace"](x), [x])[0].data.tolist() == [[1, 0], [0, 1], [0, 0], [0, 0]]
    w = t64(np.ones((2, 5)))
    assert grad(F["trace"](w), [w])[0].data.tolist() == [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0]]


def test_prod_second_derivative_through_zeros():
    x = t64([[2.0, 0.0, 3.0], [1.0, 4.0, 5.0]])
    g, = grad(F["sum"](F["prod"](x, 1)), [x], create_graph=True)
    assert g.data.tolist() == [[0, 6, 0], [20, 5, 4]] and g.grad_fn.name == "MulBackward0"
    assert grad(F["sum"](g), [x])[0].data.tolist() == [[3, 5, 2], [9, 6, 5]]
    for v, first, second in (([2.0, 0.0, 3.0, 0.5], [0, 3, 0, 0], [1.5, 8.5, 1, 6]),
                             ([2.0, 0.0, 3.0, 0.0], [0, 0, 0, 0], [0, 6, 0, 6])):
        x = t64(v)
        g, = grad(F["prod"](x), [x], create_graph=True)
        assert g.data.tolist() == first
        assert grad(F["sum"](g), [x])[0].data.tolist() == second


def test_elu_second_derivative_is_zero_at_zero_and_finite_for_large_x():
    x = t64([0.0, 710.0, 800.0, -1.0, -0.5])
    g, = grad(F["sum"](F["elu"](x, 1.5)), [x], create_graph=True)
    assert g.grad_fn.name == "EluBackwardBackward0"
    np.testing.assert_allclose(g.data, [1.5, 1.0, 1.0, 0.5518191617571635, 0.9097959895689501], rtol=1e-15)
    gg, = grad(F["sum"](g), [x])
    np.testing.assert_allclose(gg.data, [0.0, 0.0, 0.0, 0.5518191617571635, 0.9097959895689501], rtol=1e-15)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss_of_an_image_batch_under_create_graph_gives_a_gradient_that_requires_grad(reduction):
    """torch: nll_loss2d's backward reads self, so its create_graph gradient is one NllLoss2DBackwardBackward0 node
    tied to self (requires grad, second derivative zero), as nll_loss's NllLossBackwardBackward0."""
    x = t64(np.linspace(-1, 1, 24).reshape(2, 3, 2, 2))
    target = tensor(np.array([[[0, 1], [2, 1]], [[0, 0], [1, 2]]]))
    g, = grad(F["sum"](F["nll_loss"](x, target, reduction=reduction)), [x], create_graph=True)
    assert g.requires_grad and g.grad_fn.name == "NllLoss2DBackwardBackward0"
    assert grad(F["sum"](g), [x])[0].data.tolist() == np.zeros((2, 3, 2, 2)).tolist()
    x3 = t64(np.linspace(-1, 1, 12).reshape(2, 3, 2))  # (N, C, d): viewed as 4-d, the gradient viewed back
    g, = grad(F["nll_loss"](x3, tensor(np.array([[0, 1], [2, 1]]))), [x3], create_graph=True)
    assert g.grad_fn.name == "ViewBackward0" and g.grad_fn.next_functions[0][0].name == "NllLoss2DBackwardBackward0"


@pytest.mark.parametrize("value, expected", [(-4988429.2, 19.74666305338891), (-1000000.3, 16.098012025764003),
                                             (-123.456, 5.256979172582265), (-0.7, -2.073952793628704)])
def test_digamma_at_negative_x_to_double_precision(value, expected):
    for out in (F["digamma"](t64([value], False)), F["polygamma"](0, t64([value], False))):
        assert out.data[0] == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("n, value, expected", [
    (2, -134377.5, -5.537990353614657e-11), (3, -134377.5, 194.81818206800483), (2, -55.3, 68.83722257281147),
    (4, -70.25, 24481.574782583088), (2, 3.7, -0.09539530872855405)])
def test_polygamma_matches_torch_at_large_negative_x(n, value, expected):
    assert F["polygamma"](n, t64([value], False)).data[0] == pytest.approx(expected, rel=1e-13)


def test_logsumexp_jvp_over_an_empty_dim_is_nan():
    t = tangent(lambda d: F["logsumexp"](d, 1), np.zeros((2, 0)), np.zeros((2, 0)))
    assert t.shape == (2,) and np.isnan(t).all()
    x = np.linspace(-2, 3, 12).reshape(3, 4)
    v = np.linspace(1, 2, 12).reshape(3, 4)
    w = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(tangent(lambda d: F["logsumexp"](d, 1), x, v), (w * v).sum(1) / w.sum(1), rtol=1e-15)


# ----- refused or broken on valid input -------------------------------------------------------------------


def test_polygamma_at_large_negative_x_is_bounded_and_stops_at_the_deadline():
    start = time.monotonic()
    out = F["polygamma"](2, t64([-134377.5], False))
    assert time.monotonic() - start < 2.0 and out.data[0] == pytest.approx(-5.537990353614657e-11, rel=1e-13)
    control = Control(0.05)
    with Budget(Limits(), control=control):
        with pytest.raises(DeadlineExceededError):
            F["polygamma"](2, t64([-1e8 - 0.5], False))  # 1e8 direct terms, as torch (seconds there too)


def test_kthvalue_of_a_long_row_of_ties_stops_at_the_deadline():
    # torch's quick select over ties runs in Python here: its partition steps check the deadline
    x = t64(np.zeros((1, 400_000)), False)
    with Budget(Limits(), control=Control(0.001)):
        time.sleep(0.002)
        with pytest.raises(DeadlineExceededError):
            F["kthvalue"](x, 200_000, 1)
    assert F["kthvalue"](t64(np.zeros((2, 5)), False), 3, 1).indices.data.tolist() == [0, 0]  # torch 2.13


@pytest.mark.parametrize("name", ["linalg.det", "det", "linalg.slogdet", "slogdet", "logdet", "linalg.cholesky",
                                  "linalg.inv"])
@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3, 3)])
def test_linalg_of_empty_matrices_with_requires_grad(name, shape):
    x = t64(np.zeros(shape))
    out = F[name](x)
    out = out[-1] if isinstance(out, tuple) else out
    want = {"linalg.det": 1.0, "det": 1.0, "logdet": 0.0, "linalg.slogdet": 0.0, "slogdet": 0.0}.get(name)
    if want is not None:
        assert out.shape == shape[:-2] and (out.data == want).all()
    g, = grad(F["sum"](out), [x])
    assert g.shape == shape and not g.data.any()


def test_solve_of_empty_systems_with_requires_grad():
    for a_shape, b_shape in (((0, 0), (0, 3)), ((2, 0, 0), (2, 0))):
        a, b = t64(np.zeros(a_shape)), t64(np.zeros(b_shape))
        out = F["linalg.solve"](a, b)
        assert out.shape == b_shape
        assert [g.shape for g in grad(F["sum"](out), [a, b])] == [a_shape, b_shape]


@pytest.mark.parametrize("fn", [
    lambda d: F["linalg.vector_norm"](d, 0), lambda d: F["linalg.norm"](d, 0), lambda d: F["norm"](d, 0),
    lambda d: F["linalg.vector_norm"](F["reshape"](d, (3, 1)), 0, 1)])
def test_jvp_of_a_zero_norm_is_zero(fn):
    t = tangent(fn, np.array([1.0, 0.0, 2.0]), np.ones(3))
    assert not t.any()


def test_jvp_of_normalize_with_p_zero():
    np.testing.assert_allclose(tangent(lambda d: F["normalize"](d, 0, 0), np.array([1.0, 0.0, 2.0]), np.ones(3)),
                               [0.5, 0.5, 0.5])


@pytest.mark.parametrize("ord_", [1, 2, math.inf])
def test_matrix_norm_whose_max_runs_over_nothing_is_zero_without_grad(ord_):
    for shape, want in (((0, 0), ()), ((2, 0, 0), (2,))):
        out = F["linalg.norm"](t64(np.zeros(shape)), ord_, (-2, -1))
        assert out.shape == want and not out.data.any() and not out.requires_grad and out.grad_fn is None
    # (3, 0) under inf: the row sums are zeros of a real dim, whose max has a node (AmaxBackward0), as torch
    assert F["linalg.matrix_norm"](t64(np.zeros((3, 0))), math.inf).grad_fn.name == "AmaxBackward0"


@pytest.mark.parametrize("ord_, dim, message", [
    (math.inf, None, "linalg.vector_norm cannot compute the inf norm on an empty tensor because the operation "
                     "does not have an identity"),
    (-1, None, "linalg.vector_norm cannot compute the -1 norm on an empty tensor because the operation does not "
               "have an identity"),
    (-math.inf, -1, "linalg.vector_norm cannot compute the -inf norm on the dimension -1because this dimension is "
                    "empty and the operation does not have an identity")])
def test_vector_norm_without_identity_over_nothing_is_torchs_error(ord_, dim, message):
    with pytest.raises(EngineError) as e:
        F["linalg.vector_norm"](t64(np.zeros((2, 0)), False), ord_, dim)
    assert str(e.value) == message and e.value.exception == "RuntimeError"


def test_circular_pad_of_an_empty_batch():
    for shape, pad, want in (((0, 3, 4), (1, 1), (0, 3, 6)), ((1, 0, 3, 3), (1, 1, 1, 1), (1, 0, 5, 5))):
        x = t64(np.zeros(shape))
        y = F["pad"](x, pad, mode="circular")
        assert y.shape == want and y.grad_fn.name == "CopySlices"
        assert grad(F["sum"](y), [x])[0].shape == shape


def test_cat_with_legacy_empty_tensors():
    a, b, c = t64(np.zeros(0)), t64(np.ones((2, 3))), t64(np.ones((1, 3)))
    y = F["cat"]([a, b, a, c])
    assert y.shape == (3, 3)
    assert [g.shape for g in grad(F["sum"](y), [a, b, c])] == [(0,), (2, 3), (1, 3)]
    assert F["cat"]([b, a], 1).shape == (2, 3)
    assert F["cat"]([a, a], 5).shape == (0,)  # all legacy: no dim to wrap (torch)
    with pytest.raises(EngineError, match=r"zero-dimensional tensor \(at position 1\) cannot be concatenated"):
        F["cat"]([a, t64(1.0)])


def test_masked_select_backward_of_a_zero_dim_input():
    for m, want in ((True, 1.0), (False, 0.0)):
        x = t64(3.0)
        y = F["masked_select"](x, tensor(m))
        assert y.shape == ((1,) if m else (0,))
        assert grad(F["sum"](y), [x])[0].data.tolist() == want


def test_squeeze_of_a_zero_dim_tensor_by_dims_backward():
    x = t64(3.0)
    y = F["squeeze"](x, (0,))
    assert y.shape == () and y.grad_fn.name == "SqueezeBackward2"
    assert grad(y, [x])[0].data.tolist() == 1.0


# ----- also found by random programs ----------------------------------------------------------------------


def test_reciprocal_of_a_negative_zero_from_mm_with_inner_size_one():
    a, b = t64([[-1.0], [2.0]], False), t64([[0.0, 3.0]], False)
    for op in ("mm", "matmul"):
        r = F["reciprocal"](F[op](a, b))
        assert r.data[0, 0] == -math.inf and r.data[1, 0] == math.inf
    # (1, m) and (n, 1) results are gemv's in torch (sums from 0), as a dot: +0.0
    assert not np.signbit(F["mm"](t64([[-1.0]], False), t64([[0.0, 1.0]], False)).data[0, 0])
    assert not np.signbit(F["dot"](t64([-1.0], False), t64([0.0], False)).data)


def test_create_graph_grad_requires_grad_follows_the_gradient_given():
    x = t64([0.5, -1.0, 2.0])
    g = t64([1.0, 1.0, 1.0])
    backward(F["mul"](x, 2.0), g, create_graph=True)
    assert x.grad.requires_grad and x.grad.grad_fn.name == "CopyBackwards"
    x2 = t64([0.5, -1.0, 2.0])
    backward(F["sum"](F["mul"](x2, 2.0)), create_graph=True)  # a constant from a seed: no graph, as torch
    assert not x2.grad.requires_grad


def test_det_gradient_at_a_singular_matrix_is_differentiable_under_create_graph():
    # torch 2.13: through linalg_svd (MmBackward0 of U * D and Vh), so .grad requires grad and has a gradient
    x = t64([[1.0, 2.0], [2.0, 4.0]])
    backward(F["linalg.det"](x), create_graph=True)
    assert x.grad.requires_grad and x.grad.grad_fn.name == "CopyBackwards"
    np.testing.assert_allclose(x.grad.data, [[4.0, -2.0], [-2.0, 1.0]], atol=1e-14)
    g, = grad(F["linalg.det"](x), [x], create_graph=True)
    assert g.grad_fn.name == "MmBackward0"
    assert [n.name for n, _ in g.grad_fn.next_functions] == ["MulBackward0", "LinalgSvdBackward0"]
    np.testing.assert_allclose(grad(F["sum"](g), [x])[0].data, [[1.0, -1.0], [-1.0, 1.0]], atol=1e-14)


def test_rand_and_randn_without_any_argument_list_torchs_overloads():
    for name in ("rand", "randn"):
        with pytest.raises(EngineError) as e:
            check_call(OPS[name], name, (), {}, method=False)
        assert e.value.exception == "TypeError"
        assert str(e.value) == (
            f"{name}() received an invalid combination of arguments - got (), but expected one of:\n"
            " * (tuple of ints size, *, torch.Generator generator, Tensor out = None, torch.dtype dtype = None, "
            "torch.layout layout = None, torch.device device = None, bool pin_memory = False, bool requires_grad = "
            "False)\n * (tuple of ints size, *, Tensor out = None, torch.dtype dtype = None, torch.layout layout = "
            "None, torch.device device = None, bool pin_memory = False, bool requires_grad = False)\n")
        with pytest.raises(EngineError, match=f'^{name}\\(\\) missing 1 required positional arguments: "size"$'):
            check_call(OPS[name], name, (), {"dtype": "float64"}, method=False)


@pytest.mark.parametrize("sizes, message", [
    ((2 ** 62, 4, 0), "numel: integer multiplication overflow"),
    ((2 ** 31, 2 ** 32), "numel: integer multiplication overflow"),
    ((3, 2 ** 63), "expand(): argument 'size' failed to unpack the object at pos 2 with error \"Overflow when "
                   "unpacking long long")])
def test_expand_to_an_overflowing_size(sizes, message):
    with pytest.raises(EngineError) as e:
        F["expand"](t64(np.zeros((1, 1)), False), *sizes)
    assert str(e.value) == message
    assert e.value.exception == ("TypeError" if "unpack" in message else "RuntimeError")


def test_unpack_dual_primal_has_no_tangent_nor_its_views():
    with dual_level():
        d = make_dual(t64([1.0, 0.0, 2.0], False), t64([1.0, 1.0, 1.0], False))
        y = F["mul"](d, 3.0)
        p, t = unpack_dual(y)
        assert t.data.tolist() == [3.0, 3.0, 3.0] and p.data.tolist() == [3.0, 0.0, 6.0]
        assert tangent_of(p) is None and unpack_dual(p).tangent is None
        assert unpack_dual(F["select"](p, 0, 1)).tangent is None
        assert unpack_dual(F["select"](y, 0, 1)).tangent.data.tolist() == 3.0  # y's own views keep theirs
        assert "tangent=" not in repr(p)


# ----- against live torch ---------------------------------------------------------------------------------


def _torch():
    return pytest.importorskip("torch")


def test_polygamma_and_digamma_against_torch():
    torch = _torch()
    rng = np.random.default_rng(1)
    xs = np.concatenate([rng.uniform(-2000, 2000, 100), rng.uniform(-20, 20, 100), -10 ** rng.uniform(2, 4, 8)])
    for n in (0, 1, 2, 3, 5):
        ours = F["polygamma"](n, t64(xs, False)).data
        theirs = torch.polygamma(n, torch.tensor(xs)).numpy()
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=0, equal_nan=True)


def test_clamp_tensor_bounds_against_torch():
    torch = _torch()
    rng = np.random.default_rng(2)
    x, lo, hi = (rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0], 40) for _ in range(3))
    tx, tlo, thi = (torch.tensor(v, requires_grad=True) for v in (x, lo, hi))
    want = torch.autograd.grad(torch.clamp(tx, tlo, thi).sum(), [tx, tlo, thi])
    ex, elo, ehi = t64(x), t64(lo), t64(hi)
    got = grad(F["sum"](F["clamp"](ex, elo, ehi)), [ex, elo, ehi])
    for w, g in zip(want, got):
        np.testing.assert_array_equal(w.numpy(), g.data)
    import torch.autograd.forward_ad as fw
    for k in range(3):
        dirs = [np.full(40, float(i == k)) for i in range(3)]
        with fw.dual_level():
            want = fw.unpack_dual(torch.clamp(*[fw.make_dual(torch.tensor(v), torch.tensor(d))
                                                for v, d in zip((x, lo, hi), dirs)])).tangent.numpy()
        with dual_level():
            got = unpack_dual(F["clamp"](*[make_dual(t64(v, False), t64(d, False))
                                           for v, d in zip((x, lo, hi), dirs)])).tangent.data
        np.testing.assert_array_equal(want, got)


def test_signed_zero_of_matmul_inner_size_one_against_torch():
    torch = _torch()
    for n, m in ((1, 1), (2, 3), (5, 1), (1, 5), (40, 40)):
        a, b = -np.ones((n, 1)), np.zeros((1, m))
        for op in ("mm", "matmul"):
            want = np.signbit(getattr(torch, op)(torch.tensor(a), torch.tensor(b)).numpy())
            np.testing.assert_array_equal(np.signbit(F[op](t64(a, False), t64(b, False)).data), want)
        for batch in (1, 3):
            a3, b3 = np.repeat(a[None], batch, 0), np.repeat(b[None], batch, 0)
            want = np.signbit(torch.bmm(torch.tensor(a3), torch.tensor(b3)).numpy())
            np.testing.assert_array_equal(np.signbit(F["bmm"](t64(a3, False), t64(b3, False)).data), want)


# (torch expression, engine expression) of x: first and second derivatives through create_graph=True
_CREATE_GRAPH = {
    "x * x": (lambda t: t * t, lambda e: F["mul"](e, e)),
    "x ** 1": (lambda t: t ** 1, lambda e: F["pow"](e, 1)),
    "x ** 2.0": (lambda t: t ** 2.0, lambda e: F["pow"](e, 2.0)),
    "relu(x)": (lambda t: t.relu(), lambda e: F["relu"](e)),
    "relu(x) * x": (lambda t: t.relu() * t, lambda e: F["mul"](F["relu"](e), e)),
    "abs(x)": (lambda t: t.abs(), lambda e: F["abs"](e)),
    "sign(x) * x": (lambda t: t.sign() * t, lambda e: F["mul"](F["sign"](e), e)),
    "clamp(x) * x": (lambda t: t.clamp(-0.5, 1.0) * t, lambda e: F["mul"](F["clamp"](e, -0.5, 1.0), e)),
    "norm(x)": (lambda t: t.norm(), lambda e: F["norm"](e)),
    "dot(x, x)": (lambda t: t.dot(t), lambda e: F["dot"](e, e)),
    "var(x)": (lambda t: t.var(), lambda e: F["var"](e)),
    "elu(x) * x": (lambda t: _elu_torch(t) * t, lambda e: F["mul"](F["elu"](e), e)),
    "prod(x)": (lambda t: t.prod(), lambda e: F["prod"](e)),
}


def _elu_torch(t):
    import torch.nn.functional as tf
    return tf.elu(t)


@pytest.mark.parametrize("expr", sorted(_CREATE_GRAPH))
def test_create_graph_requires_grad_of_grads_against_torch(expr):
    torch = _torch()
    tf, ef = _CREATE_GRAPH[expr]
    x = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64, requires_grad=True)
    g, = torch.autograd.grad(tf(x).sum(), x, create_graph=True)
    g.sum().backward(create_graph=True)
    want = (g.requires_grad, x.grad.requires_grad, type(x.grad.grad_fn).__name__ if x.grad.grad_fn else None)
    xe = t64([0.5, -1.0, 2.0, 0.0])
    ge, = grad(F["sum"](ef(xe)), [xe], create_graph=True)
    backward(F["sum"](ge), create_graph=True)
    got = (ge.requires_grad, xe.grad.requires_grad, xe.grad.grad_fn.name if xe.grad.grad_fn else None)
    assert got == want
    np.testing.assert_allclose(xe.grad.data, x.grad.detach().numpy(), rtol=1e-12)
