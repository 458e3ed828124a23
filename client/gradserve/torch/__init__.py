"""``gradserve.torch``: torch's API over a gradserve server, to use with one changed line.

    import gradserve.torch as torch      # server from GRADSERVE_URL (default http://127.0.0.1:8000)
    x = torch.tensor([2.0, 3.0], requires_grad=True)
    y = x.pow(2).sum()
    y.backward()
    print(x.grad)                        # tensor([4., 6.])

Tensors are handles to named tensors of a server session; ops are recorded and sent as one op list when a
value is needed. Every op of the server's catalog is a function here (and a Tensor method where the catalog
says so); see docs/tutorial/client.md for sync points, errors and name release.
"""

from __future__ import annotations

import importlib as _importlib
import math as _math

import numpy as _np

from gradserve.torch import _dtypes, _namespace
from gradserve.torch._context import session, sync
from gradserve.torch._device import device
from gradserve.torch._dtypes import Size, bfloat16, dtype, float16, float32, float64, int8, int16, int32, int64, uint8
from gradserve.torch._dtypes import bool as bool  # noqa: PLC0414 - torch.bool
from gradserve.torch._grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from gradserve.torch._legacy import BoolTensor, DoubleTensor, FloatTensor, LongTensor
from gradserve.torch._python import (
    are_deterministic_algorithms_enabled,
    as_tensor,
    broadcast_tensors,
    can_cast,
    compile,  # noqa: A004 - torch.compile
    empty_like,
    equal,
    finfo,
    get_float32_matmul_precision,
    iinfo,
    is_complex,
    is_floating_point,
    is_nonzero,
    meshgrid,
    numel,
    promote_types,
    result_type,
    set_float32_matmul_precision,
    typename,
    use_deterministic_algorithms,
)
from gradserve.torch._random import (
    Generator,
    default_generator,
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    set_rng_state,
)
from gradserve.torch._tensor import Tensor
from gradserve.torch.serialization import load, save

pi, e, inf, nan = _math.pi, _math.e, _math.inf, _math.nan  # torch's constants
float = float32  # noqa: A001 - torch.float
double = float64
long = int64
int = int32  # noqa: A001 - torch.int
short = int16
half = float16

__getattr__, __dir__ = _namespace.install(globals(), "torch")


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def get_default_dtype() -> dtype:
    """``torch.get_default_dtype()``: the float that Python floats and integer inputs of float functions give."""
    return _dtypes.by_name(_dtypes.default_float())


def set_default_dtype(d) -> None:
    """``torch.set_default_dtype(d)``: torch's TypeError for what is not a floating dtype. The server computes with
    float32 as its default float; under another, the client sends the dtype torch would use (a factory's dtype=,
    an integer operand converted where torch's result is of the default dtype)."""
    if not isinstance(d, dtype):
        raise TypeError("invalid dtype object: only floating-point types are supported as the default type")
    if not d.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    if d.name != _dtypes.default_float():
        _dtypes._DEFAULT[0] = d.name
        from gradserve.torch import _meta, _tensor

        _tensor._DECIDED.clear()  # (what was decided read the default dtype)
        _meta._PREDICTED.clear()


def from_numpy(a) -> Tensor:
    return __getattr__("tensor")(_np.asarray(a))


__all__ = ["Tensor", "Size", "dtype", "float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool",
           "float", "double", "long", "int", "short", "float16", "half", "bfloat16", "no_grad",
           "enable_grad", "set_grad_enabled", "is_grad_enabled", "inference_mode", "session", "sync", "is_tensor",
           "manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state", "Generator", "default_generator",
           "from_numpy", "get_default_dtype", "set_default_dtype",
           "device", "FloatTensor", "DoubleTensor", "LongTensor", "BoolTensor", "save", "load", "finfo", "iinfo",
           "promote_types", "result_type", "can_cast", "numel", "is_floating_point", "is_complex", "is_nonzero",
           "equal", "typename", "as_tensor", "broadcast_tensors", "empty_like", "meshgrid", "compile",
           "use_deterministic_algorithms", "pi", "e", "inf", "nan",
           "are_deterministic_algorithms_enabled", "set_float32_matmul_precision", "get_float32_matmul_precision"]

# torch.nn, torch.optim... as attributes, as torch has them (import_module: a `from . import nn` would ask the
# module's __getattr__ first, i.e. the server's catalog)
for _sub in ("autograd", "backends", "cuda", "distributions", "func", "linalg", "nn", "optim", "random", "special",
             "testing", "utils"):
    _importlib.import_module(f"{__name__}.{_sub}")
is_anomaly_enabled = autograd.is_anomaly_enabled  # noqa: F821 - torch's, from the submodule just imported
is_anomaly_check_nan_enabled = autograd.is_anomaly_check_nan_enabled  # noqa: F821
vmap = func.vmap  # noqa: F821 - torch.vmap is torch.func.vmap (the submodule was just imported)
