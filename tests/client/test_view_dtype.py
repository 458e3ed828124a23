"""``Tensor.view(dtype)`` through gradserve.torch against a real server: the cases of
``tests/engine/view_dtype_cases.py`` (every dtype pair from a contiguous source, each layout rule on a few pairs,
the autograd facts, writes through the result) give torch's recorded outcome (``tests/fixtures/view_dtype.json``),
and the client knows the result's dtype, shape and autograd facts at the line, before any request."""

from __future__ import annotations

import json

import pytest

import gradserve.torch as torch
from tests.engine.test_view_dtype_torch import CASES, FIXTURE, run_case, torch_bytes

RECORDED = json.loads(FIXTURE.read_text())["cases"]
_LAYOUT_PAIRS = {"float32->float16", "float32->float64", "int8->int32", "bfloat16->bool", "int64->uint8"}


def _chosen(key: str) -> bool:
    kind, name, src, dst = CASES[key]
    return kind != "layout" or name == "contiguous" or f"{src}->{dst}" in _LAYOUT_PAIRS


def _client_layout(r) -> dict:
    return {"bytes": torch_bytes(r, torch)}


def test_view_dtype_cases_through_the_client_give_torchs_outcome(ctx):
    wrong = {}
    keys = [k for k in CASES if _chosen(k)]
    for key in keys:
        got = run_case(key, torch, _client_layout, "\ntorch.sync()")  # (lazy: an error comes at the sync)
        want = {k: v for k, v in RECORDED[key].items() if k != "stride"}
        if got != want:
            wrong[key] = (got, want)
    assert len(keys) > 300 and not wrong, "\n".join(f"{k}\n  client: {g}\n  torch:  {w}" for k, (g, w) in
                                                    list(wrong.items())[:20])


def test_the_client_knows_a_dtype_views_facts_at_the_line(ctx):
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = x * 2
    ctx.flush()
    for src, target, shape in ((x, torch.float16, (2, 4)), (y, torch.float64, (2, 1)), (y, torch.int32, (2, 2)),
                               (x, torch.uint8, (2, 8))):
        r = src.view(target)
        assert r.dtype is target and r._shape == shape
        assert r.requires_grad is False and r.is_leaf is True and r.grad_fn is None
    assert len(ctx.recorder().pending) == 4  # all known without a request: the four views are still unsent
    assert x.view(dtype=torch.float32).requires_grad is False and x.view(2, 2).requires_grad is True
    with pytest.raises(TypeError, match=r"got \(torch.dtype, int\)"):
        x.view(torch.int16, 2)
