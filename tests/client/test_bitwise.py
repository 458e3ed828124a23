"""``&``, ``|``, ``^``, ``~`` and ``bitwise_and/or/xor/not`` through gradserve.torch against a real server: every case
of ``tests/engine/test_bitwise_torch.py`` gives torch's recorded outcome (``tests/fixtures/bitwise.json``): the
bits of integers, not truth values; torch's refusals for floating types; reflected operands (``True & t``)."""

from __future__ import annotations

import json

import gradserve.torch as torch
from tests.engine.test_bitwise_torch import CASES, FIXTURE, run_case

RECORDED = json.loads(FIXTURE.read_text())["cases"]


def test_bitwise_cases_through_the_client_give_torchs_outcome(ctx):
    wrong = {}
    for key in CASES:
        got = run_case(key, torch, "\ntorch.sync()")  # (lazy: an error comes at the sync)
        if got != RECORDED[key]:
            wrong[key] = (got, RECORDED[key])
    assert not wrong, "\n".join(f"{k}\n  client: {g}\n  torch:  {w}" for k, (g, w) in list(wrong.items())[:20])


def test_reflected_bitwise_operands(ctx):
    i = torch.tensor([1, 6, -3])
    assert (True & i).tolist() == [1, 0, 1] and (1 | torch.tensor([True, False])).tolist() == [1, 1]
    assert (3 ^ i).dtype is torch.int64 and (3 ^ i).tolist() == [2, 5, -2]
    assert (i << 2).tolist() == [4, 24, -12] and (i >> 1).tolist() == [0, 3, -2]
