# ruff: noqa: E501  (a table of code strings: one case per entry reads better than wrapped strings)
"""Op-level conformance cases with torch 2.13: each is torch code that binds ``r`` (or raises), and
optionally the same call as a JSON program (the API's form) that binds ``r`` (or names its result with
``result``, e.g. ``x.grad``).

The outcome torch gave for each case is recorded in ``tests/fixtures/conformance_ops.json`` (values, dtype,
shape, grad_fn name; or exception type and message), so the engine is checked without torch;
``test_conformance_ops.py`` also recomputes every record with real torch when it is installed. Re-record
after adding a case with ``python -m tests.engine.test_conformance_ops --record`` (needs torch).
"""

from __future__ import annotations

T = {"op": "tensor", "out": "x", "args": [[1.0, 2.0]], "kwargs": {"requires_grad": True}}
P = {"op": "tensor", "out": "p", "args": [[1.0, 2.0]], "kwargs": {"requires_grad": True}}
X = "x = torch.tensor([1.0, 2.0], requires_grad=True)\n"

CASES: dict[str, dict] = {
    # ----- argument parsing: torch's positional messages, function vs method form --------------------------
    "sub_none_method": {"code": "p = torch.tensor([1.0, 2.0], requires_grad=True)\nr = p.sub_(p.grad)",
                        "program": [P, {"op": "sub_", "args": ["p", "p.grad"]}]},
    "sub_none_function": {"code": X + "r = torch.sub(x, None)", "program": [T, {"op": "sub", "args": ["x", None]}]},
    "sub_none_input": {"code": X + "r = torch.sub(None, x)", "program": [T, {"op": "sub", "args": [None, "x"]}]},
    "sub_none_keyword": {"code": X + "r = torch.sub(x, other=None)",
                         "program": [T, {"op": "sub", "args": ["x"], "kwargs": {"other": None}}]},
    "sub_method_none": {"code": X + "r = x.sub(None)"},
    "add_inplace_none": {"code": "x = torch.zeros(2)\nr = x.add_(None)",
                         "program": [{"op": "zeros", "out": "x", "args": [2]}, {"op": "add_", "args": ["x", None]}]},
    "mul_list": {"code": X + "r = torch.mul(x, [1, 2])", "program": [T, {"op": "mul", "args": ["x", [1, 2]]}]},
    "add_number_first": {"code": X + "r = torch.add(2, x)", "program": [T, {"op": "add", "out": "r", "args": [2, "x"]}]},
    "logical_and_number": {"code": X + "r = torch.logical_and(x, 0.05)",
                           "program": [T, {"op": "logical_and", "args": ["x", 0.05]}]},
    "logical_and_number_method": {"code": X + "r = x.logical_and(0.05)"},
    "maximum_number": {"code": X + "r = torch.maximum(x, 2.0)",
                       "program": [T, {"op": "maximum", "args": ["x", 2.0]}]},
    "matmul_none_method": {"code": X + "r = x.matmul(None)"},
    "expand_as_none": {"code": X + "r = x.expand_as(None)"},
    "gather_none": {"code": X + "r = x.gather(0, None)"},
    "linear_bias_number": {"code": X + "r = F.linear(x, torch.ones(2, 2), 1.0)",
                           "program": [T, {"op": "ones", "out": "w", "args": [2, 2]},
                                       {"op": "linear", "args": ["x", "w", 1.0]}]},
    "zeros_missing_size": {"code": "r = torch.zeros()", "program": [{"op": "zeros", "out": "r"}]},
    "ones_missing_size": {"code": "r = torch.ones()"},
    "exp_missing_input": {"code": "r = torch.exp()", "program": [{"op": "exp", "out": "r"}]},
    "view_missing_size": {"code": X + "r = x.view()", "program": [T, {"op": "view", "out": "r", "args": ["x"]}]},
    "reshape_missing_shape": {"code": X + "r = x.reshape()"},
    "exp_extra_positional": {"code": X + "r = torch.exp(x, x)", "program": [T, {"op": "exp", "args": ["x", "x"]}]},
    "sub_extra_positional": {"code": X + "r = torch.sub(x, x, 2, 3)"},
    "sub_unknown_keyword": {"code": X + "r = torch.sub(x, x, foo=1)",
                            "program": [T, {"op": "sub", "args": ["x", "x"], "kwargs": {"foo": 1}}]},
    "eq_none_function": {"code": X + "r = torch.eq(x, None)", "program": [T, {"op": "eq", "args": ["x", None]}]},
    "eq_none_method": {"code": X + "r = x.eq(None)"},
    "where_none": {"code": X + "r = torch.where(x > 0, x, None)",
                   "program": [T, {"op": "gt", "out": "c", "args": ["x", 0]}, {"op": "where", "args": ["c", "x", None]}]},
    "masked_fill_none_mask": {"code": X + "r = x.masked_fill(None, 1.0)"},
    "masked_fill_str_value": {"code": X + "r = x.masked_fill(x > 0, 'a')"},
    "pow_none_method": {"code": X + "r = x.pow(None)"},
    "clamp_strings": {"code": X + "r = x.clamp('a', 'b')"},
    "max_none_method": {"code": X + "r = x.max(None)"},
    "sum_float_dim": {"code": X + "r = x.sum(1.5)"},
    "unsqueeze_float_dim": {"code": X + "r = torch.unsqueeze(x, 1.5)",
                            "program": [T, {"op": "unsqueeze", "args": ["x", 1.5]}]},
    "unsqueeze_inf_dim": {"code": X + "r = x.unsqueeze(float('inf'))"},
    "amax_keepdim_int": {"code": X + "r = x.amax(0, keepdim=1)"},
    "transpose_float_dim": {"code": "x = torch.ones(2, 2)\nr = x.transpose(0, 1.0)"},
    # found by the sweep (tests/engine/conformance_sweep.py)
    "mse_loss_none_target": {"code": X + "r = F.mse_loss(x, None)",
                             "program": [T, {"op": "mse_loss", "args": ["x", None]}]},
    "softmax_none_input": {"code": "r = F.softmax(None, 0)"},
    "mean_none_input": {"code": "r = torch.mean(None, 0)"},
    "var_none_input": {"code": "r = torch.var(None)"},
    "nll_loss_none_input": {"code": "r = F.nll_loss(None, torch.tensor([0]))"},
    "ones_like_none": {"code": "r = torch.ones_like(None)"},
    "narrow_start_before_length": {"code": "r = torch.ones(0).narrow(0, 1, 3)"},
    "narrow_exceeds": {"code": "r = torch.ones(5).narrow(0, 3, 3)"},
    "select_out_of_range": {"code": "r = torch.ones(3).select(0, 5)"},
    "gather_index_larger": {"code": "r = torch.ones(0, 3).gather(1, torch.zeros(2, 2, dtype=torch.int64))"},
    "amax_empty": {"code": "r = torch.ones(0).amax()"},
    "amax_empty_dim": {"code": "r = torch.ones(2, 0).amax(1)"},
    "argmax_empty": {"code": "r = torch.ones(0).argmax()"},
    "rsub_broadcast_order": {"code": "r = torch.rsub(torch.ones(2, 3), torch.ones(0))"},
    "round_decimals_int": {"code": "r = torch.tensor([1, 2]).round(decimals=1)"},
    "bmm_bool_before_dtype": {"code": "r = torch.bmm(torch.ones(2, 2, 3, dtype=torch.bool), torch.ones(2, 3, 2))"},
    "masked_fill_inplace_broadcast_order": {"code": "r = torch.ones(0).masked_fill_(torch.ones(3, dtype=torch.bool), 1.0)"},
    "add_two_numbers": {"code": "r = torch.add(2.5, 1.5)", "program": [{"op": "add", "out": "r", "args": [2.5, 1.5]}]},
    "sub_number_first": {"code": X + "y = torch.sub(1.5, x)\ny.sum().backward()\nr = [y, x.grad]",
                         "program": [T, {"op": "sub", "out": "r", "args": [1.5, "x"]}]},
    "div_number_first": {"code": X + "r = torch.div(1.5, x)", "program": [T, {"op": "div", "out": "r", "args": [1.5, "x"]}]},
    "add_number_first_alpha": {"code": X + "r = torch.add(1.5, x, alpha=2)"},
    "chunk_empty": {"code": "r = torch.ones(0).chunk(2)"},
    "lerp_tensor_weight_inf": {"code": "inf = float('inf')\n"
                                       "r = torch.lerp(torch.tensor([1.0, 2.0]), torch.tensor([inf, 3.0]), torch.tensor([0.7, 0.2]))"},
    "var_dim_none_method": {"code": "r = torch.ones(3).var(None, unbiased=False)"},
    "var_keyword_incorrect": {"code": "r = torch.var(None, unbiased=False)"},
    "max_keyword_incorrect": {"code": "r = torch.max(None, 0, keepdim=True)"},
    "squeeze_list_description": {"code": "r = torch.squeeze(None, [0, 2])"},
    "where_list_description": {"code": "r = torch.where(torch.tensor([True]), [1, 2], torch.ones(1))"},
    "clamp_inplace_int_number": {"code": "r = torch.ones(2, dtype=torch.int64).clamp_(0.5)"},
    "cross_entropy_int_input": {"code": "r = F.cross_entropy(torch.ones(2, 3, dtype=torch.int64), torch.tensor([0, 1]))"},
    "linear_0d_input": {"code": "r = F.linear(torch.tensor(1.0), torch.ones(2, 3))"},
    "bce_target_dtype": {"code": "r = F.binary_cross_entropy(torch.ones(3) * 0.5, torch.ones(3, dtype=torch.int64))"},
    "var_keywords_reversed": {"code": "r = torch.var(None, dim=0, keepdim=True, correction=0)"},
    "bce_logits_int_input": {"code": "r = F.binary_cross_entropy_with_logits(torch.ones(2, dtype=torch.int64), torch.ones(2))"},
    "flatten_0d_dim": {"code": "r = torch.tensor(1.0).flatten(1)"},
    "sum_none_keepdim": {"code": "x = torch.ones(2, 3, requires_grad=True)\ny = x.sum(None, True)\ny.sum().backward()\nr = [y, x.grad]"},
    "mean_none_keepdim": {"code": "r = torch.ones(2, 3).mean(dim=None, keepdim=True)"},
    "view_none": {"code": "r = torch.ones(2).view(None)"},
    "masked_fill_value_grad": {"code": X + "v = torch.tensor(2.0, requires_grad=True)\n"
                                           "y = x.masked_fill(torch.tensor([True, False]), v)\ny.sum().backward()\nr = [y, v.grad, x.grad]"},
    "masked_fill_value_broadcast_grad": {"code": "v = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)\n"
                                                 "y = torch.ones(2).masked_fill(torch.ones(3, 2, dtype=torch.bool), v)\n"
                                                 "(y * 3).sum().backward()\nr = [y, v.grad]"},
    # ----- floor_divide has no derivative ------------------------------------------------------------------
    "floor_divide_grad_fn": {"code": X + "y = torch.floor_divide(x, 0.3)\nr = [y, y.grad_fn.name()]"},
    "floor_divide_backward": {"code": X + "y = x // 0.3\ny.sum().backward()\nr = x.grad",
                              "program": [T, {"op": "floor_divide", "out": "y", "args": ["x", 0.3]},
                                          {"op": "sum", "out": "s", "args": ["y"]}, {"op": "backward", "args": ["s"]}]},
    "floor_divide_grad": {"code": X + "y = torch.floor_divide(x, x)\nr = torch.autograd.grad(y.sum(), [x])"},
    # ----- values at the edges -----------------------------------------------------------------------------
    "sign_nan": {"code": "r = torch.sign(torch.tensor([float('nan'), 1.0, -0.0, -2.0]))"},
    "abs_backward_nan": {"code": "x = torch.tensor([float('nan'), 1.0, -1.0], requires_grad=True)\n"
                                 "x.abs().sum().backward()\nr = x.grad"},
    "pow_minus_half": {"code": "r = torch.pow(torch.tensor([-0.0, -float('inf'), 0.0, 4.0, float('inf')]), -0.5)"},
    "pow_minus_half_f64": {"code": "r = torch.tensor([-0.0, -float('inf'), 2.0], dtype=torch.float64) ** -0.5"},
    "div_floor_scalar": {"code": "r = torch.tensor([-1.62, 1.62]).div(0.02, rounding_mode='floor')",
                         "program": [{"op": "tensor", "out": "a", "args": [[-1.62, 1.62]]},
                                     {"op": "div", "out": "r", "args": ["a", 0.02],
                                      "kwargs": {"rounding_mode": "floor"}}]},
    "floordiv_operator": {"code": "r = torch.tensor([-1.62]) // 0.02"},
    "div_floor_edges": {"code": "a = torch.tensor([1.62, -1.62, 5.0, -5.0, 0.0, -0.0, 7.5, float('inf'), float('nan')])\n"
                                "b = torch.tensor([0.02, 0.02, -0.0, 0.0, -2.0, 3.0, 2.5, 2.0, 1.0])\n"
                                "r = a.div(b, rounding_mode='floor')"},
    "div_floor_f64": {"code": "r = torch.tensor([-1.62, 0.3], dtype=torch.float64).div(0.1, rounding_mode='floor')"},
    "std_correction_ge_n": {"code": "r = torch.tensor([1.0, 2.0]).std(correction=2)"},
    "var_correction_gt_n": {"code": "r = torch.tensor([1.0, 2.0]).var(correction=3)"},
    "std_single": {"code": "r = torch.tensor([1.0]).std()"},
    "var_correction_backward": {"code": X + "x.var(correction=2).backward()\nr = x.grad",
                                "program": [T, {"op": "var", "out": "v", "args": ["x"], "kwargs": {"correction": 2}},
                                            {"op": "backward", "args": ["v"]}], "result": "x.grad"},
    "std_single_backward": {"code": "x = torch.tensor([1.0], requires_grad=True)\nx.std().backward()\nr = x.grad"},
    "var_dim_correction_backward": {"code": "x = torch.tensor([[1.0, 2.0]], requires_grad=True)\n"
                                            "x.var(1, correction=2).sum().backward()\nr = x.grad"},
    "std_dim_single_backward": {"code": "x = torch.tensor([[1.0, 2.0]], requires_grad=True)\n"
                                        "x.std(0).sum().backward()\nr = x.grad"},
    "lerp_infinite_ends": {"code": "inf = float('inf')\n"
                                   "r = torch.lerp(torch.tensor([inf, 1.0, -inf]), torch.tensor([1.0, inf, inf]), 0.3)"},
    "lerp_infinite_ends_high": {"code": "inf = float('inf')\n"
                                        "r = torch.lerp(torch.tensor([inf, 1.0, -inf]), torch.tensor([1.0, inf, inf]), 0.7)"},
    "sort_descending_nan": {"code": "nan = float('nan')\n"
                                    "r = torch.sort(torch.tensor([1.0, nan, 3.0, -1.0, nan]), descending=True)"},
    "sort_descending_nan_dim0": {"code": "r = torch.sort(torch.tensor([[1.0, float('nan')], [3.0, -1.0]]), dim=0, "
                                         "descending=True)"},
    "cross_entropy_nan_ignored_row": {"code": "x = torch.tensor([[1.0, float('nan')], [0.5, 0.2]], requires_grad=True)\n"
                                              "l = F.cross_entropy(x, torch.tensor([-100, 1]))\nl.backward()\n"
                                              "r = [l, x.grad]"},
    "cross_entropy_all_ignored": {"code": "x = torch.tensor([[1.0, 2.0], [0.5, 0.2]], requires_grad=True)\n"
                                          "l = F.cross_entropy(x, torch.tensor([-100, -100]))\nl.backward()\n"
                                          "r = [l, x.grad]"},
    "nll_loss_nan_ignored_row": {"code": "x = torch.tensor([[1.0, float('nan')], [0.5, 0.2]], requires_grad=True)\n"
                                         "l = F.nll_loss(x, torch.tensor([-100, 1]))\nl.backward()\nr = [l, x.grad]"},
    "nll_loss_all_ignored": {"code": "x = torch.tensor([[1.0, 2.0], [0.5, 0.2]], requires_grad=True)\n"
                                     "l = F.nll_loss(x, torch.tensor([-100, -100]))\nl.backward()\nr = [l, x.grad]"},
    "nll_loss_all_ignored_sum": {"code": "x = torch.tensor([[1.0, 2.0], [0.5, 0.2]], requires_grad=True)\n"
                                         "l = F.nll_loss(x, torch.tensor([0, 0]), ignore_index=0, reduction='sum')\n"
                                         "l.backward()\nr = [l, x.grad]"},
    "nll_loss_none_nan_ignored": {"code": "x = torch.tensor([[1.0, float('nan')], [0.5, 0.2]], requires_grad=True)\n"
                                          "l = F.nll_loss(x, torch.tensor([-100, 1]), reduction='none')\n"
                                          "l.sum().backward()\nr = [l, x.grad]"},
    # ----- 0-d and empty inputs ------------------------------------------------------------------------------
    "chunk_0d": {"code": "r = torch.tensor(1.0).chunk(2)",
                 "program": [{"op": "tensor", "out": "s", "args": [1.0]}, {"op": "chunk", "args": ["s", 2]}]},
    "split_0d": {"code": "r = torch.tensor(1.0).split(1)"},
    "narrow_0d": {"code": "r = torch.tensor(1.0).narrow(0, 0, 1)"},
    "unbind_0d": {"code": "r = torch.tensor(1.0).unbind()"},
    "unbind_0d_dim1": {"code": "r = torch.tensor(1.0).unbind(1)"},
    "gather_0d": {"code": "r = torch.tensor(1.0).gather(0, torch.tensor(0))"},
    "gather_0d_backward": {"code": "x = torch.tensor(2.0, requires_grad=True)\n"
                                   "y = x.gather(0, torch.tensor([0, 0]))\ny.sum().backward()\nr = [y, x.grad]"},
    "gather_0d_index": {"code": "x = torch.tensor([2.0, 3.0], requires_grad=True)\n"
                                "y = x.gather(0, torch.tensor(1))\ny.backward()\nr = [y, x.grad]"},
    "gather_0d_out_of_range": {"code": "r = torch.tensor(1.0).gather(0, torch.tensor(1))"},
    "var_0d_dim_keepdim": {"code": "r = torch.tensor(1.0).var(dim=0, keepdim=True)"},
    "std_0d_dim": {"code": "r = torch.tensor(1.0).std(dim=0)"},
    "std_0d_dim_backward": {"code": "x = torch.tensor(1.0, requires_grad=True)\ny = x.std(dim=0)\ny.backward()\n"
                                    "r = [y, x.grad]"},
    "var_empty": {"code": "r = torch.ones(0).var()"},
    "var_empty_dim": {"code": "r = torch.ones(2, 0).var(1)"},
    "index_select_0d": {"code": "x = torch.tensor(2.0, requires_grad=True)\n"
                                "y = x.index_select(0, torch.tensor([0]))\ny.sum().backward()\nr = [y, x.grad]"},
    "index_select_0d_two": {"code": "r = torch.tensor(1.0).index_select(0, torch.tensor([0, 0]))"},
    # ----- dtypes torch refuses ------------------------------------------------------------------------------
    "sub_bool_scalar": {"code": "r = torch.sub(torch.tensor([1.0]), True)",
                        "program": [{"op": "tensor", "out": "a", "args": [[1.0]]}, {"op": "sub", "args": ["a", True]}]},
    "sub_bool_tensor_number": {"code": "r = torch.tensor([True]) - 1"},
    "sub_two_bools": {"code": "r = torch.tensor([True]) - torch.tensor([True])"},
    "rsub_bool": {"code": "r = 1 - torch.tensor([True])"},
    "silu_int": {"code": "r = F.silu(torch.tensor([1, 2]))",
                 "program": [{"op": "tensor", "out": "i", "args": [[1, 2]]}, {"op": "silu", "args": ["i"]}]},
    "silu_bool": {"code": "r = F.silu(torch.tensor([True, False]))"},
    "elu_int": {"code": "r = F.elu(torch.tensor([1, 2]))"},
    "softplus_int": {"code": "r = F.softplus(torch.tensor([1, 2]))"},
    "leaky_relu_int": {"code": "r = F.leaky_relu(torch.tensor([1, 2]))"},
    "gelu_int": {"code": "r = F.gelu(torch.tensor([1, 2]))"},
    "logsigmoid_int": {"code": "r = F.logsigmoid(torch.tensor([1, 2]))"},
    "hardtanh_bool": {"code": "r = F.hardtanh(torch.tensor([True]))"},
    "hardtanh_int": {"code": "r = F.hardtanh(torch.tensor([-3, 0, 2]), -0.5, 1.5)"},
    "argmax_bool": {"code": "r = torch.argmax(torch.tensor([True, False]))",
                    "program": [{"op": "tensor", "out": "b", "args": [[True, False]]}, {"op": "argmax", "args": ["b"]}]},
    "argmin_bool": {"code": "r = torch.argmin(torch.tensor([True, False]))"},
    "lerp_mixed_end": {"code": "r = torch.lerp(torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64), 0.5)"},
    "lerp_mixed_weight": {"code": "r = torch.lerp(torch.tensor([1.0]), torch.tensor([2.0]), "
                                  "torch.tensor([0.5], dtype=torch.float64))"},
    "lerp_0d_double_weight": {"code": "r = torch.lerp(torch.tensor([1.0]), torch.tensor([2.0]), "
                                      "torch.tensor(0.5, dtype=torch.float64))"},
    "lerp_int_end": {"code": "r = torch.lerp(torch.tensor([1.0]), torch.tensor([2]), 0.5)"},
    "lerp_int": {"code": "r = torch.lerp(torch.tensor([1]), torch.tensor([2]), 0.5)"},
    "dot_dtype_before_size": {"code": "r = torch.dot(torch.ones(2), torch.ones(3, dtype=torch.float64))"},
    "matmul_1d_dtype_before_size": {"code": "r = torch.matmul(torch.ones(2), torch.ones(3, dtype=torch.int64))"},
    "mm_dtype_names": {"code": "r = torch.mm(torch.ones(2, 3), torch.ones(3, 3, dtype=torch.int64))"},
    "mv_dtype": {"code": "r = torch.mv(torch.ones(2, 3), torch.ones(3, dtype=torch.float64))"},
    "bmm_dtype": {"code": "r = torch.bmm(torch.ones(2, 2, 3), torch.ones(2, 3, 2, dtype=torch.float64))"},
    "addmm_dtype_before_shape": {"code": "r = torch.addmm(torch.ones(2, 2), torch.ones(2, 3), "
                                         "torch.ones(2, 3, dtype=torch.float64))"},
    "addmm_mat1_dtype": {"code": "r = torch.addmm(torch.ones(2, 2), torch.ones(2, 3, dtype=torch.float64), "
                                 "torch.ones(3, 3))"},
    "addmm_self_dtype_before_expand": {"code": "r = torch.addmm(torch.ones(2, 2, dtype=torch.int64), torch.ones(2, 3), "
                                               "torch.ones(3, 3))"},
    "linear_bias_dtype_before_shape": {"code": "r = F.linear(torch.ones(2, 2), torch.ones(3, 3), "
                                               "torch.ones(2, dtype=torch.float64))"},
    # ----- what torch accepts -------------------------------------------------------------------------------
    "masked_fill_broadcasts_self": {"code": X + "y = x.masked_fill(torch.ones(2, 2, dtype=torch.bool), 3.0)\n"
                                                "y.sum().backward()\nr = [y, x.grad]"},
    "masked_fill_inplace_refuses_broadcast": {"code": "r = torch.tensor([1.0, 2]).masked_fill_("
                                                      "torch.ones(2, 2, dtype=torch.bool), 3.0)"},
    "masked_fill_bool_float_value": {"code": "r = torch.tensor([True, False]).masked_fill(torch.tensor([True, False]), 0.5)",
                                     "program": [{"op": "tensor", "out": "b", "args": [[True, False]]},
                                                 {"op": "masked_fill", "out": "r", "args": ["b", "b", 0.5]}]},
    "masked_fill_int_float_value": {"code": "r = torch.tensor([1, 2]).masked_fill(torch.tensor([True, False]), -2.7)"},
    "masked_fill_int_nan": {"code": "r = torch.tensor([1, 2]).masked_fill(torch.tensor([True, False]), float('nan'))"},
    "masked_fill_float_overflow": {"code": "r = torch.ones(2).masked_fill(torch.tensor([True, False]), 1e300)"},
    "masked_fill_mask_order": {"code": "r = torch.tensor([1.0, 2]).masked_fill(torch.tensor([True, False, True]), 3.0)"},
    "where_two_numbers": {"code": "r = torch.where(torch.tensor([True, False]), 1, 2.5)"},
    # ----- numbers that cannot be represented (issue 10, item 4) -------------------------------------------
    "tensor_int64_overflow": {"code": "r = torch.tensor([2**63])",
                              "program": [{"op": "tensor", "out": "r", "args": [[9223372036854775808]]}]},
    "tensor_int64_underflow": {"code": "r = torch.tensor([-2**63 - 1])"},
    "tensor_huge_int": {"code": "r = torch.tensor(2**70)"},
    "tensor_nested_overflow": {"code": "r = torch.tensor([[1], [2**63]])"},
    "tensor_int64_limits": {"code": "r = torch.tensor([2**63 - 1, -2**63])"},
    "tensor_big_int_with_float": {"code": "r = torch.tensor([2**64, 1.5])"},
    "tensor_big_int_float_dtype": {"code": "r = torch.tensor([2**63], dtype=torch.float32)"},
    "tensor_float_into_int64_overflow": {"code": "r = torch.tensor([1e20], dtype=torch.int64)"},
    "tensor_nan_into_int64": {"code": "r = torch.tensor([float('nan')], dtype=torch.int64)",
                              "program": [{"op": "tensor", "out": "r", "args": [["NaN"]], "kwargs": {"dtype": "int64"}}]},
    "full_int64_overflow": {"code": "r = torch.full((2,), 2**63)"},
    "fill_int64_overflow": {"code": "r = torch.zeros(2, dtype=torch.int64).fill_(2**63)"},
    "dropout_nan": {"code": "r = F.dropout(torch.ones(2), p=float('nan'))",
                    "program": [{"op": "ones", "out": "o", "args": [2]},
                                {"op": "dropout", "args": ["o"], "kwargs": {"p": float("nan")}}]},
    "dropout_inf": {"code": "r = F.dropout(torch.ones(2), p=float('inf'))"},
    "dropout_nan_eval": {"code": "r = F.dropout(torch.ones(2), float('nan'), training=False)"},
    "add_alpha_nan": {"code": "r = torch.ones(2).add(torch.ones(2), alpha=float('nan'))"},
}
