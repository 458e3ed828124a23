"""Elementwise ops: arithmetic, pow, unary math, activations, clamp/where/masked_fill/lerp, comparisons.

Forward in numpy, VJP beside it in engine ops (so it is differentiable again). The VJP formulas follow
PyTorch's derivatives.yaml / FunctionsManual.cpp, including the order of operations, so float32 results
match torch's bit for bit where numpy's kernels do.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes as D
from ..batching import SAME, batching
from ..dual import _level as _fw_level
from ..errors import InvalidArgumentError, TorchRuntimeError, TorchTypeError, TorchValueError
from ..grad_mode import set_grad_enabled
from ..kernel import kcall, kcall_for, number, takes_literals
from ..registry import (
    F,
    P,
    Prim,
    broken_check,
    declared_failure,
    elementwise_jvp,
    jvp,
    no_jvp,
    op,
    record,
    vjp,
    zero_jvp,
)
from ..tensor import Tensor
from . import backward as _backward  # the fused backward functions its VJPs call
from .common import (
    _F32,
    ARRAY,
    EXP_FINITE,
    IN_PLACE_BYTES,
    NOT_GIVEN,
    NP,
    add_t,
    as_operand,
    binary_operands,
    broadcast_all,
    float_data,
    fma,
    is_number,
    mul_t,
    number_as,
    opmath_number,
    refuse_uint64_with_bool,
    require_tensor,
    scale_t,
    zeros_like,
)

# ----- tangent helpers for the JVPs: None is a zero tangent -----------------------------------------------


# ----- arithmetic ---------------------------------------------------------------------------------------


def _number_tensor(v) -> Tensor:
    """torch's numbers-as-tensors for a call with no tensor at all (``torch.add(2.5, 1.5)``): the number
    becomes a tensor as ``torch.tensor`` makes it (float32, int64 or bool)."""
    from ..tensor import tensor
    if not is_number(v):
        raise InvalidArgumentError(f"expected a Tensor or a number, got {type(v).__name__}")
    return tensor(v)


def _alpha_ok(alpha, dtype: str):
    if isinstance(alpha, float) and not D.is_floating(dtype):
        raise TorchRuntimeError("For integral input tensors, argument alpha must not be a floating point number.",
                                code="invalid_argument")


# The arithmetic ops' kernels are the ufuncs themselves (``a + b`` on an array is the one call ``np.add(a, b)``):
# a replay calls numpy directly, with no Python function around it. Numbers are converted in the op (a plan
# constant), not on every call.


def _add_alpha(a, b, alpha):
    """``a + alpha * b`` fused (torch's CPU kernel rounds once in float32 and float64)."""
    return fma(alpha, b, a, np.result_type(a, b))


def _sub_alpha(a, b, alpha):
    """``a - alpha * b``: torch's sub is add with ``-alpha``, fused."""
    return fma(-alpha, b, a, np.result_type(a, b))


@op("add", promotion="result_type",
    method_aliases=("__radd__",), numbers_as_tensors=True, hidden_overload=True,
    overloads={
        "function": ("(Tensor input, Tensor other, *, Number alpha = 1, Tensor out = None)",),
        "method": ("(Tensor other, *, Number alpha = 1)",),
    },
    tensors=("self", "other"), aliases=("__add__", "__radd__"), plannable=True)
def add(self, other, alpha=1):
    """torch.add(input, other, alpha=1): input + alpha * other."""
    if not isinstance(self, Tensor):  # torch.add(2, x): the number is a wrapped 0-d input
        self = _number_tensor(self) if not isinstance(other, Tensor) else as_operand(self, like=other)
    dtype, a, b = binary_operands(self, other)
    call = kcall_for(a.dtype)  # (b: an array or a number of a's dtype)
    if alpha != 1:
        _alpha_ok(alpha, dtype)
        out = call(_add_alpha, a, b, checked_scalar(alpha, dtype))
    else:
        out = call(np.add, a, b)
    o = other if isinstance(other, Tensor) else None
    return record(P.AddBackward0, out, (self, o), {"alpha": alpha})


@vjp("AddBackward0", inputs=("self", "other"), saves=("alpha",))
def _(ctx, grad):
    alpha = ctx.alpha
    return grad, (grad if alpha == 1 else mul_number(grad, alpha))  # maybe_multiply(grad, alpha)


@jvp()
def _(ctx, self_t, other_t):
    return add_t(self_t, scale_t(other_t, ctx.alpha))


batching(P.AddBackward0, vjp=SAME, jvp=SAME)


@op("sub", promotion=(
    "result_type | "
    "all_bool: RuntimeError: Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
    "`logical_xor()` operator instead. | "
    "any_bool: RuntimeError: Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying "
    "to invert a mask, use the `~` or `logical_not()` operator instead."),
    numbers_as_tensors=True, hidden_overload=True,
    overloads={
        "function": ("(Tensor input, Tensor other, *, Number alpha = 1, Tensor out = None)",),
        "method": ("(Tensor other, *, Number alpha = 1)",),
    },
    tensors=("self", "other"), aliases=("subtract", "__sub__"), plannable=True)
def sub(self, other, alpha=1):
    """torch.sub(input, other, alpha=1): input - alpha * other; a number input is wrapped as a 0-d tensor
    (SubBackward0, as torch.sub(2, x) records; ``2 - x`` is rsub)."""
    if not isinstance(self, Tensor):
        self = _number_tensor(self) if not isinstance(other, Tensor) else as_operand(self, like=other)
    _sub_check(self, other)
    dtype, a, b = binary_operands(self, other)
    call = kcall_for(a.dtype)  # (b: an array or a number of a's dtype)
    if alpha != 1:
        _alpha_ok(alpha, dtype)
        out = call(_sub_alpha, a, b, checked_scalar(alpha, dtype))
    else:
        out = call(np.subtract, a, b)
    o = other if isinstance(other, Tensor) else None
    return record(P.SubBackward0, out, (self, o), {"alpha": alpha})


def _sub_check(self, other) -> None:
    """torch's sub_check: no bool operand at all (a Python bool counts as a bool tensor)."""
    a = self.data.dtype == np.bool_ if isinstance(self, Tensor) else isinstance(self, bool)
    b = other.data.dtype == np.bool_ if isinstance(other, Tensor) else isinstance(other, bool)
    if a and b:
        raise TorchRuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                                "Use the `^` or `logical_xor()` operator instead.", code="invalid_dtype")
    if a or b:
        raise TorchRuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                                "If you are trying to invert a mask, use the `~` or `logical_not()` operator "
                                "instead.", code="invalid_dtype")


@vjp("SubBackward0", inputs=("self", "other"), saves=("alpha",), jvp=elementwise_jvp)
def _(ctx, grad):
    alpha = ctx.alpha
    return grad, (-grad if alpha == 1 else mul_number(-grad, alpha))


@op("rsub", methods=(), promotion=(
    "result_type | "
    "all_bool: RuntimeError: Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
    "`logical_xor()` operator instead. | "
    "any_bool: RuntimeError: Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying "
    "to invert a mask, use the `~` or `logical_not()` operator instead."),
    overloads={
        "function": (
            "(Tensor input, Tensor other, *, Number alpha = 1)",
            "(Tensor input, Number other, Number alpha = 1)",
        ),
    },
    tensors=("self", "other"), aliases=("__rsub__",))
def rsub(self, other, alpha=1):
    """torch.rsub(input, other, alpha=1): other - alpha * input (``2 - x``)."""
    self = require_tensor(self, "self", "rsub")
    _sub_check(self, other)
    if isinstance(other, Tensor) and other.data.shape != self.data.shape:
        broadcast_all(other.shape, self.shape)  # torch computes other - self: other is tensor a
    dtype, a, b = binary_operands(self, other)
    out = b - (checked_scalar(alpha, dtype) * a if alpha != 1 else a)
    if isinstance(other, Tensor):
        return record(P.RsubBackward0, out, (self, other), {"alpha": alpha})
    return record(P.RsubBackward1, out, (self,), {"alpha": alpha})


@vjp("RsubBackward0", inputs=("self", "other"), saves=("alpha",), jvp=elementwise_jvp)
def _(ctx, grad):
    alpha = ctx.alpha
    return (-grad if alpha == 1 else mul_number(-grad, alpha)), grad


@vjp("RsubBackward1", inputs=("self",), saves=("alpha",), jvp=elementwise_jvp)
def _(ctx, grad):
    alpha = ctx.alpha
    return (-grad if alpha == 1 else mul_number(-grad, alpha)),


@op("mul", promotion="result_type",
    method_aliases=("__rmul__",), numbers_as_tensors=True,
    tensors=("self", "other"), aliases=("multiply", "__mul__", "__rmul__"),
    plannable=True)
def mul(self, other):
    """torch.mul(input, other). A Python number is saved as a wrapped 0-d tensor, as torch does."""
    if not isinstance(self, Tensor):  # torch.mul(2, x): the number is a wrapped 0-d input
        self = _number_tensor(self) if not isinstance(other, Tensor) else as_operand(self, like=other)
    dtype, a, b = binary_operands(self, other)
    call = kcall_for(a.dtype)  # (b: an array or a number of a's dtype)
    if call is kcall and (not isinstance(other, Tensor) or (other.data.ndim == 0 and other.data.dtype != a.dtype)):
        # a float16/bfloat16 result: torch's CPU kernel reads a scalar operand (a number, or a 0-d tensor of
        # another dtype) in its opmath type, float32, unrounded (another dtype: binary_operands' conversion is it)
        b = opmath_number(a.dtype, other if not isinstance(other, Tensor) else other.data[()])
    out = call(np.multiply if dtype != D.BOOL else np.logical_and, a, b)
    if isinstance(other, Tensor):
        return record(P.MulBackward0, out, (self, other), {"self": self, "other": other})
    if not self.requires_grad and _fw_level.get() is None:
        return Tensor(out)
    return record(P.MulBackward0, out, (self, None), {"self": self, "other": as_operand(other)})


@vjp("MulBackward0", inputs=("self", "other"), saves={"self": ("other",), "other": ("self",)})
def _(ctx, grad):
    n = ctx.needs
    return (grad * ctx.other if n[0] else None), (grad * ctx.self if n[1] else None)


def mul_number(t: Tensor, n) -> Tensor:
    """``tensor * number`` as torch records it inside C++ formulas (mul.Scalar -> MulBackward1)."""
    dtype, a, _ = binary_operands(t, n)
    # a has the result's dtype already (binary_operands), and so has the product: no cast after it
    return record(P.MulBackward1, kcall(np.multiply, a, opmath_number(NP[dtype], n)), (t,), {"other": n})


def div_number(t: Tensor, n) -> Tensor:
    """``tensor / number`` as torch records it inside C++ formulas (div.Scalar -> DivBackward1)."""
    dtype, a, _ = binary_operands(t, n)
    return record(P.DivBackward1, kcall(np.true_divide, a, opmath_number(NP[dtype], n)), (t,), {"other": n})


@vjp("DivBackward1", inputs=("self",), saves=("other",))
def _(ctx, grad):
    return div_number(grad, ctx.other),


@jvp()
def _(ctx, self_t):
    return div_number(self_t, ctx.other)


@vjp("MulBackward1", inputs=("self",), saves=("other",))
def _(ctx, grad):
    return mul_number(grad, ctx.other),


@jvp()
def _(ctx, self_t):
    return mul_number(self_t, ctx.other)


# tensor over a number: the formula scales whatever it is given, a batch of entries too
batching(P.DivBackward1, vjp=SAME, jvp=SAME)


@jvp(P.MulBackward0)
def _(ctx, self_t, other_t):
    # torch: other_t * self_p + self_t * other_p, a missing tangent being zeros of its input's dtype (which
    # can widen a mixed-precision tangent: a float32 tangent of a float64 x times 2.0 is float64)
    if other_t is None and self_t.data.dtype != ctx.other.data.dtype:
        other_t = Tensor(np.zeros(ctx.other.data.shape, ctx.other.data.dtype))
    elif self_t is None and other_t.data.dtype != ctx.self.data.dtype:
        self_t = Tensor(np.zeros(ctx.self.data.shape, ctx.self.data.dtype))
    return add_t(mul_t(other_t, ctx.self), mul_t(self_t, ctx.other))


batching(P.MulBackward0, vjp=SAME, jvp=SAME)


_ROUNDING = (None, "trunc", "floor")


def _true_division(args, kwargs) -> bool:
    """div's traceable calls: true division computes through a kernel; the rounding modes are value-dependent
    numpy."""
    return isinstance(args, list) and len(args) <= 2 and isinstance(kwargs, dict) \
        and kwargs.get("rounding_mode") is None


@op("div", promotion="true_divide",
    numbers_as_tensors=True,
    overloads={
        "function": (
            "(Tensor input, Tensor other, *, Tensor out = None)",
            "(Tensor input, Tensor other, *, str rounding_mode, Tensor out = None)",
            "(Tensor input, Number other, *, str rounding_mode)",
        ),
        "method": ("(Tensor other)", "(Tensor other, *, str rounding_mode)", "(Number other, *, str rounding_mode)"),
    },
    tensors=("self", "other"), grad_fns=(P.DivBackward0, P.DivBackward2, P.MulBackward0),
    aliases=("divide", "true_divide", "__truediv__"), plannable_when=_true_division)
def div(self, other, rounding_mode=None):
    """torch.div(input, other, rounding_mode=None); ``2 / p`` is reciprocal(p) * 2 as in torch."""
    if rounding_mode not in _ROUNDING:
        raise TorchRuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                                f"'{rounding_mode}'", code="invalid_argument")
    # (torch's uint64 number, 2**63 and up, is refused beside a bool tensor)
    if self.__class__ is int and self >= 1 << 63 and isinstance(other, Tensor):
        refuse_uint64_with_bool(self, other.dtype)
    if other.__class__ is int and other >= 1 << 63 and isinstance(self, Tensor):
        refuse_uint64_with_bool(other, self.dtype)
    if not isinstance(self, Tensor):  # torch.div(2, x): the number is wrapped as a 0-d tensor
        self = _number_tensor(self) if not isinstance(other, Tensor) else as_operand(self)
    dtype = D.result_type(self, other)
    if rounding_mode is None and not D.is_floating(dtype):
        dtype = D.DEFAULT_FLOAT
    dtype, a, b = binary_operands(self, other, dtype)
    if rounding_mode is None:
        call = kcall_for(a.dtype)  # (b: an array or a number of a's dtype)
        if call is kcall and not isinstance(other, Tensor):
            b = opmath_number(a.dtype, other)  # (a float16/bfloat16 result reads a number in float32)
        out = call(np.true_divide, a, b)
    elif D.is_floating(dtype):
        out = _div_floor_floating(a, b) if rounding_mode == "floor" else np.trunc(a / b)
        out = out.astype(NP[dtype], copy=False)
    else:
        if np.any(np.asarray(b) == 0):
            raise TorchRuntimeError("ZeroDivisionError", code="zero_division")
        out = np.floor_divide(a, b) if rounding_mode == "floor" else np.trunc(np.true_divide(a, b)).astype(NP[dtype])
    o = other if isinstance(other, Tensor) else as_operand(other)
    edge_other = other if isinstance(other, Tensor) else None
    if rounding_mode is None:
        return record(P.DivBackward0, np.asarray(out), (self, edge_other), {"self": self, "other": o})
    return record(P.DivBackward2, np.asarray(out), (self, edge_other),
                  {"self": self, "other": o, "rounding_mode": rounding_mode})


def _div_floor_floating(a, b):
    """torch's div_floor_floating (Python's float //): from fmod, so -1.62 // 0.02 is -82, not
    floor(-1.62 / 0.02) = -81; division by zero gives the IEEE quotient."""
    mod = np.fmod(a, b)
    div = (a - mod) / b
    div = np.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floordiv = np.floor(div)
    floordiv = np.where(div - floordiv > 0.5, floordiv + 1, floordiv)
    floordiv = np.where(div != 0, floordiv, np.copysign(np.zeros_like(div), a / b))
    return np.where(b == 0, a / b, floordiv)


@vjp("DivBackward0", inputs=("self", "other"), saves={"self": ("other",), "other": ("self", "other")},
     jvp=elementwise_jvp)
def _(ctx, grad):
    n = ctx.needs
    other = ctx.other
    g_self = grad / other if n[0] else None
    g_other = -grad * ((ctx.self / other) / other) if n[1] else None
    return g_self, g_other


@vjp("DivBackward2", inputs=("self", "other"),
     saves={"self": ("other",), "other": ("self", "other"), "rounding_mode": ()}, jvp=zero_jvp)
def _(ctx, grad):
    n = ctx.needs
    z = zeros_like(grad)
    return (z if n[0] else None), (z if n[1] else None)


@op("floor_divide", promotion='result_type | bool: NotImplementedError: "div_floor_cpu" not implemented for \'Bool\'',
    numbers_as_tensors=True,
    overloads={
        "function": ("(Tensor input, Tensor other, *, Tensor out = None)", "(Number self, Tensor other)",
                     "(Tensor input, Number other)"),
        "method": ("(Tensor other)", "(Number other)"),
    },
    tensors=("self", "other"), differentiable=False,
    aliases=("__floordiv__",))
def floor_divide(self, other):
    """torch.floor_divide(input, other) (``a // b``; ``5 // t`` is floor_divide(5, t), the number a tensor operand
    as remainder's): no derivative in torch, so a float result that needs grad gets the ``NotImplemented`` node,
    whose backward raises torch's error."""
    if not isinstance(self, Tensor) and isinstance(other, Tensor):
        self = _number_tensor(self)
        self._wrapped = True
    with set_grad_enabled(False):
        out = div(self, other, rounding_mode="floor")
    inputs = (self if isinstance(self, Tensor) else None, other if isinstance(other, Tensor) else None)
    return record(P.NotImplemented, out.data, inputs)


@vjp("NotImplemented", inputs=("self", "other"), saves=("aten",), cpp=True)
def _(ctx, grad):
    aten = getattr(ctx, "aten", None) or "floor_divide"
    raise TorchRuntimeError(f"derivative for aten::{aten} is not implemented", code="not_differentiable")


@op("rtruediv", functions=(), promotion="float",
    parsed=False,
    tensors=("self", "other"), grad_fns=(P.MulBackward0,), aliases=("__rtruediv__",), method=False)
def rtruediv(self, other):
    """``other / self`` for a number other: reciprocal(self) * other."""
    return mul(reciprocal(self), other)


def _rsqrt_pow(a):
    return np.reciprocal(np.sqrt(a))


def _int_power(a, b):
    """np.power of integers, with torch's results for negative exponents (numpy refuses them): 1 ** n is 1,
    (-1) ** n is -1 for odd n and 1 for even, anything else 0."""
    neg = b < 0
    if not neg.any():
        return np.power(a, b)
    out = np.power(a, np.where(neg, 0, b))
    minus_one = np.where(b % 2 != 0, -1, 1)
    return np.where(neg, np.where(a == 1, 1, np.where(a == -1, minus_one, 0)), out).astype(out.dtype, copy=False)


def _pow_dtype_check(dtype, exponent):
    if NP[dtype].kind in "iu" and is_number(exponent) and exponent >= 0:
        # a Scalar exponent is read as an int64 (2**63 fails), then converted to the input's type (int8: 300 fails)
        _bound(exponent, D.INT64)
        _bound(exponent, dtype)
    if not D.is_floating(dtype) and is_number(exponent) and exponent < 0:
        raise TorchRuntimeError("Integers to negative integer powers are not allowed.", code="invalid_argument")


#: torch's overloads of pow, which float_power has too
_POW_OVERLOADS = {
    "function": (
        "(Tensor input, Tensor exponent, *, Tensor out = None)",
        "(Number self, Tensor exponent, *, Tensor out = None)",
        "(Tensor input, Number exponent, *, Tensor out = None)",
    ),
    "method": ("(Tensor exponent)", "(Number exponent)"),
}


@op("pow", promotion='result_type | bool_tensors: NotImplementedError: "pow" not implemented for \'Bool\'',
    overloads=_POW_OVERLOADS,
    tensors=("self", "exponent"), aliases=("__pow__",), plannable=True)
def pow(self, exponent):
    """torch.pow(input, exponent): tensor**number (PowBackward0), tensor**tensor (PowBackward1),
    number**tensor (PowBackward2)."""
    if isinstance(self, Tensor) and not isinstance(exponent, Tensor):
        if not is_number(exponent):
            raise InvalidArgumentError(f"pow(): exponent must be a Tensor or a number, got {type(exponent).__name__}")
        if exponent.__class__ is int and exponent >= 1 << 63 and not D.is_floating(self.dtype):
            _bound(exponent, D.INT64)  # (read as an int64 before any promotion: torch's overflow error)
        dtype, a, b = binary_operands(self, exponent)
        _pow_dtype_check(dtype, exponent)
        if exponent == -0.5 and D.is_floating(dtype):
            out = kcall(_rsqrt_pow, a)  # torch's kernel: rsqrt, so (-0.0)**-0.5 = -inf, (-inf)**-0.5 = nan
        else:
            out = kcall(np.power, a, b)
        return record(P.PowBackward0, out, (self,), {"self": self, "exponent": exponent})
    if isinstance(self, Tensor):
        dtype, a, b = binary_operands(self, exponent)
        out = kcall(_int_power if NP[dtype].kind in "iu" else np.power, a, b)
        return record(P.PowBackward1, out, (self, exponent),
                      {"self": self, "exponent": exponent, "result": "result"})
    exponent = require_tensor(exponent, "exponent", "pow")
    if not is_number(self):
        raise InvalidArgumentError(f"pow(): base must be a Tensor or a number, got {type(self).__name__}")
    dtype, a, b = binary_operands(self, exponent)
    out = (_int_power if NP[dtype].kind in "iu" else np.power)(a, b)
    return record(P.PowBackward2, np.asarray(out), (exponent,),
                  {"self": self, "exponent": exponent, "result": "result"})


@op("float_power", promotion="float64",
    overloads=_POW_OVERLOADS,
    tensors=("self", "exponent"), grad_fns=(P.PowBackward0, P.PowBackward1, P.PowBackward2))
def float_power(self, exponent):
    """torch.float_power(input, exponent): pow in double precision, the tensors converted to float64 first
    (ToCopyBackward0 under the PowBackward node of a float32 input), a number exponent read as a double."""
    base = F.double(self) if isinstance(self, Tensor) else float(self) if is_number(self) else self
    power = F.double(exponent) if isinstance(exponent, Tensor) else float(exponent) if is_number(exponent) \
        else exponent
    return pow(base, power)


@op("rpow", functions=(), promotion='result_type | bool: NotImplementedError: "pow" not implemented for \'Bool\'',
    parsed=False,
    tensors=("self", "other"), grad_fns=(P.PowBackward2,), aliases=("__rpow__",), method=False)
def rpow(self, other):
    """``other ** self`` for a number other."""
    return pow(other, self)


@vjp("PowBackward0", inputs=("self",), saves=("self", "exponent"), jvp=elementwise_jvp)
def _(ctx, grad):
    exponent = ctx.exponent
    if exponent == 0:
        return zeros_like(ctx.self),
    e = float(exponent)
    return grad * (e * pow(ctx.self, e - 1)),


@vjp("PowBackward1", inputs=("self", "exponent"), saves=("self", "exponent", "result"), jvp=elementwise_jvp)
def _(ctx, grad):
    n = ctx.needs
    self, exponent = ctx.self, ctx.exponent
    g_self = g_exp = None
    if n[0]:
        g_self = where(eq(exponent, 0.0), 0.0, grad * (exponent * pow(self, exponent - 1)))
    if n[1]:
        cond = logical_and(eq(self, 0), ge(exponent, 0))
        g_exp = grad * where(cond, 0.0, ctx.result * log(self))
    return g_self, g_exp


@vjp("PowBackward2", inputs=("exponent",), saves=("self", "exponent", "result"), jvp=elementwise_jvp)
def _(ctx, grad):
    base = ctx.self
    if base == 0:
        return grad * where(ge(ctx.exponent, 0), 0.0, ctx.result * _scalar_log(base)),
    return grad * (ctx.result * _scalar_log(base)),


def _scalar_log(v):
    return math.log(v) if v > 0 else (-math.inf if v == 0 else math.nan)


@op("square", tensors=("self",), grad_fns=(P.PowBackward0,))
def square(self):
    """torch.square(input): input ** 2 (PowBackward0)."""
    return pow(self, 2)


# ----- unary math -----------------------------------------------------------------------------------


def _not_bool(self, kernel: str) -> Tensor:
    """torch has no bool kernel for these ops: NotImplementedError '"floor_vml_cpu" not implemented for 'Bool''."""
    self = require_tensor(self)
    if self.data.dtype == np.bool_:
        raise TorchRuntimeError(f"\"{kernel}\" not implemented for 'Bool'", code="invalid_dtype",
                                exception="NotImplementedError")
    return self


def _float_only(self, kernel: str) -> Tensor:
    """torch's activation kernels exist for floating dtypes only:
    NotImplementedError '"silu_cpu" not implemented for 'Long''."""
    self = require_tensor(self)
    if self.data.dtype.kind not in "fV":
        raise TorchRuntimeError(f"\"{kernel}\" not implemented for '{D.SCALAR_TYPE_NAMES[self.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    return self


def _apply_float(x, fn):
    """The kernel of the unary math ops on ints and bools: ``fn`` of x in the default float dtype."""
    return fn(x.astype(_F32))


def _unary(prim: Prim, fn, self: Tensor, save: str | None, **extra):
    self = require_tensor(self)
    x = self.data
    # a float input: ``fn`` (a ufunc, or a kernel of a few) is the kernel itself
    call = kcall_for(x.dtype)
    out = call(fn, x) if x.dtype.kind in "fV" else call(_apply_float, x, fn)
    saved = dict(extra)
    if save == "self":
        saved["self"] = self
    elif save == "result":
        saved["result"] = "result"
    return record(prim, out, (self,), saved)


@op("neg", promotion=(
    "same | "
    "bool: RuntimeError: Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
    "invert a mask, use the `~` or `logical_not()` operator instead."),
    tensors=("self",), aliases=("negative", "__neg__"), plannable=True)
def neg(self):
    """torch.neg(input)."""
    self = require_tensor(self)
    if self.data.dtype == np.bool_:
        raise TorchRuntimeError("Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
                                "to invert a mask, use the `~` or `logical_not()` operator instead.",
                                code="invalid_dtype")
    return record(P.NegBackward0, kcall(np.negative, self.data), (self,))


@vjp("NegBackward0", inputs=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    return neg(grad),


@op("reciprocal", promotion="float", tensors=("self",), plannable=True)
def reciprocal(self):
    """torch.reciprocal(input); saves its result."""
    return _unary(P.ReciprocalBackward0, np.reciprocal, self, "result")


@vjp("ReciprocalBackward0", inputs=("self",), saves=("result",), jvp=elementwise_jvp)
def _(ctx, grad):
    r = ctx.result
    return -grad * (r * r),


@op("exp", tensors=("self",), plannable=True, promotion="float")
def exp(self):
    """torch.exp(input); saves its result."""
    return _unary(P.ExpBackward0, np.exp, self, "result")


@vjp("ExpBackward0", inputs=("self",), saves=("result",), jvp=elementwise_jvp)
def _(ctx, grad):
    return grad * ctx.result,


@op("expm1", promotion="float",
    exports=("torch.special.expm1",),
    tensors=("self",), plannable=True)
def expm1(self):
    """torch.expm1(input); saves its result."""
    return _unary(P.Expm1Backward0, np.expm1, self, "result")


@vjp("Expm1Backward0", inputs=("self",), saves=("result",), jvp=elementwise_jvp)
def _(ctx, grad):
    return grad * (ctx.result + 1),


@op("log", tensors=("self",), plannable=True, promotion="float")
def log(self):
    """torch.log(input); saves its input."""
    return _unary(P.LogBackward0, np.log, self, "self")


@vjp("LogBackward0", inputs=("self",), saves=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    return grad / ctx.self,


@op("log1p", promotion="float",
    exports=("torch.special.log1p",),
    tensors=("self",), plannable=True)
def log1p(self):
    """torch.log1p(input); saves its input."""
    return _unary(P.Log1PBackward0, np.log1p, self, "self")


@vjp("Log1PBackward0", inputs=("self",), saves=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    return grad / (ctx.self + 1),


@op("sqrt", tensors=("self",), plannable=True, promotion="float")
def sqrt(self):
    """torch.sqrt(input); saves its result."""
    return _unary(P.SqrtBackward0, np.sqrt, self, "result")


@vjp("SqrtBackward0", inputs=("self",), saves=("result",), jvp=elementwise_jvp)
def _(ctx, grad):
    return grad / (2 * ctx.result),


def _np_rsqrt(x):
    return np.reciprocal(np.sqrt(x))


@op("rsqrt", promotion="float", tensors=("self",))
def rsqrt(self):
    """torch.rsqrt(input); saves its result."""
    return _unary(P.RsqrtBackward0, _np_rsqrt, self, "result")


@vjp("RsqrtBackward0", inputs=("self",), saves=("result",), jvp=elementwise_jvp)
def _(ctx, grad):
    return -0.5 * grad * pow(ctx.result, 3),


@op("abs", promotion=(
    "same | "
    'bool: NotImplementedError: "abs_cpu" not implemented for \'Bool\''),
    tensors=("self",), aliases=("absolute", "__abs__"))
def abs(self):
    """torch.abs(input); abs'(0) = 0."""
    self = _not_bool(self, "abs_cpu")
    return record(P.AbsBackward0, np.abs(self.data), (self,), {"self": self})


@vjp("AbsBackward0", inputs=("self",), saves=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    return grad * sign(ctx.self),


@op("sign", promotion="same", tensors=("self",))
def sign(self):
    """torch.sign(input); zero gradient (of a bool tensor: a copy)."""
    self = require_tensor(self)
    if self.data.dtype == np.bool_:
        return Tensor(self.data.copy())
    return record(P.SignBackward0, _np_sign(self.data), (self,))


def _np_sign(x):
    """sign's and sgn's kernel: a bool tensor's copy; torch's sign(nan) = 0 (so abs'(nan) = 0)."""
    if x.dtype == np.bool_:
        return x.copy()
    out = np.sign(x)
    return np.where(np.isnan(out), out.dtype.type(0), out) if out.dtype.kind in "fV" else out


@vjp("SignBackward0", inputs=("self",), jvp=zero_jvp)
def _(ctx, grad):
    return zeros_like(grad),


@op("sin", promotion="float", tensors=("self",), plannable=True)
def sin(self):
    """torch.sin(input); saves its input."""
    return _unary(P.SinBackward0, np.sin, self, "self")


@vjp("SinBackward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    return grad * cos(ctx.self),


@jvp()
def _(ctx, self_t):
    return self_t * cos(ctx.self)


batching(P.SinBackward0, vjp=SAME, jvp=SAME)


@op("cos", promotion="float", tensors=("self",), plannable=True)
def cos(self):
    """torch.cos(input); saves its input."""
    return _unary(P.CosBackward0, np.cos, self, "self")


@vjp("CosBackward0", inputs=("self",), saves=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    return grad * -sin(ctx.self),


@op("tan", promotion="float", tensors=("self",), plannable=True)
def tan(self):
    """torch.tan(input); saves its result."""
    return _unary(P.TanBackward0, np.tan, self, "result")


@vjp("TanBackward0", inputs=("self",), saves=("result",), jvp=elementwise_jvp)
def _(ctx, grad):
    return grad * (1 + pow(ctx.result, 2)),


@op("tanh", promotion="float",
    exports=("torch.nn.functional.tanh",),
    tensors=("self",), plannable=True)
def tanh(self):
    """torch.tanh(input); saves its result."""
    return _unary(P.TanhBackward0, np.tanh, self, "result")


@vjp("TanhBackward0", inputs=("self",), saves=("result",), jvp=elementwise_jvp)
def _(ctx, grad):
    return _backward.tanh_backward(grad, ctx.result),


# ----- hyperbolic and inverse trigonometric functions, log2/log10, atan2/hypot -------------------------


@op("sinh", promotion="float", tensors=("self",), plannable=True)
def sinh(self):
    """torch.sinh(input); saves its input."""
    return _unary(P.SinhBackward0, np.sinh, self, "self")


@vjp("SinhBackward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    return grad * cosh(ctx.self),


@jvp()
def _(ctx, self_t):
    return self_t * cosh(ctx.self)


batching(P.SinhBackward0, vjp=SAME, jvp=SAME)


@op("cosh", promotion="float", tensors=("self",), plannable=True)
def cosh(self):
    """torch.cosh(input); saves its input."""
    return _unary(P.CoshBackward0, np.cosh, self, "self")


@vjp("CoshBackward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    return grad * sinh(ctx.self),


@jvp()
def _(ctx, self_t):
    return self_t * sinh(ctx.self)


batching(P.CoshBackward0, vjp=SAME, jvp=SAME)


@op("asinh", promotion="float", tensors=("self",), aliases=("arcsinh",))
def asinh(self):
    """torch.asinh(input); saves its input."""
    return _unary(P.AsinhBackward0, np.arcsinh, self, "self")


@vjp("AsinhBackward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    x = ctx.self
    return grad * rsqrt(x * x + 1),


@jvp()
def _(ctx, self_t):
    x = ctx.self
    return self_t * rsqrt(x * x + 1)


batching(P.AsinhBackward0, vjp=SAME, jvp=SAME)


@op("acosh", promotion="float", tensors=("self",), aliases=("arccosh",))
def acosh(self):
    """torch.acosh(input) (nan below 1); saves its input."""
    with np.errstate(invalid="ignore"):
        return _unary(P.AcoshBackward0, np.arccosh, self, "self")


@vjp("AcoshBackward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    x = ctx.self
    return grad * rsqrt(x * x - 1),


@jvp()
def _(ctx, self_t):
    x = ctx.self
    return self_t * rsqrt(x * x - 1)


batching(P.AcoshBackward0, vjp=SAME, jvp=SAME)


@op("atanh", promotion="float", tensors=("self",), aliases=("arctanh",))
def atanh(self):
    """torch.atanh(input) (±inf at ±1, nan beyond); saves its input."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return _unary(P.AtanhBackward0, np.arctanh, self, "self")


@vjp("AtanhBackward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    x = ctx.self
    return grad / (1 - x * x),  # derivatives.yaml: grad * 1 / (1 - self.pow(2)), a DivBackward0 on top


@jvp()
def _(ctx, self_t):
    x = ctx.self
    return self_t * reciprocal(1 - x * x)


batching(P.AtanhBackward0, vjp=SAME, jvp=SAME)


@op("asin", promotion="float", tensors=("self",), aliases=("arcsin",))
def asin(self):
    """torch.asin(input) (nan outside [-1, 1]); saves its input."""
    with np.errstate(invalid="ignore"):
        return _unary(P.AsinBackward0, np.arcsin, self, "self")


@vjp("AsinBackward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    x = ctx.self
    return grad * rsqrt(-x * x + 1),


@jvp()
def _(ctx, self_t):
    x = ctx.self
    return self_t * rsqrt(-x * x + 1)


batching(P.AsinBackward0, vjp=SAME, jvp=SAME)


@op("acos", promotion="float", tensors=("self",), aliases=("arccos",))
def acos(self):
    """torch.acos(input) (nan outside [-1, 1]); saves its input."""
    with np.errstate(invalid="ignore"):
        return _unary(P.AcosBackward0, np.arccos, self, "self")


@vjp("AcosBackward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    x = ctx.self
    return grad * -rsqrt(-x * x + 1),


@jvp()
def _(ctx, self_t):
    x = ctx.self
    return self_t * -rsqrt(-x * x + 1)


batching(P.AcosBackward0, vjp=SAME, jvp=SAME)


@op("atan", promotion="float", tensors=("self",), aliases=("arctan",))
def atan(self):
    """torch.atan(input); saves its input."""
    return _unary(P.AtanBackward0, np.arctan, self, "self")


@vjp("AtanBackward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    x = ctx.self
    return grad / (x * x + 1),


@jvp()
def _(ctx, self_t):
    x = ctx.self
    return self_t / (x * x + 1)


batching(P.AtanBackward0, vjp=SAME, jvp=SAME)


_LN2 = math.log(2.0)
_LN10 = math.log(10.0)


@op("log2", promotion="float", tensors=("self",))
def log2(self):
    """torch.log2(input); saves its input."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return _unary(P.Log2Backward0, np.log2, self, "self")


@vjp("Log2Backward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    return grad / (ctx.self * _LN2),


@jvp()
def _(ctx, self_t):
    return self_t / (ctx.self * _LN2)


batching(P.Log2Backward0, vjp=SAME, jvp=SAME)


@op("log10", promotion="float", tensors=("self",))
def log10(self):
    """torch.log10(input); saves its input."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return _unary(P.Log10Backward0, np.log10, self, "self")


@vjp("Log10Backward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    return grad / (ctx.self * _LN10),


@jvp()
def _(ctx, self_t):
    return self_t / (ctx.self * _LN10)


batching(P.Log10Backward0, vjp=SAME, jvp=SAME)


def _float_binary(name: str, self, other):
    """Operands of atan2/hypot: tensors (or numbers) promoted as torch does, integers computing in float32."""
    if not isinstance(self, Tensor):
        raise InvalidArgumentError(f"{name}(): argument 'input' (position 1) must be Tensor, not "
                                   f"{type(self).__name__}")
    if not isinstance(other, Tensor):
        raise InvalidArgumentError(f"{name}(): argument 'other' (position 2) must be Tensor, not "
                                   f"{type(other).__name__}")
    dtype = D.result_type(self, other)
    if not D.is_floating(dtype):
        dtype = D.DEFAULT_FLOAT
    return binary_operands(self, other, dtype)


@op("atan2", promotion="float", tensors=("self", "other"), aliases=("arctan2",))
def atan2(self, other):
    """torch.atan2(input, other): the angle of (other, input); saves both."""
    _, a, b = _float_binary("atan2", self, other)
    return record(P.Atan2Backward0, np.asarray(np.arctan2(a, b)), (self, other), {"other": other, "self": self})


@vjp("Atan2Backward0", inputs=("self", "other"), saves=("other", "self"))
def _(ctx, grad):
    n = ctx.needs
    s, o = ctx.self, ctx.other
    # FunctionsManual atan2_backward: recip = (self^2 + other^2).reciprocal().masked_fill_(denominator == 0, 0)
    denom = s * s + o * o
    recip = masked_fill(reciprocal(denom), eq(denom, 0), 0)
    return (grad * o * recip if n[0] else None), (grad * -s * recip if n[1] else None)


@jvp()
def _(ctx, self_t, other_t):
    s, o = ctx.self, ctx.other
    recip = reciprocal(s * s + o * o)
    return add_t(mul_t(self_t, o * recip), mul_t(other_t, -s * recip))


batching(P.Atan2Backward0, vjp=SAME, jvp=SAME)


@op("hypot", promotion=(
    "result_type | "
    'integral: NotImplementedError: "hypot_cpu" not implemented for \'{dtype}\''),
    tensors=("self", "other"))
def hypot(self, other):
    """torch.hypot(input, other) = sqrt(input**2 + other**2); saves both and the result."""
    dtype, a, b = _float_binary("hypot", self, other)
    given = D.result_type(self, other)
    if not D.is_floating(given):
        raise TorchRuntimeError(f"\"hypot_cpu\" not implemented for '{D.SCALAR_TYPE_NAMES[given]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    return record(P.HypotBackward0, np.asarray(np.hypot(a, b)), (self, other),
                  {"other": other, "result": "result", "self": self})


@vjp("HypotBackward0", inputs=("self", "other"), saves={"other": ("other",), "result": (), "self": ("self",)})
def _(ctx, grad):
    n = ctx.needs
    r = ctx.result
    # derivatives.yaml: grad * self / result (a DivBackward0 on top)
    return (grad * ctx.self / r if n[0] else None), (grad * ctx.other / r if n[1] else None)


@jvp()
def _(ctx, self_t, other_t):
    r = ctx.result
    return add_t(mul_t(self_t, ctx.self / r), mul_t(other_t, ctx.other / r))


batching(P.HypotBackward0, vjp=SAME, jvp=SAME)


def _np_sigmoid(x):
    # numerically stable for large |x|; float32 in, float32 out
    with np.errstate(over="ignore"):
        if x.nbytes < IN_PLACE_BYTES:
            return np.reciprocal(1 + np.exp(-x))
        t = np.negative(x)  # the same steps, each written over this fresh array
        np.exp(t, out=t)
        np.add(1, t, out=t)
        return np.reciprocal(t, out=t)


@op("sigmoid", promotion="float",
    exports=("torch.nn.functional.sigmoid", "torch.special.expit"),
    tensors=("self",), plannable=True)
def sigmoid(self):
    """torch.sigmoid(input); saves its result."""
    return _unary(P.SigmoidBackward0, _np_sigmoid, self, "result")


@vjp("SigmoidBackward0", inputs=("self",), saves=("result",), jvp=elementwise_jvp)
def _(ctx, grad):
    return _backward.sigmoid_backward(grad, ctx.result),


@op("relu", promotion="same | bool: RuntimeError: Boolean inputs not supported for relu",
    exports=("torch.nn.functional.relu",),
    tensors=("self",), plannable=True)
def relu(self):
    """torch.relu(input); saves its result; relu'(0) = 0."""
    self = require_tensor(self)
    if self.data.dtype == np.bool_:
        raise TorchRuntimeError("Boolean inputs not supported for relu", code="invalid_dtype")
    x = self.data
    return record(P.ReluBackward0, kcall(np.maximum, x, x.dtype.type(0)), (self,),
                  {"result": "result"})


@vjp("ReluBackward0", inputs=("self",), saves=("result",), jvp=elementwise_jvp)
def _(ctx, grad):
    return _backward.threshold_backward(grad, ctx.result, 0),


@op("leaky_relu", functions=(), methods=(),
    promotion='same | integral: NotImplementedError: "leaky_relu_cpu" not implemented for \'{dtype}\'',
    exports=("torch.nn.functional.leaky_relu",),
    tensors=("self",))
def leaky_relu(self, negative_slope=0.01):
    """F.leaky_relu(input, negative_slope=0.01); leaky_relu'(0) = negative_slope."""
    self, out = _leaky_relu(self, negative_slope)
    return record(P.LeakyReluBackward0, out, (self,), {"negative_slope": negative_slope, "self": self})


def _leaky_relu(self, negative_slope) -> tuple:
    self = _float_only(self, "leaky_relu_cpu")
    x = float_data(self)
    xc = x.astype(D.compute_dtype(x.dtype), copy=False)  # float16/bfloat16: in float32, rounded once
    return self, np.where(xc > 0, xc, xc * xc.dtype.type(negative_slope)).astype(x.dtype, copy=False)


@vjp("LeakyReluBackward0", inputs=("self",), saves=("negative_slope", "self"), jvp=elementwise_jvp,
     double_backward="LeakyReluBackwardBackward0")
def _(ctx, grad):
    return where(gt(ctx.self, 0), grad, grad * ctx.negative_slope),


def leaky_relu_on_result(self, negative_slope=0.01):
    """leaky_relu as its in-place form (``leaky_relu_``) records it: LeakyReluBackward1 saves the result."""
    self, out = _leaky_relu(self, negative_slope)
    return record(P.LeakyReluBackward1, out, (self,), {"negative_slope": negative_slope, "result": "result"})


@vjp("LeakyReluBackward1", inputs=("self",), saves=("negative_slope", "result"), jvp=elementwise_jvp,
     double_backward=P.LeakyReluBackwardBackward0)
def _(ctx, grad):
    if ctx.negative_slope < 0:  # (the result's sign no longer says the input's)
        raise TorchRuntimeError("In-place leakyReLu backward calculation is triggered with a negative slope which is "
                                "not supported. This is caused by calling in-place forward function with a negative "
                                "slope, please call out-of-place version instead. File an issue at "
                                "https://github.com/pytorch/pytorch if you do require supporting in-place leakRelu "
                                "backward calculation with negative slope", code="invalid_argument")
    return where(gt(ctx.result, 0), grad, grad * ctx.negative_slope),


@op("elu", functions=(), methods=(),
    promotion='same | integral: NotImplementedError: "elu_cpu" not implemented for \'{dtype}\'',
    exports=("torch.nn.functional.elu",),
    tensors=("self",), plannable=True)
def elu(self, alpha=1.0):
    """F.elu(input, alpha=1.0)."""
    self, out = _elu(self, alpha)
    return record(P.EluBackward0, out, (self,),
                  {"alpha": alpha, "scale": 1, "input_scale": 1, "self": self})


def _elu_kernel(x, alpha, scale, input_scale):
    t = x.dtype.type
    with np.errstate(over="ignore"):
        if scale == 1 and input_scale == 1:
            return np.where(x > 0, x, t(alpha) * np.expm1(x))
        return np.where(x > 0, x * t(scale), np.expm1(x * t(input_scale)) * t(alpha * scale))


def _elu(self, alpha, scale=1, input_scale=1) -> tuple:
    """torch's elu kernel: x * scale where x > 0, else expm1(x * input_scale) * alpha * scale (its coefficients
    in the compute type: float32 for float16/bfloat16, rounded once)."""
    self = _float_only(self, "elu_cpu")
    return self, kcall(_elu_kernel, self.data, alpha, scale, input_scale)


@vjp("EluBackward0", inputs=("self",), saves=("alpha", "scale", "input_scale", "self"), jvp=elementwise_jvp,
     double_backward=P.EluBackwardBackward0)
def _(ctx, grad):
    return _backward.elu_backward(grad, ctx.self, ctx.alpha, ctx.scale, ctx.input_scale),


#: selu's constants (torch's, to the digits it writes them with)
_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


@op("selu", promotion='same | integral: NotImplementedError: "elu_cpu" not implemented for \'{dtype}\'',
    exports=("torch.nn.functional.selu",),
    tensors=("self",), method=False, plannable=True)
def selu(self):
    """torch.selu(input): elu with torch's alpha and scale (its node is EluBackward0, which saves them)."""
    self, out = _elu(self, _SELU_ALPHA, _SELU_SCALE)
    return record(P.EluBackward0, out, (self,),
                  {"alpha": _SELU_ALPHA, "scale": _SELU_SCALE, "input_scale": 1, "self": self})


@op("celu", promotion='same | integral: NotImplementedError: "elu_cpu" not implemented for \'{dtype}\'',
    checks=("not_zero(alpha) | RuntimeError: ZeroDivisionError: alpha cannot be 0 for CELU",),
    exports=("torch.nn.functional.celu",),
    tensors=("self",), method=False, plannable=True)
def celu(self, alpha=1.0):
    """torch.celu(input, alpha=1.0): elu with input scale 1/alpha."""
    if alpha == 0:
        raise broken_check("celu", alpha=alpha)
    self, out = _elu(self, alpha, 1, 1.0 / alpha)
    return record(P.CeluBackward0, out, (self,), {"alpha": alpha, "self": self})


@vjp("CeluBackward0", inputs=("self",), saves=("alpha", "self"), jvp=elementwise_jvp,
     double_backward=P.EluBackwardBackward0)
def _(ctx, grad):
    return _backward.elu_backward(grad, ctx.self, ctx.alpha, 1, 1.0 / ctx.alpha),


def selu_on_result(self):
    """selu as its in-place form (``selu_``) records it: EluBackward1 saves the result."""
    return elu_on_result(self, _SELU_ALPHA, _SELU_SCALE, 1)


def celu_on_result(self, alpha=1.0):
    """celu as its in-place form (``celu_``) records it: CeluBackward1 saves the result."""
    if alpha == 0:
        raise broken_check("celu", alpha=alpha)
    self, out = _elu(self, alpha, 1, 1.0 / alpha)
    return record(P.CeluBackward1, out, (self,), {"alpha": alpha, "result": "result"})


@vjp("CeluBackward1", inputs=("self",), saves=("alpha", "result"), jvp=elementwise_jvp,
     double_backward=P.EluBackwardBackward0)
def _(ctx, grad):
    return _elu_backward_on_result(grad, ctx.result, ctx.alpha, 1, 1.0 / ctx.alpha),


def elu_on_result(self, alpha=1.0, scale=1, input_scale=1):
    """elu as its in-place form (``elu_``, ``selu_``) records it: EluBackward1 saves the result."""
    self, out = _elu(self, alpha, scale, input_scale)
    return record(P.EluBackward1, out, (self,),
                  {"alpha": alpha, "scale": scale, "input_scale": input_scale, "result": "result"})


def _elu_backward_on_result(grad, y, alpha, scale, input_scale):
    """torch's elu_backward on the result ``y``: grad * input_scale * (y + alpha * scale) where y <= 0, grad * scale
    elsewhere; its own gradient in y is kept where y < 0 only (elu_double_backward), so y = 0 takes the same value
    by a branch constant in y."""
    if alpha < 0:  # (the result's sign no longer says the input's)
        raise TorchRuntimeError("In-place elu backward calculation is triggered with a negative slope which is not "
                                "supported. This is caused by calling in-place forward function with a negative "
                                "slope, please call out-of-place version instead.", code="invalid_argument")
    negcoef = alpha * scale
    below = grad * input_scale * (y + negcoef) if input_scale != 1 else grad * (y + negcoef)
    at_zero = grad * (input_scale * negcoef)
    return where(lt(y, 0), below, where(eq(y, 0), at_zero, grad * scale if scale != 1 else grad))


@vjp("EluBackward1", inputs=("self",), saves=("alpha", "scale", "input_scale", "result"), jvp=elementwise_jvp,
     double_backward=P.EluBackwardBackward0)
def _(ctx, grad):
    return _elu_backward_on_result(grad, ctx.result, ctx.alpha, ctx.scale, ctx.input_scale),


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf  # noqa: PLC0415  (optional, more accurate)
        return erf(x).astype(x.dtype, copy=False)
    except ImportError:
        return _erf_np(x)


def _erf_np(x: np.ndarray) -> np.ndarray:
    # vectorised math.erf: exact to double precision, fine for float32 results
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype, copy=False)


@op("erf", promotion="float",
    exports=("torch.special.erf",),
    tensors=("self",))
def erf(self):
    """torch.erf(input)."""
    return _unary(P.ErfBackward0, _erf, self, "self")


@vjp("ErfBackward0", inputs=("self",), saves=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    x = ctx.self
    return grad * (2.0 / math.sqrt(math.pi) * exp(-(x * x))),


def _gelu_kernel(x, approximate):
    t = x.dtype.type
    if approximate == "tanh":
        inner = t(_SQRT_2_OVER_PI) * (x + t(0.044715) * x * x * x)
        out = t(0.5) * x * (t(1) + np.tanh(inner))
    else:
        out = x * t(0.5) * (t(1) + _erf(x * t(_INV_SQRT_2)))
    return out.astype(x.dtype, copy=False)


@op("gelu", functions=(), methods=(),
    promotion='same | integral: NotImplementedError: "GeluKernelImpl" not implemented for \'{dtype}\'',
    exports=("torch.nn.functional.gelu",),
    tensors=("self",))
def gelu(self, approximate="none"):
    """F.gelu(input, approximate='none'|'tanh')."""
    self = _float_only(self, "GeluKernelImpl")
    if approximate not in ("none", "tanh"):
        raise TorchRuntimeError("approximate argument must be either none or tanh.", code="invalid_argument")
    out = kcall(_gelu_kernel, float_data(self), approximate)  # (float16/bfloat16: in float32, rounded once)
    return record(P.GeluBackward0, out, (self,),
                  {"approximate": approximate, "self": self})


@vjp("GeluBackward0", inputs=("self",), saves=("approximate", "self"), jvp=elementwise_jvp,
     double_backward="GeluBackwardBackward0")
def _(ctx, grad):
    x = ctx.self
    if ctx.approximate == "tanh":
        x_sq = x * x
        x_cube = x_sq * x
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * x_cube)
        tanh_inner = tanh(inner)
        left = 0.5 * x
        right = 1 + tanh_inner
        left_derivative = 0.5 * right
        right_derivative = left * (1 - tanh_inner * tanh_inner) * (_SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x_sq))
        return grad * (left_derivative + right_derivative),
    cdf = 0.5 * (1 + erf(x * _INV_SQRT_2))
    pdf = exp(-0.5 * x * x) * _INV_SQRT_2PI
    return grad * (cdf + x * pdf),


@op("silu", functions=(), methods=(),
    promotion='same | integral: NotImplementedError: "silu_cpu" not implemented for \'{dtype}\'',
    exports=("torch.nn.functional.silu",),
    tensors=("self",))
def silu(self):
    """F.silu(input) = input * sigmoid(input)."""
    self = _float_only(self, "silu_cpu")
    x = float_data(self)
    xc = x.astype(D.compute_dtype(x.dtype), copy=False)  # float16/bfloat16: in float32, rounded once
    return record(P.SiluBackward0, (xc * _np_sigmoid(xc)).astype(x.dtype, copy=False), (self,), {"self": self})


@vjp("SiluBackward0", inputs=("self",), saves=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    x = ctx.self
    s = sigmoid(x)
    return grad * (s * (1 + x * (1 - s))),


def _hardswish(x):
    t = x.dtype.type
    return x * np.minimum(np.maximum(x + t(3), t(0)), t(6)) / t(6)


@op("hardswish", functions=(),
    promotion='same | integral: NotImplementedError: "hardswish_cpu" not implemented for \'{dtype}\'',
    exports=("torch.nn.functional.hardswish",),
    tensors=("self",), method=False, plannable=True)
def hardswish(self):
    """F.hardswish(input) = input * relu6(input + 3) / 6."""
    self = _float_only(self, "hardswish_cpu")
    return record(P.HardswishBackward0, kcall(_hardswish, self.data), (self,), {"self": self})


@vjp("HardswishBackward0", inputs=("self",), saves=("self",), jvp=elementwise_jvp,
     double_backward="HardswishBackwardBackward0")
def _(ctx, grad):
    x = ctx.self
    # torch's hardswish_backward: 0 up to -3, grad * (x / 3 + 1/2) below 3, grad from 3 on
    return where(le(x, -3.0), 0.0, where(lt(x, 3.0), grad * (x / 3.0 + 0.5), grad)),


def _hardsigmoid(x):
    t = x.dtype.type
    return np.minimum(np.maximum(x + t(3), t(0)), t(6)) / t(6)


@op("hardsigmoid", functions=(),
    promotion='same | integral: NotImplementedError: "hardsigmoid_cpu" not implemented for '
    '\'{dtype}\'',
    exports=("torch.nn.functional.hardsigmoid",),
    tensors=("self",), method=False, plannable=True)
def hardsigmoid(self):
    """F.hardsigmoid(input) = relu6(input + 3) / 6."""
    self = _float_only(self, "hardsigmoid_cpu")
    return record(P.HardsigmoidBackward0, kcall(_hardsigmoid, self.data), (self,), {"self": self})


def _hardsigmoid_backward(g, x):
    t = g.dtype.type
    return np.where((x > -3) & (x < 3), g * t(1.0 / 6), t(0))


@vjp("HardsigmoidBackward0", inputs=("self",), saves=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    # torch's hardsigmoid_backward (grad * 1/6 inside (-3, 3)) has no derivative of its own: under create_graph
    # its result's node is NotImplemented
    out = kcall(_hardsigmoid_backward, grad.data, ctx.self.data)
    return record(P.NotImplemented, out, (grad, ctx.self), {"aten": "hardsigmoid_backward"}),


def _mish(x):
    with np.errstate(over="ignore"):
        return x * np.tanh(np.log1p(np.exp(x)))


@op("mish", functions=(), promotion='same | integral: NotImplementedError: "mish_cpu" not implemented for \'{dtype}\'',
    exports=("torch.nn.functional.mish",),
    tensors=("self",), method=False, plannable=True)
def mish(self):
    """F.mish(input) = input * tanh(softplus(input))."""
    self = _float_only(self, "mish_cpu")
    return record(P.MishBackward0, kcall(_mish, self.data), (self,), {"self": self})


@vjp("MishBackward0", inputs=("self",), saves=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    # torch's mish_backward, in differentiable ops (its gradient is these ops')
    x = ctx.self
    s = sigmoid(x)
    t = tanh(log1p(exp(x)))
    return grad * (t + x * s * (1 - t * t)),


def _threshold_kernel(x, threshold, value):
    return np.where(x <= threshold, x.dtype.type(value), x)


@op("threshold", promotion='same | bool: NotImplementedError: "threshold_cpu" not implemented for \'Bool\'',
    exports=("torch.nn.functional.threshold",),
    tensors=("self",), method=False, plannable=True)
def threshold(self, threshold, value):
    """torch.threshold(input, threshold, value): value where input <= threshold, else input."""
    return _threshold(self, threshold, value, P.ThresholdBackward0)


def _threshold(self, threshold, value, prim):
    self = require_tensor(self)
    x = self.data
    if x.dtype == np.bool_:
        raise TorchRuntimeError("\"threshold_cpu\" not implemented for 'Bool'", code="invalid_dtype",
                                exception="NotImplementedError")
    out = kcall(_threshold_kernel, x, threshold, value)
    if x.dtype.kind not in "fV":
        return Tensor(out)
    return record(prim, out, (self,), {"self": self, "threshold": threshold})


@vjp("ThresholdBackward0", inputs=("self",), saves=("self", "threshold"), jvp=elementwise_jvp)
def _(ctx, grad):
    return _backward.threshold_backward(grad, ctx.self, ctx.threshold),


def threshold_in_place(self, threshold, value):
    """threshold as its in-place form (``threshold_``) records it: ThresholdBackward1 (the input saved)."""
    return _threshold(self, threshold, value, P.ThresholdBackward1)


@vjp("ThresholdBackward1", inputs=("self",), saves=("self", "threshold"), jvp=elementwise_jvp)
def _(ctx, grad):
    return _backward.threshold_backward(grad, ctx.self, ctx.threshold),


@op("softplus", functions=(), methods=(),
    promotion='same | integral: NotImplementedError: "softplus_cpu" not implemented for \'{dtype}\'',
    exports=("torch.nn.functional.softplus",),
    tensors=("self",), plannable=True)
def softplus(self, beta=1, threshold=20):
    """F.softplus(input, beta=1, threshold=20)."""
    self = _float_only(self, "softplus_cpu")
    return record(P.SoftplusBackward0, kcall(_softplus, self.data, beta, threshold), (self,),
                  {"beta": beta, "self": self, "threshold": threshold})


def _softplus(x, beta, threshold):
    t = x.dtype.type
    if beta == 1:  # x * 1 and y / 1 are exact: skip them
        if x.ndim == 0 and -EXP_FINITE[x.itemsize] <= threshold <= EXP_FINITE[x.itemsize]:
            # one value: the branch np.where would take, alone (no fp error: exp(x) is finite at or below
            # threshold); float(x) > float(t(threshold)) is numpy's x > t(threshold), exactly
            if float(x) > float(t(threshold)):
                return x.copy()
            return np.log1p(np.exp(x), out=ARRAY)
        with np.errstate(over="ignore"):
            return np.where(x > t(threshold), x, np.log1p(np.exp(x)))
    bx = x * t(beta)
    with np.errstate(over="ignore"):
        out = np.where(bx > t(threshold), x, np.log1p(np.exp(bx)) / t(beta))
    return out.astype(x.dtype, copy=False)


@vjp("SoftplusBackward0", inputs=("self",), saves=("beta", "self", "threshold"), jvp=elementwise_jvp)
def _(ctx, grad):
    return _backward.softplus_backward(grad, ctx.self, ctx.beta, ctx.threshold),


@op("hardtanh", functions=(), methods=(),
    exports=("torch.nn.functional.hardtanh",),
    tensors=("self",))
def hardtanh(self, min_val=-1.0, max_val=1.0):
    """F.hardtanh(input, min_val=-1.0, max_val=1.0)."""
    if min_val > max_val:  # checked in torch.nn.functional, before the input is looked at
        raise TorchValueError("min_val cannot be greater than max_val", code="invalid_argument")
    self = require_tensor(self)
    if self.data.dtype == np.bool_:
        raise TorchRuntimeError("Bool inputs not supported for hardtanh", code="invalid_dtype")
    x = self.data
    if x.dtype.kind == "u" and (int(min_val) < 0 or int(max_val) < 0):  # the limits as the input's type
        raise TorchRuntimeError("cannot do hardtanh on an unsigned type with negative limits", code="invalid_argument")
    if x.dtype.kind not in "fV":  # an integer input keeps its dtype (torch clamps into it)
        for limit in (min_val, max_val):  # an int limit is read as an int64 (2**63 fails), then converted
            if limit.__class__ is int:    # (int8: 300 fails)
                _bound(limit, D.INT64)
                _bound(limit, D.of_array(x))
        out = np.clip(x.astype(np.float64), min_val, max_val).astype(x.dtype)
        return Tensor(out)
    out = np.clip(x, x.dtype.type(min_val), x.dtype.type(max_val)).astype(x.dtype, copy=False)  # (bfloat16)
    return record(P.HardtanhBackward0, out, (self,), {"max_val": max_val, "min_val": min_val, "self": self})


@vjp("HardtanhBackward0", inputs=("self",), saves=("max_val", "min_val", "self"), jvp=elementwise_jvp,
     double_backward="HardtanhBackwardBackward0")
def _(ctx, grad):
    x = ctx.self
    return where(logical_or(le(x, ctx.min_val), ge(x, ctx.max_val)), 0.0, grad),


@op("logsigmoid", functions=(), methods=(),
    promotion='same | integral: NotImplementedError: "log_sigmoid_cpu" not implemented for \'{dtype}\'',
    message_name="log_sigmoid", exports=("torch.nn.functional.logsigmoid",),
    tensors=("self",))
def logsigmoid(self):
    """F.logsigmoid(input); saves input and a buffer like torch's CPU kernel."""
    self = _float_only(self, "log_sigmoid_cpu")
    x = float_data(self)
    dt, x = x.dtype, x.astype(D.compute_dtype(x.dtype), copy=False)  # float16/bfloat16: in float32, rounded once
    t = x.dtype.type
    # torch: min(x, 0) - log1p(exp(-|x|)); buffer = exp(-|x|)
    buf = np.exp(-np.abs(x))
    out = np.minimum(x, t(0)) - np.log1p(buf)
    return record(P.LogSigmoidBackward0, out.astype(dt, copy=False), (self,),
                  {"buffer": Tensor(buf.astype(dt, copy=False)), "self": self})


@vjp("LogSigmoidBackward0", inputs=("self",), saves=("buffer", "self"), jvp=elementwise_jvp,
     double_backward="LogSigmoidBackwardBackward0")
def _(ctx, grad):
    x = ctx.self
    # d/dx logsigmoid(x) = 1 - sigmoid(x) = sigmoid(-x)
    return grad * sigmoid(-x),


# ----- clamp, maximum, where, masked_fill, lerp --------------------------------------------------------


@op("clamp", promotion="result_type(self,min,max)", checks=(
    "given(min,max) | RuntimeError: torch.clamp: At least one of 'min' or 'max' must not be None",
    "bool_bounds(self,min,max)=min | NotImplementedError: \"clamp_min_scalar_cpu\" not implemented for 'Bool'",
    "bool_bounds(self,min,max)=max | NotImplementedError: \"clamp_max_scalar_cpu\" not implemented for 'Bool'",
    "bool_bounds(self,min,max)=both | NotImplementedError: \"clamp_scalar_cpu\" not implemented for 'Bool'",
    "bool_bounds(self,min,max)=tensors | NotImplementedError: \"clamp_cpu\" not implemented for 'Bool'"),
    overloads={
        "function": (
            "(Tensor input, Tensor min = None, Tensor max = None, *, Tensor out = None)",
            "(Tensor input, Number min = None, Number max = None, *, Tensor out = None)",
        ),
        "method": ("(Tensor min = None, Tensor max = None)", "(Number min = None, Number max = None)"),
    },
    tensors=("self", "min", "max"), grad_fns=(P.ClampBackward1, P.ClampBackward0), aliases=("clip",))
def clamp(self, min=None, max=None):
    """torch.clamp(input, min=None, max=None): number bounds -> ClampBackward1, tensor bounds ->
    ClampBackward0. The boundary counts as inside (gradient passes)."""
    self = require_tensor(self)
    if (min is None and max is None) or self.data.dtype == np.bool_:  # (bool bounds of a bool: no kernel)
        err = declared_failure("clamp", self=self, min=min, max=max)
        if err is not None:
            raise err
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        lo = as_operand(min) if min is not None else None
        hi = as_operand(max) if max is not None else None
        dtype = D.result_type(self, lo, hi)
        x = self.data.astype(NP[dtype], copy=False)
        out = x
        if lo is not None:
            broadcast_all(self.shape, lo.shape)
            out = np.maximum(out, lo.data.astype(NP[dtype], copy=False))
        if hi is not None:
            broadcast_all(self.shape, hi.shape)
            out = np.minimum(out, hi.data.astype(NP[dtype], copy=False))
        out = np.array(out, copy=True) if out is x else out
        return record(P.ClampBackward0, out, (self, min if isinstance(min, Tensor) else None,
                                              max if isinstance(max, Tensor) else None),
                      {"max": max if isinstance(max, Tensor) else None,
                       "min": min if isinstance(min, Tensor) else None, "self": self})
    for v in (min, max):
        refuse_uint64_with_bool(v, self.dtype)
    dtype = D.result_type(self, *(v for v in (min, max) if v is not None))
    x = self.data.astype(NP[dtype], copy=False)
    out = np.clip(x, _bound(min, dtype), _bound(max, dtype)).astype(x.dtype, copy=False)  # (bfloat16 has no clip)
    return record(P.ClampBackward1, out, (self,), {"max": max, "min": min, "self": self})


def _bound(v, dtype: str):
    """A clamp bound in the computation dtype: checked into an integer type as torch's Scalar conversion
    is (int8's clamp(max=300) is torch's overflow error, uint8's clamp(min=-1) wraps to 255)."""
    if v is None:
        return None
    return checked_scalar(v, dtype) if NP[dtype].kind in "iu" else NP[dtype].type(v)


@vjp("ClampBackward1", inputs=("self",), saves=("max", "min", "self"), jvp=elementwise_jvp)
def _(ctx, grad):
    x = ctx.self
    lo, hi = ctx.min, ctx.max
    if lo is not None and hi is not None:
        mask = logical_and(ge(x, lo), le(x, hi))
    elif lo is not None:
        mask = ge(x, lo)
    else:
        mask = le(x, hi)
    return where(mask, grad, 0.0),


@vjp("ClampBackward0", inputs=("self", "min", "max"), saves=("max", "min", "self"))
def _(ctx, grad):
    """torch's rule, also where min > max (every element is max there): self gets the gradient inside
    [min, max], min below it only while min < max, max above it or wherever max < min."""
    n = ctx.needs
    x, lo, hi = ctx.self, ctx.min, ctx.max
    inside = logical_and(ge(x, lo), le(x, hi)) if lo is not None and hi is not None else (
        ge(x, lo) if lo is not None else le(x, hi))
    g_self = where(inside, grad, 0.0) if n[0] else None
    g_min = g_max = None
    if n[1] and lo is not None:
        below = lt(x, lo) if hi is None else logical_and(lt(x, lo), lt(lo, hi))
        g_min = where(below, grad, 0.0)
    if n[2] and hi is not None:
        above = gt(x, hi) if lo is None else logical_or(gt(x, hi), lt(hi, lo))
        g_max = where(above, grad, 0.0)
    return g_self, g_min, g_max


@jvp()
def _(ctx, self_t, min_t, max_t):
    """torch's forward formula: at a tie with a single bound the bound's tangent wins (the VJP gives the
    gradient to self there), with both bounds self's does; min > max takes max's everywhere."""
    x, lo, hi = ctx.self, ctx.min, ctx.max
    s = 0.0 if self_t is None else self_t
    a = 0.0 if min_t is None else min_t
    b = 0.0 if max_t is None else max_t
    if lo is not None and hi is not None:
        return where(gt(lo, hi), b, where(lt(x, lo), a, where(gt(x, hi), b, s)))
    if lo is not None:
        return where(gt(x, lo), s, a)
    return where(lt(x, hi), s, b)


@op("clamp_min", promotion=(
    "result_type | "
    'bool_number: NotImplementedError: "clamp_min_scalar_cpu" not implemented for \'Bool\''),
    overloads={
        "function": (
            "(Tensor input, Tensor min, *, Tensor out = None)",
            "(Tensor input, Number min, *, Tensor out = None)",
        ),
        "method": ("(Tensor min)", "(Number min)"),
    },
    tensors=("self", "min"), grad_fns=(P.ClampMinBackward0, P.ClampMinBackward1))
def clamp_min(self, min):
    """torch.clamp_min(input, min): a number bound (ClampMinBackward0) or a tensor one (ClampMinBackward1,
    broadcast, the gradient going to ``min`` where input < min)."""
    self = require_tensor(self)
    if isinstance(min, Tensor):
        return _clamp_one_side(P.ClampMinBackward1, np.maximum, self, min, "min")
    dtype = D.result_type(self, min)
    x = self.data.astype(NP[dtype], copy=False)
    return record(P.ClampMinBackward0, np.maximum(x, _bound(min, dtype)), (self,), {"min": min, "self": self})


@vjp("ClampMinBackward0", inputs=("self",), saves=("min", "self"), jvp=elementwise_jvp)
def _(ctx, grad):
    return where(ge(ctx.self, ctx.min), grad, 0.0),


@op("clamp_max", promotion=(
    "result_type | "
    'bool_number: NotImplementedError: "clamp_max_scalar_cpu" not implemented for \'Bool\''),
    overloads={
        "function": (
            "(Tensor input, Tensor max, *, Tensor out = None)",
            "(Tensor input, Number max, *, Tensor out = None)",
        ),
        "method": ("(Tensor max)", "(Number max)"),
    },
    tensors=("self", "max"), grad_fns=(P.ClampMaxBackward0, P.ClampMaxBackward1))
def clamp_max(self, max):
    """torch.clamp_max(input, max): a number bound (ClampMaxBackward0) or a tensor one (ClampMaxBackward1)."""
    self = require_tensor(self)
    if isinstance(max, Tensor):
        return _clamp_one_side(P.ClampMaxBackward1, np.minimum, self, max, "max")
    dtype = D.result_type(self, max)
    x = self.data.astype(NP[dtype], copy=False)
    return record(P.ClampMaxBackward0, np.minimum(x, _bound(max, dtype)), (self,), {"max": max, "self": self})


@vjp("ClampMaxBackward0", inputs=("self",), saves=("max", "self"), jvp=elementwise_jvp)
def _(ctx, grad):
    return where(le(ctx.self, ctx.max), grad, 0.0),


def _clamp_one_side(prim: Prim, fn, self: Tensor, bound: Tensor, slot: str) -> Tensor:
    """clamp_min / clamp_max with a tensor bound: promoted and broadcast like a binary op, NaN kept."""
    dtype = D.result_type(self, bound)
    broadcast_all(self.shape, bound.shape)
    out = kcall(fn, self.data.astype(NP[dtype], copy=False), bound.data.astype(NP[dtype], copy=False))
    return record(prim, out, (self, bound), {"self": self, slot: bound})


@vjp("ClampMinBackward1", inputs=("self", "min"), saves=("self", "min"), jvp=elementwise_jvp)
def _(ctx, grad):  # torch: self where self >= min, min where self < min (a NaN on either side: neither)
    return where(ge(ctx.self, ctx.min), grad, 0.0), where(lt(ctx.self, ctx.min), grad, 0.0)


@vjp("ClampMaxBackward1", inputs=("self", "max"), saves=("self", "max"), jvp=elementwise_jvp)
def _(ctx, grad):  # torch: self where self <= max, max where self > max
    return where(le(ctx.self, ctx.max), grad, 0.0), where(gt(ctx.self, ctx.max), grad, 0.0)


def _binary_tensors(name, self, other):
    self = require_tensor(self, "self", name)
    other = require_tensor(other, "other", name)
    return self, other


@op("maximum", promotion="result_type", tensors=("self", "other"), plannable=True)
def maximum(self, other):
    """torch.maximum(input, other); ties split the gradient 0.5/0.5."""
    self, other = _binary_tensors("maximum", self, other)
    dtype, a, b = binary_operands(self, other)
    return record(P.MaximumBackward0, kcall(np.maximum, a, b), (self, other), {"other": other, "self": self})


@vjp("MaximumBackward0", inputs=("self", "other"), saves=("other", "self"), jvp=elementwise_jvp)
def _(ctx, grad):
    n = ctx.needs
    s, o = ctx.self, ctx.other
    half = where(eq(s, o), grad / 2, grad)
    return (masked_fill(half, lt(s, o), 0) if n[0] else None), (masked_fill(half, gt(s, o), 0) if n[1] else None)


@op("minimum", promotion="result_type", tensors=("self", "other"), plannable=True)
def minimum(self, other):
    """torch.minimum(input, other); ties split the gradient 0.5/0.5."""
    self, other = _binary_tensors("minimum", self, other)
    dtype, a, b = binary_operands(self, other)
    return record(P.MinimumBackward0, kcall(np.minimum, a, b), (self, other), {"other": other, "self": self})


@vjp("MinimumBackward0", inputs=("self", "other"), saves=("other", "self"), jvp=elementwise_jvp)
def _(ctx, grad):
    n = ctx.needs
    s, o = ctx.self, ctx.other
    half = where(eq(s, o), grad / 2, grad)
    return (masked_fill(half, gt(s, o), 0) if n[0] else None), (masked_fill(half, lt(s, o), 0) if n[1] else None)


@op("where", promotion="result_type(self,other)", checks=(
    "dtype(condition)=bool,uint8 if self | RuntimeError: where expected condition to be a boolean tensor, but got a "
    "tensor with dtype {dtype}",),
    overloads={
        "function": (
            "(Tensor condition)",
            "(Tensor condition, Tensor input, Tensor other, *, Tensor out = None)",
            "(Tensor condition, Number self, Tensor other)",
            "(Tensor condition, Tensor input, Number other)",
            "(Tensor condition, Number self, Number other)",
        ),
        "method": ("(Tensor condition, Tensor other)", "(Tensor condition, Number other)"),
    },
    tensors=("condition", "self", "other"), tuple_when=("!self",))
def where(condition, self=NOT_GIVEN, other=NOT_GIVEN):
    """torch.where(condition, input, other); numbers allowed for input/other. torch.where(condition) alone is
    torch.nonzero(condition, as_tuple=True)."""
    if self is NOT_GIVEN and other is NOT_GIVEN:
        return F.nonzero(condition, as_tuple=True)
    condition = require_tensor(condition, "condition", "where")
    if condition.data.dtype == np.uint8:  # still read as a mask by torch (deprecated, with its warning)
        from ..grad_mode import emit_warning
        emit_warning("where received a uint8 condition tensor. This behavior is deprecated and will be removed in a "
                     "future version of PyTorch. Use a boolean condition instead.")
        condition = Tensor(condition.data != 0)
    if condition.data.dtype != np.bool_:
        raise broken_check("where", condition=condition, self=self)
    for v in (self, other):
        if not isinstance(v, Tensor) and not is_number(v):
            raise InvalidArgumentError(f"where(): expected a Tensor or a number, got {type(v).__name__}")
    a = self if isinstance(self, Tensor) else None
    b = other if isinstance(other, Tensor) else None
    cd = condition.data
    fast = _where_fast(cd, self, other, a, b)
    if fast is not None:
        return record(P.WhereBackward0, fast, (a, b), {"condition": condition})
    for value, t in ((self, b), (other, a)):
        if t is not None:
            refuse_uint64_with_bool(value, t.dtype)
    dtype = D.result_type(self, other)
    shapes = [condition.shape] + [t.shape for t in (a, b) if t is not None]
    broadcast_all(*shapes)
    npdt = NP[dtype]
    A = a.data.astype(npdt, copy=False) if a is not None else _bound(self, dtype)
    B = b.data.astype(npdt, copy=False) if b is not None else _bound(other, dtype)
    out = np.where(condition.data, A, B)
    return record(P.WhereBackward0, np.asarray(out, dtype=npdt), (a, b), {"condition": condition})


def _where_fast(cd: np.ndarray, self, other, a: Tensor | None, b: Tensor | None):
    """np.where for the forms the VJPs use (tensor/tensor of one dtype, float tensor/Python float), each
    branch of the condition's shape; None when promotion or broadcasting needs the general path."""
    if a is not None:
        ad = a.data
        if ad.shape != cd.shape or a._wrapped:
            return None
        if b is not None:
            bd = b.data
            if bd.shape != cd.shape or bd.dtype != ad.dtype or b._wrapped:
                return None
            return np.where(cd, ad, bd)
        if other.__class__ is float and ad.dtype.kind in "fV":
            return np.where(cd, ad, ad.dtype.type(other))
        return None
    if b is not None and self.__class__ is float:
        bd = b.data
        if bd.shape == cd.shape and bd.dtype.kind in "fV" and not b._wrapped:
            return np.where(cd, bd.dtype.type(self), bd)
    return None


@vjp("WhereBackward0", inputs=("self", "other"), saves=("condition",), jvp=elementwise_jvp)
def _(ctx, grad):
    n = ctx.needs
    c = ctx.condition
    return (where(c, grad, 0.0) if n[0] else None), (where(c, 0.0, grad) if n[1] else None)


@op("masked_fill",
    checks=("broadcasts(mask,self) | RuntimeError: The size of tensor a ({a}) must match the size of tensor b ({b}) "
            "at non-singleton dimension {dim}",
            "dtype(mask)=bool | RuntimeError: masked_fill_ only supports boolean masks, but got mask with dtype "
            "{cpp}"),
    overloads={
        "function": ("(Tensor input, Tensor mask, Tensor value)", "(Tensor input, Tensor mask, Number value)"),
        "method": ("(Tensor mask, Tensor value)", "(Tensor mask, Number value)"),
    },
    tensors=("self", "mask", "value"), grad_fns=(P.MaskedFillBackward0, P.MaskedFillBackward1))
def masked_fill(self, mask, value):
    """Tensor.masked_fill(mask, value) with a number value."""
    self = require_tensor(self)
    mask = require_tensor(mask, "mask", "masked_fill")
    if mask.data.dtype != np.bool_:
        raise broken_check("masked_fill", self=self, mask=mask)
    if isinstance(value, Tensor):
        if value.data.ndim != 0:
            raise TorchRuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor "
                                    f"with {value.data.ndim} dimension(s).", code="invalid_argument")
        value_tensor, value = value, value.item()
    else:
        value_tensor = None
    if not is_number(value):
        raise InvalidArgumentError(f"masked_fill(): value must be a number, got {type(value).__name__}")
    fill = checked_scalar(value, self.dtype)
    broadcast_all(mask.shape, self.shape)  # self broadcasts to a larger mask, as torch's out-of-place form does
    if value_tensor is not None:  # the Tensor-value overload (torch's MaskedFillBackward1, value's gradient)
        # (value.item() is a value: no kernel here, so a plan never freezes it)
        return record(P.MaskedFillBackward1, np.where(mask.data, fill, self.data), (self, value_tensor),
                      {"mask": mask})
    out = kcall(np.where, mask.data, fill, self.data)
    return record(P.MaskedFillBackward0, out, (self,), {"mask": mask})


# c10's names of the C types in its "value cannot be converted to type ... without overflow"
_OVERFLOW_NAMES = {D.FLOAT32: "float", D.FLOAT64: "double", D.INT64: "int64_t", D.INT32: "int", D.INT16: "int16_t",
                   D.INT8: "int8_t", D.UINT8: "uint8_t", D.BOOL: "bool", D.FLOAT16: "c10::Half",
                   D.BFLOAT16: "c10::BFloat16"}


def checked_scalar(value, dtype: str):
    """A Python number converted to ``dtype`` as c10's checked_convert does: a float truncates into an
    integer dtype, anything converts to bool, and a value out of the target's range is torch's error.
    c10 lets an int wrap into an unsigned type from as far below zero as the type's maximum (uint8: -255)."""
    npdt = NP[dtype]
    if dtype == D.BOOL:
        return npdt.type(bool(value))
    bad = False
    if npdt.kind in "iu":
        info = np.iinfo(npdt)
        v = float(value) if isinstance(value, float) else int(value)
        lo = -int(info.max) if npdt.kind == "u" and not isinstance(v, float) else int(info.min)
        bad = (isinstance(v, float) and not math.isfinite(v)) or not (lo <= v <= int(info.max))
        if npdt == NP[D.INT64] and isinstance(v, float):
            bad = bad or v >= 2.0**63  # (2**63 - 1 reads back as 2.0**63)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)):
        bad = math.fabs(float(value)) > float(D.finfo(npdt).max)
    if bad:
        raise TorchRuntimeError(f"value cannot be converted to type {_OVERFLOW_NAMES[dtype]} without overflow",
                                code="invalid_argument")
    if npdt.kind in "iu":
        return number_as(npdt, int(value))
    # (bfloat16's constructor takes real floats only: a plan's lifted literal converts through a kernel)
    return npdt.type(value) if npdt.kind == "f" else number_as(npdt, value)


@vjp("MaskedFillBackward0", inputs=("self",), saves=("mask",))
def _(ctx, grad):
    return masked_fill(grad, ctx.mask, 0),


@vjp("MaskedFillBackward1", inputs=("self", "value"), saves=("mask",))
def _(ctx, grad):
    n = ctx.needs
    g_self = masked_fill(grad, ctx.mask, 0) if n[0] else None
    g_value = F.sum(where(ctx.mask, grad, 0.0)) if n[1] else None
    return g_self, g_value


@jvp()
def _(ctx, self_t, value_t):
    # torch: self_t.masked_fill(mask, value_t); a missing tangent is zeros of the output's shape
    if self_t is None:
        self_t = zeros_like(ctx.result) if value_t is not None else None
    if self_t is None:
        return None
    return masked_fill(self_t, ctx.mask, value_t) if value_t is not None else masked_fill(self_t, ctx.mask, 0)



jvp(P.MaskedFillBackward0)(elementwise_jvp)
no_jvp(P.NotImplemented, "aten::floor_divide")


_TYPEMETA = D.TYPE_META_NAMES


@op("lerp",
    overloads={
        "function": (
            "(Tensor input, Tensor end, Tensor weight, *, Tensor out = None)",
            "(Tensor input, Tensor end, Number weight, *, Tensor out = None)",
        ),
        "method": ("(Tensor end, Tensor weight)", "(Tensor end, Number weight)"),
    },
    tensors=("self", "end", "weight"), grad_fns=(P.LerpBackward0, P.LerpBackward1), plannable=True)
def lerp(self, end, weight):
    """torch.lerp(input, end, weight): input + weight * (end - input)."""
    self = require_tensor(self)
    end = require_tensor(end, "end", "lerp")
    lerp_dtypes(self, end, weight)
    _float_only(self, "lerp_kernel_tensor" if isinstance(weight, Tensor) else "lerp_kernel_scalar")
    dtype, a, b = binary_operands(self, end)  # (float16/bfloat16: the kernels run in float32, rounded once: kcall)
    if isinstance(weight, Tensor):
        broadcast_all(self.shape, end.shape, weight.shape)
        out = kcall(_lerp_tensor, a, b, weight.data, NP[dtype])
        return record(P.LerpBackward1, out, (self, end, weight), {"end": end, "self": self, "weight": weight})
    return record(P.LerpBackward0, kcall(_lerp_scalar, a, b, weight, NP[dtype]), (self, end), {"weight": weight})


def lerp_dtypes(self, end, weight) -> None:
    """lerp's dtype checks (torch's meta function: before an in-place lerp_'s overlap checks)."""
    if isinstance(end, Tensor) and end.dtype != self.dtype:
        raise TorchRuntimeError(f"expected dtype {_TYPEMETA[self.dtype]} for `end` but got dtype "
                                f"{_TYPEMETA[end.dtype]}", code="invalid_dtype")
    if isinstance(weight, Tensor) and weight.data.ndim > 0 and weight.dtype != self.dtype:
        raise TorchRuntimeError(f"expected dtype {_TYPEMETA[self.dtype]} for `weight` but got dtype "
                                f"{_TYPEMETA[weight.dtype]}", code="invalid_dtype")


@takes_literals
def _lerp_scalar(a, b, weight, npdt):
    """lerp's kernel with a number weight (a plan may give it as a 0-d float64 array): torch's CPU kernel,
    weight < 0.5 ? self + weight * diff : end - diff * (1 - weight)."""
    weight = number(weight)
    w = npdt.type(weight)
    diff = b - a
    if math.fabs(float(weight)) < 0.5:
        return fma(w, diff, a, npdt)
    return fma(-diff, npdt.type(1) - w, b, npdt)


def _lerp_tensor(a, b, weight, npdt):
    """lerp's kernel with a tensor weight: |weight| < 0.5 ? self + weight * diff : end - diff * (1 - weight)."""
    w = weight.astype(npdt, copy=False)
    diff = b - a
    return np.where(np.abs(w) < 0.5, fma(w, diff, a, npdt), fma(-diff, npdt.type(1) - w, b, npdt))


@vjp("LerpBackward0", inputs=("self", "end"), saves=("weight",), jvp=elementwise_jvp)
def _(ctx, grad):
    w = ctx.weight
    n = ctx.needs
    # derivatives.yaml: grad * (1 - weight.toDouble()), grad * weight: scalar products (MulBackward1)
    return (mul_number(grad, 1 - w) if n[0] else None), (mul_number(grad, w) if n[1] else None)


@vjp("LerpBackward1", inputs=("self", "end", "weight"),
     saves={"end": ("weight",), "self": ("weight",), "weight": ()}, jvp=elementwise_jvp)
def _(ctx, grad):
    n = ctx.needs
    w = ctx.weight
    return ((grad * (1 - w)) if n[0] else None, (grad * w) if n[1] else None,
            (grad * (ctx.end - ctx.self)) if n[2] else None)


# ----- addcmul, addcdiv, remainder, nan_to_num, erfinv ------------------------------------------------


def _pointwise3(name: str, kernel: str, self, tensor1, tensor2):
    """The operands of addcmul/addcdiv: torch.result_type of the three, broadcast together."""
    self = require_tensor(self, "input", name)
    tensor1 = require_tensor(tensor1, "tensor1", name)
    tensor2 = require_tensor(tensor2, "tensor2", name)
    dtype = D.result_type(self, tensor1, tensor2)
    if dtype == D.BOOL:
        raise TorchRuntimeError(f"\"{kernel}\" not implemented for 'Bool'", code="invalid_dtype",
                                exception="NotImplementedError")
    broadcast_all(self.shape, tensor1.shape, tensor2.shape)
    return dtype, self, tensor1, tensor2


@takes_literals
def _addcmul(a, b, c, value, npdt):
    """addcmul's kernel (operands cast to the result dtype; a plan may give ``value`` as a 0-d float64 array)."""
    a, b, c = a.astype(npdt, copy=False), b.astype(npdt, copy=False), c.astype(npdt, copy=False)
    # torch: (value * t1) * t2 + self, fused
    return np.asarray(fma(npdt.type(number(value)) * b, c, a, npdt), dtype=npdt)


@takes_literals
def _addcdiv(a, b, c, value, npdt):
    """addcdiv's kernel: torch's self + (value * t1) / t2."""
    a, b, c = a.astype(npdt, copy=False), b.astype(npdt, copy=False), c.astype(npdt, copy=False)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(a + npdt.type(number(value)) * b / c, dtype=npdt)


@op("addcmul", tensors=("self", "tensor1", "tensor2"), plannable=True)
def addcmul(self, tensor1, tensor2, value=1):
    """torch.addcmul(input, tensor1, tensor2, *, value=1): input + value * tensor1 * tensor2."""
    dtype, self, tensor1, tensor2 = _pointwise3("addcmul", "addcmul_cpu_out", self, tensor1, tensor2)
    # into an integer type the value converts as torch's checked Scalar conversion does (its overflow error)
    v = _bound(value, dtype) if NP[dtype].kind in "iu" else value
    out = kcall(_addcmul, self.data, tensor1.data, tensor2.data, v, NP[dtype])
    return record(P.AddcmulBackward0, out, (self, tensor1, tensor2),
                  {"tensor1": tensor1, "tensor2": tensor2, "value": value})


@vjp("AddcmulBackward0", inputs=("self", "tensor1", "tensor2"),
     saves={"tensor1": ("tensor2",), "tensor2": ("tensor1",), "value": ()}, jvp=elementwise_jvp)
def _(ctx, grad):
    n = ctx.needs
    v = ctx.value
    # derivatives.yaml: grad * tensor2 * value, grad * tensor1 * value
    return ((grad if n[0] else None), (grad * ctx.tensor2 * v if n[1] else None),
            (grad * ctx.tensor1 * v if n[2] else None))


@op("addcdiv", tensors=("self", "tensor1", "tensor2"), plannable=True)
def addcdiv(self, tensor1, tensor2, value=1):
    """torch.addcdiv(input, tensor1, tensor2, *, value=1): input + value * tensor1 / tensor2 (true division;
    integer tensor1 and tensor2 are refused, as torch refuses them)."""
    for t in (tensor1, tensor2):
        if not isinstance(t, Tensor):
            break
    else:
        if not D.is_floating(tensor1.dtype) and not D.is_floating(tensor2.dtype):
            raise TorchRuntimeError(
                "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform "
                "a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as (input "
                "+ value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as "
                "(input + value * tensor1 / tensor2) for float inputs. The future addcdiv "
                "behavior is just the latter implementation: (input + value * tensor1 / tensor2), for all dtypes.",
                code="invalid_dtype")
    dtype, self, tensor1, tensor2 = _pointwise3("addcdiv", "addcdiv_cpu_out", self, tensor1, tensor2)
    out = kcall(_addcdiv, self.data, tensor1.data, tensor2.data, value, NP[dtype])
    return record(P.AddcdivBackward0, out, (self, tensor1, tensor2),
                  {"tensor1": tensor1, "tensor2": tensor2, "value": value})


@vjp("AddcdivBackward0", inputs=("self", "tensor1", "tensor2"),
     saves={"tensor1": ("tensor2",), "tensor2": ("tensor1", "tensor2"), "value": ()}, jvp=elementwise_jvp)
def _(ctx, grad):
    n = ctx.needs
    v = ctx.value
    t1, t2 = ctx.tensor1, ctx.tensor2
    # derivatives.yaml: grad * (value / tensor2), -grad * value * tensor1 / (tensor2 * tensor2)
    return ((grad if n[0] else None), (grad * (v / t2) if n[1] else None),
            (-grad * v * t1 / (t2 * t2) if n[2] else None))


def _remainder_np(a, b):
    if a.dtype.kind in "iu" and np.any(np.asarray(b) == 0):
        raise TorchRuntimeError("ZeroDivisionError", code="invalid_argument")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.remainder(a, b))


@op("remainder", promotion='result_type | bool: NotImplementedError: "remainder_cpu" not implemented for \'Bool\'',
    overloads={
        "function": (
            "(Tensor input, Tensor other, *, Tensor out = None)",
            "(Number self, Tensor other)",
            "(Tensor input, Number other, *, Tensor out = None)",
        ),
        "method": ("(Tensor other)", "(Number other)"),
    },
    tensors=("self", "other"), grad_fns=(P.RemainderBackward0, P.RemainderBackward1, P.NotImplemented),
    aliases=("__mod__",))
def remainder(self, other):
    """torch.remainder(input, other): Python's modulus (the sign of the divisor); a number self
    (torch.remainder(5, t)) is a tensor operand like other."""
    if not isinstance(self, Tensor):
        self = _number_tensor(self)
        self._wrapped = True
    dtype, a, b = binary_operands(self, other)
    if dtype == D.BOOL:
        raise TorchRuntimeError("\"remainder_cpu\" not implemented for 'Bool'", code="invalid_dtype",
                                exception="NotImplementedError")
    out = _remainder_np(a, b)
    if self._wrapped:  # remainder.Scalar_Tensor: no derivative in torch
        return record(P.NotImplemented, out, (None, other), {"aten": "remainder"})
    if isinstance(other, Tensor):
        return record(P.RemainderBackward1, out, (self, other), {"other": other, "self": self})
    return record(P.RemainderBackward0, out, (self,), {})


@vjp("RemainderBackward0", inputs=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    return grad,


@vjp("RemainderBackward1", inputs=("self", "other"), saves={"other": ("other",), "self": ("other",)},
     jvp=elementwise_jvp)
def _(ctx, grad):
    n = ctx.needs
    # derivatives.yaml: other: -grad * self.div(other, rounding_mode="floor")
    return (grad if n[0] else None), (-grad * div(ctx.self, ctx.other, rounding_mode="floor") if n[1] else None)


@op("nan_to_num", promotion="same", tensors=("self",))
def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
    """torch.nan_to_num(input, nan=0.0, posinf=None, neginf=None): the infinities become the dtype's largest
    and smallest finite values unless given; integer and bool inputs come back unchanged (a copy)."""
    self = require_tensor(self)
    x = self.data
    if x.dtype.kind not in "fV":
        return record(P.NanToNumBackward0, x.copy(), (self,), {"self": self})
    info = D.finfo(x.dtype)
    t = x.dtype.type
    out = np.where(np.isnan(x), t(nan), x)
    out = np.where(np.isposinf(x), t(info.max if posinf is None else posinf), out)
    out = np.where(np.isneginf(x), t(info.min if neginf is None else neginf), out)
    return record(P.NanToNumBackward0, np.asarray(out, x.dtype), (self,), {"self": self})


@vjp("NanToNumBackward0", inputs=("self",), saves=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    # derivatives.yaml: grad * at::isfinite(self)
    return grad * isfinite(ctx.self),


def _erfinv_np(y: np.ndarray) -> np.ndarray:
    """erf's inverse in float64: Giles' single-precision approximation, then two Newton steps on erf (each
    doubles the correct digits); +-1 are +-inf and |y| > 1 NaN, as torch's."""
    y = np.asarray(y, np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        w = -np.log((1.0 - y) * (1.0 + y))
        small = w < 5.0
        ws = w - 2.5
        p1 = 2.81022636e-08
        for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
                  0.246640727, 1.50140941):
            p1 = c + p1 * ws
        wl = np.sqrt(w) - 3.0
        p2 = -0.000200214257
        for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                  1.00167406, 2.83297682):
            p2 = c + p2 * wl
        x = np.where(small, p1, p2) * y
        finite = np.abs(y) < 1
        x = np.where(finite, x, 0.0)
        for _ in range(2):
            err = _erf(x) - y
            x = x - err / (2.0 / math.sqrt(math.pi) * np.exp(-x * x))
        x = np.where(finite, x, np.where(np.abs(y) == 1, np.copysign(np.inf, y), np.nan))
    return x


@op("erfinv", promotion="float", tensors=("self",))
def erfinv(self):
    """torch.erfinv(input): integer inputs compute in float32."""
    self = require_tensor(self)
    x = self.data
    dt = x.dtype if x.dtype.kind in "fV" else np.dtype(np.float32)
    return record(P.ErfinvBackward0, _erfinv_np(x).astype(dt), (self,), {"self": self})


@vjp("ErfinvBackward0", inputs=("self",), saves=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    # derivatives.yaml: 0.5 * sqrt(M_PI) * exp(self.erfinv().pow(2)) * grad
    return 0.5 * math.sqrt(math.pi) * exp(erfinv(ctx.self) ** 2) * grad,


@op("floor", promotion=(
    "same | "
    'bool: NotImplementedError: "floor_vml_cpu" not implemented for \'Bool\''),
    tensors=("self",))
def floor(self):
    """torch.floor(input); zero gradient."""
    self = _not_bool(self, "floor_vml_cpu")
    return record(P.FloorBackward0, np.floor(self.data), (self,))


@vjp("FloorBackward0", inputs=("self",), jvp=zero_jvp)
def _(ctx, grad):
    return zeros_like(grad),


@op("ceil", promotion=(
    "same | "
    'bool: NotImplementedError: "ceil_vml_cpu" not implemented for \'Bool\''),
    tensors=("self",))
def ceil(self):
    """torch.ceil(input); zero gradient."""
    self = _not_bool(self, "ceil_vml_cpu")
    return record(P.CeilBackward0, np.ceil(self.data), (self,))


@vjp("CeilBackward0", inputs=("self",), jvp=zero_jvp)
def _(ctx, grad):
    return zeros_like(grad),


@op("round", promotion='same | bool: NotImplementedError: "round_vml_cpu" not implemented for \'Bool\'',
    overloads={
        "function": ("(Tensor input, *, Tensor out = None)", "(Tensor input, *, int decimals, Tensor out = None)"),
        "method": ("()", "(*, int decimals)"),
    },
    exports=("torch.special.round",),
    tensors=("self",), grad_fns=(P.RoundBackward0, P.RoundBackward1))
def round(self, decimals=None):
    """torch.round(input, *, decimals): half to even, zero gradient; ``decimals`` given (even 0) is torch's
    ``round.decimals`` overload, RoundBackward1."""
    if decimals:
        self = _float_only(self, "round_cpu")  # torch's decimals kernel is float-only
    self = _not_bool(self, "round_vml_cpu")
    if decimals is not None:
        return record(P.RoundBackward1, np.round(self.data, decimals), (self,), {"decimals": decimals})
    return record(P.RoundBackward0, np.round(self.data), (self,))


@vjp("RoundBackward0", inputs=("self",), jvp=zero_jvp)
def _(ctx, grad):
    return zeros_like(grad),


@vjp("RoundBackward1", inputs=("self",), saves=("decimals",), jvp=zero_jvp)
def _(ctx, grad):
    return zeros_like(grad),


# ----- comparisons and logical ops (no gradient) ---------------------------------------------------


def _compare(name, npfn):
    def fn(self, other):
        if not isinstance(self, Tensor):
            other = require_tensor(other, "other", name)
        dtype, a, b = binary_operands(self, other)
        return Tensor(kcall(npfn, a, b))

    fn.__name__ = name
    fn.__doc__ = f"torch.{name}(input, other): elementwise comparison, a bool tensor without grad."
    return fn


#: torch's overloads of the comparisons (a tensor or a number other)
_COMPARISON = {"function": ("(Tensor input, Tensor other, *, Tensor out = None)",
                            "(Tensor input, Number other, *, Tensor out = None)"),
               "method": ("(Tensor other)", "(Number other)")}
eq = op("eq", promotion="bool", tensors=("self", "other"), differentiable=False, plannable=True,
        aliases=("__eq__",),
        overloads=_COMPARISON)(_compare("eq", np.equal))
ne = op("ne", promotion="bool", tensors=("self", "other"), differentiable=False, plannable=True,
        aliases=("__ne__", "not_equal"),
        overloads=_COMPARISON)(_compare("ne", np.not_equal))
gt = op("gt", promotion="bool", tensors=("self", "other"), differentiable=False, plannable=True,
        aliases=("__gt__", "greater"),
        overloads=_COMPARISON)(_compare("gt", np.greater))
ge = op("ge", promotion="bool", tensors=("self", "other"), differentiable=False, plannable=True,
        aliases=("__ge__", "greater_equal"),
        overloads=_COMPARISON)(_compare("ge", np.greater_equal))
lt = op("lt", promotion="bool", tensors=("self", "other"), differentiable=False, plannable=True,
        aliases=("__lt__", "less"),
        overloads=_COMPARISON)(_compare("lt", np.less))
le = op("le", promotion="bool", tensors=("self", "other"), differentiable=False, plannable=True,
        aliases=("__le__", "less_equal"),
        overloads=_COMPARISON)(_compare("le", np.less_equal))
logical_and = op("logical_and", promotion="bool", tensors=("self", "other"), differentiable=False, plannable=True)(
    _compare("logical_and", np.logical_and))
logical_or = op("logical_or", promotion="bool", tensors=("self", "other"), differentiable=False, plannable=True)(
    _compare("logical_or", np.logical_or))
logical_xor = op("logical_xor", promotion="bool", tensors=("self", "other"), differentiable=False, plannable=True)(
    _compare("logical_xor", np.logical_xor))


@op("logical_not", promotion="bool", tensors=("self",), differentiable=False, plannable=True)
def logical_not(self):
    """torch.logical_not(input)."""
    self = require_tensor(self)
    return Tensor(kcall(np.logical_not, self.data))


# ----- bitwise ops: on the bits of integers and bools, never their truth values -----------------------------------


def _refuse_floating(kernel: str, dtype: str, bool_too: bool = False) -> None:
    """torch's CPU bitwise kernels exist for integers and bool only (shifts: integers only): a floating result type
    is refused."""
    if D.is_floating(dtype) or bool_too and dtype == D.BOOL:
        raise TorchRuntimeError(f"\"{kernel}\" not implemented for '{D.SCALAR_TYPE_NAMES[dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")


def _bitwise(name: str, npfn, kernel: str):
    shift = "shift" in name

    def fn(self, other):
        if not isinstance(self, Tensor):
            other = require_tensor(other, "other", name)
        dtype, a, b = binary_operands(self, other)
        _refuse_floating(kernel, dtype, bool_too=shift)
        return Tensor(kcall(npfn, a, b))

    fn.__name__ = name
    fn.__doc__ = (f"torch.{name}(input, other): on the bits of integer and bool operands (torch.result_type's "
                  f"dtype; a number wraps into it), refusing a floating result type as torch's {kernel} does.")
    return fn


#: (no promotion declared: the client's dtype rules would not refuse a floating type; the server decides)
_BITWISE = {"function": ("(Tensor input, Tensor other, *, Tensor out = None)", "(Number self, Tensor other)",
                         "(Tensor input, Number other, *, Tensor out = None)"),
            "method": ("(Tensor other)", "(Number other)")}

def _binary_bitwise(name: str, ufunc, kernel: str, alias: str):
    """A binary bitwise op's declaration: integer/bool operands, torch's kernel name in its dtype refusal."""
    return op(name, tensors=("self", "other"), differentiable=False, plannable=True, aliases=(alias,),
              overloads=_BITWISE)(_bitwise(name, ufunc, kernel))


bitwise_and = _binary_bitwise("bitwise_and", np.bitwise_and, "bitwise_and_cpu", "__and__")
bitwise_or = _binary_bitwise("bitwise_or", np.bitwise_or, "bitwise_or_cpu", "__or__")
bitwise_xor = _binary_bitwise("bitwise_xor", np.bitwise_xor, "bitwise_xor_cpu", "__xor__")
# (numpy's shifts are torch's: a count past the width gives 0, or -1 shifting a negative number right)
bitwise_left_shift = _binary_bitwise("bitwise_left_shift", np.left_shift, "lshift_cpu", "__lshift__")
bitwise_right_shift = _binary_bitwise("bitwise_right_shift", np.right_shift, "rshift_cpu", "__rshift__")


@op("bitwise_not", tensors=("self",), differentiable=False, plannable=True)
def bitwise_not(self):
    """torch.bitwise_not(input): the bits inverted (a bool's truth value), integers and bool only."""
    self = require_tensor(self)
    _refuse_floating("bitwise_not_cpu", self.dtype)
    return Tensor(kcall(np.invert, self.data))


@op("invert", functions=(),
    tensors=("self",), differentiable=False, plannable=True, aliases=("__invert__",), method=False)
def invert(self):
    """``~x``: bitwise_not, refusing a floating tensor with the TypeError torch's Python operator raises."""
    self = require_tensor(self)
    if D.is_floating(self.dtype):
        raise TorchTypeError("~ (operator.invert) is only implemented on integer and Boolean-type tensors")
    return bitwise_not(self)


@op("isnan", promotion="bool", tensors=("self",), differentiable=False)
def isnan(self):
    """torch.isnan(input)."""
    return Tensor(np.isnan(require_tensor(self).data))


@op("isfinite", promotion="bool", tensors=("self",), differentiable=False)
def isfinite(self):
    """torch.isfinite(input)."""
    return Tensor(np.isfinite(require_tensor(self).data))


# ----- trunc, frac, exp2, deg2rad, rad2deg, sgn, sinc, logit ----------------------------------------------------
@op("trunc", promotion=(
    "same | "
    'bool: NotImplementedError: "trunc_vml_cpu" not implemented for \'Bool\''),
    tensors=("self",), aliases=("fix",), plannable=True)
def trunc(self):
    """torch.trunc(input) (torch.fix); zero gradient; an integral tensor is its own truncation."""
    self = _not_bool(self, "trunc_vml_cpu")
    return record(P.TruncBackward0, kcall(np.trunc if D.is_floating(self.dtype) else np.copy, self.data), (self,))


@vjp("TruncBackward0", inputs=("self",), jvp=zero_jvp)
def _(ctx, grad):
    return zeros_like(grad),


def _np_frac(x):
    return x - np.trunc(x)


@op("frac", promotion=(
    "same | "
    'integral: NotImplementedError: "frac_cpu" not implemented for \'{dtype}\''),
    tensors=("self",), plannable=True)
def frac(self):
    """torch.frac(input) = input - trunc(input); its gradient is the incoming one."""
    self = require_tensor(self)
    if not D.is_floating(self.dtype):
        raise TorchRuntimeError(f"\"frac_cpu\" not implemented for '{D.SCALAR_TYPE_NAMES[self.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    return record(P.FracBackward0, kcall(_np_frac, self.data), (self,))


@vjp("FracBackward0", inputs=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    return grad,


@op("exp2", promotion="float", exports=("torch.special.exp2",), tensors=("self",), plannable=True)
def exp2(self):
    """torch.exp2(input) = 2 ** input; saves its result."""
    return _unary(P.Exp2Backward0, np.exp2, self, "result")


@vjp("Exp2Backward0", inputs=("self",), saves=("result",), jvp=elementwise_jvp)
def _(ctx, grad):
    return mul_number(grad * ctx.result, math.log(2.0)),  # grad * result * M_LN2


def _floating(self: Tensor) -> Tensor:
    """``self``, or an integral or bool tensor's values in the default float dtype (a tensor without history)."""
    return self if D.is_floating(self.dtype) else Tensor(kcall(_to_f32, self.data))


def _to_f32(x):
    return x.astype(_F32)


#: torch's constants for deg2rad and rad2deg (M_PI_180, M_180_PI)
_PI_180 = math.pi / 180
_180_PI = 180 / math.pi


def _scaled(prim: Prim, self, factor: float) -> Tensor:
    """deg2rad's and rad2deg's forward: ``self * factor`` as torch's mul by a number, in the default float dtype for
    an integral or bool input."""
    self = require_tensor(self)
    return record(prim, mul_number(Tensor(_floating(self).data), factor).data, (self,))


@op("deg2rad", promotion="float", tensors=("self",), plannable=True)
def deg2rad(self):
    """torch.deg2rad(input) = input * (pi / 180)."""
    return _scaled(P.Deg2RadBackward0, self, _PI_180)


@vjp("Deg2RadBackward0", inputs=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    return mul_number(grad, _PI_180),


@op("rad2deg", promotion="float", tensors=("self",), plannable=True)
def rad2deg(self):
    """torch.rad2deg(input) = input * (180 / pi)."""
    return _scaled(P.Rad2DegBackward0, self, _180_PI)


@vjp("Rad2DegBackward0", inputs=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    return mul_number(grad, _180_PI),


@op("sgn", promotion="same", tensors=("self",), plannable=True)
def sgn(self):
    """torch.sgn(input): sign for real tensors (0 for 0 and nan), with its own zero-gradient node."""
    self = require_tensor(self)
    return record(P.SgnBackward0, kcall(_np_sign, self.data), (self,))


@vjp("SgnBackward0", inputs=("self",), jvp=zero_jvp)
def _(ctx, grad):
    return zeros_like(grad),


def _np_sinc(x):
    p = x * x.dtype.type(math.pi)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.sin(p) / p
    return np.where(x == 0, x.dtype.type(1), out)


@op("sinc", promotion="float", exports=("torch.special.sinc",), tensors=("self",), plannable=True)
def sinc(self):
    """torch.sinc(input) = sin(pi x) / (pi x), 1 at 0; saves its input."""
    return _unary(P.SincBackward0, _np_sinc, self, "self")


@vjp("SincBackward0", inputs=("self",), saves=("self",), jvp=elementwise_jvp)
def _(ctx, grad):
    # FunctionsManual sinc_backward: (pi x cos(pi x) - sin(pi x)) / (pi x^2), 0 where x is 0
    x = ctx.self
    x_pi = mul_number(x, math.pi)
    x_sq_pi = mul_number(x * x, math.pi)
    out = grad * (x_pi * cos(x_pi) - sin(x_pi)) / x_sq_pi
    return where(eq(x_sq_pi, 0.0), zeros_like(out), out),


def _times_inf(g):
    with np.errstate(invalid="ignore"):
        return g * g.dtype.type(math.inf)


def _np_logit(x):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log(x / (x.dtype.type(1) - x))


def _np_logit_eps(x, eps):
    return _np_logit(np.clip(x, x.dtype.type(eps), x.dtype.type(1 - eps)))


@op("logit", promotion="float", exports=("torch.special.logit",), tensors=("self",), plannable=True)
def logit(self, eps=None):
    """torch.logit(input, eps=None) = log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given."""
    self = require_tensor(self)
    x = _floating(self).data
    out = kcall(_np_logit, x) if eps is None else kcall(_np_logit_eps, x, eps)
    return record(P.LogitBackward0, out, (self,), {"self": self, "eps": eps})


@vjp("LogitBackward0", inputs=("self",), saves=("self", "eps"), jvp=elementwise_jvp)
def _(ctx, grad):
    # torch's logit_backward kernel: grad / (x (1 - x)), grad * inf at 0 and 1 (either zero's sign); outside [0, 1]
    # nan, or with eps zero outside [eps, 1 - eps]
    x, eps = ctx.self, ctx.eps
    # (grad * inf as a value without history: a gradient of gradient through it would be 0 * inf)
    edge = Tensor(kcall(_times_inf, grad.data))
    out = where(logical_or(eq(x, 0.0), eq(x, 1.0)), edge, grad / (x * (1 - x)))
    lo, hi = (0.0, 1.0) if eps is None else (eps, 1 - eps)
    outside = logical_or(lt(x, lo), gt(x, hi))
    return masked_fill(out, outside, math.nan if eps is None else 0.0),
