"""F.scaled_dot_product_attention, by the route torch's CPU build takes:

* the fused kernel (ScaledDotProductFlashAttentionForCpuBackward0) for 4-d query/key/value of one head size and
  one batch (heads may differ only with ``enable_gqa``) and no dropout: one node over query, key and value whose
  backward is first order only (a gradient made under create_graph carries torch's NotImplemented node) and which
  has no forward-mode formula, as torch's;
* otherwise torch's math composition, op for op: query and the transposed key each scaled by sqrt(scale)
  (MulBackward1), a matmul, the mask added (a bool or causal mask becomes 0 / -inf first), ``_safe_softmax``
  (SafeSoftmaxBackward0: a row of -inf gives zeros, not NaN), dropout, and a matmul with value.

The fused kernel's values agree with the composition's to rounding (torch's own two routes differ by about
1e-16 in float64); they are not bit for bit torch's, whose kernel blocks and rescales its sums.
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


def _flash(query, key, value, key_r, value_r, fmask, is_causal, scale) -> Tensor:
    mask = None if fmask is None else fmask.data
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
        kr, vr = (_repeat_heads(k, rep), _repeat_heads(v, rep)) if rep > 1 else (k, v)
        mask = None if ctx.attn_mask is None else ctx.attn_mask.data
        scores = np.matmul(q.data, np.swapaxes(kr.data, -1, -2)) * q.data.dtype.type(ctx.scale)
        if mask is not None:
            scores = scores + mask
        with np.errstate(invalid="ignore", over="ignore"):
            p = np.exp(scores - ctx.logsumexp.data[..., None])
        p = np.where(np.isnan(p), 0, p).astype(q.data.dtype)
        g = grad.data
        dv = np.matmul(np.swapaxes(p, -1, -2), g)
        dp = np.matmul(g, np.swapaxes(vr.data, -1, -2))
        ds = p * (dp - np.sum(dp * p, axis=-1, keepdims=True))
        dq = np.matmul(ds, kr.data) * q.data.dtype.type(ctx.scale)
        dk = np.matmul(np.swapaxes(ds, -1, -2), q.data) * q.data.dtype.type(ctx.scale)
        if rep > 1:  # the repeated heads' gradients summed back onto their head
            dk = dk.reshape(dk.shape[0], -1, rep, *dk.shape[2:]).sum(axis=2)
            dv = dv.reshape(dv.shape[0], -1, rep, *dv.shape[2:]).sum(axis=2)
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
