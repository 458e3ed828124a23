"""Reverse mode: ``backward()`` and ``grad()`` with torch's semantics.

1. Root edges and gradient arguments are validated (torch's messages).
2. The graph reachable from the roots is ordered topologically; when ``inputs`` are given, only the nodes
   that lead to them run (torch's exec_info pruning), so an unrelated freed branch does not fail.
3. Each node's VJP runs with grad mode equal to ``create_graph``: one code path gives first- and
   higher-order gradients. Gradients are un-broadcast to each input's shape (``sum_to``) and cast to its
   dtype here, once, not in every rule.
4. Only when every VJP has succeeded are ``.grad`` fields written and saved tensors freed. PyTorch may
   leave a failed backward half-applied; the engine deliberately does not (all or nothing).
"""

from __future__ import annotations

import numpy as np

from . import dtypes as D
from . import kernel as K
from . import registry as _registry
from .batching import sum_to_batched, vjp_rule
from .budget import current_control
from .dual import current_level
from .errors import (
    CREATE_GRAPH_WARNING,
    BatchingUnsupported,
    CancelledError,
    DeadlineExceededError,
    EngineError,
    NoGradFnError,
    RequiresGradError,
    TorchRuntimeError,
    TorchTypeError,
    TorchValueError,
)
from .grad_mode import _grad_enabled, check_results, emit_warning, set_grad_enabled
from .journal import array_, setattr_, setitem_
from .kernel import kcall, kinplace
from .node import ACCUMULATE_GRAD, Ctx, Node, P, SavedTensor, _freeing, node_of, release_all
from .ops import elementwise as _ew  # (the op table is loaded before this module: gradserve_server/engine/__init__.py)
from .ops.common import sum_to
from .ops.shape import clone, expand, stack, to
from .registry import PRIMS, edge, jvp, vjp
from .tensor import Tensor, install_hooks


def _size(shape) -> str:
    return "torch.Size([" + ", ".join(str(s) for s in shape) + "])"


def _as_tuple(value, n: int) -> tuple:
    """torch's _tensor_or_tensors_to_tuple: None -> (None,)*n, a Tensor -> (t,), else tuple(value)."""
    if value is None:
        return (None,) * n
    if isinstance(value, Tensor):
        return (value,)
    try:
        return tuple(value)
    except TypeError:
        raise TorchTypeError(f"'{type(value).__name__}' object is not iterable", code="invalid_gradient") from None


def _make_grads(outputs: tuple, grads: tuple) -> list:
    out = []
    for i, (o, g) in enumerate(zip(outputs, grads)):
        if g is None:
            if o.requires_grad:
                if o.data.size != 1:
                    raise TorchRuntimeError("grad can be implicitly created only for scalar outputs",
                                            code="implicit_grad_nonscalar")
                out.append(Tensor(kcall(K.ones, o.data.shape, o.data.dtype)))
            else:
                out.append(None)
        elif isinstance(g, Tensor):
            if g.data.shape != o.data.shape:
                raise TorchRuntimeError(
                    f"Mismatch in shape: grad_output[{i}] has a shape of {_size(g.data.shape)} and output[{i}] "
                    f"has a shape of {_size(o.data.shape)}.", code="grad_shape_mismatch")
            if g.data.dtype != o.data.dtype:
                g = to(g, o.dtype)
            out.append(g)
        else:
            raise TorchTypeError(f"gradients can be either Tensors or None, but got {type(g).__name__}",
                                 code="invalid_gradient")
    return out


def _roots(tensors) -> tuple:
    if isinstance(tensors, Tensor):
        return (tensors,)
    tensors = tuple(tensors)
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TorchTypeError(f"expected Tensor as element 0 in argument 0, but got {type(t).__name__}",
                                 code="invalid_argument")
    return tensors


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph: bool = False, inputs=None):
    """``torch.autograd.backward``. Returns ``{tensor: contribution}`` for every tensor whose ``.grad`` this
    pass wrote (leaves, retained non-leaves, non-leaf ``inputs``)."""
    tensors = _roots(tensors)
    if inputs is not None:
        inputs = _roots(inputs)
        if len(inputs) == 0:
            raise TorchRuntimeError("`inputs` argument to `backward()` cannot be empty.", code="empty_inputs")
    grads = _make_grads(tensors, _as_tuple(grad_tensors, len(tensors)))
    if retain_graph is None:
        retain_graph = create_graph
    if create_graph:
        emit_warning(CREATE_GRAPH_WARNING, once_key="create_graph_backward")
    token = _freeing.set(not retain_graph)
    try:
        return _run(tensors, grads, bool(retain_graph), bool(create_graph), inputs, accumulate=True)
    finally:
        _freeing.reset(token)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph: bool = False,
         allow_unused=None, is_grads_batched: bool = False, materialize_grads: bool = False) -> tuple:
    """``torch.autograd.grad``: returns a tuple (one entry per input) and never writes ``.grad``.

    ``is_grads_batched``: the first dimension of every grad_output is a batch; torch vmaps the pass, the engine
    runs one pass with each node's batching rule (``engine.batching``), or, when a node on the way has none,
    one pass per batch entry (the same values)."""
    if materialize_grads and allow_unused is False:
        raise TorchValueError("Expected allow_unused to be True or not passed when materialize_grads=True, "
                              "but got: allow_unused=False.", code="invalid_argument")
    if allow_unused is None:
        allow_unused = materialize_grads
    outputs = _roots(outputs)
    inputs = _roots(inputs)
    if retain_graph is None:
        retain_graph = create_graph
    if is_grads_batched:
        return _grad_batched(outputs, inputs, _as_tuple(grad_outputs, len(outputs)), bool(retain_graph),
                             bool(create_graph), allow_unused, materialize_grads)
    grads = _make_grads(outputs, _as_tuple(grad_outputs, len(outputs)))
    token = _freeing.set(not retain_graph)
    try:
        captured = _run(outputs, grads, bool(retain_graph), bool(create_graph), inputs, accumulate=False)
    finally:
        _freeing.reset(token)
    return _finish_grad(inputs, captured, create_graph, allow_unused, materialize_grads)


def _grad_batched(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused, materialize_grads):
    """torch.autograd.grad(..., is_grads_batched=True): torch's shape checks (on grad_output[0]) and
    vmap's errors, then one pass per batch entry, the graph retained for all but the last."""
    sizes = []
    for i, (o, g) in enumerate(zip(outputs, grad_outputs)):
        if not isinstance(g, Tensor):
            continue
        if g.data.ndim == 0:
            raise TorchValueError(
                "vmap(vjp, in_dims=0, ...)(<inputs>): Got in_dim=0 for some input, but that input is a Tensor "
                "of dimensionality 0 so expected in_dim to satisfy 0 <= in_dim < 0.", code="invalid_gradient")
        if g.data.shape[0] == 0:
            from .errors import TorchIndexError
            raise TorchIndexError("index 0 is out of bounds for dimension 0 with size 0", code="invalid_gradient")
        if g.data.shape[1:] != o.data.shape:
            # torch words the grad's shape from grad_output[0] without its first dimension
            raise TorchRuntimeError(
                "If `is_grads_batched=True`, we interpret the first dimension of each grad_output as the batch "
                "dimension. The sizes of the remaining dimensions are expected to match the shape of "
                f"corresponding output, but a mismatch was detected: grad_output[{i}] has a shape of "
                f"{_size(g.data.shape[2:])} and output[{i}] has a shape of {_size(o.data.shape)}. If you only "
                "want some tensors in `grad_output` to be considered batched, consider using vmap.",
                code="grad_shape_mismatch")
        sizes.append(g.data.shape[0])
    # an implicit (None) grad_output of a scalar output is not batched: vmap refuses it
    _make_grads(outputs, tuple(g[0] if isinstance(g, Tensor) else g for g in grad_outputs))
    if any(g is None and o.requires_grad for o, g in zip(outputs, grad_outputs)):
        raise TorchValueError(
            "vmap(vjp, in_dims=0, ...)(<inputs>): Got in_dim=0 for some input, but that input is a Tensor of "
            "dimensionality 0 so expected in_dim to satisfy 0 <= in_dim < 0.", code="invalid_gradient")
    if len(set(sizes)) > 1:
        raise TorchValueError(
            "vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
            f"[{', '.join(map(str, sizes))}] for the mapped dimension", code="invalid_gradient")
    batch = sizes[0] if sizes else 1
    # the gradients are (batch, *inp.shape) each: refused from the shapes before the batched pass (and before
    # the loop of ``batch`` passes it falls back to when a batch does not fit)
    check_results([((batch, *inp.shape), inp.data.dtype) for inp in inputs], "batched gradients",
                  "batched gradient")
    batched = _grad_batched_pass(outputs, inputs, grad_outputs, batch, retain_graph, create_graph)
    if batched is None:
        batched = _grad_loop(outputs, inputs, grad_outputs, batch, retain_graph, create_graph)
    return _finish_batched(inputs, batched, create_graph, allow_unused, materialize_grads)


def _grad_loop(outputs, inputs, grad_outputs, batch, retain_graph, create_graph) -> list:
    """One reverse pass per batch entry (the graph retained for all but the last), stacked per input."""
    per_input: list[list] = [[] for _ in inputs]
    for b in range(batch):
        grads = _make_grads(outputs, tuple(g[b] if isinstance(g, Tensor) else g for g in grad_outputs))
        keep = retain_graph or b < batch - 1
        captured = _run(outputs, grads, keep, create_graph, inputs, accumulate=False)
        for acc, g in zip(per_input, _finish_grad(inputs, captured, create_graph, True, False)):
            acc.append(g)
    result = []
    for inp, gs in zip(inputs, per_input):
        if all(g is None for g in gs):
            result.append(None)
            continue
        gs = [g if g is not None else Tensor(np.zeros(inp.data.shape, inp.data.dtype)) for g in gs]
        result.append(stack(gs, 0) if create_graph else Tensor(np.stack([g.data for g in gs])))
    return result


def _grad_batched_pass(outputs, inputs, grad_outputs, batch, retain_graph, create_graph):
    """One reverse pass over the whole batch (``batching``), or None: then the caller loops."""
    grads = []
    for o, g in zip(outputs, grad_outputs):
        if isinstance(g, Tensor) and g.data.dtype != o.data.dtype:
            g = to(g, o.dtype)
        grads.append(g if isinstance(g, Tensor) else None)
    try:
        return _run(outputs, grads, retain_graph, create_graph, inputs, accumulate=False, batch=batch)
    except (DeadlineExceededError, CancelledError):
        raise
    except (BatchingUnsupported, EngineError):
        # no rule; or a batch over the limits (one entry may fit), or any other error: the loop then gives
        # the per-entry error torch gives, if there is one (the batched pass wrote and freed nothing)
        return None


def _finish_batched(inputs, captured, create_graph, allow_unused, materialize_grads) -> tuple:
    """An input no gradient reached: torch's zeros_like(input) (not batched) or its unused-input error."""
    result = []
    for i, (inp, g) in enumerate(zip(inputs, captured)):
        if g is None:
            if materialize_grads:
                result.append(Tensor(np.zeros(inp.data.shape, inp.data.dtype), requires_grad=bool(create_graph)))
                continue
            if not allow_unused:
                raise TorchRuntimeError(
                    f"The differentiated Tensor at index {i} appears to not have been used in the graph. "
                    f"Set allow_unused=True if this is the desired behavior.", code="unused_input")
        result.append(g)
    return tuple(result)


def _finish_grad(inputs, captured, create_graph, allow_unused, materialize_grads) -> tuple:
    result = []
    for i, (inp, g) in enumerate(zip(inputs, captured)):
        if g is None:
            if materialize_grads:  # torch: zeros_like(input, requires_grad=create_graph)
                g = Tensor(np.zeros(inp.data.shape, inp.data.dtype), requires_grad=bool(create_graph))
            elif not allow_unused:
                raise TorchRuntimeError(
                    f"The differentiated Tensor at index {i} appears to not have been used in the graph. "
                    f"Set allow_unused=True if this is the desired behavior.", code="unused_input")
        result.append(g)  # a gradient passed through untouched is the caller's tensor itself, as in torch
    return tuple(result)


def _dependencies(roots: list[Node]) -> dict:
    """For every node reachable from the roots, how many edges point at it from reachable nodes."""
    deps: dict[Node, int] = {}
    nodes = dict.fromkeys(roots)  # two roots on one node (outputs of a split) count its edges once
    stack = [r.next_functions for r in nodes]  # (the edges of the nodes still to walk)
    get = deps.get
    pop = stack.pop
    push = stack.append
    if len(stack) > 1:
        # a root reached from another root is on the stack already
        while stack:
            for c, _ in pop():
                if c is not None:
                    n = get(c)
                    if n is None:
                        deps[c] = 1
                        if c not in nodes:
                            push(c.next_functions)
                    else:
                        deps[c] = n + 1
        return deps
    while stack:  # (one root: never reached, the graph is acyclic)
        for c, _ in pop():
            if c is not None:
                n = get(c)
                if n is None:
                    deps[c] = 1
                    push(c.next_functions)
                else:
                    deps[c] = n + 1
    return deps


def _topological(roots: list[Node]) -> list[Node]:
    """Parents before children (Kahn's algorithm over the reachable graph)."""
    deps = _dependencies(roots)
    order = []
    ready = [r for r in dict.fromkeys(roots) if r not in deps]
    while ready:
        n = ready.pop()
        order.append(n)
        for c, _ in n.next_functions:
            if c is None:
                continue
            d = deps[c] - 1
            deps[c] = d
            if d == 0:
                ready.append(c)
    return order


#: the leaf's node kind, compared by name in the pass
_ACC = ACCUMULATE_GRAD.name


def _tensor_slots(ctx) -> list[str]:
    return [k for k, v in ctx.__dict__.items() if isinstance(v, Tensor) and v.data.dtype.kind in "fV"]


def _fused(node: Node, prim, ctx: Ctx, grad: Tensor, name: str) -> tuple:
    """The VJP of ``node`` under create_graph, each non-None gradient as one ``name`` node that keeps the
    formula's inputs (the incoming gradient and the saved tensors) and recomputes it when differentiated.

    For backward formulas torch computes with one ATen function (derivatives.yaml: ``gelu_backward``...),
    declared with the primitive (``vjp(..., double_backward="GeluBackwardBackward0")``): under create_graph
    each gradient they give is one node of that function's name, whose inputs are the incoming gradient and
    the node's saved tensors (so it requires grad when any of them does)."""
    outs = prim.vjp(ctx, grad)
    originals = [grad] + [getattr(ctx, k) for k in _tensor_slots(ctx)]
    edges = tuple(edge(t) for t in originals)
    if all(e[0] is None for e in edges):
        return outs
    meta = tuple((t.data.shape, t.data.dtype) for t in originals)
    wrapped = []
    for i, o in enumerate(outs):
        if o is None:
            wrapped.append(None)
            continue
        saved = {"fn": node, "index": i, "inputs": [SavedTensor(t) for t in originals]}
        # torch's backward function writes a gradient shaped and typed like the input it is for (a
        # layer_norm weight, mixed-dtype losses): no SumBackward0/ToCopyBackward0 over it
        shape, dt = node.input_meta[i]
        if o.data.shape != shape:
            o = sum_to(o, shape)
        if o.data.dtype != dt:
            o = to(o, dt)
        w = Tensor(o.data, True, Node(name, P.FusedBackward.name, edges, saved, meta))
        if o._fw_grad is not None:  # forward over reverse: the formula's ops gave the tangent
            w._fw_grad = o._fw_grad
            current_level().tensors.append(w)
        wrapped.append(w)
    return tuple(wrapped)


@vjp("FusedBackward", inputs=(), saves=("fn", "index", "inputs"))
def _fused_vjp(ctx, gg):
    """Recompute the formula on its inputs with recording on, and differentiate it with respect to them.
    Each input enters through a proxy node of its own, so the formula is differentiated with respect to each
    input separately (a saved tensor that is a function of another input is held fixed)."""
    fn, inputs = ctx.fn, ctx.inputs
    proxies = [Tensor(t.data, True, node_of(P.AliasBackward0, (edge(t),), None, ((t.data.shape, t.data.dtype),)))
               if t.requires_grad else t
               for t in inputs]
    formula = Ctx.__new__(Ctx)
    slots = [k for k, v in fn.saved.items() if isinstance(v, SavedTensor) and v.dtype in ("float32", "float64")]
    for k, v in fn.saved.items():
        if isinstance(v, SavedTensor):  # non-float saved tensors (targets, indices) are not inputs of the node
            formula.__dict__[k] = proxies[1 + slots.index(k)] if k in slots else v.unpack(fn)
        elif not (isinstance(v, list) and any(isinstance(x, SavedTensor) for x in v)):
            formula.__dict__[k] = v  # ints, lists of ints (padding), strings
    formula.node = fn
    formula.needs = tuple(e[0] is not None for e in fn.next_functions)
    with set_grad_enabled(True):
        out = PRIMS[fn.prim].vjp(formula, proxies[0])[ctx.index]
    if out is not None and gg.data.shape != out.data.shape:  # the fused gradient was summed to its input's shape
            gg = expand(gg, out.shape)
    if out is not None and gg.data.dtype != out.data.dtype:  # and cast to its input's dtype
        gg = to(gg, out.dtype)
    wrt = [i for i, t in enumerate(inputs) if t.requires_grad]
    got = [None] * len(wrt)
    if out is not None and out.requires_grad and wrt:
        got = _run((out,), [gg], True, _grad_enabled.get(), [proxies[i] for i in wrt], accumulate=False,
                   hooks=False)
    res = [None] * len(inputs)
    zeros = PRIMS[fn.prim].double_backward_zeros
    for i, g in zip(wrt, got):
        # an input the formula does not depend on gets zeros, as torch's formulas give (``self: zeros_like``)
        res[i] = g if g is not None or not zeros else Tensor(np.zeros(inputs[i].data.shape, inputs[i].data.dtype))
    return tuple(res)


@jvp()
def _fused_jvp(ctx, *tangents):
    """Not reached through ``record``: ``_fused`` gives each fused gradient the tangent its formula's ops
    computed (forward over reverse), and ``_fused_vjp`` records ordinary ops."""
    raise TorchRuntimeError("FusedBackward nodes are made by the backward pass, not recorded",
                            code="internal_error")


def _ctx(node: Node, needs: tuple | None) -> Ctx:
    """The node's context (every saved tensor unpacked, checked, first); ``needs``: the inputs this pass
    asks of the node (torch's task_should_compute_output: an edge that exists and leads to a requested
    input), when the pass is pruned to ``inputs``."""
    ctx = Ctx(node)
    if needs is not None:
        ctx.needs = needs
    return ctx


def _apply_batched(node: Node, grads: list, batch: int, needs: tuple | None = None) -> list:
    """A node's batched VJP (``batching.vjp_rule``) over gradients ``(batch, *shape)``."""
    prim = PRIMS[node.prim]
    if prim.n_outputs != 1:
        raise BatchingUnsupported(node.prim)
    rule = vjp_rule(node.prim)
    outs = rule(_ctx(node, needs), grads[0], batch)
    res = []
    for (child, _), meta, o in zip(node.next_functions, node.input_meta, outs):
        if child is None or o is None:
            res.append(None)
            continue
        shape, dt = meta
        if o.data.shape[1:] != shape:
            o = sum_to_batched(o, shape)
        if o.data.dtype != dt:
            o = to(o, dt)
        res.append(o)
    return res


def _expandable(shape: tuple, to: tuple) -> bool:
    """``shape`` broadcasts to ``to`` (torch's is_expandable_to)."""
    if len(shape) > len(to):
        return False
    return all(s == t or s == 1 for s, t in zip(reversed(shape), reversed(to)))


def _apply(node: Node, grads: list, needs: tuple | None = None) -> list:
    """Run a node's VJP; un-broadcast and cast each result to its input's shape and dtype."""
    prim = PRIMS[node.prim]
    ctx = Ctx(node)
    if needs is not None:
        ctx.needs = needs
    fused = prim.double_backward
    if fused and grads[0] is not None and _grad_enabled.get():
        outs = _fused(node, prim, ctx, grads[0], fused)
    else:
        if node.prim in HALF_IN_FLOAT32 and not _grad_enabled.get():
            grads = [_widened(g) for g in grads]
        outs = prim.vjp(ctx, grads[0] if prim.n_outputs == 1 else grads)
    return _conform(node, outs)


#: backward formulas torch computes in one float32 kernel for float16/bfloat16 (the normalisations: their
#: gradient is a small difference of large terms, which rounding each step of the engine's formula would lose).
#: The incoming gradient is widened to float32, so the formula runs there; ``_conform`` rounds the result once.
#: Not under create_graph, where the formula is recorded as torch records it.
HALF_IN_FLOAT32 = frozenset(p.name for p in (P.NativeLayerNormBackward0, P.NativeGroupNormBackward0,
                                                P.NativeBatchNormBackward0))
_F32 = np.dtype(np.float32)


def _widened(g):
    if g is None or not D.is_half(g.data.dtype):
        return g
    return Tensor(kcall(K.astype, g.data, _F32))


def _conform(node: Node, outs) -> list | tuple:
    """Each gradient a VJP gave un-broadcast and cast to its input's shape and dtype (None where the edge or
    the gradient is None); torch's validate_outputs. The VJP's own sequence when every gradient fits."""
    if outs.__class__ is not tuple and outs.__class__ is not list:
        outs = tuple(outs)
    nexts, metas = node.next_functions, node.input_meta
    if len(outs) == len(nexts) == len(metas):
        for (child, _), meta, o in zip(nexts, metas, outs):
            if o is not None:
                a = o.data
                if child is None or meta is None or a.shape != meta[0] or (a.dtype is not meta[1]
                                                                            and a.dtype != meta[1]):
                    break
        else:
            return outs
    res = []
    for i, ((child, _), meta, o) in enumerate(zip(node.next_functions, node.input_meta, outs)):
        if child is None or o is None:
            res.append(None)
            continue
        shape, dt = meta
        d = o.data
        if d.shape == shape and d.dtype == dt:
            res.append(o)
            continue
        if d.shape != shape:
            if not _expandable(shape, d.shape):  # torch's validate_outputs
                raise TorchRuntimeError(f"Function {node.name} returned an invalid gradient at index {i} - got "
                                        f"{list(d.shape)} but expected shape compatible with {list(shape)}",
                                        code="invalid_gradient")
            o = sum_to(o, shape)
            d = o.data
        if d.dtype != dt:
            o = to(o, dt)
        res.append(o)
    return res


def _run(roots: tuple, grads: list, retain_graph: bool, create_graph: bool, inputs, accumulate: bool,
         hooks: bool = True, batch: int | None = None):
    """``hooks=False``: a backward inside a node's own formula, where retain_grad hooks must not fire.
    ``batch``: every gradient has a leading batch dimension of that size (``is_grads_batched``); a node
    without a batching rule raises BatchingUnsupported before anything is written or freed."""
    root_edges = []
    for i, t in enumerate(roots):
        e = edge(t) if t.requires_grad else (None, 0)
        if e[0] is None:  # a view made under no_grad requires grad but has no history of its own
            raise NoGradFnError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        root_edges.append(e)
    input_edges = None
    if inputs is not None:
        for t in inputs:
            if not isinstance(t, Tensor):
                raise TorchTypeError(f"expected Tensor in inputs, but got {type(t).__name__}",
                                     code="invalid_argument")
            if not t.requires_grad:
                raise RequiresGradError("One of the differentiated Tensors does not require grad")
        input_edges = [edge(t) for t in inputs]

    if accumulate and inputs is not None:
        # torch: backward(inputs=[t]) on a non-leaf t retains its grad from then on
        for t in inputs:
            if t.grad_fn is not None and not t.retains_grad:
                t.retain_grad()
    root_nodes = [n for n, _ in root_edges]
    # torch runs a single root's node directly (no GraphRoot): its retain_grad hooks fire even when the
    # node is not needed to reach ``inputs``
    hooked_root = root_nodes[0] if len(root_nodes) == 1 else None

    pruned = input_edges is not None
    fast = not pruned and batch is None
    # which nodes run (needed) and which receive gradients (relevant)
    if not pruned:
        needed = relevant = None  # every node in order runs
        captures: dict[Node, list] = {}
        order = () if fast else _topological(root_nodes)
    else:
        order = _topological(root_nodes)
        targets = {n for n, _ in input_edges if n is not None and n.prim == _ACC}
        captures = {}
        for idx, (n, nr) in enumerate(input_edges):
            if n is not None and n.prim != _ACC:
                captures.setdefault(n, []).append((idx, nr))
        # reach: nodes from which a target or a captured non-leaf input is reachable (themselves included);
        # needed: the function nodes among them that must run to get gradients there
        reach = set()
        needed = set()
        for n in reversed(order):
            for c, _ in n.next_functions:
                if c is not None and c in reach:
                    reach.add(n)
                    needed.add(n)
                    break
            else:
                if n in targets or n in captures:
                    reach.add(n)
        if accumulate:
            needed |= set(captures)  # torch: backward(inputs=[t]) runs t's own grad_fn (and frees it)
        relevant = reach

    buffers: dict[Node, list] = {}
    for (node, nr), g in zip(root_edges, grads):
        buf = buffers.setdefault(node, [None] * node.n_outputs)
        buf[nr] = g if buf[nr] is None else _add(buf[nr], g)

    captured = [None] * (len(inputs) if inputs is not None else 0)
    leaf_grads: list = []  # an accumulator, its gradient, an accumulator, ... (flat: no tuple per leaf)
    retained: list[tuple[Tensor, Tensor]] = []
    executed: list[Node] = []
    control = current_control()
    with set_grad_enabled(create_graph):
        if fast:  # every node reachable from the roots runs
            _run_all(root_nodes, buffers, create_graph, hooks, control, leaf_grads, retained, executed)
        for node in () if fast else order:
            if control is not None:
                control.check()  # a deadline or a cancellation stops a long pass between nodes
            if pruned and node not in relevant and node is not hooked_root:
                continue
            buf = buffers.pop(node, None)
            if buf is None:
                continue
            if pruned and node in captures:
                for idx, nr in captures[node]:
                    captured[idx] = buf[nr]
                    if accumulate and buf[nr] is not None and not any(inputs[i] is inputs[idx] for i in range(idx)):
                        retained.append((inputs[idx], buf[nr]))
            if node.retained and hooks:
                if batch is not None:  # a retained gradient is per entry: the caller's loop writes it
                    raise BatchingUnsupported("retain_grad")
                # retain_grad hooks fire in backward and grad alike (a backward input is written once)
                for nr, t in node.retained.items():
                    if buf[nr] is not None and not (accumulate and inputs is not None
                                                    and any(t is i for i in inputs)):
                        retained.append((t, buf[nr]))
            if pruned and node not in relevant:
                continue
            if node.prim == _ACC:
                if buf[0] is None:
                    continue
                if accumulate:
                    leaf_grads += (node, buf[0])
                else:
                    for idx, (n, _) in enumerate(input_edges):
                        if n is node:
                            captured[idx] = buf[0]
                continue
            if pruned and node not in needed:
                continue
            needs = None
            if pruned:  # only the inputs that lead to a requested one (a formula not needed does not run)
                needs = tuple([c is not None and c in relevant for c, _ in node.next_functions])
                if needs == node.needs:
                    needs = None
            outs = _apply(node, buf, needs) if batch is None else _apply_batched(node, buf, batch, needs)
            executed.append(node)
            for (child, nr), g in zip(node.next_functions, outs):
                if g is None or (pruned and child not in relevant):
                    continue
                b = buffers.get(child)
                if b is None:
                    if child.n_outputs == 1:
                        buffers[child] = [g]
                        continue
                    b = buffers[child] = [None] * child.n_outputs
                b[nr] = g if b[nr] is None else _add(b[nr], g)

    found = []  # (leaf, its gradient)
    if accumulate:
        for node, g in zip(leaf_grads[::2], leaf_grads[1::2]):
            leaf = node.variable
            if leaf.requires_grad:  # torch's AccumulateGrad skips a leaf that no longer requires grad
                found.append((leaf, g))
        for leaf, _ in found:
            if leaf._grad_fn is not None:  # an in-place op gave the leaf a history after the graph saw it
                raise TorchRuntimeError("leaf variable has been moved into the graph interior",
                                        code="invalid_inplace")
    # commit: nothing above changed any tensor's state
    contributions = {}
    if accumulate:
        # a gradient array may be shared (a pass-through VJP, the caller's own gradient, a view): a leaf's new
        # .grad gets its own copy unless the array is provably private to it
        claimed = {id(g.data) for g in grads if g is not None}
        for leaf, g in found:
            if g.data.dtype != leaf.data.dtype:
                g = Tensor(kcall(K.astype, g.data, leaf.data.dtype), g.requires_grad, g.grad_fn, g.output_nr)
            contributions[leaf] = g
            _accumulate_leaf(leaf, g, create_graph, claimed)
    for t, g in retained:
        if accumulate:
            contributions[t] = g
        with set_grad_enabled(create_graph):
                    setattr_(t, "_grad", clone(g) if t._grad is None else _add(t._grad, g))
        setattr_(t, "grad_accumulations", t.grad_accumulations + 1)
    if not retain_graph:
        release_all(executed)
    if accumulate:
        return contributions
    return captured


def _run_all(roots: list, buffers: dict, create_graph: bool, hooks: bool, control, leaf_grads: list,
             retained: list, executed: list, apply=None, add=None) -> None:
    """``_run``'s pass when every node reachable from the roots runs (a backward without ``inputs``), as torch
    runs it: one walk counts each node's dependencies, then a node runs once every edge into it has delivered
    (in the order ``_topological`` gives, without a walk to make it first). ``buffers`` holds the roots'
    gradients; the leaves' gradients (``leaf_grads``: each AccumulateGrad node then its gradient, flat; the caller
    skips a leaf that no longer requires grad, as torch's AccumulateGrad does), retained gradients and the nodes
    run are appended to the lists given.

    A node's gradient is the tensor itself for a single-output node, a list (per output) for a multi-output
    one. A node whose last edge has delivered goes onto the ready stack with its gradient (two entries: the
    node, then its gradient): a node of one edge (most) never enters ``buffers``, which holds only the partial
    sums of nodes still waiting for edges. ``deps`` counts each node's edges still to deliver, negated once the
    first has delivered (its partial sum may then be in ``buffers``).

    ``apply(node, g)`` (default ``_apply_edges``) runs a node's VJP on its gradient ``g`` and gives at least one
    gradient (or None) per edge; ``add(a, b)`` sums two gradients of one input (default: ``_add``, or
    ``_add_unrecorded`` where nothing records): ``engine.trace.compose`` runs this same schedule over its own light
    nodes, with gradients as arrays."""
    deps = _dependencies(roots)
    ready: list = []
    for r in dict.fromkeys(roots):
        g = buffers.pop(r, None)
        if g is not None and r.n_outputs == 1:
            g = g[0]
        if r in deps:  # (a root reached from another root: its gradient is a partial sum)
            deps[r] = -deps[r]
            if g is not None:
                buffers[r] = g
        else:
            ready.append(r)
            ready.append(g)
    pop = ready.pop
    push = ready.append
    take = buffers.pop
    get = buffers.get
    done = executed.append
    found = leaf_grads.append
    # nothing records (no create_graph, no forward-mode level): two gradients of one input are summed by
    # add's kernel alone
    if add is None:
        add = _add if create_graph or current_level() is not None else _add_unrecorded
    if apply is None:
        apply = _apply_edges
    check = control.check if control is not None else None
    while ready:
        g = pop()
        node = pop()
        nexts = node.next_functions
        if check is not None:
            check()  # a deadline or a cancellation stops a long pass between nodes
        if g is None:
            for c, _ in nexts:  # Kahn's step: a child whose last edge this was is ready
                if c is not None:
                    d = deps[c]
                    if d == 1:
                        push(c)
                        push(None)
                    elif d == -1:
                        push(c)
                        push(take(c, None))
                    else:
                        deps[c] = 1 - d if d > 0 else d + 1
            continue
        if hooks and node.retained:
            multi = node.n_outputs != 1
            for nr, t in node.retained.items():  # retain_grad hooks
                x = g[nr] if multi else g
                if x is not None:
                    retained.append((t, x))
        if not nexts and node.prim == _ACC:
            found(node)
            found(g)
            continue
        outs = apply(node, g)
        done(node)
        for (child, nr), o in zip(nexts, outs):
            if child is None:
                continue
            d = deps[child]
            if d == 1:  # its only edge: ready with this gradient
                if o is not None and child.n_outputs != 1:
                    b = [None] * child.n_outputs
                    b[nr] = o
                    o = b
                push(child)
                push(o)
                continue
            if o is not None and child.n_outputs == 1:
                if d > 1:  # the first of its edges (nothing buffered yet)
                    deps[child] = 1 - d
                    buffers[child] = o
                elif d != -1:
                    deps[child] = d + 1
                    b = get(child)
                    buffers[child] = o if b is None else add(b, o)
                else:  # its last edge: ready with the sum
                    b = take(child, None)
                    push(child)
                    push(o if b is None else add(b, o))
                continue
            if d > 1:
                deps[child] = 1 - d
            elif d != -1:
                deps[child] = d + 1
            if o is not None:
                b = get(child)
                if b is None:
                    b = buffers[child] = [None] * child.n_outputs
                b[nr] = o if b[nr] is None else add(b[nr], o)
            if d == -1:
                push(child)
                push(take(child, None))


def _apply_edges(node: Node, g) -> list | tuple:
    """``_run_all``'s default ``apply``: ``_apply`` of the node's gradient as buffered (one output's tensor, or
    a multi-output node's list), with one entry per edge (None past the VJP's own)."""
    outs = _apply(node, [g] if node.n_outputs == 1 else g)
    n = len(node.next_functions)
    if len(outs) < n:
        outs = [*outs, *([None] * (n - len(outs)))]
    return outs


def _add(a: Tensor, b: Tensor) -> Tensor:
    return _ew.add(a, b)


def _add_unrecorded(a: Tensor, b: Tensor) -> Tensor:
    """``_add`` where nothing records (grad mode off, no forward-mode level): for two tensors of one dtype and
    shape (two gradients of one input), what add gives there, ``Tensor(kcall(np.add, a, b))``, without its
    dispatch; anything else through add."""
    x, y = a.data, b.data
    if x.dtype == y.dtype and x.shape == y.shape and a.__class__ is Tensor and b.__class__ is Tensor:
        return Tensor(kcall(np.add, x, y))
    return _ew.add(a, b)


def _accumulate_leaf(leaf: Tensor, g: Tensor, create_graph: bool, claimed: set) -> None:
    """torch's AccumulateGrad: in place into the same ``.grad`` tensor, except under create_graph where
    the first gradient is a CopyBackwards copy and later ones are ``old + new`` (a new tensor)."""
    old = leaf._grad
    if not create_graph:
        if old is None:
            a = g.data
            flags = a.flags
            if id(a) in claimed or not flags.owndata or not flags.writeable:
                a = kcall(K.copy, a)
            claimed.add(id(a))
            setattr_(leaf, "_grad", Tensor(a))
        else:
            array_(old.data)
            kinplace(K.add_into, old.data, g.data)
            setitem_(old._vc, 0, old._vc[0] + 1)
    else:
        if old is None:
            new = Tensor(kcall(K.copy, g.data))
            if g.requires_grad:
                new.requires_grad = True
                new.grad_fn = node_of(P.CopyBackwards, ((None, 0), edge(g)), None,
                                      (None, (g.data.shape, g.data.dtype)))
            setattr_(leaf, "_grad", new)
        else:
            with set_grad_enabled(True):
                setattr_(leaf, "_grad", _add(old, g))
    setattr_(leaf, "grad_accumulations", leaf.grad_accumulations + 1)


install_hooks(run_backward=backward)  # Tensor.backward's
_registry.apply_node = _apply  # CopySlices' VJP runs its saved node's
