"""Ops that answer questions about values rather than compute differentiable ones: all, any, count_nonzero,
isinf/isposinf/isneginf, isclose, allclose, nonzero, argsort and unique.

Their results are bool or int64 tensors (``allclose`` a Python bool) without a gradient, as torch's, except
``unique``: torch records a Unique2Backward0 / UniqueDimBackward0 node whose backward and forward mode raise
NotImplementedError, and so does the engine.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..errors import TorchRuntimeError
from ..grad_mode import set_grad_enabled
from ..registry import P, no_jvp, op, record, vjp
from ..tensor import Tensor
from .common import broadcast_shapes, require_tensor, wrap_dim, wrap_dims
from .reduction import sort


def _reduce_dims(self: Tensor, dim) -> tuple | None:
    if dim is None:
        return None
    return wrap_dims(dim, self.data.ndim)


def _logical_reduction(name: str, fn, self, dim, keepdim) -> Tensor:
    self = require_tensor(self)
    x = self.data
    dims = _reduce_dims(self, dim)
    if x.ndim == 0:
        out = fn(x != 0)
    else:
        out = fn(x != 0, axis=dims, keepdims=bool(keepdim))
    # torch keeps uint8 for uint8 inputs; the engine's dtypes are bool, int64 and floats: bool always
    return Tensor(np.asarray(out, dtype=np.bool_))


@op("all", tensors=("self",), differentiable=False)
def all(self, dim=None, keepdim=False):
    """torch.all(input, dim=None, keepdim=False): True where every element is non-zero (dim: int or tuple)."""
    return _logical_reduction("all", np.all, self, dim, keepdim)


@op("any", tensors=("self",), differentiable=False)
def any(self, dim=None, keepdim=False):
    """torch.any(input, dim=None, keepdim=False)."""
    return _logical_reduction("any", np.any, self, dim, keepdim)


@op("count_nonzero", tensors=("self",), differentiable=False)
def count_nonzero(self, dim=None):
    """torch.count_nonzero(input, dim=None): int64."""
    self = require_tensor(self)
    dims = _reduce_dims(self, dim)
    x = self.data
    out = np.count_nonzero(x, axis=dims) if x.ndim else np.int64(x != 0)
    return Tensor(np.asarray(out, dtype=np.int64))


def _inf_test(self, fn) -> Tensor:
    self = require_tensor(self)
    x = self.data
    if x.dtype.kind not in "fV":
        return Tensor(np.zeros(x.shape, np.bool_))
    return Tensor(np.asarray(fn(x), dtype=np.bool_))


@op("isinf", tensors=("self",), differentiable=False)
def isinf(self):
    """torch.isinf(input)."""
    return _inf_test(self, np.isinf)


@op("isposinf", tensors=("self",), differentiable=False)
def isposinf(self):
    """torch.isposinf(input)."""
    return _inf_test(self, np.isposinf)


@op("isneginf", tensors=("self",), differentiable=False)
def isneginf(self):
    """torch.isneginf(input)."""
    return _inf_test(self, np.isneginf)


def _close(self, other, rtol, atol, equal_nan) -> np.ndarray:
    self = require_tensor(self)
    other = require_tensor(other, "other", "isclose")
    if self.dtype != other.dtype:
        raise TorchRuntimeError(f"{D.SCALAR_TYPE_NAMES[self.dtype]} did not match {D.SCALAR_TYPE_NAMES[other.dtype]}",
                                code="dtype_mismatch")
    for name, v in (("rtol", rtol), ("atol", atol)):
        if v < 0:
            raise TorchRuntimeError(f"{name} must be greater than or equal to zero, but got {v:g}",
                                    code="invalid_argument")
    broadcast_shapes(self.data.shape, other.data.shape)
    a, b = self.data, other.data
    if a.dtype == np.bool_:
        return np.asarray(a == b)
    if a.dtype.kind not in "fV":
        a, b = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        # torch: equal values (infinities included) are close; finite ones within atol + rtol * |other|
        out = (a == b) | (np.isfinite(a) & np.isfinite(b) & (np.abs(a - b) <= atol + rtol * np.abs(b)))
    if equal_nan:
        out = out | (np.isnan(a) & np.isnan(b))
    return np.asarray(out)


@op("isclose", tensors=("self", "other"), differentiable=False)
def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """torch.isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False): same dtypes only, as torch."""
    return Tensor(_close(self, other, rtol, atol, equal_nan))


@op("allclose",
    python_result="bool",
    tensors=("self", "other"), differentiable=False)
def allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """torch.allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool."""
    return bool(np.all(_close(self, other, rtol, atol, equal_nan)))


@op("nonzero",
    tuple_when=("as_tuple",),
    tensors=("self",), differentiable=False)
def nonzero(self, as_tuple=False):
    """torch.nonzero(input, *, as_tuple=False): an (n, ndim) int64 tensor of indices, or one 1-D tensor per
    dim (a 0-d input counts as 1-d there)."""
    self = require_tensor(self)
    x = self.data
    if as_tuple:
        idx = np.nonzero(x.reshape(1) if x.ndim == 0 else x)
        return tuple(Tensor(i.astype(np.int64)) for i in idx)
    if x.ndim == 0:
        return Tensor(np.zeros((1 if x != 0 else 0, 0), np.int64))
    return Tensor(np.argwhere(x).astype(np.int64))


@op("argsort", promotion="int64", tensors=("self",), differentiable=False)
def argsort(self, dim=-1, descending=False, stable=False):
    """torch.argsort(input, dim=-1, descending=False, stable=False): sort's indices."""
    self = require_tensor(self)
    with set_grad_enabled(False):
        return sort(self, dim, descending).indices


@op("unique",
    tuple_when=("return_inverse", "return_counts"),
    tensors=("self",), differentiable=False)
def unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """torch.unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None): always sorted (as
    torch's CPU kernel); NaNs are all kept, last. With dim, the unique slices along dim."""
    self = require_tensor(self)
    x = self.data
    if dim is None:
        flat = x.reshape(-1)
        values, inverse, counts = np.unique(flat, return_inverse=True, return_counts=True, equal_nan=False)
        inverse = inverse.reshape(x.shape)
        prim = P.Unique2Backward0
    else:
        d = wrap_dim(dim, x.ndim)
        if x.shape[d] == 0 and x.size == 0 and x.ndim > 1:
            values, inverse, counts = x.copy(), np.zeros(0, np.int64), np.zeros(0, np.int64)
        else:
            values, inverse, counts = np.unique(x, return_inverse=True, return_counts=True, axis=d)
        inverse = inverse.reshape(-1)
        prim = P.UniqueDimBackward0
    out = record(prim, np.ascontiguousarray(values, dtype=x.dtype), (self,), {})
    extra = []
    if return_inverse:
        extra.append(Tensor(inverse.astype(np.int64)))
    if return_counts:
        extra.append(Tensor(counts.astype(np.int64)))
    return (out, *extra) if extra else out


def _not_implemented(aten: str):
    def vjp_fn(ctx, grad):
        raise TorchRuntimeError(f"the derivative for '{aten}' is not implemented.", code="not_implemented",
                                exception="NotImplementedError")
    return vjp_fn


vjp("Unique2Backward0", inputs=("self",))(_not_implemented("_unique2"))
no_jvp(P.Unique2Backward0, "_unique2")
vjp("UniqueDimBackward0", inputs=("self",))(_not_implemented("unique_dim"))
no_jvp(P.UniqueDimBackward0, "unique_dim")
