"""Matrix products: matmul (dispatching on rank exactly as torch's ``_matmul_impl``), mm, bmm, mv, dot,
outer and addmm.

The primitives (MmBackward0, BmmBackward0, MvBackward0, DotBackward0, AddmmBackward0) save what torch
saves, conditionally: ``self`` of ``mm`` is kept only when ``mat2`` needs a gradient. ``matmul`` is
composite, so its graph shows the same Unsqueeze/Squeeze/View/Expand/UnsafeView nodes torch records.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..batching import align, batching
from ..errors import ShapeError, TorchRuntimeError
from ..grad_mode import check_numel, no_grad
from ..kernel import astype, direct, kcall
from ..registry import P, broken_check, jvp, op, record, vjp
from ..tensor import Tensor
from .common import NO_DIMENSIONS, broadcast_shapes, require_tensor, wrap_dim
from .elementwise import add_t, mul, mul_number, scale_t
from .shape import _squeeze_dim, _unsafe_view, contiguous, expand, reshape, squeeze, t, transpose, unsqueeze


def _strides(a: np.ndarray) -> tuple:
    """Element strides, as torch reports ``sym_strides``."""
    return tuple(s // a.itemsize for s in a.strides) if a.itemsize else tuple(0 for _ in a.strides)


def _dims_str(shape: tuple) -> str:
    return "x".join(str(s) for s in shape)


def _same_dtype(a: Tensor, b: Tensor) -> None:
    if a.dtype != b.dtype:
        raise TorchRuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                                f"{TYPEMETA[a.dtype]} != {TYPEMETA[b.dtype]}", code="dtype_mismatch")


TYPEMETA = D.TYPE_META_NAMES


def _no_bool(a: Tensor, kernel: str = "addmm_impl_cpu_") -> None:
    if a.data.dtype == np.bool_:
        raise TorchRuntimeError(f"\"{kernel}\" not implemented for 'Bool'", code="invalid_dtype",
                                exception="NotImplementedError")


def _matmul_np(a: np.ndarray, b: np.ndarray, shape: tuple) -> np.ndarray:
    check_numel(shape, itemsize=max(a.itemsize, b.itemsize))
    if a.shape[-1] == 1 and a.ndim == b.ndim and a.dtype == b.dtype and a.dtype.kind in "fV":
        n, m = a.shape[-2], b.shape[-1]
        if _gemm_keeps_products(a.shape, n, m):
            return kcall(_outer_exact_kernel, a, b, shape)
        if a.ndim == 2 and n * m >= _OUTER_MIN:
            return kcall(_outer_kernel, a, b, shape)
    return kcall(_matmul_kernel, a, b, shape)


#: from this many entries on, _outer_kernel beats BLAS (below, its three numpy calls cost more)
_OUTER_MIN = 2048
#: torch's bmm runs its own loops (sums from 0) below this many multiply-adds per matrix, BLAS from it on
_BMM_BLAS_MIN = 400


def _gemm_keeps_products(a_shape: tuple, n: int, m: int) -> bool:
    """An inner size of 1 where torch's CPU matmul reaches a BLAS gemm (MKL), whose entries are then the
    products themselves, a -0.0 kept; an (n, 1) or (1, m) result goes to gemv, and a batch of more than one
    matrix or a small one to loops that add the product to 0 (+0.0), as numpy's matmul does."""
    if n < 2 or m < 2:
        return False
    return len(a_shape) == 2 or (len(a_shape) == 3 and a_shape[0] == 1 and n * m >= _BMM_BLAS_MIN)


@direct(lambda a, b, shape: (np.multiply, (a, b)))
def _outer_exact_kernel(a: np.ndarray, b: np.ndarray, shape: tuple) -> np.ndarray:
    """(.., n, 1) @ (.., 1, m) as gemm computes it: each entry a[i] * b[j], the sign of a zero product kept."""
    return np.multiply(a, b)


def _outer_into(a: np.ndarray, b: np.ndarray, shape: tuple, out: np.ndarray) -> np.ndarray:
    """_outer_kernel into ``out`` (a plan's register)."""
    np.multiply(a, b, out=out)
    return np.add(out, a.dtype.type(0), out=out)


_outer_into.takes_out = True


@direct(lambda a, b, shape: (_outer_into, (a, b, shape)))
def _outer_kernel(a: np.ndarray, b: np.ndarray, shape: tuple) -> np.ndarray:
    """(m, 1) @ (1, n): what BLAS computes there, each entry 0 + a[i] * b[j] (a +0.0 for a -0.0 product), as
    two elementwise passes; BLAS' gemm is twice as slow for an inner size of 1 (the LSTM's weight gradients)."""
    out = np.empty(shape, a.dtype)
    np.multiply(a, b, out=out)
    return np.add(out, a.dtype.type(0), out=out)


@direct(lambda a, b, shape: (np.matmul, (a, b)))  # (a plan checks the result is the kernel's, shape included)
def _matmul_kernel(a: np.ndarray, b: np.ndarray, shape: tuple) -> np.ndarray:
    out = np.matmul(a, b)  # a fresh C-contiguous array
    # reshape only when needed: a reshaped view does not own its data, so it would be copied again when
    # it becomes a leaf's .grad
    if out.shape == shape and out.flags.c_contiguous:
        return out
    return np.ascontiguousarray(out).reshape(shape)


# ----- mm ---------------------------------------------------------------------------------------------


def _check_mm(a: Tensor, b: Tensor) -> None:
    """The checks of two matrices' product torch makes after their dimensions': sizes, dtypes."""
    if a.shape[1] != b.shape[0]:
        raise ShapeError(f"mat1 and mat2 shapes cannot be multiplied ({_dims_str(a.shape)} and "
                         f"{_dims_str(b.shape)})")
    _same_dtype(a, b)
    _no_bool(a)


#: torch's overloads of mm and bmm (alike)
_MAT2_OVERLOADS = {"function": ("(Tensor input, Tensor mat2, *, Tensor out = None)",
                                "(Tensor input, Tensor mat2, torch.dtype out_dtype, *, Tensor out = None)")}


@op("mm",
    checks=("dims(self)=2 | RuntimeError: self must be a matrix", "dims(mat2)=2 | RuntimeError: mat2 must be a matrix",
            "matmul_dtype(self,mat2)=mm | RuntimeError: expected m1 and m2 to have the same dtype, but got: {a} != "
            "{b}",
            "bool_product(self,mat2)=mm | NotImplementedError: \"addmm_impl_cpu_\" not implemented for 'Bool'"),
    overloads=_MAT2_OVERLOADS,
    tensors=("self", "mat2"), plannable=True)
def mm(self, mat2):
    """torch.mm(input, mat2): 2-D @ 2-D; saves self (if mat2 needs grad), mat2 (if self needs grad)
    and their sizes and strides."""
    self = require_tensor(self, "self", "mm")
    mat2 = require_tensor(mat2, "mat2", "mm")
    if self.data.ndim != 2 or mat2.data.ndim != 2:
        raise broken_check("mm", self=self, mat2=mat2)
    _check_mm(self, mat2)
    out = _matmul_np(self.data, mat2.data, (self.shape[0], mat2.shape[1]))
    return record(P.MmBackward0, out, (self, mat2),
                  {"mat2": mat2, "mat2_sym_sizes": mat2.shape, "mat2_sym_strides": _strides(mat2.data),
                   "self": self, "self_sym_sizes": self.shape, "self_sym_strides": _strides(self.data)})


@vjp("MmBackward0", inputs=("self", "mat2"),
     saves={"mat2": ("self",), "mat2_sym_sizes": (), "mat2_sym_strides": (), "self": ("mat2",),
            "self_sym_sizes": (), "self_sym_strides": ()})
def _(ctx, grad):
    n = ctx.needs
    return (_mm_mat1_backward(grad, ctx.mat2, ctx.self_sym_sizes, ctx.self_sym_strides) if n[0] else None), \
        (_mm_mat2_backward(grad, ctx.self, ctx.mat2_sym_sizes, ctx.mat2_sym_strides) if n[1] else None)


def _column_major(sizes, strides) -> bool:
    return strides[0] == 1 and strides[1] == sizes[0]


def _mm_mat1_backward(grad: Tensor, mat2: Tensor, sizes, strides, alpha=1) -> Tensor:
    """FunctionsManual mm_mat1_backward: a column-major mat1 gets a column-major gradient (mat2 grad^T)^T."""
    g = t(mm(mat2, t(grad))) if _column_major(sizes, strides) else mm(grad, t(mat2))
    return g if alpha == 1 else mul_number(g, alpha)


def _mm_mat2_backward(grad: Tensor, mat1: Tensor, sizes, strides, alpha=1) -> Tensor:
    """FunctionsManual mm_mat2_backward: a column-major mat2 gets a column-major gradient (grad^T mat1)^T."""
    g = t(mm(t(grad), mat1)) if _column_major(sizes, strides) else mm(t(mat1), grad)
    return g if alpha == 1 else mul_number(g, alpha)


@jvp()
def _(ctx, self_t, mat2_t):
    return add_t(None if self_t is None else mm(self_t, ctx.mat2), None if mat2_t is None else mm(ctx.self, mat2_t))


def _mm_batched_jvp(ctx, batch, self_t, mat2_t):
    """mm/bmm over a leading batch of tangents: matmul broadcasts (and folds) the batch."""
    return add_t(None if self_t is None else matmul(self_t, ctx.mat2),
                 None if mat2_t is None else matmul(ctx.self, mat2_t))


def _mm_batched_vjp(ctx, grad, batch):
    n = ctx.needs
    return ((matmul(grad, transpose(ctx.mat2, -1, -2)) if n[0] else None),
            (matmul(transpose(ctx.self, -1, -2), grad) if n[1] else None))


batching(P.MmBackward0, vjp=_mm_batched_vjp, jvp=_mm_batched_jvp)


# ----- bmm --------------------------------------------------------------------------------------------


@op("bmm", shape="bmm(self,mat2)",
    checks=("dims(self)=3 | RuntimeError: batch1 must be a 3D tensor",
            "dims(mat2)=3 | RuntimeError: batch2 must be a 3D tensor",
            "bmm_shapes(self,mat2) | RuntimeError: Expected size for first two dimensions of batch2 tensor to be: "
            "[{batch}, {k}] but got: {got}.",
            "dtype(self)=!bool | NotImplementedError: \"bmm\" not implemented for 'Bool'",  # (before the dtypes)
            "matmul_dtype(self,mat2)=bmm | RuntimeError: expected scalar type {a} but found {b}"),
    overloads=_MAT2_OVERLOADS,
    tensors=("self", "mat2"), plannable=True)
def bmm(self, mat2):
    """torch.bmm(input, mat2): (b, n, m) @ (b, m, p)."""
    self = require_tensor(self, "self", "bmm")
    mat2 = require_tensor(mat2, "mat2", "bmm")
    if self.data.ndim != 3 or mat2.data.ndim != 3 or mat2.shape[:2] != (self.shape[0], self.shape[2]) or \
            self.data.dtype == np.bool_ or self.dtype != mat2.dtype:  # (torch: no bool kernel, before the dtypes)
        raise broken_check("bmm", self=self, mat2=mat2)
    bs, n, m = self.shape
    out = _matmul_np(self.data, mat2.data, (bs, n, mat2.shape[2]))
    return record(P.BmmBackward0, out, (self, mat2), {"mat2": mat2, "self": self})


@vjp("BmmBackward0", inputs=("self", "mat2"), saves={"mat2": ("self",), "self": ("mat2",)})
def _(ctx, grad):
    n = ctx.needs
    return ((bmm(grad, transpose(ctx.mat2, 1, 2)) if n[0] else None),
            (bmm(transpose(ctx.self, 1, 2), grad) if n[1] else None))


@jvp()
def _(ctx, self_t, mat2_t):
    return add_t(None if self_t is None else bmm(self_t, ctx.mat2), None if mat2_t is None else bmm(ctx.self, mat2_t))


batching(P.BmmBackward0, vjp=_mm_batched_vjp, jvp=_mm_batched_jvp)


# ----- mv, dot, outer ---------------------------------------------------------------------------------


@op("mv", tensors=("self", "vec"), plannable=True,
    checks=(NO_DIMENSIONS,
            "ranks(self,vec)=2,1 | RuntimeError: vector + matrix @ vector expected, got 1, {a}, {b}",
            "matmul_dtype(self,vec)=mv | RuntimeError: addmv input tensors must have the same dtype, but got {b}, {a}, "
            "and {b}",
            "bool_product(self,vec)=mv | NotImplementedError: \"addmv_impl_cpu\" not implemented for 'Bool'"))
def mv(self, vec):
    """torch.mv(input, vec): matrix @ vector."""
    self = require_tensor(self, "self", "mv")
    vec = require_tensor(vec, "vec", "mv")
    if self.data.ndim != 2 or vec.data.ndim != 1:
        raise broken_check("mv", self=self, vec=vec)
    if self.shape[1] != vec.shape[0]:
        raise ShapeError(f"size mismatch, got input ({self.shape[0]}), mat ({_dims_str(self.shape)}), "
                         f"vec ({vec.shape[0]})")
    if self.dtype != vec.dtype:  # torch's addmv, whose result takes vec's dtype
        v, m = D.SCALAR_TYPE_NAMES[vec.dtype], D.SCALAR_TYPE_NAMES[self.dtype]
        raise TorchRuntimeError(f"addmv input tensors must have the same dtype, but got {v}, {m}, and {v}",
                                code="dtype_mismatch")
    _no_bool(self, "addmv_impl_cpu")
    out = _matmul_np(self.data, vec.data, (self.shape[0],))
    return record(P.MvBackward0, out, (self, vec), {"self": self, "vec": vec})


@vjp("MvBackward0", inputs=("self", "vec"), saves={"self": ("vec",), "vec": ("self",)})
def _(ctx, grad):
    n = ctx.needs
    return (outer(grad, ctx.vec) if n[0] else None), (mv(t(ctx.self), grad) if n[1] else None)


@jvp()
def _(ctx, self_t, vec_t):
    return add_t(None if self_t is None else mv(self_t, ctx.vec), None if vec_t is None else mv(ctx.self, vec_t))


def _mv_batched_vjp(ctx, grad, batch):
    n = ctx.needs  # grad (B, m): outer products per entry, and the batch folded into one matrix product
    return (mul(unsqueeze(grad, 2), ctx.vec) if n[0] else None), (matmul(grad, ctx.self) if n[1] else None)


def _mv_batched_jvp(ctx, batch, self_t, vec_t):
    return add_t(None if self_t is None else matmul(self_t, ctx.vec),
                 None if vec_t is None else matmul(vec_t, t(ctx.self)))


batching(P.MvBackward0, vjp=_mv_batched_vjp, jvp=_mv_batched_jvp)


def _dot_kernel(a, b):
    # torch's dot sums from 0 (a -0.0 product alone gives +0.0); numpy's returns a single product as it is
    return np.asarray(np.dot(a, b) + a.dtype.type(0), dtype=a.dtype)


@op("dot", functions=("dot",), methods=("dot",),
    checks=("ranks(self,tensor)=1,1 | RuntimeError: 1D tensors expected, but got {a}D and {b}D tensors",
            "matmul_dtype(self,tensor)=dot | RuntimeError: dot : expected both vectors to have same dtype, but found "
            "{a} and {b}",
            "bool_product(self,tensor)=dot | NotImplementedError: \"dot\" not implemented for 'Bool'"),
    exports=("torch.linalg.vecdot",),
    tensors=("self", "tensor"), aliases=("inner_1d",), plannable=True)
def dot(self, tensor):
    """torch.dot(input, tensor): 1-D . 1-D, a 0-d result."""
    self = require_tensor(self, "self", "dot")
    tensor = require_tensor(tensor, "tensor", "dot")
    if self.data.ndim != 1 or tensor.data.ndim != 1 or self.dtype != tensor.dtype:  # (the dtypes before the sizes)
        raise broken_check("dot", self=self, tensor=tensor)
    if self.shape[0] != tensor.shape[0]:
        n1, n2 = self.shape[0], tensor.shape[0]
        raise ShapeError(f"inconsistent tensor size, expected tensor [{n1}] and src [{n2}] to have the same "
                         f"number of elements, but got {n1} and {n2} elements respectively")
    _no_bool(self, "dot")
    out = kcall(_dot_kernel, self.data, tensor.data)
    return record(P.DotBackward0, out, (self, tensor), {"self": self, "tensor": tensor})


@vjp("DotBackward0", inputs=("self", "tensor"), saves={"self": ("tensor",), "tensor": ("self",)})
def _(ctx, grad):
    n = ctx.needs
    return (grad * ctx.tensor if n[0] else None), (grad * ctx.self if n[1] else None)


@jvp()
def _(ctx, self_t, tensor_t):
    return add_t(None if self_t is None else dot(self_t, ctx.tensor),
                 None if tensor_t is None else dot(ctx.self, tensor_t))


def _dot_batched_vjp(ctx, grad, batch):
    n = ctx.needs
    g = unsqueeze(grad, 1)
    return (g * ctx.tensor if n[0] else None), (g * ctx.self if n[1] else None)


def _dot_batched_jvp(ctx, batch, self_t, tensor_t):
    return add_t(None if self_t is None else matmul(self_t, ctx.tensor),
                 None if tensor_t is None else matmul(tensor_t, ctx.self))


batching(P.DotBackward0, vjp=_dot_batched_vjp, jvp=_dot_batched_jvp)


@op("outer", tensors=("self", "vec2"), grad_fns=(P.MulBackward0,), aliases=("ger",), plannable=True,
    checks=("dims(self)=1 | RuntimeError: outer: Expected 1-D argument self, but got {dims}-D",
            "dims(vec2)=1 | RuntimeError: outer: Expected 1-D argument vec2, but got {dims}-D"))
def outer(self, vec2):
    """torch.outer(input, vec2): composite ``input.reshape(n, 1) * vec2`` (MulBackward0 over
    ViewBackward0)."""
    self = require_tensor(self, "self", "outer")
    vec2 = require_tensor(vec2, "vec2", "outer")
    if self.data.ndim != 1 or vec2.data.ndim != 1:
        raise broken_check("outer", self=self, vec2=vec2)
    check_numel((self.shape[0], vec2.shape[0]), itemsize=max(self.data.itemsize, vec2.data.itemsize))
    return mul(reshape(self, (self.shape[0], 1)), vec2)


# ----- addmm ------------------------------------------------------------------------------------------


@op("addmm",
    overloads={
        "function": (
            "(Tensor input, Tensor mat1, Tensor mat2, *, Number beta = 1, Number alpha = 1, Tensor out = None)",
            "(Tensor input, Tensor mat1, Tensor mat2, torch.dtype out_dtype, *, Number beta = 1, Number alpha = 1, "
            "Tensor out = None)",
        ),
        "method": ("(Tensor mat1, Tensor mat2, *, Number beta = 1, Number alpha = 1)",),
    },
    tensors=("self", "mat1", "mat2"), plannable=True)
def addmm(self, mat1, mat2, beta=1, alpha=1):
    """torch.addmm(input, mat1, mat2, beta=1, alpha=1): beta * input + alpha * (mat1 @ mat2); input
    broadcasts to the result (torch's expand message on failure)."""
    self = require_tensor(self, "self", "addmm")
    mat1 = require_tensor(mat1, "mat1", "addmm")
    mat2 = require_tensor(mat2, "mat2", "addmm")
    for name, m in (("mat1", mat1), ("mat2", mat2)):
        if m.data.ndim != 2:
            raise ShapeError(f"{name} must be a matrix, got {m.data.ndim}-D tensor")
    # torch checks the dtypes before the shapes: self against mat2, then mat1 against mat2
    for name, a in (("self", self), ("mat1", mat1)):
        if a.dtype != mat2.dtype:
            raise TorchRuntimeError(f"{name} and mat2 must have the same dtype, but got "
                                    f"{D.SCALAR_TYPE_NAMES[a.dtype]} and {D.SCALAR_TYPE_NAMES[mat2.dtype]}",
                                    code="dtype_mismatch")
    _check_mm(mat1, mat2)
    shape = (mat1.shape[0], mat2.shape[1])
    _check_expand(self, shape)
    m1, m2 = mat1.data, mat2.data
    if D.is_half(m1.dtype):  # torch's reduced-precision addmm: the product stays float32 until the bias is added
        m1, m2 = kcall(astype, m1, D.NP_DTYPES[D.FLOAT32]), kcall(astype, m2, D.NP_DTYPES[D.FLOAT32])
    prod = _matmul_np(m1, m2, shape)
    out = kcall(_addmm_kernel, self.data, prod, shape, alpha, beta)
    return record(P.AddmmBackward0, out, (self, mat1, mat2),
                  {"alpha": alpha, "beta": beta,
                   "mat1": mat1, "mat1_sym_sizes": mat1.shape, "mat1_sym_strides": _strides(mat1.data),
                   "mat2": mat2, "mat2_sym_sizes": mat2.shape, "mat2_sym_strides": _strides(mat2.data)})


def _addmm_kernel(x, prod, shape, alpha, beta):
    tp = prod.dtype.type
    if alpha != 1:
        prod = tp(alpha) * prod
    if beta == 0:  # torch ignores input (even NaN) when beta is 0
        out = np.array(np.broadcast_to(prod, shape))
    else:
        out = prod + (x if beta == 1 else tp(beta) * x)
    return np.asarray(out, dtype=prod.dtype)


def _check_expand(self: Tensor, target: tuple) -> None:
    """torch's expand message when addmm's input does not broadcast to the product's shape."""
    with no_grad():
        expand(self, target)


@vjp("AddmmBackward0", inputs=("self", "mat1", "mat2"),
     saves={"alpha": (), "beta": (), "mat1": ("mat2",), "mat1_sym_sizes": (), "mat1_sym_strides": (),
            "mat2": ("mat1",), "mat2_sym_sizes": (), "mat2_sym_strides": ()})
def _(ctx, grad):
    n = ctx.needs
    alpha, beta = ctx.alpha, ctx.beta
    # derivatives.yaml: maybe_multiply(..., beta / alpha): a MulBackward1 unless the factor is 1
    g_self = (grad if beta == 1 else mul_number(grad, beta)) if n[0] else None
    g1 = _mm_mat1_backward(grad, ctx.mat2, ctx.mat1_sym_sizes, ctx.mat1_sym_strides, alpha) if n[1] else None
    g2 = _mm_mat2_backward(grad, ctx.mat1, ctx.mat2_sym_sizes, ctx.mat2_sym_strides, alpha) if n[2] else None
    return g_self, g1, g2


@jvp()
def _(ctx, self_t, mat1_t, mat2_t):
    prod = add_t(None if mat1_t is None else mm(mat1_t, ctx.mat2), None if mat2_t is None else mm(ctx.mat1, mat2_t))
    return add_t(scale_t(self_t, ctx.beta), scale_t(prod, ctx.alpha))


def _addmm_batched_vjp(ctx, grad, batch):
    n = ctx.needs
    alpha, beta = ctx.alpha, ctx.beta
    g1 = scale_t(matmul(grad, t(ctx.mat2)), alpha) if n[1] else None
    g2 = scale_t(matmul(t(ctx.mat1), grad), alpha) if n[2] else None
    return ((grad if beta == 1 else grad * beta) if n[0] else None), g1, g2


def _addmm_batched_jvp(ctx, batch, self_t, mat1_t, mat2_t):
    prod = add_t(None if mat1_t is None else matmul(mat1_t, ctx.mat2),
                 None if mat2_t is None else matmul(ctx.mat1, mat2_t))
    return add_t(scale_t(align(self_t, 2), ctx.beta), scale_t(prod, ctx.alpha))


batching(P.AddmmBackward0, vjp=_addmm_batched_vjp, jvp=_addmm_batched_jvp)


@op("baddbmm", tensors=("self", "batch1", "batch2"))
def baddbmm(self, batch1, batch2, beta=1, alpha=1):
    """torch.baddbmm(input, batch1, batch2, *, beta=1, alpha=1): beta * input + alpha * (batch1 @ batch2) per
    batch entry; input broadcasts to the result (torch's expand message on failure), checked first."""
    self = require_tensor(self, "input", "baddbmm")
    batch1 = require_tensor(batch1, "batch1", "baddbmm")
    batch2 = require_tensor(batch2, "batch2", "baddbmm")
    s1, s2 = batch1.shape, batch2.shape
    target = (s1[wrap_dim(0, len(s1))], s1[wrap_dim(1, len(s1))], s2[wrap_dim(2, len(s2))])
    _check_expand(self, target)
    # torch compares input with batch1 (c10's type names), then bmm's batch1 with batch2
    if self.dtype != batch1.dtype:
        names = D.TYPE_META_NAMES
        raise TorchRuntimeError(f"Input dtypes must be the same, got: input {names[self.dtype]}, batch1: "
                                f"{names[batch1.dtype]}, batch2: {names[batch2.dtype]}", code="dtype_mismatch")
    if batch1.dtype != batch2.dtype:
        raise TorchRuntimeError(f"expected scalar type {D.SCALAR_TYPE_NAMES[batch1.dtype]} but found "
                                f"{D.SCALAR_TYPE_NAMES[batch2.dtype]}", code="dtype_mismatch")
    with no_grad():
        prod = bmm(batch1, batch2).data
    out = kcall(_addmm_kernel, self.data, prod, target, alpha, beta)
    return record(P.BaddbmmBackward0, out, (self, batch1, batch2),
                  {"alpha": alpha, "batch1": batch1, "batch2": batch2, "beta": beta})


@vjp("BaddbmmBackward0", inputs=("self", "batch1", "batch2"),
     saves={"alpha": (), "batch1": ("batch2",), "batch2": ("batch1",), "beta": ()})
def _(ctx, grad):
    n = ctx.needs
    alpha, beta = ctx.alpha, ctx.beta
    # derivatives.yaml: maybe_multiply(grad, beta); grad.bmm(batch2.mT) * alpha; batch1.mT.bmm(grad) * alpha
    g_self = (grad if beta == 1 else mul_number(grad, beta)) if n[0] else None
    g1 = scale_t(bmm(grad, transpose(ctx.batch2, 1, 2)), alpha) if n[1] else None
    g2 = scale_t(bmm(transpose(ctx.batch1, 1, 2), grad), alpha) if n[2] else None
    return g_self, g1, g2


@jvp()
def _(ctx, self_t, batch1_t, batch2_t):
    prod = add_t(None if batch1_t is None else bmm(batch1_t, ctx.batch2),
                 None if batch2_t is None else bmm(ctx.batch1, batch2_t))
    return add_t(scale_t(self_t, ctx.beta), scale_t(prod, ctx.alpha))


batching(P.BaddbmmBackward0,
         vjp=lambda ctx, grad, batch: (
             ((grad if ctx.beta == 1 else grad * ctx.beta) if ctx.needs[0] else None),
             scale_t(matmul(grad, _mT(ctx.batch2)), ctx.alpha) if ctx.needs[1] else None,
             scale_t(matmul(_mT(ctx.batch1), grad), ctx.alpha) if ctx.needs[2] else None),
         jvp=lambda ctx, batch, self_t, b1_t, b2_t: add_t(
             scale_t(align(self_t, 3), ctx.beta),
             scale_t(add_t(None if b1_t is None else matmul(b1_t, ctx.batch2),
                           None if b2_t is None else matmul(ctx.batch1, b2_t)), ctx.alpha)))


# ----- matmul -----------------------------------------------------------------------------------------


def _should_fold(a: Tensor, b: Tensor) -> bool:
    """torch's should_fold: fold the batch of the larger operand into mm/mv rows when the smaller one
    requires grad, or when that needs no copy."""
    a_larger = a.data.ndim >= b.data.ndim
    big, small = (a, b) if a_larger else (b, a)
    if not (big.data.ndim >= 3 and small.data.ndim <= 2):
        return False
    if small.requires_grad:
        return True
    if a.data.ndim == 2:
        return False
    if big.data.size == 0:
        return True
    arr = big.data if a_larger else np.swapaxes(big.data, -1, -2)
    shp, st = arr.shape, _strides(arr)
    return all(st[i] == st[i + 1] * shp[i + 1] for i in range(arr.ndim - 2))


def _mT(x: Tensor) -> Tensor:
    return transpose(x, -2, -1)


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


@op("matmul",
    checks=("min_ranks(self,other)=1 | RuntimeError: both arguments to matmul need to be at least 1D, but they are "
            "{a}D and {b}D",
            "matmul_dtype(self,other)=mm | RuntimeError: expected m1 and m2 to have the same dtype, but got: {a} != "
            "{b}",
            "matmul_dtype(self,other)=dot | RuntimeError: dot : expected both vectors to have same dtype, but found "
            "{a} and {b}",
            "matmul_dtype(self,other)=mv | RuntimeError: addmv input tensors must have the same dtype, but got {b}, "
            "{a}, and {b}",
            "bool_product(self,other)=batched | NotImplementedError: \"bmm\" not implemented for 'Bool'",  # (first)
            "matmul_dtype(self,other)=batched | RuntimeError: expected scalar type {a} but found {b}",
            "bool_product(self,other)=dot | NotImplementedError: \"dot\" not implemented for 'Bool'",
            "bool_product(self,other)=mv | NotImplementedError: \"addmv_impl_cpu\" not implemented for 'Bool'",
            "bool_product(self,other)=mm | NotImplementedError: \"addmm_impl_cpu_\" not implemented for 'Bool'"),
    exports=("torch.linalg.matmul",),
    tensors=("self", "other"), aliases=("__matmul__",),
    grad_fns=(P.MmBackward0, P.DotBackward0, P.MvBackward0, P.SqueezeBackward4, P.UnsafeViewBackward0,
              P.CloneBackward0), plannable=True)
def matmul(self, other):
    """torch.matmul(input, other), dispatching on rank as torch's _matmul_impl: 1-D.1-D -> dot, 2-D@1-D -> mv,
    1-D@2-D -> unsqueeze/mm/squeeze, 2-D@2-D -> mm, folding into mm/mv when one side is >= 3-D and
    the other <= 2-D, otherwise broadcast batches through bmm."""
    self = require_tensor(self, "self", "matmul")
    other = require_tensor(other, "other", "matmul")
    d1, d2 = self.data.ndim, other.data.ndim
    if d1 == 0 or d2 == 0:
        raise broken_check("matmul", self=self, other=other)
    if d1 == 1 and d2 == 1:
        return dot(self, other)
    if d1 == 2 and d2 == 1:
        return mv(self, other)
    if d1 == 1 and d2 == 2:
        out = _squeeze_dim(mm(unsqueeze(self, 0), other), 0)
        out._bump()  # torch squeezes the mm result in place (squeeze_), so the result is at version 1
        return out
    if d1 == 2 and d2 == 2:
        return mm(self, other)
    if _should_fold(self, other):
        trans = d2 > d1
        t1 = _mT(other) if trans else self
        t2 = other if not trans else (t(self) if d1 == 2 else self)
        sizes1 = t1.shape
        out_shape = tuple(sizes1[:-1])
        folded = _prod(out_shape)
        t2_matrix = t2.data.ndim == 2
        if t2_matrix:
            out_shape = out_shape + (t2.shape[1],)
        t1f = reshape(t1, (folded, sizes1[-1]))
        if t2_matrix:
            out = _unsafe_view(mm(t1f, t2), out_shape)
            return contiguous(_mT(out)) if trans else out
        return _unsafe_view(mv(t1f, t2), out_shape)
    # batched: broadcast the batch dims and go through bmm
    n = self.shape[-2] if d1 > 1 else 1
    m1 = self.shape[-1]
    batch1 = self.shape[:max(d1 - 2, 0)]
    m2 = other.shape[-2] if d2 > 1 else other.shape[0]
    p = other.shape[-1] if d2 > 1 else 1
    batch2 = other.shape[:max(d2 - 2, 0)]
    if d1 == 3 and d2 == 3 and batch1[0] != batch2[0]:
        if batch1[0] == 1 and self.requires_grad:
            return matmul(squeeze(self, 0), other)
        if batch2[0] == 1 and other.requires_grad:
            return matmul(self, squeeze(other, 0))
    out_shape = broadcast_shapes(tuple(batch1), tuple(batch2))
    nb = _prod(out_shape)
    e1 = reshape(expand(self, out_shape + (n, m1)), (nb, n, m1))
    vector_rhs = d2 == 1
    if vector_rhs:
        e2 = unsqueeze(reshape(expand(other, out_shape + (m2,)), (nb, m2)), 2)
    else:
        e2 = reshape(expand(other, out_shape + (m2, p)), (nb, m2, p))
    if d1 > 1:
        out_shape = out_shape + (n,)
    if d2 > 1:
        out_shape = out_shape + (p,)
    res = bmm(e1, e2)
    if vector_rhs:
        res = squeeze(res, -1)
    return _unsafe_view(res, out_shape)


@op("rmatmul", functions=(),
    parsed=False,
    tensors=("self", "other"), aliases=("__rmatmul__",), method=False,
    grad_fns=(P.MmBackward0, P.DotBackward0, P.MvBackward0, P.SqueezeBackward4, P.UnsafeViewBackward0))
def rmatmul(self, other):
    """``other @ self`` (torch's Tensor.__rmatmul__ is matmul(other, self))."""
    if not isinstance(other, Tensor):
        from ..tensor import tensor as make_tensor
        other = make_tensor(other)
    return matmul(other, self)
