"""torch.autograd.functional over HTTP: function definitions (kept in the session, serialised with it), every
transform against torch (when importable) or closed forms, torch's errors, grad(is_grads_batched=True) and
repeat with until."""

from __future__ import annotations

import numpy as np
import pytest

from gradserve_server.app.config import Settings
from gradserve_server.app.main import create_app
from tests.app.conftest import assert_problem, make_client, ok, run

RNG = np.random.default_rng(12)
W = RNG.standard_normal((4, 3))
B = RNG.standard_normal(4)
X0 = RNG.standard_normal(3)
Y0 = RNG.standard_normal(3)
V4 = RNG.standard_normal(4)


def lit(name, value, requires_grad=False):
    kw = {"dtype": "float64"}
    if requires_grad:
        kw["requires_grad"] = True
    return {"op": "tensor", "args": [np.asarray(value).tolist()], "kwargs": kw, "out": name}


#: f(x) = tanh(W x + b): R^3 -> R^4; g(x, y) = sum(sin(x y)) + sum(x^3): a scalar of two inputs
SETUP = [
    lit("W", W), lit("b", B), lit("x0", X0), lit("y0", Y0), lit("v4", V4),
    {"op": "function", "out": "f", "kwargs": {"inputs": ["x"], "outputs": "y", "ops": [
        {"op": "matmul", "args": ["W", "x"], "out": "h"},
        {"op": "add", "args": ["h", "b"], "out": "h2"},
        {"op": "tanh", "args": ["h2"], "out": "y"}]}},
    {"op": "function", "out": "g", "kwargs": {"inputs": ["x", "y"], "outputs": "s", "ops": [
        {"op": "mul", "args": ["x", "y"], "out": "p"},
        {"op": "sin", "args": ["p"], "out": "q"},
        {"op": "sum", "args": ["q"], "out": "s1"},
        {"op": "pow", "args": ["x", 3], "out": "c"},
        {"op": "sum", "args": ["c"], "out": "s2"},
        {"op": "add", "args": ["s1", "s2"], "out": "s"}]}},
    {"op": "function", "out": "g1", "kwargs": {"inputs": ["x"], "outputs": "s", "ops": [
        {"op": "mul", "args": ["x", "y0"], "out": "p"},
        {"op": "sin", "args": ["p"], "out": "q"},
        {"op": "sum", "args": ["q"], "out": "s1"},
        {"op": "pow", "args": ["x", 3], "out": "c"},
        {"op": "sum", "args": ["c"], "out": "s2"},
        {"op": "add", "args": ["s1", "s2"], "out": "s"}]}},
]


def f_np(x):
    return np.tanh(W @ x + B)


def jac_f(x):
    return (1 - f_np(x) ** 2)[:, None] * W


def hess_g1(x):
    return np.diag(-np.sin(x * Y0) * Y0 ** 2 + 6 * x)


def data(body, name):
    return np.asarray(body["tensors"][name]["data"])


@pytest.fixture
def fs(client, session):
    ok(run(client, session, SETUP))
    return session


@pytest.mark.parametrize("kwargs", [{}, {"vectorize": True}, {"vectorize": True, "strategy": "forward-mode"},
                                    {"create_graph": True}])
def test_jacobian_of_a_function(client, fs, kwargs):
    body = ok(run(client, fs, [{"op": "jacobian", "args": ["f", "x0"], "kwargs": kwargs, "out": "J"}]))
    np.testing.assert_allclose(data(body, "J"), jac_f(X0), rtol=1e-10, atol=1e-12)
    assert body["tensors"]["J"]["shape"] == [4, 3]
    # as in torch: create_graph differentiates a detached copy of x0 that requires grad, and keeps that graph
    assert body["tensors"]["J"]["requires_grad"] is kwargs.get("create_graph", False)


@pytest.mark.parametrize("kwargs", [{}, {"vectorize": True}, {"vectorize": True, "outer_jacobian_strategy":
                                                               "forward-mode"}])
def test_hessian_single_and_tuple_inputs(client, fs, kwargs):
    body = ok(run(client, fs, [{"op": "hessian", "args": ["g1", "x0"], "kwargs": kwargs, "out": "H"},
                               {"op": "hessian", "args": ["g", ["x0", "y0"]], "kwargs": kwargs, "out": "Hb"}]))
    np.testing.assert_allclose(data(body, "H"), hess_g1(X0), rtol=1e-10, atol=1e-12)
    # a tuple of two inputs: four blocks, flattened row by row onto Hb_0..Hb_3
    assert [o["bound"] for o in body["ops"]][1] == ["Hb_0", "Hb_1", "Hb_2", "Hb_3"]
    np.testing.assert_allclose(data(body, "Hb_0"), hess_g1(X0), rtol=1e-10, atol=1e-12)
    xy = X0 * Y0
    np.testing.assert_allclose(data(body, "Hb_1"), np.diag(np.cos(xy) - xy * np.sin(xy)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(data(body, "Hb_3"), np.diag(-np.sin(xy) * X0 ** 2), rtol=1e-10, atol=1e-12)


def test_vjp_jvp_vhp_hvp(client, fs):
    ops = [{"op": "vjp", "args": ["f", "x0", "v4"], "out": ["o1", "vj"]},
           {"op": "jvp", "args": ["f", "x0", "y0"], "out": ["o2", "jv"]},
           {"op": "vhp", "args": ["g1", "x0", "y0"], "out": ["o3", "vh"]},
           {"op": "hvp", "args": ["g1", "x0"], "kwargs": {"v": "y0"}, "out": ["o4", "hv"]}]
    body = ok(run(client, fs, ops))
    tol = {"rtol": 1e-10, "atol": 1e-12}
    np.testing.assert_allclose(data(body, "o1"), f_np(X0), **tol)
    np.testing.assert_allclose(data(body, "vj"), V4 @ jac_f(X0), **tol)
    np.testing.assert_allclose(data(body, "jv"), jac_f(X0) @ Y0, **tol)
    np.testing.assert_allclose(data(body, "vh"), Y0 @ hess_g1(X0), **tol)
    np.testing.assert_allclose(data(body, "hv"), hess_g1(X0) @ Y0, **tol)
    g1 = np.sum(np.sin(X0 * Y0)) + np.sum(X0 ** 3)
    assert data(body, "o3") == pytest.approx(g1) and data(body, "o4") == pytest.approx(g1)


def test_transforms_match_torch(client, fs):
    torch = pytest.importorskip("torch")
    F = torch.autograd.functional
    t = {k: torch.tensor(v) for k, v in {"W": W, "b": B, "x0": X0, "y0": Y0}.items()}

    def g(x, y):
        return (x * y).sin().sum() + (x ** 3).sum()

    ops = [{"op": "jacobian", "args": ["g", ["x0", "y0"]], "kwargs": {"vectorize": True}, "out": "J"},
           {"op": "hessian", "args": ["g", ["x0", "y0"]], "out": "H"},
           {"op": "vjp", "args": ["g", ["x0", "y0"]], "out": "V"},
           {"op": "hvp", "args": ["g", ["x0", "y0"], ["y0", "x0"]], "out": "P"}]
    body = ok(run(client, fs, ops))
    flat = {"J": F.jacobian(g, (t["x0"], t["y0"]), vectorize=True),
            "H": [b for row in F.hessian(g, (t["x0"], t["y0"])) for b in row],
            "V": [F.vjp(g, (t["x0"], t["y0"]))[0], *F.vjp(g, (t["x0"], t["y0"]))[1]],
            "P": [F.hvp(g, (t["x0"], t["y0"]), (t["y0"], t["x0"]))[0],
                  *F.hvp(g, (t["x0"], t["y0"]), (t["y0"], t["x0"]))[1]]}
    for stem, expected in flat.items():
        for i, e in enumerate(expected):
            np.testing.assert_allclose(data(body, f"{stem}_{i}"), e.numpy(), rtol=1e-10, atol=1e-12)
            assert body["tensors"][f"{stem}_{i}"]["shape"] == list(e.shape)


def test_create_graph_keeps_the_graph_for_a_second_derivative(client, session):
    ops = [lit("x", [0.3, -0.7], requires_grad=True),
           {"op": "function", "out": "cube", "kwargs": {"inputs": ["u"], "outputs": "c", "ops": [
               {"op": "pow", "args": ["u", 3], "out": "c"}]}},
           {"op": "jacobian", "args": ["cube", "x"], "kwargs": {"create_graph": True}, "out": "J"},
           {"op": "sum", "args": ["J"], "out": "s"},
           {"op": "backward", "args": ["s"]}]
    body = ok(run(client, session, ops))
    assert body["tensors"]["J"]["requires_grad"] is True
    np.testing.assert_allclose(body["tensors"]["x"]["grad"], [6 * 0.3, 6 * -0.7], rtol=1e-12)


def test_tuple_outputs_and_errors_are_torchs(client, fs):
    ok(run(client, fs, [{"op": "function", "out": "two", "kwargs": {"inputs": ["x"], "outputs": ["a", "c"], "ops": [
        {"op": "sin", "args": ["x"], "out": "a"}, {"op": "sum", "args": ["x"], "out": "c"}]}}]))
    body = ok(run(client, fs, [{"op": "jacobian", "args": ["two", "x0"], "out": "J"}]))
    assert body["ops"][0]["bound"] == ["J_0", "J_1"]
    np.testing.assert_allclose(data(body, "J_0"), np.diag(np.cos(X0)), rtol=1e-12)
    np.testing.assert_allclose(data(body, "J_1"), np.ones(3), rtol=1e-12)
    cases = [
        ({"op": "jacobian", "args": ["f", "x0"], "kwargs": {"strategy": "forward-mode"}},
         "Computing Jacobian using forward-AD or forward-over-reverse Hessian isonly implemented for "
         "`vectorize=True`."),
        ({"op": "jacobian", "args": ["f", "x0"], "kwargs": {"strategy": "sideways"}},
         'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your function has more outputs '
         'than inputs, "forward-mode" tends to be more performant. Otherwise, prefer to use "reverse-mode".'),
        ({"op": "jacobian", "args": ["f", "x0"], "kwargs": {"strict": True, "vectorize": True}},
         "torch.autograd.functional.jacobian: `strict=True` and `vectorized=True` are not supported together. "
         "Please either set `strict=False` or `vectorize=False`."),
        ({"op": "jacobian", "args": ["f", "x0"], "kwargs": {"strategy": "forward-mode", "create_graph": True}},
         'torch.autograd.functional.jacobian: `create_graph=True` and `strategy="forward-mode"` are not supported '
         'together (yet). Please either set `create_graph=False` or `strategy="reverse-mode"`.'),
        ({"op": "vjp", "args": ["f", "x0"]},
         "The vector v can only be None if the user-provided function returns a single Tensor with a single "
         "element."),
        ({"op": "jvp", "args": ["f", "x0", "v4"]}, "v has invalid size: should be torch.Size([3]) but got "
                                                   "torch.Size([4])."),
        ({"op": "hvp", "args": ["f", "x0", "y0"]}, "The Tensor returned by the function given to hvp should contain "
                                                   "a single element"),
        ({"op": "hessian", "args": ["two", "x0"]}, "The function given to hessian should return a single Tensor"),
        ({"op": "jacobian", "args": ["f", ["x0", "y0"]], "kwargs": {"strict": True}},
         "f() takes 1 positional arguments but 2 were given"),
    ]
    for op, detail in cases:
        problem = assert_problem(run(client, fs, [op]), 422)
        assert problem["detail"] == detail, problem


def test_strict_mode_messages(client, fs):
    ok(run(client, fs, [{"op": "function", "out": "lin", "kwargs": {"inputs": ["x", "y"], "outputs": "s", "ops": [
        {"op": "sum", "args": ["x"], "out": "s"}]}}]))
    p = assert_problem(run(client, fs, [{"op": "jacobian", "args": ["lin", ["x0", "y0"]],
                                         "kwargs": {"strict": True}}]), 422)
    assert p["detail"] == ("Output 0 of the user-provided function is independent of input 1. This is not allowed "
                           "in strict mode.") and p["op_index"] == 0
    p = assert_problem(run(client, fs, [{"op": "hessian", "args": ["lin", ["x0", "y0"]],
                                         "kwargs": {"strict": True}}]), 422)
    assert p["detail"].startswith("While computing the hessian, found that the jacobian of the user-provided "
                                  "function with respect to input 0 is independent of the input.")
    p = assert_problem(run(client, fs, [{"op": "vjp", "args": ["lin", ["x0", "y0"]], "kwargs": {"strict": True}}]),
                       422)
    assert p["detail"] == ("The output of the user-provided function is independent of input 1. This is not "
                           "allowed in strict mode.")


def test_unknown_function_and_bad_definitions(client, fs):
    p = assert_problem(run(client, fs, [{"op": "jacobian", "args": ["nope", "x0"]}]), 404)
    assert "'nope' is not defined" in p["detail"]
    p = assert_problem(run(client, fs, [{"op": "jacobian", "args": ["x0", "x0"]}]), 422)
    assert p["detail"] == "'Tensor' object is not callable"
    for kwargs in [{"inputs": "x", "outputs": "y", "ops": []}, {"inputs": ["x"], "outputs": [], "ops": []},
                   {"inputs": ["x"], "outputs": "y", "ops": [1]}, {"inputs": ["x", "x"], "outputs": "y", "ops": []},
                   {"inputs": ["x"], "outputs": "y", "ops": [], "extra": 1}]:
        assert_problem(run(client, fs, [{"op": "function", "out": "h", "kwargs": kwargs}]), 422)
    # a failing body fails the whole list: nothing it or the list bound survives
    ok(run(client, fs, [{"op": "function", "out": "bad", "kwargs": {"inputs": ["x"], "outputs": "y", "ops": [
        {"op": "matmul", "args": ["x", "x0"], "out": "y"}, {"op": "nosuchop", "args": ["y"]}]}}]))
    assert_problem(run(client, fs, [lit("keep", [1.0]), {"op": "jacobian", "args": ["bad", "x0"], "out": "J"}]), 422,
                   code="unknown_op")
    names = ok(client.get(f"/v1/sessions/{fs}/tensors"))["tensors"]
    assert "keep" not in names and "J" not in names and "y" not in names


def test_functions_survive_storage_and_can_be_replaced_or_deleted(client, fs):
    # a tensor bound to a function's name replaces it; del removes functions too
    ok(run(client, fs, [{"op": "function", "out": "sq", "kwargs": {"inputs": ["x"], "outputs": "y", "ops": [
        {"op": "mul", "args": ["x", "x"], "out": "y"}]}}]))
    body = ok(run(client, fs, [{"op": "jacobian", "args": ["sq", "y0"], "out": "J"}]))
    np.testing.assert_allclose(data(body, "J"), np.diag(2 * Y0), rtol=1e-12)
    ok(run(client, fs, [{"op": "del", "args": ["sq"]}]))
    assert_problem(run(client, fs, [{"op": "jacobian", "args": ["sq", "y0"]}]), 404)
    ok(run(client, fs, [lit("f", [1.0])]))
    assert_problem(run(client, fs, [{"op": "jacobian", "args": ["f", "x0"]}]), 422, detail="'Tensor' object is not "
                                                                                          "callable")


def test_functions_in_the_serialised_state():
    from gradserve_server import engine
    st = engine.State()
    engine.run_program(st, SETUP)
    again = engine.loads(engine.dumps(st))
    assert {n: f.to_json() for n, f in again.functions.items()} == {n: f.to_json() for n, f in st.functions.items()}
    r = engine.run_program(again, [{"op": "jacobian", "args": ["f", "x0"], "out": "J"}])
    assert r.changed == ["J"]
    np.testing.assert_allclose(again.tensors["J"].data, jac_f(X0), rtol=1e-10)
    # a state without functions is written exactly as before (no "functions" key)
    plain = engine.State()
    engine.run_program(plain, [lit("x", [1.0])])
    assert b'"functions"' not in engine.dumps(plain)


def test_grad_is_grads_batched(client, fs):
    ops = [lit("x", X0, requires_grad=True),
           {"op": "matmul", "args": ["W", "x"], "out": "h"}, {"op": "tanh", "args": ["h"], "out": "y"},
           {"op": "eye", "args": [4], "kwargs": {"dtype": "float64"}, "out": "I"},
           {"op": "grad", "args": ["y", "x", "I"], "kwargs": {"is_grads_batched": True, "retain_graph": True},
            "out": "J"}]
    body = ok(run(client, fs, ops))
    np.testing.assert_allclose(data(body, "J"), (1 - np.tanh(W @ X0) ** 2)[:, None] * W, rtol=1e-10)
    # the convenience route takes it too
    body = ok(client.post(f"/v1/sessions/{fs}/grad", json={"outputs": "y", "inputs": "x", "grad_outputs": "I",
                                                           "is_grads_batched": True, "out": "J2",
                                                           "retain_graph": True}))
    np.testing.assert_allclose(data(body, "J2"), (1 - np.tanh(W @ X0) ** 2)[:, None] * W, rtol=1e-10)
    p = assert_problem(run(client, fs, [{"op": "grad", "args": ["y", "x", "v4"], "kwargs": {"is_grads_batched": True,
                                                                                         "retain_graph": True}}]), 422)
    assert p["detail"] == (
        "If `is_grads_batched=True`, we interpret the first dimension of each grad_output as the batch dimension. "
        "The sizes of the remaining dimensions are expected to match the shape of corresponding output, but a "
        "mismatch was detected: grad_output[0] has a shape of torch.Size([]) and output[0] has a shape of "
        "torch.Size([4]). If you only want some tensors in `grad_output` to be considered batched, consider "
        "using vmap.")


def test_grad_is_grads_batched_matches_torch(client, session):
    torch = pytest.importorskip("torch")
    g = RNG.standard_normal((5, 4, 3))
    ops = [lit("x", X0.reshape(1, 3).repeat(4, 0), requires_grad=True), lit("G", g),
           {"op": "sin", "args": ["x"], "out": "s"}, {"op": "mul", "args": ["s", "x"], "out": "y"},
           {"op": "grad", "args": ["y", "x", "G"], "kwargs": {"is_grads_batched": True, "create_graph": True},
            "out": "J"}, {"op": "sum", "args": ["J"], "out": "t"},
           {"op": "grad", "args": ["t", "x"], "out": "H"}]
    body = ok(run(client, session, ops))
    xt = torch.tensor(X0.reshape(1, 3).repeat(4, 0), requires_grad=True)
    yt = xt.sin() * xt
    (jt,) = torch.autograd.grad(yt, xt, torch.tensor(g), is_grads_batched=True, create_graph=True)
    (ht,) = torch.autograd.grad(jt.sum(), xt)
    np.testing.assert_allclose(data(body, "J"), jt.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(data(body, "H"), ht.numpy(), rtol=1e-10)


GD = [{"op": "mul", "args": ["w", "w"], "out": "loss"}, {"op": "backward", "args": ["loss"]},
      {"op": "sub_", "args": ["w", "w.grad"], "kwargs": {"alpha": 0.1}, "no_grad": True}, {"op": "zero_grad"},
      {"op": "abs", "args": ["w"], "out": "a"}, {"op": "lt", "args": ["a", 0.01], "out": "converged"}]


def test_repeat_until_stops_when_converged(client, session):
    ok(run(client, session, [{"op": "tensor", "args": [5.0], "kwargs": {"requires_grad": True}, "out": "w"}]))
    body = ok(run(client, session, GD, repeat=1000, until="converged", record=["w"]))
    # w <- 0.8 w: |5 * 0.8^k| < 0.01 first at k = 28
    assert body["iterations"] == 28 and len(body["records"]["w"]) == 28
    assert body["tensors"]["converged"]["data"] is True
    assert [o["index"] for o in body["ops"]] == list(range(6)) and body["autograd"][0]["op"] == "backward"
    assert body["tensors"]["w"]["data"] == pytest.approx(5 * 0.8 ** 28, rel=1e-5)
    # the bound: repeat still caps it, and a condition never true runs them all
    body = ok(run(client, session, [{"op": "tensor", "args": [False], "out": "never"}, {"op": "neg", "args": ["w"]}],
                  repeat=7, until="never"))
    assert body["iterations"] == 7
    assert "iterations" not in ok(run(client, session, [{"op": "neg", "args": ["w"]}], repeat=2))


def test_repeat_until_errors_change_nothing(client, session):
    ok(run(client, session, [{"op": "tensor", "args": [5.0], "kwargs": {"requires_grad": True}, "out": "w"}]))
    p = assert_problem(run(client, session, GD, repeat=10, until="nope"), 404)
    assert p["detail"] == "until: name 'nope' is not defined after the iteration"
    p = assert_problem(run(client, session, GD, repeat=10, until="w"), 422)
    assert p["detail"] == "until: 'w' must be a bool tensor with one element, got a float32 tensor of shape []"
    p = assert_problem(run(client, session, [{"op": "tensor", "args": [[True, False]], "out": "two"}], repeat=3,
                       until="two"), 422)
    assert p["code"] == "invalid_until"
    tensors = ok(client.get(f"/v1/sessions/{session}/tensors"))["tensors"]
    assert "loss" not in tensors and "two" not in tensors
    assert ok(client.get(f"/v1/sessions/{session}/tensors/w"))["data"] == 5.0
    assert_problem(run(client, session, GD, repeat=2, until="not a name"), 422)


def test_repeat_until_with_a_function_in_the_loop():
    """Newton's method on x^2 - 2 with hessian/grad of a function: converges in a handful of iterations."""
    with __import__("fastapi.testclient", fromlist=["TestClient"]).TestClient(create_app(Settings())) as client:
        sid = client.post("/v1/sessions").json()["id"]
        ops = [lit("x", [3.0]),
               {"op": "function", "out": "phi", "kwargs": {"inputs": ["u"], "outputs": "s", "ops": [
                   {"op": "pow", "args": ["u", 3], "out": "c"}, {"op": "div", "args": ["c", 3.0], "out": "c3"},
                   {"op": "mul", "args": ["u", 2.0], "out": "l"}, {"op": "sub", "args": ["c3", "l"], "out": "d"},
                   {"op": "sum", "args": ["d"], "out": "s"}]}}]
        ok(run(client, sid, ops))
        step = [{"op": "vjp", "args": ["phi", "x"], "out": ["val", "gr"]},
                {"op": "hessian", "args": ["phi", "x"], "out": "H"},
                {"op": "reshape", "args": ["H", [1]], "out": "h"},
                {"op": "div", "args": ["gr", "h"], "out": "dx"},
                {"op": "sub", "args": ["x", "dx"], "out": "x"},
                {"op": "abs", "args": ["dx"], "out": "adx"}, {"op": "max", "args": ["adx"], "out": "m"},
                {"op": "lt", "args": ["m", 1e-12], "out": "done"}]
        body = ok(run(client, sid, step, repeat=50, until="done"))
        assert body["iterations"] < 10
        assert body["tensors"]["x"]["data"] == pytest.approx([2 ** 0.5], rel=1e-14)


def test_a_function_with_a_base64_constant_survives_storage(client, session):
    """Payloads inside a function's ops are decoded like any op's; the stored state keeps them exactly."""
    import base64

    from gradserve_server import engine
    c = np.array([0.1, 1e-300, -2.5])
    payload = {"dtype": "float64", "shape": [3], "encoding": "base64", "data": base64.b64encode(c.tobytes()).decode()}
    ops = [lit("x", [1.0, 2.0, 3.0]),
           {"op": "function", "out": "scale", "kwargs": {"inputs": ["u"], "outputs": "y", "ops": [
               {"op": "tensor", "args": [payload], "out": "k"}, {"op": "mul", "args": ["u", "k"], "out": "y"}]}},
           {"op": "jacobian", "args": ["scale", "x"], "out": "J"}]
    body = ok(run(client, session, ops))
    np.testing.assert_array_equal(data(body, "J"), np.diag(c))
    st = engine.State()
    from gradserve_server.app.codec import decode_value
    engine.run_program(st, [decode_value(op, 10 ** 6) for op in ops])
    again = engine.loads(engine.dumps(st))
    r = engine.run_program(again, [{"op": "jacobian", "args": ["scale", "x"], "out": "J2"}])
    assert r.changed == ["J2"]
    np.testing.assert_array_equal(again.tensors["J2"].data, np.diag(c))


def test_vectorized_transforms_match_torch_with_and_without_batching_rules(client, fs, monkeypatch):
    """vectorize=True runs one batched pass where every op has a batching rule (f, g) and falls back to the
    per-row loop where one has none (cumprod in fc): the values are torch's either way."""
    torch = pytest.importorskip("torch")
    from gradserve_server.engine import autograd
    from gradserve_server.engine import functional as EF
    paths = []

    def spy(real):
        def wrapper(*a):
            r = real(*a)
            paths.append("loop" if r is None else "batched")
            return r
        return wrapper

    monkeypatch.setattr(autograd, "_grad_batched_pass", spy(autograd._grad_batched_pass))
    monkeypatch.setattr(EF, "_jvp_batched", spy(EF._jvp_batched))
    F = torch.autograd.functional
    wt, bt = torch.tensor(W), torch.tensor(B)
    ops = [{"op": "function", "out": "fc", "kwargs": {"inputs": ["x"], "outputs": "y", "ops": [
               {"op": "matmul", "args": ["W", "x"], "out": "h"}, {"op": "cumprod", "args": ["h", 0], "out": "c"},
               {"op": "sin", "args": ["c"], "out": "y"}]}},
           {"op": "function", "out": "gc", "kwargs": {"inputs": ["x"], "outputs": "s", "ops": [
               {"op": "cumprod", "args": ["x", 0], "out": "c"}, {"op": "pow", "args": ["c", 3], "out": "p"},
               {"op": "sum", "args": ["p"], "out": "s"}]}}]
    for strategy in ("reverse-mode", "forward-mode"):
        kw = {"vectorize": True, "strategy": strategy}
        ops += [{"op": "jacobian", "args": ["f", "x0"], "kwargs": kw, "out": f"Jf_{strategy[0]}"},
                {"op": "jacobian", "args": ["fc", "x0"], "kwargs": kw, "out": f"Jc_{strategy[0]}"}]
    ops += [{"op": "hessian", "args": ["g1", "x0"], "kwargs": {"vectorize": True}, "out": "Hg"},
            {"op": "hessian", "args": ["gc", "x0"], "kwargs": {"vectorize": True}, "out": "Hc"}]
    body = ok(run(client, fs, ops))
    assert paths == ["batched", "loop", "batched", "loop", "batched", "loop"]

    def f(x):
        return torch.tanh(wt @ x + bt)

    def fc(x):
        return torch.sin(torch.cumprod(wt @ x, 0))

    x0, y0 = torch.tensor(X0), torch.tensor(Y0)
    for strategy in ("reverse-mode", "forward-mode"):
        for name, fn in (("Jf", f), ("Jc", fc)):
            want = F.jacobian(fn, x0, vectorize=True, strategy=strategy).numpy()
            np.testing.assert_allclose(data(body, f"{name}_{strategy[0]}"), want, rtol=1e-10, atol=1e-12)
    want = F.hessian(lambda x: (x * y0).sin().sum() + (x ** 3).sum(), x0, vectorize=True).numpy()
    np.testing.assert_allclose(data(body, "Hg"), want, rtol=1e-10, atol=1e-12)
    want = F.hessian(lambda x: (torch.cumprod(x, 0) ** 3).sum(), x0, vectorize=True).numpy()
    np.testing.assert_allclose(data(body, "Hc"), want, rtol=1e-10, atol=1e-12)


def test_a_forward_mode_jacobian_writing_in_place_answers_as_without_its_shape_probe(monkeypatch):
    """Over HTTP, in a session kept between requests (recorded, then replayed plans included): the jacobian of a
    body that writes into a session tensor and warns, the session's generator after it and the warnings are those
    of the same requests without the probe (``functional._probe_outputs``), and the probe did tell the shapes.
    (Its body draws no random numbers: inside the pass torch refuses them, below.)"""
    from gradserve_server.engine import functional as EF
    real, told = EF._probe_outputs, []
    ops = [{"op": "function", "out": "h", "kwargs": {"inputs": ["x"], "outputs": "y", "ops": [
               {"op": "add_", "args": ["w", 1.0]}, {"op": "mul", "args": ["x", "w"], "out": "p"},
               {"op": "cross", "args": ["p", "w"], "out": "y"}]}},
           {"op": "jacobian", "args": ["h", "x0"], "kwargs": {"vectorize": True, "strategy": "forward-mode"},
            "out": "J"}, {"op": "randn", "args": [2], "out": "after"}]
    answers = []
    for probe in (lambda f, i: told.append(real(f, i)) or told[-1], lambda f, i: None):
        monkeypatch.setattr(EF, "_probe_outputs", probe)
        with make_client() as c:
            sid = c.post("/v1/sessions").json()["id"]
            ok(run(c, sid, [*SETUP, lit("w", [1.0, 2.0, 3.0]), {"op": "manual_seed", "args": [3]}]))
            got = [ok(run(c, sid, ops, **{"return": ["J", "after", "w"]})) for _ in range(3)]
            answers.append([(b["tensors"], b.get("warnings")) for b in got])
    assert answers[0] == answers[1]
    assert told and all(shapes == ((3,),) for shapes in told)
    assert answers[0][0][1] and answers[0][0][0]["w"]["data"] != answers[0][1][0]["w"]["data"]


#: torch 2.13's refusal of a random op inside the vmapped pass of a forward-mode jacobian (its legacy vmap)
RANDOM_IN_VMAP = ("vmap: We do not yet support calling random operations inside of vmap. Please perform random "
                  "operations outside of vmap as a workaround")
NOISY = {"op": "function", "out": "noisy", "kwargs": {"inputs": ["x"], "outputs": "y", "ops": [
    {"op": "randn", "args": [3], "out": "r"}, {"op": "mul", "args": ["x", "r"], "out": "y"}]}}


@pytest.mark.parametrize("transform", [
    {"op": "jacobian", "args": ["noisy", "x0"], "kwargs": {"vectorize": True, "strategy": "forward-mode"}},
    {"op": "hessian", "args": ["noisy_sum", "x0"],
     "kwargs": {"vectorize": True, "outer_jacobian_strategy": "forward-mode"}}], ids=["jacobian", "hessian"])
def test_a_random_op_inside_a_forward_mode_jacobian_is_refused_as_torch_refuses_it(client, fs, session, transform):
    """torch runs a forward-mode jacobian's function under vmap, which refuses random ops (before drawing): a 422
    with its message, nothing applied, the generator where it was; reverse mode calls the function outside vmap."""
    noisy_sum = {"op": "function", "out": "noisy_sum", "kwargs": {"inputs": ["x"], "outputs": "s", "ops": [
        {"op": "randn", "args": [3], "out": "r"}, {"op": "mul", "args": ["x", "r"], "out": "y"},
        {"op": "sum", "args": ["y"], "out": "s"}]}}
    ok(run(client, fs, [NOISY, noisy_sum, {"op": "manual_seed", "args": [7]}]))
    assert_problem(run(client, fs, [{**transform, "out": "J"}, {"op": "randn", "args": [3], "out": "after"}]),
                   422, "runtime_error", RANDOM_IN_VMAP)
    body = ok(run(client, fs, [{"op": "randn", "args": [3], "out": "after"}]))
    ok(run(client, session, [{"op": "manual_seed", "args": [7]}]))
    want = ok(run(client, session, [{"op": "randn", "args": [3], "out": "after"}]))
    assert data(body, "after").tobytes() == data(want, "after").tobytes()
    reverse = {"op": "jacobian", "args": ["noisy", "x0"], "kwargs": {"vectorize": True}, "out": "J"}
    assert data(ok(run(client, fs, [reverse])), "J").shape == (3, 3)
    torch = pytest.importorskip("torch")
    from torch.autograd.functional import hessian, jacobian
    with pytest.raises(RuntimeError) as e:
        if transform["op"] == "jacobian":
            jacobian(lambda x: x * torch.randn(3), torch.tensor(X0), vectorize=True, strategy="forward-mode")
        else:
            hessian(lambda x: (x * torch.randn(3)).sum(), torch.tensor(X0), vectorize=True,
                    outer_jacobian_strategy="forward-mode")
    assert str(e.value) == RANDOM_IN_VMAP


def test_dropout_that_draws_nothing_runs_inside_a_forward_mode_jacobian(client, fs):
    """p=0, p=1 and eval-mode dropout draw nothing: torch's vmap lets them through, and so does the engine."""
    ops = [{"op": "function", "out": f"d{i}", "kwargs": {"inputs": ["x"], "outputs": "y", "ops": [
        {"op": "dropout", "args": ["x"], "kwargs": kw, "out": "y"}]}}
        for i, kw in enumerate([{"p": 0.0}, {"p": 1.0}, {"p": 0.5, "training": False}])]
    ops += [{"op": "jacobian", "args": [f"d{i}", "x0"], "kwargs": {"vectorize": True, "strategy": "forward-mode"},
             "out": f"J{i}"} for i in range(3)]
    body = ok(run(client, fs, ops))
    np.testing.assert_array_equal(data(body, "J0"), np.eye(3))
    np.testing.assert_array_equal(data(body, "J1"), np.zeros((3, 3)))
    np.testing.assert_array_equal(data(body, "J2"), np.eye(3))
