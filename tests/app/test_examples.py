"""Every documented example, run against the app, with the outcome its description promises."""

from __future__ import annotations

import math

import pytest

from app.examples import (
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


def check_fields(actual: dict, expected: dict, where: str) -> None:
    for field, value in expected.items():
        assert close(actual[field], value), f"{where}.{field}: {actual[field]!r} != {value!r}"


@pytest.mark.parametrize(("endpoint", "key"), CASES, ids=[f"{e}-{k}" for e, k in CASES])
def test_documented_example_has_documented_outcome(client, session, endpoint, key):
    example = dict(ENDPOINTS)[endpoint][key]
    if example["setup"]:
        setup = client.post(f"/v1/sessions/{session}/ops", json=SETUPS[example["setup"]])
        assert setup.status_code == 200, setup.text
    path = "/v1/eval" if endpoint == "eval" else f"/v1/sessions/{session}/{endpoint}"
    r = client.post(path, json=example["value"])
    expect = example["expect"]
    assert r.status_code == expect["status"], r.text
    body = r.json()
    if r.status_code >= 400:
        for field in ("code", "detail", "op_index", "exception"):
            if field in expect:
                assert body[field] == expect[field], field
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
