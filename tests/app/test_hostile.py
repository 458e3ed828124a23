"""Hostile and malformed requests: each gets a clear 4xx problem, the session is left exactly as it was, and
the server stays healthy. One row per case: (id, raw body or op list, status, code). Then every limit, at
exactly its value (accepted) and just over it (refused)."""

from __future__ import annotations

import base64
import json

import pytest

from .conftest import assert_problem, make_client, ok, run, tensor

DEEP = '{"ops": [{"op": "tensor", "args": [' + "[" * 900 + "1.0" + "]" * 900 + "]}]}"
DEEP_DATA = '{"ops": [{"op": "tensor", "args": [' + "[" * 70 + "1.0" + "]" * 70 + "]}]}"
DEEPER = '{"ops": [{"op": "tensor", "args": [' + "[" * 10_000 + "1.0" + "]" * 10_000 + "]}]}"
DEEP_KWARGS = '{"ops": [{"op": "tensor", "args": [1.0], "kwargs": {"a": ' + "[" * 5000 + "]" * 5000 + "}}]}"
DEEP_OBJECTS = '{"ops": [{"op": "tensor", "args": [' + '{"a": ' * 3000 + "1" + "}" * 3000 + "]}]}"


def b64(dtype: str, shape: list, raw: bytes) -> dict:
    return {"dtype": dtype, "shape": shape, "encoding": "base64", "data": base64.b64encode(raw).decode()}

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
    ("unknown_dtype", [{"op": "tensor", "args": [[1, 2]], "kwargs": {"dtype": "float8_e4m3fn"}}], 422, "unknown_dtype"),
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
    # malformed and truncated JSON, wrong types everywhere
    ("empty_body", "", 422, "invalid_json"),
    ("not_utf8", b"\xff\xfe{", 422, "invalid_json"),
    ("truncated_string", '{"ops": [{"op": "ten', 422, "invalid_json"),
    ("trailing_garbage", '{"ops": []} x', 422, "invalid_json"),
    ("top_level_list", "[1, 2]", 422, "validation_error"),
    ("top_level_null", "null", 422, "validation_error"),
    ("ops_null", '{"ops": null}', 422, "validation_error"),
    ("ops_missing", '{"no_grad": true}', 422, "validation_error"),
    ("unknown_top_level_key", '{"ops": [], "bogus": 1}', 422, "validation_error"),
    ("op_name_not_a_string", [{"op": 5}], 422, "validation_error"),
    ("op_name_missing", [{"args": ["x"]}], 422, "validation_error"),
    ("args_not_a_list", [{"op": "exp", "args": "x"}], 422, "validation_error"),
    ("kwargs_not_an_object", [{"op": "exp", "args": ["x"], "kwargs": [1]}], 422, "validation_error"),
    ("unknown_op_key", [{"op": "exp", "args": ["x"], "bogus": 1}], 422, "validation_error"),
    ("repeat_fractional", '{"ops": [], "repeat": 1.5}', 422, "validation_error"),
    ("repeat_zero", '{"ops": [], "repeat": 0}', 422, "validation_error"),
    ("repeat_negative", '{"ops": [], "repeat": -1}', 422, "validation_error"),
    # (a 31-digit integer is read exactly, not as orjson's float: over the limit of repeats)
    ("repeat_astronomical", '{"ops": [], "repeat": 1000000000000000000000000000000}', 422, "limit_exceeded"),
    ("record_empty_name", '{"ops": [], "record": [""]}', 422, "validation_error"),
    ("record_unknown_name", '{"ops": [], "record": ["nope"]}', 404, "unknown_tensor"),
    ("dtype_not_a_string", [{"op": "tensor", "args": [[1]], "kwargs": {"dtype": 5}}], 422, "unknown_dtype"),
    ("grad_inputs_not_tensors", [{"op": "grad", "args": ["x", 5]}], 422, "invalid_argument"),
    # deeply nested lists and objects: thousands of levels (orjson refuses more than 1024 as invalid_json,
    # the app more than 64 in arguments as too_deep; which one answers depends on orjson's version)
    ("data_nested_10000_levels", DEEPER, 422, None),
    ("kwargs_nested_5000_levels", DEEP_KWARGS, 422, None),
    ("objects_nested_3000_levels", DEEP_OBJECTS, 422, None),
    # ragged and mixed data
    ("ragged_in_depth", [{"op": "tensor", "args": [[[[1.0], [2.0]], [[3.0]]]]}], 422, "ragged_tensor_data"),
    ("string_in_data", [{"op": "tensor", "args": [[1.0, "a"]]}], 422, "invalid_tensor_data"),
    ("object_in_data", [{"op": "tensor", "args": [[1.0, {"a": 1}]]}], 422, "invalid_tensor_data"),
    # shapes: negative, huge, overflowing products, NaN and Infinity where sizes are expected
    ("negative_size_among_sizes", [{"op": "randn", "args": [-1, 2]}], 422, "invalid_shape"),
    ("reshape_to_negative", [{"op": "reshape", "args": ["x", [-5]]}], 422, "invalid_shape"),
    ("reshape_two_inferred", [{"op": "reshape", "args": ["x", [-1, -1]]}], 422, "invalid_shape"),
    ("view_overflowing_product", [{"op": "view", "args": ["x", [2**63 - 1, 2]]}], 422, "shape_mismatch"),
    ("eye_beyond_limit", [{"op": "eye", "args": [10**7]}], 422, "limit_exceeded"),
    ("linspace_beyond_limit", [{"op": "linspace", "args": [0, 1, 10**12]}], 422, "limit_exceeded"),
    ("expand_beyond_limit_by_shape", [{"op": "expand", "args": ["x", [10**9, 2]]}], 422, "limit_exceeded"),
    ("nan_as_size", [{"op": "zeros", "args": ["NaN"]}], 422, "invalid_shape"),
    ("infinity_as_size", [{"op": "zeros", "args": ["Infinity"]}], 422, "invalid_shape"),
    ("nan_among_sizes", [{"op": "zeros", "args": [[2, "NaN"]]}], 422, "invalid_shape"),
    ("fractional_size", [{"op": "zeros", "args": [2.5]}], 422, "invalid_shape"),
    ("nan_as_dim", [{"op": "sum", "args": ["x", "NaN"]}], 422, "invalid_argument"),
    ("astronomical_dim", [{"op": "sum", "args": ["x", 2**70]}], 422, "invalid_argument"),  # (torch: ValueError)
    ("nan_range_end", [{"op": "arange", "args": [0, "NaN"]}], 422, "invalid_argument"),
    ("infinite_range", [{"op": "arange", "args": [0, "Infinity"]}], 422, "invalid_argument"),
    ("nan_literal", '{"ops": [{"op": "mul", "args": ["x", NaN]}]}', 422, "invalid_json"),
    ("infinity_bare_literal", '{"ops": [{"op": "mul", "args": ["x", Infinity]}]}', 422, "invalid_json"),
    ("integer_beyond_double", '{"ops": [{"op": "mul", "args": ["x", 1' + "0" * 400 + ']}]}', 422, "invalid_json"),
    # base64 payloads whose length does not match their shape, and other bad payloads
    ("base64_too_short", [{"op": "tensor", "args": [b64("float32", [2], b"\0" * 4)]}], 422,
     "invalid_tensor_payload"),
    ("base64_too_long", [{"op": "tensor", "args": [b64("float32", [2], b"\0" * 12)]}], 422,
     "invalid_tensor_payload"),
    ("base64_not_base64", [{"op": "tensor", "args": [{**b64("float32", [1], b""), "data": "!!!!"}]}], 422,
     "invalid_tensor_payload"),
    ("base64_negative_shape", [{"op": "tensor", "args": [b64("float32", [-2], b"")]}], 422,
     "invalid_tensor_payload"),
    ("base64_nan_shape", [{"op": "tensor", "args": [b64("float32", ["NaN"], b"")]}], 422,
     "invalid_tensor_payload"),
    ("base64_overflowing_shape", [{"op": "tensor", "args": [b64("float32", [2**62, 4], b"")]}], 422,
     "limit_exceeded"),
    ("base64_unknown_dtype", [{"op": "tensor", "args": [b64("complex64", [1], b"\0" * 8)]}], 422,
     "invalid_tensor_payload"),
    ("base64_extra_key", [{"op": "tensor", "args": [{**b64("float32", [1], b"\0" * 4), "x": 1}]}], 422,
     "invalid_tensor_payload"),
    # names: shadowing .grad, empty, enormous, not identifiers, numbers
    ("out_list_shadowing_grad", [{"op": "exp", "args": ["x"], "out": ["x.grad"]}], 422, "validation_error"),
    ("grad_of_grad", [{"op": "exp", "args": ["x.grad.grad"]}], 404, "unknown_tensor"),
    ("out_65_characters", [{"op": "exp", "args": ["x"], "out": "n" * 65}], 422, "validation_error"),
    ("reference_of_100000_characters", [{"op": "exp", "args": ["n" * 100_000]}], 404, "unknown_tensor"),
    ("out_not_ascii", [{"op": "exp", "args": ["x"], "out": "ñ"}], 422, "validation_error"),
    ("out_is_a_number", [{"op": "exp", "args": ["x"], "out": "NaN"}], 422, "invalid_name"),
    ("out_empty_list", [{"op": "exp", "args": ["x"], "out": []}], 422, "invalid_name"),
]


@pytest.mark.parametrize("case_id,body,status,code", CASES, ids=[c[0] for c in CASES])
def test_hostile_request_is_a_clear_problem_and_changes_nothing(client, session, case_id, body, status, code):
    ok(run(client, session, [tensor("x", [1.0, 2.0]), tensor("A", [[1.0, 2.0], [3.0, 4.0]])]))
    before = ok(client.get(f"/v1/sessions/{session}/tensors"))
    raw = body if isinstance(body, str | bytes) else json.dumps({"ops": body})
    response = client.post(f"/v1/sessions/{session}/ops", content=raw, headers={"content-type": "application/json"})
    assert_problem(response, status, code)
    assert ok(client.get(f"/v1/sessions/{session}/tensors")) == before
    assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("path,body", [("/v1/sessions/{sid}/backward", b"\xff\xfe{"),
                                       ("/v1/sessions/{sid}/grad", b'{"outputs": '),
                                       ("/v1/sessions/{sid}/zero_grad", b'{"tensors": [1, 2'),
                                       ("/v1/eval", b'{"ops": [')])
def test_malformed_json_is_the_same_problem_on_every_route(client, session, path, body):
    response = client.post(path.format(sid=session), content=body, headers={"content-type": "application/json"})
    assert_problem(response, 422, "invalid_json")


def test_wrong_method_names_every_allowed_method(client, session):
    response = client.put("/v1/sessions")
    assert_problem(response, 405, "method_not_allowed")
    assert response.headers["allow"] == "GET, POST"
    assert client.patch(f"/v1/sessions/{session}").headers["allow"] == "DELETE, GET"


def test_cycles_of_rebinding_and_repeat_at_its_limit_run_and_stay_bounded(client, session):
    ok(run(client, session, [tensor("x", [1.0, 2.0])]))
    swap = [{"op": "clone", "args": ["x"], "out": "y"}, {"op": "clone", "args": ["y"], "out": "x"}]
    ok(run(client, session, swap, repeat=1000))
    ok(run(client, session, [{"op": "mul", "args": ["x", 1.0], "out": "x"}], repeat=1000))
    summary = ok(client.get(f"/v1/sessions/{session}"))
    assert set(summary["tensors"]) == {"x", "y"}
    before = ok(client.get(f"/v1/sessions/{session}/tensors"))
    assert_problem(run(client, session, swap, repeat=1001), 422, "limit_exceeded")
    assert ok(client.get(f"/v1/sessions/{session}/tensors")) == before


# ----- every limit, at exactly its value and just over -------------------------------------------------------

def _body_of_size(size: int) -> bytes:
    """A valid op list of exactly ``size`` bytes (padded with spaces inside the JSON)."""
    core = b'{"ops": [{"op": "tensor", "out": "p", "args": [1.0]}]'
    return core + b" " * (size - len(core) - 1) + b"}"


def _limit_cases():
    n = 4
    return [
        ("max_body_bytes", {"max_body_bytes": 100}, lambda c, s: _post(c, s, _body_of_size(100)),
         lambda c, s: _post(c, s, _body_of_size(101)), 413, "body_too_large"),
        ("max_ops_per_request", {"max_ops_per_request": n},
         lambda c, s: run(c, s, [tensor("a", 1.0)] * n), lambda c, s: run(c, s, [tensor("a", 1.0)] * (n + 1)),
         422, "limit_exceeded"),
        ("max_repeat", {"max_repeat": n}, lambda c, s: run(c, s, [tensor("a", 1.0)], repeat=n),
         lambda c, s: run(c, s, [tensor("a", 1.0)], repeat=n + 1), 422, "limit_exceeded"),
        ("max_op_executions", {"max_op_executions": 6},
         lambda c, s: run(c, s, [tensor("a", 1.0)] * 2, repeat=3),
         lambda c, s: run(c, s, [tensor("a", 1.0)] * 7), 422, "limit_exceeded"),
        ("max_elements_per_tensor_created", {"max_elements_per_tensor": 6},
         lambda c, s: run(c, s, [{"op": "zeros", "args": [2, 3], "out": "z"}]),
         lambda c, s: run(c, s, [{"op": "zeros", "args": [7], "out": "z"}]), 422, "limit_exceeded"),
        ("max_elements_per_tensor_sent_as_json", {"max_elements_per_tensor": 6},
         lambda c, s: run(c, s, [tensor("d", [1.0] * 6)]), lambda c, s: run(c, s, [tensor("d", [1.0] * 7)]),
         422, "limit_exceeded"),
        ("max_elements_per_tensor_sent_as_base64", {"max_elements_per_tensor": 6},
         lambda c, s: run(c, s, [tensor("d", b64("float32", [6], b"\0" * 24))]),
         lambda c, s: run(c, s, [tensor("d", b64("float32", [7], b"\0" * 28))]), 422, "limit_exceeded"),
        ("max_bytes_per_session", {"max_bytes_per_session": 64},
         lambda c, s: run(c, s, [tensor("d", [1.0] * 16, requires_grad=False)]),
         lambda c, s: run(c, s, [tensor("d", [1.0] * 17, requires_grad=False)]), 422, "limit_exceeded"),
        ("max_nodes_per_session", {"max_nodes_per_session": 3},
         lambda c, s: run(c, s, [tensor("w", 1.0), {"op": "exp", "args": ["w"], "out": "e"}]),
         lambda c, s: run(c, s, [tensor("w", 1.0), {"op": "exp", "args": ["w"], "out": "e"},
                                 {"op": "exp", "args": ["e"], "out": "f"}, {"op": "exp", "args": ["f"], "out": "g"}]),
         422, "limit_exceeded"),
        ("max_sessions", {"max_sessions": 2}, lambda c, s: c.post("/v1/sessions"),
         lambda c, s: c.post("/v1/sessions"), 429, "too_many_sessions"),
    ]


def _post(client, session, body: bytes):
    return client.post(f"/v1/sessions/{session}/ops", content=body, headers={"content-type": "application/json"})


@pytest.mark.parametrize("name,settings,at_limit,over_limit,status,code", _limit_cases(),
                         ids=[c[0] for c in _limit_cases()])
def test_every_limit_accepts_exactly_its_value_and_refuses_just_over(name, settings, at_limit, over_limit,
                                                                        status, code):
    with make_client(**settings) as client:
        session = client.post("/v1/sessions").json()["id"]
        accepted = at_limit(client, session)
        assert accepted.status_code in (200, 201), accepted.text
        before = ok(client.get(f"/v1/sessions/{session}/tensors"))
        refused = over_limit(client, session)
        body = assert_problem(refused, status, code)
        assert "GRADSERVE_" in body["detail"] or status == 422
        assert ok(client.get(f"/v1/sessions/{session}/tensors")) == before
        assert client.get("/healthz").status_code == 200


def test_out_names_of_64_characters_are_accepted(client, session):
    ok(run(client, session, [tensor("n" * 64, 1.0)]))
    ok(client.get(f"/v1/sessions/{session}/tensors/{'n' * 64}"))
