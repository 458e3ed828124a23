"""Convolutions: F.conv1d and F.conv2d as one primitive, ConvolutionBackward0, computed in numpy by
im2col (a strided window view, copied once) and a batched matmul per group.

The VJP is written in engine ops over two linear helper primitives, im2col (Im2ColBackward0, F.unfold's
layout) and its adjoint col2im (Col2ImBackward0), each the other's VJP; so grad_input = col2im(W^T g),
grad_weight = sum_n g cols^T, grad_bias = sum g, and every order of derivative stays in the table.
conv1d runs as conv2d on a height-1 image.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import dtypes as D
from ..errors import InvalidArgumentError, TorchRuntimeError
from ..grad_mode import check_numel
from ..registry import P, broken_check, declared_failure, jvp, op, record, vjp
from ..tensor import Tensor
from .common import require_tensor
from .linalg import matmul
from .reduction import sum as sum_
from .shape import reshape, squeeze, transpose, unsqueeze


def _out_len(n: int, k: int, s: int, p: int, d: int) -> int:
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def _im2col_np(x: np.ndarray, k: tuple, stride: tuple, padding: tuple, dilation: tuple) -> np.ndarray:
    """(N, C, H, W) -> (N, C*kh*kw, L): every receptive field as a column (F.unfold's layout)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = k, stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
    n, c, hp, wp = xp.shape
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    s = xp.strides
    win = as_strided(xp, (n, c, kh, kw, oh, ow), (s[0], s[1], s[2] * dh, s[3] * dw, s[2] * sh, s[3] * sw),
                     writeable=False)
    return win.reshape(n, c * kh * kw, oh * ow)


def _col2im_np(cols: np.ndarray, shape: tuple, k: tuple, stride: tuple, padding: tuple,
               dilation: tuple) -> np.ndarray:
    """The adjoint of _im2col_np: columns summed back into an (N, C, H, W) image."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = k, stride, padding, dilation
    n, c, h, w = shape
    oh, ow = _out_len(h, kh, sh, ph, dh), _out_len(w, kw, sw, pw, dw)
    out = np.zeros((n, c, h + 2 * ph, w + 2 * pw), cols.dtype)
    c6 = cols.reshape(n, c, kh, kw, oh, ow)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw] += c6[:, :, i, j]
    return out[:, :, ph:ph + h, pw:pw + w]


def _geometry(ctx) -> dict:
    return {"kernel_size": ctx.kernel_size, "dilation": ctx.dilation, "padding": ctx.padding, "stride": ctx.stride}


def im2col(x: Tensor, kernel_size: tuple, dilation: tuple, padding: tuple, stride: tuple) -> Tensor:
    out = _im2col_np(x.data, kernel_size, stride, padding, dilation)
    return record(P.Im2ColBackward0, np.array(out, copy=True), (x,),
                  {"dilation": list(dilation), "kernel_size": list(kernel_size), "padding": list(padding),
                   "self_sym_argsize_minus_1": x.shape[-1], "self_sym_argsize_minus_2": x.shape[-2],
                   "stride": list(stride)})


def col2im(cols: Tensor, shape: tuple, kernel_size: tuple, dilation: tuple, padding: tuple,
           stride: tuple) -> Tensor:
    out = _col2im_np(cols.data, shape, kernel_size, stride, padding, dilation)
    return record(P.Col2ImBackward0, np.array(out, copy=True), (cols,),
                  {"dilation": list(dilation), "kernel_size": list(kernel_size), "padding": list(padding),
                   "stride": list(stride)})


@vjp("Im2ColBackward0", inputs=("self",),
     saves=("dilation", "kernel_size", "padding", "self_sym_argsize_minus_1", "self_sym_argsize_minus_2", "stride"))
def _(ctx, grad):
    n, ck, _ = grad.shape
    kh, kw = ctx.kernel_size
    shape = (n, ck // (kh * kw), ctx.self_sym_argsize_minus_2, ctx.self_sym_argsize_minus_1)
    return col2im(grad, shape, tuple(ctx.kernel_size), tuple(ctx.dilation), tuple(ctx.padding), tuple(ctx.stride)),


@jvp()
def _(ctx, self_t):
    return im2col(self_t, tuple(ctx.kernel_size), tuple(ctx.dilation), tuple(ctx.padding), tuple(ctx.stride))


@vjp("Col2ImBackward0", inputs=("self",), saves=("dilation", "kernel_size", "padding", "stride"))
def _(ctx, grad):
    return im2col(grad, tuple(ctx.kernel_size), tuple(ctx.dilation), tuple(ctx.padding), tuple(ctx.stride)),


@jvp()
def _(ctx, self_t):
    return col2im(self_t, ctx.result.shape, tuple(ctx.kernel_size), tuple(ctx.dilation), tuple(ctx.padding),
                  tuple(ctx.stride))


# ----- the convolution primitive ----------------------------------------------------------------------


def _tuple(v, n: int, name: str) -> tuple:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),) * n
    if isinstance(v, (list, tuple)) and len(v) == n and all(isinstance(x, (int, np.integer)) for x in v):
        return tuple(int(x) for x in v)
    if isinstance(v, (list, tuple)) and len(v) == 1:
        return (int(v[0]),) * n
    raise InvalidArgumentError(f"conv{n}d(): argument '{name}' must be an int or a tuple of {n} ints, got {v!r}")


def _sizes(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _check_weight_type(input: Tensor, weight: Tensor, groups: int, nd: int) -> None:
    """torch checks the weight's dtype in the backend it selects, after the shape checks: the MKLDNN backend
    (float32 input, and per ConvParams::use_mkldnn: groups > 1, a kernel larger than 3x3, a batch of more than
    one, or more than 20480 input elements in the first four dimensions, a 1-d convolution seen as 2-d; its
    thread-count condition is taken as met, as on any multi-core CPU) and the slow one word it differently."""
    if weight.dtype == input.dtype:
        return
    shape = input.shape if nd > 1 else input.shape[:2] + (1,) + input.shape[2:]
    ksize = weight.shape[2:] if nd > 1 else (1,) + weight.shape[2:]
    mkldnn = input.dtype == D.FLOAT32 and (
        groups > 1 or (ksize[-1] > 3 and ksize[-2] > 3) or shape[0] > 1 or int(np.prod(shape[:4])) > 20480)
    if mkldnn:
        raise TorchRuntimeError(f"Input type ({D.type_string(input.dtype)}) and weight type ("
                                f"{D.type_string(weight.dtype)}) should be the same or input should be a MKLDNN "
                                f"tensor and weight is a dense tensor", code="dtype_mismatch")
    raise TorchRuntimeError(f"expected scalar type {D.SCALAR_TYPE_NAMES[input.dtype]} but found "
                            f"{D.SCALAR_TYPE_NAMES[weight.dtype]}", code="dtype_mismatch")


def _conv_nd(input, weight, bias, stride, padding, dilation, groups, nd: int):
    name = f"conv{nd}d"
    input = require_tensor(input, "input", name)
    weight = require_tensor(weight, "weight", name)
    if bias is not None:
        bias = require_tensor(bias, "bias", name)
        if bias.dtype != input.dtype:  # torch's conv{1,2,3}d check this first, before the input's rank
            names = D.TYPE_META_NAMES  # (C++ names: "long int")
            raise TorchRuntimeError(f"Input type ({names[input.dtype]}) and bias type ({names[bias.dtype]}) "
                                    f"should be the same", code="dtype_mismatch")
    if input.data.ndim not in (nd + 1, nd + 2):
        raise TorchRuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {name}, but got "
                                f"input of size: {_sizes(input.shape)}", code="shape_mismatch")
    if input.data.ndim == nd + 1:  # unbatched: torch unsqueezes, convolves and squeezes
        out = _conv_nd(unsqueeze(input, 0), weight, bias, stride, padding, dilation, groups, nd)
        return squeeze(out, 0)
    if weight.data.ndim != nd + 2:  # (the declaration words it: a padding mode's path without the space)
        raise broken_check(name, input=input, weight=weight, bias=bias, stride=stride, padding=padding,
                           dilation=dilation, groups=groups)
    if isinstance(padding, str):  # a padding mode's checks (stride and dilation broadcast) precede their forms'
        err = declared_failure(name, input=input, weight=weight, bias=bias, stride=stride, padding=padding,
                               dilation=dilation, groups=groups)
        if err is not None:
            raise err
    stride = _tuple(stride, nd, "stride")
    dilation = _tuple(dilation, nd, "dilation")
    if not isinstance(groups, (int, np.integer)) or groups < 1:
        raise TorchRuntimeError("non-positive groups is not supported", code="invalid_argument")
    ksize = weight.shape[2:]
    if isinstance(padding, str):  # ("valid" or "same" with unit strides: its declared checks passed above)
        if padding == "valid":
            padding = (0,) * nd
        else:
            total = [d * (k - 1) for d, k in zip(dilation, ksize)]
            if any(t % 2 for t in total):  # asymmetric: torch pads the input explicitly first
                from .nn_functional import constant_pad_nd
                pad_nd = []
                for t in reversed(total):
                    pad_nd += [0, t % 2]
                input = constant_pad_nd(input, pad_nd, 0.0)
            padding = tuple(t // 2 for t in total)
    padding = _tuple(padding, nd, "padding")
    if any(p < 0 for p in padding):
        raise TorchRuntimeError("negative padding is not supported", code="invalid_argument")
    if any(s <= 0 for s in stride):
        raise TorchRuntimeError("non-positive stride is not supported", code="invalid_argument")
    if any(d <= 0 for d in dilation):  # torch: a zero is caught with the (2-d for conv1d) list, a negative not
        shown = "" if any(d < 0 for d in dilation) else \
            f", but got [{', '.join(map(str, ((1,) if nd == 1 else ()) + dilation))}]"
        raise TorchRuntimeError(f"dilation should be greater than zero{shown}", code="invalid_argument")
    n, c = input.shape[:2]
    o = weight.shape[0]
    if o < groups:
        raise TorchRuntimeError(f"Given groups={groups}, expected weight to be at least {groups} at dimension 0, "
                                f"but got weight of size {_sizes(weight.shape)} instead", code="shape_mismatch")
    if o % groups:
        raise TorchRuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
                                f"but got weight of size [{_sizes(weight.shape)}] instead", code="shape_mismatch")
    if weight.shape[1] * groups != c:
        raise TorchRuntimeError(f"Given groups={groups}, weight of size {_sizes(weight.shape)}, expected "
                                f"input{_sizes(input.shape)} to have {weight.shape[1] * groups} channels, but got {c} "
                                f"channels instead", code="shape_mismatch")
    if bias is not None and (bias.data.ndim != 1 or bias.shape[0] != o):
        raise TorchRuntimeError(f"Given weight of size {_sizes(weight.shape)}, expected bias to be 1-dimensional "
                                f"with {o} elements, but got bias of size {_sizes(bias.shape)} instead",
                                code="shape_mismatch")
    spatial = input.shape[2:]
    padded = [s + 2 * p for s, p in zip(spatial, padding)]
    eff = [d * (k - 1) + 1 for d, k in zip(dilation, ksize)]
    if any(pz < e for pz, e in zip(padded, eff)):
        raise TorchRuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel "
                                f"size: ({' x '.join(map(str, eff))}). Kernel size can't be greater than actual input "
                                f"size", code="shape_mismatch")
    if input.dtype == D.BOOL:  # the slow kernel's dispatch refuses bool before the weight's type is looked at
        raise TorchRuntimeError(f"\"slow_conv2d_cpu\" not implemented for '{D.SCALAR_TYPE_NAMES[input.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    _check_weight_type(input, weight, groups, nd)  # integer convolutions run (torch's CPU kernel has them)
    out_spatial = tuple(_out_len(s, k, st, p, d) for s, k, st, p, d in zip(spatial, ksize, stride, padding, dilation))
    check_numel((n, o) + out_spatial)
    check_numel((n, c * int(np.prod(ksize)), int(np.prod(out_spatial))), "im2col buffer")  # the unfolded input
    x4, w4 = input.data, weight.data
    if nd == 1:
        x4, w4 = x4[:, :, None, :], w4[:, :, None, :]
    k2 = w4.shape[2:]
    g2 = ((1,) + stride, (0,) + padding, (1,) + dilation) if nd == 1 else (stride, padding, dilation)
    cols = _im2col_np(x4, k2, g2[0], g2[1], g2[2])
    L = cols.shape[-1]
    cols = cols.reshape(n, groups, -1, L)
    wm = w4.reshape(groups, o // groups, -1)
    out = np.matmul(wm[None], cols).reshape((n, o) + out_spatial)
    if bias is not None:
        out = out + bias.data.reshape((1, o) + (1,) * nd)
    return record(P.ConvolutionBackward0, np.ascontiguousarray(out, input.data.dtype), (input, weight, bias),
                  {"bias_sym_sizes_opt": list(bias.shape) if bias is not None else [0],
                   "dilation": list(dilation), "groups": int(groups), "input": input,
                   "output_padding": [0] * nd, "padding": list(padding), "stride": list(stride),
                   "transposed": False, "weight": weight})


@vjp("ConvolutionBackward0", inputs=("input", "weight", "bias"),
     saves={"bias_sym_sizes_opt": (), "dilation": (), "groups": (), "input": (), "output_padding": (),
            "padding": (), "stride": (), "transposed": (), "weight": ()},
     double_backward="ConvolutionBackwardBackward0", double_backward_zeros=False)
def _(ctx, grad):
    need_in, need_w, need_b = ctx.needs
    x, w, groups = ctx.input, ctx.weight, ctx.groups
    nd = len(ctx.stride)
    g = grad
    stride, padding, dilation = tuple(ctx.stride), tuple(ctx.padding), tuple(ctx.dilation)
    if nd == 1:  # as conv2d of height 1
        g = unsqueeze(g, 2)
        x = unsqueeze(x, 2) if x is not None else None
        w = unsqueeze(w, 2) if w is not None else None
        stride, padding, dilation = (1,) + stride, (0,) + padding, (1,) + dilation
    n, o = g.shape[:2]
    L = g.shape[2] * g.shape[3]
    gm = reshape(g, (n, groups, o // groups, L))
    g_in = g_w = g_b = None
    if need_in:
        wm = reshape(w, (groups, o // groups, -1))
        cols_g = matmul(transpose(wm, 1, 2), gm)                       # (N, g, Cg*k, L)
        ishape = ctx.node.input_meta[0][0]
        ishape4 = (ishape[0], ishape[1], 1, ishape[2]) if nd == 1 else ishape
        g_in = col2im(reshape(cols_g, (n, -1, L)), ishape4, tuple(w.shape[2:]), dilation, padding, stride)
        if nd == 1:
            g_in = squeeze(g_in, 2)
    if need_w:
        wshape = ctx.node.input_meta[1][0]
        k2 = tuple(wshape[2:]) if nd == 2 else (1, wshape[2])
        cols = reshape(im2col(x, k2, dilation, padding, stride), (n, groups, -1, L))
        g_w = reshape(sum_(matmul(gm, transpose(cols, 2, 3)), 0), wshape)  # (g, Og, Cg*k) summed over the batch
    if need_b:
        g_b = sum_(grad, [0] + list(range(2, grad.data.ndim)))
    return g_in, g_w, g_b


@jvp()
def _(ctx, input_t, weight_t, bias_t):
    # bilinear in (input, weight): conv(dx, w) + conv(x, dw) + db
    from .elementwise import add_t
    nd = len(ctx.stride)
    geo = (ctx.stride, ctx.padding, ctx.dilation, ctx.groups, nd)
    out = None
    if input_t is not None:
        out = _conv_nd(input_t, ctx.weight, None, *geo)
    if weight_t is not None:
        out = add_t(out, _conv_nd(ctx.input, weight_t, None, *geo))
    if bias_t is not None:
        out = add_t(out, reshape(bias_t, (1, -1) + (1,) * nd))
    return out


def _conv_checks(n: int) -> tuple[str, ...]:
    """torch's checks of an n-d convolution's arguments' shapes and dtypes, in torch's order: the ``checks`` a
    client raises at the call's line."""
    return ("same_cpp_dtype(input,bias) if bias | RuntimeError: Input type ({a}) and bias type ({b}) should be the "
            "same",  # (first, before the input's rank)
            f"conv_input(input)={n} | RuntimeError: Expected {{unbatched}}D (unbatched) or {{batched}}D (batched) "
            f"input to conv{n}d, but got input of size: {{shape}}",
            "padding_mode(padding) | RuntimeError: Invalid padding string: '{padding}'",
            "min_dims(weight)=3 | RuntimeError: weight should have at least three dimensions",
            f"conv_same_weight(input,weight,padding)={n} | RuntimeError: Expected {{dims}}-dimensional input for "
            "{dims}-dimensional weight{weight}, but got {got}-dimensional input of size {input} instead",
            "conv_same_broadcast(weight,stride,padding) | RuntimeError: stride cannot broadcast to {dims} dimensions",
            "conv_same_broadcast(weight,dilation,padding) | RuntimeError: dilation cannot broadcast to {dims} "
            "dimensions",
            "conv_same_strided(stride,padding) | RuntimeError: padding='same' is not supported for strided "
            "convolutions",
            f"conv_stride(weight,stride,padding)={n} | RuntimeError: expected stride to be a single integer value or "
            "a list of {k} values to match the convolution dimensions, but got stride={stride}",
            f"conv_weight(input,weight,padding)={n} | RuntimeError: Expected {{dims}}-dimensional input for "
            "{dims}-dimensional weight {weight}, but got {got}-dimensional input of size {input} instead",
            "conv_groups(weight,groups,stride,padding,dilation) | RuntimeError: Given groups={groups}, expected weight "
            "to be divisible by "
            "{groups} at dimension 0, but got weight of size [{weight}] instead",
            "conv_channels(input,weight,groups,stride,padding,dilation) | RuntimeError: Given groups={groups}, weight "
            "of size {weight}, "
            "expected input{input} to have {expected} channels, but got {got} channels instead",
            "conv_bias(weight,bias,stride,padding,dilation) | RuntimeError: Given weight of size {weight}, expected "
            "bias to be 1-dimensional "
            "with {out} elements, but got bias of size {bias} instead",
            f"conv_kernel(input,weight,padding,dilation,stride)={n} | RuntimeError: Calculated padded input size per "
            "channel: "
            "({input}). Kernel size: ({kernel}). Kernel size can't be greater than actual input size",
            "same_dtype(input,weight) | RuntimeError: expected scalar type {a} but found {b}")


@op("conv1d", shape="conv(input,weight,stride,padding,dilation)=1", functions=("conv1d",), checks=_conv_checks(1),
    tensors=("input", "weight", "bias"), grad_fns=(P.ConvolutionBackward0,), method=False, family="conv")
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """F.conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1); padding may be 'valid'
    or 'same'; a 2-D input is one unbatched sample."""
    return _conv_nd(input, weight, bias, stride, padding, dilation, groups, 1)


@op("conv2d", shape="conv(input,weight,stride,padding,dilation)=2", functions=("conv2d",), checks=_conv_checks(2),
    tensors=("input", "weight", "bias"), grad_fns=(P.ConvolutionBackward0,), method=False, family="conv")
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """F.conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1); padding may be 'valid'
    or 'same'; a 3-D input is one unbatched sample."""
    return _conv_nd(input, weight, bias, stride, padding, dilation, groups, 2)
