"""Custom autograd Functions in the engine (``autograd_function`` / ``apply``, engine/custom_function.py): one
``<Name>Backward`` node with real saved slots, the backward body as its VJP, torch's errors."""

from __future__ import annotations

import numpy as np
import pytest

from gradserve_server.engine.errors import EngineError, GraphFreedError, VersionMismatchError
from gradserve_server.engine.program import State, run_program
from gradserve_server.engine.serialize import dumps, loads


def lit(name, value, requires_grad=False):
    kw = {"dtype": "float64"}
    if requires_grad:
        kw["requires_grad"] = True
    return {"op": "tensor", "args": [value], "kwargs": kw, "out": name}


def define(out, name, inputs, ops, outputs, saved=(), backward_ops=(), backward_outputs=(), **extra):
    """A definition whose backward body reads the saved tensors as s0, s1... and the gradients as g0, g1..."""
    body = {"saved": [f"s{i}" for i in range(len(saved))], "grads": [f"g{i}" for i in range(len(outputs))],
            "ops": list(backward_ops), "outputs": list(backward_outputs)}
    kwargs = {"name": name, "inputs": inputs, "ops": ops, "outputs": outputs, "saved": list(saved),
              "backward": [body], **extra}
    return {"op": "autograd_function", "out": out, "kwargs": kwargs}


MY_EXP = define("MyExp", "MyExp", ["x"], [{"op": "exp", "args": ["x"], "out": "y"}], ["y"], saved=["y"],
                backward_ops=[{"op": "mul", "args": ["g0", "s0"], "out": "gx"}], backward_outputs=["gx"])
#: x ** 3 * k, k a number argument; a differentiable backward: 3 x^2 k g
MY_CUBE = define("MyCube", "MyCube", ["x", None], [{"op": "pow", "args": ["x", 3], "out": "c"},
                                                  {"op": "mul", "args": ["c", 2.0], "out": "y"}], ["y"], saved=["x"],
                 backward_ops=[{"op": "pow", "args": ["s0", 2], "out": "x2"},
                               {"op": "mul", "args": ["x2", 6.0], "out": "d"},
                               {"op": "mul", "args": ["d", "g0"], "out": "gx"}], backward_outputs=["gx", None])


def run(state, ops, **kw):
    return run_program(state, ops, **kw)


def test_apply_records_one_node_named_after_the_class_and_backward_runs_the_body():
    st = State()
    run(st, [lit("x", [0.5, -1.0, 2.0], True), MY_EXP, {"op": "apply", "args": ["MyExp", "x"], "out": "y"},
             {"op": "sum", "args": ["y"], "out": "s"}, {"op": "backward", "args": ["s"]}])
    y, x = st.tensors["y"], st.tensors["x"]
    assert y.grad_fn.name == "MyExpBackward" and y.grad_fn.next_functions[0][0].name == "AccumulateGrad"
    np.testing.assert_allclose(y.data, np.exp([0.5, -1.0, 2.0]))
    np.testing.assert_allclose(x.grad.data, np.exp([0.5, -1.0, 2.0]))
    # the saved output slot was freed by the backward: a second one fails as torch's does
    assert not y.grad_fn.holds_saved_tensors()
    with pytest.raises(GraphFreedError, match="Trying to backward through the graph a second time"):
        run(st, [{"op": "backward", "args": ["s"]}])


def test_the_forward_body_runs_with_grad_off_and_binds_nothing_but_the_outputs():
    st = State()
    run(st, [lit("x", [1.0, 2.0], True), MY_CUBE, {"op": "apply", "args": ["MyCube", "x", 2.0], "out": "y"}])
    assert set(st.tensors) == {"x", "y"}
    assert st.tensors["y"].grad_fn.next_functions == ((st.tensors["x"]._accumulator, 0), (None, 0))
    run(st, [lit("z", [1.0, 2.0]), {"op": "apply", "args": ["MyCube", "z", 2.0], "out": "w"}])
    assert st.tensors["w"].grad_fn is None and not st.tensors["w"].requires_grad
    run(st, [{"op": "apply", "args": ["MyCube", "x", 2.0], "out": "v", "no_grad": True}])
    assert st.tensors["v"].grad_fn is None


def test_a_saved_tensor_modified_in_place_fails_the_backward_with_torchs_message():
    st = State()
    with pytest.raises(VersionMismatchError, match=r"which is output 0 of MyExp, is at version 1; expected version "
                                                   r"0 instead"):
        run(st, [lit("x", [0.5, 1.0], True), MY_EXP, {"op": "apply", "args": ["MyExp", "x"], "out": "y"},
                 {"op": "mul_", "args": ["y", 2.0]}, {"op": "sum", "args": ["y"], "out": "s"},
                 {"op": "backward", "args": ["s"]}])
    assert st.tensors == {}  # all or nothing


def test_double_backward_through_a_differentiable_backward_body():
    st = State()
    run(st, [lit("x", [0.5, -1.0], True), MY_CUBE, {"op": "apply", "args": ["MyCube", "x", 2.0], "out": "y"},
             {"op": "sum", "args": ["y"], "out": "s"},
             {"op": "grad", "args": ["s", "x"], "kwargs": {"create_graph": True}, "out": "g"},
             {"op": "sum", "args": ["g"], "out": "gs"}, {"op": "grad", "args": ["gs", "x"], "out": "gg"}])
    x = np.array([0.5, -1.0])
    np.testing.assert_allclose(st.tensors["g"].data, 6 * x ** 2)
    assert st.tensors["g"].grad_fn.name == "MulBackward0"
    np.testing.assert_allclose(st.tensors["gg"].data, 12 * x)
    assert st.tensors["gg"].grad_fn is None


def test_once_differentiable_marks_the_gradient_with_an_error_node():
    once = define("Sq", "Sq", ["x"], [{"op": "pow", "args": ["x", 2], "out": "y"}], ["y"], saved=["x"],
                  backward_ops=[{"op": "mul", "args": ["s0", 2.0], "out": "d"},
                                {"op": "mul", "args": ["d", "g0"], "out": "gx"}], backward_outputs=["gx"],
                  once_differentiable=True)
    st = State()
    run(st, [lit("x", [1.0, 2.0], True), once, {"op": "apply", "args": ["Sq", "x"], "out": "y"},
             {"op": "pow", "args": ["y", 2], "out": "y2"}, {"op": "sum", "args": ["y2"], "out": "s"},
             {"op": "grad", "args": ["s", "x"], "kwargs": {"create_graph": True}, "out": "g"}])
    np.testing.assert_allclose(st.tensors["g"].data, [4.0, 32.0])
    assert st.tensors["g"].grad_fn.name == "Error"
    with pytest.raises(EngineError, match="trying to differentiate twice a function that was marked with "
                                          "@once_differentiable"):
        run(st, [{"op": "sum", "args": ["g"], "out": "gs"}, {"op": "backward", "args": ["gs"]}])


@pytest.mark.parametrize(("outputs", "message"), [
    (["gx"], "function BadBackward returned an incorrect number of gradients (expected 2, got 1)"),
    (["gx", "gx"], "function BadBackward returned a gradient different than None at position 2, but the "
                   "corresponding forward input was not a Variable"),
])
def test_a_backward_returning_the_wrong_gradients_fails_with_torchs_message(outputs, message):
    bad = define("Bad", "Bad", ["x", None], [{"op": "mul", "args": ["x", 2.0], "out": "y"}], ["y"],
                 backward_ops=[{"op": "mul", "args": ["g0", 2.0], "out": "gx"}], backward_outputs=outputs)
    st = State()
    with pytest.raises(EngineError) as info:
        run(st, [lit("x", [1.0], True), bad, {"op": "apply", "args": ["Bad", "x", 2.0], "out": "y"},
                 {"op": "sum", "args": ["y"], "out": "s"}, {"op": "backward", "args": ["s"]}])
    assert str(info.value.detail if hasattr(info.value, "detail") else info.value).endswith(message)
    assert info.value.exception == "RuntimeError"


def test_a_gradient_of_the_wrong_shape_fails_with_torchs_message():
    bad = define("Bad3", "Bad3", ["x"], [{"op": "sum", "args": ["x"], "out": "y"}], ["y"],
                 backward_ops=[{"op": "ones", "args": [3], "kwargs": {"dtype": "float64"}, "out": "gx"}],
                 backward_outputs=["gx"])
    with pytest.raises(EngineError, match=r"Function Bad3Backward returned an invalid gradient at index 0 - got "
                                          r"\[3\] but expected shape compatible with \[2\]"):
        run(State(), [lit("x", [1.0, 2.0], True), bad, {"op": "apply", "args": ["Bad3", "x"], "out": "y"},
                      {"op": "backward", "args": ["y"]}])


def test_non_differentiable_outputs_and_unmaterialised_gradients():
    two = define("Two", "Two", ["x"], [{"op": "mul", "args": ["x", 2.0], "out": "a"},
                                       {"op": "sort", "args": ["x"], "out": ["v", "i"]}], ["a", "i"],
                 non_differentiable=["i"], backward_ops=[{"op": "mul", "args": ["g0", 2.0], "out": "gx"}],
                 backward_outputs=["gx"])
    st = State()
    run(st, [lit("x", [3.0, 1.0], True), two, {"op": "apply", "args": ["Two", "x"], "out": ["a", "i"]},
             {"op": "sum", "args": ["a"], "out": "s"}, {"op": "backward", "args": ["s"]}])
    assert st.tensors["i"].grad_fn is None and not st.tensors["i"].requires_grad
    assert st.tensors["a"].grad_fn.name == "TwoBackward"
    np.testing.assert_allclose(st.tensors["x"].grad.data, [2.0, 2.0])
    # materialize_grads=false: the body for the pattern of gradients present runs (the second output unused)
    bodies = [{"grads_present": [True, False], "saved": [], "grads": ["g0", "g1"],
               "ops": [{"op": "mul", "args": ["g0", 2.0], "out": "gx"}], "outputs": ["gx"]},
              {"grads_present": None, "saved": [], "grads": ["g0", "g1"],
               "ops": [{"op": "mul", "args": ["g0", 100.0], "out": "gx"}], "outputs": ["gx"]}]
    lazy = {"op": "autograd_function", "out": "Lazy", "kwargs": {
        "name": "Lazy", "inputs": ["x"], "ops": [{"op": "mul", "args": ["x", 2.0], "out": "a"},
                                                 {"op": "mul", "args": ["x", 3.0], "out": "b"}],
        "outputs": ["a", "b"], "materialize_grads": False, "backward": bodies}}
    st = State()
    run(st, [lit("x", [1.0], True), lazy, {"op": "apply", "args": ["Lazy", "x"], "out": ["a", "b"]},
             {"op": "sum", "args": ["a"], "out": "s"}, {"op": "backward", "args": ["s"]}])
    np.testing.assert_allclose(st.tensors["x"].grad.data, [2.0])


@pytest.mark.parametrize("kwargs", [
    {"name": "1x", "inputs": [], "ops": [], "outputs": [], "backward": [{}]},
    {"name": "F", "inputs": ["x"], "ops": [], "outputs": ["y"], "backward": []},
    {"name": "F", "inputs": ["x"], "ops": "exp", "outputs": ["y"], "backward": [{"grads": ["g"]}]},
    {"name": "F", "inputs": ["x"], "ops": [], "outputs": ["y"], "backward": [{"grads": []}]},
    {"name": "F", "inputs": ["x"], "ops": [], "outputs": ["y"], "non_differentiable": ["z"],
     "backward": [{"grads": ["g"]}]},
    {"name": "F", "inputs": ["x"], "ops": [], "outputs": ["y"], "backward": [{"grads": ["g"]}], "extra": 1},
])
def test_bad_definitions_are_refused(kwargs):
    with pytest.raises(EngineError) as info:
        run(State(), [{"op": "autograd_function", "out": "F", "kwargs": kwargs}])
    assert info.value.code == "invalid_argument"


def test_apply_of_an_unknown_function_or_with_the_wrong_arguments_fails():
    st = State()
    run(st, [lit("x", [1.0], True), MY_EXP])
    with pytest.raises(EngineError, match="autograd function 'Nope' is not defined"):
        run(st, [{"op": "apply", "args": ["Nope", "x"], "out": "y"}])
    with pytest.raises(EngineError, match=r"MyExp.apply\(\) takes 1 arguments but 2 were given"):
        run(st, [{"op": "apply", "args": ["MyExp", "x", "x"], "out": "y"}])
    with pytest.raises(EngineError, match="is not callable|is not defined"):
        run(st, [{"op": "jacobian", "args": ["MyExp", "x"], "out": "J"}])


def test_a_session_with_a_definition_and_a_custom_node_is_stored_and_restored():
    st = State()
    run(st, [lit("x", [0.5, 1.5], True), MY_CUBE, {"op": "apply", "args": ["MyCube", "x", 2.0], "out": "y"}])
    back = loads(dumps(st))
    assert back.tensors["y"].grad_fn.name == "MyCubeBackward"
    run(back, [{"op": "sum", "args": ["y"], "out": "s"}, {"op": "backward", "args": ["s"]},
               {"op": "apply", "args": ["MyCube", "x", 2.0], "out": "y2"}])
    np.testing.assert_allclose(back.tensors["x"].grad.data, 6 * np.array([0.5, 1.5]) ** 2)
    assert back.tensors["y2"].grad_fn.name == "MyCubeBackward"


def test_forward_mode_through_a_function_without_jvp_raises_torchs_error():
    with pytest.raises(EngineError, match="You must implement the jvp function for custom autograd.Function") as info:
        run(State(), [lit("x", [1.0]), lit("t", [1.0]), MY_EXP, {"op": "enter_dual_level"},
                      {"op": "make_dual", "args": ["x", "t"], "out": "d"},
                      {"op": "apply", "args": ["MyExp", "d"], "out": "y"}, {"op": "exit_dual_level"}])
    assert info.value.exception == "NotImplementedError"


def test_mark_dirty_gives_the_input_itself_the_node_and_refuses_a_leaf_that_requires_grad():
    double = define("Double", "Double", ["x"], [{"op": "mul_", "args": ["x", 2.0]}], ["x"],
                    backward_ops=[{"op": "mul", "args": ["g0", 2.0], "out": "gx"}], backward_outputs=["gx"],
                    dirty=["x"])
    st = State()
    run(st, [lit("a", [1.0, 3.0], True), {"op": "mul", "args": ["a", 1.0], "out": "y"}, double,
             {"op": "apply", "args": ["Double", "y"], "out": "r"}, {"op": "sum", "args": ["r"], "out": "s"},
             {"op": "backward", "args": ["s"]}])
    assert st.tensors["r"] is st.tensors["y"] and st.tensors["y"]._vc[0] == 2
    assert st.tensors["y"].grad_fn.name == "DoubleBackward"
    np.testing.assert_allclose(st.tensors["y"].data, [2.0, 6.0])
    np.testing.assert_allclose(st.tensors["a"].grad.data, [2.0, 2.0])
    with pytest.raises(EngineError, match="a leaf Variable that requires grad has been used in an in-place "
                                          "operation."):
        run(st, [{"op": "apply", "args": ["Double", "a"], "out": "r2"}])
    np.testing.assert_allclose(st.tensors["a"].data, [1.0, 3.0])  # rolled back with the rest


def test_retain_graph_keeps_the_saved_slots_for_a_second_backward():
    st = State()
    run(st, [lit("x", [0.5, 2.0], True), MY_EXP, {"op": "apply", "args": ["MyExp", "x"], "out": "y"},
             {"op": "sum", "args": ["y"], "out": "s"},
             {"op": "backward", "args": ["s"], "kwargs": {"retain_graph": True}},
             {"op": "backward", "args": ["s"]}])
    np.testing.assert_allclose(st.tensors["x"].grad.data, 2 * np.exp([0.5, 2.0]))
    assert not st.tensors["y"].grad_fn.holds_saved_tensors()
