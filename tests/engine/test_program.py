"""run_program: names, tensor references, autograd actions, atomicity, warnings, limits."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve_server.engine as E
from gradserve_server.engine.errors import FREED_GRAPH, NONLEAF_GRAD_WARNING
from gradserve_server.engine.program import State, run_program


def T(name, data, **kw):
    return {"op": "tensor", "out": name, "args": [data], "kwargs": kw}


def build(state, ops, **kw):
    return run_program(state, ops, **kw)


def snapshot(state: State) -> bytes:
    return E.dumps(state)


LINEAR = [T("x", 2.0, requires_grad=True), T("w", 3.0, requires_grad=True), T("b", 1.0, requires_grad=True),
          {"op": "mul", "out": "wx", "args": ["w", "x"]}, {"op": "add", "out": "y", "args": ["wx", "b"]}]


def test_linear_example_gives_three_gradients_and_names_what_it_bound():
    s = State()
    r = build(s, LINEAR + [{"op": "backward", "args": ["y"]}])
    assert [o.bound for o in r.ops] == [["x"], ["w"], ["b"], ["wx"], ["y"], []]
    grads = {n: float(s.resolve(n + ".grad").data) for n in "xwb"}
    assert grads == {"x": 3.0, "w": 2.0, "b": 1.0}
    entries = {e.name: e for e in r.autograd[0].entries}
    assert {n: float(entries[n].contribution.data) for n in "xwb"} == grads
    assert all(entries[n].grad_accumulations == 1 for n in "xwb")
    assert s.backward_passes == 1
    assert set(r.changed) == {"x", "w", "b", "wx", "y"}


def test_two_backward_calls_accumulate_and_count_passes():
    s = State()
    build(s, LINEAR + [{"op": "backward", "args": ["y"], "kwargs": {"retain_graph": True}}])
    r = build(s, [{"op": "backward", "args": ["y"]}])
    e = {x.name: x for x in r.autograd[0].entries}["w"]
    assert float(e.contribution.data) == 2.0 and float(e.grad.data) == 4.0 and e.grad_accumulations == 2
    build(s, [{"op": "zero_grad"}])
    assert s.resolve("w.grad") is None and s.tensors["w"].grad_accumulations == 0


def test_zero_grad_set_to_none_false_keeps_zeros_and_resets_count():
    s = State()
    build(s, LINEAR + [{"op": "backward", "args": ["y"]}])
    g = s.tensors["w"].grad
    build(s, [{"op": "zero_grad", "kwargs": {"tensors": ["w"], "set_to_none": False}}])
    assert s.tensors["w"].grad is g and float(g.data) == 0.0 and s.tensors["w"].grad_accumulations == 0
    assert float(s.resolve("x.grad").data) == 3.0


def test_second_backward_without_retain_graph_fails_and_changes_nothing():
    s = State()
    build(s, [T("x", [1.0, 2.0], requires_grad=True), {"op": "mul", "out": "h", "args": ["x", 2]},
              {"op": "sum", "out": "z", "args": ["h"]}, {"op": "backward", "args": ["z"]}])
    before = snapshot(s)
    with pytest.raises(E.EngineError) as ei:
        build(s, [T("u", 1.0), {"op": "backward", "args": ["z"]}])
    err = ei.value
    assert (err.code, err.exception, err.message, err.op_index, err.op) == \
        ("graph_freed", "RuntimeError", FREED_GRAPH, 1, "backward")
    assert snapshot(s) == before and "u" not in s.tensors


def test_failing_op_rolls_back_inplace_updates_grads_and_versions():
    s = State()
    build(s, LINEAR + [{"op": "backward", "args": ["y"], "kwargs": {"retain_graph": True}}])
    before = snapshot(s)
    ops = [{"op": "backward", "args": ["y"], "kwargs": {"retain_graph": True}},
           {"op": "sub_", "args": ["w", 0.5], "no_grad": True},
           {"op": "mul_", "args": ["x", 2]}]  # a leaf requiring grad: refused
    with pytest.raises(E.EngineError) as ei:
        build(s, ops)
    assert ei.value.code == "leaf_inplace" and ei.value.op_index == 2
    assert ei.value.message == "a leaf Variable that requires grad is being used in an in-place operation."
    assert snapshot(s) == before
    assert float(s.tensors["w"].data) == 3.0 and s.tensors["w"].version == 0


def test_manual_sgd_training_loop_with_repeat_and_record_matches_torch():
    s = State()
    setup = [T("w", [0.5], requires_grad=True), T("b", [0.1], requires_grad=True),
             T("x", [1.0, 2.0, 3.0]), T("y_true", [2.0, 4.0, 6.0])]
    build(s, setup)
    step = [{"op": "mul", "out": "p", "args": ["w", "x"]}, {"op": "add", "out": "y_pred", "args": ["p", "b"]},
            {"op": "sub", "out": "d", "args": ["y_pred", "y_true"]}, {"op": "pow", "out": "sq", "args": ["d", 2]},
            {"op": "mean", "out": "loss", "args": ["sq"]}, {"op": "backward", "args": ["loss"]},
            {"op": "mul", "out": "uw", "args": ["w.grad", 0.01], "no_grad": True},
            {"op": "sub_", "args": ["w", "uw"], "no_grad": True},
            {"op": "mul", "out": "ub", "args": ["b.grad", 0.01], "no_grad": True},
            {"op": "sub_", "args": ["b", "ub"], "no_grad": True},
            {"op": "zero_grad", "kwargs": {"set_to_none": False}}]
    r = build(s, step, repeat=3, record=["loss"])
    losses = [float(t.data) for t in r.records["loss"]]
    assert losses == pytest.approx([9.91, 7.8452, 6.2131], abs=1e-4)
    assert float(s.tensors["w"].data[0]) == pytest.approx(0.8646253347396851, rel=1e-6)
    assert float(s.tensors["b"].data[0]) == pytest.approx(0.25493255257606506, rel=1e-6)
    assert s.tensors["w"].is_leaf and s.tensors["w"].version == 3
    assert s.backward_passes == 3


def test_nonleaf_grad_reference_warns_with_torch_text():
    s = State()
    build(s, LINEAR)
    r = build(s, [{"op": "add", "out": "k", "args": ["y", 1.0]}, {"op": "detach", "out": "d", "args": ["k"]}])
    assert r.warnings == []
    with pytest.raises(E.EngineError):
        build(s, [{"op": "mul", "args": ["y", "wx.grad"]}])
    r = build(s, [{"op": "retain_grad", "args": ["wx"]}, {"op": "backward", "args": ["y"]},
                  {"op": "mul", "out": "m", "args": ["y", "wx.grad"]}])
    assert r.warnings == [] and float(s.tensors["m"].data) == 7.0


def test_reading_nonleaf_grad_collects_warning():
    s = State()
    build(s, LINEAR)
    r = build(s, [{"op": "set_grad", "args": ["x", None]}, {"op": "mul", "out": "m", "args": ["y", 2.0]}])
    assert r.warnings == []
    from gradserve_server.engine.grad_mode import WarningSink
    with WarningSink() as sink:
        assert s.tensors["y"].grad is None
    assert sink.messages == [NONLEAF_GRAD_WARNING]


def test_create_graph_warning_is_given_once_per_session():
    s = State()
    build(s, [T("x", 2.0, requires_grad=True), {"op": "pow", "out": "y", "args": ["x", 3]}])
    r1 = build(s, [{"op": "backward", "args": ["y"], "kwargs": {"create_graph": True}}])
    r2 = build(s, [{"op": "backward", "args": ["y"], "kwargs": {"create_graph": True}}])
    assert len(r1.warnings) == 1 and r1.warnings[0].startswith("Using backward() with create_graph=True")
    assert r2.warnings == []
    assert s.tensors["x"].grad.grad_fn.name == "AddBackward0" and float(s.tensors["x"].grad.data) == 24.0


def test_grad_action_binds_results_and_second_derivative():
    s = State()
    build(s, [T("x", 2.0, requires_grad=True), {"op": "pow", "out": "y", "args": ["x", 3]}])
    r = build(s, [{"op": "grad", "out": ["g"], "kwargs": {"outputs": "y", "inputs": ["x"], "create_graph": True}},
                  {"op": "grad", "out": ["g2"], "kwargs": {"outputs": "g", "inputs": ["x"]}}])
    assert float(s.tensors["g"].data) == 12.0 and s.tensors["g"].grad_fn.name == "MulBackward0"
    assert float(s.tensors["g2"].data) == 12.0 and s.resolve("x.grad") is None
    assert [o.bound for o in r.ops] == [["g"], ["g2"]]


def test_multi_output_ops_bind_a_list_of_names():
    s = State()
    build(s, [T("A", [[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]], requires_grad=True),
              {"op": "max", "out": ["vals", "idx"], "args": ["A"], "kwargs": {"dim": 1}},
              {"op": "split", "out": "parts", "args": ["A", 1], "kwargs": {"dim": 1}}])
    assert s.tensors["vals"].grad_fn.name == "MaxBackward0" and s.tensors["idx"].data.tolist() == [1, 2]
    assert [k for k in s.tensors if k.startswith("parts_")] == ["parts_0", "parts_1", "parts_2"]


def test_indexing_program_syntax():
    s = State()
    build(s, [T("A", [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True),
              {"op": "getitem", "out": "col", "args": ["A", [":", 1]]},
              {"op": "getitem", "out": "rows", "args": ["A", "1:"]},
              {"op": "getitem", "out": "pick", "args": ["A", [[0, 1], [2, 0]]]},
              {"op": "gt", "out": "mask", "args": ["A", 2.5]},
              {"op": "getitem", "out": "masked", "args": ["A", "mask"]}])
    t = s.tensors
    assert t["col"].data.tolist() == [2.0, 5.0] and t["col"].grad_fn.name == "SelectBackward0"
    assert t["rows"].grad_fn.name == "SliceBackward0"
    assert t["pick"].data.tolist() == [3.0, 4.0] and t["pick"].grad_fn.name == "IndexBackward0"
    assert t["masked"].data.tolist() == [3.0, 4.0, 5.0, 6.0]


@pytest.mark.parametrize("ops,code", [
    ([{"op": "no_such_op", "args": []}], "unknown_op"),
    ([{"op": "add", "args": ["nope", 1]}], "unknown_tensor"),
    ([{"op": "add", "args": ["x", 1], "out": "bad name"}], "invalid_name"),
    ([{"op": "add", "args": ["x", 1], "out": "x.grad"}], "invalid_name"),
    ([{"op": "add", "args": ["x", 1], "kwargs": {"bogus": 1}}], "invalid_argument"),
    ([{"op": "sum", "args": ["x", 5]}], "dim_out_of_range"),
    (["not an object"], "invalid_argument"),
])
def test_invalid_programs_are_typed_errors_and_change_nothing(ops, code):
    s = State()
    build(s, [T("x", [1.0, 2.0], requires_grad=True)])
    before = snapshot(s)
    with pytest.raises(E.EngineError) as ei:
        build(s, ops)
    assert ei.value.code == code and ei.value.op_index == 0
    assert snapshot(s) == before


def test_limits_refuse_large_tensors_before_allocating():
    s = State()
    lim = E.Limits(max_elements_per_tensor=100, max_nodes=1000, max_bytes=1 << 20)
    with pytest.raises(E.EngineError) as ei:
        build(s, [{"op": "zeros", "out": "z", "args": [1000, 1000]}], limits=lim)
    assert ei.value.code == "limit_exceeded"
    build(s, [T("a", [1.0] * 10), T("b", [[1.0]] * 10)], limits=lim)
    build(s, [{"op": "add", "args": ["a", "b"]}], limits=lim)  # broadcast to 10x10: 100 elements, at the limit
    with pytest.raises(E.EngineError) as ei:
        build(s, [T("c", [[1.0]] * 20), {"op": "add", "args": ["a", "c"]}], limits=lim)
    assert ei.value.code == "limit_exceeded"
    assert "c" not in s.tensors


def test_inplace_on_view_of_nonleaf_through_program_matches_torch():
    s = State()
    build(s, [T("x", [1.0, 2.0], requires_grad=True), {"op": "mul", "out": "h", "args": ["x", 2]},
              {"op": "getitem", "out": "v", "args": ["h", 0]}, {"op": "mul_", "args": ["v", 10]},
              {"op": "sum", "out": "z", "args": ["h"]}, {"op": "backward", "args": ["z"]}])
    t = s.tensors
    assert t["h"].grad_fn.name == "CopySlices" and t["v"].grad_fn.name == "AsStridedBackward0"
    assert t["h"].data.tolist() == [20.0, 4.0] and t["x"].grad.data.tolist() == [20.0, 2.0]
    assert t["h"].version == 1 and t["v"].version == 1


def test_setitem_on_leaf_is_refused_with_view_message():
    s = State()
    build(s, [T("x", [1.0, 2.0], requires_grad=True)])
    with pytest.raises(E.EngineError) as ei:
        build(s, [{"op": "setitem", "args": ["x", 0, 5.0]}])
    assert ei.value.message == "a view of a leaf Variable that requires grad is being used in an in-place operation."
    r = build(s, [{"op": "setitem", "args": ["x", 0, 5.0], "no_grad": True}])
    assert s.tensors["x"].data.tolist() == [5.0, 2.0] and s.tensors["x"].version == 1 and r.changed == ["x"]


def test_no_grad_request_flag_makes_results_leaves():
    s = State()
    build(s, [T("x", [3.0], requires_grad=True)])
    build(s, [{"op": "pow", "out": "r", "args": ["x", 2]}], no_grad=True)
    r = s.tensors["r"]
    assert not r.requires_grad and r.is_leaf and r.grad_fn is None


def test_state_round_trip_continues_exactly():
    s = State()
    build(s, LINEAR + [{"op": "backward", "args": ["y"], "kwargs": {"retain_graph": True}},
                       {"op": "exp", "out": "e", "args": ["y"]}, {"op": "detach", "out": "ed", "args": ["e"]}])
    s2 = E.loads(E.dumps(s))
    assert E.dumps(s2) == E.dumps(s)
    for st in (s, s2):
        build(st, [{"op": "backward", "args": ["y"]}])
        assert float(st.resolve("w.grad").data) == 4.0 and st.tensors["w"].grad_accumulations == 2
        with pytest.raises(E.EngineError) as ei:
            build(st, [{"op": "backward", "args": ["y"]}])
        assert ei.value.code == "graph_freed"
        build(st, [{"op": "zero_", "args": ["ed"]}])  # shares storage and version with e
        with pytest.raises(E.EngineError) as ei:
            build(st, [{"op": "backward", "args": ["e"]}])
        assert ei.value.code == "version_mismatch" and "output 0 of Exp" in ei.value.message
    assert np.array_equal(s.tensors["e"].data, s2.tensors["e"].data)


def test_graph_export_lists_torch_names_edges_and_freed_saved_tensors():
    s = State()
    build(s, [T("x", [1.0, 2.0], requires_grad=True), {"op": "mul", "out": "h", "args": ["x", "x"]},
              {"op": "sum", "out": "z", "args": ["h"]}])
    g = E.export_graph(s, "z")
    names = [n["name"] for n in g["nodes"]]
    assert names == ["SumBackward0", "MulBackward0", "AccumulateGrad"]
    mul = g["nodes"][1]
    assert mul["tensor"] == "h" and mul["next_functions"] == [["n2", 0], ["n2", 0]]
    assert {x["name"]: x["freed"] for x in mul["saved"] if x["kind"] == "tensor"} == \
        {"_saved_self": False, "_saved_other": False}
    build(s, [{"op": "backward", "args": ["z"]}])
    g = E.export_graph(s, "z")
    assert all(x["freed"] for x in g["nodes"][1]["saved"] if x["kind"] == "tensor")
    assert "digraph" in E.to_dot(g) and E.to_mermaid(g).startswith("flowchart")


def test_mean_over_dim_0_of_a_0d_tensor_backpropagates_like_torch():
    s = State()
    build(s, [T("x", 3.0, requires_grad=True),
              {"op": "mean", "out": "m", "args": ["x", 0], "kwargs": {"keepdim": True}},
              {"op": "backward", "args": ["m"]}])
    assert s.tensors["m"].shape == () and float(s.tensors["x"].grad.data) == 1.0


def test_del_and_bind_are_part_of_the_atomic_list():
    s = State()
    build(s, LINEAR)
    build(s, [{"op": "backward", "args": ["y"]}])
    with pytest.raises(E.EngineError):
        build(s, [{"op": "bind", "args": ["x.grad"], "out": "g"}, {"op": "del", "args": ["wx", "y"]},
                  {"op": "no_such_op"}])
    assert {"wx", "y"} <= set(s.tensors) and "g" not in s.tensors
    build(s, [{"op": "bind", "args": ["x.grad"], "out": "g"}, {"op": "del", "args": ["wx", "y", "ghost"]}])
    assert s.tensors["g"] is s.tensors["x"].grad and "wx" not in s.tensors and "y" not in s.tensors


def test_bind_of_a_none_gradient_unbinds_and_returns_are_quiet():
    s = State()
    build(s, [T("x", 2.0, requires_grad=True), {"op": "mul", "out": "y", "args": ["x", 3.0]},
              {"op": "tensor", "out": "g", "args": [1.0]}])
    r = build(s, [{"op": "bind", "args": ["x.grad"], "out": "g"}], returns=("y.grad", "x.grad", "ghost"))
    assert "g" not in s.tensors and r.returned == {"y.grad": None, "x.grad": None, "ghost": None}
    assert r.warnings == []


def test_a_list_failing_after_a_backward_leaves_every_saved_tensor_as_it_was():
    """release_all journals the freed slots in one entry: an op failing after the backward restores every
    slot, an output slot whose tensor is gone (exp's result, saved by ExpBackward0) as well as an input slot."""
    s = State()
    build(s, [T("x", [1.0, 2.0], requires_grad=True), {"op": "exp", "out": "e", "args": ["x"]},
              {"op": "mul", "out": "m", "args": ["e", "x"]}, {"op": "sum", "out": "y", "args": ["m"]},
              {"op": "del", "args": ["e", "m"]}])
    before = snapshot(s)
    with pytest.raises(E.EngineError) as ei:
        build(s, [{"op": "backward", "args": ["y"]}, {"op": "exp", "out": "z", "args": ["nope"]}], limits=E.Limits())
    assert ei.value.op_index == 1
    assert snapshot(s) == before
    build(s, [{"op": "backward", "args": ["y"]}])  # the graph was not freed
    x = np.array([1.0, 2.0], np.float32)
    assert np.allclose(s.resolve("x.grad").data, np.exp(x) * x + np.exp(x))


def test_the_report_of_a_first_backward_is_a_copy_later_ops_do_not_change():
    """The first pass's .grad is its contribution (one array): the report keeps one frozen copy of it, which
    an in-place change of .grad later in the list does not reach."""
    s = State()
    r = build(s, LINEAR + [{"op": "backward", "args": ["y"], "kwargs": {"retain_graph": True}},
                           {"op": "mul_", "args": ["w.grad", 10.0]},
                           {"op": "backward", "args": ["y"]}], limits=E.Limits())
    first = {e.name: e for e in r.autograd[0].entries}
    assert float(first["w"].contribution.data) == 2.0 and float(first["w"].grad.data) == 2.0
    assert first["w"].grad.data is not s.tensors["w"]._grad.data
    second = {e.name: e for e in r.autograd[1].entries}
    assert float(second["w"].contribution.data) == 2.0 and float(second["w"].grad.data) == 22.0
    assert float(s.resolve("w.grad").data) == 22.0


@pytest.mark.parametrize("create_graph", [False, True])
def test_a_reports_grad_shows_the_grad_as_it_was_with_its_own_flags(create_graph):
    """Each entry's ``grad`` is a frozen copy of the leaf's ``.grad`` with that tensor's own requires_grad,
    grad_fn and output number (a first pass's ``.grad`` shares its contribution's array: one copy shows both
    when their flags agree; under create_graph ``.grad`` is a CopyBackwards copy of its own)."""
    s = State()
    ops = [{"op": "tensor", "args": [[1.0, 2.0]], "kwargs": {"requires_grad": True}, "out": "w"},
           {"op": "mul", "args": ["w", "w"], "out": "q"}, {"op": "sum", "args": ["q"], "out": "y"},
           {"op": "backward", "args": ["y"], "kwargs": {"create_graph": create_graph}}]
    r = build(s, ops, limits=E.Limits())
    (e,) = r.autograd[0].entries
    g = s.tensors["w"]._grad
    assert (e.grad.requires_grad, e.grad.grad_fn, e.grad.output_nr) == (g.requires_grad, g.grad_fn, g.output_nr)
    assert e.grad.requires_grad is create_graph and (e.grad.grad_fn is not None) is create_graph
    assert e.contribution.requires_grad is create_graph
    assert np.array_equal(e.grad.data, [2.0, 4.0]) and np.array_equal(e.contribution.data, [2.0, 4.0])
    assert not np.shares_memory(e.grad.data, g.data) and not np.shares_memory(e.contribution.data, g.data)


def test_a_backward_report_of_many_leaves_names_each_tensor_by_its_first_name():
    """A pass that writes many gradients names each tensor the way names_of does: its first name in the
    namespace, whatever later names (``bind``) also point at it."""
    from gradserve_server.engine.tensor import tensor
    st = State()
    st.tensors = {n: tensor(float(i + 1), requires_grad=True) for i, n in enumerate("abcdef")}
    ops = [{"op": "bind", "args": ["c"], "out": "alias"}, {"op": "stack", "args": [list("abcdef")], "out": "s"},
           {"op": "mul", "args": ["s", "s"], "out": "q"}, {"op": "sum", "args": ["q"], "out": "loss"},
           {"op": "backward", "args": ["loss"]}]
    res = run_program(st, ops)
    grads = {e.name: float(e.grad.data) for e in res.autograd[0].entries}
    assert grads == {"a": 2.0, "b": 4.0, "c": 6.0, "d": 8.0, "e": 10.0, "f": 12.0}  # "c", not "alias"


@pytest.mark.parametrize("n", [3, 6])  # the report's few- and many-tensor paths (names_of, one namespace scan)
def test_each_pass_report_is_frozen_against_every_later_in_place_change_of_the_grads(n):
    """A pass's report shows contributions and .grad as they were when it ran: later in-place changes of the
    same .grad arrays (add_ on x.grad, mul_, zero_grad(set_to_none=False), a second backward accumulating into
    it), in the same run or a later one, never reach an earlier report."""
    from gradserve_server.engine.tensor import tensor
    names = [f"p{i}" for i in range(n)]
    st = State()
    st.tensors = {nm: tensor(float(i + 1), requires_grad=True) for i, nm in enumerate(names)}
    fwd = [{"op": "stack", "args": [names], "out": "s"}, {"op": "mul", "args": ["s", "s"], "out": "q"},
           {"op": "sum", "args": ["q"], "out": "loss"}]
    bwd = {"op": "backward", "args": ["loss"], "kwargs": {"retain_graph": True}}
    ops = fwd + [bwd, {"op": "add_", "args": ["p0.grad", 100.0]}, {"op": "mul_", "args": [f"p{n - 1}.grad", 3.0]},
                 bwd, {"op": "zero_grad", "args": [names], "kwargs": {"set_to_none": False}}, bwd,
                 {"op": "add_", "args": ["p1.grad", 7.0]}]
    res = run_program(st, ops, limits=E.Limits())
    v = {nm: 2.0 * (i + 1) for i, nm in enumerate(names)}  # each pass's contribution: d(sum p^2)/dp = 2p

    def shown(rec):
        return {e.name: (float(e.contribution.data), float(e.grad.data), e.grad_accumulations) for e in rec.entries}

    first, second, third = (shown(r) for r in res.autograd)
    assert first == {nm: (v[nm], v[nm], 1) for nm in names}
    after_first = dict(v, p0=v["p0"] + 100.0, **{f"p{n - 1}": v[f"p{n - 1}"] * 3.0})
    assert second == {nm: (v[nm], after_first[nm] + v[nm], 2) for nm in names}
    assert third == {nm: (v[nm], v[nm], 1) for nm in names}  # (zero_grad restarts the count)
    assert float(st.resolve("p1.grad").data) == v["p1"] + 7.0
    # a later run accumulating into the same arrays in place leaves this run's report as it was
    grad_arrays = {nm: st.tensors[nm]._grad.data for nm in names}
    res2 = run_program(st, [bwd, {"op": "mul_", "args": ["p0.grad", -1.0]}], limits=E.Limits())
    assert all(st.tensors[nm]._grad.data is grad_arrays[nm] for nm in names)  # (accumulated in place)
    assert (shown(res.autograd[0]), shown(res.autograd[1]), shown(res.autograd[2])) == (first, second, third)
    assert shown(res2.autograd[0])["p0"] == (v["p0"], v["p0"] * 2, 2)
    assert float(st.resolve("p0.grad").data) == -v["p0"] * 2
    for rec in res.autograd + res2.autograd:  # no report shares an array with the session
        for e in rec.entries:
            assert not any(np.shares_memory(e.contribution.data, a) or np.shares_memory(e.grad.data, a)
                           for a in grad_arrays.values())


def test_a_many_tensor_report_names_by_first_name_and_skips_unnamed_tensors():
    """The report's namespace scan: a tensor bound under several names is reported under the first (in the
    namespace's order, here an alias made before the tensor's own later rebinding), and a tensor of the pass
    that no name holds any more is left out, the others all reported."""
    from gradserve_server.engine.tensor import tensor
    st = State()
    st.tensors = {n: tensor(float(i + 1), requires_grad=True) for i, n in enumerate("abcdefg")}
    ops = [{"op": "stack", "args": [list("abcdefg")], "out": "s"}, {"op": "mul", "args": ["s", "s"], "out": "q"},
           {"op": "sum", "args": ["q"], "out": "loss"}, {"op": "bind", "args": ["g"], "out": "a"},
           {"op": "del", "args": ["b"]},
           {"op": "grad", "args": ["loss", list("acdefg")], "out": ["ga", "gc", "gd", "ge", "gf", "gg"]}]
    res = run_program(st, ops)
    shown = {e.name: float(e.contribution.data) for e in res.autograd[0].entries}
    # "a" now names the tensor made as "g" (its first name in order); the old "a" is unnamed, "b" deleted
    assert list(shown) == ["a", "c", "d", "e", "f"]
    assert shown == {"a": 14.0, "c": 6.0, "d": 8.0, "e": 10.0, "f": 12.0}
