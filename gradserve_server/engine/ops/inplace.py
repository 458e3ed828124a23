"""In-place ops: ``add_``, ``mul_``, ... ``zero_``, ``fill_``, ``copy_``, the index writes ``scatter_``,
``scatter_add_``, ``index_add_``, ``index_copy_``, ``index_fill_``, ``setitem`` and the augmented assignments.

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
import weakref

import numpy as np

from .. import dtypes as D
from .. import kernel as K
from .. import registry as R
from ..budget import _budget
from ..dual import _level as _fw_level
from ..dual import tangent_of
from ..errors import BatchingUnsupported, LeafInplaceError, TorchRuntimeError
from ..grad_mode import _grad_enabled
from ..journal import array_, setattr_, setitem_
from ..kernel import kcall, kinplace
from ..node import Node, SavedTensor, node_of
from ..registry import OPS, P, broken_check, edge, jvp, op, record, vjp, with_layout, zero_jvp
from ..tensor import Tensor
from ..views import _dense, has_internal_overlap, partial_overlap, rebase_error, set_history, view_positions
from . import elementwise as E
from . import linalg, matrix, reduction, scan, special  # noqa: F401  (ops whose in-place forms are declared here)
from .common import INDEX_CHECKS, require_tensor
from .indexing import index_add, index_copy, index_fill, scatter, scatter_add

_LEAF = "a leaf Variable that requires grad is being used in an in-place operation."
_VIEW_OF_LEAF = "a view of a leaf Variable that requires grad is being used in an in-place operation."


def check_inplace(self: Tensor, others=()) -> None:
    """torch's check_inplace, when autograd records (grad mode on and some input requires grad): a view
    that may not be rebased (an output of split/unbind/chunk, or made under no_grad) is refused, then (a
    view of) a leaf that requires grad."""
    if not _grad_enabled.get():
        return
    if not self.requires_grad and not any(o.__class__ is Tensor and o.requires_grad for o in others):
        return
    base = self._base
    if base is not None:
        msg = rebase_error(self, indirect=False)
        if msg is not None:
            raise TorchRuntimeError(msg, code="invalid_inplace")
        if self.requires_grad and base.grad_fn is None:
            raise LeafInplaceError(_VIEW_OF_LEAF)
    if self.requires_grad and self.grad_fn is None:
        raise LeafInplaceError(_LEAF)


_INTERNAL_OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers to a single "
                     "memory location. Please clone() the tensor before performing the operation.")
_PARTIAL_OVERLAP = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
                    "single memory location. Please clone() the tensor before performing the operation.")


def _tensor_args(args, kwargs) -> list:
    out = []
    for a in (*args, *kwargs.values()):
        if a.__class__ is Tensor:
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(x for x in a if x.__class__ is Tensor)
    return out


def _writeable(a: np.ndarray) -> np.ndarray:
    """``a`` itself, or a writeable alias of the same elements when numpy marked a view read-only (a slice
    of an expanded array whose own elements do not overlap: torch writes there)."""
    if a.flags.writeable:
        return a
    own = a
    while isinstance(own.base, np.ndarray):
        own = own.base
    if not own.flags.writeable:
        return a
    off = a.__array_interface__["data"][0] - own.__array_interface__["data"][0]
    return np.ndarray(a.shape, a.dtype, buffer=own, offset=off, strides=a.strides)


def _full_overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """torch's MemOverlapStatus::Full: the same elements in the same layout (a dense tensor and itself)."""
    return (a.size > 0 and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.shape == b.shape and a.strides == b.strides and _dense(a))


def _check_overlap(self: Tensor, others: list, fn, args, full: bool) -> None:
    if has_internal_overlap(self.data) and not (fn is _copy and args and args[0] is self):
        raise TorchRuntimeError(_INTERNAL_OVERLAP, code="invalid_inplace")  # (x.copy_(x) is a no-op in torch)
    for o in others:
        if partial_overlap(self.data, o.data) or (full and _full_overlap(self.data, o.data)):
            raise TorchRuntimeError(_PARTIAL_OVERLAP, code="invalid_inplace")


def _saved_copy(a: np.ndarray) -> np.ndarray:
    """``counted_copy`` of the old value an op saved, made by a kernel (a plan records it)."""
    budget = _budget.get()
    if budget is not None:
        budget.reserve(a.nbytes, "the saved value of a tensor changed in place")
    copy = kcall(K.copy, a)
    if budget is not None:
        budget.track(copy)
    return copy


def apply_inplace(self: Tensor, fn, *args, **kwargs) -> Tensor:
    return _apply_inplace(self, fn, args, kwargs, True)


def _apply_inplace(self: Tensor, fn, args, kwargs, overlap_check, meta=None) -> Tensor:
    """``meta``: the op's own argument checks that torch makes before its TensorIterator's (``lerp_``'s dtypes),
    called as the op. ``overlap_check``: refuse a target whose elements overlap (an expanded tensor) or that partly
    overlaps an input, as torch's TensorIterator does; fill_, zero_ and masked_fill_ turn it off (only
    fill_ with a tensor value checks the target, in ``_fill``). ``"any"``: also refuse an input that is the
    target itself (torch's assert_no_overlap in the index and scatter kernels)."""
    self = require_tensor(self)
    others = _tensor_args(args, kwargs)
    check_inplace(self, others)
    if meta is not None:
        meta(self, *args, **kwargs)
    if overlap_check is True:  # TensorIterator's checks come first; the index kernels' after their own
        _check_overlap(self, others, fn, args, False)
    target = _writeable(self.data)
    if not target.flags.writeable:
        raise TorchRuntimeError(_INTERNAL_OVERLAP, code="invalid_inplace")
    shadow = Tensor(self.data, self.requires_grad, self.grad_fn, self.output_nr, vc=self._vc)
    shadow._accumulator = self._accumulator
    fw_level = _fw_level.get()
    if fw_level is not None:
        shadow._fw_grad = tangent_of(self)
    result = fn(shadow, *args, **kwargs)
    if overlap_check == "any":
        _check_overlap(self, others, fn, args, True)
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
            if isinstance(v, SavedTensor) and v.live() is shadow:
                # the op saved the old value: keep a private copy with its own version counter (counted in
                # the run's bytes, as a Tensor's data is)
                shadow.data = _saved_copy(shadow.data)
                shadow._vc = [v.version]
    if result.data is not self.data:
        array_(target)
        if has_internal_overlap(target):
            # elements written more than once (an expanded target): an unchanged one must not undo another's
            # write, as torch's masked_fill_ only writes where the mask is set
            np.copyto(target, result.data, casting="unsafe", where=result.data != self.data)
        else:  # (through a kernel: a plan records the write and replays it)
            kinplace(K.assign, target, result.data)
    setitem_(self._vc, 0, self._vc[0] + 1)
    if node is None:
        return self
    for v in node.saved.values():
        if isinstance(v, SavedTensor) and v.live() is result:
            v.tensor = self
            v.version = self._vc[0]
    if self._base is not None:
        _copy_slices(self._base, self, node)  # torch's rebase_history of a view: CopySlices on the base
        for v in node.saved.values():
            if isinstance(v, SavedTensor) and v.is_output and v.live() is self:
                v.view_fn = weakref.ref(self.grad_fn)  # named in a version error while it lives (node.py)
    else:
        set_history(self, node, 0)
        if not self._requires_grad:
            setattr_(self, "_requires_grad", True)
    return self


def _copy_slices(base: Tensor, view: Tensor, node: Node) -> None:
    positions = view_positions(base.data, view.data)
    cs = node_of(P.CopySlices, (edge(base),) + node.next_functions[1:],
                 {"fn": node, "positions": positions, "base_sizes": base.data.shape},
                 ((base.data.shape, base.data.dtype),) + node.input_meta[1:])
    set_history(base, cs, 0)
    if not base._requires_grad:
        setattr_(base, "_requires_grad", True)
    set_history(view, node_of(P.AsStridedBackward0, ((cs, 0),),
                              {"positions": positions, "base_sizes": base.data.shape},
                              ((base.data.shape, base.data.dtype),)), 0)
    if not view._requires_grad:
        setattr_(view, "_requires_grad", True)


@vjp("CopySlices", inputs=("self",), saves=("fn", "positions", "base_sizes"), cpp=True)
def _(ctx, grad):
    from .shape import _index, _index_put_zeros, reshape
    fn = ctx.fn
    if fn is None:  # released by an earlier backward
        from ..errors import GraphFreedError
        raise GraphFreedError()
    pos = ctx.positions
    flat = reshape(grad, (-1,))
    g_view = reshape(_index(flat, [(0, pos.reshape(-1))]), pos.shape)
    res = R.apply_node(fn, [g_view] + [None] * (fn.n_outputs - 1))
    mask = np.zeros(grad.data.size, dtype=bool)
    mask[pos.reshape(-1)] = True
    g_base = E.masked_fill(grad, Tensor(mask.reshape(grad.data.shape)), 0)
    if res[0] is not None and ctx.needs[0]:
        if np.unique(pos).size != pos.size:
            # torch copies the gradient into the view's slice of the base's gradient (grad_slice.copy_): an
            # expanded view (masked_fill_ and fill_ write into one with a deprecation warning) refuses it
            raise TorchRuntimeError(_INTERNAL_OVERLAP, code="invalid_inplace")
        g_base = g_base + reshape(_index_put_zeros(res[0], (grad.data.size,), [Tensor(pos)]), grad.data.shape)
    return (g_base,) + tuple(res[1:])


@jvp()
def _(ctx, *tangents):
    # never recorded through record(): an in-place op on a view updates the tangents in place instead
    # (inplace_update), so forward AD through CopySlices is the in-place op's own JVP
    raise TorchRuntimeError("CopySlices is not recorded through record()", code="internal_error")


@vjp("AsStridedBackward0", inputs=("self",), saves=("positions", "base_sizes"))
def _(ctx, grad):
    from .shape import _index_put_zeros, reshape
    size = int(np.prod(ctx.base_sizes))
    storage = _index_put_zeros(grad, (size,), [Tensor(ctx.positions)])
    if not storage.requires_grad:
        return reshape(storage, ctx.base_sizes),
    # FunctionsManual as_strided_backward: the gradient scattered into a flat storage, returned as
    # storage.as_strided(input geometry): under create_graph its grad_fn is AsStridedBackward0
    shape = tuple(ctx.base_sizes)
    node = node_of(P.AsStridedBackward0, (edge(storage),),
                   {"positions": np.arange(size, dtype=np.int64).reshape(shape), "base_sizes": (size,)},
                   (((size,), storage.data.dtype),))
    return Tensor(storage.data.reshape(shape), True, node),


@jvp()
def _(ctx, *tangents):
    raise TorchRuntimeError("AsStridedBackward0 is not recorded through record()", code="internal_error")


# ----- the out-of-place forms that only exist for in-place ops ------------------------------------------


def _zero(self: Tensor) -> Tensor:
    return record(P.ZeroBackward0, kcall(K.zeros_like, self.data), (self,))


@vjp("ZeroBackward0", inputs=("self",), jvp=zero_jvp)
def _(ctx, grad):
    return E.zeros_like(grad),


def _fill(self: Tensor, value) -> Tensor:
    """fill_(Scalar) is FillBackward2, fill_(Tensor) FillBackward3 (torch 2.x's overload numbering)."""
    if isinstance(value, Tensor):
        if value.data.ndim != 0:
            raise TorchRuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                                    f"{value.data.ndim} dimensions.", code="invalid_argument")
        if has_internal_overlap(self.data):  # fill_(Tensor) checks its target, fill_(Scalar) does not
            raise TorchRuntimeError(_INTERNAL_OVERLAP, code="invalid_inplace")
        out = np.full(self.data.shape, value.data, dtype=self.data.dtype)
        return record(P.FillBackward3, out, (self, value))
    value = E.checked_scalar(value, self.dtype) if isinstance(value, (int, float)) else value
    return record(P.FillBackward2, np.full(self.data.shape, value, dtype=self.data.dtype), (self,))


def _fill_scalar_vjp(ctx, grad):
    return E.zeros_like(grad),


def _fill_tensor_vjp(ctx, grad):
    from .reduction import sum as sum_
    n = ctx.needs
    return (E.zeros_like(grad) if n[0] else None), (sum_(grad) if n[1] else None)


def _fill_tensor_jvp(ctx, self_t, value_t):
    return value_t  # broadcast to the output by the engine


vjp("FillBackward2", inputs=("self",))(_fill_scalar_vjp)
vjp("FillBackward3", inputs=("self", "value"))(_fill_tensor_vjp)
jvp(P.FillBackward2)(zero_jvp)
jvp(P.FillBackward3)(_fill_tensor_jvp)
# the names sessions saved before torch 2.x's numbering was followed still load
vjp("FillBackward0", inputs=("self",))(_fill_scalar_vjp)
vjp("FillBackward1", inputs=("self", "value"))(_fill_tensor_vjp)
jvp(P.FillBackward0)(zero_jvp)
jvp(P.FillBackward1)(_fill_tensor_jvp)


def _copy(self: Tensor, src) -> Tensor:
    src = src if isinstance(src, Tensor) else Tensor(np.asarray(src, dtype=self.data.dtype))
    from .common import broadcast_shapes
    shape = broadcast_shapes(self.data.shape, src.data.shape)
    if shape != self.data.shape:
        raise TorchRuntimeError(f"output with shape [{', '.join(map(str, self.data.shape))}] doesn't match the "
                                f"broadcast shape [{', '.join(map(str, shape))}]", code="shape_mismatch")
    return record(P.CopyBackwards, kcall(_copy_kernel, src.data, shape, self.data.dtype), (self, src))


def _copy_kernel(src: np.ndarray, shape: tuple, dtype) -> np.ndarray:
    """copy_'s kernel: ``src`` broadcast to ``shape``, cast to ``dtype``, a new array (then written in place)."""
    return np.array(np.broadcast_to(src, shape), dtype=dtype, copy=True)


K.MOVES.add(_copy_kernel)  # (of one dtype: a copy keeps every bit, a bfloat16 NaN's payload too)


@vjp("CopyBackwards", inputs=("self", "src"), cpp=True)
def _(ctx, grad):
    n = ctx.needs
    src = None
    if n[1]:
        # torch's CopyBackwards casts to src's dtype itself (grad.to(src_options)); validate_outputs then sums
        # to src's shape: the cast comes before the sum
        src = grad
        meta = ctx.node.input_meta[1]
        if meta is not None and grad.data.dtype != meta[1]:
            from .shape import to
            src = to(grad, meta[1])
    return (E.zeros_like(grad) if n[0] else None), src


@jvp()
def _(ctx, self_t, src_t):
    return src_t


# ----- the in-place op table ------------------------------------------------------------------------------


#: the in-place forms torch binds as functions too (``torch.abs_(x)``); the others are Tensor methods only
_TORCH_FUNCTIONS = frozenset((
    "abs_", "acos_", "arccos_", "arcsin_", "arctan_", "asin_", "atan_", "ceil_", "celu_", "clamp_", "clamp_max_",
    "clamp_min_", "clip_", "cos_", "cosh_", "deg2rad_", "erf_", "exp2_", "exp_", "expm1_", "fill_", "fix_", "floor_",
    "frac_", "log10_", "log1p_", "log2_", "log_", "logit_", "nan_to_num_", "neg_", "negative_", "rad2deg_",
    "reciprocal_", "relu_", "round_", "rsqrt_", "selu_", "sigmoid_", "sin_", "sinc_", "sinh_", "sqrt_", "square_",
    "tan_", "tanh_", "threshold_", "trunc_", "xlogy_", "zero_"))


def _make(name: str, fn, grad_fns: tuple, tensors=("self",), aliases=(), doc="", overlap_check=True,
          plannable: bool | None = None, meta=None, **facts):
    """``meta``: checks before the target's overlap checks (``_apply_inplace``). ``plannable`` (and
    ``plannable_when``): default, as the out-of-place op ``name[:-1]`` is declared (the in-place op is that op on a
    shadow, then a kernel's write). Its names torch binds as functions: those of ``_TORCH_FUNCTIONS``."""
    facts.setdefault("functions", tuple(n for n in (name, *aliases) if n in _TORCH_FUNCTIONS))
    if plannable is None:
        base = OPS.get(name[:-1])
        plannable = base is not None and base.plannable
        if base is not None and base.plannable_when is not None:
            facts.setdefault("plannable_when", base.plannable_when)

    def inplace(self, *args, **kwargs):
        return _apply_inplace(self, fn, args, kwargs, overlap_check, meta)

    inplace.__name__ = name
    if grad_fns is None:  # the grad_fn names are those ``fn`` records (``registry.recorded_grad_fns`` walks it)
        inplace.__wrapped__ = fn
    inplace.__signature__ = inspect.signature(fn)  # the program resolves tensor arguments by these names
    inplace.__doc__ = doc or f"Tensor.{name}: in-place {name[:-1]}; bumps the version counter."
    return op(name, tensors=tensors, grad_fns=grad_fns, inplace=True, aliases=aliases, plannable=plannable,
              **facts)(inplace)


_BITWISE_METHOD = {"method": ("(Tensor other)", "(Number other)")}


def _cast_before_kernel(fn):
    """An in-place bitwise op: torch checks that the result type fits the target (``i.bitwise_and_(f)``: Float
    into Long) before its kernel refuses a floating type."""
    def checked(self, other):
        res = D.result_type(self, other)
        if not D.can_cast(res, self.dtype):
            raise TorchRuntimeError(f"result type {D.SCALAR_TYPE_NAMES[res]} can't be cast to the desired output "
                                    f"type {D.SCALAR_TYPE_NAMES[self.dtype]}", code="invalid_dtype")
        return fn(self, other)

    checked.__signature__ = inspect.signature(fn)
    return checked


add_ = _make("add_", E.add, (P.AddBackward0,), ("self", "other"), ("__iadd__", "iadd"))
sub_ = _make("sub_", E.sub, (P.SubBackward0,), ("self", "other"), ("__isub__", "isub", "subtract_"))
mul_ = _make("mul_", E.mul, (P.MulBackward0,), ("self", "other"), ("__imul__", "imul", "multiply_"))
div_ = _make("div_", E.div, (P.DivBackward0,), ("self", "other"),
             ("__itruediv__", "itruediv", "idiv", "divide_", "true_divide_"),
             methods=("div_", "divide_", "true_divide_"))  # (idiv: a program's spelling only)
pow_ = _make("pow_", E.pow, (P.PowBackward0, P.PowBackward1), ("self", "exponent"), ("__ipow__", "ipow"))


@op("float_power_", checks=("dtype(self)=float64 | RuntimeError: the base given to float_power_ has dtype {dtype} but "
                            "the operation's result requires dtype Double",),
    tensors=("self", "exponent"), grad_fns=(P.PowBackward0, P.PowBackward1), inplace=True)
def float_power_(self, exponent):
    """Tensor.float_power_(exponent): pow_ of a float64 tensor by the exponent as a double; torch refuses any
    other base before anything else (a leaf's in-place error comes after)."""
    self = require_tensor(self)
    if self.data.dtype != np.float64:
        raise broken_check("float_power_", self=self)
    return _apply_inplace(self, E.float_power, (exponent,), {}, True)


exp_ = _make("exp_", E.exp, (P.ExpBackward0,))
log_ = _make("log_", E.log, (P.LogBackward0,))
neg_ = _make("neg_", E.neg, (P.NegBackward0,), aliases=("negative_",))
sqrt_ = _make("sqrt_", E.sqrt, (P.SqrtBackward0,))
abs_ = _make("abs_", E.abs, (P.AbsBackward0,), aliases=("absolute_",))
sigmoid_ = _make("sigmoid_", E.sigmoid, (P.SigmoidBackward0,))
tanh_ = _make("tanh_", E.tanh, (P.TanhBackward0,))
relu_ = _make("relu_", E.relu, (P.ReluBackward0,), exports=("torch.nn.functional.relu_",))
bitwise_and_ = _make("bitwise_and_", _cast_before_kernel(E.bitwise_and), (), ("self", "other"),
                     ("__iand__", "iand"), differentiable=False, overloads=_BITWISE_METHOD)
bitwise_or_ = _make("bitwise_or_", _cast_before_kernel(E.bitwise_or), (), ("self", "other"),
                    ("__ior__", "ior"), differentiable=False, overloads=_BITWISE_METHOD)
bitwise_xor_ = _make("bitwise_xor_", _cast_before_kernel(E.bitwise_xor), (), ("self", "other"),
                     ("__ixor__", "ixor"), differentiable=False, overloads=_BITWISE_METHOD)
bitwise_left_shift_ = _make("bitwise_left_shift_", _cast_before_kernel(E.bitwise_left_shift), (), ("self", "other"),
                            ("__ilshift__", "ilshift"), differentiable=False, overloads=_BITWISE_METHOD)
bitwise_right_shift_ = _make("bitwise_right_shift_", _cast_before_kernel(E.bitwise_right_shift), (),
                             ("self", "other"), ("__irshift__", "irshift"), differentiable=False,
                             overloads=_BITWISE_METHOD)
bitwise_not_ = _make("bitwise_not_", E.bitwise_not, (), differentiable=False)
addcmul_ = _make("addcmul_", E.addcmul, (P.AddcmulBackward0,), ("self", "tensor1", "tensor2"))
addcdiv_ = _make("addcdiv_", E.addcdiv, (P.AddcdivBackward0,), ("self", "tensor1", "tensor2"))
lerp_ = _make("lerp_", E.lerp, (P.LerpBackward0, P.LerpBackward1), ("self", "end", "weight"), meta=E.lerp_dtypes)
def _clamp_cast_checked(name: str, fn):
    """clamp_'s check of its number bounds (the Scalar overload), before the other in-place ops' result check: its
    declared message words the target's dtype the C++ way ('long int', 'bool')."""
    names = list(inspect.signature(fn).parameters)[1:]

    def clamp(self, *bounds, **kw):
        for b in list(bounds) + list(kw.values()):
            if isinstance(b, Tensor) or b is None or isinstance(b, str):  # number bounds only (the Scalar overload)
                continue
            if not D.can_cast(D.result_type(self, b), self.dtype):
                raise broken_check(name, self=self, **dict(zip(names, bounds)), **kw)
        return fn(self, *bounds, **kw)

    clamp.__signature__ = inspect.signature(fn)
    return clamp


_CAST_MESSAGE = "RuntimeError: result type {result} can't be cast to the desired output type {cpp}"
clamp_ = _make("clamp_", _clamp_cast_checked("clamp_", E.clamp), (P.ClampBackward1, P.ClampBackward0),
               ("self", "min", "max"), ("clip_",), checks=(f"number_bounds_cast(self,min,max) | {_CAST_MESSAGE}",))
clamp_min_ = _make("clamp_min_", _clamp_cast_checked("clamp_min_", E.clamp_min), (P.ClampMinBackward0,),
                   checks=(f"number_bounds_cast(self,min) | {_CAST_MESSAGE}",))
clamp_max_ = _make("clamp_max_", _clamp_cast_checked("clamp_max_", E.clamp_max), (P.ClampMaxBackward0,),
                   checks=(f"number_bounds_cast(self,max) | {_CAST_MESSAGE}",))


def _inplace_of(base: str, aliases: tuple = (), **facts):
    """``base_``: torch's in-place form of ``base``, declared from ``base``'s declaration (its function on a shadow,
    its grad_fn names, tensor arguments, method overloads, and its spelled-out aliases: ``arcsin_``); ``facts``:
    the form's own (``method=False``, ``exports``)."""
    spec = OPS[base]
    grad_fns = None if spec.grad_fns is None else tuple(getattr(P, n) for n in spec.grad_fns)
    aliases = tuple(f"{a}_" for a in spec.aliases if a.isidentifier() and not a.startswith("_")) + aliases
    if "method" in (spec.overloads or {}):
        facts.setdefault("overloads", {"method": spec.overloads["method"]})
    facts.setdefault("differentiable", spec.differentiable)
    return _make(f"{base}_", spec.fn, grad_fns, spec.tensors, aliases,
                 doc=f"Tensor.{base}_: in-place {base}; bumps the version counter.", **facts)


#: the in-place forms torch's Tensor has of the elementwise, scan and triangle ops, each written as its op is
#: (an out-of-place result of another dtype than the target's, or of another shape, is refused as torch refuses it)
sin_, cos_, tan_, asin_, acos_, atan_ = map(_inplace_of, ("sin", "cos", "tan", "asin", "acos", "atan"))
sinh_, cosh_ = map(_inplace_of, ("sinh", "cosh"))  # (asinh_, acosh_, atanh_: torch gives them a grad_fn that refuses)
floor_, ceil_, round_, sign_, square_ = map(_inplace_of, ("floor", "ceil", "round", "sign", "square"))
erf_, erfinv_, expm1_, log1p_, log2_, log10_ = map(_inplace_of, ("erf", "erfinv", "expm1", "log1p", "log2", "log10"))
reciprocal_, rsqrt_, digamma_, lgamma_ = map(_inplace_of, ("reciprocal", "rsqrt", "digamma", "lgamma"))
nan_to_num_, atan2_, hypot_, xlogy_ = map(_inplace_of, ("nan_to_num", "atan2", "hypot", "xlogy"))
remainder_ = _inplace_of("remainder", ("__imod__", "imod"))
floor_divide_ = _inplace_of("floor_divide", ("__ifloordiv__", "ifloordiv"))
trunc_, frac_, exp2_, deg2rad_, rad2deg_ = map(_inplace_of, ("trunc", "frac", "exp2", "deg2rad", "rad2deg"))
sgn_, sinc_, logit_ = map(_inplace_of, ("sgn", "sinc", "logit"))
cumsum_, cumprod_, tril_, triu_, addmm_, baddbmm_ = map(_inplace_of,
                                                        ("cumsum", "cumprod", "tril", "triu", "addmm", "baddbmm"))


# the activations torch.nn.functional writes in place (``F.leaky_relu(x, inplace=True)``, ``nn.ReLU6(inplace=True)``):
# functions of torch.nn.functional (silu_ of none), not Tensor methods; leaky_relu_ and elu_ record the nodes that
# save the result (torch's Backward1), hardtanh_ and silu_ their op's, which save the input
leaky_relu_ = _make("leaky_relu_", E.leaky_relu_on_result, (P.LeakyReluBackward1,), method=False,
                    exports=("torch.nn.functional.leaky_relu_",),
                    doc="F.leaky_relu_(input, negative_slope=0.01): in place; bumps the version counter.")
elu_ = _make("elu_", E.elu_on_result, (P.EluBackward1,), method=False, exports=("torch.nn.functional.elu_",),
             doc="F.elu_(input, alpha=1.0): in place; bumps the version counter.")
hardtanh_ = _inplace_of("hardtanh", method=False, exports=("torch.nn.functional.hardtanh_",))
silu_ = _inplace_of("silu", method=False, exports=())
hardswish_, hardsigmoid_, mish_ = (_inplace_of(n, method=False, exports=())
                                   for n in ("hardswish", "hardsigmoid", "mish"))
selu_ = _make("selu_", E.selu_on_result, (P.EluBackward1,), method=False, exports=("torch.nn.functional.selu_",),
              doc="torch.selu_(input): in place; bumps the version counter.")
celu_ = _make("celu_", E.celu_on_result, (P.CeluBackward1,), method=False, exports=("torch.nn.functional.celu_",),
              doc="torch.celu_(input, alpha=1.0): in place; bumps the version counter.")
threshold_ = _make("threshold_", E.threshold_in_place, (P.ThresholdBackward1,), method=False,
                   exports=("torch.nn.functional.threshold_",),
                   doc="torch.threshold_(input, threshold, value): in place; bumps the version counter.")


def _masked_fill_inplace(self: Tensor, mask, value) -> Tensor:
    """masked_fill_ broadcasts the mask to self (self is tensor a in torch's message)."""
    if isinstance(mask, Tensor) and mask.data.shape != self.data.shape:
        from .common import broadcast_shapes
        broadcast_shapes(self.data.shape, mask.data.shape)
    return E.masked_fill(self, mask, value)


masked_fill_ = _make("masked_fill_", _masked_fill_inplace, (P.MaskedFillBackward0, P.MaskedFillBackward1),
                     ("self", "mask", "value"), overlap_check=False,
                     overloads={"method": ("(Tensor mask, Tensor value)", "(Tensor mask, Number value)")})
# the index and scatter kernels refuse a source that is the target itself too (assert_no_overlap)
scatter_ = _make("scatter_", scatter, (P.ScatterBackward0, P.ScatterBackward1), ("self", "index", "src"),
                 doc="Tensor.scatter_(dim, index, src | value): in-place scatter; bumps the version counter.",
                 overlap_check="any")
scatter_add_ = _make("scatter_add_", scatter_add, (P.ScatterAddBackward0,), ("self", "index", "src"),
                     overlap_check="any")
index_add_ = _make("index_add_", index_add, (P.IndexAddBackward0,), ("self", "index", "source"), overlap_check="any")
index_copy_ = _make("index_copy_", index_copy, (P.IndexCopyBackward0,), ("self", "index", "source"),
                    overlap_check="any")


def _index_fill_expanded(self: Tensor, dim, index, value) -> Tensor:
    """index_fill_ writes into an expanded tensor (each distinct element once) with torch's deprecation warning."""
    if has_internal_overlap(self.data):
        from ..grad_mode import emit_warning
        emit_warning("Use of index_fill_ on expanded tensors is deprecated. Please clone() the tensor before "
                     "performing this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar "
                     "(Triggered internally at /__w/pytorch/pytorch/aten/src/ATen/native/TensorAdvancedIndexing.cpp:"
                     "1913.)", once_key="index_fill_expanded")
    return index_fill(self, dim, index, value)


index_fill_ = _make("index_fill_", _index_fill_expanded, (P.IndexFillBackward0, P.IndexFillBackward1),
                    ("self", "index", "value"), overlap_check=False,
                    doc="Tensor.index_fill_(dim, index, value): in place; bumps the version counter.")
zero_ = _make("zero_", _zero, (P.ZeroBackward0,), doc="Tensor.zero_(): fill with zeros in place.", overlap_check=False,
              plannable=True)
fill_ = _make("fill_", _fill, (P.FillBackward2, P.FillBackward3), ("self", "value"),
              doc="Tensor.fill_(value): in place.", overlap_check=False,
              overloads={"method": ("(Tensor value)", "(Number value)")})
copy_ = _make("copy_", _copy, (P.CopyBackwards,), ("self", "src"),
              doc="Tensor.copy_(src): copy src (broadcast, cast) into self in place.",
              numbers_as_tensors=True, hidden_overload=True, plannable=True, family="elementwise",  # (broadcasts)
              overloads={"method": ("(Tensor other, bool non_blocking = False)",)})


@op("setitem", methods=(), checks=INDEX_CHECKS,
    parsed=False,
    tensors=("self", "index", "value"), grad_fns=(P.CopySlices, P.CopyBackwards, P.FillBackward3),
    inplace=True, aliases=("__setitem__",))
def setitem(self, index, value):
    """``self[index] = value``: a basic index writes through a view (CopySlices), an index that selects
    nothing (``...``, ``()``, ``[:, :]``) writes into self; an advanced index (int lists, masks) is
    ``index_put_``. As torch's copy_to: same shape -> copy_, a 0-d value -> fill_, else copy_ of the
    value expanded."""
    from .shape import _normalize_index, basic_getitem
    self = require_tensor(self)
    idx = index if isinstance(index, tuple) else (index,)
    if any(isinstance(it, Tensor) and it.data.dtype == np.uint8 for it in idx) and \
            (not isinstance(value, Tensor) or value.data.ndim == 0):
        # torch fills through masked_fill_ here, which takes bool masks only
        raise TorchRuntimeError("masked_fill_ only supports boolean masks, but got mask with dtype unsigned char",
                                code="invalid_dtype")
    idx = _normalize_index(index)
    advanced = any(isinstance(it, (list, Tensor, np.ndarray)) and not isinstance(it, bool) for it in idx)
    if advanced:
        return apply_inplace(self, _index_put, idx, value)
    dst = basic_getitem(self, index)
    if not isinstance(value, Tensor):
        value = Tensor(np.asarray(value, dtype=self.data.dtype))
    if dst.data.shape == value.data.shape:
        copy_(dst, value)
    elif value.data.ndim == 0:
        fill_(dst, value)
    else:
        # torch expands the value (leading 1s dropped) to the indexed shape before writing: its error first
        from ..grad_mode import no_grad
        from .shape import expand, reshape
        shape = value.data.shape
        while shape and shape[0] == 1:
            shape = shape[1:]
        with no_grad():
            expand(reshape(value, shape), dst.data.shape)
        copy_(dst, value)
    return self


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
    # the flat positions are saved as a tensor (torch saves ``indices``): freed by a backward like any
    return record(P.IndexPutBackward0, out.reshape(self.data.shape), (self, src),
                  {"positions": Tensor(positions), "probe_shape": probe.data.shape})


@vjp("IndexPutBackward0", inputs=("self", "values"), saves=("positions", "probe_shape"))
def _(ctx, grad):
    from .shape import _index, reshape
    n = ctx.needs
    pos = ctx.positions.data if isinstance(ctx.positions, Tensor) else ctx.positions  # older sessions: an array
    g_self = g_val = None
    if n[0]:
        mask = np.zeros(grad.data.size, dtype=bool)
        mask[pos] = True
        g_self = E.masked_fill(grad, Tensor(mask.reshape(grad.data.shape)), 0)
    if n[1]:
        g_val = reshape(_index(reshape(grad, (-1,)), [(0, pos)]), ctx.probe_shape)
    return g_self, g_val


@jvp()
def _(ctx, self_t, values_t):
    from .shape import _index_put_zeros, expand, reshape
    shape = ctx.result.data.shape
    pos = ctx.positions.data if isinstance(ctx.positions, Tensor) else ctx.positions
    out = None
    if self_t is not None:
        mask = np.zeros(self_t.data.size, dtype=bool)
        mask[pos] = True
        out = E.masked_fill(self_t, Tensor(mask.reshape(shape)), 0)
    if values_t is not None:
        flat = reshape(expand(values_t, ctx.probe_shape), (-1,))
        put = reshape(_index_put_zeros(flat, (int(np.prod(shape)),), [Tensor(pos)]), shape)
        out = put if out is None else out + put
    return out


# ----- forward mode: the tangent of an in-place update ---------------------------------------------------


def inplace_update(self, new_tangent) -> None:
    """After an in-place op on ``self``: make ``self``'s tangent ``new_tangent``, in place when it has one
    (so views share the update), else by giving it one (through its base when it is a view)."""
    lvl = _fw_level.get()
    if lvl.batch is not None:
        raise BatchingUnsupported("in-place")
    token = _fw_level.set(None)
    try:
        old = tangent_of(self)
        if old is None and self._base is not None:
            base = self._base
            if base._fw_grad is None:
                setattr_(base, "_fw_grad", _zeros_like(base.data, new_tangent.data.dtype))
                lvl.tensors.append(base)
            old = tangent_of(self)
        if old is not None:
            copy_(old, new_tangent)
            return
        setattr_(self, "_fw_grad", with_layout(new_tangent, self.data))
        lvl.tensors.append(self)
    finally:
        _fw_level.reset(token)


def _zeros_like(a: np.ndarray, dtype):
    return Tensor(np.zeros_like(a, dtype=dtype))
