"""The narrow integer dtypes (int32, int16, int8, uint8) over HTTP: JSON and base64 payloads, tensor views,
torch's promotion and wrap-around, and torch's refusals as problem+json (values as torch 2.13 gives them;
the engine-level table against torch is tests/engine/test_dtypes_torch.py)."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from .conftest import assert_problem, ok, run

NARROW = ["int32", "int16", "int8", "uint8"]


def make(name: str, value, dtype: str) -> dict:
    return {"op": "tensor", "out": name, "args": [value], "kwargs": {"dtype": dtype}}


@pytest.mark.parametrize("dtype", NARROW)
def test_json_tensor_with_narrow_dtype_reads_back_with_its_dtype(client, session, dtype):
    body = ok(run(client, session, [make("x", [[1, 2], [3, 4]], dtype)]))
    assert body["tensors"]["x"]["dtype"] == dtype and body["tensors"]["x"]["data"] == [[1, 2], [3, 4]]
    view = ok(client.get(f"/v1/sessions/{session}/tensors/x", params={"encoding": "base64"}))
    assert view["data"]["dtype"] == dtype
    raw = base64.b64decode(view["data"]["data"])
    np.testing.assert_array_equal(np.frombuffer(raw, np.dtype(dtype).newbyteorder("<")),
                                  np.array([1, 2, 3, 4], dtype))


@pytest.mark.parametrize("dtype", NARROW)
def test_base64_payload_of_narrow_dtype_round_trips_exactly(client, session, dtype):
    info = np.iinfo(dtype)
    arr = np.array([info.min, info.max, 0, 7], dtype)
    payload = {"dtype": dtype, "shape": [4], "encoding": "base64",
               "data": base64.b64encode(arr.astype(arr.dtype.newbyteorder("<")).tobytes()).decode()}
    body = ok(run(client, session, [{"op": "tensor", "out": "x", "args": [payload]}]))
    assert body["tensors"]["x"]["dtype"] == dtype and body["tensors"]["x"]["data"] == arr.tolist()


def test_base64_payload_with_wrong_length_for_int16_is_a_problem(client, session):
    payload = {"dtype": "int16", "shape": [3], "encoding": "base64", "data": base64.b64encode(b"\0" * 4).decode()}
    assert_problem(run(client, session, [{"op": "tensor", "out": "x", "args": [payload]}]), 422,
                   "invalid_tensor_payload")


def test_promotion_and_wraparound_over_http(client, session):
    body = ok(run(client, session, [
        make("a", [100, -100, 50], "int8"), make("u", [200, 3, 255], "uint8"),
        {"op": "add", "out": "s", "args": ["a", "u"]},         # uint8 + int8 -> int16
        {"op": "add", "out": "w", "args": ["a", "a"]},         # int8 wraps
        {"op": "add", "out": "p", "args": ["a", 300]},         # a Python int is cast into int8 (wraps)
        {"op": "mul", "out": "f", "args": ["a", 2.5]},         # ints with a Python float: the default float
        {"op": "sum", "out": "t", "args": ["u"]},              # sums of small ints are int64
    ]))
    t = body["tensors"]
    assert (t["s"]["dtype"], t["s"]["data"]) == ("int16", [300, -97, 305])
    assert (t["w"]["dtype"], t["w"]["data"]) == ("int8", [-56, 56, 100])
    assert (t["p"]["dtype"], t["p"]["data"]) == ("int8", [-112, -56, 94])
    assert (t["f"]["dtype"], t["f"]["data"]) == ("float32", [250.0, -250.0, 125.0])
    assert (t["t"]["dtype"], t["t"]["data"]) == ("int64", 458)


def test_conversion_methods_over_http(client, session):
    body = ok(run(client, session, [
        make("x", [1.7, -2.7, 200.0], "float32"),
        {"op": "int", "out": "i", "args": ["x"]}, {"op": "short", "out": "s", "args": ["x"]},
        {"op": "char", "out": "c", "args": ["x"]}, {"op": "byte", "out": "b", "args": ["x"]},
        {"op": "to", "out": "t", "args": ["x", "torch.int16"]},
        {"op": "zeros", "out": "z", "args": [2], "kwargs": {"dtype": "uint8"}},
        {"op": "arange", "out": "r", "args": [3], "kwargs": {"dtype": "int"}},
    ]))
    t = body["tensors"]
    assert [t[k]["dtype"] for k in "iscbtzr"] == ["int32", "int16", "int8", "uint8", "int16", "uint8", "int32"]
    assert t["i"]["data"] == [1, -2, 200] and t["c"]["data"] == [1, -2, -56] and t["z"]["data"] == [0, 0]


def test_narrow_overflow_in_tensor_data_is_torchs_error(client, session):
    body = assert_problem(run(client, session, [make("x", [300], "int8")]), 422,
                          detail="value cannot be converted to type int8 without overflow")
    assert body["exception"] == "RuntimeError" and body["op_index"] == 0


def test_integer_tensor_cannot_require_grad(client, session):
    r = run(client, session, [{"op": "zeros", "out": "x", "args": [2],
                               "kwargs": {"dtype": "int16", "requires_grad": True}}])
    assert_problem(r, 422, detail="Only Tensors of floating point and complex dtype can require gradients")


def test_failed_narrow_op_list_changes_nothing(client, session):
    ok(run(client, session, [make("a", [1, 2], "int8")]))
    r = run(client, session, [{"op": "add_", "args": ["a", 100]}, {"op": "add_", "args": ["a", 1.5]}])
    assert_problem(r, 422, detail="result type Float can't be cast to the desired output type Char")
    assert ok(client.get(f"/v1/sessions/{session}/tensors/a"))["data"] == [1, 2]


def test_unsupported_dtype_is_a_clear_problem(client, session):
    body = assert_problem(run(client, session, [make("x", [1.0], "complex64")]), 422, "unknown_dtype")
    assert "complex64" in body["detail"]
    payload = {"dtype": "uint16", "shape": [1], "encoding": "base64", "data": "AAA="}
    assert_problem(run(client, session, [{"op": "tensor", "out": "x", "args": [payload]}]), 422)


def test_replayed_one_shot_programs_check_narrow_ranges_as_the_first_run(client):
    """/v1/eval replays a program it has seen (a plan, data left out of its key): an int that does not fit the
    narrow dtype must still be torch's overflow error, never wrap on the fast path."""
    def program(v, dtype):
        return {"ops": [{"op": "tensor", "out": "x", "args": [v], "kwargs": {"dtype": dtype}},
                        {"op": "add", "out": "y", "args": ["x", 300]}]}
    for _ in range(4):  # seen, then replayed
        body = ok(client.post("/v1/eval", json=program(5, "int8")))
        assert (body["tensors"]["y"]["dtype"], body["tensors"]["y"]["data"]) == \
            ("int8", 49)  # 5 + (300 wrapped into int8: 44)
    assert_problem(client.post("/v1/eval", json=program(300, "int8")), 422,
                   detail="value cannot be converted to type int8 without overflow")
    for _ in range(3):
        assert ok(client.post("/v1/eval", json=program(-1, "uint8")))["tensors"]["x"]["data"] == 255
    assert_problem(client.post("/v1/eval", json=program(-256, "uint8")), 422,
                   detail="value cannot be converted to type uint8 without overflow")


def test_uint8_index_is_a_deprecated_mask_and_int8_index_is_refused(client, session):
    body = ok(run(client, session, [
        make("x", [10.0, 20.0, 30.0], "float32"), make("m", [1, 0, 1], "uint8"),
        {"op": "getitem", "out": "y", "args": ["x", "m"]},
        {"op": "where", "out": "w", "args": ["m", "x", 0.0]}]))
    assert body["tensors"]["y"]["data"] == [10.0, 30.0] and body["tensors"]["w"]["data"] == [10.0, 0.0, 30.0]
    assert [w.split(" (Triggered")[0] for w in body["warnings"]] == [
        "indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.",
        "where received a uint8 condition tensor. This behavior is deprecated and will be removed in a future "
        "version of PyTorch. Use a boolean condition instead."]
    r = run(client, session, [make("i", [0], "int8"), {"op": "getitem", "out": "z", "args": ["x", "i"]}])
    assert assert_problem(r, 422, detail="tensors used as indices must be long, int, byte or bool tensors")[
        "exception"] == "IndexError"
