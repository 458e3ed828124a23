"""Tensor data on the wire, below HTTP: exactness and the non-finite strings."""

from __future__ import annotations

import base64

import numpy as np
import orjson
import pytest

from app.codec import decode_payload, decode_value, encode_base64, encode_json
from app.errors import InvalidInput, LimitExceeded


def dumps(value) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)


def wire(value):
    """What a client receives."""
    return orjson.loads(dumps(value))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
def test_base64_round_trip_is_exact_for_every_dtype(dtype):
    arr = (np.arange(12).reshape(3, 4) * 0.37).astype(dtype)
    np.testing.assert_array_equal(decode_payload(wire(encode_base64(arr)), 100), arr)


def test_base64_is_little_endian_c_order():
    arr = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    payload = wire(encode_base64(arr.T))  # a non-contiguous view is written in C order of its own shape
    assert base64.b64decode(payload["data"]) == np.ascontiguousarray(arr.T).astype("<f4").tobytes()


def test_bool_payload_rejects_bytes_other_than_zero_and_one():
    payload = {"dtype": "bool", "shape": [1], "encoding": "base64",
               "data": base64.b64encode(b"\x02").decode()}
    with pytest.raises(InvalidInput):
        decode_payload(payload, 10)


def test_payload_element_limit_is_checked_before_decoding():
    with pytest.raises(LimitExceeded):
        decode_payload({"dtype": "float32", "shape": [1000, 1000], "encoding": "base64", "data": ""}, 10)


def test_json_encoding_writes_nonfinite_as_strings_and_keeps_shortest_float32():
    arr = np.array([[0.1, np.nan], [np.inf, -np.inf]], dtype=np.float32)
    assert dumps(encode_json(arr)) == b'[[0.1,"NaN"],["Infinity","-Infinity"]]'
    assert dumps(encode_json(np.array(0.1, dtype=np.float32))) == b"0.1"
    assert dumps(encode_json(np.array(np.nan))) == b'"NaN"'


def test_json_encoding_of_finite_values_round_trips_bit_exactly():
    arr = np.random.default_rng(1).standard_normal(1000).astype(np.float32) * 1e20
    assert (np.array(orjson.loads(dumps(encode_json(arr))), dtype=np.float32) == arr).all()
    arr64 = np.random.default_rng(2).standard_normal(1000)
    assert (np.array(orjson.loads(dumps(encode_json(arr64)))) == arr64).all()


def test_empty_arrays_keep_their_nesting():
    assert dumps(encode_json(np.zeros((2, 0)))) == b"[[],[]]"


def test_decode_value_reads_nonfinite_strings_and_leaves_number_lists_to_the_engine():
    assert decode_value("NaN", 10) != decode_value("NaN", 10)  # a float nan
    assert decode_value(["-Infinity", "x"], 10) == [-np.inf, "x"]
    data = [1.0, "NaN"]
    assert decode_value(data, 10) is data  # tensor data: the engine reads the strings itself
    assert decode_value("x", 10) == "x"
