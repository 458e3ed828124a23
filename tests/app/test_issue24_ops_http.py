"""Issue 24's ops through the HTTP API: values, grad_fn names and gradients of the new families (pooling,
normalization with running statistics updated in place, attention, the composites), tuple results bound to
names, allclose's bool bound as a 0-d tensor (never dropped), and torch's messages as problems with nothing
applied."""

from __future__ import annotations

import numpy as np

from tests.app.conftest import assert_problem, ok, run, tensor

X = [[[[1.0, 5.0, 2.0, 0.0], [3.0, 4.0, -1.0, 2.0], [0.5, 0.0, 6.0, 1.0], [2.0, 1.0, 1.0, 3.0]]]]


def test_pooling_over_http(client, session):
    body = ok(run(client, session, [
        tensor("x", X),
        {"op": "max_pool2d", "args": ["x", 2], "kwargs": {"return_indices": True}, "out": ["m", "i"]},
        {"op": "avg_pool2d", "args": ["x", 2], "out": "a"},
        {"op": "adaptive_avg_pool2d", "args": ["x", [1, 2]], "out": "g"},
        {"op": "adaptive_avg_pool2d", "args": ["x", 1], "out": "one"},
        {"op": "sum", "args": ["m"], "out": "s"}, {"op": "backward", "args": ["s"]}]))
    t = body["tensors"]
    assert t["m"]["data"] == [[[[5.0, 2.0], [2.0, 6.0]]]] and t["i"]["data"] == [[[[1, 2], [12, 10]]]]
    assert t["m"]["grad_fn"] == "MaxPool2DWithIndicesBackward0" and t["i"]["dtype"] == "int64"
    assert t["a"]["grad_fn"] == "AvgPool2DBackward0" and t["a"]["data"] == [[[[3.25, 0.75], [0.875, 2.75]]]]
    assert t["g"]["grad_fn"] == "AdaptiveAvgPool2DBackward0"
    np.testing.assert_allclose(t["g"]["data"], [[[[2.0625, 1.75]]]])
    assert t["one"]["grad_fn"] == "MeanBackward1" and t["one"]["shape"] == [1, 1, 1, 1]
    grad = np.zeros((4, 4))
    grad.flat[[1, 2, 12, 10]] = 1  # the first maximum of a window gets its gradient
    assert np.array_equal(np.array(t["x"]["grad"])[0, 0], grad)


def test_batch_norm_updates_running_statistics_and_group_norm(client, session):
    body = ok(run(client, session, [
        tensor("x", [[1.0, 2.0], [3.0, 6.0]]), tensor("rm", [0.0, 0.0], requires_grad=False),
        tensor("rv", [1.0, 1.0], requires_grad=False),
        {"op": "batch_norm", "args": ["x", "rm", "rv"], "kwargs": {"training": True, "momentum": 0.5}, "out": "y"},
        {"op": "group_norm", "args": ["x", 1], "out": "gn"}]))
    t = body["tensors"]
    assert t["y"]["grad_fn"] == "NativeBatchNormBackward0" and t["gn"]["grad_fn"] == "NativeGroupNormBackward0"
    np.testing.assert_allclose(t["y"]["data"], [[-1.0, -1.0], [1.0, 1.0]], atol=1e-5)
    # running_mean = 0.5 * 0 + 0.5 * mean; running_var = 0.5 * 1 + 0.5 * unbiased variance
    np.testing.assert_allclose(t["rm"]["data"], [1.0, 2.0])
    np.testing.assert_allclose(t["rv"]["data"], [1.5, 4.5])
    assert t["rm"]["version"] == 0  # torch's kernel writes the running statistics without a version bump


def test_a_failed_batch_norm_leaves_running_statistics_unchanged(client, session):
    ok(run(client, session, [tensor("rm", [0.0, 0.0], requires_grad=False),
                             tensor("rv", [1.0, 1.0], requires_grad=False)]))
    r = run(client, session, [
        tensor("x", [[1.0, 2.0], [3.0, 6.0]]),
        {"op": "batch_norm", "args": ["x", "rm", "rv"], "kwargs": {"training": True}, "out": "y"},
        {"op": "batch_norm", "args": ["x", "rm"], "kwargs": {"training": False}}])
    assert_problem(r, 422, detail="running_var must be defined in evaluation mode")
    t = client.get(f"/v1/sessions/{session}/tensors/rm").json()
    assert t["data"] == [0.0, 0.0]


def test_attention_routes_and_tuple_results(client, session):
    q = np.arange(24, dtype=float).reshape(1, 2, 3, 4) / 10
    body = ok(run(client, session, [
        tensor("q", q.tolist()),
        {"op": "scaled_dot_product_attention", "args": ["q", "q", "q"], "out": "fused"},
        {"op": "scaled_dot_product_attention", "args": ["q", "q", "q"], "kwargs": {"dropout_p": 0.0},
         "out": "also_fused"},
        {"op": "select", "args": ["q", 0, 0], "out": "q0"}, {"op": "select", "args": ["q0", 0, 0], "out": "q3"},
        {"op": "scaled_dot_product_attention", "args": ["q3", "q3", "q3"], "kwargs": {"is_causal": True},
         "out": "math"},
        {"op": "tensor_split", "args": ["q3", 2, 1], "out": "parts"},
        {"op": "unique", "args": ["q3"], "kwargs": {"return_counts": True}, "out": ["u", "c"]},
        {"op": "allclose", "args": ["q3", "q3"], "out": "same"}]))
    t = body["tensors"]
    assert t["fused"]["grad_fn"] == "ScaledDotProductFlashAttentionForCpuBackward0"
    assert t["math"]["grad_fn"] == "MmBackward0"  # 2-d inputs: torch's math route ends in mm
    qs = q[0, 0]
    s = qs @ qs.T / 2.0 + np.triu(np.full((3, 3), -np.inf), 1)
    p = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(t["math"]["data"], (p / p.sum(1, keepdims=True)) @ qs, rtol=1e-5)
    assert [body["ops"][6]["bound"], t["parts_0"]["shape"], t["parts_1"]["shape"]] == [["parts_0", "parts_1"],
                                                                                     [3, 2], [3, 2]]
    assert t["c"]["data"] == [1] * 12 and t["same"] == {**t["same"], "data": True, "dtype": "bool", "shape": []}


def test_new_ops_refuse_bad_calls_with_torch_messages(client, session):
    for ops, detail in (
        ([tensor("x", [[1.0, 2.0]]), {"op": "max_pool2d", "args": ["x", 2]}],
         "non-empty 3D or 4D (batch mode) tensor expected for input"),
        ([tensor("x", X), {"op": "max_pool2d", "args": ["x", 2], "kwargs": {"padding": 2}}],
         "pad should be at most half of effective kernel size, but got pad=2, kernel_size=2 and dilation=1"),
        ([tensor("x", [[1.0, 2.0]]), {"op": "movedim", "args": ["x", [0, 0], [0, 1]]}],
         "movedim: repeated dim in `source` ([0, 0])"),
        ([tensor("x", [1.0, 2.0]), {"op": "repeat_interleave", "args": ["x", -1]}], "Repeats must be non-negative"),
        ([tensor("x", [[1.0, 2.0], [3.0, 4.0]]), {"op": "group_norm", "args": ["x", 3]}],
         "Expected number of channels in input to be divisible by num_groups, but got input of shape [2, 2] and "
         "num_groups=3"),
    ):
        assert_problem(run(client, session, ops), 422, detail=detail)


def test_movedim_of_a_0d_tensor_is_an_alias(client, session):
    """torch's movedim of a 0-d input returns ``self.alias()`` (AliasBackward0); any other input a permute."""
    body = ok(run(client, session, [
        tensor("x", 2.0), tensor("v", [1.0, 2.0]),
        {"op": "movedim", "args": ["x", 0, 0], "out": "a"}, {"op": "movedim", "args": ["x", [], []], "out": "b"},
        {"op": "movedim", "args": ["v", [], []], "out": "p"}]))
    t = body["tensors"]
    assert t["a"]["grad_fn"] == t["b"]["grad_fn"] == "AliasBackward0" and t["a"]["data"] == 2.0
    assert t["p"]["grad_fn"] == "PermuteBackward0"


def test_batch_norm_of_an_empty_input_is_its_clone(client, session):
    """torch: an empty input comes back as its clone (times weight[0], plus bias[0]); the running statistics are
    neither checked nor updated, and training needs no more than one value per channel."""
    body = ok(run(client, session, [
        tensor("e", []), tensor("rm", [1.0, 2.0], requires_grad=False),
        {"op": "batch_norm", "args": ["e", "rm", "rm"], "kwargs": {"training": True}, "out": "y"},
        {"op": "zeros", "args": [0, 3], "kwargs": {"requires_grad": True}, "out": "z"},
        tensor("w", [2.0, 3.0, 4.0]),
        {"op": "batch_norm", "args": ["z", None, None, "w", "w"], "out": "yw"}]))
    t = body["tensors"]
    assert t["y"]["grad_fn"] == "CloneBackward0" and t["y"]["shape"] == [0]
    assert t["yw"]["grad_fn"] == "AddBackward0" and t["yw"]["shape"] == [0, 3]
    assert t["rm"]["data"] == [1.0, 2.0]


def test_interpolate_of_a_5d_input(client, session):
    """torch interpolates (N, C, D, H, W) inputs in nearest, nearest-exact and area modes (UpsampleNearest3D,
    UpsampleNearestExact3D, adaptive_avg_pool3d), and refuses an output size of 0 with its message."""
    x = np.arange(16.0).reshape(1, 1, 2, 2, 4).tolist()
    body = ok(run(client, session, [
        tensor("x", x),
        {"op": "interpolate", "args": ["x"], "kwargs": {"scale_factor": 2}, "out": "n"},
        {"op": "interpolate", "args": ["x"], "kwargs": {"size": [1, 1, 2], "mode": "area"}, "out": "a"},
        {"op": "interpolate", "args": ["x"], "kwargs": {"size": [2, 2, 2], "mode": "nearest-exact"}, "out": "e"},
        {"op": "sum", "args": ["n"], "out": "s"}, {"op": "backward", "args": ["s"]}]))
    t = body["tensors"]
    assert t["n"]["grad_fn"] == "UpsampleNearest3DBackward0" and t["n"]["shape"] == [1, 1, 4, 4, 8]
    assert t["a"]["grad_fn"] == "AdaptiveAvgPool3DBackward0" and t["a"]["data"] == [[[[[6.5, 8.5]]]]]
    assert t["e"]["grad_fn"] == "UpsampleNearestExact3DBackward0"
    assert t["e"]["data"] == [[[[[1.0, 3.0], [5.0, 7.0]], [[9.0, 11.0], [13.0, 15.0]]]]]  # (torch 2.13)
    assert t["x"]["grad"] == np.full((1, 1, 2, 2, 4), 8.0).tolist()
    assert_problem(run(client, session, [tensor("y", x), {"op": "interpolate", "args": ["y", [0, 1, 1]]}]), 422,
                   detail="Input and output sizes should be greater than 0, but got input (D: 2, H: 2, W: 4) output "
                          "(D: 0, H: 1, W: 1)")
