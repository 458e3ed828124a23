"""The one table of ops.

Two kinds of entries, in the spirit of PyTorch's ``derivatives.yaml``:

* **backward primitives** (``@vjp("MulBackward0", inputs=("self", "other"), saves=...)``): keyed by the
  torch ``grad_fn`` class name, i.e. one entry per overload. Each holds the VJP, written in engine ops so
  that it is differentiable again, the names of its differentiable inputs (the ``next_functions`` order)
  and which saved slot is needed by which input's gradient (torch saves ``self`` of ``x * c`` only when
  ``c`` requires grad).
* **public ops** (``@op("mul", tensors=("self", "other"))``): the torch function or method a program
  calls. It computes the forward with numpy, picks the primitive for the argument form
  (``x ** 2`` -> PowBackward0, ``x ** t`` -> PowBackward1) and calls ``record``.

The op catalog, program argument resolution and the op tests are generated from these tables.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .errors import TorchRuntimeError
from .grad_mode import _grad_enabled
from .journal import setattr_
from .node import Node, SavedTensor
from .tensor import Tensor
from .views import is_grad_leaf_view, view_grad_fn


@dataclass(frozen=True)
class Prim:
    name: str
    inputs: tuple[str, ...]
    vjp: Callable
    needed_by: dict          # saved slot -> tuple of input names whose gradient needs it (empty: always)
    n_outputs: int = 1
    # needed_by with input positions (edge indices) instead of names, for record's conditional saving
    needed_idx: dict = field(default_factory=dict, compare=False)


@dataclass
class OpSpec:
    name: str
    fn: Callable
    tensors: tuple[str, ...] = ()          # parameters that take a tensor (a name in a program)
    tensor_lists: tuple[str, ...] = ()     # parameters that take a list of tensors
    grad_fns: tuple[str, ...] = ()         # grad_fn names this op can produce
    differentiable: bool = True
    inplace: bool = False
    method: bool = True                    # also bound as a Tensor method
    family: str = ""
    doc: str = ""
    params: tuple = field(default_factory=tuple)
    aliases: tuple[str, ...] = ()


PRIMS: dict[str, Prim] = {}
_SUPPORTED = frozenset(np.dtype(t) for t in ("float32", "float64", "int64", "bool"))
OPS: dict[str, OpSpec] = {}


def vjp(name: str, inputs: tuple[str, ...], saves: dict | tuple = (), n_outputs: int = 1):
    """Register the VJP of a backward primitive. ``saves`` lists saved slots, or maps a slot to the inputs
    whose gradient needs it (the slot is then saved only if one of them requires grad)."""
    needed_by = dict(saves) if isinstance(saves, dict) else {s: () for s in saves}

    def deco(fn):
        if name in PRIMS:
            raise RuntimeError(f"duplicate primitive {name}")
        idx = {slot: tuple(inputs.index(u) for u in users) for slot, users in needed_by.items() if users}
        PRIMS[name] = Prim(name, tuple(inputs), fn, needed_by, n_outputs, idx)
        return fn

    return deco


def op(name: str, *, tensors: tuple[str, ...] = (), tensor_lists: tuple[str, ...] = (),
       grad_fns: tuple[str, ...] = (), differentiable: bool = True, inplace: bool = False,
       method: bool = True, aliases: tuple[str, ...] = (), family: str = ""):
    """Register a public op (torch function/method) under its torch name."""

    def deco(fn):
        sig = inspect.signature(fn)
        doc = (inspect.getdoc(fn) or "").strip().splitlines()
        spec = OpSpec(name=name, fn=fn, tensors=tuple(tensors), tensor_lists=tuple(tensor_lists),
                      grad_fns=tuple(grad_fns), differentiable=differentiable, inplace=inplace, method=method,
                      family=family or fn.__module__.rsplit(".", 1)[-1], doc=doc[0] if doc else "",
                      params=tuple(sig.parameters.values()), aliases=tuple(aliases))
        for n in (name, *aliases):
            if n in OPS:
                raise RuntimeError(f"duplicate op {n}")
            OPS[n] = spec
        return fn

    return deco


def _edge(t: Tensor | None):
    if t is None or not t.requires_grad:
        return (None, 0)
    fn = t.grad_fn if t._base is None else view_grad_fn(t)
    if fn is not None:
        return (fn, t.output_nr)
    return (accumulator(t), 0)


def accumulator(t: Tensor) -> Node | None:
    """The leaf's AccumulateGrad node: one shared node per leaf, as in torch. None for a view made under
    no_grad, whose requires_grad comes from its base (torch: no gradient accumulator)."""
    node = t._accumulator
    if node is None:
        if t._base is not None and is_grad_leaf_view(t):
            return None
        node = Node("AccumulateGrad", "AccumulateGrad", ())
        node.variable = t
        setattr_(t, "_accumulator", node)
    return node


def edge(t: Tensor | None):
    return _edge(t)


def needs_grad(*inputs) -> bool:
    """True when grad mode is on and some tensor input requires grad."""
    if not _grad_enabled.get():
        return False
    for t in inputs:
        if t is not None and t.requires_grad:
            return True
    return False


def record(prim_name: str, data, inputs: tuple, saved: dict | None = None):
    """Wrap forward output(s) in Tensor(s); when grad is needed, create the node.

    ``inputs`` are the primitive's differentiable inputs in edge order (Tensor or None for a number).
    ``saved`` maps slot -> value; a Tensor value becomes a SavedTensor, the string ``"result"`` stands
    for the (first) output. Slots whose gradient consumers need no grad are not saved (stored as None).
    Multi-output primitives take a tuple of arrays and return a tuple of Tensors.
    """
    multi = data.__class__ is tuple
    if not multi and data.dtype not in _SUPPORTED:  # a numpy promotion the engine does not model
        raise TorchRuntimeError(f"result dtype {data.dtype} is not supported (float32, float64, int64, bool)",
                                code="invalid_dtype")
    grad = False
    if _grad_enabled.get() and (multi or data.dtype.kind == "f"):  # int and bool results never require grad
        for t in inputs:
            if t is not None and t.requires_grad:
                grad = True
                break
    if not grad:
        if multi:
            return tuple(Tensor(d) for d in data)
        return Tensor(data)
    nexts = []
    meta = []
    for t in inputs:
        if t is None or not t.requires_grad:
            nexts.append((None, 0))
            meta.append(None)
        else:
            fn = t.grad_fn if t._base is None else view_grad_fn(t)
            nexts.append((fn, t.output_nr) if fn is not None else (accumulator(t), 0))
            d = t.data
            meta.append((d.shape, d.dtype))
    node = Node(prim_name, prim_name, tuple(nexts), None, tuple(meta), len(data) if multi else 1)
    if multi:
        outs = tuple(Tensor(d, True, node, i) for i, d in enumerate(data))
    else:
        outs = Tensor(data, True, node, 0)
    if saved:
        needed = PRIMS[prim_name].needed_idx
        s = node.saved
        for slot, value in saved.items():
            users = needed.get(slot)
            if users is not None:
                for i in users:
                    if nexts[i][0] is not None:
                        break
                else:
                    s[slot] = None
                    continue
            if isinstance(value, str):
                s[slot] = SavedTensor(outs[0] if multi else outs, is_output=True) if value == "result" else value
            elif isinstance(value, Tensor):
                s[slot] = SavedTensor(value, is_output=value.grad_fn is node)
            elif isinstance(value, list) and any(isinstance(x, Tensor) for x in value):
                s[slot] = [SavedTensor(x) if isinstance(x, Tensor) else x for x in value]  # e.g. indices
            else:
                s[slot] = value
    return outs


def op_catalog() -> list[dict]:
    """The op catalog served by ``GET /v1/ops``: one entry per op name (aliases listed with it)."""
    out = []
    seen = set()
    for _name, spec in sorted(OPS.items()):
        if id(spec) in seen:
            continue
        seen.add(id(spec))
        args = []
        for p in spec.params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                kind = "varargs" if p.kind == p.VAR_POSITIONAL else "kwargs"
                args.append({"name": p.name, "kind": kind, "tensor": p.name in spec.tensors, "required": False})
                continue
            entry = {"name": p.name, "tensor": p.name in spec.tensors or p.name in spec.tensor_lists,
                     "tensor_list": p.name in spec.tensor_lists, "required": p.default is p.empty}
            if p.default is not p.empty:
                entry["default"] = p.default if isinstance(p.default, (int, float, str, bool, type(None))) \
                    else repr(p.default)
            args.append(entry)
        out.append({"name": spec.name, "aliases": list(spec.aliases), "family": spec.family, "arguments": args,
                    "grad_fns": list(spec.grad_fns), "differentiable": spec.differentiable,
                    "inplace": spec.inplace, "method": spec.method, "doc": spec.doc})
    from .program import ACTIONS
    for a in ACTIONS:
        out.append({"name": a["name"], "aliases": [], "family": "autograd",
                    "arguments": [{"name": n, "tensor": n in ("tensors", "outputs", "inputs", "self", "gradient",
                                                              "grad_outputs", "grad"),
                                   "tensor_list": False, "required": n in ("self",)} for n in a["arguments"]],
                    "grad_fns": [], "differentiable": False, "inplace": False, "method": False, "doc": a["doc"]})
    return out
