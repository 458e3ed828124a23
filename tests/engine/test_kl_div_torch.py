"""F.kl_div against real PyTorch (skipped without torch), with test_new_ops_torch.py's comparison: values, dtypes,
the grad_fn nodes of torch's composite, gradients, second derivatives, torch's warning for 'mean' and its errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402

from gradserve_server.engine.torch_compat import F as EF  # noqa: E402
from gradserve_server.engine.torch_compat import torch as etorch  # noqa: E402

from .test_issue24_ops_torch import _error  # noqa: E402
from .test_new_ops_torch import _namespace, _second_order, compare_with_torch  # noqa: E402

# a: any values as log-probabilities; p: positive targets; z has a zero target (xlogy's 0 * log 0 = 0)
EXPRESSIONS = [
    f"F.kl_div(a, {target}, reduction={red!r}{lt})"
    for target, lt in (("p", ""), ("z.expand(3, 4)", ""), ("b", ", log_target=True"))
    for red in ("mean", "batchmean", "sum", "none")
] + ["F.kl_div(a, p)", "F.kl_div(v, p[0, :3], reduction='batchmean')", "F.kl_div(a, z, reduction='sum')",
     "F.kl_div(a[0, 0], p[0, 0], reduction='batchmean')", "F.kl_div(a.float(), p, reduction='sum')"]


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_kl_div_matches_torch(expr):
    compare_with_torch(expr)


@pytest.mark.parametrize("leaf, expr", [("a", "F.kl_div(a, p, reduction='batchmean') * a.sum()"),
                                        ("p", "F.kl_div(a, p, reduction='sum') ** 2"),
                                        ("b", "F.kl_div(a, b, reduction='none', log_target=True) ** 2")])
def test_kl_div_second_derivatives_match_torch(leaf, expr):
    ref = _second_order(_namespace(torch, TF, 1), leaf, expr)
    got = _second_order(_namespace(etorch, EF, 1), leaf, expr)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("expr", ["F.kl_div(a, p, reduction='foo')", "F.kl_div(cls, p[0, :3])",
                                  "F.kl_div(a, cls)", "F.kl_div(a, p[:2])", "F.kl_div(a, a > 0)"])
def test_kl_div_bad_calls_fail_as_torch(expr):
    ref, got = _error(torch, TF, expr), _error(etorch, EF, expr)
    assert ref is not None and got is not None and got[1] == ref[1]  # (the class over HTTP: test_kl_div_http)


@pytest.mark.parametrize("reduction, warns", [("mean", True), ("batchmean", False), ("sum", False)])
def test_kl_div_warns_for_mean_as_torch(reduction, warns):
    seen = []
    for mod, functional in ((torch, TF), (etorch, EF)):
        ns = _namespace(mod, functional, 0)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            functional.kl_div(ns["a"], ns["p"], reduction=reduction)
        seen.append([str(x.message) for x in w if x.category is UserWarning])
    assert seen[0] == seen[1] and bool(seen[0]) is warns
