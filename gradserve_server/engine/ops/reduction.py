"""Reductions: sum, mean, prod, max/min, amax/amin, argmax/argmin, logsumexp, var, std, norm, cumsum,
sort, and ``sum_to`` (the engine's single un-broadcasting step)."""

from __future__ import annotations

import math
import warnings
from collections import namedtuple

import numpy as np

from .. import dtypes as D
from ..batching import batching, shifted
from ..errors import InvalidArgumentError, TorchIndexError, TorchRuntimeError
from ..grad_mode import emit_warning
from ..kernel import kcall
from ..registry import OPS, F, P, broken_check, jvp, op, record, vjp, weighted_tangent
from ..tensor import Tensor
from .common import DIM_FIRST, NOT_GIVEN, NP, float_dtype, require_tensor, row_major, wrap_dim, wrap_dims
from .elementwise import abs as abs_
from .elementwise import div_number, eq, exp, masked_fill, sign
from .shape import expand, expand_to, reshape, unsqueeze


def _dims(dim, ndim: int):
    """None -> all dims; an int or a list/tuple -> wrapped dims (torch: an empty list means all)."""
    if dim is None:
        return None
    if isinstance(dim, (list, tuple)):
        if len(dim) == 0:
            return None
        return wrap_dims(dim, ndim)
    return (wrap_dim(dim, ndim),)


def _axis(dims, ndim):
    if ndim == 0:
        return None
    return dims


def _restore(grad: Tensor, dims, ndim: int, keepdim: bool) -> Tensor:
    """Unsqueeze reduced dims back (torch's restore_reduced_dims / unsqueeze_multiple)."""
    if keepdim or ndim == 0:
        return grad
    if dims is None:
        return reshape(grad, (1,) * ndim)
    out = grad
    for d in sorted(dims):
        out = unsqueeze(out, d)
    return out


def _acc_dtype(t: Tensor, dtype) -> str:
    if dtype is not None:
        return D.canonical(dtype)
    return D.INT64 if t.data.dtype.kind in "iub" else t.dtype


def _sum_kernel(x, axis, keepdim, dtype):
    # np.sum without its dispatch layer; contiguous as torch allocates it (numpy keeps the input's layout)
    return _c(np.asarray(np.add.reduce(x, axis=axis, keepdims=keepdim, dtype=dtype), dtype=dtype))


@op("sum", promotion="long",
    checks=("reduce_dims_unique(self,dim) | RuntimeError: dim {dim} appears multiple times in the list of dims",),
    overloads={
        "function": (
            "(Tensor input, *, torch.dtype dtype = None)",
            "(Tensor input, tuple of ints dim, bool keepdim = False, *, torch.dtype dtype = None, Tensor out = None)",
        ),
        "method": (
            "(*, torch.dtype dtype = None)",
            "(tuple of ints dim, bool keepdim = False, *, torch.dtype dtype = None)",
        ),
    },
    tensors=("self",), plannable=True)
def sum(self, dim=None, keepdim=False, dtype=None):
    """torch.sum(input, dim=None, keepdim=False, dtype=None): SumBackward0 without dim, SumBackward1 with."""
    self = require_tensor(self)
    nd = self.data.ndim
    out_dt = NP[_acc_dtype(self, dtype)]
    dims = _dims(dim, nd)
    if dim is None and not keepdim:  # sum(x, None, keepdim=True) is the dim overload over every dim
        out = kcall(_sum_kernel, self.data, None, False, out_dt)
        return record(P.SumBackward0, out, (self,), {"self_sym_sizes": self.data.shape})
    out = kcall(_sum_kernel, self.data, _axis(dims, nd), keepdim, out_dt)
    return record(P.SumBackward1, out, (self,),
                  {"dim": list(dims) if dims is not None else [], "keepdim": keepdim,
                   "self_sym_sizes": self.data.shape})


@vjp("SumBackward0", inputs=("self",), saves=("self_sym_sizes",))
def _(ctx, grad):
    return expand_to(grad, ctx.self_sym_sizes),


@jvp()
def _(ctx, self_t):
    return sum(self_t)


@vjp("SumBackward1", inputs=("self",), saves=("dim", "keepdim", "self_sym_sizes"))
def _(ctx, grad):
    shp = ctx.self_sym_sizes
    dims = tuple(ctx.dim) if ctx.dim else None
    return expand_to(_restore(grad, dims, len(shp), ctx.keepdim), shp),


@jvp()
def _(ctx, self_t):
    return sum(self_t, ctx.dim or None, keepdim=ctx.keepdim)


def _restore_batched(grad: Tensor, ctx, batch: int) -> Tensor:
    """The reduced dims of every entry of a batched gradient put back, expanded to the input's sizes."""
    shp = ctx.self_sym_sizes
    dims = ctx.__dict__.get("dim") or range(len(shp))
    if not ctx.__dict__.get("keepdim") and shp:
        grad = reshape(grad, (batch, *(1 if d in dims else n for d, n in enumerate(shp))))
    return expand(grad, (batch, *shp))


def _reduced_dims(ctx, t: Tensor) -> list:
    """The dims a reduction took, moved past the batch of tangent ``t``."""
    dims = ctx.__dict__.get("dim") or range(t.data.ndim - 1)
    return [d + 1 if d >= 0 else d for d in dims]


batching(P.SumBackward0, vjp=lambda ctx, grad, batch: (_restore_batched(grad, ctx, batch),),
         jvp=lambda ctx, batch, t: sum(t, _reduced_dims(ctx, t)) if t.data.ndim > 1 else t)
batching(P.SumBackward1, vjp=lambda ctx, grad, batch: (_restore_batched(grad, ctx, batch),),
         jvp=lambda ctx, batch, t: sum(t, _reduced_dims(ctx, t), keepdim=ctx.keepdim) if t.data.ndim > 1 else t)


_c = row_major  # (a reduction's result: contiguous, as torch allocates it)


@op("mean", promotion=(
    "same | "
    "integral: RuntimeError: mean(): could not infer output dtype. Input dtype must be either a floating point or "
    "complex dtype. Got: {dtype}"),
    overloads={
        "function": (
            "(Tensor input, *, torch.dtype dtype = None, Tensor out = None)",
            "(Tensor input, tuple of ints dim, bool keepdim = False, *, torch.dtype dtype = None, Tensor out = None)",
        ),
        "method": (
            "(*, torch.dtype dtype = None)",
            "(tuple of ints dim, bool keepdim = False, *, torch.dtype dtype = None)",
        ),
    },
    tensors=("self",), plannable=True)
def mean(self, dim=None, keepdim=False, dtype=None):
    """torch.mean(input, dim=None, keepdim=False); integer inputs are refused as in torch."""
    self = require_tensor(self)
    out_dtype = D.canonical(dtype) if dtype is not None else self.dtype
    if not D.is_floating(out_dtype):  # torch names the dtype it could not use: the one asked for, else input's
        which = "Optional" if dtype is not None else "Input"
        raise TorchRuntimeError(f"mean(): could not infer output dtype. {which} dtype must be either a floating "
                                f"point or complex dtype. Got: {D.SCALAR_TYPE_NAMES[out_dtype]}", code="invalid_dtype")
    nd = self.data.ndim
    dims = _dims(dim, nd)
    if dim is None and not keepdim:  # mean(x, None, keepdim=True): the dim overload over every dim
        out = kcall(_mean_all, self.data, NP[out_dtype])
        return record(P.MeanBackward0, out, (self,),
                      {"self_sym_numel": int(self.data.size), "self_sym_sizes": self.data.shape})
    out = kcall(_mean_dims, self.data, NP[out_dtype], _axis(dims, nd), keepdim)
    return record(P.MeanBackward1, out, (self,),
                  {"dim": list(dims) if dims is not None else [], "keepdim": keepdim,
                   "self_sym_numel": int(self.data.size), "self_sym_sizes": self.data.shape})


_F32, _F64 = NP[D.FLOAT32], NP[D.FLOAT64]


def _mean_all(x, dtype):
    x = x.astype(dtype, copy=False)
    dt, n = x.dtype, x.size
    if not n:
        return np.asarray(np.nan, dtype=dt)
    with np.errstate(invalid="ignore", divide="ignore"):
        if dt is _F32 or dt is _F64:
            # np.mean's own steps for a float32/float64 array, bit for bit, without its dispatch layers (a replay's
            # path): the sum in the array's dtype, over the count as an intp (in float64), rounded to the dtype
            s = np.add.reduce(x, axis=None)
            return np.asarray(s.dtype.type(s / np.intp(n)), dtype=dt)
        return np.asarray(np.mean(x), dtype=dt)


def _mean_dims(x, dtype, axis, keepdim):
    x = x.astype(dtype, copy=False)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _c(np.asarray(np.mean(x, axis=axis, keepdims=keepdim), dtype=x.dtype))


@vjp("MeanBackward0", inputs=("self",), saves=("self_sym_numel", "self_sym_sizes"))
def _(ctx, grad):
    return div_number(expand_to(grad, ctx.self_sym_sizes), ctx.self_sym_numel),  # grad.expand(sizes) / numel


@jvp()
def _(ctx, self_t):
    return mean(self_t)


@vjp("MeanBackward1", inputs=("self",), saves=("dim", "keepdim", "self_sym_numel", "self_sym_sizes"))
def _(ctx, grad):
    shp = ctx.self_sym_sizes
    dims = tuple(ctx.dim) if ctx.dim else None
    n = 1
    if shp:  # a 0-d input reduced over dim 0 is its own mean
        for d in (dims if dims is not None else range(len(shp))):
            n *= shp[d]
    return div_number(expand_to(_restore(grad, dims, len(shp), ctx.keepdim), shp), n),  # sum_backward(...) / n


@jvp()
def _(ctx, self_t):
    return mean(self_t, ctx.dim or None, keepdim=ctx.keepdim)


def _mean_batched_vjp(ctx, grad, batch):
    n = 1
    for s in (ctx.self_sym_sizes[d] for d in ctx.__dict__.get("dim") or range(len(ctx.self_sym_sizes))):
        n *= s
    return _restore_batched(grad, ctx, batch) / n,


batching(P.MeanBackward0, vjp=_mean_batched_vjp,
         jvp=lambda ctx, batch, t: mean(t, _reduced_dims(ctx, t)) if t.data.ndim > 1 else t)
batching(P.MeanBackward1, vjp=_mean_batched_vjp,
         jvp=lambda ctx, batch, t: mean(t, _reduced_dims(ctx, t), keepdim=ctx.keepdim) if t.data.ndim > 1 else t)


@op("prod", promotion="long",
    overloads={
        "function": (
            "(Tensor input, *, torch.dtype dtype = None)",
            "(Tensor input, int dim, bool keepdim = False, *, torch.dtype dtype = None, Tensor out = None)",
        ),
        "method": ("(*, torch.dtype dtype = None)", "(int dim, bool keepdim = False, *, torch.dtype dtype = None)"),
    },
    tensors=("self",))
def prod(self, dim=None, keepdim=False, dtype=None):
    """torch.prod(input, dim=None, keepdim=False)."""
    self = require_tensor(self)
    out_dt = NP[_acc_dtype(self, dtype)]
    if dim is None:
        out = _half_prod(self.data, None, False) if D.is_half(out_dt) and self.data.dtype == out_dt else \
            np.asarray(np.prod(self.data, dtype=out_dt), dtype=out_dt)
        return record(P.ProdBackward0, out, (self,), {"result": "result", "self": self})
    d = wrap_dim(dim, self.data.ndim)
    if D.is_half(out_dt) and self.data.dtype == out_dt and self.data.ndim:
        out = _half_prod(self.data, d, keepdim)
    else:
        out = np.asarray(np.prod(self.data, axis=d if self.data.ndim else None, keepdims=keepdim, dtype=out_dt))
    return record(P.ProdBackward1, _c(out), (self,), {"dim": d, "keepdim": keepdim, "result": "result", "self": self})


def _half_prod(x: np.ndarray, axis, keepdim: bool) -> np.ndarray:
    """torch's float16/bfloat16 prod: a running product rounded at each step (not float32's)."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    if x.shape[axis] == 0:
        return np.ones(np.delete(x.shape, axis) if not keepdim else
                       tuple(1 if i == axis else n for i, n in enumerate(x.shape)), x.dtype)
    out = np.take(np.multiply.accumulate(x, axis=axis), [x.shape[axis] - 1], axis=axis)
    return np.array(out if keepdim else np.squeeze(out, axis), order="C")


def _prod_safe_zeros_backward(grad: Tensor, x: Tensor, d: int) -> Tensor:
    """FunctionsManual's prod_safe_zeros_backward: grad times the product of the other elements along d, as
    the exclusive cumulative products from both ends (engine ops: exact with zeros, differentiable again)."""
    from .creation import ones
    from .shape import cat, narrow
    n = x.shape[d]
    ones_shape = list(x.shape)
    ones_shape[d] = 1
    one = ones(*ones_shape, dtype=x.dtype)
    before = F.cumprod(cat([one, narrow(x, d, 0, n - 1)], d), d)
    after = flip(F.cumprod(cat([one, flip(narrow(x, d, 1, n - 1), [d])], d), d), [d])
    return grad * (before * after)


@vjp("ProdBackward0", inputs=("self",), saves=("result", "self"))
def _(ctx, grad):
    x = ctx.self
    if x.data.ndim == 0:
        return grad,
    if not np.any(x.data == 0):
        return grad * (ctx.result / x),
    return reshape(_prod_safe_zeros_backward(grad, reshape(x, (-1,)), 0), x.shape),


@jvp()
def _(ctx, self_t):
    return sum(weighted_tangent(ctx, self_t))


@vjp("ProdBackward1", inputs=("self",), saves=("dim", "keepdim", "result", "self"))
def _(ctx, grad):
    x = ctx.self
    nd = x.data.ndim
    if nd == 0:
        return grad,
    g = _restore(grad, (ctx.dim,), nd, ctx.keepdim)
    if not np.any(x.data == 0):
        return g * (_restore(ctx.result, (ctx.dim,), nd, ctx.keepdim) / x),
    return _prod_safe_zeros_backward(g, x, ctx.dim),


@jvp()
def _(ctx, self_t):
    return _sum_dims(weighted_tangent(ctx, self_t), (ctx.dim,), ctx.keepdim)


ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


def _max_min(self, dim, keepdim, other, is_max: bool):
    self = require_tensor(self)
    if isinstance(dim, Tensor) and other is None:
        dim, other = None, dim
    if other is not None:
        from .elementwise import maximum, minimum
        return maximum(self, other) if is_max else minimum(self, other)
    if dim is None:
        if self.data.size == 0:
            raise broken_check("max" if is_max else "min", self=self)
        out = np.asarray(np.max(self.data) if is_max else np.min(self.data))
        if self.data.dtype.kind in "fV" and np.isnan(self.data).any():
            out = np.asarray(np.nan, self.data.dtype)
        return record(P.MaxBackward1 if is_max else P.MinBackward1, out, (self,), {"result": "result", "self": self})
    nd = self.data.ndim
    d = wrap_dim(dim, nd)
    if nd and self.data.shape[d] == 0:
        raise broken_check("max" if is_max else "min", self=self, dim=dim)
    ax = d if nd else None
    idx = np.argmax(self.data, axis=ax, keepdims=keepdim) if is_max else np.argmin(self.data, axis=ax, keepdims=keepdim)
    idx = np.asarray(idx, dtype=np.int64)
    vals = np.take_along_axis(self.data, idx if keepdim or not nd else np.expand_dims(idx, d), axis=d) if nd \
        else self.data.copy()
    if nd and not keepdim:
        vals = np.squeeze(vals, axis=d)
    indices = Tensor(_c(idx))
    values = record(P.MaxBackward0 if is_max else P.MinBackward0, _c(np.asarray(vals)), (self,),
                    {"dim": d, "indices": indices, "keepdim": keepdim, "self_sym_sizes": self.data.shape})
    return ValuesIndices(values, indices)


#: torch's overloads of max and min (one binding each, alike)
_MAX_MIN_OVERLOADS = {
    "function": (
        "(Tensor input, *, Tensor out = None)",
        "(Tensor input, Tensor other, *, Tensor out = None)",
        "(Tensor input, int dim, bool keepdim = False, *, tuple of Tensors out = None)",
    ),
    "method": ("()", "(Tensor other)", "(int dim, bool keepdim = False)"),
}


@op("max", promotion="result_type(self,dim,other) => same,int64", checks=(  # (max(x, y) passes y in dim's place)
    "nonempty(self) unless dim,other | RuntimeError: max(): Expected reduction dim to be specified for input.numel() "
    "== 0. Specify the reduction dim with the 'dim' argument.",
    "nonempty_dim(self,dim) | IndexError: max(): Expected reduction dim {dim} to have non-zero size."),
    overloads=_MAX_MIN_OVERLOADS,
    returns=("values", "indices"), returns_when="dim",
    tensors=("self", "dim", "other"), grad_fns=(P.MaxBackward1, P.MaxBackward0, P.MaximumBackward0))
def max(self, dim=None, keepdim=False, other=None):
    """torch.max(input) (MaxBackward1, ties split evenly), torch.max(input, dim, keepdim) -> (values, indices)
    (MaxBackward0), torch.max(input, other) -> maximum (``other`` by keyword or in dim's position)."""
    return _max_min(self, dim, keepdim, other, True)


@op("min", promotion="result_type(self,dim,other) => same,int64", checks=(
    "nonempty(self) unless dim,other | RuntimeError: min(): Expected reduction dim to be specified for input.numel() "
    "== 0. Specify the reduction dim with the 'dim' argument.",
    "nonempty_dim(self,dim) | IndexError: min(): Expected reduction dim {dim} to have non-zero size."),
    overloads=_MAX_MIN_OVERLOADS,
    returns=("values", "indices"), returns_when="dim",
    tensors=("self", "dim", "other"), grad_fns=(P.MinBackward1, P.MinBackward0, P.MinimumBackward0))
def min(self, dim=None, keepdim=False, other=None):
    """torch.min: see max."""
    return _max_min(self, dim, keepdim, other, False)


def _sum_dims(t: Tensor, dims, keepdim: bool) -> Tensor:
    """Sum over ``dims`` (None: all) -- how a reduction's JVP brings weighted tangents to its output. A None
    tangent (the VJP has no derivative: vector_norm's ord 0) stays None, a zero tangent."""
    if t is None or t.data.ndim == 0:
        return t
    return sum(t, list(dims) if dims else None, keepdim=keepdim) if dims else sum(t)


def _reduce_jvp(ctx, self_t):
    """amax/amin, logsumexp, var, std, vector_norm: the VJP's all-ones weights times the tangent, summed
    over the reduced dims."""
    dims = tuple(ctx.dim) if ctx.dim else None
    return _sum_dims(weighted_tangent(ctx, self_t), dims, ctx.keepdim)


def _evenly_jvp(ctx, self_t):
    return sum(weighted_tangent(ctx, self_t))


def _value_selecting_jvp(ctx, self_t):
    """max/min(dim): the tangent at the selected indices (torch's gather_with_keepdimed_indices)."""
    from .shape import gather
    if self_t.data.ndim == 0:
        return self_t
    d = ctx.dim
    idx = ctx.indices if ctx.keepdim else unsqueeze(ctx.indices, d)
    out = gather(self_t, d, idx)
    return out if ctx.keepdim else out.squeeze(d)


def _evenly(ctx, grad):
    x, r = ctx.self, ctx.result
    mask = eq(x, r) if not np.isnan(r.data).any() else Tensor(np.isnan(x.data))
    count = int(mask.data.sum())
    # FunctionsManual evenly_distribute_backward: grad.new_zeros(sizes).masked_fill_(mask, grad / mask.sum())
    zeros = Tensor(np.zeros(x.data.shape, grad.data.dtype))
    return masked_fill(zeros, mask, div_number(grad, count)),


vjp("MaxBackward1", inputs=("self",), saves=("result", "self"))(_evenly)
jvp(P.MaxBackward1)(_evenly_jvp)
vjp("MinBackward1", inputs=("self",), saves=("result", "self"))(_evenly)
jvp(P.MinBackward1)(_evenly_jvp)


def _value_selecting(ctx, grad):
    shp = ctx.self_sym_sizes
    d = ctx.dim
    idx = ctx.indices.data
    nd = len(shp)
    if nd == 0:
        return grad,
    if not ctx.keepdim:
        idx = np.expand_dims(idx, d)
        grad = unsqueeze(grad, d)
    return _scatter_into_zeros(grad, shp, d, idx),


def _scatter_into_zeros(src: Tensor, shape: tuple, dim: int, index: np.ndarray) -> Tensor:
    from .shape import _index_put_zeros
    grids = list(np.indices(index.shape, sparse=True))
    grids[dim] = index
    return _index_put_zeros(src, shape, [Tensor(np.asarray(g)) for g in grids], P.ScatterBackward0)


vjp("MaxBackward0", inputs=("self",), saves=("dim", "indices", "keepdim", "self_sym_sizes"))(_value_selecting)
jvp(P.MaxBackward0)(_value_selecting_jvp)
vjp("MinBackward0", inputs=("self",), saves=("dim", "indices", "keepdim", "self_sym_sizes"))(_value_selecting)
jvp(P.MinBackward0)(_value_selecting_jvp)


def _amax_amin(self, dim, keepdim, is_max):
    self = require_tensor(self)
    nd = self.data.ndim
    dims = _dims(dim, nd) if dim != () else None
    name = "amax" if is_max else "amin"
    if self.data.size == 0:  # torch's empty-reduction checks, before numpy's ValueError
        if dims is None:
            raise TorchRuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                                    f"Specify the reduction dim with the 'dim' argument.", code="empty_reduction")
        for d in dims:
            if nd and self.data.shape[d] == 0:
                raise TorchIndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.",
                                      code="empty_reduction")
    fn = np.max if is_max else np.min
    out = np.asarray(fn(self.data, axis=_axis(dims, nd), keepdims=keepdim))
    return record(P.AmaxBackward0 if is_max else P.AminBackward0, _c(out), (self,),
                  {"dim": list(dims) if dims is not None else [], "keepdim": keepdim, "result": "result",
                   "self": self})


@op("amax", promotion="same",
    param_types={"dim": "tuple of ints", "keepdim": "bool"},
    tensors=("self",), grad_fns=(P.AmaxBackward0,))
def amax(self, dim=(), keepdim=False):
    """torch.amax(input, dim=(), keepdim=False); ties split evenly."""
    return _amax_amin(self, dim, keepdim, True)


@op("amin", promotion="same",
    param_types={"dim": "tuple of ints", "keepdim": "bool"},
    tensors=("self",), grad_fns=(P.AminBackward0,))
def amin(self, dim=(), keepdim=False):
    """torch.amin(input, dim=(), keepdim=False); ties split evenly."""
    return _amax_amin(self, dim, keepdim, False)


def _amax_backward(ctx, grad):
    x = ctx.self
    nd = x.data.ndim
    dims = tuple(ctx.dim) if ctx.dim else None
    r = _restore(ctx.result, dims, nd, ctx.keepdim)
    g = _restore(grad, dims, nd, ctx.keepdim)
    mask = _to_float(eq(r, x), x.dtype)
    count = sum(mask, list(dims), keepdim=True) if dims else sum(mask)
    return (g / count) * mask,


def _to_float(mask: Tensor, dtype: str) -> Tensor:
    return Tensor(mask.data.astype(NP[dtype]))


vjp("AmaxBackward0", inputs=("self",), saves=("dim", "keepdim", "result", "self"))(_amax_backward)
jvp(P.AmaxBackward0)(_reduce_jvp)
vjp("AminBackward0", inputs=("self",), saves=("dim", "keepdim", "result", "self"))(_amax_backward)
jvp(P.AminBackward0)(_reduce_jvp)


def _arg_checks(name: str) -> tuple:
    """argmax's and argmin's refusals of a dim out of range, of an empty input: without a dim, or along an empty
    dim."""
    return (DIM_FIRST, f"nonempty(self) unless dim | IndexError: {name}(): Expected reduction dim to be specified for "
            "input.numel() == 0.",
            f"nonempty_dim(self,dim) | IndexError: {name}(): Expected reduction dim {{dim}} to have non-zero size.")


def _arg(self, dim, keepdim, is_max):
    self = require_tensor(self)
    fn = np.argmax if is_max else np.argmin
    if self.data.size == 0 and (dim is None or not self.data.shape[wrap_dim(dim, self.data.ndim)]):
        raise broken_check("argmax" if is_max else "argmin", self=self, dim=dim)
    if dim is None:
        out = np.asarray(fn(self.data), dtype=np.int64)
        if keepdim:
            out = out.reshape((1,) * self.data.ndim)
        return Tensor(out)
    d = wrap_dim(dim, self.data.ndim)
    return Tensor(np.asarray(fn(self.data, axis=d if self.data.ndim else None, keepdims=keepdim), dtype=np.int64))


@op("argmax", promotion="int64 | bool: RuntimeError: argmax(): does not support bool input",
    checks=("dtype(self)=!bool | RuntimeError: argmax(): does not support bool input",  # (before the dim's range)
            *_arg_checks("argmax")),
    param_types={"dim": "int", "keepdim": "bool"},
    tensors=("self",), differentiable=False)
def argmax(self, dim=None, keepdim=False):
    """torch.argmax(input, dim=None, keepdim=False): int64, no grad."""
    self = require_tensor(self)
    if self.data.dtype == np.bool_:
        raise broken_check("argmax", self=self)
    return _arg(self, dim, keepdim, True)


@op("argmin", promotion="int64 | bool: RuntimeError: argmin(): does not support bool input",
    checks=("dtype(self)=!bool | RuntimeError: argmin(): does not support bool input",  # (before the dim's range)
            *_arg_checks("argmin")),
    param_types={"dim": "int", "keepdim": "bool"},
    tensors=("self",), differentiable=False)
def argmin(self, dim=None, keepdim=False):
    """torch.argmin(input, dim=None, keepdim=False): int64, no grad."""
    self = require_tensor(self)
    if self.data.dtype == np.bool_:
        raise broken_check("argmin", self=self)
    return _arg(self, dim, keepdim, False)


@op("logsumexp", promotion="float",
    param_types={"dim": "tuple of ints", "keepdim": "bool"}, exports=("torch.special.logsumexp",),
    tensors=("self",))
def logsumexp(self, dim, keepdim=False):
    """torch.logsumexp(input, dim, keepdim=False)."""
    self = require_tensor(self)
    nd = self.data.ndim
    dims = _dims(dim, nd)
    x = self.data.astype(NP[float_dtype(self)], copy=False)
    ax = _axis(dims, nd)
    m = np.max(x, axis=ax, keepdims=True) if x.size else np.zeros((1,) * nd, x.dtype)
    m = np.where(np.isfinite(m), m, x.dtype.type(0))
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - m), axis=ax, keepdims=True)) + m
    if not keepdim:
        out = np.squeeze(out, axis=ax) if nd else out.reshape(())
    return record(P.LogsumexpBackward0, _c(np.asarray(out, x.dtype)), (self,),
                  {"dim": list(dims) if dims is not None else list(range(nd)), "keepdim": keepdim,
                   "result": "result", "self": self})


@vjp("LogsumexpBackward0", inputs=("self",), saves=("dim", "keepdim", "result", "self"))
def _(ctx, grad):
    x = ctx.self
    nd = x.data.ndim
    dims = tuple(ctx.dim) if ctx.dim else None
    g = _restore(grad, dims, nd, ctx.keepdim)
    r = _restore(ctx.result, dims, nd, ctx.keepdim)
    return g * exp(x - r),


@jvp()
def _(ctx, self_t):
    """torch's logsumexp_jvp: sum(e * t) / sum(e), e = exp(x - amax(x)); an empty reduction is 0 / 0, NaN."""
    x = ctx.self
    dims = tuple(ctx.dim) if ctx.dim else None
    e = exp(x - amax(x, dims or (), keepdim=True)) if x.data.size else exp(x)
    return _sum_dims(e * self_t, dims, ctx.keepdim) / _sum_dims(e, dims, ctx.keepdim)


def _correction(unbiased, correction) -> tuple:
    """Returns (numeric correction, value saved as _saved_correction)."""
    if correction is not None:
        return correction, correction
    if unbiased is None:
        return 1, None
    return (1 if unbiased else 0), (1 if unbiased else 0)


def _var_forward(self: Tensor, dim, correction, keepdim):
    """(dims, the variance in the computation dtype: float32 for float16/bfloat16, rounded by the caller)."""
    if not D.is_floating(self.dtype):  # (torch checks the dtype before the dims)
        raise TorchRuntimeError("std and var only support floating point and complex dtypes", code="invalid_dtype")
    nd = self.data.ndim
    dims = _dims(dim, nd)
    x = self.data.astype(D.compute_dtype(self.data.dtype), copy=False)
    ax = _axis(dims, nd)
    n = x.size if dims is None or nd == 0 else int(np.prod([x.shape[d] for d in dims]))
    dof = n - correction
    if dof <= 0:
        emit_warning("var(): degrees of freedom is <= 0. Correction should be strictly less than the reduction "
                     "factor (input numel divided by output numel).")
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = np.mean(x, axis=ax, keepdims=True) if x.size else np.zeros((1,) * nd, x.dtype)
        dev = x - mu
        ssq = np.sum(dev * dev, axis=ax, keepdims=keepdim)
        out = ssq / x.dtype.type(dof if dof > 0 else 0)  # torch: n <= correction divides by 0 (inf, or nan for 0/0)
    return dims, np.asarray(out, x.dtype)


def _var_backward(grad: Tensor, x: Tensor, dims, correction, keepdim) -> Tensor:
    from .reduction import mean as mean_
    nd = x.data.ndim
    g = _restore(grad, dims, nd, keepdim)
    if dims is None or nd == 0:  # torch's var_backward: no dof <= 0 division, inf (or nan where x == mean)
        dof = x.data.size - correction
        if dof <= 0:
            from .elementwise import where
            mu = mean_(x)
            return g * where(eq(x, mu), math.nan, math.inf)
        return (2.0 / dof) * g * (x - mean_(x))
    dof = int(np.prod([x.data.shape[d] for d in dims])) - correction
    scale = 2.0 / dof if dof != 0 else math.inf
    return scale * g * (x - mean_(x, list(dims), keepdim=True))


#: torch's overloads of var and std (dims with unbiased, dims with correction, unbiased alone)
_VARIANCE = {
    "function": ("(Tensor input, tuple of ints dim, bool unbiased = True, bool keepdim = False, *, Tensor out = None)",
                 "(Tensor input, tuple of ints dim = None, *, Number correction = None, bool keepdim = False, "
                 "Tensor out = None)",
                 "(Tensor input, bool unbiased = True)"),
    "method": ("(tuple of ints dim, bool unbiased = True, bool keepdim = False)",
               "(tuple of ints dim = None, *, Number correction = None, bool keepdim = False)",
               "(bool unbiased = True)")}


@op("var", promotion=(
    "same | "
    "integral: RuntimeError: std and var only support floating point and complex dtypes"),
    overloads=_VARIANCE, tensors=("self",))
def var(self, dim=None, unbiased=None, keepdim=False, correction=None):
    """torch.var(input, dim=None, unbiased=True, keepdim=False, correction=None): unbiased by default."""
    if isinstance(dim, bool):  # torch.var(input, unbiased): the (Tensor input, bool unbiased) overload
        dim, unbiased = None, dim
    self = require_tensor(self)
    corr, saved_corr = _correction(unbiased, correction)
    dims, out = _var_forward(self, dim, corr, keepdim)
    return record(P.VarBackward0, _c(out.astype(self.data.dtype, copy=False)), (self,),
                  {"correction": saved_corr, "dim": list(dims) if dims is not None else None, "keepdim": keepdim,
                   "self": self})


@vjp("VarBackward0", inputs=("self",), saves=("correction", "dim", "keepdim", "self"))
def _(ctx, grad):
    corr = 1 if ctx.correction is None else ctx.correction
    dims = tuple(ctx.dim) if ctx.dim else None
    return _var_backward(grad, ctx.self, dims, corr, ctx.keepdim),


jvp(P.VarBackward0)(_reduce_jvp)


@op("std", promotion=(
    "same | "
    "integral: RuntimeError: std and var only support floating point and complex dtypes"),
    overloads=_VARIANCE, tensors=("self",))
def std(self, dim=None, unbiased=None, keepdim=False, correction=None):
    """torch.std(input, dim=None, unbiased=True, keepdim=False, correction=None)."""
    if isinstance(dim, bool):  # torch.std(input, unbiased): the (Tensor input, bool unbiased) overload
        dim, unbiased = None, dim
    self = require_tensor(self)
    corr, saved_corr = _correction(unbiased, correction)
    dims, out = _var_forward(self, dim, corr, keepdim)
    return record(P.StdBackward0, _c(np.sqrt(out).astype(self.data.dtype, copy=False)), (self,),
                  {"correction": saved_corr, "dim": list(dims) if dims is not None else None, "keepdim": keepdim,
                   "result": "result", "self": self})


@vjp("StdBackward0", inputs=("self",), saves=("correction", "dim", "keepdim", "result", "self"))
def _(ctx, grad):
    corr = 1 if ctx.correction is None else ctx.correction
    dims = tuple(ctx.dim) if ctx.dim else None
    r = ctx.result
    # FunctionsManual std_backward: var_backward of (grad / (2 * result)).masked_fill_(result == 0, 0)
    return _var_backward(masked_fill(grad / (r * 2), eq(r, 0), 0), ctx.self, dims, corr, ctx.keepdim),


jvp(P.StdBackward0)(_reduce_jvp)


@op("norm", functions=("norm",), methods=("norm",), promotion=(
    "same | "
    "integral: RuntimeError: linalg.vector_norm: Expected a floating point or complex tensor as input. Got {dtype}"),
    python_attribute=("layout", ("self",)), exports=("torch.linalg.vector_norm", "torch.linalg.norm"),
    tensors=("self",), grad_fns=(P.LinalgVectorNormBackward0, P.SumBackward1, P.PermuteBackward0),
    aliases=("vector_norm",))
def norm(self, p=2, dim=None, keepdim=False):
    """torch.norm / torch.linalg.vector_norm(input, ord=2, dim=None, keepdim=False); torch.norm's 'nuc' (and
    'fro' over more than two dims) is linalg.matrix_norm's."""
    self = require_tensor(self)
    if not D.is_floating(self.dtype):
        raise TorchRuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                                f"{D.SCALAR_TYPE_NAMES[self.dtype]}", code="invalid_dtype")
    if isinstance(p, str):
        p = {"inf": np.inf, "-inf": -np.inf}.get(p, p)
    if p == "fro" and (dim is None or isinstance(dim, int) or len(dim) <= 2):
        p = 2
    elif isinstance(p, str):  # torch.norm's other string orders ('nuc', and 'fro' over >2 dims): a matrix norm
        return OPS["linalg.matrix_norm"].fn(self, p, (-2, -1) if dim is None else dim, keepdim)
    if not isinstance(p, (int, float)):
        raise InvalidArgumentError(f"norm(): p must be a number, got {p!r}")
    nd = self.data.ndim
    dims = _dims(dim, nd)
    ax = _axis(dims, nd)
    if (p < 0 or p == np.inf) and self.data.size == 0:
        _no_identity_norm(self, p, dim, dims)
    a = np.abs(self.data).astype(D.compute_dtype(self.data.dtype), copy=False)  # float16/bfloat16: in float32
    if p == 2:
        out = np.sqrt(np.sum(a * a, axis=ax, keepdims=keepdim))
    elif p == 1:
        out = np.sum(a, axis=ax, keepdims=keepdim)
    elif p == np.inf:
        out = np.max(a, axis=ax, keepdims=keepdim)
    elif p == -np.inf:
        out = np.min(a, axis=ax, keepdims=keepdim)
    elif p == 0:
        out = np.sum(a != 0, axis=ax, keepdims=keepdim).astype(a.dtype)
    else:
        out = np.power(np.sum(np.power(a, a.dtype.type(p)), axis=ax, keepdims=keepdim), a.dtype.type(1.0 / p))
    return record(P.LinalgVectorNormBackward0, _c(np.asarray(out, self.data.dtype)), (self,),
                  {"dim": list(dims) if dims is not None else None, "keepdim": keepdim, "ord": p,
                   "result": "result", "self": self})


def _no_identity_norm(self: Tensor, p, dim, dims) -> None:
    """torch's refusal of a max/min-like norm (inf, negative ord) over nothing: it has no identity. Over all
    elements of an empty tensor, or over a given dim of size 0 (named as given)."""
    what = f"{p:g} norm"
    if dims is None:
        raise TorchRuntimeError(f"linalg.vector_norm cannot compute the {what} on an empty tensor because the "
                                f"operation does not have an identity", code="empty_reduction")
    given = dim if isinstance(dim, (list, tuple)) else [dim]
    for d, w in zip(given, dims):
        if self.data.ndim and self.data.shape[w] == 0:
            raise TorchRuntimeError(f"linalg.vector_norm cannot compute the {what} on the dimension {d}because this "
                                    f"dimension is empty and the operation does not have an identity",
                                    code="empty_reduction")


@vjp("LinalgVectorNormBackward0", inputs=("self",), saves=("dim", "keepdim", "ord", "result", "self"))
def _(ctx, grad):
    x = ctx.self
    nd = x.data.ndim
    dims = tuple(ctx.dim) if ctx.dim else None
    p = ctx.ord
    g = _restore(grad, dims, nd, ctx.keepdim)
    r = _restore(ctx.result, dims, nd, ctx.keepdim)
    # FunctionsManual norm_backward, expression by expression (its nodes are the double backward's)
    if p == 0:
        return None,
    if p == 1:
        return sign(x) * g,
    if p == 2:
        return g * masked_fill(x / r, eq(r, 0), 0),
    if p in (np.inf, -np.inf):
        from .elementwise import isnan, logical_or
        ax = abs_(x)
        mask = _to_float(logical_or(eq(ax, r), isnan(ax)), x.dtype)
        count = sum(mask, list(dims), keepdim=True) if dims else sum(mask)
        return sign(x) * ((g / count) * mask),
    if p < 1:
        return sign(x) * masked_fill(pow_(abs_(x), p - 1), eq(x, 0), 0) * g * pow_(r, 1 - p),
    scaled = sign(x) * pow_(abs_(x), p - 1) if p < 2 else x * pow_(abs_(x), p - 2)
    return scaled * masked_fill(g / pow_(r, p - 1), eq(r, 0), 0),


jvp(P.LinalgVectorNormBackward0)(_reduce_jvp)


def pow_(a, b):
    from .elementwise import pow as p
    return p(a, b)


@op("cumsum", shape="same(self)", promotion="long",
    param_types={"dim": "int"},
    tensors=("self",))
def cumsum(self, dim, dtype=None):
    """torch.cumsum(input, dim)."""
    self = require_tensor(self)
    nd = self.data.ndim
    d = wrap_dim(dim, nd)
    out_dt = NP[_acc_dtype(self, dtype)]
    out = np.cumsum(self.data, axis=d, dtype=D.compute_dtype(out_dt)).astype(out_dt, copy=False) if nd \
        else self.data.astype(out_dt).copy()  # (float16/bfloat16: accumulated in float32, as torch does)
    return record(P.CumsumBackward0, _c(out), (self,), {"dim": d})


@vjp("CumsumBackward0", inputs=("self",), saves=("dim",))
def _(ctx, grad):
    if grad.data.ndim == 0:
        return grad,
    d = ctx.dim
    return flip(cumsum(flip(grad, [d]), d), [d]),


@jvp()
def _(ctx, self_t):
    return cumsum(self_t, ctx.dim) if self_t.data.ndim else self_t


batching(P.CumsumBackward0, **shifted(sizes=(), dims=("dim",)))


@op("flip", promotion="same", tensors=("self",))
def flip(self, dims):
    """torch.flip(input, dims)."""
    self = require_tensor(self)
    w = wrap_dims(dims, self.data.ndim)
    out = np.flip(self.data, axis=w).copy() if self.data.ndim else self.data.copy()
    return record(P.FlipBackward0, out, (self,), {"dims": list(w)})


@vjp("FlipBackward0", inputs=("self",), saves=("dims",))
def _(ctx, grad):
    return flip(grad, ctx.dims),


@jvp()
def _(ctx, self_t):
    return flip(self_t, ctx.dims)


batching(P.FlipBackward0, **shifted(sizes=(), dims=("dims",)))


@op("sort", promotion="same => same,int64",
    overloads={
        "function": (
            "(Tensor input, *, bool stable, int dim = -1, bool descending = False, tuple of Tensors out = None)",
            "(Tensor input, int dim = -1, bool descending = False, *, tuple of Tensors out = None)",
        ),
        "method": (
            "(*, bool stable, int dim = -1, bool descending = False)",
            "(int dim = -1, bool descending = False)",
        ),
    },
    returns=("values", "indices"),
    tensors=("self",))
def sort(self, dim=-1, descending=False, stable=NOT_GIVEN):
    """torch.sort(input, dim=-1, descending=False) -> (values, indices) (SortBackward0); with ``stable``
    given (even False or None), torch's ``sort.stable`` overload, SortBackward1. Always stable here."""
    self = require_tensor(self)
    nd = self.data.ndim
    d = wrap_dim(dim, nd)
    if nd == 0:
        idx = np.zeros((), np.int64)
        vals = self.data.copy()
    else:
        x = self.data
        if descending and x.dtype.kind in "fV":  # torch orders NaN above everything: first when descending
            nan = np.isnan(x)
            idx = np.lexsort((np.where(nan, 0, -x), ~nan), axis=d).astype(np.int64)
        else:
            # ~x orders integers in reverse without -x's wrap-around (int8's -(-128), any uint8)
            key = (~x if x.dtype.kind in "iu" else -x) if descending and x.dtype != np.bool_ else x
            idx = np.argsort(key, axis=d, kind="stable").astype(np.int64)
        if descending and self.data.dtype == np.bool_:
            idx = np.flip(np.argsort(self.data, axis=d, kind="stable"), axis=d).astype(np.int64)
        vals = np.take_along_axis(self.data, idx, axis=d)
    indices = Tensor(idx)
    values = record(P.SortBackward0 if stable is NOT_GIVEN else P.SortBackward1, vals, (self,),
                    {"dim": dim, "indices": indices, "self_sym_sizes": self.data.shape})
    return ValuesIndices(values, indices)


@vjp("SortBackward1", inputs=("self",), saves=("dim", "indices", "self_sym_sizes"))  # sort.stable: the same
@vjp("SortBackward0", inputs=("self",), saves=("dim", "indices", "self_sym_sizes"))
def _(ctx, grad):
    shp = ctx.self_sym_sizes
    if not shp:
        return grad,
    return _scatter_into_zeros(grad, shp, wrap_dim(ctx.dim, len(shp)), ctx.indices.data),


@jvp(P.SortBackward1)
@jvp(P.SortBackward0)
def _(ctx, self_t):
    if not self_t.data.ndim:
        return self_t
    from .shape import gather
    return gather(self_t, wrap_dim(ctx.dim, self_t.data.ndim), ctx.indices)


