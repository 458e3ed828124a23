"""The one table of ops.

Two kinds of entries, in the spirit of PyTorch's ``derivatives.yaml``:

* **backward primitives** (``@vjp("MulBackward0", inputs=("self", "other"), saves=...)``): keyed by the
  torch ``grad_fn`` class name, i.e. one entry per overload. The declaration is the one place that name is
  written: every other place holds the primitive's handle, ``P.MulBackward0`` (a ``node.Prim``). Each holds
  the VJP, written in engine ops so that it is differentiable again, the names of its differentiable inputs
  (the ``next_functions`` order) and which saved slot is needed by which input's gradient (torch saves
  ``self`` of ``x * c`` only when ``c`` requires grad).
* **forward formulas** (``@jvp()`` right after the VJP; ``@jvp(P.SortBackward0)`` for one declared above):
  the JVP of the same primitive, also in engine ops (so a tangent is differentiable again); ``record`` runs
  it inside a dual level when an input has a tangent. ``elementwise_jvp`` (derived from an elementwise VJP),
  ``weighted_tangent`` (reductions, losses) and ``zero_jvp`` keep most entries one line; ``no_jvp`` marks a
  primitive torch has no formula for.
* **public ops** (``@op("mul", tensors=("self", "other"))``): the torch function or method a program
  calls. It computes the forward with numpy, picks the primitive for the argument form
  (``x ** 2`` -> ``P.PowBackward0``, ``x ** t`` -> ``P.PowBackward1``) and calls ``record``.

The op catalog, program argument resolution and the op tests are generated from these tables.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np

from . import dtypes as D
from . import rules
from .dual import _elem_strides, tangent_of
from .dual import _level as _fw_level
from .errors import TorchIndexError, TorchRuntimeError, TorchTypeError, TorchValueError
from .grad_mode import _grad_enabled
from .node import Node, P, Prim, SavedTensor, declare
from .tensor import Tensor
from .views import _edge, accumulator, edge, is_grad_leaf_view, view_grad_fn  # noqa: F401  (the table's names)


@dataclass
class OpSpec:
    name: str
    fn: Callable
    tensors: tuple[str, ...] = ()          # parameters that take a tensor (a name in a program)
    tensor_lists: tuple[str, ...] = ()     # parameters that take a list of tensors
    #: grad_fn names this op can produce (declared as handles, ``grad_fns=(P.ViewBackward0,)``); None: the
    #: primitives its function records, in the order it names them (``recorded_grad_fns``)
    grad_fns: tuple[str, ...] | None = None
    differentiable: bool = True
    inplace: bool = False
    method: bool = True                    # also bound as a Tensor method
    family: str = ""
    doc: str = ""
    params: tuple = field(default_factory=tuple)
    aliases: tuple[str, ...] = ()
    returns: tuple[str, ...] = ()          # field names of a named-tuple result (torch.return_types), else ()
    #: computes every array through kernels (engine.kernel.kcall), value checks inside them: may be planned
    plannable: bool = False
    #: plannable in some call forms only (``plannable`` False): ``(args, kwargs) -> bool``, whether a program's
    #: call (its op's ``args`` and ``kwargs``, as written) is one of them (div without a rounding mode)
    plannable_when: Callable | None = None
    #: tensor parameters read for their metadata only (expand_as's ``other``): no gradient edge, so torch
    #: never reads their history (a view that may not be rebased is not refused there)
    meta_only: tuple[str, ...] = ()
    # ----- torch's argument parser (engine.signature reads these; torch 2.13's texts, checked live by
    # tests/engine/test_conformance_ops.py) -----
    #: only bound as a Tensor method in torch (view, expand, to, new_zeros...): a program calls it as a method
    method_only: bool = False
    #: aliases only bound as Tensor methods (add's ``__radd__``)
    method_aliases: tuple[str, ...] = ()
    #: torch's visible overloads as its messages print them: {"function": (...), "method": (...)}; an in-place
    #: op without its own takes its out-of-place op's method overloads
    overloads: dict = field(default_factory=dict)
    #: torch also has a hidden, deprecated overload: even one visible signature takes the overload path
    hidden_overload: bool = False
    #: the name torch's messages use when it differs from the op's (nll_loss -> nll_loss_nd)
    message_name: str = ""
    #: torch's allow_numbers_as_tensors: a Python number passes where the op wants a Tensor
    numbers_as_tensors: bool = False
    #: torch's name of the ``*args`` size parameter, which torch then requires (zeros(*size) -> "size")
    size_varargs: str = ""
    #: torch's types of non-tensor parameters checked like a Tensor parameter ({"dim": "int"})
    param_types: dict = field(default_factory=dict)
    #: a torch function written in Python: a non-tensor argument fails on its first attribute access,
    #: (attribute, parameters in the order the code touches them)
    python_attribute: tuple = ()
    #: overloads torch lists for a call without any argument (none of them is plausible then)
    no_argument_overloads: tuple[str, ...] = ()
    #: False: no parsing beyond the op's own (indexing, reflected operators, ops that tell overloads apart)
    parsed: bool = True
    # ----- where the op appears and what it returns (the client builds its namespaces and results from these)
    #: public names beyond torch.<name> (and Tensor.<name> when ``method``): "torch.special.expit", ...
    exports: tuple[str, ...] = ()
    #: which of the op's names (its name and aliases) torch binds as ``torch.<name>``, and as ``Tensor.<name>``;
    #: None: the default (``public_names``)
    functions: tuple[str, ...] | None = None
    methods: tuple[str, ...] | None = None
    #: arguments that make the result a tuple when true (max_pool2d's return_indices), else one tensor; ``!name``:
    #: when ``name`` is not given (torch.where(condition))
    tuple_when: tuple[str, ...] = ()
    #: the number of outputs depends on the data or arguments (split, chunk, unbind)
    variable_outputs: bool = False
    #: the argument whose presence makes the result the ``returns`` named tuple (max's dim); "" always
    returns_when: str = ""
    #: torch's result is a Python value of this type ("bool"): the server binds a 0-d tensor, read at once
    python_result: str = ""
    #: ((changed, given), ...): an out-of-place op that changes argument ``changed`` in place when argument
    #: ``given`` is given (neither None nor False: embedding's max_norm, batch_norm's training)
    changes_argument: tuple[tuple[str, str], ...] = ()
    #: the result's storage: "view" (of the first argument), "view_if_contiguous", "new"; "" the family's
    storage: str = ""
    #: the dtype a conversion op (``long``, ``float``...) converts to
    cast: str = ""
    #: what dimension arguments index: "input" (the first argument), "output" (unsqueeze), "other"
    dims_of: str = "input"
    #: the result's dtype: "result_type" (torch.result_type of the tensor and number operands: add, mul),
    #: "float" (an integer input gives the default float: exp), "true_divide" (float unless a rounding mode),
    #: "broadcast_type" (result_type of the operands once broadcast: mse_loss);
    #: "" not declared. Its in-place form refuses a result its target cannot hold, before anything runs. An op
    #: returning a named tuple declares its fields' rules after " => " ("same => same,int64": sort's values, indices)
    promotion: str = ""
    #: torch's refusals decided from arguments' metadata (dtypes, shapes, which are given), each
    #: ``"rule(arguments)[=value][ if|unless names] | ExceptionClass: message"``, tried in order; the rules are
    #: named in ``gradserve.torch._checks`` (a client raises them at the call's line)
    checks: tuple[str, ...] = ()
    #: the result's shape by a rule of ``engine.rules`` (``"conv(input,weight,stride,padding,dilation)=2"``), where
    #: the family does not say it; a client knows a result's shape without asking (tests/engine/test_shape_rules.py
    #: checks every declaration against the op samples' results)
    shape: str = ""
    #: scheduling: "inputs" (cost follows the inputs' sizes: may run inline), "arguments" (sizes come from
    #: arguments: creation, expand), "other"; "" the family's
    cost: str = ""


def public_names(spec: OpSpec) -> tuple[list[str], list[str]]:
    """(the names torch binds as ``torch.<name>``, as ``Tensor.<name>``) of the op's name and aliases: as declared
    (``functions``, ``methods``), else every name but the program's own spellings (``__iadd__`` and its ``iadd``,
    a dotted submodule name), as a function unless ``method_only``, an in-place op (``x.add_()``; torch's few
    ``torch.abs_`` are declared) or one of torch.nn.functional's families, and as a method when ``method``."""
    names = [n for n in (spec.name, *spec.aliases)
             if not n.startswith("__") and "." not in n and (n == spec.name or f"__{n}__" not in spec.aliases)]
    functions = spec.functions if spec.functions is not None else () if \
        spec.method_only or spec.inplace or spec.family in ("nn", "conv") else names
    methods = spec.methods if spec.methods is not None else names if spec.method or spec.method_only else ()
    return [n for n in names if n in functions], [n for n in names if n in methods]


_fw_active = _fw_level.get  # bound once: record() asks on every call (a non-None level: forward mode is on)
PRIMS: dict[str, Prim] = {}
#: forward (JVP) formulas by primitive name, declared next to the VJP with ``@jvp(name)``
JVPS: dict[str, Callable] = {}
#: primitives torch has no forward formula for: name -> the ATen op named in torch's NotImplementedError
NO_JVP: dict[str, str] = {}
_SUPPORTED = frozenset(D.NP_DTYPES.values())
OPS: dict[str, OpSpec] = {}


#: every op by torch name (``F.expand(t, shape)``), filled by ``@op``: for code that calls an op without importing
#: its family (the table, the batching rules and the shared helpers of the families sit below the families). A
#: module object, so a call through it costs what a call through an imported module does (a namespace object's
#: attribute read measured twice as slow)
F = ModuleType("gradserve_server.engine.registry.F", "The ops by torch name, filled by @op.")


def _batching_not_loaded(*args):
    raise RuntimeError("engine.batching is not imported")  # the engine package imports it


#: forward mode in a batched dual level (batching.forward): a hook slot, filled when batching is imported
batched_forward = _batching_not_loaded


def _autograd_not_loaded(*args):
    raise RuntimeError("engine.autograd is not imported")  # the engine package imports it


#: run a node's VJP as the backward pass does (autograd._apply), for a VJP that runs a saved node's own
#: (CopySlices): a hook slot, filled when autograd is imported
apply_node = _autograd_not_loaded


#: the primitive the latest ``vjp`` declared: a ``jvp()`` right after it names no primitive
_declaring: list[str | None] = [None]


def vjp(name: str, inputs: tuple[str, ...], saves: dict | tuple = (), n_outputs: int = 1, jvp: Callable | None = None,
        double_backward: str | Prim = "", double_backward_zeros: bool = True, cpp: bool = False):
    """Declare a backward primitive by its torch grad_fn name (the one place that name is written; the code
    refers to its handle, ``P.<name>``) with its VJP. ``saves`` lists saved slots, or maps a slot to the inputs
    whose gradient needs it (the slot is then saved only if one of them requires grad). ``jvp``: its forward
    formula when it is a shared one (``elementwise_jvp``, ``zero_jvp``...); a formula of its own follows the
    VJP as ``@jvp()``. ``double_backward``: the node torch shows for a gradient of it under create_graph when
    torch computes it with one function (``"GeluBackwardBackward0"``, declared here as a node name; the handle
    of a primitive of that name declared elsewhere; ``double_backward_zeros=False``: that function leaves an
    input it does not use without a gradient); ``cpp``: torch's node class is C++-defined."""
    needed_by = dict(saves) if isinstance(saves, dict) else {s: () for s in saves}
    forward = jvp
    module = sys._getframe(1).f_globals.get("__name__", "")  # the declaring module (its VJP may be shared)

    def deco(fn):
        p = declare(name, cpp=cpp, module=module)
        p.inputs = tuple(inputs)
        p.vjp = fn
        p.needed_by = needed_by
        p.n_outputs = n_outputs
        p.needed_idx = {slot: tuple(inputs.index(u) for u in users) for slot, users in needed_by.items() if users}
        if double_backward.__class__ is str:
            if double_backward:
                # a node name only: the backward pass makes such nodes (autograd._fused)
                declare(double_backward, module=module)
            p.double_backward = double_backward
        else:
            p.double_backward = double_backward.name
        p.double_backward_zeros = double_backward_zeros
        PRIMS[name] = p
        _declaring[0] = name
        if forward is not None:
            _register_jvp(name, forward)
        return fn

    return deco


def _register_jvp(name: str, fn: Callable) -> None:
    if name in JVPS or name in NO_JVP:
        raise RuntimeError(f"duplicate forward formula for {name}")
    JVPS[name] = fn


def _name(prim: Prim) -> str:
    if prim.__class__ is not Prim:  # a grad_fn name is written once, in its declaration
        raise TypeError(f"expected a primitive's handle (P.{prim}), got {prim!r}")
    return prim.name


def jvp(prim: Prim | None = None):
    """Register the forward (JVP) formula of a backward primitive, right after its VJP (``@jvp()``: the
    primitive the VJP just above declared; its handle, ``@jvp(P.SortBackward0)``, for one declared elsewhere):

    ``fn(ctx, *tangents)`` gets one tangent per entry of the primitive's ``inputs`` (None: a zero tangent) and
    returns the output's tangent (a tuple for multi-output primitives; None: zero). ``ctx`` holds every value
    given to ``record()``'s ``saved`` (``"result"`` resolved), the primal inputs by their names where no saved
    slot shadows them (``ctx.inputs``: all of them) and ``ctx.result``. Written in engine ops, it runs with
    forward AD off and grad mode as it is, so a tangent is differentiable again. The engine makes the tangent
    the output's shape (broadcast), a fresh tensor, and zeros when the formula says None."""

    name = _name(prim) if prim is not None else _declaring[0]

    def deco(fn):
        _register_jvp(name, fn)
        return fn

    return deco


def elementwise_jvp(ctx, *tangents):
    """The JVP of an elementwise primitive from its own VJP: each input's VJP is ``grad * df/dx_i``
    (broadcasting, no reduction), so the JVP is the sum over inputs of that VJP applied to the input's
    tangent. ``vjp(..., jvp=elementwise_jvp)`` keeps such entries one line."""
    vjp_fn = ctx._prim.vjp
    n = len(tangents)
    out = None
    for i, t in enumerate(tangents):
        if t is None:
            continue
        ctx.needs = tuple(j == i for j in range(n))
        r = vjp_fn(ctx, t)[i]
        if r is not None:
            out = r if out is None else out + r
    return out


def zero_jvp(ctx, *tangents):
    """A primitive with a zero derivative (floor, sign, round...): the output's tangent is zeros."""
    return None


def weighted_tangent(ctx, *tangents):
    """For primitives where each input element feeds one output element (reductions, losses): the VJP with
    an all-ones gradient gives each element's derivative, so ``sum_i t_i * vjp_i(ones)`` summed over the
    reduced dimensions (by the caller) is the JVP."""
    vjp_fn = ctx._prim.vjp
    n = len(tangents)
    r = ctx.result
    ones = Tensor(np.ones(r.data.shape, r.data.dtype))
    out = None
    for i, t in enumerate(tangents):
        if t is None:
            continue
        ctx.needs = tuple(j == i for j in range(n))
        w = vjp_fn(ctx, ones)[i]
        if w is not None:
            out = t * w if out is None else out + t * w
    return out


def no_jvp(prim: Prim, aten: str) -> None:
    """Mark a primitive torch has no forward formula for; forward AD through it raises torch's
    NotImplementedError naming ``aten``."""
    NO_JVP[_name(prim)] = aten


#: families whose ops' cost follows their inputs' sizes (an op says otherwise with ``cost=``)
_COST_OF_FAMILY = {f: "inputs" for f in ("elementwise", "reduction", "shape", "inplace", "nn", "creation")}


def op(name: str, *, tensors: tuple[str, ...] = (), tensor_lists: tuple[str, ...] = (),
       grad_fns: tuple[Prim, ...] | None = None, differentiable: bool = True, inplace: bool = False,
       method: bool = True, aliases: tuple[str, ...] = (), family: str = "", returns: tuple[str, ...] = (),
       plannable: bool = False, meta_only: tuple[str, ...] = (), **facts):
    """Register a public op (torch function/method) under its torch name. ``returns``: the field names of the
    named tuple it returns (``("U", "S", "Vh")``), listed in the catalog so that a client builds the same.
    ``plannable``: the op computes through kernels only (``engine.kernel``), so a program of such ops can be
    recorded and replayed (``plannable_when=``: in the call forms it accepts only; ``traceable``)."""

    def deco(fn):
        if name in D.HALF_REFUSALS:
            fn = _refusing_half(name, fn)
        sig = inspect.signature(fn)
        doc = (inspect.getdoc(fn) or "").strip().splitlines()
        spec = OpSpec(name=name, fn=fn, tensors=tuple(tensors), tensor_lists=tuple(tensor_lists),
                      grad_fns=tuple(_name(g) for g in grad_fns) if grad_fns is not None else None,
                      differentiable=differentiable, inplace=inplace, method=method,
                      family=family or fn.__module__.rsplit(".", 1)[-1], doc=doc[0] if doc else "",
                      params=tuple(sig.parameters.values()), aliases=tuple(aliases), returns=tuple(returns),
                      plannable=plannable, meta_only=tuple(meta_only), **facts)
        if inplace and name.endswith("_") and name[:-1] in OPS:  # sub_ parses as Tensor.sub does
            base = OPS[name[:-1]]
            if not spec.overloads and "method" in base.overloads:
                spec.overloads = {"method": base.overloads["method"]}
            spec.hidden_overload = spec.hidden_overload or base.hidden_overload
            spec.numbers_as_tensors = spec.numbers_as_tensors or base.numbers_as_tensors
        spec.cost = spec.cost or _COST_OF_FAMILY.get(spec.family, "other")
        for n in (name, *aliases):
            if n in OPS:
                raise RuntimeError(f"duplicate op {n}")
            OPS[n] = spec
            setattr(F, n, fn)
        return fn

    return deco


def traceable(name):
    """Whether a call of the op ``name`` can be traced (recorded as kernel calls and replayed: ``engine.trace.plan``,
    ``engine.trace.compose``), from its declaration: True for every call, False for none (no such op, no kernels),
    or the declaration's ``plannable_when`` check, ``(args, kwargs) -> bool``, when that depends on the call."""
    spec = OPS.get(name) if name.__class__ is str else None
    if spec is None:
        return False
    return True if spec.plannable else spec.plannable_when or False


def _tensor_facts(value):
    if value.__class__ is Tensor or isinstance(value, Tensor):
        dt = _DTYPE_NAMES.get(value.data.dtype)  # (None for an array the engine has no dtype of)
        return (dt, value.data.shape) if dt is not None else (None, None)
    return None, None


_DTYPE_NAMES = {np_dt: name for name, np_dt in D.NP_DTYPES.items()}


def _route_facts(value):
    if isinstance(value, Tensor):
        a = value.data
        return value.requires_grad, tuple(s // a.itemsize for s in a.strides) if a.itemsize else (0,) * a.ndim
    return None, None


rules.bind(_tensor_facts, D.with_number, D.can_cast, _route_facts)  # (every tensor fact known: only malformed
#                                                                    arguments are UNKNOWN)
_EXCEPTIONS = {"RuntimeError": TorchRuntimeError, "ValueError": TorchValueError, "TypeError": TorchTypeError,
               "IndexError": TorchIndexError}
#: the engine's error code of a broken rule (what the hand-written raises the rules replaced said)
_CODES = {"dtype": "invalid_dtype", "index_dtype": "invalid_dtype", "dtype_lastdim": "invalid_dtype",
          "dtype_innerdim": "invalid_dtype", "class_target": "invalid_dtype", "number_bounds_cast": "invalid_dtype",
          "bool_bounds": "invalid_dtype", "same_dtype": "dtype_mismatch", "same_cpp_dtype": "dtype_mismatch",
          "matmul_dtype": "dtype_mismatch", "given": "invalid_argument", "nonempty_list": "invalid_argument",
          "dim_order": "invalid_argument", "nonempty": "empty_reduction", "nonempty_dim": "empty_reduction",
          "k_in_range": "index_out_of_range", "list_dim": "dim_out_of_range", "dim_range": "dim_out_of_range",
          "unflatten_sizes": "invalid_shape", "index_in_dim": "index_out_of_range",
          "narrow_bounds": "index_out_of_range", "zero_dim_index": "invalid_index",
          "index_tensor_dtypes": "invalid_index", "cat_zero_dim": "shape_mismatch",
          "index_masks": "invalid_index", "class_dim": "dim_out_of_range", "probability_ignore": "invalid_argument",
          "not_zero": "invalid_argument", "scalar_index": "invalid_index"}


def rule_error(kind: str, message: str, rule: str):
    """The engine error of a broken ``checks`` rule: torch's class ``kind``, the declared message."""
    cls = _EXCEPTIONS.get(kind, TorchRuntimeError)
    return cls(message, code=_CODES.get(rule, "shape_mismatch"), exception=kind)


def declared_failure(op: str, **arguments):
    """``broken_check``'s error, or None when ``op``'s declared checks all pass ``arguments`` (for a case the op
    cannot tell more cheaply: a bool input of clamp)."""
    for declaration in OPS[op].checks:
        broken = rules.failure(declaration, arguments.get)
        if broken is not None:
            return rule_error(*broken, rules.parse(declaration)[0])
    return None


def broken_check(op: str, **arguments):
    """The error of the first of ``op``'s declared ``checks`` that its ``arguments`` (by parameter name, a missing one
    None) break, with the declaration's message: the op detects a refusal where torch makes it, in torch's order
    among its other checks, and raises this (``raise broken_check("cat", tensors=tensors, dim=dim)``), so that the
    message is written once, in the declaration (the client raises the same at the call's line). Nothing is
    evaluated on a call that passes."""
    err = declared_failure(op, **arguments)
    if err is not None:
        return err
    return TorchRuntimeError(f"{op}(): invalid arguments (none of its declared checks words it: a gradserve bug)",
                             code="invalid_argument")


def _refusing_half(name: str, fn):
    """``fn`` refusing a float16/bfloat16 first argument as torch's CPU kernel does (``dtypes.HALF_REFUSALS``)."""
    @functools.wraps(fn)
    def checked(*args, **kwargs):
        first = args[0] if args else next(iter(kwargs.values()), None)
        if isinstance(first, Tensor) and D.is_half(first.data.dtype):
            refusal = D.half_refusal(name, first.dtype, args, kwargs, first.data.size == 0)
            if refusal is not None:
                raise TorchRuntimeError(refusal[1], code="invalid_dtype", exception=refusal[0])
        return fn(*args, **kwargs)
    return checked


def recorded_grad_fns(spec: OpSpec) -> tuple[str, ...]:
    """The op's grad_fn names: as declared, else the primitives its function names (``record(P.ExpBackward0,
    ...)``, in its code or the code of functions defined in it), in order; found once, after every primitive
    is declared (the catalog asks)."""
    if spec.grad_fns is None:
        names: list[str] = []

        def walk(code) -> None:
            for c in code.co_names:
                if c in PRIMS and c not in names:
                    names.append(c)
            for c in code.co_consts:
                if inspect.iscode(c):
                    walk(c)

        walk(inspect.unwrap(spec.fn).__code__)
        spec.grad_fns = tuple(names)
    return spec.grad_fns


def needs_grad(*inputs) -> bool:
    """True when grad mode is on and some tensor input requires grad."""
    if not _grad_enabled.get():
        return False
    for t in inputs:
        if t is not None and t.requires_grad:
            return True
    return False


_NO_EDGE = (None, 0)
_grad_on = _grad_enabled.get  # bound once: record() asks on every call


class _ScalarMeta(dict):
    """The metadata ``((), dtype)`` of a 0-d input, one shared tuple per supported dtype (a fixed table: no
    tuple per edge of a scalar graph); another dtype gets a tuple of its own."""

    def __missing__(self, dt):
        return ((), dt)


_SCALAR_META = _ScalarMeta({dt: ((), dt) for dt in _SUPPORTED})


class _ScalarMeta1(dict):
    """``input_meta`` of a node with one 0-d input: ``(((), dtype),)``, shared likewise."""

    def __missing__(self, dt):
        return (((), dt),)


_SCALAR_META1 = _ScalarMeta1({dt: (m,) for dt, m in _SCALAR_META.items()})
#: ``needs`` tuples for up to four edges by bit mask (bit i: edge i needs a gradient), shared by every node
_NEEDS = tuple(tuple(tuple(bool(mask >> i & 1) for i in range(n)) for mask in range(1 << n)) for n in range(5))


def record(prim: Prim, data, inputs: tuple, saved: dict | None = None):
    """Wrap forward output(s) in Tensor(s); when grad is needed, create the node of primitive ``prim`` (its
    handle, ``P.ExpBackward0``).

    ``inputs`` are the primitive's differentiable inputs in edge order (Tensor or None for a number).
    ``saved`` maps slot -> value; a Tensor value becomes a SavedTensor, the string ``"result"`` stands
    for the (first) output and ``"result<i>"`` for output ``i`` of a multi-output primitive (svd's U, S, Vh).
    Slots whose gradient consumers need no grad are not saved (stored as None).
    Multi-output primitives take a tuple of arrays and return a tuple of Tensors.
    """
    multi = data.__class__ is tuple
    if not multi:
        dt = data.dtype
        if dt not in _SUPPORTED:  # a numpy promotion the engine does not model
            raise TorchRuntimeError(f"result dtype {data.dtype} is not supported ({', '.join(D.NAMES)})",
                                    code="invalid_dtype")
    mask = 0
    if not _grad_on() or not (multi or dt.kind in "fV"):  # int and bool results never require grad
        pass
    elif len(inputs) == 1:  # one input (unary ops, ops with a number operand): no lists
        t = inputs[0]
        if t is not None and (t._requires_grad or (t._base is not None and t.requires_grad)):
            if t._base is None:
                fn = t._grad_fn
                nexts = ((fn, t.output_nr) if fn is not None else (t._accumulator or accumulator(t), 0),)
            else:
                fn = view_grad_fn(t)
                nexts = ((fn, t.output_nr) if fn is not None else (accumulator(t), 0),)
            d = t.data
            shape = d.shape
            meta = ((shape, d.dtype),) if shape else _SCALAR_META1[d.dtype]
            mask = 1
    else:
        # one pass: each input's edge, metadata and need (no node when none requires grad)
        nexts = []
        meta = []
        bit = 1
        for t in inputs:
            # t._requires_grad first: the property (a view's base may require grad) only when it is False
            if t is None or not (t._requires_grad or (t._base is not None and t.requires_grad)):
                nexts.append(_NO_EDGE)
                meta.append(None)
            else:
                if t._base is None:
                    fn = t._grad_fn
                    nexts.append((fn, t.output_nr) if fn is not None else (t._accumulator or accumulator(t), 0))
                else:
                    fn = view_grad_fn(t)
                    nexts.append((fn, t.output_nr) if fn is not None else (accumulator(t), 0))
                d = t.data
                shape = d.shape
                meta.append((shape, d.dtype) if shape else _SCALAR_META[d.dtype])
                mask |= bit
            bit <<= 1
    if not mask:
        outs = tuple([Tensor(d) for d in data]) if multi else Tensor(data)
        if _fw_active() is not None:
            _forward(prim, outs, inputs, saved)
        return outs
    n = len(nexts)
    needs = _NEEDS[n][mask] if n <= 4 else tuple(bool(mask >> i & 1) for i in range(n))
    if n != 1:
        nexts = tuple(nexts)
        meta = tuple(meta)
    name = prim.name
    node = Node(name, name, nexts, None, meta, len(data) if multi else 1)
    node._needs = needs
    if multi:
        outs = tuple([Tensor(d, True, node, i) for i, d in enumerate(data)])
    else:
        outs = Tensor(data, True, node, 0)
    if saved:
        needed = prim.needed_idx
        s = node.saved
        for slot, value in saved.items():
            if needed:
                users = needed.get(slot)
                if users is not None:
                    for i in users:
                        if needs[i]:
                            break
                    else:
                        s[slot] = None
                        continue
            cls = value.__class__
            if cls is Tensor:
                # the node's own output (an in-place op's self): saved as an output, without a cycle
                fn = value._grad_fn if value._base is None else value.grad_fn
                s[slot] = SavedTensor(value, fn is node)
            elif cls is str:
                i = _output_ref(value)
                s[slot] = value if i is None else SavedTensor(outs[i] if multi else outs, True)
            elif cls is int or cls is float or cls is bool or value is None:
                s[slot] = value
            elif isinstance(value, str):
                i = _output_ref(value)
                s[slot] = value if i is None else SavedTensor(outs[i] if multi else outs, is_output=True)
            elif isinstance(value, Tensor):
                s[slot] = SavedTensor(value, is_output=value.grad_fn is node)
            elif isinstance(value, list) and any(isinstance(x, Tensor) for x in value):
                s[slot] = [SavedTensor(x) if isinstance(x, Tensor) else x for x in value]  # e.g. indices
            else:
                s[slot] = value
    if _fw_active() is not None:
        _forward(prim, outs, inputs, saved)
    return outs


def _output_ref(value: str) -> int | None:
    """``"result"`` -> 0, ``"result2"`` -> 2 (a saved slot that is an output of the node); other strings None."""
    if value == "result":
        return 0
    if value.startswith("result") and value[6:].isdigit():
        return int(value[6:])
    return None


class JvpCtx:
    """What a JVP sees: primal inputs by name, every saved value, ``result``."""

    def __init__(self, prim: Prim | None, inputs: tuple, saved: dict | None, outs):
        d = self.__dict__
        if prim is not None:
            for n, t in zip(prim.inputs, inputs):
                d[n] = t
        d["inputs"] = inputs
        if saved:
            for k, v in saved.items():
                i = _output_ref(v) if v.__class__ is str else None
                d[k] = v if i is None else (outs if v == "result" or outs.__class__ is not tuple else outs[i])
        d["result"] = outs
        d["_prim"] = prim


_NO_FW = ("Trying to use forward AD with {} that does not support it because it has not been implemented yet.\n"
          "Please file an issue to PyTorch at https://github.com/pytorch/pytorch/issues/new?template=feature-request"
          ".yml so that we can prioritize its implementation or submit a PR adding the implementation to "
          "derivatives.yaml")


def _forward(prim: Prim, outs, inputs: tuple, saved: dict | None) -> None:
    """Forward mode: give the output(s) their tangent when some input has one (a dual level is active)."""
    tangents = []
    found = False
    for t in inputs:
        fw = None
        if t is not None:
            fw = t._fw_grad
            if fw is None and t._base is not None:
                fw = tangent_of(t)
            if fw is not None:
                found = True
        tangents.append(fw)
    if not found:
        return
    targets = outs if outs.__class__ is tuple else (outs,)
    if not any(o.data.dtype.kind in "fV" for o in targets):
        return
    level = _fw_level.get()
    if level.batch is not None:  # functional.jacobian(strategy="forward-mode", vectorize=True): batched
        token = _fw_level.set(None)  # tangents, through the primitive's batching rule
        try:
            return batched_forward(prim, outs, inputs, saved, tangents, level)
        finally:
            _fw_level.reset(token)
    name = prim.name
    fn = JVPS.get(name)
    if fn is None:
        raise TorchRuntimeError(_NO_FW.format(NO_JVP.get(name, name)), code="forward_ad_not_implemented",
                                exception="NotImplementedError")
    token = _fw_level.set(None)
    try:
        res = per_output(fn(JvpCtx(prim, inputs, saved, outs), *tangents), outs)
        ref = next(t for t in tangents if t is not None)
        for o, r in zip(targets, res):
            if o.data.dtype.kind not in "fV":
                continue
            o._fw_grad = with_layout(_fit(r, o, ref, tangents), o.data)
            level.tensors.append(o)
    finally:
        _fw_level.reset(token)


def per_output(res, outs) -> tuple:
    """A JVP formula's result as one tangent (or None) per output of the primitive."""
    if outs.__class__ is not tuple:
        return (res,)
    return (None,) * len(outs) if res is None else res


def _fit(r, out: Tensor, ref: Tensor, tangents: list):
    """The formula's tangent as the output's: zeros (of the input tangent's dtype) for None, broadcast to the
    output's shape, never an input's tangent object itself. Its dtype is the formula's, as in torch (a float32
    tangent of a float64 primal stays float32 through ``neg``, becomes float64 through ``exp``)."""
    od = out.data
    if r is None:
        return Tensor(np.zeros(od.shape, ref.data.dtype))
    if r.data.shape != od.shape:
        return F.contiguous(F.expand(r, od.shape))
    for t in tangents:
        if t is r:
            return F.clone(r)
    return r


def with_layout(tangent, like: np.ndarray):
    """``tangent`` with the element strides of ``like`` (a copy recorded as CloneBackward0 when they differ), so
    that views of the tensor can view its tangent."""
    d = tangent.data
    if d.shape == like.shape and _elem_strides(d) == _elem_strides(like):
        return tangent
    arr = np.empty_like(like, dtype=d.dtype)
    np.copyto(arr, d)
    token = _fw_level.set(None)
    try:
        return record(P.CloneBackward0, arr, (tangent,))
    finally:
        _fw_level.reset(token)
