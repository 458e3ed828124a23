"""Batching rules: one backward (or forward-mode) pass over a batch of cotangents (or tangents).

``torch.autograd.functional``'s ``vectorize=True`` and ``grad(..., is_grads_batched=True)`` vmap one pass
over a batch. The engine batches physically: a batched gradient or tangent is an ordinary tensor with one
more, leading, dimension (the batch), and each primitive's batching rule computes its VJP (or JVP) for all the
batch entries at once, in engine ops. Because every value is a real tensor, a batched pass under
``create_graph`` records a real graph (differentiable again), and saved tensors are never batched.

Rules sit next to the primitive's VJP/JVP in the op table (``batching(P.MvBackward0, vjp=..., jvp=...)``);
most come by family:

* elementwise primitives (their forward formula is ``elementwise_jvp`` or ``zero_jvp``) need no rule: their
  formulas, written with broadcasting, hold as written once the batch dimension leads and the ranks are
  aligned (``SAME``);
* shape and indexing primitives whose formula only reads sizes and dims (``shifted``): the same formula with
  the batch prepended to the saved sizes and non-negative saved dims moved by one;
* matmul-like primitives: a rule in ``matmul`` (the batch folds into the matrix product).

A primitive without a rule raises ``BatchingUnsupported``: the transform then runs its per-entry loop
instead, so a missing rule costs speed, never a wrong answer.
"""

from __future__ import annotations

from . import kernel as K
from . import registry as R
from .errors import BatchingUnsupported
from .kernel import kcall
from .registry import JVPS, PRIMS, F, JvpCtx, Prim, elementwise_jvp, per_output, zero_jvp
from .tensor import Tensor

__all__ = ["BatchingUnsupported", "batching", "SAME", "shifted", "vjp_rule", "jvp_rule", "sum_to_batched",
           "BATCH_VJP", "BATCH_JVP"]


#: the primitive's own formula holds over a leading batch dimension
SAME = "same"
#: primitive -> batched VJP ``rule(ctx, grad, batch)`` / batched JVP ``rule(ctx, batch, *tangents)``
BATCH_VJP: dict = {}
BATCH_JVP: dict = {}


def batching(prim: Prim, vjp=None, jvp=None) -> None:
    """Declare the batching rules of primitive ``prim`` (its handle; ``SAME``, ``shifted(...)`` or a function)."""
    name = prim.name
    if vjp is not None:
        BATCH_VJP[name] = vjp
    if jvp is not None:
        BATCH_JVP[name] = jvp


def _family_same(name: str) -> bool:
    return JVPS.get(name) in (elementwise_jvp, zero_jvp)


def vjp_rule(name: str):
    """The batched VJP of primitive ``name``: ``rule(ctx, grad, batch)``; raises BatchingUnsupported."""
    rule = BATCH_VJP.get(name)
    if rule is None and _family_same(name):
        rule = SAME
    if rule is None:
        raise BatchingUnsupported(name)
    return _same_vjp(PRIMS[name].vjp) if rule is SAME else rule


def _same_vjp(fn):
    def rule(ctx, grad, batch):
        nd = grad.data.ndim
        outs = fn(ctx, grad)
        # a gradient the formula computed without the incoming one (a constant) is the same for every entry
        return tuple(o if o is None or o.data.ndim == nd else _every_entry(o, batch, nd) for o in outs)
    return rule


def _every_entry(t: Tensor, batch: int, nd: int) -> Tensor:
    if t.data.ndim > nd:
        raise BatchingUnsupported("rank")
    return F.expand(F.unsqueeze(t, 0), (batch, *t.data.shape))


def jvp_rule(name: str):
    """The batched JVP of primitive ``name``: ``rule(ctx, batch, *tangents)``; raises BatchingUnsupported.
    A ``SAME`` formula gets its tangents rank-aligned (``(B, 1.., *shape)`` to the output's rank + 1)."""
    rule = BATCH_JVP.get(name)
    if rule is None and _family_same(name):
        rule = SAME
    if rule is None:
        raise BatchingUnsupported(name)
    return _same_jvp(JVPS[name]) if rule is SAME else rule


def _same_jvp(fn):
    def rule(ctx, batch, *tangents):
        r = ctx.result
        if r.__class__ is tuple:
            raise BatchingUnsupported("multi-output")
        nd = r.data.ndim
        out = fn(ctx, *(align(t, nd) for t in tangents))
        return out if out is None or out.data.ndim == nd + 1 else _every_entry(out, batch, nd)
    return rule


class _Shifted:
    """A context whose saved sizes have the batch prepended and whose non-negative saved dims moved by one."""

    def __init__(self, ctx, batch: int, sizes, dims):
        d = self.__dict__
        d.update(ctx.__dict__)
        for k in sizes:
            d[k] = (batch, *d[k])
        for k in dims:
            v = d[k]
            d[k] = [x + 1 if x >= 0 else x for x in v] if isinstance(v, (list, tuple)) else (v + 1 if v >= 0 else v)
        r = d.get("result")
        if isinstance(r, Tensor):
            d["result"] = Tensor(kcall(K.broadcast_to, r.data, (batch, *r.data.shape)))


def shifted(sizes=("self_sym_sizes",), dims=()):
    """A pair (vjp, jvp) of rules for a formula that reads only saved sizes, saved dims and the result's shape."""
    def vjp(ctx, grad, batch):
        if dims and any(m is not None and not m[0] for m in ctx.node.input_meta):
            raise BatchingUnsupported("0-d")  # a dim of a 0-d input (0 or -1) names no dimension to move
        return PRIMS[ctx.node.prim].vjp(_Shifted(ctx, batch, sizes, dims), grad)

    def jvp(ctx, batch, *tangents):
        if dims and any(isinstance(t, Tensor) and not t.data.ndim for t in ctx.inputs):
            raise BatchingUnsupported("0-d")
        return JVPS[ctx._prim.name](_Shifted(ctx, batch, sizes, dims), *tangents)

    return {"vjp": vjp, "jvp": jvp}


def align(t: Tensor | None, nd: int) -> Tensor | None:
    """A batched tensor ``(B, *shape)`` as ``(B, 1.., *shape)`` of rank ``nd + 1`` (rank alignment)."""
    if t is None or t.data.ndim >= nd + 1:
        return t
    s = t.data.shape
    return F.reshape(t, (s[0], *(1,) * (nd + 1 - len(s)), *s[1:]))


def sum_to_batched(t: Tensor, shape: tuple) -> Tensor:
    """``sum_to`` of every batch entry: ``t`` is ``(B, *s)`` with ``s`` broadcast from ``shape``."""
    shape = tuple(shape)
    s = t.data.shape[1:]
    if s == shape:
        return t
    lead = len(s) - len(shape)
    if lead < 0:
        raise BatchingUnsupported("sum_to")
    dims = [1 + i for i in range(lead)] + [1 + lead + i for i, n in enumerate(shape) if n == 1 and s[lead + i] != 1]
    r = F.sum(t, dims, keepdim=True) if dims else t
    target = (t.data.shape[0], *shape)
    if r.data.shape != target:
        r = F.reshape(r, target)
    return r


def expand_batched(t: Tensor, batch: int, shape: tuple) -> Tensor:
    """A batched tensor (or an unbatched one, the same for every entry) as exactly ``(batch, *shape)``."""
    d = t.data
    if d.shape == (batch, *shape):
        return t
    if d.ndim != len(shape) + 1:
        raise BatchingUnsupported("rank")
    return F.contiguous(F.expand(t, (batch, *shape)))


def forward(prim: Prim, outs, inputs: tuple, saved, tangents: list, level) -> None:
    """Forward mode in a batched dual level: every tangent is ``(B, *shape)``; give the outputs theirs."""
    rule = jvp_rule(prim.name)
    batch = level.batch
    targets = outs if outs.__class__ is tuple else (outs,)
    res = per_output(rule(JvpCtx(prim, inputs, saved, outs), batch, *tangents), outs)
    ref = next(t for t in tangents if t is not None)
    for o, r in zip(targets, res):
        od = o.data
        if od.dtype.kind not in "fV":
            continue
        if r is None:
            r = Tensor(kcall(K.zeros, (batch, *od.shape), ref.data.dtype))
        else:
            r = expand_batched(r, batch, od.shape)
            if any(r is t for t in tangents):
                r = F.clone(r)
        o._fw_grad = r
        level.tensors.append(o)


R.batched_forward = forward  # the hook record() calls in a batched dual level
