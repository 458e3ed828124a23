"""Errors the differential fuzzer found on the engine (torch's classes and messages, read off torch 2.13)."""

import pytest

from gradserve_server.engine import State, run_program
from gradserve_server.engine.errors import EngineError


def T(name, data, **kw):
    return {"op": "tensor", "out": name, "args": [data], "kwargs": kw}


B = [[[1.0, 2.0, 3.0]]]  # (1, 1, 3)
M = [[[1.0]]]  # (1, 1, 1)


@pytest.mark.parametrize("dtypes, message", [
    # torch compares input with batch1 first (c10's type names), then bmm compares batch1 with batch2
    (("float32", "float32", "float64"), "expected scalar type Float but found Double"),
    (("float32", "float32", "int32"), "expected scalar type Float but found Int"),
    (("int32", "float32", "float32"), "Input dtypes must be the same, got: input int, batch1: float, batch2: float"),
    (("int64", "float32", "float32"),
     "Input dtypes must be the same, got: input long int, batch1: float, batch2: float"),
    (("float32", "float64", "float64"),
     "Input dtypes must be the same, got: input float, batch1: double, batch2: double"),
])
def test_baddbmm_of_mixed_dtypes_says_what_torch_says(dtypes, message):
    a, b, c = dtypes
    ops = [T("a", B, dtype=a), T("b", M, dtype=b), T("c", B, dtype=c), {"op": "baddbmm", "args": ["a", "b", "c"]}]
    with pytest.raises(EngineError) as e:
        run_program(State(), ops)
    assert str(e.value) == message and type(e.value).__name__ == "TorchRuntimeError"


@pytest.mark.parametrize("which", ["running_mean", "running_var"])
@pytest.mark.parametrize("training", [False, True])
def test_batch_norm_refuses_running_statistics_that_require_grad_under_grad_mode(which, training):
    stats = {"running_mean": T("rm", [0.0, 0.0, 0.0]), "running_var": T("rv", [1.0, 1.0, 1.0])}
    stats[which]["kwargs"]["requires_grad"] = True
    ops = [T("x", [[-0.7, -0.4, -0.1], [0.4, 0.1, 0.7]]), *stats.values(),
           {"op": "batch_norm", "out": "y", "args": ["x", "rm", "rv"], "kwargs": {"training": training}}]
    with pytest.raises(EngineError) as e:
        run_program(State(), ops)
    assert str(e.value) == (f"The function 'native_batch_norm' is not differentiable with respect to argument "
                            f"'{which}'. This input cannot have requires_grad True.")
    # under no_grad torch has no autograd to check: it runs (and updates nothing it should not)
    run_program(State(), ops, no_grad=True)


@pytest.mark.parametrize("requires_grad, no_grad, base, grad_fn", [
    (False, False, False, None),               # torch's kernel without autograd: a fresh tensor
    (True, True, False, None),                 # no_grad: the same
    (True, False, True, "SqueezeBackward1"),   # with autograd torch pools in 2-d and squeezes: a view
])
def test_max_pool1d_returns_a_view_only_when_autograd_records_it(requires_grad, no_grad, base, grad_fn):
    state = State()
    ops = [T("x", [[[1.0, 5.0, 2.0, 0.0]]], requires_grad=requires_grad),
           {"op": "max_pool1d", "out": "y", "args": ["x", 2]}]
    run_program(state, ops, no_grad=no_grad)
    y = state.tensors["y"]
    assert (y._base is not None) is base
    assert (None if y.grad_fn is None else y.grad_fn.name) == grad_fn
    # an in-place op on it: a fresh tensor stays a leaf without grad_fn (the fuzzer saw AsStridedBackward0 here)
    run_program(state, [{"op": "add_", "args": ["y", 1.0]}], no_grad=True)
    assert state.tensors["y"].data.tolist() == [[[6.0, 3.0]]]


@pytest.mark.parametrize("pool", ["max_pool2d", "max_pool1d"])
def test_max_pool_s_create_graph_gradient_is_torch_s_node(pool):
    """Under create_graph torch's max-pool backward is a node of its own (MaxPool2DWithIndicesBackwardBackward0,
    edges to the incoming gradient and to the input), linear in the gradient with a zero derivative for the input."""
    torch = pytest.importorskip("torch")
    import numpy as np
    import torch.nn.functional as TF

    from gradserve_server.engine.torch_compat import F as EF
    from gradserve_server.engine.torch_compat import torch as etorch

    def run(T, F):
        shape = (2, 3, 5, 6) if pool == "max_pool2d" else (2, 3, 7)
        x = T.tensor(np.random.RandomState(0).randn(*shape), dtype=T.float64, requires_grad=True)
        y = F.max_pool2d(x, 2, stride=2, padding=1) if pool == "max_pool2d" else F.max_pool1d(x, 3)
        v = T.tensor(np.random.RandomState(1).randn(*y.shape), dtype=T.float64, requires_grad=True)
        (g,) = T.autograd.grad(y, x, v, create_graph=True)
        node = g.grad_fn
        names = [node.name(), [None if n is None else n.name() for n, _ in node.next_functions]]
        gv, gx = T.autograd.grad((g * g).sum(), (v, x))
        return names, np.asarray(gv.tolist()), np.asarray(gx.tolist())

    ref, got = run(torch, TF), run(etorch, EF)
    assert got[0] == ref[0]
    np.testing.assert_array_equal(got[1], ref[1])
    np.testing.assert_array_equal(got[2], ref[2])


@pytest.mark.parametrize("forward, node", [
    (lambda F, x: F.softmax(x, 1), "Softmax"), (lambda F, x: x.exp(), "Exp"), (lambda F, x: x.tanh(), "Tanh")])
def test_an_output_modified_after_a_create_graph_gradient_is_named_by_its_node(forward, node):
    """torch unpacks a saved output as a new tensor whose grad_fn is the saving node: the double-backward graph
    built on it names that node (read off torch 2.13) after an in-place op gave the output another history."""
    from gradserve_server.engine.errors import VersionMismatchError
    from gradserve_server.engine.torch_compat import F as EF
    from gradserve_server.engine.torch_compat import torch as etorch

    x = etorch.tensor([[0.3, -1.2, 0.5], [2.0, 0.1, -0.4]], dtype=etorch.float64, requires_grad=True)
    y = forward(EF, x)
    (g,) = etorch.autograd.grad((y * y).sum(), x, create_graph=True)
    y.mul_(2)
    with pytest.raises(VersionMismatchError) as e:
        g.sum().backward()
    assert str(e.value).startswith("one of the variables needed for gradient computation has been modified by an "
                                   f"inplace operation: [torch.DoubleTensor [2, 3]], which is output 0 of {node}, "
                                   "is at version 1; expected version 0 instead.")


def test_lerp__checks_its_dtypes_before_the_target_s_overlap():
    """torch's lerp_ checks `end`'s and `weight`'s dtypes (its meta function) before its TensorIterator refuses an
    expanded target."""
    base = [T("o", [1.0]), {"op": "expand", "args": ["o", [3]], "out": "a"}, T("e", [1.0, 1.0, 1.0], dtype="float64")]
    refusals = [({"op": "lerp_", "args": ["a", "e", 0.5]}, "expected dtype float for `end` but got dtype double"),
                ({"op": "lerp_", "args": ["a", "o", "e"]}, "expected dtype float for `weight` but got dtype double")]
    for op, message in refusals:
        with pytest.raises(EngineError) as e:
            run_program(State(), [*base, op])
        assert str(e.value) == message
    with pytest.raises(EngineError) as e:
        run_program(State(), [*base, T("f", [1.0, 1.0, 1.0]), {"op": "lerp_", "args": ["a", "f", 0.5]}])
    assert str(e.value).startswith("unsupported operation: more than one element of the written-to tensor")


@pytest.mark.parametrize("dtype, name", [("bfloat16", "CPUBFloat16Type"), ("bool", "CPUBoolType"),
                                         ("float16", "torch.HalfTensor"), ("int32", "torch.IntTensor")])
def test_messages_name_a_tensor_type_as_torch_s_tostring_does(dtype, name):
    """torch names a CPU tensor's type by its legacy class, but bool and bfloat16, which have none: the backend's
    type name (a version mismatch's message, expand's)."""
    ops = [T("x", [1.0, 2.0, 3.0], requires_grad=True), T("w", [1, 0, 1], dtype=dtype),
           {"op": "mul", "args": ["x", "w"], "out": "y"}, {"op": "sum", "args": ["y"], "out": "s"},
           {"op": "fill_", "args": ["w", 1]}, {"op": "backward", "args": ["s"]}]
    with pytest.raises(EngineError) as e:
        run_program(State(), ops)
    assert f"operation: [{name} [3]] is at version 1; expected version 0 instead." in str(e.value)
    with pytest.raises(EngineError) as e:
        run_program(State(), [T("w", [1, 0, 1], dtype=dtype), {"op": "expand", "args": ["w", []]}])
    assert str(e.value).startswith(f"expand({name}{{[3]}}, size=[]): the number of sizes provided (0)")


#: integer powers with negative integer exponents, as torch 2.13 computes them (numpy refuses them: a ValueError)
INT_POWERS = [  # (base, exponent, dtype, torch's result)
    ([2, 3, 1, -1, -1, 0, -2, 5], [-1, -2, -3, -3, -2, -1, -1, 0], "int64", [0, 0, 1, -1, 1, 0, 0, 1]),
    ([1, -1, 4], [-5, -5, -1], "int8", [1, -1, 0]),
    (2, [-1, 0, 3], "int64", [0, 1, 8]),
]


@pytest.mark.parametrize("base, exponent, dtype, want", INT_POWERS)
def test_integer_powers_with_negative_tensor_exponents_are_torchs(base, exponent, dtype, want):
    ops = [T("e", exponent, dtype=dtype), {"op": "pow", "args": [base, "e"], "out": "r"}]
    if isinstance(base, list):
        ops = [T("b", base, dtype=dtype), *ops[:1], {"op": "pow", "args": ["b", "e"], "out": "r"}]
    state = State()
    run_program(state, ops)
    assert state.tensors["r"].data.tolist() == want
    torch = pytest.importorskip("torch")
    t_base = torch.tensor(base, dtype=getattr(torch, dtype)) if isinstance(base, list) else base
    assert torch.pow(t_base, torch.tensor(exponent, dtype=getattr(torch, dtype))).tolist() == want
