"""The kernels made cheaper for issue #13 compute the same bits as the formulas they replace.

Each reference below is the kernel as it was (kept here verbatim): the new kernel (or the op that now calls a
ufunc or an array method directly) must give the same dtype, shape, strides and bytes (NaN payloads included)
over random values and the edge values (0, -0, inf, nan, denormals, the largest finite, around the
thresholds), in float32 and float64, broadcast and non-contiguous. A kernel that returns a view must view
the same memory the reference's view does.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradserve_server.engine as E
from gradserve_server.engine.ops import backward as BW
from gradserve_server.engine.ops import elementwise as EW
from gradserve_server.engine.ops import linalg as LA
from gradserve_server.engine.ops import nn as NN
from gradserve_server.engine.ops import shape as S

FLOATS = (np.float32, np.float64)


# ----- the references: the kernels as they were ---------------------------------------------------------------


def ref_apply_float(x, fn):
    return fn(x if x.dtype.kind == "f" else x.astype(np.float32))


def ref_np_sigmoid(x):
    with np.errstate(over="ignore"):
        return np.reciprocal(1 + np.exp(-x))


def ref_relu(x):
    return np.maximum(x, x.dtype.type(0))


def ref_softplus(x, beta, threshold):
    t = x.dtype.type
    if beta == 1:
        with np.errstate(over="ignore"):
            out = np.where(x > t(threshold), x, np.log1p(np.exp(x)))
        return out.astype(x.dtype, copy=False)
    bx = x * t(beta)
    with np.errstate(over="ignore"):
        out = np.where(bx > t(threshold), x, np.log1p(np.exp(bx)) / t(beta))
    return out.astype(x.dtype, copy=False)


def ref_softplus_backward(g, x, beta, threshold):
    t = x.dtype.type
    bx = x if beta == 1 else x * t(beta)
    with np.errstate(over="ignore", invalid="ignore"):
        z = np.exp(bx)
        out = np.where(bx > t(threshold), g, g * z / (z + t(1)))
    return out.astype(x.dtype, copy=False)


def ref_tanh_backward(g, y):
    return g * (y.dtype.type(1) - y * y)


def ref_sigmoid_backward(g, y):
    return g * (y.dtype.type(1) - y) * y


def ref_mul_number(a, npdt, n):
    return np.asarray(a * npdt.type(n), npdt)


def ref_div_number(a, npdt, n):
    return np.asarray(a / npdt.type(n), npdt)


# ----- inputs ---------------------------------------------------------------------------------------------------


def edge_values(dt) -> np.ndarray:
    fi = np.finfo(dt)
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, np.inf, -np.inf, np.nan, -np.nan, float(fi.tiny), -float(fi.tiny),
            float(fi.smallest_subnormal), -float(fi.smallest_subnormal), float(fi.max), -float(fi.max),
            float(fi.eps), 19.999, 20.0, 20.001, 21.0, -20.0, 30.0, 87.0, 88.0, 88.5, 89.0, 100.0, 700.0, 709.0,
            710.0, 1e4, -1e4, -88.0, -89.0, -103.0, -104.0, -746.0, 1e30, -1e30, 3.0, -3.0, 1e-3, -1e-3]
    a = np.array(vals, dtype=dt)
    nan_payload = np.array([0x7FC00123 if dt == np.float32 else 0x7FF8000000000123],
                           dtype=np.uint32 if dt == np.float32 else np.uint64).view(dt)
    return np.concatenate([a, nan_payload])


def sample(dt, n: int, seed: int) -> np.ndarray:
    """Random values of several scales with the edge values mixed in, shuffled."""
    rng = np.random.default_rng(seed)
    scales = rng.choice([1e-30, 1e-3, 1.0, 10.0, 30.0, 100.0, 1e5], size=n)
    x = (rng.standard_normal(n) * scales).astype(dt)
    e = edge_values(dt)
    x[: min(n, e.size)] = e[: min(n, e.size)]
    return rng.permutation(x)


def same(new, ref) -> None:
    new, ref = np.asarray(new), np.asarray(ref)
    assert new.__class__ is np.ndarray
    assert new.dtype == ref.dtype and new.shape == ref.shape
    assert new.strides == ref.strides
    assert new.tobytes() == ref.tobytes(), (new, ref)


def layouts(dt, seed: int):
    """(name, array) pairs: contiguous of several sizes (past the in-place size too), 0-d, non-contiguous."""
    base = sample(dt, 40_000, seed)
    yield "1d", base[:257]
    yield "big", base
    yield "2d", base[:600].reshape(20, 30)
    yield "strided", base[:800:3]
    yield "transposed", base[:600].reshape(20, 30).T
    yield "big-transposed", base[:40_000].reshape(200, 200).T
    for i in range(0, base.size, 997):
        yield f"0d[{i}]", np.array(base[i])


def zero_d_values(dt):
    for v in edge_values(dt):
        yield np.array(v, dtype=dt)
    for v in sample(dt, 400, 7):
        yield np.array(v, dtype=dt)


# ----- the arithmetic kernels are the ufuncs the operators call ------------------------------------------------


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op, ref", [(EW.add, lambda a, b: a + b), (EW.sub, lambda a, b: a - b),
                                     (EW.mul, lambda a, b: a * b), (EW.div, lambda a, b: a / b)])
def test_binary_ops_are_the_operators(dt, op, ref):
    for _name, a in layouts(dt, 1):
        b = np.flip(a) if a.ndim else np.array(sample(dt, 3, 2)[0])
        same(op(E.Tensor(a), E.Tensor(b)).data, np.asarray(ref(a, b)))
        for n in (0.5, 2, -0.0, 1e-40, 3.0e38, float("inf"), float("nan")):
            same(op(E.Tensor(a), n).data, np.asarray(ref(a, dt(n))))
    # broadcasting both ways, and a 0-d operand
    a, b = sample(dt, 60, 3).reshape(6, 10), sample(dt, 10, 4)
    same(op(E.Tensor(a), E.Tensor(b)).data, ref(a, b))
    same(op(E.Tensor(b), E.Tensor(a)).data, ref(b, a))
    z = np.array(sample(dt, 1, 5)[0])
    same(op(E.Tensor(a), E.Tensor(z)).data, ref(a, z))
    same(op(E.Tensor(z), E.Tensor(a)).data, ref(z, a))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
def test_number_kernels(dtype):
    from gradserve_server.engine import dtypes as D
    from gradserve_server.engine.ops.common import binary_operands
    rng = np.random.default_rng(6)
    base = (rng.standard_normal(50) * 10).astype(dtype) if dtype != np.bool_ else rng.random(50) > 0.5
    if dtype in FLOATS:
        base[:edge_values(dtype).size] = edge_values(dtype)[:50]
    for a in (base, base[::3], base.reshape(5, 10).T, np.array(base[0])):
        t = E.Tensor(a)
        for n in (0.5, 3, -2, True, 1e-3):
            dt_name, arr, _ = binary_operands(t, n)
            npdt = D.NP_DTYPES[dt_name]
            same(EW.mul_number(t, n).data, ref_mul_number(arr, npdt, n))
            if dt_name != D.BOOL and not (dt_name == D.INT64):
                same(EW.div_number(t, n).data, ref_div_number(arr, npdt, n))


# ----- unary ops: the ufunc (or the few-step kernel) is called directly on a float input ------------------------


UNARY = [(EW.exp, np.exp), (EW.log, np.log), (EW.sin, np.sin), (EW.cos, np.cos), (EW.tanh, np.tanh),
         (EW.sqrt, np.sqrt), (EW.reciprocal, np.reciprocal), (EW.expm1, np.expm1), (EW.log1p, np.log1p),
         (EW.tan, np.tan), (EW.sinh, np.sinh), (EW.cosh, np.cosh), (EW.atan, np.arctan),
         (EW.sigmoid, ref_np_sigmoid)]


@pytest.mark.parametrize("op, fn", UNARY, ids=[f.__name__ for f, _ in UNARY])
def test_unary_ops(op, fn):
    with np.errstate(all="ignore"):
        for dt in FLOATS:
            for _, x in layouts(dt, 8):
                same(op(E.Tensor(x)).data, np.asarray(ref_apply_float(x, fn)))
        for x in (np.arange(-5, 6), np.arange(-3, 9).reshape(3, 4)[:, ::2], np.array(3), np.array([True, False])):
            same(op(E.Tensor(x)).data, np.asarray(ref_apply_float(x, fn)))


@pytest.mark.parametrize("dt", FLOATS)
def test_sigmoid_kernel_in_place_steps(dt):
    """Small arrays keep the expression, large ones write its steps over one fresh array: the same bits, and no
    numpy warning either way (the kernel silences overflow itself)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _, x in layouts(dt, 9):
            same(np.asarray(EW._np_sigmoid(x)), np.asarray(ref_np_sigmoid(x)))


@pytest.mark.parametrize("dt", FLOATS + (np.int64,))
def test_relu(dt):
    xs = [x for _, x in layouts(dt, 10)] if dt in FLOATS else [np.arange(-5, 5), np.array(-3)]
    for x in xs:
        same(EW.relu(E.Tensor(x)).data, np.asarray(ref_relu(x)))


# ----- softplus: the one-value branch, and its backward in numpy's scalar arithmetic -------------------------------


THRESHOLDS = (20, 0, -5, 19.999, 20.5, 87, 88, 88.0001, 89, 709, 710, 1e30, -1e30, 1e300, -1e300, 3.4e38)


@pytest.mark.parametrize("dt", FLOATS)
def test_softplus_forward(dt):
    with np.errstate(all="ignore"):
        for beta in (1, 2, 0.5):
            for threshold in THRESHOLDS:
                for x in zero_d_values(dt):
                    same(EW._softplus(x, beta, threshold), ref_softplus(x, beta, threshold))
                for _, x in layouts(dt, 11):
                    if x.size > 1000 and threshold not in (20, 88):
                        continue
                    same(EW._softplus(x, beta, threshold), ref_softplus(x, beta, threshold))


@pytest.mark.parametrize("dt", FLOATS)
def test_softplus_backward(dt):
    gs = list(edge_values(dt)) + list(sample(dt, 60, 12))
    with np.errstate(all="ignore"):
        for beta in (1, 2):
            for threshold in THRESHOLDS:
                for x in list(zero_d_values(dt))[::3]:
                    for g in gs:
                        g = np.array(g, dtype=dt)
                        same(BW._softplus_backward(g, x, beta, threshold),
                             ref_softplus_backward(g, x, beta, threshold))
                    g64 = np.array(1.5)  # a gradient of another dtype than x
                    same(BW._softplus_backward(g64, x, beta, threshold),
                         ref_softplus_backward(g64, x, beta, threshold))
                for _, x in layouts(dt, 13):
                    if x.size > 1000:
                        continue
                    g = np.flip(x) if x.ndim else np.array(gs[5], dtype=dt)
                    same(BW._softplus_backward(g, x, beta, threshold), ref_softplus_backward(g, x, beta, threshold))


def test_softplus_one_value_warns_nothing():
    """The one-value branches silence nothing, so they must meet no floating-point error: none of these warns
    (outside a program, where numpy's errors are not ignored)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dt in FLOATS:
            for x in zero_d_values(dt):
                EW._softplus(x, 1, 20)
                for g in edge_values(dt):
                    BW._softplus_backward(np.array(g, dtype=dt), x, 1, 20)


# ----- tanh/sigmoid backward: in place over their first fresh array when large ------------------------------------


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("kernel, ref", [(BW._tanh_backward, ref_tanh_backward),
                                         (BW._sigmoid_backward, ref_sigmoid_backward)])
def test_tanh_sigmoid_backward(dt, kernel, ref):
    with np.errstate(all="ignore"):
        for _name, y in layouts(dt, 14):
            gs = [np.flip(y) if y.ndim else np.array(1.25, dt), np.ones_like(y)]
            if y.ndim:
                gs.append(np.broadcast_to(np.array(0.75, dt), y.shape))  # an expanded seed gradient
                gs.append(np.broadcast_to(np.array(1.0, dt), y.shape))  # a sum's seed: tanh skips g * t
                gs.append(np.broadcast_to(np.array(-1.0, dt), y.shape))
                gs.append(np.array(y, dtype=np.float64 if dt == np.float32 else np.float32))  # another dtype
            gs.append(np.array(2.0, dt))  # a gradient that broadcasts
            gs.append(np.array(1.0, dt))
            for g in gs:
                same(np.asarray(kernel(g, y)), np.asarray(ref(g, y)))
                if y.ndim:
                    same(np.asarray(kernel(y, g)), np.asarray(ref(y, g)))
            if y.ndim:  # (a NaN seed: not as y, where two NaNs meet and numpy's loops pick either payload)
                g = np.broadcast_to(np.array(np.nan, dt), y.shape)
                same(np.asarray(kernel(g, y)), np.asarray(ref(g, y)))


@pytest.mark.parametrize("dt", FLOATS)
def test_tanh_backward_into_a_register_is_the_kernel(dt):
    """A plan writes tanh's backward into a register (``_tanh_backward_into``, its direct form when g and y
    have one shape and dtype): the kernel's bits, for a seed of ones (g * t skipped) and any other g."""
    with np.errstate(all="ignore"):
        for _name, y in layouts(dt, 15):
            if y.nbytes < BW.IN_PLACE_BYTES:  # (small: the kernel's one expression, no register form)
                assert BW._tanh_backward.direct(y, y) is None
                continue
            for g in (np.flip(y), np.broadcast_to(np.array(1.0, dt), y.shape), np.ones_like(y),
                      np.broadcast_to(np.array(0.5, dt), y.shape)):
                call, args = BW._tanh_backward.direct(g, y)
                out = np.full(y.shape, np.nan, dt)  # (whatever the register held before)
                assert call(*args, out) is out
                assert out.tobytes() == np.ascontiguousarray(ref_tanh_backward(g, y)).tobytes()
        y = sample(dt, 50_000, 3)
        assert BW._tanh_backward.direct(np.array(2.0, dt), y) is None  # g broadcasts: no register form
        assert BW._tanh_backward.direct(y.astype(np.float16), y) is None


# ----- shape kernels: the array methods np.reshape/np.transpose/np.swapaxes/np.expand_dims call ------------------


def same_view(new, ref, base) -> None:
    same(new, ref)
    assert np.shares_memory(new, base) == np.shares_memory(ref, base)
    if np.shares_memory(ref, base):  # a view: of the same elements (a copy is anywhere)
        assert new.__array_interface__["data"][0] == ref.__array_interface__["data"][0]
    assert new.flags.writeable == ref.flags.writeable


@pytest.mark.parametrize("dt", FLOATS + (np.int64,))
def test_shape_kernels(dt):
    a = np.arange(2 * 3 * 4, dtype=dt).reshape(2, 3, 4)
    for x in (a, a[:, ::2], a.transpose(2, 0, 1), a[1], np.array(dt(5)), a[:, :1]):
        same_view(S._transpose(x), np.transpose(x), x)
        for d in range(x.ndim + 1):
            shp = x.shape
            same_view(S._reshape(x, shp[:d] + (1,) + shp[d:]), np.expand_dims(x, d), x)
        for d0 in range(x.ndim):
            for d1 in range(x.ndim):
                same_view(S._swapaxes(x, d0, d1), np.swapaxes(x, d0, d1), x)
        for shp in ((-1,), (x.size,), (1, x.size), ()):
            if shp == () and x.size != 1:
                continue
            same_view(S._reshape(x, shp), np.reshape(x, shp), x)
            try:
                r = np.reshape(x, shp, copy=False)
            except ValueError:
                with pytest.raises(ValueError):
                    S._view(x, shp)
            else:
                same_view(S._view(x, shp), r, x)


# ----- matmul with an inner size of 1: two elementwise passes give what BLAS gives ---------------------------------


@pytest.mark.parametrize("dt", FLOATS)
def test_outer_kernel_is_blas(dt):
    """(m, 1) @ (1, n) computes 0 + a[i] * b[j] in BLAS (and in numpy's own loop): the multiply-then-add-zero
    kernel matches np.matmul's bits, signed zeros, infinities, NaN payloads and layouts included."""
    from gradserve_server.engine.ops.linalg import _matmul_kernel, _outer_kernel
    with np.errstate(all="ignore"):
        for m, n in ((1, 1), (1, 7), (7, 1), (3, 5), (64, 64), (128, 512), (513, 3)):
            for seed in range(2):
                a0 = sample(dt, max(m, 64), seed)[:m].reshape(m, 1)
                b0 = sample(dt, max(n, 64), seed + 10)[:n].reshape(1, n)
                for a in (a0, np.ascontiguousarray(a0.T).T, np.repeat(a0, 2, 1)[:, :1]):
                    for b in (b0, np.ascontiguousarray(b0.T).T, np.repeat(b0, 2, 1)[:, ::2]):
                        same(_outer_kernel(a, b, (m, n)), _matmul_kernel(a, b, (m, n)))
        a = sample(dt, 64, 3).reshape(64, 1)
        same(_outer_kernel(a, a.T, (64, 64)), _matmul_kernel(a, a.T, (64, 64)))  # numpy's syrk case
        # through the ops: mm and addmm pick the kernel, and the gradient of a (1, k) @ (k, n) product uses it
        x = E.tensor(sample(dt, 50, 4).reshape(50, 1))  # 50 x 60 entries: the elementwise kernel
        y = E.tensor(sample(dt, 60, 5).reshape(1, 60))
        assert x.shape[0] * y.shape[1] >= LA._OUTER_MIN
        # mm of an inner size of 1 gives the products themselves, a -0.0 kept, as torch's gemm (issue 21)
        same(LA.mm(x, y).data, np.multiply(x.data, y.data))
        same(LA.addmm(E.tensor(np.zeros((50, 60), dt)), x, y).data, np.matmul(x.data, y.data) + dt(0))


# ----- relu's backward (threshold_backward): torch's select, as integer bits -----------------------------------------


def ref_threshold_backward(g, x, threshold):
    """torch: self <= threshold ? 0 : grad, in the layout ``g * keep`` gives (the kernel as it was)."""
    out = np.where(x <= threshold, g.dtype.type(0), g)
    layout = np.empty_like(g * ~(x <= threshold))
    layout[...] = out
    return layout


@pytest.mark.parametrize("dt", FLOATS)
def test_threshold_backward_is_torchs_select(dt):
    """+0 where cut (even for an inf or nan gradient, where ``g * 0`` would be nan, and a negative one, where it
    would be -0), the gradient's bits (NaN payloads included) where kept, a NaN input passes the gradient."""
    with np.errstate(all="ignore"):
        for _name, x in layouts(dt, 15):
            gs = [np.flip(x) if x.ndim else np.array(-1.25, dt), np.ones_like(x)]
            if x.ndim:
                gs.append(np.broadcast_to(np.array(-0.75, dt), x.shape))  # an expanded seed gradient
            gs.append(np.array(np.nan, dt))  # a gradient that broadcasts
            for g in gs:
                for threshold in (0, 0.5, -1.0):
                    same(BW._threshold_backward(g, x, threshold), ref_threshold_backward(g, x, threshold))
        e = edge_values(dt)
        for g in e:  # every edge gradient over every edge input
            g = np.full(e.shape, g, dt)
            same(BW._threshold_backward(g, e, 0), ref_threshold_backward(g, e, 0))


# ----- nll_loss: the common case in fewer steps, its backward as torch's kernel --------------------------------------


def ref_nll_weights(n_classes, target, weight, ignore_index, dtype):
    tg = target.reshape(-1)
    valid = tg != ignore_index
    safe = np.where(valid, tg, 0)
    w = weight.astype(dtype, copy=False) if weight is not None else np.ones(n_classes, dtype)
    return np.where(valid, w[safe], dtype.type(0)).astype(dtype, copy=False), safe, valid


def ref_nll_kernel(x, target, ignore_index, red, weight=None):
    dt = x.dtype
    wt, safe, valid = ref_nll_weights(x.shape[-1], target, weight, ignore_index, dt)
    picked = x.reshape(-1, x.shape[-1])[np.arange(safe.size), safe]
    losses = np.where(valid, picked * wt, dt.type(0))
    if red == 0 and x.ndim == 2:
        out = np.where(valid, -losses, dt.type(0)).astype(dt)
        total = dt.type(0)
    else:
        total = np.sum(wt, dtype=dt)
        s = dt.type(0) - np.sum(losses, dtype=dt)
        out = np.asarray(s / total if red == 1 else s, dt)
    return np.asarray(out), np.asarray(total, dt)


def ref_nll_backward(x, target, ignore_index, g, weight=None):
    """The formula's steps: masked_fill(coef * g, untouched, 0)."""
    dt = x.dtype
    n = x.shape[-1]
    wt, safe, valid = ref_nll_weights(n, target, weight, ignore_index, dt)
    coef = np.zeros((safe.size, n), dt)
    coef[np.arange(safe.size), safe] = wt
    untouched = np.ones((safe.size, n), bool)
    untouched[np.arange(safe.size)[valid], safe[valid]] = False
    return np.where(untouched.reshape(x.shape), dt.type(0), coef.reshape(x.shape) * g)


def nll_cases(dt):
    rng = np.random.default_rng(21)
    for trial in range(400):
        n, c = int(rng.integers(1, 40)), int(rng.integers(1, 12))
        x = rng.standard_normal((n, c)).astype(dt)
        if trial % 3 == 0:  # non-finite and signed-zero inputs
            x.flat[rng.integers(0, x.size, 3)] = rng.choice([np.nan, np.inf, -np.inf, -0.0], 3)
        target = rng.integers(0, c, n)
        ignore = int(rng.integers(0, c)) if trial % 4 == 1 else -100  # sometimes hit, sometimes not
        weight = rng.standard_normal(c).astype(dt) if trial % 5 == 2 else None
        if trial % 10 == 3:
            x, target = x[0], np.array(target[0])  # (C,) input, 0-d target
        yield x, target, ignore, weight


@pytest.mark.parametrize("dt", FLOATS)
def test_nll_kernel_common_case(dt):
    """Every target in range and none ignored, no weight: the picked values summed over a total weight of N,
    the bits of the general steps (which every other case still takes)."""
    from gradserve_server.engine.ops.nn import _nll_kernel
    with np.errstate(all="ignore"):
        for x, target, ignore, weight in nll_cases(dt):
            for red in (0, 1, 2):
                for new, ref in zip(_nll_kernel(x, target, ignore, red, weight),
                                    ref_nll_kernel(x, target, ignore, red, weight)):
                    same(new, ref)


@pytest.mark.parametrize("dt", FLOATS)
def test_nll_backward_kernel_is_the_formula(dt):
    """The one-pass backward (no create_graph) gives the values of the formula's ops (run under create_graph):
    zeros, and the scaled gradient (times the weight) at each counted row's target, NaN gradients included."""
    from gradserve_server.engine.ops.nn import _nll_grad
    rng = np.random.default_rng(22)
    with np.errstate(all="ignore"):
        for x, target, ignore, weight in nll_cases(dt):
            for red in (0, 1, 2):
                loss, total = ref_nll_kernel(x, target, ignore, red, weight)
                grad = np.asarray(rng.standard_normal(loss.shape), dt)
                if rng.random() < 0.2:
                    grad = np.full(loss.shape, np.nan, dt)
                g = np.asarray(-(grad / total) if red == 1 else -grad, dt)
                if red == 0 and x.ndim == 2:
                    g = g[:, None]
                same(_nll_grad(x, target, ignore, g, weight), ref_nll_backward(x, target, ignore, g, weight))


def test_nll_backward_one_pass_and_formula_agree_through_autograd():
    """x.grad of cross_entropy without create_graph (the one-pass kernel) is the gradient create_graph gives
    (the formula's ops, shown as one NllLossBackwardBackward0 node), and both match a second backward."""
    rng = np.random.default_rng(3)
    for ignore in (-100, 2):
        xs = rng.standard_normal((16, 5)).astype(np.float32)
        xs[0, 1] = np.nan
        target = E.tensor(rng.integers(0, 5, 16))
        grads = []
        for create in (False, True):
            x = E.tensor(xs, requires_grad=True)
            loss = NN.cross_entropy(x, target, ignore_index=ignore)
            (g,) = E.grad(loss, [x], create_graph=create)
            grads.append(g)
        same(grads[0].data, grads[1].data)
        assert grads[0].grad_fn is None and grads[1].grad_fn is not None


def test_mean_of_all_elements_is_numpys_mean_bit_for_bit():
    """``_mean_all`` takes np.mean's steps for float32/float64 without its dispatch layers: the same bits for
    every shape, layout and magnitude (an overflowing sum, infinities, NaN), and NaN for an empty input."""
    from gradserve_server.engine.ops.reduction import _mean_all
    rng = np.random.default_rng(7)
    for dt in (np.float32, np.float64):
        cases = [(rng.standard_normal(shape) * scale).astype(dt)
                 for shape in [(1,), (7,), (3, 5), (1000,), (257, 33), (2, 3, 4, 5)] for scale in (1e-30, 1.0, 1e30)]
        cases += [np.array(v, dt) for v in ([np.inf, -np.inf], [np.nan, 1.0], [np.inf, 1.0], 2.5)]
        cases += [np.ones((3, 4), dt)[:, ::2], np.full(10, np.finfo(dt).max, dt)]
        with np.errstate(all="ignore"):
            for x in cases:
                got, want = _mean_all(x, np.dtype(dt)), np.asarray(np.mean(x), dtype=dt)
                assert got.dtype == want.dtype and got.shape == () and got.tobytes() == want.tobytes(), (x, got, want)
        assert np.isnan(_mean_all(np.zeros(0, dt), np.dtype(dt)))
