"""Views as torch tracks them (gradserve_server/engine/views.py): multi-output views, views made under no_grad, history
regenerated after a base changes, in-place writes through views, memory overlap; and the fused
double-backward nodes. Torch's own outcomes for longer programs are in tests/fuzz/regressions.json."""

from __future__ import annotations

import numpy as np
import pytest

from gradserve_server.engine import State, run_program
from gradserve_server.engine.errors import EngineError


def run(ops, state=None):
    state = state or State()
    run_program(state, ops)
    return state.tensors


def T(name, data, rg=True):
    return {"op": "tensor", "out": name, "args": [data], "kwargs": {"requires_grad": True} if rg else {}}


def test_unbind_outputs_share_the_base_buffer_and_see_its_changes():
    t = run([T("x", [[1.0, 2.0], [3.0, 4.0]], rg=False), {"op": "unbind", "out": "u", "args": ["x", 1]},
             {"op": "mul_", "args": ["x", 10.0]}])
    assert t["u_0"].data.tolist() == [10.0, 30.0] and np.shares_memory(t["u_0"].data, t["x"].data)
    assert t["u_1"]._base is t["x"] and t["u_1"].version == t["x"].version == 1


@pytest.mark.parametrize("op,args,name", [("split", [1], "Split"), ("chunk", [2], "Split"),
                                          ("unbind", [], "Unbind"), ("split", [[1, 1]], "SplitWithSizes")])
def test_in_place_on_an_output_of_a_multi_view_function_is_refused_with_torchs_message(op, args, name):
    s = State()
    run([T("x", [[1.0, 2.0], [3.0, 4.0]]), {"op": "mul", "out": "y", "args": ["x", 1.0]},
         {"op": op, "out": "p", "args": ["y", *args]}], s)
    with pytest.raises(EngineError) as e:
        run_program(s, [{"op": "mul_", "args": ["p_1", 2.0]}])
    assert e.value.message.startswith(f"Output 1 of {name} is a view and is being modified inplace. This view is "
                                      "the output of a function that returns multiple views.")
    run_program(s, [{"op": "mul_", "args": ["p_1", 2.0]}], no_grad=True)  # not recorded: allowed


def test_a_view_made_under_no_grad_requires_grad_is_a_leaf_and_passes_no_gradient():
    t = run([T("x", [1.0, 2.0, 3.0]), {"op": "getitem", "out": "v", "args": ["x", "1:"], "no_grad": True},
             {"op": "mul", "out": "y", "args": ["v", 2.0]}, {"op": "sum", "out": "s", "args": ["y"]},
             {"op": "backward", "args": ["s"]}])
    assert t["v"].requires_grad and t["v"].is_leaf and t["v"].grad is None and t["x"].grad is None
    assert t["y"].grad_fn.next_functions[0] == (None, 0)


def test_views_get_as_strided_backward_after_their_base_changes_and_gradients_follow():
    t = run([T("x", [[1.0, 2.0], [3.0, 4.0]]), {"op": "mul", "out": "y", "args": ["x", 2.0]},
             {"op": "select", "out": "r", "args": ["y", 0, 1]}, {"op": "mul_", "args": ["y", 3.0]},
             {"op": "sum", "out": "s", "args": ["r"]}, {"op": "backward", "args": ["s"]}])
    assert t["r"].grad_fn.name == "AsStridedBackward0" and t["r"].data.tolist() == [18.0, 24.0]
    assert t["x"].grad.data.tolist() == [[0.0, 0.0], [6.0, 6.0]]


def test_a_value_written_into_a_view_keeps_its_gradient():
    t = run([T("v", [1.0, 2.0, 3.0], rg=False), T("w", 2.0), {"op": "setitem", "args": ["v", 1, "w"]},
             {"op": "mul", "out": "y", "args": ["v", "v"]}, {"op": "sum", "out": "s", "args": ["y"]},
             {"op": "backward", "args": ["s"]}])
    assert t["v"].grad_fn.name == "CopySlices" and t["v"].requires_grad and not t["v"].is_leaf
    assert t["w"].grad.data.tolist() == 4.0


def test_overlap_rules_of_in_place_ops():
    s = State()
    run([T("x", [1.0, 2.0, 3.0], rg=False), {"op": "expand_as", "out": "e", "args": ["x", "x"]},
         {"op": "mul_", "args": ["e", 2.0]}, {"op": "expand", "out": "b", "args": ["x", 2, 3]},
         {"op": "fill_", "args": ["b", 1.5]}], s)
    assert s.tensors["x"].data.tolist() == [1.5, 1.5, 1.5]
    for ops, msg in (([{"op": "mul_", "args": ["b", 2.0]}], "more than one element of the written-to tensor"),
                     ([{"op": "getitem", "out": "p", "args": ["x", "1:"]}, {"op": "getitem", "out": "q",
                       "args": ["x", ":2"]}, {"op": "add_", "args": ["p", "q"]}], "some elements of the input tensor")):
        with pytest.raises(EngineError, match=msg):
            run_program(s, ops)


def test_fused_double_backward_nodes_have_torchs_names_and_third_derivatives():
    t = run([T("x", [0.3, -1.2, 0.7]), {"op": "gelu", "out": "g", "args": ["x"]},
             {"op": "sum", "out": "s", "args": ["g"]},
             {"op": "grad", "out": "d1", "args": [["s"], ["x"]], "kwargs": {"create_graph": True}},
             {"op": "sum", "out": "s1", "args": ["d1"]},
             {"op": "grad", "out": "d2", "args": [["s1"], ["x"]], "kwargs": {"create_graph": True}},
             {"op": "sum", "out": "s2", "args": ["d2"]}, {"op": "grad", "out": "d3", "args": [["s2"], ["x"]]}])
    assert t["d1"].grad_fn.name == "GeluBackwardBackward0"
    x = np.array([0.3, -1.2, 0.7], dtype=np.float64)
    pdf = np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    assert np.allclose(t["d2"].data, pdf * (2 - x * x), atol=1e-5)   # d2/dx2 of x * Phi(x)
    assert np.allclose(t["d3"].data, pdf * (x ** 3 - 4 * x), atol=1e-5)
