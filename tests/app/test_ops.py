"""Op lists in a session (POST /ops), one-shot eval (POST /v1/eval), tensor payloads and request limits."""

from __future__ import annotations

import base64

import numpy as np
import orjson

from tests.app.conftest import assert_problem, make_client, ok, run, tensor

LINEAR = [tensor("x", 2.0), tensor("w", 3.0), tensor("b", 1.0),
          {"op": "mul", "out": "wx", "args": ["w", "x"]}, {"op": "add", "out": "y", "args": ["wx", "b"]}]

JSON = {"content-type": "application/json"}


def b64(arr: np.ndarray) -> dict:
    return {"dtype": str(arr.dtype), "shape": list(arr.shape), "encoding": "base64",
            "data": base64.b64encode(arr.astype(arr.dtype.newbyteorder("<")).tobytes()).decode()}


def test_op_list_reports_bound_names_changed_tensors_and_gradients(client, session):
    body = ok(run(client, session, [*LINEAR, {"op": "backward", "args": ["y"]}]))
    assert [o["bound"] for o in body["ops"]] == [["x"], ["w"], ["b"], ["wx"], ["y"], []]
    assert [o["index"] for o in body["ops"]] == list(range(6))
    assert body["tensors"]["y"]["data"] == 7.0 and body["tensors"]["y"]["grad_fn"] == "AddBackward0"
    assert body["tensors"]["x"]["grad"] == 3.0
    (record,) = body["autograd"]
    assert record["op_index"] == 5 and record["op"] == "backward"
    entries = {e["name"]: e for e in record["entries"]}
    assert entries["w"] == {"name": "w", "contribution": 2.0, "grad": 2.0, "grad_accumulations": 1}
    assert body["warnings"] == [] and "records" not in body


def test_failing_op_list_changes_nothing(client, session):
    ok(run(client, session, [tensor("x", [1.0, 2.0]), {"op": "sum", "out": "s", "args": ["x"]},
                             {"op": "backward", "args": ["s"]}]))
    before = ok(client.get(f"/v1/sessions/{session}"))
    r = run(client, session, [{"op": "mul", "out": "z", "args": ["x", 2]}, {"op": "backward", "args": ["s"]},
                              {"op": "no_such_op", "args": []}])
    body = assert_problem(r, 422, "unknown_op")
    assert body["op_index"] == 2 and body["op"] == "no_such_op"
    after = ok(client.get(f"/v1/sessions/{session}"))
    assert after["tensors"] == before["tensors"] and after["backward_passes"] == before["backward_passes"]
    assert ok(client.get(f"/v1/sessions/{session}/tensors/x"))["grad"] == [1.0, 1.0]


def test_op_error_carries_torch_exception_message_and_position(client, session):
    r = run(client, session, [tensor("a", [1.0, 1.0, 1.0]), tensor("b", [1.0, 1.0]),
                              {"op": "add", "out": "c", "args": ["a", "b"]}])
    body = assert_problem(r, 422, detail="The size of tensor a (3) must match the size of tensor b (2) at "
                                         "non-singleton dimension 0")
    assert body["op_index"] == 2 and body["op"] == "add" and body["exception"] == "RuntimeError"


def test_unknown_tensor_in_op_list_is_404(client, session):
    body = assert_problem(run(client, session, [{"op": "mul", "out": "y", "args": ["ghost", 2]}]), 404,
                          "unknown_tensor")
    assert body["op_index"] == 0


def test_int_list_cannot_require_grad_as_torch(client, session):
    body = assert_problem(run(client, session, [tensor("x", [1, 2])]), 422,
                          detail="Only Tensors of floating point and complex dtype can require gradients")
    assert body["exception"] == "RuntimeError"


def test_malformed_json_is_422_invalid_json(client, session):
    r = client.post(f"/v1/sessions/{session}/ops", content=b'{"ops": [', headers={"content-type":
                                                                               "application/json"})
    assert_problem(r, 422, "invalid_json")
    assert_problem(client.post(f"/v1/sessions/{session}/ops"), 422, "invalid_json")


def test_schema_violations_are_422_problems_listing_every_issue(client, session):
    r = client.post(f"/v1/sessions/{session}/ops", json={"ops": [{"args": []}, {"op": "x", "bogus": 1}],
                                                          "repeat": 0})
    body = assert_problem(r, 422, "validation_error")
    locs = {tuple(e["loc"]) for e in body["errors"]}
    assert ("body", "ops", 0, "op") in locs and ("body", "ops", 1, "bogus") in locs
    assert ("body", "repeat") in locs


def test_reserved_names_are_refused(client, session):
    for name in ("NaN", "Infinity"):
        assert_problem(run(client, session, [tensor(name, 1.0)]), 422, "invalid_name")
    for name in ("x.grad", "-Infinity", "1x"):  # not identifiers: refused by the schema
        body = assert_problem(run(client, session, [tensor(name, 1.0)]), 422, "validation_error")
        assert body["errors"][0]["loc"][:4] == ["body", "ops", 0, "out"]


def test_too_many_ops_is_422_limit_exceeded():
    with make_client(max_ops_per_request=3) as c:
        sid = c.post("/v1/sessions").json()["id"]
        body = assert_problem(run(c, sid, [tensor(f"t{i}", 1.0) for i in range(4)]), 422, "limit_exceeded")
        assert "GRADSERVE_MAX_OPS_PER_REQUEST" in body["detail"]


def test_repeat_above_limit_is_422_limit_exceeded():
    with make_client(max_repeat=5) as c:
        sid = c.post("/v1/sessions").json()["id"]
        assert_problem(run(c, sid, [tensor("x", 1.0)], repeat=6), 422, "limit_exceeded")


def test_tensor_above_element_limit_is_refused_before_allocating():
    with make_client(max_elements_per_tensor=10) as c:
        sid = c.post("/v1/sessions").json()["id"]
        assert_problem(run(c, sid, [tensor("x", [0.0] * 11)]), 422, "limit_exceeded")
        big = b64(np.zeros(11, np.float32))
        assert_problem(run(c, sid, [tensor("x", big)]), 422, "limit_exceeded")
        assert_problem(run(c, sid, [{"op": "zeros", "out": "z", "args": [11]}]), 422, "limit_exceeded")


def test_base64_tensor_payload_is_decoded_exactly(client, session):
    values = np.array([[0.1, -2.0, 3.5], [1e-8, 7.0, -0.0]], dtype=np.float32)
    body = ok(run(client, session, [tensor("x", b64(values))]))
    view = body["tensors"]["x"]
    assert view["shape"] == [2, 3] and view["dtype"] == "float32"
    got = ok(client.get(f"/v1/sessions/{session}/tensors/x", params={"encoding": "base64"}))["data"]
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(got["data"]), "<f4").reshape(2, 3), values)


def test_base64_payload_dtypes_float64_int64_bool(client, session):
    ops = [tensor("d", b64(np.array([1.5, 2.5])), False),
           tensor("i", b64(np.array([1, -2], np.int64)), False),
           tensor("q", b64(np.array([True, False])), False)]
    body = ok(run(client, session, ops))
    assert body["tensors"]["d"]["dtype"] == "float64" and body["tensors"]["d"]["data"] == [1.5, 2.5]
    assert body["tensors"]["i"]["data"] == [1, -2] and body["tensors"]["q"]["data"] == [True, False]


def test_base64_payload_with_wrong_length_is_422(client, session):
    bad = b64(np.zeros(3, np.float32))
    bad["shape"] = [4]
    body = assert_problem(run(client, session, [tensor("x", bad)]), 422, "invalid_tensor_payload")
    assert body["detail"] == "payload data has 12 bytes but dtype float32 and shape [4] need 16"


def test_base64_payload_with_bad_base64_or_dtype_is_422(client, session):
    bad = b64(np.zeros(1, np.float32))
    for broken in ({**bad, "data": "!!!"}, {**bad, "dtype": "int8"}, {**bad, "extra": 1}):
        assert_problem(run(client, session, [tensor("x", broken)]), 422, "invalid_tensor_payload")


def test_nonfinite_strings_are_numbers_in_op_arguments(client, session):
    body = ok(run(client, session, [tensor("x", [1.0, 2.0]),
                                    {"op": "mul", "out": "y", "args": ["x", "Infinity"]},
                                    {"op": "mul", "out": "z", "args": ["x", "NaN"]}]))
    assert body["tensors"]["y"]["data"] == ["Infinity", "Infinity"]
    assert body["tensors"]["z"]["data"] == ["NaN", "NaN"]


def test_base64_response_encoding_applies_to_data_grads_and_contributions(client, session):
    body = ok(client.post(f"/v1/sessions/{session}/ops", params={"encoding": "base64"},
                          json={"ops": [*LINEAR, {"op": "backward", "args": ["y"]}]}))
    grad = body["tensors"]["x"]["grad"]
    assert grad["encoding"] == "base64" and np.frombuffer(base64.b64decode(grad["data"]), "<f4")[0] == 3.0
    contribution = body["autograd"][0]["entries"][0]["contribution"]
    assert contribution["encoding"] == "base64"


def test_repeat_and_record_return_each_iteration(client, session):
    ok(run(client, session, [tensor("c", 1.0, requires_grad=False)]))
    body = ok(run(client, session, [{"op": "add_", "args": ["c", 1.0]}], repeat=3, record=["c"]))
    assert body["records"] == {"c": [2.0, 3.0, 4.0]}
    assert body["tensors"]["c"]["version"] == 3


def test_body_too_large_by_content_length_is_413():
    with make_client(max_body_bytes=100) as c:
        sid = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{sid}/ops", content=b"{" + b" " * 200 + b"}",
                   headers={"content-type": "application/json"})
        body = assert_problem(r, 413, "body_too_large")
        assert "GRADSERVE_MAX_BODY_BYTES" in body["detail"]


def test_body_too_large_by_streamed_bytes_is_413():
    def chunks():
        for _ in range(5):
            yield b" " * 50

    with make_client(max_body_bytes=100) as c:
        sid = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{sid}/ops", content=chunks(), headers={"content-type": "application/json"})
        assert "content-length" not in r.request.headers
        assert_problem(r, 413, "body_too_large")
        r = c.post(f"/v1/sessions/{sid}/backward", content=chunks(), headers={"content-type":
                                                                               "application/json"})
        assert_problem(r, 413, "body_too_large")


def test_eval_returns_requested_tensors_and_gradients_without_a_session(client):
    body = ok(client.post("/v1/eval", json={"ops": [*LINEAR, {"op": "backward", "args": ["y"]}],
                                            "return": ["y", "x.grad", "b.grad"]}))
    assert set(body["tensors"]) == {"y", "x.grad", "b.grad"}
    assert body["tensors"]["y"]["data"] == 7.0 and body["tensors"]["x.grad"]["data"] == 3.0
    assert ok(client.get("/v1/sessions"))["sessions"] == []


def test_eval_returns_null_for_an_unset_grad_and_all_tensors_without_return(client):
    body = ok(client.post("/v1/eval", json={"ops": [tensor("x", 1.0)], "return": ["x.grad"]}))
    assert body["tensors"] == {"x.grad": None}
    body = ok(client.post("/v1/eval", json={"ops": LINEAR}))
    assert set(body["tensors"]) == {"x", "w", "b", "wx", "y"}


def test_eval_returning_the_grad_of_a_non_leaf_gives_torchs_warning_in_the_response_not_the_server_log(client):
    """torch warns when .grad of a non-leaf is read: a `return` naming one reads it, so the response carries
    the warning (each time, plans or not), and nothing reaches the server's Python warnings."""
    import warnings
    ops = [*LINEAR, {"op": "backward", "args": ["y"]}]
    for _ in range(3):  # (cold, recorded, replayed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            body = ok(client.post("/v1/eval", json={"ops": ops, "return": ["wx.grad", "x.grad"]}))
        assert body["tensors"]["wx.grad"] is None and body["tensors"]["x.grad"]["data"] == 3.0
        assert len(body["warnings"]) == 1
        assert body["warnings"][0].startswith("The .grad attribute of a Tensor that is not a leaf Tensor is being "
                                              "accessed.")
        assert not [w for w in caught if "not a leaf" in str(w.message)]
    assert ok(client.post("/v1/eval", json={"ops": ops, "return": ["x.grad"]}))["warnings"] == []


def test_eval_returns_each_gradient_once_and_names_where_it_is(client):
    """A large gradient is in the response once (in `tensors`, as asked); the report names it."""
    values = np.arange(50_000, dtype=np.float32) / 7
    ops = [{"op": "tensor", "out": "x", "args": [values.tolist()], "kwargs": {"requires_grad": True}},
           {"op": "mul", "out": "y", "args": ["x", 3]}, {"op": "sum", "out": "s", "args": ["y"]},
           {"op": "backward", "args": ["s"]}]
    r = client.post("/v1/eval", json={"ops": ops, "return": ["x.grad"]})
    body = ok(r)
    assert body["tensors"]["x.grad"]["data"] == [3.0] * 50_000
    assert len(r.content) < 50_000 * 4 + 2_000  # "3.0," per element, once
    (record,) = body["autograd"]
    assert record["entries"] == [{"name": "x", "contribution": "x.grad", "grad_accumulations": 1}]
    body = ok(client.post("/v1/eval", json={"ops": ops, "return": ["s"]}))
    assert body["autograd"][0]["entries"][0]["contribution"] == "x.grad"  # where it is, not its data
    assert set(body["tensors"]) == {"s"}


def test_eval_contribution_is_null_when_no_name_holds_it(client):
    # two passes: neither pass's gradient is x.grad's value at the end (that is their sum)
    body = ok(client.post("/v1/eval", json={"ops": [
        tensor("x", 2.0), {"op": "mul", "out": "y", "args": ["x", "x"]},
        {"op": "backward", "args": ["y"], "kwargs": {"retain_graph": True}},
        {"op": "backward", "args": ["y"]}], "return": ["x.grad"]}))
    assert body["tensors"]["x.grad"]["data"] == 8.0
    assert [r["entries"] for r in body["autograd"]] == [
        [{"name": "x", "contribution": None, "grad_accumulations": 1}],
        [{"name": "x", "contribution": None, "grad_accumulations": 2}]]
    # a grad op without out binds nothing; with out, the name it was bound to
    body = ok(client.post("/v1/eval", json={"ops": [
        tensor("x", 2.0), tensor("w", 3.0), {"op": "mul", "out": "y", "args": ["x", "w"]},
        {"op": "grad", "args": ["y", ["x"]], "kwargs": {"retain_graph": True}},
        {"op": "grad", "out": ["dx", "dw"], "args": ["y", ["x", "w"]]}], "return": ["dx", "dw"]}))
    assert body["autograd"][0]["entries"] == [{"name": "x", "contribution": None, "grad_accumulations": 0}]
    assert {e["name"]: e["contribution"] for e in body["autograd"][1]["entries"]} == {"x": "dx", "w": "dw"}
    assert body["tensors"]["dx"]["data"] == 3.0 and body["tensors"]["dw"]["data"] == 2.0


def test_eval_errors_are_problems(client):
    assert_problem(client.post("/v1/eval", json={"ops": [{"op": "nope"}]}), 422, "unknown_op")
    assert_problem(client.post("/v1/eval", json={"ops": [tensor("x", 1.0)], "return": ["q"]}), 404,
                   "unknown_tensor")


def test_large_tensor_round_trip_through_json(client, session):
    values = np.random.default_rng(0).standard_normal(100_000).astype(np.float32)
    body = orjson.dumps({"ops": [tensor("x", values.tolist(), False)]})
    ok(client.post(f"/v1/sessions/{session}/ops", content=body, headers=JSON))
    got = np.array(ok(client.get(f"/v1/sessions/{session}/tensors/x"))["data"], dtype=np.float32)
    np.testing.assert_array_equal(got, values)


# ----- "return": pay only for what you read; the name actions bind and del ---------------------------------

def test_return_list_answers_exactly_the_names_asked_for_and_no_autograd_report(client, session):
    body = ok(run(client, session, [*LINEAR, {"op": "backward", "args": ["y"]}], **{"return": ["y", "w.grad"]}))
    assert set(body["tensors"]) == {"y", "w.grad"}
    assert body["tensors"]["y"]["data"] == 7.0 and body["tensors"]["y"]["grad_fn"] == "AddBackward0"
    assert body["tensors"]["w.grad"]["data"] == 2.0 and body["autograd"] == []
    assert [o["bound"] for o in body["ops"]][:2] == [["x"], ["w"]]


def test_return_levels_full_meta_auto_and_null_for_an_unset_grad(client, session):
    ops = [tensor("big", [1.0] * 65), tensor("small", [1.0] * 64)]
    body = ok(run(client, session, ops, **{"return": {"big": "auto", "small": "auto", "small.grad": "full"}}))
    big, small = body["tensors"]["big"], body["tensors"]["small"]
    assert "data" not in big and "grad" not in big and big["shape"] == [65] and big["requires_grad"] is True
    assert small["data"] == [1.0] * 64 and small["grad"] is None
    assert body["tensors"]["small.grad"] is None
    meta = ok(run(client, session, [], **{"return": {"small": "meta"}}))["tensors"]["small"]
    assert set(meta) == {"name", "shape", "dtype", "requires_grad", "is_leaf", "grad_fn", "retains_grad", "version",
                         "grad_accumulations"}


def test_return_of_a_non_leaf_grad_is_quiet_but_a_bind_of_it_warns_as_torch_does(client, session):
    ops = [tensor("x", 2.0), {"op": "mul", "out": "y", "args": ["x", 3.0]}]
    body = ok(run(client, session, ops, **{"return": ["y.grad"]}))
    assert body["tensors"] == {"y.grad": None} and body["warnings"] == []
    body = ok(run(client, session, [{"op": "bind", "args": ["y.grad"], "out": "g"}], **{"return": ["y.grad"]}))
    assert body["warnings"][0].startswith("The .grad attribute of a Tensor that is not a leaf Tensor")
    assert body["ops"][0]["bound"] == []


def test_return_of_a_name_that_is_not_bound_is_null(client, session):
    body = ok(run(client, session, [tensor("x", 2.0)], **{"return": ["ghost", "ghost.grad", "x"]}))
    assert body["tensors"]["ghost"] is None and body["tensors"]["ghost.grad"] is None
    assert body["tensors"]["x"]["data"] == 2.0
    assert_problem(run(client, session, [], **{"return": ["x.data"]}), 404, "unknown_tensor")


def test_bind_names_the_gradient_itself_and_del_unbinds_names(client, session):
    ok(run(client, session, [*LINEAR, {"op": "backward", "args": ["y"]},
                             {"op": "bind", "args": ["x.grad"], "out": "g"},
                             {"op": "set_grad", "args": ["x", None]}, {"op": "mul_", "args": ["g", 10.0]}]))
    assert ok(client.get(f"/v1/sessions/{session}/tensors/g"))["data"] == 30.0
    body = ok(run(client, session, [{"op": "del", "args": ["wx", "y", "never_bound"]}], **{"return": []}))
    assert body["tensors"] == {}
    names = set(ok(client.get(f"/v1/sessions/{session}"))["tensors"])
    assert names == {"x", "w", "b", "g"}
    assert_problem(run(client, session, [{"op": "del", "args": [["x"]]}]), 422, "invalid_argument")


def test_an_ops_answer_shows_values_first_and_bookkeeping_last(client, session):
    ops = [tensor("x", [1.0, 2.0]), {"op": "mul", "out": "y", "args": ["x", "x"]},
           {"op": "sum", "out": "s", "args": ["y"]}, {"op": "backward", "args": ["s"]}]
    body = ok(run(client, session, ops))
    assert list(body) == ["tensors", "autograd", "warnings", "ops"]
    assert list(body["tensors"]["x"])[:5] == ["name", "shape", "dtype", "data", "grad"]
    body = ok(run(client, session, [{"op": "mul_", "args": ["x", 0.5], "no_grad": True},
                                    {"op": "sum", "out": "t", "args": ["x"], "no_grad": True},
                                    {"op": "le", "out": "done", "args": ["t", 0.4]}],
                  repeat=5, record=["x"], until="done"))
    assert list(body) == ["tensors", "records", "iterations", "autograd", "warnings", "ops"]
    assert body["iterations"] == 3 and body["records"]["x"][-1] == [0.125, 0.25]


def test_factories_take_size_by_keyword(client, session):
    """torch.zeros(size=(2, 3)): torch's size parameter by keyword (zeros, ones, empty, rand, randn, full), and
    torch's messages for it given twice or as one int."""
    body = ok(run(client, session, [
        {"op": "zeros", "kwargs": {"size": [2, 3]}, "out": "z"},
        {"op": "ones", "kwargs": {"size": [2], "requires_grad": True}, "out": "o"},
        {"op": "empty", "kwargs": {"size": [0]}, "out": "e"},
        {"op": "rand", "kwargs": {"size": [3]}, "out": "r"},
        {"op": "randn", "kwargs": {"size": [1, 2], "dtype": "float64"}, "out": "n"},
        {"op": "full", "kwargs": {"size": [2], "fill_value": 1.5}, "out": "f"}]))
    t = body["tensors"]
    assert t["z"]["shape"] == [2, 3] and t["o"]["requires_grad"] and t["e"]["shape"] == [0]
    assert t["r"]["shape"] == [3] and t["n"]["dtype"] == "float64" and t["f"]["data"] == [1.5, 1.5]
    assert_problem(run(client, session, [{"op": "zeros", "args": [2], "kwargs": {"size": [2]}}]), 422,
                   detail="zeros() got multiple values for argument 'size'")
    assert_problem(run(client, session, [{"op": "zeros", "kwargs": {"size": 2}}]), 422,
                   detail="zeros(): argument 'size' must be tuple of ints, not int")
