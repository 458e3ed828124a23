"""The Tensor: a numpy array plus torch's autograd metadata.

Mirrors torch semantics: ``grad`` is None until a backward reaches the tensor (a non-leaf's ``.grad``
read warns), ``is_leaf`` is ``grad_fn is None``, ``version`` is torch's ``_version`` and is shared with
``detach()`` results and views, and ``grad_accumulations`` counts the backward passes summed into
``.grad`` since it was last zeroed or set to None.
"""

from __future__ import annotations

import math

import numpy as np

from . import dtypes as D
from . import node as _node
from .budget import TRACK_MIN_BYTES, _budget
from .dual import _level as _fw_level
from .dual import tangent_of
from .errors import (
    NONLEAF_GRAD_WARNING,
    InvalidArgumentError,
    RequiresGradError,
    TorchRuntimeError,
    TorchValueError,
    dim_out_of_range,
)
from .grad_mode import check_numel, emit_warning
from .journal import setattr_, setitem_
from .kernel import astype, kcall, kcall_plain, literal
from .node import Node
from .printing import tensor_repr

#: how a view was made (torch's CreationMeta): in grad mode by a single-output view op, by a function that
#: returns several views (split, chunk, unbind), or in no_grad mode. Only "default" views may be modified in
#: place while autograd records.
VIEW_DEFAULT, VIEW_MULTI, VIEW_NO_GRAD = "default", "multi", "no_grad"

_budget_get = _budget.get


def _autograd_not_loaded(*args):
    raise RuntimeError("engine.autograd is not imported")  # the engine package imports it


#: torch.autograd.backward for Tensor.backward: a hook slot, filled when engine.autograd is imported
run_backward = _autograd_not_loaded
#: a view's grad_fn after its base changed, and why a view may not be rebased: views.py's, which imports this
#: module; filled when it is imported (the engine package imports every module, so the slots are always set)
refresh_view = rebase_error = None


def install_hooks(**hooks) -> None:
    """Fill this module's hook slots (``run_backward``, ``refresh_view``, ``rebase_error``): the modules above
    call it at import (``from . import tensor`` could name the package's ``tensor()`` function instead)."""
    for name, fn in hooks.items():
        if name not in ("run_backward", "refresh_view", "rebase_error"):
            raise KeyError(name)
        globals()[name] = fn


def wrap_dim(dim, ndim: int) -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise InvalidArgumentError(f"dim must be an int, not {type(dim).__name__}")
    n = ndim if ndim > 0 else 1
    if dim < -n or dim >= n:
        raise dim_out_of_range(dim, ndim)
    return int(dim) % n


class Tensor:
    __slots__ = ("data", "_requires_grad", "_grad_fn", "output_nr", "_grad", "_vc", "retains_grad",
                 "grad_accumulations", "_base", "_accumulator", "_wrapped", "_fw_grad", "_creation",
                 "_attr_version", "__weakref__")

    def __init__(self, data: np.ndarray, requires_grad: bool = False, grad_fn: Node | None = None,
                 output_nr: int = 0, vc: list | None = None, base: Tensor | None = None):
        if data.__class__ is not np.ndarray:  # numpy returns scalars for 0-d results
            data = np.asarray(data)
        budget = _budget_get()
        if budget is not None:  # inside a run: its bytes count (engine.budget)
            n = data.nbytes
            if n < TRACK_MIN_BYTES:  # Budget.track's small-array case, inline (a Tensor per op result)
                room = budget.room = budget.room - n
                if room < 0:
                    budget._settle(0, None)
            else:
                budget.track(data)
        self.data = data
        self._requires_grad = requires_grad
        self._grad_fn = grad_fn
        self.output_nr = output_nr
        self._grad = None
        self._vc = vc if vc is not None else [0]
        self.retains_grad = False
        self.grad_accumulations = 0
        self._base = base
        self._accumulator = None
        self._wrapped = False
        self._fw_grad = None  # the tangent while a dual level is active (gradserve_server/engine/forward_ad.py)
        self._creation = None     # views only: VIEW_DEFAULT, VIEW_MULTI or VIEW_NO_GRAD
        self._attr_version = 0    # views only: the version at which grad_fn was last set

    @property
    def requires_grad(self) -> bool:
        """torch's requires_grad(): the tensor's own flag, or (a view) a history or a base that requires
        grad, so a view made before its base was set to require grad requires grad too."""
        if self._requires_grad:
            return True
        base = self._base
        return base is not None and (self._grad_fn is not None or base._requires_grad)

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self._requires_grad = value

    # ----- grad_fn (views regenerate theirs after an in-place change of their base) ----------------
    @property
    def grad_fn(self):
        """torch's ``grad_fn``. A view whose base (or another view of it) was modified in place since its
        grad_fn was set gets ``AsStridedBackward0`` over the base's current history, as torch regenerates
        it on access; a view that may not be rebased (see ``view_error``) keeps its old one here."""
        fn = self._grad_fn
        if self._base is None or self._vc[0] == self._attr_version:
            return fn
        return refresh_view(self)

    @grad_fn.setter
    def grad_fn(self, node) -> None:
        self._grad_fn = node
        if self._base is not None:
            self._attr_version = self._vc[0]

    def view_error(self, indirect: bool = True) -> str | None:
        """torch's refusal to use a view whose history cannot be rebased (None when it can be used)."""
        if self._base is None:
            return None
        return rebase_error(self, indirect)

    # ----- metadata -------------------------------------------------------------------------------
    @property
    def dtype(self) -> str:
        return D.of_array(self.data)

    @property
    def shape(self) -> tuple:
        return self.data.shape

    def size(self, dim: int | None = None):
        if dim is None:
            return self.data.shape
        return self.data.shape[wrap_dim(dim, self.data.ndim)]

    def dim(self) -> int:
        return self.data.ndim

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def numel(self) -> int:
        return int(self.data.size)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def version(self) -> int:
        return self._vc[0]

    @property
    def _version(self) -> int:
        return self._vc[0]

    def _bump(self) -> None:
        self._vc[0] += 1

    @property
    def is_floating_point(self) -> bool:
        return self.data.dtype.kind in "fV"

    # ----- .grad ----------------------------------------------------------------------------------
    @property
    def grad(self):
        if self._grad is None and self.grad_fn is not None and not self.retains_grad:
            emit_warning(NONLEAF_GRAD_WARNING)
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is None:
            setattr_(self, "_grad", None)
            setattr_(self, "grad_accumulations", 0)
            return
        if not isinstance(value, Tensor):
            raise TorchTypeErrorLike(f"assigned grad expected to be a Tensor or None but got grad of type "
                                     f"{type(value).__name__}")
        if value.dtype != self.dtype:
            raise TorchRuntimeError(
                f"attempting to assign a gradient with dtype '{D.C_NAMES[value.dtype]}' to a tensor with "
                f"grad_dtype '{D.SCALAR_TYPE_NAMES[self.dtype]}'. The gradient must match the tensor's "
                f"grad_dtype (defaults to the tensor's dtype). You can set the tensor's grad_dtype attribute "
                f"with a specific dtype, or None to allow any dtype. Set grad_dtype with caution. Diverging the "
                f"dtypes of a tensor and its gradient may break downstream systems that assume they match.",
                code="grad_dtype_mismatch")
        if value.data.shape != self.data.shape:
            raise TorchRuntimeError(
                f"attempting to assign a gradient of size '{list(value.data.shape)}' to a tensor of size "
                f"'{list(self.data.shape)}'. Please ensure that the gradient and the tensor are the same size",
                code="grad_shape_mismatch")
        setattr_(self, "_grad", value)
        setattr_(self, "grad_accumulations", 0)

    # ----- requires_grad ----------------------------------------------------------------------------
    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if self.grad_fn is not None:
            if not requires_grad:
                raise RequiresGradError(
                    "you can only change requires_grad flags of leaf variables. If you want to use a computed "
                    "variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach().")
            return self
        if requires_grad and self.data.dtype.kind not in "fV":
            raise RequiresGradError("only Tensors of floating point dtype can require gradients")
        setattr_(self, "_requires_grad", bool(requires_grad))
        return self

    def set_requires_grad(self, value: bool) -> None:
        """``t.requires_grad = value`` (the attribute form has its own torch message)."""
        if self.grad_fn is not None and not value:
            self.requires_grad_(False)
        if value and self.data.dtype.kind not in "fV":
            raise RequiresGradError("only Tensors of floating point and complex dtype can require gradients")
        if self.grad_fn is None:
            setattr_(self, "_requires_grad", bool(value))

    def retain_grad(self) -> None:
        if not self.requires_grad:
            raise TorchRuntimeError("can't retain_grad on Tensor that has requires_grad=False",
                                    code="retain_grad_without_requires_grad")
        if self._grad_fn is None and (self._base is None or self.grad_fn is None):
            return  # a leaf (torch: a view made under no_grad is one, even after its base changed)
        if self.retains_grad:
            return  # torch returns before reading grad_fn (a refused view that already retains stays quiet)
        err = self.view_error()
        if err is not None:  # torch reads grad_fn here, which refuses such a view
            raise TorchRuntimeError(err, code="invalid_inplace")
        if self.grad_fn is None or self.retains_grad:
            return
        setattr_(self, "retains_grad", True)
        node = self.grad_fn
        if node.retained is None:
            setattr_(node, "retained", {})
        setitem_(node.retained, self.output_nr, self)

    # ----- autograd -------------------------------------------------------------------------------
    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False, inputs=None):
        """Tensor.backward(gradient=None, retain_graph=None, create_graph=False, inputs=None)."""
        run_backward(self, gradient, retain_graph, create_graph, inputs)

    # ----- conversion -----------------------------------------------------------------------------
    def item(self):
        if self.data.size != 1:
            raise TorchRuntimeError(f"a Tensor with {self.data.size} elements cannot be converted to Scalar",
                                    code="item_on_multi_element")
        return self.data.reshape(()).item()

    def tolist(self):
        return self.data.tolist()

    def numpy(self) -> np.ndarray:
        if self.requires_grad:
            raise TorchRuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.",
                code="numpy_requires_grad")
        return self.data

    def __len__(self) -> int:
        if self.data.ndim == 0:
            raise TorchTypeErrorLike("len() of a 0-d tensor")
        return self.data.shape[0]

    def __bool__(self) -> bool:
        if self.data.size != 1:
            raise TorchRuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.data.reshape(()).item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.data.dtype.kind not in "iub" or self.data.size != 1:
            raise TorchTypeErrorLike("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return tensor_repr(self, tangent_of(self) if _fw_level.get() is not None else None)

    def __format__(self, spec: str) -> str:
        if self.data.ndim == 0:
            return format(self.item(), spec)
        return format(repr(self), spec)

    def data_ptr(self) -> int:
        return self.data.__array_interface__["data"][0]


class TorchTypeErrorLike(InvalidArgumentError):
    code = "type_error"
    exception = "TypeError"


# ----- creation from Python data (torch.tensor's dtype inference) ------------------------------------
_NONFINITE = {"nan": math.nan, "NaN": math.nan, "inf": math.inf, "Infinity": math.inf, "+Infinity": math.inf,
              "-inf": -math.inf, "-Infinity": -math.inf}


def _ragged_message(data) -> str:
    """torch's message for ragged nested lists: 'expected sequence of length 1 at dim 1 (got 2)'."""
    # iterative breadth-first walk to find the first mismatch, as torch does
    level = [data]
    dim = 0
    while True:
        lengths = [len(x) if isinstance(x, (list, tuple)) else None for x in level]
        first = lengths[0]
        for ln in lengths:
            if ln != first:
                if first is None or ln is None:
                    return f"expected sequence of length {first} at dim {dim} (got {ln})" if first is not None \
                        else f"expected a number at dim {dim} but got a sequence"
                return f"expected sequence of length {first} at dim {dim} (got {ln})"
        if first is None:
            return "could not infer the shape of the data"
        level = [y for x in level for y in x]
        dim += 1
        if not level:
            return "could not infer the shape of the data"


def _nesting_depth(data, limit: int = 64) -> int:
    depth = 0
    x = data
    while isinstance(x, (list, tuple)):
        depth += 1
        if depth > limit:
            raise TorchValueError(f"nested data has more than {limit} dimensions", code="too_many_dimensions")
        if not x:
            break
        x = x[0]
    return depth


def _replace_nonfinite(data):
    if isinstance(data, str):
        try:
            return _NONFINITE[data]
        except KeyError:
            raise InvalidArgumentError(
                f"invalid number {data!r} in tensor data: only numbers, booleans and the strings "
                f"\"NaN\", \"Infinity\", \"-Infinity\" are accepted", code="invalid_tensor_data") from None
    if isinstance(data, (list, tuple)):
        return [_replace_nonfinite(x) for x in data]
    return data


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _scan_numbers(data) -> tuple[bool, bool]:
    """(has a float, has an int outside int64) over nested Python data."""
    has_float = big = False
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, float):
            has_float = True
        elif isinstance(x, int) and not isinstance(x, bool) and not _INT64_MIN <= x <= _INT64_MAX:
            big = True
    return has_float, big


def _out_of_int64(data, arr: np.ndarray, dtype: str | None) -> np.ndarray:
    """Integers outside int64 in tensor data: torch infers int64 for all-integer data and refuses them
    (ValueError 'Overflow when unpacking long long'), never wraps; with a float anywhere, or an explicit float
    or bool dtype, they are just large numbers. numpy would have made uint64, float64 or object arrays."""
    kind = arr.dtype.kind
    if kind not in "uO":
        if kind not in "fV" or not arr.size:
            return arr
        with np.errstate(invalid="ignore"):
            if not (np.abs(arr) >= 2.0**63).any():
                return arr
    has_float, big = _scan_numbers(data)
    if not big and kind != "u":
        return arr
    if not has_float and (dtype is None or dtype == D.INT64):
        raise TorchValueError("Overflow when unpacking long long", code="invalid_tensor_data")
    if dtype == D.BOOL:
        return np.asarray(np.asarray(data, dtype=object) != 0, dtype=bool)
    return np.asarray(np.asarray(data, dtype=object).astype(np.float64))


_NARROW_INTS = (D.INT32, D.INT16, D.INT8, D.UINT8)
_KEPT_INTS = frozenset(D.NP_DTYPES[d] for d in (D.INT64, *_NARROW_INTS))


def _check_int_range(arr: np.ndarray, dtype: str) -> None:
    """torch.tensor(data, dtype=<a narrow integer type>) converts each number with c10's checked_convert: a
    value outside the type's range is an error, except that an int may wrap into uint8 from as far below
    zero as -255 (c10's overflows() allows two's complement there); a float is checked strictly."""
    info = np.iinfo(D.NP_DTYPES[dtype])
    lo = -int(info.max) if info.kind == "u" and arr.dtype.kind in "iu" else int(info.min)
    with np.errstate(invalid="ignore"):
        ok = bool((arr >= lo).all() and (arr <= info.max).all())
    if not ok:
        raise TorchRuntimeError(f"value cannot be converted to type {dtype} without overflow",
                                code="invalid_tensor_data")


def as_array(data, dtype: str | None = None) -> np.ndarray:
    """Turn Python data (numbers, nested lists, numpy arrays, Tensors) into an array with torch's dtype
    inference: floats -> float32, ints -> int64, bools -> bool."""
    if isinstance(data, Tensor):
        arr = data.data
        return arr.astype(D.NP_DTYPES[dtype]) if dtype and D.of_array(arr) != dtype else arr.copy()
    if isinstance(data, np.ndarray):
        arr = data
        if arr.dtype.kind == "f" and dtype is None and arr.dtype not in D.NP_FLOATS:  # float128
            arr = arr.astype(np.float32)
    else:
        _nesting_depth(data)
        try:
            arr = np.asarray(data)
        except ValueError:
            raise TorchValueError(_ragged_message(data), code="ragged_tensor_data") from None
        except OverflowError:
            raise TorchValueError("Overflow when unpacking long long", code="invalid_tensor_data") from None
        if arr.dtype.kind in "US":
            data = _replace_nonfinite(data)
            arr = np.asarray(data)
        arr = _out_of_int64(data, arr, dtype)
        if arr.dtype.kind in "USO":
            raise InvalidArgumentError("tensor data must be numbers, booleans or nested lists of them",
                                       code="invalid_tensor_data")
        if arr.dtype.kind in "fV" and dtype is None:
            arr = arr.astype(np.float32)
        if arr.dtype.kind in "fV" and dtype == D.INT64 and arr.size:
            with np.errstate(invalid="ignore"):
                ok = np.isfinite(arr).all() and (np.abs(arr) < 2.0**63).all()
            if not ok:
                raise TorchRuntimeError("value cannot be converted to type int64 without overflow",
                                        code="invalid_tensor_data")
        elif dtype in _NARROW_INTS and arr.size and arr.dtype.kind in "fiu":
            _check_int_range(arr, dtype)
    if arr.dtype.kind not in "fiub" and arr.dtype not in D.NP_FLOATS:
        raise InvalidArgumentError(f"unsupported tensor data of dtype {arr.dtype}", code="invalid_tensor_data")
    if arr.dtype.kind in "iu" and arr.dtype not in _KEPT_INTS:  # a numpy array of a dtype torch keeps stays so
        arr = arr.astype(np.int64)
    check_numel(arr.shape, itemsize=D.NP_DTYPES[dtype].itemsize if dtype is not None else arr.itemsize)
    if dtype is not None:
        target = D.NP_DTYPES[dtype]
        if arr.dtype != target:
            with np.errstate(over="ignore"):  # a float beyond a narrower float type's range is inf, as in torch
                arr = astype(arr, target)
    if not arr.flags.writeable or not arr.flags.c_contiguous or arr is data:
        arr = np.array(arr, copy=True, order="C")
    return arr


def tensor(data, dtype=None, requires_grad: bool = False) -> Tensor:
    """``torch.tensor(data, dtype=None, requires_grad=False)``."""
    dtype = D.canonical(dtype)
    arr = as_array(data, dtype)
    if requires_grad and arr.dtype.kind not in "fV":
        raise RequiresGradError("Only Tensors of floating point and complex dtype can require gradients")
    return Tensor(arr, requires_grad=bool(requires_grad))


def wrapped_number(value, dtype: str | None = None) -> Tensor:
    """A Python number as torch wraps it for an op: a 0-d tensor flagged as a wrapped number."""
    if dtype is None and value.__class__ is float:
        t = Tensor(kcall_plain(literal, value, None))  # float64 0-d (a number and None: no array to test)
        t._wrapped = True
        return t
    if value.__class__ is int and value > _INT64_MAX:
        # 2**63 .. 2**64 - 1: torch wraps a uint64 0-d, a dtype the engine has not; it stands in as torch's
        # TensorIterator casts it: to the float dtype given (a double without one), into an integer dtype
        # modulo 2**64 (a C cast)
        d = dtype or D.FLOAT64
        npdt = D.NP_DTYPES[d]
        if npdt.kind != "f":
            data = kcall(literal, value - (1 << 64), np.dtype(np.int64))
            t = Tensor(data if npdt == data.dtype else kcall(astype, data, npdt))
            t._wrapped = True
            return t
        value = float(value)
    else:
        d = dtype or D.scalar_dtype(value)
        if d == D.FLOAT32 and dtype is None:
            d = D.FLOAT64  # torch wraps Python floats as double 0-d tensors (x * 2.5 saves float64[] 2.5)
        npdt = D.NP_DTYPES[d]
    t = Tensor(kcall(literal, value, npdt))
    t._wrapped = True
    return t


_node.tensor_class = Tensor  # a saved output is rebuilt as a Tensor
