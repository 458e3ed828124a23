"""Tensor creation: tensor, zeros/ones/full, arange, linspace, eye, the ``*_like`` variants.

Results are leaves. Sizes are validated and the element count is checked against the active limits
before anything is allocated; ``requires_grad=True`` on a non-float dtype fails with torch's message.
The random ones (``rand``, ``randn``...) are in ``ops.random``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import dtypes as D
from ..errors import InvalidArgumentError, RequiresGradError, TorchRuntimeError, TorchTypeError, TorchValueError
from ..grad_mode import check_numel
from ..registry import op
from ..tensor import Tensor
from ..tensor import tensor as _make_tensor
from .common import NOT_GIVEN, NP, is_number, require_tensor


def _leaf(arr: np.ndarray, requires_grad: bool) -> Tensor:
    if requires_grad and arr.dtype.kind not in "fV":
        raise RequiresGradError("Only Tensors of floating point and complex dtype can require gradients")
    return Tensor(arr, requires_grad=bool(requires_grad))


def _check_requires_grad(dtype: str, requires_grad: bool) -> None:
    """Refuse before allocating (the leaf check again guards the result)."""
    if requires_grad and not D.is_floating(dtype):
        raise RequiresGradError("Only Tensors of floating point and complex dtype can require gradients")


def _size(size, name: str, negative_message: str | None = None, itemsize: int | None = None) -> tuple:
    """torch's size forms f(2, 3), f((2, 3)), f([2, 3]); negative sizes, the element limit and (given the
    element size) the run's byte budget are checked before allocation."""
    if len(size) == 1 and isinstance(size[0], (list, tuple)):
        size = tuple(size[0])
    out = []
    for s in size:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)):
            raise InvalidArgumentError(f"{name}(): argument 'size' (position 1) must be tuple of ints, not "
                                       f"{type(s).__name__}", code="invalid_shape")
        out.append(int(s))
    shape = tuple(out)
    if any(s < 0 for s in shape):
        neg = next(s for s in shape if s < 0)
        raise TorchRuntimeError(negative_message or
                                f"Trying to create tensor with negative dimension {neg}: {list(shape)}",
                                code="invalid_shape")
    check_numel(shape, itemsize=itemsize)
    return shape


def _sizes(name: str, sizes: tuple, size) -> tuple:
    """The size as varargs (``zeros(2, 3)``, ``zeros((2, 3))``) or by keyword (``zeros(size=(2, 3))``: torch's
    parameter is named size; by keyword it must be a list or tuple, never one int)."""
    if size is NOT_GIVEN:
        return sizes
    if not isinstance(size, (list, tuple)):
        raise TorchTypeError(f"{name}(): argument 'size' must be tuple of ints, not {type(size).__name__}",
                             code="invalid_shape")
    return (size,)


def _dtype(dtype, default: str = D.DEFAULT_FLOAT) -> str:
    return D.canonical(dtype) if dtype is not None else default


class Owned:
    """A ``tensor`` op's data handed over with the array: ``{"op": "tensor", "args": [Owned(arr)]}``, where the
    caller made ``arr`` for this op alone (the service's freshly decoded payload) and holds it nowhere else.

    The op itself copies it as any array (``torch.tensor``'s semantics: a cold run, a session, a loop). A one-shot
    run through a plan (``engine.trace.plan.run_planned``) may keep ``arr`` as the tensor's data instead, once, when
    the copy would be indistinguishable from it: ``arr`` C-contiguous, writable, owning its memory, in native
    byte order and of the dtype the op gives it (``engine.trace.plan._direct_input``)."""

    __slots__ = ("array", "taken")

    def __init__(self, array):
        self.array = array
        self.taken = False  # kept by a run: any later use copies

    def __repr__(self) -> str:
        return f"Owned({self.array!r})"


@op("tensor",
    parsed=False,
    method=False, differentiable=False)
def tensor(data, dtype=None, requires_grad=False):
    """torch.tensor(data, dtype=None, requires_grad=False): floats -> float32, ints -> int64, bools -> bool."""
    if data.__class__ is Owned:
        data = data.array  # copied, as any array
    return _make_tensor(data, dtype=dtype, requires_grad=requires_grad)


def _filled(name: str, size, value, dtype, requires_grad, negative_message=None) -> Tensor:
    d = _dtype(dtype)
    shape = _size(size, name, negative_message, NP[d].itemsize)
    _check_requires_grad(d, requires_grad)
    return _leaf(np.full(shape, value, dtype=NP[d]), requires_grad)


@op("zeros", promotion="float",
    size_varargs="size", cost="arguments",
    method=False, differentiable=False)
def zeros(*sizes, size=NOT_GIVEN, dtype=None, requires_grad=False):
    """torch.zeros(*size, dtype=None, requires_grad=False)."""
    return _filled("zeros", _sizes("zeros", sizes, size), 0, dtype, requires_grad,
                   "zeros: Dimension size must be non-negative.")


@op("empty", promotion="float",
    size_varargs="size", cost="arguments",
    method=False, differentiable=False)
def empty(*sizes, size=NOT_GIVEN, dtype=None, requires_grad=False):
    """torch.empty(*size, dtype=None, requires_grad=False): its values are unspecified in torch; here zeros."""
    return _filled("empty", _sizes("empty", sizes, size), 0, dtype, requires_grad)


@op("ones", promotion="float",
    size_varargs="size", cost="arguments",
    method=False, differentiable=False)
def ones(*sizes, size=NOT_GIVEN, dtype=None, requires_grad=False):
    """torch.ones(*size, dtype=None, requires_grad=False)."""
    return _filled("ones", _sizes("ones", sizes, size), 1, dtype, requires_grad)


def _fill_dtype(fill_value) -> str:
    """torch.full's inference: bool -> bool, int -> int64, float -> the default float dtype."""
    if isinstance(fill_value, (bool, np.bool_)):
        return D.BOOL
    if isinstance(fill_value, numbers.Integral):
        return D.INT64
    return D.DEFAULT_FLOAT


def _fill_number(fill_value, name: str):
    if isinstance(fill_value, Tensor):
        if fill_value.data.ndim != 0:
            raise TorchRuntimeError(f"{name}(): fill_value must be a number or a 0-d tensor, got a "
                                    f"{fill_value.data.ndim}-d tensor", code="invalid_argument")
        return fill_value.item()
    if not is_number(fill_value):
        raise InvalidArgumentError(f"{name}(): argument 'fill_value' must be Number, not "
                                   f"{type(fill_value).__name__}")
    return fill_value


@op("full",
    cost="arguments",
    method=False, differentiable=False)
def full(size, fill_value, dtype=None, requires_grad=False):
    """torch.full(size, fill_value, dtype=None, requires_grad=False); the dtype follows fill_value."""
    if not isinstance(size, (list, tuple)):
        raise InvalidArgumentError(f"full(): argument 'size' (position 1) must be tuple of ints, not "
                                   f"{type(size).__name__}", code="invalid_shape")
    fill_value = _fill_number(fill_value, "full")
    d = _dtype(dtype, _fill_dtype(fill_value))
    from .elementwise import checked_scalar
    return _filled("full", (tuple(size),), checked_scalar(fill_value, d), d, requires_grad)


def _real(v, name: str) -> float | int:
    """A Number argument: a Python number (a bool counts as the int it is), or a 0-d tensor's value."""
    if isinstance(v, Tensor):
        v = v.item()
    if not is_number(v):
        raise InvalidArgumentError(f"{name}: expected a number, got {type(v).__name__}")
    return int(v) if isinstance(v, (bool, np.bool_)) else v


@op("arange",
    cost="arguments",
    method=False, differentiable=False)
def arange(start, end=None, step=1, dtype=None, requires_grad=False):
    """torch.arange(start, end=None, step=1, dtype=None): int64 when start, end and step are all ints,
    else float32; values are start + i * step computed in double, as torch's CPU kernel does."""
    if end is None:
        start, end = 0, start
    start, end, step = _real(start, "arange"), _real(end, "arange"), _real(step, "arange")
    all_int = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    d = _dtype(dtype, D.INT64 if all_int else D.DEFAULT_FLOAT)
    if step == 0:
        raise TorchRuntimeError("step must be nonzero", code="invalid_argument")
    for v in (start, end):
        if not math.isfinite(v):
            raise TorchRuntimeError(f"unsupported range: {_fmt(start)} -> {_fmt(end)}", code="invalid_argument")
    if not D.is_floating(d):
        start, end, step = int(start), int(end), int(step)
        if step == 0:
            raise TorchValueError("step must be nonzero", code="invalid_argument")
        n = -((start - end) // step) if (end - start) * step > 0 else 0
    else:
        n = math.ceil((end - start) / step)
    if (step > 0 and start > end) or (step < 0 and start < end):
        raise TorchRuntimeError("upper bound and lower bound inconsistent with step sign", code="invalid_argument")
    n = max(int(n), 0)
    check_numel((n,), itemsize=8)  # computed in double or int64, then cast
    _check_requires_grad(d, requires_grad)
    if D.is_floating(d):
        arr = (start + step * np.arange(n, dtype=np.float64)).astype(NP[d])
    else:
        arr = (start + step * np.arange(n, dtype=np.int64)).astype(NP[d])
    return _leaf(arr, requires_grad)


def _fmt(v) -> str:
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return str(int(v)) if abs(v) < 1e16 else repr(v)
    return str(v)


@op("linspace", promotion="float()",
    overloads={
        "function": (
            "(Tensor start, Tensor end, int steps, *, Tensor out = None, torch.dtype dtype = None, "
            "torch.layout layout = None, torch.device device = None, bool pin_memory = False, "
            "bool requires_grad = False)",
            "(Number start, Tensor end, int steps, *, Tensor out = None, torch.dtype dtype = None, "
            "torch.layout layout = None, torch.device device = None, bool pin_memory = False, "
            "bool requires_grad = False)",
            "(Tensor start, Number end, int steps, *, Tensor out = None, torch.dtype dtype = None, "
            "torch.layout layout = None, torch.device device = None, bool pin_memory = False, "
            "bool requires_grad = False)",
            "(Number start, Number end, int steps, *, Tensor out = None, torch.dtype dtype = None, "
            "torch.layout layout = None, torch.device device = None, bool pin_memory = False, "
            "bool requires_grad = False)",
        ),
    },
    cost="arguments",
    tensors=("start", "end"), method=False, differentiable=False)
def linspace(start, end, steps, dtype=None, requires_grad=False):
    """torch.linspace(start, end, steps, dtype=None): evenly spaced, the first half counted up from start and
    the second half down from end, as torch's CPU kernel does (in float32 for float32 results). ``start`` and
    ``end`` are numbers or 0-d tensors (torch's Tensor overloads; no gradient flows to them)."""
    for which, v in (("start", start), ("end", end)):
        if isinstance(v, Tensor) and v.data.ndim:
            raise TorchRuntimeError(f"linspace only supports 0-dimensional start and end tensors, but got {which} "
                                    f"with {v.data.ndim} dimension(s).", code="invalid_argument")
    start, end = _real(start, "linspace"), _real(end, "linspace")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)):
        raise InvalidArgumentError(f"linspace(): argument 'steps' must be int, not {type(steps).__name__}")
    if steps < 0:
        raise TorchRuntimeError("number of steps must be non-negative", code="invalid_argument")
    d = _dtype(dtype)
    check_numel((int(steps),), itemsize=8)
    _check_requires_grad(d, requires_grad)
    npdt = NP[d]
    if steps == 0:
        return _leaf(np.zeros(0, npdt), requires_grad)
    if steps == 1:
        return _leaf(np.full(1, start, npdt), requires_grad)
    idx = np.arange(steps)
    half = steps // 2
    if D.is_floating(d):
        t = npdt.type
        s, e = t(start), t(end)
        step = (e - s) / t(steps - 1)
        up = s + step * idx.astype(npdt)
        down = e - step * (steps - idx - 1).astype(npdt)
    else:
        s, e = float(int(start)), float(int(end))
        step = (e - s) / (steps - 1)
        up = s + step * idx
        down = e - step * (steps - idx - 1)
    return _leaf(np.where(idx < half, up, down).astype(npdt), requires_grad)


@op("eye", promotion="float",
    cost="arguments",
    method=False, differentiable=False)
def eye(n, m=None, dtype=None, requires_grad=False):
    """torch.eye(n, m=None, dtype=None, requires_grad=False)."""
    if m is None:
        m = n
    for name, v in (("n", n), ("m", m)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise InvalidArgumentError(f"eye(): argument '{name}' must be int, not {type(v).__name__}")
        if v < 0:
            raise TorchRuntimeError(f"{name} must be greater or equal to 0, got {v}", code="invalid_shape")
    d = _dtype(dtype)
    check_numel((n, m), itemsize=NP[d].itemsize)
    _check_requires_grad(d, requires_grad)
    return _leaf(np.eye(n, m, dtype=NP[d]), requires_grad)


# ----- *_like -----------------------------------------------------------------------------------------


def _like(name: str, input, value, dtype, requires_grad) -> Tensor:
    input = require_tensor(input, "input", name)
    d = _dtype(dtype, input.dtype)
    check_numel(input.shape, itemsize=NP[d].itemsize)
    _check_requires_grad(d, requires_grad)
    if NP[d].kind in "iub":  # the fill is converted to the dtype, checked (int64: 2**63 fails), as full's is
        from .elementwise import checked_scalar
        value = checked_scalar(value, d)
    return _leaf(np.full(input.shape, value, dtype=NP[d]), requires_grad)


@op("zeros_like", methods=(), promotion="same", tensors=("input",), differentiable=False)
def zeros_like(input, dtype=None, requires_grad=False):
    """torch.zeros_like(input, dtype=None, requires_grad=False): a new leaf (never tracks input)."""
    return _like("zeros_like", input, 0, dtype, requires_grad)


@op("ones_like", methods=(), promotion="same", tensors=("input",), differentiable=False)
def ones_like(input, dtype=None, requires_grad=False):
    """torch.ones_like(input, dtype=None, requires_grad=False)."""
    return _like("ones_like", input, 1, dtype, requires_grad)


@op("full_like", methods=(), promotion="same", tensors=("input",), differentiable=False)
def full_like(input, fill_value, dtype=None, requires_grad=False):
    """torch.full_like(input, fill_value, dtype=None, requires_grad=False): input's dtype unless given."""
    return _like("full_like", input, _fill_number(fill_value, "full_like"), dtype, requires_grad)
