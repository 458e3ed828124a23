"""Forward mode over HTTP: enter_dual_level / make_dual / unpack_dual / exit_dual_level in an op list
(/ops and /eval), forward-over-reverse in one request, the refused unbalanced level, and the op catalog's
forward_ad flags."""

from __future__ import annotations

import numpy as np

from tests.app.conftest import assert_problem, ok, run, tensor

SETUP = [tensor("x", [0.5, -1.0, 2.0]), tensor("v", [1.0, 0.5, -2.0], requires_grad=False)]


def _dual(*body_ops):
    return [{"op": "enter_dual_level"}, {"op": "make_dual", "args": ["x", "v"], "out": "d"}, *body_ops,
            {"op": "exit_dual_level"}]


def test_jvp_through_ops_in_a_session(client, session):
    ok(run(client, session, SETUP))
    body = ok(run(client, session, _dual({"op": "tanh", "args": ["d"], "out": "y"},
                                         {"op": "unpack_dual", "args": ["y"], "out": ["p", "t"]})))
    x, v = np.array([0.5, -1.0, 2.0]), np.array([1.0, 0.5, -2.0])
    np.testing.assert_allclose(body["tensors"]["t"]["data"], (1 - np.tanh(x) ** 2) * v, rtol=1e-6)
    np.testing.assert_allclose(body["tensors"]["p"]["data"], np.tanh(x), rtol=1e-6)
    # the level is gone: a later request sees y without tangent, and unpack_dual outside a level is (y, None)
    later = ok(run(client, session, [{"op": "unpack_dual", "args": ["y"], "out": ["p2", "t2"]}]))
    assert "t2" not in later["tensors"] and later["ops"][0]["bound"] == ["p2"]


def test_forward_over_reverse_in_one_eval(client):
    ops = [*SETUP, *_dual({"op": "mul", "args": ["d", "d"], "out": "sq"},
                          {"op": "sum", "args": ["sq"], "out": "y"},
                          {"op": "grad", "args": ["y", "x"], "kwargs": {"create_graph": True}, "out": "g"},
                          {"op": "unpack_dual", "args": ["g"], "out": ["gp", "hv"]})]
    body = ok(client.post("/v1/eval", json={"ops": ops, "return": ["gp", "hv"]}))
    assert body["tensors"]["gp"]["data"] == [1.0, -2.0, 4.0]      # 2x
    assert body["tensors"]["hv"]["data"] == [2.0, 1.0, -4.0]      # H v = 2v


def test_an_unexited_level_is_refused_and_changes_nothing(client, session):
    ok(run(client, session, SETUP))
    body = assert_problem(run(client, session, [{"op": "enter_dual_level"},
                                                {"op": "make_dual", "args": ["x", "v"], "out": "d"}]), 422)
    assert body["code"] == "unbalanced_dual_level" and body["op_index"] == 0
    assert "d" not in ok(client.get(f"/v1/sessions/{session}/tensors"))["tensors"]
    # nothing was left open: the next request can enter a level again
    ok(run(client, session, _dual()))


def test_forward_ad_errors_are_torchs(client, session):
    ok(run(client, session, SETUP))
    body = assert_problem(run(client, session, [{"op": "make_dual", "args": ["x", "v"], "out": "d"}]), 422)
    assert body["detail"] == ("Trying to create a dual Tensor for forward AD but no level exists, make sure to "
                              "enter_dual_level() first.")
    body = assert_problem(run(client, session, [{"op": "enter_dual_level"}, {"op": "enter_dual_level"}]), 422)
    assert body["detail"] == "Nested forward mode AD is not supported at the moment" and body["op_index"] == 1
    ok(run(client, session, [tensor("w", [1.0, 2.0])]))
    body = assert_problem(run(client, session, _dual({"op": "make_dual", "args": ["x", "w"]})), 422)
    assert body["detail"].startswith("Trying to set a forward gradient that has a different size")
    body = assert_problem(run(client, session, [{"op": "make_dual", "args": ["x"]}]), 422)
    assert body["exception"] == "TypeError"


def test_inplace_on_a_stored_tensor_inside_a_level_is_undone_with_a_failed_program(client, session):
    ok(run(client, session, [*SETUP, tensor("z", [0.0, 0.0, 0.0], requires_grad=False)]))
    assert_problem(run(client, session, _dual({"op": "add_", "args": ["z", "d"]}, {"op": "nope"})), 422, "unknown_op")
    z = ok(client.get(f"/v1/sessions/{session}/tensors/z"))
    assert z["data"] == [0.0, 0.0, 0.0]
    body = ok(run(client, session, _dual({"op": "add_", "args": ["z", "d"]},
                                         {"op": "unpack_dual", "args": ["z"], "out": ["zp", "zt"]})))
    assert body["tensors"]["zt"]["data"] == [1.0, 0.5, -2.0]


def test_catalog_says_which_ops_have_forward_formulas(client):
    ops = {op["name"]: op for op in ok(client.get("/v1/ops"))["ops"]}
    assert ops["mul"]["forward_ad"] is True and ops["mul"]["grad_fns_without_forward_ad"] == []
    assert ops["softmax"]["forward_ad"] is True and ops["argmax"]["forward_ad"] is False
    for name in ("enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual"):
        assert ops[name]["family"] == "autograd"
    assert [a["name"] for a in ops["make_dual"]["arguments"]] == ["tensor", "tangent", "level"]
    # every differentiable op has forward formulas but where torch has none: remainder(Number, Tensor)'s
    # NotImplemented node and the fused attention kernel
    no_formula = {"NotImplemented", "ScaledDotProductFlashAttentionForCpuBackward0"}
    assert all(op["forward_ad"] or set(op["grad_fns_without_forward_ad"]) <= no_formula
               for op in ops.values() if op["differentiable"] and op["grad_fns"])
    assert ops["remainder"]["grad_fns_without_forward_ad"] == ["NotImplemented"]
