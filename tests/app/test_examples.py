"""Every documented example, run against the app, with the outcome its description promises: sent as a
browser sends it (Swagger UI re-serialises the example through JavaScript, which writes ``2.0`` as ``2``),
on a fresh session, and pressed twice."""

from __future__ import annotations

import json
import math

import pytest

from gradserve_server.app.examples import (
    BACKWARD_EXAMPLES,
    EVAL_EXAMPLES,
    GRAD_EXAMPLES,
    OPS_EXAMPLES,
    SETUPS,
    ZERO_GRAD_EXAMPLES,
)

ENDPOINTS = [("ops", OPS_EXAMPLES), ("backward", BACKWARD_EXAMPLES), ("grad", GRAD_EXAMPLES),
             ("zero_grad", ZERO_GRAD_EXAMPLES), ("eval", EVAL_EXAMPLES)]
CASES = [(endpoint, key) for endpoint, examples in ENDPOINTS for key in examples]


def close(actual, expected) -> bool:
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(
            close(a, e) for a, e in zip(actual, expected, strict=True))
    if isinstance(expected, float) and not isinstance(actual, str) and actual is not None:
        return math.isclose(actual, expected, rel_tol=1e-4, abs_tol=1e-6)
    return actual == expected


def as_javascript_writes_it(value):
    """What ``JSON.stringify(JSON.parse(text))`` makes of a value: integral floats lose their ``.0``."""
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    if isinstance(value, list):
        return [as_javascript_writes_it(v) for v in value]
    if isinstance(value, dict):
        return {k: as_javascript_writes_it(v) for k, v in value.items()}
    return value


def browser_body(value: dict) -> bytes:
    return json.dumps(as_javascript_writes_it(value)).encode()


def test_javascript_number_formatting_is_modelled():
    assert browser_body({"args": [2.0, [1.0, 0.5], 0.01, "x", True]}) == b'{"args": [2, [1, 0.5], 0.01, "x", true]}'


def check_fields(actual: dict, expected: dict, where: str) -> None:
    for field, value in expected.items():
        assert close(actual[field], value), f"{where}.{field}: {actual[field]!r} != {value!r}"


def post(client, path: str, value: dict):
    return client.post(path, content=browser_body(value), headers={"content-type": "application/json"})


@pytest.mark.parametrize(("endpoint", "key"), CASES, ids=[f"{e}-{k}" for e, k in CASES])
def test_documented_example_has_documented_outcome(client, endpoint, key):
    """On a fresh session, pressed once and then again: the documented outcome both times."""
    example = dict(ENDPOINTS)[endpoint][key]
    session = client.post("/v1/sessions").json()["id"]
    for press in (1, 2):
        if example["setup"]:
            setup = post(client, f"/v1/sessions/{session}/ops", SETUPS[example["setup"]])
            assert setup.status_code == 200, setup.text
        path = "/v1/eval" if endpoint == "eval" else f"/v1/sessions/{session}/{endpoint}"
        check_outcome(client, session, example, post(client, path, example["value"]), f"press {press}")


def check_outcome(client, session, example, r, where):
    expect = example["expect"]
    assert r.status_code == expect["status"], f"{where}: {r.text}"
    body = r.json()
    if r.status_code >= 400:
        for field in ("code", "detail", "op_index", "exception"):
            if field in expect:
                assert body[field] == expect[field], field
        for part in expect.get("hint_contains", []):
            assert part in body["hint"], part
        if "detail_startswith" in expect:
            assert body["detail"].startswith(expect["detail_startswith"])
        before = client.get(f"/v1/sessions/{session}").json()
        assert before["tensors"] == {} or example["setup"], "a failing example must leave nothing behind"
        return
    for name, fields in expect.get("tensors", {}).items():
        check_fields(body["tensors"][name], fields, name)
    for name in expect.get("absent", []):
        assert body["tensors"].get(name, {}).get("grad") is None, name
    for i, entries in enumerate(expect.get("autograd", [])):
        got = {e["name"]: e for e in body["autograd"][i]["entries"]}
        for name, fields in entries.items():
            check_fields(got[name], fields, f"autograd[{i}].{name}")
    for name, values in expect.get("records", {}).items():
        assert close(body["records"][name], values), (name, body["records"][name])


#: every example but the one that shows the refusal of integer data
TYPED = [(e, k) for e, k in CASES if dict(ENDPOINTS)[e][k]["expect"].get("code") != "requires_grad"]


@pytest.mark.parametrize(("endpoint", "key"), TYPED, ids=[f"{e}-{k}" for e, k in TYPED])
def test_every_tensor_op_of_an_example_says_its_dtype(endpoint, key):
    """What JSON cannot carry (2.0 vs 2) is said explicitly: every tensor op names its dtype or has data
    that is not integral."""
    ops = list(dict(ENDPOINTS)[endpoint][key]["value"].get("ops", []))
    for op in ops:
        if op["op"] == "tensor":
            data = as_javascript_writes_it(op["args"][0])
            assert "dtype" in op.get("kwargs", {}) or "." in json.dumps(data), op


def test_one_example_shows_the_refusal_of_integer_data():
    (refused,) = [k for e, k in CASES if (e, k) not in TYPED]
    op = OPS_EXAMPLES[refused]["value"]["ops"][0]
    assert "dtype" not in op["kwargs"] and op["kwargs"]["requires_grad"] is True
    assert as_javascript_writes_it(op["args"][0]) == op["args"][0]  # integral already: no writer changes it


def test_integer_data_with_requires_grad_says_why_and_how_to_fix(client, session):
    """torch's message stays the detail; the hint names JSON's integers and the two fixes."""
    r = client.post(f"/v1/sessions/{session}/ops", content=b'{"ops": [{"op": "tensor", "out": "x", "args": [2], '
                    b'"kwargs": {"requires_grad": true}}]}', headers={"content-type": "application/json"})
    assert r.status_code == 422
    body = r.json()
    assert body["code"] == "requires_grad" and body["exception"] == "RuntimeError"
    assert body["detail"] == "Only Tensors of floating point and complex dtype can require gradients"
    assert "int64" in body["hint"] and "torch.tensor(2)" in body["hint"]
    assert "2.0" in body["hint"] and '"dtype": "float32"' in body["hint"]
    fixed = client.post(f"/v1/sessions/{session}/ops", json={"ops": [
        {"op": "tensor", "out": "x", "args": [2], "kwargs": {"dtype": "float32", "requires_grad": True}}]})
    assert fixed.status_code == 200 and fixed.json()["tensors"]["x"]["dtype"] == "float32"


def test_other_requires_grad_problems_have_no_json_hint(client, session):
    r = client.post(f"/v1/sessions/{session}/ops", json={"ops": [
        {"op": "tensor", "out": "x", "args": [2.0], "kwargs": {"requires_grad": True}},
        {"op": "tensor", "out": "c", "args": [1.0]},
        {"op": "mul", "out": "y", "args": ["x", 2]},
        {"op": "grad", "args": ["y", "c"]}]})
    assert r.status_code == 422 and r.json()["code"] == "requires_grad"
    assert "hint" not in r.json()
