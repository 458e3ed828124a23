"""Tensor data on the wire, below HTTP: exactness and the non-finite strings."""

from __future__ import annotations

import base64
import binascii
import random

import numpy as np
import orjson
import pytest

from gradserve_server.app import codec
from gradserve_server.app.codec import decode_payload, decode_value, encode_base64, encode_json
from gradserve_server.app.errors import InvalidInput, LimitExceeded
from gradserve_server.engine import Owned


def dumps(value) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)


def wire(value):
    """What a client receives."""
    return orjson.loads(dumps(value))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"])
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


# ----- a tensor op's payload in a one-shot run: decoded straight into an array handed over to the engine ----------
def _outcome(fn):
    try:
        r = fn()
    except (InvalidInput, LimitExceeded) as e:
        return ("error", type(e).__name__, str(e))
    a = r.array if isinstance(r, Owned) else r
    return ("ok", a.dtype.str, a.shape, a.tobytes())


def _payload(dtype, shape, data):
    return {"dtype": dtype, "shape": shape, "encoding": "base64", "data": data}


def _bad_texts(good: str):
    """Texts the usual decoder refuses or reads differently, at piece boundaries and inside the last piece."""
    p = codec.DECODE_PIECE
    yield good[:-4]                                   # too short
    yield good + "AAAA"                               # too long
    if len(good) > p + 8:
        yield good[:p - 4] + "AA==" + good[p:]         # padding at the end of a piece that is not the last
        yield good[:p - 4] + "A=AA" + good[p:]         # padding inside a piece
        yield good[:p] + " " + good[p + 1:]            # whitespace
        yield good[:10] + "\n" + good[11:]
        yield good[:p + 3] + "é" + good[p + 4:]        # not ASCII
        yield good[:p + 3] + "*" + good[p + 4:]        # not base64
    yield good[:-4] + "A=A="                          # discontinuous padding in the last piece
    yield good[:-4] + "===="
    yield good[:-1] + "*"


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"])
def test_an_owned_payload_is_the_usual_array_in_memory_of_its_own(dtype):
    """``owned=True``: the same values, dtype and shape as the usual decoding (of str data and of a lifted blob,
    across piece boundaries), in a fresh, writable, C-ordered array owning its memory, handed over
    (``engine.Owned``); texts the usual decoding refuses are refused with the same message."""
    rng = np.random.default_rng(5)
    p = codec.DECODE_PIECE
    for n in (0, 1, 2, 3, 5, p // 4 * 3 // 8, p // 4 * 3 // 8 + 1, 3 * p // 8 + 7, 5 * p // 8):
        arr = rng.standard_normal(n).astype(dtype) if dtype != "bool" else rng.random(n) < 0.5
        shapes = [[n], [1, n]] + ([[]] if n == 1 else [])
        text = base64.b64encode(arr.astype(np.dtype(dtype).newbyteorder("<")).tobytes()).decode()
        for shape in shapes:
            for data in (text, *_bad_texts(text)):
                for as_blob in (False, True):
                    def usual(data=data, shape=shape, as_blob=as_blob):
                        blobs = {"t": memoryview(data.encode("utf-8"))} if as_blob else None
                        return decode_payload(_payload(dtype, shape, "t" if as_blob else data), 10**7, blobs)

                    def owned(data=data, shape=shape, as_blob=as_blob):
                        blobs = {"t": memoryview(data.encode("utf-8"))} if as_blob else None
                        return decode_payload(_payload(dtype, shape, "t" if as_blob else data), 10**7, blobs,
                                              owned=True)
                    assert _outcome(owned) == _outcome(usual), (n, shape, data[:20], as_blob)
                    if data is text:
                        got = owned()
                        if dtype == "bool":  # (0/1 bytes are checked on the usual way)
                            assert isinstance(got, np.ndarray)
                            continue
                        assert isinstance(got, Owned)
                        a = got.array
                        assert a.base is None and a.flags.writeable and a.flags.c_contiguous
                        assert a.dtype.isnative and list(a.shape) == shape


def _stdlib_verdict(data):
    """What the standard library's strict decoders give (the service's decoding before pybase64)."""
    try:
        if isinstance(data, memoryview):
            return binascii.a2b_base64(data, strict_mode=True)
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        return ("error", str(exc))


def _codec_verdict(data):
    try:
        return codec.b64decode(data)
    except (binascii.Error, ValueError) as exc:
        return ("error", str(exc))


def test_fast_base64_decoding_gives_the_standard_librarys_bytes_verdicts_and_messages():
    """The SIMD decoder accepts exactly the texts the standard library's strict decoders accept, with the same
    bytes, and a refusal carries the standard library's message (short texts over an alphabet of base64 digits,
    padding, whitespace, URL-safe and non-ASCII characters: every padding position, excess and inner padding)."""
    rng = random.Random(7)
    alphabet = "ABCDab01+/=\n -_é\x00"
    texts = ["", "QQ==", "QUJD", "QUJD=", "QUJD====", "QQ=", "Q===", "=QUJD", "QQ==QQ==", "QUJ\nD", "QUJD\n"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14))) for _ in range(20000)]
    refused = 0
    for text in texts:
        for data in (text, memoryview(text.encode())):
            expected = _stdlib_verdict(data)
            assert _codec_verdict(data) == expected, (text, type(data).__name__)
            refused += isinstance(expected, tuple)
    assert 0 < refused < 2 * len(texts)
    payload = np.random.default_rng(0).standard_normal(100_003).tobytes()
    text = base64.b64encode(payload)
    assert codec.b64decode(text.decode()) == codec.b64decode(memoryview(text)) == payload


def test_base64_encoding_is_the_standard_librarys():
    for arr in (np.arange(7, dtype=np.float32), np.zeros((0, 3)), np.array(True), np.arange(1 << 16, dtype=np.int64)):
        data = encode_base64(arr)["data"]
        text = bytes(orjson.dumps(data))[1:-1]
        assert text == base64.b64encode(np.ascontiguousarray(arr, arr.dtype.newbyteorder("<")).tobytes())
