"""Neural-network functions (``torch.nn.functional``): softmax, log_softmax, linear, the losses and dropout.

Primitives follow torch's derivatives.yaml (SoftmaxBackward0 saves its result, MseLossBackward0 saves
self and target and the reduction as an int: 0 none, 1 mean, 2 sum). Composite functions are written
with the ops torch's C++ composes them from, so their graphs show the same last primitive:
cross_entropy is NllLossBackward0 over LogSoftmaxBackward0, l1_loss is MeanBackward0 over
AbsBackward0, linear is AddmmBackward0 / MmBackward0, training-mode dropout is MulBackward0.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes as D
from ..batching import batching, shifted
from ..errors import (
    InvalidArgumentError,
    ShapeError,
    TorchIndexError,
    TorchRuntimeError,
    TorchValueError,
    dim_out_of_range,
)
from ..generator import resolve
from ..grad_mode import _grad_enabled, emit_warning
from ..kernel import kcall
from ..registry import F, P, broken_check, jvp, op, record, vjp, weighted_tangent
from ..tensor import Tensor
from .backward import log_softmax_backward_data, softmax_backward_data
from .common import binary_operands, broadcast_shapes, check_no_requires_grad, require_tensor, row_major, tie, wrap_dim
from .elementwise import abs as abs_
from .elementwise import (
    add,
    clamp_min,
    div_number,
    eq,
    exp,
    ge,
    le,
    log,
    logsigmoid,
    masked_fill,
    mul,
    neg,
    sigmoid,
    where,
)
from .linalg import addmm, matmul
from .random import uniform_double
from .reduction import mean, sum
from .shape import expand, reshape, t, to, unsqueeze, view

_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
_MAX = np.maximum.reduce
_SUM = np.add.reduce
_UINT64 = 1 << 64


def _reduction(reduction) -> int:
    """torch's _Reduction.get_enum."""
    try:
        return _REDUCTIONS[reduction]
    except (KeyError, TypeError):
        raise TorchValueError(f"{reduction} is not a valid value for reduction", code="invalid_argument") from None


def _size(shape) -> str:
    return "torch.Size([" + ", ".join(str(s) for s in shape) + "])"


def _reduce_np(loss: np.ndarray, red: int) -> np.ndarray:
    if red == 0:
        return loss
    if red == 1:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(np.mean(loss) if loss.size else np.nan, loss.dtype)
    return np.asarray(np.sum(loss), loss.dtype)


def _norm(red: int, numel: int) -> float:
    """The 1/numel factor of a mean-reduced loss's gradient (1 otherwise)."""
    return 1.0 / numel if red == 1 else 1.0


# ----- softmax ----------------------------------------------------------------------------------------


def _softmax_input(self, dim, dtype, name: str):
    self = require_tensor(self, "input", name)
    d = wrap_dim(dim, self.data.ndim)
    if dtype is not None:
        self = to(self, D.canonical(dtype))
    if self.data.dtype.kind not in "fV":
        last = d == max(self.data.ndim - 1, 0)
        kernel = f"{name}_lastdim_kernel_impl" if last else f"{name}_kernel_impl"
        raise TorchRuntimeError(f"\"{kernel}\" not implemented for '{D.SCALAR_TYPE_NAMES[self.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    x = self.data if self.data.ndim else self.data.reshape(1)
    return self, d, x


@op("softmax", shape="same(self)", functions=("softmax",), promotion="same", checks=(  # (dtype= casts first)
    "dtype_lastdim(self,dim)=floating unless dtype | NotImplementedError: \"softmax_lastdim_kernel_impl\" not "
    "implemented for '{dtype}'",
    "dtype_innerdim(self,dim)=floating unless dtype | NotImplementedError: \"softmax_kernel_impl\" not implemented "
    "for '{dtype}'"),
    python_attribute=("softmax", ("self",)), exports=("torch.nn.functional.softmax", "torch.special.softmax"),
    tensors=("self",), plannable=True)
def softmax(self, dim, dtype=None):
    """F.softmax(input, dim, dtype=None): numerically stable; saves its result and dim. ``dtype`` casts the
    input first (ToCopyBackward0), as torch does."""
    self, d, x = _softmax_input(self, dim, dtype, "softmax")
    return record(P.SoftmaxBackward0, kcall(_softmax_kernel, x, d, self.shape), (self,),
                  {"dim": d, "result": "result"})


def _softmax_family_vjp(backward_data):
    """softmax's and log_softmax's VJP: torch's ``*_backward_data`` of the saved output; of a 0-d output a zero,
    which torch's backward computes from the output too (under create_graph it is tied to it)."""
    def vjp_(ctx, grad):
        r = ctx.result
        if r.data.ndim == 0:
            return tie(grad * 0.0, r),
        return backward_data(grad, r, ctx.dim),
    return vjp_


vjp("SoftmaxBackward0", inputs=("self",), saves=("dim", "result"))(_softmax_family_vjp(softmax_backward_data))


@jvp()
def _(ctx, self_t):
    r = ctx.result
    if r.data.ndim == 0:
        return None
    return r * (self_t - sum(r * self_t, ctx.dim, keepdim=True))


batching(P.SoftmaxBackward0, **shifted(sizes=(), dims=("dim",)))


def _softmax_kernel(x, d, shape):
    with np.errstate(invalid="ignore", over="ignore"):
        # the ufuncs' reduce directly: np.max/np.sum add a Python dispatch layer per call
        e = np.exp(x - _MAX(x, axis=d, keepdims=True)) if x.size else x.copy()
        s = _SUM(e, axis=d, keepdims=True)
        # torch's last-dim kernel multiplies by the reciprocal of the sum, the strided one divides
        out = e * (x.dtype.type(1) / s) if d == x.ndim - 1 else e / s
    return row_major(out.reshape(shape).astype(x.dtype, copy=False))  # (torch's: contiguous, whatever x's)


def _log_softmax_kernel(x, d, shape):
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if x.size:
            shifted = x - _MAX(x, axis=d, keepdims=True)
            out = shifted - np.log(_SUM(np.exp(shifted), axis=d, keepdims=True))
        else:
            out = x.copy()
    return row_major(out.reshape(shape).astype(x.dtype, copy=False))


@op("log_softmax", shape="same(self)", functions=("log_softmax",), promotion="same", checks=(
    "dtype_lastdim(self,dim)=floating unless dtype | NotImplementedError: \"log_softmax_lastdim_kernel_impl\" not "
    "implemented for '{dtype}'",
    "dtype_innerdim(self,dim)=floating unless dtype | NotImplementedError: \"log_softmax_kernel_impl\" not "
    "implemented for '{dtype}'"),
    python_attribute=("log_softmax", ("self",)),
    exports=("torch.nn.functional.log_softmax", "torch.special.log_softmax"),
    tensors=("self",), plannable=True)
def log_softmax(self, dim, dtype=None):
    """F.log_softmax(input, dim, dtype=None): x - max - log(sum(exp(x - max))); saves its result and dim."""
    self, d, x = _softmax_input(self, dim, dtype, "log_softmax")
    out = kcall(_log_softmax_kernel, x, d, self.shape)
    return record(P.LogSoftmaxBackward0, out, (self,),
                  {"dim": d, "result": "result"})


vjp("LogSoftmaxBackward0", inputs=("self",), saves=("dim", "result"))(
    _softmax_family_vjp(log_softmax_backward_data))


@jvp()
def _(ctx, self_t):
    r = ctx.result
    if r.data.ndim == 0:
        return None
    return self_t - sum(exp(r) * self_t, ctx.dim, keepdim=True)


batching(P.LogSoftmaxBackward0, **shifted(sizes=(), dims=("dim",)))


# ----- linear -----------------------------------------------------------------------------------------


@op("linear", shape="linear(input,weight)",
    checks=("min_ranks(input,weight)=1 | RuntimeError: both arguments to linear need to be at least 1D, but they are "
            "{a}D and {b}D",
            "max_dims(weight)=2 | RuntimeError: t() expects a tensor with <= 2 dimensions, but self is {dims}D",
            "same_dtype(bias,weight) | RuntimeError: self and mat2 must have the same dtype, but got {a} and {b}",
            "same_dtype(input,weight) if bias | RuntimeError: mat1 and mat2 must have the same dtype, but got {a} and "
            "{b}",
            "linear_shapes(input,weight) | RuntimeError: mat1 and mat2 shapes cannot be multiplied ({rows}x{k} and "
            "{wk}x{out})",
            "linear_shapes(input,weight)=batched | RuntimeError: Expected size for first two dimensions of batch2 "
            "tensor to be: [{batch}, {k}] but got: [{batch}, {got}].",
            "matmul_dtype(input,weight)=linear | RuntimeError: expected m1 and m2 to have the same dtype, but got: "
            "{a} != {b}",
            # (a 1-d weight: input @ weight, a dot or an mv)
            "matmul_dtype(input,weight)=dot | RuntimeError: dot : expected both vectors to have same dtype, but found "
            "{a} and {b}",
            "matmul_dtype(input,weight)=mv | RuntimeError: addmv input tensors must have the same dtype, but got {b}, "
            "{a}, and {b}",
            # (an input of 3 or more dimensions that matmul does not fold: bmm's, whose kernel is chosen first)
            "bool_product(input,weight)=linear_batched | NotImplementedError: \"bmm\" not implemented for 'Bool'",
            "matmul_dtype(input,weight)=linear_batched | RuntimeError: expected scalar type {a} but found {b}",
            "bool_product(input,weight)=linear | NotImplementedError: \"addmm_impl_cpu_\" not implemented for 'Bool'",
            "bool_product(input,weight)=dot | NotImplementedError: \"dot\" not implemented for 'Bool'",
            "bool_product(input,weight)=mv | NotImplementedError: \"addmv_impl_cpu\" not implemented for 'Bool'"),
    exports=("torch.nn.functional.linear",), cost="other",
    tensors=("input", "weight", "bias"), method=False,
    grad_fns=(P.AddmmBackward0, P.ViewBackward0, P.MmBackward0, P.SqueezeBackward4, P.UnsafeViewBackward0,
              P.AddBackward0), plannable=True)
def linear(input, weight, bias=None):
    """F.linear(input, weight, bias=None) = input @ weight.t() + bias, composed as torch's at::linear:
    2-D input with bias -> addmm(bias, input, weight.t()); contiguous 1-D/3-D/N-D input with a 1-D bias ->
    addmm on the flattened input, then view; otherwise matmul (+ add)."""
    input = require_tensor(input, "input", "linear")
    weight = require_tensor(weight, "weight", "linear")
    if bias is not None:
        bias = require_tensor(bias, "bias", "linear")
    nd = input.data.ndim
    if nd == 0 or weight.data.ndim == 0:
        raise broken_check("linear", input=input, weight=weight, bias=bias)
    if nd == 2 and bias is not None:
        return addmm(bias, input, t(weight))
    if bias is not None and nd >= 1 and input.data.flags.c_contiguous and bias.data.flags.c_contiguous \
            and (nd == 3 or bias.data.ndim == 1):  # (torch's fused path takes a contiguous bias only)
        sizes = input.shape
        flat = 1
        for s in sizes[:-1]:
            flat *= s
        res = addmm(bias, reshape(input, (flat, sizes[-1])), t(weight))
        return view(res, tuple(sizes[:-1]) + (res.shape[1],))
    out = matmul(input, t(weight))
    if bias is not None:
        out = add(out, bias)
    return out


def _loss_jvp(ctx, self_t, target_t):
    """An elementwise loss then its reduction: the tangents weighted by the VJP's all-ones gradient (which
    carries the 1/numel of a mean), summed unless the reduction is 'none'."""
    w = weighted_tangent(ctx, self_t, target_t)
    return w if ctx.reduction == 0 or w is None else sum(w)


# ----- regression losses ------------------------------------------------------------------------------


def _loss_pair(input, target, name: str, warn: bool = True):
    """F.*_loss's broadcast_tensors step: a UserWarning when the sizes differ, then both expanded."""
    input = require_tensor(input, "input", name)
    target = require_tensor(target, "target", name)
    if input.shape != target.shape:
        if warn:
            emit_warning(f"Using a target size ({_size(target.shape)}) that is different to the input size "
                         f"({_size(input.shape)}). This will likely lead to incorrect results due to "
                         f"broadcasting. Please ensure they have the same size.")
        shape = broadcast_shapes(input.shape, target.shape)
        if input.shape != shape:
            input = expand(input, shape)
        if target.shape != shape:
            target = expand(target, shape)
    return input, target


def _mse_kernel(a, b, red):
    diff = a - b
    return _reduce_np(diff * diff, red)


@op("mse_loss", shape="loss(input,target,reduction)=pointwise",
    promotion='broadcast_type(input,target) | integral: NotImplementedError: "mse_cpu" not '
    "implemented for '{dtype}'",
    checks=("broadcasts(input,target) | RuntimeError: The size of tensor a ({a}) must match the size of tensor b "
            "({b}) at non-singleton dimension {dim}",),
    python_attribute=("size", ("target", "input")),
    tensors=("input", "target"), method=False, plannable=True)
def mse_loss(input, target, reduction="mean"):
    """F.mse_loss(input, target, reduction='mean'); saves self, target and the reduction enum."""
    red = _reduction(reduction)
    input, target = _loss_pair(input, target, "mse_loss")
    _, a, b = binary_operands(input, target)
    out = kcall(_mse_kernel, a, b, red)
    return record(P.MseLossBackward0, out, (input, target), {"reduction": red, "self": input, "target": target})


@vjp("MseLossBackward0", inputs=("self", "target"), saves=("reduction", "self", "target"),
     double_backward="MseLossBackwardBackward0")
def _(ctx, grad):
    n = ctx.needs
    s, tg = ctx.self, ctx.target
    norm = 2.0 * _norm(ctx.reduction, s.numel())
    return ((norm * (s - tg)) * grad if n[0] else None), ((norm * (tg - s)) * grad if n[1] else None)


jvp(P.MseLossBackward0)(_loss_jvp)


def _apply_reduction(loss: Tensor, red: int) -> Tensor:
    """torch's apply_loss_reduction for composite losses."""
    if red == 1:
        return mean(loss)
    if red == 2:
        return sum(loss)
    return loss


@op("l1_loss", shape="loss(input,target,reduction)=pointwise",
    python_attribute=("size", ("target", "input")),
    tensors=("input", "target"), grad_fns=(P.MeanBackward0, P.SumBackward0, P.AbsBackward0),
    method=False)
def l1_loss(input, target, reduction="mean"):
    """F.l1_loss(input, target, reduction='mean'): composite (input - target).abs() then the reduction."""
    red = _reduction(reduction)
    input, target = _loss_pair(input, target, "l1_loss")
    return _apply_reduction(abs_(input - target), red)


_KL_DIV_MEAN = ("reduction: 'mean' divides the total loss by both the batch size and the support size.'batchmean' "
                "divides only by the batch size, and aligns with the KL div math definition.'mean' will be changed "
                "to behave the same as 'batchmean' in the next major release.")


@op("kl_div", shape="loss(input,target,reduction)=pointwise", functions=("kl_div",),
    tensors=("input", "target"),
    grad_fns=(P.MeanBackward0, P.DivBackward0, P.SumBackward0, P.SubBackward0, P.MulBackward0), method=False)
def kl_div(input, target, reduction="mean", log_target=False):
    """F.kl_div(input, target, reduction='mean', log_target=False): torch's composite, ``xlogy(target, target) -
    target * input`` (``exp(target) * (target - input)`` for a log target) then the reduction; 'batchmean' divides
    the sum by the batch size, and 'mean' warns as torch's F.kl_div does."""
    input = require_tensor(input, "input", "kl_div")
    target = require_tensor(target, "target", "kl_div")
    if reduction == "mean":
        emit_warning(_KL_DIV_MEAN)
    red = _reduction("sum" if reduction == "batchmean" else reduction)
    if input.data.dtype.kind in "biu" or target.data.dtype.kind in "biu":
        raise TorchRuntimeError("kl_div: Integral inputs not supported.", code="invalid_dtype")
    if log_target:
        loss = F.exp(target) * (target - input)
    else:
        loss = F.xlogy(target, target) - target * input
    loss = _apply_reduction(loss, red)
    if reduction == "batchmean" and input.data.ndim != 0:
        loss = loss / input.data.shape[0]
    return loss


def _piecewise_forward(input, target, threshold: float, small, large):
    _, a, b = binary_operands(input, target)
    z = np.abs(a - b)
    tp = z.dtype.type
    return np.where(z < tp(threshold), small(z, tp), large(z, tp)).astype(z.dtype, copy=False)


@op("smooth_l1_loss", shape="loss(input,target,reduction)=pointwise",
    python_attribute=("size", ("target", "input")),
    tensors=("input", "target"), method=False)
def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """F.smooth_l1_loss(input, target, reduction='mean', beta=1.0); beta == 0 is l1_loss, as in torch."""
    red = _reduction(reduction)
    if beta == 0.0:
        input, target = _loss_pair(input, target, "smooth_l1_loss")
        return _apply_reduction(abs_(input - target), red)
    if beta < 0:
        raise TorchRuntimeError("smooth_l1_loss does not support negative values for beta.",
                                code="invalid_argument")
    input, target = _loss_pair(input, target, "smooth_l1_loss")
    loss = _piecewise_forward(input, target, beta, lambda z, tp: tp(0.5) * z * z / tp(beta),
                              lambda z, tp: z - tp(0.5) * tp(beta))
    return record(P.SmoothL1LossBackward0, _reduce_np(loss, red), (input, target),
                  {"beta": float(beta), "reduction": red, "self": input, "target": target})


def _piecewise_backward(x: Tensor, grad: Tensor, norm: float, threshold: float, outer_scale, inner):
    """-norm*grad*scale below -threshold, norm*grad*scale above threshold, inner(norm * x * grad) between."""
    g = grad * norm
    out = g * outer_scale if outer_scale != 1 else g
    return where(le(x, -threshold), -out, where(ge(x, threshold), out, inner(x * norm * grad)))


@vjp("SmoothL1LossBackward0", inputs=("self", "target"), saves=("beta", "reduction", "self", "target"),
     double_backward="SmoothL1LossBackwardBackward0")
def _(ctx, grad):
    n = ctx.needs
    beta = ctx.beta
    x = ctx.self - ctx.target
    g = _piecewise_backward(x, grad, _norm(ctx.reduction, x.numel()), beta, 1, lambda v: v / beta)
    return (g if n[0] else None), (-g if n[1] else None)


jvp(P.SmoothL1LossBackward0)(_loss_jvp)


@op("huber_loss", shape="loss(input,target,reduction)=pointwise",
    python_attribute=("size", ("target", "input")),
    tensors=("input", "target"), method=False)
def huber_loss(input, target, reduction="mean", delta=1.0):
    """F.huber_loss(input, target, reduction='mean', delta=1.0)."""
    red = _reduction(reduction)
    if delta <= 0:
        raise TorchRuntimeError("huber_loss does not support non-positive values for delta.",
                                code="invalid_argument")
    input, target = _loss_pair(input, target, "huber_loss")
    loss = _piecewise_forward(input, target, delta, lambda z, tp: tp(0.5) * z * z,
                              lambda z, tp: tp(delta) * (z - tp(0.5) * tp(delta)))
    if input.data.dtype.kind in "fV":  # torch's kernel writes into a loss like the input (no promotion)
        loss = loss.astype(input.data.dtype, copy=False)
    return record(P.HuberLossBackward0, _reduce_np(loss, red), (input, target),
                  {"delta": float(delta), "reduction": red, "self": input, "target": target})


@vjp("HuberLossBackward0", inputs=("self", "target"), saves=("delta", "reduction", "self", "target"),
     double_backward="HuberLossBackwardBackward0")
def _(ctx, grad):
    n = ctx.needs
    delta = ctx.delta
    if ctx.target.dtype != ctx.self.dtype and (n[0] or n[1]):
        # huber_loss_backward(grad, x, y) wants y in x's dtype; torch runs it as (grad, self, target) for self's
        # gradient and as (grad, target, self) for target's, the first needed one failing
        want, got = (ctx.self, ctx.target) if n[0] else (ctx.target, ctx.self)
        raise TorchRuntimeError(f"Found dtype {D.SCALAR_TYPE_NAMES[got.dtype]} but expected "
                                f"{D.SCALAR_TYPE_NAMES[want.dtype]}", code="dtype_mismatch")
    x = ctx.self - ctx.target
    g = _piecewise_backward(x, grad, _norm(ctx.reduction, x.numel()), delta, delta, lambda v: v)
    return (g if n[0] else None), (-g if n[1] else None)


jvp(P.HuberLossBackward0)(_loss_jvp)


# ----- binary cross entropy ---------------------------------------------------------------------------

_BCE_EPS = 1e-12


@op("binary_cross_entropy", shape="loss(input,target,reduction)=pointwise", checks=(
    "same_size(input,target) | ValueError: Using a target size (torch.Size({b})) that is different to the input "
    "size (torch.Size({a})) is deprecated. Please ensure they have the same size.",
    # (a weight's broadcasting and requires_grad come first)
    "same_dtype(target,input) unless weight | RuntimeError: Found dtype {a} but expected {b}",
    'dtype(input)=floating unless weight | NotImplementedError: "binary_cross_entropy" not implemented for '
    "'{dtype}'"),
    python_attribute=("size", ("target", "input")),
    tensors=("input", "target", "weight"), method=False)
def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    """F.binary_cross_entropy(input, target, weight=None, reduction='mean'); logs are clamped at -100."""
    input = require_tensor(input, "input", "binary_cross_entropy")
    target = require_tensor(target, "target", "binary_cross_entropy")
    red = _reduction(reduction)
    if target.shape != input.shape:
        raise TorchValueError(f"Using a target size ({_size(target.shape)}) that is different to the input size "
                              f"({_size(input.shape)}) is deprecated. Please ensure they have the same size.",
                              code="shape_mismatch")
    if weight is not None:  # F.binary_cross_entropy expands weight before the ATen op's checks
        weight = require_tensor(weight, "weight", "binary_cross_entropy")
        new = broadcast_shapes(target.shape, weight.shape)
        if weight.shape != new:
            weight = expand(weight, new)
    check_no_requires_grad(weight, "weight", "binary_cross_entropy")
    if target.dtype != input.dtype:
        raise TorchRuntimeError(f"Found dtype {D.SCALAR_TYPE_NAMES[target.dtype]} but expected "
                                f"{D.SCALAR_TYPE_NAMES[input.dtype]}", code="invalid_dtype")
    _, x, y = binary_operands(input, target)
    if x.dtype.kind not in "fV":
        raise TorchRuntimeError(f"\"binary_cross_entropy\" not implemented for '{D.SCALAR_TYPE_NAMES[input.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    bad_x, bad_y = ~((x >= 0) & (x <= 1)), ~((y >= 0) & (y <= 1))
    if bad_x.any() or bad_y.any():  # torch's kernel checks input then target, element by element
        first = int(np.argmax((bad_x | bad_y).reshape(-1)))
        which = "input" if bad_x.reshape(-1)[first] else "target"
        raise TorchRuntimeError(f"all elements of {which} should be between 0 and 1", code="invalid_argument")
    tp = x.dtype.type
    with np.errstate(divide="ignore"):
        loss = (y - tp(1)) * np.maximum(np.log1p(-x), tp(-100)) - y * np.maximum(np.log(x), tp(-100))
    if weight is not None:
        loss = loss * weight.data.astype(x.dtype, copy=False)
    return record(P.BinaryCrossEntropyBackward0, _reduce_np(loss.astype(x.dtype, copy=False), red),
                  (input, target), {"reduction": red, "self": input, "target": target, "weight": weight})


@vjp("BinaryCrossEntropyBackward0", inputs=("self", "target"),
     saves={"reduction": (), "self": (), "target": (), "weight": ()},
     double_backward="BinaryCrossEntropyBackwardBackward0")
def _(ctx, grad):
    n = ctx.needs
    x, w, red = ctx.self, ctx.weight, ctx.reduction
    g_self = g_target = None
    if n[0]:
        g_self = grad * (x - ctx.target) / clamp_min((1 - x) * x, _BCE_EPS)
        if w is not None:
            g_self = g_self * w
        if red == 1:  # grad_input.div_(numel): a DivBackward1
            g_self = div_number(g_self, x.numel())
    if n[1]:
        g_target = neg(log(x / (1 - x))) * grad
        if w is not None:
            g_target = g_target * w
        if red == 1:
            g_target = div_number(g_target, x.numel())
    return g_self, g_target


jvp(P.BinaryCrossEntropyBackward0)(_loss_jvp)


@op("binary_cross_entropy_with_logits", shape="loss(input,target,reduction)=pointwise",
    functions=("binary_cross_entropy_with_logits",),
    python_attribute=("size", ("target", "input")),
    tensors=("input", "target", "weight", "pos_weight"),
    method=False)
def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction="mean"):
    """F.binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction='mean'):
    (1 - target) * input - log_sigmoid(input) * log_weight, with log_weight = (pos_weight - 1) * target + 1."""
    input = require_tensor(input, "input", "binary_cross_entropy_with_logits")
    target = require_tensor(target, "target", "binary_cross_entropy_with_logits")
    red = _reduction(reduction)
    if target.shape != input.shape:
        raise TorchValueError(f"Target size ({_size(target.shape)}) must be the same as input size "
                              f"({_size(input.shape)})", code="shape_mismatch")
    if weight is not None:
        weight = require_tensor(weight, "weight", "binary_cross_entropy_with_logits")
    if pos_weight is not None:
        pos_weight = require_tensor(pos_weight, "pos_weight", "binary_cross_entropy_with_logits")
    check_no_requires_grad(weight, "weight", "binary_cross_entropy_with_logits")
    check_no_requires_grad(pos_weight, "pos_weight", "binary_cross_entropy_with_logits")
    if input.data.dtype.kind not in "fV":  # torch's log_sigmoid kernel is float-only
        raise TorchRuntimeError(f"\"log_sigmoid_cpu\" not implemented for '{D.SCALAR_TYPE_NAMES[input.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    if weight is not None:
        broadcast_shapes(input.shape, weight.shape)
    if pos_weight is not None:
        broadcast_shapes(input.shape, pos_weight.shape)
    _, x, y = binary_operands(input, target)
    tp = x.dtype.type
    lsi = np.minimum(x, tp(0)) - np.log1p(np.exp(-np.abs(x)))
    if pos_weight is not None:
        lsi = lsi * ((pos_weight.data.astype(x.dtype) - tp(1)) * y + tp(1))
    loss = (tp(1) - y) * x - lsi
    if weight is not None:
        loss = loss * weight.data.astype(x.dtype)
    # torch computes (1 - target).mul_(input).sub_(...) in place: the loss has the target's (float) dtype
    out_dt = target.data.dtype if target.data.dtype.kind in "fV" else x.dtype
    loss = _reduce_np(np.asarray(loss, out_dt), red)
    return record(P.BinaryCrossEntropyWithLogitsBackward0, np.asarray(loss, out_dt), (input, target),
                  {"pos_weight": pos_weight, "reduction": red, "self": input, "target": target,
                   "weight": weight})


@vjp("BinaryCrossEntropyWithLogitsBackward0", inputs=("self", "target"),
     saves={"pos_weight": (), "reduction": (), "self": (), "target": (), "weight": ()})
def _(ctx, grad):
    n = ctx.needs
    x, pw, w, red = ctx.self, ctx.pos_weight, ctx.weight, ctx.reduction
    g_self = g_target = None
    if n[0]:
        tg = ctx.target
        if pw is not None:
            pt = pw * tg
            g_self = (pt + 1 - tg) * sigmoid(x) - pt
        else:
            g_self = sigmoid(x) - tg
        g_self = g_self * grad
        if w is not None:
            g_self = g_self * w
        if red == 1:
            g_self = div_number(g_self, x.numel())  # grad_input.div_(numel): a DivBackward1
    if n[1]:
        g_target = (logsigmoid(-x) - logsigmoid(x) * pw) if pw is not None else -x
        g_target = g_target * grad
        if w is not None:
            g_target = g_target * w
        if red == 1:
            g_target = div_number(g_target, x.numel())
    return g_self, g_target


jvp(P.BinaryCrossEntropyWithLogitsBackward0)(_loss_jvp)


# ----- nll_loss and cross_entropy ---------------------------------------------------------------------


def _dims_list(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _nll_check(input: Tensor, target: Tensor, weight: Tensor | None) -> None:
    nd = input.data.ndim
    if nd < 1:
        raise TorchValueError(f"Expected 1 or more dimensions (got {nd})", code="shape_mismatch")
    if nd != 1 and input.shape[0] != (target.shape[0] if target.data.ndim else 0):
        raise broken_check("nll_loss", input=input, target=target)
    check_no_requires_grad(weight, "weight", "nll_loss_forward")  # nll_loss_nd's checks came first
    if nd == 4:  # nll_loss2d
        if target.data.ndim != 3:
            raise ShapeError(f"only batches of spatial targets supported (3D tensors) but got targets of "
                             f"dimension: {target.data.ndim}")
        if target.shape[1:] != input.shape[2:]:
            raise ShapeError(f"size mismatch (got input: {_dims_list(input.shape)} , target: "
                             f"{_dims_list(target.shape)}")
    elif nd > 2:  # nll_loss_nd views (N, C, d1, ..., dk) as (N, C, 1, d1 * ... * dk)
        if target.shape[1:] != input.shape[2:]:
            raise ShapeError(f"Expected target size {_dims_list(input.shape[:1] + input.shape[2:])}, got "
                             f"{_dims_list(target.shape)}")
    elif target.data.ndim > 1:
        raise ShapeError("0D or 1D target tensor expected, multi-target not supported")
    if target.data.dtype != np.int64 and target.data.dtype != np.uint8:
        raise TorchRuntimeError(f"expected target dtype to be Long or Byte, but got "
                                f"{D.SCALAR_TYPE_NAMES[target.dtype]}", code="invalid_dtype")
    if nd == 1 and target.data.ndim == 1 and target.shape[0] != 1:
        raise broken_check("nll_loss", input=input, target=target)
    n_classes = input.shape[1] if nd > 1 else input.shape[0]
    if weight is not None and (weight.data.ndim != 1 or weight.numel() != n_classes):
        raise ShapeError(f"weight tensor should be defined either for all {n_classes} classes or no classes but "
                         f"got weight tensor of shape: {_dims_list(weight.shape)}")
    if input.data.dtype.kind not in "fV":
        raise TorchRuntimeError(f"\"nll_loss_out_frame\" not implemented for '{D.SCALAR_TYPE_NAMES[input.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    if weight is not None and weight.dtype != input.dtype:  # the kernel reads weight as the input's scalar type
        raise TorchRuntimeError(f"expected scalar type {D.SCALAR_TYPE_NAMES[input.dtype]} but found "
                                f"{D.SCALAR_TYPE_NAMES[weight.dtype]}", code="dtype_mismatch")


def _nll_weights(n_classes: int, target: np.ndarray, weight: np.ndarray | None, ignore_index: int, dtype):
    """Per-sample class weight (0 where the target is ignored), the clipped targets; bounds checked."""
    tg = target.reshape(-1)
    valid = tg != ignore_index
    bad = valid & ((tg < 0) | (tg >= n_classes))
    if bad.any():
        raise TorchIndexError(f"Target {int(tg[bad][0])} is out of bounds.", code="index_out_of_range")
    safe = np.where(valid, tg, 0)
    w = weight.astype(dtype, copy=False) if weight is not None else np.ones(n_classes, dtype)
    return np.where(valid, w[safe], dtype.type(0)).astype(dtype, copy=False), safe, valid


#: nll_loss's (and so cross_entropy's) checks of a class-index target's shape against its input's
TARGET_SHAPES = (
    "batch_sizes(input,target) | ValueError: Expected input batch_size ({a}) to match target batch_size ({b}).",
    "spatial_target(input,target)=size | RuntimeError: Expected target size {want}, got {got}",
    "spatial_target(input,target)=rank4 | RuntimeError: only batches of spatial targets supported (3D tensors) but "
    "got targets of dimension: {dims}",
    "spatial_target(input,target)=size4 | RuntimeError: size mismatch (got input: {input} , target: {target}",
)
#: nll_loss's (and so cross_entropy's) check of a 1-d input's target
CLASS_DIM_VECTOR = ("class_dim(input,target)=vector | ValueError: For 1D input, 1D target must have size 1, but got "
                    "target size: {size}")


@op("nll_loss", shape="loss(input,target,reduction)=class", checks=(
    *TARGET_SHAPES,
    "multi_target(input,target) | RuntimeError: 0D or 1D target tensor expected, multi-target not supported",
    "dtype(target)=int64,uint8 | RuntimeError: expected target dtype to be Long or Byte, but got {dtype}",
    CLASS_DIM_VECTOR,
    'dtype(input)=floating | NotImplementedError: "nll_loss_out_frame" not implemented for \'{dtype}\''),
    message_name="nll_loss_nd",
    tensors=("input", "target", "weight"), method=False, plannable=True)
def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    """F.nll_loss(input, target, weight=None, ignore_index=-100, reduction='mean') for (C,) or (N, C) input
    with class-index targets; saves self, target, total_weight (a 0-d tensor), weight, reduction and
    ignore_index (read back as torch shows it: -100 is 18446744073709551516)."""
    input = require_tensor(input, "input", "nll_loss")
    target = require_tensor(target, "target", "nll_loss")
    if weight is not None:
        weight = require_tensor(weight, "weight", "nll_loss")
    red = _reduction(reduction)
    _nll_check(input, target, weight)
    if input.data.ndim > 2:
        return _nll_loss_nd(input, target, weight, ignore_index, red)
    if weight is None:
        out, total = kcall(_nll_kernel, input.data, target.data, ignore_index, red)
    else:
        out, total = kcall(_nll_kernel, input.data, target.data, ignore_index, red, weight.data)
    return record(P.NllLossBackward0, out, (input,),
                  {"ignore_index": int(ignore_index) % _UINT64, "reduction": red, "self": input, "target": target,
                   "total_weight": Tensor(total), "weight": weight})


#: the most rows whose count a float dtype holds exactly (a sum of that many ones is exact in any order)
_EXACT_COUNT = {np.dtype(np.float32): 1 << 24, np.dtype(np.float64): 1 << 53}
_MIN = np.minimum.reduce
_MAXI = np.maximum.reduce


def _nll_all_valid(x, target, ignore_index, weight) -> bool:
    """Whether the common case holds: (N, C) input, no weight, every target a class index in range and none
    equal to ``ignore_index`` (then each row's weight is 1 and the total weight is N, exactly)."""
    if weight is not None or x.ndim != 2 or target.ndim != 1:
        return False
    n, c = x.shape
    if not 0 < n <= _EXACT_COUNT.get(x.dtype, 0) or 0 <= ignore_index < c:
        return False
    return bool(_MIN(target) >= 0) and bool(_MAXI(target) < c)


def _nll_kernel(x, target, ignore_index, red, weight=None):
    """(loss, total weight); the target bounds check is value-dependent, so it is here (a plan's guard)."""
    dt = x.dtype
    if red and _nll_all_valid(x, target, ignore_index, weight):
        # what the general steps give when every row counts with weight 1: the picked values themselves
        # (times 1), their sum subtracted from +0.0, over a total weight of N
        total = dt.type(target.size)
        s = dt.type(0) - _SUM(x[np.arange(target.size), target], dtype=dt)
        out = s / total if red == 1 else s
        return np.asarray(out, dt), np.asarray(total, dt)
    wt, safe, valid = _nll_weights(x.shape[-1], target, weight, ignore_index, dt)
    picked = x.reshape(-1, x.shape[-1])[np.arange(safe.size), safe]
    losses = np.where(valid, picked * wt, dt.type(0))  # ignored rows are skipped: a NaN there does not count
    if red == 0 and x.ndim == 2:
        out = np.where(valid, -losses, dt.type(0)).astype(dt)
        total = dt.type(0)
    else:
        total = np.sum(wt, dtype=dt)
        s = dt.type(0) - np.sum(losses, dtype=dt)  # torch accumulates from +0.0
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.asarray(s / total if red == 1 else s, dt)
    return np.asarray(out), np.asarray(total, dt)


def _nll_coef(x, target, ignore_index, weight=None):
    dt = x.dtype
    n = x.shape[-1]
    wt, safe, valid = _nll_weights(n, target, weight, ignore_index, dt)
    coef = np.zeros((safe.size, n), dt)
    coef[np.arange(safe.size), safe] = wt
    untouched = np.ones((safe.size, n), bool)
    untouched[np.arange(safe.size)[valid], safe[valid]] = False
    return coef.reshape(x.shape), untouched.reshape(x.shape)


def _nll_grad(x, target, ignore_index, g, weight=None):
    """nll_loss_backward as torch's kernel computes it: zeros, and at each counted row's target ``g`` (``weight[t]
    * g`` with a weight); ``g``: the scaled incoming gradient (0-d, or (N, 1) without reduction). The values of
    ``masked_fill(coef * g, untouched, 0)`` (the formula's ops, which run under create_graph) in one pass."""
    dt = x.dtype
    n = x.shape[-1]
    out = np.zeros((target.size, n), dt)
    if _nll_all_valid(x, target, ignore_index, weight):
        out[np.arange(target.size), target] = g.reshape(-1) if g.ndim else g
        return out.reshape(x.shape)
    wt, safe, valid = _nll_weights(n, target, weight, ignore_index, dt)
    gv = np.broadcast_to(g.reshape(-1) if g.ndim else g, safe.shape)
    vals = gv if weight is None else wt * gv
    out[np.arange(safe.size)[valid], safe[valid]] = vals[valid]
    return out.reshape(x.shape)


@vjp("NllLossBackward0", inputs=("self",),
     saves=("ignore_index", "reduction", "self", "target", "total_weight", "weight"),
     double_backward="NllLossBackwardBackward0")
def _(ctx, grad):
    x, red = ctx.self, ctx.reduction
    ii = ctx.ignore_index
    ii = ii - _UINT64 if ii >= _UINT64 // 2 else ii
    w = ctx.weight
    if red == 1:
        g = -(grad / ctx.total_weight)
    else:
        g = -grad
    if red == 0 and x.data.ndim == 2:
        g = unsqueeze(g, 1)
    if not _grad_enabled.get() and g._fw_grad is None and g.data.dtype == x.data.dtype:
        # nothing records the formula (no create_graph): torch's kernel, one pass
        args = (x.data, ctx.target.data, ii, g.data) if w is None else (x.data, ctx.target.data, ii, g.data, w.data)
        return Tensor(kcall(_nll_grad, *args)),
    if w is None:
        coef, untouched = kcall(_nll_coef, x.data, ctx.target.data, ii)
    else:
        coef, untouched = kcall(_nll_coef, x.data, ctx.target.data, ii, w.data)
    coef = Tensor(coef)
    # torch writes only the (row, target) entries of valid rows: the rest stay +0 (even when all rows are
    # ignored and grad / total_weight is nan)
    return masked_fill(coef * g, Tensor(untouched), 0),


@jvp()
def _(ctx, self_t):
    w = weighted_tangent(ctx, self_t)
    return sum(w, 1) if ctx.reduction == 0 and self_t.data.ndim == 2 else sum(w)


def _nll_loss_nd(input: Tensor, target: Tensor, weight, ignore_index, red: int) -> Tensor:
    """torch's nll_loss_nd for (N, C, d1, ..., dk) input: nll_loss2d of a 4-d input as it is, of any other
    as its (N, C, 1, d1 * ... * dk) view (ViewBackward0), the unreduced loss viewed back to (N, d1, ..., dk)."""
    nd = input.data.ndim
    n, c = input.shape[:2]
    out_shape = [n, *input.shape[2:]]
    if nd != 4:
        empty = not input.data.size
        input = view(input, [n, c, 0, 0] if empty else [n, c, 1, -1])
        target = Tensor(target.data.reshape((n, 0, 0) if empty else (n, 1, -1)))
    w = None if weight is None else weight.data
    out, total = kcall(_nll2d_kernel, input.data, target.data, ignore_index, red, w)
    out = record(P.NllLoss2DBackward0, out, (input,),
                 {"ignore_index": int(ignore_index) % _UINT64, "reduction": red, "self": input, "target": target,
                  "total_weight": Tensor(total), "weight": weight})
    return view(out, out_shape) if red == 0 and nd != 4 else out


def _rows(x: np.ndarray, target: np.ndarray):
    """(N, C, H, W) input and (N, H, W) target as nll_loss's (rows, C) and (rows,)."""
    return np.moveaxis(x, 1, -1).reshape(-1, x.shape[1]), target.reshape(-1)


def _nll2d_kernel(x, target, ignore_index, red, weight=None):
    xr, tr = _rows(x, target)
    out, total = _nll_kernel(xr, tr, ignore_index, red, weight)
    return (out.reshape(target.shape) if red == 0 else out), total


def _nll2d_coef(x, target, ignore_index, weight=None):
    coef, untouched = _nll_coef(*_rows(x, target), ignore_index, weight)
    shape = (x.shape[0], *x.shape[2:], x.shape[1])
    # (contiguous, as torch's nll_loss2d_backward writes its gradient: a view of it is ViewBackward0)
    return (np.ascontiguousarray(np.moveaxis(coef.reshape(shape), -1, 1)),
            np.ascontiguousarray(np.moveaxis(untouched.reshape(shape), -1, 1)))


@vjp("NllLoss2DBackward0", inputs=("self",),
     saves=("ignore_index", "reduction", "self", "target", "total_weight", "weight"),
     double_backward="NllLoss2DBackwardBackward0")
def _(ctx, grad):
    x, red = ctx.self, ctx.reduction
    ii = ctx.ignore_index
    ii = ii - _UINT64 if ii >= _UINT64 // 2 else ii
    g = -(grad / ctx.total_weight) if red == 1 else -grad
    if red == 0:
        g = unsqueeze(g, 1)
    w = ctx.weight
    coef, untouched = kcall(_nll2d_coef, x.data, ctx.target.data, ii, None if w is None else w.data)
    return masked_fill(Tensor(coef) * g, Tensor(untouched), 0),


@jvp()
def _(ctx, self_t):
    w = weighted_tangent(ctx, self_t)
    return sum(w, 1) if ctx.reduction == 0 else sum(w)


@op("cross_entropy", shape="loss(input,target,reduction)=class", checks=(
    "probability_target(input,target) | RuntimeError: Expected floating point type for target with class "
    "probabilities, got {dtype}",
    "probability_ignore(input,target,ignore_index) | RuntimeError: ignore_index is not supported for floating point "
    "target",
    "class_dim(input,target)=probabilities | IndexError: Dimension specified as 1 but tensor has no "
    "dimensions",
    "class_dim(input,target)=scalar | IndexError: Dimension out of range (expected to be in range of [-1, 0], but got "
    "1)",
    # (log_softmax over the class dimension: 0 of a (C,) input, 1 of (N, C, ...), the last of two)
    'dtype_lastdim(input,0)=floating | NotImplementedError: "log_softmax_lastdim_kernel_impl" not implemented for '
    "'{dtype}'",
    'dtype_lastdim(input,1)=floating | NotImplementedError: "log_softmax_lastdim_kernel_impl" not implemented for '
    "'{dtype}'",
    'dtype_innerdim(input,1)=floating | NotImplementedError: "log_softmax_kernel_impl" not implemented for \'{dtype}\'',
    *TARGET_SHAPES,
    "multi_target(input,target)=probabilities | RuntimeError: 0D or 1D target tensor expected, multi-target not "
    "supported",
    "class_target(input,target) | RuntimeError: expected target dtype to be Long or Byte, but got {dtype}",
    CLASS_DIM_VECTOR),
    message_name="cross_entropy_loss",
    tensors=("input", "target", "weight"), method=False,
    grad_fns=(P.NllLossBackward0, P.DivBackward1, P.SumBackward0, P.NegBackward0, P.SumBackward1, P.AddBackward0),
    plannable=True)
def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """F.cross_entropy(input, target, weight=None, ignore_index=-100, reduction='mean', label_smoothing=0.0):
    class indices -> nll_loss(log_softmax(input, class_dim)); a target of the input's shape is class
    probabilities (-(log_softmax * target).sum() / batch); label smoothing as torch composes it."""
    input = require_tensor(input, "input", "cross_entropy")
    target = require_tensor(target, "target", "cross_entropy")
    if weight is not None:
        weight = require_tensor(weight, "weight", "cross_entropy")
    red = _reduction(reduction)
    if not isinstance(label_smoothing, (int, float)) or isinstance(label_smoothing, bool):
        raise InvalidArgumentError("cross_entropy(): label_smoothing must be a float")
    class_dim = 0 if input.data.ndim == 1 else 1
    if input.shape == target.shape:
        if target.data.dtype.kind not in "fV":
            raise broken_check("cross_entropy", input=input, target=target)
        if ignore_index >= 0 or input.data.ndim == 0:  # (a 0-d input: its class dimension, 1, is not there)
            raise broken_check("cross_entropy", input=input, target=target, ignore_index=ignore_index)
        return _cross_entropy_probs(input, target, weight, red, label_smoothing, class_dim)
    if input.data.ndim < 1:  # torch takes the class dim 1 of a 0-d input
        raise dim_out_of_range(1, 0)
    if input.data.dtype.kind not in "fV":  # torch's log_softmax runs first
        raise broken_check("cross_entropy", input=input, target=target)
    if label_smoothing > 0.0:
        if label_smoothing > 1.0:
            raise TorchRuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}",
                                    code="invalid_argument")
        return _cross_entropy_smoothing(input, target, weight, red, ignore_index, label_smoothing, class_dim)
    _nll_check(input, target, weight)
    return nll_loss(log_softmax(input, class_dim), target, weight, ignore_index, reduction)


def _weight_view(weight: Tensor, ndim: int, class_dim: int) -> Tensor:
    if ndim <= 1:
        return weight
    shape = [1] * ndim
    shape[class_dim] = weight.shape[0]
    return view(weight, tuple(shape))


def _cross_entropy_probs(input, target, weight, red, label_smoothing, class_dim):
    n_classes = input.shape[class_dim]
    if weight is not None and (weight.data.ndim != 1 or weight.numel() != n_classes):
        raise ShapeError(f"cross_entropy: weight tensor should be defined either for all {n_classes} classes or "
                         f"no classes but got weight tensor of shape: {_dims_list(weight.shape)}")
    logp = log_softmax(input, class_dim)
    if label_smoothing > 0.0:
        if label_smoothing > 1.0:
            raise TorchRuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}",
                                    code="invalid_argument")
        target = target * (1 - label_smoothing) + (label_smoothing / n_classes)
    prod = logp * target
    if weight is not None:
        prod = prod * _weight_view(weight, logp.data.ndim, class_dim)
    if red == 0:
        return neg(sum(prod, class_dim))
    total = neg(sum(prod))
    if red == 2:
        return total
    if input.numel() == 0:
        return div_number(total, math.nan)
    return div_number(total, input.numel() // n_classes)


def _cross_entropy_smoothing(input, target, weight, red, ignore_index, label_smoothing, class_dim):
    n_classes = input.shape[class_dim]
    _nll_check(input, target, weight)
    logp = log_softmax(input, class_dim)
    nll = nll_loss(logp, target, weight, ignore_index, ("none", "mean", "sum")[red])
    ignore_mask = eq(target, ignore_index)
    if weight is not None:
        smooth = neg(sum(logp * _weight_view(weight, logp.data.ndim, class_dim), class_dim))
    else:
        smooth = neg(sum(logp, class_dim))
    smooth = masked_fill(smooth, ignore_mask, 0.0)
    if red == 1:
        if weight is not None:
            kept = target.data[~ignore_mask.data].reshape(-1)
            denom = Tensor(np.asarray(np.sum(weight.data[kept]), weight.data.dtype))
        else:
            denom = sum(Tensor(~ignore_mask.data))
        ret = sum(smooth) / denom
    elif red == 2:
        ret = sum(smooth)
    else:
        ret = smooth
    return mul(nll, 1 - label_smoothing) + mul(ret, label_smoothing / n_classes)


# ----- dropout ----------------------------------------------------------------------------------------


@op("dropout", shape="same(input)", functions=("dropout",),
    exports=("torch.nn.functional.dropout",), changes_argument=(("input", "inplace"),),
    tensors=("input",), grad_fns=(P.MulBackward0,), method=False)
def dropout(input, p=0.5, training=True, inplace=False):
    """F.dropout(input, p=0.5, training=True, inplace=False): input * mask, torch's mask bit for bit
    (``bernoulli_(1 - p)`` from the running program's generator, divided by 1 - p), ``input.mul_(mask)`` with
    ``inplace``; p == 0, training=False or an empty input return the input object itself, p == 1 multiplies by
    a 0-d zero."""
    input = require_tensor(input, "input", "dropout")
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise InvalidArgumentError(f"dropout(): argument 'p' must be float, not {type(p).__name__}")
    if p < 0.0 or p > 1.0:
        raise TorchValueError(f"dropout probability has to be between 0 and 1, but got {p}",
                              code="invalid_argument")
    if math.isnan(p):  # passes F.dropout's Python range check; ATen's own check refuses it
        raise TorchRuntimeError("dropout probability has to be between 0 and 1, but got nan",
                                code="invalid_argument")
    if p == 0 or not training or input.numel() == 0:
        return input
    dt = input.data.dtype
    if dt.kind not in "fV":
        raise TorchRuntimeError(f"result type Float can't be cast to the desired output type "
                                f"{D.SCALAR_TYPE_NAMES[input.dtype]}", code="invalid_dtype")
    times = mul
    if inplace:
        from .inplace import mul_ as times
    if p == 1:
        return times(input, Tensor(np.zeros((), dt)))
    keep = uniform_double(resolve(None, "dropout"), input.numel()).reshape(input.shape) < (1.0 - p)
    # torch divides the mask by 1 - p, a Python number: in float32 for float16/bfloat16, rounded once
    ct = D.compute_dtype(dt).type
    mask = np.where(keep, ct(1) / ct(1.0 - p), ct(0)).astype(dt, copy=False)
    return times(input, Tensor(mask))
