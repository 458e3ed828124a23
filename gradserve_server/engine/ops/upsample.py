"""F.interpolate over 3-d (N, C, L) and 4-d (N, C, H, W) inputs: nearest, nearest-exact, linear, bilinear and
bicubic (the UpsampleNearest1D/2D, UpsampleNearestExact1D/2D, UpsampleLinear1D, UpsampleBilinear2D and
UpsampleBicubic2D primitives), and area (torch's adaptive average pooling).

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
from ..registry import jvp, op, record, vjp
from ..tensor import Tensor
from .common import require_tensor
from .linalg import matmul
from .pooling import adaptive_avg_pool1d, adaptive_avg_pool2d

_MODES = ("nearest", "linear", "bilinear", "bicubic", "trilinear", "area", "nearest-exact")
_PRIM = {("nearest", 1): "UpsampleNearest1DBackward0", ("nearest", 2): "UpsampleNearest2DBackward0",
         ("nearest-exact", 1): "UpsampleNearestExact1DBackward0",
         ("nearest-exact", 2): "UpsampleNearestExact2DBackward0",
         ("linear", 1): "UpsampleLinear1DBackward0", ("bilinear", 2): "UpsampleBilinear2DBackward0",
         ("bicubic", 2): "UpsampleBicubic2DBackward0"}


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


@op("interpolate", tensors=("input",), grad_fns=tuple(_PRIM.values()) + ("AdaptiveAvgPool2DBackward0",
    "SqueezeBackward1"), method=False, family="nn", aliases=("upsample",))
def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """F.interpolate(input, size=None, scale_factor=None, mode='nearest', align_corners=None,
    recompute_scale_factor=None, antialias=False) for 3-d and 4-d inputs."""
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
    if nd not in (1, 2) or mode not in _MODES:
        raise TorchRuntimeError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {x.ndim}D) for the "
                                "modes: nearest | linear | bilinear | bicubic | trilinear | lanczos | area | "
                                f"nearest-exact (got {mode})", code="invalid_argument", exception="NotImplementedError")
    need = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}.get(mode)
    if need is not None and need != nd:
        raise TorchRuntimeError(f"Got {x.ndim}D input, but {mode} mode needs {need + 2}D input",
                                code="invalid_argument", exception="NotImplementedError")
    if mode == "area":
        return adaptive_avg_pool1d(input, out[0]) if nd == 1 else adaptive_avg_pool2d(input, out)
    if x.dtype.kind != "f":
        raise TorchRuntimeError(f"\"upsample_{mode.replace('-', '_')}{nd}d\" not implemented for "
                                f"'{D.SCALAR_TYPE_NAMES[input.dtype]}'", code="invalid_dtype",
                                exception="NotImplementedError")
    ac = bool(align_corners)
    mats = [_matrix(mode, n, o, s, ac, x.dtype) for n, o, s in zip(spatial, out, scales)]
    if nd == 1:
        vals = np.matmul(x, mats[0].T)
    else:
        vals = np.matmul(np.matmul(mats[0], x), mats[1].T)
    saved = {"output_size": out, "self_sym_sizes": x.shape}
    saved.update(zip(("scales",) if nd == 1 else ("scales_h", "scales_w"), scales))
    if mode in ("linear", "bilinear", "bicubic"):
        saved["align_corners"] = ac
    return record(_PRIM[(mode, nd)], np.ascontiguousarray(vals, x.dtype), (input,), saved)


def _mats(ctx, mode: str, dtype) -> list:
    shape = ctx.self_sym_sizes
    spatial = shape[2:]
    scales = [ctx.scales] if len(spatial) == 1 else [ctx.scales_h, ctx.scales_w]
    ac = bool(getattr(ctx, "align_corners", False))
    return [Tensor(_matrix(mode, n, o, s, ac, dtype)) for n, o, s in zip(spatial, ctx.output_size, scales)]


def _declare(prim: str, mode: str, nd: int) -> None:
    slots = ("output_size", "self_sym_sizes") + (("scales",) if nd == 1 else ("scales_h", "scales_w"))
    if mode in ("linear", "bilinear", "bicubic"):
        slots = ("align_corners",) + slots

    @vjp(prim, inputs=("self",), saves=slots)
    def _(ctx, grad):
        m = _mats(ctx, mode, grad.data.dtype)
        return (matmul(grad, m[0]) if nd == 1 else matmul(matmul(m[0].t(), grad), m[1])),

    @jvp(prim)
    def _(ctx, self_t):
        m = _mats(ctx, mode, self_t.data.dtype)
        return matmul(self_t, m[0].t()) if nd == 1 else matmul(matmul(m[0], self_t), m[1].t())


for (_mode, _nd), _prim in _PRIM.items():
    _declare(_prim, _mode, _nd)
