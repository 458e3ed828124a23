"""Ops torch writes as compositions of other ops (CompositeImplicitAutograd): movedim, broadcast_to, tile,
unflatten, tensor_split, take_along_dim, repeat_interleave and the ``Tensor.new_*`` constructors.

Each is written here with the same engine ops torch's composition calls, in the same order, so its result
carries the ``grad_fn`` torch's does (``movedim`` is a PermuteBackward0, ``tile`` a RepeatBackward0,
``repeat_interleave(2, dim)`` a ViewBackward0 over CloneBackward0 over ExpandBackward0 over
UnsqueezeBackward0) and needs no VJP, JVP or batching rule of its own: those of the parts apply.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import TorchRuntimeError
from ..registry import P, broken_check, op
from ..tensor import Tensor
from .common import broadcast_shapes, require_tensor, shape_arg, wrap_dim
from .creation import full, tensor
from .shape import (
    _slice,
    alias_view,
    clone,
    expand,
    expand_checks,
    flatten,
    gather,
    index_select,
    permute,
    repeat,
    reshape,
    unsqueeze,
    view,
)


def _dims_arg(v) -> tuple:
    return (v,) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else tuple(v)


def _list_str(v) -> str:
    return "[" + ", ".join(str(x) for x in v) + "]"


@op("movedim", tensors=("self",), grad_fns=(P.PermuteBackward0, P.AliasBackward0), aliases=("moveaxis",))
def movedim(self, source, destination):
    """torch.movedim(input, source, destination): the other dims keep their order (a PermuteBackward0); of a 0-d
    input, once the dims are checked, torch's ``self.alias()`` (AliasBackward0)."""
    self = require_tensor(self)
    src, dst = _dims_arg(source), _dims_arg(destination)
    nd = self.data.ndim
    if len(src) != len(dst):
        raise TorchRuntimeError(f"movedim: Invalid source or destination dims: source ({_list_str(src)} dims) should "
                                f"contain the same number of dims as destination ({_list_str(dst)} dims)",
                                code="invalid_argument")
    s = [wrap_dim(d, nd) for d in src]
    d = [wrap_dim(x, nd) for x in dst]
    for name, given, wrapped in (("source", src, s), ("destination", dst, d)):
        if len(set(wrapped)) != len(wrapped):
            raise TorchRuntimeError(f"movedim: repeated dim in `{name}` ({_list_str(given)})",
                                    code="invalid_argument")
    if nd == 0:
        return alias_view(self)
    order = [-1] * nd
    for a, b in zip(s, d):
        order[b] = a
    rest = iter(i for i in range(nd) if i not in s)
    order = [o if o >= 0 else next(rest) for o in order]
    return permute(self, order)


@op("broadcast_to", tensors=("self",), grad_fns=(P.ExpandBackward0,), checks=expand_checks("size"))
def broadcast_to(self, size):
    """torch.broadcast_to(input, size): Tensor.expand with the size as one list."""
    return expand(require_tensor(self), shape_arg((size,)))


@op("tile", tensors=("self",), grad_fns=(P.RepeatBackward0,))
def tile(self, dims):
    """torch.tile(input, dims): dims padded with leading ones to the input's rank, then Tensor.repeat."""
    self = require_tensor(self)
    reps = shape_arg((dims,))
    reps = (1,) * (self.data.ndim - len(reps)) + reps
    for r in reps:
        if r < 0:
            padded = (1,) * (len(reps) - self.data.ndim) + self.data.shape
            sizes = [a * b for a, b in zip(padded, reps)]
            bad = next(s for s in sizes if s < 0)
            raise TorchRuntimeError(f"Trying to create tensor with negative dimension {bad}: {_list_str(sizes)}",
                                    code="invalid_shape")
    return repeat(self, reps)


@op("unflatten", tensors=("self",), grad_fns=(P.ViewBackward0,),
    checks=("zero_dim_dims(self,dim)=wrapped | RuntimeError: unflatten got an unexpected error:\nDimension specified "
            "as {dim} but tensor has no dimensions",
            "unflatten_sizes(self,dim,sizes) | RuntimeError: unflatten: Provided sizes {sizes} don't multiply up to "
            "the size of dim {dim} ({size}) in the input tensor"))
def unflatten(self, dim, sizes):
    """torch.unflatten(input, dim, sizes): dim split into sizes (one of them may be -1), a view."""
    self = require_tensor(self)
    sizes = shape_arg((sizes,))
    if not sizes:
        raise TorchRuntimeError("unflatten: sizes must be non-empty", code="invalid_argument")
    d = wrap_dim(dim, self.data.ndim)
    if not self.data.ndim:
        raise broken_check("unflatten", self=self, dim=dim, sizes=sizes)
    if sizes.count(-1) > 1:
        raise TorchRuntimeError("only one dimension can be inferred", code="invalid_shape")
    n = self.data.shape[d] if self.data.ndim else 1
    known = 1
    for s in sizes:
        if s != -1:
            known *= s
    if (-1 in sizes and (known == 0 or n % known)) or (-1 not in sizes and known != n):
        raise broken_check("unflatten", self=self, dim=dim, sizes=sizes)
    shape = self.data.shape
    return view(self, (*shape[:d], *sizes, *shape[d + 1:]))


@op("view_as",
    method_only=True,
    tensors=("self", "other"), grad_fns=(P.ViewBackward0,), meta_only=("other",))
def view_as(self, other):
    """Tensor.view_as(other): self.view(other.size())."""
    return view(require_tensor(self), require_tensor(other, "other").shape)


@op("reshape_as",
    method_only=True,
    tensors=("self", "other"), grad_fns=(P.ViewBackward0, P.ReshapeAliasBackward0,
                                                     P.UnsafeViewBackward0), meta_only=("other",))
def reshape_as(self, other):
    """Tensor.reshape_as(other): self.reshape(other.size())."""
    return reshape(require_tensor(self), require_tensor(other, "other").shape)


@op("tensor_split",
    overloads={
        "function": (
            "(Tensor input, tuple of ints indices, int dim = 0)",
            "(Tensor input, Tensor tensor_indices_or_sections, int dim = 0)",
            "(Tensor input, int sections, int dim = 0)",
        ),
        "method": (
            "(tuple of ints indices, int dim = 0)",
            "(Tensor tensor_indices_or_sections, int dim = 0)",
            "(int sections, int dim = 0)",
        ),
    },
    variable_outputs=True,
    tensors=("self", "indices_or_sections"), grad_fns=(P.SliceBackward0,))
def tensor_split(self, indices_or_sections, dim=0):
    """torch.tensor_split(input, indices_or_sections, dim=0): views (SliceBackward0) of nearly equal sizes
    for a number of sections, or cut at the given indices (clamped into the dim, as numpy.array_split)."""
    self = require_tensor(self)
    if self.data.ndim == 0:
        raise TorchRuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims",
                                code="invalid_argument")
    ios = indices_or_sections
    if isinstance(ios, Tensor):
        if ios.data.dtype != np.int64:
            raise TorchRuntimeError("tensor_split expected tensor_indices_or_sections to have dtype of long, but got "
                                    f"{D.SCALAR_TYPE_NAMES[ios.dtype]}", code="invalid_dtype")
        if ios.data.ndim > 1:
            raise TorchRuntimeError("tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
                                    f"one-dimensional tensor, but got a tensor with {ios.data.ndim} dims",
                                    code="invalid_argument")
        ios = int(ios.data) if ios.data.ndim == 0 else [int(v) for v in ios.data]
    d = wrap_dim(dim, self.data.ndim)
    n = self.data.shape[d]
    if isinstance(ios, (list, tuple)):
        bounds = [0, *(int(i) for i in ios), n]
    else:
        k = int(ios)
        if k <= 0:
            raise TorchRuntimeError(f"number of sections must be larger than 0, got {k}", code="invalid_argument")
        small, extra = divmod(n, k)
        bounds = [0]
        for i in range(k):
            bounds.append(bounds[-1] + small + (1 if i < extra else 0))
    pieces = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        a = min(max(a + n if a < 0 else a, 0), n)
        b = min(max(b + n if b < 0 else b, 0), n)
        pieces.append(_slice(self, d, a, max(a, b), 1))
    return tuple(pieces)


@op("take_along_dim", tensors=("self", "indices"), grad_fns=(P.GatherBackward0,))
def take_along_dim(self, indices, dim=None):
    """torch.take_along_dim(input, indices, dim=None): gather along dim after broadcasting input and indices
    in the other dims (an ExpandBackward0 under the GatherBackward0); without dim, over the flattened input."""
    self = require_tensor(self)
    indices = require_tensor(indices, "indices", "take_along_dim")
    if dim is None:
        return gather(view(self, (-1,)), 0, view(indices, (-1,)))
    if self.data.ndim != indices.data.ndim:
        raise TorchRuntimeError("torch.take_along_dim(): input and indices should have the same number of dimensions, "
                                f"but got {self.data.ndim} dimensions for input, and {indices.data.ndim} dimensions "
                                "for indices", code="shape_mismatch")
    if indices.data.dtype != np.int64:
        raise TorchRuntimeError("torch.take_along_dim(): dtype of indices should be Long but got "
                                f"{D.SCALAR_TYPE_NAMES[indices.dtype]}", code="invalid_dtype")
    d = wrap_dim(dim, self.data.ndim)
    a, b = list(self.data.shape), list(indices.data.shape)
    a[d] = b[d] = 1
    common = list(broadcast_shapes(tuple(a), tuple(b)))
    self_shape, index_shape = list(common), list(common)
    self_shape[d], index_shape[d] = self.data.shape[d], indices.data.shape[d]
    if (indices.data < 0).any():  # (torch's take_along_dim reads a negative index from the end; gather does not)
        indices = Tensor(np.where(indices.data < 0, indices.data + self.data.shape[d], indices.data))
    return gather(expand(self, tuple(self_shape)), d, expand(indices, tuple(index_shape)))


@op("repeat_interleave",
    overloads={
        "function": (
            "(Tensor input, Tensor repeats, int dim = None, *, int output_size = None)",
            "(Tensor repeats, *, int output_size = None)",
            "(Tensor input, int repeats, int dim = None, *, int output_size = None)",
        ),
        "method": (
            "(Tensor repeats, int dim = None, *, int output_size = None)",
            "(int repeats, int dim = None, *, int output_size = None)",
        ),
    },
    tensors=("self", "repeats"),
    grad_fns=(P.ViewBackward0, P.IndexSelectBackward0))
def repeat_interleave(self, repeats=None, dim=None, output_size=None):
    """torch.repeat_interleave(input, repeats, dim=None, *, output_size=None), and
    torch.repeat_interleave(repeats) (the index each position repeats). An int count is
    unsqueeze/expand/clone/view (a ViewBackward0); a tensor of counts is an index_select (without dim, both
    over the flattened input)."""
    self = require_tensor(self)
    if repeats is None:  # torch.repeat_interleave(repeats): self is the counts
        return _repeat_index(self, None)
    if dim is None:
        self = flatten(self)
        dim = 0
    d = wrap_dim(dim, self.data.ndim)
    if isinstance(repeats, Tensor):
        n = self.data.shape[d]
        index = _repeat_index(repeats, n, d)
        if output_size is not None and output_size != index.data.shape[0]:
            raise TorchRuntimeError("allocated size does not match required size", code="invalid_argument")
        return index_select(self, d, index)
    if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)):
        raise TorchRuntimeError(f"repeat_interleave(): argument 'repeats' must be Tensor, not {type(repeats).__name__}",
                                code="invalid_argument", exception="TypeError")
    if repeats < 0:
        raise TorchRuntimeError("Repeats must be non-negative", code="invalid_argument")
    shape = self.data.shape
    total = shape[d] * repeats
    if output_size is not None and output_size != total:
        raise TorchRuntimeError(f"repeat_interleave: Invalid output_size, expected {total} but got {output_size}",
                                code="invalid_argument")
    u = unsqueeze(self, d + 1)
    target = list(u.data.shape)
    target[d + 1] = repeats
    return view(clone(expand(u, tuple(target))), (*shape[:d], total, *shape[d + 1:]))


def _repeat_index(repeats: Tensor, n: int | None, dim: int = 0) -> Tensor:
    """The positions an index_select takes for counts ``repeats`` (torch.repeat_interleave(repeats))."""
    r = repeats.data
    if r.ndim > 1:
        raise TorchRuntimeError("repeats must be 0-dim or 1-dim tensor", code="invalid_argument")
    if r.dtype != np.int64:
        raise TorchRuntimeError(f"\"repeat_interleave_cpu\" not implemented for '{D.SCALAR_TYPE_NAMES[repeats.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    r = r.reshape(-1)
    if n is not None and r.size == 1 and n != 1:
        r = np.full(n, r[0])
    if n is not None and r.size != n:
        raise TorchRuntimeError(f"repeats must have the same size as input along dim, but got repeats.size(0) = "
                                f"{r.size} and input.size({dim}) = {n}", code="shape_mismatch")
    if r.size and r.min() < 0:
        raise TorchRuntimeError("repeats can not be negative", code="invalid_argument")
    return Tensor(np.repeat(np.arange(r.size, dtype=np.int64), r))


# ----- Tensor.new_* ------------------------------------------------------------------------------------


def _new_dtype(self: Tensor, dtype):
    return self.dtype if dtype is None else dtype


@op("new_zeros", shape="sizes(size)",
    method_only=True,
    tensors=("self",), differentiable=False)
def new_zeros(self, *size, dtype=None, requires_grad=False):
    """Tensor.new_zeros(size, *, dtype=None, requires_grad=False): self's dtype unless given."""
    self = require_tensor(self)
    return full(list(shape_arg(size)), 0, dtype=_new_dtype(self, dtype), requires_grad=requires_grad)


@op("new_ones", shape="sizes(size)",
    method_only=True,
    tensors=("self",), differentiable=False)
def new_ones(self, *size, dtype=None, requires_grad=False):
    """Tensor.new_ones(size, *, dtype=None, requires_grad=False)."""
    self = require_tensor(self)
    return full(list(shape_arg(size)), 1, dtype=_new_dtype(self, dtype), requires_grad=requires_grad)


@op("new_empty", shape="sizes(size)",
    method_only=True,
    tensors=("self",), differentiable=False)
def new_empty(self, *size, dtype=None, requires_grad=False):
    """Tensor.new_empty(size, ...): zeros here (torch leaves the memory uninitialised: any values are right)."""
    self = require_tensor(self)
    return full(list(shape_arg(size)), 0, dtype=_new_dtype(self, dtype), requires_grad=requires_grad)


@op("new_full", shape="sizes(size)",
    method_only=True,
    tensors=("self",), differentiable=False)
def new_full(self, size, fill_value, dtype=None, requires_grad=False):
    """Tensor.new_full(size, fill_value, *, dtype=None, requires_grad=False)."""
    self = require_tensor(self)
    return full(list(shape_arg((size,))), fill_value, dtype=_new_dtype(self, dtype), requires_grad=requires_grad)


@op("new_tensor",
    method_only=True,
    tensors=("self",), differentiable=False)
def new_tensor(self, data, dtype=None, requires_grad=False):
    """Tensor.new_tensor(data, *, dtype=None, requires_grad=False): a copy of data in self's dtype unless
    given (torch.tensor's inference is not used: ``x.new_tensor([1, 2])`` of a float32 x is float32)."""
    self = require_tensor(self)
    if isinstance(data, Tensor):
        data = data.data.tolist()
    return tensor(data, dtype=_new_dtype(self, dtype), requires_grad=requires_grad)


__all__ = ["movedim", "broadcast_to", "tile", "unflatten", "tensor_split", "take_along_dim", "repeat_interleave",
           "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "view_as", "reshape_as"]
