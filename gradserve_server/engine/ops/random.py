"""Random ops, bit for bit torch's CPU kernels: ``rand``, ``randn``, ``randint``, ``randperm``, the ``*_like``
forms, ``normal``, ``uniform_``, ``normal_``, ``random_``, ``exponential_``, ``bernoulli``/``bernoulli_``,
``multinomial`` (dropout's mask is
``bernoulli_(1 - p)``, in ``ops.nn``).

Every op draws from a ``Generator`` (``engine.generator``): the one named by ``generator=`` or the running
program's default. What torch 2.13's CPU kernels do with the words, found by experiment against torch and
reproduced here:

* a float32 uniform is ``(word & 2**24-1) * 2**-24`` (one word), a float64 one ``(w64 & 2**53-1) * 2**-53``
  (two words, the first the high half), scaled as ``x * (to - from) + from`` in double, ``to - from`` in
  the tensor's dtype;
* normals of 16 elements or more of a contiguous tensor (``normal_fill``): uniforms for every element, then
  Box-Muller on each block of 16 (``u1 = 1 - x[j]``, ``u2 = x[j + 8]``), the last partial block redrawn from
  16 fresh uniforms (float16/bfloat16: uniforms for the whole blocks only, then the float32 kernel, its
  results rounded). float32 runs the AVX2 kernel (Cephes-style polynomial log and sincos in float32, fused
  multiply-adds where the compiler contracted them); float64 uses libm's log, cos and sin (``math``: numpy's
  SIMD loops round differently);
* smaller normals draw pairs through ``normal_distribution<double>`` (log1p, cos and sin of libm), keeping
  the second value of a pair on the generator for the next normal draw;
* integers: ``word % range + low`` with one word when the range is below 2**32, else two;
* bernoulli: a double uniform (float for a ``p`` tensor of another floating dtype than float64) ``< p``;
  exponential: ``-log1p(-u) / lambd`` of a double uniform (libm's log1p);
* random_(from, to) and randint into a floating dtype: bounds it cannot hold moved to ones it can (``_float_bounds``).
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes as D
from .. import kernel as K
from ..errors import InvalidArgumentError, TorchRuntimeError, TorchTypeError
from ..generator import Generator, resolve
from ..grad_mode import check_numel, emit_warning
from ..registry import P, jvp, op, record, vjp, zero_jvp
from ..tensor import Tensor
from . import elementwise as E
from .common import NP, require_tensor
from .creation import NOT_GIVEN, _check_requires_grad, _dtype, _leaf, _size, _sizes
from .inplace import _make

_F32, _F64 = np.float32, np.float64
_M24, _M53 = np.uint64((1 << 24) - 1), np.uint64((1 << 53) - 1)


# ----- kernels: words -> values ----------------------------------------------------------------------------


def uniform_float(g: Generator, n: int, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """n float32 uniforms on [low, high) (torch's uniform_real_distribution<float>)."""
    x = (g.random(n) & _M24).astype(_F64) * 2.0 ** -24
    if low == 0.0 and high == 1.0:
        return x.astype(_F32)
    lo = _F32(low)
    return (x * _F64(_F32(high) - lo) + _F64(lo)).astype(_F32)


def uniform_double(g: Generator, n: int, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    x = (g.random64(n) & _M53).astype(_F64) * 2.0 ** -53
    if low == 0.0 and high == 1.0:
        return x
    return x * (high - low) + low


def _fma32(a, b, c) -> np.ndarray:
    """a * b + c rounded once to float32 (an FMA instruction), for float32 arrays or scalars: the product is
    exact in double; the double sum rounds again to float32 correctly unless it fell exactly halfway between
    two floats (its low 29 bits 1000...0), where the sum's own rounding error decides."""
    p = np.multiply(a, b, dtype=_F64)
    s = p + np.asarray(c, _F64)
    r = s.astype(_F32)
    tie = (np.asarray(s).view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)
    if tie.any():
        p, s, c = (np.broadcast_to(np.asarray(v, _F64), tie.shape)[tie] for v in (p, s, c))
        bb = s - p
        err = (p - (s - bb)) + (c - bb)  # s + err == p + c exactly
        rt = r[tie]
        rd = rt.astype(_F64)
        lo = np.where(rd < s, rt, np.nextafter(rt, _F32(-np.inf)))
        hi = np.where(rd > s, rt, np.nextafter(rt, _F32(np.inf)))
        r = np.array(r, copy=True)
        r[tie] = np.where(err > 0, hi, np.where(err < 0, lo, rt))
    return r


def _fma64(a, b, c) -> np.ndarray:
    """a * b + c with one rounding (to the last bit but for rare double-rounding cases): Dekker's exact
    product and an exact sum, then one addition."""
    a, b, c = (np.asarray(v, _F64) for v in (a, b, c))
    p = a * b
    sa, sb = a * 134217729.0, b * 134217729.0
    ah, bh = sa - (sa - a), sb - (sb - b)
    al, bl = a - ah, b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    s = p + c
    bb = s - p
    t = (p - (s - bb)) + (c - bb)
    return s + (t + e)


_LOG_P = (7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1, 1.4249322787E-1,
          -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1)


def _log_avx2(x: np.ndarray) -> np.ndarray:
    """The AVX2 kernel's float32 log (Cephes' logf polynomial) for x in (0, 1]."""
    bits = np.maximum(x, _F32(1.17549435e-38)).view(np.int32)
    e = ((bits >> 23) - 0x7F).astype(_F32) + _F32(1)
    m = ((bits & ~0x7F800000) | 0x3F000000).view(_F32)  # the mantissa in [0.5, 1)
    small = m < _F32(0.707106781186547524)
    e = e - small.astype(_F32)
    m = (m - _F32(1)) + np.where(small, m, _F32(0))
    z = m * m
    y = np.full_like(m, _F32(_LOG_P[0]))
    for c in _LOG_P[1:]:
        y = _fma32(y, m, _F32(c))
    y = y * m
    y = _fma32(y, z, e * _F32(-2.12194440e-4))
    y = _fma32(-z, _F32(0.5), y)
    return _fma32(e, _F32(0.693359375), m + y)


def _sincos_avx2(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The AVX2 kernel's float32 sine and cosine (Cephes' sinf/cosf) for x >= 0."""
    j = (((x * _F32(1.27323954473516)).astype(np.int32) + 1) & ~1)
    y = j.astype(_F32)
    for dp in (-0.78515625, -2.4187564849853515625e-4, -3.77489497744594108e-8):
        x = _fma32(y, _F32(dp), x)
    z = x * x
    c = _fma32(_fma32(np.full_like(x, _F32(2.443315711809948E-005)), z, _F32(-1.388731625493765E-003)),
               z, _F32(4.166664568298827E-002))
    c = _fma32(c * z, z, -(z * _F32(0.5))) + _F32(1)
    s = _fma32(_fma32(np.full_like(x, _F32(-1.9515295891E-4)), z, _F32(8.3321608736E-3)),
               z, _F32(-1.6666654611E-1))
    s = _fma32(s * z, x, x)
    first = (j & 2) == 0
    sin, cos = np.where(first, s, c), np.where(first, c, s)
    return np.where((j & 4) != 0, -sin, sin), np.where((~(j - 2) & 4) != 0, -cos, cos)


def _box_muller16_float(u: np.ndarray, mean: float, std: float) -> np.ndarray:
    u = u.reshape(-1, 16)
    radius = np.sqrt(_F32(-2) * _log_avx2(_F32(1) - u[:, :8]))
    sin, cos = _sincos_avx2(_F32(2.0 * math.pi) * u[:, 8:])
    m, s = _F32(mean), _F32(std)
    return np.concatenate([_fma32(radius * cos, s, m), _fma32(radius * sin, s, m)], 1).reshape(-1)


_log, _cos, _sin = (np.frompyfunc(f, 1, 1) for f in (math.log, math.cos, math.sin))


def _box_muller16_double(u: np.ndarray, mean: float, std: float) -> np.ndarray:
    u = u.reshape(-1, 16)
    radius = np.sqrt(-2.0 * _log(1.0 - u[:, :8]).astype(_F64))
    theta = (2.0 * math.pi) * u[:, 8:]
    out = np.concatenate([radius * _cos(theta).astype(_F64), radius * _sin(theta).astype(_F64)], 1)
    return _fma64(out, std, mean).reshape(-1)


def _normal_fill(g: Generator, n: int, dtype: str, mean: float, std: float) -> np.ndarray:
    half = dtype in D.HALF_TYPES
    uniform, block = (uniform_float, _box_muller16_float) if dtype == D.FLOAT32 or half else \
        (uniform_double, _box_muller16_double)
    full = n // 16 * 16
    out = np.empty(n, _F32 if half else NP[dtype])
    # float16/bfloat16 run the float32 kernel, drawing uniforms for the whole blocks only (float32 and float64 draw
    # one per element, the partial block's wasted), and round its results once
    out[:full] = block(uniform(g, full if half else n)[:full], mean, std)
    if n % 16:  # torch redraws the last 16 values
        out[n - 16:] = block(uniform(g, 16), mean, std)
    return out.astype(NP[dtype]) if half else out


def _normal_pairs(g: Generator, n: int, mean: float, std: float) -> np.ndarray:
    """normal_distribution<double>, n times: a pair per two draws, the spare kept on the generator."""
    out = np.empty(n, _F64)
    i = 0
    if n and g.double_normal is not None:
        out[0], g.double_normal, i = g.double_normal, None, 1
    pairs = (n - i + 1) // 2
    if pairs:
        u = uniform_double(g, 2 * pairs).reshape(pairs, 2)
        vals = np.empty((pairs, 2))
        for k, (u1, u2) in enumerate(u.tolist()):
            r = math.sqrt(-2.0 * math.log1p(-u2))
            theta = 2.0 * math.pi * u1
            vals[k] = r * math.cos(theta), r * math.sin(theta)
        flat = vals.reshape(-1)
        out[i:] = flat[:n - i]
        if (n - i) % 2:
            g.double_normal = float(flat[-1])
    return _fma64(out, std, mean)


def normal_values(g: Generator, shape: tuple, dtype: str, mean: float = 0.0, std: float = 1.0,
                  contiguous: bool = True) -> np.ndarray:
    """What torch's normal_ writes into a tensor of this shape and dtype."""
    n = math.prod(shape)
    if n >= 16 and contiguous:
        return _normal_fill(g, n, dtype, mean, std).reshape(shape)
    return K.astype(_normal_pairs(g, n, mean, std), NP[dtype]).reshape(shape)


def uniform_values(g: Generator, shape: tuple, dtype: str, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """What torch's uniform_ writes: a value that rounds to ``high`` in the dtype is ``low`` instead (so that
    the range stays half-open)."""
    n = math.prod(shape)
    fn = uniform_double if dtype == D.FLOAT64 else uniform_float  # float16/bfloat16: float32 draws, rounded
    out = fn(g, n, low, high).astype(NP[dtype], copy=False)
    top, bottom = (K.astype(np.asarray(v, _F64), NP[dtype]) for v in (high, low))
    out[out == top] = bottom
    return out.reshape(shape)


def integer_values(g: Generator, n: int, low: int, high: int) -> np.ndarray:
    """random_(from, to): ``word % (to - from) + from`` (two words per value from a range of 2**32 on)."""
    span = high - low
    words = g.random(n) if span < 1 << 32 else g.random64(n)
    return ((words % np.uint64(span)) + np.uint64(low & 0xFFFFFFFFFFFFFFFF)).view(np.int64)  # wraps as C++ does


def permutation(g: Generator, n: int) -> np.ndarray:
    """randperm's Fisher-Yates: position i swaps with i + word % (n - i), one word each."""
    out = np.arange(n, dtype=np.int64)
    if n > 1:
        words = g.random(n - 1) if n < (1 << 32) // 20 else g.random64(n - 1)
        picks = (words % np.arange(n, 1, -1, dtype=np.uint64)).tolist()
        r = out.tolist()
        for i, z in enumerate(picks):
            j = i + z
            r[i], r[j] = r[j], r[i]
        out = np.array(r, dtype=np.int64)
    return out


def exponential_values(g: Generator, n: int, dtype: str, lambd: float = 1.0) -> np.ndarray:
    u = uniform_double(g, n)
    return K.astype(np.array([-1.0 / lambd * math.log1p(-v) for v in u.tolist()], _F64), NP[dtype])


# ----- argument checks ---------------------------------------------------------------------------------------


def _gen(name: str, generator) -> Generator:
    return resolve(generator, name)


def _float_only(kernel: str, dtype: str) -> None:
    if not D.is_floating(dtype):
        raise TorchRuntimeError(f"\"{kernel}\" not implemented for '{D.SCALAR_TYPE_NAMES[dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")


def _number(name: str, arg: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InvalidArgumentError(f"{name}(): argument '{arg}' must be float, not {type(v).__name__}")
    return float(v)


def _int(name: str, arg: str, v, pos: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TorchTypeError(f"{name}(): argument '{arg}' (position {pos}) must be int, not {type(v).__name__}")
    return int(v)


# ----- creation ----------------------------------------------------------------------------------------------


#: torch's overloads of rand and randn, which it lists for a call without arguments
_SIZE_OVERLOADS = tuple(
    f"(tuple of ints size, *, {gen}Tensor out = None, torch.dtype dtype = None, torch.layout layout = None, "
    f"torch.device device = None, bool pin_memory = False, bool requires_grad = False)"
    for gen in ("torch.Generator generator, ", ""))


@op("rand", promotion="float",
    size_varargs="size",
    no_argument_overloads=_SIZE_OVERLOADS,
    cost="arguments",
    method=False, differentiable=False, family="creation")
def rand(*sizes, size=NOT_GIVEN, generator=None, dtype=None, requires_grad=False):
    """torch.rand(*size, generator=None, dtype=None, requires_grad=False): uniform on [0, 1), torch's values."""
    d = _dtype(dtype)
    shape = _size(_sizes("rand", sizes, size), "rand", itemsize=8)
    _float_only("check_uniform_bounds", d)
    _check_requires_grad(d, requires_grad)
    return _leaf(uniform_values(_gen("rand", generator), shape, d), requires_grad)


@op("randn", promotion="float",
    size_varargs="size",
    no_argument_overloads=_SIZE_OVERLOADS,
    cost="arguments",
    method=False, differentiable=False, family="creation")
def randn(*sizes, size=NOT_GIVEN, generator=None, dtype=None, requires_grad=False):
    """torch.randn(*size, generator=None, dtype=None, requires_grad=False): standard normal, torch's values."""
    d = _dtype(dtype)
    shape = _size(_sizes("randn", sizes, size), "randn", itemsize=8)
    _float_only("normal_kernel_cpu", d)
    _check_requires_grad(d, requires_grad)
    return _leaf(normal_values(_gen("randn", generator), shape, d), requires_grad)


def _randint_bounds(name: str, a, b) -> tuple[int, int]:
    low, high = (0, a) if b is None else (a, b)
    low, high = _int(name, "low", low, 1), _int(name, "high", high, 2 if b is not None else 1)
    if low >= high:
        raise TorchRuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}",
                                code="invalid_argument")
    return low, high


def _randint(name: str, low: int, high: int, shape: tuple, d: str, generator, requires_grad) -> Tensor:
    _check_requires_grad(d, requires_grad)
    if D.is_floating(d):
        low, high = _float_bounds(d, low, high)
    vals = integer_values(_gen(name, generator), math.prod(shape), low, high)
    return _leaf(K.astype(vals, NP[d]).reshape(shape), requires_grad)


@op("randint", promotion="int64",
    cost="arguments",
    method=False, differentiable=False, family="creation")
def randint(low, high=None, size=None, *, generator=None, dtype=None, requires_grad=False):
    """torch.randint(low=0, high, size, generator=None, dtype=torch.int64, requires_grad=False): integers in
    [low, high), ``randint(high, size)`` as well."""
    if size is None and isinstance(high, (list, tuple)):
        high, size = None, high
    if size is None:
        raise TorchTypeError("randint() missing required argument 'size' (pos 2)")
    if not isinstance(size, (list, tuple)):
        raise TorchTypeError(f"randint(): argument 'size' (position {2 if high is None else 3}) must be tuple of "
                             f"ints, not {type(size).__name__}")
    low, high = _randint_bounds("randint", low, high)
    shape = _size((tuple(size),), "randint", itemsize=8)
    return _randint("randint", low, high, shape, _dtype(dtype, D.INT64), generator, requires_grad)


@op("randperm", promotion="int64",
    cost="arguments",
    method=False, differentiable=False, family="creation")
def randperm(n, *, generator=None, dtype=None, requires_grad=False):
    """torch.randperm(n, generator=None, dtype=torch.int64, requires_grad=False)."""
    n = _int("randperm", "n", n, 1)
    if n < 0:
        raise TorchRuntimeError(f"Trying to create tensor with negative dimension {n}: [{n}]", code="invalid_shape")
    d = _dtype(dtype, D.INT64)
    _size((n,), "randperm", itemsize=8)
    _check_requires_grad(d, requires_grad)
    return _leaf(K.astype(permutation(_gen("randperm", generator), n), NP[d]), requires_grad)


def _like_dtype(input: Tensor, dtype) -> str:
    return input.dtype if dtype is None else D.canonical(dtype)


@op("rand_like", methods=(), tensors=("input",), differentiable=False, family="creation")
def rand_like(input, *, generator=None, dtype=None, requires_grad=False):
    """torch.rand_like(input, generator=None, dtype=None, requires_grad=False)."""
    input = require_tensor(input, "input", "rand_like")
    d = _like_dtype(input, dtype)
    _float_only("check_uniform_bounds", d)
    _check_requires_grad(d, requires_grad)
    return _leaf(uniform_values(_gen("rand_like", generator), input.shape, d), requires_grad)


@op("randn_like", methods=(), tensors=("input",), differentiable=False, family="creation")
def randn_like(input, *, generator=None, dtype=None, requires_grad=False):
    """torch.randn_like(input, generator=None, dtype=None, requires_grad=False)."""
    input = require_tensor(input, "input", "randn_like")
    d = _like_dtype(input, dtype)
    _float_only("normal_kernel_cpu", d)
    _check_requires_grad(d, requires_grad)
    return _leaf(normal_values(_gen("randn_like", generator), input.shape, d), requires_grad)


@op("randint_like", methods=(), tensors=("input",), differentiable=False, family="creation")
def randint_like(input, low, high=None, *, generator=None, dtype=None, requires_grad=False):
    """torch.randint_like(input, low=0, high, generator=None, dtype=None, requires_grad=False)."""
    input = require_tensor(input, "input", "randint_like")
    low, high = _randint_bounds("randint_like", low, high)
    return _randint("randint_like", low, high, input.shape, _like_dtype(input, dtype), generator, requires_grad)


# ----- in place: uniform_, normal_, bernoulli_ ----------------------------------------------------------------


def _memory_order(a: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """``vals`` drawn one element after another, placed as torch's TensorIterator walks ``a``: in memory
    order (a transposed view is filled along its base's rows)."""
    if a.flags.c_contiguous or a.ndim < 2:
        return vals
    idx = np.indices(a.shape).reshape(a.ndim, -1)
    order = np.argsort((idx * np.array(a.strides)[:, None]).sum(0), kind="stable")
    out = np.empty(vals.size, vals.dtype)
    out[order] = vals.reshape(-1)
    return out.reshape(a.shape)


def _uniform(self: Tensor, from_=0.0, to=1.0, *, generator=None) -> Tensor:
    lo, hi = _number("uniform_", "from", from_), _number("uniform_", "to", to)
    _float_only("check_uniform_bounds", self.dtype)
    if lo > hi:
        raise TorchRuntimeError(f"uniform_ expects to return a [from, to) range, but found from={_g(lo)} > "
                                f"to={_g(hi)}", code="invalid_argument")
    vals = uniform_values(_gen("uniform_", generator), self.shape, self.dtype, lo, hi)
    return record(P.UniformBackward0, _memory_order(self.data, vals), (self,))


def _normal(self: Tensor, mean=0.0, std=1.0, *, generator=None) -> Tensor:
    mean, std = _number("normal_", "mean", mean), _number("normal_", "std", std)
    _float_only("normal_kernel_cpu", self.dtype)
    if std < 0:
        raise TorchRuntimeError(f"normal expects std >= 0.0, but found std {_g(std)}", code="invalid_argument")
    vals = normal_values(_gen("normal_", generator), self.shape, self.dtype, mean, std,
                         self.data.flags.c_contiguous)
    return record(P.NormalBackward0, _memory_order(self.data, vals), (self,))


def _bernoulli_inplace(self: Tensor, p=0.5, *, generator=None) -> Tensor:
    """bernoulli_(p): a double uniform < p per element; bernoulli_(Tensor p): p expanded to self, a double
    uniform (a float one for a p of another floating dtype than float64) < p (torch's two overloads,
    BernoulliBackward2 and BernoulliBackward1)."""
    if isinstance(p, Tensor):
        if not D.is_floating(p.dtype):
            raise TorchRuntimeError(f"\"bernoulli_tensor_cpu_p_\" not implemented for "
                                    f"'{D.SCALAR_TYPE_NAMES[p.dtype]}'", code="invalid_dtype",
                                    exception="NotImplementedError")
        from .shape import expand
        probs = expand(p, list(self.shape)).data  # torch's expand_inplace: its message when p does not fit
        if probs.size and not ((probs >= 0) & (probs <= 1)).all():
            raise TorchRuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this "
                                    "error message be improved?  If so, please report an enhancement request to "
                                    "PyTorch.)", code="invalid_argument")
        g = _gen("bernoulli_", generator)
        u = (uniform_double if p.dtype == D.FLOAT64 else uniform_float)(g, self.numel())
        keep = _memory_order(self.data, u.reshape(self.shape)) < probs
        return record(P.BernoulliBackward1, keep.astype(self.data.dtype), (self, p))
    p = _number("bernoulli_", "p", p)
    if not 0.0 <= p <= 1.0:
        raise TorchRuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={_g(p)}", code="invalid_argument")
    keep = uniform_double(_gen("bernoulli_", generator), self.numel()) < p
    return record(P.BernoulliBackward2, _memory_order(self.data, keep.astype(self.data.dtype)).reshape(self.shape),
                  (self,))


#: random_()'s modulus per dtype: an integer type's max + 1, a floating type's 2**digits + 1 (its consecutive
#: integers); int64 and float64 draw two words, the others one
_RANDOM_SPAN = {D.INT64: 1 << 63, D.INT32: 1 << 31, D.INT16: 1 << 15, D.INT8: 1 << 7, D.UINT8: 1 << 8,
                D.FLOAT64: (1 << 53) + 1, D.FLOAT32: (1 << 24) + 1, D.FLOAT16: (1 << 11) + 1,
                D.BFLOAT16: (1 << 8) + 1}


#: a floating dtype's significand digits: it holds every integer of magnitude up to 2**digits
_DIGITS = {D.FLOAT64: 53, D.FLOAT32: 24, D.FLOAT16: 11, D.BFLOAT16: 8}


def _as_dtype_int(v: int, dtype: str) -> int:
    """int64 -> dtype -> int64 as a C cast does it (a value the dtype cannot hold, inf, reads as int64's minimum)."""
    x = K.astype(np.array([v], np.int64), NP[dtype])[0]
    return int(x) if np.isfinite(x) else -(1 << 63)


def _float_bounds(dtype: str, low: int, high: int) -> tuple[int, int]:
    """random_(from, to) (and randint) into a floating dtype, as torch bounds it: a ``from`` whose from + 1 the
    dtype rounds below it moves up, a ``to`` whose to - 1 it rounds to ``to`` or above moves down (by the dtype's
    spacing there); both must fit the dtype's range; past 2**digits a UserWarning says the draws are not
    uniform over the integers."""
    digits = _DIGITS[dtype]
    up = _as_dtype_int(low + 1, dtype)
    if up < low:
        low = up + (1 << (abs(low + 1).bit_length() - 1 - digits + 1))
    down = _as_dtype_int(high - 1, dtype)
    if down >= high:
        high = down - (1 << (abs(high - 1).bit_length() - 1 - digits + 1))
    if low >= high:
        raise TorchRuntimeError(f"random_ expects 'from' casted to dtype to be less than 'to' casted to dtype, but "
                                f"got from={low} >= to={high}", code="invalid_argument")
    name, top = D.TYPE_META_NAMES[dtype], float(D.finfo(NP[dtype]).max)
    for what, v in (("from", low), ("to - 1", high - 1)):
        if not -top <= v <= top:
            raise TorchRuntimeError(f"{what} is out of bounds for {name}", code="invalid_argument")
    for what, v in (("from", low), ("to - 1", high - 1)):
        if not -(1 << digits) <= v <= 1 << digits:
            emit_warning(f"{what} is out of bounds [-(2^{digits}), 2^{digits}]. Due to precision limitations {name} "
                         f"can support discrete uniform distribution only within this range. This warning will "
                         f"become an error in version 1.7 release, please fix the code in advance")
    return low, high


def _random(self: Tensor, from_=None, to=None, *, generator=None) -> Tensor:
    """random_(): torch's uniform_int_distribution (a word modulo ``_RANDOM_SPAN``, bool: a word's low bit);
    random_(to), random_(from, to): random_from_to."""
    prim = P.RandomBackward1 if from_ is not None and to is None else P.RandomBackward0
    if from_ is not None and to is None:
        from_, to = 0, from_
    g = _gen("random_", generator)
    n, dt = self.numel(), self.data.dtype
    if to is None:
        if self.dtype == D.BOOL:
            vals = (g.random(n) & np.uint64(1)).astype(bool)
        else:
            words = g.random64(n) if self.dtype in (D.INT64, D.FLOAT64) else g.random(n)
            vals = K.astype(words % np.uint64(_RANDOM_SPAN[self.dtype]), dt)
        prim = P.RandomBackward2
    else:
        low = _int("random_", "from", from_, 1)
        high = _int("random_", "to", to, 2)
        if low >= high:
            raise TorchRuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}",
                                    code="invalid_argument")
        if self.dtype == D.BOOL and (low < 0 or high - 1 > 1):
            raise TorchRuntimeError(("from is out of bounds for bool" if low < 0 else "to - 1 is out of bounds for "
                                     "bool"), code="invalid_argument")
        if D.is_floating(self.dtype):
            low, high = _float_bounds(self.dtype, low, high)
        vals = K.astype(integer_values(g, n, low, high), dt)
    return record(prim, _memory_order(self.data, vals.reshape(self.shape)), (self,))


def _exponential(self: Tensor, lambd=1.0, *, generator=None) -> Tensor:
    lambd = _number("exponential_", "lambd", lambd)
    _float_only("exponential_cpu", self.dtype)
    if not lambd > 0:
        raise TorchRuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={_g(lambd)}",
                                code="invalid_argument")
    vals = exponential_values(_gen("exponential_", generator), self.numel(), self.dtype, lambd)
    return record(P.ExponentialBackward0, _memory_order(self.data, vals.reshape(self.shape)), (self,))


def _exponential(self: Tensor, lambd=1.0, *, generator=None) -> Tensor:
    lambd = _number("exponential_", "lambd", lambd)
    _float_only("exponential_cpu", self.dtype)
    if not lambd > 0:
        raise TorchRuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={_g(lambd)}",
                                code="invalid_argument")
    vals = exponential_values(_gen("exponential_", generator), self.numel(), self.dtype, lambd)
    return record(P.ExponentialBackward0, _memory_order(self.data, vals.reshape(self.shape)), (self,))


def _g(v: float) -> str:
    """A double as torch's messages print it (%g)."""
    return f"{v:g}"


for _prim in ("UniformBackward0", "NormalBackward0", "BernoulliBackward2", "BernoulliBackward0", "RandomBackward0",
              "RandomBackward1", "RandomBackward2", "ExponentialBackward0"):
    vjp(_prim, inputs=("self",), jvp=zero_jvp)(lambda ctx, grad: (E.zeros_like(grad),))

uniform_ = _make("uniform_", _uniform, (P.UniformBackward0,),
                 doc="Tensor.uniform_(from=0, to=1, *, generator=None): torch's uniform values, in place.")
normal_ = _make("normal_", _normal, (P.NormalBackward0,),
                doc="Tensor.normal_(mean=0, std=1, *, generator=None): torch's normal values, in place.")
random_ = _make("random_", _random, (P.RandomBackward0, P.RandomBackward1, P.RandomBackward2),
                doc="Tensor.random_(from=0, to=None, *, generator=None): torch's integers in place, any dtype.")
exponential_ = _make("exponential_", _exponential, (P.ExponentialBackward0,),
                     doc="Tensor.exponential_(lambd=1, *, generator=None): -log1p(-u) / lambd of double uniforms.")
bernoulli_ = _make("bernoulli_", _bernoulli_inplace, (P.BernoulliBackward2, P.BernoulliBackward1), ("self", "p"),
                   doc="Tensor.bernoulli_(p=0.5, *, generator=None): 1 with probability p (a float or a tensor), "
                       "in place.",
                   overloads={"method": ("(Tensor p, *, torch.Generator generator = None)",
                                         "(float p = 0.5, *, torch.Generator generator = None)")})


vjp("BernoulliBackward1", inputs=("self", "p"))(lambda ctx, grad: (E.zeros_like(grad), E.zeros_like(grad)))
jvp(P.BernoulliBackward1)(zero_jvp)
vjp("NormalBackward1", inputs=("mean",), jvp=zero_jvp)(lambda ctx, grad: (E.zeros_like(grad),))
vjp("NormalBackward2", inputs=("std",), jvp=zero_jvp)(lambda ctx, grad: (E.zeros_like(grad),))
vjp("NormalBackward3", inputs=("mean", "std"), jvp=zero_jvp)(lambda ctx, grad: (E.zeros_like(grad), E.zeros_like(grad)))


@op("normal",
    parsed=False,
    tensors=("mean", "std"), grad_fns=(P.NormalBackward1, P.NormalBackward2, P.NormalBackward3),
    method=False)
def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, requires_grad=False):
    """torch.normal(mean, std, size=None, *, generator=None): numbers and a size (``normal_`` on a new tensor),
    or tensors: ``normal_(0, std)`` then ``+ mean`` (a tensor mean), ``normal_(0, 1) * std + mean`` (a tensor
    std), as torch computes them; the gradient is zero (torch's NormalBackward1/2/3)."""
    g = _gen("normal", generator)
    mt, st = isinstance(mean, Tensor), isinstance(std, Tensor)
    for name, v in (("mean", mean), ("std", std)):
        if not isinstance(v, Tensor) and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise TorchTypeError(f"normal(): argument '{name}' must be Tensor or float, not {type(v).__name__}")
    if not mt and not st:
        if size is None:
            raise TorchTypeError("normal() received an invalid combination of arguments: two numbers need a size")
        m, sd = _number("normal", "mean", mean), _number("normal", "std", std)
        d = _dtype(dtype)
        shape = _size((tuple(size) if isinstance(size, (list, tuple)) else size,), "normal", itemsize=8)
        _float_only("normal_kernel_cpu", d)
        _check_requires_grad(d, requires_grad)
        if sd < 0:
            raise TorchRuntimeError(f"normal expects std >= 0.0, but found std {_g(sd)}", code="invalid_argument")
        return _leaf(normal_values(g, shape, d, m, sd), requires_grad)
    if st and std.data.size and (std.data < 0).any():
        raise TorchRuntimeError("normal expects all elements of std >= 0.0", code="invalid_argument")
    if mt and not st:
        sd = _number("normal", "std", std)
        if sd < 0:
            raise TorchRuntimeError(f"normal expects std >= 0.0, but found std {_g(sd)}", code="invalid_argument")
        _float_only("normal_kernel_cpu", mean.dtype)
        vals = normal_values(g, mean.shape, mean.dtype, 0.0, sd) + mean.data
        return record(P.NormalBackward1, vals, (mean,))
    _float_only("normal_kernel_cpu", std.dtype)
    if mt:
        from .common import broadcast_shapes
        shape = broadcast_shapes(mean.data.shape, std.data.shape)
        vals = normal_values(g, shape, std.dtype, 0.0, 1.0) * std.data + mean.data
        return record(P.NormalBackward3, vals.astype(std.data.dtype), (mean, std))
    m = NP[std.dtype].type(_number("normal", "mean", mean))
    return record(P.NormalBackward2, normal_values(g, std.shape, std.dtype, 0.0, 1.0) * std.data + m, (std,))


@op("bernoulli", tensors=("input",))
def bernoulli(input, *, generator=None):
    """torch.bernoulli(input, *, generator=None): 1 where a uniform draw falls below input's probability (a
    double draw for float64 probabilities, a float one for the others), in input's dtype."""
    input = require_tensor(input, "input", "bernoulli")
    _float_only("bernoulli_tensor_cpu_p_", input.dtype)
    p = input.data
    if p.size and not ((p >= 0) & (p <= 1)).all():
        raise TorchRuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error "
                                "message be improved?  If so, please report an enhancement request to PyTorch.)",
                                code="invalid_argument")
    g = _gen("bernoulli", generator)
    u = (uniform_double if input.dtype == D.FLOAT64 else uniform_float)(g, p.size)
    return record(P.BernoulliBackward0, (u < p.reshape(-1)).astype(p.dtype).reshape(p.shape), (input,))


@op("multinomial", tensors=("input",), differentiable=False)
def multinomial(input, num_samples, replacement=False, *, generator=None):
    """torch.multinomial(input, num_samples, replacement=False, *, generator=None): category indices (int64).
    With replacement, a double uniform per sample searched in the row's float cumulative distribution;
    without (or for one sample), torch's exponential trick: argmax/topk of ``input / Exp(1)``."""
    input = require_tensor(input, "input", "multinomial")
    n = _int("multinomial", "num_samples", num_samples, 2)
    if not D.is_floating(input.dtype):
        raise TorchRuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                                f"{D.SCALAR_TYPE_NAMES[input.dtype]}", code="invalid_dtype")
    if input.data.ndim not in (1, 2):
        raise TorchRuntimeError("prob_dist must be 1 or 2 dim", code="invalid_argument")
    cats = input.data.shape[-1]
    if not replacement and n > cats:
        raise TorchRuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement",
                                code="invalid_argument")
    if n <= 0:
        raise TorchRuntimeError("cannot sample n_sample <= 0 samples", code="invalid_argument")
    rows = input.data.reshape(-1, cats)
    if rows.size and (not np.isfinite(rows).all() or (rows < 0).any()):
        raise TorchRuntimeError("probability tensor contains either `inf`, `nan` or element < 0",
                                code="invalid_argument")
    if rows.size == 0 or (rows.sum(axis=1, dtype=_F64) <= 0).any():
        raise TorchRuntimeError("invalid multinomial distribution (sum of probabilities <= 0)",
                                code="invalid_argument")
    check_numel((rows.shape[0], n), itemsize=8)  # the result, before drawing (num_samples is the caller's)
    g = _gen("multinomial", generator)
    dt = rows.dtype
    if replacement and n > 1:
        out = np.empty((rows.shape[0], n), np.int64)
        for i, row in enumerate(rows):
            cum = np.cumsum(row, dtype=dt)
            cum = (cum / cum[-1]).astype(dt)
            cum[-1] = 1
            out[i] = np.searchsorted(cum.astype(_F64), uniform_double(g, n), side="left")
    else:
        q = exponential_values(g, rows.size, input.dtype).reshape(rows.shape)
        q = (rows / q).astype(dt)
        if n == 1:
            out = np.argmax(q, axis=1)[:, None]
        else:
            out = np.argsort(-q, axis=1, kind="stable")[:, :n]
    out = out.astype(np.int64)
    return Tensor(out.reshape(n) if input.data.ndim == 1 else out)

