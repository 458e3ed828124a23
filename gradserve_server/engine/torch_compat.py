"""A torch-like facade over the engine, so that PyTorch programs run verbatim against it.

``from engine.torch_compat import torch, F`` gives objects usable as ``torch`` and
``torch.nn.functional``. It is a compatibility layer for tests (the oracle's programs) and for Python
users; it changes nothing in the engine. Engine tensors are wrapped in a thin ``Tensor`` proxy that
adds what torch's Python surface has and the engine deliberately spells differently:

* ``t.data`` is a new tensor sharing storage but not the version counter (the engine's ``.data`` is the
  numpy array), ``t.shape`` is a ``torch.Size``, ``t.requires_grad = True`` validates like torch;
* ``t.grad_fn`` is a node proxy whose ``type(n).__name__`` is the grad_fn class name (``PowBackward0``),
  with ``name()``, ``next_functions``, ``variable`` and ``_saved_<slot>`` attributes;
* dtypes are the engine's dtype names (``torch.float32 == "float32"``).

The proxy is cached per engine tensor (and per node), so ``x.grad is g`` and
``nf[0][0].variable is x`` hold exactly when they hold for the engine objects. Every other
attribute and operator is forwarded to the engine tensor (its methods are bound from the op table);
a missing op is an ``AttributeError`` here, never a silent substitute.
"""

from __future__ import annotations

import builtins
import math
import weakref

import numpy as np

import gradserve_server.engine as _engine
from gradserve_server.engine import OPS as _OPS
from gradserve_server.engine import forward_ad as _fw
from gradserve_server.engine.node import Node as _Node
from gradserve_server.engine.tensor import Tensor as _ETensor

__all__ = ["torch", "F", "Tensor", "Size", "wrap", "unwrap"]

_tensor_proxies: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_node_proxies: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_node_classes: dict[str, type] = {}


# ----- wrapping ---------------------------------------------------------------------------------------

def wrap(v):
    """Engine values -> facade values (tensors, nodes, and containers of them)."""
    if isinstance(v, _ETensor):
        p = _tensor_proxies.get(id(v))
        if p is None or p._t is not v:
            p = Tensor.__new__(Tensor)
            object.__setattr__(p, "_t", v)
            _tensor_proxies[id(v)] = p
        return p
    if isinstance(v, _Node):
        return _wrap_node(v)
    if isinstance(v, tuple):
        if hasattr(v, "_fields"):  # namedtuple such as (values, indices)
            return type(v)._make(wrap(x) for x in v)
        return tuple(wrap(x) for x in v)
    if isinstance(v, list):
        return [wrap(x) for x in v]
    return v


def unwrap(v):
    """Facade values -> engine values, recursively through lists and tuples."""
    if isinstance(v, Tensor):
        return v._t
    if isinstance(v, GradFn):
        return v._node
    if isinstance(v, tuple):
        return tuple(unwrap(x) for x in v)
    if isinstance(v, list):
        return [unwrap(x) for x in v]
    return v


def _call(fn, args, kwargs):
    """An engine op on unwrapped arguments, its kernels' floating-point conditions quiet (torch warns nothing
    for a log of 0 or a 0/0; ``run_program`` runs its ops so too)."""
    with np.errstate(all="ignore"):
        return wrap(fn(*unwrap(args), **{k: unwrap(v) for k, v in kwargs.items()}))


def _forward(fn):
    def call(*args, **kwargs):
        return _call(fn, args, kwargs)

    call.__name__ = getattr(fn, "__name__", "op")
    call.__doc__ = getattr(fn, "__doc__", None)
    return call


# ----- torch.Size -------------------------------------------------------------------------------------

class Size(tuple):
    """``torch.Size``: a tuple of ints that prints as ``torch.Size([2, 3])``."""

    def __repr__(self) -> str:
        return "torch.Size([" + ", ".join(str(s) for s in self) + "])"

    __str__ = __repr__

    def numel(self) -> int:
        return int(np.prod(self, dtype=np.int64)) if self else 1


# ----- grad_fn nodes ----------------------------------------------------------------------------------

class GradFn:
    """Proxy of an engine node; its concrete class is named after the torch grad_fn class."""

    __slots__ = ("_node", "__weakref__")

    def name(self) -> str:
        return self._node.name_()

    @property
    def next_functions(self) -> tuple:
        return tuple((wrap(n), nr) for n, nr in self._node.next_functions)

    @property
    def variable(self):
        return wrap(self._node.variable)

    def __getattr__(self, attr: str):
        if attr.startswith("_saved_"):
            slot = attr[len("_saved_"):]
            if slot in self._node.saved:
                return wrap(self._node.get_saved(slot))
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{attr}'")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} object at {hex(id(self))}>"


def _wrap_node(node: _Node) -> GradFn:
    p = _node_proxies.get(id(node))
    if p is not None and p._node is node:
        return p
    cls = _node_classes.get(node.name)
    if cls is None:
        cls = _node_classes[node.name] = type(node.name, (GradFn,), {"__slots__": ()})
    p = cls.__new__(cls)
    p._node = node
    _node_proxies[id(node)] = p
    return p


# ----- the Tensor proxy ---------------------------------------------------------------------------------

class Tensor:
    """torch.Tensor over an engine tensor (``_t``). Unknown attributes are forwarded to the engine tensor."""

    __slots__ = ("_t", "__weakref__")

    def __new__(cls, *args, **kwargs):
        if cls is Tensor and args and isinstance(args[0], _ETensor):
            return wrap(args[0])
        return super().__new__(cls)

    # attributes torch spells differently from the engine
    @property
    def data(self) -> Tensor:
        """torch's ``.data``: same storage, not tracked, its own version counter."""
        return wrap(_ETensor(self._t.data))

    @data.setter
    def data(self, value) -> None:
        self._t.data = unwrap(value).data

    @property
    def shape(self) -> Size:
        return Size(self._t.shape)

    def size(self, dim=None):
        s = self._t.size(dim)
        return Size(s) if dim is None else s

    @property
    def grad(self):
        return wrap(self._t.grad)

    @grad.setter
    def grad(self, value) -> None:
        self._t.grad = unwrap(value)

    @property
    def requires_grad(self) -> bool:
        return self._t.requires_grad

    @requires_grad.setter
    def requires_grad(self, value) -> None:
        self._t.set_requires_grad(value)

    @property
    def grad_fn(self):
        return wrap(self._t.grad_fn)

    @property
    def is_leaf(self) -> bool:
        return self._t.is_leaf

    @property
    def _version(self) -> int:
        return self._t._version

    @property
    def device(self) -> str:
        return "cpu"

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        _backward(self, gradient, retain_graph, create_graph, inputs)

    def __getattr__(self, attr: str):
        value = getattr(object.__getattribute__(self, "_t"), attr)
        if callable(value):
            return _forward(value)
        return wrap(value)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __hash__(self) -> int:
        return object.__hash__(self)

    def __repr__(self) -> str:
        return repr(self._t)

    def __str__(self) -> str:
        return repr(self._t)

    def __format__(self, spec: str) -> str:
        return format(self._t, spec)


_DUNDERS = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
            "__floordiv__", "__rfloordiv__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__", "__mod__",
            "__neg__", "__pos__", "__abs__", "__invert__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
            "__ge__", "__and__", "__or__", "__xor__", "__lshift__", "__rshift__", "__getitem__", "__setitem__",
            "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ipow__", "__imatmul__", "__iand__", "__ior__",
            "__ixor__", "__ilshift__", "__irshift__", "__imod__", "__len__", "__bool__", "__float__", "__int__",
            "__index__")


def _install_dunders() -> None:
    """Operators exist on the proxy exactly when the engine tensor has them (so a missing engine operator
    stays a TypeError, as it would be for the engine)."""
    for name in _DUNDERS:
        if not hasattr(_ETensor, name) or getattr(_ETensor, name) is getattr(object, name, None):
            continue

        def method(self, *args, _name=name):
            return _call(getattr(self._t, _name), args, {})

        method.__name__ = name
        setattr(Tensor, name, method)


_install_dunders()


# ----- namespaces ---------------------------------------------------------------------------------------

class _OpNamespace:
    """Attribute lookup falls back to the engine's op table (``torch.maximum`` -> ``OPS["maximum"]``)."""

    def __init__(self, name: str, prefix: str = "", **members):
        self.__name__ = name
        self._prefix = prefix  # a torch submodule's ops are cataloged as "linalg.det", "special.xlogy"
        self.__dict__.update(members)

    def __getattr__(self, attr: str):
        spec = _OPS.get(self._prefix + attr)
        if spec is None or attr.startswith("__"):
            raise AttributeError(f"module '{self.__name__}' has no attribute '{attr}'")
        return _forward(_checked(attr, spec))

    def __repr__(self) -> str:
        return f"<module '{self.__name__}' (gradserve torch_compat)>"


def _checked(name: str, spec):
    """``torch.<name>``: torch's argument checks for the function form, then the op."""
    from gradserve_server.engine.signature import check_call

    def call(*args, **kwargs):
        check_call(spec, name, args, kwargs, method=False)
        return spec.fn(*args, **kwargs)

    call.__name__ = name
    call.__doc__ = spec.fn.__doc__
    return call


def _op(name: str):
    """An engine op looked up at call time (so ops registered later are found)."""

    def call(*args, **kwargs):
        spec = _OPS.get(name)
        if spec is None:
            raise AttributeError(f"engine has no op {name!r}")
        return _call(spec.fn, args, kwargs)

    call.__name__ = name
    return call


def tensor(data, dtype=None, requires_grad=False, device=None) -> Tensor:
    return wrap(_engine.tensor(unwrap(data), dtype=dtype, requires_grad=requires_grad))


def _size_args(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (list, tuple)):
        return tuple(size[0])
    return tuple(size)


def _creation(name: str, fill):
    """``torch.ones``/``zeros``: the engine's creation op when it has one, else built from numpy."""

    def create(*size, dtype=None, requires_grad=False, device=None):
        spec = _OPS.get(name)
        if spec is not None:
            return _call(_checked(name, spec), size, {"dtype": dtype, "requires_grad": requires_grad})
        shape = _size_args(size)
        arr = np.full(shape, fill, dtype=np.float32 if dtype is None else _engine_dtype(dtype))
        return wrap(_engine.tensor(arr, dtype=dtype, requires_grad=requires_grad))

    create.__name__ = name
    return create


def _engine_dtype(dtype):
    from gradserve_server.engine import dtypes
    return dtypes.NP_DTYPES[dtypes.canonical(dtype)]


def arange(start, end=None, step=1, dtype=None, requires_grad=False, device=None) -> Tensor:
    spec = _OPS.get("arange")
    if spec is not None:
        args = (start,) if end is None else (start, end, step)
        return _call(spec.fn, args, {"dtype": dtype, "requires_grad": requires_grad})
    if end is None:
        start, end = 0, start
    is_float = any(isinstance(v, builtins.float) for v in (start, end, step))
    arr = np.arange(start, end, step, dtype=np.float32 if is_float else np.int64)
    return wrap(_engine.tensor(arr, dtype=dtype, requires_grad=requires_grad))


def _like(name: str, fill):
    def create(t, dtype=None, requires_grad=False):
        spec = _OPS.get(name)
        if spec is not None:
            return _call(_checked(name, spec), (t,), {"dtype": dtype, "requires_grad": requires_grad})
        e = unwrap(t)
        arr = np.full(e.data.shape, fill, dtype=e.data.dtype if dtype is None else _engine_dtype(dtype))
        return wrap(_engine.tensor(arr, requires_grad=requires_grad))

    create.__name__ = name
    return create


def _grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
          allow_unused=None, is_grads_batched=False, materialize_grads=False):
    with np.errstate(all="ignore"):
        return wrap(_engine.grad(unwrap(outputs), unwrap(inputs), unwrap(grad_outputs), retain_graph, create_graph,
                                 allow_unused, is_grads_batched, materialize_grads))


def _backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    with np.errstate(all="ignore"):
        _engine.backward(unwrap(tensors), unwrap(grad_tensors), retain_graph, create_graph, unwrap(inputs))


# ----- nn and optim (minimal) ---------------------------------------------------------------------------

class Parameter(Tensor):
    """``nn.Parameter(t)``: a leaf requiring grad that shares ``t``'s storage."""

    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        base = unwrap(data) if data is not None else _ETensor(np.zeros((0,), np.float32))
        e = _ETensor(base.data, requires_grad=bool(requires_grad))
        p = object.__new__(cls)
        object.__setattr__(p, "_t", e)
        _tensor_proxies[id(e)] = p
        return p


class Module:
    """The part of ``nn.Module`` the programs use: parameters, zero_grad, __call__ -> forward."""

    training = True

    def parameters(self):
        return [v for v in vars(self).values() if isinstance(v, Parameter)]

    def zero_grad(self, set_to_none: bool = True) -> None:
        _zero_grads(self.parameters(), set_to_none)

    def train(self, mode: bool = True):
        self.training = mode
        return self

    def eval(self):
        return self.train(False)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)


class Linear(Module):
    """``nn.Linear(in_features, out_features, bias=True)``; weights drawn like torch's default init
    (uniform in ±1/sqrt(in_features)) from numpy's generator, so values differ from torch's."""

    _rng = np.random.default_rng(0)

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
        w = self._rng.uniform(-bound, bound, (out_features, in_features)).astype(np.float32)
        self.weight = Parameter(_ETensor(w))
        self.bias = Parameter(_ETensor(self._rng.uniform(-bound, bound, (out_features,)).astype(np.float32))) \
            if bias else None

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)


class Dropout(Module):
    def __init__(self, p: float = 0.5):
        self.p = p

    def forward(self, input):
        return F.dropout(input, self.p, training=self.training)


def _zero_grads(params, set_to_none: bool) -> None:
    for p in params:
        if p.grad is None:
            continue
        if set_to_none:
            p.grad = None
        else:
            p.grad.zero_()


class SGD:
    """``optim.SGD(params, lr)`` without momentum: ``p.add_(p.grad, alpha=-lr)`` under no_grad."""

    def __init__(self, params, lr: float = 1e-3):
        self.params = list(params)
        self.lr = lr

    def zero_grad(self, set_to_none: bool = True) -> None:
        _zero_grads(self.params, set_to_none)

    def step(self) -> None:
        with _engine.no_grad():
            for p in self.params:
                g = p.grad
                if g is not None:
                    p.add_(g, alpha=-self.lr)


# ----- the namespaces -----------------------------------------------------------------------------------

F = _OpNamespace("torch.nn.functional")

_nn = _OpNamespace("torch.nn", functional=F, Parameter=Parameter, Module=Module, Linear=Linear, Dropout=Dropout)
_optim = _OpNamespace("torch.optim", SGD=SGD)
_forward_ad = _OpNamespace(
    "torch.autograd.forward_ad", dual_level=_fw.dual_level, enter_dual_level=_fw.enter_dual_level,
    exit_dual_level=_fw.exit_dual_level, make_dual=_forward(_fw.make_dual), unpack_dual=_forward(_fw.unpack_dual),
    UnpackedDualTensor=_fw.UnpackedDualTensor)
_autograd = _OpNamespace("torch.autograd", grad=_grad, backward=_backward, forward_ad=_forward_ad)
_linalg = _OpNamespace("torch.linalg", prefix="linalg.")
_special = _OpNamespace("torch.special", prefix="special.")

torch = _OpNamespace(
    "torch",
    Tensor=Tensor, Size=Size, tensor=tensor,
    float32="float32", float="float32", float64="float64", double="float64",
    int64="int64", long="int64", int32="int32", int="int32", int16="int16", short="int16", int8="int8",
    uint8="uint8", bool="bool", float16="float16", half="float16", bfloat16="bfloat16",
    ones=_creation("ones", 1), zeros=_creation("zeros", 0), arange=arange,
    ones_like=_like("ones_like", 1), zeros_like=_like("zeros_like", 0),
    no_grad=_engine.no_grad, enable_grad=_engine.enable_grad, set_grad_enabled=_engine.set_grad_enabled,
    is_grad_enabled=_engine.is_grad_enabled, get_default_dtype=lambda: "float32",
    is_tensor=lambda v: isinstance(v, Tensor),
    autograd=_autograd, nn=_nn, optim=_optim, linalg=_linalg, special=_special,
)
