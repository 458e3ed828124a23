"""torch's legacy spellings: ``torch.Tensor(data)``, ``torch.FloatTensor``/``DoubleTensor``/``LongTensor``/
``BoolTensor`` (constructors, and types for ``isinstance``), ``Tensor.type()``'s names, and
``torch.autograd.Variable`` (a detached alias of its data, made a leaf as asked)."""

from __future__ import annotations

import numpy as np

from gradserve.torch import _device
from gradserve.torch._dtypes import DTYPES, Size, dtype

#: dtype name -> the legacy type name torch gives it (Tensor.type())
TYPE_NAMES = {"float32": "torch.FloatTensor", "float64": "torch.DoubleTensor", "int64": "torch.LongTensor",
              "bool": "torch.BoolTensor", "int32": "torch.IntTensor", "int16": "torch.ShortTensor",
              "int8": "torch.CharTensor", "uint8": "torch.ByteTensor", "float16": "torch.HalfTensor",
              "bfloat16": "torch.BFloat16Tensor"}


def type_name(dt: dtype) -> str:
    return TYPE_NAMES[dt.name]


def dtype_of(value) -> dtype:
    """``Tensor.type``'s argument: a dtype, a legacy type, or its name (``'torch.LongTensor'``)."""
    if isinstance(value, dtype):
        return value
    if isinstance(value, LegacyType):
        return value.dtype
    if isinstance(value, str):
        for name, legacy in TYPE_NAMES.items():
            if value == legacy:
                return DTYPES[name]
        if value.startswith("torch.cuda."):
            raise AssertionError(_device.NO_CUDA)
        raise ValueError(f"invalid type: '{value}'")
    raise TypeError(f"type() received an invalid combination of arguments - got ({type(value).__name__})")


def construct(dt: dtype, args: tuple, kwargs: dict, fn: str):
    """``torch.Tensor(*args)`` / ``torch.FloatTensor(*args)``: no argument -> an empty tensor; sizes (ints or a
    torch.Size) -> a tensor of that shape (torch leaves its values uninitialised; here they are zeros); a tensor
    -> an alias of it (of this dtype only); data (a list, a tuple, an array) -> a tensor of this dtype."""
    from gradserve.torch._tensor import Tensor, call_op

    for key, value in kwargs.items():
        if key != "device":
            raise TypeError(f"{fn}() received an invalid combination of arguments - got an unexpected keyword "
                            f"argument '{key}'")
        if value is not None:
            _device.check(value)
    if not args:
        return call_op("zeros", (0,), {"dtype": dt})
    if len(args) == 1 and isinstance(args[0], Size) or all(_is_int(a) for a in args):
        sizes = tuple(args[0]) if isinstance(args[0], Size) else args
        return call_op("zeros", sizes, {"dtype": dt})
    if len(args) == 1 and isinstance(args[0], Tensor):
        if args[0].dtype != dt:
            raise TypeError(f"expected {_options(dt)} (got {_options(args[0].dtype)})")
        return args[0].detach()
    if len(args) == 1 and isinstance(args[0], (list, tuple, np.ndarray)):
        return call_op("tensor", (np.asarray(args[0]) if isinstance(args[0], np.ndarray) else args[0],),
                       {"dtype": dt})
    got = ", ".join(type(a).__name__ for a in args)
    raise TypeError(f"{fn}() received an invalid combination of arguments - got ({got})")


def _options(dt: dtype) -> str:
    """torch's TensorOptions repr, as its legacy constructors' dtype errors print it."""
    scalar = {"float32": "float", "float64": "double", "int64": "long", "bool": "bool"}[dt.name]
    return (f"TensorOptions(dtype={scalar}, device=cpu, layout=Strided, requires_grad=false (default), "
            f"pinned_memory=false (default), memory_format=(nullopt))")


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


class LegacyType(type):
    """The type of ``torch.FloatTensor`` & co.: calling one constructs a tensor of its dtype; ``isinstance(t,
    torch.FloatTensor)`` asks the tensor's dtype."""

    def __instancecheck__(cls, obj) -> bool:
        from gradserve.torch._tensor import Tensor

        return isinstance(obj, Tensor) and obj.dtype == cls.dtype

    def __call__(cls, *args, **kwargs):
        return construct(cls.dtype, args, kwargs, type_name(cls.dtype).removeprefix("torch."))

    def __repr__(cls) -> str:
        return f"<class '{type_name(cls.dtype)}'>"


def _legacy_type(name: str) -> LegacyType:
    return LegacyType(TYPE_NAMES[name].removeprefix("torch."), (), {"dtype": DTYPES[name]})


FloatTensor, DoubleTensor = _legacy_type("float32"), _legacy_type("float64")
LongTensor, BoolTensor = _legacy_type("int64"), _legacy_type("bool")


class _VariableType(type):
    """``isinstance(t, Variable)`` is true of every tensor, as in torch (Variable and Tensor merged in 0.4)."""

    def __instancecheck__(cls, obj) -> bool:
        from gradserve.torch._tensor import Tensor

        return isinstance(obj, Tensor)

    def __call__(cls, data, requires_grad: bool = False, volatile: bool = False):
        """``Variable(data, requires_grad=False)``: a new leaf sharing ``data``'s values."""
        from gradserve.torch._tensor import Tensor

        if not isinstance(data, Tensor):
            raise TypeError("Variable data has to be a tensor, but got " + type(data).__name__)
        out = data.detach()
        if requires_grad:
            out.requires_grad_(True)
        return out


class Variable(metaclass=_VariableType):
    """``torch.autograd.Variable``."""
