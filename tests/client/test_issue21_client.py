"""Issue 21 in the client: ``p, t = fwAD.unpack_dual(y)`` gives the primal (no tangent: its repr has none and
its own unpack has no tangent) and the tangent, also when a value is read inside the level; and torch's
messages for ``rand()`` and an overflowing ``expand`` reach the user's line."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve.torch as torch
from gradserve.torch.autograd import forward_ad as fwAD


def test_unpack_dual_tuple_is_primal_and_tangent_when_read_inside_the_level(ctx):
    x = torch.tensor([1.0, 2.0])
    with fwAD.dual_level():
        y = fwAD.make_dual(x, torch.ones(2)) * 3
        p, t = fwAD.unpack_dual(y)
        assert repr(p) == "tensor([3., 6.])"  # a read inside the level: no tangent= shown, as torch
        np.testing.assert_array_equal(t.numpy(), [3.0, 3.0])
        q = p * 2  # ops of the primal carry no tangent either
        assert repr(q) == "tensor([ 6., 12.])"
        assert repr(fwAD.unpack_dual(y).primal) == "tensor([3., 6.])"


def test_rand_without_size_and_overflowing_expand_raise_torchs_errors(ctx):
    with pytest.raises(TypeError, match=r"^rand\(\) received an invalid combination of arguments - got \(\), but "):
        torch.rand().item()
    with pytest.raises(RuntimeError, match="^numel: integer multiplication overflow\n"):
        torch.zeros(1, 1).expand(2 ** 31, 2 ** 32).sum().item()


def test_factories_take_size_by_keyword_as_torch(ctx):
    """torch.zeros(size=(2, 3)) (and ones, empty, rand, randn, full): torch's parameter is named size."""
    assert torch.zeros(size=(2, 3)).shape == (2, 3)
    assert torch.ones(size=[2], dtype=torch.float64).tolist() == [1.0, 1.0]
    assert torch.empty(size=(0,)).shape == (0,)
    assert torch.rand(size=(2,)).shape == (2,) and torch.randn(size=(1, 2)).shape == (1, 2)
    assert torch.full(size=(2,), fill_value=3.0).tolist() == [3.0, 3.0]
    with pytest.raises(TypeError, match=r"^zeros\(\) got multiple values for argument 'size'"):
        torch.zeros(2, size=(2,)).item()
    with pytest.raises(TypeError, match=r"^zeros\(\): argument 'size' must be tuple of ints, not int"):
        torch.zeros(size=2).item()
