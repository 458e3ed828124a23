"""Creation ops: dtype inference as torch's, leaves, sizes validated before allocation, torch's messages."""

from __future__ import annotations

import numpy as np
import pytest

from gradserve_server.engine.generator import Generator
from gradserve_server.engine.grad_mode import Limits, limits
from gradserve_server.engine.ops import creation as C
from gradserve_server.engine.ops import random as R
from gradserve_server.engine.tensor import Tensor, tensor

from .test_linalg import raises


def test_tensor_infers_dtypes_like_torch():
    assert C.tensor(2.0).dtype == "float32"
    assert C.tensor([1, 2]).dtype == "int64"
    assert C.tensor([1, 2.5]).dtype == "float32"
    assert C.tensor(True).dtype == "bool"
    t = C.tensor([1.0, 2.0], requires_grad=True)
    assert t.requires_grad and t.is_leaf


@pytest.mark.parametrize("fn,value", [(C.zeros, 0.0), (C.ones, 1.0)])
def test_zeros_and_ones_accept_torchs_size_forms(fn, value):
    for args in [(2, 3), ((2, 3),), ([2, 3],)]:
        t = fn(*args)
        assert t.shape == (2, 3) and t.dtype == "float32" and (t.data == value).all()
        assert t.is_leaf and not t.requires_grad
    assert fn().shape == ()
    assert fn(2, dtype="float64", requires_grad=True).requires_grad


def test_full_infers_dtype_from_fill_value():
    assert C.full((2,), 3).dtype == "int64"
    assert C.full((2,), 3.5).dtype == "float32"
    assert C.full([2], True).dtype == "bool"
    assert C.full((2,), 2.7, dtype="long").data.tolist() == [2, 2]
    assert C.full((2,), 1, dtype="float64").dtype == "float64"


def test_arange_dtype_and_values():
    assert C.arange(5).data.tolist() == [0, 1, 2, 3, 4] and C.arange(5).dtype == "int64"
    assert C.arange(0, 1, 0.25).data.tolist() == [0.0, 0.25, 0.5, 0.75]
    assert C.arange(0, 1, 0.25).dtype == "float32"
    assert C.arange(10, 0, -3).data.tolist() == [10, 7, 4, 1]
    assert C.arange(1, 2.5).data.tolist() == [1.0, 2.0]
    assert C.arange(5, 5).shape == (0,)
    assert C.arange(0, 5, 1.5, dtype="long").data.tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(C.arange(0.1, 0.5, 0.1).data,
                                  (0.1 + 0.1 * np.arange(4, dtype=np.float64)).astype(np.float32))


def test_linspace_counts_up_from_start_then_down_from_end():
    assert C.linspace(0, 1, 5).data.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert C.linspace(0, 1, 1).data.tolist() == [0.0]
    assert C.linspace(0, 1, 0).shape == (0,)
    assert C.linspace(0, 10, 4, dtype="long").data.tolist() == [0, 3, 6, 10]
    out = C.linspace(-1, 1.3, 7)
    assert out.dtype == "float32" and out.data[-1] == np.float32(1.3) and out.data[0] == -1.0


def test_eye():
    assert C.eye(2, 3).data.tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    assert C.eye(2).data.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_like_ops_take_shape_and_dtype_from_the_input_and_never_track_it():
    x = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    for t in (C.zeros_like(x), C.ones_like(x), C.full_like(x, 2.5)):
        assert t.shape == (2, 3) and t.dtype == "float32" and t.is_leaf and not t.requires_grad
    assert C.full_like(tensor([1, 2]), 2.7).data.tolist() == [2, 2]
    assert C.zeros_like(tensor([1, 2]), dtype="float32").dtype == "float32"
    assert C.ones_like(x, requires_grad=True).requires_grad


def test_rand_and_randn_are_reproducible_per_generator_seed():
    a, b = R.rand(3, 4, generator=Generator(5)), R.rand(3, 4, generator=Generator(5))
    np.testing.assert_array_equal(a.data, b.data)
    assert a.dtype == "float32" and ((a.data >= 0) & (a.data < 1)).all()
    n = R.randn(1000, generator=Generator(1), dtype="float64")
    assert n.dtype == "float64" and abs(n.data.mean()) < 0.2
    assert not np.array_equal(R.randn(5, generator=Generator(1)).data, R.randn(5, generator=Generator(2)).data)
    assert R.randn(2, requires_grad=True).requires_grad


@pytest.mark.parametrize("fn,message,exception", [
    (lambda: C.zeros(-1), "zeros: Dimension size must be non-negative.", "RuntimeError"),
    (lambda: C.ones(-1), "Trying to create tensor with negative dimension -1: [-1]", "RuntimeError"),
    (lambda: C.full((-1,), 1.0), "Trying to create tensor with negative dimension -1: [-1]", "RuntimeError"),
    (lambda: R.randn(2, -1), "Trying to create tensor with negative dimension -1: [2, -1]", "RuntimeError"),
    (lambda: C.ones(3, dtype="long", requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients", "RuntimeError"),
    (lambda: C.tensor([1, 2], requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients", "RuntimeError"),
    (lambda: C.arange(5, requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients", "RuntimeError"),
    (lambda: C.full((2,), 3, requires_grad=True),
     "Only Tensors of floating point and complex dtype can require gradients", "RuntimeError"),
    (lambda: C.full(2, 3), "full(): argument 'size' (position 1) must be tuple of ints, not int", "TypeError"),
    (lambda: C.zeros(2.5), "zeros(): argument 'size' (position 1) must be tuple of ints, not float", "TypeError"),
    (lambda: C.arange(0, 1, 0), "step must be nonzero", "RuntimeError"),
    (lambda: C.arange(0, 5, -1), "upper bound and lower bound inconsistent with step sign", "RuntimeError"),
    (lambda: C.arange(0, float("nan")), "unsupported range: 0 -> nan", "RuntimeError"),
    (lambda: C.arange(0, float("inf")), "unsupported range: 0 -> inf", "RuntimeError"),
    (lambda: C.linspace(0, 1, -1), "number of steps must be non-negative", "RuntimeError"),
    (lambda: C.eye(-1), "n must be greater or equal to 0, got -1", "RuntimeError"),
    (lambda: C.eye(2, -1), "m must be greater or equal to 0, got -1", "RuntimeError"),
    (lambda: R.rand(2, dtype="long"), "\"check_uniform_bounds\" not implemented for 'Long'", "NotImplementedError"),
    (lambda: R.randn(2, dtype="long"), "\"normal_kernel_cpu\" not implemented for 'Long'", "NotImplementedError"),
])
def test_errors_use_torchs_messages(fn, message, exception):
    with raises(message, exception):
        fn()


@pytest.mark.parametrize("fn", [lambda: C.zeros(100, 100), lambda: C.ones(1000), lambda: C.full((50, 50), 1.0),
                                lambda: C.arange(1000), lambda: C.linspace(0, 1, 1000), lambda: C.eye(100),
                                lambda: R.rand(1000), lambda: R.randn(1000),
                                lambda: C.zeros_like(Tensor(np.empty(1000, np.float32)))])
def test_element_limit_is_checked_before_allocating(fn):
    with limits(Limits(max_elements_per_tensor=100)):
        with pytest.raises(Exception) as e:
            fn()
    assert getattr(e.value, "code", None) == "limit_exceeded"


def test_creation_matches_torch_when_installed():
    torch = pytest.importorskip("torch")
    for args in [(0, 1, 0.1), (-3, 7, 2), (5,), (1.5, -2.0, -0.25)]:
        t, e = torch.arange(*args), C.arange(*args)
        np.testing.assert_array_equal(e.data, t.numpy())
        assert str(t.dtype).removeprefix("torch.") == e.dtype
    for args in [(0, 1, 11), (5, -5, 9), (-1, 1.3, 7)]:
        np.testing.assert_array_equal(C.linspace(*args).data, torch.linspace(*args).numpy())
    assert str(torch.full((2,), 3).dtype).removeprefix("torch.") == C.full((2,), 3).dtype
