"""In-place ops: ``add_``, ``mul_``, ... ``zero_``, ``fill_``, ``copy_``, ``setitem`` and the augmented
assignments.

Each is the out-of-place op applied to a "shadow" of the tensor's old value, whose result is written into
the tensor's own buffer, as torch does:

* refused, before anything changes, on a leaf that requires grad (or a view of one) while grad mode is on;
* the version counter (shared with views and ``detach()`` results) goes up by one;
* with grad recording, a non-leaf's ``grad_fn`` becomes the op's node whose first edge is the old
  ``grad_fn``; on a view of a non-leaf the base gets ``CopySlices`` and the view ``AsStridedBackward0``;
* under ``no_grad`` nothing but the value and the version change.
"""

from __future__ import annotations

import inspect

import numpy as np

from .. import dtypes as D
from ..errors import LeafInplaceError, TorchRuntimeError
from ..forward_ad import _level as _fw_level
from ..forward_ad import inplace_update, tangent_of
from ..grad_mode import _grad_enabled
from ..journal import array_, setattr_, setitem_
from ..node import Node, SavedTensor
from ..registry import edge, jvp, op, record, vjp, zero_jvp
from ..tensor import Tensor
from . import elementwise as E
from .common import require_tensor

_LEAF = "a leaf Variable that requires grad is being used in an in-place operation."
_VIEW_OF_LEAF = "a view of a leaf Variable that requires grad is being used in an in-place operation."


def check_inplace(self: Tensor) -> None:
    """torch's check_inplace: refuse in-place on (a view of) a leaf that requires grad in grad mode."""
    if not _grad_enabled.get():
        return
    base = self._base
    if base is not None and self.requires_grad and base.requires_grad and base.grad_fn is None:
        raise LeafInplaceError(_VIEW_OF_LEAF)
    if self.requires_grad and self.grad_fn is None:
        raise LeafInplaceError(_LEAF)


def apply_inplace(self: Tensor, fn, *args, **kwargs) -> Tensor:
    self = require_tensor(self)
    check_inplace(self)
    if not self.data.flags.writeable:
        raise TorchRuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                                "single memory location. Please clone() the tensor before performing the operation.",
                                code="invalid_inplace")
    shadow = Tensor(self.data, self.requires_grad, self.grad_fn, self.output_nr, vc=self._vc)
    shadow._accumulator = self._accumulator
    fw_level = _fw_level.get()
    if fw_level is not None:
        shadow._fw_grad = tangent_of(self)
    result = fn(shadow, *args, **kwargs)
    if not D.can_cast(result.dtype, self.dtype):
        raise TorchRuntimeError(f"result type {D.SCALAR_TYPE_NAMES[result.dtype]} can't be cast to the desired "
                                f"output type {D.SCALAR_TYPE_NAMES[self.dtype]}", code="invalid_dtype")
    if result.data.shape != self.data.shape:
        raise TorchRuntimeError(f"output with shape [{', '.join(map(str, self.data.shape))}] doesn't match the "
                                f"broadcast shape [{', '.join(map(str, result.data.shape))}]",
                                code="shape_mismatch")
    if fw_level is not None and result._fw_grad is not None and result is not shadow:
        if shadow._fw_grad is not None:  # the op may have saved the old value: it keeps the old tangent
            from .shape import clone
            shadow._fw_grad = clone(shadow._fw_grad)
        inplace_update(self, result._fw_grad)  # before the primal changes: a refused tangent update changes nothing
    node = result.grad_fn if result.requires_grad and result is not shadow else None
    if node is not None:
        for v in node.saved.values():
            if isinstance(v, SavedTensor) and v.tensor is shadow:
                # the op saved the old value: keep a private copy with its own version counter
                shadow.data = shadow.data.copy()
                shadow._vc = [v.version]
    if result.data is not self.data:
        array_(self.data)
        np.copyto(self.data, result.data, casting="unsafe")
    setitem_(self._vc, 0, self._vc[0] + 1)
    if node is None:
        return self
    for v in node.saved.values():
        if isinstance(v, SavedTensor) and v.tensor is result:
            v.tensor = self
            v.version = self._vc[0]
    base = self._base
    if base is not None and (self.grad_fn is not None or base.requires_grad):
        _copy_slices(base, self, node)
    else:
        _rebase(self, node)
    return self


def _rebase(self: Tensor, node: Node) -> None:
    old, old_nr = self.grad_fn, self.output_nr
    setattr_(self, "grad_fn", node)
    setattr_(self, "output_nr", 0)
    setattr_(self, "requires_grad", True)
    if self.retains_grad:
        if old is not None and old.retained:
            setattr_(old, "retained", {k: v for k, v in old.retained.items() if k != old_nr})
        node.retained = {0: self}


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
    inv = np.full(int(base_addr.max()) + 1 if base_addr.size else 1, -1, dtype=np.int64)
    inv[base_addr] = np.arange(base_addr.size, dtype=np.int64)
    return np.asarray(inv[addresses(view, (v0 - b0) // item)])


def _copy_slices(base: Tensor, view: Tensor, node: Node) -> None:
    positions = view_positions(base.data, view.data)
    old_base_edge = edge(base)
    cs = Node("CopySlices", "CopySlices", (old_base_edge,) + node.next_functions[1:],
              {"fn": node, "positions": positions, "base_sizes": base.data.shape},
              ((base.data.shape, base.data.dtype),) + node.input_meta[1:])
    setattr_(base, "grad_fn", cs)
    setattr_(base, "output_nr", 0)
    setattr_(base, "requires_grad", True)
    setattr_(view, "grad_fn", Node("AsStridedBackward0", "AsStridedBackward0", ((cs, 0),),
                        {"positions": positions, "base_sizes": base.data.shape},
                        ((base.data.shape, base.data.dtype),)))
    setattr_(view, "output_nr", 0)
    setattr_(view, "requires_grad", True)


@vjp("CopySlices", inputs=("self",), saves=("fn", "positions", "base_sizes"))
def _(ctx, grad):
    from ..autograd import _apply
    from .shape import _index, _index_put_zeros, reshape
    fn = ctx.fn
    pos = ctx.positions
    flat = reshape(grad, (-1,))
    g_view = reshape(_index(flat, [(0, pos.reshape(-1))]), pos.shape)
    res = _apply(fn, [g_view] + [None] * (fn.n_outputs - 1))
    mask = np.zeros(grad.data.size, dtype=bool)
    mask[pos.reshape(-1)] = True
    g_base = E.masked_fill(grad, Tensor(mask.reshape(grad.data.shape)), 0)
    if res[0] is not None:
        g_base = g_base + reshape(_index_put_zeros(res[0], (grad.data.size,), [Tensor(pos)]), grad.data.shape)
    return (g_base,) + tuple(res[1:])


@jvp("CopySlices")
def _(ctx, *tangents):
    # never recorded through record(): an in-place op on a view updates the tangents in place instead
    # (forward_ad.inplace_update), so forward AD through CopySlices is the in-place op's own JVP
    raise TorchRuntimeError("CopySlices is not recorded through record()", code="internal_error")


@vjp("AsStridedBackward0", inputs=("self",), saves=("positions", "base_sizes"))
def _(ctx, grad):
    from .shape import _index_put_zeros, reshape
    size = int(np.prod(ctx.base_sizes))
    return reshape(_index_put_zeros(grad, (size,), [Tensor(ctx.positions)]), ctx.base_sizes),


@jvp("AsStridedBackward0")
def _(ctx, *tangents):
    raise TorchRuntimeError("AsStridedBackward0 is not recorded through record()", code="internal_error")


# ----- the out-of-place forms that only exist for in-place ops ------------------------------------------


def _zero(self: Tensor) -> Tensor:
    return record("ZeroBackward0", np.zeros_like(self.data), (self,))


@vjp("ZeroBackward0", inputs=("self",))
def _(ctx, grad):
    return E.zeros_like(grad),


jvp("ZeroBackward0")(zero_jvp)


def _fill(self: Tensor, value) -> Tensor:
    if isinstance(value, Tensor):
        if value.data.ndim != 0:
            raise TorchRuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                                    f"{value.data.ndim} dimensions.", code="invalid_argument")
        out = np.full(self.data.shape, value.data, dtype=self.data.dtype)
        return record("FillBackward1", out, (self, value))
    return record("FillBackward0", np.full(self.data.shape, value, dtype=self.data.dtype), (self,))


@vjp("FillBackward0", inputs=("self",))
def _(ctx, grad):
    return E.zeros_like(grad),


jvp("FillBackward0")(zero_jvp)


@vjp("FillBackward1", inputs=("self", "value"))
def _(ctx, grad):
    from .reduction import sum as sum_
    n = ctx.needs
    return (E.zeros_like(grad) if n[0] else None), (sum_(grad) if n[1] else None)


@jvp("FillBackward1")
def _(ctx, self_t, value_t):
    return value_t  # broadcast to the output by the engine


def _copy(self: Tensor, src) -> Tensor:
    src = src if isinstance(src, Tensor) else Tensor(np.asarray(src, dtype=self.data.dtype))
    from .common import broadcast_shapes
    shape = broadcast_shapes(self.data.shape, src.data.shape)
    if shape != self.data.shape:
        raise TorchRuntimeError(f"output with shape [{', '.join(map(str, self.data.shape))}] doesn't match the "
                                f"broadcast shape [{', '.join(map(str, shape))}]", code="shape_mismatch")
    out = np.array(np.broadcast_to(src.data, shape), dtype=self.data.dtype, copy=True)
    return record("CopyBackwards", out, (self, src))


@vjp("CopyBackwards", inputs=("self", "src"))
def _(ctx, grad):
    n = ctx.needs
    return (E.zeros_like(grad) if n[0] else None), (grad if n[1] else None)


@jvp("CopyBackwards")
def _(ctx, self_t, src_t):
    return src_t


# ----- the in-place op table ------------------------------------------------------------------------------


def _make(name: str, fn, grad_fns: tuple, tensors=("self",), aliases=(), doc=""):
    def inplace(self, *args, **kwargs):
        return apply_inplace(self, fn, *args, **kwargs)

    inplace.__name__ = name
    inplace.__signature__ = inspect.signature(fn)  # the program resolves tensor arguments by these names
    inplace.__doc__ = doc or f"Tensor.{name}: in-place {name[:-1]}; bumps the version counter."
    return op(name, tensors=tensors, grad_fns=grad_fns, inplace=True, aliases=aliases)(inplace)


add_ = _make("add_", E.add, ("AddBackward0",), ("self", "other"), ("__iadd__", "iadd"))
sub_ = _make("sub_", E.sub, ("SubBackward0",), ("self", "other"), ("__isub__", "isub"))
mul_ = _make("mul_", E.mul, ("MulBackward0",), ("self", "other"), ("__imul__", "imul"))
div_ = _make("div_", E.div, ("DivBackward0",), ("self", "other"), ("__itruediv__", "itruediv", "idiv"))
pow_ = _make("pow_", E.pow, ("PowBackward0", "PowBackward1"), ("self", "exponent"), ("__ipow__", "ipow"))
exp_ = _make("exp_", E.exp, ("ExpBackward0",))
log_ = _make("log_", E.log, ("LogBackward0",))
neg_ = _make("neg_", E.neg, ("NegBackward0",))
sqrt_ = _make("sqrt_", E.sqrt, ("SqrtBackward0",))
abs_ = _make("abs_", E.abs, ("AbsBackward0",))
sigmoid_ = _make("sigmoid_", E.sigmoid, ("SigmoidBackward0",))
tanh_ = _make("tanh_", E.tanh, ("TanhBackward0",))
relu_ = _make("relu_", E.relu, ("ReluBackward0",))
clamp_ = _make("clamp_", E.clamp, ("ClampBackward1", "ClampBackward0"), ("self", "min", "max"), ("clip_",))
clamp_min_ = _make("clamp_min_", E.clamp_min, ("ClampMinBackward0",))
clamp_max_ = _make("clamp_max_", E.clamp_max, ("ClampMaxBackward0",))
masked_fill_ = _make("masked_fill_", E.masked_fill, ("MaskedFillBackward0",), ("self", "mask"))
zero_ = _make("zero_", _zero, ("ZeroBackward0",), doc="Tensor.zero_(): fill with zeros in place.")
fill_ = _make("fill_", _fill, ("FillBackward0",), ("self", "value"), doc="Tensor.fill_(value): in place.")
copy_ = _make("copy_", _copy, ("CopyBackwards",), ("self", "src"),
              doc="Tensor.copy_(src): copy src (broadcast, cast) into self in place.")


@op("setitem", tensors=("self", "index", "value"), grad_fns=("CopySlices",), inplace=True,
    aliases=("__setitem__",))
def setitem(self, index, value):
    """``self[index] = value``: a basic index writes through a view (CopySlices on a non-leaf); an advanced
    index (int lists, masks) is ``index_put_``."""
    from .shape import _normalize_index, getitem
    self = require_tensor(self)
    idx = _normalize_index(index)
    advanced = any(isinstance(it, (list, Tensor, np.ndarray)) and not isinstance(it, bool) for it in idx)
    if not advanced:
        view = getitem(self, index)
        if view is self or view._base is None:
            return copy_(self, value)
        copy_(view, value)
        return self
    return apply_inplace(self, _index_put, idx, value)


def _index_put(self: Tensor, idx: tuple, value) -> Tensor:
    from .shape import getitem
    probe = getitem(Tensor(np.arange(self.data.size).reshape(self.data.shape)), idx)
    positions = probe.data.reshape(-1)
    out = self.data.copy().reshape(-1)
    v = value.data if isinstance(value, Tensor) else np.asarray(value)
    from .common import broadcast_shapes
    broadcast_shapes(probe.data.shape, v.shape)
    out[positions] = np.broadcast_to(v, probe.data.shape).reshape(-1).astype(self.data.dtype)
    src = value if isinstance(value, Tensor) else None
    return record("IndexPutBackward0", out.reshape(self.data.shape), (self, src),
                  {"positions": positions, "probe_shape": probe.data.shape})


@vjp("IndexPutBackward0", inputs=("self", "values"), saves=("positions", "probe_shape"))
def _(ctx, grad):
    from .shape import _index, reshape
    n = ctx.needs
    pos = ctx.positions
    g_self = g_val = None
    if n[0]:
        mask = np.zeros(grad.data.size, dtype=bool)
        mask[pos] = True
        g_self = E.masked_fill(grad, Tensor(mask.reshape(grad.data.shape)), 0)
    if n[1]:
        g_val = reshape(_index(reshape(grad, (-1,)), [(0, pos)]), ctx.probe_shape)
    return g_self, g_val


@jvp("IndexPutBackward0")
def _(ctx, self_t, values_t):
    from .shape import _index_put_zeros, expand, reshape
    shape = ctx.result.data.shape
    out = None
    if self_t is not None:
        mask = np.zeros(self_t.data.size, dtype=bool)
        mask[ctx.positions] = True
        out = E.masked_fill(self_t, Tensor(mask.reshape(shape)), 0)
    if values_t is not None:
        flat = reshape(expand(values_t, ctx.probe_shape), (-1,))
        put = reshape(_index_put_zeros(flat, (int(np.prod(shape)),), [Tensor(ctx.positions)]), shape)
        out = put if out is None else out + put
    return out


