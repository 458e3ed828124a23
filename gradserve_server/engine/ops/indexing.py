"""Scatter/index writes and selections: scatter (tensor and value forms), scatter_add, index_add,
index_copy, index_fill, masked_select, topk, kthvalue and roll (their in-place forms are in ``inplace``).

The VJPs are derivatives.yaml's: scatter's ``self`` gets the gradient with the written places zeroed and
its ``src`` the gathered gradient; topk/kthvalue put the gradient back where the selected values were.
"""

from __future__ import annotations

import types

import numpy as np

from .. import dtypes as D
from ..budget import current_control
from ..errors import InvalidArgumentError, TorchIndexError, TorchRuntimeError
from ..registry import P, broken_check, declare, jvp, op, record, vjp
from ..tensor import Tensor
from .common import DIM_FIRST, broadcast_shapes, is_number, require_tensor, saved_int, signed_int, wrap_dim
from .elementwise import checked_scalar, mul_number
from .reduction import ValuesIndices, _scatter_into_zeros, _value_selecting
from .shape import _index_put_zeros, expand, gather, index_select, reshape


def _dims_list(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _check_index(name: str, self: Tensor, dim: int, index: Tensor, src: Tensor | None) -> None:
    if index.data.size and index.data.dtype != np.int64 and index.data.dtype != np.int32:  # (torch: not if empty)
        raise broken_check(name, index=index)  # (scatter's message, scatter_add's too)
    if src is not None and src.dtype != self.dtype:
        # scatter_add and scatter_reduce share scatter's check and its name
        raise TorchRuntimeError("scatter(): Expected self.dtype to be equal to src.dtype", code="dtype_mismatch")
    nd = max(self.data.ndim, 1)
    if max(index.data.ndim, 1) != nd:
        raise TorchRuntimeError("Index tensor must have the same number of dimensions as self tensor",
                                code="shape_mismatch")
    if src is not None and max(src.data.ndim, 1) != nd:
        raise TorchRuntimeError("Index tensor must have the same number of dimensions as src tensor",
                                code="shape_mismatch")
    ishape = index.data.shape or (1,)
    sshape = self.data.shape or (1,)
    for k in range(nd):
        if (k != dim and ishape[k] > sshape[k]) or (src is not None and ishape[k] > (src.data.shape or (1,))[k]):
            tail = f" and to be no larger size than src {_dims_list(src.data.shape)}" if src is not None else ""
            raise TorchRuntimeError(f"Expected index {_dims_list(index.data.shape)} to be no larger than self "
                                    f"{_dims_list(self.data.shape)} apart from dimension {dim}{tail}",
                                    code="shape_mismatch")
    n = sshape[dim]
    ix = index.data
    if ix.size and (ix.max() >= n or ix.min() < 0):
        bad = int(ix[(ix >= n) | (ix < 0)].flat[0])  # the first one in order, as torch's kernel reports it
        raise TorchRuntimeError(f"index {bad} is out of bounds for dimension {dim} with size {n}",
                                code="index_out_of_range")


def _grids(index: np.ndarray, dim: int) -> tuple:
    grids = list(np.indices(index.shape, sparse=True))
    grids[dim] = index
    return tuple(grids)


def _src_block(src: np.ndarray, index: np.ndarray) -> np.ndarray:
    return src[tuple(slice(0, s) for s in index.shape)]


@op("scatter",
    checks=(DIM_FIRST,
            "index_dtype(index)=int64,int32 | RuntimeError: scatter(): Expected dtype int32/int64 for index"),
    overloads={
        "function": (
            "(Tensor input, int dim, Tensor index, Tensor src, *, Tensor out = None)",
            "(Tensor input, int dim, Tensor index, Tensor src, *, str reduce, Tensor out = None)",
            "(Tensor input, int dim, Tensor index, Number value, *, Tensor out = None)",
            "(Tensor input, int dim, Tensor index, Number value, *, str reduce, Tensor out = None)",
        ),
        "method": (
            "(int dim, Tensor index, Tensor src)",
            "(int dim, Tensor index, Tensor src, *, str reduce)",
            "(int dim, Tensor index, Number value)",
            "(int dim, Tensor index, Number value, *, str reduce)",
        ),
    },
    tensors=("self", "index", "src"))
def scatter(self, dim, index, src=None, value=None):
    """torch.scatter(input, dim, index, src) (ScatterBackward0) or (input, dim, index, value) with a number
    (ScatterBackward1): out[index[i][j]][j] = src[i][j] for dim 0."""
    self = require_tensor(self, "input", "scatter")
    index = require_tensor(index, "index", "scatter")
    if src is not None and not isinstance(src, Tensor):
        if not is_number(src):
            raise InvalidArgumentError(f"scatter(): argument 'src' must be Tensor or Number, not {type(src).__name__}")
        src, value = None, src
    if src is None and value is None:
        raise InvalidArgumentError("scatter(): expected a 'src' tensor or a 'value' number")
    d = wrap_dim(dim, self.data.ndim)
    _check_index("scatter", self, d, index, src)
    out = self.data.copy()
    view = out.reshape(out.shape or (1,))
    ix = index.data.reshape(index.data.shape or (1,))
    ix = ix if ix.size else ix.astype(np.int64)  # (an empty index of any dtype: nothing is written, as in torch)
    if src is not None:
        s = src.data.reshape(src.data.shape or (1,))
        view[_grids(ix, d)] = _src_block(s, ix)
        return record(P.ScatterBackward0, out, (self, src), {"dim": saved_int(dim), "index": index})
    view[_grids(ix, d)] = out.dtype.type(value)
    return record(P.ScatterBackward1, out, (self,), {"dim": saved_int(dim), "index": index})


def _gather_src(grad: Tensor, dim: int, index: Tensor, src_shape: tuple) -> Tensor:
    # src larger than index: an index-shaped gradient, which the backward pass refuses as torch's does
    return gather(grad, dim, index)


@vjp("ScatterBackward0", inputs=("self", "src"), saves=("dim", "index"))
def _(ctx, grad):
    n = ctx.needs
    src_shape = ctx.node.input_meta[1][0] if n[1] else None
    return ((scatter(grad, signed_int(ctx.dim), ctx.index, value=0.0) if n[0] else None),
            (_gather_src(grad, signed_int(ctx.dim), ctx.index, src_shape) if n[1] else None))


def _self_tangent(ctx, self_t):
    """The tangent of ``self`` for a JVP that writes into it: zeros of the result's dtype when self has none."""
    return self_t if self_t is not None else Tensor(np.zeros(ctx.self.shape, ctx.result.data.dtype))


@jvp()
def _(ctx, self_t, src_t):
    base = _self_tangent(ctx, self_t)
    src = src_t if src_t is not None else Tensor(np.zeros(ctx.src.shape, ctx.result.data.dtype))
    return scatter(base, signed_int(ctx.dim), ctx.index, src)


@vjp("ScatterBackward1", inputs=("self",), saves=("dim", "index"))
def _(ctx, grad):
    return scatter(grad, signed_int(ctx.dim), ctx.index, value=0.0),


@jvp()
def _(ctx, self_t):
    return scatter(self_t, signed_int(ctx.dim), ctx.index, value=0.0)


@op("scatter_add",
    checks=(DIM_FIRST,
            "index_dtype(index)=int64,int32 | RuntimeError: scatter(): Expected dtype int32/int64 for index"),
    tensors=("self", "index", "src"))
def scatter_add(self, dim, index, src):
    """torch.scatter_add(input, dim, index, src): out[index[i][j]][j] += src[i][j] for dim 0."""
    self = require_tensor(self, "input", "scatter_add")
    index = require_tensor(index, "index", "scatter_add")
    src = require_tensor(src, "src", "scatter_add")
    d = wrap_dim(dim, self.data.ndim)
    _check_index("scatter_add", self, d, index, src)
    out = self.data.copy()
    view = out.reshape(out.shape or (1,))
    ix = index.data.reshape(index.data.shape or (1,))
    ix = ix if ix.size else ix.astype(np.int64)  # (an empty index of any dtype: nothing is written, as in torch)
    np.add.at(view, _grids(ix, d), _src_block(src.data.reshape(src.data.shape or (1,)), ix))
    return record(P.ScatterAddBackward0, out, (self, src), {"dim": saved_int(dim), "index": index})


@vjp("ScatterAddBackward0", inputs=("self", "src"), saves={"dim": (), "index": ("src",)})
def _(ctx, grad):
    n = ctx.needs
    src_shape = ctx.node.input_meta[1][0] if n[1] else None
    g_src = _gather_src(grad, signed_int(ctx.dim), ctx.index, src_shape) if n[1] else None
    return (grad if n[0] else None), g_src


@jvp()
def _(ctx, self_t, src_t):
    if src_t is None:
        return self_t
    base = _self_tangent(ctx, self_t)
    return scatter_add(base, signed_int(ctx.dim), ctx.index, src_t)


def _check_index_source(name: str, self: Tensor, d: int, index: Tensor, source: Tensor) -> np.ndarray:
    """torch's checks of index_add_ / index_copy_ (named with the in-place kernel's name, as torch does), each
    kernel in its own order and words."""
    k = name + "_"
    itype = D.SCALAR_TYPE_NAMES.get(index.dtype, index.dtype)
    stype, srctype = D.SCALAR_TYPE_NAMES[self.dtype], D.SCALAR_TYPE_NAMES[source.dtype]
    ix = index.data.reshape(-1)
    sdim, srcdim = self.data.ndim, source.data.ndim
    if name == "index_copy":
        if index.data.ndim > 1:
            raise TorchIndexError(f"{k}(): Index should have dimension 1 or 0 (got {index.data.ndim})",
                                  code="invalid_index")
        if srcdim == 0 and ix.size != 1:
            raise TorchIndexError(f"{k}(): When source is scalar, index should have one element (got {ix.size})",
                                  code="shape_mismatch")
        if srcdim != sdim and srcdim and sdim:
            raise TorchIndexError(f"{k}(): When source and destination are not scalars, their dimensionality must "
                                  f"match. Source dimensionality ({srcdim}), destination dimensionality ({sdim})",
                                  code="shape_mismatch")
        if index.data.dtype != np.int64:
            raise TorchRuntimeError(f"{k}(): Expected a long tensor for index, but got {itype}", code="invalid_dtype")
        if source.dtype != self.dtype:
            raise TorchRuntimeError(f"{k}(): self and source expected to have the same dtype, but got (self) {stype} "
                                    f"and (source) {srctype}", code="dtype_mismatch")
        ss = [n for i, n in enumerate(self.data.shape) if i != d]
        rs = [n for i, n in enumerate(source.data.shape) if i != d]
        if ss != rs:
            raise TorchRuntimeError(f"{k}(): Source/destination tensor must have same slice shapes. Destination "
                                    f"slice shape: {' '.join(map(str, ss))} at dimension {d} and source slice shape: "
                                    f"{' '.join(map(str, rs))} at dimension 0.", code="shape_mismatch")
        if srcdim and ix.size != source.data.shape[d]:
            raise TorchIndexError(f"{k}(): Number of indices ({ix.size}) should be equal to source.size(dim) "
                                  f"({source.data.shape[d]})", code="shape_mismatch")
    else:
        if index.data.ndim > 1:
            raise TorchIndexError(f"{k}(): Index is supposed to be a vector, but got dim: {index.data.ndim} with type: "
                                  f"{itype} and size: {_dims_list(index.data.shape)}", code="invalid_index")
        if index.data.dtype != np.int64 and index.data.dtype != np.int32:
            raise TorchRuntimeError(f"{k}(): Expected dtype int32/int64 for index but got: {itype}",
                                    code="invalid_dtype")
        if source.dtype != self.dtype:
            raise TorchRuntimeError(f"{k}(): self ({stype}) and source ({srctype}) must have the same scalar type",
                                    code="dtype_mismatch")
        if d != 0 and d >= srcdim:
            raise TorchRuntimeError(f"{k}(): Indexing dim {d} is out of bounds of the source tensor with dim "
                                    f"{srcdim}", code="shape_mismatch")
        src_n = source.data.shape[d] if srcdim else 1
        if ix.size != src_n and not srcdim:  # torch's message reads source.size(dim) of the 0-d source
            raise TorchIndexError(f"Dimension specified as {d} but tensor has no dimensions", code="dim_out_of_range")
        if ix.size != src_n:
            raise TorchRuntimeError(f"{k}(): Number of indices ({ix.size}) should be equal to source.size(dim): "
                                    f"({src_n}), for dim: {d}", code="shape_mismatch")
        ss, rs = list(self.data.shape), list(source.data.shape)
        if sdim and srcdim:
            del ss[d], rs[d]
        if ss != rs:
            raise TorchRuntimeError(f"source tensor shape must match self tensor shape, excluding the specified "
                                    f"dimension. Got self.shape = {_dims_list(self.data.shape)} source.shape = "
                                    f"{_dims_list(source.data.shape)}", code="shape_mismatch")
    n = self.data.shape[d] if self.data.ndim else 1
    bad = (ix >= n) | (ix < 0)  # torch's index_add/index_copy kernels take no negative indices
    if bad.any():
        first = int(ix[bad][0])
        if name == "index_copy":
            raise TorchIndexError(f"index_copy_(): index {first} is out of bounds for dimension {d} with size {n}",
                                  code="index_out_of_range")
        if name == "index_add" and d == 0 and self.data.ndim > 1:  # the CPU kernel's dim-0 loop
            raise TorchRuntimeError(f"index {first} is out of bounds for dimension {d} with size {n}",
                                    code="index_out_of_range")
        raise TorchIndexError("index out of range in self", code="index_out_of_range")
    return ix


def _along(d: int, nd: int, ix: np.ndarray) -> tuple:
    return (slice(None),) * d + (ix,)


@op("index_add", tensors=("self", "index", "source"))
def index_add(self, dim, index, source, alpha=1):
    """torch.index_add(input, dim, index, source, alpha=1): out[index[i]] += alpha * source[i] along dim."""
    self = require_tensor(self, "input", "index_add")
    index = require_tensor(index, "index", "index_add")
    source = require_tensor(source, "source", "index_add")
    d = wrap_dim(dim, self.data.ndim)
    ix = _check_index_source("index_add", self, d, index, source)
    out = self.data.copy()
    src = source.data if alpha == 1 else source.data * out.dtype.type(alpha)
    if out.ndim:
        np.add.at(out, _along(d, out.ndim, ix), src)
    else:
        out = out + src.reshape(())
    return record(P.IndexAddBackward0, np.asarray(out, self.data.dtype), (self, source),
                  {"alpha": alpha, "dim": saved_int(dim), "index": index, "source": source,
                   "source_dim": source.data.ndim})


@vjp("IndexAddBackward0", inputs=("self", "source"),
     saves={"alpha": (), "dim": (), "index": ("source",), "source": ("source",), "source_dim": ()})
def _(ctx, grad):
    n = ctx.needs
    g_src = None
    if n[1]:
        # derivatives.yaml: maybe_multiply(grad.index_select(dim, index).expand_as(source), alpha)
        g_src = index_select(grad, signed_int(ctx.dim), ctx.index) if grad.data.ndim else grad
        g_src = expand(g_src, ctx.node.input_meta[1][0]) if grad.data.ndim else g_src
        if ctx.alpha != 1:
            g_src = mul_number(g_src, ctx.alpha)
    return (grad if n[0] else None), g_src


@jvp()
def _(ctx, self_t, source_t):
    if source_t is None:
        return self_t
    base = _self_tangent(ctx, self_t)
    return index_add(base, signed_int(ctx.dim), ctx.index, source_t, alpha=ctx.alpha)


@op("index_copy", tensors=("self", "index", "source"))
def index_copy(self, dim, index, source):
    """torch.index_copy(input, dim, index, source): out[index[i]] = source[i] along dim."""
    self = require_tensor(self, "input", "index_copy")
    index = require_tensor(index, "index", "index_copy")
    source = require_tensor(source, "source", "index_copy")
    d = wrap_dim(dim, self.data.ndim)
    ix = _check_index_source("index_copy", self, d, index, source)
    out = self.data.copy()
    if out.ndim:
        out[_along(d, out.ndim, ix)] = source.data
    else:
        out = source.data.reshape(()).copy()
    return record(P.IndexCopyBackward0, np.asarray(out, self.data.dtype), (self, source),
                  {"dim": saved_int(dim), "index": index, "source": source, "source_dim": source.data.ndim})


@vjp("IndexCopyBackward0", inputs=("self", "source"),
     saves={"dim": (), "index": (), "source": ("source",), "source_dim": ()})
def _(ctx, grad):
    n = ctx.needs
    g_self = g_src = None
    if n[0]:  # grad.index_fill(dim, index, 0)
        keep = np.ones(grad.data.shape, grad.data.dtype)
        if keep.ndim:
            keep[_along(wrap_dim(signed_int(ctx.dim), keep.ndim), keep.ndim, ctx.index.data.reshape(-1))] = 0
        else:
            keep[...] = 0
        g_self = grad * Tensor(keep)
        if g_self.grad_fn is not None:  # torch's node for grad.index_fill(dim, index, 0): the same product
            g_self.grad_fn.name = P.IndexFillBackward0.name
    if n[1]:  # grad.index_select(dim, index): a 0-d source's [1] is summed to its shape (SumBackward0)
        g_src = index_select(grad, signed_int(ctx.dim), ctx.index) if grad.data.ndim else grad
    return g_self, g_src


@jvp()
def _(ctx, self_t, source_t):
    dt = ctx.result.data.dtype
    base = self_t if self_t is not None else Tensor(np.zeros(ctx.self.shape, dt))
    src = source_t if source_t is not None else Tensor(np.zeros(ctx.source.shape, dt))
    return index_copy(base, signed_int(ctx.dim), ctx.index, src)


@op("index_fill",
    overloads={
        "function": (
            "(Tensor input, int dim, Tensor index, Tensor value)",
            "(Tensor input, int dim, Tensor index, Number value)",
        ),
        "method": ("(int dim, Tensor index, Tensor value)", "(int dim, Tensor index, Number value)"),
    },
    tensors=("self", "index", "value"), grad_fns=(P.IndexFillBackward0, P.IndexFillBackward1))
def index_fill(self, dim, index, value):
    """torch.index_fill(input, dim, index, value): out[index[i]] = value along dim; a number value is
    IndexFillBackward0, a 0-d tensor value IndexFillBackward1 (its gradient: the sum over the distinct
    indices)."""
    self = require_tensor(self, "input", "index_fill")
    index = require_tensor(index, "index", "index_fill")
    nd = self.data.ndim
    d = wrap_dim(dim, nd)
    if index.data.dtype != np.int64:
        raise TorchIndexError("index_fill_(): Expected dtype int64 for index.", code="invalid_dtype")
    if index.data.ndim > 1:
        raise TorchRuntimeError("Index has to be a vector/scalar", code="invalid_index")
    if isinstance(value, Tensor):
        if value.data.ndim != 0:
            raise TorchRuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                                    f"{value.data.ndim} dimension(s).", code="invalid_argument")
        fill = value.data
    elif is_number(value):
        fill = value
    else:
        raise InvalidArgumentError(f"index_fill(): argument 'value' must be Tensor or Number, not "
                                   f"{type(value).__name__}")
    n = self.data.shape[d] if nd else 1
    ix = index.data.reshape(-1)
    bad = ix[(ix >= n) | (ix < -n)]
    if bad.size:
        raise TorchIndexError(f"index {int(bad[0])} is out of bounds for dimension {d} with size {n}",
                              code="index_out_of_range")
    out = self.data.copy()
    if isinstance(value, Tensor) and out.dtype.kind in "iu":
        fill = value.item()
    if is_number(fill) and out.dtype.kind in "iu":
        fill = checked_scalar(fill, D.of_array(out))  # torch's Scalar conversion: overflow is an error
    with np.errstate(all="ignore"):
        fill = np.asarray(fill).astype(out.dtype)  # a float into an int tensor truncates, as torch's fill
    if nd:
        out[_along(d, nd, ix % n)] = fill
    elif ix.size:
        out[...] = fill
    if isinstance(value, Tensor):
        return record(P.IndexFillBackward1, out, (self, value), {"dim": saved_int(dim), "index": index})
    return record(P.IndexFillBackward0, out, (self,), {"dim": saved_int(dim), "index": index})


@vjp("IndexFillBackward0", inputs=("self",), saves=("dim", "index"))
def _(ctx, grad):
    return index_fill(grad, signed_int(ctx.dim), ctx.index, 0.0),


@jvp()
def _(ctx, self_t):
    return index_fill(self_t, signed_int(ctx.dim), ctx.index, 0.0)


@vjp("IndexFillBackward1", inputs=("self", "value"), saves=("dim", "index"))
def _(ctx, grad):
    from .reduction import sum as sum_
    n = ctx.needs
    dim = signed_int(ctx.dim)
    g_value = None
    if n[1]:  # grad.index_select(dim, unique(index)).sum()
        uniq = Tensor(np.unique(ctx.index.data.reshape(-1) % max(grad.data.shape[dim] if grad.data.ndim else 1, 1)))
        g_value = sum_(index_select(grad, dim, uniq)) if grad.data.ndim else \
            (sum_(grad) if uniq.data.size else sum_(grad * 0.0))
    return (index_fill(grad, dim, ctx.index, 0.0) if n[0] else None), g_value


@jvp()
def _(ctx, self_t, value_t):
    base = _self_tangent(ctx, self_t)
    return index_fill(base, signed_int(ctx.dim), ctx.index, value_t if value_t is not None else 0.0)


@op("masked_select", checks=("dtype(mask)=bool | RuntimeError: masked_select: expected BoolTensor for mask",),
    tensors=("self", "mask"))
def masked_select(self, mask):
    """torch.masked_select(input, mask): the elements where the (broadcast) mask is true, as a 1-D tensor."""
    self = require_tensor(self, "input", "masked_select")
    mask = require_tensor(mask, "mask", "masked_select")
    if mask.data.dtype != np.bool_:
        raise broken_check("masked_select", mask=mask)
    shape = broadcast_shapes(self.shape, mask.shape)
    out = np.broadcast_to(self.data, shape)[np.broadcast_to(mask.data, shape)]
    return record(P.MaskedSelectBackward0, np.ascontiguousarray(out), (self,), {"mask": mask, "self": self})


declare("MaskedScatterBackward0")  # the node torch shows for MaskedSelectBackward0's gradient


@vjp("MaskedSelectBackward0", inputs=("self",), saves=("mask", "self"))
def _(ctx, grad):
    shape = broadcast_shapes(ctx.self.shape, ctx.mask.shape)
    if not shape:  # 0-d input and mask: scattered as one element (numpy has no nonzero of a 0-d array)
        g = _index_put_zeros(grad, (1,), [Tensor(np.nonzero(ctx.mask.data.reshape(1))[0])],
                             P.MaskedScatterBackward0)
        return reshape(g, ()),
    where_true = np.nonzero(np.broadcast_to(ctx.mask.data, shape))
    return _index_put_zeros(grad, shape, [Tensor(np.asarray(w, np.int64)) for w in where_true],
                            P.MaskedScatterBackward0),


@jvp()
def _(ctx, self_t):
    return masked_select(self_t, ctx.mask)


# ----- torch's CPU topk (SortingKernel.cpp topk_impl_loop): libstdc++ nth_element, then std::sort of the first
# k - 1 (sorted=True); which of equal values or NaNs is picked, and the order with sorted=False, follow them

class _Depth(Exception):
    """libstdc++ would switch to its heap fallback here (not ported): keep the stable order."""


def _lg(n: int) -> int:
    return n.bit_length() - 1


def _topk_cmp(largest: bool):
    if largest:  # NaN sorts as top
        return lambda x, y: (x[0] != x[0] and y[0] == y[0]) or x[0] > y[0]
    return lambda x, y: (x[0] == x[0] and y[0] != y[0]) or x[0] < y[0]


def _move_median_to_first(a, result, i, j, k, comp):
    if comp(a[i], a[j]):
        m = j if comp(a[j], a[k]) else (k if comp(a[i], a[k]) else i)
    elif comp(a[i], a[k]):
        m = i
    else:
        m = k if comp(a[j], a[k]) else j
    a[result], a[m] = a[m], a[result]


def _unguarded_partition(a, first, last, pivot, comp):
    while True:
        while comp(a[first], a[pivot]):
            first += 1
        last -= 1
        while comp(a[pivot], a[last]):
            last -= 1
        if not first < last:
            return first
        a[first], a[last] = a[last], a[first]
        first += 1


def _partition_pivot(a, first, last, comp):
    _move_median_to_first(a, first, first + 1, first + (last - first) // 2, last - 1, comp)
    return _unguarded_partition(a, first + 1, last, first, comp)


def _linear_insert(a, last, comp):
    val = a[last]
    while comp(val, a[last - 1]):
        a[last] = a[last - 1]
        last -= 1
    a[last] = val


def _insertion_sort(a, first, last, comp):
    for i in range(first + 1, last):
        if comp(a[i], a[first]):
            a[first:i + 1] = [a[i]] + a[first:i]
        else:
            _linear_insert(a, i, comp)


def _nth_element(a, nth, comp):
    first, last = 0, len(a)
    depth = _lg(last) * 2
    while last - first > 3:
        if depth == 0:
            raise _Depth
        depth -= 1
        cut = _partition_pivot(a, first, last, comp)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(a, first, last, comp)


def _introsort_loop(a, first, last, depth, comp):
    while last - first > 16:
        if depth == 0:
            raise _Depth
        depth -= 1
        cut = _partition_pivot(a, first, last, comp)
        _introsort_loop(a, cut, last, depth, comp)
        last = cut


def _std_sort(a, last, comp):
    if last == 0:
        return
    _introsort_loop(a, 0, last, _lg(last) * 2, comp)
    _insertion_sort(a, 0, min(last, 16), comp)
    for i in range(16, last):
        _linear_insert(a, i, comp)


def _topk_row(vals: list, k: int, largest: bool, sorted_: bool) -> list | None:
    q = [(v, j) for j, v in enumerate(vals)]
    comp = _topk_cmp(largest)
    try:
        _nth_element(q, k - 1, comp)
        if sorted_:
            _std_sort(q, k - 1, comp)
    except _Depth:
        return None
    return [j for _, j in q[:k]]


def _topk_as_torch(x: np.ndarray, ax: int, k: int, largest: bool, sorted_: bool, idx: np.ndarray) -> None:
    """Rows whose answer is not the stable argsort's (ties, NaNs, or sorted=False) get torch's indices,
    written into ``idx`` in place. Not followed (the stable order stays): torch's partial_sort path
    (k * 64 <= n) and inputs over 100,000 elements."""
    n = x.shape[ax]
    if k == 0 or k * 64 <= n or x.size > 100_000:
        return
    rows = np.moveaxis(x, ax, -1).reshape(-1, n)
    if sorted_:
        srt = np.sort(rows, axis=-1)
        todo = np.nonzero(np.isnan(srt).any(-1) | (srt[:, 1:] == srt[:, :-1]).any(-1))[0]
    else:
        todo = range(rows.shape[0])
    if not len(todo):
        return
    out = np.moveaxis(idx, ax, -1).copy()
    flat = out.reshape(-1, k)
    control = current_control()
    for r in todo:
        if control is not None:
            control.check()
        got = _topk_row(rows[r].tolist(), k, largest, sorted_)
        if got is not None:
            flat[r] = got
    idx[...] = np.moveaxis(flat.reshape(out.shape), -1, ax)


@op("topk", promotion="same => same,int64",
    checks=(DIM_FIRST, "k_in_range(self,k,dim) | RuntimeError: selected index k out of range",
            "dtype(self)=!bool | RuntimeError: topk does not support bool dtypes on CPU"),
    tensors=("self",), returns=ValuesIndices._fields)
def topk(self, k, dim=-1, largest=True, sorted=True):
    """torch.topk(input, k, dim=-1, largest=True, sorted=True) -> (values, indices)."""
    self = require_tensor(self, "input", "topk")
    nd = self.data.ndim
    d = wrap_dim(dim, nd)
    n = self.data.shape[d] if nd else 1
    if k < 0 or k > n or self.data.dtype == np.bool_:  # (torch: k's range before the dtype)
        raise broken_check("topk", self=self, k=k, dim=dim)
    x = self.data if nd else self.data.reshape(1)
    # ~x orders integers in reverse without -x's wrap-around (int8's -(-128), any uint8)
    key = (~x if x.dtype.kind in "iu" else -x) if largest else x
    idx = np.argsort(key, axis=d if nd else 0, kind="stable")
    idx = np.take(idx, np.arange(k), axis=d if nd else 0).astype(np.int64)
    _topk_as_torch(x, d if nd else 0, k, largest, sorted, idx)
    vals = np.take_along_axis(x, idx, axis=d if nd else 0)
    if not nd:
        idx, vals = idx.reshape(()), vals.reshape(())
    indices = Tensor(idx)
    values = record(P.TopkBackward0, np.array(vals, copy=True), (self,),
                    {"dim": saved_int(dim), "indices": indices, "self_sym_sizes": self.data.shape})
    return ValuesIndices(values, indices)


@vjp("TopkBackward0", inputs=("self",), saves=("dim", "indices", "self_sym_sizes"))
def _(ctx, grad):
    shp = ctx.self_sym_sizes
    if not shp:
        return grad,
    return _scatter_into_zeros(grad, shp, wrap_dim(signed_int(ctx.dim), len(shp)), ctx.indices.data),


@jvp()
def _(ctx, self_t):
    if self_t.data.ndim == 0:
        return self_t
    return gather(self_t, signed_int(ctx.dim), ctx.indices)


def _gt_or_nan(x, y) -> bool:
    return (x != x and y == y) or x > y


def _quick_select(vals: list, idx: list, k: int) -> None:
    """ATen's ``quick_select_template`` (SortingUtils.h) with kthvalue's comparator (NaN sorts as largest),
    in place on one row: which of equal values (or NaNs, or 0.0 and -0.0) lands at ``k`` is decided by its
    median-of-three partitioning, not by position."""
    def swap(i, j):
        vals[i], vals[j] = vals[j], vals[i]
        idx[i], idx[j] = idx[j], idx[i]
    lo, hi = 0, len(vals) - 1
    control = current_control()  # a row of millions of ties takes seconds here: the request's deadline holds
    while hi > lo:
        if control is not None:
            control.check()
        if hi == lo + 1:
            if _gt_or_nan(vals[lo], vals[hi]):
                swap(lo, hi)
            return
        swap(lo + (hi - lo) // 2, lo + 1)
        if _gt_or_nan(vals[lo + 1], vals[hi]):
            swap(lo + 1, hi)
        if _gt_or_nan(vals[lo], vals[hi]):
            swap(lo, hi)
        if _gt_or_nan(vals[lo + 1], vals[lo]):
            swap(lo + 1, lo)
        i, j, piv = lo + 1, hi, vals[lo]
        while True:
            i += 1
            while _gt_or_nan(piv, vals[i]):
                i += 1
            j -= 1
            while _gt_or_nan(vals[j], piv):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(lo, j)
        if j <= k:
            lo = i
        if j >= k:
            hi = j - 1


def _kth_ties_as_torch(x: np.ndarray, ax: int, k: int, idx: np.ndarray) -> None:
    """Rows with distinct values have one answer (the stable argsort's); rows with ties or NaNs get the index
    torch's CPU kernel returns, written into ``idx`` (keepdim-shaped) in place."""
    rows = np.moveaxis(x, ax, -1).reshape(-1, x.shape[ax])
    srt = np.sort(rows, axis=-1)
    tied = np.nonzero(np.isnan(srt).any(-1) | (srt[:, 1:] == srt[:, :-1]).any(-1))[0] if rows.size else []
    if not len(tied):
        return
    out = np.moveaxis(idx, ax, -1).reshape(-1)
    for r in tied:
        vals, pos = rows[r].tolist(), list(range(rows.shape[1]))
        _quick_select(vals, pos, k - 1)
        out[r] = pos[k - 1]
    idx[...] = np.moveaxis(out.reshape(np.moveaxis(idx, ax, -1).shape), -1, ax)


@op("kthvalue", promotion="same => same,int64", tensors=("self",), returns=ValuesIndices._fields)
def kthvalue(self, k, dim=-1, keepdim=False):
    """torch.kthvalue(input, k, dim=-1, keepdim=False) -> (values, indices): the k-th smallest (1-based)."""
    self = require_tensor(self, "input", "kthvalue")
    nd = self.data.ndim
    d = wrap_dim(dim, nd)
    n = self.data.shape[d] if nd else 1
    if k < 1 or k > n:
        raise TorchRuntimeError(f"kthvalue(): selected number k out of range for dimension {d}",
                                code="index_out_of_range")
    x = self.data if nd else self.data.reshape(1)
    ax = d if nd else 0
    idx = np.take(np.argsort(x, axis=ax, kind="stable"), [k - 1], axis=ax).astype(np.int64)
    _kth_ties_as_torch(x, ax, k, idx)
    vals = np.take_along_axis(x, idx, axis=ax)
    if not keepdim or not nd:
        idx, vals = np.squeeze(idx, ax), np.squeeze(vals, ax)
        if not nd:
            idx, vals = idx.reshape(()), vals.reshape(())
    indices = Tensor(np.array(idx, copy=True))
    values = record(P.KthvalueBackward0, np.array(vals, copy=True), (self,),
                    {"dim": saved_int(dim), "indices": indices, "keepdim": keepdim, "self_sym_sizes": self.data.shape})
    return ValuesIndices(values, indices)


@vjp("KthvalueBackward0", inputs=("self",), saves=("dim", "indices", "keepdim", "self_sym_sizes"))
def _(ctx, grad):
    shp = ctx.self_sym_sizes
    wrapped = types.SimpleNamespace(dim=wrap_dim(signed_int(ctx.dim), len(shp)), indices=ctx.indices,
                                    keepdim=ctx.keepdim, self_sym_sizes=shp)
    return _value_selecting(wrapped, grad)


@jvp()
def _(ctx, self_t):
    from .shape import squeeze, unsqueeze
    if self_t.data.ndim == 0:
        return self_t
    d = signed_int(ctx.dim)
    idx = ctx.indices if ctx.keepdim else unsqueeze(ctx.indices, d)
    out = gather(self_t, d, idx)
    return out if ctx.keepdim else squeeze(out, d)


@op("roll", tensors=("self",),
    checks=("zero_dim_dims(self,dims)=given | IndexError: Dimension specified as {dim} but tensor has no dimensions",))
def roll(self, shifts, dims=None):
    """torch.roll(input, shifts, dims=None): without dims the flattened input is rolled."""
    self = require_tensor(self, "input", "roll")
    sh = [shifts] if isinstance(shifts, (int, np.integer)) else list(shifts)
    if not sh:
        raise TorchRuntimeError("`shifts` required", code="invalid_argument")
    if dims is None:
        if len(sh) != 1:
            raise TorchRuntimeError(f"shifts and dimensions must align. shifts: {len(sh)}, dims:0",
                                    code="invalid_argument")
        out = np.roll(self.data.reshape(-1), sh[0]).reshape(self.data.shape)
        return record(P.RollBackward0, out, (self,), {"dims": [], "shifts": saved_int(sh)})
    dl = [dims] if isinstance(dims, (int, np.integer)) else list(dims)
    if len(sh) != len(dl):
        raise TorchRuntimeError(f"shifts and dimensions must align. shifts: {len(sh)}, dims:{len(dl)}",
                                code="invalid_argument")
    if not self.data.ndim:  # roll's own dim check: no dim of a 0-d tensor is valid (wrap_dim allows 0 and -1)
        raise broken_check("roll", self=self, dims=dims)
    w = [wrap_dim(x, self.data.ndim) for x in dl]
    out = np.roll(self.data, sh, axis=w)
    # torch's roll is cat of two narrows (or rolls of those, one dim at a time): a contiguous result whatever
    # the input's layout (numpy's keeps an expanded or transposed one)
    out = np.ascontiguousarray(out)
    return record(P.RollBackward0, out, (self,), {"dims": saved_int(dl), "shifts": saved_int(sh)})


@vjp("RollBackward0", inputs=("self",), saves=("dims", "shifts"))
def _(ctx, grad):
    neg = [-s for s in signed_int(ctx.shifts)]
    return roll(grad, neg, signed_int(ctx.dims) if ctx.dims else None),


@jvp()
def _(ctx, self_t):
    return roll(self_t, signed_int(ctx.shifts), signed_int(ctx.dims) if ctx.dims else None)
