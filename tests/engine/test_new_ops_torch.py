"""Issue 12's ops against real PyTorch (skipped without torch): the same expression runs on torch and on the
engine's torch facade with the same float64 inputs; value, dtype, requires_grad, the grad_fn names along
next_functions, the gradients of ``out.backward(G)`` and (where listed) second derivatives must agree, and
bad calls must fail in both with torch's message."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

from gradserve_server.engine.errors import EngineError  # noqa: E402
from gradserve_server.engine.torch_compat import F as EF  # noqa: E402
from gradserve_server.engine.torch_compat import torch as etorch  # noqa: E402

EXPRESSIONS = [
    # hyperbolic, inverse trigonometric, logs, atan2/hypot
    "a.sinh()", "a.cosh()", "a.asinh()", "(p + 1).acosh()", "(a * 0.4).atanh()", "(a * 0.4).asin()",
    "(a * 0.4).acos()", "a.atan()", "p.log2()", "p.log10()", "torch.atan2(a, b)", "torch.arctan2(a, b)",
    "torch.hypot(a, b)", "torch.arcsinh(a)",
    # special functions
    "p.lgamma()", "torch.lgamma(a)", "p.digamma()", "torch.digamma(a)", "torch.polygamma(1, p)",
    "torch.polygamma(2, p)", "torch.polygamma(3, a)", "torch.special.multigammaln(p + 2, 3)", "(p + 1).mvlgamma(2)",
    "torch.mvlgamma(p + 1, 2)",
    "torch.special.gammaln(p)", "torch.special.digamma(p)", "torch.xlogy(a, p)", "torch.xlogy(2.0, p)",
    "torch.xlogy(a, 3.0)", "torch.special.xlogy(a.relu(), p)", "torch.logaddexp(a, b)",
    # matrix structure
    "torch.trace(a)", "torch.diag(v)", "torch.diag(v, -1)", "torch.diag(a, 1)", "torch.diagonal(a)", "a.diagonal(1)",
    "torch.diagonal(c3, 0, 1, 2)", "torch.linalg.diagonal(c3)", "torch.diag_embed(a)", "torch.tril(a)", "a.triu(1)",
    "torch.tril(c3, -1)",
    # linalg
    "torch.linalg.det(m)", "torch.det(m)", "torch.linalg.det(m3)", "torch.linalg.slogdet(m).logabsdet",
    "torch.linalg.slogdet(m)[0]", "torch.slogdet(m3)[1]", "torch.logdet(spd)", "torch.linalg.inv(m)",
    "torch.inverse(m3)", "torch.linalg.solve(m, v)", "torch.linalg.solve(m, a)",
    "torch.linalg.solve(m, a.t(), left=False)",
    "torch.linalg.solve(m3, a)", "torch.linalg.cholesky(spd)", "torch.linalg.cholesky(spd, upper=True)",
    "torch.linalg.norm(a)", "torch.linalg.norm(a, 'fro')", "torch.linalg.norm(a, 1)",
    "torch.linalg.norm(a, float('inf'))",
    "torch.linalg.norm(a, -1)", "torch.linalg.norm(v, 3)", "torch.linalg.norm(a, dim=1)",
    "torch.linalg.norm(c3, dim=(0, 2))",
    "torch.linalg.vector_norm(a, 3)", "torch.linalg.vector_norm(a, float('inf'), dim=0)",
    "torch.linalg.vector_norm(a, 1, dim=1, keepdim=True)", "torch.linalg.cross(u3, w3)",
    "torch.cross(u3, w3, dim=1)", "torch.cross(u3, w3)",
    "torch.linalg.cross(u3, w3[:1])",
    # svd and the norms through it: singular vectors only in sign-invariant forms (see SIGN_FREE)
    "torch.linalg.svdvals(a)", "torch.linalg.svdvals(c3)", "torch.linalg.svd(m).S", "torch.linalg.svd(a).U ** 2",
    "torch.linalg.svd(a, full_matrices=False).Vh ** 2", "torch.linalg.svd(c3, full_matrices=False).U ** 2",
    "(lambda r: r.U @ torch.diag_embed(r.S) @ r.Vh)(torch.linalg.svd(a, full_matrices=False))",
    "torch.svd(a.t()).V ** 2", "torch.svd(a, some=False).U ** 2", "torch.svd(a, compute_uv=False).S",
    "torch.linalg.matrix_norm(a, 2)", "torch.linalg.matrix_norm(a, -2)", "torch.linalg.matrix_norm(a, 'nuc')",
    "torch.linalg.matrix_norm(c3, 2)", "torch.linalg.matrix_norm(c3, 'nuc', dim=(0, 2), keepdim=True)",
    "torch.linalg.matrix_norm(c3, -2, dim=(2, 1))", "torch.linalg.matrix_norm(a)", "torch.linalg.matrix_norm(m, 1)",
    "torch.linalg.norm(a, 2)", "torch.linalg.norm(a, 'nuc')", "torch.linalg.norm(c3, -2, dim=(0, 1))",
    "torch.linalg.norm(a, 'nuc', keepdim=True)",
    # einsum
    "torch.einsum('ij,jk->ik', a, n)", "torch.einsum('ij,kj->ik', a, b)", "torch.einsum('ii->i', m)",
    "torch.einsum('ii', m)",
    "torch.einsum('i,j->ij', v, v)", "torch.einsum('bij,bjk->bik', c3, d3)",
    "torch.einsum('...ij,...jk->...ik', c3, n)",
    "torch.einsum('ij,jk,kl->il', m, m, a)", "torch.einsum('ij->', a)", "torch.einsum('ij->j', a)",
    "torch.einsum('ij', a)",
    "torch.einsum('ji', a)", "torch.einsum('ij,ij->i', a, b)", "torch.einsum('bii->bi', m3)",
    "torch.einsum('i,i->', v, v)",
    "torch.einsum('ij,j->i', m, v)", "torch.einsum('bij,jk->bki', c3, n)", "torch.einsum('ij,ij->ij', a, b)",
    "torch.einsum('ij,jk->ik', [a, n])",
    # scatter, index writes, selections, scans, clamp with tensor bounds
    "a.scatter(0, sidx, c)", "a.scatter(1, sidx2, 1.5)", "a.scatter_add(0, sidx, c)",
    "torch.scatter_add(a, 0, ridx, c)",
    "a.index_add(0, iidx, c)", "a.index_add(1, iidx, e, alpha=2.0)", "a.index_copy(0, iidx, c)",
    "a.masked_select(a > 0)",
    "a.masked_select(mrow)", "a.topk(2).values", "a.topk(2, dim=0, largest=False)[0]", "a.kthvalue(2).values",
    "a.kthvalue(2, 0, True)[0]", "a.roll(1, 0)", "a.roll((1, -1), (0, 1))", "a.roll(2)", "a.cumprod(1)", "a.cumprod(0)",
    "z.cumprod(0)", "a.logcumsumexp(1)", "torch.clamp(a, min=b)", "a.clamp(min=b - 0.5, max=b + 0.5)",
    "a.clamp(max=v4)",
    # nn.functional
    "F.normalize(a)", "F.normalize(a, p=1, dim=0)", "F.cosine_similarity(a, b)", "F.cosine_similarity(a, b[:1])",
    "F.cosine_similarity(a, b, dim=0)", "F.pairwise_distance(a, b)", "F.pairwise_distance(a, b, p=3.0, keepdim=True)",
    "F.softmin(a, 1)", "F.glu(a)", "F.glu(a.t(), 0)", "F.layer_norm(a, (4,))", "F.layer_norm(a, (4,), w4, b4)",
    "F.layer_norm(c3, (3, 4), eps=1e-3)", "F.embedding(eidx, emb)", "F.embedding(eidx, emb, padding_idx=1)",
    "F.embedding(eidx, emb, scale_grad_by_freq=True)", "F.one_hot(cls, 5)", "F.one_hot(cls)", "F.pad(a, (1, 2))",
    "F.pad(a, (1, 0, -1, 1), value=0.5)", "F.pad(c3, (2, 1), mode='reflect')",
    "F.pad(c3, (1, 1, 2, 0), mode='replicate')",
    "F.pad(x2, (1, 1, 1, 1), mode='reflect')", "F.pad(c3, (1, 2), mode='circular')",
    "F.pad(x2, (1, 1, 2, 0), mode='circular')", "F.pad(c3, (-1, 2), mode='circular')",
    "F.pad(a, (1, 1), mode='circular')",
    "F.pad(c3, (2, 1, 1, 3), mode='circular')", "F.pad(x2, (0, 1, -2, 1, 1, 0), mode='circular')",
    "F.embedding(eidx, emb, max_norm=1.0)", "F.embedding(eidx, emb, max_norm=1.5, norm_type=1.0)",
    "F.embedding(eidx, emb, max_norm=0.8, norm_type=float('inf'))",
    "(a * 1).scatter_(0, sidx, c)", "(a * 1).scatter_(1, sidx2, 1.5)", "(a * 1).scatter_add_(0, sidx, c)",
    "(a * 1).index_add_(0, iidx, c)", "(a * 1).index_add_(1, iidx, e, alpha=2.0)", "(a * 1).index_copy_(0, iidx, c)",
    "(a * 1).index_fill_(0, iidx, 1.5)", "(a * 1).index_fill_(1, iidx, v[0])", "a.index_fill(-1, iidx, v[1])",
    "a.index_fill(0, iidx, -2.0)", "(lambda t: (t[1].index_fill_(0, iidx, 0.5), t)[1])(a * 1)",
    "(lambda t: (t[:, 1:].index_add_(1, iidx, e), t)[1])(a * 1)",
    "(lambda t: (t[0].scatter_(0, iidx, 2.0), t)[1])(a * 1)",
    "(lambda t: (t.masked_fill_(a > 0, 2.0), t)[1])(b * 1)",
    "F.conv1d(x1, w1, b1)", "F.conv1d(x1, w1, stride=2, padding=1)",
    "F.conv1d(x1[0], w1, b1, dilation=2)", "F.conv2d(x2, w2, b2)", "F.conv2d(x2, w2, b2, stride=2, padding=1)",
    "F.conv2d(x2g, w2g, groups=2, padding='same')", "F.conv2d(x2, w2e, padding='same')",
    # compositions
    "torch.linalg.det(a @ a.t() + m)", "(F.conv2d(x2, w2, b2).relu() ** 2).sum()",
    "torch.einsum('ij,kj->ik', a, a).logdet()",
]

LEAVES = ("a", "b", "p", "v", "m", "m3", "spd", "n", "c3", "d3", "u3", "w3", "c", "e", "v4", "w4", "b4", "emb",
          "x1", "w1", "b1", "x2", "w2", "b2", "x2g", "w2g", "w2e", "z")


def _inputs(seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)

    def f(*shape, low=-2.0, high=2.0):
        return rng.uniform(low, high, shape)

    spd = f(3, 3)
    m3 = f(2, 3, 3) + 3 * np.eye(3)
    data = {"a": f(3, 4), "b": f(3, 4), "p": f(3, 4, low=0.5, high=2.0), "v": f(3), "m": f(3, 3) + 3 * np.eye(3),
            "m3": m3, "spd": spd @ spd.T + 3 * np.eye(3), "n": f(4, 2), "c3": f(2, 3, 4), "d3": f(2, 4, 5),
            "u3": f(4, 3), "w3": f(4, 3), "c": f(2, 4), "e": f(3, 2), "v4": f(4), "w4": f(4), "b4": f(4),
            "emb": f(5, 3), "x1": f(2, 3, 8), "w1": f(4, 3, 3), "b1": f(4), "x2": f(2, 3, 6, 5), "w2": f(4, 3, 3, 2),
            "b2": f(4), "x2g": f(1, 4, 5, 5), "w2g": f(6, 2, 3, 3), "w2e": f(2, 3, 2, 2),
            "z": np.array([0.5, 0.0, 2.0, -1.5])}
    ints = {"sidx": np.array([[0, 1, 2, 0], [2, 0, 1, 1]]), "sidx2": np.array([[3], [0], [1]]),
            "ridx": np.array([[0, 0, 2, 2], [0, 1, 2, 0]]), "iidx": np.array([2, 0]),
            "eidx": np.array([[0, 1], [1, 4]]),
            "cls": np.array([0, 3, 1])}
    return data, ints


def _namespace(mod, functional, seed: int) -> dict:
    data, ints = _inputs(seed)
    ns = {"torch": mod, "F": functional}
    for k, v in data.items():
        ns[k] = mod.tensor(v.tolist(), dtype=mod.float64, requires_grad=True)
    for k, v in ints.items():
        ns[k] = mod.tensor(v.tolist())
    ns["mrow"] = mod.tensor([True, False, True, True])
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
    result = {"value": _array(out), "dtype": str(out.dtype).replace("torch.", ""), "shape": tuple(out.shape),
              "requires_grad": out.requires_grad, "grad_fn": _node_names(out.grad_fn)}
    if out.requires_grad:
        g = ns["torch"].tensor((np.arange(out.numel()) % 3 + 1).reshape(tuple(out.shape)).astype(np.float64).tolist(),
                               dtype=ns["torch"].float64)
        out.backward(g)
        result["grads"] = {k: (_array(ns[k].grad) if ns[k].grad is not None else None) for k in LEAVES}
    return result


def compare_with_torch(expr: str) -> None:
    """Run `expr` under torch and under the engine's torch surface; values, dtypes, grad_fn and grads must agree."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = _run(_namespace(torch, TF, 0), expr)
        got = _run(_namespace(etorch, EF, 0), expr)
    assert (got["dtype"], got["shape"], got["requires_grad"]) == (ref["dtype"], ref["shape"], ref["requires_grad"])
    assert got["grad_fn"] == ref["grad_fn"], (got["grad_fn"], ref["grad_fn"])
    np.testing.assert_allclose(got["value"], ref["value"], rtol=1e-9, atol=1e-10, equal_nan=True)
    if ref["requires_grad"]:
        for k, r in ref["grads"].items():
            if r is None:
                assert got["grads"][k] is None, k
            else:
                np.testing.assert_allclose(got["grads"][k], r, rtol=1e-8, atol=1e-9, equal_nan=True, err_msg=k)


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_new_op_matches_torch(expr):
    compare_with_torch(expr)


SECOND_ORDER = [
    ("a", "torch.atan2(a, b)"), ("a", "torch.hypot(a, b)"), ("p", "p.lgamma()"), ("p",
    "torch.special.multigammaln(p + 2, 3)"),
    ("a", "torch.xlogy(a, p)"), ("p", "torch.xlogy(a, p)"), ("a", "torch.logaddexp(a, b)"), ("m",
    "torch.linalg.det(m)"),
    ("m", "torch.linalg.slogdet(m).logabsdet"), ("m", "torch.linalg.inv(m)"), ("m", "torch.linalg.solve(m, a)"),
    ("a", "torch.linalg.solve(m, a)"), ("spd", "torch.linalg.cholesky(spd)"), ("a", "torch.einsum('ij,jk->ik', a, n)"),
    ("a", "a.cumprod(1)"), ("a", "a.logcumsumexp(1)"), ("a", "a.scatter(0, sidx, c) ** 2"), ("a", "F.glu(a)"),
    ("a", "F.layer_norm(a, (4,), w4, b4)"), ("w4", "F.layer_norm(a, (4,), w4, b4) ** 2"), ("a", "F.normalize(a)"),
    ("a", "F.cosine_similarity(a, b)"), ("a", "F.pairwise_distance(a, b)"), ("x2", "F.conv2d(x2, w2, b2) ** 2"),
    ("w2", "F.conv2d(x2, w2, b2) ** 2"), ("u3", "torch.linalg.cross(u3, w3)"), ("a", "torch.linalg.norm(a, 'fro')"),
    ("a", "torch.linalg.matrix_norm(a, 2)"), ("a", "torch.linalg.norm(a, 'nuc')"), ("m", "torch.linalg.svdvals(m)"),
    ("a", "torch.linalg.svd(a, full_matrices=False).U ** 2"), ("a", "torch.linalg.svd(a, full_matrices=False).Vh ** 2"),
    ("m", "torch.linalg.svd(m).U ** 2"),
]


def _second_order(ns: dict, leaf: str, expr: str):
    mod = ns["torch"]
    out = eval(expr, ns)  # noqa: S307
    (g,) = mod.autograd.grad(out.sum(), ns[leaf], create_graph=True)
    (h,) = mod.autograd.grad((g * g).sum(), ns[leaf], allow_unused=True)
    return _array(g), (None if h is None else _array(h))


@pytest.mark.parametrize("leaf, expr", SECOND_ORDER)
def test_new_op_second_derivatives_match_torch(leaf, expr):
    ref = _second_order(_namespace(torch, TF, 1), leaf, expr)
    got = _second_order(_namespace(etorch, EF, 1), leaf, expr)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-8, atol=1e-9)
    if ref[1] is None:
        assert got[1] is None or not np.any(got[1])
    else:
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-7, atol=1e-8)


ERRORS = [
    "torch.linalg.det(a)", "torch.linalg.det(cls)", "torch.linalg.det(v)", "torch.linalg.inv(torch.zeros(3, 3))",
    "torch.linalg.inv(torch.zeros(2, 3, 3))", "torch.linalg.solve(torch.zeros(3, 3), v)",
    "torch.linalg.solve(m, torch.ones(3))", "torch.linalg.cholesky(-spd)", "torch.logdet(cls)", "torch.slogdet(a)",
    "torch.linalg.cross(v4, v4)", "torch.linalg.cross(v, u3)", "torch.cross(u3, v)", "torch.cross(u3[:2], w3)",
    "torch.trace(v)", "torch.diag(c3)", "torch.diagonal(v)",
    "torch.diagonal(m, 0, 1, 1)", "torch.tril(v)", "torch.hypot(cls, cls)", "torch.logaddexp(cls, cls)",
    "torch.special.multigammaln(p, 0)", "torch.polygamma(-1, p)", "torch.linalg.norm(c3, 1)", "torch.linalg.norm(m, 3)",
    "torch.linalg.norm(m, 'abc')", "torch.linalg.vector_norm(cls)",
    "torch.einsum('ij,jk', a)", "torch.einsum('ij', a, b)", "torch.einsum('ij->k', a)", "torch.einsum('i,i', v, v4)",
    "torch.einsum('ii', a)", "torch.einsum('ijk', a)", "torch.einsum('i1', a)",
    "a.scatter(0, sidx.float(), c)", "a.scatter(0, sidx + 5, c)", "a.scatter(0, sidx[0], c)", "a.topk(5)",
    "a.kthvalue(0)", "a.roll((1, 2), 0)",
    "F.one_hot(a)", "F.one_hot(cls, 3)", "F.one_hot(cls - 1)", "F.glu(torch.randn(3, 3))", "F.glu(a, 2)",
    "F.layer_norm(a, (3,))", "F.layer_norm(a, (4,), torch.ones(3))", "F.embedding(cls + 5, emb)",
    "F.embedding(a, emb)", "F.normalize(cls)", "F.cosine_similarity(a, c)", "F.pairwise_distance(a, c)",
    "F.cosine_similarity(cls, cls)", "F.softmin(cls, 0)", "F.layer_norm(cls, (3,))", "F.pad(v, (1, 2, 3))",
    "F.pad(v, (1, 2, 3, 4))", "F.pad(v, (-2, -2))",
    "F.pad(a, (1, 1), mode='foo')", "F.conv2d(a, w2)", "F.conv2d(x2, w2[:, :2])", "F.conv2d(x2, w2g, groups=5)",
    "F.conv2d(x2, torch.ones(4, 3, 9, 9, dtype=torch.float64))", "F.conv2d(x2, w2, stride=2, padding='same')",
    "F.pad(c3, (5, 1), mode='circular')", "F.pad(c3, (1, 1), mode='circular', value=1.0)",
    "F.pad(c3, (1, 1, 1, 1, 1, 1), mode='circular')", "F.pad(c3, (1, 1), mode='reflect', value=1.0)",
    "F.embedding(torch.tensor([0, 9]), emb, max_norm=1.0)", "F.embedding(eidx.float(), emb, max_norm=1.0)",
    "F.embedding(eidx, sidx, max_norm=1.0)",
    "a.scatter_(0, sidx, c)", "(a * 1).scatter_(0, sidx + 5, c)", "a.index_add_(0, iidx, c)",
    "a.index_copy_(0, iidx, c)",
    "a.index_fill_(0, iidx, 1.0)", "a[0].index_fill_(0, iidx, 1.0)", "a.scatter_add_(0, sidx, c)",
    "(a * 1).index_fill_(0, iidx.float(), 1.0)", "(a * 1).index_fill_(0, sidx, 1.0)",
    "(a * 1).index_fill_(0, iidx + 5, 1.0)",
    "(a * 1).index_fill_(0, iidx, v)", "(a * 1).index_fill_(0, iidx, 'x')", "(a * 1).index_fill_(3, iidx, 1.0)",
    "torch.linalg.svd(v)", "torch.linalg.svd(sidx)", "torch.linalg.svdvals(sidx)", "torch.svd(v)", "torch.svd(sidx)",
    "torch.linalg.svd(a, full_matrices=1)", "torch.linalg.svd(a * float('nan'))", "torch.linalg.svdvals(c3 / 0 * 0)",
    "torch.linalg.matrix_norm(a, 3)", "torch.linalg.matrix_norm(a, 'abc')", "torch.linalg.matrix_norm(v, 2)",
    "torch.linalg.matrix_norm(sidx, 'nuc')", "torch.linalg.matrix_norm(a, 2, dim=(0,))",
    "torch.linalg.matrix_norm(c3, 2, dim=(0, 1, 2))", "torch.linalg.matrix_norm(a, 'nuc', dim=(1, -1))",
    "torch.linalg.norm(v, 'nuc')", "torch.linalg.norm(a, 'nuc', dim=1)", "torch.linalg.norm(sidx, 2)",
    "torch.linalg.norm(sidx)", "torch.linalg.norm(c3, 'nuc')",
]


def _error(ns: dict, expr: str):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            eval(expr, ns)  # noqa: S307
        except (RuntimeError, IndexError, ValueError, TypeError, NotImplementedError, EngineError) as exc:
            return (getattr(exc, "message", None) or str(exc)).splitlines()[0]
    return None


@pytest.mark.parametrize("expr", ERRORS)
def test_new_op_errors_match_torch(expr, monkeypatch):
    ns_t, ns_e = _namespace(torch, TF, 0), _namespace(etorch, EF, 0)
    # undone after the test: the engine's torch surface is shared by every test in the process
    monkeypatch.setattr(ns_e["torch"], "randn", lambda *s: etorch.tensor(np.zeros(s).tolist()))
    ref = _error(ns_t, expr)
    got = _error(ns_e, expr)
    assert ref is not None
    assert got == ref


def _saved_value(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (tuple, list)):
        return [_saved_value(x) for x in v]
    if hasattr(v, "tolist") and hasattr(v, "dtype"):
        return ("tensor", np.asarray(v.detach().tolist(), dtype=np.float64))
    return repr(v)


def _saved(out) -> dict:
    node = out.grad_fn
    names = [a for a in dir(node) if a.startswith("_saved_")] if not hasattr(node, "_node") else \
        [f"_saved_{s}" for s in node._node.saved]
    return {a: _saved_value(getattr(node, a)) for a in names}


# expressions whose root node saves singular vectors: compared up to their signs
SIGN_FREE = {e for e in EXPRESSIONS if "svd" in e and ".S" not in e}

# amax/amin/sum(dim=-1) on the singular values: the engine saves the wrapped dim, torch the given -1 (read back
# as 2**64 - 1); the reductions' saved dims are theirs to change, so only the wrapped value is checked here
SAVED_DIM_WRAPPED = {e for e in EXPRESSIONS if e.startswith("torch.linalg.") and "norm" in e
                     and any(f"({a}, {o}" in e for a in ("a", "c3", "m") for o in ("2", "-2", "'nuc'"))}


def signed(dims):
    return [d - 2 ** 64 if d >= 2 ** 63 else d for d in dims]


# saved slots gradserve keeps beyond torch's (its VJP recomputes mean/rstd from them) or in another dtype
SAVED_EXTRA = {"NativeLayerNormBackward0": {"_saved_eps"}}


@pytest.mark.parametrize("expr", [e for e in EXPRESSIONS if not e.startswith(("F.one_hot", "torch.einsum"))])
def test_new_op_saves_what_torch_saves(expr):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = eval(expr, _namespace(torch, TF, 0))  # noqa: S307
        got = eval(expr, _namespace(etorch, EF, 0))  # noqa: S307
    if ref.grad_fn is None:
        return
    if type(ref.grad_fn).__name__ == "CopySlices":  # torch shows no saved values on CopySlices
        assert type(got.grad_fn).__name__ == "CopySlices"
        return
    r, g = _saved(ref), _saved(got)
    if expr in SIGN_FREE:  # singular vectors: LAPACK (numpy's and torch's MKL) may flip a pair's signs
        r, g = ({k: ("tensor", np.abs(v[1])) if isinstance(v, tuple) and v[0] == "tensor" else v
                 for k, v in d.items()} for d in (r, g))
    for extra in SAVED_EXTRA.get(type(ref.grad_fn).__name__, ()):
        g.pop(extra, None)
    if expr in SAVED_DIM_WRAPPED and "_saved_dim" in r:
        node = ref.grad_fn
        nd = len(node._saved_self.shape if hasattr(node, "_saved_self") else node._saved_self_sym_sizes)
        assert g.pop("_saved_dim") == [d % nd for d in signed(r.pop("_saved_dim"))]
    assert sorted(g) == sorted(r)
    for k, rv in r.items():
        gv = g[k]
        if isinstance(rv, tuple) and rv[0] == "tensor":
            assert isinstance(gv, tuple) and gv[0] == "tensor", k
            np.testing.assert_allclose(gv[1], rv[1], rtol=1e-9, atol=1e-10, err_msg=k)
        else:
            assert gv == rv, k


def _tangent_run(mod, functional, expr: str):
    """Forward mode: every float leaf dual with a fixed random tangent; the output's primal and tangent."""
    import warnings
    ns = _namespace(mod, functional, 0)
    rng = np.random.default_rng(5)
    fw = mod.autograd.forward_ad
    with warnings.catch_warnings(), fw.dual_level():
        warnings.simplefilter("ignore")
        for k in LEAVES:
            t = ns[k]
            ns[k] = fw.make_dual(t, mod.tensor(rng.standard_normal(tuple(t.shape)).tolist(), dtype=mod.float64))
        try:
            out = eval(expr, ns)  # noqa: S307 - fixed expressions
        except (RuntimeError, NotImplementedError, EngineError) as exc:
            return ("error", getattr(exc, "message", None) or str(exc).splitlines()[0])
        primal, tangent = fw.unpack_dual(out)
        if tangent is not None and getattr(tangent, "_is_zerotensor", lambda: False)():
            return _array(primal), np.zeros(tuple(tangent.shape))  # torch's ZeroTensor (slogdet's sign)
        return (_array(primal), None if tangent is None else _array(tangent))


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_new_op_tangents_match_torch(expr):
    ref = _tangent_run(torch, TF, expr)
    got = _tangent_run(etorch, EF, expr)
    if isinstance(ref[0], str):
        assert got == ref
        return
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-9, atol=1e-10, equal_nan=True)
    if ref[1] is None:
        assert got[1] is None
    else:
        assert got[1] is not None, "torch gives a tangent"
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-8, atol=1e-9, equal_nan=True)
