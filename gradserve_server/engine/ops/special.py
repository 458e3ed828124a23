"""Special functions: lgamma, digamma, polygamma, mvlgamma (``torch.special.multigammaln``), xlogy and
logaddexp.

numpy has no gamma-family kernels and SciPy is not a dependency, so the forwards are computed here in
float64 and cast to the input's dtype: lgamma by Lanczos' approximation, digamma and polygamma by the
recurrence up to x >= 10 and then the asymptotic series, reflection for negative x. The VJPs follow
derivatives.yaml: lgamma' = digamma, digamma' = polygamma(1, .), polygamma(n, .)' = polygamma(n + 1, .),
so every order of derivative stays within these ops.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes as D
from ..batching import SAME, batching
from ..budget import current_control
from ..errors import InvalidArgumentError, TorchRuntimeError
from ..registry import P, jvp, op, record, vjp
from ..tensor import Tensor
from .common import NP, binary_operands, float_data, is_number, require_tensor
from .elementwise import add_t, eq, exp, le, logical_and, masked_fill, mul_t

# Bernoulli numbers B_2k / (2k) for the digamma asymptotic series, and B_2k / (2k)! for Euler-Maclaurin
_B2K = (1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6, -3617.0 / 510)
_SHIFT = 10.0


# Lanczos (g = 7, n = 9): lgamma to ~1e-14 for x >= 1/2; reflection below
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
            12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _lgamma1(v: float) -> float:
    try:
        return math.lgamma(v)
    except ValueError:  # the poles 0, -1, -2 ...
        return math.inf


_lgamma_vec = np.frompyfunc(_lgamma1, 1, 1)


def _lgamma_np(x: np.ndarray) -> np.ndarray:
    """log|Gamma(x)| by the C library's lgamma, as torch's CPU kernel (std::lgamma): exact zeros at 1 and 2,
    inf at the poles 0, -1, -2 ..., cast back to x's dtype."""
    out = _lgamma_vec(x.astype(np.float64, copy=False))
    return np.asarray(out, dtype=np.float64).astype(x.dtype, copy=False)


def _digamma64(x: np.ndarray) -> np.ndarray:
    x = np.array(x, dtype=np.float64, copy=True)
    out = np.zeros_like(x)
    neg = x < 0
    pole = (x <= 0) & (x == np.floor(x))
    if neg.any():  # reflection: psi(x) = psi(1 - x) - pi / tan(pi r), r x's fractional part as torch takes it
        with np.errstate(divide="ignore", invalid="ignore"):  # (pi x itself is off by ~|x| ulp)
            out = np.where(neg, -np.pi / np.tan(np.pi * np.modf(x)[0]), 0.0)
        x = np.where(neg, 1.0 - x, x)
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            small = (x < _SHIFT) & np.isfinite(x) & (x > 0)
            if not small.any():
                break
            out = out - np.where(small, 1.0 / np.where(small, x, 1.0), 0.0)
            x = np.where(small, x + 1.0, x)
        inv2 = 1.0 / (x * x)
        series = np.zeros_like(x)
        p = inv2.copy()
        for k, b in enumerate(_B2K[:6], start=1):
            series = series + b / (2 * k) * p
            p = p * inv2
        out = out + np.log(x) - 0.5 / x - series
    out = np.where(pole & (x == 0), np.copysign(np.inf, -x), out)  # digamma(+-0) = -+inf (torch's calc_digamma)
    return np.where(pole & ~(x == 0), np.nan, out)


def _trigamma(x: np.ndarray) -> np.ndarray:
    """torch's calc_trigamma (aten Math.h), in x's own precision: reflection below 1/2 (so a pole gives
    pi^2 / sin(pi x)^2 with sin's rounding: huge, finite), six recurrence steps, then the asymptotic series."""
    tp = x.dtype.type
    x = x.copy()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        refl = x < tp(0.5)
        pi = tp(math.pi)
        sin_pi_x = np.sin(pi * x)
        result = np.where(refl, -(pi * pi) / (sin_pi_x * sin_pi_x), tp(0)).astype(x.dtype)
        sign = np.where(refl, tp(-1), tp(1)).astype(x.dtype)
        x = np.where(refl, tp(1) - x, x).astype(x.dtype)
        for _ in range(6):
            result = result + tp(1) / (x * x)
            x = x + tp(1)
        ixx = tp(1) / (x * x)
        series = tp(1) + tp(1) / (tp(2) * x) + ixx * (tp(1. / 6) - ixx * (tp(1. / 30) - ixx * tp(1. / 42)))
        result = result + series / x
        return sign * result


# torch's zeta (cephes' Hurwitz zeta): Euler-Maclaurin coefficients (2k)! / B_2k
_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
           1.8152105401943546773e17, -7.1661652561756670113e18)
_MACHEP = 1.11022302462515654042e-16


def _pow1(a: float, e: float) -> float:
    try:
        return math.pow(a, e)
    except (OverflowError, ValueError, ZeroDivisionError):  # inf, or a pole the caller masks
        with np.errstate(all="ignore"):
            return float(np.power(np.float64(a), e))


#: the C library's pow, as torch's zeta calls it (numpy's own pow rounds some powers differently, and a sum
#: that cancels, as from a negative q, shows it)
_cpow = np.frompyfunc(_pow1, 2, 1)


def _pow(a: np.ndarray, e: float) -> np.ndarray:
    return np.asarray(_cpow(a, e), dtype=np.float64)


#: direct terms taken for all elements at once before the long sums (a negative q runs to 9 from below)
_ZETA_SHARED_STEPS = 16
#: direct terms per numpy pass of one long sum, between deadline checks
_ZETA_CHUNK = 1 << 16


def _zeta(x: float, q: np.ndarray) -> np.ndarray:
    """torch's zeta(x, q) for an integer x >= 2, in float64 (its CPU accumulation type), element by element
    as its loops run: direct terms until they are negligible or q + i > 9, then Euler-Maclaurin.

    For a negative q the direct terms run from q up to 9, |q| of them as in torch; an element with that
    many is summed on its own, a chunk of terms per numpy pass (a cumulative sum adds them in torch's order),
    with the request's deadline checked between chunks."""
    q = np.asarray(q)
    if q.ndim == 0:  # (the long sums index elements: a 0-d q runs as one element)
        return _zeta(x, q.reshape(1)).reshape(())
    q = q.astype(np.float64)
    res = np.full(q.shape, np.nan)
    done = (q <= 0) & (q == np.floor(q))
    res[done] = np.inf  # the poles
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s = _pow(q, -x)
        a = q.copy()
        b = np.zeros_like(q)
        i = 0
        while True:
            active = ~done & ((i < 9) | (a <= 9.0))
            if not active.any():
                break
            if i == _ZETA_SHARED_STEPS:
                for k in zip(*np.nonzero(active)):
                    a[k], b[k], s[k], conv = _zeta_long_sum(x, a[k], b[k], s[k])
                    if conv:
                        res[k], done[k] = s[k], True
                break
            i += 1
            a = np.where(active, a + 1.0, a)
            b = np.where(active, _pow(a, -x), b)
            s = np.where(active, s + b, s)
            conv = active & (-_MACHEP * s < b) & (b < _MACHEP * s)
            res[conv] = s[conv]
            done |= conv
        w = a
        s = s + b * w / (x - 1.0) - 0.5 * b
        coef, k = 1.0, 0.0
        for c in _ZETA_A:
            coef *= x + k
            b = b / w
            t = coef * b / c
            s = s + t
            conv = ~done & (np.abs(t / s) < _MACHEP)
            res[conv] = s[conv]
            done |= conv
            k += 1.0
            coef *= x + k
            b = b / w
            k += 1.0
        res[~done] = s[~done]
    return res


def _zeta_long_sum(x: float, a: float, b: float, s: float) -> tuple[float, float, float, bool]:
    """The rest of one element's direct terms (its loop past its first steps: a term is taken while the last
    a <= 9), a chunk per pass: ``(a, b, s, converged)`` as torch's loop leaves them."""
    control = current_control()
    while a <= 9.0:
        if control is not None:
            control.check()
        steps = min(_ZETA_CHUNK, int(9.0 - a) + 1)  # the terms whose previous a is <= 9
        av = a + np.arange(1.0, steps + 1.0)         # exact: q + i as torch's a += 1 makes it (|a| shrinking)
        bv = _pow(av, -x)
        sv = np.cumsum(np.concatenate(([s], bv)))[1:]  # sequential, torch's order of additions
        conv = np.nonzero((-_MACHEP * sv < bv) & (bv < _MACHEP * sv))[0]
        if conv.size:
            j = conv[0]
            return av[j], bv[j], sv[j], True
        a, b, s = av[-1], bv[-1], sv[-1]
    return a, b, s, False


def _polygamma(n: int, x: np.ndarray) -> np.ndarray:
    """psi^(n) for n >= 1 as torch's CPU kernel computes it: trigamma for n == 1, else
    (-1)^(n+1) exp(lgamma(n + 1)) zeta(n + 1, x), in x's precision around a float64 zeta."""
    if n == 1:
        return _trigamma(x)
    tp = x.dtype.type
    fact = tp(math.exp(math.lgamma(n + 1.0))) if tp is np.float64 else np.exp(tp(math.lgamma(tp(n) + tp(1))))
    with np.errstate(over="ignore", invalid="ignore"):
        return (tp(1) if n % 2 else tp(-1)) * fact * _zeta(float(n + 1), x).astype(x.dtype)


def _float_unary(self, name: str):
    self = require_tensor(self, "input", name)
    return self, float_data(self)


# ----- lgamma, digamma, polygamma ---------------------------------------------------------------------


@op("lgamma", promotion="float", tensors=("self",), aliases=("special.gammaln",))
def lgamma(self):
    """torch.lgamma(input): log|Gamma(input)| (inf at the poles); saves its input."""
    self, x = _float_unary(self, "lgamma")
    return record(P.LgammaBackward0, _lgamma_np(x), (self,), {"self": self})


@vjp("LgammaBackward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    return grad * digamma(ctx.self),


@jvp()
def _(ctx, self_t):
    return self_t * digamma(ctx.self)


batching(P.LgammaBackward0, vjp=SAME, jvp=SAME)


@op("digamma", promotion="float", tensors=("self",), aliases=("special.digamma", "special.psi"))
def digamma(self):
    """torch.digamma(input): -inf at 0, nan at negative integers; saves its input."""
    self, x = _float_unary(self, "digamma")
    return record(P.DigammaBackward0, _digamma64(x).astype(x.dtype), (self,), {"self": self})


@vjp("DigammaBackward0", inputs=("self",), saves=("self",))
def _(ctx, grad):
    return grad * polygamma(1, ctx.self),


@jvp()
def _(ctx, self_t):
    return self_t * polygamma(1, ctx.self)


batching(P.DigammaBackward0, vjp=SAME, jvp=SAME)


@op("polygamma", promotion=(
    "float"),
    tensors=("self",), grad_fns=(P.PolygammaBackward0, P.DigammaBackward0), method=False,
    aliases=("special.polygamma",))
def polygamma(n, self):
    """torch.polygamma(n, input): the n-th derivative of digamma; n == 0 is digamma."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise InvalidArgumentError(f"polygamma(): argument 'n' (position 1) must be int, not {type(n).__name__}")
    if n < 0:
        raise TorchRuntimeError("polygamma(n, x) does not support negative n.", code="invalid_argument")
    self, x = _float_unary(self, "polygamma")
    out = _digamma64(x) if n == 0 else _polygamma(int(n), x)  # n == 0: digamma's values, torch's node name
    return record(P.PolygammaBackward0, out.astype(x.dtype), (self,),
                  {"n": int(n), "self": self})


@vjp("PolygammaBackward0", inputs=("self",), saves=("n", "self"))
def _(ctx, grad):
    return grad * polygamma(ctx.n + 1, ctx.self),


@jvp()
def _(ctx, self_t):
    return self_t * polygamma(ctx.n + 1, ctx.self)


batching(P.PolygammaBackward0, vjp=SAME, jvp=SAME)


@op("special.multigammaln", promotion=(
    "float | "
    "bool: RuntimeError: The input tensor may not be a boolean tensor."),
    tensors=("self",), method=False)
def multigammaln(self, p):
    """torch.special.multigammaln(input, p) (= torch.mvlgamma): sum_i lgamma(input - i/2) + p(p-1)/4 log(pi)."""
    self = require_tensor(self, "input", "multigammaln")
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
        raise InvalidArgumentError(f"multigammaln(): argument 'p' (position 2) must be int, not {type(p).__name__}")
    if p < 1:
        raise TorchRuntimeError("p has to be greater than or equal to 1", code="invalid_argument")
    x = float_data(self)  # torch 2.13 no longer checks the domain (x > (p-1)/2): lgamma's values outside it
    args = np.arange(-p * 0.5 + 0.5, 0.5, 0.5).astype(x.dtype) + x[..., None]
    out = _lgamma_np(args).sum(-1) + x.dtype.type(p * (p - 1) * math.log(math.pi) / 4)
    return record(P.MvlgammaBackward0, np.asarray(out, x.dtype), (self,), {"p": int(p), "self": self})


@op("mvlgamma", promotion=(
    "float | "
    "bool: RuntimeError: The input tensor may not be a boolean tensor."),
    tensors=("self",), grad_fns=(P.MvlgammaBackward0,))
def mvlgamma(self, p):
    """torch.mvlgamma(input, p) / Tensor.mvlgamma(p): torch.special.multigammaln."""
    return multigammaln(self, p)


@vjp("MvlgammaBackward0", inputs=("self",), saves=("p", "self"))
def _(ctx, grad):
    from .reduction import sum as sum_
    from .shape import unsqueeze
    p, x = ctx.p, ctx.self
    offsets = Tensor(np.arange(-p * 0.5 + 0.5, 0.5, 0.5).astype(x.data.dtype))
    return grad * sum_(digamma(unsqueeze(x, -1) + offsets), -1),


@jvp()
def _(ctx, self_t):
    from .reduction import sum as sum_
    from .shape import unsqueeze
    p, x = ctx.p, ctx.self
    offsets = Tensor(np.arange(-p * 0.5 + 0.5, 0.5, 0.5).astype(x.data.dtype))
    return self_t * sum_(digamma(unsqueeze(x, -1) + offsets), -1)


batching(P.MvlgammaBackward0, vjp=SAME, jvp=SAME)


# ----- xlogy, logaddexp -------------------------------------------------------------------------------


@op("xlogy", promotion="float",
    overloads={
        "function": (
            "(Tensor input, Tensor other, *, Tensor out = None)",
            "(Number self, Tensor other, *, Tensor out = None)",
            "(Tensor input, Number other, *, Tensor out = None)",
        ),
        "method": ("(Tensor other)", "(Number other)"),
    },
    tensors=("self", "other"), aliases=("special.xlogy",), family="elementwise")  # (it broadcasts, as add does)
def xlogy(self, other):
    """torch.xlogy(input, other) = input * log(other), 0 where input == 0 (unless other is nan); either side
    may be a number (XlogyBackward1: number input, XlogyBackward2: number other)."""
    if not isinstance(self, Tensor) and not isinstance(other, Tensor):
        raise InvalidArgumentError("xlogy(): expected at least one Tensor argument")
    for name, v in (("self", self), ("other", other)):
        if not isinstance(v, Tensor) and not is_number(v):
            raise InvalidArgumentError(f"xlogy(): argument '{name}' must be Tensor or Number, not {type(v).__name__}")
    dtype = D.result_type(self, other)
    if not D.is_floating(dtype):
        dtype = D.DEFAULT_FLOAT
    dtype, a, b = binary_operands(self, other, dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where((a == 0) & ~np.isnan(b), NP[dtype].type(0), a * np.log(b))
    out = np.asarray(out, NP[dtype])
    if isinstance(self, Tensor) and isinstance(other, Tensor):
        return record(P.XlogyBackward0, out, (self, other), {"other": other, "self": self})
    if isinstance(other, Tensor):
        return record(P.XlogyBackward1, out, (other,), {"other": other, "self": self})
    return record(P.XlogyBackward2, out, (self,), {"other": other, "self": self})


@vjp("XlogyBackward0", inputs=("self", "other"), saves=("other", "self"))
def _(ctx, grad):
    n = ctx.needs
    s, o = ctx.self, ctx.other
    g_self = masked_fill(xlogy(grad, o), logical_and(eq(s, 0.0), le(o, 0.0)), 0.0) if n[0] else None
    return g_self, (grad * s / o if n[1] else None)


@jvp()
def _(ctx, self_t, other_t):
    s, o = ctx.self, ctx.other
    t_self = masked_fill(xlogy(self_t, o), logical_and(eq(s, 0.0), le(o, 0.0)), 0.0) if self_t is not None else None
    return add_t(t_self, mul_t(other_t, s / o))


batching(P.XlogyBackward0, vjp=SAME, jvp=SAME)


@vjp("XlogyBackward1", inputs=("other",), saves=("other", "self"))
def _(ctx, grad):
    return grad * ctx.self / ctx.other,


@jvp()
def _(ctx, other_t):
    return other_t * ctx.self / ctx.other


batching(P.XlogyBackward1, vjp=SAME, jvp=SAME)


@vjp("XlogyBackward2", inputs=("self",), saves=("other", "self"))
def _(ctx, grad):
    g = xlogy(grad, ctx.other)
    return (g if ctx.other > 0 else masked_fill(g, eq(ctx.self, 0.0), 0.0)),


@jvp()
def _(ctx, self_t):
    t = xlogy(self_t, ctx.other)
    return t if ctx.other > 0 else masked_fill(t, eq(ctx.self, 0.0), 0.0)


batching(P.XlogyBackward2, vjp=SAME, jvp=SAME)


@op("logaddexp", promotion=(
    "result_type | "
    'integral: NotImplementedError: "logaddexp_cpu" not implemented for \'{dtype}\''),
    tensors=("self", "other"), family="elementwise")  # (it broadcasts, as add does)
def logaddexp(self, other):
    """torch.logaddexp(input, other) = log(exp(input) + exp(other)), computed stably; saves both."""
    self = require_tensor(self, "input", "logaddexp")
    other = require_tensor(other, "other", "logaddexp")
    dtype, a, b = binary_operands(self, other)
    if not D.is_floating(dtype):
        raise TorchRuntimeError(f"\"logaddexp_cpu\" not implemented for '{D.SCALAR_TYPE_NAMES[dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    return record(P.LogaddexpBackward0, np.asarray(np.logaddexp(a, b)), (self, other), {"other": other, "self": self})


@vjp("LogaddexpBackward0", inputs=("self", "other"), saves=("other", "self"))
def _(ctx, grad):
    n = ctx.needs
    s, o = ctx.self, ctx.other
    return (grad / (exp(o - s) + 1) if n[0] else None), (grad / (exp(s - o) + 1) if n[1] else None)


@jvp()
def _(ctx, self_t, other_t):
    s, o = ctx.self, ctx.other
    return add_t(None if self_t is None else self_t / (exp(o - s) + 1),
                 None if other_t is None else other_t / (exp(s - o) + 1))


batching(P.LogaddexpBackward0, vjp=SAME, jvp=SAME)
