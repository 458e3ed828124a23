"""A node that saves its own output (exp, tanh, sigmoid, softmax...) holds it as torch's SavedVariable does
(data and version counter, the tensor object weakly), so a dropped graph is freed by reference counting,
and the graph still works after the output tensor is gone: values, versions, errors, serialisation."""

import gc
import weakref

import numpy as np
import pytest

import gradserve_server.engine as E
from gradserve_server.engine.errors import GraphFreedError, VersionMismatchError
from gradserve_server.engine.ops import elementwise as EW
from gradserve_server.engine.ops import nn as NN
from gradserve_server.engine.ops import reduction as R


@pytest.fixture
def no_cycle_collector():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


OUTPUT_SAVERS = [EW.exp, EW.tanh, EW.sigmoid, lambda t: NN.softmax(t, 0), EW.sqrt]


@pytest.mark.parametrize("fn", OUTPUT_SAVERS)
def test_a_dropped_graph_is_freed_without_the_cycle_collector(fn, no_cycle_collector):
    x = E.tensor([0.5, 1.5, 2.0], requires_grad=True)
    y = fn(x)
    node = y.grad_fn
    assert any(getattr(v, "is_output", False) for v in node.saved.values())
    refs = weakref.ref(y), weakref.ref(node)
    del y, node
    assert refs[0]() is None and refs[1]() is None


@pytest.mark.parametrize("fn", OUTPUT_SAVERS)
def test_backward_after_the_output_tensor_is_gone(fn):
    x = E.tensor([0.5, 1.5, 2.0], requires_grad=True)
    loss = R.sum(fn(x) * E.tensor([1.0, 2.0, 3.0]))  # fn(x) itself is not held by anyone but its node
    x2 = E.tensor([0.5, 1.5, 2.0], requires_grad=True)
    y2 = fn(x2)
    loss2 = R.sum(y2 * E.tensor([1.0, 2.0, 3.0]))
    E.backward(loss)
    E.backward(loss2)
    np.testing.assert_array_equal(x.grad.data, x2.grad.data)


def test_a_live_output_is_the_saved_object_and_double_backward_goes_through_its_node():
    x = E.tensor([0.3, -0.7], requires_grad=True)
    y = EW.exp(x)
    node = y.grad_fn
    slot = node.saved["result"]
    assert slot.tensor is y
    # torch's grad_fn._saved_result is a new tensor over y's data and version counter, whose grad_fn is the node
    # (``y.grad_fn._saved_result is y`` is False in torch 2.13)
    seen = node.get_saved("result")
    assert seen is not y and seen.grad_fn is node and seen._vc is y._vc and seen.data is y.data
    del y
    again = node.get_saved("result")  # torch rebuilds the saved output: same data, this node as grad_fn
    assert again.grad_fn is node and again.output_nr == 0 and again.requires_grad and again._vc is slot._vc
    np.testing.assert_array_equal(again.data, np.exp(x.data))
    (g,) = E.grad(R.sum(again), [x], create_graph=True)
    (gg,) = E.grad(R.sum(g), [x])
    np.testing.assert_allclose(gg.data, np.exp(x.data), rtol=1e-6)


def test_version_and_freed_errors_are_unchanged_when_the_output_is_gone():
    x = E.tensor([0.3, -0.7], requires_grad=True)
    y = EW.exp(x)
    loss = R.sum(y * 2.0)
    with E.no_grad():
        y.add_(1.0)
    del y
    with pytest.raises(VersionMismatchError,
                       match=r"\[torch.FloatTensor \[2\]\], which is output 0 of Exp, is at version 1; expected"):
        E.backward(loss)
    z = EW.tanh(x)
    loss = R.sum(z)
    del z
    E.backward(loss)
    with pytest.raises(GraphFreedError):
        E.backward(loss)


def test_serialisation_keeps_a_saved_output_nobody_else_holds():
    s = E.State()
    E.run_program(s, [{"op": "tensor", "args": [[0.1, 0.2, 0.3]], "kwargs": {"requires_grad": True}, "out": "x"},
                      {"op": "exp", "args": ["x"], "out": "y"},
                      {"op": "sum", "args": ["y"], "out": "loss"},
                      {"op": "del", "args": ["y"]}])
    blob = E.dumps(s)
    assert E.dumps(E.loads(blob)) == blob
    s2 = E.loads(blob)
    E.run_program(s2, [{"op": "backward", "args": ["loss"]}])
    np.testing.assert_allclose(s2.tensors["x"].grad.data, np.exp(np.float32([0.1, 0.2, 0.3])), rtol=1e-6)
