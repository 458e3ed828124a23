"""nn functions: graphs and saved slots against the torch oracle's catalog, values against numpy formulas,
torch's error messages, float64 gradient checks (first and second order) and, when torch is installed,
values and gradients against torch itself."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from gradserve_server.engine import backward
from gradserve_server.engine.generator import running
from gradserve_server.engine.ops import nn as N
from gradserve_server.engine.tensor import Tensor, tensor
from gradserve_server.engine.testing import gradcheck, gradgradcheck

from .test_linalg import catalog_case, check_against_catalog, f64, raises


def _np_log_softmax(x, axis):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


# ----- graphs as in the oracle catalog -------------------------------------------------------------------

CATALOG_EXPRS = [
    "F.softmax(x, dim=0)", "x.softmax(0)", "F.softmax(A, dim=1)", "F.log_softmax(x, dim=0)",
    "F.cross_entropy(A, cls)", "F.cross_entropy(A, cls, reduction='sum')",
    "F.nll_loss(F.log_softmax(A, dim=1), cls)",
    "F.mse_loss(x, y)", "F.mse_loss(x, y, reduction='sum')", "F.mse_loss(x, y, reduction='none')",
    "F.mse_loss(x, c)", "F.l1_loss(x, y)", "F.smooth_l1_loss(x, y)", "F.huber_loss(x, y)",
    "F.binary_cross_entropy_with_logits(x, tgt)", "F.binary_cross_entropy(x.sigmoid(), tgt)",
    "F.linear(A, W, b)", "F.linear(A, W)", "F.linear(x, W, b)", "F.linear(x, W)",
]


@pytest.mark.parametrize("expr", CATALOG_EXPRS)
def test_nn_graph_value_and_grads_match_torch(expr):
    check_against_catalog(expr)


def test_nll_loss_saves_ignore_index_as_torch_shows_it_and_total_weight_as_a_tensor():
    out = check_against_catalog("F.cross_entropy(A, cls)")
    node = out.grad_fn
    assert node.saved["ignore_index"] == 18446744073709551516  # -100 read back as uint64, as torch does
    assert node.saved["reduction"] == 1 and node.saved["weight"] is None
    assert catalog_case("F.cross_entropy(A, cls)")["graph"]["nodes"]["n0"]["saved"]["_saved_total_weight"][
        "dtype"] == "float32"


def test_dropout_graph_is_mul_with_the_scaled_mask_saved():
    x = tensor([1.0, -2.0, 3.0, 4.0, 5.0, 6.0], requires_grad=True)
    out = N.dropout(x, 0.5)
    node = out.grad_fn
    assert node.name == "MulBackward0"
    assert node.next_functions[0][0].variable is x and node.next_functions[1] == (None, 0)
    assert node.saved["self"] is None
    mask = node.saved["other"].tensor.data
    assert mask.dtype == np.float32 and set(np.unique(mask)) <= {0.0, 2.0}
    np.testing.assert_array_equal(out.data, x.data * mask)
    backward(out, tensor(np.ones(6, np.float32)))
    np.testing.assert_array_equal(x.grad.data, mask)


def test_dropout_is_reproducible_per_seed():
    x = f64(50)
    running().get().manual_seed(7)
    a = N.dropout(x, 0.3)
    running().get().manual_seed(7)
    b = N.dropout(x, 0.3)
    np.testing.assert_array_equal(a.data, b.data)
    kept = a.data != 0
    np.testing.assert_allclose(a.data[kept], x.data[kept] / 0.7)


def test_dropout_returns_the_input_itself_when_it_does_nothing():
    x = f64(3)
    assert N.dropout(x, 0.0) is x
    assert N.dropout(x, 0.5, training=False) is x


def test_dropout_p1_multiplies_by_a_0d_zero():
    x = tensor([1.0, 2.0], requires_grad=True)
    out = N.dropout(x, 1.0)
    assert out.data.tolist() == [0.0, 0.0]
    assert out.grad_fn.saved["other"].tensor.data.shape == ()


def test_cross_entropy_with_probabilities_divides_by_the_batch_size():
    A = f64(2, 3)
    P = Tensor(np.array([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]]))
    out = N.cross_entropy(A, P)
    assert out.grad_fn.name == "DivBackward1"
    expected = -(_np_log_softmax(A.data, 1) * P.data).sum() / 2
    np.testing.assert_allclose(out.data, expected)


def test_linear_3d_contiguous_input_with_bias_flattens_through_addmm():
    out = N.linear(f64(4, 2, 3), f64(2, 3, seed=1), f64(2, seed=2))
    assert out.grad_fn.name == "ViewBackward0"
    assert out.grad_fn.next_functions[0][0].name == "AddmmBackward0"


# ----- values --------------------------------------------------------------------------------------------

def test_softmax_is_numerically_stable():
    out = N.softmax(tensor([1000.0, 1001.0, 1002.0]), 0)
    e = np.exp(np.array([-2.0, -1.0, 0.0]))
    np.testing.assert_allclose(out.data, e / e.sum(), rtol=1e-6)
    assert np.isfinite(N.log_softmax(tensor([1000.0, -1000.0]), 0).data).all()


def test_softmax_dtype_casts_first():
    x = tensor([1.0, 2.0], requires_grad=True)
    out = N.softmax(x, 0, dtype="float64")
    assert out.dtype == "float64"
    assert out.grad_fn.next_functions[0][0].name == "ToCopyBackward0"


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_regression_losses_values(reduction):
    x, y = f64(2, 3), f64(2, 3, seed=5)
    d = x.data - y.data
    red = {"none": lambda v: v, "mean": np.mean, "sum": np.sum}[reduction]
    np.testing.assert_allclose(N.mse_loss(x, y, reduction).data, red(d * d))
    np.testing.assert_allclose(N.l1_loss(x, y, reduction).data, red(np.abs(d)))
    z = np.abs(d)
    np.testing.assert_allclose(N.smooth_l1_loss(x, y, reduction, beta=0.5).data,
                               red(np.where(z < 0.5, 0.5 * z * z / 0.5, z - 0.25)))
    np.testing.assert_allclose(N.huber_loss(x, y, reduction, delta=0.5).data,
                               red(np.where(z < 0.5, 0.5 * z * z, 0.5 * (z - 0.25))))


def test_binary_cross_entropy_clamps_the_log_at_minus_100():
    out = N.binary_cross_entropy(tensor([0.0, 1.0]), tensor([1.0, 0.0]), reduction="none")
    assert out.data.tolist() == [100.0, 100.0]


def test_nll_loss_weight_ignore_index_and_reductions():
    logp = f64(3, 4)
    target = tensor([1, -100, 3])
    w = Tensor(np.array([1.0, 2.0, 3.0, 4.0]))
    picked = np.array([logp.data[0, 1] * 2.0, logp.data[2, 3] * 4.0])
    np.testing.assert_allclose(N.nll_loss(logp, target, w).data, -picked.sum() / 6.0)
    np.testing.assert_allclose(N.nll_loss(logp, target, w, reduction="sum").data, -picked.sum())
    np.testing.assert_allclose(N.nll_loss(logp, target, w, reduction="none").data, [-picked[0], 0.0, -picked[1]])
    one = N.nll_loss(f64(4), tensor(2), reduction="none")
    assert one.shape == ()


def test_cross_entropy_label_smoothing_matches_the_formula():
    A = f64(2, 3)
    out = N.cross_entropy(A, tensor([0, 2]), label_smoothing=0.1)
    lp = _np_log_softmax(A.data, 1)
    nll = -(lp[0, 0] + lp[1, 2]) / 2
    smooth = -lp.sum(1).mean()
    np.testing.assert_allclose(out.data, 0.9 * nll + 0.1 / 3 * smooth)


def test_mse_loss_warns_and_broadcasts_when_sizes_differ():
    with pytest.warns(UserWarning, match=r"Using a target size \(torch.Size\(\[1\]\)\) that is different"):
        out = N.mse_loss(f64(3), f64(1, seed=1))
    assert out.grad_fn.next_functions[1][0].name == "ExpandBackward0"


# ----- errors --------------------------------------------------------------------------------------------

def _o(*s):
    return Tensor(np.ones(s, np.float32))


@pytest.mark.parametrize("fn,message,exception", [
    (lambda: N.mse_loss(_o(3), _o(3), reduction="foo"), "foo is not a valid value for reduction", "ValueError"),
    (lambda: N.nll_loss(_o(2, 3), tensor([0, 5])), "Target 5 is out of bounds.", "IndexError"),
    (lambda: N.nll_loss(_o(2, 3), tensor([0, -1])), "Target -1 is out of bounds.", "IndexError"),
    (lambda: N.cross_entropy(_o(2, 3), tensor([0, 3])), "Target 3 is out of bounds.", "IndexError"),
    (lambda: N.nll_loss(_o(2, 3), tensor([0, 1, 1])),
     "Expected input batch_size (2) to match target batch_size (3).", "ValueError"),
    (lambda: N.nll_loss(_o(2, 3), tensor([0.0, 1.0])),
     "expected target dtype to be Long or Byte, but got Float", "RuntimeError"),
    (lambda: N.nll_loss(_o(2, 3), tensor([0, 1]), weight=_o(2)),
     "weight tensor should be defined either for all 3 classes or no classes but got weight tensor of shape: [2]",
     "RuntimeError"),
    (lambda: N.cross_entropy(_o(2, 3), Tensor(np.ones((2, 3), np.int64))),
     "Expected floating point type for target with class probabilities, got Long", "RuntimeError"),
    (lambda: N.cross_entropy(_o(2, 3), _o(2, 3), ignore_index=1),
     "ignore_index is not supported for floating point target", "RuntimeError"),
    (lambda: N.cross_entropy(_o(2, 3), tensor([0, 1]), label_smoothing=1.5),
     "label_smoothing must be between 0.0 and 1.0. Got: 1.5", "RuntimeError"),
    (lambda: N.mse_loss(_o(3), _o(2)),
     "The size of tensor a (3) must match the size of tensor b (2) at non-singleton dimension 0", "RuntimeError"),
    (lambda: N.binary_cross_entropy(_o(3) * 0.5, _o(2)),
     "Using a target size (torch.Size([2])) that is different to the input size (torch.Size([3])) is deprecated. "
     "Please ensure they have the same size.", "ValueError"),
    (lambda: N.binary_cross_entropy(_o(3) * 2, _o(3)), "all elements of input should be between 0 and 1",
     "RuntimeError"),
    (lambda: N.binary_cross_entropy_with_logits(_o(3), _o(2)),
     "Target size (torch.Size([2])) must be the same as input size (torch.Size([3]))", "ValueError"),
    (lambda: N.smooth_l1_loss(_o(3), _o(3), beta=-1.0),
     "smooth_l1_loss does not support negative values for beta.", "RuntimeError"),
    (lambda: N.huber_loss(_o(3), _o(3), delta=0.0),
     "huber_loss does not support non-positive values for delta.", "RuntimeError"),
    (lambda: N.dropout(_o(3), 1.5), "dropout probability has to be between 0 and 1, but got 1.5", "ValueError"),
    (lambda: N.softmax(tensor([1, 2]), 0), "\"softmax_lastdim_kernel_impl\" not implemented for 'Long'",
     "NotImplementedError"),
    (lambda: N.linear(_o(2, 3), _o(2, 4), _o(2)), "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x2)",
     "RuntimeError"),
])
def test_errors_use_torchs_messages(fn, message, exception):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with raises(message, exception):
            fn()


# ----- gradients (float64 finite differences) -------------------------------------------------------------

def _probs(*shape, seed=0):
    return Tensor(np.random.default_rng(seed).uniform(0.1, 0.9, shape), requires_grad=True)


GRAD_CASES = [
    ("softmax", lambda x: N.softmax(x, 1), [f64(2, 3)]),
    ("softmax dim0", lambda x: N.softmax(x, 0), [f64(3, 2)]),
    ("log_softmax", lambda x: N.log_softmax(x, -1), [f64(2, 3)]),
    ("linear 2d bias", N.linear, [f64(2, 3), f64(4, 3, seed=1), f64(4, seed=2)]),
    ("linear 1d", N.linear, [f64(3), f64(4, 3, seed=1), f64(4, seed=2)]),
    ("linear 3d nobias", N.linear, [f64(2, 2, 3), f64(4, 3, seed=1)]),
    ("mse mean", N.mse_loss, [f64(2, 3), f64(2, 3, seed=1)]),
    ("mse none", lambda a, b: N.mse_loss(a, b, "none"), [f64(3), f64(3, seed=1)]),
    ("l1", N.l1_loss, [f64(2, 3), f64(2, 3, seed=1, low=2, high=3)]),
    ("smooth_l1", lambda a, b: N.smooth_l1_loss(a, b, "sum", beta=0.7), [f64(4), Tensor(
        np.array([0.1, -0.9, 2.5, -2.0]), requires_grad=True)]),
    ("huber", lambda a, b: N.huber_loss(a, b, "mean", delta=0.7), [f64(4), Tensor(
        np.array([0.1, -0.9, 2.5, -2.0]), requires_grad=True)]),
    ("bce", N.binary_cross_entropy, [_probs(2, 3), _probs(2, 3, seed=1)]),
    ("bce weight sum", lambda a, b: N.binary_cross_entropy(a, b, Tensor(np.array([1.0, 2.0, 0.5])), "sum"),
     [_probs(3), _probs(3, seed=1)]),
    ("bce logits", N.binary_cross_entropy_with_logits, [f64(2, 3), _probs(2, 3, seed=1)]),
    ("bce logits pos_weight", lambda a, b: N.binary_cross_entropy_with_logits(
        a, b, Tensor(np.array([0.5, 1.0, 2.0])), Tensor(np.array([1.0, 3.0, 0.5]))), [f64(2, 3), _probs(2, 3)]),
    ("nll", lambda a: N.nll_loss(a, tensor([1, 0, 2])), [f64(3, 4)]),
    ("nll weight none", lambda a: N.nll_loss(a, tensor([1, -100, 2]), Tensor(np.array([1.0, 2.0, 3.0, 4.0])),
                                             reduction="none"), [f64(3, 4)]),
    ("cross_entropy", lambda a: N.cross_entropy(a, tensor([1, 0])), [f64(2, 3)]),
    ("cross_entropy 1d", lambda a: N.cross_entropy(a, tensor(2)), [f64(3)]),
    ("cross_entropy smoothing", lambda a: N.cross_entropy(a, tensor([1, 0]), label_smoothing=0.2), [f64(2, 3)]),
    ("cross_entropy probs", lambda a, p: N.cross_entropy(a, p), [f64(2, 3), _probs(2, 3)]),
    ("dropout", lambda a: N.dropout(running().get().manual_seed(1) and a, 0.4), [f64(2, 3)]),  # a fixed mask
]


@pytest.mark.parametrize("name,fn,inputs", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradcheck(name, fn, inputs):
    assert gradcheck(fn, inputs)


@pytest.mark.parametrize("name,fn,inputs", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradgradcheck(name, fn, inputs):
    assert gradgradcheck(fn, inputs)


# ----- against torch itself, when it is installed ---------------------------------------------------------

def _torch_cases(torch, F):
    return [
        ("softmax", lambda m, a: m.softmax(a, 1)),
        ("log_softmax", lambda m, a: m.log_softmax(a, 0)),
        ("mse", lambda m, a, b: m.mse_loss(a, b)),
        ("smooth_l1", lambda m, a, b: m.smooth_l1_loss(a, b, beta=0.3)),
        ("huber", lambda m, a, b: m.huber_loss(a, b, delta=0.3)),
        ("bce_logits", lambda m, a, b: m.binary_cross_entropy_with_logits(a, b.sigmoid())),
        ("ce", lambda m, a: m.cross_entropy(a, (torch.tensor([2, 0, 1]) if m is F else tensor([2, 0, 1])))),
        ("ce_smooth", lambda m, a: m.cross_entropy(a, (torch.tensor([2, -100, 1]) if m is F else
                                                       tensor([2, -100, 1])), label_smoothing=0.3)),
        ("linear", lambda m, a, b: m.linear(a, b)),
    ]


@pytest.mark.parametrize("case", range(9))
def test_values_and_gradients_match_torch(case):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    name, fn = _torch_cases(torch, F)[case]
    rng = np.random.default_rng(case)
    nargs = fn.__code__.co_argcount - 1
    arrays = [rng.standard_normal((3, 3)) for _ in range(nargs)]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    e_in = [Tensor(a.copy(), requires_grad=True) for a in arrays]
    t_out, e_out = fn(F, *t_in), fn(N, *e_in)
    np.testing.assert_allclose(e_out.data, t_out.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = rng.standard_normal(tuple(t_out.shape))
    t_out.backward(torch.tensor(g))
    backward(e_out, Tensor(g))
    for t, e in zip(t_in, e_in):
        np.testing.assert_allclose(e.grad.data, t.grad.numpy(), rtol=1e-10, atol=1e-12)
