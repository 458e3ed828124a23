"""Views and their history, as torch tracks them (torch/csrc/autograd/variable.cpp, VariableTypeUtils.h).

A view shares its base's buffer and version counter and records how it was made (torch's CreationMeta):
``default`` (a view op in grad mode), ``multi`` (an output of split/chunk/unbind) or ``no_grad`` (made
with grad mode off). A view made under no_grad of a base that requires grad requires grad too, but is a
leaf without an AccumulateGrad of its own: gradients stop there.

When the base or another view of it is modified in place, the view's ``grad_fn`` is regenerated on its
next use as ``AsStridedBackward0`` over the base's current history; ``multi`` and ``no_grad`` views may
not be rebased and raise torch's message instead (``rebase_error``). Modifying such a view in place while
autograd records is refused the same way.
"""

from __future__ import annotations

import numpy as np

from .dual import _level as _fw_level
from .errors import TorchRuntimeError
from .grad_mode import _grad_enabled
from .journal import setattr_, setitem_
from .node import ACCUMULATE_GRAD, Node, P, node_of, short_name
from .tensor import VIEW_DEFAULT, VIEW_MULTI, VIEW_NO_GRAD, Tensor, install_hooks

_MULTI = (" This view is the output of a function that returns multiple views. Such functions do not allow the "
          "output views to be modified inplace. You should replace the inplace operation by an out-of-place one.")
_NO_GRAD = (" Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code by "
            "moving both the view and the inplace either both inside the no_grad block (if you don't want the "
            "inplace to be tracked) or both outside (if you want the inplace to be tracked).")


def as_view(out: Tensor, base: Tensor, multi: bool = False) -> Tensor:
    """Make ``out`` (just recorded from ``base``'s buffer) a view of ``base``'s root."""
    out._vc = base._vc
    root = base._base if base._base is not None else base
    out._base = root
    if root._fw_grad is not None:  # a view of an unpack_dual primal has no tangent either
        lvl = _fw_level.get()
        if lvl is not None and id(base) in lvl.primals:
            lvl.primals[id(out)] = out
    if not _grad_enabled.get():
        creation = VIEW_NO_GRAD
    elif multi:
        creation = VIEW_MULTI
    else:
        creation = base._creation if base._creation in (VIEW_MULTI, VIEW_NO_GRAD) else VIEW_DEFAULT
    out._creation = creation
    out._attr_version = out._vc[0]
    return out


def is_grad_leaf_view(t: Tensor) -> bool:
    """A view without history whose requires_grad comes from its base only (made under no_grad, or
    before the base was set to require grad): torch gives it no AccumulateGrad, gradients stop there."""
    return t._base is not None and t._grad_fn is None and not t._requires_grad


def _short(node: Node) -> str:
    return short_name(node.name)


def rebase_error(t: Tensor, indirect: bool) -> str | None:
    """torch's handle_view_on_rebase: the message refusing to rebase the history of view ``t``, or None.
    ``indirect``: its base or another view was modified (checked when the stale view is next used);
    otherwise ``t`` itself is about to be modified in place with autograd recording."""
    creation = t._creation
    if creation is None or creation == VIEW_DEFAULT:
        return None
    fn = t._grad_fn
    if indirect:
        if t._vc[0] == t._attr_version or (fn is None and not t._base.requires_grad):
            return None
        obj = "its base or another view of its base has been"
    else:
        obj = "is being"
    if creation == VIEW_NO_GRAD or fn is None:
        prefix = (f"Output {t.output_nr} of {_short(fn)} is a view of a view which was created in" if fn is not None
                  else "A view was created in")
        msg = f"{prefix} no_grad mode and {obj} modified inplace with grad mode enabled."
    else:
        msg = f"Output {t.output_nr} of {_short(fn)} is a view and {obj} modified inplace."
    return msg + (_MULTI if creation == VIEW_MULTI else _NO_GRAD)


def set_history(t: Tensor, node: Node | None, output_nr: int = 0) -> None:
    """Give ``t`` a new grad_fn (journaled); a retain_grad hook follows the tensor to its new node."""
    old, old_nr = t._grad_fn, t.output_nr
    setattr_(t, "_grad_fn", node)
    setattr_(t, "output_nr", output_nr)
    if t._base is not None:
        setattr_(t, "_attr_version", t._vc[0])
    if t.retains_grad and node is not old:
        if old is not None and old.retained and old.retained.get(old_nr) is t:
            setattr_(old, "retained", {k: v for k, v in old.retained.items() if k != old_nr} or None)
        if node is not None:
            if node.retained is None:
                setattr_(node, "retained", {})
            setitem_(node.retained, output_nr, t)


def _edge(t: Tensor | None):
    if t is None or not t.requires_grad:
        return (None, 0)
    fn = t.grad_fn if t._base is None else view_grad_fn(t)
    if fn is not None:
        return (fn, t.output_nr)
    return (accumulator(t), 0)


def accumulator(t: Tensor) -> Node | None:
    """The leaf's AccumulateGrad node: one shared node per leaf, as in torch. None for a view made under
    no_grad, whose requires_grad comes from its base (torch: no gradient accumulator)."""
    node = t._accumulator
    if node is None:
        if t._base is not None and is_grad_leaf_view(t):
            return None
        node = node_of(ACCUMULATE_GRAD, ())
        node.variable = t
        setattr_(t, "_accumulator", node)
    return node


def edge(t: Tensor | None):
    return _edge(t)


def base_edge(root: Tensor) -> tuple:
    return _edge(root)


def refresh_view(t: Tensor):
    """torch's VariableHooks::grad_fn for a view whose version moved on: AsStridedBackward0 over the
    base's history (or the old grad_fn when the view may not be rebased: ``rebase_error`` says why)."""
    fn = t._grad_fn
    root = t._base
    if fn is None and not root.requires_grad:
        return None
    if rebase_error(t, True) is not None:
        return fn
    positions = view_positions(root.data, t.data)
    node = node_of(P.AsStridedBackward0, (base_edge(root),),
                   {"positions": positions, "base_sizes": root.data.shape},
                   ((root.data.shape, root.data.dtype),))
    set_history(t, node, 0)
    if not t._requires_grad:
        setattr_(t, "_requires_grad", True)
    return node


def view_grad_fn(t: Tensor):
    """``t.grad_fn`` when autograd is about to record an edge to ``t``: a view that may not be rebased
    raises torch's error here."""
    if t._base is not None and t._vc[0] != t._attr_version:
        msg = rebase_error(t, True)
        if msg is not None:
            raise TorchRuntimeError(msg, code="invalid_inplace")
    return t.grad_fn


def view_positions(base: np.ndarray, view: np.ndarray) -> np.ndarray:
    """For each element of ``view`` (a numpy view into ``base``), its flat index in ``base``."""
    item = base.itemsize
    b0 = base.__array_interface__["data"][0]
    v0 = view.__array_interface__["data"][0]

    def addresses(arr, start):
        a = np.full(arr.shape, start, dtype=np.int64)
        for d, (n, st) in enumerate(zip(arr.shape, arr.strides)):
            shape = [1] * arr.ndim
            shape[d] = n
            a = a + (np.arange(n, dtype=np.int64) * (st // item)).reshape(shape)
        return a

    base_addr = addresses(base, 0).reshape(-1)
    view_addr = addresses(view, (v0 - b0) // item)
    if view_addr.size and (view_addr.min() < 0 or (base_addr.size and view_addr.max() > base_addr.max())):
        raise AssertionError("view_positions: the view does not lie inside its base's buffer")
    inv = np.full(int(base_addr.max()) + 1 if base_addr.size else 1, -1, dtype=np.int64)
    inv[base_addr] = np.arange(base_addr.size, dtype=np.int64)
    return np.asarray(inv[view_addr])


# ----- memory overlap (ATen's MemoryOverlap.cpp) ------------------------------------------------------------


def _dense(a: np.ndarray) -> bool:
    """torch's is_non_overlapping_and_dense."""
    if a.size <= 1:
        return True
    span = a.itemsize + sum((n - 1) * abs(s) for n, s in zip(a.shape, a.strides) if n > 1)
    if span != a.size * a.itemsize:
        return False
    return not any(s == 0 and n > 1 for n, s in zip(a.shape, a.strides))


def has_internal_overlap(a: np.ndarray) -> bool:
    """Some element of ``a`` is written twice (an expanded dimension); never in an empty array (whose strides
    numpy may leave at 0)."""
    return a.size > 0 and any(s == 0 and n > 1 for n, s in zip(a.shape, a.strides))


def partial_overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """torch's get_overlap_status(a, b) == PARTIAL: both dense, in one buffer, their ranges overlap and they
    are not the very same elements in the same layout."""
    if a is b or a.size == 0 or b.size == 0:
        return False
    if not _dense(a) or not _dense(b):
        return False  # torch: too hard to tell, allowed
    a0 = a.__array_interface__["data"][0]
    b0 = b.__array_interface__["data"][0]
    lo_a = a0 + sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s < 0)
    lo_b = b0 + sum((n - 1) * s for n, s in zip(b.shape, b.strides) if s < 0)
    end_a, end_b = lo_a + a.size * a.itemsize, lo_b + b.size * b.itemsize
    if not np.may_share_memory(a, b):
        return False
    if lo_a == lo_b and end_a == end_b:
        # torch compares the strides; a size-1 dim's stride is whatever its view made it (torch keeps the
        # original's where numpy's broadcasting writes 0), so only the other dims' count
        if a.shape != b.shape:
            return True
        return any(sa != sb for n, sa, sb in zip(a.shape, a.strides, b.strides) if n != 1)
    return lo_a < end_b and lo_b < end_a


install_hooks(refresh_view=refresh_view, rebase_error=rebase_error)  # Tensor.grad_fn's and view_error's
