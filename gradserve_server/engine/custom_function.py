"""``torch.autograd.Function`` subclasses as plain data: a traced forward body and backward body.

A definition (the ``autograd_function`` op) holds the forward op list, which of its names are outputs and
saved tensors (``ctx.save_for_backward``), which outputs are not differentiable, and one or more backward op
lists (one per pattern of missing output gradients when ``ctx.set_materialize_grads(False)``). Applying it
(the ``apply`` op) runs the forward body with grad mode off and records ONE node named as torch names it
(``<ClassName>Backward``), whose saved tensors are real slots (freed after a backward without
``retain_graph``, version-checked) and whose VJP runs the backward body: recorded under ``create_graph``, so
a backward written in differentiable ops is differentiable again; ``once_differentiable`` runs it under
no_grad and marks its results with torch's ``Error`` node instead.

The node stays plain data: the backward bodies travel on it as one JSON string.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .dual import _level as _fw_level
from .dual import tangent_of
from .errors import InvalidArgumentError, TorchRuntimeError
from .functional import _to_json, from_json, plain_copy
from .grad_mode import _grad_enabled, set_grad_enabled
from .journal import setattr_, setitem_
from .node import Node, SavedTensor, node_of
from .registry import P, edge, no_jvp, vjp
from .tensor import Tensor

_ONCE = "trying to differentiate twice a function that was marked with @once_differentiable"


class _NotLoaded:
    def __getattr__(self, name):
        raise RuntimeError("engine.program is not imported")  # the engine package imports it


#: the eager interpreter a custom function's bodies run on (program's runner, name lookup, result and state
#: classes, the name pattern): a hook slot engine.program fills at import, as it sits above this module
interpreter = _NotLoaded()


@dataclass(frozen=True, eq=False)
class CustomFunctionDef:
    """A custom Function: ``inputs`` (a parameter name per forward argument, None for a non-tensor one),
    the forward ``ops`` and ``outputs`` (tensor output names), ``saved`` (names or None),
    ``non_differentiable`` (output names), ``materialize_grads``, ``once_differentiable`` and ``backward``:
    a list of bodies ``{"grads_present": [bool per output] | None, "saved": [names], "grads": [names],
    "ops": [...], "outputs": [name | None per returned gradient]}``."""

    name: str
    inputs: tuple
    ops: list
    outputs: tuple
    saved: tuple
    non_differentiable: tuple
    materialize_grads: bool
    once_differentiable: bool
    backward: list
    dirty: tuple = ()

    def to_json(self) -> dict:
        return {"autograd_function": {
            "name": self.name, "inputs": list(self.inputs), "ops": _to_json(self.ops), "outputs": list(self.outputs),
            "saved": list(self.saved), "non_differentiable": list(self.non_differentiable),
            "materialize_grads": self.materialize_grads, "once_differentiable": self.once_differentiable,
            "backward": _to_json(self.backward), "dirty": list(self.dirty)}}


_FIELDS = {"name", "inputs", "ops", "outputs", "saved", "non_differentiable", "materialize_grads",
           "once_differentiable", "backward", "dirty"}


def _names(value, what: str, nullable: bool = False) -> tuple:
    NAME_RE = interpreter.NAME_RE
    if not isinstance(value, list):
        raise InvalidArgumentError(f"autograd_function: {what} must be a list of names")
    for n in value:
        if n is None and nullable:
            continue
        if not isinstance(n, str) or not NAME_RE.match(n):
            raise InvalidArgumentError(f"autograd_function: {what} must be a list of names, got {n!r}",
                                       code="invalid_name")
    return tuple(value)


def _ops(value, what: str) -> list:
    if not isinstance(value, list) or not all(isinstance(op, dict) and isinstance(op.get("op"), str) for op in value):
        raise InvalidArgumentError(f"autograd_function: {what} must be a list of ops (objects with an 'op' field)")
    return plain_copy(value)


def definition(spec) -> CustomFunctionDef:
    """Validate an ``autograd_function`` op's kwargs (see ``CustomFunctionDef``)."""
    if not isinstance(spec, dict) or set(spec) - _FIELDS or not {"name", "inputs", "ops", "outputs",
                                                                "backward"} <= set(spec):
        raise InvalidArgumentError(f"autograd_function takes kwargs {', '.join(sorted(_FIELDS))} (name, inputs, ops, "
                                   f"outputs and backward required)")
    name = spec["name"]
    if not isinstance(name, str) or not name.isidentifier() or len(name) > 64:
        raise InvalidArgumentError(f"autograd_function: name must be a Python class name, got {name!r}")
    inputs = _names(spec["inputs"], "inputs", nullable=True)
    if len({n for n in inputs if n is not None}) != sum(n is not None for n in inputs):
        raise InvalidArgumentError("autograd_function: inputs must be distinct names")
    outputs = _names(spec["outputs"], "outputs")
    saved = _names(spec.get("saved", []), "saved", nullable=True)
    nondiff = _names(spec.get("non_differentiable", []), "non_differentiable")
    if set(nondiff) - set(outputs):
        raise InvalidArgumentError("autograd_function: non_differentiable must name outputs")
    dirty = _names(spec.get("dirty", []), "dirty")
    if set(dirty) - set(inputs):
        raise InvalidArgumentError("autograd_function: dirty must name tensor inputs")
    flags = {}
    for key, default in (("materialize_grads", True), ("once_differentiable", False)):
        flags[key] = spec.get(key, default)
        if not isinstance(flags[key], bool):
            raise InvalidArgumentError(f"autograd_function: {key} must be a bool")
    bodies = spec["backward"]
    if not isinstance(bodies, list) or not bodies:
        raise InvalidArgumentError("autograd_function: backward must be a non-empty list of bodies")
    checked = []
    for body in bodies:
        if not isinstance(body, dict) or set(body) - {"grads_present", "saved", "grads", "ops", "outputs"}:
            raise InvalidArgumentError("autograd_function: a backward body takes grads_present, saved, grads, ops "
                                       "and outputs")
        present = body.get("grads_present")
        if present is not None and (not isinstance(present, list) or len(present) != len(outputs)
                                    or not all(isinstance(p, bool) for p in present)):
            raise InvalidArgumentError("autograd_function: grads_present must be a bool per output")
        b_saved = _names(body.get("saved", []), "backward saved")
        grads = _names(body.get("grads", []), "backward grads", nullable=True)
        if len(b_saved) != len(saved) or len(grads) != len(outputs):
            raise InvalidArgumentError("autograd_function: a backward body takes a name per saved tensor and per "
                                       "output gradient")
        checked.append({"grads_present": present, "saved": list(b_saved), "grads": list(grads),
                        "ops": _ops(body.get("ops", []), "backward ops"),
                        "outputs": list(_names(body.get("outputs", []), "backward outputs", nullable=True))})
    return CustomFunctionDef(name, inputs, _ops(spec["ops"], "ops"), outputs, saved, nondiff,
                             flags["materialize_grads"], flags["once_differentiable"], checked, dirty)


def from_stored(value: dict) -> CustomFunctionDef:
    """A definition as ``to_json`` stored it (arrays tagged)."""
    return definition(from_json(value))


def apply(runner, fdef: CustomFunctionDef, args: list) -> tuple:
    """``MyFn.apply(*args)``: run the forward body on ``runner``'s names shadowed by the parameters, with grad
    mode off; give the tensor outputs one node (when grad mode is on and a tensor input requires grad)."""
    ProgramResult, _lookup, _Runner = interpreter.ProgramResult, interpreter.lookup, interpreter.Runner
    if len(args) != len(fdef.inputs):
        raise InvalidArgumentError(f"{fdef.name}.apply() takes {len(fdef.inputs)} arguments but {len(args)} were "
                                   f"given", code="invalid_argument")
    inputs = []
    for pname, a in zip(fdef.inputs, args):
        if pname is None:
            inputs.append(None)
            continue
        t = runner.tensor_arg(a)
        if not isinstance(t, Tensor):
            raise InvalidArgumentError(f"{fdef.name}.apply(): argument {pname!r} must name a tensor",
                                       code="invalid_argument")
        inputs.append(t)
    if _fw_level.get() is not None and any(t is not None and tangent_of(t) is not None for t in inputs):
        raise TorchRuntimeError("You must implement the jvp function for custom autograd.Function to use it with "
                                "forward mode AD.", code="forward_ad_not_implemented", exception="NotImplementedError")
    ns = dict(runner.ns)
    ns.update((p, t) for p, t in zip(fdef.inputs, inputs) if p is not None)
    child = _Runner(runner.state, ns, runner.sink, ProgramResult(), dict(runner.functions))
    with set_grad_enabled(False):  # (run_op sets each op's own grad mode: no_grad_all keeps it off)
        for i, op in enumerate(fdef.ops):
            child.run_op(i, op, True)
    raw = [_lookup(ns, n) for n in fdef.outputs]
    saved = [None if n is None else _lookup(ns, n) for n in fdef.saved]
    return _wrap(fdef, inputs, raw, saved)


def _wrap(fdef: CustomFunctionDef, inputs: list, raw: list, saved: list) -> tuple:
    needs = tuple(t is not None and t.requires_grad for t in inputs)
    differentiable = _grad_enabled.get() and any(needs)
    node = None
    if differentiable:
        node = Node(f"{fdef.name}Backward", P.CustomFunctionBackward.name,
                    tuple(edge(t) if n else (None, 0) for t, n in zip(inputs, needs)),
                    {}, tuple((t.data.shape, t.data.dtype) if n else None for t, n in zip(inputs, needs)), len(raw))
        node._needs = needs
    dirty = [t for p, t in zip(fdef.inputs, inputs) if p is not None and p in fdef.dirty]
    outs = []
    for i, (name, o) in enumerate(zip(fdef.outputs, raw)):
        rg = node is not None and name not in fdef.non_differentiable and o.data.dtype.kind in "fV"
        if any(o is t for t in dirty):
            outs.append(_dirty_output(o, node if rg else None, i))
            continue
        # a fresh tensor over the body's data and version counter (an input returned as is: an alias of it)
        outs.append(Tensor(o.data, rg, node if rg else None, i if rg else 0, o._vc))
    if node is None:
        return tuple(outs)
    slots = node.saved
    for i, t in enumerate(saved):
        if t is None:
            slots[f"saved{i}"] = None
            continue
        j = next((k for k, o in enumerate(raw) if o is t), None)
        slots[f"saved{i}"] = SavedTensor(outs[j], outs[j].grad_fn is node) if j is not None else SavedTensor(t)
    slots["function"] = json.dumps({
        "backward": _stored(fdef.backward), "materialize_grads": fdef.materialize_grads,
        "once_differentiable": fdef.once_differentiable, "tensor_inputs": [p is not None for p in fdef.inputs],
        "outputs": [[list(o.data.shape), o.data.dtype.name] for o in raw]})
    return tuple(outs)


def _dirty_output(t: Tensor, node: Node | None, nr: int) -> Tensor:
    """``ctx.mark_dirty(x)`` and ``return x``: the input itself, its version bumped, its history now the node."""
    if t._base is not None:
        raise InvalidArgumentError("gradserve: ctx.mark_dirty of a view is not supported", code="invalid_inplace")
    if node is not None and t.grad_fn is None and t.requires_grad:
        raise TorchRuntimeError("a leaf Variable that requires grad has been used in an in-place operation.",
                                code="invalid_inplace")
    setitem_(t._vc, 0, t._vc[0] + 1)
    if node is not None:
        setattr_(t, "_grad_fn", node)
        setattr_(t, "_requires_grad", True)
        setattr_(t, "output_nr", nr)
    return t


def _stored(value):
    return _to_json(value)


def _body_for(bodies: list, present: list) -> dict | None:
    for body in bodies:
        want = body["grads_present"]
        if (want is None and all(present)) or want == present:
            return body
    return None


def _vjp(ctx, grads):
    """Run the backward body over the saved tensors and the output gradients; torch's checks on what it
    returns (how many gradients, None for non-tensor inputs)."""
    I = interpreter
    ProgramResult, State, _lookup, _Runner = I.ProgramResult, I.State, I.lookup, I.Runner
    node = ctx.node
    spec = json.loads(node.saved["function"])
    grads = list(grads)
    present = [g is not None for g in grads]
    bodies = from_json(spec["backward"])
    body = None if spec["materialize_grads"] else _body_for(bodies, present)
    if body is None:
        for i, (shape, dt) in enumerate(spec["outputs"]):
            if grads[i] is None:
                grads[i] = Tensor(np.zeros(shape, np.dtype(dt)))
        body = _body_for(bodies, [True] * len(grads))
        if body is None:
            raise InvalidArgumentError(f"function {node.name}: no backward body for the gradients given")
    ns = {}
    for i, n in enumerate(body["saved"]):
        t = getattr(ctx, f"saved{i}")
        if t is not None:
            ns[n] = t
    for n, g in zip(body["grads"], grads):
        if n is not None and g is not None:
            ns[n] = g
    once = spec["once_differentiable"]
    recording = _grad_enabled.get()
    child = _Runner(State(), ns, None, ProgramResult(), {})
    with set_grad_enabled(recording and not once):
        for i, op in enumerate(body["ops"]):
            child.run_op(i, op, not recording or once)
    results = [None if n is None else _lookup(ns, n) for n in body["outputs"]]
    tensor_inputs = spec["tensor_inputs"]
    if len(results) > len(tensor_inputs) and all(r is None for r in results[len(tensor_inputs):]):
        results = results[:len(tensor_inputs)]  # torch: too many gradients are fine when the extra ones are None
    if len(results) != len(tensor_inputs):
        raise TorchRuntimeError(f"function {node.name} returned an incorrect number of gradients (expected "
                                f"{len(tensor_inputs)}, got {len(results)})", code="invalid_gradient")
    for i, (r, is_tensor) in enumerate(zip(results, tensor_inputs)):
        if r is not None and not is_tensor:
            raise TorchRuntimeError(f"function {node.name} returned a gradient different than None at position "
                                    f"{i + 1}, but the corresponding forward input was not a Variable",
                                    code="invalid_gradient")
    if once and recording and any(g is not None and g.requires_grad for g in grads):
        results = _delayed_error(results)
    return tuple(results)


def _delayed_error(results: list) -> list:
    """torch's once_differentiable: each gradient an alias of a detached copy that requires grad, through one
    ``Error`` node whose backward raises."""
    leaves = [None if r is None else Tensor(r.data, True) for r in results]
    live = [t for t in leaves if t is not None]
    node = node_of(P.Error, tuple(edge(t) for t in live), {}, tuple((t.data.shape, t.data.dtype) for t in live),
                   len(live))
    out, k = [], 0
    for t in leaves:
        if t is None:
            out.append(None)
        else:
            out.append(Tensor(t.data, True, node, k))
            k += 1
    return out


def _error_vjp(ctx, grads):
    raise TorchRuntimeError(_ONCE, code="once_differentiable")


# two prims whose nodes are made here, not by registry.record (their inputs and outputs vary per node): n_outputs
# other than 1, so that the VJP gets every output's gradient
vjp("CustomFunctionBackward", inputs=(), n_outputs=2)(_vjp)
no_jvp(P.CustomFunctionBackward, "a custom autograd.Function without a jvp staticmethod")
vjp("Error", inputs=(), n_outputs=2, cpp=True)(_error_vjp)
no_jvp(P.Error, "DelayedError")
