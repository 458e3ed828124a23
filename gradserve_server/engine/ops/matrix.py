"""Matrix structure: trace, diag, diagonal (and ``torch.linalg.diagonal``), diag_embed, tril, triu.

``diagonal`` is a view of its input, as in torch (a writable strided numpy view sharing the version
counter); its VJP writes the gradient onto the diagonal of zeros (``diagonal_backward``, whose own VJP is
``diagonal`` again), so every order of derivative stays within these ops.
"""

from __future__ import annotations

import numpy as np

from ..batching import SAME, batching
from ..errors import ShapeError, TorchRuntimeError
from ..grad_mode import check_numel
from ..registry import P, Prim, broken_check, jvp, op, record, vjp
from ..tensor import Tensor
from .common import require_tensor, saved_int, signed_int, wrap_dim
from .shape import _as_view


def _diagonal_view(a: np.ndarray, offset: int, d1: int, d2: int) -> np.ndarray:
    """A writable view of the diagonal (numpy's own diagonal view is read-only), the diagonal last."""
    idx = [slice(None)] * a.ndim
    if offset >= 0:
        idx[d2] = slice(min(offset, a.shape[d2]), None)
    else:
        idx[d1] = slice(min(-offset, a.shape[d1]), None)
    base = a[tuple(idx)]
    ro = np.diagonal(base, 0, d1, d2)
    return np.lib.stride_tricks.as_strided(base, ro.shape, ro.strides, writeable=a.flags.writeable)


def _dims_of_diagonal(self: Tensor, dim1, dim2):
    nd = self.data.ndim
    d1, d2 = wrap_dim(dim1, nd), wrap_dim(dim2, nd)
    if d1 == d2:
        raise ShapeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return d1, d2


@op("diagonal",
    storage="view",
    tensors=("self",))
def diagonal(self, offset=0, dim1=0, dim2=1):
    """torch.diagonal(input, offset=0, dim1=0, dim2=1): a view, the diagonal as the last dim."""
    self = require_tensor(self, "input", "diagonal")
    d1, d2 = _dims_of_diagonal(self, dim1, dim2)
    out = _diagonal_view(self.data, offset, d1, d2)
    return _as_view(record(P.DiagonalBackward0, out, (self,),
                           {"dim1": saved_int(dim1), "dim2": saved_int(dim2), "offset": saved_int(offset),
                            "self_sym_sizes": self.data.shape}), self)


@op("linalg.diagonal", tensors=("A",), grad_fns=(P.DiagonalBackward0,), method=False)
def linalg_diagonal(A, offset=0, dim1=-2, dim2=-1):
    """torch.linalg.diagonal(A, *, offset=0, dim1=-2, dim2=-1): diagonal over the last two dims."""
    return diagonal(require_tensor(A, "A", "linalg.diagonal"), offset, dim1, dim2)


def _diagonal_vjp(ctx, grad):
    nd = len(ctx.self_sym_sizes)
    d1, d2 = wrap_dim(signed_int(ctx.dim1), nd), wrap_dim(signed_int(ctx.dim2), nd)
    return diagonal_backward(grad, ctx.self_sym_sizes, signed_int(ctx.offset), d1, d2),


vjp("DiagonalBackward0", inputs=("self",), saves=("dim1", "dim2", "offset", "self_sym_sizes"))(_diagonal_vjp)


@jvp(P.DiagonalBackward0)
def _(ctx, self_t):
    return diagonal(self_t, signed_int(ctx.offset), signed_int(ctx.dim1), signed_int(ctx.dim2))


@jvp(P.DiagonalBackward0_copy)
def _(ctx, self_t):
    return diagonal(self_t, signed_int(ctx.offset), signed_int(ctx.dim1), signed_int(ctx.dim2)).clone()
vjp("DiagonalBackward0_copy", inputs=("self",), saves=("dim1", "dim2", "offset", "self_sym_sizes"))(_diagonal_vjp)


def diagonal_backward(grad: Tensor, sizes: tuple, offset: int, dim1: int, dim2: int) -> Tensor:
    """Zeros of ``sizes`` with ``grad`` on the (offset, dim1, dim2) diagonal (torch's diagonal_backward)."""
    out = np.zeros(sizes, grad.data.dtype)
    _diagonal_view(out, offset, dim1, dim2)[...] = grad.data
    return record(P.DiagonalBackwardBackward0, out, (grad,), {"dim1": dim1, "dim2": dim2, "offset": offset})


@vjp("DiagonalBackwardBackward0", inputs=("grad_output",), saves=("dim1", "dim2", "offset"))
def _(ctx, grad):
    return diagonal(grad, ctx.offset, ctx.dim1, ctx.dim2),


@jvp()
def _(ctx, grad_output_t):
    return diagonal_backward(grad_output_t, ctx.result.shape, ctx.offset, ctx.dim1, ctx.dim2)


@op("diag_embed",
    dims_of="other",
    tensors=("self",))
def diag_embed(self, offset=0, dim1=-2, dim2=-1):
    """torch.diag_embed(input, offset=0, dim1=-2, dim2=-1): the last dim of input onto a new diagonal."""
    self = require_tensor(self, "input", "diag_embed")
    nd = self.data.ndim + 1
    d1, d2 = wrap_dim(dim1, nd), wrap_dim(dim2, nd)
    if d1 == d2:
        raise ShapeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = (self.data.shape[-1] if self.data.ndim else 1) + abs(offset)
    rest = list(self.data.shape[:-1])
    shape = []
    for k in range(nd):
        shape.append(n if k in (d1, d2) else rest.pop(0))
    check_numel(shape)
    out = np.zeros(shape, self.data.dtype)
    _diagonal_view(out, offset, d1, d2)[...] = self.data
    return record(P.DiagEmbedBackward0, out, (self,),
                  {"dim1": saved_int(dim1), "dim2": saved_int(dim2), "offset": saved_int(offset)})


@vjp("DiagEmbedBackward0", inputs=("self",), saves=("dim1", "dim2", "offset"))
def _(ctx, grad):
    return diagonal(grad, signed_int(ctx.offset), signed_int(ctx.dim1), signed_int(ctx.dim2)),


@jvp()
def _(ctx, self_t):
    return diag_embed(self_t, signed_int(ctx.offset), signed_int(ctx.dim1), signed_int(ctx.dim2))


@op("diag", tensors=("self",), grad_fns=(P.DiagEmbedBackward0, P.DiagonalBackward0_copy))
def diag(self, diagonal=0):
    """torch.diag(input, diagonal=0): a 1-D input becomes a diagonal matrix (diag_embed), a 2-D input gives
    its diagonal (a copy: torch's diagonal_copy, whose node class is DiagonalBackward0_copy)."""
    self = require_tensor(self, "input", "diag")
    nd = self.data.ndim
    if nd not in (1, 2):
        raise TorchRuntimeError(f"diag(): Supports 1D or 2D tensors. Got {nd}D", code="shape_mismatch")
    if nd == 1:
        return diag_embed(self, diagonal)
    d = _diagonal_view(self.data, diagonal, 0, 1).copy()
    return record(P.DiagonalBackward0_copy, d, (self,),
                  {"dim1": 0, "dim2": 1, "offset": saved_int(diagonal), "self_sym_sizes": self.data.shape})


@op("trace", tensors=("self",))
def trace(self):
    """torch.trace(input): the sum of a matrix's main diagonal; saves the input's sizes."""
    self = require_tensor(self, "input", "trace")
    if self.data.ndim != 2:
        raise TorchRuntimeError("trace: expected a matrix, but got tensor with dim " f"{self.data.ndim}",
                                code="shape_mismatch")
    if self.data.dtype == np.bool_:
        raise TorchRuntimeError("\"trace\" not implemented for 'Bool'", code="invalid_dtype",
                                exception="NotImplementedError")
    # torch sums an integer diagonal in int64, as sum does
    out = np.asarray(np.trace(self.data, dtype=np.int64)) if self.data.dtype.kind in "iu" else \
        np.asarray(np.trace(self.data), self.data.dtype)
    return record(P.TraceBackward0, out, (self,), {"self_sym_sizes": self.data.shape})


@vjp("TraceBackward0", inputs=("self",), saves=("self_sym_sizes",))
def _(ctx, grad):
    n, m = ctx.self_sym_sizes
    # FunctionsManual trace_backward: zeros(n * m).index_fill_(0, diagonal positions, grad).view(n, m)
    # (a fill, not a product: an inf or NaN gradient stays on the diagonal)
    from .indexing import index_fill
    from .shape import view
    # min(n, m) positions: on a tall matrix a stride of m + 1 runs on past the diagonal's end
    diag = Tensor(np.arange(min(n, m), dtype=np.int64) * (m + 1))
    return view(index_fill(Tensor(np.zeros(n * m, grad.data.dtype)), 0, diag, grad), (n, m)),


@jvp()
def _(ctx, self_t):
    return trace(self_t)


def _tri(self, diagonal: int, name: str, prim: Prim, npfn) -> Tensor:
    self = require_tensor(self, "input", name)
    if self.data.ndim < 2:
        raise broken_check(name, self=self)
    return record(prim, npfn(self.data, diagonal), (self,), {"diagonal": saved_int(diagonal)})


@op("tril", shape="same(self)", tensors=("self",),
    checks=("min_dims(self)=2 | RuntimeError: tril: input tensor must have at least 2 dimensions",))
def tril(self, diagonal=0):
    """torch.tril(input, diagonal=0): zero above the diagonal."""
    return _tri(self, diagonal, "tril", P.TrilBackward0, np.tril)


@vjp("TrilBackward0", inputs=("self",), saves=("diagonal",))
def _(ctx, grad):
    return tril(grad, signed_int(ctx.diagonal)),


@jvp()
def _(ctx, self_t):
    return tril(self_t, signed_int(ctx.diagonal))


batching(P.TrilBackward0, vjp=SAME, jvp=SAME)


@op("triu", shape="same(self)", tensors=("self",),
    checks=("min_dims(self)=2 | RuntimeError: triu: input tensor must have at least 2 dimensions",))
def triu(self, diagonal=0):
    """torch.triu(input, diagonal=0): zero below the diagonal."""
    return _tri(self, diagonal, "triu", P.TriuBackward0, np.triu)


@vjp("TriuBackward0", inputs=("self",), saves=("diagonal",))
def _(ctx, grad):
    return triu(grad, signed_int(ctx.diagonal)),


@jvp()
def _(ctx, self_t):
    return triu(self_t, signed_int(ctx.diagonal))


batching(P.TriuBackward0, vjp=SAME, jvp=SAME)
