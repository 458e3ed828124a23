"""F.scaled_dot_product_attention, by the route torch's CPU build takes:

* the fused kernel (ScaledDotProductFlashAttentionForCpuBackward0) for 4-d query/key/value of one head size and
  one batch (heads may differ only with ``enable_gqa``) and no dropout: one node over query, key and value whose
  backward is first order only (a gradient made under create_graph carries torch's NotImplemented node) and which
  has no forward-mode formula, as torch's;
* otherwise torch's math composition, op for op: query and the transposed key each scaled by sqrt(scale)
  (MulBackward1), a matmul, the mask added (a bool or causal mask becomes 0 / -inf first), ``_safe_softmax``
  (SafeSoftmaxBackward0: a row of -inf gives zeros, not NaN), dropout, and a matmul with value.

The fused kernel's float32/float64 values agree with the composition's to rounding (torch's own two routes
differ by about 1e-16 in float64); they are not bit for bit torch's, whose kernel blocks and rescales its sums.
For float16/bfloat16 the engine follows that kernel's blocked float32 arithmetic (``_flash_half`` and its
backward), which gives torch's bits but for a rare float32 rounding-order difference.
"""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes as D
from ..errors import TorchRuntimeError
from ..grad_mode import _grad_enabled, no_grad
from ..registry import P, jvp, no_jvp, op, record, vjp
from ..tensor import Tensor
from .backward import softmax_backward_data
from .common import require_tensor
from .elementwise import _TYPEMETA, add, mul_number
from .linalg import matmul
from .nn import _softmax_kernel, dropout
from .reduction import sum as sum_
from .shape import expand, reshape, to, transpose, unsqueeze


@op("_safe_softmax", tensors=("self",), method=False)
def _safe_softmax(self, dim):
    """torch._safe_softmax(input, dim): softmax, with zeros for a slice that is -inf throughout."""
    self = require_tensor(self)
    x = self.data
    d = dim % x.ndim if x.ndim else 0
    out = _softmax_kernel(x, d, x.shape)
    if x.size:
        dead = np.all(np.isneginf(x), axis=d, keepdims=True)
        if dead.any():
            out = np.where(dead, x.dtype.type(0), out)
    return record(P.SafeSoftmaxBackward0, np.asarray(out, x.dtype), (self,), {"dim": d, "result": "result"})


@vjp("SafeSoftmaxBackward0", inputs=("self",), saves=("dim", "result"))
def _(ctx, grad):
    return softmax_backward_data(grad, ctx.result, ctx.dim),


@jvp()
def _(ctx, self_t):
    r = ctx.result
    return r * (self_t - sum_(r * self_t, ctx.dim, keepdim=True))


def _float_mask(mask: Tensor | None, is_causal: bool, L: int, S: int, dtype) -> Tensor | None:
    """torch's convert_boolean_attn_mask: a bool mask (or the causal one) as 0 where kept, -inf elsewhere."""
    if is_causal:
        keep = np.tril(np.ones((L, S), np.bool_))
        return Tensor(np.where(keep, dtype.type(0), dtype.type(-np.inf)).astype(dtype))
    if mask is None:
        return None
    if mask.data.dtype == np.bool_:
        return Tensor(np.where(mask.data, dtype.type(0), dtype.type(-np.inf)).astype(dtype))
    return mask


def _check(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, dropout_p, is_causal) -> None:
    if not (query.dtype == key.dtype == value.dtype):
        n = _TYPEMETA
        raise TorchRuntimeError(f"Expected query, key, and value to have the same dtype, but got query.dtype: "
                                f"{n[query.dtype]} key.dtype: {n[key.dtype]} and value.dtype: {n[value.dtype]} "
                                "instead.", code="dtype_mismatch")
    if query.data.dtype.kind not in "fV":
        raise TorchRuntimeError(f"Expected query, key, and value to be floating point, but got "
                                f"{D.SCALAR_TYPE_NAMES[query.dtype]}", code="invalid_dtype")
    if is_causal and mask is not None:
        raise TorchRuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when "
                                "is_causal=True", code="invalid_argument")
    if query.data.ndim < 2 or key.data.ndim < 2 or value.data.ndim < 2:
        raise TorchRuntimeError("scaled_dot_product_attention: query, key and value must have at least 2 "
                                "dimensions", code="shape_mismatch")


def _fused(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, dropout_p, enable_gqa) -> bool:
    """Whether torch's CPU build runs its fused (flash) kernel for these inputs."""
    q, k, v = query.data, key.data, value.data
    if mask is not None and mask.requires_grad:  # the fused kernel gives no gradient to a mask: torch's math route
        return False
    if not (q.ndim == k.ndim == v.ndim == 4) or dropout_p > 0:
        return False
    if not (q.shape[-1] == k.shape[-1] == v.shape[-1]):
        return False
    if not (q.shape[0] == k.shape[0] == v.shape[0]) or k.shape[1] != v.shape[1]:
        return False
    return q.shape[1] == k.shape[1] or (enable_gqa and q.shape[1] % k.shape[1] == 0)


@op("scaled_dot_product_attention", tensors=("query", "key", "value", "attn_mask"),
    grad_fns=(P.ScaledDotProductFlashAttentionForCpuBackward0, P.UnsafeViewBackward0, P.MmBackward0,
              P.ToCopyBackward0),
    method=False, family="nn")
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
    scale=None, enable_gqa=False): softmax(query @ key^T * scale + mask) @ value, scale 1/sqrt(E) by default."""
    query = require_tensor(query, "query", "scaled_dot_product_attention")
    key = require_tensor(key, "key", "scaled_dot_product_attention")
    value = require_tensor(value, "value", "scaled_dot_product_attention")
    mask = None if attn_mask is None else require_tensor(attn_mask, "attn_mask", "scaled_dot_product_attention")
    _check(query, key, value, mask, dropout_p, is_causal)
    s = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    L, S = query.shape[-2], key.shape[-2]
    fmask = _float_mask(mask, is_causal, L, S, query.data.dtype)
    if enable_gqa and query.data.ndim >= 3 and query.shape[-3] != key.shape[-3]:
        rep = query.shape[-3] // key.shape[-3]
        key_r, value_r = _repeat_heads(key, rep), _repeat_heads(value, rep)
    else:
        key_r, value_r = key, value
    if _fused(query, key, value, mask, dropout_p, enable_gqa):
        return _flash(query, key, value, key_r, value_r, fmask, bool(is_causal), s)
    half = query.dtype if D.is_half(query.data.dtype) else None
    if half:  # torch's math route computes float16/bfloat16 in float32 and converts the result back
        query, key_r, value_r = (to(t, D.FLOAT32) for t in (query, key_r, value_r))
        if fmask is not None and D.is_half(fmask.data.dtype):
            fmask = to(fmask, D.FLOAT32)
    sf = math.sqrt(s)
    attn = matmul(mul_number(query, sf), mul_number(transpose(key_r, -2, -1), sf))
    if fmask is not None:
        attn = add(attn, fmask)
    attn = _safe_softmax(attn, -1)
    if dropout_p > 0:
        attn = dropout(attn, dropout_p, True)
    out = matmul(attn, value_r)
    return to(out, half) if half else out


def _repeat_heads(t: Tensor, rep: int) -> Tensor:
    """Each head repeated rep times along dim -3 (torch's repeat_interleave for grouped-query attention)."""
    shape = t.data.shape
    u = unsqueeze(t, -3)
    target = (*shape[:-3], shape[-3], rep, *shape[-2:])
    return reshape(expand(u, target), (*shape[:-3], shape[-3] * rep, *shape[-2:]))


def _np_attention(q, k, v, mask, scale):
    """(output, logsumexp) of softmax(q k^T * scale + mask) v in numpy."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        scores = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(scale)
        if mask is not None:
            scores = scores + mask
        m = np.max(scores, axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, q.dtype.type(0))
        e = np.exp(scores - m)
        tot = np.sum(e, axis=-1, keepdims=True)
        p = np.where(tot > 0, e / np.where(tot > 0, tot, 1), q.dtype.type(0))
        lse = (np.log(tot) + m)[..., 0]
        return np.matmul(p, v).astype(q.dtype), lse.astype(q.dtype)


# ----- float16/bfloat16: torch's blocked CPU flash kernel ------------------------------------------------------
# torch's fused kernel for a reduced-precision type computes in float32 over blocks: query rows in blocks of 32
# (64 from 192 rows, 256 from 768), keys in blocks of 512; per block the scores q @ k^T (float32 from the half
# inputs), times the scale, plus the mask, a running row max and sum (online softmax: the earlier blocks' sum and
# output rescaled by exp(old max - new max)), the probabilities rounded to the type before they multiply value,
# and the output divided by the row sum and rounded once. Its backward recomputes the probabilities from the
# saved float32 logsumexp and accumulates each gradient block by block in the type (a gemm: float32 sums, the
# accumulated result rounded per block). Causal attention skips the key blocks past a query block's last row.

_F32 = np.dtype(np.float32)


def _splits(L: int) -> tuple[int, int]:
    """(query block, key block) sizes of torch's CPU flash kernel for L query rows."""
    return (256 if L >= 768 else 64 if L >= 192 else 32), 512


def _exp32(x: np.ndarray) -> np.ndarray:
    """float32 exp, correctly rounded (libm's expf, and near enough SLEEF's, which torch's backward uses)."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return np.exp(x.astype(np.float64)).astype(_F32)


_F = np.float32
#: the fast exp's float32 constants: a cubic fitted to 2**f - 1 - f on [0, 1) (lowest degree first), log2(e)
#: as a float32 bit pattern, and float32's range in natural logs (ln of the smallest normal, of the largest)
_EXP2_POLY = tuple(_F(c) for c in (1.0703434948458272e-4, 0.30354260500649682, -0.22433836478672356,
                                   -0.079204240219773236))
_LOG2E, _LN_MIN, _LN_MAX = (np.array(b, np.uint32).view(_F)[()] for b in (0x3FB8AA3B, 0xC2AEAC50, 0x42B17218))


def _fexp(x: np.ndarray) -> np.ndarray:
    """torch's fast float32 exp for results bound for float16/bfloat16 (``fexp_u20``), which its flash kernel
    applies to whole vectors of 16 scores: t = x log2(e) in float32, t minus the cubic of its fractional part
    (fused multiply-adds), then the float whose bits are trunc(2**23 t + 127 * 2**23); 0 below ln(FLT_MIN),
    inf above ln(FLT_MAX). Within about 1e-4 of exp: one float16 ulp at most."""
    from .random import _fma32  # (the float32 fused multiply-add, written once)

    x = x.astype(_F, copy=False)
    t = x * _LOG2E
    f = t - np.floor(t)
    c0, c1, c2, c3 = _EXP2_POLY
    t = t - _fma32(f, _fma32(f, _fma32(f, c3, c2), c1), c0)
    with np.errstate(invalid="ignore"):
        bits = np.trunc(_fma32(_F(2 ** 23), t, _F(127 * 2 ** 23))).astype(np.int64)
    out = (bits & 0xFFFFFFFF).astype(np.uint32).view(_F)
    return np.where(x < _LN_MIN, _F(0), np.where(x > _LN_MAX, _F(np.inf), out))


def _exp_sum(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(exp(z), its row sums) as torch's fused exp-and-sum kernel gives them for rows of float32 ``z``: whole
    vectors of 16 by the fast exp (``_fexp``), summed lane by lane, the lanes added pairwise (8 apart, then 4,
    2, 1), then the rest one by one with libm's exp."""
    n = z.shape[-1]
    full = n // 16 * 16
    e = np.empty_like(z)
    e[..., :full] = _fexp(z[..., :full])
    e[..., full:] = _exp32(z[..., full:])
    lanes = np.zeros((*z.shape[:-1], 16), _F)
    for c in range(0, full, 16):
        lanes = lanes + e[..., c:c + 16]
    for half_width in (8, 4, 2, 1):
        lanes = lanes[..., :half_width] + lanes[..., half_width:2 * half_width]
    total = lanes[..., 0]
    for i in range(full, n):
        total = total + e[..., i]
    return e, total


def _causal_block(a: np.ndarray, m: int, n: int, fill) -> None:
    """In place: the entries of a (..., rows m.., keys n..) block past each query row's last key set to fill."""
    rows, cols = a.shape[-2:]
    hide = np.arange(n, n + cols)[None, :] > np.arange(m, m + rows)[:, None]
    a[..., hide] = fill


def _mask_block(mask, m: int, qb: int, n: int, kb: int):
    if mask is None:
        return None
    full = np.broadcast_to(mask, (*mask.shape[:-2], *mask.shape[-2:]))
    return full[..., m:m + qb, n:n + kb].astype(_F32)


def _flash_half(q, k, v, mask, is_causal: bool, scale: float):
    """(output in q's type, float32 logsumexp) as torch's CPU flash kernel computes them for float16/bfloat16."""
    half = q.dtype
    qf, kf, vf = (a.astype(_F32) for a in (q, k, v))
    sc = _F32.type(scale)
    L, S, E = q.shape[-2], k.shape[-2], v.shape[-1]
    qs, ks = _splits(L)
    out = np.empty((*q.shape[:-1], E), half)
    lse = np.empty(q.shape[:-1], _F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for m in range(0, L, qs):
            qb = min(qs, L - m)
            mx = np.full((*q.shape[:-2], qb), -np.inf, _F32)
            sm = np.zeros_like(mx)
            dst = np.zeros((*q.shape[:-2], qb, E), _F32)
            keys = min(m + qb, S) if is_causal else S
            for n in range(0, keys, ks):
                kb = min(ks, S - n)
                qk = np.matmul(qf[..., m:m + qb, :], np.swapaxes(kf[..., n:n + kb, :], -1, -2))
                if is_causal and keys - n <= ks:
                    _causal_block(qk, m, n, -np.inf)
                mb = _mask_block(mask, m, qb, n, kb)
                qk = qk * sc if mb is None else qk * sc + mb
                tmax = np.maximum(mx, qk.max(axis=-1))
                live = tmax != -np.inf
                e, tsum = _exp_sum(qk - np.where(live, tmax, 0)[..., None])
                e = np.where(live[..., None], e, _F32.type(0))
                rescale = np.where(live, _exp32(mx - np.where(live, tmax, 0)), _F32.type(1))
                sm = np.where(live, tsum + rescale * sm, sm)
                mx = np.where(live, tmax, mx)
                dst = dst * rescale[..., None] if n > 0 else dst
                dst = np.matmul(e.astype(half).astype(_F32), vf[..., n:n + kb, :]) + dst
            mx = np.where(mx == -np.inf, _F32.type(0), mx)
            sm = np.where(sm == 0, _F32.type(1), sm)
            out[..., m:m + qb, :] = (dst * (_F32.type(1) / sm)[..., None]).astype(half)
            lse[..., m:m + qb] = mx + np.log(sm)
    return out, lse


def _row_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row sums of a * b (float32) in the order torch's reduced-precision map-reduce adds them: one by one for
    rows shorter than 32; longer rows in two accumulators of 16 lanes over chunks of 32 (a partial last chunk
    adding into the first lanes), the two added, then the lanes pairwise (8 apart, 4, 2, 1)."""
    p = a * b
    n = p.shape[-1]
    if n < 32:
        total = p[..., 0].copy() if n else np.zeros(p.shape[:-1], _F32)
        for i in range(1, n):
            total = total + p[..., i]
        return total
    full = n // 32 * 32
    acc = p[..., :32].copy()
    for c in range(32, full, 32):
        acc = acc + p[..., c:c + 32]
    rest = n - full
    if rest:
        acc[..., :rest] = acc[..., :rest] + p[..., full:]
    lanes = acc[..., :16] + acc[..., 16:]
    for half_width in (8, 4, 2, 1):
        lanes = lanes[..., :half_width] + lanes[..., half_width:2 * half_width]
    return lanes[..., 0]


def _flash_half_backward(q, k, v, g, out, lse, mask, is_causal: bool, scale: float):
    """(dq, dk, dv) in q's type as torch's CPU flash backward computes them for float16/bfloat16. ``k`` and ``v``
    may have fewer heads than ``q`` (grouped-query attention): each key head's gradient then takes the
    contributions of its query heads one after the other, rounded to the type after each, as torch's does."""
    half = q.dtype
    rep = q.shape[-3] // k.shape[-3]
    qf, kf, vf, gf = (a.astype(_F32) for a in (q, k, v, g))
    sc = _F32.type(scale)
    L, S = q.shape[-2], k.shape[-2]
    qs, ks = _splits(L)
    dq, dk, dv = (np.zeros(a.shape, half) for a in (q, k, v))
    dsum = _row_dot(gf, out.astype(_F32))
    heads = mask is not None and mask.ndim == 4 and mask.shape[-3] == q.shape[-3] > 1
    with np.errstate(invalid="ignore", over="ignore"):
        for r in range(rep):  # the query heads r, r + rep, ... of key heads 0, 1, ...
            hq = slice(r, None, rep)
            mr = mask[..., hq, :, :] if heads else mask
            for m in range(0, L, qs):
                qb = min(qs, L - m)
                rows = slice(m, m + qb)
                qh, gh = qf[..., hq, rows, :], gf[..., hq, rows, :]
                keys = min(m + qb, S) if is_causal else S
                for n in range(0, keys, ks):
                    kb = min(ks, S - n)
                    cols = slice(n, n + kb)
                    attn = np.matmul(qh, np.swapaxes(kf[..., cols, :], -1, -2)) * sc
                    mb = _mask_block(mr, m, qb, n, kb)
                    if mb is not None:
                        attn = attn + mb
                    attn = _exp32(attn - lse[..., hq, rows, None])
                    if is_causal and keys - n <= ks:
                        _causal_block(attn, m, n, 0)
                    attn = np.where(np.isnan(attn), _F32.type(0), attn)
                    dv[..., cols, :] = (np.matmul(np.swapaxes(attn.astype(half).astype(_F32), -1, -2), gh)
                                        + dv[..., cols, :].astype(_F32)).astype(half)
                    da = np.matmul(gh, np.swapaxes(vf[..., cols, :], -1, -2))
                    da = (attn * (da - dsum[..., hq, rows, None])).astype(half).astype(_F32)
                    dq[..., hq, rows, :] = (sc * np.matmul(da, kf[..., cols, :])
                                            + dq[..., hq, rows, :].astype(_F32)).astype(half)
                    dk[..., cols, :] = (sc * np.matmul(np.swapaxes(da, -1, -2), qh)
                                        + dk[..., cols, :].astype(_F32)).astype(half)
    return dq, dk, dv


def _flash(query, key, value, key_r, value_r, fmask, is_causal, scale) -> Tensor:
    mask = None if fmask is None else fmask.data
    if D.is_half(query.data.dtype):
        out, lse = _flash_half(query.data, key_r.data, value_r.data, mask, is_causal, scale)
    else:
        out, lse = _np_attention(query.data, key_r.data, value_r.data, mask, scale)
    return record(P.ScaledDotProductFlashAttentionForCpuBackward0, out, (query, key, value),
                  {"attn_mask": fmask, "dropout_p": 0.0, "is_causal": is_causal, "key": key,
                   "logsumexp": Tensor(lse), "output": "result", "query": query, "scale": scale, "value": value})


@vjp("ScaledDotProductFlashAttentionForCpuBackward0", inputs=("query", "key", "value"),
     saves=("attn_mask", "dropout_p", "is_causal", "key", "logsumexp", "output", "query", "scale", "value"))
def _(ctx, grad):
    q, k, v = ctx.query.detach(), ctx.key.detach(), ctx.value.detach()
    rep = q.shape[1] // k.shape[1]
    with no_grad():
        mask = None if ctx.attn_mask is None else ctx.attn_mask.data
        if D.is_half(q.data.dtype):  # (grouped heads: accumulated as torch's kernel does)
            dq, dk, dv = _flash_half_backward(q.data, k.data, v.data, np.asarray(grad.data, q.data.dtype),
                                              ctx.output.data, ctx.logsumexp.data, mask, ctx.is_causal, ctx.scale)
        else:
            kr, vr = (_repeat_heads(k, rep), _repeat_heads(v, rep)) if rep > 1 else (k, v)
            dq, dk, dv = _flash_backward(q.data, kr.data, vr.data, grad.data, ctx.logsumexp.data, mask, ctx.scale)
            if rep > 1:  # the repeated heads' gradients summed back onto their head
                dk, dv = (d.reshape(d.shape[0], -1, rep, *d.shape[2:]).sum(axis=2) for d in (dk, dv))
    return _flash_grads(ctx, grad, dq, dk, dv)


def _flash_backward(q, k, v, g, lse, mask, scale):
    """(dq, dk, dv) of the flash node for float32/float64: the softmax from the saved logsumexp, then its VJP."""
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(scale)
    if mask is not None:
        scores = scores + mask
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.exp(scores - lse[..., None])
    p = np.where(np.isnan(p), 0, p).astype(q.dtype)
    dv = np.matmul(np.swapaxes(p, -1, -2), g)
    dp = np.matmul(g, np.swapaxes(v, -1, -2))
    ds = p * (dp - np.sum(dp * p, axis=-1, keepdims=True))
    dq = np.matmul(ds, k) * q.dtype.type(scale)
    dk = np.matmul(np.swapaxes(ds, -1, -2), q) * q.dtype.type(scale)
    return dq, dk, dv


def _flash_grads(ctx, grad, dq, dk, dv) -> tuple:
    """The flash node's gradients as tensors (under create_graph: torch's node without a derivative)."""
    outs = []
    for arr, needed in ((dq, ctx.needs[0]), (dk, ctx.needs[1]), (dv, ctx.needs[2])):
        if not needed:
            outs.append(None)
        elif _grad_enabled.get():  # create_graph: torch's backward kernel has no derivative
            outs.append(record(P.NotImplemented, np.asarray(arr), (grad, ctx.query),
                               {"aten": "_scaled_dot_product_flash_attention_for_cpu_backward"}))
        else:
            outs.append(Tensor(np.asarray(arr)))
    return tuple(outs)


no_jvp(P.ScaledDotProductFlashAttentionForCpuBackward0, "_scaled_dot_product_flash_attention_for_cpu")
