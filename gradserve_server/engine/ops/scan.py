"""Scans beside cumsum: cumprod and logcumsumexp, with derivatives.yaml's VJPs in engine ops."""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import TorchRuntimeError
from ..grad_mode import _grad_enabled
from ..registry import OPS, P, declared_failure, jvp, op, record, vjp
from ..tensor import Tensor
from .common import DIM_FIRST, NP, require_tensor, row_major, saved_int, signed_int, wrap_dim
from .elementwise import abs as abs_
from .elementwise import exp, gt, log, lt, where
from .reduction import _acc_dtype, cumsum, flip
from .reduction import sum as sum_
from .shape import transpose, unsqueeze


@op("cumprod", shape="same(self)", promotion="long", tensors=("self",))
def cumprod(self, dim, dtype=None):
    """torch.cumprod(input, dim, dtype=None); saves dim, self and the result."""
    self = require_tensor(self, "input", "cumprod")
    nd = self.data.ndim
    d = wrap_dim(dim, nd)
    out_dt = NP[_acc_dtype(self, dtype)]
    out = np.cumprod(self.data, axis=d, dtype=out_dt) if nd else self.data.astype(out_dt).copy()
    return record(P.CumprodBackward0, row_major(out), (self,),
                  {"dim": saved_int(dim), "result": "result", "self": self})


def _rev_cumsum(x: Tensor, d: int) -> Tensor:
    return flip(cumsum(flip(x, [d]), d), [d])


@vjp("CumprodBackward0", inputs=("self",), saves=("dim", "result", "self"))
def _(ctx, grad):
    x, d = ctx.self, signed_int(ctx.dim)
    if x.data.size <= 1 or x.shape[d] == 1:
        return grad,
    if not np.any(x.data == 0):
        return _rev_cumsum(grad * ctx.result, d) / x,
    if _grad_enabled.get():
        return _cumprod_backward_graph(grad, x, d),
    # with zeros: dL/dx_k = sum_{j >= k} g_j prod_{i <= j, i != k} x_i, over an (n, n) table per position
    last = x.data.ndim - 1
    xt, gt_ = transpose(x, d, last), transpose(grad, d, last)
    n = x.shape[d]
    eye = Tensor(np.eye(n, dtype=bool))
    table = where(eye, 1.0, unsqueeze(xt, -2))                    # [..., k, i]: x_i with x_k -> 1
    upper = Tensor(np.triu(np.ones((n, n), x.data.dtype)))          # j >= k
    g = sum_(cumprod(table, -1) * upper * unsqueeze(gt_, -2), -1)
    return transpose(g, d, last),


def _cumprod_backward_graph(grad: Tensor, x: Tensor, d: int) -> Tensor:
    """FunctionsManual cumprod_backward's O(n^2) form for a double backward through zeros: each slice k of the
    gradient is sum_{j >= k} grad_j prod_{i <= j, i != k} x_i, copied into a zeros tensor (CopySlices)."""
    from .creation import ones, zeros
    from .reduction import prod
    from .shape import cat, expand_as, narrow, select
    n = x.shape[d]
    out = zeros(*x.shape, dtype=grad.dtype)
    ones_shape = list(x.shape)
    ones_shape[d] = 1
    one = ones(*ones_shape, dtype=grad.dtype)
    for k in range(n):
        if k == 0:
            omitted = cat([one, cumprod(narrow(x, d, 1, n - 1), d)], d)
        elif k == n - 1:
            omitted = prod(narrow(x, d, 0, k), d, True)
        else:
            until_k = prod(narrow(x, d, 0, k), d, True)
            after = cumprod(narrow(x, d, k + 1, n - k - 1), d)
            omitted = cat([until_k, expand_as(until_k, after) * after], d)
        OPS["copy_"].fn(select(out, d, k), sum_(narrow(grad, d, k, n - k) * omitted, d))
    return out


@jvp()
def _(ctx, self_t):
    x, d = ctx.self, signed_int(ctx.dim)
    if x.data.ndim == 0:
        return self_t
    if not np.any(x.data == 0):
        return cumsum(self_t / x, d) * ctx.result
    # with zeros: dr_j = sum_{k <= j} t_k prod_{i <= j, i != k} x_i
    last = x.data.ndim - 1
    xt, tt = transpose(x, d, last), transpose(self_t, d, last)
    n = x.shape[d]
    table = where(Tensor(np.eye(n, dtype=bool)), 1.0, unsqueeze(xt, -2))       # [..., k, j]
    upper = Tensor(np.triu(np.ones((n, n), x.data.dtype)))                      # j >= k
    out = sum_(cumprod(table, -1) * upper * unsqueeze(tt, -1), -2)
    return transpose(out, d, last)


@op("logcumsumexp", shape="same(self)", promotion=(
    "same | "
    'integral: NotImplementedError: "logcumsumexp_out_cpu" not implemented for \'{dtype}\''),
    checks=(DIM_FIRST,), tensors=("self",))
def logcumsumexp(self, dim):
    """torch.logcumsumexp(input, dim): log(cumsum(exp(input))) computed stably; saves dim, self, result."""
    self = require_tensor(self, "input", "logcumsumexp")
    if not D.is_floating(self.dtype):
        raise declared_failure("logcumsumexp", self=self, dim=dim) or TorchRuntimeError(
            f"\"logcumsumexp_out_cpu\" not implemented for '{D.SCALAR_TYPE_NAMES[self.dtype]}'",
            code="invalid_dtype", exception="NotImplementedError")
    nd = self.data.ndim
    d = wrap_dim(dim, nd)
    x = self.data
    if nd and x.shape[d]:
        out = np.logaddexp.accumulate(x, axis=d)
    else:
        out = x.copy()
    return record(P.LogcumsumexpBackward0, row_major(np.asarray(out, x.dtype)), (self,),
                  {"dim": saved_int(dim), "result": "result", "self": self})


@vjp("LogcumsumexpBackward0", inputs=("self",), saves=("dim", "result", "self"))
def _(ctx, grad):
    x, r, d = ctx.self, ctx.result, signed_int(ctx.dim)
    if x.data.ndim == 0:
        return grad,
    # FunctionsManual logcumsumexp_backward: positive and negative parts of grad in log space
    lowest = float(D.finfo(grad.data.dtype).min)
    log_abs = log(abs_(grad))
    pos = where(gt(grad, 0), log_abs, lowest)
    neg = where(lt(grad, 0), log_abs, lowest)

    def rev_lcse(v):
        return flip(logcumsumexp(flip(v, [d]), d), [d])

    return exp(rev_lcse(pos - r) + x) - exp(rev_lcse(neg - r) + x),


@jvp()
def _(ctx, self_t):
    # FunctionsManual logcumsumexp_jvp: cumsum(e t) / (cumsum(e) + 1e-13), e = exp(x - max along dim): the
    # 1e-13 keeps a run of -inf inputs at 0, and shifts every quotient by a relative 1e-13 / cumsum(e)
    x, d = ctx.self, signed_int(ctx.dim)
    if x.data.ndim == 0:
        return self_t
    with np.errstate(invalid="ignore"):
        shift = np.max(x.data, axis=d, keepdims=True) if x.data.size else np.zeros_like(x.data)
    shift = Tensor(np.where(np.isfinite(shift), shift, 0).astype(x.data.dtype))
    e = exp(x - shift)
    return cumsum(e * self_t, d) / (cumsum(e, d) + 1e-13)
