"""Shape ops and views: reshape/view, squeeze/unsqueeze, expand, repeat, t/transpose/permute, cat/stack,
split/chunk/narrow, indexing, index_select, gather, clone, detach, dtype conversion.

Views share the numpy buffer and the version counter with their base, as torch's views do, so an in-place
change through a view is seen (and counted) by the base.
"""

from __future__ import annotations

import operator

import numpy as np

from .. import dtypes as D
from .. import kernel as K
from .. import rules
from ..batching import SAME, batching, shifted, sum_to_batched
from ..errors import (
    InvalidArgumentError,
    ShapeError,
    TorchIndexError,
    TorchRuntimeError,
    TorchTypeError,
)
from ..grad_mode import check_numel
from ..kernel import kcall
from ..registry import F, P, Prim, broken_check, declare, declared_failure, jvp, op, record, vjp
from ..tensor import Tensor
from ..views import as_view
from .common import (
    DIM_FIRST,
    INDEX_CHECKS,
    NO_DIMENSIONS,
    NOT_GIVEN,
    NP,
    require_tensor,
    row_major,
    shape_arg,
    sum_to,
    wrap_dim,
    wrap_dims,
)

INT64_MAX = 9223372036854775807


def _as_view(out: Tensor, base: Tensor, multi: bool = False) -> Tensor:
    return as_view(out, base, multi)


# ----- dtype conversion, clone, detach ----------------------------------------------------------------


@op("to",
    method_only=True, numbers_as_tensors=True,
    tensors=("self",), plannable=True)
def to(self, dtype=None, non_blocking=False, copy=False):
    """Tensor.to(dtype, non_blocking=False, copy=False): returns self when the dtype already matches and no
    copy is asked for (as torch does); non_blocking means nothing on the CPU."""
    self = require_tensor(self)
    dtype = D.canonical(dtype) if dtype is not None else self.dtype
    if dtype == self.dtype and not copy:
        return self
    return record(P.ToCopyBackward0, kcall(K.astype, self.data, NP[dtype]), (self,))


@vjp("ToCopyBackward0", inputs=("self",))
def _(ctx, grad):
    return grad,  # the engine casts to the input's dtype


@jvp()
def _(ctx, self_t):
    return to(self_t, ctx.result.dtype, copy=True)


batching(P.ToCopyBackward0, vjp=SAME, jvp=SAME)


@op("float",
    method_only=True, cast="float32",
    tensors=("self",), grad_fns=(P.ToCopyBackward0,))
def float_(self):
    """Tensor.float(): to(float32)."""
    return to(self, D.FLOAT32)


@op("double",
    method_only=True, cast="float64",
    tensors=("self",), grad_fns=(P.ToCopyBackward0,))
def double(self):
    """Tensor.double(): to(float64)."""
    return to(self, D.FLOAT64)


@op("half",
    method_only=True, cast="float16",
    tensors=("self",), grad_fns=(P.ToCopyBackward0,))
def half(self):
    """Tensor.half(): to(float16)."""
    return to(self, D.FLOAT16)


@op("bfloat16",
    method_only=True, cast="bfloat16",
    tensors=("self",), grad_fns=(P.ToCopyBackward0,))
def bfloat16(self):
    """Tensor.bfloat16(): to(bfloat16)."""
    return to(self, D.BFLOAT16)


@op("long",
    method_only=True, cast="int64",
    tensors=("self",), grad_fns=(P.ToCopyBackward0,))
def long(self):
    """Tensor.long(): to(int64)."""
    return to(self, D.INT64)


@op("int", functions=(), cast="int32", tensors=("self",), grad_fns=(P.ToCopyBackward0,))
def int_(self):
    """Tensor.int(): to(int32)."""
    return to(self, D.INT32)


@op("short", functions=(), cast="int16", tensors=("self",), grad_fns=(P.ToCopyBackward0,))
def short(self):
    """Tensor.short(): to(int16)."""
    return to(self, D.INT16)


@op("char", functions=(), cast="int8", tensors=("self",), grad_fns=(P.ToCopyBackward0,))
def char(self):
    """Tensor.char(): to(int8)."""
    return to(self, D.INT8)


@op("byte", functions=(), cast="uint8", tensors=("self",), grad_fns=(P.ToCopyBackward0,))
def byte(self):
    """Tensor.byte(): to(uint8)."""
    return to(self, D.UINT8)


@op("bool",
    method_only=True, cast="bool",
    tensors=("self",), differentiable=False)
def bool_(self):
    """Tensor.bool(): to(bool)."""
    return to(self, D.BOOL)


@op("clone",
    storage="new",
    tensors=("self",), plannable=True)
def clone(self):
    """torch.clone(input)."""
    self = require_tensor(self)
    return record(P.CloneBackward0, kcall(_clone, self.data), (self,))


@vjp("CloneBackward0", inputs=("self",))
def _(ctx, grad):
    return grad,


@jvp()
def _(ctx, self_t):
    return clone(self_t)


batching(P.CloneBackward0, vjp=SAME, jvp=SAME)


@op("contiguous",
    method_only=True,
    tensors=("self",), plannable=True)
def contiguous(self):
    """Tensor.contiguous(): self when already contiguous, else a copy."""
    self = require_tensor(self)
    if self.data.flags.c_contiguous:
        return self
    return record(P.CloneBackward0, kcall(np.ascontiguousarray, self.data), (self,))


@op("detach", tensors=("self",), differentiable=False, plannable=True)  # (no array of its own)
def detach(self):
    """Tensor.detach(): a new leaf sharing storage and version counter with self."""
    self = require_tensor(self)
    return Tensor(self.data, vc=self._vc)


@op("variable_data", methods=(), tensors=("self",), differentiable=False, plannable=True, method_only=True)
def variable_data(self):
    """Tensor.data: a new leaf sharing self's storage but not its version counter (torch's ``variable_data``):
    an in-place change through it is invisible to autograd (``w.data.mul_(2)`` between a forward that saved ``w``
    and its backward is not refused, and ``w._version`` stays)."""
    self = require_tensor(self)
    return Tensor(self.data)


# ----- reshape family ----------------------------------------------------------------------------------


def _infer_shape(shape: tuple, numel: int) -> tuple:
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise TorchRuntimeError("only one dimension can be inferred", code="invalid_shape")
    for s in shape:
        if s < -1:
            raise TorchRuntimeError(f"invalid shape dimension {s}", code="invalid_shape")
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    shown = f"[{', '.join(str(s) for s in shape)}]"
    bad = f"shape '{shown}' is invalid for input of size {numel}"
    if neg:
        if known == 0 and numel == 0:
            raise ShapeError(f"cannot reshape tensor of 0 elements into shape {shown} because the unspecified "
                             f"dimension size -1 can be any value and is ambiguous")
        if known == 0 or numel % known:
            raise ShapeError(bad)
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise ShapeError(bad)
    return shape


def _try_view(arr: np.ndarray, shape: tuple):
    try:
        return kcall(_view, arr, shape)
    except ValueError:
        return None


@K.direct(lambda arr, shape: (np.ndarray.reshape, (arr, shape)))  # (a view whenever _view gives one)
def _view(arr, shape):
    """A view of ``arr`` with ``shape``; ValueError when the layout allows none (whether it does depends on
    the shapes and strides alone, so a plan never meets the error its cold run did not)."""
    return arr.reshape(shape, copy=False)


# the array methods themselves (np.reshape, np.transpose and np.swapaxes are Python wrappers calling them)
_reshape = np.ndarray.reshape
_transpose = np.ndarray.transpose
_swapaxes = np.ndarray.swapaxes


K.STRUCTURAL.add(_view)


def _clone(a):
    if 0 in a.strides and any(st == 0 and n > 1 for st, n in zip(a.strides, a.shape)):
        # torch's preserve_format keeps the strides of a dense tensor only: an expanded one clones contiguous
        return np.array(a, copy=True, order="C")
    return np.array(a, copy=True, order="K")


#: ``a[index]`` for a basic index (ints and slices: static), without a Python function around it
_basic_take = operator.getitem


def _broadcast_to(a, shape):
    """``np.broadcast_to(a, shape)`` (a read-only view of ``a``, stride 0 along every new or size-1
    dimension) without its Python layer (an nditer: 4x the time for a small array), for a C-contiguous ``a``."""
    if not a.flags.c_contiguous:
        return np.broadcast_to(a, shape)
    strides = (0,) * (len(shape) - a.ndim) + tuple(0 if n == 1 else s for n, s in zip(a.shape, a.strides))
    out = np.ndarray(shape, a.dtype, a, 0, strides)
    out.flags.writeable = False
    return out


def _embed_into(g, shape, index, out):
    out.fill(0)
    out[index] = g
    return out


_embed_into.takes_out = True


@K.direct(lambda g, shape, index: (_embed_into, (g, shape, index)))
def _embed_kernel(g, shape, index):
    out = np.zeros(shape, g.dtype)
    out[index] = g
    return out


def _concat(axis, *arrs):
    out = np.concatenate(arrs, axis=axis)
    if out.ndim in (4, 5) and all(rules.channels_last_like(a.shape, tuple(_torch_strides(a))) for a in arrs):
        # torch lays cat's result out channels_last when every input is: its channels innermost here too
        inner = (0, *range(2, out.ndim), 1)
        return np.ascontiguousarray(out.transpose(inner)).transpose(np.argsort(inner))
    return row_major(out)  # (torch's otherwise: np.concatenate keeps its inputs' layout)


def _stack_arrays(d, *arrs):
    # one dtype: along dim 0, np.array of equal-shape arrays is np.stack without its Python layer
    return np.array(arrs) if d == 0 else np.stack(arrs, axis=d)


def _split_kernel(a, d, offsets):
    return tuple(a[(slice(None),) * d + (slice(offsets[i], offsets[i + 1]),)] for i in range(len(offsets) - 1))


@op("view",
    method_only=True, size_varargs="size",
    overloads={
        "method": ("(torch.dtype dtype)", "(tuple of ints size)"),
    },
    storage="view",
    tensors=("self",), plannable=True)
def view(self, *shape, size=NOT_GIVEN, dtype=NOT_GIVEN):
    """Tensor.view(*shape): fails on a non-viewable layout with torch's message. Tensor.view(dtype): self's
    bits reinterpreted (``view_dtype``)."""
    self = require_tensor(self)
    if dtype is not NOT_GIVEN:  # (the parser refuses dtype= with a size)
        return view_dtype(self, dtype)
    if size is not NOT_GIVEN:
        shape = (size,)
    if len(shape) == 1 and isinstance(shape[0], str):
        return view_dtype(self, shape[0])
    shape = _infer_shape(shape_arg(shape), self.data.size)
    out = _try_view(self.data, shape)
    if out is None:
        raise ShapeError("view size is not compatible with input tensor's size and stride (at least one dimension "
                         "spans across two contiguous subspaces). Use .reshape(...) instead.")
    return _as_view(record(P.ViewBackward0, out, (self,), {"self_sym_sizes": self.data.shape}), self)


def view_dtype(self: Tensor, dtype) -> Tensor:
    """Tensor.view(dtype), torch's view.dtype: self's bytes read as ``dtype``, sharing storage and version counter
    (a write through either is seen by the other) but, as in torch, no autograd view: no ``_base``, no grad_fn,
    never requires grad, no tangent. Between element sizes the last dimension scales, under torch's layout rules
    (``_view_dtype_error``)."""
    dtype = D.canonical(dtype)
    npdt = NP[dtype]
    refused = _view_dtype_error(self, npdt) if npdt.itemsize != self.data.itemsize else None
    if refused is not None:
        condition, got = refused
        raise TorchRuntimeError(f"{condition} to view {D.SCALAR_TYPE_NAMES[self.dtype]} as "
                                f"{D.SCALAR_TYPE_NAMES[dtype]} (different element sizes)"
                                + ("" if got is None else f", but got {got}"), code="invalid_view")
    return Tensor(kcall(_view_as, self.data, npdt), vc=self._vc)


def _view_dtype_error(self: Tensor, npdt: np.dtype) -> tuple | None:
    """torch's conditions on viewing self as a dtype of another element size, in torch's order: the first one
    failed (its text, the value torch shows or None), or None."""
    a = self.data
    if a.ndim == 0:
        return "self.dim() cannot be 0", None
    strides = _torch_strides(a)
    if a.itemsize > npdt.itemsize:  # smaller elements: the last dimension grows
        return None if strides[-1] == 1 else ("self.stride(-1) must be 1", strides[-1])
    ratio = npdt.itemsize // a.itemsize
    if a.shape[-1] % ratio:
        return f"self.size(-1) must be divisible by {ratio}", a.shape[-1]
    offset = _storage_offset(self)
    if offset % ratio:
        return f"self.storage_offset() must be divisible by {ratio}", offset
    if strides[-1] != 1:
        return "self.stride(-1) must be 1", strides[-1]
    for d, st in enumerate(strides[:-1]):
        if st % ratio:
            return f"self.stride({d}) must be divisible by {ratio}", st
    return None


def _torch_strides(a: np.ndarray) -> list:
    """``a``'s strides in elements, as torch would show them: numpy leaves an empty array's strides at 0 where
    torch has its contiguous ones (each dimension counted as at least 1)."""
    strides = [st // a.itemsize for st in a.strides]
    if a.size == 0:
        step = 1
        for d in range(a.ndim - 1, -1, -1):
            strides[d] = strides[d] or step
            step *= max(a.shape[d], 1)
    return strides


def _storage_offset(t: Tensor) -> int:
    """torch's storage_offset(), in elements: where ``t`` starts in its view base's buffer (0 for a non-view)."""
    if t._base is None:
        return 0
    start = t.data.__array_interface__["data"][0]
    return (start - t._base.data.__array_interface__["data"][0]) // t.data.itemsize


@K.direct(lambda arr, npdt: (np.ndarray.view, (arr, npdt)))
def _view_as(arr, npdt):
    """``arr``'s bytes as ``npdt``, a view (the caller has checked torch's layout rules, stricter than numpy's)."""
    return arr.view(npdt)


@vjp("ViewBackward0", inputs=("self",), saves=("self_sym_sizes",))
def _(ctx, grad):
    return reshape(grad, ctx.self_sym_sizes),


@jvp()
def _(ctx, self_t):
    return reshape(self_t, ctx.result.data.shape)


#: the batching rules of every reshaping primitive (view, reshape, squeeze): reshape each entry
RESHAPE_BATCHED = {"vjp": lambda ctx, grad, batch: (reshape(grad, (batch, *ctx.self_sym_sizes)),),
                   "jvp": lambda ctx, batch, t: reshape(t, (batch, *ctx.result.data.shape))}
batching(P.ViewBackward0, **RESHAPE_BATCHED)


@op("reshape",
    size_varargs="shape", storage="view_if_contiguous",
    tensors=("self",), grad_fns=(P.ViewBackward0, P.ReshapeAliasBackward0, P.UnsafeViewBackward0),
    plannable=True)
def reshape(self, *shape):
    """torch.reshape(input, shape): a view when the layout allows (ViewBackward0 from a contiguous input,
    ReshapeAliasBackward0 from a strided one), otherwise a copy (UnsafeViewBackward0 over CloneBackward0)."""
    self = require_tensor(self)
    shape = _infer_shape(shape_arg(shape), self.data.size)
    out = _try_view(self.data, shape)
    if out is not None:
        # torch's reshape of a non-contiguous tensor that still allows a view is _reshape_alias
        prim = P.ViewBackward0 if self.data.flags.c_contiguous else P.ReshapeAliasBackward0
        return _as_view(record(prim, out, (self,), {"self_sym_sizes": self.data.shape}), self)
    c = clone(self)
    return _unsafe_view(c, shape)


@vjp("ReshapeAliasBackward0", inputs=("self",), saves=("self_sym_sizes",))
def _(ctx, grad):
    return reshape(grad, ctx.self_sym_sizes),


@jvp()
def _(ctx, self_t):
    return reshape(self_t, ctx.result.shape)


batching(P.ReshapeAliasBackward0, **RESHAPE_BATCHED)


def _unsafe_view(self: Tensor, shape: tuple) -> Tensor:
    return record(P.UnsafeViewBackward0, kcall(_reshape, self.data, shape), (self,),
                  {"self_sym_sizes": self.data.shape})


@vjp("UnsafeViewBackward0", inputs=("self",), saves=("self_sym_sizes",))
def _(ctx, grad):
    return reshape(grad, ctx.self_sym_sizes),


@jvp()
def _(ctx, self_t):
    return reshape(self_t, ctx.result.data.shape)


batching(P.UnsafeViewBackward0, **RESHAPE_BATCHED)


@op("flatten",
    checks=("dim_order(self,start_dim,end_dim) | RuntimeError: flatten() has invalid args: start_dim cannot come after "
            "end_dim",),
    param_types={"start_dim": "int", "end_dim": "int"}, storage="view_if_contiguous",
    tensors=("self",), grad_fns=(P.ViewBackward0, P.UnsafeViewBackward0))
def flatten(self, start_dim=0, end_dim=-1):
    """torch.flatten(input, start_dim=0, end_dim=-1); returns self for a 1-D input."""
    self = require_tensor(self)
    nd = self.data.ndim
    if nd == 0:
        wrap_dim(start_dim, nd), wrap_dim(end_dim, nd)  # a 0-d input takes dims in [-1, 0]
        return reshape(self, (1,))
    s = wrap_dim(start_dim, nd)
    e = wrap_dim(end_dim, nd)
    if s > e:
        raise broken_check("flatten", self=self, start_dim=start_dim, end_dim=end_dim)
    if s == e:
        return self
    shp = self.data.shape
    n = 1
    for d in shp[s:e + 1]:
        n *= d
    return reshape(self, shp[:s] + (n,) + shp[e + 1:])


@op("squeeze",
    overloads={
        "function": ("(Tensor input)", "(Tensor input, int dim)", "(Tensor input, tuple of ints dim)"),
        "method": ("()", "(int dim)", "(tuple of ints dim)"),
    },
    storage="view",
    tensors=("self",), grad_fns=(P.SqueezeBackward0, P.SqueezeBackward1, P.SqueezeBackward2), plannable=True)
def squeeze(self, dim=None):
    """torch.squeeze(input, dim=None): SqueezeBackward0 (all), 1 (an int dim), 2 (a tuple of dims)."""
    self = require_tensor(self)
    shp = self.data.shape
    if dim is None:
        out = kcall(_reshape, self.data, tuple(s for s in shp if s != 1))
        return _as_view(record(P.SqueezeBackward0, out, (self,), {"self_sym_sizes": shp}), self)
    if isinstance(dim, (list, tuple)):
        dims = wrap_dims(dim, self.data.ndim)
        keep = tuple(s for i, s in enumerate(shp) if not (i in dims and s == 1))
        out = kcall(_reshape, self.data, keep)
        return _as_view(record(P.SqueezeBackward2, out, (self,), {"dim": list(dims), "self_sym_sizes": shp}), self)
    d = wrap_dim(dim, self.data.ndim)
    keep = tuple(s for i, s in enumerate(shp) if not (i == d and s == 1))
    out = kcall(_reshape, self.data, keep)
    return _as_view(record(P.SqueezeBackward1, out, (self,), {"dim": d, "self_sym_sizes": shp}), self)


def _squeeze_dim(self: Tensor, d: int) -> Tensor:
    """squeeze(dim) as used inside matmul: SqueezeBackward4 (torch's squeeze.dim on a fresh result)."""
    shp = self.data.shape
    out = kcall(_reshape, self.data, shp[:d] + shp[d + 1:])
    return record(P.SqueezeBackward4, out, (self,), {"dim": d, "self_sym_sizes": shp})


def _unsqueeze_to(grad: Tensor, dims, sizes: tuple) -> Tensor:
    """torch's unsqueeze_to: put back each squeezed size-1 dimension (one UnsqueezeBackward0 per dim)."""
    for d in dims:
        if d < len(sizes) and sizes[d] == 1:  # (a 0-d input's dim 0 is no dimension to put back)
            grad = unsqueeze(grad, d)
    return grad


@vjp("SqueezeBackward0", inputs=("self",), saves=("self_sym_sizes",))
def _(ctx, grad):
    return _unsqueeze_to(grad, range(len(ctx.self_sym_sizes)), ctx.self_sym_sizes),


@jvp()
def _(ctx, self_t):
    return reshape(self_t, ctx.result.data.shape)


@vjp("SqueezeBackward1", inputs=("self",), saves=("dim", "self_sym_sizes"))
def _(ctx, grad):
    if not ctx.self_sym_sizes:  # squeeze of a 0-d tensor
        return reshape(grad, ctx.self_sym_sizes),
    return _unsqueeze_to(grad, (ctx.dim,), ctx.self_sym_sizes),


@jvp()
def _(ctx, self_t):
    return reshape(self_t, ctx.result.data.shape)


@vjp("SqueezeBackward2", inputs=("self",), saves=("dim", "self_sym_sizes"))
def _(ctx, grad):
    return _unsqueeze_to(grad, sorted(ctx.dim), ctx.self_sym_sizes),


@jvp()
def _(ctx, self_t):
    return reshape(self_t, ctx.result.data.shape)


@vjp("SqueezeBackward4", inputs=("self",), saves=("dim", "self_sym_sizes"))
def _(ctx, grad):
    return reshape(grad, ctx.self_sym_sizes),


@jvp()
def _(ctx, self_t):
    return reshape(self_t, ctx.result.data.shape)


for _name in (P.SqueezeBackward0, P.SqueezeBackward1, P.SqueezeBackward2, P.SqueezeBackward4):
    batching(_name, **RESHAPE_BATCHED)


@op("unsqueeze",
    param_types={"dim": "int"}, storage="view", dims_of="output",
    tensors=("self",), plannable=True)
def unsqueeze(self, dim):
    """torch.unsqueeze(input, dim)."""
    self = require_tensor(self)
    d = wrap_dim(dim, self.data.ndim + 1)
    shp = self.data.shape
    out = kcall(_reshape, self.data, shp[:d] + (1,) + shp[d:])  # np.expand_dims' own reshape
    return _as_view(record(P.UnsqueezeBackward0, out, (self,), {"dim": d}), self)


@vjp("UnsqueezeBackward0", inputs=("self",), saves=("dim",))
def _(ctx, grad):
    return squeeze(grad, ctx.dim),


@jvp()
def _(ctx, self_t):
    return unsqueeze(self_t, ctx.dim)


batching(P.UnsqueezeBackward0, **shifted(sizes=(), dims=("dim",)))


def expand_checks(size: str) -> tuple[str, ...]:
    """expand's refusals of a target ``size`` (the argument's name: expand_as's other, broadcast_to's size)."""
    return (f"expand_rank(self,{size}) | RuntimeError: expand({{tensor_type}}{{{{[{{shape}}]}}}}, size=[{{size}}]): "
            "the number of sizes provided ({n}) must be greater or equal to the number of dimensions in the tensor "
            "({dims})",
            f"expand_size(self,{size}) | RuntimeError: The expanded size of the tensor ({{want}}) must match the "
            "existing size ({have}) at non-singleton dimension {dim}.  Target sizes: {target}.  Tensor sizes: {shape}")


@op("expand",
    checks=expand_checks("sizes"),
    method_only=True, size_varargs="size", storage="view", cost="arguments",
    tensors=("self",), grad_fns=(P.ExpandBackward0,), plannable=True)
def expand(self, *sizes):
    """Tensor.expand(*sizes); -1 keeps a dimension."""
    self = require_tensor(self)
    sizes = shape_arg(sizes)
    for i, s in enumerate(sizes):
        if not -_INT64_LIMIT <= s < _INT64_LIMIT:  # torch's first line (its C++ frames follow)
            raise TorchTypeError(f"expand(): argument 'size' failed to unpack the object at pos {i + 1} with error "
                                 f"\"Overflow when unpacking long long", code="invalid_shape")
    shp = self.data.shape
    if len(sizes) < len(shp):
        raise broken_check("expand", self=self, sizes=sizes)
    lead = len(sizes) - len(shp)
    target = []
    for i, s in enumerate(sizes):
        if i < lead:
            if s < 0:
                raise TorchRuntimeError(f"The expanded size of the tensor ({s}) isn't allowed in a leading, "
                                        f"non-existing dimension {i}", code="shape_mismatch")
            target.append(s)
            continue
        cur = shp[i - lead]
        if s == -1:
            target.append(cur)
        elif cur == 1 or cur == s:
            target.append(s)
        else:
            raise broken_check("expand", self=self, sizes=sizes)
    numel = 1
    for s in target:  # torch's numel: a running int64 product, refused once it overflows (a 0 after is too late)
        numel *= s
        if numel >= _INT64_LIMIT:
            raise TorchRuntimeError("numel: integer multiplication overflow", code="invalid_shape")
    return expand_to(self, tuple(target))


_INT64_LIMIT = 1 << 63


def expand_to(self: Tensor, target: tuple) -> Tensor:
    """``expand(self, *target)`` for sizes known to be valid for ``self`` (a backward formula's: the shape
    of the input a gradient is for), without expand's checks of them."""
    if target.__class__ is not tuple:
        target = tuple(target)
    check_numel(target)
    shp = self.data.shape
    lead = len(target) - len(shp)
    if target[lead:] == shp and all(t == 1 for t in target[:lead]):
        out = kcall(_reshape, self.data, target)  # nothing repeated: a writeable view (no internal overlap)
    else:
        out = kcall(_broadcast_to, self.data, target)
    return _as_view(record(P.ExpandBackward0, out, (self,), {"self_sym_sizes": shp}), self)


@vjp("ExpandBackward0", inputs=("self",), saves=("self_sym_sizes",))
def _(ctx, grad):
    return sum_to(grad, ctx.self_sym_sizes),


@jvp()
def _(ctx, self_t):
    return expand(self_t, ctx.result.data.shape)


def _expand_batched_jvp(ctx, batch, self_t):
    shape = ctx.result.data.shape
    s = self_t.data.shape  # each entry's leading new dims put in after the batch
    return expand(reshape(self_t, (batch, *(1,) * (len(shape) + 1 - len(s)), *s[1:])), (batch, *shape))


batching(P.ExpandBackward0, vjp=lambda ctx, grad, batch: (sum_to_batched(grad, ctx.self_sym_sizes),),
         jvp=_expand_batched_jvp)


@op("expand_as", checks=expand_checks("other"),
    method_only=True, storage="view", cost="arguments",
    tensors=("self", "other"), grad_fns=(P.ExpandBackward0,), meta_only=("other",))
def expand_as(self, other):
    """Tensor.expand_as(other)."""
    return expand(self, require_tensor(other, "other").shape)


@op("repeat", shape="repeat(self,repeats)",
    checks=("repeats_cover(self,repeats) | RuntimeError: Number of dimensions of repeat dims can not be smaller than "
            "number of dimensions of tensor",),
    method_only=True, size_varargs="repeats", storage="new", cost="arguments",
    tensors=("self",))
def repeat(self, *repeats):
    """Tensor.repeat(*repeats)."""
    self = require_tensor(self)
    reps = shape_arg(repeats)
    shp = self.data.shape
    if len(reps) < len(shp):
        raise broken_check("repeat", self=self, repeats=reps)
    padded = (1,) * (len(reps) - len(shp)) + shp
    check_numel(tuple(a * b for a, b in zip(padded, reps)), itemsize=self.data.itemsize)
    out = np.tile(self.data.reshape(padded), reps)
    return record(P.RepeatBackward0, out, (self,), {"repeats": list(reps), "self_sym_sizes": shp})


@vjp("RepeatBackward0", inputs=("self",), saves=("repeats", "self_sym_sizes"))
def _(ctx, grad):
    reps = tuple(ctx.repeats)
    shp = tuple(ctx.self_sym_sizes)
    # FunctionsManual repeat_backward: the leading new dims summed away one by one, then one reshape that
    # splits each repeated dim into (repeat, size) and one sum over the repeat dims
    if 0 in reps:
        return Tensor(np.zeros(shp, grad.data.dtype)),
    g = grad
    lead = len(reps) - len(shp)
    for _ in range(lead):
        g = F.sum(g, 0)
    size, dims = [], []
    for r, s in zip(reps[lead:], shp):
        if r != 1:
            size.append(r)
            dims.append(len(size) - 1)
        size.append(s)
    if dims:
        g = F.sum(reshape(g, tuple(size)), tuple(dims))
    return g,


@jvp()
def _(ctx, self_t):
    return repeat(self_t, ctx.repeats)


@op("t",
    storage="view", checks=("max_dims(self)=2 | RuntimeError: t() expects a tensor with <= 2 dimensions, but self "
                            "is {dims}D",),
    tensors=("self",), plannable=True)
def t(self):
    """Tensor.t(): transpose of a <= 2-D tensor."""
    self = require_tensor(self)
    if self.data.ndim > 2:
        raise broken_check("t", self=self)
    return _as_view(record(P.TBackward0, kcall(_transpose, self.data), (self,)), self)


@vjp("TBackward0", inputs=("self",))
def _(ctx, grad):
    return t(grad),


@jvp()
def _(ctx, self_t):
    return t(self_t)


def _t_batched(x: Tensor) -> Tensor:
    return transpose(x, 1, 2) if x.data.ndim == 3 else x


batching(P.TBackward0, vjp=lambda ctx, grad, batch: (_t_batched(grad),), jvp=lambda ctx, batch, x: _t_batched(x))


@op("transpose",
    param_types={"dim0": "int", "dim1": "int"}, storage="view",
    tensors=("self",), aliases=("swapaxes", "swapdims"), plannable=True)
def transpose(self, dim0, dim1):
    """torch.transpose(input, dim0, dim1)."""
    self = require_tensor(self)
    nd = self.data.ndim
    d0, d1 = wrap_dim(dim0, nd), wrap_dim(dim1, nd)
    out = kcall(_swapaxes, self.data, d0, d1) if nd else kcall(_reshape, self.data, ())
    return _as_view(record(P.TransposeBackward0, out, (self,), {"dim0": d0, "dim1": d1}), self)


@vjp("TransposeBackward0", inputs=("self",), saves=("dim0", "dim1"))
def _(ctx, grad):
    return transpose(grad, ctx.dim0, ctx.dim1),


@jvp()
def _(ctx, self_t):
    return transpose(self_t, ctx.dim0, ctx.dim1)


batching(P.TransposeBackward0, **shifted(sizes=(), dims=("dim0", "dim1")))


@op("permute",
    checks=("permute_rank(self,dims) | RuntimeError: permute(sparse_coo): number of dimensions in the tensor input "
            "does not match the length of the desired ordering of dimensions i.e. input.dim() = {rank} is not equal "
            "to len(dims) = {n}",
            "permute_unique(self,dims) | RuntimeError: permute(): duplicate dims are not allowed."),
    size_varargs="dims", storage="view",
    tensors=("self",))
def permute(self, *dims):
    """torch.permute(input, dims)."""
    self = require_tensor(self)
    dims = shape_arg(dims) if dims else ()
    if len(dims) != self.data.ndim:
        raise broken_check("permute", self=self, dims=dims)
    w = tuple(wrap_dim(d, self.data.ndim) for d in dims)
    if len(set(w)) != len(w):
        raise broken_check("permute", self=self, dims=dims)
    return _as_view(record(P.PermuteBackward0, np.transpose(self.data, w), (self,), {"dims": list(w)}), self)


@vjp("PermuteBackward0", inputs=("self",), saves=("dims",))
def _(ctx, grad):
    inv = [0] * len(ctx.dims)
    for i, d in enumerate(ctx.dims):
        inv[d] = i
    return permute(grad, inv),


@jvp()
def _(ctx, self_t):
    return permute(self_t, ctx.dims)


def _permute_batched_vjp(ctx, grad, batch):
    inv = [0] * len(ctx.dims)
    for i, d in enumerate(ctx.dims):
        inv[d] = i
    return permute(grad, [0, *(i + 1 for i in inv)]),


batching(P.PermuteBackward0, vjp=_permute_batched_vjp,
         jvp=lambda ctx, batch, x: permute(x, [0, *(d + 1 for d in ctx.dims)]))


# ----- joining and splitting -----------------------------------------------------------------------------


def _tensor_list(tensors, name: str) -> list:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise InvalidArgumentError(f"{name}(): argument 'tensors' must be tuple of Tensors, not "
                                   f"{type(tensors).__name__}")
    if not tensors:  # (torch's checks differ: cat's is in Python, a ValueError, stack's in ATen)
        raise broken_check(name, tensors=tensors)
    for i, x in enumerate(tensors):
        if not isinstance(x, Tensor):
            raise InvalidArgumentError(f"expected Tensor as element {i} in argument 0, but got {type(x).__name__}")
    return list(tensors)


@op("cat", shape="cat(tensors,dim)",
    checks=("nonempty_list(tensors) | ValueError: torch.cat(): expected a non-empty list of Tensors",
            "cat_zero_dim(tensors) | RuntimeError: zero-dimensional tensor (at position {i}) cannot be concatenated",
            "list_dim(tensors,dim) | IndexError: Dimension out of range (expected to be in range of [{low}, {high}], "
            "but got {dim})",
            "cat_ranks(tensors) | RuntimeError: Tensors must have same number of dimensions: got {a} and {b}",
            "cat_sizes(tensors,dim) | RuntimeError: Sizes of tensors must match except in dimension {dim}. Expected "
            "size {want} but got size {got} for tensor number {i} in the list."),
    storage="new", dims_of="other",
    tensor_lists=("tensors",), method=False, aliases=("concat", "concatenate"),
    plannable=True)
def cat(tensors, dim=0):
    """torch.cat(tensors, dim=0)."""
    ts = _tensor_list(tensors, "cat")
    # the shape to match: the first tensor that is not a legacy empty (0,) one (those are skipped)
    ref = next((x for x in ts if not (x.data.ndim == 1 and x.data.size == 0)), ts[0])
    if any(x.data.ndim == 0 for x in ts):
        raise broken_check("cat", tensors=ts, dim=dim)
    # every tensor a legacy empty one: torch wraps no dim (any dim gives the (0,) result)
    all_legacy = ref.data.ndim == 1 and ref.data.size == 0
    d = 0 if all_legacy else wrap_dim(dim, ref.data.ndim)
    for x in ts:
        if x.data.ndim == 1 and x.data.size == 0:
            continue  # legacy: empty 1-D tensors are skipped
        if x.data.shape[:d] != ref.data.shape[:d] or x.data.shape[d + 1:] != ref.data.shape[d + 1:]:
            raise broken_check("cat", tensors=tensors, dim=dim)  # (another rank, or sizes but along d)
    dtype = D.result_type(*ts) if len({x.data.dtype for x in ts}) > 1 else ts[0].dtype
    out_shape = list(ref.data.shape)
    out_shape[d] = sum(x.data.shape[d] for x in ts if not (x.data.ndim == 1 and x.data.size == 0))
    check_numel(tuple(out_shape), itemsize=NP[dtype].itemsize)
    arrs = [x.data if x.data.dtype == NP[dtype] else kcall(K.astype, x.data, NP[dtype])
            for x in ts if not (x.data.ndim == 1 and x.data.size == 0)]
    out = kcall(_concat, d, *arrs) if arrs else kcall(K.zeros, (0,), NP[dtype])
    sizes = [x.data.shape if x.data.ndim else () for x in ts]
    return record(P.CatBackward0, out, tuple(ts), {"dim": d, "sizes": sizes})


def _cat_slices(ctx, grad, lead: int = 0) -> tuple:
    """Each input's slice of ``grad`` along the cat dim (``lead``: batch dims in front of it); None for an
    input not needed, and for a legacy empty (0,) input beside inputs of more dims."""
    d = ctx.dim
    res = []
    offset = 0
    for need, shp in zip(ctx.needs, ctx.sizes):
        if len(shp) == 1 and shp[0] == 0 and grad.data.ndim != 1 + lead:
            # torch's cat backward gives a skipped legacy input an empty gradient of its own shape
            res.append(Tensor(np.zeros(grad.shape[:lead] + (0,), grad.data.dtype)) if need else None)
            continue
        n = shp[d]
        res.append(narrow(grad, d + lead, offset, n) if need else None)
        offset += n
    return tuple(res)


@vjp("CatBackward0", inputs=(), saves=("dim",))
def _(ctx, grad):
    return _cat_slices(ctx, grad)


@jvp()
def _(ctx, *tangents):
    return cat(_zeros_for_missing(ctx.inputs, tangents), ctx.dim)


@op("stack", shape="stack(tensors,dim)",
    checks=("nonempty_list(tensors) | RuntimeError: stack expects a non-empty TensorList",
            "stack_shapes(tensors) | RuntimeError: stack expects each tensor to be equal size, but got {first} at "
            "entry 0 and {other} at entry {i}"),
    storage="new", dims_of="other",
    tensor_lists=("tensors",), method=False, plannable=True)
def stack(tensors, dim=0):
    """torch.stack(tensors, dim=0)."""
    ts = _tensor_list(tensors, "stack")
    shp = ts[0].data.shape
    for x in ts:
        if x.data.shape != shp:
            raise broken_check("stack", tensors=tensors)
    d = wrap_dim(dim, len(shp) + 1)
    check_numel((len(ts),) + shp, itemsize=max(x.data.itemsize for x in ts))
    arrs = [x.data for x in ts]
    dt0 = arrs[0].dtype
    if all(a.dtype == dt0 for a in arrs):
        # one dtype: along dim 0, np.array of equal-shape arrays is np.stack without its Python layer
        out = kcall(_stack_arrays, d, *arrs)
    else:
        npdt = NP[D.result_type(*ts)]
        out = kcall(_stack_arrays, d, *(a if a.dtype == npdt else kcall(K.astype, a, npdt) for a in arrs))
    return record(P.StackBackward0, out, tuple(ts), {"dim": d})


@vjp("StackBackward0", inputs=(), saves=("dim",))
def _(ctx, grad):
    d = ctx.dim  # (wrapped when recorded; grad has one entry per input along it)
    return tuple([_select(grad, d, i) if need else None for i, need in enumerate(ctx.needs)])


@jvp()
def _(ctx, *tangents):
    return stack(_zeros_for_missing(ctx.inputs, tangents), ctx.dim)


def _cat_batched_vjp(ctx, grad, batch):
    return _cat_slices(ctx, grad, 1)


def _zeros_for_missing_batched(inputs, tangents, batch) -> list:
    ref = next(t for t in tangents if t is not None)
    return [t if t is not None else
            Tensor(np.zeros((batch, *x.data.shape), np.promote_types(ref.data.dtype, x.data.dtype)))
            for x, t in zip(inputs, tangents)]


batching(P.CatBackward0, vjp=_cat_batched_vjp,
         jvp=lambda ctx, batch, *ts: cat(_zeros_for_missing_batched(ctx.inputs, ts, batch), ctx.dim + 1))
batching(P.StackBackward0, vjp=shifted(sizes=(), dims=("dim",))["vjp"],
         jvp=lambda ctx, batch, *ts: stack(_zeros_for_missing_batched(ctx.inputs, ts, batch), ctx.dim + 1))


def _zeros_for_missing(inputs, tangents) -> list:
    """cat/stack JVPs: each input's tangent, zeros (of the tangents' dtype) where an input has none."""
    ref = next(t for t in tangents if t is not None)
    return [t if t is not None else Tensor(np.zeros(x.data.shape, np.promote_types(ref.data.dtype, x.data.dtype)))
            for x, t in zip(inputs, tangents)]


def _split_sizes(n: int, split_size: int) -> list:
    if split_size <= 0:
        if n == 0 and split_size == 0:
            return [0]
        raise TorchRuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}",
                                code="invalid_argument")
    sizes = [split_size] * (n // split_size)
    if n % split_size:
        sizes.append(n % split_size)
    return sizes or [0]


def _split(self: Tensor, sizes: list, d: int, prim: Prim, saved: dict) -> tuple:
    offs = [0]
    for n in sizes:
        offs.append(offs[-1] + n)
    arrs = kcall(_split_kernel, self.data, d, tuple(offs))
    outs = record(prim, arrs, (self,), saved)
    return tuple(_as_view(o, self, multi=True) for o in outs)


@op("split",
    python_attribute=("split", ("self",)), variable_outputs=True,
    tensors=("self",), grad_fns=(P.SplitBackward0, P.SplitWithSizesBackward0), plannable=True)
def split(self, split_size_or_sections, dim=0):
    """torch.split(tensor, split_size_or_sections, dim=0): a tuple of views."""
    self = require_tensor(self)
    _at_least_1d(self, "split expects at least a 1-dimensional tensor")
    d = wrap_dim(dim, self.data.ndim)
    n = self.data.shape[d]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise TorchRuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size "
                                    f"at dimension {d}), but got split_sizes={sizes}", code="invalid_argument")
        return _split(self, sizes, d, P.SplitWithSizesBackward0,
                      {"dim": d, "self_sym_sizes": self.data.shape, "split_sizes": sizes})
    size = int(split_size_or_sections)
    sizes = _split_sizes(n, size)
    return _split(self, sizes, d, P.SplitBackward0,
                  {"dim": d, "self_sym_sizes": self.data.shape, "split_size": size})


def _at_least_1d(self: Tensor, message: str) -> None:
    """torch's 0-dim checks of split/chunk/narrow (before any argument is looked at)."""
    if self.data.ndim == 0:
        raise TorchRuntimeError(message, code="invalid_argument")


def _split_backward(ctx, grads, sizes):
    d = ctx.dim
    shp = ctx.self_sym_sizes
    parts = []
    for g, s in zip(grads, sizes):
        if g is None:
            zs = list(shp)
            zs[d] = s
            g = Tensor(kcall(K.zeros, tuple(zs), NP[_grad_dtype(grads)]))
        parts.append(g)
    return cat(parts, d),


def _grad_dtype(grads) -> str:
    for g in grads:
        if g is not None:
            return g.dtype
    return D.FLOAT32


@vjp("SplitBackward0", inputs=("self",), saves=("dim", "self_sym_sizes", "split_size"), n_outputs=-1)
def _(ctx, grads):
    return _split_backward(ctx, grads, _split_sizes(ctx.self_sym_sizes[ctx.dim], ctx.split_size))


@jvp()
def _(ctx, self_t):
    return split(self_t, ctx.split_size, ctx.dim)


@vjp("SplitWithSizesBackward0", inputs=("self",), saves=("dim", "self_sym_sizes", "split_sizes"), n_outputs=-1)
def _(ctx, grads):
    return _split_backward(ctx, grads, ctx.split_sizes)


@jvp()
def _(ctx, self_t):
    return split(self_t, ctx.split_sizes, ctx.dim)


@op("chunk",
    param_types={"chunks": "int", "dim": "int"}, variable_outputs=True,
    tensors=("self",), grad_fns=(P.SplitBackward0,), plannable=True)
def chunk(self, chunks, dim=0):
    """torch.chunk(input, chunks, dim=0)."""
    self = require_tensor(self)
    _at_least_1d(self, "chunk expects at least a 1-dimensional tensor")
    if chunks <= 0:
        raise TorchRuntimeError("chunk expects `chunks` to be greater than 0, got: " + str(chunks),
                                code="invalid_argument")
    d = wrap_dim(dim, self.data.ndim)
    n = self.data.shape[d]
    if n == 0:
        return split(self, [0] * chunks, d)  # torch: `chunks` empty pieces
    return split(self, -(-n // chunks), d)  # ceil(n / chunks) per chunk, as torch


@op("unbind",
    checks=(DIM_FIRST, NO_DIMENSIONS),
    param_types={"dim": "int"}, variable_outputs=True,
    tensors=("self",))
def unbind(self, dim=0):
    """torch.unbind(input, dim=0)."""
    self = require_tensor(self)
    d = wrap_dim(dim, self.data.ndim)
    if self.data.ndim == 0:
        raise broken_check("unbind", self=self, dim=dim)
    # basic indexing: real views of self's buffer (np.take would copy)
    arrs = tuple(self.data[(slice(None),) * d + (i, Ellipsis)] for i in range(self.data.shape[d]))
    outs = record(P.UnbindBackward0, arrs, (self,), {"dim": d})
    return tuple(_as_view(o, self, multi=True) for o in outs)


@vjp("UnbindBackward0", inputs=("self",), saves=("dim",), n_outputs=-1)
def _(ctx, grads):
    dt = _grad_dtype(grads)
    ref = next(g for g in grads if g is not None)
    parts = [g if g is not None else Tensor(np.zeros(ref.shape, NP[dt])) for g in grads]
    return stack(parts, ctx.dim),


@jvp()
def _(ctx, self_t):
    return unbind(self_t, ctx.dim)


@op("narrow",
    overloads={
        "function": (
            "(Tensor input, int dim, Tensor start, int length)",
            "(Tensor input, int dim, int start, int length)",
        ),
        "method": ("(int dim, Tensor start, int length)", "(int dim, int start, int length)"),
    },
    checks=("min_dims(self)=1 | RuntimeError: narrow() cannot be applied to a 0-dim tensor.",
            "narrow_bounds(self,dim,start,length)=length | RuntimeError: narrow(): length must be non-negative.",
            "narrow_bounds(self,dim,start,length)=start | IndexError: start out of range (expected to be in range of "
            "[{low}, {high}], but got {start})",
            "narrow_bounds(self,dim,start,length)=end | RuntimeError: start ({start}) + length ({length}) exceeds "
            "dimension size ({size})."),
    storage="view",
    tensors=("self", "start"), grad_fns=(P.SliceBackward0,), plannable=True)
def narrow(self, dim, start, length):
    """torch.narrow(input, dim, start, length); ``start`` an int or a 0-d integer tensor."""
    self = require_tensor(self)
    if isinstance(start, Tensor):
        if start.data.ndim or start.data.dtype.kind not in "iu":
            raise TorchRuntimeError("start must be an 0-dim integral Tensor.", code="invalid_argument")
        rec = K.active()
        if rec is not None:  # the value decides the slice: a plan must not freeze it
            rec.bad("untraced_array", "narrow's start read from a tensor")
        start = int(start.data)
    if not self.data.ndim:
        raise broken_check("narrow", self=self, dim=dim, start=start, length=length)
    d = wrap_dim(dim, self.data.ndim)
    n = self.data.shape[d]
    begin = start + n if start < 0 else start
    if length < 0 or not -n <= start <= n or begin > n - length:  # (torch's order: the declared checks')
        raise broken_check("narrow", self=self, dim=dim, start=start, length=length)
    return _slice(self, d, begin, begin + length, 1)


def _slice(self: Tensor, d: int, start: int, end: int, step: int) -> Tensor:
    idx = (slice(None),) * d + (slice(start, end, step),)
    return _as_view(record(P.SliceBackward0, kcall(_basic_take, self.data, idx), (self,),
                           {"dim": d, "end": end, "self_sym_sizes": self.data.shape, "start": start,
                            "step": step}), self)


@vjp("SliceBackward0", inputs=("self",), saves=("dim", "end", "self_sym_sizes", "start", "step"))
def _(ctx, grad):
    return _embed(grad, ctx.self_sym_sizes, (slice(None),) * ctx.dim + (slice(ctx.start, ctx.end, ctx.step),),
                  P.SliceBackwardBackward0),


@jvp()
def _(ctx, self_t):
    return _slice(self_t, ctx.dim, ctx.start, ctx.end, ctx.step)


batching(P.SliceBackward0, **shifted(dims=("dim",)))


def select(self, dim, index):
    self = require_tensor(self)
    nd = self.data.ndim
    if nd == 0:
        raise TorchIndexError("select() cannot be applied to a 0-dim tensor.", code="index_out_of_range")
    d = wrap_dim(dim, nd)
    n = self.data.shape[d]
    if index < -n or index >= n:
        raise TorchIndexError(f"index {index} is out of bounds for dimension {d} with size {n}",
                              code="index_out_of_range")
    return _select(self, d, index)


def _select(self: Tensor, d: int, index: int) -> Tensor:
    """``select`` for a wrapped dim and an index in range (a backward formula's), without its checks."""
    i = index % self.data.shape[d]
    out = kcall(_basic_take, self.data, (slice(None),) * d + (i, Ellipsis))  # Ellipsis keeps a 0-d result a view
    return _as_view(record(P.SelectBackward0, out, (self,),
                           {"dim": d, "index": index, "self_sym_sizes": self.data.shape}), self)


def _select_op(self, dim, index):
    """torch.select(input, dim, index); its bounds message differs from indexing's (``x[5]``)."""
    self = require_tensor(self)
    if self.data.ndim and isinstance(index, int):
        d = wrap_dim(dim, self.data.ndim)
        n = self.data.shape[d]
        if index < -n or index >= n:
            raise broken_check("select", self=self, dim=dim, index=index)
    elif not self.data.ndim:
        raise broken_check("select", self=self, dim=dim, index=index)
    return select(self, dim, index)


_select_op.__name__ = "select"
op("select",
   checks=("min_dims(self)=1 | IndexError: select() cannot be applied to a 0-dim tensor.",
           "index_in_dim(self,dim,index) | IndexError: select(): index {index} out of range for tensor of size "
           "{shape} at dimension {dim}"),
   param_types={"dim": "int", "index": "int"}, storage="view",
   tensors=("self",), grad_fns=(P.SelectBackward0,), plannable=True)(_select_op)


@vjp("SelectBackward0", inputs=("self",), saves=("dim", "index", "self_sym_sizes"))
def _(ctx, grad):
    n = ctx.self_sym_sizes[ctx.dim]
    return _embed(grad, ctx.self_sym_sizes, (slice(None),) * ctx.dim + (ctx.index % n,), P.SelectBackwardBackward0),


@jvp()
def _(ctx, self_t):
    return select(self_t, ctx.dim, ctx.index)


batching(P.SelectBackward0, **shifted(dims=("dim",)))


def _embed(grad: Tensor, shape: tuple, index: tuple, name: Prim) -> Tensor:
    """Zeros of ``shape`` with ``grad`` written at a basic index (the VJP of select/slice: torch's
    select_backward / slice_backward, whose nodes under create_graph are ``name``)."""
    out = kcall(_embed_kernel, grad.data, tuple(shape), index)
    return record(name, out, (grad,), {"index": _index_to_data(index)})


def _index_to_data(index: tuple) -> list:
    out = []
    for it in index:
        if isinstance(it, slice):
            out.append({"slice": [it.start, it.stop, it.step]})
        else:
            out.append(int(it))
    return out


def _index_from_data(data: list) -> tuple:
    return tuple(slice(*it["slice"]) if isinstance(it, dict) else it for it in data)


@vjp("SelectBackwardBackward0", inputs=("grad",), saves=("index",))
@vjp("SliceBackwardBackward0", inputs=("grad",), saves=("index",))
def _embed_vjp(ctx, grad):
    idx = _index_from_data(ctx.index)
    return _basic_index(grad, idx),


@jvp(P.SelectBackwardBackward0)
@jvp(P.SliceBackwardBackward0)
def _embed_jvp(ctx, grad_t):
    return _embed(grad_t, ctx.result.data.shape, _index_from_data(ctx.index), ctx._prim)


def _basic_index(self: Tensor, idx: tuple) -> Tensor:
    """Apply a tuple of ints/slices (each addressing the next remaining dim) with select/slice ops."""
    out = self
    d = 0
    for it in idx:
        if isinstance(it, slice):
            start, stop, step = it.indices(out.data.shape[d])
            if (start, stop, step) != (0, out.data.shape[d], 1):
                out = _slice(out, d, start, stop, step)
            d += 1
        else:
            out = select(out, d, it)
    return out


# ----- indexing ------------------------------------------------------------------------------------------


def _normalize_index(index) -> tuple:
    if not isinstance(index, tuple):
        index = (index,)
    if any(isinstance(it, Tensor) and it.data.dtype == np.uint8 for it in index):
        # torch still reads a uint8 index tensor as a mask (deprecated, with its warning)
        from ..grad_mode import emit_warning
        emit_warning("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.")
        index = tuple(Tensor(it.data != 0) if isinstance(it, Tensor) and it.data.dtype == np.uint8 else it
                      for it in index)
    return index


_INDEX_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))  # index tensors: long or int (byte is a mask)


def _is_advanced(it) -> bool:
    return isinstance(it, (list, Tensor, np.ndarray)) and not isinstance(it, bool)


@op("getitem", functions=(), methods=(), checks=INDEX_CHECKS,
    parsed=False,
    tensors=("self", "index"), grad_fns=(P.SelectBackward0, P.SliceBackward0, P.IndexBackward0,
                                                   P.UnsqueezeBackward0), aliases=("__getitem__",), plannable=True)
def getitem(self, index):
    """``input[index]``: ints select, slices slice, None adds a dim, Ellipsis, int lists / int or bool
    tensors index (IndexBackward0)."""
    return _getitem(self, index, alias=True)


def _getitem(self, index, alias: bool):
    self = require_tensor(self)
    # torch's getitem records x[:] as a slice; x[:, :] and setitem's indexing skip full slices
    single_slice = alias and isinstance(index, slice)
    if self.data.ndim == 0 and (isinstance(index, (int, np.integer, slice)) and not isinstance(index, bool)):
        raise broken_check("getitem", self=self, index=index)
    index = _normalize_index(index)
    # expand Ellipsis
    n_ell = sum(1 for it in index if it is Ellipsis)
    if n_ell > 1:
        raise TorchIndexError("an index can only have a single ellipsis ('...')", code="invalid_index")
    consumed = 0
    for it in index:
        if it is None or it is Ellipsis or isinstance(it, bool):
            continue  # (a bool, as a 0-d mask, adds a dimension)
        if isinstance(it, Tensor) and it.data.dtype == np.bool_:
            consumed += it.data.ndim
        else:
            consumed += 1
    nd = self.data.ndim
    if consumed > nd:
        raise broken_check("getitem", self=self, index=index)
    given = index
    if n_ell:
        pos = next(i for i, it in enumerate(index) if it is Ellipsis)
        index = index[:pos] + (slice(None),) * (nd - consumed) + index[pos + 1:]
    out = self
    d = 0
    advanced = []  # (dim in `out`, index array)
    for it in index:
        if it is None:
            out = unsqueeze(out, d)
            d += 1
        elif isinstance(it, slice):
            for v in (it.start, it.stop, it.step):
                if v is not None and not isinstance(v, (int, np.integer)):
                    raise TorchIndexError("slice indices must be integers or None", code="invalid_index")
            if it.step is not None and it.step <= 0:
                raise TorchRuntimeError("step must be greater than zero", code="invalid_index")
            start, stop, step = it.indices(out.data.shape[d])
            stop = max(stop, start)
            if (start, stop, step) != (0, out.data.shape[d], 1) or single_slice:
                out = _slice(out, d, start, stop, step)
            d += 1
        elif isinstance(it, bool) or isinstance(it, Tensor) and it.data.dtype == np.bool_ and not it.data.ndim:
            # a 0-d mask (True, tensor(False)): a new dimension of size 1, masked (torch's one IndexBackward0)
            out = unsqueeze(out, d)
            advanced.append((d, np.array([bool(it if isinstance(it, bool) else it.data)])))
            d += 1
        elif isinstance(it, (int, np.integer)):
            n = out.data.shape[d]
            if not -n <= it < n:  # (torch names the index's place, not the dimension of the result so far)
                raise broken_check("getitem", self=self, index=_plain_index(given))
            if advanced:
                advanced.append((d, np.asarray(it)))
                d += 1
            else:
                out = select(out, d, int(it))
        elif _is_advanced(it):
            arr = it.data if isinstance(it, Tensor) else np.asarray(it)
            if arr.dtype == np.bool_:
                if arr.shape != out.data.shape[d:d + arr.ndim]:  # (the checks read a mask array as a list)
                    raise broken_check("getitem", self=self, index=tuple(
                        k.tolist() if isinstance(k, np.ndarray) else k for k in _plain_index(given)))
                advanced.append((d, arr))  # torch saves the mask itself (_saved_indices: bool)
                d += max(arr.ndim, 1)
            else:
                if arr.size == 0:
                    arr = arr.astype(np.int64)
                if isinstance(it, Tensor) and arr.dtype not in _INDEX_DTYPES:
                    raise broken_check("getitem", self=self, index=given)
                if arr.dtype.kind not in "iu":
                    raise TorchIndexError("tensors used as indices must be long, int, byte or bool tensors",
                                          code="invalid_index")
                n = out.data.shape[d]
                if arr.size and (arr.max() >= n or arr.min() < -n):
                    # (torch selects by the index's ints before it reads a tensor's values)
                    first = declared_failure("getitem", self=self, index=_plain_index(given))
                    if first is not None:
                        raise first
                    flat = arr.ravel(order="K")  # (torch's kernel meets the first bad one in the index's memory order)
                    bad = int(flat[(flat >= n) | (flat < -n)][0])
                    raise TorchIndexError(f"index {bad} is out of bounds for dimension {d} with size {n}" if n else
                                          "index is out of bounds for dimension with size 0",  # (torch's words)
                                          code="index_out_of_range")
                advanced.append((d, arr.astype(np.int64)))
                d += 1
        else:
            raise TorchIndexError(f"only integers, slices, None, Ellipsis, lists and tensors are valid indices "
                                  f"(got {type(it).__name__})", code="invalid_index")
    if advanced:
        out = _index(out, advanced)
    if out is self and alias:
        out = _as_view(record(P.AliasBackward0, self.data.view(), (self,)), self)
    return out


def _plain_index(index: tuple) -> tuple:
    """``index`` with numpy ints as Python ints, as the checks read an index."""
    return tuple(int(k) if isinstance(k, np.integer) else k for k in index)


def basic_getitem(self: Tensor, index) -> Tensor:
    """``self[index]`` for setitem: ``self`` itself when the index selects nothing (no AliasBackward0)."""
    return _getitem(self, index, alias=False)


@vjp("AliasBackward0", inputs=("self",))
def _(ctx, grad):
    return grad,


@jvp()
def _(ctx, self_t):
    return alias_view(self_t)


batching(P.AliasBackward0, vjp=SAME, jvp=SAME)


def alias_view(t: Tensor) -> Tensor:
    return _as_view(record(P.AliasBackward0, t.data.view(), (t,)), t)


# the primal of forward_ad.unpack_dual: a view without the tangent (torch's C++ node torch::autograd::Identity)
@vjp("Identity", inputs=("self",), cpp=True)
def _(ctx, grad):
    return grad,


@jvp()
def _(ctx, self_t):
    return alias_view(self_t)


batching(P.Identity, vjp=SAME, jvp=SAME)


def _index(self: Tensor, advanced: list) -> Tensor:
    """Advanced indexing: ``advanced`` lists (dim, index array); a k-dim bool mask covers k dims."""
    at = dict(advanced)
    idx = []
    d = 0
    while d < self.data.ndim:
        if d in at:
            arr = at[d]
            idx.append(arr)
            d += max(arr.ndim, 1) if arr.dtype == np.bool_ else 1
        else:
            idx.append(slice(None))
            d += 1
    idx = tuple(idx)
    try:
        out = self.data[idx]
    except IndexError as e:
        raise TorchIndexError(str(e), code="invalid_index") from None
    check_numel(out.shape, itemsize=out.itemsize)
    indices = [Tensor(np.asarray(i)) if not isinstance(i, slice) else None for i in idx]
    return record(P.IndexBackward0, np.array(out, copy=True), (self,),
                  {"indices": indices, "self_sym_sizes": self.data.shape})


declare("IndexPutImplBackward0")  # the node torch shows for IndexBackward0's gradient (computed by _index_put_zeros)


@vjp("IndexBackward0", inputs=("self",), saves=("indices", "self_sym_sizes"))
def _(ctx, grad):
    return _index_put_zeros(grad, ctx.self_sym_sizes, ctx.indices, P.IndexPutImplBackward0),


@jvp()
def _(ctx, self_t):
    return _index_by(self_t, ctx.indices)


def _take_kernel(a, *index):
    return np.array(a[index], copy=True)


def _indices_tuple(indices) -> tuple:
    return tuple(slice(None) if i is None else i.data for i in indices)


def _index_put_zeros(values: Tensor, shape: tuple, indices: list, name: Prim | None = None) -> Tensor:
    """Zeros of ``shape`` with ``values`` added at ``indices``: the backward formulas of the index-reading ops.
    ``name``: the node as torch's formula shows it under create_graph (``ScatterBackward0`` for sort's
    ``zeros.scatter(dim, indices, grad)``, ``IndexAddBackward0`` for index_select's ...); its backward is
    the same gather of the incoming gradient."""
    out = kcall(_put_zeros_kernel, values.data, tuple(shape), *_indices_tuple(indices))
    res = record(P.IndexPutAccBackward, out, (values,), {"indices": indices})
    if name is not None and res.grad_fn is not None:
        res.grad_fn.name = name.name
    return res


def _put_zeros_kernel(values, shape, *index):
    out = np.zeros(shape, values.dtype)
    np.add.at(out, index, values)
    return out


@vjp("IndexPutAccBackward", inputs=("values",), saves=("indices",))
def _(ctx, grad):
    return _index_by(grad, ctx.indices),


def _index_by(t: Tensor, indices: list) -> Tensor:
    """``t[indices]`` for saved advanced indices (IndexBackward0)."""
    return record(P.IndexBackward0, kcall(_take_kernel, t.data, *_indices_tuple(indices)), (t,),
                  {"indices": indices, "self_sym_sizes": t.data.shape})


@jvp()
def _(ctx, values_t):
    return _index_put_zeros(values_t, ctx.result.data.shape, ctx.indices)


@op("index_select", shape="index_select(self,dim,index)",
    checks=(DIM_FIRST, "max_dims(index)=1 | IndexError: index_select(): Index is supposed to be a vector",
            "scalar_index(self,index) | RuntimeError: index_select(): Index to scalar can have only 1 value, got {n} "
            "value(s)",
            "dtype(index)=int64,int32 | RuntimeError: index_select(): Expected dtype int32 or int64 for index"),
    param_types={"dim": "int"}, storage="new",
    tensors=("self", "index"))
def index_select(self, dim, index):
    """torch.index_select(input, dim, index)."""
    self = require_tensor(self)
    index = require_tensor(index, "index", "index_select")
    if index.data.dtype != np.int64 and index.data.dtype != np.int32 or index.data.ndim > 1:
        raise broken_check("index_select", self=self, dim=dim, index=index)
    d = wrap_dim(dim, self.data.ndim)
    n = self.data.shape[d] if self.data.ndim else 1
    ix = index.data.reshape(-1)
    if self.data.ndim == 0 and ix.size != 1:
        raise broken_check("index_select", self=self, dim=dim, index=index)
    bad = ix[(ix < 0) | (ix >= n)]  # (torch's CPU kernel takes no negative index)
    if bad.size:
        if d == 1 and self.data.ndim > 1:  # (its kernel for dim 1 says it its own way)
            raise TorchRuntimeError(f"INDICES element is out of DATA bounds, id={int(bad[0])} axis_dim={n}",
                                    code="index_out_of_range")
        raise TorchIndexError("index out of range in self", code="index_out_of_range")
    out = np.take(self.data, ix, axis=d) if self.data.ndim else self.data.reshape(1)[ix].reshape(())
    return record(P.IndexSelectBackward0, out, (self,),
                  {"dim": d, "index": index, "self_sym_sizes": self.data.shape})


@vjp("IndexSelectBackward0", inputs=("self",), saves=("dim", "index", "self_sym_sizes"))
def _(ctx, grad):
    d = ctx.dim
    shp = ctx.self_sym_sizes
    if not shp:  # a 0-d input: the one selected element
        return reshape(grad, ()),
    idx = [None] * len(shp)
    idx[d] = Tensor(ctx.index.data.reshape(-1))
    # broadcast the index along dim: index_add as an index_put with accumulation
    full = [Tensor(np.arange(s).reshape([-1 if k == j else 1 for k in range(len(shp))])) if j != d else None
            for j, s in enumerate(shp)]
    ix = ctx.index.data.reshape(-1)
    ix_b = Tensor(ix.reshape([-1 if k == d else 1 for k in range(len(shp))]))
    full[d] = ix_b
    return _index_put_zeros(grad, shp, full, P.IndexAddBackward0),


@jvp()
def _(ctx, self_t):
    return index_select(self_t, ctx.dim, ctx.index)


batching(P.IndexSelectBackward0, **shifted(dims=("dim",)))


@op("gather", shape="index_shape(index)",
    checks=(DIM_FIRST, "index_dtype(index)=int64,int32 | RuntimeError: gather(): Expected dtype int32/int64 for "
                        "index",
            "gather_shapes(self,dim,index)=ranks | RuntimeError: Index tensor must have the same number of "
            "dimensions as input tensor",
            "gather_shapes(self,dim,index)=sizes | RuntimeError: Size does not match at dimension {dim} expected "
            "index {index} to be no larger than self {self} apart from dimension {along}"),
    param_types={"dim": "int"}, storage="new",
    tensors=("self", "index"))
def gather(self, dim, index, sparse_grad=False):
    """torch.gather(input, dim, index)."""
    self = require_tensor(self)
    index = require_tensor(index, "index", "gather")
    if index.data.size and index.data.dtype != np.int64 and index.data.dtype != np.int32:  # (torch: not if empty)
        raise broken_check("gather", self=self, dim=dim, index=index)
    d = wrap_dim(dim, self.data.ndim)
    if not index.data.size:  # torch: an empty result of the index's shape, whatever its rank and dtype
        return record(P.GatherBackward0, np.zeros(index.data.shape, self.data.dtype), (self,),
                      {"dim": d, "index": index, "self": self, "sparse_grad": sparse_grad})
    if self.data.ndim <= 1 and index.data.ndim <= 1 and 0 in (self.data.ndim, index.data.ndim):
        # torch compares max(ndim, 1): a 0-d input or index gathers as a 1-element vector
        n = self.data.size
        ix = index.data.reshape(-1)
        _gather_bounds(ix, d, n)
        out = self.data.reshape(-1)[ix].reshape(index.data.shape)
        return record(P.GatherBackward0, out, (self,),
                      {"dim": d, "index": index, "self": self, "sparse_grad": sparse_grad})
    if index.data.ndim != self.data.ndim or any(
            k != d and index.data.shape[k] > self.data.shape[k] for k in range(self.data.ndim)):
        raise broken_check("gather", self=self, dim=dim, index=index)
    _gather_bounds(index.data, d, self.data.shape[d] if self.data.ndim else 1)
    src = self.data[tuple(slice(0, s) if k != d else slice(None) for k, s in enumerate(index.data.shape))]
    out = np.take_along_axis(src, index.data, axis=d)
    return record(P.GatherBackward0, out, (self,),
                  {"dim": d, "index": index, "self": self, "sparse_grad": sparse_grad})


def _gather_bounds(ix: np.ndarray, d: int, n: int) -> None:
    """torch's CPU kernel's: the first index (in order) out of [0, n); a negative one too."""
    bad = ix[(ix < 0) | (ix >= n)]
    if bad.size:
        raise TorchRuntimeError(f"index {int(bad.flat[0])} is out of bounds for dimension {d} with size {n}",
                                code="index_out_of_range")


@vjp("GatherBackward0", inputs=("self",), saves=("dim", "index", "self", "sparse_grad"))
def _(ctx, grad):
    shp = ctx.self.data.shape
    d = ctx.dim
    ix = ctx.index.data
    if not ix.size:  # an empty index (of any rank): nothing gathered, a zero gradient
        return Tensor(np.zeros(shp, grad.data.dtype)),
    if len(shp) == 0 or ix.ndim == 0:  # the 0-d forms: scatter into the flat input
        flat = _index_put_zeros(reshape(grad, (-1,)), (int(np.prod(shp)),), [Tensor(ix.reshape(-1))])
        return reshape(flat, shp),
    grids = list(np.indices(ix.shape, sparse=True))
    grids[d] = ix
    return _index_put_zeros(grad, shp, [Tensor(np.asarray(g)) for g in grids], P.ScatterAddBackward0),


@jvp()
def _(ctx, self_t):
    return gather(self_t, ctx.dim, ctx.index)



# the kernels above that only move elements run on float16/bfloat16 arrays as they are (kernel.MOVES): a copy, a
# join or a view keeps every bit, as torch's do
K.MOVES.update((_view, _view_as, _reshape, _transpose, _swapaxes, _basic_take, _broadcast_to, _clone, _concat,
                _stack_arrays, _split_kernel, _take_kernel, _embed_kernel, np.ascontiguousarray))
