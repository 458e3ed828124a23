"""Fused backward functions, as ATen has them (``threshold_backward``, ``tanh_backward``,
``sigmoid_backward``, ``softplus_backward``, ``_softmax_backward_data``, ``_log_softmax_backward_data``).

A first-order backward through relu, tanh, sigmoid, softplus or softmax costs one numpy pass instead of a
chain of engine ops; each is itself differentiable (its VJP is written in engine ops), so create_graph and
higher orders work, and the recorded double-backward nodes carry torch's names
(``TanhBackwardBackward0``...). The arithmetic follows torch's CPU kernels.
"""

from __future__ import annotations

import math

import numpy as np

from ..kernel import direct, kcall
from ..registry import F, P, elementwise_jvp, jvp, record, vjp
from ..tensor import Tensor
from .common import EXP_FINITE, IN_PLACE_BYTES, add_t, zeros_like

_SUM = np.add.reduce


#: float dtype -> the unsigned integer of its bits
_BITS = {np.dtype(np.float32): np.dtype(np.uint32), np.dtype(np.float64): np.dtype(np.uint64)}


def _threshold_backward(g, x, threshold):
    # torch: self <= threshold ? 0 : grad (a NaN self passes the gradient; +0 where cut, even for a nan/inf grad)
    keep = np.less_equal(x, threshold)
    if keep.__class__ is np.ndarray:
        np.logical_not(keep, out=keep)
    else:  # (0-d: a numpy bool)
        keep = ~keep
    u = _BITS.get(g.dtype)
    if u is None:
        return np.where(x <= threshold, g.dtype.type(0), g)
    # the gradient's bits times 1 or 0: the bits themselves or +0.0, in one pass (np.where is ~5x slower)
    return np.multiply(g.view(u), keep).view(g.dtype)


def threshold_backward(grad: Tensor, self: Tensor, threshold) -> Tensor:
    out = kcall(_threshold_backward, grad.data, self.data, threshold)
    return record(P.ThresholdBackwardBackward0, out, (grad, self), {"self": self, "threshold": threshold})


@vjp("ThresholdBackwardBackward0", inputs=("grad_output", "self"), saves=("self", "threshold"))
def _(ctx, gg):
    n = ctx.needs
    return (threshold_backward(gg, ctx.self, ctx.threshold) if n[0] else None), \
        (zeros_like(gg) if n[1] else None)


@jvp()
def _(ctx, grad_output_t, self_t):
    return None if grad_output_t is None else threshold_backward(grad_output_t, ctx.self, ctx.threshold)


def _ones(g) -> bool:
    """Whether ``g`` is one real value broadcast (every stride 0: a sum's seed gradient) and that value is 1:
    then ``g * t`` is ``t`` bit for bit (``t`` an arithmetic result, never a signalling NaN) and need not be
    made."""
    return g.ndim > 0 and g.size > 0 and g.dtype.kind in "fV" and not any(g.strides) and bool(g[(0,) * g.ndim] == 1)


def _tanh_backward_into(g, y, out):
    """_tanh_backward's in-place steps, written over ``out`` (a plan's register) instead of a fresh array: for
    a large y, and g of its shape and dtype (the steps the kernel takes then, each aliased the same way)."""
    np.multiply(y, y, out=out)
    np.subtract(y.dtype.type(1), out, out=out)
    return out if _ones(g) else np.multiply(g, out, out=out)


_tanh_backward_into.takes_out = True


@direct(lambda g, y: (_tanh_backward_into, (g, y))
        if y.nbytes >= IN_PLACE_BYTES and g.shape == y.shape and g.dtype == y.dtype else None)
def _tanh_backward(g, y):
    # a large y (and g of its shape and dtype, so every step has them): the steps over one fresh array
    if y.nbytes < IN_PLACE_BYTES or g.shape != y.shape or g.dtype != y.dtype:
        return g * (y.dtype.type(1) - y * y)
    t = y * y  # the same steps, each written over this fresh array (of y's layout)
    np.subtract(y.dtype.type(1), t, out=t)
    return t if _ones(g) else np.multiply(g, t, out=t)


def tanh_backward(grad: Tensor, output: Tensor) -> Tensor:
    return record(P.TanhBackwardBackward0, kcall(_tanh_backward, grad.data, output.data), (grad, output),
                  {"grad_output": grad, "output": output})


@vjp("TanhBackwardBackward0", inputs=("grad_output", "output"),
     saves={"grad_output": ("output",), "output": ("grad_output", "output")}, jvp=elementwise_jvp)
def _(ctx, gg):
    n = ctx.needs
    y = ctx.output
    return (tanh_backward(gg, y) if n[0] else None), \
        ((ctx.grad_output * (-2 * y * gg)) if n[1] else None)


def _sigmoid_backward(g, y):
    # a large y (and g of its shape and dtype, so every step has them): the steps over one fresh array
    if y.nbytes < IN_PLACE_BYTES or g.shape != y.shape or g.dtype != y.dtype:
        return g * (y.dtype.type(1) - y) * y
    t = y.dtype.type(1) - y  # the same steps, each written over this fresh array
    np.multiply(g, t, out=t)
    return np.multiply(t, y, out=t)


def sigmoid_backward(grad: Tensor, output: Tensor) -> Tensor:
    return record(P.SigmoidBackwardBackward0, kcall(_sigmoid_backward, grad.data, output.data), (grad, output),
                  {"grad_output": grad, "output": output})


@vjp("SigmoidBackwardBackward0", inputs=("grad_output", "output"),
     saves={"grad_output": ("output",), "output": ("grad_output", "output")}, jvp=elementwise_jvp)
def _(ctx, gg):
    n = ctx.needs
    y = ctx.output
    return (sigmoid_backward(gg, y) if n[0] else None), \
        ((gg * ctx.grad_output * (1 - 2 * y)) if n[1] else None)


def _softplus_backward(g, x, beta, threshold):
    t = x.dtype.type
    if beta == 1 and x.ndim == 0 and g.ndim == 0 and g.dtype == x.dtype and abs(threshold) <= EXP_FINITE[x.itemsize]:
        # one value: the branch np.where would take, alone, in numpy's scalar arithmetic (the same IEEE
        # operations); float(x) > float(t(threshold)) is numpy's comparison exactly
        if float(x) > float(t(threshold)):
            return g.copy()
        gv = g[()]
        # no fp error to silence: exp(x) <= exp(threshold) is finite and |g| * exp(x) cannot overflow
        if abs(float(gv)) * math.exp(threshold) < _PRODUCT_FINITE[x.itemsize]:
            z = np.exp(x)
            return np.asarray(gv * z / (z + t(1)))
    bx = x if beta == 1 else x * t(beta)
    with np.errstate(over="ignore", invalid="ignore"):
        z = np.exp(bx)
        out = np.where(bx > t(threshold), g, g * z / (z + t(1)))
    return out.astype(x.dtype, copy=False)


#: a bound below the largest finite value, by item size (float32, float64)
_PRODUCT_FINITE = {4: 1e38, 8: 1e307}


def softplus_backward(grad: Tensor, self: Tensor, beta, threshold) -> Tensor:
    out = kcall(_softplus_backward, grad.data, self.data, beta, threshold)
    return record(P.SoftplusBackwardBackward0, out, (grad, self),
                  {"beta": beta, "grad_output": grad, "self": self, "threshold": threshold})


@vjp("SoftplusBackwardBackward0", inputs=("grad_output", "self"),
     saves={"beta": (), "grad_output": ("self",), "self": ("grad_output", "self"), "threshold": ()},
     jvp=elementwise_jvp)
def _(ctx, gg):
    n = ctx.needs
    x, beta, threshold = ctx.self, ctx.beta, ctx.threshold
    g_grad = softplus_backward(gg, x, beta, threshold) if n[0] else None
    g_self = None
    if n[1]:
        bx = x if beta == 1 else x * beta
        s = F.sigmoid(bx)
        g_self = F.where(F.gt(bx, threshold), 0.0, gg * ctx.grad_output * (beta * s * (1 - s)))
    return g_grad, g_self


def _elu_backward(g, x, alpha, scale=1, input_scale=1):
    t = x.dtype.type
    negcoef, poscoef, negiptcoef = t(alpha * scale), t(scale), t(input_scale)  # (torch's coefficients, in x's type)
    with np.errstate(over="ignore", invalid="ignore"):  # exp(x) of a large x is in the branch not taken
        neg = g * negiptcoef * negcoef * np.exp(x * negiptcoef)
        return np.where(x <= 0, neg, g * poscoef).astype(np.result_type(g, x), copy=False)


def elu_backward(grad: Tensor, self: Tensor, alpha, scale=1, input_scale=1) -> Tensor:
    """torch's elu_backward (is_result False): grad * input_scale * alpha * scale * exp(x * input_scale) where
    x <= 0, grad * scale elsewhere (elu: both scales 1; selu: scale; celu: input_scale 1/alpha)."""
    return record(P.EluBackwardBackward0, kcall(_elu_backward, grad.data, self.data, alpha, scale, input_scale),
                  (grad, self), {"alpha": alpha, "grad_output": grad, "input_scale": input_scale, "is_result": False,
                                 "scale": scale, "self_or_result": self})


@vjp("EluBackwardBackward0", inputs=("grad_output", "self_or_result"),
     saves={"alpha": (), "grad_output": ("self_or_result",), "input_scale": (), "is_result": (), "scale": (),
            "self_or_result": ("grad_output", "self_or_result")}, jvp=elementwise_jvp)
def _(ctx, gg):
    n = ctx.needs
    x = ctx.self_or_result
    a, s, i = ctx.alpha, ctx.scale, ctx.input_scale
    # torch's elu_double_backward: the derivative of the x <= 0 branch, kept where x < 0 only (0 at x = 0,
    # and a product with a mask, so the exp of a large x never meets a zero)
    return (elu_backward(gg, x, a, s, i) if n[0] else None), \
        ((elu_backward(gg * ctx.grad_output * i, x, a, s, i) * F.lt(x, 0)) if n[1] else None)


def _softmax_backward_data(g, y, dim):
    gy = g * y
    return y * (g - _SUM(gy, axis=dim, keepdims=True))


def softmax_backward_data(grad: Tensor, output: Tensor, dim: int) -> Tensor:
    out = kcall(_softmax_backward_data, grad.data, output.data, dim)
    return record(P.SoftmaxBackwardDataBackward0, out, (grad, output),
                  {"dim": dim, "grad_output": grad, "output": output})


@vjp("SoftmaxBackwardDataBackward0", inputs=("grad_output", "output"),
     saves={"dim": (), "grad_output": ("output",), "output": ("grad_output", "output")})
def _(ctx, gg):
    n = ctx.needs
    y, d = ctx.output, ctx.dim
    g_grad = softmax_backward_data(gg, y, d) if n[0] else None
    g_out = None
    if n[1]:
        g = ctx.grad_output
        g_out = gg * (g - F.sum(g * y, d, keepdim=True)) - g * F.sum(gg * y, d, keepdim=True)
    return g_grad, g_out


@jvp()
def _(ctx, grad_output_t, output_t):
    g, y, d = ctx.grad_output, ctx.output, ctx.dim
    out = softmax_backward_data(grad_output_t, y, d) if grad_output_t is not None else None
    if output_t is not None:
        out = add_t(out, output_t * (g - F.sum(g * y, d, keepdim=True)) - y * F.sum(g * output_t, d, keepdim=True))
    return out


def _log_softmax_backward_data(g, y, dim):
    return g - np.exp(y) * _SUM(g, axis=dim, keepdims=True)


def log_softmax_backward_data(grad: Tensor, output: Tensor, dim: int) -> Tensor:
    out = kcall(_log_softmax_backward_data, grad.data, output.data, dim)
    return record(P.LogSoftmaxBackwardDataBackward0, out, (grad, output),
                  {"dim": dim, "grad_output": grad, "output": output})


@vjp("LogSoftmaxBackwardDataBackward0", inputs=("grad_output", "output"),
     saves={"dim": (), "grad_output": ("output",), "output": ("grad_output", "output")})
def _(ctx, gg):
    n = ctx.needs
    y, d = ctx.output, ctx.dim
    p = F.exp(y)
    g_grad = (gg - F.sum(gg * p, d, keepdim=True)) if n[0] else None
    g_out = (-(gg * p) * F.sum(ctx.grad_output, d, keepdim=True)) if n[1] else None
    return g_grad, g_out


@jvp()
def _(ctx, grad_output_t, output_t):
    g, y, d = ctx.grad_output, ctx.output, ctx.dim
    out = log_softmax_backward_data(grad_output_t, y, d) if grad_output_t is not None else None
    if output_t is not None:
        out = add_t(out, -(F.exp(y) * output_t) * F.sum(g, d, keepdim=True))
    return out

