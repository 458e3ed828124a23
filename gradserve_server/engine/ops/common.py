"""Argument handling shared by the op families: dims, broadcasting, operand conversion."""

from __future__ import annotations

import numbers

import numpy as np

from .. import dtypes as D
from .. import kernel as K
from ..errors import InvalidArgumentError, ShapeError, TorchRuntimeError
from ..grad_mode import _grad_enabled, check_numel
from ..kernel import Lit, kcall
from ..registry import F
from ..tensor import Tensor, wrap_dim, wrapped_number

NP = D.NP_DTYPES
_F32 = NP[D.FLOAT32]
_F16, _BF16 = NP[D.FLOAT16], NP[D.BFLOAT16]
_FROM_NP = D._FROM_NP

try:  # numpy >= 2.3: ``out=...`` makes a ufunc (or a ufunc's reduce) return an array, even a 0-d one
    np.add(1, 1, out=...)
    ARRAY = ...
except (TypeError, ValueError):  # older numpy: a numpy scalar for 0-d results, which kcall wraps
    ARRAY = None


class _NotGiven:
    """The default of a parameter whose mere presence picks torch's other overload (``sort(stable=...)`` is
    ``sort.stable``, SortBackward1, whatever its value)."""

    def __repr__(self) -> str:
        return "<not given>"


NOT_GIVEN = _NotGiven()


def is_number(v) -> bool:
    return isinstance(v, numbers.Number) and not isinstance(v, Tensor)


def require_tensor(v, name: str = "self", op: str = "") -> Tensor:
    if isinstance(v, Tensor):
        return v
    where = f"{op}(): " if op else ""
    raise InvalidArgumentError(f"{where}argument '{name}' must be Tensor, not {type(v).__name__}")


def wrap_dims(dims, ndim: int) -> tuple:
    if isinstance(dims, (int, np.integer)):
        dims = (dims,)
    out = tuple(wrap_dim(d, ndim) for d in dims)
    if len(set(out)) != len(out):
        d = next(d for d in out if out.count(d) > 1)
        raise ShapeError(f"dim {d} appears multiple times in the list of dims")
    return out


def broadcast_shapes(a: tuple, b: tuple, itemsize: int | None = None) -> tuple:
    """torch's infer_size with its message; the result size is checked against the element limit (and,
    given the result's element size, the run's byte budget) before anything is allocated."""
    if a == b:
        return a
    na, nb = len(a), len(b)
    n = max(na, nb)
    out = [0] * n
    for i in range(n - 1, -1, -1):
        off = n - 1 - i
        da = a[na - 1 - off] if off < na else 1
        db = b[nb - 1 - off] if off < nb else 1
        if da != db and da != 1 and db != 1:
            raise ShapeError(f"The size of tensor a ({da}) must match the size of tensor b ({db}) at "
                             f"non-singleton dimension {i}")
        out[i] = db if da == 1 else da
    out = tuple(out)
    check_numel(out, itemsize=itemsize)
    return out


def broadcast_all(*shapes) -> tuple:
    out = ()
    for s in shapes:
        out = broadcast_shapes(out, s)
    return out


def number_as(npdt: np.dtype, v):
    """A Python number as a numpy scalar of the op's computation dtype, converted as torch's TensorIterator
    casts a wrapped number (a C cast): an int outside a narrow integer type's range wraps (int8: 300 -> 44)."""
    if type(v) is Lit and D.is_float_np(npdt):  # a plan's lifted literal (engine.kernel): converted by a kernel
        return kcall(K.number_as, v, npdt)
    try:
        return npdt.type(v)
    except OverflowError:
        if npdt.kind not in "iu" or not isinstance(v, numbers.Integral) or not -2**63 <= v < 2**64:
            raise
        # (2**63 .. 2**64 - 1 is torch's uint64 Scalar: its C cast into int64 wraps modulo 2**64)
        return np.asarray(v - 2**64 if v >= 2**63 else v, np.int64).astype(npdt)[()]


def refuse_uint64_with_bool(number, tensor_dtype: str) -> None:
    """torch's uint64 Scalar (2**63 .. 2**64 - 1) beside a bool tensor: the result would be uint64, a promotion
    torch refuses."""
    if tensor_dtype == D.BOOL and number.__class__ is int and number >= 1 << 63:
        raise TorchRuntimeError("Promotion for uint16, uint32, uint64 types is not supported, attempted to promote "
                                "Bool and UInt64", code="invalid_dtype")


def opmath_number(npdt: np.dtype, v):
    """A Python number as the kernel of a ``tensor op number`` call computes with it: in float32 for a
    float16/bfloat16 tensor (torch's CPU kernels read a scalar operand as their float32 opmath type, the
    result is rounded once), else as ``number_as``."""
    # (a plan's lifted literal: through a kernel, not pinned)
    return number_as(_F32 if npdt is _F16 or npdt is _BF16 else npdt, v)


_SPLIT = 134217729.0  # 2**27 + 1: Dekker's split of a float64 into two halves of 26 bits


def fma(x, y, z, npdt: np.dtype):
    """``x * y + z`` in ``npdt`` rounded once, as torch's CPU kernels compute ``add``/``sub`` with ``alpha``,
    ``addcmul`` and ``lerp`` in float32 and float64 (a fused multiply-add: two roundings differ in the last bit
    for about a quarter of the elements). float32: the product and sum in float64, exact but for a tie;
    float64: the product's and the sum's exact errors (Dekker, Knuth) added back before the one rounding, and
    where that overflows on the way (a product beyond float64 of a finite result), extended precision. Other
    dtypes (integers, and float16/bfloat16, which ``kcall`` hands to kernels in float32) as written."""
    if npdt == np.float32:
        f64 = np.float64
        return (np.asarray(x, f64) * np.asarray(y, f64) + np.asarray(z, f64)).astype(np.float32, copy=False)
    if npdt != np.float64:
        return np.asarray(x * y + z)
    x, y, z = np.asarray(x, np.float64), np.asarray(y, np.float64), np.asarray(z, np.float64)
    with np.errstate(all="ignore"):
        p = x * y
        t = _SPLIT * x
        xh = t - (t - x)
        xl = x - xh
        t = _SPLIT * y
        yh = t - (t - y)
        yl = y - yh
        low = ((xh * yh - p) + xh * yl + xl * yh) + xl * yl  # p + low == x * y exactly
        s = p + z
        back = s - p
        low = low + ((p - (s - back)) + (z - back))  # s + low: x * y + z but for the rounding of low
        out = np.where(low == 0, s, s + low)  # (a zero low part keeps s's sign: -0.0 + -0.0 is -0.0)
        bad = ~np.isfinite(out)
        if bad.any():
            ext = np.longdouble
            wide = (x.astype(ext) * y.astype(ext) + z.astype(ext)).astype(np.float64)
            out = np.where(bad, wide, out)
    return out


def binary_operands(a, b, dtype: str | None = None):
    """Result dtype and numpy operands of a binary op over Tensors and Python numbers.

    Follows torch.result_type; Python numbers are converted to the result dtype, as torch's
    TensorIterator does with wrapped scalars (so ``f32 * 0.1`` multiplies by float32(0.1))."""
    if dtype is None and a.__class__ is Tensor:
        ad = a.data
        if b.__class__ is Tensor:
            bd = b.data
            if ad.dtype == bd.dtype:  # the common case: one dtype, no promotion, no cast
                if ad.shape != bd.shape:
                    broadcast_shapes(ad.shape, bd.shape, ad.itemsize)
                return _FROM_NP[ad.dtype], ad, bd
            if b._wrapped and ad.dtype.kind in "fV" and not a._wrapped:
                # a float tensor with a wrapped number (``grad * 2.5`` in a VJP): the tensor's dtype, as
                # torch.result_type gives whatever the number's kind
                if ad.shape != bd.shape:
                    broadcast_shapes(ad.shape, bd.shape, ad.itemsize)
                return _FROM_NP[ad.dtype], ad, kcall(K.astype, bd, ad.dtype)
        elif (b.__class__ is float or b.__class__ is int) and ad.dtype.kind in "fV" and not a._wrapped:
            # a float tensor with a Python number keeps the tensor's dtype (torch.result_type); a plan's lifted
            # literal is converted by a kernel (engine.kernel.Lit)
            return _FROM_NP[ad.dtype], ad, ad.dtype.type(b) if type(b) is not Lit else kcall(K.number_as, b, ad.dtype)
    ta = isinstance(a, Tensor)
    tb = isinstance(b, Tensor)
    if ta and tb:
        if dtype is None:
            dtype = D.of_array(a.data) if a.data.dtype == b.data.dtype else D.result_type(a, b)
        if a.data.shape != b.data.shape:
            broadcast_shapes(a.data.shape, b.data.shape, NP[dtype].itemsize)
    elif dtype is None:
        if ta:
            if not is_number(b):
                raise InvalidArgumentError(f"expected a Tensor or a number, got {type(b).__name__}")
            refuse_uint64_with_bool(b, D.of_array(a.data))
        elif tb:
            if not is_number(a):
                raise InvalidArgumentError(f"expected a Tensor or a number, got {type(a).__name__}")
            refuse_uint64_with_bool(a, D.of_array(b.data))
        dtype = D.result_type(a, b)
    npdt = NP[dtype]
    if ta:
        A = a.data if a.data.dtype == npdt else kcall(K.astype, a.data, npdt)
    else:
        A = number_as(npdt, a)
    if tb:
        B = b.data if b.data.dtype == npdt else kcall(K.astype, b.data, npdt)
    else:
        B = number_as(npdt, b)
    return dtype, A, B


def as_operand(v, dtype: str | None = None, like: Tensor | None = None) -> Tensor:
    """A Tensor for v: the tensor itself, or a Python number wrapped as torch wraps it. ``like``: the tensor
    the number meets, which decides how an int of 2**63 .. 2**64 - 1 (torch's uint64) stands in."""
    cls = v.__class__
    if cls is float or cls is int:  # a JSON number: no ABC check
        if cls is int and dtype is None and like is not None and v >= 1 << 63:
            dtype = D.of_array(like.data)
            refuse_uint64_with_bool(v, dtype)
        return wrapped_number(v, dtype)
    if isinstance(v, Tensor):
        return v
    if not is_number(v):
        raise InvalidArgumentError(f"expected a Tensor or a number, got {type(v).__name__}")
    return wrapped_number(v, dtype)


def float_dtype(t: Tensor) -> str:
    """Integer/bool inputs of ops such as exp and sqrt compute in the default float dtype."""
    return D.of_array(t.data) if t.data.dtype.kind in "fV" else D.DEFAULT_FLOAT


def float_data(t: Tensor) -> np.ndarray:
    return t.data if t.data.dtype.kind in "fV" else t.data.astype(_F32)


def shape_arg(size) -> tuple:
    """Accept torch's size forms: f(2, 3), f((2, 3)), f([2, 3])."""
    if len(size) == 1 and isinstance(size[0], (list, tuple)):
        size = tuple(size[0])
    out = []
    for s in size:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)):
            raise InvalidArgumentError(f"size must be a sequence of ints, got {type(s).__name__}",
                                       code="invalid_shape")
        out.append(int(s))
    return tuple(out)


_UINT64 = 1 << 64


def saved_int(v):
    """An int argument as torch keeps it on a node: as given (not wrapped), a negative one reading back as its
    uint64 wrap-around (torch shows linalg.cross's dim=-1 as 18446744073709551615)."""
    if isinstance(v, (list, tuple)):
        return [saved_int(x) for x in v]
    return None if v is None else int(v) % _UINT64


def signed_int(v):
    """The inverse of saved_int."""
    if isinstance(v, (list, tuple)):
        return [signed_int(x) for x in v]
    return None if v is None else (v - _UINT64 if v >= _UINT64 // 2 else v)


def check_no_requires_grad(t, arg: str, fn: str) -> None:
    """torch's ``check_no_requires_grad`` (VariableType): an argument the op's formula does not differentiate
    (derivatives.yaml has no entry for it) may not require grad while grad mode is on."""
    from ..grad_mode import is_grad_enabled
    if t is not None and t.requires_grad and is_grad_enabled():
        raise TorchRuntimeError(f"The function '{fn}' is not differentiable with respect to argument '{arg}'. "
                                f"This input cannot have requires_grad True.", code="not_differentiable")


def tie(g: Tensor | None, *inputs) -> Tensor | None:
    """A gradient that torch's backward computes from the forward's input too (max/avg pooling, interpolation,
    the norms' bias): under create_graph torch's result requires grad through that input, with a zero second
    derivative. ``g`` comes back unchanged in value (``where`` of a false condition, so no sign of zero or NaN is
    touched) and tied to the inputs that require grad."""
    if g is None or g.requires_grad or not _grad_enabled.get():
        return g
    live = [t for t in inputs if isinstance(t, Tensor) and t.requires_grad]
    if not live:
        return g
    anchor = F.sum(live[0]) if len(live) == 1 else F.sum(live[0]) + sum(F.sum(t) for t in live[1:])
    return F.where(Tensor(np.zeros((), np.bool_)), anchor.to(g.dtype) if anchor.dtype != g.dtype else anchor, g)


# ----- shared by the families' formulas ------------------------------------------------------------------

def row_major(a: np.ndarray) -> np.ndarray:
    """A new result as torch allocates it, row-major (numpy's reductions, scans and joins keep their input's
    layout, which a later view would read)."""
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


#: a dimension argument checked before the op's other checks (gather, topk, argmax...; a declared rule: the client
#: raises it in that order too)
DIM_FIRST = ("dim_range(self,dim) | IndexError: Dimension out of range (expected to be in range of [{low}, {high}], "
             "but got {dim})")
#: an op that takes a dimension of a tensor that has none (mv's matrix, unbind's input)
NO_DIMENSIONS = "min_dims(self)=1 | IndexError: Dimension specified as 0 but tensor has no dimensions"
#: indexing's refusals from the index's metadata (getitem's and setitem's, which indexes through getitem)
INDEX_CHECKS = ("zero_dim_index(self,index)=zero | IndexError: invalid index of a 0-dim tensor. Use `tensor.item()` "
                "in Python or `tensor.item<T>()` in C++ to convert a 0-dim tensor to a number",
                "zero_dim_index(self,index)=int | IndexError: index {index} is out of bounds for dimension 0 with "
                "size 0",
                "zero_dim_index(self,index)=slice | IndexError: slice() cannot be applied to a 0-dim tensor.",
                "index_count(self,index) | IndexError: too many indices for tensor of dimension {dims}",
                "index_bounds(self,index) | IndexError: index {index} is out of bounds for dimension {dim} with size "
                "{size}",
                "index_tensor_dtypes(index) | IndexError: tensors used as indices must be long, int, byte or bool "
                "tensors",
                "index_masks(self,index) | IndexError: The shape of the mask {mask} at index {i} does not match the "
                "shape of the indexed tensor {shape} at index {dim}")
#: the largest x whose exp is finite, less a margin, by item size (float32, float64)
EXP_FINITE = {4: 88.0, 8: 709.0}
#: a kernel of several steps writes them over its first fresh array from this size on (a new array of this size
#: or more costs page faults; below, allocations are cheap and the out= keywords cost more than they save)
IN_PLACE_BYTES = 1 << 16


def zeros_like(t: Tensor) -> Tensor:
    return Tensor(np.zeros(t.data.shape, t.data.dtype))


def add_t(a, b):
    """a + b over tangents, None being zero."""
    if a is None:
        return b
    if b is None:
        return a
    return F.add(a, b)


def mul_t(t, factor):
    """t * factor for a tangent t (None stays None)."""
    return None if t is None else F.mul(t, factor)


def scale_t(t, k):
    """t * k for a number k, skipping k == 1."""
    if t is None or k == 1:
        return t
    return F.mul(t, k)


def sum_to(t: Tensor, shape: tuple) -> Tensor:
    """Sum a broadcast gradient back to an operand's shape (torch's at::sum_to)."""
    shape = tuple(shape)
    if t.data.shape == shape:
        return t
    if not shape:
        return F.sum(t)  # torch's sum_to: a full sum (SumBackward0) for a 0-d operand
    lead = t.data.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape)
                                      if s == 1 and t.data.shape[i + lead] != 1)
    r = F.sum(t, list(dims), keepdim=True) if dims else t
    if r.data.shape != shape:
        r = F.view(r, shape)  # torch's sum_to: tensor.view(shape) (drops the kept leading dims)
    return r
