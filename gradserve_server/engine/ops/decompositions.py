"""``torch.linalg``: det, slogdet, logdet, inv, solve, cholesky, svd, svdvals, norm, matrix_norm, vector_norm
and cross.

Catalog names carry torch's submodule (``linalg.det`` is ``torch.linalg.det``); top-level torch functions
that are the same primitive are separate thin ops (``det``, ``slogdet``, ``inverse``, ``cross``) because
their argument names and defaults differ. Forwards use numpy's LAPACK wrappers; the LU factors and
pivots torch saves on LinalgDetBackward0 / LinalgSlogdetBackward0 / LinalgSolveExBackward0 come from a
partial-pivoting LU here (LAPACK's getrf layout, 1-based pivots). The VJPs are FunctionsManual.cpp's
formulas for invertible inputs, written with inv/solve/matmul so that they are differentiable again.

The SVD is LAPACK's gesdd through numpy, as torch's CPU kernel; U and Vh come back column-major per matrix
as torch's do. Singular vectors are defined up to a sign per pair (U[:, j], Vh[j]); numpy's LAPACK and the
MKL torch's wheels ship may pick different signs, so only sign-invariant results are compared with torch.
Its VJP and JVP are FunctionsManual.cpp's svd_backward / linalg_svd_jvp (real case), written in engine ops.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from .. import dtypes as D
from ..errors import InvalidArgumentError, ShapeError, TorchRuntimeError
from ..grad_mode import _grad_enabled
from ..registry import P, broken_check, jvp, needs_grad, op, record, vjp
from ..tensor import Tensor
from .common import broadcast_shapes, require_tensor, saved_int, signed_int, wrap_dim
from .elementwise import add_t, eq, where
from .linalg import matmul
from .matrix import diag_embed, diagonal
from .reduction import amax, amin
from .reduction import norm as _vector_norm
from .reduction import sum as _sum
from .shape import cat, expand, narrow, permute, squeeze, transpose, unsqueeze

SignLogabsdet = namedtuple("SignLogabsdet", ["sign", "logabsdet"])
SVD = namedtuple("SVD", ["U", "S", "Vh"])          # torch.return_types.linalg_svd
SVDOld = namedtuple("SVDOld", ["U", "S", "V"])     # torch.return_types.svd


def _matrix_checks(name: str, arg: str = "A", square: bool = True) -> tuple[str, ...]:
    """torch's checks of a linalg input ``arg`` (its messages call it A, prefixed ``name``): at least 2 dimensions,
    square matrices (``square``), a floating dtype; the ``checks`` a client raises at the call's line."""
    return (f"min_dims({arg})=2 | RuntimeError: {name}: The input tensor A must have at least 2 dimensions.",
            *([f"square({arg}) | RuntimeError: {name}: A must be batches of square matrices, but they are {{rows}} by "
               f"{{cols}} matrices"] if square else []),
            f"dtype({arg})=floating | RuntimeError: {name}: Expected a floating point or complex tensor as input. "
            f"Got {{dtype}}")


def _mT(x: Tensor) -> Tensor:
    return transpose(x, -2, -1)


def _square_float(A: Tensor, name: str, arg: str = "A") -> Tensor:
    """A linalg op's input ``A``: batches of square float matrices, else the error of the op's declared
    ``_matrix_checks`` (``name``: the op whose messages are the caller's)."""
    A = require_tensor(A, arg, name)
    if A.data.ndim < 2 or A.shape[-1] != A.shape[-2] or A.data.dtype.kind not in "fV":
        raise broken_check(name, A=A, self=A)
    return A


def _lu(a: np.ndarray):
    """Partial-pivoting LU of a batch of square matrices: (LU, 1-based int64 pivots, first zero pivot index
    per matrix or 0)."""
    lu = np.array(a, copy=True)
    n = a.shape[-1]
    batch = a.shape[:-2]
    piv = np.zeros(batch + (n,), np.int64)
    info = np.zeros(batch, np.int64)
    if lu.size == 0:  # 0 x 0 matrices (or an empty batch): nothing to factor, and no -1 to infer a shape from
        return lu, piv, info
    flat = lu.reshape((-1, n, n))
    fp, fi = piv.reshape((-1, n)), info.reshape(-1)
    rows = np.arange(flat.shape[0])
    for k in range(n):
        p = k + np.argmax(np.abs(flat[:, k:, k]), axis=1)
        fp[:, k] = p + 1
        rk, rp = flat[rows, k].copy(), flat[rows, p].copy()
        flat[rows, k], flat[rows, p] = rp, rk
        d = flat[:, k, k]
        zero = d == 0
        fi[(fi == 0) & zero] = k + 1
        safe = np.where(zero, 1, d)
        flat[:, k + 1:, k] /= safe[:, None]
        flat[:, k + 1:, k + 1:] -= flat[:, k + 1:, k:k + 1] * flat[:, k:k + 1, k + 1:]
    return lu, piv, info


def _det_lu(a: np.ndarray):
    """The LU torch's det/slogdet save: LAPACK works column-major, so a row-major A is factored as A^T (same
    determinant, no copy); a column-major one as itself."""
    t = a.ndim and a.shape[-1] > 1 and a.flags.c_contiguous
    return _lu(np.swapaxes(a, -1, -2) if t else a)


def _lu_slots(a: np.ndarray, factor, *tensors) -> dict:
    """The LU and pivots slots, factored only when a node will keep them (a gradient is needed)."""
    if not needs_grad(*tensors):
        return {"LU": None, "pivots": None}
    lu, piv, _ = factor(a)
    return {"LU": Tensor(lu), "pivots": Tensor(piv)}


def _lapack_layout(x: np.ndarray, dtype) -> np.ndarray:
    """x laid out as torch's LAPACK-backed results are (inv, solve, cholesky, solve_triangular): each matrix of
    the last two dims column-major, batches outermost, so ``.view`` fails and ``reshape`` copies as in torch."""
    x = np.asarray(x, dtype)
    if x.ndim < 2:
        return np.ascontiguousarray(x)
    return np.swapaxes(np.ascontiguousarray(np.swapaxes(x, -1, -2)), -1, -2)


def _batch_prefix(info: np.ndarray, i: int) -> str:
    if info.ndim == 0:
        return ""
    return f"(Batch element {i}): "


# ----- det, slogdet, logdet ---------------------------------------------------------------------------


def _nonfinite_slogdet(a: np.ndarray):
    """(sign, logabsdet) from torch's own LU when A has inf or NaN entries: the elimination makes NaNs
    (0 * inf) that LAPACK's det carries through, where numpy's det/slogdet give 0 / -inf."""
    lu, piv, _ = _det_lu(a)
    d = np.diagonal(lu, 0, -2, -1)
    swaps = np.sum(piv != np.arange(1, a.shape[-1] + 1), -1)
    with np.errstate(invalid="ignore", divide="ignore"):
        sign = np.sign(np.prod(np.sign(d), -1)) * np.where(swaps % 2, -1, 1)
        sign = np.where(np.isnan(sign), 0, sign)
        return sign, np.sum(np.log(np.abs(d)), -1)


def _det(A: Tensor, name: str) -> Tensor:
    A = _square_float(A, name)
    if np.all(np.isfinite(A.data)):
        # (float16/bfloat16 reach here empty only, which numpy's LAPACK does not take in those types)
        out = np.array(np.linalg.det(A.data.astype(D.compute_dtype(A.data.dtype), copy=False)), A.data.dtype,
                       order="C")  # (row-major, as torch's, whatever the order of A's batch dimensions)
    else:
        sign, lad = _nonfinite_slogdet(A.data)
        with np.errstate(over="ignore", invalid="ignore"):
            out = np.array(sign * np.exp(lad), A.data.dtype, order="C")
    return record(P.LinalgDetBackward0, out, (A,), {"A": A, **_lu_slots(A.data, _det_lu, A), "result": "result"})


@op("linalg.det", checks=_matrix_checks("linalg.det"),
    tensors=("A",), grad_fns=(P.LinalgDetBackward0,), method=False, family="linalg")
def linalg_det(A):
    """torch.linalg.det(A): determinant of (batches of) square matrices; saves A, LU, pivots, result."""
    return _det(A, "linalg.det")


@op("det", checks=_matrix_checks("linalg.det", "self"),
    tensors=("self",), grad_fns=(P.LinalgDetBackward0,), family="linalg")
def det(self):
    """torch.det(input): an alias of torch.linalg.det."""
    return _det(require_tensor(self, "input", "det"), "linalg.det")


def _diag_of(g: Tensor, n: int) -> Tensor:
    """FunctionsManual's right-hand side g * I, transposed (F-ordered for the LU solve):
    ``diag_embed(g.unsqueeze(-1).expand(..., n)).mT()``."""
    from .matrix import diag_embed
    return _mT(diag_embed(expand(unsqueeze(g, -1), g.shape + (n,))))


def _singular_det_grad(A: Tensor, g: Tensor) -> Tensor:
    """The gradient of det at singular matrices as torch's linalg_det_backward takes it, through the SVD
    A = U S Vh: (U * D) @ Vh with D the products of the other singular values times g det(U) det(Vh)
    (prod_safe_zeros_backward). Engine ops, so under create_graph it is differentiable (LinalgSvdBackward0)."""
    from .reduction import _prod_safe_zeros_backward
    U, S, Vh = linalg_svd(A)
    alpha = linalg_det(U) * linalg_det(Vh)
    D = _prod_safe_zeros_backward(unsqueeze(g * alpha, -1), S, S.data.ndim - 1)
    return matmul(U * unsqueeze(D, -2), Vh)


@vjp("LinalgDetBackward0", inputs=("A",), saves=("A", "LU", "pivots", "result"))
def _(ctx, grad):
    # FunctionsManual linalg_det_backward: solve(A^H, diag(grad * det)) (invertible A; a LinalgSolveExBackward0
    # under create_graph), through the SVD when A is singular; a 1x1 A's gradient is grad itself
    A = ctx.A
    n = A.shape[-1]
    if n == 1:
        return expand(unsqueeze(unsqueeze(grad, -1), -1), A.shape),
    if np.all(ctx.result.data != 0):
        try:
            return linalg_solve(_mT(A), _diag_of(grad * ctx.result, n)),
        except TorchRuntimeError:
            pass
    # a zero determinant: torch gives zeros, or under create_graph the SVD formula's value
    if not _grad_enabled.get():
        return Tensor(np.zeros(A.data.shape, A.data.dtype)),
    return _singular_det_grad(A, grad),


@jvp()
def _(ctx, A_t):
    # d det = det * tr(A^{-1} dA)
    from .matrix import diagonal
    from .reduction import sum as sum_
    return ctx.result * sum_(diagonal(linalg_solve(ctx.A, A_t), 0, -2, -1), -1)


def _slogdet(A: Tensor, name: str):
    A = _square_float(A, name)
    sign, lad = np.linalg.slogdet(A.data) if np.all(np.isfinite(A.data)) else _nonfinite_slogdet(A.data)
    dt = A.data.dtype
    sign_t, lad_t = record(P.LinalgSlogdetBackward0, (np.array(sign, dt, order="C"), np.array(lad, dt, order="C")),
                           (A,),
                           {"A": A, **_lu_slots(A.data, _det_lu, A), "sign": "result"})
    return SignLogabsdet(sign_t, lad_t)


@op("linalg.slogdet", checks=_matrix_checks("linalg.slogdet"),
    tensors=("A",), grad_fns=(P.LinalgSlogdetBackward0,), method=False, family="linalg",
    returns=SignLogabsdet._fields)
def linalg_slogdet(A):
    """torch.linalg.slogdet(A) -> (sign, logabsdet); only logabsdet carries a gradient."""
    return _slogdet(A, "linalg.slogdet")


@op("slogdet", checks=_matrix_checks("linalg.slogdet", "self"),
    tensors=("self",), grad_fns=(P.LinalgSlogdetBackward0,), family="linalg",
    returns=SignLogabsdet._fields)
def slogdet(self):
    """torch.slogdet(input): torch.linalg.slogdet."""
    return _slogdet(require_tensor(self, "input", "slogdet"), "linalg.slogdet")


@vjp("LinalgSlogdetBackward0", inputs=("A",), saves=("A", "LU", "pivots", "sign"), n_outputs=2)
def _(ctx, grads):
    g = grads[1]
    if g is None:
        return None,
    # FunctionsManual slogdet_backward: under create_graph solve(A^H, diag(g)) (a singular A: linalg.solve's
    # error); otherwise LAPACK's getrs on the saved LU of A^T, which checks nothing (inf/nan at a singular A)
    if _grad_enabled.get():
        return linalg_solve(_mT(ctx.A), _diag_of(g, ctx.A.shape[-1])),
    n = ctx.A.shape[-1]
    b = np.broadcast_to(np.eye(n, dtype=g.data.dtype), g.shape + (n, n)) * g.data[..., None, None]
    a_t = np.swapaxes(ctx.A.data, -1, -2)
    try:
        return Tensor(np.linalg.solve(a_t, b).astype(b.dtype, copy=False)),
    except np.linalg.LinAlgError:
        return Tensor(_getrs(ctx.LU.data, ctx.pivots.data, b)),


def _getrs(lu: np.ndarray, piv: np.ndarray, b: np.ndarray) -> np.ndarray:
    """LAPACK getrs ('N'): X with (P L U) X = B from a getrf factorization (1-based pivots), without any
    singularity check: a zero pivot divides (inf, and nan from 0 * inf), as torch's lu_solve does."""
    x = np.array(np.broadcast_to(b, lu.shape[:-2] + b.shape[-2:]), dtype=lu.dtype)
    n = lu.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in range(n):  # row interchanges
            j = piv[..., i] - 1
            xi = np.take_along_axis(x, np.broadcast_to(np.full(j.shape, i)[..., None, None], x.shape[:-2] + (1,) +
                                                       x.shape[-1:]), -2).copy()
            xj = np.take_along_axis(x, np.broadcast_to(j[..., None, None], x.shape[:-2] + (1,) + x.shape[-1:]), -2)
            np.put_along_axis(x, np.broadcast_to(np.full(j.shape, i)[..., None, None], xi.shape), xj, -2)
            np.put_along_axis(x, np.broadcast_to(j[..., None, None], xi.shape), xi, -2)
        for k in range(n):  # L (unit lower), column by column
            x[..., k + 1:, :] -= lu[..., k + 1:, k, None] * x[..., k, None, :]
        for k in range(n - 1, -1, -1):  # U, from the last row up
            x[..., k, :] /= lu[..., k, k, None]
            x[..., :k, :] -= lu[..., :k, k, None] * x[..., k, None, :]
    return x


@jvp()
def _(ctx, A_t):
    from .matrix import diagonal
    from .reduction import sum as sum_
    return None, sum_(diagonal(linalg_solve(ctx.A, A_t), 0, -2, -1), -1)


@op("logdet", checks=_matrix_checks("logdet", "self"), tensors=("self",), grad_fns=(P.WhereBackward0,), family="linalg")
def logdet(self):
    """torch.logdet(input): composite ``where(sign == -1, nan, logabsdet)`` over linalg_slogdet."""
    A = _square_float(require_tensor(self, "input", "logdet"), "logdet")
    sign, lad = _slogdet(A, "linalg.slogdet")
    return where(eq(sign, -1.0), math.nan, lad)


# ----- inv, solve, cholesky ---------------------------------------------------------------------------


def _singular(A: Tensor, name: str, what: str) -> TorchRuntimeError:
    """torch's error for a singular input (LAPACK found an exactly zero pivot), naming the first one."""
    _, _, info = _lu(A.data)
    if what == "solve" or not np.any(info > 0):
        return TorchRuntimeError("torch.linalg.solve: The solver failed because the input matrix is singular.",
                                 code="singular_matrix", exception="torch.linalg.LinAlgError")
    i = int(np.argmax(info.reshape(-1) > 0))
    k = int(info.reshape(-1)[i])
    return TorchRuntimeError(f"{name}: {_batch_prefix(info, i)}The diagonal element {k} is zero, the "
                             f"{what} could not be completed because the input matrix is singular.",
                             code="singular_matrix", exception="torch.linalg.LinAlgError")


@op("linalg.inv", checks=_matrix_checks("linalg.inv"), tensors=("A",), method=False, family="linalg")
def linalg_inv(A):
    """torch.linalg.inv(A) (linalg_inv_ex under the hood); saves the inverse."""
    A = _square_float(A, "linalg.inv")
    try:
        inv = np.linalg.inv(A.data)
    except np.linalg.LinAlgError:
        raise _singular(A, "linalg.inv", "inversion") from None
    return record(P.LinalgInvExBackward0, _lapack_layout(inv, A.data.dtype), (A,), {"inverse": "result"})


@op("inverse", checks=_matrix_checks("linalg.inv", "self"),
    tensors=("self",), grad_fns=(P.LinalgInvExBackward0,), family="linalg")
def inverse(self):
    """torch.inverse(input): torch.linalg.inv."""
    return linalg_inv(require_tensor(self, "input", "inverse"))


@vjp("LinalgInvExBackward0", inputs=("A",), saves=("inverse",))
def _(ctx, grad):
    inv_t = _mT(ctx.inverse)
    return -matmul(inv_t, matmul(grad, inv_t)),


@jvp()
def _(ctx, A_t):
    inv = ctx.inverse
    return -matmul(matmul(inv, A_t), inv)


def _vector_rhs(A: Tensor, B: Tensor) -> bool:
    """torch's linalg_solve_is_vector_rhs: B is a (batch of) vector(s)."""
    return B.data.ndim == 1 or (B.data.ndim == A.data.ndim - 1 and B.shape == A.shape[:-1])


@op("linalg.solve", checks=(
    *_matrix_checks("linalg.solve"),
    "same_dtype(A,B) | RuntimeError: linalg.solve: Expected A and B to have the same dtype, but found A of type {a} "
    "and B of type {b} instead"),
    tensors=("A", "B"), method=False, family="linalg")
def linalg_solve(A, B, left=True):
    """torch.linalg.solve(A, B, *, left=True): X with A X = B (left) or X A = B; B may be a vector."""
    A = _square_float(A, "linalg.solve")
    B = require_tensor(B, "B", "linalg.solve")
    if A.dtype != B.dtype:
        raise broken_check("linalg.solve", A=A, B=B)
    vec = _vector_rhs(A, B)
    n = A.shape[-1]
    b = B.data[..., None] if vec else B.data
    if vec and not left:
        raise ShapeError("linalg.solve: Vector broadcasting of the left hand side is not supported for "
                         "left=False. In this case linalg.solve is equivalent to B / A.squeeze(-1)")
    k = b.shape[-2] if left else b.shape[-1]
    if b.ndim < 2 or k != n:
        raise ShapeError(f"linalg.solve: Incompatible shapes of A and B for the equation "
                         f"{'AX = B' if left else 'XA = B'} ({A.shape[-2]}x{A.shape[-1]} and "
                         f"{b.shape[-2]}x{b.shape[-1]})")
    batch = broadcast_shapes(A.shape[:-2], b.shape[:-2])
    cd = D.compute_dtype(A.data.dtype)  # (float16/bfloat16 reach here empty only, as for det)
    a = np.broadcast_to(A.data.astype(cd, copy=False), batch + (n, n))
    rhs = np.broadcast_to(b.astype(cd, copy=False), batch + b.shape[-2:])
    try:
        if left:
            x = np.linalg.solve(a, rhs)
        else:
            x = np.swapaxes(np.linalg.solve(np.swapaxes(a, -1, -2), np.swapaxes(rhs, -1, -2)), -1, -2)
    except np.linalg.LinAlgError:
        raise _singular(A, "torch.linalg.solve", "solve") from None
    x = x[..., 0] if vec else x
    # LAPACK's X is column-major (a vector case's batch of vectors too); X A = B is solved transposed: row-major
    x = _lapack_layout(x, A.data.dtype) if left else np.ascontiguousarray(x, A.data.dtype)
    return record(P.LinalgSolveExBackward0, x, (A, B),
                  {"A": A, **_lu_slots(A.data, _lu, A, B), "left": left, "result": "result"})


@vjp("LinalgSolveExBackward0", inputs=("A", "B"), saves=("A", "LU", "left", "pivots", "result"))
def _(ctx, grad):
    n = ctx.needs
    A, X, left = ctx.A, ctx.result, ctx.left
    vec = X.data.ndim == A.data.ndim - 1 or X.data.ndim == 1
    # FunctionsManual linalg_solve_backward: the vector case solves a matrix right-hand side and squeezes
    gBm = linalg_solve(_mT(A), unsqueeze(grad, -1) if vec else grad, left=left)
    gA = None
    if n[0]:
        Xm = unsqueeze(X, -1) if vec else X
        gA = -matmul(gBm, _mT(Xm)) if left else -matmul(_mT(Xm), gBm)
    return gA, ((squeeze(gBm, -1) if vec else gBm) if n[1] else None)


@jvp()
def _(ctx, A_t, B_t):
    # left: A X = B -> A dX = dB - dA X; right: X A = B -> dX A = dB - X dA
    A, X, left = ctx.A, ctx.result, ctx.left
    vec = X.data.ndim == 1 or X.data.ndim == A.data.ndim - 1
    rhs = B_t
    if A_t is not None:
        if left:
            dAX = matmul(A_t, unsqueeze(X, -1)) if vec else matmul(A_t, X)
            dAX = squeeze(dAX, -1) if vec else dAX
        else:
            dAX = matmul(X, A_t)
        rhs = -dAX if rhs is None else rhs - dAX
    return linalg_solve(A, rhs, left=left)


@op("linalg.cholesky", checks=_matrix_checks("linalg.cholesky"), tensors=("A",), method=False, family="linalg")
def linalg_cholesky(A, upper=False):
    """torch.linalg.cholesky(A, *, upper=False): L with A = L L^H (or U = L^H); saves L and upper."""
    A = _square_float(A, "linalg.cholesky")
    a = A.data
    flat = a.reshape((-1,) + a.shape[-2:]) if a.size else ()  # (0 x 0 matrices: no -1 to infer)
    for i, m in enumerate(flat):
        try:
            np.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            order = next(k for k in range(1, m.shape[0] + 1) if not _is_pd(m[:k, :k]))
            where_ = f"(Batch element {i}): " if a.ndim > 2 else ""
            raise TorchRuntimeError(f"linalg.cholesky: {where_}The factorization could not be completed because "
                                    f"the input is not positive-definite (the leading minor of order {order} is "
                                    f"not positive-definite).", code="not_positive_definite",
                                    exception="torch.linalg.LinAlgError") from None
    a_ = a.astype(D.compute_dtype(a.dtype), copy=False)  # (float16/bfloat16: empty only, as for det)
    L = np.linalg.cholesky(np.tril(a_) + np.swapaxes(np.tril(a_, -1), -1, -2))  # LAPACK reads the lower half
    out = _lapack_layout(np.swapaxes(L, -1, -2) if upper else L, a.dtype)
    return record(P.LinalgCholeskyExBackward0, out, (A,), {"L": "result", "upper": upper})


def _is_pd(m: np.ndarray) -> bool:
    try:
        np.linalg.cholesky(m)
        return True
    except np.linalg.LinAlgError:
        return False


@vjp("LinalgCholeskyExBackward0", inputs=("A",), saves=("L", "upper"))
def _(ctx, grad):
    from .elementwise import mul_number
    from .matrix import tril
    L, gL = (_mT(ctx.L), _mT(grad)) if ctx.upper else (ctx.L, grad)
    # FunctionsManual cholesky_backward: gA = L^{-H} pi*(tril(L^H gL)) L^{-1}, pi*(X) = (X + X^H - diag X) / 2,
    # the inverses as two triangular solves
    gA = tril(matmul(_mT(L), gL))
    gA = mul_number(gA + _mT(tril(gA, -1)), 0.5)
    gA = _solve_triangular(_mT(L), gA, upper=True, left=True)
    return _solve_triangular(L, gA, upper=False, left=False),


def _solve_triangular(A: Tensor, B: Tensor, upper: bool, left: bool = True) -> Tensor:
    """torch.linalg.solve_triangular(A, B, upper=, left=) for the formulas that use it (not in the op table):
    X with A X = B (or X A = B), reading only A's upper or lower triangle."""
    a = np.triu(A.data) if upper else np.tril(A.data)
    b = B.data
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.linalg.solve(a, b) if left else np.swapaxes(np.linalg.solve(np.swapaxes(a, -1, -2),
                                                                           np.swapaxes(b, -1, -2)), -1, -2)
    dt = np.result_type(A.data.dtype, B.data.dtype)
    return record(P.LinalgSolveTriangularBackward0, _lapack_layout(x, dt), (A, B),
                  {"self": A, "result": "result", "upper": upper, "left": left, "unitriangular": False})


@vjp("LinalgSolveTriangularBackward0", inputs=("self", "B"),
     saves={"left": (), "result": ("self",), "self": ("self", "B"), "unitriangular": (), "upper": ()})
def _(ctx, grad):
    from .matrix import tril, triu
    n = ctx.needs
    A, X, upper, left = ctx.self, ctx.result, ctx.upper, ctx.left
    gB = _solve_triangular(_mT(A), grad, not upper, left)
    gA = None
    if n[0]:
        gA = -matmul(gB, _mT(X)) if left else -matmul(_mT(X), gB)
        gA = triu(gA) if upper else tril(gA)
    return gA, (gB if n[1] else None)


@jvp()
def _(ctx, A_t, B_t):
    from .matrix import tril, triu
    A, X, upper, left = ctx.self, ctx.result, ctx.upper, ctx.left
    rhs = B_t
    if A_t is not None:
        pA = triu(A_t) if upper else tril(A_t)
        d = matmul(pA, X) if left else matmul(X, pA)
        rhs = -d if rhs is None else rhs - d
    return _solve_triangular(A, rhs, upper, left)


@jvp(P.LinalgCholeskyExBackward0)
def _(ctx, A_t):
    # FunctionsManual cholesky_jvp: dL = L phi(L^{-1} dA L^{-H}), phi = tril with a halved diagonal
    from .matrix import diagonal as diag_
    from .matrix import diagonal_backward, tril
    L = _mT(ctx.L) if ctx.upper else ctx.L
    L_inv = linalg_inv(L)
    phi = tril(matmul(matmul(L_inv, A_t), _mT(L_inv)))
    phi = phi - diagonal_backward(diag_(phi, 0, -2, -1) * 0.5, phi.shape, 0, phi.data.ndim - 2, phi.data.ndim - 1)
    dL = matmul(L, phi)
    return _mT(dL) if ctx.upper else dL


# ----- svd, svdvals -----------------------------------------------------------------------------------


def _col_major(a: np.ndarray) -> np.ndarray:
    """Each matrix column-major (batches outermost), the layout LAPACK hands torch's U and Vh back in."""
    return np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)


def _svd_input(A, name: str = "linalg.svd") -> Tensor:
    A = require_tensor(A, "A", name)
    if A.data.ndim < 2:
        raise ShapeError("linalg.svd: The input tensor A must have at least 2 dimensions.")
    if A.data.dtype.kind not in "fV":
        raise TorchRuntimeError(f"linalg.svd: Expected a floating point or complex tensor as input. Got "
                                f"{D.SCALAR_TYPE_NAMES[A.dtype]}", code="invalid_dtype")
    return A


def _svd_np(a: np.ndarray, full_matrices: bool, compute_uv: bool):
    """(U, S, Vh) as torch's _linalg_svd gives them (U, Vh None without compute_uv)."""
    nan = np.isnan(a)
    if nan.any():
        flat = nan.reshape((-1,) + a.shape[-2:]).any(axis=(-1, -2))
        where_ = f"(Batch element {int(np.argmax(flat))}): " if a.ndim > 2 else ""
        raise TorchRuntimeError(f"linalg.svd: {where_}The algorithm failed to converge because the input matrix "
                                f"contained non-finite values.", code="svd_not_converged",
                                exception="torch.linalg.LinAlgError")
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = a.shape[:-2]
    dt = a.dtype
    if k == 0:  # LAPACK is not called: identity bases for the full matrices, empty ones otherwise
        s = np.zeros(batch + (0,), dt)
        if not compute_uv:
            return None, s, None
        mu, nv = (m, n) if full_matrices else (0, 0)
        u = np.broadcast_to(np.eye(m, mu, dtype=dt), batch + (m, mu)).copy()
        vh = np.broadcast_to(np.eye(nv, n, dtype=dt), batch + (nv, n)).copy()
        return _col_major(u), s, _col_major(vh)
    with np.errstate(all="ignore"):
        if not compute_uv:
            return None, np.ascontiguousarray(np.linalg.svd(a, compute_uv=False), dt), None
        u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    return _col_major(u.astype(dt, copy=False)), np.ascontiguousarray(s, dt), _col_major(vh.astype(dt, copy=False))


def _needs_uv(A: Tensor) -> bool:
    """torch's _may_require_fw_or_bw_grad: svdvals computes U and Vh when a gradient or a tangent may need them."""
    from ..dual import _level, tangent_of
    return needs_grad(A) or (_level.get() is not None and tangent_of(A) is not None)


def _svd(A: Tensor, full_matrices: bool):
    u, s, vh = _svd_np(A.data, full_matrices, True)
    return record(P.LinalgSvdBackward0, (u, s, vh), (A,),
                  {"S": "result1", "S_sym_argsize_minus_1": s.shape[-1], "U": "result0", "Vh": "result2",
                   "full_matrices": full_matrices})


def _check_bool(fn: str, name: str, value) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"{fn}(): argument '{name}' must be bool, not {type(value).__name__}")


@op("linalg.svd", checks=_matrix_checks("linalg.svd", square=False),
    tensors=("A",), grad_fns=(P.LinalgSvdBackward0,), method=False, family="linalg",
    returns=SVD._fields)
def linalg_svd(A, full_matrices=True, driver=None):
    """torch.linalg.svd(A, full_matrices=True, *, driver=None) -> (U, S, Vh): S descending; U and Vh
    column-major; with full_matrices U is (m, m) and Vh (n, n), else (m, k) and (k, n), k = min(m, n)."""
    _check_bool("linalg_svd", "full_matrices", full_matrices)
    A = _svd_input(A)
    if driver is not None:
        raise TorchRuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with "
                                "cuSOLVER backend.", code="invalid_argument")
    return SVD(*_svd(A, bool(full_matrices)))


@op("svd", tensors=("self",), grad_fns=(P.LinalgSvdBackward0, P.TransposeBackward0), family="linalg",
    returns=SVDOld._fields)
def svd(self, some=True, compute_uv=True):
    """torch.svd(input, some=True, compute_uv=True) -> (U, S, V): linalg.svd(input, full_matrices=not some) with
    V = Vh.mH (a transposed view); without compute_uv, S = linalg.svdvals(input) and U, V zeros."""
    self = require_tensor(self, "input", "svd")
    if self.data.ndim < 2:
        raise ShapeError(f"linalg.svd: input should have at least 2 dimensions, but has {self.data.ndim} dimensions "
                         f"instead")
    A = _svd_input(self)
    if compute_uv:
        U, S, Vh = _svd(A, not some)
        return SVDOld(U, S, _mT(Vh))
    S = linalg_svdvals(A)
    m, n = A.shape[-2:]
    batch = A.shape[:-2]
    dt = A.data.dtype
    return SVDOld(Tensor(np.zeros(batch + (m, m), dt)), S, _mT(Tensor(np.zeros(batch + (n, n), dt))))


@op("linalg.svdvals", checks=_matrix_checks("linalg.svd", square=False),
    tensors=("A",), grad_fns=(P.LinalgSvdBackward0,), method=False, family="linalg")
def linalg_svdvals(A, driver=None):
    """torch.linalg.svdvals(A, *, driver=None): the singular values, descending (output 1 of the SVD node,
    U and Vh computed and saved only when a gradient or tangent may need them)."""
    A = _svd_input(A)
    if driver is not None:
        raise TorchRuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with "
                                "cuSOLVER backend.", code="invalid_argument")
    if not _needs_uv(A):
        return Tensor(_svd_np(A.data, False, False)[1])
    return _svd(A, False)[1]


def _svd_E(S: Tensor) -> Tensor:
    """E_jk = S_k^2 - S_j^2 off the diagonal, 1 on it (its diagonal is exactly 0 before: adding I is torch's fill_)."""
    S2 = S * S
    k = S.shape[-1]
    return (unsqueeze(S2, -2) - unsqueeze(S2, -1)) + Tensor(np.eye(k, dtype=S.data.dtype))


def svd_backward(gU, gS, gVh, U: Tensor, S: Tensor, Vh: Tensor):
    """FunctionsManual.cpp svd_backward, real case (U, Vh reduced: (m, k) and (k, n))."""
    if gS is None and gU is None and gVh is None:
        return None
    m, n = U.shape[-2], Vh.shape[-1]
    if gU is None and gVh is None:  # svdvals: U diag(gS) Vh
        return matmul(U, unsqueeze(gS, -1) * Vh) if m >= n else matmul(U * unsqueeze(gS, -2), Vh)
    UhgU = VhgV = None
    if gU is not None:
        X = matmul(_mT(U), gU)
        UhgU = X - _mT(X)
    if gVh is not None:
        X = matmul(Vh, _mT(gVh))
        VhgV = X - _mT(X)
    E = _svd_E(S)
    if gU is not None:
        ret = (UhgU * unsqueeze(S, -2) + unsqueeze(S, -1) * VhgV) / E if gVh is not None else \
            (UhgU / E) * unsqueeze(S, -2)
    else:
        ret = unsqueeze(S, -1) * (VhgV / E)
    if gS is not None:
        ret = ret + diag_embed(gS)
    if m > n and gU is not None:
        gA = matmul(U, ret)
        gUSinv = gU / unsqueeze(S, -2)
        gA = gA + gUSinv - matmul(U, matmul(_mT(U), gUSinv))
        return matmul(gA, Vh)
    if m < n and gVh is not None:
        gA = matmul(ret, Vh)
        SinvgVh = gVh / unsqueeze(S, -1)
        gA = gA + SinvgVh - matmul(matmul(SinvgVh, _mT(Vh)), Vh)
        return matmul(U, gA)
    return matmul(U, matmul(ret, Vh)) if m >= n else matmul(matmul(U, ret), Vh)


def _reduced(ctx):
    """The saved U and Vh narrowed to k = min(m, n) columns / rows (derivatives.yaml's full_matrices case)."""
    U, Vh = ctx.U, ctx.Vh
    if ctx.full_matrices:
        k = ctx.S.shape[-1]
        U, Vh = narrow(U, -1, 0, k), narrow(Vh, -2, 0, k)
    return U, Vh


@vjp("LinalgSvdBackward0", inputs=("A",), saves=("S", "S_sym_argsize_minus_1", "U", "Vh", "full_matrices"),
     n_outputs=3)
def _(ctx, grads):
    gU, gS, gVh = grads
    k = ctx.S.shape[-1]
    if ctx.full_matrices:
        gU = None if gU is None else narrow(gU, -1, 0, k)
        gVh = None if gVh is None else narrow(gVh, -2, 0, k)
    U, Vh = _reduced(ctx)
    return svd_backward(gU, gS, gVh, U, ctx.S, Vh),


@jvp()
def _(ctx, A_t):
    # FunctionsManual.cpp linalg_svd_jvp, real case
    S = ctx.S
    U, Vh = _reduced(ctx)
    m, n = A_t.shape[-2:]
    V = _mT(Vh)
    dP = matmul(_mT(U), matmul(A_t, V)) if m < n else matmul(matmul(_mT(U), A_t), V)
    dS = diagonal(dP, 0, -2, -1)
    dP = dP - diag_embed(dS)
    E = _svd_E(S)
    X = dP * unsqueeze(S, -2)
    dU = matmul(U, (X + _mT(X)) / E)
    dt = S.data.dtype
    if m > n:
        dAVSinv = matmul(A_t, V / unsqueeze(S, -2))
        dU = dU + dAVSinv - matmul(U, matmul(_mT(U), dAVSinv))
        if ctx.full_matrices:
            dU = cat([dU, Tensor(np.zeros(dU.shape[:-1] + (m - n,), dt))], -1)
    Y = dP * unsqueeze(-S, -1)
    dVh = matmul((Y + _mT(Y)) / E, Vh)
    if m < n:
        UHdASinv = matmul(_mT(U) / unsqueeze(S, -1), A_t)
        dVh = dVh + UHdASinv - matmul(matmul(UHdASinv, V), Vh)
        if ctx.full_matrices:
            dVh = cat([dVh, Tensor(np.zeros(dVh.shape[:-2] + (n - m, n), dt))], -2)
    return dU, dS, dVh


# ----- norms ------------------------------------------------------------------------------------------


def _ord_value(ord):
    if isinstance(ord, str) and ord in ("inf", "-inf"):
        return math.inf if ord == "inf" else -math.inf
    return ord


@op("linalg.vector_norm", checks=(
    "dtype(x)=floating | RuntimeError: linalg.vector_norm: Expected a floating point or complex tensor as input. "
    "Got {dtype}",),
    tensors=("x",), grad_fns=(P.LinalgVectorNormBackward0,), method=False, family="linalg")
def linalg_vector_norm(x, ord=2, dim=None, keepdim=False):
    """torch.linalg.vector_norm(x, ord=2, dim=None, keepdim=False) (``ord`` may be "inf"/"-inf" in JSON)."""
    x = require_tensor(x, "x", "linalg.vector_norm")
    ord = _ord_value(ord)
    if isinstance(ord, str) or isinstance(ord, bool) or not isinstance(ord, (int, float)):
        raise InvalidArgumentError(f"linalg.vector_norm(): argument 'ord' must be Number, not {type(ord).__name__}")
    return _vector_norm(x, ord, dim, keepdim)


def _matrix_norm(A: Tensor, ord, dim, keepdim: bool) -> Tensor:
    """at::linalg_matrix_norm: the order first, then A (a matrix of floats), then dim; 'fro' is a vector norm,
    2/-2/'nuc' the max/min/sum of the singular values of A with dim moved last (PermuteBackward0 under the SVD
    node, as torch), 1/-1/inf/-inf max/min of absolute row or column sums."""
    if isinstance(ord, str):
        if ord not in ("fro", "nuc"):
            raise TorchRuntimeError(f"linalg.matrix_norm: Order {ord} not supported.", code="invalid_argument")
    elif isinstance(ord, bool) or not isinstance(ord, (int, float)) or abs(ord) not in (1, 2, math.inf):
        shown = ord if not isinstance(ord, float) or not ord.is_integer() else int(ord)
        raise TorchRuntimeError(f"linalg.matrix_norm: Order {shown} not supported.", code="invalid_argument")
    nd = A.data.ndim
    if nd < 2:
        raise ShapeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    if A.data.dtype.kind not in "fV":
        raise TorchRuntimeError(f"linalg.matrix_norm: Expected a floating point or complex tensor as input. Got "
                                f"{D.SCALAR_TYPE_NAMES[A.dtype]}", code="invalid_dtype")
    dim = [dim] if isinstance(dim, int) else list(dim)
    if len(dim) != 2:
        raise TorchRuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(map(str, dim))}",
                                code="invalid_argument")
    d0, d1 = (wrap_dim(d, nd) for d in dim)
    if d0 == d1:
        raise ShapeError(f"linalg.matrix_norm: dims must be different. Got ({d0}, {d1})")
    if ord == "fro":
        return _vector_norm(A, 2, [d0, d1], keepdim)
    if ord in ("nuc", 2, -2):
        perm = [d for d in range(nd) if d not in (d0, d1)] + [d0, d1]
        S = linalg_svdvals(permute(A, perm))
        out = _sum(S, -1, keepdim) if ord == "nuc" else (_max_norm if ord > 0 else amin)(S, -1, keepdim)
        if keepdim:
            inv = [0] * nd
            for i, d in enumerate(perm):
                inv[d] = i
            out = permute(unsqueeze(out, -1), inv)
        return out
    if abs(ord) == math.inf:
        d0, d1 = d1, d0
    if not keepdim and d0 < d1:
        d1 -= 1
    inner = _vector_norm(A, 1, [d0], keepdim)
    return _max_norm(inner, d1, keepdim) if ord > 0 else amin(inner, d1, keepdim)


def _max_norm(norms: Tensor, d: int, keepdim: bool) -> Tensor:
    """The largest of non-negative norms along d; over an empty d torch's matrix norm gives zeros, outside
    the graph (no identity for amax, but 0 bounds norms from below)."""
    if norms.shape[d] == 0:
        shape = list(norms.shape)
        if keepdim:
            shape[d] = 1
        else:
            del shape[d]
        return Tensor(np.zeros(shape, norms.data.dtype))
    return amax(norms, d, keepdim)


_MATRIX_NORM_FNS = (P.LinalgVectorNormBackward0, P.AmaxBackward0, P.AminBackward0, P.SumBackward1, P.PermuteBackward0)


@op("linalg.matrix_norm", checks=_matrix_checks("linalg.matrix_norm", square=False),
    dims_of="other",
    tensors=("A",), grad_fns=_MATRIX_NORM_FNS, method=False, family="linalg")
def linalg_matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False):
    """torch.linalg.matrix_norm(A, ord='fro', dim=(-2, -1), keepdim=False): 'fro', 'nuc', 2, -2, 1, -1, inf,
    -inf ("inf"/"-inf" in JSON) over the two dims."""
    A = require_tensor(A, "A", "linalg.matrix_norm")
    return _matrix_norm(A, _ord_value(ord), dim, keepdim)


@op("linalg.norm", checks=(  # (a vector norm of the flattened input without ord)
    "dtype(A)=floating unless ord | RuntimeError: linalg.vector_norm: Expected a floating point or complex tensor as "
    "input. Got {dtype}",),
    tensors=("A",), grad_fns=_MATRIX_NORM_FNS, method=False, family="linalg")
def linalg_norm(A, ord=None, dim=None, keepdim=False):
    """torch.linalg.norm(A, ord=None, dim=None, keepdim=False): a vector norm over one dim (or the flattened
    input when ord and dim are None), a matrix norm ('fro', 'nuc', 2, -2, 1, -1, inf, -inf) over two."""
    A = require_tensor(A, "A", "linalg.norm")
    ord = _ord_value(ord)
    if isinstance(dim, int):
        dim = [dim]
    if dim is not None:
        dim = list(dim)
        if len(dim) not in (1, 2):
            raise TorchRuntimeError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {dim}",
                                    code="invalid_argument")
    elif ord is not None and A.data.ndim not in (1, 2):
        raise TorchRuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
                                f"Got {A.data.ndim}D.", code="invalid_argument")
    if isinstance(ord, str):  # torch's string overload: always a matrix norm, over (0, 1) by default
        return _matrix_norm(A, ord, dim if dim is not None else [0, 1], keepdim)
    if ord is not None and ((dim is not None and len(dim) == 2) or (dim is None and A.data.ndim == 2)):
        return _matrix_norm(A, ord, dim if dim is not None else [0, 1], keepdim)
    if A.data.dtype.kind not in "fV":
        raise TorchRuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                                f"{D.SCALAR_TYPE_NAMES[A.dtype]}", code="invalid_dtype")
    return _vector_norm(A, 2 if ord is None else ord, dim, keepdim)


# ----- cross ------------------------------------------------------------------------------------------


def _fma(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """x * y + z rounded once (C's fma). float32 through float64 (its products are exact there); float64 by
    Dekker's exact product and an error-compensated sum (correct to the last bit but in rare ties)."""
    if x.dtype != np.float64:
        return (x.astype(np.float64) * y.astype(np.float64) + z.astype(np.float64)).astype(x.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        p = x * y
        split = 134217729.0  # 2^27 + 1

        def halves(v):
            t = split * v
            hi = t - (t - v)
            return hi, v - hi
        xh, xl = halves(x)
        yh, yl = halves(y)
        e = ((xh * yh - p) + xh * yl + xl * yh) + xl * yl
        s = p + z
        bb = s - p
        t = (p - (s - bb)) + (z - bb)
        out = s + (t + e)
        return np.where(np.isfinite(out), out, p + z)


def _cross(self: Tensor, other: Tensor, d: int, shape: tuple, dim: int) -> Tensor:
    a = np.moveaxis(np.broadcast_to(self.data, shape), d, 0)
    b = np.moveaxis(np.broadcast_to(other.data, shape), d, 0)
    # torch's CPU kernel: out_i = a_j * b_k - a_k * b_j compiled to fma(a_j, b_k, -(a_k * b_j)), so a x a
    # is the rounding error of a product, not 0
    out = np.stack([_fma(a[j], b[k], -(a[k] * b[j])) for j, k in ((1, 2), (2, 0), (0, 1))])
    out = np.moveaxis(out, 0, d)
    return record(P.LinalgCrossBackward0, np.ascontiguousarray(out, a.dtype), (self, other),
                  {"dim": saved_int(dim), "other": other, "self": self})


@op("linalg.cross",
    dims_of="other",
    tensors=("self", "other"), grad_fns=(P.LinalgCrossBackward0,), method=False, family="linalg")
def linalg_cross(self, other, dim=-1):
    """torch.linalg.cross(input, other, *, dim=-1): batched 3-vector cross products (batches broadcast)."""
    self = require_tensor(self, "input", "linalg.cross")
    other = require_tensor(other, "other", "linalg.cross")
    if self.data.ndim != other.data.ndim:
        raise ShapeError("linalg.cross: inputs must have the same number of dimensions.")
    d = wrap_dim(dim, self.data.ndim)
    if self.shape[d] != 3 or other.shape[d] != 3:
        raise ShapeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {self.shape[d]} and "
                         f"{other.shape[d]}")
    if self.dtype != other.dtype:
        raise TorchRuntimeError(f"expected scalar type {D.SCALAR_TYPE_NAMES[self.dtype]} but found "
                                f"{D.SCALAR_TYPE_NAMES[other.dtype]}", code="dtype_mismatch")
    return _cross(self, other, d, broadcast_shapes(self.shape, other.shape), dim)


@op("cross",
    dims_of="other",
    tensors=("self", "other"), grad_fns=(P.LinalgCrossBackward0,), family="linalg")
def cross(self, other, dim=None):
    """torch.cross(input, other, dim=None): dim=None picks the first dim of size 3 of the broadcast shape
    (torch warns that this default is deprecated)."""
    self = require_tensor(self, "input", "cross")
    other = require_tensor(other, "other", "cross")
    if dim is None:
        if self.data.ndim != other.data.ndim:
            raise ShapeError("linalg.cross: inputs must have the same number of dimensions.")
        shape = broadcast_shapes(self.shape, other.shape)
        from ..grad_mode import emit_warning
        emit_warning("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the dim "
                     "explicitly or simply use torch.linalg.cross.\nThe default value of dim will change to agree "
                     "with that of linalg.cross in a future release.")
        dim = next((k for k, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise ShapeError("no dimension of size 3 in input")
    return linalg_cross(self, other, dim=dim)


@vjp("LinalgCrossBackward0", inputs=("self", "other"), saves={"dim": (), "other": ("self",), "self": ("other",)})
def _(ctx, grad):
    n = ctx.needs
    d = signed_int(ctx.dim)
    return ((linalg_cross(ctx.other, grad, dim=d) if n[0] else None),
            (linalg_cross(grad, ctx.self, dim=d) if n[1] else None))


@jvp()
def _(ctx, self_t, other_t):
    d = signed_int(ctx.dim)
    a = linalg_cross(self_t, ctx.other, dim=d) if self_t is not None else None
    b = linalg_cross(ctx.self, other_t, dim=d) if other_t is not None else None
    return add_t(a, b)
