"""``torch.autograd.Function``: custom forward/backward pairs, traced into a server-side definition.

``MyFn.apply(*args)`` calls ``forward`` once with placeholder handles for the tensor arguments (non-tensor
arguments as given), as torch calls it (grad mode off), then ``backward`` with placeholders for the saved
tensors and the output gradients; what they record becomes an ``autograd_function`` definition, applied at
once by an ``apply`` op. The server runs the forward body and gives the outputs one ``<ClassName>Backward``
node whose saved tensors are real slots and whose backward runs the backward body (differentiable again under
``create_graph``). Both styles are supported: ``forward(ctx, *args)`` and ``forward(*args)`` with
``setup_context(ctx, inputs, output)``.

What differs from torch: ``backward`` is traced when ``apply`` is called (with
``ctx.set_materialize_grads(False)``, once per pattern of missing gradients), so its Python side effects happen
then, and neither body may read tensor values (``item()``, ``print``, data-dependent control flow). Tensors a
backward uses that were not saved (``ctx.w = w``) are saved for it. ``ctx.mark_dirty`` works on tensors that
are not views.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import threading

from gradserve.torch._grad_mode import enable_grad, is_grad_enabled, no_grad
from gradserve.torch._tensor import Tensor, _arg, context_of

__all__ = ["Function", "FunctionCtx", "once_differentiable"]

#: more tensor outputs than this with set_materialize_grads(False): only the all-present backward is traced (the
#: server gives zeros for the missing gradients)
_MAX_PATTERN_OUTPUTS = 3


class FunctionCtx:
    """The ``ctx`` of a custom Function: what ``forward`` (or ``setup_context``) leaves for ``backward``."""

    def __init__(self):
        self._to_save = None
        self._dirty = ()
        self._non_differentiable = ()
        self._materialize_grads = True
        self._saved_handles = None
        self.needs_input_grad = ()

    def save_for_backward(self, *tensors) -> None:
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError("save_for_backward can only save variables, but argument "
                                f"{tensors.index(t)} is of type {type(t).__name__}")
        self._to_save = tensors

    def save_for_forward(self, *tensors) -> None:
        raise NotImplementedError("gradserve: forward-mode AD through a custom Function (save_for_forward, jvp) is "
                                  "not supported")

    @property
    def saved_tensors(self) -> tuple:
        if self._saved_handles is None:
            raise RuntimeError("gradserve: saved_tensors is available in backward only")
        return self._saved_handles

    def mark_non_differentiable(self, *args) -> None:
        for t in args:
            if not isinstance(t, Tensor):
                raise TypeError("mark_non_differentiable only accepts tensors")
        self._non_differentiable = args

    def set_materialize_grads(self, value: bool) -> None:
        self._materialize_grads = bool(value)

    def mark_dirty(self, *args) -> None:
        for t in args:
            if not isinstance(t, Tensor):
                raise TypeError("mark_dirty only accepts tensors")
        self._dirty = args


def once_differentiable(fn):
    """``torch.autograd.function.once_differentiable``: the backward runs without recording; differentiating
    its results raises torch's error."""
    @functools.wraps(fn)
    def wrapper(ctx, *args):
        return fn(ctx, *args)

    wrapper._gradserve_once_differentiable = True
    return wrapper


class Function:
    """``torch.autograd.Function``: subclass it with static ``forward`` and ``backward`` and call ``apply``."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is deprecated. Please use "
                           "new-style autograd function with static forward method. (Example: "
                           "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    vjp = backward

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run the Function. As torch 2.13: with ``setup_context``, the arguments are bound to ``forward``'s
        signature with its defaults; otherwise keyword arguments become positional ones (no defaults added)."""
        if cls.setup_context is not Function.setup_context:
            bound = inspect.signature(cls.forward).bind(*args, **kwargs)
            bound.apply_defaults()
            args = bound.args
        elif kwargs:
            args = inspect.signature(cls.forward).bind(None, *args, **kwargs).args[1:]
        return _apply(cls, args)


def _placeholder(ctx, like: Tensor | None) -> Tensor:
    p = Tensor._new(ctx)
    if like is not None:
        p._shape, p._dtype = like._shape, like._dtype
    return p


class _Input(Tensor):
    """A forward argument's placeholder: its metadata (shape, dtype, requires_grad...) is the argument's, asked
    of the server outside the trace when the client does not know it yet (only if the body reads it)."""

    __slots__ = ("_source",)

    @classmethod
    def of(cls, ctx, source: Tensor) -> _Input:
        p = cls._new(ctx)
        p._source = source
        p._shape, p._dtype = source._shape, source._dtype
        return p

    def _meta(self, key: str):
        src = self._source
        if src._view_stamp != src._stamp() or key not in src._view:
            _outside(lambda: src._meta(key))
        self._shape, self._dtype = src._shape, src._dtype
        return src._view[key]


class _Needs(tuple):
    """``ctx.needs_input_grad``: each tensor argument's requires_grad (under grad mode), asked of the server (outside
    the trace) only when read."""

    def __new__(cls, tensors: list, grad_on: bool):
        self = super().__new__(cls, [False] * len(tensors))
        self._tensors, self._grad_on, self._known = tensors, grad_on, None
        return self

    def _values(self) -> tuple:
        if self._known is None:
            self._known = _outside(lambda: tuple(bool(self._grad_on and t is not None and t.requires_grad)
                                                 for t in self._tensors))
        return self._known

    def __getitem__(self, i):
        return self._values()[i]

    def __iter__(self):
        return iter(self._values())

    def __eq__(self, other):
        return self._values() == other

    def __ne__(self, other):
        return self._values() != other

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return repr(self._values())


#: per thread, the traces under way (innermost last): a read of an argument's metadata is sent outside them
_LOCAL = threading.local()


def _active() -> list:
    stack = getattr(_LOCAL, "stack", None)
    if stack is None:
        stack = _LOCAL.stack = []
    return stack


def _outside(fn):
    """Run ``fn`` (which may send a request) with the recorder as it was before the innermost trace began."""
    active = _active()
    if not active:
        return fn()
    rec = active[-1]
    ctx = rec.ctx
    inner = ctx.pending, ctx.sites, ctx.made
    ctx.pending, ctx.sites, ctx.made = rec.saved
    ctx.tracing -= 1
    active.pop()
    try:
        return fn()
    finally:
        ctx.materialize_all()  # (what fn fetched, before the trace goes on)
        active.append(rec)
        ctx.tracing += 1
        rec.saved = ctx.pending, ctx.sites, ctx.made  # what fn recorded and did not send stays outside
        ctx.pending, ctx.sites, ctx.made = inner


class _Recording:
    """Record into a fresh op list while tracing (``ctx.pending`` and friends saved and restored)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.body = None

    def __enter__(self):
        ctx = self.ctx
        ctx.materialize_all()  # (a traced body names gradients by names of their own)
        self.saved = ctx.pending, ctx.sites, ctx.made
        ctx.pending, ctx.sites, ctx.made = [], [], []
        ctx.tracing += 1
        _active().append(self)
        return self

    def __exit__(self, *exc):
        ctx = self.ctx
        _active().pop()
        self.body = ctx.pending
        ctx.tracing -= 1
        ctx.pending, ctx.sites, ctx.made = self.saved
        return False


def _apply(cls, args: tuple):
    ctx = context_of(args)
    grad_on = is_grad_enabled()
    # placeholders for the tensor arguments (their metadata asked for only if a body reads it)
    tensors = [a if isinstance(a, Tensor) else None for a in args]
    for t in tensors:
        if t is not None:
            t._ref(ctx)
    params = [None if t is None else _Input.of(ctx, t) for t in tensors]
    call_args = tuple(p if p is not None else a for p, a in zip(params, args))
    fctx = FunctionCtx()
    fctx.needs_input_grad = _Needs(tensors, grad_on)
    new_style = cls.setup_context is not Function.setup_context
    with _Recording(ctx) as fw, no_grad():
        if new_style:
            output = cls.forward(*call_args)
            cls.setup_context(fctx, call_args, output)
        else:
            output = cls.forward(fctx, *call_args)
    is_tuple = isinstance(output, tuple)
    outs = output if is_tuple else (output,)
    tensor_outs = [o for o in outs if isinstance(o, Tensor)]
    if any(_holds_tensor(o) for o in outs if not isinstance(o, Tensor)):
        raise TypeError(f"gradserve: {cls.__name__}.forward returned tensors inside a {type(output).__name__} "
                        "element; return them directly (one tensor or a tuple of tensors and other values)")
    if not tensor_outs:
        # torch runs such a forward as it is: nothing to differentiate, no node
        return output
    out_names = [o._ref(ctx) for o in tensor_outs]
    saved = list(fctx._to_save or ())
    nondiff = [o._ref(ctx) for o in fctx._non_differentiable]
    results = [Tensor._new(ctx) for _ in tensor_outs]
    for r, o in zip(results, tensor_outs):
        r._shape, r._dtype = o._shape, o._dtype
    fallback = next((t._dtype for t in tensors if t is not None and t._dtype in ("float32", "float64")), None)
    for o in tensor_outs:  # a gradient's dtype is its output's: where the client cannot infer it, the inputs'
        if o._dtype is None and fallback is not None and not any(o is n for n in fctx._non_differentiable):
            o._dtype = fallback
    bodies, captured = _trace_backward(cls, ctx, fctx, outs, saved)
    saved_names = [None if s is None else s._ref(ctx) for s in saved] + captured
    for body in bodies:
        body["saved"] = body["saved"] + captured
    fname = ctx.fresh_name()
    spec = {"name": cls.__name__, "inputs": [None if p is None else p._name for p in params], "ops": fw.body,
            "outputs": out_names, "saved": saved_names, "non_differentiable": nondiff,
            "materialize_grads": fctx._materialize_grads,
            "once_differentiable": bool(getattr(_backward_of(cls), "_gradserve_once_differentiable", False)),
            "backward": bodies,
            "dirty": [p._name for p in params if p is not None and any(p is d for d in fctx._dirty)]}
    op = {"op": "apply", "args": [fname, *(_arg(t, ctx) if t is not None else None for t in tensors)],
          "out": results[0]._name if len(results) == 1 else [r._name for r in results]}
    if not grad_on:
        op["no_grad"] = True
    ctx.record({"op": "autograd_function", "out": fname, "kwargs": spec})
    ctx.record(op, tuple(results))
    ctx.released.append(fname)  # the definition is dropped with the next request (its nodes keep what they need)
    # a dirty argument returned (ctx.mark_dirty): torch returns the argument itself, changed in place
    for i, o in enumerate(tensor_outs):
        j = next((k for k, p in enumerate(params) if p is o and any(p is d for d in fctx._dirty)), None)
        if j is not None:
            ctx.released.append(results[i]._name)
            results[i] = args[j]
            args[j]._mutated()
    it = iter(results)
    rebuilt = tuple(next(it) if isinstance(o, Tensor) else o for o in outs)
    return rebuilt if is_tuple else rebuilt[0]


def _backward_of(cls):
    """torch: a Function defines ``backward`` or its alias ``vjp``."""
    if cls.backward is Function.backward and cls.vjp is not Function.vjp:
        return cls.vjp
    return cls.backward


def _holds_tensor(value) -> bool:
    if isinstance(value, Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return False


def _trace_backward(cls, ctx, fctx: FunctionCtx, outs: tuple, saved: list) -> tuple[list, list]:
    """The backward bodies (one per pattern of present gradients when gradients are not materialised) and the
    names of tensors made outside backward that it reads without having saved them."""
    tensor_positions = [i for i, o in enumerate(outs) if isinstance(o, Tensor)]
    k = len(tensor_positions)
    if fctx._materialize_grads or k > _MAX_PATTERN_OUTPUTS:
        patterns = [None]
    else:
        patterns = [list(p) for p in itertools.product((True, False), repeat=k) if any(p)]
    bodies, captured = [], []
    for present in patterns:
        saved_ph = [None if s is None else _Input.of(ctx, s._source) if isinstance(s, _Input) else
                    _placeholder(ctx, s) for s in saved]
        grads_ph = [_placeholder(ctx, o) for o in outs if isinstance(o, Tensor)]
        given = []
        for j, o in enumerate(outs):
            if not isinstance(o, Tensor):
                given.append(None)
                continue
            slot = tensor_positions.index(j)
            given.append(grads_ph[slot] if present is None or present[slot] else None)
        fctx._saved_handles = tuple(saved_ph)
        try:
            with _Recording(ctx) as bw, enable_grad():
                result = _backward_of(cls)(fctx, *given)
        finally:
            fctx._saved_handles = None
        results = result if isinstance(result, tuple) else (result,)
        names = []
        for i, r in enumerate(results):
            if r is None:
                names.append(None)
            elif isinstance(r, Tensor):
                names.append(r._ref(ctx))
            else:
                raise TypeError(f"gradserve: {cls.__name__}.backward returned a {type(r).__name__} at position {i}; "
                                f"a gradient must be a tensor or None")
        local = {p._name for p in saved_ph if p is not None} | {g._name for g in grads_ph}
        for op in bw.body:
            out = op.get("out")
            local.update(out if isinstance(out, list) else [out] if out else [])
        for name in _referenced(bw.body, ctx) + [n for n in names if n is not None]:
            if name not in local and name not in captured:
                captured.append(name)
        bodies.append({"grads_present": present, "saved": [None if p is None else p._name for p in saved_ph],
                       "grads": [g._name for g in grads_ph], "ops": bw.body, "outputs": names})
    # a None in saved has a placeholder name of its own: the definition's bodies need a name per slot
    for body in bodies:
        body["saved"] = [n if n is not None else f"_none{i}" for i, n in enumerate(body["saved"])]
    return bodies, captured


def _referenced(ops: list, ctx) -> list:
    """The names of live handles an op list refers to (strings equal to a handle's name)."""
    found = []

    def walk(v):
        if isinstance(v, str):
            if v in ctx.refs and v not in found:
                found.append(v)
            elif v.endswith(".grad") and v[:-5] in ctx.refs and v[:-5] not in found:
                found.append(v[:-5])
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    for op in ops:
        walk(op.get("args"))
        walk(op.get("kwargs"))
    return found
