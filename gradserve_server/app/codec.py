"""Tensor data on the wire: JSON numbers and nested lists, or base64 (little-endian, C order).

JSON has no NaN or infinities, so they travel as the strings "NaN", "Infinity" and "-Infinity" in both
directions; those three strings are therefore numbers wherever they appear in op arguments, and cannot be
tensor names. Nothing is rounded: float32 values are written in their shortest round-tripping form.
"""

from __future__ import annotations

import base64
import binascii
import math
import secrets
import sys
from typing import Any, Literal

import ml_dtypes
import numpy as np
import orjson
import pybase64

from gradserve_server.app.errors import InvalidInput, LimitExceeded
from gradserve_server.engine import Owned

Encoding = Literal["json", "base64"]

NONFINITE_STRINGS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}

WIRE_DTYPES = {"float32": np.dtype("<f4"), "float64": np.dtype("<f8"), "int64": np.dtype("<i8"),
               "int32": np.dtype("<i4"), "int16": np.dtype("<i2"), "int8": np.dtype("i1"), "uint8": np.dtype("u1"),
               "bool": np.dtype("?"), "float16": np.dtype("<f2"),
               # bfloat16: the upper 16 bits of a float32, little-endian (ml_dtypes' layout, and torch's)
               "bfloat16": np.dtype(ml_dtypes.bfloat16)}
#: float16/bfloat16 values written as JSON numbers: as float32 (which holds each exactly), in its shortest form
_WIDENED = frozenset((np.dtype("<f2"), np.dtype(ml_dtypes.bfloat16)))
PAYLOAD_KEYS = frozenset({"dtype", "shape", "encoding", "data"})

#: Strings of ``"data"`` members at least this long are lifted out of large bodies (see ``lift_blobs``)
BLOB_MIN_BYTES = 4096
_WHITESPACE = frozenset(b" \t\r\n")


def b64decode(data: str | memoryview) -> bytes:
    """The bytes of base64 text, strictly: what the standard library gives (``a2b_base64`` in strict mode for a
    lifted blob, ``b64decode(validate=True)`` for a str), its error included, at SIMD speed (pybase64, ~30x).
    pybase64's strict decoder accepts a subset of what the standard library accepts (it refuses padding past a
    complete quantum, ``"QUJD="``) and gives the same bytes: what it refuses goes to the standard library,
    whose verdict and message stand."""
    try:
        return pybase64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return binascii.a2b_base64(data, strict_mode=True) if isinstance(data, memoryview) else \
            base64.b64decode(data, validate=True)


# ----- large base64 strings ---------------------------------------------------------------------------
def lift_blobs(body: bytes) -> tuple[bytes, dict[str, memoryview]]:
    """Replace the long ``"data": "..."`` strings of a body by short unique tokens, before orjson reads it.

    orjson would copy each base64 string into a Python str (checking it as UTF-8) and ``b64decode`` would
    copy it back to bytes; decoding the body's own bytes (a memoryview) skips both, which is most of what a
    base64 upload costs above ``b64decode`` itself. Only strings with no backslash are lifted (their bytes
    are then exactly their value), and a token is a string that does not occur in the body, so the parsed
    document is the original one with those string values replaced. A token that is not then found as the
    ``data`` of a payload object (say the ``"data"`` we found was inside another string) is left over, and
    ``blobs_left`` tells the caller to parse the original body instead.
    """
    # memchr first: without a "c" byte there is no "encoding" key (a large JSON-data body has none)
    if len(body) < BLOB_MIN_BYTES or b"c" not in body or b'"encoding"' not in body:
        return body, {}
    prefix = f"gradserve-blob-{secrets.token_hex(8)}-"
    view = memoryview(body)
    pieces: list = []
    blobs: dict[str, memoryview] = {}
    copied = 0  # body[:copied] is in pieces
    size = len(body)
    i = body.find(b'"data"')
    while i != -1:
        j = i + 6
        while j < size and body[j] in _WHITESPACE:
            j += 1
        if j < size and body[j] == 0x3A:  # ':'
            j += 1
            while j < size and body[j] in _WHITESPACE:
                j += 1
            if j < size and body[j] == 0x22:  # '"'
                end = body.find(b'"', j + 1)
                if end - j > BLOB_MIN_BYTES and body.find(b"\\", j + 1, end) == -1:
                    token = f"{prefix}{len(blobs)}"
                    blobs[token] = view[j + 1:end]
                    pieces += (view[copied:j + 1], token.encode())
                    copied = end
                    i = body.find(b'"data"', end + 1)
                    continue
        i = body.find(b'"data"', i + 6)
    if not blobs:
        return body, {}
    pieces.append(view[copied:])
    lifted = b"".join(pieces)
    # the tokens must be the only occurrences of the prefix in what orjson reads (searched there, not in the
    # whole body: the lifted strings are most of it); the prefix holds no quote, so no occurrence spans a
    # token's edge
    if lifted.count(prefix.encode()) != len(blobs):
        return body, {}
    return lifted, blobs


class BlobsLeft(Exception):
    """A lifted string was not the data of a payload object: parse the original body."""


def blobs_left(blobs: dict[str, memoryview]) -> None:
    if blobs:
        raise BlobsLeft(sorted(blobs))


# ----- requests ---------------------------------------------------------------------------------------
#: base64 characters decoded per call when decoding straight into an array (a multiple of 4): each piece's
#: bytes are copied into the array while they are in the cache
DECODE_PIECE = 1 << 16
_NATIVE_LITTLE = sys.byteorder == "little"


def _decode_into(data: str | memoryview, dtype: np.dtype, shape: list, nbytes: int) -> np.ndarray | None:
    """The array of base64 text ``data`` decoded straight into fresh memory of its own (writable, C order,
    native), piece by piece; None unless the text is exactly the padded base64 of ``nbytes`` bytes of plain
    base64 pieces (the caller then decodes it the usual way, which gives its error, or the same bytes: every
    piece but the last is pure base64 alphabet, decoded the same by every decoder, and the last is decoded by
    the usual decoder)."""
    if not _NATIVE_LITTLE or dtype == np.dtype("?") or len(data) != 4 * ((nbytes + 2) // 3):
        return None
    arr = np.empty(shape, dtype.newbyteorder("="))
    out = memoryview(arr.reshape(-1).view(np.uint8))  # (the array's bytes, writable)
    n = len(data)
    at = 0
    try:
        for i in range(0, n, DECODE_PIECE):
            piece = data[i:i + DECODE_PIECE]
            raw = b64decode(piece)
            if i + DECODE_PIECE < n:
                if len(raw) != DECODE_PIECE // 4 * 3:  # (padding inside the text)
                    return None
            elif at + len(raw) != nbytes:
                return None
            out[at:at + len(raw)] = raw
            at += len(raw)
    except (binascii.Error, ValueError):
        return None
    return arr


def decode_payload(obj: dict, max_elements: int, blobs: dict[str, memoryview] | None = None, *,
                   owned: bool = False) -> np.ndarray | Owned:
    """``{"dtype", "shape", "encoding": "base64", "data"}`` -> a read-only ndarray (the engine copies).

    ``data`` may be a token of ``lift_blobs``: its bytes are then taken (and removed) from ``blobs``.
    ``owned``: the payload is a ``tensor`` op's data in a one-shot run; it is then decoded straight into an
    array of its own, handed over to the engine with it (``engine.Owned``: a replayed plan keeps it instead
    of copying it), where the text allows (else the usual read-only array)."""
    if set(obj) != PAYLOAD_KEYS or obj.get("encoding") != "base64":
        raise InvalidInput(f"a tensor payload object needs exactly the keys dtype, shape, encoding "
                           f"(\"base64\") and data; got {sorted(obj)}", code="invalid_tensor_payload")
    dtype = WIRE_DTYPES.get(obj["dtype"]) if isinstance(obj["dtype"], str) else None
    if dtype is None:
        raise InvalidInput(f"unsupported payload dtype {obj['dtype']!r}; expected one of "
                           f"{', '.join(WIRE_DTYPES)}", code="invalid_tensor_payload")
    shape = obj["shape"]
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise InvalidInput(f"payload shape must be a list of non-negative integers, got {shape!r}",
                           code="invalid_tensor_payload")
    numel = math.prod(shape)
    if numel > max_elements:
        raise LimitExceeded(f"tensor of {numel} elements exceeds the limit of {max_elements} "
                            f"(GRADSERVE_MAX_ELEMENTS_PER_TENSOR)")
    data = obj["data"]
    if not isinstance(data, str):
        raise InvalidInput("payload data must be a base64 string", code="invalid_tensor_payload")
    if blobs:
        data = blobs.pop(data, data)
    if owned:
        arr = _decode_into(data, dtype, shape, numel * dtype.itemsize)
        if arr is not None:
            return Owned(arr)
    try:
        raw = b64decode(data)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput(f"payload data is not valid base64: {exc}",
                           code="invalid_tensor_payload") from None
    expected = numel * dtype.itemsize
    if len(raw) != expected:
        raise InvalidInput(f"payload data has {len(raw)} bytes but dtype {obj['dtype']} and shape {shape} "
                           f"need {expected}", code="invalid_tensor_payload")
    arr = np.frombuffer(raw, dtype=dtype).reshape(shape)
    if dtype == np.dtype("?") and raw.translate(None, b"\x00\x01"):
        raise InvalidInput("bool payload bytes must be 0 or 1", code="invalid_tensor_payload")
    return arr.astype(dtype.newbyteorder("="), copy=False)


MAX_NESTING = 64  # deeper data cannot be a tensor (numpy and torch stop at 64 dimensions)


def decode_value(value: Any, max_elements: int, depth: int = 0, *,
                 blobs: dict[str, memoryview] | None = None) -> Any:
    """Replace payload objects by arrays and the non-finite strings by floats.

    A list whose first item is a number is tensor data: it is left whole for the engine, which reads the
    non-finite strings inside data itself, so a large list costs nothing here. ``blobs``: see ``lift_blobs``.
    """
    if depth > MAX_NESTING:
        raise InvalidInput(f"argument nested more than {MAX_NESTING} levels deep", code="too_deep")
    if isinstance(value, dict):
        if "encoding" in value:
            return decode_payload(value, max_elements, blobs)
        return {k: decode_value(v, max_elements, depth + 1, blobs=blobs) for k, v in value.items()}
    if isinstance(value, list):
        if not value or isinstance(value[0], (int, float)):
            return value
        return [decode_value(v, max_elements, depth + 1, blobs=blobs) for v in value]
    if isinstance(value, str):
        return NONFINITE_STRINGS.get(value, value)
    return value


# ----- responses --------------------------------------------------------------------------------------
def _json_with_nonfinite(arr: np.ndarray) -> Any:
    """Nested lists with "NaN"/"Infinity"/"-Infinity" strings; finite floats keep their shortest form."""
    if arr.dtype == np.float32:
        # shortest float32 text read back as a double: orjson then writes the same short digits
        values = arr.astype(str).astype(np.float64)
    else:
        values = arr
    out = values.astype(object)
    out[np.isnan(arr)] = "NaN"
    out[np.isposinf(arr)] = "Infinity"
    out[np.isneginf(arr)] = "-Infinity"
    return out.tolist()


def encode_json(arr: np.ndarray) -> Any:
    """A value orjson serialises (with OPT_SERIALIZE_NUMPY) as the tensor's nested lists or number."""
    if arr.dtype in _WIDENED:
        arr = arr.astype(np.float32)
    if arr.ndim == 0:  # the common scalar, without array-wide checks
        value = arr[()]
        if arr.dtype.kind in "fV" and not math.isfinite(value):
            return _json_with_nonfinite(arr)
        return value  # a numpy scalar: orjson writes float32 in its shortest form
    if arr.dtype.kind in "fV" and arr.size and not np.isfinite(arr).all():
        return _json_with_nonfinite(arr)
    if arr.ndim == 0:
        return arr[()]  # a numpy scalar: orjson writes float32 in its shortest form
    if arr.size == 0:
        return arr.tolist()
    return np.ascontiguousarray(arr)


#: a tensor's dtype -> its name and its wire dtype (``dtype.name`` is a Python-level property in numpy: a
#: few microseconds, twice per tensor of every response)
_ENCODED_AS = {np.dtype(name): (name, wire) for name, wire in WIRE_DTYPES.items()}
_ENCODED_AS.update({wire: (name, wire) for name, wire in WIRE_DTYPES.items()})


def encode_base64(arr: np.ndarray) -> dict:
    found = _ENCODED_AS.get(arr.dtype)
    name, wire = found if found is not None else (arr.dtype.name, WIRE_DTYPES[arr.dtype.name])
    buf = np.ascontiguousarray(arr, dtype=wire)
    if wire.kind == "V":  # bfloat16 exports no buffer: its bits as uint16
        buf = buf.view(np.uint16)
    data = pybase64.b64encode(buf.data)  # (base64's bytes, SIMD)
    # orjson >= 3.9 embeds pre-serialised JSON without re-encoding it (base64 needs no escaping)
    text = orjson.Fragment(b"".join((b'"', data, b'"'))) if hasattr(orjson, "Fragment") else data.decode("ascii")
    return {"dtype": name, "shape": list(arr.shape), "encoding": "base64", "data": text}


def encode(arr: np.ndarray, encoding: Encoding) -> Any:
    return encode_base64(arr) if encoding == "base64" else encode_json(arr)


#: Most JSON text per element, by numpy kind and item size: float32 "-1.1754944e-38," (orjson's shortest
#: form), float64 "-2.2250738585072014e-308,", int64 "-9223372036854775808,", int32 "-2147483648,", int16
#: "-32768,", int8 "-128,", uint8 "255,", bool "false,"
_JSON_ELEMENT_BYTES = {("f", 4): 16, ("f", 8): 25, ("i", 8): 21, ("i", 4): 12, ("i", 2): 7, ("i", 1): 5,
                       ("u", 1): 4, ("b", 1): 6, ("f", 2): 16, ("V", 2): 16}  # (float16/bfloat16 as float32)


def encoded_size(arr: np.ndarray, encoding: Encoding) -> int:
    """An upper bound of the bytes ``encode(arr, encoding)`` writes, from the shape and dtype alone (for the
    response budget, before anything is encoded)."""
    if encoding == "base64":
        return 4 * ((arr.nbytes + 2) // 3) + 64  # the wire dtypes have the item sizes of the dtypes
    per = _JSON_ELEMENT_BYTES.get((arr.dtype.kind, arr.dtype.itemsize), 25)
    return arr.size * per + 2 * max(arr.ndim, 1)
