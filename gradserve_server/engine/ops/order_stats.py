"""Medians: torch.median and torch.nanmedian, over all elements (MedianBackward0 / NanmedianBackward0: the
gradient spread evenly over the elements equal to the result) or along a dim (MedianBackward1 /
NanmedianBackward1: (values, indices), the gradient to the chosen index).

Both take the lower median (position (n - 1) // 2 of the sorted values; nanmedian counts the non-NaN ones), and
along a dim the index torch's CPU kernel reports: the one a stable sort puts at that position (among equal values
the k-th of them in order), the first NaN for median of a row holding one (its value NaN), and for nanmedian of an
all-NaN row NaN at the index libstdc++'s std::nth_element leaves first among elements none of which orders before
another (``_all_equal_nth``). Checked against torch on rows full of ties and NaNs.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..errors import TorchRuntimeError
from ..registry import P, Prim, jvp, op, record, vjp
from ..tensor import Tensor
from .common import require_tensor, saved_int, signed_int, wrap_dim
from .reduction import ValuesIndices, _evenly, _evenly_jvp, _value_selecting, _value_selecting_jvp


def _lower_median(x: np.ndarray, ignore_nan: bool):
    flat = x.reshape(-1)
    if ignore_nan:
        flat = flat[~np.isnan(flat)] if flat.dtype.kind in "fV" else flat
    elif flat.dtype.kind in "fV" and np.isnan(flat).any():
        return flat.dtype.type(np.nan)
    if flat.size == 0:
        return x.dtype.type(np.nan) if x.dtype.kind in "fV" else x.dtype.type(0)
    return np.partition(flat, (flat.size - 1) // 2)[(flat.size - 1) // 2]


@functools.cache
def _all_equal_nth(n: int) -> int:
    """The original index std::nth_element (libstdc++'s introselect, nth = first) leaves at the first position of
    n elements none of which compares less than another (torch's nanmedian of an all-NaN row)."""
    arr = list(range(n))
    first, last = 0, n
    depth = 2 * int(math.floor(math.log2(n))) if n else 0
    while last - first > 3 and depth > 0:
        depth -= 1
        # median-of-three with a comparator that is always false moves the middle element to the front
        mid = first + (last - first) // 2
        arr[first], arr[mid] = arr[mid], arr[first]
        lo, hi = first + 1, last
        while True:  # nothing is less than the pivot: every step swaps, from both ends
            hi -= 1
            if not lo < hi:
                break
            arr[lo], arr[hi] = arr[hi], arr[lo]
            lo += 1
        if lo <= first:
            first = lo
        else:
            last = lo
    return arr[first]


def _median_indices(x: np.ndarray, ax: int, ignore_nan: bool) -> np.ndarray:
    """The chosen index of each slice along ``ax`` (keepdim layout)."""
    moved = np.moveaxis(x, ax, -1)
    n = moved.shape[-1]
    if moved.dtype.kind in "fV":
        nan = np.isnan(moved)
        key = np.where(nan, np.inf, moved)
        order = np.argsort(key, axis=-1, kind="stable")  # NaNs last, in order (inf ties kept stable below)
        # a NaN and a real inf tie under this key: put every NaN after every inf
        order = np.take_along_axis(order, np.argsort(np.take_along_axis(nan, order, -1), axis=-1, kind="stable"), -1)
        count = (~nan).sum(axis=-1) if ignore_nan else np.full(moved.shape[:-1], n)
        k = np.maximum(count - 1, 0) // 2
        idx = np.take_along_axis(order, k[..., None], axis=-1)
        if not ignore_nan:
            has = nan.any(axis=-1, keepdims=True)
            idx = np.where(has, nan.argmax(axis=-1)[..., None], idx)
        else:
            idx = np.where(count[..., None] == 0, _all_equal_nth(n), idx)
    else:
        order = np.argsort(moved, axis=-1, kind="stable")
        idx = order[..., [(n - 1) // 2]]
    return np.moveaxis(idx.astype(np.int64), -1, ax)


def _median(name: str, prim0: Prim, prim1: Prim, self, dim, keepdim, ignore_nan: bool):
    self = require_tensor(self, "input", name)
    x = self.data
    if dim is None:
        value = np.asarray(_lower_median(x, ignore_nan), dtype=x.dtype)
        return record(prim0, value, (self,), {"result": "result", "self": self})
    nd = x.ndim
    d = wrap_dim(dim, nd)
    if nd == 0:
        indices = Tensor(np.zeros((), np.int64))
        values = record(prim1, x.copy(), (self,), {"dim": saved_int(dim), "indices": indices, "keepdim": keepdim,
                                                   "self_sym_sizes": x.shape})
        return ValuesIndices(values, indices)
    if x.shape[d] == 0:
        from ..errors import TorchIndexError
        raise TorchIndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.",
                              code="invalid_argument")
    idx = _median_indices(x, d, ignore_nan)
    vals = np.take_along_axis(x, idx, axis=d)
    if ignore_nan and x.dtype.kind in "fV":  # an all-NaN slice: NaN (its index stays 0)
        allnan = np.isnan(x).all(axis=d, keepdims=True)
        vals = np.where(allnan, x.dtype.type(np.nan), vals)
    if not keepdim:
        idx, vals = np.squeeze(idx, d), np.squeeze(vals, d)
    # (np.array, not np.ascontiguousarray: that makes a 0-d result 1-d)
    indices = Tensor(np.array(idx, order="C"))
    values = record(prim1, np.array(vals, order="C"), (self,),
                    {"dim": saved_int(dim), "indices": indices, "keepdim": keepdim, "self_sym_sizes": x.shape})
    return ValuesIndices(values, indices)


@op("median", promotion="same => same,int64",
    returns=("values", "indices"), returns_when="dim",
    tensors=("self",))
def median(self, dim=None, keepdim=False):
    """torch.median(input) -> the lower median; torch.median(input, dim, keepdim=False) -> (values, indices).
    A NaN makes the result NaN."""
    return _median("median", P.MedianBackward0, P.MedianBackward1, self, dim, keepdim, False)


@op("nanmedian", promotion="same => same,int64",
    returns=("values", "indices"), returns_when="dim",
    tensors=("self",))
def nanmedian(self, dim=None, keepdim=False):
    """torch.nanmedian(input[, dim, keepdim]): the lower median of the non-NaN values."""
    return _median("nanmedian", P.NanmedianBackward0, P.NanmedianBackward1, self, dim, keepdim, True)


def _selecting(ctx, grad):
    import types
    shp = ctx.self_sym_sizes
    wrapped = types.SimpleNamespace(dim=wrap_dim(signed_int(ctx.dim), len(shp)) if shp else 0, indices=ctx.indices,
                                    keepdim=ctx.keepdim, self_sym_sizes=shp)
    return _value_selecting(wrapped, grad)


def _selecting_jvp(ctx, self_t):
    import types
    shp = ctx.self_sym_sizes
    wrapped = types.SimpleNamespace(dim=wrap_dim(signed_int(ctx.dim), len(shp)) if shp else 0, indices=ctx.indices,
                                    keepdim=ctx.keepdim)
    return _value_selecting_jvp(wrapped, self_t)


for _p in ("MedianBackward0", "NanmedianBackward0"):
    vjp(_p, inputs=("self",), saves=("result", "self"))(_evenly)
    jvp()(_evenly_jvp)
for _p in ("MedianBackward1", "NanmedianBackward1"):
    vjp(_p, inputs=("self",), saves=("dim", "indices", "keepdim", "self_sym_sizes"))(_selecting)
    jvp()(_selecting_jvp)


# ----- quantile -------------------------------------------------------------------------------------------------

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(name: str, self, q, dim, keepdim: bool, interpolation: str, ignore_nan: bool):
    """torch's quantile_compute, op for op: sort the (flattened or moved) input, gather below and above the ranks,
    lerp (linear, midpoint), then torch's in-place view ops on the result (UnsqueezeBackward1, TransposeBackward1,
    SqueezeBackward4)."""
    from .elementwise import lerp
    from .reduction import sort
    from .shape import _squeeze_dim, gather, transpose, unsqueeze, view

    self = require_tensor(self, "input", name)
    x = self.data
    if x.dtype.kind not in "fV":
        raise TorchRuntimeError(f"{name}() input tensor must be either float or double dtype", code="invalid_dtype")
    if interpolation not in _INTERPOLATIONS:
        raise TorchRuntimeError(f"{name}() interpolation must be one of linear, lower, higher, midpoint or nearest, "
                                f"but got {interpolation}", code="invalid_argument")
    if isinstance(q, Tensor):
        if q.data.ndim > 1:
            raise TorchRuntimeError(f"{name}() q must be a scalar or 1D tensor", code="invalid_argument")
        if q.dtype != self.dtype:
            raise TorchRuntimeError(f"{name}() q tensor must be same dtype as the input tensor",
                                    code="dtype_mismatch")
        qv = q.data
        if qv.size and (qv.min() < 0 or qv.max() > 1):
            raise TorchRuntimeError(f"{name}() q values must be in the range [0, 1]", code="invalid_argument")
    else:
        if not 0 <= q <= 1:
            raise TorchRuntimeError(f"{name}() q must be in the range [0, 1] but got {q}", code="invalid_argument")
        qv = np.asarray(q, x.dtype)
    if x.size == 0:
        raise TorchRuntimeError(f"{name}() input tensor must be non-empty", code="invalid_argument")
    nd = x.ndim
    # the output shape torch computes (quantile_output_shape), then q's dim in front
    if dim is not None and nd > 0:
        d = wrap_dim(dim, nd)
        out_shape = list(x.shape)
        if keepdim:
            out_shape[d] = 1
        else:
            del out_shape[d]
    else:
        d = None
        out_shape = [1] * nd if keepdim else []
    out_shape.insert(0, qv.size if qv.ndim else 1)
    if d is None:
        sorted_ = sort(view(self, (-1,)), -1).values
    elif d == nd - 1:
        sorted_ = sort(self, -1).values
    else:
        sorted_ = sort(transpose(unsqueeze(self, -1), d, -1), -1).values
    in_shape = [*out_shape[1:], sorted_.data.shape[-1]]  # torch's view of the sorted input: values last
    sorted_ = view(sorted_, tuple(in_shape))
    s = sorted_.data
    qf = qv.reshape(-1).astype(x.dtype)
    nan = np.isnan(s)
    if ignore_nan:
        count = (~nan).sum(-1, keepdims=True)
        ranks = qf * (count - 1).astype(x.dtype)
        ranks = np.where(ranks < 0, x.dtype.type(0), ranks)
    else:
        last = s.shape[-1] - 1
        ranks = np.broadcast_to(qf * x.dtype.type(last), np.broadcast_shapes(qf.shape, nan.shape[:-1] + (1,)))
        ranks = np.where(nan.any(-1, keepdims=True), x.dtype.type(last), ranks)
    ranks = np.asarray(ranks, x.dtype)
    if interpolation == "lower":
        ranks = np.floor(ranks)
    elif interpolation == "higher":
        ranks = np.ceil(ranks)
    elif interpolation == "nearest":
        ranks = np.round(ranks)
    below = ranks.astype(np.int64)
    values = gather(sorted_, -1, Tensor(below))
    if interpolation in ("linear", "midpoint"):
        weights = np.full_like(ranks, 0.5) if interpolation == "midpoint" else ranks - below
        above = gather(sorted_, -1, Tensor(np.ceil(ranks).astype(np.int64)))
        w = Tensor(np.asarray(weights, x.dtype))
        if interpolation == "linear" and isinstance(q, Tensor) and q.requires_grad:
            w = _rank_weights(q, s, nan, below, ignore_nan)
        values = lerp(values, above, w)
    if qv.ndim == 0:
        return _squeeze_dim(values, values.data.ndim - 1)
    values = _unsqueeze_(values, 0)
    values = _transpose_(values, 0, values.data.ndim - 1)
    return _squeeze_dim(values, values.data.ndim - 1)


def _rank_weights(q: Tensor, s: np.ndarray, nan: np.ndarray, below: np.ndarray, ignore_nan: bool) -> Tensor:
    """The linear weights ``ranks - ranks_below`` in engine ops when q requires grad (torch differentiates
    quantile in q through them): ranks = q * (n - 1), a row holding NaN at the last rank (quantile), or
    q * (non-NaN count - 1) clamped at 0 (nanquantile)."""
    from .elementwise import masked_fill, mul
    from .shape import reshape

    dt = s.dtype
    qb = reshape(q, (-1,))
    if ignore_nan:
        count = (~nan).sum(-1, keepdims=True).astype(dt) - dt.type(1)
        ranks = mul(qb, Tensor(count))
        ranks = masked_fill(ranks, Tensor(ranks.data < 0), 0)
    else:
        last = s.shape[-1] - 1
        ranks = mul(qb, float(last)) * Tensor(np.ones(nan.shape[:-1] + (1,), dt))
        ranks = masked_fill(ranks, Tensor(np.broadcast_to(nan.any(-1, keepdims=True), ranks.data.shape).copy()),
                            float(last))
    return ranks - Tensor(below.astype(dt))


def _unsqueeze_(t: Tensor, d: int) -> Tensor:
    """torch's ``unsqueeze_`` on a fresh result: UnsqueezeBackward1."""
    return record(P.UnsqueezeBackward1, np.expand_dims(t.data, d), (t,), {"dim": d})


def _transpose_(t: Tensor, d0: int, d1: int) -> Tensor:
    """torch's ``transpose_`` on a fresh result: TransposeBackward1."""
    return record(P.TransposeBackward1, np.ascontiguousarray(np.swapaxes(t.data, d0, d1)), (t,),
                  {"dim0": d0, "dim1": saved_int(d1 - t.data.ndim)})


@vjp("UnsqueezeBackward1", inputs=("self",), saves=("dim",))
def _(ctx, grad):
    from .shape import squeeze
    return squeeze(grad, ctx.dim),


@jvp()
def _(ctx, self_t):
    from .shape import unsqueeze
    return unsqueeze(self_t, ctx.dim)


@vjp("TransposeBackward1", inputs=("self",), saves=("dim0", "dim1"))
def _(ctx, grad):
    from .shape import transpose
    return transpose(grad, ctx.dim0, signed_int(ctx.dim1)),


@jvp()
def _(ctx, self_t):
    from .shape import transpose
    return transpose(self_t, ctx.dim0, signed_int(ctx.dim1))


#: torch's overloads of quantile and nanquantile (q a tensor or a float)
_QUANTILE = {
    "function": ('(Tensor input, Tensor q, int dim = None, bool keepdim = False, *, str interpolation = "linear", '
                 'Tensor out = None)',
                 '(Tensor input, float q, int dim = None, bool keepdim = False, *, str interpolation = "linear", '
                 'Tensor out = None)'),
    "method": ('(Tensor q, int dim = None, bool keepdim = False, *, str interpolation = "linear")',
               '(float q, int dim = None, bool keepdim = False, *, str interpolation = "linear")')}


@op("quantile", overloads=_QUANTILE, tensors=("self", "q"), grad_fns=(P.SqueezeBackward4,))
def quantile(self, q, dim=None, keepdim=False, interpolation="linear"):
    """torch.quantile(input, q, dim=None, keepdim=False, *, interpolation='linear'): q a number or a 1-D tensor
    (its dim first in the result); NaN where a slice holds one."""
    return _quantile("quantile", self, q, dim, keepdim, interpolation, False)


@op("nanquantile", overloads=_QUANTILE, tensors=("self", "q"), grad_fns=(P.SqueezeBackward4,))
def nanquantile(self, q, dim=None, keepdim=False, interpolation="linear"):
    """torch.nanquantile(...): the quantile of the non-NaN values (NaN for a slice of NaNs only)."""
    return _quantile("nanquantile", self, q, dim, keepdim, interpolation, True)
