"""Pooling: F.max_pool2d (MaxPool2DWithIndicesBackward0), F.avg_pool2d (AvgPool2DBackward0),
F.adaptive_avg_pool2d (AdaptiveAvgPool2DBackward0; a mean over the last two dims for a 1x1 output, as torch),
and their 1-d forms, which torch runs as the 2-d op on an unsqueezed input (an UnsqueezeBackward0 under it and a
SqueezeBackward1 over it).

Forwards are numpy over strided windows, with torch's output sizes (ceil_mode included: a last window must start
inside the input or its left padding) and its choice of index (the first maximum; a NaN wins, the last one).
The VJPs are written in engine ops so that they are differentiable again: max pooling's is a scatter_add of the
gradient at the saved indices (its JVP a gather), average pooling's spreads each gradient over its window through
col2im (conv.py's adjoint of im2col), and adaptive average pooling is separable: out = A_h @ x @ A_w^T with
constant averaging matrices, whose transposes give the VJP.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import dtypes as D
from ..dual import _level as _fw_level
from ..dual import tangent_of
from ..errors import TorchIndexError, TorchRuntimeError
from ..grad_mode import no_grad
from ..registry import P, jvp, needs_grad, op, record, vjp
from ..tensor import Tensor
from .common import require_tensor, tie, zeros_like
from .conv import col2im
from .indexing import scatter_add
from .linalg import matmul
from .reduction import mean
from .shape import expand, gather, narrow, reshape, squeeze, unsqueeze


def _pair(v, name: str, what: str, default=None) -> tuple:
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0 and default is not None):
        return default
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            return (int(v[0]), int(v[0]))
        if len(v) != 2:
            raise TorchRuntimeError(f"{name}: {what} must either be a single int, or a tuple of two ints",
                                    code="invalid_argument")
        return (int(v[0]), int(v[1]))
    return (int(v), int(v))


def _out_size(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """torch's pooling_output_shape."""
    o = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (o - 1) * s >= n + p:
        o -= 1
    return o


def _geometry(name: str, x: np.ndarray, kernel_size, stride, padding, dilation, ceil_mode) -> tuple:
    """Checked (k, s, p, d, out) pairs of a 2-d pooling over the last two dims of a 3-d or 4-d input."""
    k = _pair(kernel_size, name, "kernel_size")
    s = _pair(stride, name, "stride", default=k)
    p = _pair(padding, name, "padding")
    d = _pair(dilation, name, "dilation")
    for v in p:
        if v < 0:
            raise TorchRuntimeError(f"pad must be non-negative, but got pad: {v}", code="invalid_argument")
    if 0 in k or 0 in s:
        raise TorchRuntimeError("stride should not be zero", code="invalid_argument")
    for i in range(2):  # (torch checks the padding before the input's dims)
        if p[i] > (d[i] * (k[i] - 1) + 1) // 2:
            raise TorchRuntimeError(f"pad should be at most half of effective kernel size, but got pad={p[i]}, "
                                    f"kernel_size={k[i]} and dilation={d[i]}", code="invalid_argument")
    got = "[" + ", ".join(str(v) for v in x.shape) + "]"
    if x.ndim in (3, 4) and 0 in x.shape[-3:]:
        raise TorchRuntimeError(f"Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, "
                                f"but got:{got}", code="shape_mismatch")
    if x.ndim not in (3, 4):  # torch's two kernels word it differently (avg_pool2d reads dim -3 first)
        if name == "avg_pool2d" and x.ndim < 3:
            raise TorchIndexError(f"Dimension out of range (expected to be in range of [-{max(x.ndim, 1)}, "
                                  f"{max(x.ndim, 1) - 1}], but got -3)", code="invalid_dim")
        if name == "avg_pool2d":
            raise TorchRuntimeError(f"Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for "
                                    f"input, but got:{got}", code="shape_mismatch")
        raise TorchRuntimeError("non-empty 3D or 4D (batch mode) tensor expected for input", code="shape_mismatch")
    h, w = x.shape[-2:]
    out = (_out_size(h, k[0], s[0], p[0], d[0], ceil_mode), _out_size(w, k[1], s[1], p[1], d[1], ceil_mode))
    if out[0] < 1 or out[1] < 1:
        c = x.shape[-3]
        raise TorchRuntimeError(f"Given input size: ({c}x{h}x{w}). Calculated output size: ({c}x{out[0]}x{out[1]}). "
                                "Output size is too small", code="shape_mismatch")
    return k, s, p, d, out


def _padded(x: np.ndarray, k, s, p, d, out, fill) -> np.ndarray:
    """The input padded so that every window of the output lies inside: p before, enough after."""
    extra = [max(0, (out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 - (x.shape[-2 + i] + p[i])) for i in range(2)]
    if not (p[0] or p[1] or extra[0] or extra[1]):
        return x
    width = [(0, 0)] * (x.ndim - 2) + [(p[0], extra[0]), (p[1], extra[1])]
    return np.pad(x, width, constant_values=fill)


def _windows(xp: np.ndarray, k, s, d, out) -> np.ndarray:
    """(..., oh, ow, kh, kw) strided windows of a padded input (read-only)."""
    st = xp.strides
    shape = xp.shape[:-2] + (out[0], out[1], k[0], k[1])
    strides = st[:-2] + (st[-2] * s[0], st[-1] * s[1], st[-2] * d[0], st[-1] * d[1])
    return as_strided(xp, shape, strides, writeable=False)


# ----- max_pool2d -----------------------------------------------------------------------------------------


@op("max_pool2d", shape="pool(input,kernel_size,stride,padding,dilation,ceil_mode,return_indices)=2",
    functions=("max_pool2d",),
    tuple_when=("return_indices",),
    tensors=("input",), grad_fns=(P.MaxPool2DWithIndicesBackward0,), method=False, family="nn",
    aliases=("max_pool2d_with_indices",))
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """F.max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
    return_indices=False): the indices are flat positions in each (H, W) plane, int64."""
    input = require_tensor(input, "input", "max_pool2d")
    out, idx = _max_pool(input, "max_pool2d", kernel_size, stride, padding, dilation, ceil_mode)
    return (out, idx) if return_indices else out


def _max_pool(input: Tensor, name, kernel_size, stride, padding, dilation, ceil_mode):
    x = input.data
    k, s, p, d, out = _geometry(name, x, kernel_size, stride, padding, dilation, ceil_mode)
    if x.dtype == np.bool_:
        raise TorchRuntimeError("\"max_pool2d\" not implemented for 'Bool'", code="invalid_dtype",
                                exception="NotImplementedError")
    low = -np.inf if x.dtype.kind in "fV" else np.iinfo(x.dtype).min
    xp = _padded(x, k, s, p, d, out, low)
    win = _windows(xp, k, s, d, out).reshape(x.shape[:-2] + out + (k[0] * k[1],))
    pos = win.argmax(axis=-1)  # the first maximum (np.argmax also stops at a first NaN)
    if x.dtype.kind in "fV":
        nan = np.isnan(win)
        has_nan = nan.any(axis=-1)
        if has_nan.any():  # torch's loop takes every NaN it meets: the last one wins
            last = win.shape[-1] - 1 - nan[..., ::-1].argmax(axis=-1)
            pos = np.where(has_nan, last, pos)
    vals = np.take_along_axis(win, pos[..., None], axis=-1)[..., 0]
    # the window's element -> its (row, col) in the unpadded input
    oi = np.arange(out[0]).reshape(-1, 1)
    oj = np.arange(out[1]).reshape(1, -1)
    row = oi * s[0] - p[0] + (pos // k[1]) * d[0]
    col = oj * s[1] - p[1] + (pos % k[1]) * d[1]
    indices = Tensor((row * x.shape[-1] + col).astype(np.int64))
    result = record(P.MaxPool2DWithIndicesBackward0, np.ascontiguousarray(vals, x.dtype), (input,),
                    {"ceil_mode": bool(ceil_mode), "dilation": list(d), "kernel_size": list(k), "padding": list(p),
                     "result1": indices, "self": input, "stride": list(s)})
    return result, indices


def _flat_planes(t: Tensor) -> Tensor:
    """(..., H, W) -> (..., H*W)."""
    shape = t.data.shape
    return reshape(t, shape[:-2] + (shape[-2] * shape[-1],))


@vjp("MaxPool2DWithIndicesBackward0", inputs=("self",),
     saves=("ceil_mode", "dilation", "kernel_size", "padding", "result1", "self", "stride"))
def _(ctx, grad):
    return max_pool2d_backward(grad, ctx.self, ctx.result1),


def max_pool2d_backward(grad: Tensor, self: Tensor, indices: Tensor) -> Tensor:
    """torch's max_pool2d_with_indices_backward: each output's gradient added at its maximum's position in
    ``self``'s shape. Under create_graph it is a node of its own, MaxPool2DWithIndicesBackwardBackward0, linear in
    ``grad`` and with a zero derivative for ``self``."""
    shape = self.data.shape
    with no_grad():
        zeros = Tensor(np.zeros(shape[:-2] + (shape[-2] * shape[-1],), grad.data.dtype))
        out = scatter_add(zeros, -1, _flat_planes(indices), _flat_planes(grad)).data.reshape(shape)
    return record(P.MaxPool2DWithIndicesBackwardBackward0, out, (grad, self), {"indices": indices, "self": self})


def _max_pool_gather(g: Tensor, indices: Tensor) -> Tensor:
    """The value of ``g`` (the input's shape) at each output's maximum: the double backward's map."""
    return reshape(gather(_flat_planes(g), -1, _flat_planes(indices)), indices.data.shape)


@vjp("MaxPool2DWithIndicesBackwardBackward0", inputs=("grad_output", "self"), saves=("indices", "self"))
def _(ctx, gg):
    n = ctx.needs
    return (_max_pool_gather(gg, ctx.indices) if n[0] else None), (zeros_like(ctx.self) if n[1] else None)


@jvp()
def _(ctx, grad_output_t, self_t):
    return None if grad_output_t is None else max_pool2d_backward(grad_output_t, ctx.self, ctx.indices)


@jvp(P.MaxPool2DWithIndicesBackward0)
def _(ctx, self_t):
    return _max_pool_gather(self_t, ctx.result1)


# ----- avg_pool2d -----------------------------------------------------------------------------------------


@op("avg_pool2d", shape="pool(input,kernel_size,stride,padding,1,ceil_mode,0)=2",
    tensors=("input",), method=False, family="nn")
def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """F.avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
    divisor_override=None). The divisor counts the padding (count_include_pad) but never a ceil_mode window's
    part past it, as torch's kernel."""
    input = require_tensor(input, "input", "avg_pool2d")
    x = input.data
    k, s, p, _, out = _geometry("avg_pool2d", x, kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is not None and divisor_override == 0:
        raise TorchRuntimeError("divisor must be not zero", code="invalid_argument")
    if x.dtype == np.bool_:
        raise TorchRuntimeError("\"avg_pool2d\" not implemented for 'Bool'", code="invalid_dtype",
                                exception="NotImplementedError")
    div = _avg_divisors(x.shape[-2:], k, s, p, out, count_include_pad, divisor_override)
    xp = _padded(x, k, s, p, (1, 1), out, 0)
    sums = _windows(xp, k, s, (1, 1), out).sum(axis=(-2, -1), dtype=np.float64 if x.dtype.kind not in "fV" else x.dtype)
    if x.dtype.kind in "fV":
        vals = sums / div.astype(x.dtype)
    else:  # integer pooling divides and truncates like torch's integer kernel
        vals = np.trunc(sums / div).astype(x.dtype)
    return record(P.AvgPool2DBackward0, np.ascontiguousarray(vals, x.dtype), (input,),
                  {"ceil_mode": bool(ceil_mode), "count_include_pad": bool(count_include_pad),
                   "divisor_override": divisor_override, "kernel_size": list(k), "padding": list(p), "self": input,
                   "stride": list(s)})


def _avg_divisors(hw, k, s, p, out, count_include_pad, divisor_override) -> np.ndarray:
    """Each output's divisor, (oh, ow)."""
    if divisor_override is not None:
        return np.full(out, float(divisor_override))
    sizes = []
    for i in range(2):
        start = np.arange(out[i]) * s[i] - p[i]
        end = np.minimum(start + k[i], hw[i] + p[i])
        if count_include_pad:
            sizes.append(end - start)
        else:
            sizes.append(np.minimum(end, hw[i]) - np.maximum(start, 0))
    return np.outer(sizes[0], sizes[1]).astype(np.float64)


def _avg_spread(grad: Tensor, shape: tuple, k, s, p, out, div: np.ndarray) -> Tensor:
    """The adjoint of average pooling: each output's gradient / its divisor, added over its window."""
    lead = shape[:-2]
    h, w = shape[-2:]
    hp = max((out[0] - 1) * s[0] + k[0], p[0] + h)
    wp = max((out[1] - 1) * s[1] + k[1], p[1] + w)
    n = int(np.prod(lead)) if lead else 1
    g = reshape(grad / Tensor(div.astype(grad.data.dtype)), (n, 1, 1, out[0] * out[1]))
    cols = reshape(expand(g, (n, 1, k[0] * k[1], out[0] * out[1])), (n, k[0] * k[1], out[0] * out[1]))
    img = col2im(cols, (n, 1, hp, wp), tuple(k), (1, 1), (0, 0), tuple(s))
    return reshape(narrow(narrow(img, 2, p[0], h), 3, p[1], w), shape)


@vjp("AvgPool2DBackward0", inputs=("self",),
     saves=("ceil_mode", "count_include_pad", "divisor_override", "kernel_size", "padding", "self", "stride"))
def _(ctx, grad):
    shape = ctx.self.data.shape
    k, s, p = tuple(ctx.kernel_size), tuple(ctx.stride), tuple(ctx.padding)
    out = grad.data.shape[-2:]
    div = _avg_divisors(shape[-2:], k, s, p, out, ctx.count_include_pad, ctx.divisor_override)
    return tie(_avg_spread(grad, shape, k, s, p, out, div), ctx.self),


@jvp()
def _(ctx, self_t):
    return avg_pool2d(self_t, ctx.kernel_size, ctx.stride, ctx.padding, ctx.ceil_mode, ctx.count_include_pad,
                      ctx.divisor_override)


# ----- adaptive_avg_pool2d --------------------------------------------------------------------------------


def _adaptive_matrix(n: int, o: int, dtype) -> np.ndarray:
    """(o, n): row i averages input positions floor(i*n/o) .. ceil((i+1)*n/o) - 1."""
    a = np.zeros((o, n), dtype)
    for i in range(o):
        start, end = (i * n) // o, -((-(i + 1) * n) // o)
        a[i, start:end] = 1.0 / (end - start)
    return a


@op("adaptive_avg_pool2d", shape="adaptive_pool(input,output_size)=2",
    tensors=("input",), grad_fns=(P.AdaptiveAvgPool2DBackward0, P.MeanBackward1),
    method=False, family="nn")
def adaptive_avg_pool2d(input, output_size):
    """F.adaptive_avg_pool2d(input, output_size): None in output_size keeps that size; a 1x1 output is
    torch's mean over the last two dims (MeanBackward1)."""
    input = require_tensor(input, "input", "adaptive_avg_pool2d")
    x = input.data
    if isinstance(output_size, (list, tuple)):
        if len(output_size) != 2:
            raise TorchRuntimeError("adaptive_avg_pool2d: output_size must be 2", code="invalid_argument")
        size = tuple(x.shape[-2 + i] if v is None else int(v) for i, v in enumerate(output_size))
    else:
        size = (int(output_size), int(output_size))
    if min(size) < 0:
        raise TorchRuntimeError(f"adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 "
                                f"but received {{{size[0]}, {size[1]}}}", code="invalid_argument")
    if x.ndim < 3 and isinstance(output_size, (list, tuple)):  # F.adaptive_avg_pool2d's own check of a list
        raise TorchRuntimeError("Input dimension should be at least 3", code="shape_mismatch", exception="ValueError")
    if x.ndim not in (3, 4):
        raise TorchRuntimeError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got "
                                f"[{', '.join(str(v) for v in x.shape)}]", code="shape_mismatch")
    if x.dtype.kind not in "fV":
        raise TorchRuntimeError(f"\"adaptive_avg_pool2d\" not implemented for '{D.SCALAR_TYPE_NAMES[input.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    if size == (1, 1):
        return mean(input, [-1, -2], True)
    h, w = x.shape[-2:]
    vals = np.empty(x.shape[:-2] + size, x.dtype)
    for i in range(size[0]):
        h0, h1 = (i * h) // size[0], -((-(i + 1) * h) // size[0])
        for j in range(size[1]):
            w0, w1 = (j * w) // size[1], -((-(j + 1) * w) // size[1])
            vals[..., i, j] = x[..., h0:h1, w0:w1].sum(axis=(-2, -1)) / x.dtype.type((h1 - h0) * (w1 - w0))
    return record(P.AdaptiveAvgPool2DBackward0, vals, (input,), {"self": input})


def _adaptive_matrices(ctx, out: tuple, dtype) -> tuple[Tensor, Tensor]:
    h, w = ctx.self.data.shape[-2:]
    return Tensor(_adaptive_matrix(h, out[0], dtype)), Tensor(_adaptive_matrix(w, out[1], dtype))


@vjp("AdaptiveAvgPool2DBackward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    ah, aw = _adaptive_matrices(ctx, grad.data.shape[-2:], grad.data.dtype)
    return tie(matmul(matmul(ah.t(), grad), aw), ctx.self),


@jvp()
def _(ctx, self_t):
    ah, aw = _adaptive_matrices(ctx, ctx.result.data.shape[-2:], self_t.data.dtype)
    return matmul(matmul(ah, self_t), aw.t())


# ----- the 1-d forms: the 2-d op on an unsqueezed input ----------------------------------------------------


def _check_1d(name: str, x: Tensor, what: str = "Expected 2D or 3D (batch mode) tensor with optional 0 dim "
              "batch size for input, but got:") -> None:
    shape = x.data.shape
    if len(shape) not in (2, 3) or 0 in shape[-2:]:
        raise TorchRuntimeError(f"{name}: {what}[{', '.join(str(v) for v in x.shape)}]", code="shape_mismatch")


def _one(v, default=None):
    if v is None:
        return default
    return (1, int(v[0] if isinstance(v, (list, tuple)) else v))


@op("max_pool1d", shape="pool(input,kernel_size,stride,padding,dilation,ceil_mode,return_indices)=1",
    functions=("max_pool1d",),
    tuple_when=("return_indices",),
    tensors=("input",), grad_fns=(P.SqueezeBackward1,), method=False, family="nn")
def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """F.max_pool1d(...): max_pool2d over (..., 1, L) with a (1, k) window."""
    input = require_tensor(input, "input", "max_pool1d")
    _check_1d("max_pool1d", input)
    for name, v in (("stride", stride), ("kernel_size", kernel_size), ("dilation", dilation)):
        v = v[0] if isinstance(v, (list, tuple)) and v else v
        if v is not None and not isinstance(v, (list, tuple)) and v <= 0:
            raise TorchRuntimeError(f"max_pool1d() {name} must be greater than zero, but got {v}",
                                    code="invalid_argument")
    k = _one(kernel_size)
    s_, p_, d_ = _one(stride, k), _one(padding), _one(dilation)
    length = _out_size(input.shape[-1], k[1], s_[1], p_[1], d_[1], ceil_mode)
    if length < 1 and p_[1] <= (d_[1] * (k[1] - 1) + 1) // 2:
        raise TorchRuntimeError(f"max_pool1d() Invalid computed output size: {length}", code="shape_mismatch")
    out, idx = _max_pool(unsqueeze(input, -2), "max_pool2d", k, s_, (0, p_[1]), (1, d_[1]), ceil_mode)
    out = squeeze(out, -2)
    if return_indices:
        return out, Tensor(idx.data.squeeze(-2))
    if not needs_grad(input) and (_fw_level.get() is None or tangent_of(input) is None):
        return Tensor(np.ascontiguousarray(out.data))  # torch's kernel without autograd writes a fresh tensor
    return out


@op("avg_pool1d", shape="pool(input,kernel_size,stride,padding,1,ceil_mode,0)=1", functions=("avg_pool1d",),
    tensors=("input",), grad_fns=(P.SqueezeBackward1,), method=False, family="nn")
def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """F.avg_pool1d(...): avg_pool2d over (..., 1, L) with a (1, k) window."""
    input = require_tensor(input, "input", "avg_pool1d")
    _check_1d("avg_pool1d", input)
    k = _one(kernel_size)
    return squeeze(avg_pool2d(unsqueeze(input, -2), k, _one(stride, k), (0, _one(padding)[1]), ceil_mode,
                              count_include_pad), -2)


@op("adaptive_avg_pool1d", shape="adaptive_pool(input,output_size)=1", functions=("adaptive_avg_pool1d",),
    tensors=("input",), grad_fns=(P.SqueezeBackward1,), method=False, family="nn")
def adaptive_avg_pool1d(input, output_size):
    """F.adaptive_avg_pool1d(input, output_size)."""
    input = require_tensor(input, "input", "adaptive_avg_pool1d")
    if input.data.ndim not in (2, 3):
        raise TorchRuntimeError(f"Expected 2 to 3 dimensions, but got {input.data.ndim}-dimensional tensor for "
                                "argument #1 'self' (while checking arguments for adaptive_avg_pool1d)",
                                code="shape_mismatch")
    if isinstance(output_size, (list, tuple)) and len(output_size) != 1:
        raise TorchRuntimeError(f"adaptive_avg_pool1d() argument 'output_size' should contain one int (got "
                                f"{len(output_size)})", code="invalid_argument")
    o = output_size[0] if isinstance(output_size, (list, tuple)) else output_size
    return squeeze(adaptive_avg_pool2d(unsqueeze(input, -2), (1, int(o))), -2)

