"""Forward mode (torch.autograd.forward_ad): levels, make_dual/unpack_dual, the record hook, in-place
updates of tangents, views carrying tangent views, and the program actions."""

from __future__ import annotations

import numpy as np
import pytest

from gradserve_server.engine import State, run_program
from gradserve_server.engine.errors import EngineError
from gradserve_server.engine.forward_ad import dual_level, enter_dual_level, exit_dual_level, make_dual, unpack_dual
from gradserve_server.engine.grad_mode import no_grad
from gradserve_server.engine.tensor import tensor


def _t(*vals, rg=False):
    return tensor(list(vals), dtype="float64", requires_grad=rg)


def test_make_dual_outside_a_level_is_refused():
    with pytest.raises(EngineError, match="no level exists, make sure to enter_dual_level"):
        make_dual(_t(1.0), _t(1.0))


def test_mul_sin_tangent_and_views():
    x, v = _t(1.0, 2.0, 3.0, rg=True), _t(0.1, 0.2, 0.3)
    with dual_level():
        d = make_dual(x, v)
        assert d._base is x and d.grad_fn.name == "ViewBackward0"
        assert unpack_dual(d).tangent is v
        y = d * d + d.sin()
        p, t = unpack_dual(y)
        np.testing.assert_allclose(t.data, 2 * x.data * v.data + np.cos(x.data) * v.data)
        np.testing.assert_array_equal(p.data, y.data)
        assert p.grad_fn.name_() == "torch::autograd::Identity" and p._base is y
    assert unpack_dual(y).tangent is None and y._fw_grad is None and d._fw_grad is None


def test_one_level_at_a_time_and_exit_errors():
    with dual_level() as lvl:
        assert lvl == 0
        with pytest.raises(EngineError, match="Nested forward mode AD is not supported at the moment"):
            enter_dual_level()
        with pytest.raises(EngineError, match="not the last one that was created"):
            exit_dual_level(level=1)
    with pytest.raises(EngineError, match="Dual level must be a positive number."):
        exit_dual_level()


def test_no_grad_does_not_disable_forward_ad():
    with dual_level():
        d = make_dual(_t(1.0, 2.0), _t(1.0, 1.0))
        with no_grad():
            y = d * 2.0
        np.testing.assert_array_equal(unpack_dual(y).tangent.data, [2.0, 2.0])


def test_inplace_updates_the_tangent_in_place_and_through_views():
    with dual_level():
        d = make_dual(_t(1.0, 2.0), _t(1.0, 1.0))
        tangent = unpack_dual(d).tangent
        d.mul_(3.0)
        assert unpack_dual(d).tangent is tangent
        np.testing.assert_array_equal(tangent.data, [3.0, 3.0])
        z = _t(0.0, 0.0)
        z.add_(d)  # a tensor without tangent gets one
        np.testing.assert_array_equal(unpack_dual(z).tangent.data, [3.0, 3.0])
        b = tensor([[1.0, 1.0], [1.0, 1.0]], dtype="float64")
        row = b[1]
        row.mul_(d)  # through a view: the base gets a zero tangent, the view writes into it
        np.testing.assert_array_equal(unpack_dual(b).tangent.data, [[0.0, 0.0], [3.0, 3.0]])


def test_program_actions_balance_and_bind():
    st = State()
    run_program(st, [{"op": "tensor", "args": [[1.0, 2.0]], "kwargs": {"dtype": "float64"}, "out": "x"},
                     {"op": "tensor", "args": [[1.0, 0.5]], "kwargs": {"dtype": "float64"}, "out": "v"}])
    run_program(st, [{"op": "enter_dual_level"},
                     {"op": "make_dual", "args": ["x", "v"], "out": "d"},
                     {"op": "mul", "args": ["d", "d"], "out": "y"},
                     {"op": "unpack_dual", "args": ["y"], "out": ["p", "t"]},
                     {"op": "exit_dual_level"}])
    np.testing.assert_array_equal(st.tensors["t"].data, [2.0, 2.0])
    assert all(t._fw_grad is None for t in st.tensors.values())
    with pytest.raises(EngineError, match="was not exited") as e:
        run_program(st, [{"op": "enter_dual_level"}, {"op": "make_dual", "args": ["x", "v"], "out": "d2"}])
    assert e.value.op_index == 0 and "d2" not in st.tensors


def test_a_state_after_a_dual_program_holds_no_tangent_and_serialises():
    from gradserve_server.engine import dumps, loads
    st = State()
    run_program(st, [{"op": "tensor", "args": [[1.0, 2.0]], "kwargs": {"dtype": "float64", "requires_grad": True},
                      "out": "x"},
                     {"op": "tensor", "args": [[0.0, 0.0]], "kwargs": {"dtype": "float64"}, "out": "z"},
                     {"op": "enter_dual_level"},
                     {"op": "make_dual", "args": ["x", "x"], "out": "d"},
                     {"op": "exp", "args": ["d"], "out": "y"},
                     {"op": "add_", "args": ["z", "d"]},
                     {"op": "exit_dual_level"}])
    assert all(t._fw_grad is None for t in st.tensors.values())
    back = loads(dumps(st))
    np.testing.assert_allclose(back.tensors["y"].data, np.exp([1.0, 2.0]))
    assert back.tensors["y"].grad_fn.name == "ExpBackward0"


def test_an_unsupported_primitive_raises_torchs_not_implemented_error():
    from gradserve_server.engine.registry import JVPS, NO_JVP
    saved = JVPS.pop("ExpBackward0")
    NO_JVP["ExpBackward0"] = "exp"
    try:
        with dual_level():
            d = make_dual(_t(1.0), _t(1.0))
            with pytest.raises(EngineError) as e:
                d.exp()
        assert e.value.exception == "NotImplementedError"
        assert e.value.message.startswith("Trying to use forward AD with exp that does not support it because it "
                                          "has not been implemented yet.\nPlease file an issue to PyTorch")
    finally:
        JVPS["ExpBackward0"] = saved
        NO_JVP.pop("ExpBackward0")
