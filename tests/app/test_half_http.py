"""float16 and bfloat16 over HTTP: JSON and base64 payloads (base64 of the raw little-endian bits), tensor
views, torch's promotion, float32 arithmetic rounded once, gradients in the tensor's dtype (values as torch 2.13
gives them; the engine-level checks against torch are in tests/engine/test_half_torch.py)."""

from __future__ import annotations

import base64

import ml_dtypes
import numpy as np
import pytest

from .conftest import ok, run

NP = {"float16": np.dtype("<f2"), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
HALF = list(NP)


def make(name: str, value, dtype: str, **kwargs) -> dict:
    return {"op": "tensor", "out": name, "args": [value], "kwargs": {"dtype": dtype, **kwargs}}


def b64(arr: np.ndarray) -> dict:
    return {"dtype": arr.dtype.name, "shape": list(arr.shape), "encoding": "base64",
            "data": base64.b64encode(arr.tobytes()).decode()}


@pytest.mark.parametrize("dtype", HALF)
def test_json_tensor_of_half_dtype_reads_back_rounded_with_its_dtype(client, session, dtype):
    body = ok(run(client, session, [make("x", [0.1, 1.0, -2.5, 65504.0], dtype)]))
    x = body["tensors"]["x"]
    assert x["dtype"] == dtype
    # JSON numbers carry the rounded values exactly (as float32 text, which holds them)
    want = np.array([0.1, 1.0, -2.5, 65504.0], NP[dtype])
    np.testing.assert_array_equal(np.array(x["data"], np.float32).astype(NP[dtype]), want)
    view = ok(client.get(f"/v1/sessions/{session}/tensors/x", params={"encoding": "base64"}))
    assert view["data"]["dtype"] == dtype
    raw = base64.b64decode(view["data"]["data"])
    assert raw == want.tobytes()  # little-endian bits: bfloat16 is a float32's upper half


@pytest.mark.parametrize("dtype", HALF)
def test_base64_payload_of_half_dtype_round_trips_bit_for_bit(client, session, dtype):
    arr = np.array([1e-3, -7.25, np.inf, np.nan, 3.0e4], np.float32).astype(NP[dtype])
    ok(run(client, session, [{"op": "tensor", "out": "x", "args": [b64(arr)]}]))
    x = ok(client.get(f"/v1/sessions/{session}/tensors/x", params={"encoding": "base64"}))["data"]
    assert x["dtype"] == dtype and base64.b64decode(x["data"]) == arr.tobytes()


def test_promotion_over_http(client, session):
    body = ok(run(client, session, [
        make("h", [1.5, 2.0], "float16"), make("b", [1.5, 2.0], "bfloat16"),
        {"op": "tensor", "out": "i", "args": [[1, 2]]},
        {"op": "add", "out": "hb", "args": ["h", "b"]},     # float16 with bfloat16: float32
        {"op": "add", "out": "ih", "args": ["i", "h"]},     # int64 with float16: float16
        {"op": "mul", "out": "hs", "args": ["h", 2.5]},     # a Python float does not upcast
        {"op": "to", "out": "hd", "args": ["h", "float64"]},
    ]))
    t = body["tensors"]
    assert [t[k]["dtype"] for k in ("hb", "ih", "hs", "hd")] == ["float32", "float16", "float16", "float64"]
    assert t["hb"]["data"] == [3.0, 4.0] and t["ih"]["data"] == [2.5, 4.0] and t["hs"]["data"] == [3.75, 5.0]


@pytest.mark.parametrize("dtype", HALF)
def test_backward_through_half_tensor_gives_grad_of_its_dtype(client, session, dtype):
    body = ok(run(client, session, [
        make("x", [0.5, -1.0, 2.0], dtype, requires_grad=True),
        {"op": "exp", "out": "e", "args": ["x"]},
        {"op": "sum", "out": "s", "args": ["e"]},
        {"op": "backward", "args": ["s"]},
    ]))
    grad = ok(client.get(f"/v1/sessions/{session}/tensors/x", params={"encoding": "base64"}))["grad"]
    assert grad["dtype"] == dtype
    got = np.frombuffer(base64.b64decode(grad["data"]), NP[dtype])
    want = np.exp(np.array([0.5, -1.0, 2.0], np.float32)).astype(NP[dtype])  # exp computed in float32, rounded
    np.testing.assert_array_equal(got, want)
    assert body["tensors"]["e"]["dtype"] == dtype


def test_seeded_half_draws_over_http_are_torchs_numbers(client, session):
    """randn/normal_ of float16/bfloat16 around torch's block kernel (16 values on) and past it, and rand, over
    HTTP: the values of the committed fixture of torch's draws (tests/fixtures/torch_random_half.json)."""
    import json

    from tests.engine.random_cases import HALF_FIXTURE, digest

    rows = {(r["seed"], r["case"]): r["r"] for r in json.loads(HALF_FIXTURE.read_text())["cases"]}
    bad = []
    for dtype in HALF:
        for case, op in ((f"randn[{n},{dtype}]", {"op": "randn", "args": [n], "kwargs": {"dtype": dtype}})
                         for n in (15, 16, 17, 40, 1000)):
            ok(run(client, session, [{"op": "manual_seed", "args": [0]}, {**op, "out": "r"}]))
            got = ok(client.get(f"/v1/sessions/{session}/tensors/r", params={"encoding": "base64"}))["data"]
            values = np.frombuffer(base64.b64decode(got["data"]), NP[dtype]).reshape(got["shape"])
            if digest(values) != rows[(0, case)]:
                bad.append(case)
    assert not bad
