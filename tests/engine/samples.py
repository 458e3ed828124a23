"""Sample inputs per op, in the spirit of PyTorch's OpInfo: op name -> list of sample calls.

Inputs are float64 tensors that require grad (the ones gradcheck differentiates), with 0-d, broadcast and
batched shapes, drawn away from kinks and discontinuities (no ties for max/sort, no zeros for abs/sign,
positive where log/sqrt need it). Other arguments (dims, index tensors, masks, numbers) are passed through.
In-place ops are called on a clone of their first argument (a leaf cannot be modified in place) and
the clone is the output. Adding a differentiable op means adding its samples here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gradserve_server.engine import OPS
from gradserve_server.engine.generator import running
from gradserve_server.engine.tensor import Tensor

_rng = np.random.default_rng(1234)


def T(*shape, low=-1.0, high=1.0, requires_grad=True) -> Tensor:
    """A float64 tensor with values uniform in [low, high), spread so that no two values tie."""
    n = int(np.prod(shape)) if shape else 1
    vals = _rng.permutation(np.linspace(low, high, n + 2)[1:-1]) if n > 1 else \
        np.array([_rng.uniform(low, high)])
    vals = vals + _rng.uniform(-0.1, 0.1, n) * (high - low) / (n + 2)
    return Tensor(vals.reshape(shape).astype(np.float64), requires_grad=requires_grad)


def P(*shape, low=0.5, high=2.0) -> Tensor:
    """Positive values (log, sqrt, pow with a real exponent, division)."""
    return T(*shape, low=low, high=high)


def away(*shape, gap=0.3, high=2.0) -> Tensor:
    """Values with |v| in [gap, high]: no sign change under perturbation (abs, relu, sign, clamp bounds)."""
    t = T(*shape, low=gap, high=high, requires_grad=False)
    signs = np.where(_rng.random(t.data.shape) < 0.5, -1.0, 1.0)
    return Tensor(t.data * signs, requires_grad=True)


def ints(*values) -> Tensor:
    return Tensor(np.array(values, dtype=np.int64))


def mask(*rows) -> Tensor:
    return Tensor(np.array(rows, dtype=bool))


@dataclass
class Sample:
    args: tuple
    kwargs: dict = field(default_factory=dict)
    gradgrad: bool = True          # torch supports double backward here and the engine must too
    note: str = ""
    tol: dict = field(default_factory=dict)  # gradcheck eps/atol/rtol when the op leaves float64
    prep: Callable | None = None   # applied to the first input inside the checked function (symmetrize)

    def __repr__(self) -> str:
        def show(v):
            if isinstance(v, Tensor):
                return f"{v.dtype}{list(v.data.shape)}"
            if isinstance(v, (list, tuple)):
                return "[" + ", ".join(show(x) for x in v) + "]"
            return repr(v)
        parts = [show(a) for a in self.args] + [f"{k}={show(v)}" for k, v in self.kwargs.items()]
        return "(" + ", ".join(parts) + ")" + (f" {self.note}" if self.note else "")


def _reseeded(x):
    """dropout's sample: the running generator seeded again before every call, so that its mask is fixed."""
    running().get().manual_seed(3)
    return x


def S(*args, gradgrad=True, note="", tol=None, prep=None, **kwargs) -> Sample:
    return Sample(args, kwargs, gradgrad, note, tol or {}, prep)


def sym(a):
    """(A + A^T) / 2: linalg.cholesky reads one triangle, so its gradient is checked on symmetric inputs."""
    return (a + OPS["transpose"].fn(a, -2, -1)) * 0.5


# float32 outputs: central differences need a larger step to rise above float32 rounding
F32_TOL = {"eps": 1e-2, "atol": 1e-4, "rtol": 1e-3}
#: through float16/bfloat16 (8 or 11 significant bits): a step large against their rounding
HALF_TOL = {"eps": 0.25, "atol": 5e-2, "rtol": 5e-2}


def _unary(make=lambda *s: T(*s)):
    return [S(make()), S(make(3)), S(make(2, 3))]


SAMPLES: dict[str, list[Sample]] = {
    # ----- arithmetic
    "add": [S(T(3), T(3)), S(T(2, 3), T(3)), S(T(), T(2, 1)), S(T(3), 2.5), S(T(2, 3), T(2, 3), alpha=2)],
    "sub": [S(T(3), T(3)), S(T(2, 3), T(2, 1)), S(T(3), 1.5), S(T(3), T(3), alpha=0.5)],
    "rsub": [S(T(3), 2.0), S(T(2, 3), T(3)), S(T(3), T(3), alpha=2)],
    "mul": [S(T(3), T(3)), S(T(2, 3), T(3)), S(T(), T(2, 2)), S(T(3), 2.5)],
    "div": [S(T(3), P(3)), S(T(2, 3), P(2, 1)), S(T(3), 4.0), S(P(), P(3)), S(T(3), P(3), rounding_mode="floor")],
    "rtruediv": [S(P(3), 2.0), S(P(2, 2), -1.5)],
    "pow": [S(T(3), 2), S(P(2, 3), 0.5), S(P(3), -1.5), S(P(3), T(3)), S(P(2, 3), T(3)), S(2.0, T(3)),
            S(P(), 3)],
    "rpow": [S(T(3), 2.0), S(T(2, 2), 0.5)],
    "float_power": [S(T(3), 2), S(P(2, 3), 0.5), S(P(3), T(3)), S(2.0, T(3))],
    "square": _unary(),
    "neg": _unary(),
    "reciprocal": _unary(lambda *s: P(*s)),
    "exp": _unary(),
    "expm1": _unary(),
    "log": _unary(lambda *s: P(*s)),
    "log1p": _unary(lambda *s: P(*s)),
    "sqrt": _unary(lambda *s: P(*s)),
    "rsqrt": _unary(lambda *s: P(*s)),
    "abs": _unary(away),
    "sign": [S(away(3), note="zero gradient")],
    "sin": _unary(),
    "cos": _unary(),
    "tan": _unary(),
    "tanh": _unary(),
    "sigmoid": _unary(),
    "erf": _unary(),
    "relu": _unary(away),
    "leaky_relu": [S(away(3)), S(away(2, 3), 0.2)],
    "hardswish": [S(away(4, gap=0.3, high=4)), S(away(2, 3))],
    "hardsigmoid": [S(away(4, gap=0.3, high=4), gradgrad=False, note="torch: NotImplemented twice"),
                    S(away(2, 3), gradgrad=False)],
    "mish": [S(T(4)), S(T(2, 3))],
    "selu": [S(away(3)), S(away(2, 3))],
    "celu": [S(away(3)), S(away(2, 3), 0.5)],
    "threshold": [S(away(3), 0.0, 0.5), S(away(2, 3), -0.3, 2.0)],
    "elu": [S(away(3)), S(away(2, 3), alpha=0.5)],
    "gelu": [S(T(3)), S(T(2, 3), approximate="tanh")],
    "silu": _unary(),
    "softplus": [S(T(3)), S(T(2, 3), beta=2, threshold=5)],
    "hardtanh": [S(away(3, gap=0.2, high=0.8)), S(away(4, gap=1.3, high=3)),
                 S(away(3, gap=0.1, high=0.4), min_val=-0.5, max_val=0.5)],
    "logsigmoid": _unary(),
    "floor": [S(T(3), note="zero gradient")],
    "ceil": [S(T(3), note="zero gradient")],
    "round": [S(T(3), note="zero gradient"), S(T(3), decimals=1)],
    # ----- clamp, maximum, where, masked_fill, lerp
    "clamp": [S(away(4, gap=0.6, high=2.0), -0.5, 0.5), S(away(3, gap=0.6), min=0.3), S(away(3, gap=0.6), max=0.3),
              S(T(3), min=T(3, low=-3, high=-2)), S(T(2, 3), max=T(3, low=2, high=3))],
    "clamp_min": [S(away(3, gap=0.2), 0.0),
                  S(away(2, 3, gap=0.2), Tensor(np.zeros(3), requires_grad=True), note="tensor bound")],
    "clamp_max": [S(away(3, gap=0.2), 0.0),
                  S(away(2, 3, gap=0.2), Tensor(np.zeros(3), requires_grad=True), note="tensor bound")],
    "maximum": [S(T(3), T(3)), S(T(2, 3), T(3))],
    "minimum": [S(T(3), T(3)), S(T(2, 3), T(3))],
    "where": [S(mask(True, False, True), T(3), T(3)), S(mask([True], [False]), T(2, 3), T(3)),
              S(mask(True, False), T(2), 0.5)],
    "masked_fill": [S(T(3), mask(True, False, True), 0.5), S(T(2, 3), mask(False, True, False), -1.0),
                    S(T(3), mask(True, False, True), T(), note="tensor value (MaskedFillBackward1)")],
    "lerp": [S(T(3), T(3), 0.3), S(T(3), T(3), 0.7), S(T(2, 3), T(3), T(2, 3, low=0.1, high=0.9))],
    # ----- reductions
    "sum": [S(T()), S(T(3)), S(T(2, 3), 1), S(T(2, 3), (0, 1)), S(T(2, 3, 2), 1, keepdim=True)],
    "mean": [S(T()), S(T(3)), S(T(2, 3), 0), S(T(2, 3, 2), (0, 2), keepdim=True)],
    "prod": [S(P(3)), S(T(2, 3), 1), S(P(2, 3), 0, keepdim=True)],
    "max": [S(T(4)), S(T(2, 3), 1), S(T(2, 3), 0, keepdim=True), S(T(3), T(3))],
    "min": [S(T(4)), S(T(2, 3), 1), S(T(3), T(3))],
    "amax": [S(T(4)), S(T(2, 3), 1), S(T(2, 3, 2), (0, 2), keepdim=True)],
    "amin": [S(T(4)), S(T(2, 3), 0)],
    "logsumexp": [S(T(3), 0), S(T(2, 3), 1), S(T(2, 3), (0, 1), keepdim=True)],
    "var": [S(T(4)), S(T(2, 3), 1), S(T(4), unbiased=False), S(T(2, 3), 0, keepdim=True, correction=0)],
    "std": [S(T(4)), S(T(2, 3), 1), S(T(2, 3), correction=0)],
    "norm": [S(away(3)), S(away(3), 1), S(away(2, 3), dim=1), S(away(2, 3), 3, dim=0, keepdim=True)],
    "cumsum": [S(T(3), 0), S(T(2, 3), 1)],
    "flip": [S(T(3), (0,)), S(T(2, 3), (0, 1))],
    "sort": [S(T(4)), S(T(2, 3), 0, descending=True), S(T(2, 3), stable=True, note="sort.stable (SortBackward1)")],
    # ----- shape, views, indexing
    "to": [S(T(3), "float64", note="same dtype"), S(T(3), "float32", note="float64 -> float32", tol=F32_TOL)],
    "float": [S(T(3), tol=F32_TOL)],
    "double": [S(T(3))],
    "half": [S(T(3), tol=HALF_TOL)],
    "bfloat16": [S(T(3), tol=HALF_TOL)],
    "long": [S(T(3, low=0.1, high=0.9), note="int64 result: no gradient")],
    "int": [S(T(3, low=0.1, high=0.9), note="int32 result: no gradient")],
    "short": [S(T(3, low=0.1, high=0.9), note="int16 result: no gradient")],
    "char": [S(T(3, low=0.1, high=0.9), note="int8 result: no gradient")],
    "byte": [S(T(3, low=0.1, high=0.9), note="uint8 result: no gradient")],
    "clone": _unary(),
    "contiguous": [S(T(2, 3))],
    "view": [S(T(2, 3), 6), S(T(2, 3), 3, 2), S(T(6), -1, 2)],
    "reshape": [S(T(2, 3), 6), S(T(2, 3), (3, -1)), S(T(), (1, 1))],
    "flatten": [S(T(2, 3)), S(T(2, 3, 2), 1)],
    "squeeze": [S(T(1, 3, 1)), S(T(1, 3), 0), S(T(1, 3, 1), (0, 2))],
    "unsqueeze": [S(T(3), 0), S(T(2, 3), -1), S(T(), 0)],
    "expand": [S(T(3), 2, 3), S(T(2, 1), 2, 4), S(T(), 3)],
    "expand_as": [S(T(3), T(2, 3, requires_grad=False))],
    "repeat": [S(T(3), 2), S(T(2, 3), 2, 1)],
    "t": [S(T(2, 3)), S(T(3))],
    "transpose": [S(T(2, 3), 0, 1), S(T(2, 3, 2), 0, 2)],
    "permute": [S(T(2, 3, 2), 2, 0, 1), S(T(2, 3), (1, 0))],
    "cat": [S([T(2, 3), T(1, 3)]), S([T(2, 3), T(2, 2)], 1)],
    "stack": [S([T(3), T(3)]), S([T(2, 3), T(2, 3)], 1)],
    "split": [S(T(5), 2), S(T(2, 4), [1, 3], 1)],
    "chunk": [S(T(5), 2), S(T(2, 4), 2, 1)],
    "unbind": [S(T(2, 3)), S(T(2, 3), 1)],
    "narrow": [S(T(5), 0, 1, 3), S(T(2, 4), 1, 2, 2)],
    "select": [S(T(3), 0, 1), S(T(2, 3), 1, -1)],
    "getitem": [S(T(3), 1), S(T(2, 3), (slice(None), 1)), S(T(5), slice(1, 4, 2)), S(T(4), [0, 2, 2]),
                S(T(3), mask(True, False, True)), S(T(2, 3), (0, 1)), S(T(3), Ellipsis, note="an alias")],
    "index_select": [S(T(4), 0, ints(0, 2, 2)), S(T(2, 3), 1, ints(2, 0))],
    "gather": [S(T(2, 3), 1, ints([0, 2], [1, 1])), S(T(3), 0, ints(2, 0))],
    # ----- linalg
    "matmul": [S(T(2, 3), T(3, 4)), S(T(3), T(3)), S(T(2, 3), T(3)), S(T(3), T(3, 2)), S(T(2, 2, 3), T(2, 3, 2)),
               S(T(2, 2, 3), T(3, 2)), S(T(2, 1, 2, 3), T(3, 3, 2))],
    "rmatmul": [S(T(3, 2), T(2, 3))],
    "mm": [S(T(2, 3), T(3, 4))],
    "bmm": [S(T(2, 2, 3), T(2, 3, 2))],
    "mv": [S(T(2, 3), T(3))],
    "dot": [S(T(3), T(3))],
    "outer": [S(T(3), T(2))],
    "addmm": [S(T(2, 4), T(2, 3), T(3, 4)), S(T(4), T(2, 3), T(3, 4), beta=0.5, alpha=2)],
    # ----- nn
    "softmax": [S(T(3), 0), S(T(2, 3), 1), S(T(2, 3, 2), 0)],
    "log_softmax": [S(T(3), 0), S(T(2, 3), 1)],
    "linear": [S(T(2, 3), T(4, 3), T(4)), S(T(3), T(2, 3)), S(T(3), T(2, 3), T(2)), S(T(2, 2, 3), T(4, 3), T(4))],
    # random ops: the generator reseeded before every call; their gradient is zero
    "bernoulli": [S(T(4, low=0.2, high=0.8), prep=_reseeded, note="zero gradient")],
    # torch.normal's gradient is zero by definition (not reparameterised): central differences see 1 (an expected
    # failure in test_gradcheck's KNOWN_GAPS); test_random checks the zero gradients
    "normal": [S(T(3), 1.0, prep=_reseeded, note="zero gradient by definition"),
               S(1.5, P(3), prep=_reseeded, note="zero gradient by definition: a tensor std"),
               S(T(2, 1), P(3), prep=_reseeded, note="zero gradient by definition: both tensors")],
    "dropout": [S(T(4), 0.5, prep=_reseeded, note="fixed mask (reseeded)"), S(T(2, 3), 0.5, training=False)],
    "mse_loss": [S(T(3), T(3)), S(T(2, 3), T(2, 3), reduction="sum"), S(T(3), T(3), reduction="none")],
    "l1_loss": [S(T(3, low=1, high=2), T(3, low=-1, high=0.5)),
                S(T(2, 2, low=1, high=2), T(2, 2, low=-1, high=0.5), reduction="none")],
    "kl_div": [S(T(2, 3), P(2, 3), reduction="sum"), S(T(2, 3), P(2, 3), reduction="batchmean"),
               S(T(3), T(3), reduction="none", log_target=True)],
    "smooth_l1_loss": [S(T(3, low=0.1, high=0.5), T(3, low=-0.3, high=0.0), note="|d| < beta"),
                       S(T(3, low=2, high=3), T(3, low=-0.5, high=0.0), reduction="sum", note="|d| > beta"),
                       S(T(3, low=0.1, high=0.5), T(3, low=-0.3, high=0.0), beta=2.0)],
    "huber_loss": [S(T(3, low=0.1, high=0.5), T(3, low=-0.3, high=0.0), note="|d| < delta"),
                   S(T(3, low=2, high=3), T(3, low=-0.5, high=0.0), reduction="none", note="|d| > delta"),
                   S(T(3, low=1.0, high=1.5), T(3, low=-0.3, high=0.0), delta=0.5)],
    "binary_cross_entropy": [S(T(3, low=0.2, high=0.8), Tensor(np.array([1.0, 0.0, 1.0]))),
                             S(T(2, 2, low=0.2, high=0.8), Tensor(np.array([[1.0, 0.0], [0.0, 1.0]])),
                               weight=Tensor(np.array([0.5, 2.0])), reduction="sum")],
    "binary_cross_entropy_with_logits": [S(T(3), T(3, low=0.1, high=0.9)),
                                         S(T(2, 3), T(2, 3, low=0.1, high=0.9),
                                           pos_weight=Tensor(np.array([1.0, 2.0, 0.5])), reduction="sum")],
    "cross_entropy": [S(T(2, 3), ints(0, 2)), S(T(3, 4), ints(1, 0, 3), reduction="sum"),
                      S(T(2, 3), ints(2, 1), label_smoothing=0.1),
                      S(T(2, 3), ints(0, 1), weight=Tensor(np.array([0.5, 1.0, 2.0]))),
                      S(T(2, 3), T(2, 3, low=0.1, high=0.9, requires_grad=False), note="class probabilities")],
    "nll_loss": [S(T(2, 3), ints(1, 0)), S(T(3, 4), ints(3, 3, 0), reduction="none"),
                 S(T(2, 3, 2), Tensor(np.array([[0, 2], [1, 1]])), note="K-dimensional (NllLoss2DBackward0)"),
                 S(T(2, 3, 2, 1), Tensor(np.array([[[0], [2]], [[1], [1]]])), reduction="none", note="4-d")],
    # ----- issue 12: hyperbolic/inverse trig, log2/log10, atan2/hypot
    "sinh": _unary(),
    "cosh": _unary(),
    "asinh": _unary(),
    "acosh": _unary(lambda *s: P(*s, low=1.2, high=3.0)),
    "atanh": _unary(lambda *s: T(*s, low=-0.8, high=0.8)),
    "asin": _unary(lambda *s: T(*s, low=-0.8, high=0.8)),
    "acos": _unary(lambda *s: T(*s, low=-0.8, high=0.8)),
    "atan": _unary(),
    "log2": _unary(lambda *s: P(*s)),
    "log10": _unary(lambda *s: P(*s)),
    "atan2": [S(T(3), away(3)), S(T(2, 3), away(3))],
    "hypot": [S(away(3), away(3)), S(away(2, 3), away(3))],
    # ----- issue 12: special functions
    "lgamma": [S(P(3)), S(T(2, 3, low=-2.7, high=-2.2)), S(P(2, 2, low=3.0, high=12.0))],
    "digamma": [S(P(3)), S(T(3, low=-1.8, high=-1.2)), S(P(2, 2, low=6.0, high=15.0))],
    "polygamma": [S(1, P(3)), S(2, P(2, 2)), S(3, T(3, low=-0.8, high=-0.2)), S(0, P(3))],
    "special.multigammaln": [S(P(3, low=2.0, high=4.0), 1), S(P(2, 2, low=2.0, high=4.0), 3)],
    "mvlgamma": [S(P(3, low=2.0, high=4.0), 2)],
    "xlogy": [S(T(3), P(3)), S(T(2, 3), P(3)), S(2.5, P(3)), S(T(3), 3.0), S(T(3), 0.5)],
    "logaddexp": [S(T(3), T(3)), S(T(2, 3), T(3))],
    # ----- issue 12: matrix structure
    "trace": [S(T(3, 3)), S(T(2, 4))],
    "diag": [S(T(3)), S(T(3), 1), S(T(3, 3)), S(T(3, 4), -1)],
    "diagonal": [S(T(3, 3)), S(T(2, 3, 4), 1, 1, 2), S(T(3, 4), -1)],
    "linalg.diagonal": [S(T(2, 3, 3)), S(T(3, 4), offset=1)],
    "diag_embed": [S(T(3)), S(T(2, 3), 1), S(T(2, 3), 0, 0, 2)],
    "tril": [S(T(3, 3)), S(T(2, 3, 4), -1)],
    "triu": [S(T(3, 3)), S(T(2, 3, 4), 1)],
    # ----- issue 12: linalg
    "linalg.det": [S(T(3, 3)), S(T(2, 2, 2))],
    "det": [S(T(3, 3))],
    "linalg.slogdet": [S(T(3, 3)), S(T(2, 2, 2))],
    "slogdet": [S(T(3, 3))],
    "logdet": [S(Tensor(np.array([[2.0, 0.5, 0.1], [0.3, 1.5, 0.2], [0.1, 0.4, 1.2]]), requires_grad=True))],
    "linalg.inv": [S(T(3, 3)), S(T(2, 2, 2))],
    "inverse": [S(T(3, 3))],
    "linalg.solve": [S(T(3, 3), T(3)), S(T(3, 3), T(3, 2)), S(T(2, 3, 3), T(3, 2)), S(T(3, 3), T(2, 3), left=False)],
    "linalg.cholesky": [S(Tensor(np.array([[2.0, 0.5, 0.1], [0.5, 1.5, 0.2], [0.1, 0.2, 1.2]]), requires_grad=True),
                          prep=sym),
                        S(Tensor(np.array([[[2.0, 0.3], [0.3, 1.0]], [[1.5, -0.2], [-0.2, 0.8]]]), requires_grad=True),
                          upper=True, prep=sym)],
    "linalg.vector_norm": [S(away(3)), S(away(2, 3), 1, 1), S(away(2, 3), 3, (0, 1), keepdim=True),
                           S(away(4), "inf")],
    "linalg.norm": [S(away(3)), S(away(2, 3)), S(away(2, 3), "fro"), S(away(3, 3), 1), S(away(3, 3), "-inf"),
                    S(away(2, 3), 3, 1), S(away(2, 3, 2), None, (0, 2)), S(T(3, 4), 2), S(T(4, 3), "nuc"),
                    S(T(2, 3, 4), -2, (2, 0))],
    "linalg.matrix_norm": [S(T(3, 3), 2), S(T(3, 4), -2), S(T(2, 3, 4), "nuc"),
                           S(T(2, 3, 4), "nuc", (0, 2), keepdim=True), S(T(4, 3), 2, (-1, -2), True),
                           S(T(3, 4)), S(away(2, 3, 3), "inf")],
    # distinct singular values (T spreads its values); full_matrices=True on rectangular inputs leaves the extra
    # columns of U (rows of Vh) undetermined, so they are checked with full_matrices=False (torch's OpInfo too)
    "linalg.svd": [S(T(3, 3)), S(T(4, 3), full_matrices=False), S(T(3, 4), full_matrices=False),
                   S(T(2, 3, 2), full_matrices=False), S(T(2, 2, 2))],
    "svd": [S(T(4, 3)), S(T(3, 3), some=False), S(T(2, 3, 4))],
    "linalg.svdvals": [S(T(3, 3)), S(T(2, 4, 3)), S(T(3, 5))],
    "linalg.cross": [S(T(3), T(3)), S(T(2, 3), T(1, 3)), S(T(3, 2), T(3, 2), dim=0)],
    "cross": [S(T(2, 3), T(2, 3), dim=1)],
    # ----- issue 12: scatter/index writes, selections, scans
    "scatter": [S(T(3, 4), 0, ints([0, 1, 2, 0], [2, 0, 1, 1]), T(2, 4), note="distinct targets per column"),
                S(T(3, 4), 1, ints([3], [0], [1]), 1.5), S(T(2, 3), -1, ints([2, 0], [1, 2]), T(2, 2))],
    "scatter_add": [S(T(3, 4), 0, ints([0, 1, 2, 0], [0, 0, 1, 1]), T(2, 4)), S(T(4), 0, ints(1, 1, 3), T(3))],
    "index_add": [S(T(3, 2), 0, ints(0, 2, 0), T(3, 2)), S(T(2, 3), 1, ints(2, 1), T(2, 2), alpha=2.0)],
    "index_copy": [S(T(3, 2), 0, ints(2, 0), T(2, 2)), S(T(2, 3), -1, ints(1,), T(2, 1))],
    "index_fill": [S(T(3, 2), 0, ints(0, 2), 1.5), S(T(2, 3), -1, ints(1, 1), T(), note="tensor value, repeated index"),
                   S(T(), 0, ints(0), T(), note="0-d")],
    "masked_select": [S(T(2, 3), mask([True, False, True], [False, True, True])), S(T(3), mask([True], [False]))],
    "topk": [S(T(5), 2), S(T(4, 2), 3, 0, largest=False), S(T(3, 4), 2, 1, sorted=False)],
    "kthvalue": [S(T(5), 2), S(T(3, 4), 3, 1, keepdim=True)],
    "roll": [S(T(5), 2), S(T(2, 3), (1, -1), (0, 1)), S(T(2, 3), 4)],
    "cumprod": [S(T(4), 0), S(away(2, 3), 1), S(Tensor(np.array([0.5, 0.0, 2.0, -1.5]), requires_grad=True), 0,
                                                note="with a zero"), S(away(2, 3), -1)],
    "logcumsumexp": [S(T(4), 0), S(T(2, 3), 1), S(T(2, 3), -2)],
    "einsum": [S("ij,jk->ik", T(2, 3), T(3, 4)), S("ii->i", T(3, 3)), S("ii", T(3, 3)), S("i,j->ij", T(3), T(2)),
               S("bij,bjk->bik", T(2, 2, 3), T(2, 3, 2)), S("...ij,...jk->...ik", T(2, 2, 3), T(3, 2)),
               S("ij,kj->ik", T(2, 3), T(4, 3)), S("ij,jk,kl->il", T(2, 3), T(3, 3), T(3, 2)), S("ij->", T(2, 3)),
               S("ij,ij->i", T(2, 3), T(2, 3))],
    # ----- issue 12: nn.functional
    "normalize": [S(away(2, 3)), S(away(3, 2), 1.0, 0)],
    "cosine_similarity": [S(T(2, 3), T(2, 3)), S(T(2, 3), T(1, 3), dim=1), S(T(3, 2), T(3, 2), 0)],
    "pairwise_distance": [S(T(2, 3), T(2, 3, low=2, high=3)), S(T(3), T(3, low=2, high=3), p=3.0, keepdim=True)],
    "softmin": [S(T(3), 0), S(T(2, 3), 1)],
    "glu": [S(T(2, 4)), S(T(4, 3), 0)],
    "layer_norm": [S(T(2, 3), (3,)), S(T(2, 2, 3), (2, 3), T(2, 3), T(2, 3)), S(T(3, 4), [4], weight=T(4))],
    # padding_idx and scale_grad_by_freq change the gradient on purpose (no finite-difference check):
    # tests/engine/test_new_ops_torch.py compares them with torch
    "embedding": [S(ints([0, 2], [1, 1]), T(4, 3)), S(ints(0, 3, 3), T(4, 2))],
    "pad": [S(T(2, 3), (1, 2)), S(T(2, 3), (1, 0, -1, 1), value=0.5), S(T(1, 2, 4), (2, 1), mode="reflect"),
            S(T(1, 3, 3), (1, 1, 2, 0), mode="replicate"), S(T(1, 3, 4), (1, 2, 2, 1), mode="reflect"),
            S(T(2, 3, 3, 2), (1, 1, 0, 1, 1, 0), mode="reflect"), S(T(2, 3), (0, 2), mode="replicate"),
            S(T(1, 2, 2, 2), (1, 0, 0, 1, 1, 1), mode="replicate")],
    "conv1d": [S(T(2, 2, 5), T(3, 2, 3), T(3)), S(T(1, 4, 7), T(2, 2, 2), stride=2, padding=1, groups=2),
               S(T(2, 6), T(2, 2, 3), dilation=2, note="unbatched")],
    "conv2d": [S(T(1, 2, 4, 4), T(3, 2, 2, 2), T(3)), S(T(2, 2, 5, 4), T(2, 1, 3, 2), stride=2, padding=1, groups=2),
               S(T(1, 4, 4), T(2, 1, 2, 2), padding="same", note="unbatched"),
               S(T(1, 1, 5, 5), T(1, 1, 3, 3), dilation=2, padding=(1, 0))],
    # ----- issue 24: composites (their parts' rules), pointwise, baddbmm, normalization
    "view_as": [S(T(2, 3), T(3, 2, requires_grad=False))],
    "reshape_as": [S(T(2, 3).t(), T(6, requires_grad=False))],
    "movedim": [S(T(2, 3, 4), 0, 2), S(T(2, 3, 4), (0, 1), (2, 0))],
    "broadcast_to": [S(T(3), (2, 3)), S(T(2, 1), (2, 2, 3))],
    "tile": [S(T(2, 3), (2,)), S(T(3), (2, 2))],
    "unflatten": [S(T(2, 4), 1, (2, 2)), S(T(6), 0, (-1, 3))],
    "tensor_split": [S(T(2, 5), 2, 1), S(T(6), [1, 4])],
    "take_along_dim": [S(T(2, 3), ints([0, 2, 1], [1, 1, 0]), 1), S(T(2, 3), ints([[2, 0]]).view(2, 1), 1),
                       S(T(2, 3), ints(5, 0, 2))],
    "repeat_interleave": [S(T(2, 3), 2, dim=1), S(T(3), ints(1, 0, 2)), S(T(2, 2), 3)],
    "addcmul": [S(T(3), T(3), T(3)), S(T(2, 3), T(3), T(2, 1), value=0.5)],
    "addcdiv": [S(T(3), T(3), P(3)), S(T(2, 3), T(3), P(2, 1), value=-0.5)],
    "remainder": [S(T(3, low=0.1, high=0.6), 0.7), S(P(3), T(3, low=2.5, high=3.0))],
    "nan_to_num": [S(T(3)), S(T(2, 2), nan=1.0)],
    "trunc": [S(away(3), note="zero gradient")],
    "frac": [S(T(3, low=-2.0, high=2.0)), S(T(2, 2))],
    "exp2": [S(T(3)), S(T(2, 3, low=-3.0, high=3.0))],
    "deg2rad": [S(T(3, low=-90.0, high=90.0))],
    "rad2deg": [S(T(2, 3))],
    "sgn": [S(away(3), note="zero gradient")],
    "sinc": [S(T(3, low=0.2, high=1.5)), S(T(2, 3, low=-2.5, high=-0.3))],
    "logit": [S(T(3, low=0.1, high=0.9)), S(T(2, 3, low=0.05, high=0.95), 0.2, note="eps: zero outside")],
    "erfinv": [S(T(3, low=-0.8, high=0.8)), S(T(2, 2, low=-0.5, high=0.9))],
    "baddbmm": [S(T(2, 2, 3), T(2, 2, 4), T(2, 4, 3)), S(T(3), T(2, 2, 4), T(2, 4, 3), beta=0.5, alpha=2)],
    "batch_norm": [S(T(4, 3), None, None, training=True), S(T(2, 3, 4), None, None, T(3), T(3), training=True),
                   S(T(2, 3), T(3, requires_grad=False), P(3).detach(), T(3), T(3), training=False)],
    "group_norm": [S(T(2, 4, 3), 2), S(T(2, 4), 4, T(4), T(4)), S(T(1, 6, 2, 2), 3, T(6), T(6), eps=1e-3)],
    "max_pool2d": [S(T(1, 2, 4, 4), 2), S(T(2, 5, 5), 3, stride=2, padding=1, ceil_mode=True),
                   S(T(1, 1, 5, 4), (2, 3), stride=1, dilation=(2, 1))],
    "avg_pool2d": [S(T(1, 2, 4, 4), 2), S(T(2, 5, 5), 3, stride=2, padding=1, ceil_mode=True),
                   S(T(1, 1, 5, 4), (2, 3), stride=(1, 2), padding=1, count_include_pad=False),
                   S(T(1, 1, 4, 4), 2, divisor_override=3)],
    "adaptive_avg_pool2d": [S(T(1, 2, 5, 4), (2, 3)), S(T(2, 4, 4), 1), S(T(1, 1, 3, 5), (4, None))],
    "max_pool1d": [S(T(2, 3, 7), 3, 2, 1), S(T(3, 6), 2, ceil_mode=True)],
    "avg_pool1d": [S(T(2, 3, 7), 3, 2, 1, count_include_pad=False), S(T(3, 6), 2)],
    "adaptive_avg_pool1d": [S(T(2, 3, 7), 3), S(T(3, 5), 1)],
    "scaled_dot_product_attention": [S(T(2, 3, 4), T(2, 5, 4), T(2, 5, 2)),
                                     S(T(3, 4), T(3, 4), T(3, 4), is_causal=True),
                                     S(T(1, 2, 3, 4), T(1, 2, 5, 4), T(1, 2, 5, 4), gradgrad=False,
                                       note="torch's fused CPU kernel: first order only"),
                                     S(T(1, 2, 3, 2), T(1, 2, 3, 2), T(1, 2, 3, 2), attn_mask=mask([True, False, True],
                                       [True, True, False], [True, True, True]), gradgrad=False)],
    "_safe_softmax": [S(T(2, 3), -1), S(T(3, 2), 0)],
    "interpolate": [S(T(1, 2, 3, 4), size=(5, 7)), S(T(2, 3, 4), scale_factor=1.5, mode="linear"),
                    S(T(1, 1, 3, 4), size=(4, 6), mode="bilinear", align_corners=True),
                    S(T(1, 1, 3, 3), size=(5, 4), mode="bicubic"), S(T(1, 2, 4, 4), size=(3, 3), mode="area"),
                    S(T(2, 2, 5), size=8, mode="nearest-exact"), S(T(2, 2, 5), size=8),
                    S(T(1, 1, 3, 4), size=(5, 7), mode="nearest-exact"), S(T(1, 2, 2, 3, 4), size=(3, 2, 5)),
                    S(T(1, 1, 2, 3, 4), scale_factor=1.5, mode="nearest-exact"),
                    S(T(1, 2, 3, 4, 5), size=(2, 3, 2), mode="area")],
    "quantile": [S(T(5), 0.3), S(T(3, 4), 0.6, 1, keepdim=True), S(T(2, 5), 0.5, 0, interpolation="midpoint"),
                 S(T(3, 4), T(2, low=0.1, high=0.9, requires_grad=False), 1)],
    "nanquantile": [S(T(5), 0.3), S(T(3, 4), 0.25, 1)],
    "median": [S(T(5)), S(T(3, 4), 1), S(T(3, 4), 0, keepdim=True)],
    "nanmedian": [S(T(4)), S(T(2, 5), 1)],
    # ----- creation from a tensor (no gradient reaches the input)
    "ones_like": [S(T(3), note="no gradient")],
    "zeros_like": [S(T(2, 3), note="no gradient")],
    "full_like": [S(T(3), 2.5, note="no gradient")],
    # ----- in-place (applied to a clone of the first argument)
    "addcmul_": [S(T(3), T(3), T(3), value=0.5)],
    "addcdiv_": [S(T(3), T(3), P(3), value=-0.5)],
    "lerp_": [S(T(3), T(3), 0.3), S(T(3), T(3), T(3, low=0.1, high=0.9))],
    "add_": [S(T(3), T(3)), S(T(2, 3), T(3), alpha=2), S(T(3), 1.5)],
    "sub_": [S(T(3), T(3)), S(T(3), 2.0)],
    "mul_": [S(T(3), T(3)), S(T(2, 3), 2.0)],
    "div_": [S(T(3), P(3)), S(T(3), 2.0)],
    "pow_": [S(P(3), 2), S(P(3), T(3))],
    "float_power_": [S(P(3), 2), S(P(3), T(3))],
    "abs_": [S(away(3))],
    "neg_": [S(T(3))],
    "exp_": [S(T(3))],
    "log_": [S(P(3))],
    "sqrt_": [S(P(3))],
    "sigmoid_": [S(T(3))],
    "tanh_": [S(T(3))],
    "relu_": [S(away(3))],
    "leaky_relu_": [S(away(3)), S(away(2, 3), 0.2)],
    "selu_": [S(away(3)), S(away(2, 3))],
    "celu_": [S(away(3)), S(away(2, 3), 0.5)],
    "threshold_": [S(away(3), 0.0, 0.5), S(away(2, 3), -0.3, 2.0)],
    "elu_": [S(away(3)), S(away(2, 3), alpha=0.5)],
    "clamp_": [S(away(4, gap=0.6), -0.5, 0.5)],
    "clamp_min_": [S(away(3, gap=0.2), 0.0)],
    "clamp_max_": [S(away(3, gap=0.2), 0.0)],
    "masked_fill_": [S(T(3), mask(True, False, True), 0.5),
                     S(T(2, 3), mask(True, False, True), T(), note="a tensor value")],
    "scatter_": [S(T(3, 4), 0, ints([0, 1, 2, 0], [2, 0, 1, 1]), T(2, 4)), S(T(3, 4), 1, ints([3], [0], [1]), 1.5)],
    "scatter_add_": [S(T(3, 4), 0, ints([0, 1, 2, 0], [0, 0, 1, 1]), T(2, 4))],
    "index_add_": [S(T(3, 2), 0, ints(0, 2, 0), T(3, 2)), S(T(2, 3), 1, ints(2, 1), T(2, 2), alpha=2.0)],
    "index_copy_": [S(T(3, 2), 0, ints(2, 0), T(2, 2))],
    "index_fill_": [S(T(3, 2), 0, ints(0, 2), -0.5), S(T(2, 3), 1, ints(0, 2), T())],
    "zero_": [S(T(3), note="zero gradient")],
    "uniform_": [S(T(3), -1.0, 2.0, prep=_reseeded, note="zero gradient")],
    "normal_": [S(T(3), 0.5, 2.0, prep=_reseeded, note="zero gradient"),
                S(T(20), prep=_reseeded, note="16 or more: the block kernel")],
    "bernoulli_": [S(T(3), 0.3, prep=_reseeded, note="zero gradient"),
                   S(T(2, 3), T(3, low=0.2, high=0.8), prep=_reseeded, note="a tensor p")],
    "random_": [S(T(3), 0, 2, prep=_reseeded, note="zero gradient"), S(T(3), 5, prep=_reseeded, note="to"),
                S(T(3), prep=_reseeded, note="the dtype's whole range")],
    "exponential_": [S(T(3), 2.0, prep=_reseeded, note="zero gradient")],
    "fill_": [S(T(3), 2.0, note="zero gradient"), S(T(3), T(), note="tensor value")],
    "copy_": [S(T(3), T(3)), S(T(2, 3), T(3))],
    "setitem": [S(T(3), 1, T()), S(T(2, 3), (slice(None), 0), T(2)), S(T(4), [0, 2], T(2)), S(T(3), 0, 2.0)],
}


#: the in-place forms declared from their op (``ops/inplace.py``'s ``_inplace_of``) take their op's samples whose
#: first argument is a tensor of the result's shape and dtype (those the in-place form can write into itself)
INPLACE_FORMS = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "floor",
                 "ceil", "round", "sign", "square", "erf", "erfinv", "expm1", "log1p", "log2", "log10", "reciprocal",
                 "rsqrt", "digamma", "lgamma", "nan_to_num", "atan2", "hypot", "xlogy", "remainder", "cumsum",
                 "cumprod", "tril", "triu", "addmm", "baddbmm", "trunc", "frac", "exp2", "deg2rad", "rad2deg", "sgn",
                 "sinc", "logit", "hardtanh", "silu", "hardswish", "hardsigmoid", "mish")


def _writes_into_first(name: str, sample: Sample) -> bool:
    first = sample.args[0] if sample.args else None
    if not isinstance(first, Tensor):
        return False
    out = OPS[name].fn(*sample.args, **sample.kwargs)
    return isinstance(out, Tensor) and out.data.shape == first.data.shape and out.dtype == first.dtype


for _name in INPLACE_FORMS:
    SAMPLES[f"{_name}_"] = [s for s in SAMPLES[_name] if _writes_into_first(_name, s)]

def differentiable_ops() -> list[str]:
    """Every differentiable op of the table that takes a tensor, by its primary name (aliases share the
    entry). Creation ops (``ones``, ``arange``) take no tensor, so there is nothing to differentiate."""
    seen, names = set(), []
    for spec in OPS.values():
        if spec.differentiable and (spec.tensors or spec.tensor_lists) and id(spec) not in seen:
            seen.add(id(spec))
            names.append(spec.name)
    return sorted(names)


def _call(name: str, args: tuple, kwargs: dict):
    spec = OPS[name]
    if spec.inplace:
        first = OPS["clone"].fn(args[0])
        spec.fn(first, *args[1:], **kwargs)
        return first
    out = spec.fn(*args, **kwargs)
    if isinstance(out, tuple) and hasattr(out, "_fields"):  # (values, indices)
        return tuple(out)
    return out


def as_function(name: str, sample: Sample):
    """(inputs, fn) for gradcheck: fn(*inputs) calls op ``name``. Tensor lists (cat, stack) and tensor
    keyword arguments become separate inputs so that each is differentiated."""
    inputs, layout = [], []
    for a in sample.args:
        if isinstance(a, list) and a and all(isinstance(t, Tensor) for t in a):
            layout.append(len(a))
            inputs.extend(a)
        else:
            layout.append(None)
            inputs.append(a)
    kw_names = [k for k, v in sample.kwargs.items() if isinstance(v, Tensor)]
    inputs.extend(sample.kwargs[k] for k in kw_names)

    def fn(*flat):
        args, i = [], 0
        for n in layout:
            if n is None:
                args.append(flat[i])
                i += 1
            else:
                args.append(list(flat[i:i + n]))
                i += n
        kwargs = dict(sample.kwargs)
        kwargs.update(zip(kw_names, flat[i:]))
        if sample.prep is not None:
            args[0] = sample.prep(args[0])
        return _call(name, tuple(args), kwargs)

    return inputs, fn
