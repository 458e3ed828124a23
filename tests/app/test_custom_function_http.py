"""Custom autograd Functions over HTTP: ``autograd_function`` definitions and ``apply`` in op lists, the node's
torch name in tensor views and the graph, torch's errors as problem responses, all or nothing."""

from __future__ import annotations

import numpy as np

from tests.app.conftest import assert_problem, ok, run

X = [0.5, -1.0, 2.0]

#: torch's custom-Function example shape: y = exp(x), saving its output; the backward is grad * y
MY_EXP = {"op": "autograd_function", "out": "MyExp", "kwargs": {
    "name": "MyExp", "inputs": ["x"], "ops": [{"op": "exp", "args": ["x"], "out": "y"}], "outputs": ["y"],
    "saved": ["y"],
    "backward": [{"saved": ["y"], "grads": ["g"], "ops": [{"op": "mul", "args": ["g", "y"], "out": "gx"}],
                  "outputs": ["gx"]}]}}


def setup(x=X):
    return [{"op": "tensor", "args": [x], "kwargs": {"dtype": "float64", "requires_grad": True}, "out": "x"}, MY_EXP]


def test_apply_and_backward_in_one_request(client, session):
    body = ok(run(client, session, [*setup(), {"op": "apply", "args": ["MyExp", "x"], "out": "y"},
                                    {"op": "sum", "args": ["y"], "out": "s"}, {"op": "backward", "args": ["s"]}],
                  **{"return": ["y", "x"]}))
    assert body["tensors"]["y"]["grad_fn"] == "MyExpBackward"
    np.testing.assert_allclose(body["tensors"]["y"]["data"], np.exp(X))
    np.testing.assert_allclose(body["tensors"]["x"]["grad"], np.exp(X))
    graph = client.get(f"/v1/sessions/{session}/graph", params={"root": "y"}).json()
    names = {n["name"] for n in graph["nodes"]}
    assert {"MyExpBackward", "AccumulateGrad"} <= names
    (node,) = [n for n in graph["nodes"] if n["name"] == "MyExpBackward"]
    assert [(s["name"], s["kind"], s["freed"]) for s in node["saved"]] == [("_saved_saved0", "tensor", True)]


def test_the_definition_lives_in_the_session_and_a_second_backward_fails_as_torchs(client, session):
    ok(run(client, session, setup()))
    ok(run(client, session, [{"op": "apply", "args": ["MyExp", "x"], "out": "y"},
                             {"op": "sum", "args": ["y"], "out": "s"}, {"op": "backward", "args": ["s"]}]))
    problem = assert_problem(run(client, session, [{"op": "backward", "args": ["s"]}]), 409, "graph_freed")
    assert problem["detail"].startswith("Trying to backward through the graph a second time")
    assert problem["op_index"] == 0


def test_a_modified_saved_output_is_torchs_version_error_and_nothing_is_applied(client, session):
    problem = assert_problem(run(client, session, [*setup(), {"op": "apply", "args": ["MyExp", "x"], "out": "y"},
                                                   {"op": "mul_", "args": ["y", 2.0]},
                                                   {"op": "sum", "args": ["y"], "out": "s"},
                                                   {"op": "backward", "args": ["s"]}]), 409, "version_mismatch")
    assert "which is output 0 of MyExp, is at version 1; expected version 0 instead" in problem["detail"]
    assert problem["op_index"] == 5
    assert client.get(f"/v1/sessions/{session}").json()["tensors"] == {}


def test_a_backward_returning_too_few_gradients_is_torchs_error(client, session):
    bad = {"op": "autograd_function", "out": "Bad", "kwargs": {
        "name": "Bad", "inputs": ["x", None], "ops": [{"op": "mul", "args": ["x", 2.0], "out": "y"}],
        "outputs": ["y"], "backward": [{"grads": ["g"], "ops": [], "outputs": ["g"]}]}}
    problem = assert_problem(run(client, session, [*setup(), bad,
                                                   {"op": "apply", "args": ["Bad", "x", 2.0], "out": "y"},
                                                   {"op": "sum", "args": ["y"], "out": "s"},
                                                   {"op": "backward", "args": ["s"]}]), 422, "invalid_gradient")
    assert problem["detail"] == "function BadBackward returned an incorrect number of gradients (expected 2, got 1)"
    assert problem["exception"] == "RuntimeError"


def test_a_bad_definition_is_a_problem_not_a_500(client, session):
    problem = assert_problem(run(client, session, [{"op": "autograd_function", "out": "F",
                                                    "kwargs": {"name": "F", "inputs": "x"}}]), 422)
    assert problem["code"] == "invalid_argument"
    problem = assert_problem(run(client, session, [{"op": "apply", "args": ["F", "x"], "out": "y"}]), 404)
    assert problem["detail"] == "autograd function 'F' is not defined"
