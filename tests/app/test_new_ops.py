"""Issue 12's ops through the HTTP API: op lists with torch.linalg's dotted names, einsum's operand forms,
conv2d, multi-output ops bound to several names, their gradients, the catalog entries and torch's errors."""

from __future__ import annotations

import numpy as np

from tests.app.conftest import assert_problem, ok, run, tensor

M = [[2.0, 0.5, 0.1], [0.3, 1.5, 0.2], [0.1, 0.4, 1.2]]


def test_linalg_det_and_its_gradient_over_http(client, session):
    body = ok(run(client, session, [tensor("m", M), {"op": "linalg.det", "args": ["m"], "out": "d"},
                                    {"op": "backward", "args": ["d"]}]))
    d = body["tensors"]["d"]
    assert d["grad_fn"] == "LinalgDetBackward0"
    a = np.array(M)
    np.testing.assert_allclose(d["data"], np.linalg.det(a), rtol=1e-6)
    # d det / dA = det(A) * A^{-T}
    np.testing.assert_allclose(body["tensors"]["m"]["grad"], np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-5)


def test_slogdet_binds_sign_and_logabsdet_and_only_logabsdet_carries_gradient(client, session):
    body = ok(run(client, session, [tensor("m", M), {"op": "linalg.slogdet", "args": ["m"], "out": ["s", "l"]},
                                    {"op": "backward", "args": ["l"]}]))
    assert body["tensors"]["s"]["data"] == 1.0
    np.testing.assert_allclose(body["tensors"]["l"]["data"], np.log(np.linalg.det(np.array(M))), rtol=1e-6)
    np.testing.assert_allclose(body["tensors"]["m"]["grad"], np.linalg.inv(np.array(M)).T, rtol=1e-5)


def test_einsum_takes_operand_names_as_varargs_or_one_list(client, session):
    a = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    b = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    body = ok(run(client, session, [
        tensor("a", a), tensor("b", b),
        {"op": "einsum", "args": ["ij,jk->ik", "a", "b"], "out": "c"},
        {"op": "einsum", "args": ["ij,jk->ik", ["a", "b"]], "out": "c2"},
        {"op": "sum", "args": ["c"], "out": "s"}, {"op": "backward", "args": ["s"]}]))
    expected = (np.array(a) @ np.array(b)).tolist()
    assert body["tensors"]["c"]["data"] == expected and body["tensors"]["c2"]["data"] == expected
    assert body["tensors"]["c"]["grad_fn"] == "ViewBackward0"
    assert body["tensors"]["a"]["grad"] == [[1.0, 1.0, 2.0]] * 2


def _conv2d_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, padding: int) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    n, _, h, wd = xp.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w) + b
    return out


def test_conv2d_forward_and_gradients_over_http(client, session):
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3)
    ops = [{"op": "tensor", "out": k, "args": [v.tolist()], "kwargs": {"dtype": "float64", "requires_grad": True}}
           for k, v in (("x", x), ("w", w), ("b", b))]
    body = ok(run(client, session, [
        *ops, {"op": "conv2d", "args": ["x", "w", "b"], "kwargs": {"stride": 2, "padding": 1}, "out": "y"},
        {"op": "sum", "args": ["y"], "out": "s"}, {"op": "backward", "args": ["s"]}]))
    y = body["tensors"]["y"]
    assert y["grad_fn"] == "ConvolutionBackward0" and y["shape"] == [1, 3, 3, 3]
    np.testing.assert_allclose(y["data"], _conv2d_reference(x, w, b, 2, 1), rtol=1e-10)
    assert body["tensors"]["b"]["grad"] == [9.0, 9.0, 9.0]
    # d sum / dw[o, c, i, j] = sum of the input values that weight touches
    eps = 1e-6
    w2 = w.copy()
    w2[1, 0, 2, 1] += eps
    numeric = (_conv2d_reference(x, w2, b, 2, 1).sum() - _conv2d_reference(x, w, b, 2, 1).sum()) / eps
    np.testing.assert_allclose(body["tensors"]["w"]["grad"][1][0][2][1], numeric, rtol=1e-5)


def test_singular_inverse_is_a_problem_with_torchs_message(client, session):
    r = run(client, session, [tensor("m", [[1.0, 2.0], [2.0, 4.0]]), {"op": "linalg.inv", "args": ["m"], "out": "i"}])
    message = ("linalg.inv: The diagonal element 2 is zero, the inversion could not be completed because the input "
               "matrix is singular.")
    body = assert_problem(r, 422, "singular_matrix", detail=message)
    assert body["op_index"] == 1 and body["op"] == "linalg.inv"


def test_einsum_and_conv_shape_errors_are_problems_not_500s(client, session):
    r = run(client, session, [tensor("a", [[1.0, 2.0]]), {"op": "einsum", "args": ["ij,jk->ik", "a"], "out": "c"}])
    assert_problem(r, 422, detail="einsum(): fewer operands were provided than specified in the equation")
    r = run(client, session, [tensor("x", [[[1.0, 2.0]]]), tensor("w", [[[[1.0]]], [[[1.0]]]]),
                              {"op": "conv2d", "args": ["x", "w"], "kwargs": {"groups": 3}, "out": "y"}])
    assert r.status_code == 422 and r.json()["detail"].startswith("Given groups=3")


def test_catalog_lists_the_new_ops_with_torch_namespaces(client):
    ops = {e["name"]: e for e in ok(client.get("/v1/ops"))["ops"]}
    det = ops["linalg.det"]
    assert det["family"] == "linalg" and det["grad_fns"] == ["LinalgDetBackward0"] and det["method"] is False
    assert det["forward_ad"] is True and ops["conv2d"]["forward_ad"] is True and ops["einsum"]["forward_ad"] is True
    assert det["arguments"][0]["name"] == "A" and det["arguments"][0]["tensor"] is True
    assert ops["xlogy"]["aliases"] == ["special.xlogy"]
    assert ops["special.multigammaln"]["method"] is False and ops["mvlgamma"]["method"] is True
    assert ops["conv2d"]["family"] == "conv" and ops["layer_norm"]["family"] == "nn"
    assert ops["einsum"]["arguments"][1] == {"name": "operands", "kind": "varargs", "tensor": True, "required": False}
    for name in ("det", "slogdet", "logdet", "inverse", "cross", "trace", "diag", "diagonal", "tril", "triu", "cumprod",
                 "logcumsumexp", "roll", "lgamma", "digamma", "scatter", "scatter_add", "index_add", "index_copy",
                 "masked_select", "topk", "kthvalue", "atan2", "hypot", "log2", "log10", "sinh", "cosh", "asinh",
                 "acosh", "atanh", "asin", "acos", "atan", "logaddexp", "xlogy", "normalize", "cosine_similarity",
                 "pairwise_distance", "softmin", "glu", "embedding", "one_hot", "pad", "conv1d",
                 "linalg.inv", "linalg.solve", "linalg.cholesky", "linalg.norm", "linalg.vector_norm", "linalg.cross"):
        assert name in ops, name


def test_forward_mode_through_det_and_einsum_in_one_request(client, session):
    v = [[0.1, 0.0, 0.2], [0.0, -0.3, 0.0], [0.5, 0.0, 0.1]]
    body = ok(run(client, session, [
        tensor("m", M), tensor("v", v, requires_grad=False), {"op": "enter_dual_level"},
        {"op": "make_dual", "args": ["m", "v"], "out": "d"},
        {"op": "linalg.det", "args": ["d"], "out": "det"},
        {"op": "einsum", "args": ["ij,jk->ik", "d", "d"], "out": "sq"},
        {"op": "unpack_dual", "args": ["det"], "out": ["det_p", "det_t"]},
        {"op": "unpack_dual", "args": ["sq"], "out": ["sq_p", "sq_t"]},
        {"op": "exit_dual_level"}]))
    a, t = np.array(M), np.array(v)
    # d det = det(A) tr(A^{-1} dA); d (A A) = dA A + A dA
    np.testing.assert_allclose(body["tensors"]["det_t"]["data"], np.linalg.det(a) * np.trace(np.linalg.solve(a, t)),
                               rtol=1e-5)
    np.testing.assert_allclose(body["tensors"]["sq_t"]["data"], t @ a + a @ t, rtol=1e-5, atol=1e-6)


def test_huge_results_of_new_ops_are_refused_before_allocation(client, session):
    cases = [
        [tensor("i", [1, 2], requires_grad=False), {"op": "one_hot", "args": ["i", 10**9], "out": "o"}],
        [tensor("x", [1.0, 2.0]), {"op": "pad", "args": ["x", [0, 10**9]], "out": "o"}],
        [tensor("x", [[[[1.0] * 8] * 8]]), tensor("w", [[[[1.0]]]]),
         {"op": "conv2d", "args": ["x", "w"], "kwargs": {"padding": 20000}, "out": "o"}],
        [tensor("x", [1.0, 2.0]), {"op": "diag_embed", "args": ["x", 10**6], "out": "o"}],
    ]
    for ops in cases:
        assert_problem(run(client, session, ops), 422, "limit_exceeded")
