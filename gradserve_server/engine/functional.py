"""``torch.autograd.functional``: vjp, jvp, jacobian, hessian, vhp, hvp over engine tensors.

A port of torch 2.13's ``torch/autograd/functional.py``: each transform is a composition of ``grad`` (and,
for ``strategy="forward-mode"``, of forward-mode ``make_dual``/``unpack_dual``) on the function's value,
with torch's argument checks, strict-mode messages and return structures (a tuple where the inputs or the
outputs were a tuple, a tensor otherwise). ``func`` is any callable over engine tensors; the op-list
``function`` definitions (``FunctionDef``) are called through ``program`` as such a callable.

Where torch vmaps (``vectorize=True``), the engine batches (``engine.batching``): reverse mode is one
``grad(..., is_grads_batched=True)`` over the standard basis of the outputs, forward mode one dual pass of
the function whose tangents carry the whole basis of the inputs. When an op on the way has no batching rule,
the transform runs one pass per basis vector instead (the same values, to float tolerance). Under limits, every
transform's result is refused from its blocks' shapes before the pass that makes it: the inputs' shapes for a
hessian, the function's one forward for a reverse-mode jacobian, and for a forward-mode one a plain call of the
function that leaves no trace (``_probe_outputs``).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

import numpy as np

from . import autograd
from . import forward_ad as fw
from . import generator as G
from . import kernel as K
from .budget import current_budget
from .errors import (
    BatchingUnsupported,
    CancelledError,
    DeadlineExceededError,
    EngineError,
    InvalidArgumentError,
    TorchRuntimeError,
    TorchTypeError,
)
from .grad_mode import WarningSink, _grad_enabled, _warning_sink, check_numel, check_results, set_grad_enabled
from .journal import Journal
from .kernel import kcall
from .tensor import Tensor

__all__ = ["FunctionDef", "vjp", "jvp", "jacobian", "hessian", "vhp", "hvp", "TRANSFORMS"]


@dataclass(frozen=True, eq=False)
class FunctionDef:
    """A named sub-program: plain data (its parameter names, its op list, its output names). ``outputs`` is
    a str when the function returns one tensor, a tuple of names when it returns a tuple."""

    inputs: tuple
    outputs: str | tuple
    ops: list

    def to_json(self) -> dict:
        """JSON-ready plain data (arrays the HTTP layer decoded from payloads as tagged base64 objects)."""
        return {"inputs": list(self.inputs),
                "outputs": self.outputs if isinstance(self.outputs, str) else list(self.outputs),
                "ops": _to_json(self.ops)}


_ARRAY_TAG = "__ndarray__"


def plain_copy(value, depth: int = 0):
    """A deep copy of an op list's JSON-shaped data (dicts with str keys, lists, scalars, None, numpy arrays
    as the HTTP layer decodes payloads); anything else is refused."""
    if depth > 64:
        raise InvalidArgumentError("function: ops nested too deeply")
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise InvalidArgumentError("function: op objects must have string keys")
        if _ARRAY_TAG in value:
            raise InvalidArgumentError(f"function: {_ARRAY_TAG!r} is a reserved key")
        return {k: plain_copy(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_copy(v, depth + 1) for v in value]
    if isinstance(value, np.ndarray):
        a = np.array(value, copy=True)
        a.flags.writeable = False
        return a
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise InvalidArgumentError(f"function: ops must be plain JSON data, not {type(value).__name__}")


def _to_json(value):
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_json(v) for v in value]
    if isinstance(value, np.ndarray):
        import base64
        a = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
        return {_ARRAY_TAG: {"dtype": value.dtype.name, "shape": list(value.shape),
                             "data": base64.b64encode(a.tobytes()).decode("ascii")}}
    return value


def from_json(value, depth: int = 0):
    """Inverse of ``to_json``'s op encoding (for a stored state): tagged objects back to arrays."""
    if depth > 64:
        raise InvalidArgumentError("function: ops nested too deeply")
    if isinstance(value, dict):
        if set(value) == {_ARRAY_TAG}:
            import base64
            spec = value[_ARRAY_TAG]
            dt = np.dtype(spec["dtype"])
            if dt.kind not in "biuf":
                raise InvalidArgumentError("function: bad array dtype")
            raw = base64.b64decode(spec["data"], validate=True)
            a = np.frombuffer(raw, dt.newbyteorder("<")).astype(dt).reshape([int(n) for n in spec["shape"]])
            a.flags.writeable = False
            return a
        return {k: from_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v, depth + 1) for v in value]
    return value


def _type_name(x) -> str:
    return "<class 'torch.Tensor'>" if isinstance(x, Tensor) else f"<class '{type(x).__name__}'>"


def _as_tuple(inp, arg_name=None, fn_name=None):
    if arg_name is None and fn_name is None:
        return inp if isinstance(inp, tuple) else tuple(inp) if isinstance(inp, list) else (inp,)
    is_tuple = True
    if not isinstance(inp, tuple):
        inp = (inp,)
        is_tuple = False
    for i, el in enumerate(inp):
        if not isinstance(el, Tensor):
            where = f"the value at index {i}" if is_tuple else f"the given {arg_name}"
            raise TorchTypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of Tensors "
                                 f"but {where} has type {_type_name(el)}.", code="invalid_argument")
    return is_tuple, inp


def _tuple_postprocess(res, to_unpack):
    if isinstance(to_unpack, tuple):
        if not to_unpack[1]:
            res = tuple(el[0] for el in res)
        if not to_unpack[0]:
            res = res[0]
    elif not to_unpack:
        res = res[0]
    return res


def _grad_preprocess(inputs, create_graph, need_graph):
    res = []
    for inp in inputs:
        if create_graph and inp.requires_grad:
            res.append(inp.view(inp.shape))  # torch: inp.view_as(inp)
        else:
            res.append(inp.detach().requires_grad_(need_graph))
    return tuple(res)


def _grad_postprocess(inputs, create_graph):
    if isinstance(inputs[0], Tensor):
        return inputs if create_graph else tuple(inp.detach() for inp in inputs)
    return tuple(_grad_postprocess(inp, create_graph) for inp in inputs)


def _size(shape) -> str:
    return "torch.Size([" + ", ".join(str(s) for s in shape) + "])"


def _validate_v(v, other, is_other_tuple):
    if len(other) != len(v):
        if is_other_tuple:
            raise TorchRuntimeError(f"v is a tuple of invalid length: should be {len(other)} but got {len(v)}.",
                                    code="invalid_argument")
        raise TorchRuntimeError("The given v should contain a single Tensor.", code="invalid_argument")
    for idx, (el_v, el_other) in enumerate(zip(v, other)):
        if el_v.shape != el_other.shape:
            prepend = f"Entry {idx} in " if is_other_tuple else ""
            raise TorchRuntimeError(f"{prepend}v has invalid size: should be {_size(el_other.shape)} but got "
                                    f"{_size(el_v.shape)}.", code="invalid_argument")


def _strict_error(msg: str):
    return TorchRuntimeError(msg, code="strict_mode")


def _check_requires_grad(inputs, input_type, strict):
    if not strict:
        return
    for i, inp in enumerate(inputs):
        if inp is None:
            raise _strict_error(f"The output of the user-provided function is independent of input {i}. This is "
                                "not allowed in strict mode.")
        if not inp.requires_grad:
            if input_type == "hessian":
                raise _strict_error(
                    f"The hessian of the user-provided function with respect to input {i} is independent of the "
                    "input. This is not allowed in strict mode. You should ensure that your function is thrice "
                    "differentiable and that the hessian depends on the inputs.")
            if input_type == "jacobian":
                raise _strict_error(
                    "While computing the hessian, found that the jacobian of the user-provided function with "
                    f"respect to input {i} is independent of the input. This is not allowed in strict mode. You "
                    "should ensure that your function is twice differentiable and that the jacobian depends on the "
                    "inputs (this would be violated by a linear function for example).")
            if input_type == "grad_inputs":
                raise _strict_error(f"The gradient with respect to input {i} is independent of the inputs of the "
                                    "user-provided function. This is not allowed in strict mode.")
            raise _strict_error(f"Output {i} of the user-provided function does not require gradients. The outputs "
                                "must be computed in a differentiable manner from the input when running in strict "
                                "mode.")


def _autograd_grad(outputs, inputs, grad_outputs=None, create_graph=False, retain_graph=None,
                   is_grads_batched=False):
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    new_outputs, new_grad_outputs = [], []
    for out, grad_out in zip(outputs, grad_outputs):
        if out is not None and out.requires_grad:
            new_outputs.append(out)
            new_grad_outputs.append(grad_out)
    if not new_outputs:
        return (None,) * len(inputs)
    return autograd.grad(new_outputs, list(inputs), new_grad_outputs, retain_graph, create_graph,
                         allow_unused=True, is_grads_batched=is_grads_batched)


_ZERO_STAGE_MESSAGES = {
    "back": "The output of the user-provided function is independent of input {i}. This is not allowed in strict "
            "mode.",
    "back_trick": "The gradient with respect to the input is independent of entry {i} in the grad_outputs when "
                  "using the double backward trick to compute forward mode gradients. This is not allowed in strict "
                  "mode.",
    "double_back": "The jacobian of the user-provided function is independent of input {i}. This is not allowed in "
                   "strict mode.",
    "double_back_trick": "The hessian of the user-provided function is independent of entry {i} in the "
                         "grad_jacobian. This is not allowed in strict mode as it prevents from using the double "
                         "backward trick to replace forward mode AD.",
}


def _zeros_like(t: Tensor, requires_grad: bool = False) -> Tensor:
    return Tensor(kcall(K.zeros, t.data.shape, t.data.dtype), requires_grad=requires_grad)  # a plan's constant


def _fill_in_zeros(grads, refs, strict, create_graph, stage):
    res = []
    for i, grads_i in enumerate(grads):
        if grads_i is None:
            if strict:
                raise _strict_error(_ZERO_STAGE_MESSAGES[stage].format(i=i))
            grads_i = _zeros_like(refs[i])
        elif strict and create_graph and not grads_i.requires_grad:
            what = "hessian" if "double" in stage else "jacobian"
            raise _strict_error(f"The {what} of the user-provided function is independent of input {i}. This is not "
                                "allowed in strict mode when create_graph=True.")
        res.append(grads_i)
    return tuple(res)


def _check_v_none(inputs, what="input to"):
    if len(inputs) != 1 or inputs[0].numel() != 1:
        raise TorchRuntimeError(f"The vector v can only be None if the {what} the user-provided function "
                                f"{'is' if what == 'input to' else 'returns'} a single Tensor with a single "
                                "element.", code="invalid_argument")


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """torch.autograd.functional.vjp -> (func_output, vjp)."""
    with set_grad_enabled(True):
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", "vjp")
        _check_requires_grad(outputs, "outputs", strict=strict)
        if v is not None:
            _, v = _as_tuple(v, "v", "vjp")
            v = _grad_preprocess(v, create_graph=create_graph, need_graph=False)
            _validate_v(v, outputs, is_outputs_tuple)
        elif len(outputs) != 1 or outputs[0].numel() != 1:
            raise TorchRuntimeError("The vector v can only be None if the user-provided function returns a single "
                                    "Tensor with a single element.", code="invalid_argument")
    with set_grad_enabled(True if create_graph else _grad_enabled.get()):
        grad_res = _autograd_grad(outputs, inputs, v, create_graph=create_graph)
        res = _fill_in_zeros(grad_res, inputs, strict, create_graph, "back")
    outputs = _grad_postprocess(outputs, create_graph)
    res = _grad_postprocess(res, create_graph)
    return _tuple_postprocess(outputs, is_outputs_tuple), _tuple_postprocess(res, is_inputs_tuple)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """torch.autograd.functional.jvp -> (func_output, jvp), by the double-backward trick as torch does."""
    with set_grad_enabled(True):
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        if v is not None:
            _, v = _as_tuple(v, "v", "jvp")
            v = _grad_preprocess(v, create_graph=create_graph, need_graph=False)
            _validate_v(v, inputs, is_inputs_tuple)
        else:
            _check_v_none(inputs)
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", "jvp")
        _check_requires_grad(outputs, "outputs", strict=strict)
        grad_outputs = tuple(_zeros_like(out, requires_grad=True) for out in outputs)
        grad_inputs = _autograd_grad(outputs, inputs, grad_outputs, create_graph=True)
        _check_requires_grad(grad_inputs, "grad_inputs", strict=strict)
    with set_grad_enabled(True if create_graph else _grad_enabled.get()):
        grad_res = _autograd_grad(grad_inputs, grad_outputs, v, create_graph=create_graph)
        res = _fill_in_zeros(grad_res, outputs, strict, create_graph, "back_trick")
    outputs = _grad_postprocess(outputs, create_graph)
    res = _grad_postprocess(res, create_graph)
    return _tuple_postprocess(outputs, is_outputs_tuple), _tuple_postprocess(res, is_outputs_tuple)


def check_control() -> None:
    """The run's deadline and cancel flag, between the passes of a transform (each pass checks its own nodes)."""
    budget = current_budget()
    if budget is not None:
        budget.check()


def _check_jacobian(out_shapes, inputs, what: str = "jacobian") -> None:
    """A Jacobian's blocks, ``(*out_shape, *inp.shape)`` each, refused before any row pass when one passes the
    per-tensor limit, all of them the run's bytes, or (when the response will show them) the response limit:
    the shapes say it all, so nothing is computed for a result that could not be kept."""
    budget = current_budget()
    if budget is not None:
        check_results([((*out, *inp.shape), inp.data.dtype) for out in out_shapes for inp in inputs], what,
                      f"{what} block", shown=budget.sending)


def _check_basis(tensors, total: int, what: str) -> None:
    """The standard basis of ``total`` rows over ``tensors``: one (total, numel) chunk each, before it is made."""
    for t in tensors:
        check_numel((total, t.numel()), f"{what}'s standard basis", t.data.dtype.itemsize)


def _basis_chunk(total: int, n: int, start: int, dtype) -> np.ndarray:
    """A kernel: rows ``start:start + n`` of the (total, total) identity's columns as a (total, n) chunk."""
    a = np.zeros((total, n), dtype)
    a[np.arange(start, start + n), np.arange(n)] = 1
    return a


def _standard_basis(tensors, numels) -> tuple:
    """torch's _construct_standard_basis_for: one (total, numel_i) chunk per tensor, the identity split."""
    total = sum(numels)
    chunks, start = [], 0
    for t, n in zip(tensors, numels):
        chunks.append(Tensor(kcall(_basis_chunk, total, n, start, t.data.dtype)))  # a plan's constant
        start += n
    return tuple(chunks)


def _contiguous_reshape(a: np.ndarray, shape: tuple) -> np.ndarray:
    """A kernel: ``a`` reshaped, C-contiguous."""
    return np.ascontiguousarray(a.reshape(shape))


def _jacobian_block(tangent: np.ndarray, a: int, b: int, shape: tuple) -> np.ndarray:
    """A kernel: batched tangents ``(total, *out.shape)`` with the batch moved last, columns ``a:b``, reshaped."""
    return np.ascontiguousarray(np.moveaxis(tangent, 0, -1)[..., a:b]).reshape(shape)


def _jvp_batched(func, inputs, basis, total):
    """torch's vmap of the jvp: one dual pass of ``func`` whose tangents carry the whole basis (a batched
    level, ``batching``); None when an op on the way has no batching rule (the caller loops instead)."""
    try:
        with fw.dual_level():
            fw.current_level().batch = total
            duals = tuple(fw.batched_dual(inp, Tensor(kcall(_contiguous_reshape, b.data, (total, *inp.shape))))
                          for inp, b in zip(inputs, basis))
            is_outputs_tuple, outs = _as_tuple(func(*duals), "outputs")
            primals, tangents = [], []
            for out in outs:
                primal, tangent = fw.batched_unpack(out)
                primals.append(primal)
                tangents.append(tangent if tangent is not None else
                                Tensor(kcall(K.zeros, (total, *primal.shape), primal.data.dtype)))
    except (DeadlineExceededError, CancelledError, G.RandomInVmapError):
        raise
    except (BatchingUnsupported, EngineError):  # as autograd._grad_batched_pass: the loop decides
        return None
    return is_outputs_tuple, primals, tangents


def _probe_outputs(func, inputs):
    """The function's outputs' shapes, from one plain call (no tangents: a forward of the function, where the
    batched pass carries N basis vectors through it) that leaves no trace: inside a dual level as the batched
    pass has, under a journal rolled back after it (in-place writes, version counters, grads, histories),
    drawing from copies of the run's generators, warning into a sink of its own, and unseen by a plan being
    recorded (its tape stays the one the pass alone makes). It runs under the run's deadline and limits. None
    when the call fails: the pass then runs as it would have and says what it says (its error, or its result
    refused from its shapes after it). A Python ``func`` with effects of its own (outside the engine's
    journal) sees them twice."""
    journal = Journal()
    table = G._running.get()
    gens = G.Generators() if table is None else G.Generators(table.default, table.named)
    outer = _warning_sink.get()
    sink = WarningSink(set(outer.seen) if outer is not None else None)
    try:
        gens_token, rec_token = G.use(gens), K._recorder.set(None)
        try:
            with journal, sink, fw.dual_level():
                return tuple(out.shape for out in _as_tuple(func(*inputs), "outputs")[1])
        finally:
            K._recorder.reset(rec_token)
            G.reset(gens_token)
            journal.rollback()
    except (DeadlineExceededError, CancelledError, RecursionError):  # (the pass would meet them as surely)
        raise
    except Exception:  # noqa: BLE001 - whatever the call hit, the pass meets it again and reports it as today
        return None


#: a forward-mode jacobian is running (its probe or its pass): one nested in its function probes nothing, so
#: that nesting costs one extra call of the outermost function, not one per level
_in_jacfwd: contextvars.ContextVar[bool] = contextvars.ContextVar("gradserve_in_jacfwd", default=False)


def _jacobian_row(tangent, out, inputs, numels) -> list:
    """The batched tangents ``(total, *out.shape)`` as one Jacobian block per input, ``(*out.shape, *inp.shape)``
    (torch: the batch moved last, then split per input); a tangent's graph is kept (forward-over-reverse)."""
    if not tangent.requires_grad:
        bounds = np.cumsum((0, *numels)).tolist()
        return [Tensor(kcall(_jacobian_block, tangent.data, a, b, (*out.shape, *inp.shape)))
                for a, b, inp in zip(bounds[:-1], bounds[1:], inputs)]
    jac = tangent.permute(*range(1, tangent.ndim), 0)
    return [piece.reshape((*out.shape, *inp.shape)) for piece, inp in zip(jac.split(list(numels), -1), inputs)]


def _jacfwd(func, inputs, strict=False, vectorize=False, probe=True):
    """The forward-mode jacobian (torch: a vmapped jvp). Its one batched pass learns the outputs' shapes only as
    it makes the tangents that are the result; under limits (``probe``: the caller does not know the blocks'
    shapes already), one plain call of the function (``_probe_outputs``) tells them first, and the blocks are
    refused from them before the basis is made and the pass runs."""
    if strict:
        raise TorchRuntimeError('torch.autograd.functional.jacobian: `strict=True` and `strategy="forward-mode"` '
                                'are not supported together (yet). Please either set `strict=False` or '
                                '`strategy="reverse-mode"`.', code="invalid_argument")
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
    if not vectorize:
        raise TorchRuntimeError("Computing Jacobian using forward-AD or forward-over-reverse Hessian isonly "
                                "implemented for `vectorize=True`.", code="not_implemented",
                                exception="NotImplementedError")
    numels = tuple(inp.numel() for inp in inputs)
    total = sum(numels)
    _check_basis(inputs, total, "jacobian")
    nested = _in_jacfwd.get()
    token = _in_jacfwd.set(True)
    try:
        if probe and not nested and current_budget() is not None:
            shapes = _probe_outputs(func, inputs)
            if shapes is not None:
                _check_jacobian(shapes, inputs)
        vmap = G.in_vmap()  # (the probe is not torch's: it ran unmarked, from copies of the generators)
        try:
            return _jacfwd_passes(func, inputs, numels, is_inputs_tuple)
        finally:
            G._in_vmap.reset(vmap)
    finally:
        _in_jacfwd.reset(token)


def _jacfwd_passes(func, inputs, numels, is_inputs_tuple):
    """The forward-mode jacobian's batched pass, or its loop of one pass per basis vector."""
    total = sum(numels)
    basis = _standard_basis(inputs, numels)
    batched = _jvp_batched(func, inputs, basis, total)
    if batched is not None:
        is_outputs_tuple, primals, tangents = batched
        _check_jacobian([p.shape for p in primals], inputs)  # (again: a probe that failed told nothing)
        result = [_jacobian_row(tan, out, inputs, numels) for tan, out in zip(tangents, primals)]
        return _tuple_postprocess(result, (is_outputs_tuple, is_inputs_tuple))
    columns = None  # per output: list of tangents (one per basis vector)
    is_outputs_tuple, primals = False, None
    for k in range(total):
        check_control()
        if k == 1:  # the first pass told the outputs' shapes: the result is refused before the others
            _check_jacobian([p.shape for p in primals], inputs)
        with fw.dual_level():
            duals = tuple(fw.make_dual(inp, Tensor(np.ascontiguousarray(b.data[k].reshape(inp.shape))))
                          for inp, b in zip(inputs, basis))
            is_outputs_tuple, outs = _as_tuple(func(*duals), "outputs")
            jv, prim = [], []
            for out in outs:
                primal, tangent = fw.unpack_dual(out)
                prim.append(primal)
                jv.append(tangent if tangent is not None else _zeros_like(primal))
        if columns is None:
            columns = [[] for _ in jv]
            primals = prim
        for acc, t in zip(columns, jv):
            acc.append(t)
    # torch: the vmapped tangents (batch first) permuted to put the batch last, then split per input; the
    # tangents keep whatever graph they have (a forward-over-reverse hessian's do), as torch's do
    from .ops.shape import stack
    result = []
    for cols, out in zip(columns, primals):
        if not any(t.requires_grad for t in cols):  # no graph to keep: the same values, assembled in numpy
            jac = np.stack([t.data for t in cols], axis=-1)
            bounds = np.cumsum((0, *numels))
            result.append([Tensor(np.ascontiguousarray(jac[..., a:b]).reshape(*out.shape, *inp.shape))
                           for a, b, inp in zip(bounds[:-1], bounds[1:], inputs)])
            continue
        jac = stack(cols, 0)  # (total, *out.shape)
        jac = jac.permute(*range(1, jac.ndim), 0)
        row = [piece.reshape((*out.shape, *inp.shape)) for piece, inp in zip(jac.split(list(numels), -1), inputs)]
        result.append(row)
    return _tuple_postprocess(result, (is_outputs_tuple, is_inputs_tuple))


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """torch.autograd.functional.jacobian."""
    return _jacobian(func, inputs, create_graph, strict, vectorize, strategy)


def _jacobian(func, inputs, create_graph, strict, vectorize, strategy, probe=True):
    """``jacobian``; ``probe`` False: the caller refused the blocks from their shapes already (a hessian)."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise TorchRuntimeError('Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
                                'function has more outputs than inputs, "forward-mode" tends to be more performant. '
                                'Otherwise, prefer to use "reverse-mode".', code="invalid_argument",
                                exception="AssertionError")
    if strategy == "forward-mode":
        if create_graph:
            raise TorchRuntimeError('torch.autograd.functional.jacobian: `create_graph=True` and `strategy="forward-'
                                    'mode"` are not supported together (yet). Please either set `create_graph=False` '
                                    'or `strategy="reverse-mode"`.', code="not_implemented",
                                    exception="NotImplementedError")
        return _jacfwd(func, inputs, strict, vectorize, probe)
    with set_grad_enabled(True):
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", "jacobian")
        _check_requires_grad(outputs, "outputs", strict=strict)
        _check_jacobian([out.shape for out in outputs], inputs)
        if vectorize:
            if strict:
                raise TorchRuntimeError("torch.autograd.functional.jacobian: `strict=True` and `vectorized=True` are "
                                        "not supported together. Please either set `strict=False` or "
                                        "`vectorize=False`.", code="invalid_argument")
            numels = tuple(out.numel() for out in outputs)
            total = sum(numels)
            _check_basis(outputs, total, "jacobian")
            grad_outputs = _standard_basis(outputs, numels)
            flat_outputs = tuple(out if out.data.ndim == 1 else out.reshape(-1) for out in outputs)
            vj = list(_autograd_grad(flat_outputs, inputs, grad_outputs, create_graph=create_graph,
                                     is_grads_batched=True))
            for i, el in enumerate(vj):
                if el is None:
                    vj[i] = _zeros_like(inputs[i]).expand((total,) + inputs[i].shape)
            jac_in_out = []
            for jac_i, inp in zip(vj, inputs):
                row = [jac.reshape(out.shape + inp.shape) for jac, out in zip(jac_i.split(list(numels), 0), outputs)]
                jac_in_out.append(row)
            jac_out_in = tuple(zip(*jac_in_out))
            jac_out_in = _grad_postprocess(jac_out_in, create_graph)
            return _tuple_postprocess(jac_out_in, (is_outputs_tuple, is_inputs_tuple))
        from .ops.shape import stack
        jac = []
        for i, out in enumerate(outputs):
            jac_i = tuple([] for _ in inputs)
            # one element: its row is the gradient of ``out`` itself (torch selects ``out.reshape(-1)[0]``; the
            # same values, without a view and a select on the graph a hessian differentiates again)
            single = out.numel() == 1
            flat = None if single else out.reshape(-1)
            for j in range(out.numel()):
                check_control()
                vj = _autograd_grad((out,), inputs, (Tensor(np.ones(out.data.shape, out.data.dtype)),),
                                    retain_graph=True, create_graph=create_graph) if single else \
                    _autograd_grad((flat[j],), inputs, retain_graph=True, create_graph=create_graph)
                for el_idx, (acc, vj_el, inp) in enumerate(zip(jac_i, vj, inputs)):
                    if vj_el is not None:
                        if strict and create_graph and not vj_el.requires_grad:
                            raise _strict_error(f"The jacobian of the user-provided function is independent of input "
                                                f"{i}. This is not allowed in strict mode when create_graph=True.")
                        acc.append(vj_el)
                    else:
                        if strict:
                            raise _strict_error(f"Output {i} of the user-provided function is independent of input "
                                                f"{el_idx}. This is not allowed in strict mode.")
                        acc.append(_zeros_like(inp))
            jac.append(tuple(stack(acc, 0).view(*out.shape, *inputs[k].shape) if acc else
                             Tensor(np.zeros((*out.shape, *inputs[k].shape), inputs[k].data.dtype))
                             for k, acc in enumerate(jac_i)))
        jac = _grad_postprocess(tuple(jac), create_graph)
        return _tuple_postprocess(jac, (is_outputs_tuple, is_inputs_tuple))


def _gradient_rows(func, inputs: tuple) -> tuple:
    """hessian's inner ``jacobian(func, inputs, create_graph=True)`` (not strict, as torch calls it) of a function
    that returns one 0-d tensor: the gradient itself, zeros for an input it does not depend on. torch's general
    loop also records a view of each input, a select of the one element and a stack of the one row; the values
    and their dependence on the inputs are the same without them, and the outer jacobian has four fewer nodes
    to differentiate."""
    with set_grad_enabled(True):
        out = func(*inputs)
        grads = _autograd_grad((out,), inputs, (Tensor(kcall(K.ones, (), out.data.dtype)),), retain_graph=True,
                               create_graph=True)
    return tuple(_zeros_like(inp) if g is None else g for g, inp in zip(grads, inputs))


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy="reverse-mode"):
    """torch.autograd.functional.hessian: the jacobian of the (reverse-mode, create_graph) jacobian."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise TorchRuntimeError('Expected strategy to be either "forward-mode" or "reverse-mode".',
                                code="invalid_argument", exception="AssertionError")
    # its blocks are (*inp_i.shape, *inp_j.shape) whatever the function computes (it must return one element):
    # refused from the inputs' shapes before any pass, the first included, in either strategy
    _check_jacobian([inp.shape for inp in inputs], inputs, "hessian")

    def ensure_single_output_function(*inp):
        out = func(*inp)
        is_out_tuple, t_out = _as_tuple(out, "outputs of the user-provided function", "hessian")
        _check_requires_grad(t_out, "outputs", strict=strict)
        if is_out_tuple or not isinstance(out, Tensor):
            raise TorchRuntimeError("The function given to hessian should return a single Tensor",
                                    code="invalid_argument")
        if out.numel() != 1:
            raise TorchRuntimeError("The Tensor returned by the function given to hessian should contain a single "
                                    "element", code="invalid_argument")
        return out if out.data.ndim == 0 else out.squeeze()

    def jac_func(*inp):
        if outer_jacobian_strategy == "forward-mode":
            inp = tuple(t.requires_grad_(True) for t in inp)
        jac = _gradient_rows(ensure_single_output_function, inp)
        _check_requires_grad(jac, "jacobian", strict=strict)
        return jac

    res = _jacobian(jac_func, inputs, create_graph, strict, vectorize, outer_jacobian_strategy, probe=False)
    return _tuple_postprocess(res, (is_inputs_tuple, is_inputs_tuple))


def _single_output(outputs, is_outputs_tuple, name):
    if is_outputs_tuple or not isinstance(outputs[0], Tensor):
        raise TorchRuntimeError(f"The function given to {name} should return a single Tensor", code="invalid_argument")
    if outputs[0].numel() != 1:
        raise TorchRuntimeError(f"The Tensor returned by the function given to {name} should contain a single "
                                "element", code="invalid_argument")


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """torch.autograd.functional.vhp -> (func_output, vhp)."""
    with set_grad_enabled(True):
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "vhp")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        if v is not None:
            _, v = _as_tuple(v, "v", "vhp")
            v = _grad_preprocess(v, create_graph=create_graph, need_graph=False)
            _validate_v(v, inputs, is_inputs_tuple)
        else:
            _check_v_none(inputs)
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", "vhp")
        _check_requires_grad(outputs, "outputs", strict=strict)
        _single_output(outputs, is_outputs_tuple, "vhp")
        jac = _autograd_grad(outputs, inputs, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict=strict)
    with set_grad_enabled(True if create_graph else _grad_enabled.get()):
        grad_res = _autograd_grad(jac, inputs, v, create_graph=create_graph)
        res = _fill_in_zeros(grad_res, inputs, strict, create_graph, "double_back")
    outputs = _grad_postprocess(outputs, create_graph)
    res = _grad_postprocess(res, create_graph)
    return _tuple_postprocess(outputs, is_outputs_tuple), _tuple_postprocess(res, is_inputs_tuple)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """torch.autograd.functional.hvp -> (func_output, hvp), by the double-backward trick as torch does."""
    with set_grad_enabled(True):
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "hvp")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        if v is not None:
            _, v = _as_tuple(v, "v", "hvp")
            v = _grad_preprocess(v, create_graph=create_graph, need_graph=False)
            _validate_v(v, inputs, is_inputs_tuple)
        else:
            _check_v_none(inputs)
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", "hvp")
        _check_requires_grad(outputs, "outputs", strict=strict)
        _single_output(outputs, is_outputs_tuple, "hvp")
        jac = _autograd_grad(outputs, inputs, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict=strict)
        grad_jac = tuple(_zeros_like(inp, requires_grad=True) for inp in inputs)
        double_back = _autograd_grad(jac, inputs, grad_jac, create_graph=True)
        _check_requires_grad(jac, "hessian", strict=strict)
    with set_grad_enabled(True if create_graph else _grad_enabled.get()):
        grad_res = _autograd_grad(double_back, grad_jac, v, create_graph=create_graph)
        res = _fill_in_zeros(grad_res, inputs, strict, create_graph, "double_back_trick")
    outputs = _grad_postprocess(outputs, create_graph)
    res = _grad_postprocess(res, create_graph)
    return _tuple_postprocess(outputs, is_outputs_tuple), _tuple_postprocess(res, is_inputs_tuple)


#: transform name -> (function, parameters after func and inputs, in torch's positional order)
TRANSFORMS = {
    "vjp": (vjp, ("v", "create_graph", "strict")),
    "jvp": (jvp, ("v", "create_graph", "strict")),
    "vhp": (vhp, ("v", "create_graph", "strict")),
    "hvp": (hvp, ("v", "create_graph", "strict")),
    "jacobian": (jacobian, ("create_graph", "strict", "vectorize", "strategy")),
    "hessian": (hessian, ("create_graph", "strict", "vectorize", "outer_jacobian_strategy")),
}


def check_flag(name: str, value, fn: str) -> None:
    if name in ("create_graph", "strict", "vectorize") and not isinstance(value, bool):
        raise InvalidArgumentError(f"{fn}(): argument '{name}' must be bool, not {type(value).__name__}")
