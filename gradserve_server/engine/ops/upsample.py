"""F.interpolate over 3-d (N, C, L), 4-d (N, C, H, W) and, for nearest, nearest-exact and area, 5-d (N, C, D, H, W)
inputs: nearest, nearest-exact, linear, bilinear and bicubic (the UpsampleNearest1D/2D/3D,
UpsampleNearestExact1D/2D/3D, UpsampleLinear1D, UpsampleBilinear2D and UpsampleBicubic2D primitives), and area
(torch's adaptive average pooling; in 3-d AdaptiveAvgPool3DBackward0, private to this module: the op table has no
adaptive_avg_pool3d).

Each mode maps an output position to input positions and weights per spatial dim independently (torch's
source-index formulas: ``scale = 1/scale_factor`` when a scale factor is given, else in/out; half-pixel centres
unless align_corners; the cubic kernel with A = -0.75 and clamped taps), so the op is ``A_h @ x @ A_w^T`` with
constant interpolation matrices: the forward, its VJP (the transposes) and its JVP are matmuls, differentiable
again. Values agree with torch's kernels to rounding.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes as D
from ..errors import TorchRuntimeError
from ..registry import P, jvp, op, record, vjp
from ..tensor import Tensor
from .common import require_tensor, tie
from .linalg import matmul
from .pooling import _adaptive_matrix, adaptive_avg_pool1d, adaptive_avg_pool2d
from .reduction import mean
from .shape import reshape

_MODES = ("nearest", "linear", "bilinear", "bicubic", "trilinear", "area", "nearest-exact")
#: the upsample primitives by (mode, spatial dims), declared below (``_declare``) from these names
_NAMES = {("nearest", 1): "UpsampleNearest1DBackward0", ("nearest", 2): "UpsampleNearest2DBackward0",
          ("nearest-exact", 1): "UpsampleNearestExact1DBackward0",
          ("nearest-exact", 2): "UpsampleNearestExact2DBackward0",
          ("linear", 1): "UpsampleLinear1DBackward0", ("bilinear", 2): "UpsampleBilinear2DBackward0",
          ("bicubic", 2): "UpsampleBicubic2DBackward0", ("nearest", 3): "UpsampleNearest3DBackward0",
          ("nearest-exact", 3): "UpsampleNearestExact3DBackward0"}
_PRIM = {key: getattr(P, name) for key, name in _NAMES.items()}
_SCALES = {1: ("scales",), 2: ("scales_h", "scales_w"), 3: ("scales_d", "scales_h", "scales_w")}


def _cubic(t: float) -> tuple:
    """The four weights of torch's cubic convolution (A = -0.75) at fraction t."""
    a = -0.75

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)


def _matrix(mode: str, n_in: int, n_out: int, scale, align_corners: bool, dtype) -> np.ndarray:
    """(n_out, n_in): output position i as weights over input positions, for one spatial dim."""
    a = np.zeros((n_out, n_in), np.float64)
    if mode in ("nearest", "nearest-exact"):
        s = (1.0 / scale) if scale else n_in / n_out
        s = float(np.float32(s))  # torch computes nearest indices in float
        shift = 0.5 if mode == "nearest-exact" else 0.0
        for i in range(n_out):
            a[i, min(int(math.floor(np.float32((i + shift) * s))), n_in - 1)] = 1.0
        return a.astype(dtype)
    if align_corners:
        s = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    else:
        s = (1.0 / scale) if scale else n_in / n_out
    for i in range(n_out):
        if align_corners:
            src = i * s
        else:
            src = (i + 0.5) * s - 0.5
            if mode != "bicubic" and src < 0:
                src = 0.0
        i0 = int(math.floor(src))
        t = src - i0
        if mode == "bicubic":
            for k, w in zip(range(i0 - 1, i0 + 3), _cubic(t)):
                a[i, min(max(k, 0), n_in - 1)] += w
        else:
            i1 = min(i0 + 1, n_in - 1)
            a[i, i0] += 1.0 - t
            a[i, i1] += t
    return a.astype(dtype)


@op("interpolate", shape="interpolate(input,size,scale_factor)",
    tensors=("input",), grad_fns=tuple(_PRIM.values()) + (P.AdaptiveAvgPool2DBackward0,
    P.SqueezeBackward1, P.AdaptiveAvgPool3DBackward0, P.MeanBackward1), method=False, family="nn",
    aliases=("upsample",))
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """F.interpolate(input, size=None, scale_factor=None, mode='nearest', align_corners=None,
    recompute_scale_factor=None, antialias=False) for 3-d and 4-d inputs, and 5-d ones in nearest, nearest-exact
    and area modes."""
    input = require_tensor(input, "input", "interpolate")
    x = input.data
    nd = x.ndim - 2
    if (size is None) == (scale_factor is None):
        raise TorchRuntimeError("only one of size or scale_factor should be defined" if size is not None else
                                "either size or scale_factor should be defined", code="invalid_argument",
                                exception="ValueError")
    if align_corners is not None and mode not in ("linear", "bilinear", "bicubic", "trilinear"):
        raise TorchRuntimeError("align_corners option can only be set with the interpolating modes: linear | "
                                "bilinear | bicubic | trilinear", code="invalid_argument", exception="ValueError")
    spatial = list(x.shape[2:])
    if size is not None:
        out = [int(v) for v in size] if isinstance(size, (list, tuple)) else [int(size)] * max(nd, 0)
        if isinstance(size, (list, tuple)) and len(size) != nd:
            raise TorchRuntimeError(f"Input and output must have the same number of spatial dimensions, but got input "
                                    f"with spatial dimensions of {spatial} and output size of {tuple(size)}. Please "
                                    "provide input tensor in (N, C, d1, d2, ...,dK) format and output size in (o1, o2, "
                                    "...,oK) format.", code="shape_mismatch", exception="ValueError")
        scales = [None] * nd
    else:
        sf = list(scale_factor) if isinstance(scale_factor, (list, tuple)) else [scale_factor] * max(nd, 0)
        out = [int(math.floor(n * float(f))) for n, f in zip(spatial, sf)]
        scales = [None] * nd if recompute_scale_factor else [float(f) for f in sf]
    need = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}.get(mode)
    if need is not None and need != nd and nd in (1, 2, 3):
        raise TorchRuntimeError(f"Got {x.ndim}D input, but {mode} mode needs {need + 2}D input",
                                code="invalid_argument", exception="NotImplementedError")
    if not (nd in (1, 2) or (nd == 3 and mode in ("nearest", "nearest-exact", "area"))) or mode not in _MODES:
        # (trilinear, the one 5-d mode left, is not implemented: refused with this message)
        raise TorchRuntimeError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {x.ndim}D) for the "
                                "modes: nearest | linear | bilinear | bicubic | trilinear | lanczos | area | "
                                f"nearest-exact (got {mode})", code="invalid_argument", exception="NotImplementedError")
    if mode == "area":
        if nd == 3:
            return _adaptive_avg_pool3d(input, out)
        return adaptive_avg_pool1d(input, out[0]) if nd == 1 else adaptive_avg_pool2d(input, out)
    if min(spatial + out) <= 0:
        names = ("D", "H", "W")[3 - nd:]
        shown = [", ".join(f"{k}: {v}" for k, v in zip(names, sizes)) for sizes in (spatial, out)]
        raise TorchRuntimeError(f"Input and output sizes should be greater than 0, but got input ({shown[0]})"
                                f"{' and' if nd == 1 else ''} output ({shown[1]})", code="invalid_argument")
    if x.dtype.kind not in "fV":
        kernel = "compute_indices_weights_nearest" if nd == 3 else f"upsample_{mode.replace('-', '_')}{nd}d"
        raise TorchRuntimeError(f"\"{kernel}\" not implemented for '{D.SCALAR_TYPE_NAMES[input.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    ac = bool(align_corners)
    mats = [_matrix(mode, n, o, s, ac, x.dtype) for n, o, s in zip(spatial, out, scales)]
    if nd == 1:
        vals = np.matmul(x, mats[0].T)
    elif nd == 2:
        vals = np.matmul(np.matmul(mats[0], x), mats[1].T)
    else:  # nearest: each output position reads one input position (a gather: an inf stays an inf)
        vals = x
        for axis, m in zip((-3, -2, -1), mats):
            vals = np.take(vals, m.argmax(axis=1), axis=axis)
    saved = {"output_size": out, "self_sym_sizes": x.shape}
    saved.update(zip(_SCALES[nd], scales))
    if mode in ("linear", "bilinear", "bicubic"):
        saved["align_corners"] = ac
    return record(_PRIM[(mode, nd)], np.ascontiguousarray(vals, x.dtype), (input,), saved)


def _mats(ctx, mode: str, dtype) -> list:
    shape = ctx.self_sym_sizes
    spatial = shape[2:]
    scales = [getattr(ctx, k) for k in _SCALES[len(spatial)]]
    ac = bool(getattr(ctx, "align_corners", False))
    return [Tensor(_matrix(mode, n, o, s, ac, dtype)) for n, o, s in zip(spatial, ctx.output_size, scales)]


def _apply3d(t: Tensor, md: Tensor, mh: Tensor, mw: Tensor) -> Tensor:
    """``t`` (N, C, D, H, W) with each spatial dim multiplied by its matrix (an (out, in) matrix per dim): W and H
    by matmuls on the last two dims, D by a matmul over the (D, H * W) view."""
    t = matmul(mh, matmul(t, mw.t()))
    n, c, d, h, w = t.data.shape
    return reshape(matmul(md, reshape(t, (n, c, d, h * w))), (n, c, md.data.shape[0], h, w))


def _declare(prim: str, mode: str, nd: int) -> None:
    slots = ("output_size", "self_sym_sizes") + _SCALES[nd]
    if mode in ("linear", "bilinear", "bicubic"):
        slots = ("align_corners",) + slots

    @vjp(prim, inputs=("self",), saves=slots)
    def _(ctx, grad):
        m = _mats(ctx, mode, grad.data.dtype)
        if nd == 3:
            return _apply3d(grad, *(a.t() for a in m)),
        return (matmul(grad, m[0]) if nd == 1 else matmul(matmul(m[0].t(), grad), m[1])),

    @jvp()
    def _(ctx, self_t):
        m = _mats(ctx, mode, self_t.data.dtype)
        if nd == 3:
            return _apply3d(self_t, *m)
        return matmul(self_t, m[0].t()) if nd == 1 else matmul(matmul(m[0], self_t), m[1].t())


for (_mode, _nd), _name in _NAMES.items():
    _declare(_name, _mode, _nd)


# ----- area in 3-d: torch's adaptive_avg_pool3d ------------------------------------------------------------


def _adaptive_avg_pool3d(input: Tensor, size: list) -> Tensor:
    """adaptive_avg_pool3d as F.interpolate(mode="area") calls it on a 5-d input: each output cell the mean of its
    window (floor(i * n / o) .. ceil((i + 1) * n / o) per dim); a 1x1x1 output is torch's mean over the last three
    dims (MeanBackward1)."""
    x = input.data
    if min(size) < 0:
        raise TorchRuntimeError(f"adaptive_avg_pool3d: elements of output_size must be greater than or equal to 0 "
                                f"but received {{{size[0]}, {size[1]},{size[2]}}}", code="invalid_argument")
    if x.dtype.kind not in "fV":
        raise TorchRuntimeError(f"\"adaptive_avg_pool3d_cpu\" not implemented for "
                                f"'{D.SCALAR_TYPE_NAMES[input.dtype]}'", code="invalid_dtype",
                                exception="NotImplementedError")
    if tuple(size) == (1, 1, 1):
        return mean(input, [-1, -2, -3], True)
    vals = np.empty(x.shape[:-3] + tuple(size), x.dtype)
    bounds = [[((i * n) // o, -((-(i + 1) * n) // o)) for i in range(o)] for n, o in zip(x.shape[-3:], size)]
    for i, (d0, d1) in enumerate(bounds[0]):
        for j, (h0, h1) in enumerate(bounds[1]):
            for k, (w0, w1) in enumerate(bounds[2]):
                cell = x[..., d0:d1, h0:h1, w0:w1]
                vals[..., i, j, k] = cell.sum(axis=(-3, -2, -1)) / x.dtype.type(cell.shape[-3] * cell.shape[-2]
                                                                                 * cell.shape[-1])
    return record(P.AdaptiveAvgPool3DBackward0, vals, (input,), {"self": input})


def _adaptive_matrices3d(ctx, out: tuple, dtype) -> list:
    return [Tensor(_adaptive_matrix(n, o, dtype)) for n, o in zip(ctx.self.data.shape[-3:], out)]


@vjp("AdaptiveAvgPool3DBackward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    m = _adaptive_matrices3d(ctx, grad.data.shape[-3:], grad.data.dtype)
    return tie(_apply3d(grad, *(a.t() for a in m)), ctx.self),


@jvp(P.AdaptiveAvgPool3DBackward0)
def _(ctx, self_t):
    return _apply3d(self_t, *_adaptive_matrices3d(ctx, ctx.result.data.shape[-3:], self_t.data.dtype))
