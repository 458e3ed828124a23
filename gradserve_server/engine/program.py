"""Run a JSON-shaped op list against a namespace of named tensors, atomically.

An op is ``{"op": name, "args": [...], "kwargs": {...}, "out": name | [names] | None, "no_grad": bool}``.
``op`` is a torch function or method name from the op table (``add``, ``pow``, ``sum``, ``add_``...) or
an autograd action (``backward``, ``grad``, ``retain_grad``, ``requires_grad_``, ``zero_grad``,
``set_grad``) or a name action (``bind``: ``g = x.grad``; ``del``: ``del a, b``). The op's signature
says which arguments are tensors: there a string names a tensor (or ``"w.grad"`` its gradient) and a
number is a scalar operand; elsewhere values pass through as given.
Names are rebound like Python variables.

All or nothing: the ops run under an undo journal and on a copy of the namespace; if any op fails, every
mutation is undone, no name is bound, and the error carries the op's index.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from time import monotonic as _monotonic
from types import SimpleNamespace

import numpy as np

from . import autograd, custom_function
from .budget import Budget, Control, current_budget
from .errors import (
    EngineError,
    InvalidArgumentError,
    LimitExceededError,
    TorchIndexError,
    TorchRuntimeError,
    TorchTypeError,
    TorchValueError,
    UnknownOpError,
    UnknownTensorError,
)
from .forward_ad import program_dual_scope
from .functional import TRANSFORMS, FunctionDef, plain_copy
from .generator import Generator, Generators
from .generator import reset as reset_generators
from .generator import running as running_generators
from .generator import use as use_generators
from .grad_mode import Limits, WarningSink, _grad_enabled, set_grad_enabled
from .journal import Journal
from .kernel import active as plan_recorder
from .kernel import kcall, snapshot
from .node import Node, SavedTensor
from .registry import JVPS, OPS, OpSpec, public_names, recorded_grad_fns
from .signature import call_facts, call_form, check_call
from .tensor import Tensor
from .torch_args import signature_json

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_SLICE_RE = re.compile(r"^\s*(-?\d+)?\s*:\s*(-?\d+)?\s*(?::\s*(-?\d+)?\s*)?$")


class State:
    """A session's namespace: named tensors plus what persists between programs."""

    def __init__(self):
        self.tensors: dict[str, Tensor] = {}
        self.functions: dict[str, FunctionDef] = {}  # named sub-programs (``function`` op), plain data
        self.backward_passes = 0
        self.warned: set[str] = set()   # warn-once keys already emitted in this session
        self.counter = 0                # for fresh names
        self.held_bytes: int | None = None  # bytes of arrays after the last run (None: not measured yet)
        # torch's CPU generators: the default one (None until first used: torch's default seed) and the
        # ``torch.Generator()`` objects the session made, by name; plain data (engine.generator)
        self.generator: Generator | None = None
        self.generators: dict[str, Generator] = {}

    def resolve(self, ref: str):
        """``"x"`` -> the tensor, ``"x.grad"`` -> its gradient (None before a backward reaches it)."""
        return _lookup(self.tensors, ref)

    def stats(self) -> tuple[int, int]:
        """(graph nodes, bytes of distinct arrays) reachable from the named tensors."""
        return graph_stats(self.tensors.values())

    def node_count(self) -> int:
        return self.stats()[0]

    def nbytes(self) -> int:
        return self.stats()[1]


def _lookup(ns: dict, ref):
    if not isinstance(ref, str):
        raise InvalidArgumentError(f"expected a tensor name, got {type(ref).__name__}")
    base, dot, attr = ref.partition(".")
    if dot and attr != "grad":
        raise UnknownTensorError(f"unknown tensor reference {ref!r}: only NAME and NAME.grad are addressable")
    t = ns.get(base)
    if t is None:
        raise UnknownTensorError(f"name {base!r} is not defined")
    if dot:
        return t.grad
    return t


def resolve_quietly(ns: dict, ref: str):
    """For reports: ``ref``'s tensor, or None when ``ref`` is not bound (or is an unset ``x.grad``); reading
    ``x.grad`` of a non-leaf here does not give torch's warning (a program reading it warns, as torch does)."""
    base, dot, attr = ref.partition(".")
    t = ns.get(base)
    if t is None or not dot:
        return t
    if attr != "grad":
        raise UnknownTensorError(f"unknown tensor reference {ref!r}: only NAME and NAME.grad are addressable")
    return t._grad


def graph_stats(roots) -> tuple[int, int]:
    """(graph nodes, bytes of distinct arrays) reachable from the tensors ``roots``."""
    nodes, arrays = reachable(roots)
    return nodes, sum(arrays.values())


def reachable(roots) -> tuple[int, dict[int, int]]:
    """(graph nodes, {id(array owning memory): nbytes}) reachable from the tensors ``roots``: their data,
    gradients, graphs and saved tensors."""
    # sets of the objects themselves (Tensor and Node hash by identity), no id() call per visit; the sets'
    # and stacks' methods bound once (a session's end-of-run check walks every tensor and node it holds)
    seen_nodes: set = set()
    seen_arrays: dict[int, int] = {}
    seen_t: set = set()
    stack_t = list(roots)
    stack_n: list[Node] = []
    ndarray = np.ndarray
    saved_tensor = SavedTensor

    add_node, push_node, pop_node = seen_nodes.add, stack_n.append, stack_n.pop
    add_t, push_t, pop_t = seen_t.add, stack_t.append, stack_t.pop
    while stack_t or stack_n:
        while stack_t:
            t = pop_t()
            add_t(t)
            a = t.data
            base = a.base
            if base is None or base.__class__ is not ndarray:
                base = a
            seen_arrays[id(base)] = base.nbytes
            g = t._grad
            if g is not None and g not in seen_t:
                push_t(g)
            fn = t._grad_fn if t._base is None else t.grad_fn
            if fn is not None and fn not in seen_nodes:
                add_node(fn)
                push_node(fn)
        while stack_n:
            n = pop_node()
            for c, _ in n.next_functions:
                if c is not None and c not in seen_nodes:
                    add_node(c)
                    push_node(c)
            saved = n.saved
            if saved:
                for v in saved.values():
                    if v.__class__ is saved_tensor:
                        # SavedTensor.freed and .live(), inline
                        if v.is_output:
                            a = v._data
                            if a is None:
                                continue
                            live = v._ref()
                            if live is None:  # a node's output nothing else holds: its saved data
                                base = a.base
                                if base is None or base.__class__ is not ndarray:
                                    base = a
                                seen_arrays[id(base)] = base.nbytes
                                continue
                        else:
                            live = v._tensor
                            if live is None:
                                continue
                        if live not in seen_t:
                            add_t(live)
                            push_t(live)
                    elif isinstance(v, Node) and v not in seen_nodes:
                        add_node(v)
                        push_node(v)
            t = n.variable
            if t is not None and t not in seen_t:
                add_t(t)
                push_t(t)
    return len(seen_nodes), seen_arrays


@dataclass(slots=True)
class OpOutcome:
    index: int
    op: str
    bound: list[str]


@dataclass(slots=True)
class GradEntry:
    name: str
    contribution: Tensor
    grad: Tensor | None
    grad_accumulations: int


@dataclass(slots=True)
class AutogradRecord:
    op_index: int
    op: str
    entries: list[GradEntry]


@dataclass
class ProgramResult:
    ops: list[OpOutcome] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    autograd: list[AutogradRecord] = field(default_factory=list)
    records: dict[str, list] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    returned: dict[str, object] = field(default_factory=dict)
    iterations: int = 1   # how many times the list ran (fewer than repeat when `until` stopped it)
    route = None  # (not a field) the route a planned one-shot run took (``engine.trace.route``; ``plan.run_planned``)


def _snapshot(t: Tensor | None) -> Tensor | None:
    """A frozen copy for reporting (later in-place ops must not change what a response shows)."""
    if t is None:
        return None
    c = Tensor(kcall(snapshot, t.data), t.requires_grad, t.grad_fn, t.output_nr)
    return c


def _fingerprint(t: Tensor) -> tuple:
    g = t._grad
    return (id(t), t._vc[0], id(t._grad_fn), t.requires_grad, t.retains_grad, id(g),
            g._vc[0] if g is not None else None, t.grad_accumulations)


class _Runner:
    def __init__(self, state: State, ns: dict, sink: WarningSink, result: ProgramResult,
                 functions: dict | None = None):
        self.state = state
        self.ns = ns
        self.functions = dict(state.functions) if functions is None else functions
        self.sink = sink
        self.result = result
        self.counter = state.counter
        self.backward_passes = 0
        #: indices of this runner's ops whose results the response will surely show (``_surely_shown``; a
        #: function body's runner: none)
        self.shown: frozenset[int] = frozenset()

    # ----- argument resolution -------------------------------------------------------------------------
    def tensor_arg(self, v):
        if isinstance(v, str):
            return _lookup(self.ns, v)
        return v

    def tensor_list(self, v):
        if isinstance(v, str):
            return _lookup(self.ns, v)
        if isinstance(v, (list, tuple)):
            return self._tensors_of(v)[0]
        return v

    def _tensors_of(self, v) -> tuple[list, bool]:
        """A list's items as tensors (a bound name's tensor; anything else converted as ``tensor_arg`` does),
        and whether one may be a view (a plain tensor needs no view check)."""
        ns = self.ns
        out = []
        viewed = False
        for x in v:
            t = ns.get(x) if x.__class__ is str else None
            if t is None:
                viewed = True
                t = self.tensor_arg(x)
            elif t._base is not None:
                viewed = True
            out.append(t)
        return out, viewed

    def index_arg(self, v):
        """JSON index: int, null (None), "..." (Ellipsis), "a:b:c" slices, {"slice": [a, b, c]}, a tensor name,
        a nested list of ints (an int-list index); a list at the top level is a tuple of per-dim items."""
        def item(x):
            if x is None or isinstance(x, (bool, int)):
                return x
            if isinstance(x, float):
                raise TorchIndexError("only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                                      "Variables are valid indices (got float)", code="invalid_index")
            if isinstance(x, str):
                if x == "...":
                    return Ellipsis
                m = _SLICE_RE.match(x)
                if m:
                    return slice(*(int(g) if g is not None else None for g in m.groups()))
                return _lookup(self.ns, x)
            if isinstance(x, dict) and "slice" in x and isinstance(x["slice"], list) and len(x["slice"]) <= 3:
                return slice(*x["slice"])
            if isinstance(x, list):
                return x
            raise TorchIndexError(f"invalid index item {x!r}", code="invalid_index")

        if isinstance(v, list):
            return tuple(item(x) for x in v)
        return item(v)

    def bind_args(self, spec, args: list, kwargs: dict, name: str | None = None):
        a, k, _ = self._bind(spec, args, kwargs, name or spec.name)
        return a, k

    def _bind(self, spec, args: list, kwargs: dict, name: str):
        """(args, kwargs, whether a tensor argument may be a view): names converted, the call checked."""
        _, layout, method, facts = _op_layout(spec, name)
        out_args, out_kwargs, viewed = self._convert_args(spec, args, kwargs, layout)
        if method:  # p.sub_(p.grad): a Tensor method, self not counted in positions
            if not out_args:
                raise TorchTypeError(f"unbound method TensorBase.{name}() needs an argument", code="invalid_argument")
            if not isinstance(out_args[0], Tensor):
                got = type(out_args[0]).__name__
                raise TorchTypeError(f"descriptor '{name}' for 'torch._C.TensorBase' objects doesn't apply to a "
                                     f"'{got}' object", code="invalid_argument")
            check_call(spec, name, out_args[1:], out_kwargs, method=True, facts=facts)
        else:
            check_call(spec, name, out_args, out_kwargs, method=False, facts=facts)
        return out_args, out_kwargs, viewed

    def _convert_args(self, spec, args: list, kwargs: dict, layout: tuple | None = None):
        """Names to tensors where the signature takes a tensor (the per-parameter kinds are computed once per
        op, see ``_param_layout``); other values pass through for the signature check. Also says whether any
        argument may hold a view (a tensor with a base, or a value converted otherwise)."""
        pos_kinds, varargs_tensor, kinds, vname = layout if layout is not None else _param_layout(spec)
        ns = self.ns
        out_args = []
        viewed = False
        npos = len(pos_kinds)
        for i, a in enumerate(args):
            if i < npos:
                k = pos_kinds[i]
                if k == _PLAIN:
                    if a.__class__ not in _JSON_SCALARS:  # a list (or a Tensor from a Python caller)
                        viewed = True
                    out_args.append(a)
                elif k == _TENSOR and a.__class__ is str:
                    t = ns.get(a)  # a bound name (names have no '.'); anything else the full lookup
                    if t is None:
                        t = _lookup(ns, a)
                    if t is not None and t._base is not None:
                        viewed = True
                    out_args.append(t)
                elif k == _TENSOR:  # a number (a scalar operand) passes through
                    if a.__class__ not in _JSON_SCALARS:
                        viewed = True
                    out_args.append(a)
                elif k == _TENSOR_LIST and a.__class__ is list:
                    items, may_view = self._tensors_of(a)
                    viewed = viewed or may_view
                    out_args.append(items)
                else:
                    viewed = True
                    out_args.append(self._convert(k, a))
            elif varargs_tensor:
                # tensor varargs (einsum's operands): each a name, or one list of names
                viewed = True
                out_args.append(self.tensor_list(a) if isinstance(a, list) else self.tensor_arg(a))
            else:  # other varargs, or one too many: the signature check names it the torch way
                if a.__class__ not in _JSON_SCALARS:
                    viewed = True
                out_args.append(a)
        if not kwargs:
            return out_args, {}, viewed
        out_kwargs = {}
        for k, v in kwargs.items():
            kind = kinds.get(k)
            if kind is None or k == vname:
                out_kwargs[k] = v  # refused by the signature check with torch's message
                viewed = True
                continue
            if kind == _PLAIN:
                if v.__class__ not in _JSON_SCALARS:
                    viewed = True
                out_kwargs[k] = v
            else:
                viewed = True
                out_kwargs[k] = self._convert(kind, v)
        return out_args, out_kwargs, viewed

    def _convert(self, kind: int, value):
        if kind == _TENSOR:
            return self.tensor_arg(value)
        if kind == _TENSOR_LIST:
            return self.tensor_list(value)
        return self.index_arg(value)

    # ----- binding results --------------------------------------------------------------------------------
    def fresh(self) -> str:
        while True:
            self.counter += 1
            name = f"t{self.counter}"
            if name not in self.ns:
                return name

    def bind(self, out, value) -> list[str]:
        if value is None:
            return []
        if isinstance(value, Tensor):
            if out is None:
                if any(t is value for t in self.ns.values()):
                    return []
                out = self.fresh()
            if isinstance(out, list):
                if len(out) != 1:
                    raise InvalidArgumentError(f"the op returned 1 tensor but out names {len(out)}",
                                               code="invalid_out")
                out = out[0]
            self.ns[out] = value
            self.functions.pop(out, None)
            return [out]
        if isinstance(value, tuple):
            items = list(value)
            if len(items) == 1 and isinstance(out, str):
                return self.bind(out, items[0])  # (g,) = torch.autograd.grad(y, x): one name, one tensor
            if isinstance(out, list):
                if len(out) > len(items):
                    raise InvalidArgumentError(f"the op returned {len(items)} values but out names {len(out)}",
                                               code="invalid_out")
                names = out
            else:
                stem = out if out is not None else self.fresh()
                names = [f"{stem}_{i}" for i in range(len(items))]
            bound = []
            for n, v in zip(names, items):
                if isinstance(v, Tensor):
                    self.ns[n] = v
                    self.functions.pop(n, None)
                    bound.append(n)
            return bound
        if isinstance(value, (bool, int, float)):  # torch.allclose's bool: a 0-d tensor on the wire, never lost
            return self.bind(out, Tensor(np.asarray(value)))
        return []

    def names_of(self, t: Tensor) -> str | None:
        for n, v in self.ns.items():
            if v is t:
                return n
        return None

    # ----- autograd actions -------------------------------------------------------------------------------
    def do_backward(self, index, args, kwargs):
        kw = dict(kwargs)
        tensors = args[0] if args else kw.pop("tensors", None)
        if len(args) > 1:
            kw.setdefault("gradient", args[1])
        gradient = kw.pop("gradient", kw.pop("grad_tensors", None))
        retain_graph = kw.pop("retain_graph", None)
        create_graph = kw.pop("create_graph", False)
        inputs = kw.pop("inputs", None)
        if kw:
            raise TorchTypeError(f"backward() got an unexpected keyword argument '{next(iter(kw))}'",
                                 code="invalid_argument")
        tensors = self.tensor_list(tensors)
        if isinstance(gradient, list):
            gradient = [self.tensor_arg(g) for g in gradient]
        else:
            gradient = self.tensor_arg(gradient)
        if inputs is not None:
            inputs = self.tensor_list(inputs)
        contrib = autograd.backward(tensors, gradient, retain_graph, bool(create_graph), inputs)
        self.backward_passes += 1
        self.report(index, "backward", contrib)

    def report(self, index, op, contrib: dict):
        """The pass's record: each named tensor it reached, with frozen copies (``_snapshot``) of its
        contribution and of its ``.grad`` as they are now (later in-place ops must not change the report)."""
        entries = []
        append = entries.append
        many = len(contrib) > 4
        if many:
            # id(tensor) -> its first name (names_of's answer) for the pass's tensors only: one pass over the
            # namespace (in order, so the first name is kept) that stops once every one of them is named
            names = {}
            want = {id(t) for t in contrib}
            for n, v in self.ns.items():
                i = id(v)
                if i in want:
                    want.remove(i)
                    names[i] = n
                    if not want:
                        break
        # _snapshot, inline: a copy per entry is made through kcall (a plan being recorded notes it)
        copy = (lambda a: np.array(a, copy=True)) if plan_recorder() is None else (lambda a: kcall(snapshot, a))
        for t, g in contrib.items():
            name = names.get(id(t)) if many else self.names_of(t)
            if name is None:
                continue
            grad = t._grad
            rg, fn = g.requires_grad, g.grad_fn
            c = Tensor(copy(g.data), rg, fn, g.output_nr)
            if grad is None:
                append(GradEntry(name, c, None, t.grad_accumulations))
            elif grad.data is g.data:  # the first pass's .grad is its contribution: one copy
                if grad is g or (grad.requires_grad is rg and grad.grad_fn is fn and grad.output_nr == g.output_nr):
                    # the same array with the same flags: one frozen tensor shows both (nothing writes to it)
                    append(GradEntry(name, c, c, t.grad_accumulations))
                else:
                    append(GradEntry(name, c, Tensor(c.data, grad.requires_grad, grad.grad_fn, grad.output_nr),
                                     t.grad_accumulations))
            else:
                append(GradEntry(name, c, Tensor(copy(grad.data), grad.requires_grad, grad.grad_fn,
                                                 grad.output_nr), t.grad_accumulations))
        self.result.autograd.append(AutogradRecord(index, op, entries))

    def do_grad(self, index, out, args, kwargs):
        kw = dict(kwargs)
        names = ["outputs", "inputs", "grad_outputs", "retain_graph", "create_graph", "allow_unused",
                 "materialize_grads", "is_grads_batched"]
        for i, a in enumerate(args):
            if i >= len(names):
                raise TorchTypeError("grad() takes at most 8 positional arguments", code="invalid_argument")
            kw.setdefault(names[i], a)
        unknown = set(kw) - set(names)
        if unknown:
            raise TorchTypeError(f"grad() got an unexpected keyword argument '{sorted(unknown)[0]}'",
                                 code="invalid_argument")
        if "outputs" not in kw or "inputs" not in kw:
            raise TorchTypeError("grad() missing required argument: 'outputs' and 'inputs'",
                                 code="invalid_argument")
        outputs = self.tensor_list(kw["outputs"])
        inputs = self.tensor_list(kw["inputs"])
        go = kw.get("grad_outputs")
        go = [self.tensor_arg(g) for g in go] if isinstance(go, list) else self.tensor_arg(go)
        res = autograd.grad(outputs, inputs, go, kw.get("retain_graph"), bool(kw.get("create_graph", False)),
                            kw.get("allow_unused"), bool(kw.get("is_grads_batched", False)),
                            bool(kw.get("materialize_grads", False)))
        in_list = inputs if isinstance(inputs, list) else [inputs]
        contrib = {}
        for t, g in zip(in_list, res):
            if g is not None:
                contrib[t] = g
        self.report(index, "grad", contrib)
        return res

    def do_zero_grad(self, args, kwargs):
        kw = dict(kwargs)
        tensors = args[0] if args else kw.pop("tensors", None)
        set_to_none = kw.pop("set_to_none", True)
        if len(args) > 1:
            set_to_none = args[1]
        if kw:
            raise TorchTypeError(f"zero_grad() got an unexpected keyword argument '{next(iter(kw))}'",
                                 code="invalid_argument")
        if tensors is None:
            # the session's parameters: leaves that require grad (a view torch refuses to read is none)
            targets = [t for t in self.ns.values() if t.requires_grad and t.view_error() is None and t.grad_fn is None]
        else:
            targets = self.tensor_list(tensors if isinstance(tensors, list) else [tensors])
        from .journal import setattr_
        from .ops.inplace import zero_
        for t in dict.fromkeys(targets):
            if not isinstance(t, Tensor):
                raise InvalidArgumentError("zero_grad(): tensors must name tensors")
            if t._grad is None:
                continue
            if set_to_none:
                t.grad = None
            else:
                with set_grad_enabled(False):
                    g = t._grad
                    if g.grad_fn is not None:
                        setattr_(g, "grad_fn", None)
                    setattr_(g, "_requires_grad", False)
                    zero_(g)
                setattr_(t, "grad_accumulations", 0)

    def do_forward_ad(self, index, name, args, kwargs):
        """torch.autograd.forward_ad: enter_dual_level / exit_dual_level (balanced within the program),
        make_dual(tensor, tangent) and unpack_dual(tensor) -> [primal, tangent]."""
        from . import forward_ad as fw
        params = _FORWARD_AD[name]
        kw = dict(kwargs)
        level = kw.pop("level", None)
        kw = _python_call(name, params, len(params), args, kw)
        if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
            raise InvalidArgumentError(f"{name}(): level must be an int, not {type(level).__name__}")
        if name == "enter_dual_level":
            fw.enter_dual_level(index)
            return None
        if name == "exit_dual_level":
            fw.exit_dual_level(level=level)
            return None
        if name == "make_dual":
            return fw.make_dual(self.tensor_arg(kw["tensor"]), self.tensor_arg(kw["tangent"]), level=level)
        return tuple(fw.unpack_dual(self.tensor_arg(kw["tensor"]), level=level))

    def do_del(self, args, kwargs):
        """``del a, b``: unbind names (the tensors live on while a graph or another name holds them). Names
        that are not bound are ignored, so that a client may release a name whose op never ran."""
        if kwargs or not all(isinstance(n, str) for n in args):
            raise InvalidArgumentError("del takes tensor names as args")
        for n in args:
            self.ns.pop(n, None)
            self.functions.pop(n, None)

    # ----- functions and their transforms ----------------------------------------------------------------
    def define_function(self, out, args, kwargs) -> list[str]:
        """``{"op": "function", "out": "f", "kwargs": {"inputs": [...], "outputs": "y" | [...], "ops": [...]}}``:
        bind ``f`` to a named sub-program (plain data; its ops run only when a transform calls it)."""
        if args or not isinstance(out, str):
            raise InvalidArgumentError("function takes kwargs inputs, outputs and ops, and one out name")
        self.functions[out] = function_def(kwargs)
        self.ns.pop(out, None)
        return [out]

    def callable_of(self, fname):
        """The Python callable a transform calls: runs the function's ops on a child namespace (the
        session's names, shadowed by the parameters), inside this program's journal; returns its outputs."""
        if not isinstance(fname, str):
            raise TorchTypeError(f"'{type(fname).__name__}' object is not callable", code="invalid_argument")
        fdef = self.functions.get(fname)
        if fdef is None or not isinstance(fdef, FunctionDef):
            if fname in self.ns:
                raise TorchTypeError("'Tensor' object is not callable", code="invalid_argument")
            raise UnknownTensorError(f"function {fname!r} is not defined")

        def call(*args):
            if len(args) != len(fdef.inputs):
                raise TorchTypeError(f"{fname}() takes {len(fdef.inputs)} positional arguments but {len(args)} "
                                     f"were given", code="invalid_argument")
            ns = dict(self.ns)
            ns.update(zip(fdef.inputs, args))
            child = _Runner(self.state, ns, self.sink, ProgramResult(), dict(self.functions))
            budget = current_budget()  # the request's deadline and cancel flag, before every op of the body
            check = budget.check if budget is not None else None
            for i, op in enumerate(fdef.ops):
                if check is not None:
                    check()
                child.run_op(i, op, False)
            if isinstance(fdef.outputs, str):
                return _lookup(ns, fdef.outputs)
            return tuple(_lookup(ns, n) for n in fdef.outputs)

        return call

    def do_transform(self, name, args, kwargs, shown: bool = False):
        """torch.autograd.functional.<name>(func, inputs, ...): func names a function; inputs (and v) a
        tensor or a list of tensors (a list is torch's tuple). ``shown``: the response will show the result
        (a jacobian or hessian then checks the response limit from its blocks' shapes, before any pass)."""
        budget = current_budget()
        if budget is None:
            return self._transform(name, args, kwargs)
        outer, budget.sending = budget.sending, shown  # (a transform in a function body: not shown)
        try:
            return self._transform(name, args, kwargs)
        finally:
            budget.sending = outer

    def _transform(self, name, args, kwargs):
        fn, params = TRANSFORMS[name]
        kw = _python_call(name, ("func", "inputs") + params, 2, args, dict(kwargs))
        for p in ("create_graph", "strict", "vectorize"):
            if p in kw and not isinstance(kw[p], bool):
                raise InvalidArgumentError(f"{name}(): argument '{p}' must be bool, not {type(kw[p]).__name__}")
        func = self.callable_of(kw.pop("func"))
        inputs = self.tensor_tuple(kw.pop("inputs"))
        if kw.get("v") is not None:
            kw["v"] = self.tensor_tuple(kw["v"])
        return fn(func, inputs, **kw)

    def do_apply(self, args, kwargs):
        """``MyFn.apply(*args)``: args[0] names an ``autograd_function`` definition, the rest are its arguments
        (a tensor name where the definition has a tensor parameter)."""
        if kwargs or not args or not isinstance(args[0], str):
            raise InvalidArgumentError("apply takes [function name, *arguments]")
        fdef = self.functions.get(args[0])
        if not isinstance(fdef, custom_function.CustomFunctionDef):
            raise UnknownTensorError(f"autograd function {args[0]!r} is not defined")
        outs = custom_function.apply(self, fdef, args[1:])
        return outs[0] if len(outs) == 1 else outs

    def tensor_tuple(self, v):
        """A name -> its tensor; a list of names -> a tuple of tensors (torch's tuple inputs)."""
        if isinstance(v, list):
            return tuple(self.tensor_arg(x) for x in v)
        return self.tensor_arg(v)

    def bind_existing(self, out: str, value) -> list[str]:
        """``g = x.grad``: ``out`` names the very tensor (no copy, no graph node); None unbinds ``out``."""
        if value is None:
            self.ns.pop(out, None)
            return []
        if not isinstance(value, Tensor):
            raise InvalidArgumentError("bind takes a tensor reference")
        self.ns[out] = value
        return [out]

    def run_op(self, index: int, spec_op: dict, no_grad_all: bool):
        if spec_op.__class__ is not dict and not isinstance(spec_op, dict):
            raise InvalidArgumentError("each op must be an object with an 'op' field")
        get = spec_op.get
        name = get("op")
        args = get("args") or []
        kwargs = get("kwargs") or {}
        out = get("out")
        if name.__class__ is not str and not isinstance(name, str):
            raise InvalidArgumentError("op must be a string")
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise InvalidArgumentError("args must be a list and kwargs an object")
        if out is not None:
            if out.__class__ is str and out.isidentifier() and len(out) <= 64 and out.isascii():
                pass  # a plain name (what NAME_RE accepts, without the regex); anything else the full check
            else:
                _check_out(out)
        grad_on = not (no_grad_all or get("no_grad", False))
        if _grad_enabled.get() != grad_on:  # the op's own grad mode: run it again under it (the common case,
            token = _grad_enabled.set(grad_on)  # no switch, goes on in this frame)
            try:
                return self.run_op(index, spec_op, no_grad_all)
            finally:
                _grad_enabled.reset(token)
        rec = plan_recorder()
        if rec is not None:  # a plan being recorded: the op its next kernel calls come from (engine.trace.sources)
            rec.marks.append((rec.n, index, name))
        if name in _ACTION_NAMES:
            return self._action(index, name, args, kwargs, out)
        spec = OPS.get(name)
        layout = _OP_LAYOUTS.get(name)
        if layout is None or layout[0] is not spec:
            if spec is None:
                raise UnknownOpError(f"unknown op {name!r}; GET /v1/ops lists the available ops")
            layout = _op_layout(spec, name)
        if layout[2]:  # a Tensor method call: _bind's checks
            a, k, viewed = self._bind(spec, args, kwargs, name)
        else:  # _bind, inline (one call less per op)
            a, k, viewed = self._convert_args(spec, args, kwargs, layout[1])
            facts = layout[3]
            if not facts[0]:  # not exempt from the signature check
                check_call(spec, name, a, k, False, facts)
        refused = None
        if viewed and not spec.inplace and spec.differentiable and _grad_enabled.get():
            refused = _refused_view(a, k, spec)
        if refused is None:
            value = spec.fn(*a, **k) if k else spec.fn(*a)
        else:
            # an op that hands back its input itself (flatten of a 1-D tensor, contiguous of a contiguous
            # one, to() the same dtype) never reaches autograd in torch, which reads no grad_fn then
            try:
                value = spec.fn(*a, **k)
            except (TorchRuntimeError, TorchValueError, TorchTypeError, TorchIndexError):
                raise refused from None
            if not any(value is t for t in (*a, *k.values())):
                raise refused
        if name == "tensor":
            rec = plan_recorder()
            if rec is not None:  # a plan being recorded (engine.trace.plan): the tensor is a program input
                rec.add_input(value.data)
        if value.__class__ is Tensor and out.__class__ is str:  # the common case of bind()
            ns = self.ns
            ns[out] = value
            if out in self.functions:
                self.functions.pop(out)
            return [out]
        return self.bind(out, value)

    def do_rng(self, name: str, args: list, kwargs: dict, out):
        """torch's generator calls: ``torch.manual_seed``/``Generator.manual_seed``, ``torch.Generator()``,
        ``initial_seed``, ``get_rng_state``/``set_rng_state`` (``generator``: a generator's name, None for the
        default one). A seed reads back as an int64 0-d tensor (two's complement), a state as torch's 5056
        bytes in an int64 tensor (the engine has no uint8)."""
        params = _RNG_ACTIONS[name]
        if len(args) > len(params) or set(kwargs) - {*params, "generator"}:
            raise InvalidArgumentError(f"{name} takes {list(params)} and generator=")
        given = dict(zip(params, args), **{k: v for k, v in kwargs.items() if k != "generator"})
        which = kwargs.get("generator")
        if which is not None and not isinstance(which, str):
            raise InvalidArgumentError(f"{name}: generator must name a generator of the session")
        gens = running_generators()
        if name == "Generator":
            if not isinstance(out, str):
                raise InvalidArgumentError("Generator binds one out name")
            device = given.get("device", "cpu")
            if device not in ("cpu", None):
                raise TorchRuntimeError(f"Device type {str(device).upper()} is not supported for torch.Generator() "
                                        f"api.", code="invalid_argument")
            _check_out(out)
            gens.add(out, Generator())
            return [out]
        if name == "manual_seed":
            if "seed" not in given:
                raise InvalidArgumentError("manual_seed takes [seed]")
            seed = given["seed"]
            if isinstance(seed, bool) or not isinstance(seed, (int, float)) or seed != seed:
                raise TorchTypeError(f"manual_seed expected an int, got {type(seed).__name__}")
            seed = int(seed)
            if not -(1 << 63) <= seed < 1 << 64:
                raise TorchRuntimeError("Overflow when unpacking long long", code="invalid_argument",
                                        exception="ValueError")
            gens.get(which).manual_seed(seed)
            return []
        if name == "set_rng_state":
            state = self.tensor_arg(given.get("new_state"))
            if not isinstance(state, Tensor):
                raise InvalidArgumentError("set_rng_state takes [new_state: a tensor name]")
            data = state.data
            if data.dtype.kind not in "iub" or data.ndim != 1 or (data.size and (data.min() < 0 or data.max() > 255)):
                raise TorchTypeError("RNG state must be a torch.ByteTensor (here: a 1-d tensor of byte values)")
            gens.get(which).set_state(data.astype(np.uint8).tobytes())
            return []
        g = gens.get(which)
        if name == "initial_seed":
            value = Tensor(np.array(g.initial_seed(), np.uint64).view(np.int64))
        else:  # get_rng_state
            value = Tensor(np.frombuffer(g.get_state(), np.uint8).astype(np.int64))
        return self.bind(out, value)

    def _action(self, index: int, name: str, args: list, kwargs: dict, out):
        if name == "backward":
            self.do_backward(index, args, kwargs)
            return []
        if name == "grad":
            return self.bind(out, self.do_grad(index, out, args, kwargs))
        if name == "zero_grad":
            self.do_zero_grad(args, kwargs)
            return []
        if name in _FORWARD_AD:
            return self.bind(out, self.do_forward_ad(index, name, args, kwargs))
        if name == "set_grad":
            if len(args) != 2 or kwargs:
                raise InvalidArgumentError("set_grad takes [tensor, grad or null]")
            t = self.tensor_arg(args[0])
            g = self.tensor_arg(args[1]) if args[1] is not None else None
            t.grad = g
            return []
        if name == "requires_grad_":
            t = self.tensor_arg(args[0] if args else kwargs.get("self"))
            flag = args[1] if len(args) > 1 else kwargs.get("requires_grad", True)
            if not isinstance(t, Tensor) or not isinstance(flag, bool):
                raise InvalidArgumentError("requires_grad_ takes [tensor, requires_grad=true]")
            t.requires_grad_(flag)
            return []
        if name == "function":
            return self.define_function(out, args, kwargs)
        if name == "autograd_function":
            if args or not isinstance(out, str):
                raise InvalidArgumentError("autograd_function takes its definition as kwargs and one out name")
            self.functions[out] = custom_function.definition(kwargs)
            self.ns.pop(out, None)
            return [out]
        if name == "apply":
            return self.bind(out, self.do_apply(args, kwargs))
        if name in TRANSFORMS:
            return self.bind(out, _flatten(self.do_transform(name, args, kwargs, index in self.shown)))
        if name == "del":
            self.do_del(args, kwargs)
            return []
        if name == "bind":
            if len(args) != 1 or kwargs or not isinstance(out, str):
                raise InvalidArgumentError("bind takes [a tensor reference] and one out name")
            return self.bind_existing(out, self.tensor_arg(args[0]))
        if name in _RNG_ACTIONS:
            return self.do_rng(name, args, kwargs, out)
        if name == "retain_grad":
            t = self.tensor_arg(args[0] if args else kwargs.get("self"))
            if not isinstance(t, Tensor):
                raise InvalidArgumentError("retain_grad expects a tensor name")
            t.retain_grad()
            return []
        raise AssertionError(name)  # every name of _ACTION_NAMES is handled above


ACTIONS = [
    {"name": "backward", "doc": "torch.autograd.backward / Tensor.backward: accumulate gradients into leaves' .grad.",
     "arguments": ["tensors", "gradient", "retain_graph", "create_graph", "inputs"]},
    {"name": "grad", "doc": "torch.autograd.grad: return gradients (bound to out) without touching .grad.",
     "arguments": ["outputs", "inputs", "grad_outputs", "retain_graph", "create_graph", "allow_unused",
                   "materialize_grads", "is_grads_batched"]},
    {"name": "zero_grad", "doc": "optimizer.zero_grad(): set .grad to None (set_to_none=true, the default) or zero it.",
     "arguments": ["tensors", "set_to_none"]},
    {"name": "retain_grad", "doc": "Tensor.retain_grad(): populate .grad of a non-leaf during backward.",
     "arguments": ["self"]},
    {"name": "requires_grad_", "doc": "Tensor.requires_grad_(requires_grad=True) on a leaf.",
     "arguments": ["self", "requires_grad"]},
    {"name": "set_grad", "doc": "x.grad = value (a tensor of x's shape and dtype) or null.",
     "arguments": ["self", "grad"]},
    {"name": "enter_dual_level", "doc": "torch.autograd.forward_ad.enter_dual_level(): start forward mode "
     "(one level at a time); the same op list must exit it.", "arguments": []},
    {"name": "exit_dual_level", "doc": "torch.autograd.forward_ad.exit_dual_level(level=None): end forward mode; "
     "every tangent of the level is dropped.", "arguments": ["level"]},
    {"name": "make_dual", "doc": "torch.autograd.forward_ad.make_dual(tensor, tangent, level=None): a view of "
     "tensor carrying tangent (inside a dual level).", "arguments": ["tensor", "tangent", "level"]},
    {"name": "unpack_dual", "doc": "torch.autograd.forward_ad.unpack_dual(tensor, level=None) -> [primal, tangent] "
     "(a tangent of None binds no name).", "arguments": ["tensor", "level"]},
    {"name": "bind", "doc": "g = x.grad: bind out to the tensor a reference names (no copy, no graph node); a "
                            "reference to a None gradient unbinds out.",
     "arguments": ["self"]},
    {"name": "function", "doc": "Define a function: a named sub-program (kwargs inputs: parameter names, outputs: a "
     "name, or a list of names for a tuple result, ops: its op list), bound to out. Its ops run when a transform "
     "calls it, on the session's names shadowed by the parameters; nothing it binds outlives the call.",
     "arguments": ["inputs", "outputs", "ops"], "tensors": ()},
    {"name": "autograd_function", "doc": "Define a torch.autograd.Function (bound to out): kwargs name (the class "
     "name: its nodes are <name>Backward), inputs (a parameter name per forward argument, null for a non-tensor one), "
     "ops and outputs (the forward body and its tensor outputs), saved (names given to ctx.save_for_backward), "
     "non_differentiable, materialize_grads, once_differentiable, and backward: a list of bodies (grads_present, "
     "saved, grads, ops, outputs: a name or null per gradient returned).",
     "arguments": ["name", "inputs", "ops", "outputs", "saved", "non_differentiable", "materialize_grads",
                   "once_differentiable", "backward"], "tensors": ()},
    {"name": "apply", "doc": "MyFn.apply(*args): args are the autograd_function's name, then its arguments (tensor "
     "names where it has tensor parameters); the forward body runs with grad off and its outputs get one "
     "<name>Backward node whose backward runs the backward body.", "arguments": ["function", "args"],
     "tensors": ()},
    {"name": "vjp", "doc": "torch.autograd.functional.vjp(func, inputs, v=None, create_graph=False, strict=False) "
     "-> func's outputs, then the vjp (nested results flattened, depth first, onto out's names); func names a "
     "function, inputs (and v) a tensor name or a list of names (torch's tuple).",
     "arguments": ["func", "inputs", "v", "create_graph", "strict"], "tensors": ("inputs", "v")},
    {"name": "jvp", "doc": "torch.autograd.functional.jvp(func, inputs, v=None, create_graph=False, strict=False) "
     "-> func's outputs, then the jvp.", "arguments": ["func", "inputs", "v", "create_graph", "strict"],
     "tensors": ("inputs", "v")},
    {"name": "vhp", "doc": "torch.autograd.functional.vhp(func, inputs, v=None, create_graph=False, strict=False) "
     "-> func's output, then the vhp.", "arguments": ["func", "inputs", "v", "create_graph", "strict"],
     "tensors": ("inputs", "v")},
    {"name": "hvp", "doc": "torch.autograd.functional.hvp(func, inputs, v=None, create_graph=False, strict=False) "
     "-> func's output, then the hvp.", "arguments": ["func", "inputs", "v", "create_graph", "strict"],
     "tensors": ("inputs", "v")},
    {"name": "jacobian", "doc": "torch.autograd.functional.jacobian(func, inputs, create_graph=False, strict=False, "
     "vectorize=False, strategy='reverse-mode'): a tensor, or the blocks (output i, input j) flattened row by row "
     "onto out's names.", "arguments": ["func", "inputs", "create_graph", "strict", "vectorize", "strategy"]},
    {"name": "hessian", "doc": "torch.autograd.functional.hessian(func, inputs, create_graph=False, strict=False, "
     "vectorize=False, outer_jacobian_strategy='reverse-mode'): a tensor, or the blocks (i, j) flattened.",
     "arguments": ["func", "inputs", "create_graph", "strict", "vectorize", "outer_jacobian_strategy"]},
    {"name": "manual_seed", "doc": "torch.manual_seed(seed) / Generator.manual_seed(seed) (generator=: a generator's "
     "name): seed torch's CPU generator; the session's random ops then draw torch's numbers bit for bit.",
     "arguments": ["seed", "generator"]},
    {"name": "Generator", "doc": "g = torch.Generator(): a new generator (torch's default seed) bound to out, for "
     "the generator= argument of random ops and the other generator actions.", "arguments": ["device"]},
    {"name": "initial_seed", "doc": "torch.initial_seed() / Generator.initial_seed(): the seed, bound to out as an "
     "int64 0-d tensor (a seed of 2**63 or more reads back negative: add 2**64).", "arguments": ["generator"]},
    {"name": "get_rng_state", "doc": "torch.get_rng_state() / Generator.get_state(): torch's 5056-byte state, bound to "
     "out as an int64 tensor of byte values.", "arguments": ["generator"]},
    {"name": "set_rng_state", "doc": "torch.set_rng_state(new_state) / Generator.set_state(): a state taken from "
     "get_rng_state here or from torch (its bytes as a 1-d integer tensor).", "arguments": ["new_state", "generator"]},
    {"name": "del", "doc": "del a, b: unbind the names given as args (unbound names are ignored); the tensors "
                           "live on while a graph or another name holds them.",
     "arguments": ["names"]},
]

#: torch's generator calls (``do_rng``) and their positional parameters
_RNG_ACTIONS = {"manual_seed": ("seed",), "Generator": ("device",), "initial_seed": (), "get_rng_state": (),
                "set_rng_state": ("new_state",)}

#: forward-mode actions and their positional parameters (``level`` is keyword-only, as in torch)
_FORWARD_AD = {"enter_dual_level": (), "exit_dual_level": (), "make_dual": ("tensor", "tangent"),
               "unpack_dual": ("tensor",)}

#: the op names run_op handles itself (before the op table)
_ACTION_NAMES = frozenset({"backward", "grad", "zero_grad", "set_grad", "requires_grad_", "function", "del", "bind",
                           "autograd_function", "apply",
                           "retain_grad", *_FORWARD_AD, *TRANSFORMS, *_RNG_ACTIONS})


_LAYOUTS: dict[int, tuple] = {}

#: how a program's value for a parameter is converted: passed through, a tensor name, a list of names, an index
_PLAIN, _TENSOR, _TENSOR_LIST, _INDEX = 0, 1, 2, 3


def _param_layout(spec) -> tuple:
    """(the kind of each positional parameter, whether *args takes tensors, {parameter name: kind}, the *args
    parameter's name or None) of an op, computed once per op."""
    layout = _LAYOUTS.get(id(spec))
    if layout is None:
        def kind(name):
            if name == "index" and spec.name in ("getitem", "setitem"):
                return _INDEX
            if name in spec.tensor_lists:
                return _TENSOR_LIST
            if name in spec.tensors:
                return _TENSOR
            return _PLAIN
        params = spec.params
        pos = tuple(kind(p.name) for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        varargs = next((p for p in params if p.kind == p.VAR_POSITIONAL), None)
        layout = _LAYOUTS[id(spec)] = (pos, varargs is not None and varargs.name in spec.tensors,
                                       {p.name: kind(p.name) for p in params},
                                       varargs.name if varargs is not None else None)
    return layout


_OP_LAYOUTS: dict[str, tuple] = {}

#: argument values that are never a tensor (nor hold one): no view to refuse among them
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def _op_layout(spec, name: str) -> tuple:
    """(spec, ``_param_layout(spec)``, a Tensor method call?, check_call's facts for it) of the op a program
    calls by ``name``, computed once per name (again if the table now gives the name another spec)."""
    layout = _OP_LAYOUTS.get(name)
    if layout is None or layout[0] is not spec:
        method = call_form(name, spec)
        layout = _OP_LAYOUTS[name] = (spec, _param_layout(spec), method, call_facts(spec, name, method))
    return layout


def _refused_view(args, kwargs, spec) -> TorchRuntimeError | None:
    """torch collects an op's gradient edges before running it: a view that may not be rebased (see
    gradserve_server/engine/views.py) is refused before the op's own argument checks. The error to raise, or None.
    Arguments read for their metadata only (``spec.meta_only``) have no edge and are not looked at."""
    if spec.meta_only:
        names = [p.name for p in spec.params]
        args = [v for i, v in enumerate(args) if i >= len(names) or names[i] not in spec.meta_only]
        kwargs = {n: v for n, v in kwargs.items() if n not in spec.meta_only}
    for v in (*args, *kwargs.values()):
        for t in (v if isinstance(v, (list, tuple)) else (v,)):
            if isinstance(t, Tensor) and t._base is not None and t.requires_grad:
                msg = t.view_error()
                if msg is not None:
                    return TorchRuntimeError(msg, code="invalid_inplace")
    return None


def function_def(spec) -> FunctionDef:
    """Validate a function definition (``{"inputs": [names], "outputs": name | [names], "ops": [ops]}``)."""
    if not isinstance(spec, dict) or set(spec) - {"inputs", "outputs", "ops"}:
        raise InvalidArgumentError("function takes kwargs inputs (a list of names), outputs (a name or a list of "
                                   "names) and ops (an op list)")
    inputs, outputs, ops = spec.get("inputs"), spec.get("outputs"), spec.get("ops")
    if not isinstance(inputs, list) or len(set(map(str, inputs))) != len(inputs):
        raise InvalidArgumentError("function: inputs must be a list of distinct names")
    _check_out(inputs or None)
    if isinstance(outputs, list):
        if not outputs:
            raise InvalidArgumentError("function: outputs must be a name or a non-empty list of names")
        _check_out(outputs)
        outputs = tuple(outputs)
    elif isinstance(outputs, str):
        _check_out(outputs)
    else:
        raise InvalidArgumentError("function: outputs must be a name or a non-empty list of names")
    if not isinstance(ops, list) or not all(isinstance(op, dict) and isinstance(op.get("op"), str) for op in ops):
        raise InvalidArgumentError("function: ops must be a list of ops (objects with an 'op' field)")
    return FunctionDef(tuple(inputs), outputs, plain_copy(ops))


def _flatten(value):
    """A transform's nested tuples, depth first, as one tuple (bound to out's names in order)."""
    if isinstance(value, (tuple, list)):  # torch's forward-mode jacobian gives lists
        flat = []
        for v in value:
            flat.extend(_flatten(v) if isinstance(v, (tuple, list)) else (v,))
        return tuple(flat)
    return value


def _surely_shown(ops: list, respond, repeat: int, until) -> frozenset[int]:
    """The transforms of a one-pass op list whose results the response will show: their out names reported
    (``respond``: every changed name, all names, or the names listed) and neither rebound nor deleted by a
    later op."""
    if repeat != 1 or until is not None or not isinstance(respond, (str, list)):
        return frozenset()
    listed = None if isinstance(respond, str) else set(respond)
    shown = []
    later: set = set()  # names a later op binds or deletes
    for i in range(len(ops) - 1, -1, -1):
        op = ops[i]
        if not isinstance(op, dict):
            return frozenset()
        out = op.get("out")
        names = [n for n in out if isinstance(n, str)] if isinstance(out, list) else [out] if isinstance(
            out, str) else []
        if op.get("op") in TRANSFORMS and names and later.isdisjoint(names) and (
                listed is None or listed.issuperset(names)):
            shown.append(i)
        later.update(names)
        if op.get("op") == "del":
            later.update(a for a in op.get("args") or () if isinstance(a, str))
    return frozenset(shown)


def _until_reached(ns: dict, name: str) -> bool:
    """The stopping condition of a repeat loop: ``name`` must be bound to a bool tensor of one element."""
    t = ns.get(name)
    if t is None:
        raise UnknownTensorError(f"until: name {name!r} is not defined after the iteration")
    if t.data.dtype != np.bool_ or t.data.size != 1:
        raise TorchRuntimeError(f"until: {name!r} must be a bool tensor with one element, got a {t.dtype} tensor "
                                f"of shape {list(t.data.shape)}", code="invalid_until")
    return bool(t.data.reshape(()))


def _python_call(name: str, params: tuple, required: int, args: list, kw: dict) -> dict:
    """Bind ``args``/``kw`` to ``params`` (the first ``required`` of them required) as Python binds a call
    to a function written in Python (torch.autograd.forward_ad and .functional are): Python's messages."""
    if len(args) > len(params):
        takes = len(params) if required == len(params) else f"from {required} to {len(params)}"
        raise TorchTypeError(f"{name}() takes {takes} positional arguments but {len(args)} were given",
                             code="invalid_argument")
    for p, a in zip(params, args):
        if p in kw:
            raise TorchTypeError(f"{name}() got multiple values for argument '{p}'", code="invalid_argument")
        kw[p] = a
    unknown = set(kw) - set(params)
    if unknown:
        raise TorchTypeError(f"{name}() got an unexpected keyword argument '{sorted(unknown)[0]}'",
                             code="invalid_argument")
    missing = [p for p in params[:required] if p not in kw]
    if missing:
        raise TorchTypeError(f"{name}() missing 1 required positional argument: '{missing[0]}'",
                             code="invalid_argument")
    return kw


def _check_out(out) -> None:
    if out is None:
        return
    names = out if isinstance(out, list) else [out]
    if not names:
        raise InvalidArgumentError("out must be a name or a non-empty list of names", code="invalid_name")
    for n in names:
        if not isinstance(n, str) or not NAME_RE.match(n):
            raise InvalidArgumentError(f"invalid tensor name {n!r}: names are 1-64 characters of letters, digits "
                                       f"and underscores, not starting with a digit (NAME.grad is reserved)",
                                       code="invalid_name")


def _translate(exc: Exception) -> EngineError:
    """Turn an unexpected Python exception raised by an op into a typed engine error."""
    if isinstance(exc, EngineError):
        return exc
    msg = str(exc)
    if isinstance(exc, TypeError):
        return InvalidArgumentError(msg, code="invalid_argument", exception="TypeError")
    if isinstance(exc, IndexError):
        return TorchIndexError(msg, code="invalid_index")
    if isinstance(exc, ValueError):
        return TorchValueError(msg, code="invalid_argument")
    if isinstance(exc, OverflowError):  # a Python int beyond int64 reached an op: torch's OverflowError
        if "too large to convert" in msg or "too big to convert" in msg:
            msg = "int too big to convert"
        return TorchRuntimeError(msg, code="overflow", exception="OverflowError")
    if isinstance(exc, MemoryError):
        return LimitExceededError(f"the op could not be computed within memory limits: {msg}")
    if isinstance(exc, RecursionError):
        return LimitExceededError("the op is nested too deeply")
    return TorchRuntimeError(f"{type(exc).__name__}: {msg}", code="internal_error")


def run_program(state: State, ops: list, *, no_grad: bool = False, repeat: int = 1, record=(),
                limits: Limits | None = None, returns=(), control: Control | None = None,
                respond="changed", response_size=None, until: str | None = None) -> ProgramResult:
    """Execute ``ops`` (``repeat`` times) against ``state``; all or nothing.

    With ``limits``, the run's bytes are counted against ``limits.max_bytes`` as they are taken (see
    ``engine.budget``), together with what the session held before; the records and the tensors the response
    will report (``respond``: ``"changed"``, ``"all"`` or a list of names) against
    ``limits.max_response_bytes``, as ``response_size(array)`` estimates them (default: their bytes).
    ``control`` (a deadline and a cancel flag) is checked before every op and between backward nodes.
    ``until`` names a bool scalar tensor read after each iteration: the loop stops once it is true (``repeat``
    is then the most iterations); ``result.iterations`` says how many ran."""
    if not isinstance(ops, list):
        raise InvalidArgumentError("ops must be a list")
    if not isinstance(repeat, int) or repeat < 1:
        raise InvalidArgumentError("repeat must be a positive integer")
    if until is not None and (not isinstance(until, str) or not NAME_RE.match(until)):
        raise InvalidArgumentError(f"until must name a tensor, got {until!r}", code="invalid_name")
    record = list(record or ())
    result = ProgramResult(records={n: [] for n in record})
    ns = dict(state.tensors)
    before = {n: _fingerprint(t) for n, t in ns.items()}
    sink = WarningSink(set(state.warned))
    runner = _Runner(state, ns, sink, result)
    if limits is not None and limits.max_response_bytes is not None:
        runner.shown = _surely_shown(ops, respond, repeat, until)
    journal = Journal()
    index, op_name = None, None
    budget = None
    if limits is not None:
        held = state.held_bytes
        if held is None:
            held = graph_stats(state.tensors.values())[1]

        def measure() -> dict[int, int]:
            roots = [*state.tensors.values(), *ns.values()]
            freed = []  # the data of saved outputs a backward freed, whose tensors are gone
            for kind, obj, key, old in journal.entries:
                if kind == 3:  # saved tensor slots freed by a backward (engine.node.release_all): what they held
                    for slot, t, data in zip(obj, key, old):
                        if t is None and data is not None:
                            t = slot._ref()
                            if t is None:
                                freed.append(data)
                                continue
                        if t is not None:
                            roots.append(t)
                elif isinstance(old, Tensor):
                    roots.append(old)
            arrays = reachable(roots)[1]
            for a in freed:
                base = a.base
                if base is None or base.__class__ is not np.ndarray:
                    base = a
                arrays[id(base)] = base.nbytes
            return arrays

        budget = Budget(limits, held=held, control=control, measure=measure, response_size=response_size)
    elif control is not None:
        budget = Budget(Limits(), control=control)
    guard = budget if budget is not None else contextlib.nullcontext()
    check = control.check if control is not None else None
    if control is not None and not control.total:  # (a planned repeat loop set it for the whole loop)
        control.total = len(ops) * repeat
    run_op = runner.run_op
    gens = Generators(state.generator, state.generators)
    gens_token = use_generators(gens)
    try:
        with journal, sink, guard, program_dual_scope(), np.errstate(all="ignore"):
            for _ in range(repeat):
                keep = _ == repeat - 1 or repeat == 1 or until is not None
                outcomes = result.ops
                for index, spec_op in enumerate(ops):
                    # control.check(), its common case inline: not cancelled, the deadline (if any) not passed
                    if control is not None and (control.reason is not None or (
                            control.deadline is not None and _monotonic() > control.deadline)):
                        check()
                    bound = run_op(index, spec_op, no_grad)  # (op_name: read on failure, below)
                    if keep:
                        outcomes.append(OpOutcome(index, spec_op.get("op"), bound))
                    if control is not None:
                        control.done += 1
                index, op_name = None, None
                stop, result.iterations = until is not None and _until_reached(ns, until), _ + 1
                for n in record:
                    t = _lookup(ns, n)
                    if budget is not None and t is not None:
                        budget.respond(t.data, f"record {n!r} x repeat {repeat}")
                        budget.reserve(t.data.nbytes, f"the record of {n!r}")
                    result.records[n].append(_snapshot(t))
                if repeat > 1 and _ < repeat - 1:
                    if stop:
                        break
                    result.autograd.clear()
                    result.ops.clear()
            index, op_name = None, None
            if check is not None:
                check()
            for n in returns:
                result.returned[n] = resolve_quietly(ns, n)
            # a name the session did not have is changed: no fingerprint to take
            changed = [n for n, t in ns.items() if n not in before or before[n] != _fingerprint(t)]
            if limits is not None:
                nodes, nbytes = graph_stats(ns.values())
                if nodes > limits.max_nodes:
                    raise LimitExceededError(f"the session would hold {nodes} graph nodes; the limit is "
                                             f"{limits.max_nodes}{limits.setting('max_nodes')}")
                if nbytes > limits.max_bytes:
                    raise LimitExceededError(f"the session would hold {nbytes} bytes of tensors; the limit is "
                                             f"{limits.max_bytes}{limits.setting('max_bytes')}")
                if limits.max_response_bytes is not None:
                    _count_response(budget, result, ns, changed if respond == "changed" else
                                    list(ns) if respond == "all" else respond)
    except Exception as exc:  # noqa: BLE001 - every failure is typed and rolled back
        journal.rollback()
        err = _translate(exc)
        if index is not None:
            if op_name is None:  # an op of the list failed: its name, as given
                spec_op = ops[index]
                op_name = spec_op.get("op") if isinstance(spec_op, dict) else None
            err.at(index, op_name)
        if err is exc:
            raise
        raise err from exc
    finally:
        reset_generators(gens_token)
    # commit
    state.generator, state.generators = gens.default, gens.named
    state.tensors = ns
    state.functions = runner.functions
    state.counter = runner.counter
    state.backward_passes += runner.backward_passes
    state.warned = sink.seen
    state.held_bytes = nbytes if limits is not None else None
    result.warnings = sink.messages
    result.changed = changed
    return result


def _count_response(budget: Budget, result: ProgramResult, ns: dict, names) -> None:
    """The tensors the response will show (data and gradient) and the autograd reports, before any view of
    them is built (records were counted as they were taken)."""
    for name in names:
        t = resolve_quietly(ns, name) if isinstance(name, str) else None
        if t is not None:
            budget.respond(t.data, "the tensors in the response")
            if t._grad is not None:
                budget.respond(t._grad.data, "the tensors in the response")
    for rec in result.autograd:
        for e in rec.entries:
            budget.respond(e.contribution.data, "the autograd report")
            if e.grad is not None:
                budget.respond(e.grad.data, "the autograd report")


# custom functions run their bodies on this interpreter (custom_function sits below it and may not import it)
custom_function.interpreter = SimpleNamespace(Runner=_Runner, lookup=_lookup, ProgramResult=ProgramResult, State=State,
                                              NAME_RE=NAME_RE)


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
        grad_fns = recorded_grad_fns(spec)
        missing = [g for g in grad_fns if g not in JVPS]
        out.append({"name": spec.name, "aliases": list(spec.aliases), "family": spec.family, "arguments": args,
                    "grad_fns": list(grad_fns), "differentiable": spec.differentiable,
                    "forward_ad": spec.differentiable and bool(grad_fns) and not missing,
                    "grad_fns_without_forward_ad": missing,
                    "inplace": spec.inplace, "method": spec.method, "doc": spec.doc, "returns": list(spec.returns),
                    **_client_facts(spec)})
    for a in ACTIONS:
        out.append({"name": a["name"], "aliases": [], "family": "autograd",
                    "arguments": [{"name": n, "tensor": n in a.get("tensors", (
                                       "tensors", "outputs", "inputs", "self", "gradient", "grad_outputs", "grad",
                                       "tensor", "tangent")),
                                   "tensor_list": False, "required": n in ("self", "tensor", "tangent")}
                                  for n in a["arguments"]],
                    "grad_fns": [], "differentiable": False, "forward_ad": False, "grad_fns_without_forward_ad": [],
                    "inplace": False, "method": False, "doc": a["doc"], "returns": [],
                    **_client_facts(None), "cost": "calls" if a["name"] in TRANSFORMS else "inputs"})
    return out


def _client_facts(spec: OpSpec | None) -> dict:
    """The declaration's facts a client needs to call an op as torch does, without asking (the catalog's
    ``exports``, ``outputs`` ...): what a torch-like client builds its namespaces and results from."""
    if spec is None:
        return {"functions": [], "methods": [],
                "exports": [], "tuple_when": [], "variable_outputs": False, "returns_when": "", "python_result": "",
                "meta_only": [],
                "changes_argument": [], "storage": "", "converts_to": "", "dims_of": "input", "promotion": "",
                "checks": [], "shape": "", "cost": "inputs", "parser": None}
    exports = [f"torch.nn.functional.{n}" for n in (spec.name, *spec.aliases)  # torch.nn.functional's families
               if spec.family in ("nn", "conv") and "." not in n and not n.startswith("__")]
    exports += [e for e in spec.exports if e not in exports]
    functions, methods = public_names(spec)
    return {"functions": functions, "methods": methods,
            "exports": exports, "tuple_when": list(spec.tuple_when), "variable_outputs": spec.variable_outputs,
            "returns_when": spec.returns_when, "python_result": spec.python_result,
            "meta_only": list(spec.meta_only),
            "changes_argument": [list(pair) for pair in spec.changes_argument], "storage": spec.storage,
            "converts_to": spec.cast,
            "dims_of": spec.dims_of, "promotion": spec.promotion, "checks": list(spec.checks), "shape": spec.shape,
            "cost": spec.cost,
            "parser": _parser_facts(spec)}


def _parser_facts(spec: OpSpec) -> dict | None:
    """How torch's argument parser takes a call of the op (``engine.signature``'s facts for it, as JSON), per
    form: ``function`` (``torch.add(x, y)``) and, for a method, ``method`` (``x.add(y)``, self not counted);
    ``program_form``: the form a program's call has. A client checks a call against these before sending it
    (``torch_args``): torch's overloads, else the one signature derived from the op's. None: not parsed."""
    program_form = "method" if call_form(spec.name, spec) else "function"
    out = {"program_form": program_form, "hidden": spec.hidden_overload, "numbers": spec.numbers_as_tensors,
           "python_attribute": list(spec.python_attribute) or None,
           "no_argument_overloads": list(spec.no_argument_overloads)}
    for form in ("function", "method"):
        if form == "method" and not spec.method and program_form != "method":
            continue
        exempt, shown, derived, options, _sigs = call_facts(spec, spec.name, form == "method")
        if exempt:
            return None
        keep = options is None or (form == "function" and spec.python_attribute)
        out[form] = {"name": shown, "signature": signature_json(derived) if keep else None,
                     "overloads": list(options) if options is not None else None}
    return out
