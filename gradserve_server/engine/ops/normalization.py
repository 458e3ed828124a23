"""Batch and group normalization: F.batch_norm (NativeBatchNormBackward0) and F.group_norm
(NativeGroupNormBackward0), beside layer_norm (nn_functional.py), with the same shape of VJP: the saved
input's statistics recomputed in engine ops, so that every formula is differentiable again.

batch_norm in training mode normalizes with the batch's statistics (over every dim but the channel dim 1)
and, when running statistics are given, updates them in place as torch's kernel does (the unbiased variance
goes into running_var; the version counter is not bumped, as torch's is not); in evaluation mode it
normalizes with the running statistics.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import TorchIndexError, TorchRuntimeError
from ..grad_mode import is_grad_enabled
from ..journal import array_
from ..registry import P, jvp, op, record, vjp
from ..tensor import Tensor
from .common import require_tensor, tie
from .elementwise import add_t, mul_t, rsqrt
from .inplace import _writeable
from .nn_functional import _check_mixed_type
from .reduction import mean
from .reduction import sum as sum_
from .shape import reshape


def _size_str(shape) -> str:
    return "torch.Size([" + ", ".join(str(s) for s in shape) + "])"


def _channel_view(t: Tensor, ndim: int) -> Tensor:
    """A per-channel vector shaped to broadcast over an input of ``ndim`` dims (channels at dim 1)."""
    return reshape(t, (1, -1) + (1,) * (ndim - 2))


@op("batch_norm", shape="same(input)", functions=("batch_norm",),
    checks=('dtype(input)=floating | NotImplementedError: "batch_norm" not implemented for \'{dtype}\'',),
    tensors=("input", "running_mean", "running_var", "weight", "bias"),
    changes_argument=(("running_mean", "training"), ("running_var", "training")),
    grad_fns=(P.NativeBatchNormBackward0, P.CloneBackward0, P.MulBackward0, P.AddBackward0), method=False, family="nn")
def batch_norm(input, running_mean=None, running_var=None, weight=None, bias=None, training=False, momentum=0.1,
               eps=1e-05):
    """F.batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
    eps=1e-05). momentum=None is the cumulative average torch's modules use for it (num_batches_tracked is
    the module's to keep: the functional form, as torch's, then averages with factor 0)."""
    input = require_tensor(input, "input", "batch_norm")
    x = input.data
    if x.size == 0 and x.ndim:
        # torch's _batch_norm_impl_index: an empty input (of any rank but 0) comes back as its clone, times
        # weight[0], plus bias[0]; nothing else is checked, no running statistic changes
        out = input.clone()
        if weight is not None:
            out = out * require_tensor(weight, "weight", "batch_norm").select(0, 0)
        if bias is not None:
            out = out + require_tensor(bias, "bias", "batch_norm").select(0, 0)
        return out
    if x.ndim < 2:
        raise TorchIndexError(f"Dimension out of range (expected to be in range of [-{max(x.ndim, 1)}, "
                              f"{max(x.ndim, 1) - 1}], but got 1)", code="invalid_dim")
    c = x.shape[1]
    if training:
        per_channel = x.size // c if c else 0
        if per_channel <= 1:
            raise TorchRuntimeError(f"Expected more than 1 value per channel when training, got input size "
                                    f"{_size_str(x.shape)}", code="invalid_argument", exception="ValueError")
    elif running_mean is None or running_var is None:
        which = "running_mean" if running_mean is None else "running_var"
        raise TorchRuntimeError(f"{which} must be defined in evaluation mode", code="invalid_argument")
    for name, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean), ("running_var", running_var)):
        if t is not None:
            t = require_tensor(t, name, "batch_norm")
            if t.data.size != c:
                raise TorchRuntimeError(f"{name} should contain {c} elements not {t.data.size}",
                                        code="shape_mismatch")
    if x.dtype.kind not in "fV":
        raise TorchRuntimeError(f"\"batch_norm\" not implemented for '{D.SCALAR_TYPE_NAMES[input.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    if is_grad_enabled():
        # torch's native_batch_norm has no derivative for its running statistics (its autograd checks them, before
        # the kernel's mixed-type check)
        for name, t in (("running_mean", running_mean), ("running_var", running_var)):
            if t is not None and t.requires_grad:
                raise TorchRuntimeError(f"The function 'native_batch_norm' is not differentiable with respect to "
                                        f"argument '{name}'. This input cannot have requires_grad True.",
                                        code="invalid_argument")
    _check_mixed_type(input, [weight, bias, running_mean, running_var])
    axes = (0, *range(2, x.ndim))
    bshape = (1, c) + (1,) * (x.ndim - 2)
    t = x.dtype.type
    if training:
        mu = x.mean(axis=axes)
        var = ((x - mu.reshape(bshape)) ** 2).mean(axis=axes)
        invstd = (t(1) / np.sqrt(var + t(eps))).astype(x.dtype)
        n = x.size // c
        factor = 0.0 if momentum is None else momentum
        for stat, value in ((running_mean, mu), (running_var, var * (n / (n - 1)))):
            if stat is not None:
                data = _writeable(stat.data)
                array_(data)
                data[...] = (1 - factor) * data + factor * value.astype(data.dtype)
        save_mean, save_invstd = mu.astype(x.dtype), invstd
        out = (x - mu.reshape(bshape)) * invstd.reshape(bshape)
    else:
        rm, rv = running_mean.data.astype(x.dtype), running_var.data.astype(x.dtype)
        inv = (t(1) / np.sqrt(rv + t(eps))).astype(x.dtype)
        out = (x - rm.reshape(bshape)) * inv.reshape(bshape)
        save_mean, save_invstd = np.zeros(0, x.dtype), np.zeros(0, x.dtype)
    if weight is not None:
        out = out * weight.data.reshape(bshape)
    if bias is not None:
        out = out + bias.data.reshape(bshape)
    return record(P.NativeBatchNormBackward0, np.asarray(out, x.dtype), (input, weight, bias),
                  {"eps": eps, "input": input, "result1": Tensor(save_mean), "result2": Tensor(save_invstd),
                   "running_mean": running_mean, "running_var": running_var, "training": bool(training),
                   "weight": weight})


def _batch_norm_terms(ctx) -> tuple:
    """The reduced dims, the inverse std (broadcastable) and x-hat of a saved batch_norm input, in engine ops:
    the batch's statistics in training, the running ones in evaluation."""
    x = ctx.input
    nd = x.data.ndim
    dims = [0, *range(2, nd)]
    if ctx.training:
        xc = x - mean(x, dims, True)
        invstd = rsqrt(mean(xc * xc, dims, True) + ctx.eps)
        return dims, invstd, xc * invstd
    invstd = _channel_view(rsqrt(ctx.running_var.detach() + ctx.eps), nd)
    return dims, invstd, (x - _channel_view(ctx.running_mean.detach(), nd)) * invstd


@vjp("NativeBatchNormBackward0", inputs=("input", "weight", "bias"),
     saves=("eps", "input", "result1", "result2", "running_mean", "running_var", "training", "weight"))
def _(ctx, grad):
    n = ctx.needs
    w = ctx.weight
    nd = ctx.input.data.ndim
    dims, invstd, xhat = _batch_norm_terms(ctx)
    g_in = g_w = g_b = None
    if n[0]:
        g = grad * _channel_view(w, nd) if w is not None else grad
        if ctx.training:
            g_in = invstd * (g - mean(g, dims, True) - xhat * mean(g * xhat, dims, True))
        else:
            g_in = g * invstd
    if n[1]:
        g_w = sum_(grad * xhat, dims)
    if n[2]:
        g_b = sum_(grad, dims)
    # torch's double backward takes the input and weight for every gradient
    return tuple(tie(g, ctx.input, w) for g in (g_in, g_w, g_b))


@jvp()
def _(ctx, input_t, weight_t, bias_t):
    w = ctx.weight
    nd = ctx.input.data.ndim
    dims, invstd, xhat = _batch_norm_terms(ctx)
    out = None
    if input_t is not None:
        if ctx.training:
            xhat_t = invstd * (input_t - mean(input_t, dims, True) - xhat * mean(xhat * input_t, dims, True))
        else:
            xhat_t = input_t * invstd
        out = xhat_t * _channel_view(w, nd) if w is not None else xhat_t
    w_t = None if weight_t is None else mul_t(_channel_view(weight_t, nd), xhat)
    b_t = None if bias_t is None else _channel_view(bias_t, nd)
    return add_t(add_t(out, w_t), b_t)


# ----- group_norm ---------------------------------------------------------------------------------------


@op("group_norm", shape="same(input)", functions=("group_norm",), tensors=("input", "weight", "bias"), method=False,
    family="nn")
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-05):
    """F.group_norm(input, num_groups, weight=None, bias=None, eps=1e-05): each sample's channels in
    num_groups groups, normalized over the group (biased variance), then a per-channel affine map."""
    input = require_tensor(input, "input", "group_norm")
    x = input.data
    if x.ndim < 2:
        raise TorchRuntimeError(f"Expected at least 2 dimensions for input tensor but received {x.ndim}",
                                code="shape_mismatch")
    n, c = x.shape[0], x.shape[1]
    shape_s = "[" + ", ".join(str(s) for s in x.shape) + "]"
    if num_groups <= 0 or c % num_groups:
        raise TorchRuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input "
                                f"of shape {shape_s} and num_groups={num_groups}", code="shape_mismatch")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            t = require_tensor(t, name, "group_norm")
            if t.data.ndim != 1 or t.data.size != c:
                ts = "[" + ", ".join(str(s) for s in t.shape) + "]"
                raise TorchRuntimeError(f"Expected {name} to be a vector of size equal to the number of channels in "
                                        f"input, but got {name} of shape {ts} and input of shape {shape_s}",
                                        code="shape_mismatch")
    if x.dtype.kind not in "fV":
        raise TorchRuntimeError(f"\"GroupNormKernelImpl\" not implemented for '{D.SCALAR_TYPE_NAMES[input.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    _check_mixed_type(input, [weight, bias])
    g = x.reshape(n, num_groups, (c // num_groups) * int(np.prod(x.shape[2:], dtype=np.int64)))
    t = x.dtype.type
    mu = g.mean(axis=2, keepdims=True)
    var = ((g - mu) ** 2).mean(axis=2, keepdims=True)
    rstd = (t(1) / np.sqrt(var + t(eps))).astype(x.dtype)
    out = ((g - mu) * rstd).reshape(x.shape)
    bshape = (1, c) + (1,) * (x.ndim - 2)
    if weight is not None:
        out = out * weight.data.reshape(bshape)
    if bias is not None:
        out = out + bias.data.reshape(bshape)
    hxw = int(np.prod(x.shape[2:])) if x.ndim > 2 else 1
    return record(P.NativeGroupNormBackward0, np.asarray(out, x.dtype), (input, weight, bias),
                  {"C": c, "HxW": hxw, "N": n, "eps": eps, "group": num_groups, "input": input,
                   "result1": Tensor(mu.reshape(n, num_groups).astype(x.dtype)),
                   "result2": Tensor(rstd.reshape(n, num_groups)), "weight": weight})


def _group_norm_terms(ctx) -> tuple:
    """The grouped view's shape, its 1/std and x-hat (grouped: (N, G, C/G * HxW)), in engine ops."""
    x = ctx.input
    grouped = (ctx.N, ctx.group, (ctx.C // ctx.group) * ctx.HxW)
    xg = reshape(x, grouped)
    xc = xg - mean(xg, [2], True)
    rstd = rsqrt(mean(xc * xc, [2], True) + ctx.eps)
    return grouped, rstd, xc * rstd


@vjp("NativeGroupNormBackward0", inputs=("input", "weight", "bias"),
     saves=("C", "HxW", "N", "eps", "group", "input", "result1", "result2", "weight"))
def _(ctx, grad):
    n = ctx.needs
    w = ctx.weight
    shape = ctx.input.data.shape
    nd = len(shape)
    grouped, rstd, xhat = _group_norm_terms(ctx)
    xhat_full = reshape(xhat, shape)
    g_in = g_w = g_b = None
    dims = [0, *range(2, nd)]
    if n[0]:
        g = grad * _channel_view(w, nd) if w is not None else grad
        gg = reshape(g, grouped)
        g_in = reshape(rstd * (gg - mean(gg, [2], True) - xhat * mean(gg * xhat, [2], True)), shape)
    if n[1]:
        g_w = sum_(grad * xhat_full, dims)
    if n[2]:
        g_b = sum_(grad, dims)
    return tuple(tie(g, ctx.input, w) for g in (g_in, g_w, g_b))


@jvp()
def _(ctx, input_t, weight_t, bias_t):
    w = ctx.weight
    shape = ctx.input.data.shape
    nd = len(shape)
    grouped, rstd, xhat = _group_norm_terms(ctx)
    out = None
    if input_t is not None:
        it = reshape(input_t, grouped)
        xhat_t = reshape(rstd * (it - mean(it, [2], True) - xhat * mean(xhat * it, [2], True)), shape)
        out = xhat_t * _channel_view(w, nd) if w is not None else xhat_t
    w_t = None if weight_t is None else mul_t(_channel_view(weight_t, nd), reshape(xhat, shape))
    b_t = None if bias_t is None else _channel_view(bias_t, nd)
    return add_t(add_t(out, w_t), b_t)
