"""More of ``torch.nn.functional``: normalize, cosine_similarity, pairwise_distance, softmin, glu,
layer_norm, embedding, one_hot and pad.

Catalog names follow nn.py: the plain function name, family ``nn``, not a Tensor method. Composites are
built from the ops torch's C++ composes them from, so the graph shows the same nodes (normalize is
DivBackward0 over ExpandBackward0/ClampMinBackward0/LinalgVectorNormBackward0, cosine_similarity is
SumBackward1 over MulBackward0 of DivBackward0 by cloned norms, pairwise_distance is NormBackward1 over
AddBackward1 over SubBackward0, softmin is SoftmaxBackward0 over NegBackward0). glu, layer_norm,
embedding and constant/reflect/replicate pad are primitives with torch's grad_fn names.
"""

from __future__ import annotations

import math
import types

import numpy as np

from .. import dtypes as D
from ..errors import InvalidArgumentError, TorchIndexError, TorchRuntimeError
from ..grad_mode import check_numel, no_grad
from ..kernel import kcall
from ..registry import P, broken_check, declare, jvp, op, record, vjp
from ..tensor import Tensor
from .common import broadcast_shapes, require_tensor, saved_int, signed_int, wrap_dim
from .elementwise import clamp_min, div, neg, sigmoid
from .nn import softmax
from .reduction import mean, norm
from .reduction import sum as sum_
from .shape import _index_put_zeros, cat, chunk, clone, expand, expand_as

_UINT64 = 1 << 64
_INDEX_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))  # embedding's indices: Long or Int

# ----- normalize, cosine_similarity, pairwise_distance, softmin ----------------------------------------


@op("normalize", shape="same(input)", checks=(
    "dtype(input)=floating | RuntimeError: linalg.vector_norm: Expected a floating point or complex tensor as input. "
    "Got {dtype}",),
    tensors=("input",), grad_fns=(P.DivBackward0,), method=False, family="nn")
def normalize(input, p=2.0, dim=1, eps=1e-12):
    """F.normalize(input, p=2.0, dim=1, eps=1e-12): input / max(||input||_p along dim, eps)."""
    input = require_tensor(input, "input", "normalize")
    denom = expand_as(clamp_min(norm(input, p, dim, True), eps), input)
    return div(input, denom)


@op("cosine_similarity", functions=("cosine_similarity",),
    dims_of="other",
    tensors=("x1", "x2"), grad_fns=(P.SumBackward1,), method=False, family="nn")
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """F.cosine_similarity(x1, x2, dim=1, eps=1e-8): each input divided by its norm (clamped at eps in place
    under no_grad, on a clone, as ATen does) and the products summed along dim."""
    x1 = require_tensor(x1, "x1", "cosine_similarity")
    x2 = require_tensor(x2, "x2", "cosine_similarity")
    common = D.result_type(x1, x2)
    if not D.is_floating(common):
        raise TorchRuntimeError(f"expected common dtype to be floating point, yet common dtype is "
                                f"{D.SCALAR_TYPE_NAMES[common]}", code="invalid_dtype")
    from .shape import to
    x1 = x1 if D.is_floating(x1.dtype) else to(x1, common)
    x2 = x2 if D.is_floating(x2.dtype) else to(x2, common)
    if x1.shape != x2.shape:  # expand_outplace
        shape = broadcast_shapes(x1.shape, x2.shape)
        x1, x2 = expand(x1, shape), expand(x2, shape)
    n1 = clone(norm(x1, 2, dim, True))
    n2 = clone(norm(x2, 2, dim, True))
    with no_grad():
        n1.clamp_min_(eps)
        n2.clamp_min_(eps)
    return sum_((x1 / n1) * (x2 / n2), dim)


def _add_scalar(t: Tensor, other) -> Tensor:
    """``tensor + number`` as ATen composites record it (add.Scalar -> AddBackward1)."""
    d = t.data
    return record(P.AddBackward1, np.asarray(d + d.dtype.type(other), d.dtype), (t,))


# AddBackward1 belongs with add in elementwise.py; registered here only while that module lacks it.
if not P.AddBackward1.declared:
    @vjp("AddBackward1", inputs=("self",))
    def _(ctx, grad):
        return grad,

    @jvp(P.AddBackward1)
    def _(ctx, self_t):
        return self_t


def _norm_p(self: Tensor, p: float, dim: int, keepdim: bool) -> Tensor:
    """at::norm(self, p, dim, keepdim) (NormBackward1), the C++ norm pairwise_distance calls."""
    with no_grad():  # values as linalg_vector_norm, recorded under torch's node name
        out = norm(self, p, dim, keepdim)
    return record(P.NormBackward1, out.data, (self,),
                  {"dim": [dim], "keepdim": keepdim, "p": float(p), "result": "result", "self": self})


@vjp("NormBackward1", inputs=("self",), saves=("dim", "keepdim", "p", "result", "self"))
def _(ctx, grad):
    shim = types.SimpleNamespace(self=ctx.self, result=ctx.result, dim=ctx.dim, keepdim=ctx.keepdim, ord=ctx.p,
                                 needs=ctx.needs, node=ctx.node)
    return P.LinalgVectorNormBackward0.vjp(shim, grad)


@jvp(P.NormBackward1)
def _(ctx, self_t):
    # norm_jvp: sum(|x|^(p-1) sgn(x) dx) / r^(p-1) along dim (p = 2: sum(x dx) / r), 0 where r == 0
    from .elementwise import abs as abs_
    from .elementwise import eq, masked_fill, sign
    from .elementwise import pow as pow_
    from .shape import unsqueeze
    x, r, p, d = ctx.self, ctx.result, ctx.p, ctx.dim[0]
    rk = r if ctx.keepdim else unsqueeze(r, d)
    if p == 2:
        num = sum_(x * self_t, d, True)
        out = masked_fill(num / rk, eq(rk, 0), 0)
    elif p == 1:
        out = sum_(sign(x) * self_t, d, True)
    else:
        num = sum_(pow_(abs_(x), p - 1) * sign(x) * self_t, d, True)
        out = masked_fill(num / pow_(rk, p - 1), eq(rk, 0), 0)
    return out if ctx.keepdim else out.squeeze(d)


@op("pairwise_distance", functions=("pairwise_distance",),
    tensors=("x1", "x2"), grad_fns=(P.NormBackward1,), method=False, family="nn")
def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """F.pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False) = norm(x1 - x2 + eps, p, last dim)."""
    x1 = require_tensor(x1, "x1", "pairwise_distance")
    x2 = require_tensor(x2, "x2", "pairwise_distance")
    out_dim = max(x1.data.ndim, x2.data.ndim)
    return _norm_p(_add_scalar(x1 - x2, eps), p, max(out_dim - 1, 0), keepdim)


@op("softmin", shape="same(input)", tensors=("input",), grad_fns=(P.SoftmaxBackward0,), method=False, family="nn")
def softmin(input, dim, dtype=None):
    """F.softmin(input, dim, dtype=None) = softmax(-input, dim)."""
    input = require_tensor(input, "input", "softmin")
    return softmax(neg(input), dim, dtype)


# ----- glu --------------------------------------------------------------------------------------------


@op("glu", tensors=("input",), method=False, family="nn")
def glu(input, dim=-1):
    """F.glu(input, dim=-1): a * sigmoid(b) for the two halves a, b of input along dim."""
    input = require_tensor(input, "input", "glu")
    if input.data.ndim == 0:
        raise TorchRuntimeError("glu does not support scalars because halving size must be even",
                                code="shape_mismatch")
    d = wrap_dim(dim, input.data.ndim)
    n = input.shape[d]
    if n % 2:
        raise TorchRuntimeError(f"Halving dimension must be even, but dimension {d} is size {n}",
                                code="shape_mismatch")
    if input.data.dtype.kind not in "fV":
        raise TorchRuntimeError(f"\"glu_cpu\" not implemented for '{D.SCALAR_TYPE_NAMES[input.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    a, b = np.split(input.data, 2, axis=d)
    with np.errstate(over="ignore"):
        out = a * (1 / (1 + np.exp(-b)))
    # torch keeps dim as given (a negative dim shows as its uint64 wrap, like nll_loss's ignore_index)
    return record(P.GluBackward0, out.astype(input.data.dtype, copy=False), (input,),
                  {"dim": int(dim) % _UINT64, "self": input})


@vjp("GluBackward0", inputs=("self",), saves=("dim", "self"), double_backward="GluBackwardBackward0",
     double_backward_zeros=False)
def _(ctx, grad):
    x = ctx.self
    d = ctx.dim - _UINT64 if ctx.dim >= _UINT64 // 2 else ctx.dim
    a, b = chunk(x, 2, d)
    s = sigmoid(b)
    return cat([grad * s, grad * a * s * (1 - s)], d),


@jvp()
def _(ctx, self_t):
    d = ctx.dim - _UINT64 if ctx.dim >= _UINT64 // 2 else ctx.dim
    a, b = chunk(ctx.self, 2, d)
    a_t, b_t = chunk(self_t, 2, d)
    s = sigmoid(b)
    return a_t * s + a * s * (1 - s) * b_t


# ----- layer_norm -------------------------------------------------------------------------------------


def _shape_str(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _check_mixed_type(input: Tensor, params: list) -> None:
    """torch's is_mixed_type / check_mixed_data_type (CPU norms): when the first given parameter's dtype is
    not the input's, every parameter must be float32 and so must the input; parameters of the input's dtype
    go on to the kernel, which wants every parameter in that dtype."""
    given = [t for t in params if t is not None]
    if not given:
        return
    if given[0].dtype != input.dtype:
        for t in given:
            if t.dtype != D.FLOAT32:
                raise TorchRuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float",
                                        code="dtype_mismatch")
        raise TorchRuntimeError("mixed dtype (CPU): all inputs must share same datatype.", code="dtype_mismatch")
    for t in given:
        if t.dtype != input.dtype:
            raise TorchRuntimeError(f"expected scalar type {D.SCALAR_TYPE_NAMES[input.dtype]} but found "
                                    f"{D.SCALAR_TYPE_NAMES[t.dtype]}", code="dtype_mismatch")


@op("layer_norm", shape="same(input)", functions=("layer_norm",), checks=(
    'dtype(input)=floating | NotImplementedError: "LayerNormKernelImpl" not implemented for \'{dtype}\'',),
    tensors=("input", "weight", "bias"), method=False,
    family="nn")
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """F.layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5): normalization over the
    trailing normalized_shape dims (biased variance); saves input, mean (result1), rstd (result2), weight,
    bias, normalized_shape and, beyond torch, eps (the VJP recomputes mean/rstd differentiably)."""
    input = require_tensor(input, "input", "layer_norm")
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(ns)
    if k == 0:
        raise TorchRuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., containing at "
                                "least one element, but got normalized_shape = []", code="shape_mismatch")
    params = [None if t is None else require_tensor(t, name, "layer_norm")
              for name, t in (("weight", weight), ("bias", bias))]
    _check_mixed_type(input, params)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            t = require_tensor(t, name, "layer_norm")
            if tuple(t.shape) != ns:
                raise TorchRuntimeError(f"Expected {name} to be of same shape as normalized_shape, but got {name} "
                                        f"of shape {_shape_str(t.shape)} and normalized_shape = {_shape_str(ns)}",
                                        code="shape_mismatch")
    if input.data.ndim < k or tuple(input.shape[-k:]) != ns:
        raise TorchRuntimeError(f"Given normalized_shape={_shape_str(ns)}, expected input with shape "
                                f"[*, {', '.join(str(s) for s in ns)}], but got input of size{_shape_str(input.shape)}",
                                code="shape_mismatch")
    if input.data.dtype.kind not in "fV":
        raise TorchRuntimeError(f"\"LayerNormKernelImpl\" not implemented for '{D.SCALAR_TYPE_NAMES[input.dtype]}'",
                                code="invalid_dtype", exception="NotImplementedError")
    dt = input.data.dtype
    cd = D.compute_dtype(dt)  # float16/bfloat16: the statistics and the result in float32, rounded once
    x = input.data.astype(cd, copy=False)
    axes = tuple(range(x.ndim - k, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    rstd = (1 / np.sqrt(var + cd.type(eps))).astype(cd)
    out = (x - mu) * rstd
    if weight is not None:
        out = out * weight.data.astype(cd, copy=False)
    if bias is not None:
        out = out + bias.data.astype(cd, copy=False)
    stat_shape = x.shape[:x.ndim - k] + (1,) * k
    return record(P.NativeLayerNormBackward0, np.asarray(out, dt), (input, weight, bias),
                  {"bias": bias, "eps": eps, "input": input, "normalized_shape": list(ns),
                   "result1": Tensor(mu.reshape(stat_shape).astype(dt)),
                   "result2": Tensor(rstd.reshape(stat_shape).astype(dt)), "weight": weight})


def _layer_norm_stats(ctx) -> tuple:
    """The normalised dims, 1/std and x-hat of a saved layer_norm input, in engine ops (differentiable)."""
    from .elementwise import rsqrt
    x = ctx.input
    dims = list(range(x.data.ndim - len(ctx.normalized_shape), x.data.ndim))
    xc = x - mean(x, dims, True)
    rstd = rsqrt(mean(xc * xc, dims, True) + ctx.eps)
    return dims, rstd, xc * rstd


@vjp("NativeLayerNormBackward0", inputs=("input", "weight", "bias"),
     saves=("bias", "eps", "input", "normalized_shape", "result1", "result2", "weight"),
     double_backward="NativeLayerNormBackwardBackward0", double_backward_zeros=False)
def _(ctx, grad):
    n = ctx.needs
    w = ctx.weight
    dims, rstd, xhat = _layer_norm_stats(ctx)
    g_in = g_w = g_b = None
    if n[0]:
        g = grad * w if w is not None else grad
        g_in = rstd * (g - mean(g, dims, True) - xhat * mean(g * xhat, dims, True))
    if n[1]:
        g_w = grad * xhat  # summed over the batch dims by the engine's un-broadcasting
    if n[2]:
        g_b = grad
    return g_in, g_w, g_b


@jvp()
def _(ctx, input_t, weight_t, bias_t):
    from .elementwise import add_t, mul_t
    w = ctx.weight
    dims, rstd, xhat = _layer_norm_stats(ctx)
    out = None
    if input_t is not None:
        xhat_t = rstd * (input_t - mean(input_t, dims, True) - xhat * mean(xhat * input_t, dims, True))
        out = xhat_t * w if w is not None else xhat_t
    return add_t(add_t(out, mul_t(weight_t, xhat)), bias_t)


# ----- embedding, one_hot -----------------------------------------------------------------------------


@op("embedding", shape="embedding(input,weight)", functions=("embedding",), checks=(
    "dtype(input)=int64,int32 unless max_norm | RuntimeError: Expected tensor for argument #1 'indices' to have one "
    "of the following scalar types: Long, Int; but got {tensor_type} instead (while checking arguments for "
    "embedding)",),
    changes_argument=(("weight", "max_norm"),),
    tensors=("input", "weight"), method=False, family="nn",
    plannable=True)
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """F.embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, ...): rows of weight picked by
    the int64 input; the padding_idx row gets no gradient, scale_grad_by_freq divides by how often each index
    occurs; with max_norm the looked-up rows are first renormalised in place (no_grad, a version bump).
    ``sparse=True``: torch's weight gradient is a sparse COO tensor; here it is the same values, dense (the
    engine has one layout)."""
    input = require_tensor(input, "input", "embedding")
    weight = require_tensor(weight, "weight", "embedding")
    if max_norm is not None and input.data.dtype not in _INDEX_DTYPES:  # embedding_renorm_ runs first
        raise TorchRuntimeError(f"Expected tensor for argument #2 'indices' to have one of the following scalar "
                                f"types: Long, Int; but got torch.{D.SCALAR_TYPE_NAMES[input.dtype]}Tensor instead "
                                f"(while checking arguments for embedding_renorm_)", code="invalid_dtype")
    if input.data.dtype not in _INDEX_DTYPES:
        raise broken_check("embedding", input=input)
    if weight.data.ndim != 2:
        raise TorchRuntimeError("'weight' must be 2-D", code="shape_mismatch")
    n = weight.shape[0]
    if max_norm is not None:
        _embedding_renorm(weight, input, float(max_norm), float(norm_type))
    if padding_idx is not None:
        if not -n <= padding_idx < n:
            raise TorchRuntimeError("Padding_idx must be within num_embeddings", code="invalid_argument")
        padding_idx = padding_idx % n
    out = kcall(_embedding_kernel, weight.data, input.data)
    return record(P.EmbeddingBackward0, out, (weight,),
                  {"indices": input, "padding_idx": (-1 if padding_idx is None else padding_idx) % _UINT64,
                   "scale_grad_by_freq": scale_grad_by_freq, "sparse": sparse, "weight_sym_argsize_0": n})


def _embedding_renorm(weight: Tensor, input: Tensor, max_norm: float, norm_type: float) -> None:
    """torch.embedding_renorm_ under no_grad, as F.embedding does before the lookup: each distinct looked-up row
    whose norm_type-norm exceeds max_norm is scaled in place by max_norm / (norm + 1e-7) (computed in the
    weight's dtype, as torch's ``row *= scale``); weight's version counter goes up by one, changed or not.
    Bad indices are refused before any row changes (torch renormalises the rows before the first bad one)."""
    from ..journal import array_, setitem_
    from .inplace import _writeable
    if weight.data.dtype.kind not in "fV":
        raise TorchRuntimeError(f"norm(): input dtype should be either floating point or complex. Got "
                                f"{D.SCALAR_TYPE_NAMES[weight.dtype]} instead.", code="invalid_dtype")
    n = weight.shape[0]
    rows = np.unique(input.data)  # sorted, as torch visits them
    bad = rows[(rows >= n) | (rows < -n)]
    if bad.size:
        raise TorchIndexError(f"select(): index {int(bad[0])} out of range for tensor of size "
                              f"{_shape_str(weight.shape)} at dimension 0", code="index_out_of_range")
    if rows.size and rows.min() < 0:
        raise TorchIndexError("index out of range in self", code="index_out_of_range")
    w = weight.data
    a = np.abs(w[rows])
    with np.errstate(all="ignore"):
        if norm_type == math.inf:
            norms = a.max(axis=1)
        elif norm_type == -math.inf:
            norms = a.min(axis=1)
        elif norm_type == 0:
            norms = np.count_nonzero(a, axis=1).astype(w.dtype)
        else:
            norms = (a ** w.dtype.type(norm_type)).sum(axis=1) ** w.dtype.type(1 / norm_type)
    over = norms.astype(np.float64) > max_norm
    target = _writeable(w)
    if over.any():
        if not target.flags.writeable:
            raise TorchRuntimeError("unsupported operation: more than one element of the written-to tensor refers "
                                    "to a single memory location. Please clone() the tensor before performing the "
                                    "operation.", code="invalid_inplace")
        scale = (max_norm / (norms[over].astype(np.float64) + 1e-7)).astype(w.dtype)
        array_(target)
        target[rows[over]] *= scale[:, None]
    setitem_(weight._vc, 0, weight._vc[0] + 1)


def _embedding_kernel(w, ix):
    """Rows of ``w`` picked by ``ix``; the bounds check is value-dependent, so it is here (a plan's guard)."""
    n = w.shape[0]
    if ix.size and (ix.max() >= n or ix.min() < 0):
        raise TorchIndexError("index out of range in self", code="index_out_of_range")
    return np.array(w[ix], copy=True)


def _row_scale(indices: np.ndarray, padding_idx: int, scale: bool, dtype) -> np.ndarray:
    """Per looked-up row: 0 at padding_idx, 1/count(index) when scale_grad_by_freq, else 1."""
    f = np.ones(indices.shape, dtype)
    if scale:
        _, inv, counts = np.unique(indices, return_inverse=True, return_counts=True)
        f = (1.0 / counts[inv.reshape(indices.shape)]).astype(dtype)
    if padding_idx >= 0:
        f = np.where(indices == padding_idx, dtype.type(0), f)
    return f


def _padding(ctx) -> int:
    p = ctx.padding_idx
    return p - _UINT64 if p >= _UINT64 // 2 else p


declare("EmbeddingDenseBackwardBackward0")  # the node torch shows for EmbeddingBackward0's gradient


@vjp("EmbeddingBackward0", inputs=("weight",),
     saves=("indices", "padding_idx", "scale_grad_by_freq", "sparse", "weight_sym_argsize_0"))
def _(ctx, grad):
    ix = ctx.indices.data
    f = Tensor(kcall(_row_scale_kernel, ix, _padding(ctx), ctx.scale_grad_by_freq, grad.data.dtype))
    flat = (grad * f).reshape(-1, grad.shape[-1])
    return _index_put_zeros(flat, (ctx.weight_sym_argsize_0, grad.shape[-1]),
                            [Tensor(kcall(_flat_indices, ix))], P.EmbeddingDenseBackwardBackward0),


def _row_scale_kernel(ix, padding_idx, scale, dtype):
    return _row_scale(ix, padding_idx, scale, dtype)[..., None]


def _flat_indices(ix):
    return ix.reshape(-1).astype(np.int64)


@jvp()
def _(ctx, weight_t):
    return embedding(ctx.indices, weight_t)


@op("one_hot", shape="one_hot(tensor,num_classes)",
    checks=("dtype(tensor)=int64 | RuntimeError: one_hot is only applicable to index tensor of type LongTensor.",),
    tensors=("tensor",), differentiable=False, method=False, family="nn")
def one_hot(tensor, num_classes=-1):
    """F.one_hot(tensor, num_classes=-1): int64 one-hot rows (num_classes = max + 1 when -1)."""
    tensor = require_tensor(tensor, "tensor", "one_hot")
    if tensor.data.dtype != np.int64:
        raise broken_check("one_hot", tensor=tensor)
    x = tensor.data
    if x.size and x.min() < 0:
        raise TorchRuntimeError("Class values must be non-negative.", code="invalid_argument")
    if num_classes == -1:
        if not x.size:
            raise TorchRuntimeError("Can not infer total number of classes from empty tensor.",
                                    code="invalid_argument")
        num_classes = int(x.max()) + 1
    elif x.size and x.max() >= num_classes:
        raise TorchRuntimeError("Class values must be smaller than num_classes.", code="invalid_argument")
    check_numel(x.shape + (num_classes,))
    return Tensor((x[..., None] == np.arange(num_classes)).astype(np.int64))


# ----- pad --------------------------------------------------------------------------------------------


def _pad_pairs(pad, nd: int) -> list:
    if not isinstance(pad, (list, tuple)) or not all(isinstance(p, (int, np.integer)) and not isinstance(p, bool)
                                                      for p in pad):
        raise InvalidArgumentError("pad(): argument 'pad' must be tuple of ints")
    if len(pad) % 2:
        raise TorchRuntimeError("Padding length must be divisible by 2", code="invalid_argument")
    if len(pad) // 2 > nd:
        raise TorchRuntimeError(f"Padding length should be less than or equal to two times the input dimension but "
                                f"got padding length {len(pad)} and input of dimension {nd}", code="invalid_argument")
    return [(int(pad[2 * i]), int(pad[2 * i + 1])) for i in range(len(pad) // 2)]  # last dim first


def constant_pad_nd(self: Tensor, pad: list, value=0.0) -> Tensor:
    nd = self.data.ndim
    pairs = _pad_pairs(pad, nd)
    shape = list(self.shape)
    for i, (lo, hi) in enumerate(pairs):
        shape[nd - 1 - i] = max(shape[nd - 1 - i] + lo + hi, 0)
    check_numel(shape)
    out = self.data
    for i, (lo, hi) in enumerate(pairs):
        d = nd - 1 - i
        n = out.shape[d]
        if n + lo + hi < 0 or (lo < 0 and -lo > n) or (hi < 0 and -hi > n):
            raise TorchRuntimeError("narrow(): length must be non-negative.", code="invalid_argument")
        sl = [slice(None)] * nd
        sl[d] = slice(max(-lo, 0), n - max(-hi, 0))
        out = out[tuple(sl)]
        widths = [(0, 0)] * nd
        widths[d] = (max(lo, 0), max(hi, 0))
        out = np.pad(out, widths, constant_values=out.dtype.type(value) if out.dtype != np.bool_ else bool(value))
    return record(P.ConstantPadNdBackward0, np.array(out, copy=True), (self,), {"pad": saved_int(list(pad))})


@vjp("ConstantPadNdBackward0", inputs=("self",), saves=("pad",))
def _(ctx, grad):
    return constant_pad_nd(grad, [-p for p in signed_int(ctx.pad)]),


@jvp()
def _(ctx, self_t):
    return constant_pad_nd(self_t, signed_int(ctx.pad), 0.0)


def _edge_index(n: int, lo: int, hi: int, mode: str) -> np.ndarray:
    """Source index along one dim for reflect/replicate padding."""
    j = np.arange(-lo, n + hi)
    if mode == "replicate":
        return np.clip(j, 0, n - 1)
    period = 2 * (n - 1)
    j = np.abs(j) % period if period else np.zeros_like(j)
    return np.where(j >= n, period - j, j)


#: the reflection and replication pads by (mode, padded dims): the primitive and its double backward's node,
#: declared below from these names
_PAD_NAMES = {("reflect", 1): ("ReflectionPad1DBackward0", "ReflectionPad1DBackwardBackward0"),
              ("reflect", 2): ("ReflectionPad2DBackward0", "ReflectionPad2DBackwardBackward0"),
              ("reflect", 3): ("ReflectionPad3DBackward0", "ReflectionPad3DBackwardBackward0"),
              ("replicate", 1): ("ReplicationPad1DBackward0", "ReplicationPad1DBackwardBackward0"),
              ("replicate", 2): ("ReplicationPad2DBackward0", "ReplicationPad2DBackwardBackward0"),
              ("replicate", 3): ("ReplicationPad3DBackward0", "ReplicationPad3DBackwardBackward0")}
_PAD_PRIM = {key: getattr(P, name) for key, (name, _) in _PAD_NAMES.items()}


def _pad_index(shape: tuple, pad: list, mode: str) -> tuple:
    """The gather index of reflect/replicate padding: per dim, the source position of each output position."""
    nd = len(shape)
    pairs = _nonconstant_pairs(pad, nd)
    idx = [np.arange(s).reshape([-1 if j == d else 1 for j in range(nd)]) for d, s in enumerate(shape)]
    for i, (lo, hi) in enumerate(pairs):
        d = nd - 1 - i
        n = shape[d]
        if mode == "reflect" and (lo >= n or hi >= n):
            raise TorchRuntimeError(f"Argument #4: Padding size should be less than the corresponding input "
                                    f"dimension, but got: padding ({lo}, {hi}) at dimension {d} of input "
                                    f"{_shape_str(shape)}", code="invalid_argument")
        idx[d] = _edge_index(n, lo, hi, mode).reshape([-1 if j == d else 1 for j in range(nd)])
    return tuple(idx)


def _nonconstant_pairs(pad, nd: int) -> list:
    """at::pad's check for reflect/replicate/circular: 1-3 padded dims, with one or two dims before them."""
    pairs = _pad_pairs(pad, nd)
    k = len(pairs)
    if k > 3 or nd not in (k + 1, k + 2):
        raise NotImplementedError_(
            f"Padding size {2 * k} is not supported for {nd}D input tensor.\nSupported combinations for non-constant "
            f"padding:\n  - 2D or 3D input: padding size = 2 (pads last dimension)\n  - 3D or 4D input: padding size "
            f"= 4 (pads last 2 dimensions)\n  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")
    return pairs


def _pad_circular(self: Tensor, pad: list) -> Tensor:
    """at::_pad_circular as torch composes it: a new tensor, the input copied into its middle, then per padded
    dim the left and right borders copied from the other end (copy_ into slices: CopySlices over SliceBackward0).
    torch's new tensor is uninitialised; here it is zeros (only visible where negative padding leaves nothing
    to wrap from)."""
    from .inplace import copy_
    nd = self.data.ndim
    pairs = _nonconstant_pairs(pad, nd)
    first = nd - len(pairs)
    shape = list(self.shape)
    for i in range(first, nd):
        lo, hi = pairs[nd - 1 - i]
        if lo > shape[i] or hi > shape[i]:
            raise TorchRuntimeError("Padding value causes wrapping around more than once.", code="invalid_argument")
        shape[i] += lo + hi
        if shape[i] < 0:
            raise TorchRuntimeError("Negative padding value is resulting in an empty dimension",
                                    code="invalid_argument")
    check_numel(tuple(shape), itemsize=self.data.itemsize)
    out = Tensor(np.zeros(shape, self.data.dtype))
    out_slice, in_slice = out, self
    for i in range(first, nd):
        lo, hi = pairs[nd - 1 - i]
        out_slice = _slice(out_slice, i, max(lo, 0), shape[i] - max(hi, 0))
        in_slice = _slice(in_slice, i, max(-lo, 0), self.shape[i] - max(-hi, 0))
    copy_(out_slice, in_slice)
    for i in range(first, nd):
        lo, hi = pairs[nd - 1 - i]
        if lo > 0:
            copy_(_slice(out, i, 0, lo), _slice(out, i, shape[i] - lo - max(hi, 0), shape[i] - max(hi, 0)))
        if hi > 0:
            copy_(_slice(out, i, shape[i] - hi, shape[i]), _slice(out, i, max(lo, 0), max(lo, 0) + hi))
    return out


def _slice(t: Tensor, dim: int, start: int, end: int) -> Tensor:
    """t[..., start:end] along dim, clamped to the size as torch's slice (SliceBackward0)."""
    from .shape import narrow
    n = t.shape[dim]
    start = min(max(start, 0), n)
    return narrow(t, dim, start, max(min(end, n) - start, 0))


def _index_pad(self: Tensor, pad: list, mode: str) -> Tensor:
    idx = _pad_index(self.shape, pad, mode)
    check_numel(np.broadcast_shapes(*(i.shape for i in idx)))
    return record(_PAD_PRIM[(mode, len(pad) // 2)], np.array(self.data[idx], copy=True), (self,),
                  {"padding": list(pad), "self": self})


def NotImplementedError_(msg: str) -> TorchRuntimeError:  # noqa: N802  (torch raises NotImplementedError)
    return TorchRuntimeError(msg, code="unsupported", exception="NotImplementedError")


def _index_pad_vjp(ctx, grad):
    mode = "reflect" if ctx.node.prim.startswith("Reflection") else "replicate"
    idx = _pad_index(ctx.self.shape, ctx.padding, mode)
    full = [Tensor(np.broadcast_to(i, grad.shape).astype(np.int64)) for i in idx]
    return _index_put_zeros(grad, ctx.self.shape, full),


def _index_pad_jvp_for(mode: str):
    def fn(ctx, self_t):
        return _index_pad(self_t, ctx.padding, mode)
    return fn


for (_mode, _k), (_name, _double) in _PAD_NAMES.items():
    vjp(_name, inputs=("self",), saves=("padding", "self"), double_backward=_double)(_index_pad_vjp)
    jvp()(_index_pad_jvp_for(_mode))


@op("pad", shape="pad(input,pad)",
    tensors=("input",), grad_fns=(P.ConstantPadNdBackward0, P.CopySlices) + tuple(_PAD_PRIM.values()),
    method=False,
    family="nn")
def pad(input, pad, mode="constant", value=None):
    """F.pad(input, pad, mode='constant', value=None): pad is (left, right) pairs from the last dim backwards;
    negative constant padding crops; modes 'reflect', 'replicate' and 'circular' pad the last 1-3 dims."""
    input = require_tensor(input, "input", "pad")
    if mode == "constant":
        return constant_pad_nd(input, list(pad), 0.0 if value is None else value)
    if value is not None and value != 0:
        raise TorchRuntimeError(f"Padding mode \"{mode}\" doesn't take in value argument", code="invalid_argument")
    if mode in ("reflect", "replicate"):
        return _index_pad(input, list(pad), mode)
    if mode == "circular":
        return _pad_circular(input, list(pad))
    raise NotImplementedError_(f"Unrecognised padding mode {mode}")
