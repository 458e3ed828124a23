"""The recorder's JSON (``gradserve.http.dumps``/``loads``, ``run_ops(fast_json=True)``): orjson's where it writes
and reads what the standard library does, the standard library's otherwise (NaN refused as httpx refuses it)."""

from __future__ import annotations

import json
import math

import pytest

from gradserve import http


def _httpx_bytes(body) -> bytes:
    """What httpx sends for ``json=body``."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


@pytest.mark.parametrize("body", [
    {"ops": [{"op": "mul", "args": ["_t1", 0.1], "out": "_t2", "no_grad": True}], "return": {"_t2": "auto"}},
    {"ops": [{"op": "set_grad", "args": ["_t1", None]}], "return": {}},  # (a null: the standard library's)
    {"ops": [{"op": "tensor", "args": [[1e-7, -2.5, 3, True, "é"]], "out": "x"}]},
    {"ops": [{"op": "full", "args": [[2], 2 ** 70]}]},  # (past 64 bits: orjson refuses it)
    {"tuple": (1, 2), "nested": {"k": [[], {}]}},
])
def test_dumps_writes_what_httpx_writes(body):
    """The same JSON values (orjson writes 1e-7 where the standard library writes 1e-07)."""
    assert json.loads(http.dumps(body)) == json.loads(_httpx_bytes(body))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_float_is_refused_as_httpx_refuses_it(value):
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        http.dumps({"ops": [{"op": "mul", "args": ["_t1", value]}]})


def test_loads_reads_what_the_standard_library_reads():
    # (not an integer past 64 bits, which orjson reads as a float: the server writes its answers with orjson, which
    # refuses to write one)
    for text in (b'{"a": [1, 2.5, null, true, "\\u00e9"]}', b'[18446744073709551615, -9223372036854775808]',
                 b'[NaN, Infinity]', '{"a": 1}'.encode("utf-16")):
        got, want = http.loads(text), json.loads(text)
        assert json.dumps(got) == json.dumps(want)  # (NaN == NaN is False: compared as text)


def test_the_recorder_s_requests_go_through_it(ctx, monkeypatch):
    import gradserve.torch as torch

    seen = []
    real = http.dumps
    monkeypatch.setattr(http, "dumps", lambda body: seen.append(body) or real(body))
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    (x * float("inf")).sum().backward()  # (an infinity in an op: the wire's string, not a float)
    assert x.grad.tolist() == [math.inf, math.inf]
    assert seen or http.orjson is None
