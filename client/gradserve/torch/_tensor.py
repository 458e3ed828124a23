"""The lazy Tensor: a handle to a named tensor of a server session, and ``call_op``, which records a call.

A handle knows its name, its context, what it shares memory with (``Storage``) and the last view of it the
server sent (valid while nothing recorded since may have changed it: an in-place op on its storage, a
backward for gradients, a failed request). Reading a value (``item``, ``tolist``, ``numpy``, ``repr``,
``bool``...) or metadata not known yet (``requires_grad``, ``grad_fn``, ``shape``...) sends what is
pending; ``backward`` sends too, so that its errors are raised at its line, as torch raises them.
"""

from __future__ import annotations

import binascii
import builtins
import functools
import numbers
import sys
import threading

import numpy as np

from gradserve.torch import _catalog, _checks, _context, _device, _layout, _legacy, _meta
from gradserve.torch._context import Context, Storage
from gradserve.torch._dtypes import (
    _DEFAULT,
    DEFAULT_FLOAT,
    FLOATING,
    NP_HELD,
    Size,
    by_name,
    default_float,
    readable,
    refuse_numpy,
)
from gradserve.torch._dtypes import dtype as DType
from gradserve.torch._grad_mode import _enabled, is_grad_enabled, no_grad
from gradserve.torch._printing import format_tensor, tangent_str


class Tensor:
    """A handle to a tensor held by the server; behaves as ``torch.Tensor``."""

    __slots__ = ("_ctx", "_name", "_storage", "_shape", "_dtype", "_view", "_array", "_view_stamp", "_param",
                 "_known_grad", "_error", "_dual_tangent", "_leaf", "_seen", "_layout", "__weakref__")

    # ----- making handles -----------------------------------------------------------------------------
    def __new__(cls, *args, **kwargs):
        """The legacy constructor ``torch.Tensor(data)`` / ``torch.Tensor(2, 3)``: a tensor of the default dtype."""
        return _legacy.construct(by_name(default_float()), args, kwargs, "new")

    @classmethod
    def _new(cls, ctx: Context, storage: Storage | None = None, name: str | None = None) -> Tensor:
        t = object.__new__(cls)
        t._ctx = ctx
        t._name = name or f"_t{next(ctx._names)}"  # (ctx.fresh_name(), inline: one call less per op)
        if storage is None:
            storage = Storage()
            storage.root = t._name
        else:
            storage.shared = True
        t._storage = storage
        t._shape = t._dtype = t._view = t._array = t._view_stamp = t._known_grad = t._error = t._leaf = None
        t._layout = None  # ((strides, storage offset) in elements, when the client knows them: ``_layout``)
        t._dual_tangent = None  # (ctx.failures, the tangent's view or None) read inside a dual level
        t._param = False
        t._seen = -1  # (the storage's ``memory`` count its values were read at)
        ctx.adopt(t)
        return t

    @classmethod
    def _bound_grad(cls, ctx: Context, owner: Tensor) -> Tensor:
        """Record ``g = owner.grad`` (a ``bind`` op) and return the handle ``g``."""
        if "." in owner._name:  # (a gradient under its leaf's name: ``x.grad.grad`` names nothing)
            ctx.materialize(owner._name)
        g = cls._new(ctx, Storage(is_grad=True))
        ctx.record({"op": "bind", "args": [f"{owner._name}.grad"], "out": g._name}, (g,))
        g._grad_layout(owner)
        return g

    @classmethod
    def _alias_grad(cls, ctx: Context, owner: Tensor) -> Tensor:
        """The handle of ``owner.grad`` named ``owner.grad``: nothing recorded (``Context.materialize``)."""
        g = cls._new(ctx, Storage(is_grad=True), f"{owner._name}.grad")
        g._grad_layout(owner)
        return g

    def _grad_layout(self, owner: Tensor) -> None:
        layout = _layout.of(owner)  # (torch lays a leaf's gradient out as the leaf when it is dense)
        if layout is None:
            return
        key = (owner._shape, layout[0])
        dense = _DENSE.get(key)
        if dense is None:
            if len(_DENSE) >= 1024:
                _DENSE.clear()
            dense = _DENSE[key] = _layout.dense(tuple(owner._shape), layout[0])
        if dense:
            self._layout = (layout[0], 0)

    def _know(self, **meta) -> None:
        """Metadata known without asking (a new leaf, a detach, what ``_meta`` infers of an op's result)."""
        self._know_facts(meta)

    def _know_facts(self, meta: dict) -> None:
        """``_know`` of a dict the caller gives away (kept as the view when there is none: not copied)."""
        s = self._storage  # (``_stamp()``, inline)
        stamp = (s.version, self._ctx.grad_epoch if s.is_grad else 0)
        if self._view_stamp == stamp:
            self._view = {**self._view, **meta}
        else:
            self._view, self._array = meta, None  # (values read before are stale)
            self._seen = s.memory[0]  # (what it says, a new leaf's version, is now's)
        self._view_stamp = stamp
        if "shape" in meta:
            shape = meta["shape"]
            self._shape = shape if shape.__class__ is Size else Size(shape)
        if "dtype" in meta:
            self._dtype = meta["dtype"]
        if "layout" in meta:
            self._layout = meta["layout"]
        if meta.get("is_leaf") and meta.get("requires_grad"):
            self._param = True

    def _set_view(self, view: dict) -> None:
        if self._view is not None and self._view_stamp == self._stamp():
            for key in _CLIENT_FACTS:  # (the client's graph node and view facts are not in the server's view)
                if key in self._view:
                    view[key] = self._view[key]
        self._view = view
        self._view_stamp = self._stamp()
        self._shape = Size(view["shape"])
        self._dtype = view["dtype"]
        self._array = view.get("data")  # decoded when read (_data)
        self._seen = self._storage.memory[0]
        if view["is_leaf"] and view["requires_grad"]:
            self._param = True

    def _stamp(self) -> tuple:
        s, ctx = self._storage, self._ctx
        return (s.version, ctx.grad_epoch if s.is_grad else 0)

    def _ref(self, ctx: Context) -> str:
        """This handle's name in an op recorded into ``ctx``."""
        if self._error is not None:
            self._ctx.raise_thread_error()  # the torch error itself, when another thread sent the failing op
            raise self._error
        if ctx is not self._ctx:
            raise RuntimeError("gradserve: tensors of different sessions cannot be used in one op")
        return self._name

    def _mutated(self) -> None:
        s = self._storage
        s.version += 1
        s.memory[0] += 1

    # ----- reading --------------------------------------------------------------------------------------
    def _fetch(self, level: str, also: dict | None = None) -> dict:
        """Ask for this handle's view at ``level`` (and for ``also``'s names at theirs, in the same request)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if self._error is not None:
            self._ctx.raise_thread_error()
            raise self._error
        view = self._ctx.flush({**(also or {}), self._name: level}).get("tensors", {}).get(self._name)
        if view is None:
            raise self._error or RuntimeError(f"gradserve: {self._name} is not bound in the session")
        return self._view

    def _meta(self, key: str):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if self._view_stamp != self._stamp() or key not in self._view or key in _VALUE_KEYS and \
                self._seen != self._storage.memory[0]:
            self._fetch("auto")
        return self._view[key]

    def _data(self) -> np.ndarray:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if self._view_stamp != self._stamp() or self._array is None or self._seen != self._storage.memory[0]:
            also = None
            if self._storage.is_grad and self._ctx.grad_level != "auto":
                also = self._ctx.grads_read()  # (the program reads gradients' values: the others' come along)
            self._fetch("full", also)
        if isinstance(self._array, dict):
            self._array = _decode(self._array)
        return self._array

    def _grad_known(self) -> bool:
        return self._known_grad is not None and self._known_grad[0] == self._ctx.grad_epoch

    @property
    def shape(self) -> Size:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if self._shape is None:
            self._meta("shape")
        return self._shape

    def size(self, dim: int | None = None):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return len(self.shape)

    ndim = property(dim)

    def numel(self) -> int:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return self.shape.numel()

    def __len__(self) -> int:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def _strides(self) -> tuple:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if self._layout.__class__ is _layout.Deferred and self._shape is None:
            self._meta("shape")  # (row-major, column-major...: its strides follow from its shape)
        layout = _layout.of(self)
        if layout is None:
            raise NotImplementedError("gradserve: the strides of this tensor are not known to the client (it knows "
                                      "those of new tensors, views and elementwise results); .contiguous() gives "
                                      "a tensor whose strides it knows")
        return layout[0]

    def stride(self, dim: int | None = None):
        """torch's strides (in elements), as the client lays the tensor out (``_layout``)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if dim is not None and (not isinstance(dim, int) or isinstance(dim, builtins.bool)):
            raise TypeError(f"stride(): argument 'dim' (position 1) must be int, not {type(dim).__name__}")
        strides = self._strides()
        if dim is None:
            return strides
        if not strides:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        n = len(strides)
        if not -n <= dim < n:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
        return strides[dim]

    def is_contiguous(self, memory_format=None) -> bool:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if memory_format is not None:
            raise NotImplementedError("gradserve: is_contiguous(memory_format=...) is not supported")
        return _layout.is_contiguous(tuple(self.shape), self._strides())

    def storage_offset(self) -> int:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        self._strides()
        return _layout.of(self)[1]

    @property
    def dtype(self):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if self._dtype is None:
            self._meta("dtype")
        return by_name(self._dtype)

    def is_floating_point(self) -> bool:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return self.dtype.is_floating_point

    @property
    def device(self) -> _device.device:
        return _device.CPU

    is_cuda = False

    def get_device(self) -> int:
        return -1

    @property
    def requires_grad(self) -> bool:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return self._meta("requires_grad")

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        _meta.set_requires_grad(self, builtins.bool(value), setter=True)
        self._set_requires_grad(value)

    @property
    def is_leaf(self) -> bool:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return self._meta("is_leaf")

    @property
    def retains_grad(self) -> bool:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return self._meta("retains_grad")

    @property
    def _version(self) -> int:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return self._meta("version")

    @property
    def grad_fn(self):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        name = self._meta("grad_fn")
        return None if name is None else GradFn(name, self)

    def item(self):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        a = self._data()
        if a.size != 1:
            raise RuntimeError(f"a Tensor with {a.size} elements cannot be converted to Scalar")
        return a.reshape(()).item()

    def tolist(self):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return self._data().tolist()

    def numpy(self) -> np.ndarray:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() "
                               "instead.")
        refuse_numpy(self.dtype.name)
        return np.array(self._data())

    def __array__(self, dtype=None, copy=None):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        refuse_numpy(self.dtype.name)
        a = np.array(self._data())
        return a.astype(dtype) if dtype is not None else a

    def __bool__(self) -> bool:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        a = self._data()
        if a.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return builtins.bool(a.reshape(()).item())

    def __float__(self) -> float:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return float(self.item())

    def __int__(self) -> int:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return int(self.item())

    def __index__(self) -> int:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if self.dtype.is_floating_point:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __repr__(self) -> str:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        tangent = None
        if self._ctx.dual_depth:  # torch shows a dual tensor's tangent: asked for with the value
            self._fetch("full")
            known = self._dual_tangent
            view = known[1] if known is not None and known[0] == self._ctx.failures else None
            if view is not None:
                data = view.get("data")
                tangent = tangent_str(_decode(data) if isinstance(data, dict) else np.asarray(data), view["dtype"],
                                      view["grad_fn"], view["requires_grad"], default_float())
        a = self._data()
        return format_tensor(a, self._dtype, self._meta("grad_fn"), self._meta("requires_grad"), tangent,
                             default_float())

    def __format__(self, spec: str) -> str:
        # torch: a 0-d Tensor (not a subclass) formats as its item, even with an empty spec
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if type(self) is Tensor and self.dim() == 0:
            return format(self.item(), spec)
        if spec:  # (object.__format__'s refusal, which names the class)
            raise TypeError(f"unsupported format string passed to {type(self).__name__}.__format__")
        return str(self)

    __hash__ = object.__hash__

    def __iter__(self):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        for i in range(len(self)):
            yield self[i]

    def __reduce__(self):
        raise TypeError("a gradserve tensor is a handle to a server session; send tensor.numpy() instead")

    def __deepcopy__(self, memo: dict) -> Tensor:
        """``copy.deepcopy(t)`` of a leaf, as torch's: a new leaf (a Parameter stays one) with a copy of the values,
        the same ``requires_grad`` and a copy of ``.grad``; a non-leaf raises torch's error."""
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                               "protocol at the moment.  If you were attempting to deepcopy a module, this may be "
                               "because of a torch.nn.utils.weight_norm usage, see "
                               "https://github.com/pytorch/pytorch/pull/103001")
        with no_grad():
            new = type(self)._copy_of(call_op("clone", (self,), {}), self.requires_grad)
        memo[id(self)] = new
        grad = self.grad
        if grad is not None:
            new.grad = grad.__deepcopy__(memo)
        return new

    @classmethod
    def _copy_of(cls, values: Tensor, requires_grad: bool) -> Tensor:
        return values.requires_grad_(True) if requires_grad else values

    # ----- autograd -------------------------------------------------------------------------------------
    @property
    def grad(self):
        """``x.grad``: None or the gradient tensor itself (a handle of it: a leaf's fetched gradient is named
        ``x.grad`` until something may replace it, ``Context.materialize``). Sends what is pending unless
        it is already known (the gradients of leaves come back with every request after a backward)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        known, ctx = self._known_grad, self._ctx  # (``_grad_known()``, inline: a loop reads its gradients each step)
        if known is not None and known[0] == ctx.grad_epoch:
            return known[1]
        if self._param:
            ctx.flush()
            if self._grad_known():
                return self._known_grad[1]
        g = Tensor._bound_grad(ctx, self)  # a bind, so that a non-leaf gives torch's warning from the server
        returns = {f"{self._name}.grad": "auto"}
        if self._view_stamp != self._stamp():
            returns[self._name] = "meta"  # is it a leaf?
        view = ctx.flush(returns)["tensors"][f"{self._name}.grad"]
        if view is not None:
            g._set_view(view)
        result = g if view is not None else None
        if self._meta("is_leaf"):
            self._known_grad = (ctx.grad_epoch, result)
        return result

    @grad.setter
    def grad(self, value) -> None:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        _meta.set_grad(self, value)
        ctx = self._ctx
        self._known_grad = None
        ctx.materialize(f"{self._name}.grad")  # (a handle of the gradient it replaces, still held)
        ctx.record({"op": "set_grad", "args": [self._ref(ctx), None if value is None else value._ref(ctx)]})
        self._known_grad = (ctx.grad_epoch, value)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None) -> None:
        """``Tensor.backward``: recorded, then sent (a sync point: its errors are raised here)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        backward(self, gradient, retain_graph, create_graph, inputs)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        _meta.set_requires_grad(self, builtins.bool(requires_grad), setter=False)
        return self._set_requires_grad(requires_grad)

    def _set_requires_grad(self, requires_grad: bool) -> Tensor:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        ctx = self._ctx
        ctx.record({"op": "requires_grad_", "args": [self._ref(ctx), requires_grad]})
        known_leaf = self._view_stamp == self._stamp() and self._view.get("is_leaf")
        storage = self._storage
        if storage.shared and storage.root in (None, self._name):  # (a view's requires_grad follows its base's in
            before = self._stamp()                                   # torch: what was known of its views is stale)
            storage.version += 1
            if storage.root == self._name and not storage.memory[0]:  # (a base changed in place: its views'
                _follow_base(self, before, requires_grad)                 # nodes are made anew, the server's)
        on_leaf = known_leaf and self._view.get("view_of_leaf")  # (a view of a leaf stays one)
        self._view_stamp = None  # (this tensor's flags change; those of others sharing its memory do not)
        if known_leaf:
            self._know(is_leaf=True, requires_grad=requires_grad, grad_fn=None,
                       **({"view_of_leaf": True} if on_leaf else {}))
        self._param = builtins.bool(known_leaf and requires_grad)
        return self

    def retain_grad(self) -> None:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        ctx = self._ctx
        ctx.record({"op": "retain_grad", "args": [self._ref(ctx)]})
        self._mutated()

    def detach(self) -> Tensor:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return call_op("detach", (self,), {})

    @property
    def data(self) -> Tensor:
        """``x.data``: a detached alias (shares the values, no history) with a version counter of its own (torch's
        ``variable_data``: a change through it is invisible to autograd, where ``detach()`` shares the counter)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return call_op("variable_data", (self,), {}, method=True)

    @data.setter
    def data(self, value: Tensor) -> None:
        """``x.data = v``: ``x`` takes ``v``'s values without autograd seeing it (``x.data -= ...`` assigns back the
        alias it changed: nothing more to do). Only a value of the same shape and dtype can be assigned."""
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a Tensor, not {type(value).__name__}")
        if value._storage is self._storage and value.shape == self.shape:
            return
        if value.shape != self.shape or value.dtype != self.dtype:
            raise NotImplementedError(f"gradserve: x.data = v needs v of x's shape and dtype ({list(self.shape)}, "
                                      f"{self.dtype}), got {list(value.shape)}, {value.dtype}")
        with no_grad():
            call_op("copy_", (self, value), {})

    @property
    def T(self) -> Tensor:  # noqa: N802 - torch's name
        """``x.T``: the dimensions reversed."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return call_op("permute", (self, list(range(self.dim() - 1, -1, -1))), {})

    @property
    def mT(self) -> Tensor:  # noqa: N802 - torch's name
        """``x.mT``: the last two dimensions transposed (of a matrix or a batch of them)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if self.dim() < 2:
            raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices. Got {self.dim()}-D "
                               f"tensor.")
        return call_op("transpose", (self, -2, -1), {})

    mH = mT  # (real dtypes only: the conjugate is the tensor)

    @property
    def H(self) -> Tensor:  # noqa: N802 - torch's name
        """``x.H``: a matrix transposed (conjugated: real dtypes only here)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if self.dim() != 2:
            more = ". For batches of matrices, consider using tensor.mH" if self.dim() > 2 else ""
            raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got {self.dim()}-D tensor"
                               f"{more}" + ("" if more else "."))
        return call_op("transpose", (self, 0, 1), {})

    def type_as(self, other) -> Tensor:
        """``x.type_as(other)``: ``x`` in ``other``'s dtype (``x`` itself when it has it)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if not isinstance(other, Tensor):
            raise TypeError(f"type_as(): argument 'other' (position 1) must be Tensor, not {type(other).__name__}")
        return self.to(other.dtype)

    def element_size(self) -> int:
        return self.dtype.itemsize

    def nelement(self) -> int:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return self.numel()

    def ndimension(self) -> int:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return self.dim()

    def equal(self, other) -> builtins.bool:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        from gradserve.torch._python import equal

        return equal(self, other)

    def sum_to_size(self, *size) -> Tensor:
        """``x.sum_to_size(*size)``: summed over the dimensions ``size`` broadcasts ``x`` along (torch's sum with
        keepdim over those, then a view dropping the leading ones)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if len(size) == 1 and isinstance(size[0], (list, tuple)):
            size = tuple(size[0])
        shape = tuple(self.shape)
        lead = len(shape) - len(size)
        if lead < 0 or any(s != 1 and s != n for s, n in zip(size, shape[lead:])):
            raise RuntimeError(f"size {{[{', '.join(map(str, size))}]}} is not expandable to size "
                               f"{{[{', '.join(map(str, shape))}]}}.")
        if tuple(size) == shape:
            return self
        dims = list(range(lead)) + [lead + i for i, s in enumerate(size) if s == 1 and shape[lead + i] != 1]
        out = call_op("sum", (self, dims), {"keepdim": True}) if dims else self
        return call_op("view", (out, list(size)), {}) if lead else out

    def to(self, *args, **kwargs) -> Tensor:
        """``x.to(dtype)``, ``x.to(device)``, ``x.to(device, dtype)``, ``x.to(other)``, with ``non_blocking``,
        ``copy`` and ``memory_format``: devices are checked (cpu only, see ``_device``); ``self`` comes back
        when nothing changes, as in torch."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        dtype = kwargs.pop("dtype", None)
        copy = kwargs.pop("copy", False)
        for key in ("non_blocking", "memory_format"):
            kwargs.pop(key, None)
        if "device" in kwargs:
            _device.check(kwargs.pop("device"))
        if kwargs:
            raise TypeError(f"to() received an invalid combination of arguments - got unexpected keyword "
                            f"{sorted(kwargs)[0]!r}")
        rest = list(args)
        if rest and isinstance(rest[0], Tensor):  # x.to(other, non_blocking=False, copy=False)
            dtype = rest.pop(0).dtype
        elif rest and (_device.is_device_like(rest[0]) or isinstance(rest[0], int) and not isinstance(rest[0], bool)):
            _device.check(rest.pop(0))
        if rest and isinstance(rest[0], DType):
            dtype = rest.pop(0)
        if rest and isinstance(rest[0], builtins.bool):  # non_blocking
            rest.pop(0)
        if rest and isinstance(rest[0], builtins.bool):
            copy = rest.pop(0)
        if rest:
            raise TypeError(f"to() received an invalid combination of arguments - got {rest[0]!r}")
        if (dtype is None or dtype == self.dtype) and not copy:
            return self
        return call_op("to", (self, dtype or self.dtype), {"copy": True} if copy else {})

    def cpu(self, memory_format=None) -> Tensor:
        return self

    def cuda(self, device=None, non_blocking: bool = False, memory_format=None) -> Tensor:
        raise AssertionError(_device.NO_CUDA)

    def type(self, dtype=None, non_blocking: bool = False, **kwargs):
        """``x.type()`` -> ``'torch.FloatTensor'``; ``x.type(torch.float64)`` or ``x.type('torch.DoubleTensor')``
        -> ``x.to(that dtype)``."""
        if dtype is None:
            return _legacy.type_name(self.dtype)
        return self.to(_legacy.dtype_of(dtype))

    def __getattr__(self, name: str):
        if name.startswith("_"):  # not a catalog method (an unset slot, a protocol probe): no catalog fetch
            raise AttributeError(f"'Tensor' object has no attribute '{name}'")
        op = _catalog.covered("Tensor")[0].get(name)
        if op is None:
            from gradserve.torch._namespace import missing

            raise missing(f"'Tensor' object has no attribute '{name}'")
        spelling = name if name != op else None  # (an alias: x.arctan2(...) names arctan2 in its messages)
        entry = _catalog.catalog()[op]
        converts_to = (entry["converts_to"] or None) if entry["family"] == "shape" else None

        def method(self, *args, **kwargs):
            __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
            if converts_to is not None and not args and not kwargs and _meta.peek(self, "dtype") == converts_to:
                return self  # x.float() of a float32 tensor is x itself in torch (x.to(its dtype) too)
            return call_op(op, (self, *args), kwargs, True, spelling)
        method.__name__ = method.__qualname__ = name
        setattr(Tensor, name, method)  # made once: the next x.name() is found on the class, without __getattr__
        return method.__get__(self)

    # ----- operators --------------------------------------------------------------------------------------
    def __getitem__(self, key):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return call_op("getitem", (self, _Index(key)), {})

    def __setitem__(self, key, value) -> None:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        call_op("setitem", (self, _Index(key), value), {})


def _follow_base(base: Tensor, before: tuple, requires_grad: bool) -> None:
    """After ``base.requires_grad_()`` on a base never changed in place: a view of it the client knows as a view of a
    leaf made in grad mode (no node of its own) now requires grad as its base does (torch: a view's requires_grad
    is its base's), still a leaf, so that an in-place op on it is refused at its line; what else the client knew of
    the views is left stale. (Once the base or a view changed in place, torch gives such a view an
    ``AsStridedBackward0`` node when it is next read: the server's facts.)"""
    storage, after = base._storage, base._stamp()
    for ref in list(base._ctx.refs.values()):
        view = ref()
        if view is None or view is base or view._storage is not storage or view._view_stamp != before:
            continue
        facts = view._view
        if facts.get("view_of_leaf") is True and facts.get("is_leaf") is True and facts.get("grad_fn", 0) is None:
            view._view = {k: v for k, v in facts.items() if k != "node"} | {"requires_grad": requires_grad}
            view._view_stamp = after


def _binary(op: str):
    """An operator of torch's: an operand that is not a tensor or a number (``None``, a list), or a TypeError of
    the call, is NotImplemented, so that Python tries the other operand and says ``unsupported operand type(s) for
    *: 'Tensor' and 'NoneType'`` as it does for torch."""
    def operator(self, other):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        c = other.__class__  # (a tensor or a Python number first: numbers.Number's check is an ABC's)
        if c is not Tensor and c is not float and c is not int and not isinstance(other, _OPERANDS):
            return NotImplemented
        try:
            return call_op(op, (self, other), {})
        except TypeError:
            return NotImplemented
    return operator


#: what torch's operators take (numpy arrays: numpy's own operators decide)
_OPERANDS = (Tensor, numbers.Number, np.generic, np.ndarray)


def _unary(op: str):
    def operator(self):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return call_op(op, (self,), {})
    return operator


for _dunder, _op in {"__add__": "add", "__radd__": "add", "__sub__": "sub", "__rsub__": "rsub",
                     "__mul__": "mul", "__rmul__": "mul", "__truediv__": "div", "__rtruediv__": "rtruediv",
                     "__pow__": "pow", "__rpow__": "rpow", "__matmul__": "matmul", "__rmatmul__": "rmatmul",
                     "__floordiv__": "floor_divide", "__mod__": "remainder", "__eq__": "eq", "__ne__": "ne",
                     "__lt__": "lt", "__le__": "le",
                     "__gt__": "gt", "__ge__": "ge", "__and__": "bitwise_and", "__or__": "bitwise_or",
                     "__xor__": "bitwise_xor", "__rand__": "bitwise_and", "__ror__": "bitwise_or",
                     "__rxor__": "bitwise_xor", "__lshift__": "bitwise_left_shift",
                     "__rshift__": "bitwise_right_shift", "__iadd__": "add_", "__isub__": "sub_", "__imul__": "mul_",
                     "__itruediv__": "div_", "__ipow__": "pow_", "__iand__": "bitwise_and_", "__ior__": "bitwise_or_",
                     "__ixor__": "bitwise_xor_", "__ilshift__": "bitwise_left_shift_",
                     "__irshift__": "bitwise_right_shift_", "__imod__": "remainder_",
                     "__ifloordiv__": "floor_divide_"}.items():
    setattr(Tensor, _dunder, _binary(_op))
for _dunder, _op in {"__neg__": "neg", "__abs__": "abs", "__invert__": "invert"}.items():
    setattr(Tensor, _dunder, _unary(_op))


def _reflected(op: str):
    """``7 % x``, ``7 // x``: torch's ``op(Number, Tensor)``."""
    def operator(self, other):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return call_op(op, (other, self), {})
    return operator


Tensor.__rmod__, Tensor.__rfloordiv__ = _reflected("remainder"), _reflected("floor_divide")


def _where(self, condition, y):
    """``x.where(condition, y)``: torch.where(condition, x, y) (the method's self is where's input, not its
    condition)."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    _meta.check_arguments(_op_facts("where").entry, (self, condition, y), {}, True, None)  # (the method's messages)
    return call_op("where", (condition, self, y), {})


Tensor.where = _where


def _compare_with_none(op: str, when_none: bool):
    """torch: ``t == None`` is False and ``t != None`` True (no op)."""
    def compare(self, other):
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return when_none if other is None else call_op(op, (self, other), {})
    return compare


Tensor.__eq__ = _compare_with_none("eq", False)
Tensor.__ne__ = _compare_with_none("ne", True)


class _Index:
    """An index argument (``x[...]``), encoded with the HTTP API's index rules."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key


#: torch's autograd nodes written in C++ (their ``name()`` is qualified)
CPP_NODES = frozenset({"AccumulateGrad", "CopySlices", "CopyBackwards", "GraphRoot", "Identity", "Error",
                       "NotImplemented", "DelayedError", "UndefinedGradBackward"})


class GradFn:
    """``tensor.grad_fn``: torch's node class name; ``next_functions`` come from the graph endpoint."""

    def __new__(cls, name: str, *args, **kwargs):
        return object.__new__(_node_class(name))

    def __init__(self, name: str, tensor: Tensor | None = None, node: dict | None = None, graph: dict | None = None):
        self._name = name
        self._tensor = tensor
        self._node = node
        self._graph = graph

    def name(self) -> str:
        """torch's: C++ nodes by their qualified name (``torch::autograd::AccumulateGrad``)."""
        return f"torch::autograd::{self._name}" if self._name in CPP_NODES else self._name

    def __repr__(self) -> str:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return f"<{self._name} object at {hex(id(self))}>"

    def _load(self) -> None:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        if self._node is None:
            ctx = self._tensor._ctx
            ctx.flush()
            graph = ctx.client.graph(ctx.session(), root=self._tensor._name)
            self._graph = {n["id"]: n for n in graph["nodes"]}
            self._node = self._graph[graph["roots"][self._tensor._name]]

    @property
    def next_functions(self) -> tuple:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        self._load()
        out = []
        for edge in self._node["next_functions"]:
            if edge is None:
                out.append((None, 0))
            else:
                node = self._graph[edge[0]]
                out.append((GradFn(node["name"], node=node, graph=self._graph), edge[1]))
        return tuple(out)

    @property
    def variable(self) -> Tensor | None:
        """For an AccumulateGrad node: the leaf it accumulates into (when its handle is alive)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        self._load()
        name = self._node.get("variable")
        return self._tensor._ctx.handle(name) if name and self._tensor is not None else None


@functools.cache
def _node_class(name: str) -> type:
    """A subclass of GradFn named as torch's node class (``type(t.grad_fn).__name__ == "MulBackward0"``)."""
    return type(name, (GradFn,), {"__module__": "torch.autograd.graph" if name in CPP_NODES else "torch"})


# ----- recording calls ----------------------------------------------------------------------------------------
def context_of(values) -> Context:
    for v in values:
        if v.__class__ is Tensor or isinstance(v, Tensor):
            return v._ctx
        if isinstance(v, (list, tuple)):
            for x in v:
                if isinstance(x, Tensor):
                    return x._ctx
    return _context.current()


class _OpFacts:
    """What ``call_op`` reads of an op's catalog entry on every call, read once (a call of a common op spent
    a fifth of its time looking these up)."""

    __slots__ = ("entry", "base", "inplace", "family", "creation", "shape_op", "tuple_maybe", "rtype",
                 "python_result", "changes_argument", "base_entry", "checks", "sizes", "plain_kwargs", "plain",
                 "quick", "quick_inplace")

    def __init__(self, entry: dict):
        self.entry = entry
        self.base = entry["name"]
        self.inplace = entry["inplace"]
        self.family = entry["family"]
        self.creation = self.family == "creation"
        # (an op whose result may share its input's memory: the shape family's, and views of other families:
        # diagonal, movedim, view_as, unflatten, tensor_split)
        self.shape_op = self.family == "shape" and entry.get("storage") != "new" or \
            entry.get("storage") == "view" or self.base in _layout.VIEWS or self.base in _PIECES
        self.tuple_maybe = builtins.bool(entry.get("variable_outputs") or entry.get("tuple_when"))
        self.rtype = _catalog.return_type(self.base)
        self.python_result = entry.get("python_result")
        changes = entry.get("changes_argument") or ()
        # ([changed, given] pairs; an older server sends one pair, flat)
        self.changes_argument = [changes] if changes and isinstance(changes[0], str) else changes
        self.base_entry = _catalog.catalog().get(self.base[:-1]) if self.inplace else None
        # the op's checks (an in-place op's: its out-of-place op's too, which it takes the arguments of)
        self.checks = (*entry.get("checks", ()), *(self.base_entry or {}).get("checks", ()))
        self.sizes = _catalog.size_param(self.base) is not None  # (``pack_sizes`` has work to do)
        self.plain_kwargs: set[tuple] = set()  # keyword sets ``_torch_kwargs`` passes as they are
        # one new tensor of its own storage, the facts of a decided call all there is to know of it (``call_op``'s
        # short way): not in place, not a creation or a view, one result, no Python value, no argument changed
        self.plain = not (self.inplace or self.creation or self.shape_op or self.tuple_maybe or
                          self.rtype is not None or self.python_result or self.changes_argument or
                          self.base in _meta.DETACHES or self.base in ("contiguous", "flatten", "getitem"))
        self.quick = self.plain and not self.sizes  # (and called without keywords: ``call_op``'s shortest way)
        self.quick_inplace = self.inplace and not self.sizes and self.base != "setitem"  # (its in-place one)


_OP_FACTS: dict[str, _OpFacts] = {}


def _op_facts(name: str) -> _OpFacts:
    facts = _OP_FACTS.get(name)
    if facts is None:
        facts = _OP_FACTS[name] = _OpFacts(_catalog.catalog()[name])
    return facts


def call_op(name: str, args: tuple, kwargs: dict, method: bool = False, spelling: str | None = None):
    """Record ``name(*args, **kwargs)`` and return what torch would: a handle, a tuple of handles, or the
    target itself for in-place ops. Only ops whose number of outputs depends on the data send at once.
    ``method``: called as a Tensor method (``args[0]`` is self), for torch's argument messages; ``spelling``: the
    alias of the op the user called (``arctan2``), which they name."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    caller = sys._getframe(1)  # (where ``record`` looks for the user's line from: ``user_frame``)
    of = _OP_FACTS.get(name) or _op_facts(name)
    if (of.quick or of.quick_inplace) and not kwargs and _CAPTURE.count is None and _DEFAULT[0] == DEFAULT_FLOAT \
            and args and args[0].__class__ is Tensor:
        # a loop's call of a plain op or an in-place one, decided before (``_decision_key``): the short way, without
        # the rest (what the rest does for such a call, in the same order)
        out = _quick_call(name, of, args, method, caller)
        if out is not _UNDECIDED:
            return out
    entry = of.entry
    if _CAPTURE.count is not None:
        _CAPTURE.count[0] += 1
    first = args[0] if args else None
    if kwargs:
        keys = tuple(kwargs)
        if keys not in of.plain_kwargs:
            renamed = _torch_kwargs(name, kwargs)
            if tuple(renamed) == keys and len(of.plain_kwargs) < 64 and "device" not in keys:
                of.plain_kwargs.add(keys)
            kwargs = renamed
        ctx = first._ctx if first.__class__ is Tensor else context_of((*args, *kwargs.values()))
    else:
        ctx = first._ctx if first.__class__ is Tensor else context_of(args)
    if of.sizes:
        args = _catalog.pack_sizes(name, args)
    grad_enabled = is_grad_enabled()
    key = None if of.creation else _decision_key(name, method, grad_enabled, args, kwargs)
    decided = _DECIDED.get(key) if key is not None else None
    base = of.base
    if decided is None:
        _meta.check_arguments(entry, args, kwargs, method, spelling)  # torch's TypeError for a wrong argument, here
        if of.checks:  # torch's refusals from the arguments' metadata, here
            broken = _checks.first_failure(of.checks, lambda param: _argument(base, param, args, kwargs))
            if broken is not None:
                if of.inplace:  # (its memory overlap comes before the shapes' checks)
                    _meta.check_overlap(entry, args, kwargs)
                raise _meta.error(*broken)
    if _DEFAULT[0] != DEFAULT_FLOAT and not of.creation:  # (set_default_dtype: the server's default is another)
        args, kwargs = _default_casts(entry, args, kwargs)
    op = {"op": base, "args": [_arg(a, ctx) for a in args]}
    if kwargs:
        op["kwargs"] = {k: _arg(v, ctx) for k, v in kwargs.items()}
        tensors = _tensors((*args, *kwargs.values()))
    else:
        tensors = _tensors(args)
    if not grad_enabled:
        op["no_grad"] = True
    if not tensors and _DEFAULT[0] != DEFAULT_FLOAT and of.family == "random" and "dtype" in _meta._arg_names(entry) \
            and _argument(base, "dtype", args, kwargs) is None:
        op.setdefault("kwargs", {})["dtype"] = _DEFAULT[0]  # (normal(0., 1., size): torch's default dtype)
    if decided is not None and of.plain:  # a loop's call, decided before, that the shortest way did not take
        return _decided_result(ctx, op, decided, tensors, caller)
    if of.inplace:
        target = args[0] if args else kwargs.get("self")
        index = args[1].key if base == "setitem" and len(args) > 1 and isinstance(args[1], _Index) else None
        inputs = [target, *[t for t in tensors if t is not target]]
        if decided is not None:
            facts = _decided_facts(decided, inputs)
            captured = _CAPTURE.calls
            if captured is not None:  # (an optimizer's step, kept to be recorded again: ``replay_inplace``)
                captured.append((op, target, decided, inputs[1:]))
        else:
            facts = _meta.inplace(entry, target, inputs[1:], grad_enabled, index) \
                if isinstance(target, Tensor) else {}
            _meta.check_inplace_dtype(entry, of.base_entry, args, kwargs, inputs[1:])
            if key is not None and isinstance(target, Tensor):
                _decide(key, facts, _meta.known(target).get("node"))
        ctx.record(op, (), caller)
        target._mutated()
        if facts:
            target._know_facts(facts)
        return target
    first = next((a for a in args if isinstance(a, Tensor)), None)
    if base == "contiguous" and first is not None and not kwargs and _layout.of(first) is not None and \
            _layout.is_contiguous(tuple(first._shape), _layout.of(first)[0]) or base == "flatten" and \
            _flattens_nothing(first, _argument(base, "start_dim", args, kwargs, 0),
                              _argument(base, "end_dim", args, kwargs, -1)):
        return first  # (torch returns the tensor itself: its flags, its identity)
    shares = of.shape_op and first is not None and not (
        base == "getitem" and not _meta.basic_index(args[1].key))  # (an advanced index copies)
    storage = first._storage if shares else None
    if base in _DETACHES and storage is not None:  # (its values are first's, its autograd facts its own)
        storage = Storage(storage.is_grad, storage.memory)
    if of.tuple_maybe and _catalog.returns_tuple(entry, args, kwargs):
        op["out"] = ctx.fresh_name()
        index = ctx.record(op)
        # (the input's metadata comes back with the outcome where the pieces' layouts need its shape)
        asks = {first._name: "auto"} if first is not None and first._shape is None and first._error is None and \
            base in _PIECES else None
        bound = ctx.flush(asks)["ops"][index]["bound"]
        outs = tuple(Tensor._new(ctx, storage, name) for name in bound)
        _know_pieces(base, first, outs, lambda p, d=None: _argument(base, p, args, kwargs, d))
        return outs
    rtype = of.rtype
    if rtype is not None and _catalog.returns_named_tuple(entry, args, kwargs):
        # a named tuple of tensors (linalg.svd's U, S, Vh; sort's values, indices): one handle per field, the
        # first sharing a shape op's storage
        outs = tuple(Tensor._new(ctx, storage if i == 0 else None) for i in range(len(rtype._fields)))
        if decided is not None:  # (decided before: each field's facts, its node anew)
            fields = [_decided_facts(d, tensors) for d in decided[0]]
        else:
            fields = _meta.named_results(entry, tensors, lambda p, d=None: _argument(base, p, args, kwargs, d),
                                         grad_enabled) or []
            if key is not None:
                _remember(key, (tuple(_decision(f) for f in fields), "fields"))
        op["out"] = [t._name for t in outs]
        ctx.record(op, outs)
        for out, facts in zip(outs, fields or ()):
            out._know_facts(facts)
        return rtype(*outs)

    def arg(param, default=None):
        return _argument(base, param, args, kwargs, default)

    if of.creation:
        dtype = arg("dtype")
        facts = _meta.creation(base, arg, dtype.name if isinstance(dtype, DType) else None,
                               builtins.bool(arg("requires_grad", False)))
        if base == "tensor" and dtype is None and "dtype" in facts and _meta.has_numpy_number(arg("data")):
            op.setdefault("kwargs", {})["dtype"] = facts["dtype"]  # (np.float64(2.0) would arrive as a float)
        elif dtype is None and _DEFAULT[0] != DEFAULT_FLOAT and facts.get("dtype") == _DEFAULT[0]:
            op.setdefault("kwargs", {})["dtype"] = facts["dtype"]  # (torch's default dtype, not the server's)
        literal = _literal(arg("data"), facts) if base == "tensor" else None
    elif base not in _DETACHES and decided is not None:
        facts = _decided_facts(decided, tensors)
    elif base not in _DETACHES:
        facts = _meta.result(entry, tensors, arg, grad_enabled)
        index = args[1].key if base == "getitem" and isinstance(args[1], _Index) else None
        if first is not None and grad_enabled:
            _meta.grad_view(entry, first, index, facts)
        elif first is not None and not grad_enabled and base in _layout.VIEWS:
            _meta.no_grad_view(entry, first, index, facts)
        if key is not None:
            _decide(key, facts)
    if storage is not None and base in _meta.MAY_COPY and _meta.copies(base, first, facts):
        storage = None  # (a copy: memory of its own)
    out = Tensor._new(ctx, storage)
    op["out"] = out._name
    ctx.record(op, (out,), caller)
    if of.python_result:
        return _catalog.PYTHON_TYPES[of.python_result](out.item())
    if of.changes_argument:  # F.embedding's max_norm renormalises weight's rows, batch_norm its running statistics
        for changed, given in of.changes_argument:
            target = _catalog.argument(base, changed, args, kwargs)
            if isinstance(target, Tensor) and _catalog.argument(base, given, args, kwargs) not in (None, False):
                target._mutated()
    if base in _DETACHES:
        out._know(is_leaf=True, requires_grad=False, grad_fn=None)
        out._shape, out._dtype, out._layout = first._shape, first._dtype, first._layout
        out._known_grad = (ctx.grad_epoch, None)
    else:
        out._know_facts(facts)
        if of.creation:  # a new leaf
            out._known_grad = (ctx.grad_epoch, None)
            if literal is not None:
                out._array, out._seen = literal, 0
    return out


def _decided_result(ctx: Context, op: dict, decided: tuple, tensors: list, caller) -> Tensor:
    """Record ``op``, a decided call of a plain op (``_OpFacts.plain``), and return its result's handle, its facts
    the decision's."""
    facts = _decided_facts(decided, tensors)
    out = Tensor._new(ctx)
    op["out"] = out._name
    ctx.record(op, (out,), caller)
    out._know_facts(facts)
    return out


#: ``_quick_call``'s answer for a call it did not take (not decided before, or not of the arguments it takes)
_UNDECIDED = object()


def _quick_call(name: str, of: _OpFacts, args: tuple, method: bool, caller):
    """``call_op``'s shortest way: a call without keywords of a plain op (``_OpFacts.quick``) or an in-place one
    (``quick_inplace``), its arguments handles of its context, numbers and the like (no list), decided before: its
    decision key (``_decision_key``'s), the op's argument names and the new node's parents read in one pass over the
    arguments (a handle's slots are read through ``Tensor.__getattr__``'s slower lookup: each once), then the new
    handle made and told its facts at once (what ``Tensor._new`` and ``_know_facts`` do for a new handle).
    ``_UNDECIDED`` when the call is not one of those: ``call_op`` takes its general way."""
    target = args[0]
    ctx = target._ctx
    grad_enabled = _grad_enabled()
    parts: list = [name, method, grad_enabled]
    names = []
    seen: dict[int, int] = {}
    parents_of = []  # (handle, its view) of the handles whose view says they require grad
    for v in args:
        c = v.__class__
        if c is float:
            parts.append(c)
            names.append(_arg(v, ctx))
            continue
        if c is not Tensor and not isinstance(v, Tensor):  # (a Parameter is a handle too)
            part = None if c is list or c is tuple else arg_key(v, seen)  # (a list: the general way)
            if part is None:
                return _UNDECIDED
            parts.append(part)
            names.append(_arg(v, ctx))
            continue
        shape, layout, view, of_ctx = v._shape, v._layout, v._view, v._ctx
        if shape is None and layout.__class__ is _Deferred and layout != _layout.ROW_MAJOR or \
                of_ctx is not ctx or v._error is not None:
            return _UNDECIDED
        first = seen.setdefault(id(v), len(seen))
        names.append(v._name)
        if view is not None:
            s = v._storage  # (``_stamp()``, inline)
            if v._view_stamp == (s.version, of_ctx.grad_epoch if s.is_grad else 0):
                get = view.get
                requires_grad = get("requires_grad", _NO_FACT)
                parts.append((c, first, shape, v._dtype, layout, requires_grad, get("is_leaf", _NO_FACT),
                              get("view_of_leaf", _NO_FACT), get("multi_view"), "node" in view))
                if requires_grad is not _NO_FACT and requires_grad:
                    parents_of.append((v, view))
                continue
        parts.append((c, first, shape, v._dtype, layout))
    decided = _DECIDED.get(tuple(parts))
    if decided is None:
        return _UNDECIDED
    op = {"op": of.base, "args": names}
    if not grad_enabled:
        op["no_grad"] = True
    if not of.quick:  # (in place)
        tensors = _tensors(args)
        facts = _decided_facts(decided, [target, *[t for t in tensors if t is not target]])
        ctx.record(op, (), caller)
        target._mutated()
        if facts:
            target._know_facts(facts)
        return target
    kept, how = decided
    facts = dict(kept)
    if how == "tensors":  # (``_decided_facts``: the nodes of the inputs that require grad, ``_meta.node``'s)
        parents, unknown = [], _meta.UNKNOWN
        for v, view in parents_of:
            leaf = view.get("is_leaf", unknown)
            if leaf is True:
                n = v._leaf
                if n is None:
                    n = v._leaf = _meta.Node()
            elif leaf is unknown:
                continue
            else:
                n = view.get("node", unknown)
            if n is not None and n is not unknown:
                parents.append(n)
        facts["node"] = _meta.Node(tuple(parents))
    elif how == "target":
        facts["node"] = _meta.known(target).get("node")
    out = object.__new__(Tensor)
    out._ctx = ctx
    name = out._name = f"_t{next(ctx._names)}"
    out._storage = storage = Storage()
    storage.root = name  # (a new tensor: its views follow its requires_grad)
    out._array = out._known_grad = out._error = out._dual_tangent = out._leaf = None
    out._view, out._view_stamp, out._seen = facts, _NEW_STAMP, 0
    shape = facts.get("shape")
    out._shape = shape if shape is None or shape.__class__ is Size else Size(shape)
    out._dtype, out._layout = facts.get("dtype"), facts.get("layout")
    out._param = builtins.bool(facts.get("is_leaf") and facts.get("requires_grad"))
    op["out"] = name
    ctx.record(op, (out,), caller, True)
    return out


#: the stamp of a new handle's facts (``Tensor._stamp`` of a new storage)
_NEW_STAMP = (0, 0)
_grad_enabled = _enabled.get  # (``is_grad_enabled``, without its call)


def _flattens_nothing(t, start, end) -> bool:
    """``t.flatten(start, end)`` of one dimension: torch returns ``t`` itself (a 0-d tensor becomes 1-d)."""
    n = len(t._shape) if isinstance(t, Tensor) and t._shape is not None else 0
    return n > 0 and all(isinstance(d, int) and not isinstance(d, builtins.bool) and -n <= d < n
                         for d in (start, end)) and start % n == end % n


#: ops whose tuple of results are views of their input (``_layout.pieces``); nonzero(as_tuple=True): its columns
_PIECES = frozenset({"split", "chunk", "unbind", "tensor_split"})


def _know_pieces(base: str, first, outs: tuple, arg) -> None:
    """The shapes and layouts of a tuple result's pieces, where the client can tell them."""
    if base == "nonzero" or base == "where":  # (where(condition) is nonzero(condition, as_tuple=True))
        for i, out in enumerate(outs):
            out._know_facts({"dtype": "int64", "layout": _layout.Deferred("nonzero-column", i)})
        return
    if base not in _PIECES or first is None or first._shape is None:
        return
    got = _layout.pieces(base, tuple(first._shape), _layout.of(first), arg, len(outs))
    for i, out in enumerate(outs):
        facts = _meta.piece_facts(base, first, i, arg)  # (its autograd facts, where its layout is not known too)
        if got:
            facts.update(shape=got[i][0], layout=got[i][1])
        if first._dtype is not None:
            facts["dtype"] = first._dtype
        if facts:
            out._know_facts(facts)


class _Capture(threading.local):
    """This thread's ``capture_inplace``, while it runs: the decided in-place calls recorded, and [the calls made]."""
    calls: list | None = None
    count: list | None = None


_CAPTURE = _Capture()


def capture_inplace(fn) -> list | None:
    """Run ``fn()`` and return what it recorded if every call it made was an in-place op decided from metadata the
    client knew (``_DECIDED``): (op, target, decision, other inputs) per op, for ``replay_inplace``; else None."""
    if _CAPTURE.calls is not None:  # (not nested)
        fn()
        return None
    _CAPTURE.calls, _CAPTURE.count = [], [0]
    try:
        fn()
        captured, calls = _CAPTURE.calls, _CAPTURE.count[0]
    finally:
        _CAPTURE.calls = _CAPTURE.count = None
    return captured if len(captured) == calls else None


def replay_inplace(ctx: Context, captured: list, handles: list) -> None:
    """Record ``capture_inplace``'s calls again as ``call_op`` records a decided in-place call: the same op, the
    target's version moved, its facts the decision's; the calls' tensors given as positions in ``handles`` (the
    captured list holds no handle: a gradient it held would have to be bound before zero_grad drops it). The
    caller makes sure the calls are the same calls, on handles of the same names and metadata (``arg_key`` of
    each), so every decision is the one ``call_op`` would take."""
    ctx.record_all([op for op, _, _, _ in captured])  # (the same dicts each time: a recorded op is never changed)
    last: dict[int, dict] = {}  # target -> its last call's facts (when no call's node is made from its inputs)
    for _, target, decided, _ in captured:
        if decided[1] is not None:
            break
        last[target] = decided[0]
    else:
        if len({id(handles[t]._storage) for t in last}) == len(last):
            # each call replaces its target's facts, and none reads another's: its last call's facts, once
            for _, target, _, _ in captured:
                handles[target]._mutated()
            for target, kept in last.items():
                if kept:
                    handles[target]._know_facts(dict(kept))
            return
    for _, target, decided, others in captured:
        target = handles[target]
        target._mutated()
        facts = _decided_facts(decided, [target, *[handles[i] for i in others]])
        if facts:
            target._know_facts(facts)


def _default_casts(entry: dict, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Under another default dtype than the server's (``set_default_dtype``): the call with its integral and bool
    tensor operands converted to the default dtype where torch's result is of it (an int tensor times a Python
    float, an int tensor's exp), so that the server computes what torch does, in that dtype."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    if not entry["promotion"] or _meta.P.fields(entry["promotion"]):
        return args, kwargs
    base = entry["name"]
    rule_of = entry if not entry["inplace"] else _op_facts(base).base_entry
    if not rule_of or not rule_of["promotion"]:
        return args, kwargs
    try:
        result = _meta.predict(rule_of, lambda p, d=None: _argument(base, p, args, kwargs, d))
    except Exception:  # noqa: BLE001 - torch's refusal: raised by the checks that follow, as without a cast
        return args, kwargs
    if result != _DEFAULT[0]:
        return args, kwargs
    target = by_name(result)
    positions = _catalog.positions(base)
    args, kwargs = list(args), dict(kwargs)
    for name in _meta._operand_names(rule_of):
        i = positions.get(name)
        where, key = (args, i) if i is not None and i < len(args) else (kwargs, name)
        value = where[key] if where is args or key in where else None
        if isinstance(value, Tensor) and value._dtype is not None and value._dtype not in FLOATING and \
                not (entry["inplace"] and value is args[0]):
            with no_grad():
                where[key] = call_op("to", (value, target), {})
    return tuple(args), kwargs


def _argument(base: str, param: str, args: tuple, kwargs: dict, default=None):
    """The call's argument ``param``: ``*size``-style parameters too (``x.view(2, 3)`` and ``x.view((2, 3))``)."""
    if param == _catalog.varargs(base):
        rest = args[len(_catalog.positions(base)):]
        if len(rest) == 1 and isinstance(rest[0], (list, tuple)):
            return rest[0]
        return rest or kwargs.get(param, default)
    return _catalog.argument(base, param, args, kwargs, default)


_Deferred = _layout.Deferred

_DETACHES = _meta.DETACHES

#: (shape, strides) -> dense (``_layout.dense``): a leaf's gradient handle is made after every backward
_DENSE: dict[tuple, bool] = {}

#: the most elements of a torch.tensor literal whose values the client keeps (what it sent: nothing to ask back)
_LITERAL_MAX = 64


def _literal(data, facts: dict) -> np.ndarray | None:
    """The values of ``torch.tensor(data)`` for small Python data of a dtype numpy holds as is, read-only; else None."""
    dtype, shape = facts.get("dtype"), facts.get("shape")
    if dtype is None or dtype == "bfloat16" or shape is None or Size(shape).numel() > _LITERAL_MAX or \
            isinstance(data, np.ndarray) or _meta.has_numpy_number(data):
        return None
    natural = _meta.data_dtype(data)
    if natural != dtype and natural != "bool" and not (natural == "int64" and dtype in FLOATING):
        return None  # (a float cast to an integer type: the server's conversion, NaN included)
    try:
        a = np.array(data, dtype=NP_HELD[dtype])
    except (OverflowError, ValueError, TypeError):  # (torch's error for such data is the server's)
        return None
    a.setflags(write=False)
    return a


#: what ``call_op`` decided from a call's metadata (torch's checks passed; the facts of its result, or of its
#: in-place target, and where their node comes from), by what the deciding reads of the call (``_decision_key``):
#: a loop's calls are decided once. Its size is bounded: a program of ever new shapes starts it over.
_DECIDED: dict[tuple, tuple] = {}
_NO_FACT = object()


def _decision_key(name: str, method: bool, grad_enabled: bool, args: tuple, kwargs: dict) -> tuple | None:
    """What deciding a call reads: per argument its class and value (a float: its class), or of a handle its shape,
    dtype and the flags the client knows (requires_grad, is_leaf, view_of_leaf, multi_view, whether it has a node),
    and which arguments are one handle; None for an argument that is neither (an index, an array...): such calls are
    decided each time."""
    parts = [name, method, grad_enabled]
    seen: dict[int, int] = {}
    for v in ((*args, *kwargs.values()) if kwargs else args):
        c = v.__class__
        if c is Tensor:  # (``handle_key``, inline: a loop's every op asks)
            shape, layout = v._shape, v._layout
            if shape is None and layout.__class__ is _Deferred and layout != _layout.ROW_MAJOR:
                return None
            first = seen.setdefault(id(v), len(seen))
            view = v._view
            if view is not None:
                s = v._storage
                if v._view_stamp == (s.version, v._ctx.grad_epoch if s.is_grad else 0):
                    get = view.get
                    parts.append((c, first, shape, v._dtype, layout, get("requires_grad", _NO_FACT),
                                  get("is_leaf", _NO_FACT), get("view_of_leaf", _NO_FACT), get("multi_view"),
                                  "node" in view))
                    continue
            parts.append((c, first, shape, v._dtype, layout))
            continue
        if c is float:
            parts.append(c)
            continue
        part = arg_key(v, seen)
        if part is None:
            return None
        parts.append(part)
    if kwargs:
        parts.append(tuple(kwargs))
    return tuple(parts)


def handle_key(v: Tensor, seen: dict) -> tuple | None:
    """``arg_key`` of a handle: its class, which of the call's handles it is, its shape, dtype and layout, and the
    flags its valid view holds; None when its strides follow from a shape not known yet (a view of it is decided
    by asking). (A handle's slots are read through ``Tensor.__getattr__``'s slower lookup: each is read once.)"""
    shape, layout = v._shape, v._layout
    if shape is None and layout.__class__ is _Deferred and layout != _layout.ROW_MAJOR:
        return None
    first = seen.setdefault(id(v), len(seen))  # (x.add_(x) is not x.add_(y))
    view = v._view
    if view is not None:
        s = v._storage  # (``_stamp()``, inline)
        if v._view_stamp == (s.version, v._ctx.grad_epoch if s.is_grad else 0):
            get = view.get
            return (v.__class__, first, shape, v._dtype, layout, get("requires_grad", _NO_FACT),
                    get("is_leaf", _NO_FACT), get("view_of_leaf", _NO_FACT), get("multi_view"), "node" in view)
    return (v.__class__, first, shape, v._dtype, layout)


def arg_key(v, seen: dict):
    c = v.__class__
    if c is Tensor:
        return handle_key(v, seen)
    if c is float:  # (no decision reads a float's value, only that it is one: an optimizer's step sizes change)
        return c
    if c is int or c is bool or c is str or v is None or c is DType:
        return (c, v)
    if isinstance(v, Tensor):
        return handle_key(v, seen)
    if c is list or c is tuple:
        parts = []
        for x in v:
            part = arg_key(x, seen)
            if part is None:
                return None
            parts.append(part)
        return (c, tuple(parts))
    return None


def _decide(key: tuple, facts: dict, target_node=_NO_FACT) -> None:
    """Keep what was decided: the facts without their node, and how the node is made again (``tensors``: of the
    inputs' nodes; ``target``: the in-place target's own)."""
    _remember(key, _decision(facts, target_node))


def _decision(facts: dict, target_node=_NO_FACT) -> tuple:
    node = facts.get("node", _NO_FACT)
    how = None if node is _NO_FACT or node is None else "target" if node is target_node else "tensors"
    kept = {k: v for k, v in facts.items() if k != "node" or how is None}
    shape = kept.get("shape")
    if shape is not None and shape.__class__ is tuple:  # (as a handle keeps it: made once, not at each use)
        kept["shape"] = Size(shape)
    return kept, how


def _remember(key: tuple, decision: tuple) -> None:
    if len(_DECIDED) >= 4096:
        _DECIDED.clear()
    _DECIDED[key] = decision


def _decided_facts(decided: tuple, inputs: list) -> dict:
    """The facts decided before, for this call's ``inputs`` (an in-place op's target first): its node anew."""
    kept, how = decided
    facts = dict(kept)
    if how == "tensors":
        node, unknown, parents = _meta.node, _meta.UNKNOWN, []
        for t in inputs:
            view = t._view
            if view is not None and view.get("requires_grad"):  # (the others have none, or none the client knows)
                n = node(t)
                if n is not None and n is not unknown:
                    parents.append(n)
        facts["node"] = _meta.Node(tuple(parents))
    elif how == "target":
        facts["node"] = _meta.known(inputs[0]).get("node")
    return facts


def _tensors(values) -> list:
    """The handles among a call's arguments (in lists too), in order."""
    out = []
    for v in values:
        c = v.__class__
        if c is Tensor or isinstance(v, Tensor):
            out.append(v)
        elif c is list or c is tuple or isinstance(v, (list, tuple)):
            out.extend([x for x in v if isinstance(x, Tensor)])
    return out


#: the numpy-style keyword names torch's argument parser also accepts -> torch's name
_NUMPY_NAMES = {"axis": "dim", "keepdims": "keepdim", "x": "input", "a": "input", "x1": "input", "x2": "other"}


def _torch_kwargs(op: str, kwargs: dict) -> dict:
    """A call's keywords as the server takes them: ``device=`` checked and dropped (the server's tensors are on
    its cpu), ``pin_memory=False`` dropped, numpy-style names (``axis=``, ``keepdims=``) renamed where ``op``
    has torch's parameter."""
    out = {}
    params = _catalog.positions(op)
    for key, value in kwargs.items():
        if key == "device":
            if value is not None:
                _device.check(value)
            continue
        if key == "pin_memory" and not value:
            continue
        name = _NUMPY_NAMES.get(key, key)
        if name != key and (name not in params or key in params):
            name = key
        if name in out:
            raise TypeError(f"{op}() got multiple values for argument '{name}'")
        out[name] = value
    return out


_INF = float("inf")


def _arg(value, ctx: Context):
    c = value.__class__
    if c is Tensor and value._error is None and value._ctx is ctx:  # (the common case, without calls)
        return value._name
    if c is int or c is float and -_INF < value < _INF:  # (NaN and the infinities: the wire's strings)
        return value
    if isinstance(value, _Index):
        return _catalog.encode_index(value.key, ctx)
    return _catalog.encode(value, ctx)


#: dtype name -> its little-endian numpy dtype (the wire's byte order)
_LITTLE: dict[str, np.dtype] = {}


def _decode(data) -> np.ndarray:
    """A base64 payload (what the recorder asks for) -> a read-only array (bfloat16: widened to float32)."""
    raw = binascii.a2b_base64(data["data"])  # (base64.b64decode's own call, without its argument checks)
    little = _LITTLE.get(data["dtype"])
    if little is None:
        little = _LITTLE[data["dtype"]] = NP_HELD[data["dtype"]].newbyteorder("<")
    held = np.frombuffer(raw, dtype=little).reshape(data["shape"])
    return readable(held, data["dtype"])


# ----- autograd entry points ---------------------------------------------------------------------------------
def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None) -> None:
    """``torch.autograd.backward``: recorded and sent at once, so that its errors are raised here."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    single = isinstance(tensors, Tensor)
    roots = [tensors] if single else list(tensors)
    ctx = context_of(roots)
    kwargs: dict = {}
    if grad_tensors is not None:
        kwargs["gradient"] = _arg(grad_tensors if single or isinstance(grad_tensors, list) else list(grad_tensors),
                                  ctx)
    if retain_graph is not None:
        kwargs["retain_graph"] = retain_graph
    if create_graph:
        kwargs["create_graph"] = True
    if inputs is not None:
        kwargs["inputs"] = _arg([inputs] if isinstance(inputs, Tensor) else list(inputs), ctx)
    op = {"op": "backward", "args": [_arg(roots[0] if single else roots, ctx)]}
    if kwargs:
        op["kwargs"] = kwargs
    if create_graph:  # (it replaces the leaves' gradients: handles of the old ones get names of their own)
        ctx.materialize_all()
    ctx.record(op)
    advance_grad_epoch(ctx, in_place=not create_graph)
    ctx.flush(deferrable=True)


#: what the client knows of a handle that the server's view of it does not say (kept when that view arrives):
#: its autograd graph node, and whether it is a view of a leaf that requires grad (in-place ops refuse it)
_CLIENT_FACTS = ("node", "view_of_leaf", "multi_view")

#: the parts of a view an in-place change of the tensor's values makes stale
_VALUE_KEYS = frozenset({"data", "version", "grad_accumulations", "name"})


def advance_grad_epoch(ctx: Context, in_place: bool, detached: bool = False) -> None:
    """An op that may change the ``.grad`` of leaves was recorded: every known gradient is stale. ``in_place``:
    it changes an existing ``.grad`` only in place (backward without create_graph accumulates into it, as torch's
    AccumulateGrad does; ``zero_grad(set_to_none=False)``), so a leaf's gradient known to be a tensor is still
    that tensor, its metadata known: nothing is bound or asked for it again. ``detached``: the op also detaches
    it (zero_grad's ``detach_()`` or ``requires_grad_(False)``)."""
    kept = []
    if in_place:
        epoch = ctx.grad_epoch
        for ref in list(ctx.refs.values()):
            leaf = ref()
            if leaf is None or not leaf._param:
                continue
            known = leaf._known_grad  # (``_grad_known()``, inline)
            if known is not None and known[0] == epoch:
                g = known[1]
                if g is not None and g._error is None:
                    meta = _meta.known(g)  # (a view dict is never changed: shared as it is when it has no value key)
                    if not _VALUE_KEYS.isdisjoint(meta):
                        meta = {k: v for k, v in meta.items() if k not in _VALUE_KEYS}
                    if detached and meta:
                        meta = {**meta, "requires_grad": False, "is_leaf": True, "grad_fn": None, "node": None}
                    kept.append((leaf, g, meta))
    ctx.grad_epoch += 1
    for leaf, g, meta in kept:
        leaf._known_grad = (ctx.grad_epoch, g)
        if meta:
            g._know_facts(meta)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=None,
         is_grads_batched=False, materialize_grads=False) -> tuple:
    """``torch.autograd.grad``: recorded (sent at once only with ``allow_unused``, where None results
    depend on the graph)."""
    __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
    ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    ctx = context_of(ins + outs)
    kwargs: dict = {}
    if grad_outputs is not None:
        kwargs["grad_outputs"] = _arg([grad_outputs] if isinstance(grad_outputs, Tensor) else list(grad_outputs),
                                      ctx)
    for key, value, default in (("retain_graph", retain_graph, None), ("create_graph", create_graph, False),
                                ("allow_unused", allow_unused, None), ("is_grads_batched", is_grads_batched, False),
                                ("materialize_grads", materialize_grads, False)):
        if value != default:
            kwargs[key] = value
    used = _meta.check_grad(outs, ins, allow_unused or materialize_grads, grad_outputs is not None)
    results = [Tensor._new(ctx) for _ in ins]
    op = {"op": "grad", "args": [_arg(outs, ctx), _arg(ins, ctx)], "out": [r._name for r in results]}
    if kwargs:
        op["kwargs"] = kwargs
    if not is_grad_enabled():
        op["no_grad"] = True
    index = ctx.record(op, tuple(results))
    if not allow_unused or materialize_grads:
        return tuple(results)
    if used is not None:  # the client's graph says which inputs are used: nothing to ask
        return tuple(r if u else None for r, u in zip(results, used))
    bound = set(ctx.flush()["ops"][index]["bound"])
    return tuple(r if r._name in bound else None for r in results)
