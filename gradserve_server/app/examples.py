"""The tutorial examples, selectable in Swagger UI, each with the outcome it documents.

``expect`` is what tests/app/test_examples.py checks against the running app; ``description`` says the
same thing in words.

Every example survives a JSON client that cannot tell ``2.0`` from ``2`` (a browser re-serialises
``2.0`` as ``2``, and JSON integers make int64 tensors, as ``torch.tensor(2)`` does): each ``tensor`` op
says ``"dtype": "float32"``. Every ``/ops`` and ``/eval`` example builds everything it uses, so it gives
its documented outcome on a fresh session, pressed once or twice. The convenience endpoints
(``/backward``, ``/grad``, ``/zero_grad``) only name tensors: their examples say which ``/ops`` example
to run first in the same session (``setup``).
"""

from __future__ import annotations

from typing import Any


def _t(name: str, value: Any, requires_grad: bool = True) -> dict:
    """A float32 tensor op whatever the JSON writer does with ``2.0``."""
    kwargs = {"dtype": "float32", "requires_grad": True} if requires_grad else {"dtype": "float32"}
    return {"op": "tensor", "out": name, "args": [value], "kwargs": kwargs}


LINEAR_FORWARD = [_t("x", 2.0), _t("w", 3.0), _t("b", 1.0),
                  {"op": "mul", "out": "wx", "args": ["w", "x"]},
                  {"op": "add", "out": "y", "args": ["wx", "b"]}]

SGD_SETUP = [_t("w", 0.5), _t("b", 0.1), _t("x", [1.0, 2.0, 3.0], False), _t("y", [2.0, 4.0, 6.0], False)]


def sgd_epoch(i: int) -> list[dict]:
    """One epoch of manual SGD (lr 0.01) on mse loss; the loss is kept as ``loss_<i>``."""
    return [
        {"op": "mul", "out": "wx", "args": ["w", "x"]},
        {"op": "add", "out": "pred", "args": ["wx", "b"]},
        {"op": "sub", "out": "err", "args": ["pred", "y"]},
        {"op": "pow", "out": "sq", "args": ["err", 2]},
        {"op": "mean", "out": "loss", "args": ["sq"]},
        {"op": "detach", "out": f"loss_{i}", "args": ["loss"]},
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
        "`s = (x**2).sum()` for x = [1, 2]; `backward(s, retain_graph=True)` then `backward(s)`: "
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
        "`y = x**3` at x=2: `grad(y, x, create_graph=True)` gives dy = 12 (itself differentiable, "
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
    "integer_data_refused": _example(
        "Integer data cannot require grad (what JSON's 2 means, and the fix)",
        "`[1, 2]` is JSON integers: an int64 tensor, as `torch.tensor([1, 2])` is, and torch refuses "
        "`requires_grad` on it: 422 `requires_grad`, RuntimeError \"Only Tensors of floating point and complex "
        "dtype can require gradients\", op_index 0. The problem's `hint` gives the fixes: write floats "
        "(`1.0`; a browser may still write `1`) or pass `\"dtype\": \"float32\"`, as every other example does.",
        {"ops": [{"op": "tensor", "out": "x", "args": [[1, 2]], "kwargs": {"requires_grad": True}}]},
        {"status": 422, "code": "requires_grad", "op_index": 0, "exception": "RuntimeError",
         "detail": "Only Tensors of floating point and complex dtype can require gradients",
         "hint_contains": ['"dtype": "float32"', "int64"]},
    ),
    "linear_forward": _example(
        "y = w*x + b, forward only (run it before the /backward and /grad examples)",
        "x=2, w=3, b=1: y = 7 with grad_fn `AddBackward0`; no backward yet, so every `.grad` is null and y's "
        "graph is alive: `POST /backward` with `{\"tensor\": \"y\"}` or `POST /grad` can use it once "
        "(a second backward through it needs `retain_graph`).",
        {"ops": LINEAR_FORWARD},
        {"status": 200, "tensors": {"y": {"data": 7.0, "grad_fn": "AddBackward0", "is_leaf": False},
                                    "x": {"grad": None}, "w": {"grad": None}, "b": {"grad": None}}},
    ),
    "sgd": _example(
        "Manual SGD: three epochs of a linear fit",
        "w = 0.5, b = 0.1 (requiring grad), x = [1, 2, 3], y = [2, 4, 6]. Each epoch: forward, mse loss, "
        "backward, then under no_grad `w -= 0.01 * w.grad` with the in-place `sub_`, and `zero_grad`; each "
        "epoch's loss is kept (detached) as `loss_1`, `loss_2`, `loss_3`: 9.91, 7.8452, 6.2131. Afterwards "
        "w = 0.8646253 and b = 0.2549326, still leaves (grad_fn null) at version 3 (three in-place updates). "
        "A request can also run one epoch's ops several times with `repeat` and `record` (for parameters "
        "an earlier request created).",
        {"ops": [*SGD_SETUP, *sgd_epoch(1), *sgd_epoch(2), *sgd_epoch(3)]},
        {"status": 200,
         "tensors": {"loss_1": {"data": 9.91}, "loss_2": {"data": 7.8452}, "loss_3": {"data": 6.2131},
                     "w": {"data": 0.8646253347396851, "is_leaf": True, "grad_fn": None, "version": 3},
                     "b": {"data": 0.25493255257606506, "version": 3}}},
    ),
    "custom_function": _example(
        "A custom autograd.Function",
        "`class MyCube(torch.autograd.Function)`: forward saves x and returns x**3, backward returns "
        "`grad * 3 * x**2`. `autograd_function` defines it (the forward body, its outputs, the saved names and "
        "the backward body over the saved tensors and the output gradient), `apply` runs it: y = 8 at x = 2, "
        "with grad_fn `MyCubeBackward`; backward runs the backward body, so x.grad = 12.",
        {"ops": [_t("x", 2.0),
                 {"op": "autograd_function", "out": "MyCube", "kwargs": {
                     "name": "MyCube", "inputs": ["u"], "outputs": ["c"], "saved": ["u"],
                     "ops": [{"op": "pow", "out": "c", "args": ["u", 3]}],
                     "backward": [{"saved": ["s"], "grads": ["g"], "outputs": ["gu"], "ops": [
                         {"op": "pow", "out": "s2", "args": ["s", 2]},
                         {"op": "mul", "out": "d", "args": ["s2", 3]},
                         {"op": "mul", "out": "gu", "args": ["d", "g"]}]}]}},
                 {"op": "apply", "out": "y", "args": ["MyCube", "x"]},
                 {"op": "backward", "args": ["y"]}]},
        {"status": 200, "tensors": {"y": {"data": 8.0, "grad_fn": "MyCubeBackward"}, "x": {"grad": 12.0}}},
    ),
}

EVAL_EXAMPLES: dict[str, dict] = {
    "linear": _example(
        "y = w*x + b, returning y and the gradients",
        "A throw-away session: y = 7, x.grad = 3, w.grad = 2, b.grad = 1. Each value comes once, in "
        "`tensors`; the `autograd` report names where each gradient is (`contribution: \"x.grad\"`) "
        "instead of repeating it.",
        {"ops": [*LINEAR_FORWARD, {"op": "backward", "args": ["y"]}],
         "return": ["y", "x.grad", "w.grad", "b.grad"]},
        {"status": 200, "tensors": {"y": {"data": 7.0}, "x.grad": {"data": 3.0}, "w.grad": {"data": 2.0},
                                    "b.grad": {"data": 1.0}},
         "autograd": [{"x": {"contribution": "x.grad", "grad_accumulations": 1},
                       "w": {"contribution": "w.grad", "grad_accumulations": 1}}]},
    ),
    "second_derivative": _example(
        "A second derivative with create_graph, returning only the two derivatives",
        "`y = x**3` at x=2: `grad(y, x, create_graph=True)` bound to `dy` = `3*x**2` = 12, then `grad(dy, x)` "
        "bound to `d2y` = 6x = 12. Only `dy` and `d2y` are returned; the report's contributions are those "
        "names.",
        {"ops": [_t("x", 2.0), {"op": "pow", "out": "y", "args": ["x", 3]},
                 {"op": "grad", "out": "dy", "args": ["y", "x"], "kwargs": {"create_graph": True}},
                 {"op": "grad", "out": "d2y", "args": ["dy", "x"]}],
         "return": ["dy", "d2y"]},
        {"status": 200, "tensors": {"dy": {"data": 12.0, "grad_fn": "MulBackward0"},
                                    "d2y": {"data": 12.0, "requires_grad": False}},
         "autograd": [{"x": {"contribution": "dy"}}, {"x": {"contribution": "d2y"}}]},
    ),
}

# The convenience endpoints act on a session holding the forward pass of y = w*x + b (the /ops example
# `linear_forward`) or, for zero_grad, its gradients (the /ops example `linear`).
BACKWARD_EXAMPLES: dict[str, dict] = {
    "scalar": _example(
        "backward(y)", "Run the `/ops` example `linear_forward` first in this session (y = w*x + b, not yet "
        "backpropagated): x.grad = 3, w.grad = 2, b.grad = 1. y's graph is then freed: another backward "
        "through it needs `linear_forward` again (or `retain_graph: true` the first time).",
        {"tensor": "y"},
        {"status": 200, "tensors": {"x": {"grad": 3.0}, "w": {"grad": 2.0}, "b": {"grad": 1.0}}},
        setup="linear_forward"),
    "inputs": _example(
        "backward(y, inputs=[w]) accumulates only into w",
        "Run the `/ops` example `linear_forward` first in this session: w.grad = 2; x and b keep grad null.",
        {"tensor": "y", "inputs": ["w"]},
        {"status": 200, "tensors": {"w": {"grad": 2.0}}, "absent": ["x", "b"]},
        setup="linear_forward"),
}

GRAD_EXAMPLES: dict[str, dict] = {
    "dy_dw": _example(
        "grad(y, [w, b]) without touching .grad",
        "Run the `/ops` example `linear_forward` first in this session: dw = 2 and db = 1 are bound to `dw`, "
        "`db`; w.grad stays null.",
        {"outputs": "y", "inputs": ["w", "b"], "out": ["dw", "db"]},
        {"status": 200, "tensors": {"dw": {"data": 2.0}, "db": {"data": 1.0}}},
        setup="linear_forward"),
}

ZERO_GRAD_EXAMPLES: dict[str, dict] = {
    "set_to_none": _example(
        "zero_grad() (set_to_none=True, torch's default)",
        "Run the `/ops` example `linear` first in this session (w.grad = 2): w.grad becomes null.",
        {"tensors": ["w"]},
        {"status": 200, "tensors": {"w": {"grad": None}}}, setup="linear"),
    "zeros": _example(
        "zero_grad(set_to_none=False)",
        "Run the `/ops` example `linear` first in this session (w.grad = 2): w.grad becomes 0 (kept, "
        "zeroed).",
        {"tensors": ["w"], "set_to_none": False},
        {"status": 200, "tensors": {"w": {"grad": 0.0}}}, setup="linear"),
}

#: the /ops examples the convenience endpoints' examples name as their set-up
SETUPS = {key: OPS_EXAMPLES[key]["value"] for key in ("linear_forward", "linear")}


def openapi_examples(examples: dict[str, dict]) -> dict[str, dict]:
    """The OpenAPI form (summary, description, value): the expectations stay out of the document."""
    return {key: {"summary": ex["summary"], "description": ex["description"], "value": ex["value"]}
            for key, ex in examples.items()}
