"""Dtypes and PyTorch's type promotion (``torch.result_type``) for the dtypes the engine supports."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import InvalidArgumentError

FLOAT32, FLOAT64, INT64, BOOL = "float32", "float64", "int64", "bool"
INT32, INT16, INT8, UINT8 = "int32", "int16", "int8", "uint8"
FLOAT16, BFLOAT16 = "float16", "bfloat16"
DEFAULT_FLOAT = FLOAT32

NP_DTYPES = {FLOAT32: np.dtype(np.float32), FLOAT64: np.dtype(np.float64),
             INT64: np.dtype(np.int64), BOOL: np.dtype(np.bool_),
             INT32: np.dtype(np.int32), INT16: np.dtype(np.int16), INT8: np.dtype(np.int8),
             UINT8: np.dtype(np.uint8), FLOAT16: np.dtype(np.float16),
             BFLOAT16: np.dtype(ml_dtypes.bfloat16)}
NAMES = tuple(NP_DTYPES)
_FROM_NP = {v: k for k, v in NP_DTYPES.items()}
_FLOATS = frozenset((FLOAT32, FLOAT64, FLOAT16, BFLOAT16))
#: the reduced-precision floats: torch's CPU kernels compute them in float32 and round the result
HALF_TYPES = frozenset((FLOAT16, BFLOAT16))
#: numpy dtypes the engine treats as floating. ml_dtypes' bfloat16 has kind "V", not "f", and is the only
#: engine dtype of that kind: so the engine's floating test on a numpy dtype is ``dt.kind in "fV"``
NP_FLOATS = frozenset(NP_DTYPES[d] for d in _FLOATS)
_HALF_NP = frozenset(NP_DTYPES[d] for d in HALF_TYPES)
_F32 = NP_DTYPES[FLOAT32]
_SIGNED = (INT8, INT16, INT32, INT64)  # by size: promotion among signed integers is the larger

ALIASES = {
    "float32": FLOAT32, "float": FLOAT32, "torch.float32": FLOAT32, "torch.float": FLOAT32,
    "float64": FLOAT64, "double": FLOAT64, "torch.float64": FLOAT64, "torch.double": FLOAT64,
    "int64": INT64, "long": INT64, "torch.int64": INT64, "torch.long": INT64,
    "int32": INT32, "int": INT32, "torch.int32": INT32, "torch.int": INT32,
    "int16": INT16, "short": INT16, "torch.int16": INT16, "torch.short": INT16,
    "int8": INT8, "torch.int8": INT8, "uint8": UINT8, "torch.uint8": UINT8,
    "bool": BOOL, "torch.bool": BOOL,
    "float16": FLOAT16, "half": FLOAT16, "torch.float16": FLOAT16, "torch.half": FLOAT16,
    "bfloat16": BFLOAT16, "torch.bfloat16": BFLOAT16,
}
# torch's legacy type names, used in version-mismatch messages ("[torch.FloatTensor [2]]")
LEGACY_NAMES = {FLOAT32: "FloatTensor", FLOAT64: "DoubleTensor", INT64: "LongTensor", BOOL: "BoolTensor",
                INT32: "IntTensor", INT16: "ShortTensor", INT8: "CharTensor",
                UINT8: "ByteTensor", FLOAT16: "HalfTensor", BFLOAT16: "BFloat16Tensor"}


def type_string(dtype) -> str:
    """How torch's messages name a CPU tensor's type (``toString``): its legacy class ("torch.FloatTensor"), or,
    for the dtypes without one on the CPU backend, the backend's type name ("CPUBoolType", "CPUBFloat16Type")."""
    if dtype == BOOL or dtype == BFLOAT16:
        return f"CPU{SCALAR_TYPE_NAMES[dtype]}Type"
    return f"torch.{LEGACY_NAMES[dtype]}"


# torch's ScalarType names ("Float", "Long"), used in messages such as "Got: Long"
SCALAR_TYPE_NAMES = {FLOAT32: "Float", FLOAT64: "Double", INT64: "Long", BOOL: "Bool",
                     INT32: "Int", INT16: "Short", INT8: "Char", UINT8: "Byte", FLOAT16: "Half",
                     BFLOAT16: "BFloat16"}
# c10's TypeMeta names (gcc's spelling), used in messages such as "expected m1 and m2 to have the same dtype,
# but got: long int != float"
TYPE_META_NAMES = {FLOAT32: "float", FLOAT64: "double", INT64: "long int", BOOL: "bool", INT32: "int",
                   INT16: "short int", INT8: "signed char", UINT8: "unsigned char", FLOAT16: "c10::Half",
                   BFLOAT16: "c10::BFloat16"}
# C++ type names, used in messages such as "Input type (float) and bias type (double)"
C_NAMES = {FLOAT32: "float", FLOAT64: "double", INT64: "long", BOOL: "bool",
           INT32: "int", INT16: "short int", INT8: "signed char", UINT8: "unsigned char",
           FLOAT16: "c10::Half", BFLOAT16: "c10::BFloat16"}


def canonical(dtype) -> str:
    """Accept an engine dtype name, a torch spelling or a numpy dtype."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        try:
            return ALIASES[dtype]
        except KeyError:
            raise InvalidArgumentError(f"unknown dtype {dtype!r}; expected one of {', '.join(NAMES)}",
                                       code="unknown_dtype") from None
    try:
        return _FROM_NP[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"unsupported dtype {dtype!r}", code="unknown_dtype") from None


def of_array(a: np.ndarray) -> str:
    return _FROM_NP[a.dtype]


def is_floating(dtype: str) -> bool:
    return dtype in _FLOATS


def is_float_np(npdt: np.dtype) -> bool:
    """Whether a numpy dtype is one of the engine's floating dtypes (``kind in "fV"`` misses bfloat16)."""
    return npdt in NP_FLOATS


def finfo(npdt: np.dtype):
    """np.finfo, bfloat16 included."""
    return ml_dtypes.finfo(npdt)


def is_half(npdt: np.dtype) -> bool:
    """float16 or bfloat16, as a numpy dtype."""
    return npdt in _HALF_NP


def compute_dtype(npdt: np.dtype) -> np.dtype:
    """The dtype torch's CPU kernels compute a dtype's values in: float32 for float16/bfloat16 (the result
    is rounded back once), the dtype itself otherwise."""
    return _F32 if npdt in _HALF_NP else npdt


def promote(a: str, b: str) -> str:
    """c10::promoteTypes: bool yields to anything, integers to floats; uint8 with int8 gives int16."""
    if a == b or b == BOOL:
        return a
    if a == BOOL:
        return b
    fa, fb = a in _FLOATS, b in _FLOATS
    if fa != fb:
        return a if fa else b
    if fa:  # two floating types: the wider; float16 with bfloat16 is float32 (neither holds the other)
        if NP_DTYPES[a].itemsize == NP_DTYPES[b].itemsize:
            return FLOAT32
        return a if NP_DTYPES[a].itemsize > NP_DTYPES[b].itemsize else b
    if a == UINT8 or b == UINT8:
        other = b if a == UINT8 else a
        return INT16 if other == INT8 else other
    return a if _SIGNED.index(a) >= _SIGNED.index(b) else b


def _category(dtype: str) -> int:
    return 2 if dtype in _FLOATS else (0 if dtype == BOOL else 1)


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


def with_number(dtype: str, v) -> str:
    """torch.result_type of a tensor of ``dtype`` (with dimensions) and the Python number ``v``."""
    return _combine(dtype, scalar_dtype(v))


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


# ----- what torch's CPU kernels refuse for float16/bfloat16 ------------------------------------------------
# op -> (exception class, message with {} for the ScalarType name ("Half", "BFloat16"), the argument (its
# position in the call, its keyword name, the values) that makes it refuse, or None: always); torch 2.13's text
_LU = ("NotImplementedError", "\"lu_cpu\" not implemented for '{}'", None)
_SVD = ("NotImplementedError", "\"linalg_svd_cpu\" not implemented for '{}'", None)
_INV = ("RuntimeError", "linalg.inv: Low precision dtypes not supported. Got {}", None)
_SLOGDET = ("RuntimeError", "linalg.slogdet: Low precision dtypes not supported. Got {}", None)
_QUANTILE = ("RuntimeError", "quantile() input tensor must be either float or double dtype", None)
_MATRIX_NORM = ("RuntimeError", "linalg.matrix_norm: Low precision dtypes not supported. Got {}",
                (1, "ord", frozenset((2, -2, "nuc"))))
HALF_REFUSALS = {
    "det": _LU, "linalg.det": _LU, "linalg.solve": _LU,
    "inverse": _INV, "linalg.inv": _INV,
    "linalg.cholesky": ("NotImplementedError", "\"cholesky_cpu\" not implemented for '{}'", None),
    "slogdet": _SLOGDET, "linalg.slogdet": _SLOGDET,
    "logdet": ("RuntimeError", "logdet: Low precision dtypes not supported. Got {}", None),
    "svd": _SVD, "linalg.svd": _SVD, "linalg.svdvals": _SVD,
    "quantile": _QUANTILE, "nanquantile": _QUANTILE,
    "linalg.matrix_norm": _MATRIX_NORM,
    "linalg.norm": _MATRIX_NORM,  # a matrix norm only: see half_refusal
}


def half_refusal(op: str, dtype: str, args: tuple, kwargs: dict, empty: bool = False) -> tuple[str, str] | None:
    """(exception class, message) when torch's CPU kernel of ``op`` refuses ``dtype`` with these arguments;
    ``empty``: the input has no elements (torch then never reaches a kernel's "not implemented for" dispatch,
    while its explicit checks, RuntimeErrors, still refuse)."""
    rule = HALF_REFUSALS.get(op) if dtype in HALF_TYPES else None
    if rule is None:
        return None
    exception, message, when = rule
    if empty and exception == "NotImplementedError":
        return None
    if when is not None:
        pos, name, values = when
        v = args[pos] if len(args) > pos else kwargs.get(name)
        if v.__class__ not in (int, float, str) or v not in values:
            return None
    if op == "linalg.norm":  # linalg.norm is a matrix norm for a 2-d input without dim, or with two dims
        dim = args[2] if len(args) > 2 else kwargs.get("dim")
        ndim = args[0].data.ndim if args and hasattr(args[0], "data") else 0
        if not ((dim is None and ndim == 2) or (isinstance(dim, (list, tuple)) and len(dim) == 2 and ndim >= 2)):
            return None
    return exception, message.format(SCALAR_TYPE_NAMES[dtype])
