"""The engine's side of issue 25's last at-the-line differences: the facts the client decides at the line are the
engine's too (torch 2.13's, written in): floor_divide's NotImplemented node, float_power and float_power_, the
one-argument where, an int out of range in an index with tensors, and which of a dimension and a dtype is
refused first."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve_server.engine as E
from gradserve_server.engine.errors import EngineError
from gradserve_server.engine.registry import OPS, F


def _refusal(fn, *args, **kwargs) -> tuple[str, str]:
    with pytest.raises(EngineError) as info:
        fn(*args, **kwargs)
    return info.value.exception, info.value.message


def test_floor_divide_of_a_tensor_that_requires_grad_gives_a_node_whose_backward_is_not_implemented():
    x = E.tensor([1.5, 2.5, -3.5], requires_grad=True)
    y = F.floor_divide(x, 2)
    assert (y.requires_grad, y.is_leaf, y.grad_fn.name) == (True, False, "NotImplemented")
    assert y.data.tolist() == [0.0, 1.0, -2.0]
    assert _refusal(F.sum(y).backward) == ("RuntimeError", "derivative for aten::floor_divide is not implemented")
    i = F.floor_divide(E.tensor([3, 4]), 2)
    assert (i.requires_grad, i.data.dtype) == (False, np.int64)


def test_float_power_computes_in_float64_after_converting_its_tensors():
    x = E.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    y = F.float_power(x, 2)
    assert y.data.dtype == np.float64 and y.data.tolist() == [1.0, 4.0]
    assert y.grad_fn.name == "PowBackward0"
    assert [e[0].name for e in y.grad_fn.next_functions if e[0] is not None] == ["ToCopyBackward0"]
    assert F.float_power(2, x).grad_fn.name == "PowBackward2"
    assert F.float_power(E.tensor([1, 2]), 2.5).data.dtype == np.float64


@pytest.mark.parametrize(("dtype", "name"), [(np.float32, "Float"), (np.int64, "Long"), (np.bool_, "Bool")])
def test_float_power_in_place_refuses_a_base_that_is_not_float64_before_a_leafs_error(dtype, name):
    x = E.tensor(np.ones(2, dtype), requires_grad=dtype == np.float32)
    assert _refusal(F.float_power_, x, 2) == (
        "RuntimeError", f"the base given to float_power_ has dtype {name} but the operation's result requires dtype "
                        "Double")
    leaf = E.tensor(np.ones(2), requires_grad=True)
    assert _refusal(F.float_power_, leaf, 2)[1] == "a leaf Variable that requires grad is being used in an in-place " \
                                                   "operation."
    d = E.tensor([1.0, 2.0], dtype="float64")
    assert F.float_power_(d, E.tensor([2, 3])) is d and d.data.tolist() == [1.0, 8.0]
    assert "float_power_" not in OPS["pow"].aliases


def test_where_of_a_condition_alone_is_nonzero_as_a_tuple():
    rows, cols = F.where(E.tensor([[1.0, 0.0], [0.0, 2.0]]))
    assert rows.data.tolist() == [0, 1] and cols.data.tolist() == [0, 1] and rows.data.dtype == np.int64
    assert F.where(E.tensor([True, False]), 1.0, 2.0).data.tolist() == [1.0, 2.0]


#: torch 2.13's messages: the index's place (every item counting one) as the dimension
MIXED = [((E.tensor([0, 1]), 7), "index 7 is out of bounds for dimension 1 with size 4"),
         ((7, E.tensor([0, 1])), "index 7 is out of bounds for dimension 0 with size 3"),
         (([0, 1], 7), "index 7 is out of bounds for dimension 1 with size 4"),
         ((E.tensor([0]), Ellipsis, 9), "index 9 is out of bounds for dimension 2 with size 6"),
         ((None, E.tensor([0]), 9), "index 9 is out of bounds for dimension 2 with size 4"),
         ((E.tensor(np.ones((3, 4), bool)), 9), "index 9 is out of bounds for dimension 1 with size 5"),
         ((Ellipsis, 1, 9), "index 9 is out of bounds for dimension 2 with size 6"),
         ((E.tensor([10]), 9), "index 9 is out of bounds for dimension 1 with size 4")]


@pytest.mark.parametrize(("index", "message"), MIXED)
def test_an_int_out_of_range_in_an_index_says_torchs_words(index, message):
    x = E.tensor(np.zeros((3, 4, 5, 6)))
    assert _refusal(F.getitem, x, index) == ("IndexError", message)
    assert _refusal(F.setitem, x, index, 1.0) == ("IndexError", message)


@pytest.mark.parametrize(("call", "want"), [
    (lambda: F.var(E.tensor([1, 2]), dim=3), "std and var only support floating point and complex dtypes"),
    (lambda: F.std(E.tensor([1, 2]), dim=3), "std and var only support floating point and complex dtypes"),
    (lambda: F.index_select(E.tensor(np.zeros((3, 4))), 5, E.tensor([0.0])),
     "Dimension out of range (expected to be in range of [-2, 1], but got 5)"),
    (lambda: F.gather(E.tensor(np.zeros((3, 4))), 5, E.tensor([[0.0]])),
     "Dimension out of range (expected to be in range of [-2, 1], but got 5)"),
    (lambda: F.topk(E.tensor([True, False]), 1, dim=3),
     "Dimension out of range (expected to be in range of [-1, 0], but got 3)"),
    (lambda: F.logcumsumexp(E.tensor([1, 2]), dim=3),
     "Dimension out of range (expected to be in range of [-1, 0], but got 3)"),
])
def test_a_dimension_and_a_dtype_are_refused_in_torchs_order(call, want):
    assert _refusal(call)[1] == want


def _strides(t) -> tuple:
    return tuple(st // t.data.itemsize for st in t.data.strides)


@pytest.mark.parametrize(("name", "call"), [
    ("softmax", lambda x: F.softmax(x, 0)), ("log_softmax", lambda x: F.log_softmax(x, 1)),
    ("cumsum", lambda x: F.cumsum(x, 0)), ("cumprod", lambda x: F.cumprod(x, 1)),
    ("logcumsumexp", lambda x: F.logcumsumexp(x, 0)), ("cat", lambda x: F.cat([x, x], 0)),
    ("sum", lambda x: F.sum(F.unsqueeze(x, 0), [0], keepdim=False))])
def test_results_of_a_transposed_tensor_are_row_major_as_torchs(name, call):
    """torch 2.13 allocates these row-major whatever the input's layout (numpy kept the input's): a view of the
    result that torch allows is allowed here."""
    x = F.t(E.tensor(np.arange(12.0).reshape(3, 4)))
    out = call(x)
    assert out.data.flags.c_contiguous, name
    assert F.view(out, (-1,)).data.shape == (out.data.size,)


def test_cat_of_channels_last_inputs_is_channels_last_as_torchs():
    x = F.permute(E.tensor(np.ones((2, 4, 5, 3))), [0, 3, 1, 2])  # (2, 3, 4, 5), channels innermost
    out = F.cat([x, x], 0)
    assert _strides(out) == (60, 1, 15, 3)  # torch: (60, 1, 15, 3)
    assert F.view(F.permute(out, [0, 2, 3, 1]), (-1,)).data.shape == (240,)
    assert _strides(F.cat([x, E.tensor(np.ones((2, 3, 4, 5)))], 1)) == (120, 20, 5, 1)


@pytest.mark.parametrize(("index", "bad"), [
    (np.array([[0, 3], [-9, 1]]), 3), (np.array([3, -9]), 3), (np.array([-9, 3]), -9),
    (np.array([[-2, -1, 0], [1, 2, 3]]).T, -2)])  # (a transposed index: its memory order, as torch's kernel)
def test_an_index_tensor_out_of_range_names_the_first_bad_value_as_torch_meets_it(index, bad):
    x = E.tensor(np.zeros((1, 4)))
    message = f"index {bad} is out of bounds for dimension 0 with size 1"
    assert _refusal(F.getitem, x, E.tensor(index)) == ("IndexError", message)


def test_an_index_tensor_into_an_empty_dimension_says_torchs_words():
    message = "index is out of bounds for dimension with size 0"
    assert _refusal(F.getitem, E.tensor(np.zeros((2, 0))), (slice(None), E.tensor(np.array([0])))) == \
        ("IndexError", message)
    assert _refusal(F.getitem, E.tensor(np.zeros(0)), E.tensor(np.array([-1]))) == ("IndexError", message)
