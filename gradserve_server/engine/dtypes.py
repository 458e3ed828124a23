"""Dtypes and PyTorch's type promotion (``torch.result_type``) for the four dtypes the engine supports."""

from __future__ import annotations

import numpy as np

from .errors import InvalidArgumentError

FLOAT32, FLOAT64, INT64, BOOL = "float32", "float64", "int64", "bool"
DEFAULT_FLOAT = FLOAT32

NP_DTYPES = {FLOAT32: np.dtype(np.float32), FLOAT64: np.dtype(np.float64),
             INT64: np.dtype(np.int64), BOOL: np.dtype(np.bool_)}
_FROM_NP = {v: k for k, v in NP_DTYPES.items()}
# bool < int64 < float32 < float64: for these four dtypes promotion is the maximum in this order.
_RANK = {BOOL: 0, INT64: 1, FLOAT32: 2, FLOAT64: 3}
_BY_RANK = [BOOL, INT64, FLOAT32, FLOAT64]

ALIASES = {
    "float32": FLOAT32, "float": FLOAT32, "torch.float32": FLOAT32, "torch.float": FLOAT32,
    "float64": FLOAT64, "double": FLOAT64, "torch.float64": FLOAT64, "torch.double": FLOAT64,
    "int64": INT64, "long": INT64, "torch.int64": INT64, "torch.long": INT64,
    "bool": BOOL, "torch.bool": BOOL,
}
# torch's legacy type names, used in version-mismatch messages ("[torch.FloatTensor [2]]")
LEGACY_NAMES = {FLOAT32: "FloatTensor", FLOAT64: "DoubleTensor", INT64: "LongTensor", BOOL: "BoolTensor"}
# torch's ScalarType names ("Float", "Long"), used in messages such as "Got: Long"
SCALAR_TYPE_NAMES = {FLOAT32: "Float", FLOAT64: "Double", INT64: "Long", BOOL: "Bool"}
C_NAMES = {FLOAT32: "float", FLOAT64: "double", INT64: "long", BOOL: "bool"}


def canonical(dtype) -> str:
    """Accept an engine dtype name, a torch spelling or a numpy dtype."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        try:
            return ALIASES[dtype]
        except KeyError:
            raise InvalidArgumentError(f"unknown dtype {dtype!r}; expected one of float32, float64, int64, bool",
                                       code="unknown_dtype") from None
    try:
        return _FROM_NP[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"unsupported dtype {dtype!r}", code="unknown_dtype") from None


def of_array(a: np.ndarray) -> str:
    return _FROM_NP[a.dtype]


def is_floating(dtype: str) -> bool:
    return dtype == FLOAT32 or dtype == FLOAT64


def promote(a: str, b: str) -> str:
    return a if _RANK[a] >= _RANK[b] else b


def _category(dtype: str) -> int:
    return 2 if dtype in (FLOAT32, FLOAT64) else (1 if dtype == INT64 else 0)


def _combine(higher: str | None, lower: str | None) -> str | None:
    # c10's combine_categories for the real dtypes we support
    if higher is None:
        return lower
    if is_floating(higher):
        return higher
    if lower is None:
        return higher
    if higher == BOOL or is_floating(lower):
        return promote(higher, lower)
    return higher


def scalar_dtype(v) -> str:
    """The dtype a Python number would have as a wrapped scalar operand."""
    if isinstance(v, bool):
        return BOOL
    if isinstance(v, int):
        return INT64
    return DEFAULT_FLOAT


def result_type(*operands) -> str:
    """torch.result_type over tensors (objects with ``.data``) and Python numbers.

    Dimensioned tensors win over 0-d tensors, which win over Python scalars, unless the lower-priority
    group is of a higher category (bool < integer < floating).
    """
    dim = zero = wrapped = None
    for o in operands:
        if o is None:
            continue
        data = getattr(o, "data", None)
        if data is None:
            d = scalar_dtype(o)
            wrapped = d if wrapped is None else promote(wrapped, d)
        elif getattr(o, "_wrapped", False):
            d = _FROM_NP[data.dtype]
            d = DEFAULT_FLOAT if is_floating(d) else d
            wrapped = d if wrapped is None else promote(wrapped, d)
        elif data.ndim == 0:
            d = _FROM_NP[data.dtype]
            zero = d if zero is None else promote(zero, d)
        else:
            d = _FROM_NP[data.dtype]
            dim = d if dim is None else promote(dim, d)
    return _combine(dim, _combine(zero, wrapped))


def can_cast(src: str, dst: str) -> bool:
    """torch.can_cast for in-place results: no float->int, no int->bool."""
    return _category(src) <= _category(dst)
