"""torch's functions that are not ops of their own: facts of dtypes (``finfo``, ``iinfo``, ``promote_types``,
``result_type``, ``can_cast``), of tensors (``numel``, ``is_floating_point``, ``is_nonzero``, ``equal``,
``typename``), conversions and compositions (``as_tensor``, ``empty_like``, ``meshgrid``), and ``compile``.
Each answers as torch 2.13 does, with its messages; the compositions record the ops torch's own record, so
their grad_fn names are torch's."""

from __future__ import annotations

import builtins
import functools
import math
import warnings

import numpy as np

from gradserve.torch import _dtypes, _meta, _promotion
from gradserve.torch._context import user_stacklevel
from gradserve.torch._tensor import Tensor, call_op


def _tensor_arg(fn: str, value, name: str = "input", position: int = 1) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{fn}(): argument '{name}' (position {position}) must be Tensor, not {type(value).__name__}")
    return value


def _dtype_arg(fn: str, value, name: str, position: int) -> _dtypes.dtype:
    if not isinstance(value, _dtypes.dtype):
        raise TypeError(f"{fn}(): argument '{name}' (position {position}) must be torch.dtype, not "
                        f"{type(value).__name__}")
    return value


# ----- dtype facts ----------------------------------------------------------------------------------------------

def _g(value) -> str:
    return f"{value:.6g}"


class finfo:
    """``torch.finfo(dtype=None)``: the limits of a floating dtype (the default dtype when none is given)."""

    def __init__(self, type=None):  # noqa: A002 - torch's parameter name
        d = _dtypes.by_name(_dtypes.default_float()) if type is None else _dtype_arg("finfo", type, "type", 1)
        if not d.is_floating_point:
            raise TypeError("torch.finfo() requires a floating point input type. Use torch.iinfo to handle "
                            "'torch.finfo'")
        if d.name == "bfloat16":  # (numpy lacks it: 8 exponent bits as float32's, 8 bits of precision)
            self.bits, self.eps, self.max = 16, 2.0 ** -7, float(np.float32(3.3895313892515355e38))
            self.tiny = self.smallest_normal = float(np.finfo(np.float32).tiny)
        else:
            info = np.finfo(np.dtype(d.name))
            self.bits, self.eps, self.max = info.bits, float(info.eps), float(info.max)
            self.tiny = self.smallest_normal = float(info.tiny)
        self.min = -self.max
        self.resolution = 10.0 ** -math.floor(-math.log10(self.eps))
        self.dtype = d.name

    def __eq__(self, other) -> bool:
        return isinstance(other, finfo) and other.dtype == self.dtype

    def __hash__(self) -> int:
        return hash(("finfo", self.dtype))

    def __repr__(self) -> str:
        return (f"finfo(resolution={_g(self.resolution)}, min={_g(self.min)}, max={_g(self.max)}, eps={_g(self.eps)}, "
                f"smallest_normal={_g(self.smallest_normal)}, tiny={_g(self.tiny)}, dtype={self.dtype})")


class iinfo:
    """``torch.iinfo(dtype)``: the limits of an integer dtype."""

    def __init__(self, type):  # noqa: A002 - torch's parameter name
        d = _dtype_arg("iinfo", type, "type", 1)
        if d.name == "bool":
            raise TypeError("torch.bool is not supported by torch.iinfo")
        if d.is_floating_point:
            raise TypeError("torch.iinfo() requires an integer input type. Use torch.finfo to handle 'torch.iinfo'")
        info = np.iinfo(np.dtype(d.name))
        self.bits, self.min, self.max, self.dtype = info.bits, builtins.int(info.min), builtins.int(info.max), d.name

    def __eq__(self, other) -> bool:
        return isinstance(other, iinfo) and other.dtype == self.dtype

    def __hash__(self) -> int:
        return hash(("iinfo", self.dtype))

    def __repr__(self) -> str:
        return f"iinfo(min={_g(float(self.min))}, max={_g(float(self.max))}, dtype={self.dtype})"


def promote_types(type1, type2) -> _dtypes.dtype:
    a, b = _dtype_arg("promote_types", type1, "type1", 1), _dtype_arg("promote_types", type2, "type2", 2)
    return _dtypes.by_name(_promotion.promote(a.name, b.name))


def _operand(fn: str, value, name: str, position: int) -> tuple[str, int]:
    if isinstance(value, Tensor):
        return value.dtype.name, _promotion.DIM if value.dim() else _promotion.ZERO
    if isinstance(value, (builtins.bool, builtins.int, builtins.float)):
        return _promotion.number_dtype(value), _promotion.NUMBER
    raise TypeError(f"{fn}(): argument '{name}' (position {position}) must be Tensor, not {type(value).__name__}")


def result_type(tensor1, tensor2) -> _dtypes.dtype:
    """``torch.result_type``: the dtype torch's arithmetic gives these operands (tensors or Python numbers)."""
    operands = [_operand("result_type", tensor1, "tensor1", 1), _operand("result_type", tensor2, "tensor2", 2)]
    return _dtypes.by_name(_promotion.result_type(operands))


def can_cast(from_, to) -> builtins.bool:
    """``torch.can_cast``: False only where the cast goes to a lower kind (floating to integral, anything but bool
    to bool)."""
    a, b = _dtype_arg("can_cast", from_, "from_", 1), _dtype_arg("can_cast", to, "to", 2)
    return _promotion.category(b.name) >= _promotion.category(a.name)


# ----- tensor facts ---------------------------------------------------------------------------------------------

def numel(input) -> int:
    return _tensor_arg("numel", input).numel()


def is_floating_point(input) -> builtins.bool:
    return _tensor_arg("is_floating_point", input).is_floating_point()


def is_complex(input) -> builtins.bool:
    _tensor_arg("is_complex", input)
    return False  # (gradserve has no complex dtype)


def is_nonzero(input) -> builtins.bool:
    """``torch.is_nonzero``: the value of a one-element tensor as a bool (a sync)."""
    t = _tensor_arg("is_nonzero", input)
    n = t.numel()
    if n == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if n > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return builtins.bool(t.item())


def equal(input, other) -> builtins.bool:
    """``torch.equal``: the same shape and the same values (a sync; the values compared as ``==`` compares
    them, dtypes promoted)."""
    a, b = _tensor_arg("equal", input), _tensor_arg("equal", other, "other", 2)
    return a.shape == b.shape and builtins.bool(call_op("all", (call_op("eq", (a, b), {}),), {}).item())


def typename(obj) -> str:
    """``torch.typename``: a tensor's legacy type name (``torch.FloatTensor``), else the object's type's name."""
    if isinstance(obj, Tensor):
        return obj.type()
    module = type(obj).__module__
    name = type(obj).__qualname__
    return name if module in (None, "builtins") else f"{module}.{name}"


# ----- conversions and compositions -----------------------------------------------------------------------------

def as_tensor(data, dtype=None, device=None) -> Tensor:
    """``torch.as_tensor``: a tensor is returned itself (converted when another dtype is asked); anything else
    becomes a new tensor, as ``torch.tensor`` makes it."""
    if isinstance(data, Tensor):
        return data if dtype is None or dtype == data.dtype else data.to(dtype)
    kwargs = {k: v for k, v in (("dtype", dtype), ("device", device)) if v is not None}
    return call_op("tensor", (data,), kwargs)


def empty_like(input, *, dtype=None, layout=None, device=None, requires_grad: builtins.bool = False,
               memory_format=None) -> Tensor:
    """``torch.empty_like``: torch leaves the values uninitialised; here they are zeros (``zeros_like``, which
    lays them out as torch does)."""
    given = (("dtype", dtype), ("device", device), ("memory_format", memory_format))
    kwargs = {k: v for k, v in given if v is not None}
    if requires_grad:
        kwargs["requires_grad"] = True
    return call_op("zeros_like", (_tensor_arg("empty_like", input),), kwargs)


def broadcast_tensors(*tensors) -> tuple:
    """``torch.broadcast_tensors``: each tensor expanded to the shapes' broadcast (a tensor of that shape is
    returned itself, as torch returns it)."""
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got {type(t).__name__}")
    shape: tuple = ()
    for t in tensors:
        shape = _meta.broadcast([shape, tuple(t.shape)], True)  # (torch's pairwise message)
    return tuple(t if tuple(t.shape) == shape else call_op("expand", (t, list(shape)), {}) for t in tensors)


_MESHGRID_WARNED = [False]


def meshgrid(*tensors, indexing: str | None = None) -> tuple:
    """``torch.meshgrid``: each input viewed along its own dimension and expanded to the grid (``indexing="xy"``
    swaps the first two dimensions); ``indexing`` omitted is "ij" with torch's warning, once."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        if not _MESHGRID_WARNED[0]:
            _MESHGRID_WARNED[0] = True
            warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the indexing "
                          "argument. (Triggered internally at /__w/pytorch/pytorch/aten/src/ATen/native/"
                          "TensorShape.cpp:4215.)", UserWarning, stacklevel=user_stacklevel())
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {indexing}")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got {type(t).__name__}")
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    for t in tensors:
        if t.dim() > 1:  # (torch prints the tensor as its C++ side does; here its type and sizes only)
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: "
                               f"[ {t.type()}{{{','.join(map(str, t.shape))}}} ]")
    if len({t.dtype for t in tensors}) > 1:
        raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    swap = indexing == "xy" and len(tensors) >= 2
    order = [1, 0, *range(2, len(tensors))] if swap else list(range(len(tensors)))
    ts = [tensors[k] for k in order]
    sizes = [t.numel() for t in ts]
    out = []
    for i, t in enumerate(ts):
        shape = [1] * len(ts)
        shape[i] = -1
        out.append(call_op("expand", (call_op("view", (t, shape), {}), sizes), {}))
    return tuple(out[k] for k in order)


def compile(model=None, *, fullgraph: builtins.bool = False, dynamic=None, backend="inductor", mode=None,  # noqa: A001
            options=None, disable: builtins.bool = False):
    """``torch.compile``: a module wrapped as torch wraps it (an ``OptimizedModule`` holding it as ``_orig_mod``,
    so state dict keys are prefixed as torch's are), a function wrapped; a decorator with arguments when no model
    is given. Nothing is compiled on this side: the server records an op list that repeats and replays it
    compiled (its grad_fn names are the eager ones, where torch's compiled graph may show others)."""
    if model is None:
        return lambda fn: compile(fn)
    if not callable(model):
        raise AssertionError(f"A callable function is expected, but {type(model)!r} is provided.")
    from gradserve.torch import nn

    if isinstance(model, nn.Module):
        return _optimized_module()(model)

    @functools.wraps(model)
    def compiled(*args, **kwargs):
        return model(*args, **kwargs)

    return compiled


@functools.cache
def _optimized_module():
    from gradserve.torch import nn

    class OptimizedModule(nn.Module):
        """What ``torch.compile`` gives for a module: it as ``_orig_mod``, its attributes read through."""

        def __init__(self, mod):
            super().__init__()
            self._orig_mod = mod

        def forward(self, *args, **kwargs):
            return self._orig_mod(*args, **kwargs)

        def __getattr__(self, name: str):
            if name == "_orig_mod":
                raise AttributeError(name)
            return getattr(self._orig_mod, name)

    return OptimizedModule


# ----- settings that change nothing here ------------------------------------------------------------------------

_SETTINGS = {"deterministic": False, "matmul_precision": "highest"}


def use_deterministic_algorithms(mode: builtins.bool, *, warn_only: builtins.bool = False) -> None:
    """Kept, to no effect: every kernel of the server is deterministic."""
    if not isinstance(mode, builtins.bool):
        raise TypeError(f"_set_deterministic_algorithms(): argument 'mode' (position 1) must be bool, not "
                        f"{type(mode).__name__}")
    _SETTINGS["deterministic"] = mode


def are_deterministic_algorithms_enabled() -> builtins.bool:
    return _SETTINGS["deterministic"]


def set_float32_matmul_precision(precision: str) -> None:
    """Kept, to no effect: float32 products are computed in float32 (numpy's BLAS)."""
    if precision not in ("highest", "high", "medium"):
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current"
                      "setFloat32MatmulPrecision call has no effect. (Triggered internally at "
                      "/__w/pytorch/pytorch/aten/src/ATen/Context.cpp:458.)", UserWarning, stacklevel=user_stacklevel())
        return
    _SETTINGS["matmul_precision"] = precision


def get_float32_matmul_precision() -> str:
    return _SETTINGS["matmul_precision"]
