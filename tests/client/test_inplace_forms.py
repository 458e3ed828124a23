"""The in-place forms declared from their op (``sin_``, ``round_``, ``remainder_`` and ``%=``, ``cumsum_``,
``tril_``, ``addmm_``, ``arcsin_``, ``divide_`` ...) through gradserve.torch against a live server: every case of
``tests/engine/test_inplace_forms_torch.py`` gives torch's recorded outcome (values within the kernels' ulps, the
rest exact: dtype, grad_fn, version, the leaf's gradient, torch's refusals)."""

from __future__ import annotations

import json

import gradserve.torch as torch
from tests.engine.test_inplace_forms_torch import FIXTURE, check, run_case

RECORDED = json.loads(FIXTURE.read_text())["cases"]


def test_inplace_forms_through_the_client_give_torchs_outcome(ctx):
    wrong = check(lambda k: run_case(k, torch), RECORDED)  # (x.arctan2_(0.7)'s message names arctan2_ too)
    assert not wrong, "\n".join(f"{k}\n  client: {g}\n  torch:  {w}" for k, (g, w) in list(wrong.items())[:20])


def test_the_forms_are_methods_with_torchs_names(ctx):
    x = torch.tensor([[0.5, -0.25], [1.5, 2.0]])
    for name in ("sin_", "arcsin_", "absolute_", "negative_", "divide_", "true_divide_", "multiply_", "subtract_",
                 "remainder_", "cumsum_", "tril_", "addmm_", "baddbmm_", "nan_to_num_", "xlogy_", "hypot_"):
        assert callable(getattr(x, name)), name
