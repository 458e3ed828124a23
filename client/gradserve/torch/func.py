"""``gradserve.torch.func``: torch.func's transforms with its signatures, return structures and messages.

- ``grad``, ``grad_and_value`` and ``vjp`` run the function eagerly on aliases of the chosen inputs that require
  grad and take ``torch.autograd.grad`` of the result (recorded with ``create_graph``, so that they nest:
  ``grad(grad(f))``); at the outermost level, where no input required grad, the results come back without
  history, as torch.func's do.
- ``jacrev``, ``jacfwd``, ``hessian`` and ``jvp`` are the server's transforms (``torch.autograd.functional``'s
  ``jacobian`` in reverse or forward mode, ``hessian``, ``jvp``): the function is traced into one server-side
  definition (it may not read tensor values); ``has_aux`` calls it once more, eagerly, for the aux output.
- ``vmap`` calls the function once per entry of the mapped dimension and stacks the results (torch's values;
  the results' ``grad_fn`` is the stack's, not torch's batched ops').
- ``functional_call`` runs a module with some of its parameters replaced for the call.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

from gradserve.torch._grad_mode import enable_grad
from gradserve.torch._tensor import Tensor, call_op
from gradserve.torch._tensor import grad as autograd_grad
from gradserve.torch.autograd import functional as autograd_functional

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "vmap", "functional_call"]

_depth: contextvars.ContextVar[int] = contextvars.ContextVar("gradserve_func_depth", default=0)


@contextlib.contextmanager
def _level():
    token = _depth.set(_depth.get() + 1)
    try:
        yield
    finally:
        _depth.reset(token)


def _tree_map(fn, tree):
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(_tree_map(fn, t) for t in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(_tree_map(fn, t) for t in tree)
    if isinstance(tree, dict):
        return {k: _tree_map(fn, v) for k, v in tree.items()}
    return fn(tree)


def _leaves(tree) -> list:
    out: list = []
    _tree_map(out.append, tree)
    return out


def _argnums(argnums, n: int) -> tuple[int, ...]:
    """torch.func's argnums checks; the positions (normalised) of the inputs to differentiate."""
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    if isinstance(argnums, tuple) and not argnums:
        raise RuntimeError("argnums must be non-empty")
    out = []
    for a in nums:
        if not isinstance(a, int) or isinstance(a, bool):
            raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
        if not -n <= a < n:
            raise RuntimeError(f"Got argnum={a}, but only {n} positional inputs")
        out.append(a % n)
    if len(set(out)) != len(out):
        raise RuntimeError(f"argnums must be unique, got {argnums}")
    return tuple(out)


def _pick(argnums, values: list):
    """``values`` (one per position in argnums) in argnums' structure: one value for an int, a tuple else."""
    return tuple(values) if isinstance(argnums, tuple) else values[0]


def _differentiable(x):
    """An alias of ``x`` that requires grad (``x`` itself when it already does), within enable_grad."""
    if not isinstance(x, Tensor):
        raise RuntimeError(f"Expected a Tensor as the input to differentiate, got {type(x)}")
    if not x.is_floating_point():
        raise RuntimeError("only Tensors of floating point dtype can require gradients")
    if x.requires_grad:
        return x
    # a detached alias with a storage record of its own: making it require grad leaves x's cached view valid
    # (a shared record would make x's metadata be asked again at every call of a vmapped grad)
    alias = Tensor._new(x._ctx)
    x._ctx.record({"op": "detach", "args": [x._ref(x._ctx)], "out": alias._name}, (alias,))
    alias._shape, alias._dtype = x._shape, x._dtype
    alias._know(is_leaf=True, requires_grad=False, grad_fn=None)
    return alias.requires_grad_()


def _outer(args) -> bool:
    """Whether results must stay differentiable: inside another transform, or when an input requires grad."""
    return _depth.get() > 0 or any(t.requires_grad for t in _leaves(args) if isinstance(t, Tensor))


def _split_aux(out, has_aux: bool, where: str) -> tuple:
    """(output, aux) of a function's result: torch.func's check that a function with aux returns a pair."""
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{where}: output of function f should be a tuple: (output, aux) if has_aux is True")
    return out


def _grads(outs: list, inputs: list, cotangents, **options) -> list:
    """``autograd.grad`` with zeros for inputs the outputs do not depend on (torch.func's answer), also when no
    output requires grad at all."""
    used = [i for i, o in enumerate(outs) if o.requires_grad]
    if not used:
        return [call_op("zeros_like", (x,), {}) for x in inputs]
    cts = None if cotangents is None else [cotangents[i] for i in used]
    return list(autograd_grad([outs[i] for i in used], inputs, cts, materialize_grads=True, **options))


def _detached(tree):
    return _tree_map(lambda t: t.detach() if isinstance(t, Tensor) else t, tree)


def grad_and_value(func, argnums=0, has_aux: bool = False):
    """``torch.func.grad_and_value(func, argnums=0, has_aux=False)`` -> a function returning (grad, value), or
    ((grad, (value, aux)) with ``has_aux``."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nums = _argnums(argnums, len(args))
        keep = _outer(args)
        with enable_grad(), _level():
            args = list(args)
            for i in nums:  # an input may be a tensor or a pytree of them (a dict of parameters...)
                args[i] = _tree_map(_differentiable, args[i])
            diff = [t for i in nums for t in _leaves(args[i])]
            out, aux = _split_aux(func(*args, **kwargs), has_aux, "grad_and_value(f)(*args)")
            if not isinstance(out, Tensor):
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a Tensor, got {type(out)}")
            if out.dim() != 0:
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, got "
                                   f"tensor with {out.dim()} dims. Maybe you wanted to use the vjp or jacrev APIs "
                                   f"instead?")
            grads = _grads([out], diff, None, create_graph=True)
        flat = iter(grads)
        structured = [_tree_map(lambda _: next(flat), args[i]) for i in nums]
        result = (_pick(argnums, structured), (out, aux) if has_aux else out)
        return result if keep else _detached(result)

    return wrapper


def grad(func, argnums=0, has_aux: bool = False):
    """``torch.func.grad(func, argnums=0, has_aux=False)``: the gradient of a scalar function (with aux:
    (grad, aux))."""
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


def vjp(func, *primals, has_aux: bool = False):
    """``torch.func.vjp(func, *primals, has_aux=False)`` -> (output, vjp_fn[, aux]); ``vjp_fn(cotangents)``
    returns a tuple with one gradient per primal (it may be called several times)."""
    keep = _outer(primals)
    with enable_grad(), _level():
        inputs = [_differentiable(p) for p in primals]
        out, aux = _split_aux(func(*inputs), has_aux, "vjp(f, *primals)")
    outs = _leaves(out)
    for o in outs:
        if not isinstance(o, Tensor):
            raise RuntimeError(f"vjp(f, *primals): Expected f(*primals) to return only tensors, got unsupported "
                               f"type {type(o)}")

    def vjp_fn(cotangents, *more, retain_graph: bool = True, create_graph: bool | None = None):
        cts = _leaves((cotangents, *more) if more else cotangents)
        if len(cts) != len(outs):
            raise RuntimeError(f"Expected pytree structure of cotangents to be the same as pytree structure of "
                               f"outputs to the function. cotangents: {len(cts)} tensors, primal output: "
                               f"{len(outs)} tensors")
        with enable_grad():
            grads = _grads(outs, inputs, cts, retain_graph=retain_graph,
                           create_graph=keep or _depth.get() > 0 if create_graph is None else create_graph)
        return tuple(grads) if keep or _depth.get() > 0 else tuple(g.detach() for g in grads)

    result = (out, vjp_fn, aux) if has_aux else (out, vjp_fn)
    if keep:
        return result
    return (_detached(out), vjp_fn, _detached(aux)) if has_aux else (_detached(out), vjp_fn)


def _selected(func, args: tuple, kwargs: dict, nums: tuple, has_aux: bool):
    """``func`` as a function of the inputs at ``nums`` only (the others fixed), without its aux output."""
    def sub(*chosen):
        full = list(args)
        for i, v in zip(nums, chosen):
            full[i] = v
        out = func(*full, **kwargs)
        return out[0] if has_aux else out
    return sub


def _aux(func, args, kwargs, has_aux: bool, name: str):
    """The aux output of ``func`` (called once more, eagerly), or None."""
    return _detached(_split_aux(func(*args, **kwargs), True, f"{name}(f, ...)(*args)")[1]) if has_aux else None


def _jacobian(name: str, strategy: str):
    def transform(func, argnums=0, *, has_aux: bool = False, **options):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            nums = _argnums(argnums, len(args))
            inputs = _pick(argnums, [args[i] for i in nums])
            sub = _selected(func, args, kwargs, nums, has_aux)
            if strategy == "forward-mode":
                jac = autograd_functional.jacobian(sub, inputs, vectorize=True, strategy="forward-mode")
            else:
                jac = autograd_functional.jacobian(sub, inputs)
            aux = _aux(func, args, kwargs, has_aux, name)
            return (jac, aux) if has_aux else jac
        return wrapper

    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = (f"``torch.func.{name}(func, argnums=0, has_aux=False)``: the Jacobian by the server's "
                         f"{strategy} jacobian (outputs outer, argnums inner, as torch.func nests them).")
    return transform


jacrev = _jacobian("jacrev", "reverse-mode")
jacfwd = _jacobian("jacfwd", "forward-mode")


def hessian(func, argnums=0):
    """``torch.func.hessian(func, argnums=0)`` of a scalar function, by the server's hessian (blocks (i, j) over
    argnums when it is a tuple)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nums = _argnums(argnums, len(args))
        return autograd_functional.hessian(_selected(func, args, kwargs, nums, False),
                                           _pick(argnums, [args[i] for i in nums]))

    return wrapper


def jvp(func, primals, tangents, *, strict: bool = False, has_aux: bool = False):
    """``torch.func.jvp(func, primals, tangents)`` -> (output, jvp_out[, aux]), by the server's jvp."""
    for what, value in (("primals", primals), ("tangents", tangents)):
        if not isinstance(value, tuple):
            raise RuntimeError(f"jvp(f, primals, tangents): Expected {what} to be a tuple. E.g. it should be valid "
                               f"to call f(*primals).")
    if len(primals) != len(tangents):
        raise RuntimeError(f"jvp(f, primals, tangents): Expected primals and tangents to have the same python "
                           f"structure. For example, if primals is a tuple of 3 tensors, tangents also must be. Got "
                           f"primals with structure {len(primals)} and tangents with structure {len(tangents)}")
    sub = _selected(func, primals, {}, tuple(range(len(primals))), has_aux)
    out, tangent = autograd_functional.jvp(sub, primals, tangents)
    if has_aux:
        return out, tangent, _aux(func, primals, {}, True, "jvp")
    return out, tangent


# ----- vmap --------------------------------------------------------------------------------------------------------
def _name(func) -> str:
    return getattr(func, "__name__", repr(func))


def vmap(func, in_dims=0, out_dims=0, randomness: str = "error", *, chunk_size=None):
    """``torch.vmap(func, in_dims=0, out_dims=0)``: ``func`` over each entry of the mapped dimension of the
    inputs, the results stacked along ``out_dims``."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        name = _name(func)
        dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
        if isinstance(in_dims, tuple) and len(in_dims) != len(args):
            raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): in_dims is not compatible with the "
                             f"structure of `inputs`. in_dims has structure {len(in_dims)} but inputs has "
                             f"structure {len(args)}.")
        sizes = []
        normalised = []
        for arg, d in zip(args, dims):
            if d is None:
                normalised.append(None)
                continue
            if not isinstance(d, int):
                raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): in_dims must be int, None or "
                                 f"a tuple of them, got {d!r}")
            for t in _leaves(arg):
                if not isinstance(t, Tensor):
                    raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got in_dim={d} for an input "
                                     f"but the input is of type {type(t)}. We cannot vmap over non-Tensor arguments, "
                                     f"please use None as the respective in_dim")
                if not -t.dim() <= d < t.dim() or t.dim() == 0:
                    raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): Got in_dim={d} for some input, "
                                     f"but that input is a Tensor of dimensionality {t.dim()} so expected in_dim to "
                                     f"satisfy -{t.dim()} <= in_dim < {t.dim()}.")
                sizes.append(t.shape[d])
            normalised.append(d)
        if not sizes:
            raise ValueError(f"vmap({name}, in_dims={in_dims}, ...)(<inputs>): at least one input must be a Tensor "
                             f"mapped over (in_dim not None)")
        if len(set(sizes)) > 1:
            raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
                             f"{sizes} for the mapped dimension")
        keep = _outer(args)
        results = []
        with _level():  # (a transform inside keeps its graph: no metadata to ask for each entry)
            for b in range(sizes[0]):
                sliced = [a if d is None else _tree_map(lambda t, d=d, b=b: call_op("select", (t, d, b), {}), a)
                          for a, d in zip(args, normalised)]
                results.append(func(*sliced, **kwargs))
        stacked = _stack_outputs(name, results, out_dims)
        return stacked if keep else _detached(stacked)

    return wrapper


def _stack_outputs(name: str, results: list, out_dims):
    """The per-entry results stacked leaf by leaf (tensors, tuples, lists, dicts of them); a tuple ``out_dims``
    gives each element of a tuple result its own dimension."""
    first = results[0]
    if isinstance(first, (tuple, list)):
        dims = out_dims if isinstance(out_dims, tuple) else (out_dims,) * len(first)
        return type(first)(_stack_outputs(name, [r[i] for r in results], d) for i, d in enumerate(dims))
    if isinstance(first, dict):
        return {k: _stack_outputs(name, [r[k] for r in results], out_dims) for k in first}
    if out_dims is None:
        return first
    if not isinstance(first, Tensor):
        raise ValueError(f"vmap({name}, ...): `{name}` must only return Tensors, got type {type(first)}. Did you "
                         f"mean to set out_dims= to None for output?")
    return call_op("stack", (results, out_dims), {})


# ----- functional_call ---------------------------------------------------------------------------------------------
def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights: bool = True,
                    strict: bool = False):
    """``torch.func.functional_call(module, params, args, kwargs)``: ``module(*args, **kwargs)`` with the named
    parameters replaced by the given tensors for this call (names not in the module are ignored unless
    ``strict``)."""
    dicts = parameter_and_buffer_dicts if isinstance(parameter_and_buffer_dicts, (tuple, list)) \
        else (parameter_and_buffer_dicts,)
    values: dict = {}
    for d in dicts:
        for k, v in d.items():
            if k in values:
                raise ValueError(f"{k} appeared in multiple dictionaries; behavior of functional call is ambiguous")
            values[k] = v
    own = dict(module.named_parameters())
    if strict:
        missing = [k for k in own if k not in values]
        unexpected = [k for k in values if k not in own]
        if missing or unexpected:
            lines = ([f"\tUnexpected key(s): {', '.join(repr(k) for k in unexpected)}."] if unexpected else []) + \
                    ([f"\tMissing key(s): {', '.join(repr(k) for k in missing)}."] if missing else [])
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}:\n" + "\n".join(lines))
    swapped = []
    try:
        for key, value in values.items():
            if key not in own:
                continue
            *path, leaf = key.split(".")
            owner = module
            for part in path:
                owner = owner._modules[part]
            swapped.append((owner, leaf, owner.__dict__[leaf]))
            object.__setattr__(owner, leaf, value)  # for this call only: not registered as a parameter
        args = () if args is None else args if isinstance(args, tuple) else (args,)
        return module(*args, **(kwargs or {}))
    finally:
        for owner, leaf, original in reversed(swapped):
            object.__setattr__(owner, leaf, original)
