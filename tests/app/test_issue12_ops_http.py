"""Issue 12's last ops through the HTTP API: linalg.svd bound to three names, svdvals and the matrix norms through
them (values, grad_fn names, gradients), the in-place index writes (version counter, grad_fn, torch's leaf error
as a problem with nothing applied), F.pad circular, F.embedding max_norm, and their catalog entries."""

from __future__ import annotations

import numpy as np

from tests.app.conftest import assert_problem, ok, run, tensor

A = [[2.0, -1.0, 0.5], [0.3, 1.5, -2.0], [1.0, 0.2, 0.7], [-0.4, 0.9, 1.1]]


def test_svd_binds_u_s_vh_and_its_gradient_is_svd_backward(client, session):
    body = ok(run(client, session, [
        tensor("a", A),
        {"op": "linalg.svd", "args": ["a"], "kwargs": {"full_matrices": False}, "out": ["U", "S", "Vh"]},
        {"op": "linalg.svd", "args": ["a"], "out": ["Uf", "Sf", "Vhf"]},
        {"op": "linalg.svdvals", "args": ["a"], "out": "s"},
        {"op": "sum", "args": ["s"], "out": "t"}, {"op": "backward", "args": ["t"]}]))
    t = body["tensors"]
    u, s, vh = np.linalg.svd(np.array(A), full_matrices=False)
    assert t["U"]["grad_fn"] == t["S"]["grad_fn"] == t["s"]["grad_fn"] == "LinalgSvdBackward0"
    assert t["Uf"]["shape"] == [4, 4] and t["Vhf"]["shape"] == [3, 3] and t["U"]["shape"] == [4, 3]
    np.testing.assert_allclose(t["S"]["data"], s, rtol=1e-6)
    np.testing.assert_allclose(np.array(t["U"]["data"]) * t["S"]["data"] @ np.array(t["Vh"]["data"]), A, atol=1e-5)
    np.testing.assert_allclose(t["a"]["grad"], u @ vh, atol=1e-5)  # d sum(S) / dA = U Vh


def test_matrix_norms_2_and_nuc_with_their_gradients(client, session):
    body = ok(run(client, session, [
        tensor("a", A),
        {"op": "linalg.matrix_norm", "args": ["a", 2], "out": "n2"},
        {"op": "linalg.norm", "args": ["a", "nuc"], "out": "nn"},
        {"op": "linalg.matrix_norm", "args": ["a"], "kwargs": {"ord": -2, "keepdim": True}, "out": "nm"},
        {"op": "grad", "args": ["n2", "a"], "out": "g2"}, {"op": "grad", "args": ["nn", "a"], "out": "gn"}]))
    t = body["tensors"]
    u, s, vh = np.linalg.svd(np.array(A), full_matrices=False)
    assert (t["n2"]["grad_fn"], t["nn"]["grad_fn"], t["nm"]["grad_fn"]) == ("AmaxBackward0", "SumBackward1",
                                                                            "PermuteBackward0")
    np.testing.assert_allclose([t["n2"]["data"], t["nn"]["data"]], [s[0], s.sum()], rtol=1e-6)
    assert t["nm"]["shape"] == [1, 1] and np.isclose(t["nm"]["data"][0][0], s[-1], rtol=1e-6)
    np.testing.assert_allclose(t["g2"]["data"], np.outer(u[:, 0], vh[0]), atol=1e-5)
    np.testing.assert_allclose(t["gn"]["data"], u @ vh, atol=1e-5)


def test_svd_errors_are_problems_with_torchs_messages(client, session):
    r = run(client, session, [tensor("v", [1.0, 2.0]), {"op": "linalg.svd", "args": ["v"], "out": ["U", "S", "Vh"]}])
    assert_problem(r, 422, detail="linalg.svd: The input tensor A must have at least 2 dimensions.")
    r = run(client, session, [tensor("m", [[1.0, "NaN"], [0.0, 1.0]]), {"op": "linalg.svdvals", "args": ["m"]}])
    body = assert_problem(r, 422, "svd_not_converged", detail="linalg.svd: The algorithm failed to converge because "
                          "the input matrix contained non-finite values.")
    assert body["op_index"] == 1
    r = run(client, session, [tensor("m", A), {"op": "linalg.matrix_norm", "args": ["m", "abc"]}])
    assert_problem(r, 422, detail="linalg.matrix_norm: Order abc not supported.")


def test_inplace_index_writes_over_http(client, session):
    body = ok(run(client, session, [
        tensor("a", [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), tensor("src", [[1.0, 1.0], [2.0, 2.0]]),
        tensor("idx", [2, 0], requires_grad=False),
        {"op": "mul", "args": ["a", 1.0], "out": "b"},
        {"op": "index_fill_", "args": ["b", 0, "idx", -1.0]},
        {"op": "index_add_", "args": ["b", 0, "idx", "src"], "kwargs": {"alpha": 2.0}},
        {"op": "sum", "args": ["b"], "out": "s"}, {"op": "backward", "args": ["s"]}]))
    t = body["tensors"]
    assert t["b"]["version"] == 2 and t["b"]["grad_fn"] == "IndexAddBackward0"
    assert t["b"]["data"] == [[3.0, 3.0], [3.0, 4.0], [1.0, 1.0]]
    assert t["a"]["grad"] == [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]] and t["src"]["grad"] == [[2.0, 2.0], [2.0, 2.0]]


def test_inplace_write_on_a_leaf_is_torchs_error_and_nothing_changes(client, session):
    ok(run(client, session, [tensor("a", [[1.0, 2.0], [3.0, 4.0]]), tensor("i", [1], requires_grad=False)]))
    r = run(client, session, [{"op": "mul", "args": ["a", 2.0], "out": "c"},
                              {"op": "scatter_", "args": ["a", 0, "i", 5.0]}])
    body = assert_problem(r, 409, "leaf_inplace",
                          detail="a leaf Variable that requires grad is being used in an in-place operation.")
    assert body["op_index"] == 1
    after = ok(run(client, session, [], **{"return": ["a", "c"]}))["tensors"]
    assert after["a"]["data"] == [[1.0, 2.0], [3.0, 4.0]] and after["a"]["version"] == 0 and after["c"] is None


def test_circular_pad_and_embedding_max_norm_over_http(client, session):
    body = ok(run(client, session, [
        tensor("x", [[[1.0, 2.0, 3.0, 4.0]]]),
        {"op": "pad", "args": ["x", [1, 2]], "kwargs": {"mode": "circular"}, "out": "y"},
        tensor("w", [[3.0, 4.0], [0.3, 0.4]]), tensor("ix", [0, 1, 0], requires_grad=False),
        {"op": "embedding", "args": ["ix", "w"], "kwargs": {"max_norm": 1.0}, "out": "e"}]))
    t = body["tensors"]
    assert t["y"]["data"] == [[[4.0, 1.0, 2.0, 3.0, 4.0, 1.0, 2.0]]] and t["y"]["grad_fn"] == "CopySlices"
    assert t["w"]["version"] == 1
    np.testing.assert_allclose(t["w"]["data"], [[0.6, 0.8], [0.3, 0.4]], rtol=1e-6)
    np.testing.assert_allclose(t["e"]["data"], [[0.6, 0.8], [0.3, 0.4], [0.6, 0.8]], rtol=1e-6)


def test_catalog_lists_the_ops_with_forward_formulas_and_named_results(client):
    ops = {e["name"]: e for e in ok(client.get("/v1/ops"))["ops"]}
    assert ops["linalg.svd"]["returns"] == ["U", "S", "Vh"] and ops["svd"]["returns"] == ["U", "S", "V"]
    assert ops["linalg.slogdet"]["returns"] == ["sign", "logabsdet"] and ops["topk"]["returns"] == ["values", "indices"]
    assert ops["exp"]["returns"] == []
    for name in ("linalg.svd", "linalg.svdvals", "svd", "linalg.matrix_norm", "linalg.norm", "index_fill",
                 "scatter_", "scatter_add_", "index_add_", "index_copy_", "index_fill_", "pad", "embedding"):
        assert ops[name]["forward_ad"] is True, name
    for name in ("scatter_", "scatter_add_", "index_add_", "index_copy_", "index_fill_"):
        assert ops[name]["inplace"] is True and ops[name]["method"] is True, name
