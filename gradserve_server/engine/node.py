"""Graph nodes (torch's ``grad_fn`` objects) and saved-value slots.

A node is plain data: the torch class name (``MulBackward0``), the primitive whose VJP it runs, its
``next_functions`` edges, the values it saved (tensor slots and plain attributes, named as torch names
them without the ``_saved_`` prefix) and the shape/dtype of each input. No closures: the VJP is looked up
in the primitive table by name, so a graph can be serialised and restored.
"""

from __future__ import annotations

import contextvars
import sys
from types import ModuleType
from weakref import ref as _weakref

from .dtypes import _FROM_NP, type_string
from .dual import _level
from .errors import VERSION_HINT, GraphFreedError, VersionMismatchError
from .grad_mode import _grad_enabled
from .journal import _journal

#: whether the running backward frees the graph as it goes (no retain_graph): torch releases each node
#: after running it, the engine only at the end (a failed pass changes nothing); version errors read it
_freeing: contextvars.ContextVar[bool] = contextvars.ContextVar("gradserve_freeing", default=False)

#: the Tensor class, for a saved output rebuilt on unpack: a slot tensor.py fills at import (it imports this
#: module for Node)
tensor_class = None


class Prim:
    """A primitive: one kind of autograd node (torch's ``grad_fn`` class, ``MulBackward0``). Its name is written
    once, where it is declared (``registry.vjp("MulBackward0", ...)``, or ``declare`` for a node without a
    VJP); every other place holds the handle, ``P.MulBackward0``: the op that records it, its forward formula
    and batching rules, an op's ``grad_fns``. The handle carries what the backward pass reads of it: its
    differentiable inputs, its VJP, which input's gradient needs which saved slot, its number of outputs, the
    name of the one node torch shows for its double backward, and whether torch writes it in C++."""

    __slots__ = ("name", "inputs", "vjp", "needed_by", "n_outputs", "needed_idx", "double_backward",
                 "double_backward_zeros", "cpp", "declared", "module")

    def __init__(self, name: str, inputs: tuple = (), vjp=None, needed_by: dict | None = None, n_outputs: int = 1,
                 needed_idx: dict | None = None):
        self.name = name
        self.inputs = inputs
        self.vjp = vjp
        self.needed_by = needed_by if needed_by is not None else {}  # saved slot -> input names needing it
        self.n_outputs = n_outputs
        self.needed_idx = needed_idx if needed_idx is not None else {}  # the same by input position
        self.double_backward = ""          # torch's one node for a gradient of it under create_graph, else ""
        self.double_backward_zeros = True  # that node gives zeros (not None) for an input it does not use
        self.cpp = False                   # torch's class is C++-defined: named torch::autograd::<name>
        self.declared = False
        self.module = ""                   # the module that declares it (the one place its name is written)

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


def _undeclared(name: str) -> Prim:
    """``P.<name>`` before its declaration ran (a reference above it, or from a module imported first): the
    handle, which the declaration fills. A handle never declared fails the one-place test."""
    if not name[:1].isupper():  # a grad_fn name is a class name; anything else is a question about the module
        raise AttributeError(name)
    p = Prim(name)
    setattr(P, name, p)
    return p


#: every primitive by its grad_fn name (``P.MulBackward0``): the handles. A module object, so that reading a
#: handle costs what reading a module global does
P = ModuleType("gradserve_server.engine.node.P", "The primitives by grad_fn name, filled by their declarations.")
P.__getattr__ = _undeclared


def declare(name: str, *, cpp: bool = False, module: str = "") -> Prim:
    """Declare node kind ``name`` once and return its handle: a primitive (``registry.vjp`` declares those with
    a VJP through this) or a name torch shows for a node another primitive computes."""
    p = getattr(P, name)
    if p.declared:
        raise RuntimeError(f"duplicate primitive {name}")
    p.declared = True
    p.module = module or sys._getframe(1).f_globals.get("__name__", "")
    if cpp:
        p.cpp = True
        _CPP_NODES.add(name)
    return p


#: node kinds whose torch class is C++-defined (declared with ``cpp=True``)
_CPP_NODES: set[str] = set()
#: the leaf's node (torch's AccumulateGrad): no VJP, the backward pass writes the leaf's ``.grad``
ACCUMULATE_GRAD = declare("AccumulateGrad", cpp=True)


class SavedTensor:
    """A tensor slot of a node: the tensor, the version it had when saved, and whether it is the node's own
    output. ``tensor is None`` once freed by a backward without ``retain_graph``.

    A node's own output (``exp``'s result...) is held as torch's SavedVariable holds it: its data, version
    counter and output number, plus a weak reference to the tensor object. Holding the tensor itself would
    make a cycle (tensor -> grad_fn -> saved -> tensor), so a dropped graph would wait for the cycle
    collector. While the tensor lives, ``tensor`` gives that very object, and so does ``unpack`` with grad mode
    off (a backward without create_graph only reads its data); otherwise ``unpack`` gives, as torch's does, a new
    tensor over the same data and version counter whose grad_fn is the unpacking node: under create_graph the
    nodes built on it keep naming that node after an in-place op gives the tensor itself another history."""

    __slots__ = ("_tensor", "version", "is_output", "shape", "dtype", "_ref", "_data", "_vc", "_nr", "_rg",
                 "view_fn")

    def __init__(self, tensor, is_output: bool = False):
        data = tensor.data
        self.version = tensor._vc[0]
        self.is_output = is_output
        self.shape = data.shape
        self.dtype = _FROM_NP[data.dtype]
        if is_output:
            self._tensor = None
            self._ref = _weakref(tensor)
            self._data = data
            self._vc = tensor._vc
            self._nr = tensor.output_nr
            self._rg = tensor._requires_grad
        else:
            self._tensor = tensor
            self._data = None

    @property
    def tensor(self):
        if not self.is_output:
            return self._tensor
        if self._data is None:
            return None
        t = self._ref()
        return t if t is not None else self._rebuild(None)

    @tensor.setter
    def tensor(self, t) -> None:
        if t is None:
            self._tensor = self._data = None
        elif getattr(self, "is_output", False):
            self._tensor = None
            self._ref = _weakref(t)
            self._data = t.data
            self._vc = t._vc
            self._nr = t.output_nr
            self._rg = t._requires_grad
        else:
            self._tensor = t
            self._data = None

    def live(self):
        """The saved tensor object itself while it exists (no rebuilt stand-in), else None."""
        if not self.is_output:
            return self._tensor
        return None if self._data is None else self._ref()

    @property
    def freed(self) -> bool:
        return (self._data if self.is_output else self._tensor) is None

    def _rebuild(self, node, live=None):
        t = tensor_class(self._data, self._rg, node, self._nr, self._vc)
        if live is not None and live._fw_grad is not None:  # forward over reverse: the tangent it carries
            t._fw_grad = live._fw_grad
            level = _level.get()
            if level is not None:
                level.tensors.append(t)  # (cleared with the level, as every tangent is)
        return t

    def unpack(self, node: Node):
        if self.is_output:
            if self._data is None:
                raise GraphFreedError()
            t = self._ref()
            if t is None or _grad_enabled.get():
                t = self._rebuild(node, t)
        else:
            t = self._tensor
            if t is None:
                raise GraphFreedError()
        if t._vc[0] != self.version:
            raise VersionMismatchError(_version_message(t, self, node))
        return t


def short_name(name: str) -> str:
    """How torch's messages name a backward node: ``PowBackward0`` -> ``Pow``, ``PowBackward1`` -> ``Pow1``; a
    node written in C++ by its qualified class name (``torch::autograd::CopyBackwards``)."""
    if name in _CPP_NODES:
        return "torch::autograd::" + name
    return name[:-9] if name.endswith("Backward0") else name.replace("Backward", "")


def _version_message(t, saved: SavedTensor, node: Node) -> str:
    shape = "[" + ", ".join(str(s) for s in t.data.shape) + "]"
    where = ""
    producer = node if saved.is_output else t.grad_fn
    view_fn = getattr(saved, "view_fn", None)
    view_fn = view_fn() if view_fn is not None else None
    if view_fn is not None and (t._grad_fn is view_fn or not _freeing.get()):
        # torch's SavedVariable of an in-place op's output on a view names the view's grad_fn at save time
        # (AsStridedBackward0) while that node lives: held by the view, or by a later in-place op's node on
        # it, which a backward without retain_graph has released by the time it reaches this one
        producer = view_fn
    if producer is not None:
        # torch's SavedVariable names the output number it recorded when saving (an output saved by its
        # own node keeps it after an in-place op gave the tensor another history)
        nr = saved._nr if saved.is_output else t.output_nr
        where = f", which is output {nr} of {short_name(producer.name)},"
    return (f"one of the variables needed for gradient computation has been modified by an inplace "
            f"operation: [{type_string(t.dtype)} {shape}]{where} is at version {t._vc[0]}; "
            f"expected version {saved.version} instead. {VERSION_HINT}")


def node_of(prim: Prim, next_functions: tuple, saved: dict | None = None, input_meta: tuple = (),
            n_outputs: int = 1) -> Node:
    """A node of primitive ``prim`` (made directly, not by ``registry.record``: views, in-place ops, backward)."""
    return Node(prim.name, prim.name, next_functions, saved, input_meta, n_outputs)


class Node:
    """A backward function. ``saved`` maps torch slot names (``self``, ``other``, ``result``, ``dim``) to
    ``SavedTensor`` objects, ``None`` (slot not saved) or plain values."""

    __slots__ = ("name", "prim", "next_functions", "saved", "input_meta", "n_outputs", "retained",
                 "variable", "_needs", "__weakref__")

    def __init__(self, name: str, prim: str, next_functions: tuple, saved: dict | None = None,
                 input_meta: tuple = (), n_outputs: int = 1):
        self.name = name
        self.prim = prim
        self.next_functions = next_functions
        self.saved = saved if saved is not None else {}
        self.input_meta = input_meta      # per edge: (shape, dtype) of the input, or None
        self.n_outputs = n_outputs
        self.retained = None              # {output_nr: Tensor} for retain_grad() on this node's outputs
        self.variable = None              # AccumulateGrad only: the leaf
        self._needs = None                # which inputs need a gradient (record() sets it; else on first use)

    @property
    def needs(self) -> tuple:
        """Per input edge: does it need a gradient (an edge to a function or an accumulator)."""
        n = self._needs
        if n is None:
            n = self._needs = tuple(e[0] is not None for e in self.next_functions)
        return n

    def __repr__(self) -> str:
        return f"<{self.name} object>"

    # torch's grad_fn.name(): C++-defined nodes carry their namespace
    def name_(self) -> str:
        return f"torch::autograd::{self.name}" if self.name in _CPP_NODES else self.name

    def saved_tensor_slots(self) -> list[str]:
        return [k for k, v in self.saved.items() if isinstance(v, SavedTensor)
                or (isinstance(v, list) and any(isinstance(x, SavedTensor) for x in v))]

    def holds_saved_tensors(self) -> bool:
        for v in self.saved.values():
            if isinstance(v, SavedTensor) and not v.freed:
                return True
            if isinstance(v, list) and any(isinstance(x, SavedTensor) and not x.freed for x in v):
                return True
            if isinstance(v, Node) and v.holds_saved_tensors():
                return True
        return False

    def unpack_all(self) -> None:
        """Check every saved tensor before running the VJP, as torch unpacks all saved variables: a freed
        or modified slot fails even if this VJP would not read it."""
        for v in self.saved.values():
            if isinstance(v, SavedTensor):
                v.unpack(self)
            elif isinstance(v, list):
                for x in v:
                    if isinstance(x, SavedTensor):
                        x.unpack(self)

    def release(self) -> None:
        """Free saved tensors, as torch does after a backward without retain_graph."""
        release_all((self,))

    def get_saved(self, slot: str):
        """Read ``grad_fn._saved_<slot>`` as torch does: freed tensors raise the freed-graph error."""
        v = self.saved[slot]
        if isinstance(v, SavedTensor):
            return v.unpack(self)
        return v


def release_all(nodes) -> None:
    """``release()`` of each node; the journal sees every freed slot."""
    j = _journal.get()
    if j is not None:
        # the freed tensor slots' fields, as one journal entry (kind 3: no tuple per slot), restored by
        # putting the two fields back
        slots, tensors, datas = [], [], []
        j.append((3, slots, tensors, datas))
    for node in nodes:
        saved = node.saved
        if not saved:
            continue
        other = False
        for v in saved.values():
            if v.__class__ is SavedTensor:
                # not freed: an output slot holds its data, another slot its tensor (the other field is None)
                if v._data is not None or v._tensor is not None:
                    if j is not None:
                        slots.append(v)
                        tensors.append(v._tensor)
                        datas.append(v._data)
                    v._tensor = v._data = None
            elif isinstance(v, (list, Node)):
                other = True
        if other:  # lists of saved tensors, a node: the rare slots, in a second pass
            _release_other(node)


def _release_other(node: Node) -> None:
    """The slots of ``node`` other than plain saved tensors: lists of them (indices), a node (CopySlices)."""
    j = _journal.get()
    for k, v in list(node.saved.items()):
        if isinstance(v, list):
            for x in v:
                if isinstance(x, SavedTensor) and not x.freed:
                    if j is not None:
                        j.append((0, x, "tensor", x.tensor))
                    x.tensor = None
        elif isinstance(v, Node):  # CopySlices keeps the in-place op's node and drops it (torch: fn_ = nullptr)
            if node.prim == P.CopySlices.name:  # a fused double-backward node only refers to its formula's node
                v.release()
            if j is not None:
                j.append((1, node.saved, k, v))
            node.saved[k] = None


class Ctx:
    """What a VJP sees: saved values by attribute (``ctx.self``) and which inputs need a gradient.

    Every saved tensor is unpacked when the context is made, as torch unpacks all saved variables before
    running a backward function: a freed or modified slot fails even if this VJP would not read it."""

    def __init__(self, node: Node):
        d = self.__dict__
        for slot, v in node.saved.items():
            if v.__class__ is SavedTensor:
                # SavedTensor.unpack's common case inline (the saved tensor alive, unmodified); anything
                # else (an output whose tensor is gone, a freed or modified slot: its error) through unpack
                t = v._tensor
                if t is None and v.is_output and v._data is not None and not _grad_enabled.get():
                    t = v._ref()
                v = t if t is not None and t._vc[0] == v.version else v.unpack(node)
            elif isinstance(v, list):
                v = [x.unpack(node) if isinstance(x, SavedTensor) else x for x in v]
            d[slot] = v
        d["node"] = node
        needs = node._needs
        d["needs"] = needs if needs is not None else node.needs
