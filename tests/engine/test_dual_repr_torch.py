"""A dual tensor's repr inside a dual level, against torch's (skipped without torch): ``tangent=`` is the last
suffix, the tangent printed with its own repr (its dtype and grad_fn too), a 0-d one as its item."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gradserve_server.engine.torch_compat import torch as etorch  # noqa: E402

CASES = [
    "fw.make_dual(t.tensor([1.0, 2.0]), t.tensor([3.0, 4.0]))",
    "fw.make_dual(t.tensor([1.0, 2.0]), t.tensor([3.0, 4.0])) * 2",
    "fw.make_dual(t.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=t.float64, requires_grad=True), "
    "t.ones(2, 2, dtype=t.float64))",
    "fw.make_dual(t.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=t.float64, requires_grad=True), "
    "t.ones(2, 2, dtype=t.float64)).exp()",
    "fw.make_dual(t.tensor(2.0), t.tensor(5.0))",
    "fw.make_dual(t.tensor(2.0, dtype=t.float64), t.tensor(0.1, dtype=t.float64)).sin()",
    "fw.make_dual(t.arange(30.0), t.ones(30))",
    "fw.make_dual(t.tensor([1e-8, 1.0]), t.tensor([1e5, 2.0]))",
    "fw.make_dual(t.tensor([[1.0, 2.0]]), t.tensor([[3.0, 4.0]]))[0]",
    "t.tensor([1.0, 2.0])",
]


def _repr(mod, expr: str) -> str:
    fw = mod.autograd.forward_ad
    with fw.dual_level():
        inside = repr(eval(expr, {"t": mod, "fw": fw}))  # noqa: S307 - fixed expressions above
    return inside


@pytest.mark.parametrize("expr", CASES)
def test_dual_repr_matches_torch(expr):
    assert _repr(etorch, expr) == _repr(torch, expr)


def test_no_tangent_after_the_level():
    fw = etorch.autograd.forward_ad
    with fw.dual_level():
        x = fw.make_dual(etorch.tensor([1.0]), etorch.tensor([2.0]))
    assert repr(x) == "tensor([1.])"
