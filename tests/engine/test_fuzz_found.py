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
