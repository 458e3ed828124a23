"""Hostile and malformed op lists: each gets a clear 4xx problem, the session is left exactly as it was, and
the server stays healthy. One row per case: (id, raw body or op list, status, code)."""

from __future__ import annotations

import json

import pytest

from .conftest import assert_problem, ok, run, tensor

DEEP = '{"ops": [{"op": "tensor", "args": [' + "[" * 900 + "1.0" + "]" * 900 + "]}]}"
DEEP_DATA = '{"ops": [{"op": "tensor", "args": [' + "[" * 70 + "1.0" + "]" * 70 + "]}]}"

CASES = [
    ("malformed_json", '{"ops": [', 422, "invalid_json"),
    ("truncated_json", '{"ops": [{"op": "tensor", "args": [1.0', 422, "invalid_json"),
    ("deeply_nested_arguments", DEEP, 422, None),
    ("data_with_70_dimensions", DEEP_DATA, 422, "too_deep"),
    ("ragged_list", [{"op": "tensor", "args": [[[1.0], [2.0, 3.0]]]}], 422, "ragged_tensor_data"),
    ("negative_shape", [{"op": "zeros", "args": [-1]}], 422, "invalid_shape"),
    ("huge_shape", [{"op": "zeros", "args": [10**10, 10**10]}], 422, "limit_exceeded"),
    ("overflowing_shape_product", [{"op": "zeros", "args": [2**62, 4]}], 422, "limit_exceeded"),
    ("expand_beyond_limit", [{"op": "repeat", "args": ["x", 10**6, 10**6]}], 422, "limit_exceeded"),
    ("arange_beyond_limit", [{"op": "arange", "args": [0, 10**12]}], 422, "limit_exceeded"),
    ("unknown_op", [{"op": "no_such_op", "args": ["x"]}], 422, "unknown_op"),
    ("unknown_dtype", [{"op": "tensor", "args": [[1, 2]], "kwargs": {"dtype": "float16"}}], 422, "unknown_dtype"),
    ("unknown_tensor", [{"op": "exp", "args": ["nope"]}], 404, "unknown_tensor"),
    ("index_out_of_range", [{"op": "getitem", "args": ["x", [[0, 5]]]}], 422, "index_out_of_range"),
    ("dim_out_of_range", [{"op": "sum", "args": ["x", 3]}], 422, "dim_out_of_range"),
    ("wrong_type_for_dim", [{"op": "sum", "args": ["x", "x"]}], 422, "invalid_argument"),
    ("dict_as_operand", [{"op": "mul", "args": ["x", {"a": 1}]}], 422, "invalid_argument"),
    ("null_as_operand", [{"op": "mul", "args": ["x", None]}], 422, "invalid_argument"),
    ("unexpected_keyword", [{"op": "add", "args": ["x", 1], "kwargs": {"bogus": 1}}], 422, "invalid_argument"),
    ("name_shadowing_grad", [{"op": "exp", "args": ["x"], "out": "x.grad"}], 422, None),
    ("empty_name", [{"op": "exp", "args": ["x"], "out": ""}], 422, None),
    ("enormous_name", [{"op": "exp", "args": ["x"], "out": "n" * 10_000}], 422, None),
    ("infinity_literal", '{"ops": [{"op": "tensor", "args": [1e400]}]}', 422, "invalid_json"),
    ("gradient_as_list", [{"op": "mul", "out": "y", "args": ["x", 2]},
                          {"op": "backward", "args": ["y"], "kwargs": {"gradient": [1.0, 1.0]}}], 422,
     "invalid_gradient"),
    ("second_backward_through_freed_graph", [{"op": "pow", "out": "q", "args": ["x", 2]},
                                             {"op": "sum", "out": "s", "args": ["q"]},
                                             {"op": "backward", "args": ["s"]},
                                             {"op": "backward", "args": ["s"]}], 409, "graph_freed"),
    ("inplace_on_leaf", [{"op": "add_", "args": ["x", 1]}], 409, "leaf_inplace"),
    ("ops_not_a_list", '{"ops": {"op": "exp"}}', 422, None),
    ("op_not_an_object", '{"ops": ["exp"]}', 422, None),
]


@pytest.mark.parametrize("case_id,body,status,code", CASES, ids=[c[0] for c in CASES])
def test_hostile_request_is_a_clear_problem_and_changes_nothing(client, session, case_id, body, status, code):
    ok(run(client, session, [tensor("x", [1.0, 2.0]), tensor("A", [[1.0, 2.0], [3.0, 4.0]])]))
    before = ok(client.get(f"/v1/sessions/{session}/tensors"))
    raw = body if isinstance(body, str) else json.dumps({"ops": body})
    response = client.post(f"/v1/sessions/{session}/ops", content=raw, headers={"content-type": "application/json"})
    assert_problem(response, status, code)
    assert ok(client.get(f"/v1/sessions/{session}/tensors")) == before
    assert client.get("/healthz").status_code == 200
