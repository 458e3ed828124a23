"""Forward-mode state of the core: the active dual level and the tangent a tensor carries in it.

``forward_ad`` (``torch.autograd.forward_ad``: entering levels, ``make_dual``, ``unpack_dual``) and
``record()`` (which computes outputs' tangents) both read this state; it lives below the op table so that
tensors, views and the table read it without importing the forward-mode module above them.
"""

from __future__ import annotations

import contextvars

import numpy as np

from .errors import BatchingUnsupported, TorchRuntimeError
from .journal import setattr_


class DualLevel:
    """The active level: its number and the tensors that got a tangent in it (cleared on exit)."""

    __slots__ = ("index", "tensors", "op_index", "batch", "primals")

    def __init__(self, index: int = 0, op_index: int | None = None):
        self.index = index
        self.tensors: list = []
        # unpack_dual's primals and the views made of them, by id (kept alive here): views without a tangent
        # of their own, none derived from their base's (torch's _fw_primal is not forward-differentiable)
        self.primals: dict[int, object] = {}
        self.op_index = op_index  # the program op that entered it (for the unbalanced-level error)
        self.batch = None  # a batched level (functional.jacobian's forward mode): every tangent is (batch, ...)


_level: contextvars.ContextVar[DualLevel | None] = contextvars.ContextVar("gradserve_dual_level", default=None)


def current_level() -> DualLevel | None:
    return _level.get()


# ----- tangents of views -----------------------------------------------------------------------------------


def tangent_of(t):
    """The tangent of ``t`` at the active level: its own, or for a view of a dual base the same view of the
    base's tangent (torch derives it lazily too)."""
    fw = t._fw_grad
    if fw is None:
        base = t._base
        if base is not None and base._fw_grad is not None:
            lvl = _level.get()
            if lvl is not None and id(t) in lvl.primals:
                return None
            if lvl is not None and lvl.batch is not None:
                fw = view_tangent(base._fw_grad, base.data, t.data)
            else:
                fw = _view_of(base._fw_grad, base.data, t.data)
            if fw is None:  # every tangent a tensor owns has its data's layout (record, make_dual, in-place)
                raise TorchRuntimeError("forward AD: the base's tangent cannot be viewed like the view",
                                        code="internal_error")
            setattr_(t, "_fw_grad", fw)
            lvl = _level.get()
            if lvl is not None:
                lvl.tensors.append(t)
    return fw


def _elem_strides(a: np.ndarray) -> tuple:
    return tuple(s // a.itemsize for s in a.strides)


def _view_of(base_tangent, base: np.ndarray, view: np.ndarray):
    """A tensor viewing ``base_tangent`` as ``view`` views ``base`` (same element offset and strides), or None
    when the tangent's layout differs from the base's."""
    bt = base_tangent.data
    if bt.shape != base.shape or _elem_strides(bt) != _elem_strides(base):
        return None
    off = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // base.itemsize
    # the tangent's own class (Tensor): this module sits below tensor.py, which reads the level
    return base_tangent.__class__(np.asarray(_Strided(bt, off, view.shape, _elem_strides(view))))


class _Strided:
    """An ``__array_interface__`` over ``owner``'s memory (kept alive by this object, the array's base)."""

    def __init__(self, owner: np.ndarray, offset: int, shape: tuple, strides: tuple):
        self.owner = owner
        self.__array_interface__ = {
            "shape": tuple(shape), "typestr": owner.dtype.str, "version": 3,
            "data": (owner.__array_interface__["data"][0] + offset * owner.itemsize, False),
            "strides": tuple(s * owner.itemsize for s in strides)}


def view_tangent(base_tangent, base: np.ndarray, view: np.ndarray):
    """The batched tangent of a view: each entry viewed from the base's entry as ``view`` is from ``base``
    (the base's tangent being C-contiguous with a C-contiguous base; otherwise no rule)."""
    bt = base_tangent.data
    if bt.shape[1:] != base.shape or not bt.flags.c_contiguous or not base.flags.c_contiguous:
        raise BatchingUnsupported("view layout")
    item, titem = base.itemsize, bt.itemsize
    off = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    strides = (bt.strides[0] if bt.ndim else titem, *(s // item * titem for s in view.strides))
    flat = bt.reshape(-1)
    entries = np.lib.stride_tricks.as_strided(flat[off:], shape=(bt.shape[0], *view.shape), strides=strides,
                                              writeable=False)
    return base_tangent.__class__(entries)
