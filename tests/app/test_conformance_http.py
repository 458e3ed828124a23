"""The op-level conformance cases that have a program form, through the real HTTP API: torch's refusals are
4xx problems carrying torch's exception type and message (never a 500), and the session is unchanged;
torch's results come back with its dtype, shape and values. Expectations are the ones recorded from torch 2.13
in ``tests/fixtures/conformance_ops.json`` (proved against live torch by tests/engine/test_conformance_ops.py).
"""

from __future__ import annotations

import json
import math

import pytest

from tests.app.conftest import assert_problem, ok, run
from tests.engine.conformance_cases import CASES
from tests.engine.test_conformance_ops import FIXTURE, same

RECORDED = json.loads(FIXTURE.read_text())
PROGRAM_CASES = sorted(n for n, c in CASES.items() if "program" in c)


def _json_safe(v):
    """JSON has no NaN or infinities: the API takes them as the strings "NaN", "Infinity", "-Infinity"."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, list):
        return [_json_safe(x) for x in v]
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    return v


def _from_json(v):
    if isinstance(v, str) and v in ("NaN", "Infinity", "-Infinity"):
        return float(v.replace("Infinity", "inf"))
    if isinstance(v, list):
        return [_from_json(x) for x in v]
    return v


def _state(client, session) -> dict:
    view = ok(client.get(f"/v1/sessions/{session}"))
    return {k: v for k, v in view.items() if k not in ("last_used_at", "expires_at")}


def test_the_sample_covers_errors_and_values():
    kinds = {"error" if "error" in RECORDED[n] else "value" for n in PROGRAM_CASES}
    assert kinds == {"error", "value"} and len(PROGRAM_CASES) >= 30


@pytest.mark.parametrize("name", PROGRAM_CASES)
def test_program_over_http_matches_torch(client, session, name):
    case = CASES[name]
    expect = RECORDED[name]
    before = _state(client, session)
    response = run(client, session, _json_safe(case["program"]))
    if "error" in expect:
        assert 400 <= response.status_code < 500, response.text
        body = assert_problem(response, response.status_code)
        assert body["exception"] == expect["error"]["type"], body
        assert body["detail"] == expect["error"]["message"], body
        assert body["op_index"] == len(case["program"]) - 1  # the failing op is the last one
        assert _state(client, session) == before  # nothing applied
        return
    body = ok(response)
    value = expect["value"][0] if isinstance(expect["value"], list) else expect["value"]
    result = case.get("result", "r")
    if result == "r":
        view = body["tensors"]["r"]
    else:
        base = result.removesuffix(".grad")
        view = ok(client.get(f"/v1/sessions/{session}/tensors/{base}.grad"))
    got = {"dtype": view["dtype"], "shape": view["shape"], "values": _from_json(view["data"]),
           "grad_fn": view.get("grad_fn")}
    assert same(got, value), f"{name}\n  http:  {got}\n  torch: {value}"
