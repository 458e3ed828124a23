"""``Tensor.view(dtype)`` over HTTP: the bits reinterpreted (float16 1.5 read as int16 is 15872, as torch 2.13
gives), storage and version counter shared with the source across requests, torch's refusal as a problem with
nothing applied, and a replayed plan answering what the cold engine does (the engine-level checks against torch
over every dtype pair are in tests/engine/test_view_dtype_torch.py)."""

from __future__ import annotations

import base64

import ml_dtypes
import numpy as np

from .conftest import assert_problem, make_client, ok, run
from .test_plans import metric, planning


def test_view_as_another_dtype_reinterprets_the_bits_and_never_requires_grad(client, session):
    body = ok(run(client, session, [
        {"op": "tensor", "out": "a", "args": [[1.5, 2.0]], "kwargs": {"dtype": "float16", "requires_grad": True}},
        {"op": "view", "out": "b", "args": ["a", "int16"]},
        {"op": "view", "out": "c", "args": ["a"], "kwargs": {"dtype": "torch.float32"}},
        {"op": "view", "out": "d", "args": ["a", "float16"]}]))
    b, c, d = (body["tensors"][k] for k in "bcd")
    assert b["dtype"] == "int16" and b["data"] == [15872, 16384] and b["shape"] == [2]
    assert c["dtype"] == "float32" and c["shape"] == [1]
    assert np.array([1.5, 2.0], np.float16).view(np.float32)[0] == np.float32(c["data"][0])
    for t in (b, c, d):  # torch: no grad_fn, a leaf, never requiring grad (the same dtype too)
        assert t["requires_grad"] is False and t["is_leaf"] is True and t["grad_fn"] is None


def test_writes_through_a_dtype_view_are_seen_by_its_source_in_later_requests(client, session):
    ok(run(client, session, [{"op": "tensor", "out": "a", "args": [[1.5, 2.0]], "kwargs": {"dtype": "float16"}},
                             {"op": "view", "out": "b", "args": ["a", "int16"]}]))
    body = ok(run(client, session, [{"op": "add_", "args": ["b", 1]}]))
    a, b = body["tensors"]["a"], body["tensors"]["b"]
    assert b["data"] == [15873, 16385] and a["version"] == b["version"] == 1
    want = np.array([15873, 16385], np.int16).view(np.float16)
    assert np.array(a["data"], np.float32).astype(np.float16).tolist() == want.tolist()


def test_bfloat16_bits_come_back_as_sent(client, session):
    bits = np.array([0x7FA1, 0x3F80, 0xFFB3, 0x0001], np.uint16)  # NaNs with payloads too: copies keep them
    payload = {"dtype": "bfloat16", "shape": [4], "encoding": "base64",
               "data": base64.b64encode(bits.tobytes()).decode()}
    ok(run(client, session, [{"op": "tensor", "out": "h", "args": [payload]},
                             {"op": "clone", "out": "k", "args": ["h"]},
                             {"op": "view", "out": "i", "args": ["k", "int16"]}]))
    got = ok(client.get(f"/v1/sessions/{session}/tensors/i", params={"encoding": "base64"}))["data"]
    assert got["dtype"] == "int16" and base64.b64decode(got["data"]) == bits.tobytes()
    assert np.frombuffer(bits.tobytes(), ml_dtypes.bfloat16)[1] == 1.0


def test_a_refused_dtype_view_is_torchs_problem_and_applies_nothing(client, session):
    ok(run(client, session, [{"op": "tensor", "out": "a", "args": [[1.5, 2.0]], "kwargs": {"dtype": "float16"}}]))
    problem = assert_problem(run(client, session, [{"op": "mul_", "args": ["a", 2.0]},
                                                   {"op": "view", "out": "e", "args": ["a", "float64"]}]), 422,
                             "invalid_view", "self.size(-1) must be divisible by 4 to view Half as Double (different "
                             "element sizes), but got 2")
    assert problem["op_index"] == 1 and problem["exception"] == "RuntimeError"
    a = ok(client.get(f"/v1/sessions/{session}/tensors/a"))
    assert a["data"] == [1.5, 2.0] and a["version"] == 0
    assert_problem(run(client, session, [{"op": "view", "out": "e", "args": ["a", "int16", 2]}]), 422)


def test_a_replayed_dtype_view_answers_what_the_cold_engine_does():
    ops = [{"op": "tensor", "out": "x", "args": [[[1.0, -2.0], [3.0, 0.5]]], "kwargs": {"dtype": "bfloat16"}},
           {"op": "view", "out": "i", "args": ["x", "int16"]}, {"op": "view", "out": "f", "args": ["x", "float32"]},
           {"op": "clone", "out": "k", "args": ["i"]}]
    with planning() as planned, make_client(plan_cache_entries=0) as cold:
        for _ in range(3):
            a, b = planned.post("/v1/eval", json={"ops": ops}), cold.post("/v1/eval", json={"ops": ops})
            assert a.status_code == b.status_code == 200 and a.content == b.content
        assert a.json()["tensors"]["i"]["data"] == [[16256, -16384], [16448, 16128]]
        assert metric(planned.get("/metrics").text, "gradserve_plan_hits") == 2
