"""The tutorial examples, selectable in Swagger UI, each with the outcome it documents.

``expect`` is what tests/app/test_examples.py checks against the running app; ``description`` says the
same thing in words. Examples that read a session's tensors name the example that sets them up (``setup``).
"""

from __future__ import annotations

from typing import Any


def _t(name: str, value: Any, requires_grad: bool = True) -> dict:
    kwargs = {"requires_grad": True} if requires_grad else {}
    return {"op": "tensor", "out": name, "args": [value], "kwargs": kwargs}


LINEAR_FORWARD = [_t("x", 2.0), _t("w", 3.0), _t("b", 1.0),
                  {"op": "mul", "out": "wx", "args": ["w", "x"]},
                  {"op": "add", "out": "y", "args": ["wx", "b"]}]

SGD_SETUP = [_t("w", 0.5), _t("b", 0.1), _t("x", [1.0, 2.0, 3.0], False), _t("y", [2.0, 4.0, 6.0], False)]

SGD_EPOCH = [
    {"op": "mul", "out": "wx", "args": ["w", "x"]},
    {"op": "add", "out": "pred", "args": ["wx", "b"]},
    {"op": "sub", "out": "err", "args": ["pred", "y"]},
    {"op": "pow", "out": "sq", "args": ["err", 2]},
    {"op": "mean", "out": "loss", "args": ["sq"]},
    {"op": "backward", "args": ["loss"]},
    {"op": "mul", "out": "w_step", "args": ["w.grad", 0.01], "no_grad": True},
    {"op": "sub_", "args": ["w", "w_step"], "no_grad": True},
    {"op": "mul", "out": "b_step", "args": ["b.grad", 0.01], "no_grad": True},
    {"op": "sub_", "args": ["b", "b_step"], "no_grad": True},
    {"op": "zero_grad", "kwargs": {"tensors": ["w", "b"]}},
]


def _example(summary: str, description: str, value: dict, expect: dict, setup: str | None = None) -> dict:
    return {"summary": summary, "description": description, "value": value, "expect": expect, "setup": setup}


OPS_EXAMPLES: dict[str, dict] = {
    "linear": _example(
        "y = w*x + b and its three gradients",
        "x=2, w=3, b=1: y = 7 (`AddBackward0`, over `MulBackward0`); after `backward(y)`: "
        "x.grad = 3 (= w), w.grad = 2 (= x), b.grad = 1.",
        {"ops": [*LINEAR_FORWARD, {"op": "backward", "args": ["y"]}]},
        {"status": 200, "tensors": {"y": {"data": 7.0, "grad_fn": "AddBackward0"},
                                    "x": {"grad": 3.0}, "w": {"grad": 2.0}, "b": {"grad": 1.0}}},
    ),
    "accumulate_and_zero": _example(
        "Gradients accumulate over two backward calls; zero_grad clears them",
        "x=2: `backward(x**2)` gives x.grad = 4, then `backward(x**3)` adds 12: x.grad = 16 after 2 "
        "accumulations (the `autograd` list shows each pass's contribution). `zero_grad` (set_to_none, "
        "torch's default) then sets x.grad to null.",
        {"ops": [_t("x", 2.0),
                 {"op": "pow", "out": "sq", "args": ["x", 2]},
                 {"op": "backward", "args": ["sq"]},
                 {"op": "pow", "out": "cube", "args": ["x", 3]},
                 {"op": "backward", "args": ["cube"]},
                 {"op": "zero_grad", "kwargs": {"tensors": ["x"]}}]},
        {"status": 200, "tensors": {"x": {"grad": None, "grad_accumulations": 0}},
         "autograd": [{"x": {"contribution": 4.0, "grad": 4.0, "grad_accumulations": 1}},
                      {"x": {"contribution": 12.0, "grad": 16.0, "grad_accumulations": 2}}]},
    ),
    "vector_backward_with_gradient": _example(
        "backward on a vector output with a gradient",
        "y = 2*x for x = [1, 2, 3]; with v = [1, 0.1, 0.01], `y.backward(gradient=v)` computes the "
        "vector-Jacobian product: x.grad = [2, 0.2, 0.02]. As in torch, the gradient is a tensor (here the "
        "name of one); a bare list is refused with torch's TypeError.",
        {"ops": [_t("x", [1.0, 2.0, 3.0]), _t("v", [1.0, 0.1, 0.01], requires_grad=False),
                 {"op": "mul", "out": "y", "args": ["x", 2]},
                 {"op": "backward", "args": ["y"], "kwargs": {"gradient": "v"}}]},
        {"status": 200, "tensors": {"x": {"grad": [2.0, 0.2, 0.02]}}},
    ),
    "vector_backward_without_gradient": _example(
        "backward on a vector output without a gradient (refused)",
        "As torch: 422 with code `runtime_error`, exception RuntimeError, detail \"grad can be implicitly "
        "created only for scalar outputs\", op_index 2. Nothing is stored.",
        {"ops": [_t("x", [1.0, 2.0, 3.0]), {"op": "mul", "out": "y", "args": ["x", 2]},
                 {"op": "backward", "args": ["y"]}]},
        {"status": 422, "detail": "grad can be implicitly created only for scalar outputs", "op_index": 2,
         "exception": "RuntimeError"},
    ),
    "retain_grad": _example(
        "retain_grad on an intermediate",
        "y = x*x, z = 3*y at x=2 with `retain_grad(y)`: after `backward(z)`, y.grad = 3 and x.grad = 12; "
        "y stays a non-leaf (`MulBackward0`) with retains_grad true.",
        {"ops": [_t("x", 2.0), {"op": "mul", "out": "y", "args": ["x", "x"]},
                 {"op": "mul", "out": "z", "args": ["y", 3]},
                 {"op": "retain_grad", "args": ["y"]},
                 {"op": "backward", "args": ["z"]}]},
        {"status": 200, "tensors": {"y": {"grad": 3.0, "is_leaf": False, "retains_grad": True},
                                    "x": {"grad": 12.0}}},
    ),
    "second_backward_with_retain_graph": _example(
        "A second backward works after retain_graph=True",
        "s = (x**2).sum() for x = [1, 2]; `backward(s, retain_graph=True)` then `backward(s)`: "
        "x.grad = [4, 8] (2 accumulations).",
        {"ops": [_t("x", [1.0, 2.0]), {"op": "pow", "out": "sq", "args": ["x", 2]},
                 {"op": "sum", "out": "s", "args": ["sq"]},
                 {"op": "backward", "args": ["s"], "kwargs": {"retain_graph": True}},
                 {"op": "backward", "args": ["s"]}]},
        {"status": 200, "tensors": {"x": {"grad": [4.0, 8.0], "grad_accumulations": 2}}},
    ),
    "second_backward_without_retain_graph": _example(
        "A second backward without retain_graph fails (graph freed)",
        "Same graph without retain_graph: PowBackward0 saved x, and the first backward freed it. "
        "409 `graph_freed` with torch's \"Trying to backward through the graph a second time...\" message "
        "at op_index 4. The request is atomic: nothing it created is kept.",
        {"ops": [_t("x", [1.0, 2.0]), {"op": "pow", "out": "sq", "args": ["x", 2]},
                 {"op": "sum", "out": "s", "args": ["sq"]},
                 {"op": "backward", "args": ["s"]},
                 {"op": "backward", "args": ["s"]}]},
        {"status": 409, "code": "graph_freed", "op_index": 4, "exception": "RuntimeError",
         "detail_startswith": "Trying to backward through the graph a second time"},
    ),
    "forward_mode": _example(
        "Forward mode: a JVP, and a Hessian-vector product by forward-over-reverse",
        "`torch.autograd.forward_ad` in one op list (a dual level cannot outlive it): y = sum(x**3) at "
        "x = [1, 2] along v = [1, 0.5] gives the JVP 3*1*1 + 3*4*0.5 = 9; the gradient g = 3x**2 = [3, 12] "
        "computed inside the level carries the tangent H v = 6 x v = [6, 6]. Outside the level nothing keeps a "
        "tangent.",
        {"ops": [_t("x", [1.0, 2.0]), _t("v", [1.0, 0.5], requires_grad=False),
                 {"op": "enter_dual_level"},
                 {"op": "make_dual", "out": "d", "args": ["x", "v"]},
                 {"op": "pow", "out": "cube", "args": ["d", 3]},
                 {"op": "sum", "out": "y", "args": ["cube"]},
                 {"op": "grad", "out": "g", "args": ["y", "x"], "kwargs": {"create_graph": True}},
                 {"op": "unpack_dual", "out": ["y_primal", "jvp"], "args": ["y"]},
                 {"op": "unpack_dual", "out": ["g_primal", "hvp"], "args": ["g"]},
                 {"op": "exit_dual_level"}]},
        {"status": 200, "tensors": {"jvp": {"data": 9.0}, "g_primal": {"data": [3.0, 12.0]},
                                    "hvp": {"data": [6.0, 6.0]}}},
    ),
    "create_graph_second_derivative": _example(
        "create_graph and a second derivative",
        "y = x**3 at x=2: `grad(y, x, create_graph=True)` gives dy = 12 (itself differentiable, "
        "`MulBackward0`), and `grad(dy, x)` gives the second derivative 6x = 12.",
        {"ops": [_t("x", 2.0), {"op": "pow", "out": "y", "args": ["x", 3]},
                 {"op": "grad", "out": "dy", "args": ["y", "x"], "kwargs": {"create_graph": True}},
                 {"op": "grad", "out": "d2y", "args": ["dy", "x"]}]},
        {"status": 200, "tensors": {"dy": {"data": 12.0, "requires_grad": True},
                                    "d2y": {"data": 12.0, "requires_grad": False}}},
    ),
    "detach_and_no_grad": _example(
        "detach and no_grad",
        "At x=2: `d = x.detach()` and `c = x*3` under no_grad are leaves that do not require grad; "
        "y = x*d then treats d as a constant, so x.grad = d = 2 (not 2x = 4).",
        {"ops": [_t("x", 2.0), {"op": "detach", "out": "d", "args": ["x"]},
                 {"op": "mul", "out": "c", "args": ["x", 3], "no_grad": True},
                 {"op": "mul", "out": "y", "args": ["x", "d"]},
                 {"op": "backward", "args": ["y"]}]},
        {"status": 200, "tensors": {"d": {"requires_grad": False, "is_leaf": True},
                                    "c": {"requires_grad": False, "is_leaf": True, "data": 6.0},
                                    "x": {"grad": 2.0}}},
    ),
    "inplace_on_leaf_refused": _example(
        "An in-place update of a leaf that requires grad is refused",
        "`x.add_(1)` outside no_grad: 409 `leaf_inplace`, RuntimeError \"a leaf Variable that requires grad "
        "is being used in an in-place operation.\" (under no_grad it is allowed: see the SGD loop).",
        {"ops": [_t("x", [1.0, 2.0]), {"op": "add_", "args": ["x", 1]}]},
        {"status": 409, "code": "leaf_inplace", "op_index": 1,
         "detail": "a leaf Variable that requires grad is being used in an in-place operation."},
    ),
    "sgd_setup": _example(
        "Manual SGD, step 1: parameters and data",
        "w = 0.5, b = 0.1 (requiring grad), x = [1, 2, 3], y = [2, 4, 6]. Run `sgd_train` next in the same "
        "session.",
        {"ops": SGD_SETUP},
        {"status": 200, "tensors": {"w": {"data": 0.5}, "b": {"data": 0.1}}},
    ),
    "sgd_train": _example(
        "Manual SGD, step 2: three epochs with repeat",
        "Forward, mse loss, backward, then under no_grad `w -= 0.01 * w.grad` with the in-place `sub_`, and "
        "`zero_grad`; `repeat: 3` runs three epochs. Records: loss 9.91, 7.8452, 6.2131; afterwards "
        "w = 0.8646253 and b = 0.2549326, still leaves (grad_fn null) at version 3. Needs `sgd_setup` first.",
        {"ops": SGD_EPOCH, "repeat": 3, "record": ["loss", "w"]},
        {"status": 200,
         "records": {"loss": [9.91, 7.8452, 6.2131]},
         "tensors": {"w": {"data": 0.8646253347396851, "is_leaf": True, "grad_fn": None, "version": 3},
                     "b": {"data": 0.25493255257606506, "version": 3}}},
        setup="sgd_setup",
    ),
}

EVAL_EXAMPLES: dict[str, dict] = {
    "linear": _example(
        "y = w*x + b, returning y and the gradients",
        "A throw-away session: y = 7, x.grad = 3, w.grad = 2, b.grad = 1.",
        {"ops": [*LINEAR_FORWARD, {"op": "backward", "args": ["y"]}],
         "return": ["y", "x.grad", "w.grad", "b.grad"]},
        {"status": 200, "tensors": {"y": {"data": 7.0}, "x.grad": {"data": 3.0}, "w.grad": {"data": 2.0},
                                    "b.grad": {"data": 1.0}}},
    ),
}

# The convenience endpoints act on a session holding the forward pass of y = w*x + b.
BACKWARD_EXAMPLES: dict[str, dict] = {
    "scalar": _example(
        "backward(y)", "On `linear_forward`: x.grad = 3, w.grad = 2, b.grad = 1.",
        {"tensor": "y"},
        {"status": 200, "tensors": {"x": {"grad": 3.0}, "w": {"grad": 2.0}, "b": {"grad": 1.0}}},
        setup="linear_forward"),
    "inputs": _example(
        "backward(y, inputs=[w]) accumulates only into w",
        "On `linear_forward`: w.grad = 2; x and b keep grad null.",
        {"tensor": "y", "inputs": ["w"]},
        {"status": 200, "tensors": {"w": {"grad": 2.0}}, "absent": ["x", "b"]},
        setup="linear_forward"),
}

GRAD_EXAMPLES: dict[str, dict] = {
    "dy_dw": _example(
        "grad(y, [w, b]) without touching .grad",
        "On `linear_forward`: dw = 2 and db = 1 are bound to `dw`, `db`; w.grad stays null.",
        {"outputs": "y", "inputs": ["w", "b"], "out": ["dw", "db"]},
        {"status": 200, "tensors": {"dw": {"data": 2.0}, "db": {"data": 1.0}}},
        setup="linear_forward"),
}

ZERO_GRAD_EXAMPLES: dict[str, dict] = {
    "set_to_none": _example(
        "zero_grad() (set_to_none=True, torch's default)",
        "After `linear` (w.grad = 2): w.grad becomes null.",
        {"tensors": ["w"]},
        {"status": 200, "tensors": {"w": {"grad": None}}}, setup="linear"),
    "zeros": _example(
        "zero_grad(set_to_none=False)",
        "After `linear`: w.grad becomes 0 (kept, zeroed).",
        {"tensors": ["w"], "set_to_none": False},
        {"status": 200, "tensors": {"w": {"grad": 0.0}}}, setup="linear"),
}

SETUPS = {
    "linear_forward": {"ops": LINEAR_FORWARD},
    "linear": OPS_EXAMPLES["linear"]["value"],
    "sgd_setup": OPS_EXAMPLES["sgd_setup"]["value"],
}


def openapi_examples(examples: dict[str, dict]) -> dict[str, dict]:
    """The OpenAPI form (summary, description, value): the expectations stay out of the document."""
    return {key: {"summary": ex["summary"], "description": ex["description"], "value": ex["value"]}
            for key, ex in examples.items()}
