"""Forward mode: ``torch.autograd.forward_ad`` (``dual_level``, ``make_dual``, ``unpack_dual``).

A tensor's tangent lives in its ``_fw_grad`` slot while a dual level is active. ``record()`` (the one place
every differentiable primitive goes through) computes the output's tangent with the primitive's JVP, declared
next to its VJP (``@jvp(P.MulBackward0)``), when a level is active and some input has a tangent; the JVP is
written in engine ops, so a tangent is itself differentiable in reverse mode (reverse-over-forward) and a
VJP run inside a level propagates tangents (forward-over-reverse).

As in torch 2.13: one level at a time (``Nested forward mode AD is not supported at the moment``), numbered
0; grad mode (``no_grad``) does not disable forward AD; an output gets a tangent (zeros where the formula is
zero) whenever an input has one and the output is floating point; a view of a dual tensor carries the same
view of its tangent; an in-place op updates the tangent in place. Leaving the level drops every tangent made
in it, so no tangent outlives its level: a program (one HTTP request) must exit every level it enters, and
a stored session never holds a tangent.
"""

from __future__ import annotations

from collections import namedtuple

from . import kernel as K
from .dual import DualLevel, _level, current_level, tangent_of  # noqa: F401  (current_level: forward_ad's too)
from .errors import BatchingUnsupported, InvalidArgumentError, TorchRuntimeError, TorchValueError
from .journal import setattr_
from .kernel import kcall
from .ops.shape import _as_view
from .registry import P, record, with_layout
from .tensor import Tensor

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])


def enter_dual_level(op_index: int | None = None) -> int:
    """``torch.autograd.forward_ad.enter_dual_level()``: returns the new level (0)."""
    if _level.get() is not None:
        raise TorchRuntimeError("Nested forward mode AD is not supported at the moment", code="nested_dual_level")
    _level.set(DualLevel(0, op_index))
    return 0


def exit_dual_level(*, level: int | None = None) -> None:
    """``torch.autograd.forward_ad.exit_dual_level(level=None)``: drops every tangent of the level."""
    cur = _level.get()
    current = cur.index if cur is not None else -1
    if level is None:
        level = current
    if level != current:
        raise TorchRuntimeError("Trying to exit a forward AD level that was not the last one that was created. "
                                "This is not supported.", code="invalid_dual_level")
    if cur is None:
        raise TorchRuntimeError("Dual level must be a positive number.", code="invalid_dual_level")
    for t in cur.tensors:
        if t._fw_grad is not None:
            setattr_(t, "_fw_grad", None)
    cur.tensors.clear()
    _level.set(None)


class dual_level:
    """``with dual_level():`` -- enter a level, exit it at the end of the block (also on error)."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()
        return False


class program_dual_scope:
    """A program's dual levels: a level still open when the op list ends is an error (the program is
    refused, as a ``with dual_level():`` block cannot span two requests); on any error the level is dropped
    (the program's undo journal restores every tangent it set on existing tensors)."""

    def __enter__(self):
        self._token = _level.set(None)
        return self

    def __exit__(self, exc_type, exc, tb):
        cur = _level.get()
        _level.reset(self._token)
        if cur is not None and exc_type is None:
            where = f"by op {cur.op_index} " if cur.op_index is not None else ""
            err = TorchRuntimeError(f"the dual level entered {where}was not exited: a forward AD level cannot "
                                    f"outlive its op list; end it with exit_dual_level in the same op list",
                                    code="unbalanced_dual_level")
            if cur.op_index is not None:
                err.at(cur.op_index, "enter_dual_level")
            raise err
        return False


def _require(v, name: str, what: str):
    if not isinstance(v, Tensor):
        raise InvalidArgumentError(f"{what}(): argument '{name}' must be Tensor, not {type(v).__name__}")
    return v


def make_dual(tensor, tangent, *, level: int | None = None):
    """``torch.autograd.forward_ad.make_dual(tensor, tangent, level=None)``: a view of ``tensor`` whose
    tangent is ``tangent`` (the same tensor object)."""
    tensor = _require(tensor, "tensor", "make_dual")
    tangent = _require(tangent, "tangent", "make_dual")
    cur = _level.get()
    if isinstance(level, bool) or not isinstance(level, (int, type(None))):
        raise InvalidArgumentError(f"make_dual(): level must be an int, not {type(level).__name__}")
    if (level if level is not None else (cur.index if cur is not None else -1)) < 0:
        raise TorchRuntimeError("Trying to create a dual Tensor for forward AD but no level exists, make sure to "
                                "enter_dual_level() first.", code="no_dual_level")
    if tensor.data.dtype.kind not in "fV":
        raise TorchValueError(f"Expected primal to be floating point or complex, but got: torch.{tensor.dtype}",
                              code="invalid_dtype")
    if tangent.data.dtype.kind not in "fV":
        raise TorchValueError(f"Expected tangent to be floating point or complex, but got: torch.{tangent.dtype}",
                              code="invalid_dtype")
    if cur is None:
        raise TorchRuntimeError("Trying to access a forward AD level with an invalid index. This index was either "
                                "not created or is already deleted.", code="invalid_dual_level")
    if level is not None and level != cur.index:
        raise TorchRuntimeError("Invalid level given to _make_dual", code="invalid_dual_level")
    lvl = cur
    if tangent_of(tensor) is not None:
        raise TorchRuntimeError(f"Making a dual Tensor based on a Tensor that already has a forward gradient at "
                                f"the same level {lvl.index} is not supported.", code="invalid_dual")
    if tangent.data.shape != tensor.data.shape:
        raise TorchRuntimeError(
            f"Trying to set a forward gradient that has a different size than that of the original Tensor, this "
            f"is not supported. Tensor is of size {list(tensor.data.shape)} while the given forward gradient is "
            f"of size {list(tangent.data.shape)}.", code="tangent_shape_mismatch")
    if tangent_of(tangent) is not None:
        raise TorchRuntimeError(f"Setting a forward grad that itself has a forward gradient at the same "
                                f"level{lvl.index} is not supported.", code="invalid_dual")
    out = _dual_view(tensor)
    # the tangent object itself, unless its layout differs from the primal's (then a copy, as torch makes)
    out._fw_grad = with_layout(tangent, out.data)
    lvl.tensors.append(out)
    return out


def _dual_view(tensor):
    """The dual's primal: a view of ``tensor`` (ViewBackward0), recorded with forward mode off."""
    token = _level.set(None)
    try:
        return _as_view(record(P.ViewBackward0, kcall(K.view, tensor.data), (tensor,),
                               {"self_sym_sizes": tensor.data.shape}), tensor)
    finally:
        _level.reset(token)


def unpack_dual(tensor, *, level: int | None = None) -> UnpackedDualTensor:
    """``torch.autograd.forward_ad.unpack_dual(tensor, level=None)`` -> (primal, tangent). Inside a level the
    primal is a view of ``tensor`` without its tangent (grad_fn ``Identity`` when it requires grad); outside,
    ``(tensor, None)``."""
    tensor = _require(tensor, "tensor", "unpack_dual")
    cur = _level.get()
    if cur is not None and cur.batch is not None:  # a function that unpacks its own duals: no batching rule
        raise BatchingUnsupported("unpack_dual")
    return _unpack(tensor, level, cur)


def _unpack(tensor, level, cur) -> UnpackedDualTensor:
    if level is None:
        level = cur.index if cur is not None else -1
    if level < 0:
        return UnpackedDualTensor(tensor, None)
    tangent = tangent_of(tensor) if cur is not None else None
    if tangent is not None and level != cur.index:
        raise TorchRuntimeError("Invalid level given to _fw_primal", code="invalid_dual_level")
    token = _level.set(None)
    try:
        primal = _as_view(record(P.Identity, tensor.data.view(), (tensor,)), tensor)
    finally:
        _level.reset(token)
    if cur is not None:
        cur.primals[id(primal)] = primal
    return UnpackedDualTensor(primal, tangent)


def batched_dual(tensor, tangent):
    """In a batched level: ``make_dual`` with a tangent of shape ``(batch, *tensor.shape)``."""
    cur = _level.get()
    out = _dual_view(tensor)
    out._fw_grad = tangent
    cur.tensors.append(out)
    return out


def batched_unpack(tensor) -> UnpackedDualTensor:
    """``unpack_dual`` in a batched level (the tangent is batched)."""
    return _unpack(tensor, None, _level.get())


# ----- tangents of views and in-place updates -------------------------------------------------------------


