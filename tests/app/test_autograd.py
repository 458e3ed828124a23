"""The autograd endpoints: /backward, /grad, /zero_grad; state conflicts; concurrency on one session."""

from __future__ import annotations

import threading

from tests.app.conftest import assert_problem, ok, run, tensor

LINEAR = [tensor("x", 2.0), tensor("w", 3.0), tensor("b", 1.0),
          {"op": "mul", "out": "wx", "args": ["w", "x"]}, {"op": "add", "out": "y", "args": ["wx", "b"]}]


def backward(client, session, **body):
    return client.post(f"/v1/sessions/{session}/backward", json=body)


def test_backward_endpoint_equals_a_one_op_list(client, session):
    ok(run(client, session, LINEAR))
    body = ok(backward(client, session, tensor="y"))
    assert body["ops"] == [{"index": 0, "op": "backward", "bound": []}]
    assert {n: body["tensors"][n]["grad"] for n in "xwb"} == {"x": 3.0, "w": 2.0, "b": 1.0}


def test_backward_with_gradient_and_inputs(client, session):
    ok(run(client, session, [tensor("x", [1.0, 2.0]), tensor("u", [1.0, 1.0]),
                             tensor("g", [10.0, 20.0], requires_grad=False),
                             {"op": "mul", "out": "y", "args": ["x", "u"]}]))
    body = ok(backward(client, session, tensor="y", gradient="g", inputs=["x"]))
    assert body["tensors"]["x"]["grad"] == [10.0, 20.0]
    assert ok(client.get(f"/v1/sessions/{session}/tensors/u"))["grad"] is None


def test_backward_with_a_list_gradient_is_torchs_type_error(client, session):
    ok(run(client, session, [tensor("x", [1.0, 2.0]), {"op": "mul", "out": "y", "args": ["x", 2]}]))
    body = assert_problem(run(client, session, [{"op": "backward", "args": ["y"],
                                                 "kwargs": {"gradient": [1.0, 1.0]}}]), 422,
                          detail="gradients can be either Tensors or None, but got float")
    assert body["exception"] == "TypeError" and body["op_index"] == 0


def test_backward_on_vector_without_gradient_is_refused_as_torch(client, session):
    ok(run(client, session, [tensor("x", [1.0, 2.0]), {"op": "mul", "out": "y", "args": ["x", 2]}]))
    body = assert_problem(backward(client, session, tensor="y"), 422,
                          detail="grad can be implicitly created only for scalar outputs")
    assert body["exception"] == "RuntimeError" and body["op_index"] == 0 and body["op"] == "backward"


def test_second_backward_after_freed_graph_is_409_and_changes_nothing(client, session):
    ok(run(client, session, [tensor("x", [1.0, 2.0]), {"op": "pow", "out": "q", "args": ["x", 2]},
                             {"op": "sum", "out": "s", "args": ["q"]}]))
    ok(backward(client, session, tensor="s"))
    body = assert_problem(backward(client, session, tensor="s"), 409, "graph_freed")
    assert body["detail"].startswith("Trying to backward through the graph a second time")
    view = ok(client.get(f"/v1/sessions/{session}/tensors/x"))
    assert view["grad"] == [2.0, 4.0] and view["grad_accumulations"] == 1


def test_inplace_change_of_saved_output_is_409_version_mismatch(client, session):
    ok(run(client, session, [tensor("x", [1.0, 2.0]), {"op": "exp", "out": "y", "args": ["x"]},
                             {"op": "add_", "args": ["y", 1]}, {"op": "sum", "out": "s", "args": ["y"]}]))
    body = assert_problem(backward(client, session, tensor="s"), 409, "version_mismatch")
    assert "which is output 0 of Exp, is at version 1; expected version 0 instead" in body["detail"]


def test_grad_endpoint_binds_results_and_leaves_dot_grad_alone(client, session):
    ok(run(client, session, LINEAR))
    body = ok(client.post(f"/v1/sessions/{session}/grad",
                          json={"outputs": "y", "inputs": ["w", "b"], "out": ["dw", "db"]}))
    assert body["tensors"]["dw"]["data"] == 2.0 and body["tensors"]["db"]["data"] == 1.0
    assert ok(client.get(f"/v1/sessions/{session}/tensors/w"))["grad"] is None


def test_grad_of_unused_input_is_refused_as_torch(client, session):
    ok(run(client, session, [*LINEAR, tensor("u", 1.0)]))
    r = client.post(f"/v1/sessions/{session}/grad",
                    json={"outputs": "y", "inputs": ["x", "u"], "out": ["a", "b2"]})
    assert_problem(r, 422, detail="The differentiated Tensor at index 1 appears to not have been used in the "
                                  "graph. Set allow_unused=True if this is the desired behavior.")


def test_zero_grad_sets_none_by_default_and_zeros_on_request(client, session):
    ok(run(client, session, [*LINEAR, {"op": "backward", "args": ["y"], "kwargs": {"retain_graph": True}}]))
    body = ok(client.post(f"/v1/sessions/{session}/zero_grad", json={"tensors": ["x"]}))
    assert body["tensors"]["x"]["grad"] is None
    body = ok(client.post(f"/v1/sessions/{session}/zero_grad", json={"tensors": ["w"], "set_to_none": False}))
    assert body["tensors"]["w"]["grad"] == 0.0


def test_autograd_endpoint_bodies_are_validated(client, session):
    body = assert_problem(client.post(f"/v1/sessions/{session}/backward", json={"gradient": 1}), 422,
                          "validation_error")
    assert body["errors"][0]["loc"] == ["body", "tensor"]
    assert_problem(client.post(f"/v1/sessions/{session}/zero_grad", json={"set_to_none": "maybe"}), 422,
                   "validation_error")


def test_concurrent_backward_calls_on_one_session_accumulate_exactly_n_times(client, session):
    ok(run(client, session, [tensor("x", [1.0, 2.0, 3.0]), {"op": "add", "out": "h", "args": ["x", 1.0]},
                             {"op": "sum", "out": "s", "args": ["h"]}]))
    threads, per_thread = 8, 5
    failures: list[str] = []

    def worker():
        for _ in range(per_thread):
            r = backward(client, session, tensor="s")
            if r.status_code != 200:
                failures.append(r.text)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert failures == []
    n = threads * per_thread
    view = ok(client.get(f"/v1/sessions/{session}/tensors/x"))
    assert view["grad"] == [float(n)] * 3 and view["grad_accumulations"] == n
    assert ok(client.get(f"/v1/sessions/{session}"))["backward_passes"] == n
