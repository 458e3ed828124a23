"""Minimised programs the fuzzer (or the issue) found, kept as regression tests.

``python -m tests.fuzz.regressions`` runs each in torch once and writes ``regressions.json`` (program +
torch's outcome of every step); ``test_fuzz.py`` replays that file in the engine without torch.
"""

from __future__ import annotations

import json
from pathlib import Path

FILE = Path(__file__).with_name("regressions.json")


def T(name, data, rg=True, dtype="float32"):
    kw = {"dtype": dtype}
    if rg:
        kw["requires_grad"] = True
    return {"op": "tensor", "out": name, "args": [data], "kwargs": kw}


def O(op, *args, out=None, no_grad=False, **kwargs):  # noqa: E743 - an op of the program
    d = {"op": op, "args": list(args)}
    if out:
        d["out"] = out
    if kwargs:
        d["kwargs"] = kwargs
    if no_grad:
        d["no_grad"] = True
    return d


A3 = [[0.795, 0.595, -0.196], [-0.614, -0.398, 0.186], [-0.009, 0.383, -0.793]]

PROGRAMS = {
    # ----- autograd state
    "backward_inputs_nonleaf_retains_grad": [
        O("zeros", [2, 3], out="x", dtype="float64", requires_grad=True), O("select", "x", 0, 1, out="v"),
        O("sum", "v", out="s"), O("backward", "s", retain_graph=True, inputs=["s", "x", "v"])],
    "retain_grad_hook_fires_in_grad": [
        T("a", [1.32, -0.57]), T("b", [0.49, -0.52]), O("ceil", "b", out="c"), O("retain_grad", "c"),
        T("g", [-1.4, 1.5], rg=False),
        O("grad", ["c"], ["a"], out="r", grad_outputs="g", allow_unused=True, materialize_grads=True)],
    "retain_grad_hook_fires_for_unrelated_backward_inputs": [
        T("x", [1.0, 2.0]), T("w", 3.0), O("mul", "x", 2.0, out="v"), O("retain_grad", "v"),
        T("g", [0.5, -1.0], rg=False), O("backward", "v", gradient="g", inputs=["w"])],
    "retain_grad_follows_inplace_setitem": [
        T("x", [1.0, 2.0, 3.0]), O("mul", "x", 2.0, out="v"), O("retain_grad", "v"),
        O("setitem", "v", 0, 1.91), O("sum", "v", out="s"), O("backward", "s")],
    "retained_input_listed_twice_counts_once": [
        T("x", [-0.5, 0.0, 0.5]), O("silu", "x", out="y"), O("float", "y", out="y2"),
        T("g", [0.12, 1.42, 1.85], rg=False),
        O("backward", "y", gradient="g", create_graph=True, inputs=["y", "y2"])],
    "backward_inputs_identity_not_equality": [
        T("x", [-0.66, -0.49, -0.35]), O("hardtanh", "x", out="h"), O("retain_grad", "h"), T("a", [[0.1, 0.2]]),
        O("sum", "h", out="s"), O("backward", "s", retain_graph=True, inputs=["a", "x", "h"])],
    "grad_passthrough_returns_callers_tensor": [
        T("x", [0.69, -1.99]), T("g", [0.86, -0.27]), O("grad", ["x"], ["x"], out="r", grad_outputs="g")],
    "materialized_zeros_require_grad_under_create_graph": [
        T("x", [1.0, 2.0]), T("u", [3.0]), O("sum", "x", out="s"),
        O("grad", ["s"], ["x", "u"], out="r", create_graph=True, materialize_grads=True)],
    "requires_grad_false_after_recording_skips_accumulation": [
        T("x", [[1.01, -1.08]], rg=False), T("w", [[0.17, 0.0]]), O("sub_", "x", "w"),
        O("requires_grad_", "w", False, no_grad=True), O("sum", "x", out="s"), O("backward", "s")],
    "set_grad_on_nonleaf": [
        T("x", [1.0, 2.0]), O("mul", "x", 2.0, out="y"), T("g", [5.0, 6.0], rg=False), O("set_grad", "y", "g")],
    "set_grad_dtype_checked_before_shape": [
        T("x", [[-0.99, 0.85], [-1.73, -0.84]]), T("g", [1.0, 2.0, 3.0], rg=False, dtype="float64"),
        O("set_grad", "x", "g")],
    "backward_inputs_runs_the_inputs_grad_fn_and_frees_it": [
        T("x", [0.006, 0.499, -0.482], dtype="float64"), O("expm1", "x", out="y"),
        T("g", [1.42, 0.96, -1.81], rg=False, dtype="float64"), O("backward", "y", gradient="g", inputs=["y"]),
        O("log_", "y"), O("backward", "y", gradient="g")],
    "index_put_buffers_freed_across_roots": [
        T("v", [[0.89, -0.09], [-0.03, -0.25]], rg=False), T("w", [0.33, 1.58]), O("setitem", "v", [[0]], "w"),
        O("sum", "v", out="s"), O("backward", "s"), T("g", [[1.0, 1.0], [1.0, 1.0]], rg=False),
        O("grad", ["v"], ["w"], out="r", grad_outputs="g")],
    "no_grad_view_root_has_no_grad_fn": [
        T("x", [[0.09, 0.89], [-1.22, -1.12]]), O("permute", "x", [1, 0], out="p", no_grad=True),
        O("sum", "p", out="s"), O("grad", ["p"], ["x"], out="r", grad_outputs="x", allow_unused=True)],
    "no_grad_view_as_grad_input_is_unused": [
        T("x", -0.514), O("square", "x", out="y"), O("getitem", "x", [], out="v", no_grad=True),
        O("backward", "y", retain_graph=True, inputs=["v", "x", "y"])],
    "retain_grad_on_refused_view": [
        T("x", [[-1.17, -1.49], [1.92, -0.31]]), O("getitem", "x", "0:", out="v"), O("unbind", "v", 1, out="u"),
        O("detach", "u_1", out="d"), O("relu_", "d"), O("retain_grad", "u_1")],
    "copy_slices_freed_after_backward": [
        T("v", [[-0.16, -1.51], [0.04, -1.05], [0.71, 0.97]], rg=False), T("w", [[1.15, 1.11], [1.96, -0.51]]),
        O("setitem", "v", "1:", "w"), T("g", [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]], rg=False),
        O("backward", "v", gradient="g"), O("backward", "v", gradient="g", retain_graph=True)],
    "retained_reshape_then_grad_with_create_graph": [
        T("x", [[2.0, 0.57], [-0.19, -1.23], [-1.64, -1.92]]), O("reshape", "x", -1, out="v"),
        T("u", [-1.66, 0.07]), O("retain_grad", "v"), T("g", [0.81, 1.37, -1.21, 0.11, -1.71, 0.03]),
        O("grad", ["v"], ["x", "u"], out="r", grad_outputs="g", create_graph=True, allow_unused=True)],
    "fused_double_backward_gives_zeros_for_an_input_it_ignores": [
        T("x", [-0.32, 0.25, 0.18]), O("hardtanh", "x", out="h", min_val=-0.5, max_val=0.5),
        T("g", [0.24, -0.11, -1.33], rg=False),
        O("grad", ["h"], ["x", "h"], out="d", grad_outputs="g", create_graph=True),
        T("g2", [-1.81, 0.3, 1.55], rg=False), O("backward", "d_0", gradient="g2", retain_graph=True)],
    "zero_grad_leaves_out_a_refused_view": [
        T("x", [[1.1, 0.12], [1.09, 0.05]], dtype="float64"), O("silu", "x", out="y"),
        O("squeeze", "y", out="v", no_grad=True), T("g", [[-1.28, -1.82], [-1.13, 0.0]], rg=False, dtype="float64"),
        O("set_grad", "v", "g"), O("mul_", "y", 0.45), O("zero_grad", set_to_none=True)],
    "retain_grad_on_a_no_grad_view_after_its_base_changed_is_a_no_op": [
        T("x", [[1.9, 1.78], [-1.8, 1.62]]), O("sum", "x", out="s"), O("unsqueeze", "s", 0, out="u"),
        O("unbind", "u", out="v", no_grad=True), O("relu_", "s"), O("retain_grad", "v")],
    "squeeze_double_backward_is_unsqueeze": [
        T("x", [[[0.47], [0.03], [-0.5]]], dtype="float64"), O("squeeze", "x", out="a"), O("squeeze", "x", 0, out="b"),
        O("squeeze", "x", [0, 2], out="c"), T("g", [[1.0], [2.0], [3.0]], dtype="float64"),
        O("grad", ["b"], ["x"], out="gb", grad_outputs="g", create_graph=True)],
    "pad_backward_is_one_node_that_keeps_self": [
        T("x", [[0.65, 0.56, 1.56], [-0.9, -1.54, -1.21]]), O("pad", "x", [0, 2], out="y", mode="replicate"),
        T("g", [[1.47, -0.04, -0.84, 1.57, 0.8], [1.75, -0.26, -0.15, -0.55, 1.17]], rg=False),
        O("grad", ["y"], ["y", "x"], out="r", grad_outputs="g", retain_graph=True, create_graph=True,
          allow_unused=True, materialize_grads=True),
        O("pad", "x", [1, 1], out="z", mode="reflect"), O("sum", "z", out="s0"),
        O("grad", ["s0"], ["x"], out="q", create_graph=True), O("mul", "r_1", "q", out="m"), O("sum", "m", out="s"),
        O("backward", "s")],
    # ----- views and in-place
    "a_refused_view_may_still_be_compared": [
        O("zeros", [2, 3], out="z", no_grad=True), O("getitem", "z", "...", out="v", no_grad=True),
        O("squeeze", "v", out="q"), T("w", 1.28), O("add_", "z", "w"), O("eq", "q", 0.5, out="e")],
    "refused_view_is_refused_before_the_ops_own_checks": [
        T("x", [[0.13, -0.1, 0.31, -0.33], [-0.54, -0.78, 0.77, 0.57]]), O("chunk", "x", 2, 1, out="c"),
        O("sigmoid_", "c_1", no_grad=True), O("view", "c_1", -1, out="v")],
    "copy_of_an_expanded_tensor_into_itself": [
        T("x", [0.5], rg=False), O("expand", "x", 2, 2, out="e"), O("copy_", "e", "e")],
    "masked_fill_into_expanded_writes_masked_elements_only": [
        T("x", [0.015, -0.526, 0.491], rg=False), O("expand", "x", 2, 3, out="e"),
        T("m", [[False, True, True], [True, True, False]], rg=False, dtype="bool"), O("masked_fill_", "e", "m", -1.09)],
    "setitem_checks_the_value_shape_before_autograd": [
        T("x", [[0.0, -1.04, 1.22]]), T("v", []), O("setitem", "x", "1:", "v")],
    "expand_to_an_empty_leading_dimension": [
        T("x", [0.03, 0.51, -0.46], rg=False), O("expand", "x", 0, 3, out="e"), O("expand", "x", 1, 3, out="f"),
        O("mul_", "f", 2.0)],
    "unbind_outputs_are_views": [
        T("x", [[1.0, 2.0], [3.0, 4.0]], rg=False), O("unbind", "x", out="u"), O("mul_", "x", 2.0)],
    "inplace_on_split_output_refused": [
        T("x", [-0.64, 0.64, -0.34, -0.01, 0.35]), O("mul", "x", 1.0, out="y"), O("split", "y", 2, out="p"),
        O("setitem", "p_2", ":1", -1.2)],
    "inplace_on_unbind_output_refused": [
        T("x", [[1.0, 2.0], [3.0, 4.0]]), O("mul", "x", 1.0, out="y"), O("unbind", "y", out="u"),
        O("mul_", "u_1", 2.0)],
    "chunk_output_of_non_rg_base_refused_with_rg_operand": [
        T("x", [[0.11, 1.62, -0.72]], rg=False), O("chunk", "x", 2, out="c"), T("w", [[1.41, -1.63, -1.99]]),
        O("copy_", "c", "w")],
    "multi_output_view_refused_after_base_changes": [
        T("x", [-1.69, -1.05, 0.0, -0.75]), O("mul", "x", 1.0, out="y"), O("split", "y", 1, out="p"),
        O("exp_", "p_1", no_grad=True), O("mul", "p_0", 2.0, out="z")],
    "no_grad_view_requires_grad_and_is_leaf": [
        T("x", [1.0, 2.0, 3.0]), O("expand", "x", 2, 3, out="e", no_grad=True), O("t", "e", out="t", no_grad=True),
        O("select", "x", 0, 1, out="s", no_grad=True), O("split", "x", 2, out="p", no_grad=True)],
    "no_grad_view_inplace_refused_in_grad_mode": [
        T("x", [1.0, 2.0, 3.0]), O("mul", "x", 1.0, out="y"), O("getitem", "y", "1:", out="v", no_grad=True),
        O("mul_", "v", 2.0)],
    "view_requires_grad_follows_base": [
        T("x", [[-0.6, 1.22, -1.72]], rg=False, dtype="float64"), O("split", "x", 2, out="p"),
        O("requires_grad_", "x", True)],
    "view_of_leaf_inplace_message": [
        O("zeros", [2, 3], out="x"), O("getitem", "x", 1, out="v"), O("requires_grad_", "v", True, no_grad=True),
        O("neg_", "v")],
    "base_change_gives_views_as_strided": [
        T("x", [[1.0, 2.0], [3.0, 4.0]]), O("mul", "x", 2.0, out="y"), O("select", "y", 0, 1, out="s"),
        O("t", "y", out="t"), O("view", "y", -1, out="v"), O("expand", "y", 2, 2, 2, out="e"), O("mul_", "y", 3.0),
        O("sum", "s", out="z"), O("backward", "z")],
    "setitem_rg_value_into_non_rg_view_keeps_gradient": [
        T("v", [1.0, 2.0, 3.0], rg=False), T("w", 2.0), O("setitem", "v", 1, "w"), O("sum", "v", out="s"),
        O("backward", "s")],
    "fill_rg_value_through_view_keeps_gradient": [
        T("v", [1.0, 2.0, 3.0], rg=False), T("w", 2.0), O("select", "v", 0, 1, out="s"), O("fill_", "s", "w"),
        O("sum", "v", out="t"), O("backward", "t")],
    "expand_as_self_inplace_allowed": [
        T("x", [1.0, 2.0, 3.0]), O("mul", "x", 1.0, out="y"), O("expand_as", "y", "y", out="e"), O("mul_", "e", 2.0)],
    "expanded_inplace_refused": [
        T("x", [1.0, 2.0, 3.0]), O("mul", "x", 1.0, out="y"), O("expand", "y", 2, 3, out="e"), O("mul_", "e", 2.0)],
    "partial_overlap_refused": [
        O("arange", 0.0, 6.0, out="a"), O("getitem", "a", "1:4", out="p"), O("getitem", "a", "0:3", out="q"),
        O("add_", "p", "q")],
    "same_elements_overlap_allowed": [
        O("arange", 0.0, 6.0, out="a"), O("detach", "a", out="d"), O("add_", "a", "d")],
    "fill_scalar_into_expanded_allowed_tensor_refused": [
        T("x", -0.2, rg=False), O("expand", "x", 2, out="e"), O("fill_", "e", 1.5), T("v", 2.0, rg=False),
        O("fill_", "e", "v")],
    "fill_tensor_value_aliasing_target_allowed": [
        T("x", 0.45, rg=False), O("view", "x", 1, out="v"), O("fill_", "v", "x", no_grad=True)],
    "grad_fn_names_slice_fill_copy": [
        T("x", [[1.0, 2.0], [3.0, 4.0]]), O("getitem", "x", ":2", out="a"), O("getitem", "x", [":", ":"], out="b"),
        O("mul", "x", 1.0, out="y"), O("fill_", "y", 2.0), O("mul", "x", 1.0, out="z"), T("v", 3.0, rg=False),
        O("fill_", "z", "v"), O("sum", "x", out="s"), O("setitem", "s", [], 5.0), O("mul", "x", 1.0, out="w"),
        O("setitem", "w", ":", 1.0)],
    "reshape_of_strided_view_is_reshape_alias": [
        T("x", [[-0.43, 0.45, 0.12], [0.72, -0.72, -0.16]]), O("unbind", "x", 1, out="u"),
        O("reshape", "u_0", -1, out="r"), O("t", "x", out="t"), O("reshape", "t", 3, 2, out="r2")],
    "double_backward_node_names": [
        T("x", [-0.51, 0.46, 0.01]), O("gelu", "x", out="g"), O("sum", "g", out="s"),
        O("grad", ["s"], ["x"], out="r", create_graph=True), O("hardtanh", "x", out="h"),
        T("u", [0.1, 0.2, 0.3], dtype="float64"), O("maximum", "h", "u", out="m"),
        T("go", [0.8, 1.05, -1.21], rg=False, dtype="float64"),
        O("grad", ["m"], ["x", "h"], out="q", grad_outputs="go", retain_graph=True, create_graph=True),
        O("sum", "r", out="rs"), O("backward", "rs")],
    # ----- op-level checks (merged main)
    "conv2d_mkldnn_weight_dtype_message": [
        T("a", [[[[0.43, 0.63], [0.33, -0.83]], [[0.98, -0.85], [0.61, 0.51]]]]),
        T("w", [[[[-0.53]]], [[[0.68]]]], dtype="float64"), O("conv2d", "a", "w", out="o", groups=2)],
    "conv2d_slow_path_weight_dtype_message": [
        T("a", [[[[0.43, 0.63], [0.33, -0.83]], [[0.98, -0.85], [0.61, 0.51]]]]),
        T("w", [[[[-0.53]], [[0.2]]]], dtype="float64"), O("conv2d", "a", "w", out="o")],
    "conv1d_weight_dtype_message": [
        T("a", [[0.43, 0.63, 0.1], [0.33, -0.83, 0.2]]), T("w", [[[-0.53], [0.68]]], dtype="float64"),
        O("conv1d", "a", "w", out="o")],
    "conv_bias_dtype_checked_before_the_weight_and_the_rank": [
        T("a", [0.43, 0.63]), T("w", [[[[-0.53]]], [[[0.68]]]], dtype="float64"),
        T("b", [0.1, 0.2], dtype="float64"), O("conv2d", "a", "w", "b", out="o")],
    "index_copy_source_dtype_message": [
        T("s", [[1.0, 2.0], [3.0, 4.0]], dtype="float64"), T("i", [0, 1], rg=False, dtype="int64"),
        T("src", [[1.0, 2.0]]), O("index_copy", "s", 0, "i", "src", out="o")],
    "index_copy_number_of_indices_is_an_index_error": [
        T("s", [[1.0, 2.0], [3.0, 4.0]]), T("i", [0, 1], rg=False, dtype="int64"), T("src", [[1.0, 2.0]]),
        O("index_copy", "s", 0, "i", "src", out="o")],
    "index_add_number_of_indices_message": [
        T("s", [[1.0, 2.0], [3.0, 4.0]]), T("i", [0, 1], rg=False, dtype="int64"), T("src", [[1.0, 2.0]]),
        O("index_add", "s", 0, "i", "src", out="o")],
    "scatter_add_src_dtype_message_names_scatter": [
        T("s", [[1.0, 2.0], [3.0, 4.0]]), T("i", [[0, 1]], rg=False, dtype="int64"),
        T("src", [[1.0, 2.0]], dtype="float64"), O("scatter_add", "s", 0, "i", "src", out="o")],
    "multigammaln_outside_the_old_domain_is_lgamma": [
        T("x", [-1.34, -0.93, -1.45, 0.0, -2.0, 3.5]), O("special.multigammaln", "x", 1, out="y"),
        T("z", [0.007, 0.467, -0.462, 0.5, 1.0], dtype="float64"), O("mvlgamma", "z", 2, out="w"),
        O("sum", "y", out="s"), O("backward", "s")],
    "matrix_norm_infinite_orders_spelled_as_strings": [
        T("A", [[0.8, 0.6, 0.9], [-1.3, 1.8, 0.4], [-1.5, -1.6, -1.1]], dtype="float64"),
        O("linalg.norm", "A", "-inf", out="n"), O("linalg.norm", "A", ord="inf", out="m"),
        O("add", "n", "m", out="s"), O("backward", "s")],
    "polygamma_of_order_zero_is_its_own_node": [
        T("x", [1.256, 1.636, 0.894, -0.5]), O("polygamma", 0, "x", out="y"), O("special.psi", "x", out="z"),
        O("add", "y", "z", out="w"), O("sum", "w", out="s"), O("grad", ["s"], ["x"], out="r", create_graph=True)],
    "bce_with_logits_has_the_targets_dtype": [
        O("ones", [3], out="x", dtype="float64", requires_grad=True), T("t", [0.302, 0.71, 0.484]),
        T("w", [0.5, 1.0, 2.0], rg=False, dtype="float64"),
        O("binary_cross_entropy_with_logits", "x", "t", out="l1", weight="w", pos_weight="w"),
        O("binary_cross_entropy_with_logits", "t", "x", out="l2", reduction="none"), O("sum", "l2", out="s2"),
        O("add", "l1", "s2", out="s"), O("backward", "s")],
    "huber_loss_has_the_inputs_dtype": [
        T("x", [0.294, 0.206, 2.394]), T("y", [-0.081, -0.147, -0.226], dtype="float64"),
        O("huber_loss", "x", "y", out="l", reduction="none"), O("huber_loss", "y", "x", out="m")],
    "huber_loss_mixed_dtype_backward_refused": [
        T("x", [0.294, 0.206, 0.394], dtype="float64"), T("y", [-0.081, -0.147, -0.226]),
        O("huber_loss", "x", "y", out="l"), O("backward", "l", retain_graph=True)],
    "argument_errors_before_the_overlap_check": [
        T("x", [1.0], rg=False), O("expand", "x", 2, 2, out="e"), O("sub_", "e", None)],
    "argument_errors_before_the_partial_overlap_check": [
        O("arange", 0.0, 6.0, out="a"), O("getitem", "a", "1:4", out="p"), O("add_", "p", None)],
    "cross_entropy_weight_of_another_dtype_refused": [
        T("x", [[-0.128, -0.424, 0.716], [-0.697, 0.129, 0.449]], dtype="float64"),
        T("t", [0, 1], rg=False, dtype="int64"), T("w", [0.89, -0.72, -0.48], rg=False),
        O("cross_entropy", "x", "t", out="l", weight="w")],
    "nll_loss_weight_of_another_dtype_refused": [
        T("x", [[-0.128, -0.424, 0.716], [-0.697, 0.129, 0.449]]), T("t", [0, 1], rg=False, dtype="int64"),
        T("w", [0.89, -0.72, -0.48], rg=False, dtype="float64"), O("nll_loss", "x", "t", out="l", weight="w")],
    "bce_with_logits_weights_may_not_require_grad": [
        T("x", [[0.711, -0.426, -0.127], [0.444, 0.152, -0.705]], dtype="float64"),
        T("y", [[0.438, 0.782, 0.326], [0.673, 0.223, 0.558]], dtype="float64"), T("p", [0.02, 0.27, 1.28]),
        O("binary_cross_entropy_with_logits", "x", "y", "p", out="a", pos_weight="p", no_grad=True),
        O("binary_cross_entropy_with_logits", "x", "y", out="l", pos_weight="p", reduction="sum")],
    "cholesky_of_a_non_positive_definite_matrix": [
        T("a", [[-0.201, 0.795, 0.203], [-0.601, 0.589, -0.817], [0.402, -0.406, -0.001]]),
        O("linalg.cholesky", "a", out="l")],
    "layer_norm_mixed_parameter_dtype_message": [
        T("x", [[0.3, -0.1, 0.5], [0.6, 0.5, -0.8]], dtype="float64"), T("w", [1.0, 0.5, 2.0]),
        T("b", [0.1, 0.2, 0.3], dtype="float64"), O("layer_norm", "x", [3], "w", "b", out="y")],
    "layer_norm_parameters_of_the_inputs_dtype_checked_by_the_kernel": [
        T("x", [[0.3, -0.1, 0.5], [0.6, 0.5, -0.8]]), T("w", [1.0, 0.5, 2.0]),
        T("b", [0.1, 0.2, 0.3], dtype="float64"), O("layer_norm", "x", [3], "w", "b", out="y")],
    "nll_loss_weight_may_not_require_grad": [
        T("x", [[-0.32, -1.44, 1.71], [-1.12, 0.85, 1.47]]), T("t", [0, 2], rg=False, dtype="int64"),
        T("w", [0.467, 0.027, 0.476]), O("cross_entropy", "x", "t", out="a", weight="w", no_grad=True),
        O("cross_entropy", "x", "t", out="l", weight="w", label_smoothing=0.1)],
    "binary_cross_entropy_weight_may_not_require_grad": [
        T("x", [0.32, 0.44, 0.71]), T("t", [0.0, 1.0, 0.5], dtype="float64"), T("w", [0.467]),
        O("binary_cross_entropy", "x", "t", "w", out="l")],
    # ----- double backward: the nodes torch's formulas build (session 3)
    "slogdet_double_backward_through_linalg_solve": [
        T("a", A3), O("slogdet", "a", out="s"),
        O("grad", ["s_1"], ["a"], out="g", create_graph=True), O("view", "g", -1, out="gv")],
    "det_double_backward_through_linalg_solve": [
        T("a", A3, dtype="float64"), O("linalg.det", "a", out="d"),
        O("grad", ["d"], ["a"], out="g", create_graph=True)],
    "det_gradient_at_a_singular_matrix": [
        O("full", [2, 2], 1.5, out="a", requires_grad=True), O("linalg.det", "a", out="d"),
        O("backward", "d")],
    "slogdet_backward_at_a_singular_matrix_is_inf_and_nan": [
        O("full", [2, 2], 1.5, out="a", requires_grad=True), O("linalg.slogdet", "a", out="s"),
        O("backward", "s_1")],
    "cholesky_double_backward_through_solve_triangular": [
        T("a", [[[2.0, 0.3], [0.3, 1.0]], [[1.5, -0.2], [-0.2, 0.8]]]), O("linalg.cholesky", "a", out="l", upper=True),
        O("sum", "l", out="s"), T("g", -0.33, rg=False), O("grad", ["s"], ["l", "a"], out="r", grad_outputs="g",
                                                            create_graph=True)],
    "vector_norm_double_backward_ends_in_mul": [
        T("x", [1.139, -0.735, -1.547], dtype="float64"), O("linalg.vector_norm", "x", out="n"),
        T("g", 0.74, dtype="float64", rg=False), O("grad", ["n"], ["x"], out="r", grad_outputs="g",
                                                   create_graph=True),
        O("linalg.vector_norm", "x", 3.0, out="n3"), O("grad", ["n3"], ["x"], out="r3", create_graph=True),
        O("linalg.vector_norm", "x", 0.0, out="n0"), O("backward", "n0")],
    "conv2d_double_backward_is_one_node": [
        T("x", [[[[0.43, 0.63, -0.06], [0.33, -0.83, -0.21], [-0.38, 0.88, -0.61]]]]),
        T("w", [[[[-0.53, -0.24], [0.54, 0.84]]]]), O("conv2d", "x", "w", out="y"), O("sum", "y", out="s"),
        O("grad", ["s"], ["x", "w"], out="g", create_graph=True), O("sum", "g_0", out="q"),
        O("backward", "q")],
    "layer_norm_weight_double_backward_is_one_node": [
        T("w", [-1.02, 1.6, 0.65, 0.57]), T("x", [[0.4, 0.85, 0.53, 0.07], [-0.84, -0.55, -0.07, -0.7]]),
        O("layer_norm", "x", [4], out="y", weight="w"), O("sum", "y", out="s"),
        O("grad", ["s"], ["w", "x"], out="g", create_graph=True)],
    "smooth_l1_mixed_dtype_double_backward_keeps_the_inputs_dtype": [
        T("x", [0.203, 0.407, 0.304], dtype="float64"), T("y", [-0.153, -0.227, -0.07]),
        O("smooth_l1_loss", "x", "y", out="l"), T("g", -0.07, dtype="float64"),
        O("grad", ["l"], ["y"], out="r", grad_outputs="g", create_graph=True)],
    "huber_loss_mixed_dtype_backward_names_the_needed_input": [
        T("x", [0.294, 0.206, 0.394], rg=False, dtype="float64"), T("y", [-0.081, -0.147, -0.226]),
        O("huber_loss", "x", "y", out="l"), O("backward", "l")],
    "scalar_factors_in_formulas_are_scalar_ops": [
        T("c", [[0.1, 0.2], [0.3, 0.4]], dtype="float64"), T("a", [[0.5, -0.2], [0.1, 0.7]], dtype="float64"),
        T("b", [[0.3, 0.9], [-0.4, 0.2]], dtype="float64"),
        O("addmm", "c", "a", "b", out="m", beta=0.5, alpha=2.0), O("sum", "m", out="s"),
        O("grad", ["s"], ["c", "a", "b"], out="g", create_graph=True),
        O("binary_cross_entropy_with_logits", "a", "b", out="l"),
        O("grad", ["l"], ["a"], out="h", create_graph=True)],
    "cumprod_double_backward_through_a_zero": [
        T("x", [0.5, 0.0, -1.5, 2.0], dtype="float64"), O("cumprod", "x", 0, out="c"), O("sum", "c", out="s"),
        O("grad", ["s"], ["x"], out="g", create_graph=True)],
    # ----- layouts: LAPACK results are column-major, reductions and matmul gradients contiguous
    "linalg_inv_is_column_major_so_reshape_copies": [
        T("a", [[0.415, -0.398, -0.582], [0.6, 0.186, 0.796], [-0.015, -0.189, -0.793]], dtype="float64"),
        O("linalg.inv", "a", out="i"), O("reshape", "i", -1, out="r"), O("t", "i", out="it"),
        O("view", "it", -1, out="v"), O("view", "i", -1, out="bad")],
    "cholesky_chunk_view_refused_as_in_torch": [
        T("a", [[[2.0, 0.3], [0.3, 1.0]], [[1.5, -0.2], [-0.2, 0.8]]]), O("linalg.cholesky", "a", out="l", upper=True),
        O("chunk", "l", 2, out="c"), O("view", "c_1", -1, out="v")],
    "gradients_of_column_major_operands": [
        T("a", [[0.415, -0.398], [0.6, 0.186]], dtype="float64"), O("linalg.inv", "a", out="i"),
        T("x", [[0.3, -0.1], [0.2, 0.5], [-0.4, 0.6]], dtype="float64"), O("mm", "x", "i", out="m"),
        O("sum", "m", out="s"), O("grad", ["s"], ["x", "a"], out="g", create_graph=True),
        O("linear", "x", "a", out="y"), O("sum", "y", out="q"), O("grad", ["q"], ["a"], out="h"),
        O("view", "h", -1, out="hv")],
    "solve_batched_gradient_of_a_broadcast_rhs_is_contiguous": [
        T("a", [[[2.0, 0.3], [0.3, 1.0]], [[1.5, -0.2], [-0.2, 0.8]]], dtype="float64"),
        T("b", [[0.5, -0.2], [0.1, 0.7]], dtype="float64"), O("linalg.solve", "a", "b", out="x"),
        O("sum", "x", out="s"), O("grad", ["s"], ["b"], out="g", create_graph=True),
        O("view", "g", -1, out="gv"), T("v", [0.3, 0.4], dtype="float64"), O("linalg.solve", "a", "v", out="y"),
        O("view", "y", -1, out="yv")],
    # ----- views and the version counter
    "version_error_names_the_views_asstrided_while_it_lives": [
        T("x", [[-2.34, -2.56, -2.623], [-2.272, -2.488, -2.414]]), O("lgamma", "x", out="y"),
        O("select", "y", 0, 1, out="v"), O("tanh_", "v"), T("m", [True, True, True], rg=False, dtype="bool"),
        O("masked_fill_", "v", "m", 0.94), O("sum", "y", out="s"), O("backward", "s", retain_graph=True)],
    "version_error_names_the_op_once_the_views_node_is_freed": [
        T("x", [[-2.34, -2.56, -2.623], [-2.272, -2.488, -2.414]]), O("lgamma", "x", out="y"),
        O("select", "y", 0, 1, out="v"), O("tanh_", "v"), T("m", [True, True, True], rg=False, dtype="bool"),
        O("masked_fill_", "v", "m", 0.94), O("sum", "y", out="s"), O("backward", "s")],
    "div_with_rounding_mode_saves_its_inputs": [
        T("x", [-0.0, -0.515, 0.462]), T("y", [0.88, 1.633, 1.278], dtype="float64"),
        O("div", "x", "y", out="q", rounding_mode="floor"), O("clamp_max_", "x", 0.1, no_grad=True),
        T("g", [-0.13, -0.81, -0.39], rg=False, dtype="float64"), O("backward", "q", gradient="g")],
    "retain_grad_again_on_a_refused_split_view_is_a_no_op": [
        T("x", [-0.523, 0.501, 0.031], dtype="float64"), O("chunk", "x", 2, out="c"), O("retain_grad", "c_0"),
        O("sub_", "c_1", 1.94, no_grad=True), O("retain_grad", "c_0")],
    "identity_ops_on_a_refused_split_view": [
        T("x", [-0.529, 0.483, -0.008]), O("clamp_min", "x", 0.0, out="y"),
        O("reshape", "y", -1, out="r", no_grad=True), O("split", "r", 2, out="p"), O("sqrt_", "y"),
        O("flatten", "p_0", out="f"), O("contiguous", "p_0", out="c"), O("mul", "p_0", 2.0, out="refused")],
    # ----- values and checks at the edges
    "slogdet_and_det_with_infinite_entries": [
        O("eye", 3, out="e", requires_grad=True),
        T("p", [[-1.68, 0.73, 1.92], [1.41, -0.72, 0.98], [-0.02, 1.4, -1.45]]), O("pow_", "e", "p", no_grad=True),
        O("linalg.slogdet", "e", out="s"), O("linalg.det", "e", out="d"),
        T("z", [[-1.0, 1.0], [1.0, 1.0]], rg=False), O("sqrt", "z", out="n"), O("linalg.slogdet", "n", out="sn"),
        T("z0", [[0.5, 0.0], [1.0, 0.5]], rg=False, dtype="float64"), O("reciprocal", "z0", out="i"),
        O("linalg.det", "i", out="di")],
    "polygamma_at_the_poles": [
        T("x", [0.0, -1.0, -2.0, -0.0, 1.0, -0.5], rg=False, dtype="float64"),
        O("polygamma", 1, "x", out="p1"), O("polygamma", 2, "x", out="p2"), O("polygamma", 3, "x", out="p3"),
        O("digamma", "x", out="p0"), T("z", [0.0, -0.0], rg=False, dtype="float64"), O("reciprocal", "z", out="i"),
        O("polygamma", 1, "i", out="i1"), O("polygamma", 2, "i", out="i2"),
        T("f", [0.0, -1.0, -3.0, 2.5, -3.7, 0.2], rg=False), O("polygamma", 1, "f", out="f1"),
        O("polygamma", 4, "f", out="f4")],
    "integer_convolutions_run_bool_ones_do_not": [
        T("x", [[[1, 2, 0, 1, 2]]], rg=False, dtype="int64"), T("w", [[[1, -1]], [[2, 0]]], rg=False, dtype="int64"),
        O("conv1d", "x", "w", out="y"), T("b", [[[True, False, True]]], rg=False, dtype="bool"),
        T("wf", [[[0.5, 1.0]]]), O("conv1d", "b", "wf", out="z")],
    "conv_saves_its_input_and_weight_whichever_requires_grad": [
        T("x", [[[-0.39, -0.69, 0.535, -0.226, 0.698, -0.076], [0.245, -0.846, 0.832, -0.542, 0.073, 0.396]]]),
        T("w", [[[-0.687, 0.532], [-0.533, -0.235]]], rg=False), O("conv1d", "x", "w", out="y", dilation=2),
        O("sum", "y", out="s"), O("backward", "s", retain_graph=True, create_graph=True)],
    "hypot_saves_only_the_operands_that_require_grad": [
        T("x", [[-1.527, -1.277, 1.777], [0.764, -0.531, -1.024]], dtype="float64"),
        T("y", [0.757, -1.573, -1.13], rg=False), O("hypot", "x", "y", out="h"), O("log_", "y", no_grad=True),
        T("g", [[-1.68, 1.33, 0.0], [1.38, 0.0, -0.02]], rg=False, dtype="float64"),
        O("backward", "h", gradient="g", retain_graph=True)],
    "select_and_slice_double_backward_nodes": [
        T("x", [0.13, -0.07, 0.25, 0.0]), O("getitem", "x", 3, out="a"), O("getitem", "x", "1:3", out="b"),
        T("g", -0.07), O("grad", ["a"], ["x"], out="r", grad_outputs="g", create_graph=True),
        O("sum", "b", out="s"), O("grad", ["s"], ["x"], out="q", create_graph=True)],
    "cross_of_a_vector_with_itself_is_fma_rounding": [
        T("v", [[-0.707, 0.726], [-0.453, -0.131], [0.445, 0.155]]), O("linalg.cross", "v", "v", out="c", dim=0),
        T("w", [[-0.706, -0.441], [0.161, 0.405], [0.716, -0.136]]), O("cosine_similarity", "c", "w", 0, out="k"),
        T("d", [[0.716, -0.15, 0.144], [0.408, -0.711, -0.452]], rg=False, dtype="float64"),
        O("cross", "d", "d", out="e", dim=1), O("log_", "e")],
    "lgamma_is_exactly_zero_at_one_and_two": [
        O("ones", [3], out="o"), O("lgamma", "o", out="l"), O("log_", "l", no_grad=True),
        T("t", [2.0, 1.0], rg=False, dtype="float64"), O("lgamma", "t", out="m"), O("log", "m", out="lm")],
    "atan2_gradient_at_the_origin_is_zero": [
        T("x", [1.67, 0.0, 1.42], dtype="float64"), O("round", "x", out="r"), O("lerp", "r", "x", 0.7, out="l"),
        O("atan2", "x", "l", out="a"), T("g", [0.16, -1.08, 0.8], rg=False, dtype="float64"),
        O("backward", "a", gradient="g", no_grad=True)],
    "mean_backward_divides_by_a_number": [
        T("x", [[[0.544, -0.073], [0.693, -0.222]], [[0.399, 0.221], [-0.527, 0.083]]]),
        O("mean", "x", [0, 2], out="m", keepdim=True), O("sum", "m", out="s"), O("sqrt_", "s"),
        O("grad", ["s"], ["x"], out="g", create_graph=True)],
    "index_reading_ops_double_backward_nodes": [
        T("x", [[0.3, -0.5, 0.9], [0.1, 0.7, -0.2]]), O("sort", "x", 1, out="o"), O("mul", "o_0", "o_0", out="q"),
        O("sum", "q", out="s"), O("grad", ["s"], ["x"], out="g", create_graph=True),
        T("i", [[0, 2], [1, 0]], rg=False, dtype="int64"), O("gather", "x", 1, "i", out="h"),
        O("mul", "h", "h", out="hq"), O("sum", "hq", out="hs"), O("grad", ["hs"], ["x"], out="gh", create_graph=True),
        T("j", [2, 0], rg=False, dtype="int64"), O("index_select", "x", 1, "j", out="k"), O("mul", "k", "k", out="kq"),
        O("sum", "kq", out="ks"), O("grad", ["ks"], ["x"], out="gk", create_graph=True)],
    "alpha_and_scalar_weights_are_scalar_products": [
        T("a", [0.3, -0.5, 0.9]), T("b", [0.1, 0.7, -0.2]), O("add", "a", "b", out="c", alpha=2.0),
        O("mul", "c", "c", out="cc"), O("sum", "cc", out="s"), O("grad", ["s"], ["a", "b"], out="g", create_graph=True),
        O("lerp", "a", "b", 0.3, out="l"), O("mul", "l", "l", out="ll"), O("sum", "ll", out="ls"),
        O("grad", ["ls"], ["a", "b"], out="gl", create_graph=True)],
    "linear_with_a_non_contiguous_bias_goes_through_matmul": [
        T("v", [[0.919, 1.366, 1.777], [1.146, 0.731, 1.576]], dtype="float64"), O("unbind", "v", 1, out="b"),
        T("x", [0.02, 0.53, -0.489], dtype="float64"), T("w", [[0.445, -0.437, -0.15], [0.694, 0.156, -0.691]]),
        O("linear", "x", "w", "b_0", out="y")],
    "binary_cross_entropy_range_checked_element_by_element": [
        T("x", [0.65, -0.671, 0.356]), T("t", [1.34, 0.02, 1.05]), O("binary_cross_entropy", "x", "t", out="l")],
    "index_add_and_index_copy_bounds_messages": [
        T("x", [[-0.699, -0.156], [-0.449, 0.434], [0.705, 0.148]]), T("i", [0, 3, 3], rg=False, dtype="int64"),
        T("s", [[0.692, -0.723], [-0.426, 0.429], [0.156, -0.145]]), O("index_add", "x", 0, "i", "s", out="y")],
    "index_copy_takes_no_negative_index": [
        T("x", [0.3, 0.1, 0.7]), T("i", [0, -1, 1], rg=False, dtype="int64"), T("s", [1.0, 2.0, 3.0]),
        O("index_copy", "x", 0, "i", "s", out="y")],
    "max_repeat_trace_double_backward_nodes": [
        T("x", [[0.3, -0.5, 0.9], [0.9, 0.7, -0.2]]), O("max", "x", out="m"), O("mul", "m", "m", out="q"),
        O("grad", ["q"], ["x"], out="g", create_graph=True), O("repeat", "x", 2, 1, out="r"),
        O("mul", "r", "r", out="rr"), O("sum", "rr", out="rs"), O("grad", ["rs"], ["x"], out="gr", create_graph=True),
        T("a", [[0.5, 0.1], [0.2, 0.4]]), O("trace", "a", out="t"), O("mul", "t", "t", out="tt"),
        O("grad", ["tt"], ["a"], out="gt", create_graph=True)],
    "releasing_a_fused_double_backward_node_keeps_its_formulas_graph": [
        T("x", [-0.502, 0.018, 0.51], dtype="float64"), O("logsigmoid", "x", out="y"),
        T("g", [1.21, 1.03, 0.82], dtype="float64", rg=False),
        O("grad", ["y"], ["x"], out="d", grad_outputs="g", retain_graph=True, create_graph=True),
        O("sum", "d", out="s"), O("backward", "s", inputs=["x"]), O("backward", "y", gradient="g")],
    "version_error_names_a_cpp_node_by_its_qualified_name": [
        O("linspace", 0.0, 1.0, 3, out="b", dtype="float32", requires_grad=True),
        T("m", [[-0.156, 0.728, 0.424], [-0.436, -0.736, 0.145]], rg=False),
        T("w", [[0.846, -0.851, 0.074], [0.682, 0.529, -0.693], [-0.077, 0.235, -0.37]]),
        O("addmm", "b", "m", "w", out="y", beta=0.5, alpha=2), T("n", [[-0.85, 0.85, 1.2], [0.87, 0.24, -1.22]]),
        O("copy_", "m", "n"), O("sum", "y", out="s"), O("backward", "s", inputs=["n", "w"])],
    "reshape_of_a_0d_integer_tensor": [
        T("x", [0.1, 0.5, -0.3], rg=False), O("argmax", "x", out="i"), O("reshape", "i", -1, out="r")],
    **{f"{w}_refuses_its_own_target_as_source": [
        T("x", [-1.09, 0.3, -1.57], rg=False), T("i", [1, 2, 0], rg=False, dtype="int64"),
        O("view", "x", -1, out="v"), O(w, "v", 0, "i", "v")]
       for w in ("scatter_add_", "index_copy_", "scatter_", "index_add_")},
    "index_add_of_a_0d_source_with_three_indices": [
        O("linspace", 0.0, 1.0, 4, out="x", dtype="float32"), T("i", [1, 1, 0], rg=False, dtype="int64"),
        T("s", 0.89, rg=False), O("index_add_", "x", 0, "i", "s")],
    "index_writes_check_their_arguments_before_overlap": [
        O("arange", 0.0, 3.0, 0.5, out="a", dtype="float32"), O("expand", "a", 2, 6, out="e"),
        T("i", [4, 1, 4, 1], rg=False, dtype="int64"), T("s", -0.82, rg=False), O("index_add_", "e", 1, "i", "s")],
    "scatter_add_checks_dtypes_before_overlap": [
        T("x", [[-1.88, 1.78, -0.95], [2.0, 0.0, -1.08]], rg=False, dtype="float64"),
        O("expand", "x", 2, 2, 3, out="e"),
        T("i", [[[1, 0, 1], [1, 1, 0]], [[1, 1, 1], [0, 0, 0]]], rg=False, dtype="int64"), T("s", 1.8),
        O("scatter_add_", "e", 1, "i", "s")],
    "backward_refuses_a_leaf_moved_into_the_graph_interior": [
        T("x", [[1.6, 1.25, 1.12]]), O("sum", "x", out="s"), O("requires_grad_", "x", False, no_grad=True),
        T("i", [0], rg=False, dtype="int64"), O("index_fill_", "x", 0, "i", "s"), O("sum", "x", out="t"),
        O("backward", "t", retain_graph=True)],
    "index_copy_of_a_0d_source_sums_its_gradient": [
        T("s", -0.81), T("x", [1.545, 1.166, 0.727]), O("sign", "x", out="y"), T("i", [0], rg=False, dtype="int64"),
        O("index_copy_", "y", 0, "i", "s"), T("g", [1.05, 1.43, 0.11], rg=False), O("backward", "y", gradient="g")],
    "index_add_checks_the_dim_against_the_source_first": [
        T("x", [[[2.0, 0.3], [0.3, 1.0]], [[1.5, -0.2], [-0.2, 0.8]]]), T("s", 0.61),
        T("i", [0], rg=False, dtype="int64"), O("mul", "x", 1.0, out="y"), O("index_add_", "y", 2, "i", "s")],
    "kthvalue_among_nans_and_ties_picks_torchs_quickselect_index": [
        T("x", [-1.0, 1.0, -4.0, 0.25]), O("sqrt", "x", out="y"), O("kthvalue", "y", 3, out="k"),
        O("sum", "k_0", out="s"), O("backward", "s"), T("t", [[1.0, 1.0, 1.0], [2.0, 0.5, 2.0]]),
        O("kthvalue", "t", 1, 0, out="u"), O("kthvalue", "t", 2, keepdim=True, out="w")],
    "grad_inputs_run_only_the_formulas_they_need": [
        T("x", [0.846, 1.242, 1.627], dtype="float64"), T("y", [-0.081, -0.147, -0.226]),
        O("huber_loss", "x", "y", out="h"), O("grad", ["h"], ["y"], out="gy")],
    "backward_through_masked_fill_on_an_expanded_view_refused": [
        T("x", [1.0, 2.0]), O("mul", "x", 1.0, out="y"), O("expand", "y", 3, 2, out="e"),
        T("m", [[True, False], [False, False], [False, True]], rg=False, dtype="bool"),
        O("masked_fill_", "e", "m", 0.5), O("sum", "e", out="s"), O("backward", "s")],
    "fill_with_a_tensor_value_into_an_expanded_view_refused": [
        T("x", [1.0, 2.0], rg=False), T("w", 0.5), O("expand", "x", 3, 2, out="e"), O("fill_", "e", "w"),
        O("sum", "e", out="s"), O("backward", "s")],
    "setitem_on_a_row_of_an_expanded_view_backward_runs": [
        T("x", [1.0, 2.0]), O("mul", "x", 1.0, out="y"), O("expand", "y", 3, 2, out="e"),
        O("select", "e", 0, 0, out="r"), O("fill_", "r", 0.5), O("sum", "e", out="s"), O("backward", "s")],
    "trace_backward_fills_the_diagonal_a_nan_gradient_stays_there": [
        T("x", [[-0.793, 0.325, 0.549, -0.112], [-0.315, 0.124, -0.549, 0.794]]), O("trace", "x", out="t"),
        O("pow_", "t", -1.0, no_grad=True), O("sqrt_", "t"), O("grad", ["t"], ["x"], out="g", retain_graph=True),
        O("mul", "t", "t", out="q"), O("grad", ["q"], ["x"], out="h", create_graph=True)],
    "relu_backward_passes_the_gradient_at_nan": [
        T("x", [[-0.29, -1.47, 0.11], [-0.72, 1.11, -1.63]], dtype="float64"), O("atanh", "x", out="a"),
        O("relu_", "a"), T("g", [[0.65, -1.2, 1.25], [-0.82, -0.78, 1.28]], rg=False, dtype="float64"),
        O("grad", ["a"], ["x"], out="d", grad_outputs="g", retain_graph=True),
        O("grad", ["a"], ["x"], out="e", grad_outputs="g", create_graph=True)],
    "copy_backward_casts_to_src_dtype_before_summing_to_its_shape": [
        T("v", [[0.412, 0.727, 0.131], [-0.124, -0.453, -0.733]], rg=False, dtype="float64"), T("w", -1.15),
        O("copy_", "v", "w"), O("sum", "v", out="s"), T("g", 0.74, dtype="float64"),
        O("grad", ["s"], ["w", "v"], out="d", grad_outputs="g", create_graph=True)],
    "expand_as_reads_only_the_size_of_a_refused_view": [
        T("x", [[2.0, 0.5, 0.1], [0.3, 1.5, 0.2], [0.1, 0.4, 1.2]]), O("split", "x", 2, out="p"),
        O("clamp_", "p_0", -0.5, 0.5, no_grad=True), T("c", [[-1.58, -0.3, 1.41]], rg=False),
        O("expand_as", "c", "p_1", out="e"), O("expand_as", "p_1", "c", out="f")],
    "as_strided_backward_under_create_graph_is_as_strided": [
        O("eye", 3, out="e", dtype="float64"), O("reshape", "e", -1, out="r"), T("w", -1.89), O("mul_", "r", "w"),
        T("g", [-0.93, 1.37, -0.14, -1.98, 0.6, -1.35, 1.47, 0.85, -1.91], dtype="float64"),
        O("grad", ["r"], ["r", "e"], out="d", grad_outputs="g", create_graph=True, materialize_grads=True),
        O("sum", "d_1", out="s"), O("backward", "s")],
    "version_error_names_the_output_number_saved": [
        T("a", [[-0.383, 0.495, -0.009, -0.74], [0.76, -0.135, -0.627, 0.868], [-0.253, 0.635, 0.366, -0.877]]),
        O("linalg.svdvals", "a", out="s"), O("sub_", "s", -0.54), T("g", [-0.76, -0.39, -1.05]),
        O("grad", ["s"], ["a"], out="d", grad_outputs="g")],
    "topk_ties_nans_and_unsorted_order_as_torchs_kernel": [
        T("x", [[0.1, 0.1, 0.1, 0.1], [0.681, 0.1, -0.548, 0.1], [0.1, 0.1, -0.693, 0.087]]),
        O("topk", "x", 2, 1, out="t", sorted=False), O("topk", "x", 3, 0, out="u", largest=False),
        T("y", [-1.0, 0.25, -4.0, 1.0, 0.25, 4.0, -2.0]), O("sqrt", "y", out="r"), O("topk", "r", 4, out="v"),
        O("topk", "r", 5, out="w", sorted=False, largest=False), O("sum", "w_0", out="s"), O("backward", "s")],
    "roll_of_an_expanded_tensor_is_contiguous": [
        T("x", [-0.5, -0.006, 0.507]), O("expand", "x", 2, 3, out="e"), O("roll", "e", [1, -1], [0, 1], out="r"),
        O("reshape", "r", -1, out="f"), T("y", [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]), O("t", "y", out="yt"),
        O("roll", "yt", 1, 1, out="q"), O("reshape", "q", -1, out="g")],
}


def record() -> None:
    from .run import outcomes
    data = [{"name": n, "program": p, "expected": outcomes(p)} for n, p in PROGRAMS.items()]
    FILE.write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    record()
