"""``gradserve.torch.autograd.forward_ad``: ``dual_level``, ``enter_dual_level``, ``exit_dual_level``,
``make_dual``, ``unpack_dual`` (a namedtuple with ``.primal`` and ``.tangent``).

On the server a dual level lives within one op list. Ops inside ``with dual_level():`` are recorded as
everywhere; the exit sends what is pending (its errors are raised there). Reading a value inside the block
(``print``, ``item``, ``tolist``...) sends what is pending too: that request ends the level after unpacking
every live tensor's tangent into a name of its own, and the next one enters it again and makes those tensors
dual again (each name rebound to a dual view of its tensor), so the block goes on as in torch; ``repr`` shows
``tangent=`` as torch does. ``backward`` inside the block is sent with the next request. Whether a tensor has a
tangent is known on the server only: ``unpack_dual(t).tangent`` is a handle that, if ``t`` had no tangent at
the level, raises when used (torch gives ``None``).
"""

from __future__ import annotations

from collections import namedtuple

from gradserve.torch import _context, _namespace
from gradserve.torch._tensor import Tensor, _arg, context_of

__getattr__, __dir__ = _namespace.install(globals(), "torch.autograd.forward_ad")

__all__ = ["dual_level", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual", "UnpackedDualTensor"]

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])


def enter_dual_level() -> int:
    """Start a dual level (torch allows one at a time: a second one fails when it is sent)."""
    ctx = _context.current()
    ctx.record({"op": "enter_dual_level"})
    ctx.dual_depth += 1
    return ctx.dual_depth - 1


def exit_dual_level(*, level: int | None = None) -> None:
    """End the level: what is pending is sent now."""
    ctx = _context.current()
    op = {"op": "exit_dual_level"}
    if level is not None:
        op["kwargs"] = {"level": level}
    ctx.record(op)
    if ctx.dual_depth:
        ctx.dual_depth -= 1
    if not ctx.dual_depth:
        ctx.flush()


class dual_level:
    """``with dual_level():`` -- what is pending is sent at its exit."""

    def __enter__(self) -> int:
        return enter_dual_level()

    def __exit__(self, exc_type, *exc) -> bool:
        if exc_type is None:
            exit_dual_level()
            return False
        # the block failed on the client: drop the level without sending it (nothing of it was applied)
        ctx = _context.current()
        ctx.dual_depth = max(0, ctx.dual_depth - 1)
        start = max(i for i, op in enumerate(ctx.pending) if op["op"] == "enter_dual_level") \
            if any(op["op"] == "enter_dual_level" for op in ctx.pending) else len(ctx.pending)
        ctx._lost(ctx.pending[start:], ctx.made[start:], "its dual level block raised before it was sent")
        del ctx.pending[start:], ctx.sites[start:], ctx.made[start:]
        return False


def make_dual(tensor, tangent, *, level: int | None = None) -> Tensor:
    ctx = context_of([tensor, tangent])
    out = Tensor._new(ctx, tensor._storage if isinstance(tensor, Tensor) else None)
    op = {"op": "make_dual", "args": [_arg(tensor, ctx), _arg(tangent, ctx)], "out": out._name}
    if level is not None:
        op["kwargs"] = {"level": level}
    ctx.record(op, (out,))
    return out


def unpack_dual(tensor, *, level: int | None = None) -> UnpackedDualTensor:
    ctx = context_of([tensor])
    primal, tangent = Tensor._new(ctx, tensor._storage if isinstance(tensor, Tensor) else None), Tensor._new(ctx)
    op = {"op": "unpack_dual", "args": [_arg(tensor, ctx)], "out": [primal._name, tangent._name]}
    if level is not None:
        op["kwargs"] = {"level": level}
    ctx.record(op, (primal, tangent))
    ctx.maybe_unbound.add(tangent._name)
    return UnpackedDualTensor(primal, tangent)
