"""``gradserve.torch.autograd.functional``: ``jacobian``, ``hessian``, ``vjp``, ``jvp``, ``vhp``, ``hvp`` with
torch's signatures and return structures.

The Python function is traced: it is called once with placeholder handles, under ``enable_grad`` as torch
calls it, and what it records becomes the op list of a server-side ``function`` definition (a named
sub-program). The definition and the transform go to the server in one request, sent at once so that
errors (strict mode, bad ``v``...) are raised at the transform's line with torch's message. The function
may use tensors made outside it (they are read by name when the server runs it) but cannot read values
while it is traced (no ``item()``, ``print``, data-dependent Python control flow): a value read raises.
"""

from __future__ import annotations

from gradserve.torch import _namespace
from gradserve.torch._context import Context
from gradserve.torch._grad_mode import enable_grad
from gradserve.torch._tensor import Tensor, _arg, context_of

__getattr__, __dir__ = _namespace.install(globals(), "torch.autograd.functional")

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp"]


def _trace(ctx: Context, func, inputs) -> tuple[dict, bool]:
    """Record ``func`` over placeholders of ``inputs`` (a tensor or a tuple) into a function definition.
    Returns (the definition's kwargs, whether func returned a tuple)."""
    flat = inputs if isinstance(inputs, tuple) else (inputs,)
    params = []
    for x in flat:
        p = Tensor._new(ctx)
        if isinstance(x, Tensor):
            p._shape, p._dtype = x._shape, x._dtype
        params.append(p)
    ctx.materialize_all()  # (a traced body names gradients by names of their own)
    saved = ctx.pending, ctx.sites, ctx.made
    ctx.pending, ctx.sites, ctx.made = [], [], []
    ctx.tracing += 1
    try:
        with enable_grad():
            out = func(*params)
        body = ctx.pending
    finally:
        ctx.tracing -= 1
        ctx.pending, ctx.sites, ctx.made = saved
    is_tuple = isinstance(out, tuple)
    outs = out if is_tuple else (out,)
    for i, o in enumerate(outs):
        if not isinstance(o, Tensor):
            where = f"the value at index {i}" if is_tuple else "the given outputs of the user-provided function"
            raise TypeError(f"The outputs of the user-provided function given to the transform must be either a "
                            f"Tensor or a tuple of Tensors but {where} has type {type(o)}.")
    names = [o._ref(ctx) for o in outs]
    spec = {"inputs": [p._name for p in params], "outputs": names if is_tuple else names[0], "ops": body}
    return spec, is_tuple


def _run(name: str, func, inputs, v, kwargs: dict, shape):
    """Define the traced function, run the transform ``name`` on it, rebuild torch's nested result.
    ``shape(is_inputs_tuple, is_outputs_tuple, n_inputs, n_outputs)`` gives the result's structure as a
    nested tuple of counts (an int n: n tensors in a tuple; None: one tensor)."""
    flat_in = inputs if isinstance(inputs, tuple) else (inputs,)
    extra = list(v) if isinstance(v, tuple) else [v] if v is not None else []
    ctx = context_of([*flat_in, *extra])
    spec, is_outputs_tuple = _trace(ctx, func, inputs)
    fname = ctx.fresh_name()
    n_out = len(spec["outputs"]) if is_outputs_tuple else 1
    structure = shape(isinstance(inputs, tuple), is_outputs_tuple, len(flat_in), n_out)
    count = _count(structure)
    results = [Tensor._new(ctx) for _ in range(count)]
    op = {"op": name, "args": [fname, _arg(list(inputs) if isinstance(inputs, tuple) else inputs, ctx)],
          "kwargs": {k: val for k, val in kwargs.items()}, "out": [r._name for r in results]}
    if v is not None:
        op["kwargs"]["v"] = _arg(list(v) if isinstance(v, tuple) else v, ctx)
    ctx.record({"op": "function", "out": fname, "kwargs": spec})
    ctx.record(op, tuple(results))
    ctx.released.append(fname)  # the definition is dropped with the next request
    ctx.flush(deferrable=True)
    it = iter(results)
    return _build(structure, it)


def _count(structure) -> int:
    if structure is None:
        return 1
    if isinstance(structure, int):
        return structure
    return sum(_count(s) for s in structure)


def _build(structure, it):
    if structure is None:
        return next(it)
    if isinstance(structure, int):
        return tuple(next(it) for _ in range(structure))
    return tuple(_build(s, it) for s in structure)


def _part(is_tuple: bool, n: int):
    return n if is_tuple else None


def _matrix(rows_tuple: bool, n_rows: int, cols_tuple: bool, n_cols: int):
    """Blocks (row i, column j): torch's _tuple_postprocess with (rows, cols)."""
    if rows_tuple:
        return tuple(_part(cols_tuple, n_cols) for _ in range(n_rows))
    return _part(cols_tuple, n_cols)


def _pair_shape(second_from_outputs: bool):
    def shape(in_t, out_t, n_in, n_out):
        first = _part(out_t, n_out)
        second = _part(out_t, n_out) if second_from_outputs else _part(in_t, n_in)
        return (first, second)
    return shape


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """torch.autograd.functional.vjp -> (func_output, vjp)."""
    return _run("vjp", func, inputs, v, _flags(create_graph=create_graph, strict=strict), _pair_shape(False))


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """torch.autograd.functional.jvp -> (func_output, jvp)."""
    return _run("jvp", func, inputs, v, _flags(create_graph=create_graph, strict=strict), _pair_shape(True))


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """torch.autograd.functional.vhp -> (func_output, vhp)."""
    return _run("vhp", func, inputs, v, _flags(create_graph=create_graph, strict=strict), _pair_shape(False))


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """torch.autograd.functional.hvp -> (func_output, hvp)."""
    return _run("hvp", func, inputs, v, _flags(create_graph=create_graph, strict=strict), _pair_shape(False))


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """torch.autograd.functional.jacobian: a tensor, or tuples of blocks (output i, input j)."""
    kwargs = _flags(create_graph=create_graph, strict=strict, vectorize=vectorize)
    if strategy != "reverse-mode":
        kwargs["strategy"] = strategy
    return _run("jacobian", func, inputs, None, kwargs,
                lambda in_t, out_t, n_in, n_out: _matrix(out_t, n_out, in_t, n_in))


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy="reverse-mode"):
    """torch.autograd.functional.hessian: a tensor, or tuples of blocks (input i, input j)."""
    kwargs = _flags(create_graph=create_graph, strict=strict, vectorize=vectorize)
    if outer_jacobian_strategy != "reverse-mode":
        kwargs["outer_jacobian_strategy"] = outer_jacobian_strategy
    return _run("hessian", func, inputs, None, kwargs,
                lambda in_t, out_t, n_in, n_out: _matrix(in_t, n_in, in_t, n_in))


def _flags(**flags) -> dict:
    return {k: v for k, v in flags.items() if v is not False}
