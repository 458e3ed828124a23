"""The lazy Tensor: a handle to a named tensor of a server session, and ``call_op``, which records a call.

A handle knows its name, its context, what it shares memory with (``Storage``) and the last view of it the
server sent (valid while nothing recorded since may have changed it: an in-place op on its storage, a
backward for gradients, a failed request). Reading a value (``item``, ``tolist``, ``numpy``, ``repr``,
``bool``...) or metadata not known yet (``requires_grad``, ``grad_fn``, ``shape``...) sends what is
pending; ``backward`` sends too, so that its errors are raised at its line, as torch raises them.
"""

from __future__ import annotations

import base64
import builtins

import numpy as np

from gradserve.torch import _catalog, _context
from gradserve.torch._context import Context, Storage
from gradserve.torch._dtypes import Size, by_name
from gradserve.torch._dtypes import dtype as DType
from gradserve.torch._grad_mode import is_grad_enabled
from gradserve.torch._printing import format_tensor, tangent_str


class Tensor:
    """A handle to a tensor held by the server; behaves as ``torch.Tensor``."""

    __slots__ = ("_ctx", "_name", "_storage", "_shape", "_dtype", "_view", "_array", "_view_stamp", "_param",
                 "_known_grad", "_error", "_dual_tangent", "__weakref__")

    # ----- making handles -----------------------------------------------------------------------------
    @classmethod
    def _new(cls, ctx: Context, storage: Storage | None = None, name: str | None = None) -> Tensor:
        t = object.__new__(cls)
        t._ctx = ctx
        t._name = name or ctx.fresh_name()
        t._storage = storage or Storage()
        t._shape = t._dtype = t._view = t._array = t._view_stamp = t._known_grad = t._error = None
        t._dual_tangent = None  # (ctx.failures, the tangent's view or None) read inside a dual level
        t._param = False
        ctx.adopt(t)
        return t

    @classmethod
    def _bound_grad(cls, ctx: Context, owner: Tensor) -> Tensor:
        """Record ``g = owner.grad`` (a ``bind`` op) and return the handle ``g``."""
        g = cls._new(ctx, Storage(is_grad=True))
        ctx.record({"op": "bind", "args": [f"{owner._name}.grad"], "out": g._name}, (g,))
        return g

    def _know(self, **meta) -> None:
        """Metadata known without asking (a new leaf, a detach)."""
        self._view = {**(self._view if self._view_stamp == self._stamp() else {}), **meta}
        self._view_stamp = self._stamp()
        if meta.get("is_leaf") and meta.get("requires_grad"):
            self._param = True

    def _set_view(self, view: dict) -> None:
        self._view = view
        self._view_stamp = self._stamp()
        self._shape = Size(view["shape"])
        self._dtype = view["dtype"]
        self._array = view.get("data")  # decoded when read (_data)
        if view["is_leaf"] and view["requires_grad"]:
            self._param = True

    def _stamp(self) -> tuple:
        s, ctx = self._storage, self._ctx
        return (s.version, ctx.grad_epoch if s.is_grad else 0, ctx.failures)

    def _ref(self, ctx: Context) -> str:
        """This handle's name in an op recorded into ``ctx``."""
        if self._error is not None:
            raise self._error
        if ctx is not self._ctx:
            raise RuntimeError("gradserve: tensors of different sessions cannot be used in one op")
        return self._name

    def _mutated(self) -> None:
        self._storage.version += 1

    # ----- reading --------------------------------------------------------------------------------------
    def _fetch(self, level: str) -> dict:
        if self._error is not None:
            raise self._error
        view = self._ctx.flush({self._name: level}).get("tensors", {}).get(self._name)
        if view is None:
            raise self._error or RuntimeError(f"gradserve: {self._name} is not bound in the session")
        return self._view

    def _meta(self, key: str):
        if self._view_stamp != self._stamp() or key not in self._view:
            self._fetch("auto")
        return self._view[key]

    def _data(self) -> np.ndarray:
        if self._view_stamp != self._stamp() or self._array is None:
            self._fetch("full")
        if isinstance(self._array, dict):
            self._array = _decode(self._array)
        return self._array

    def _grad_known(self) -> bool:
        return self._known_grad is not None and self._known_grad[0] == self._ctx.grad_epoch

    @property
    def shape(self) -> Size:
        if self._shape is None:
            self._meta("shape")
        return self._shape

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return len(self.shape)

    ndim = property(dim)

    def numel(self) -> int:
        return self.shape.numel()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    @property
    def dtype(self):
        if self._dtype is None:
            self._meta("dtype")
        return by_name(self._dtype)

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def requires_grad(self) -> bool:
        return self._meta("requires_grad")

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.requires_grad_(value)

    @property
    def is_leaf(self) -> bool:
        return self._meta("is_leaf")

    @property
    def retains_grad(self) -> bool:
        return self._meta("retains_grad")

    @property
    def _version(self) -> int:
        return self._meta("version")

    @property
    def grad_fn(self):
        name = self._meta("grad_fn")
        return None if name is None else GradFn(name, self)

    def item(self):
        a = self._data()
        if a.size != 1:
            raise RuntimeError(f"a Tensor with {a.size} elements cannot be converted to Scalar")
        return a.reshape(()).item()

    def tolist(self):
        return self._data().tolist()

    def numpy(self) -> np.ndarray:
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() "
                               "instead.")
        return np.array(self._data())

    def __array__(self, dtype=None, copy=None):
        a = np.array(self._data())
        return a.astype(dtype) if dtype is not None else a

    def __bool__(self) -> bool:
        a = self._data()
        if a.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return builtins.bool(a.reshape(()).item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.is_floating_point:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __repr__(self) -> str:
        tangent = None
        if self._ctx.dual_depth:  # torch shows a dual tensor's tangent: asked for with the value
            self._fetch("full")
            known = self._dual_tangent
            view = known[1] if known is not None and known[0] == self._ctx.failures else None
            if view is not None:
                data = view.get("data")
                tangent = tangent_str(_decode(data) if isinstance(data, dict) else np.asarray(data), view["dtype"],
                                      view["grad_fn"], view["requires_grad"])
        a = self._data()
        return format_tensor(a, self._dtype, self._view["grad_fn"], self._view["requires_grad"], tangent)

    def __format__(self, spec: str) -> str:
        # torch: a 0-d Tensor (not a subclass) formats as its item, even with an empty spec
        if type(self) is Tensor and self.dim() == 0:
            return format(self.item(), spec)
        return format(repr(self), spec)

    __hash__ = object.__hash__

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __reduce__(self):
        raise TypeError("a gradserve tensor is a handle to a server session; send tensor.numpy() instead")

    # ----- autograd -------------------------------------------------------------------------------------
    @property
    def grad(self):
        """``x.grad``: None or the gradient tensor itself (a handle bound to it). Sends what is pending unless
        it is already known (the gradients of leaves come back with every request after a backward)."""
        if self._grad_known():
            return self._known_grad[1]
        ctx = self._ctx
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
        ctx = self._ctx
        ctx.record({"op": "set_grad", "args": [self._ref(ctx), None if value is None else value._ref(ctx)]})
        self._known_grad = (ctx.grad_epoch, value)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None) -> None:
        """``Tensor.backward``: recorded, then sent (a sync point: its errors are raised here)."""
        backward(self, gradient, retain_graph, create_graph, inputs)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        ctx = self._ctx
        ctx.record({"op": "requires_grad_", "args": [self._ref(ctx), requires_grad]})
        known_leaf = self._view_stamp == self._stamp() and self._view.get("is_leaf")
        self._mutated()
        if known_leaf:
            self._know(is_leaf=True, requires_grad=requires_grad, grad_fn=None)
        self._param = builtins.bool(known_leaf and requires_grad)
        return self

    def retain_grad(self) -> None:
        ctx = self._ctx
        ctx.record({"op": "retain_grad", "args": [self._ref(ctx)]})
        self._mutated()

    def detach(self) -> Tensor:
        return call_op("detach", (self,), {})

    @property
    def data(self) -> Tensor:
        return self.detach()

    @property
    def T(self) -> Tensor:  # noqa: N802 - torch's name
        """``x.T``: the dimensions reversed."""
        return call_op("permute", (self, list(range(self.dim() - 1, -1, -1))), {})

    def to(self, *args, **kwargs) -> Tensor:
        """``x.to(dtype)``; devices (``"cpu"``) are accepted and ignored: the server has one."""
        args = tuple(a for a in args if not isinstance(a, str))
        kwargs.pop("device", None)
        if not args and not kwargs:
            return self
        return call_op("to", (self, *args), kwargs)

    def cpu(self) -> Tensor:
        return self

    def __getattr__(self, name: str):
        if name.startswith("_"):  # not a catalog method (an unset slot, a protocol probe): no catalog fetch
            raise AttributeError(f"'Tensor' object has no attribute '{name}'")
        op = _catalog.methods().get(name)
        if op is None:
            raise AttributeError(f"'Tensor' object has no attribute '{name}'")
        return lambda *args, **kwargs: call_op(op, (self, *args), kwargs)

    # ----- operators --------------------------------------------------------------------------------------
    def __getitem__(self, key):
        return call_op("getitem", (self, _Index(key)), {})

    def __setitem__(self, key, value) -> None:
        call_op("setitem", (self, _Index(key), value), {})


for _dunder, _op in {"__add__": "add", "__radd__": "add", "__sub__": "sub", "__rsub__": "rsub",
                     "__mul__": "mul", "__rmul__": "mul", "__truediv__": "div", "__rtruediv__": "rtruediv",
                     "__pow__": "pow", "__rpow__": "rpow", "__matmul__": "matmul", "__rmatmul__": "rmatmul",
                     "__floordiv__": "floor_divide", "__eq__": "eq", "__ne__": "ne", "__lt__": "lt", "__le__": "le",
                     "__gt__": "gt", "__ge__": "ge", "__and__": "logical_and", "__or__": "logical_or",
                     "__xor__": "logical_xor", "__iadd__": "add_", "__isub__": "sub_", "__imul__": "mul_",
                     "__itruediv__": "div_", "__ipow__": "pow_"}.items():
    setattr(Tensor, _dunder, lambda self, other, _op=_op: call_op(_op, (self, other), {}))
for _dunder, _op in {"__neg__": "neg", "__abs__": "abs", "__invert__": "logical_not"}.items():
    setattr(Tensor, _dunder, lambda self, _op=_op: call_op(_op, (self,), {}))


def _compare_with_none(op: str, when_none: bool):
    """torch: ``t == None`` is False and ``t != None`` True (no op)."""
    def compare(self, other):
        return when_none if other is None else call_op(op, (self, other), {})
    return compare


Tensor.__eq__ = _compare_with_none("eq", False)
Tensor.__ne__ = _compare_with_none("ne", True)


class _Index:
    """An index argument (``x[...]``), encoded with the HTTP API's index rules."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key


_CPP_NODES = frozenset({"AccumulateGrad", "CopySlices", "CopyBackwards", "NotImplemented", "Identity", "Error"})


class GradFn:
    """``tensor.grad_fn``: torch's node class name; ``next_functions`` come from the graph endpoint."""

    def __init__(self, name: str, tensor: Tensor | None = None, node: dict | None = None, graph: dict | None = None):
        self._name = name
        self._tensor = tensor
        self._node = node
        self._graph = graph

    def name(self) -> str:
        # torch: nodes written in C++ carry their namespace
        return f"torch::autograd::{self._name}" if self._name in _CPP_NODES else self._name

    def __repr__(self) -> str:
        return f"<{self._name} object at {hex(id(self))}>"

    def _load(self) -> None:
        if self._node is None:
            ctx = self._tensor._ctx
            ctx.flush()
            graph = ctx.client.graph(ctx.session(), root=self._tensor._name)
            self._graph = {n["id"]: n for n in graph["nodes"]}
            self._node = self._graph[graph["roots"][self._tensor._name]]

    @property
    def next_functions(self) -> tuple:
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
        self._load()
        name = self._node.get("variable")
        return self._tensor._ctx.handle(name) if name and self._tensor is not None else None


# ----- recording calls ----------------------------------------------------------------------------------------
def context_of(values) -> Context:
    for v in values:
        if isinstance(v, Tensor):
            return v._ctx
        if isinstance(v, (list, tuple)):
            for x in v:
                if isinstance(x, Tensor):
                    return x._ctx
    return _context.current()


def call_op(name: str, args: tuple, kwargs: dict):
    """Record ``name(*args, **kwargs)`` and return what torch would: a handle, a tuple of handles, or the
    target itself for in-place ops. Only ops whose number of outputs depends on the data send at once."""
    entry = _catalog.catalog()[name]
    ctx = context_of((*args, *kwargs.values()))
    args = _catalog.pack_sizes(name, args)
    op = {"op": entry["name"], "args": [_arg(a, ctx) for a in args]}
    if kwargs:
        op["kwargs"] = {k: _arg(v, ctx) for k, v in kwargs.items()}
    if not is_grad_enabled():
        op["no_grad"] = True
    if entry["inplace"]:
        target = args[0] if args else kwargs.get("self")
        ctx.record(op)
        target._mutated()
        return target
    first = next((a for a in args if isinstance(a, Tensor)), None)
    storage = first._storage if entry["family"] == "shape" and first is not None else None
    base = entry["name"]
    if base in _catalog.VARIABLE_OUTPUTS:
        op["out"] = ctx.fresh_name()
        index = ctx.record(op)
        bound = ctx.flush()["ops"][index]["bound"]
        return tuple(Tensor._new(ctx, storage, name) for name in bound)
    rtype = _catalog.return_type(base)
    if rtype is not None:  # a named tuple of tensors (linalg.svd's U, S, Vh): one handle per field
        outs = tuple(Tensor._new(ctx, storage) for _ in rtype._fields)
        op["out"] = [t._name for t in outs]
        ctx.record(op, outs)
        return rtype(*outs)
    if base in _catalog.PAIRS and (base == "sort" or _has_dim(args, kwargs)):
        values, indices = Tensor._new(ctx, storage), Tensor._new(ctx)
        op["out"] = [values._name, indices._name]
        ctx.record(op, (values, indices))
        return _catalog.return_types[base](values, indices)
    out = Tensor._new(ctx, storage)
    op["out"] = out._name
    ctx.record(op, (out,))
    if base in _catalog.CHANGES_ARGUMENT:
        changed, given = _catalog.CHANGES_ARGUMENT[base]
        target = _catalog.argument(base, changed, args, kwargs)
        if isinstance(target, Tensor) and _catalog.argument(base, given, args, kwargs) is not None:
            target._mutated()
    if entry["family"] == "creation":  # a new leaf
        requires_grad = builtins.bool(_catalog.argument(base, "requires_grad", args, kwargs, False))
        out._know(is_leaf=True, requires_grad=requires_grad, grad_fn=None, retains_grad=False, version=0)
        out._known_grad = (ctx.grad_epoch, None)
        dtype = _catalog.argument(base, "dtype", args, kwargs)
        if isinstance(dtype, DType):
            out._dtype = dtype.name
    elif base == "detach":
        out._know(is_leaf=True, requires_grad=False, grad_fn=None)
        out._shape, out._dtype = first._shape, first._dtype
        out._known_grad = (ctx.grad_epoch, None)
    return out


def _has_dim(args: tuple, kwargs: dict) -> bool:
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    return dim is not None and not isinstance(dim, Tensor)


def _arg(value, ctx: Context):
    if isinstance(value, _Index):
        return _catalog.encode_index(value.key, ctx)
    return _catalog.encode(value, ctx)


def _decode(data) -> np.ndarray:
    """A base64 payload (what the recorder asks for) -> a read-only array."""
    raw = base64.b64decode(data["data"])
    return np.frombuffer(raw, dtype=np.dtype(data["dtype"]).newbyteorder("<")).reshape(data["shape"])


# ----- autograd entry points ---------------------------------------------------------------------------------
def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None) -> None:
    """``torch.autograd.backward``: recorded and sent at once, so that its errors are raised here."""
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
    ctx.record(op)
    ctx.grad_epoch += 1
    ctx.flush(deferrable=True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, allow_unused=None,
         is_grads_batched=False, materialize_grads=False) -> tuple:
    """``torch.autograd.grad``: recorded (sent at once only with ``allow_unused``, where None results
    depend on the graph)."""
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
    results = [Tensor._new(ctx) for _ in ins]
    op = {"op": "grad", "args": [_arg(outs, ctx), _arg(ins, ctx)], "out": [r._name for r in results]}
    if kwargs:
        op["kwargs"] = kwargs
    if not is_grad_enabled():
        op["no_grad"] = True
    index = ctx.record(op, tuple(results))
    if not allow_unused or materialize_grads:
        return tuple(results)
    bound = set(ctx.flush()["ops"][index]["bound"])
    return tuple(r if r._name in bound else None for r in results)
