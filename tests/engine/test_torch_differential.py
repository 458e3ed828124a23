"""Differential tests against real PyTorch (skipped where torch is not installed; it is not a dependency).

The same expression text runs against ``torch`` and against the engine's torch-like facade on the same
random float32 inputs; value, dtype, grad_fn name, the names along next_functions, gradients of
``out.backward(G)`` and the outcome of a second backward must agree."""

from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

from gradserve_server.engine.errors import EngineError  # noqa: E402
from gradserve_server.engine.torch_compat import F as EF  # noqa: E402
from gradserve_server.engine.torch_compat import torch as etorch  # noqa: E402

EXPRESSIONS = [
    # unary
    "a.exp()", "p.log()", "p.sqrt()", "a.tanh()", "a.sigmoid()", "a.relu()", "a.abs()", "a.sin()", "a.cos()",
    "-a", "p.reciprocal()", "p.rsqrt()", "a.expm1()", "p.log1p()", "a.square()", "a.tan()",
    "F.softplus(a)", "F.softplus(a, beta=2.0, threshold=1.0)", "F.gelu(a)", "F.gelu(a, approximate='tanh')",
    "F.silu(a)", "F.elu(a)", "F.leaky_relu(a, 0.2)", "F.hardtanh(a)", "F.logsigmoid(a)", "a.clamp(-0.5, 0.5)",
    "a.clamp(min=0.1)", "a.clamp_min(0.0)", "a.floor()", "a.round()", "a.sign()",
    # binary and broadcasting
    "a + b", "a - b", "a * b", "a / p", "a ** 2", "p ** b", "2 ** a", "a + v", "a * v", "a * s", "s * v",
    "a.add(b, alpha=2)", "a.sub(v, alpha=0.5)", "torch.maximum(a, b)", "torch.minimum(a, b)",
    "torch.where(a > 0, a, b)", "torch.where(a > 0, a, 0.0)", "a.masked_fill(a > 0, 0.0)",
    "torch.lerp(a, b, 0.3)", "torch.lerp(a, b, 0.7)", "2 - a", "2 / p", "a * 2.5", "a / 3", "a + 1",
    "a.div(p, rounding_mode='floor')",
    # reductions
    "a.sum()", "a.sum(1)", "a.sum(0, keepdim=True)", "a.mean()", "a.mean(1)", "a.prod(1)", "a.prod()",
    "a.max()", "a.max(1).values", "a.min(0).values", "a.amax(1)", "a.amin(0)", "a.logsumexp(1)",
    "a.var(1)", "a.var()", "a.std()", "a.std(0)", "a.norm()", "a.norm(dim=1)", "a.norm(p=1)", "a.cumsum(1)",
    # shape and indexing
    "a.t()", "a.reshape(12)", "a.view(4, 3)", "a.transpose(0, 1)", "a.unsqueeze(0)", "a[0]", "a[:, 1]",
    "a[1:]", "a[0, 1]", "a[[0, 2]]", "a[a > 0]", "a.flatten()", "a.expand(2, 3, 4)", "a.repeat(2, 1)",
    "torch.cat([a, b])", "torch.cat([a, b], dim=1)", "torch.stack([a, b])", "a.split(2)[0]",
    "a.chunk(2, 1)[1]", "a.narrow(1, 1, 2)", "a.index_select(1, idx)", "a.gather(1, gidx)",
    "a.t().reshape(12)", "a.permute(1, 0)", "a.unsqueeze(0).squeeze(0)",
    # linear algebra
    "a @ b.t()", "a @ v", "v @ v", "torch.outer(v, v)", "F.linear(a, w, bias)", "F.linear(v, w)",
    "torch.addmm(bias, a, w.t())", "c3 @ d3", "c3 @ w.t()",
    # nn
    "F.softmax(a, dim=1)", "F.log_softmax(a, dim=1)", "F.softmax(a, dim=0)", "F.cross_entropy(a, cls)",
    "F.cross_entropy(a, cls, reduction='sum')", "F.mse_loss(a, b)", "F.mse_loss(a, b, reduction='none')",
    "F.l1_loss(a, b)", "F.binary_cross_entropy_with_logits(a, tgt)", "F.binary_cross_entropy(a.sigmoid(), tgt)",
    "F.nll_loss(F.log_softmax(a, dim=1), cls)", "F.smooth_l1_loss(a, b)", "F.huber_loss(a, b)",
    # compositions
    "((a - b) ** 2).mean()", "(a.exp() * b).sum(1).log()", "F.softmax(a @ b.t(), dim=1) * 3",
    "(a.sigmoid() * a).sum() / a.numel()",
]


def _inputs(seed: int) -> dict:
    rng = np.random.default_rng(seed)

    def f(*shape, low=-2.0, high=2.0):
        return rng.uniform(low, high, shape).astype(np.float32)

    data = {"a": f(3, 4), "b": f(3, 4), "p": f(3, 4, low=0.5, high=2.0), "v": f(4), "s": f(),
            "w": f(2, 4), "bias": f(2), "c3": f(2, 3, 4), "d3": f(2, 4, 5)}
    ints = {"idx": np.array([0, 2]), "gidx": rng.integers(0, 4, (3, 2)), "cls": rng.integers(0, 4, 3)}
    tgt = rng.integers(0, 2, (3, 4)).astype(np.float32)
    return data, ints, tgt


def _namespace(mod, functional, seed: int) -> dict:
    data, ints, tgt = _inputs(seed)
    ns = {"torch": mod, "F": functional}
    for k, v in data.items():
        ns[k] = mod.tensor(v.tolist(), requires_grad=True)
    for k, v in ints.items():
        ns[k] = mod.tensor(v.tolist())
    ns["tgt"] = mod.tensor(tgt.tolist())
    return ns


def _node_names(node, depth=4):
    if node is None or depth == 0:
        return None
    return (type(node).__name__,
            tuple(_node_names(n, depth - 1) if n is not None else None for n, _ in node.next_functions))


def _array(t) -> np.ndarray:
    return np.asarray(t.detach().tolist(), dtype=np.float64)


def _run(ns: dict, expr: str):
    out = eval(expr, ns)  # noqa: S307 - fixed expressions from the table above
    result = {"value": _array(out), "dtype": str(out.dtype).replace("torch.", ""),
              "requires_grad": out.requires_grad, "grad_fn": _node_names(out.grad_fn)}
    if out.requires_grad:
        g = ns["torch"].tensor((np.arange(out.numel()) % 3 + 1).reshape(tuple(out.shape)).astype(np.float32).tolist())
        out.backward(g, retain_graph=True)
        result["grads"] = {k: (_array(ns[k].grad) if ns[k].grad is not None else None)
                           for k in ("a", "b", "p", "v", "s", "w", "bias", "c3", "d3")}
        try:
            out.backward(g)
            out.backward(g)
            result["third_backward"] = "ok"
        except (RuntimeError, EngineError) as exc:
            result["third_backward"] = getattr(exc, "message", str(exc))
    return result


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_engine_matches_torch(expr, seed):
    ref = _run(_namespace(torch, TF, seed), expr)
    got = _run(_namespace(etorch, EF, seed), expr)
    assert got["dtype"] == ref["dtype"] and got["requires_grad"] == ref["requires_grad"]
    assert got["grad_fn"] == ref["grad_fn"], (got["grad_fn"], ref["grad_fn"])
    np.testing.assert_allclose(got["value"], ref["value"], rtol=2e-5, atol=2e-6, equal_nan=True)
    if ref["requires_grad"]:
        for k, r in ref["grads"].items():
            if r is None:
                assert got["grads"][k] is None, k
            else:
                np.testing.assert_allclose(got["grads"][k], r, rtol=1e-4, atol=1e-5, equal_nan=True, err_msg=k)
        assert got["third_backward"] == ref["third_backward"]


# expressions of `a` whose second derivative is not identically zero (piecewise-linear ops are left out)
SECOND_ORDER = [e for e in EXPRESSIONS if re.search(r"\ba\b", e) and not any(k in e for k in (
    "floor", "round", "sign", "rounding_mode", "a > 0", "idx", "cls", "max", "min", "amax", "amin", "clamp",
    "hardtanh", "relu", "abs", "norm(p=1)", "l1_loss"))]


def _second_order(ns: dict, expr: str):
    mod = ns["torch"]
    out = eval(expr, ns)  # noqa: S307
    if not out.requires_grad:
        return None
    (g,) = mod.autograd.grad(out.sum(), ns["a"], create_graph=True)
    if not g.requires_grad:
        return _array(g), None
    (h,) = mod.autograd.grad((g * g).sum(), ns["a"], allow_unused=True)
    return _array(g), (None if h is None else _array(h))


@pytest.mark.parametrize("expr", SECOND_ORDER)
def test_second_order_gradients_match_torch(expr):
    ref = _second_order(_namespace(torch, TF, 0), expr)
    got = _second_order(_namespace(etorch, EF, 0), expr)
    if ref is None:
        assert got is None
        return
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-4, atol=1e-5, equal_nan=True)
    if ref[1] is None:
        assert got[1] is None or not np.any(got[1])
    else:
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-3, atol=1e-4, equal_nan=True)
