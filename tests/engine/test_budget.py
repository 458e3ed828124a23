"""The per-run byte budget, the response budget and Control (deadline, cancellation) of engine.budget."""

from __future__ import annotations

import numpy as np
import pytest

import gradserve_server.engine as E
from gradserve_server.engine.budget import Control
from gradserve_server.engine.errors import CancelledError, DeadlineExceededError, LimitExceededError

MB = 1_000_000


def limits(max_bytes: int, **kw) -> E.Limits:
    return E.Limits(max_elements_per_tensor=10_000_000, max_nodes=100_000, max_bytes=max_bytes,
                    names=(("max_bytes", "MAX_BYTES"),), **kw)


def test_creation_is_refused_before_it_allocates_with_nothing_applied():
    state = E.State()
    E.run_program(state, [{"op": "ones", "args": [250_000], "out": "a"}], limits=limits(4 * MB))  # 1 MB
    ops = [{"op": "ones", "args": [250_000], "out": f"x{i}"} for i in range(8)]
    with pytest.raises(LimitExceededError) as err:
        E.run_program(state, ops, limits=limits(4 * MB))
    assert err.value.op_index == 3  # 1 MB held + 3 x 1 MB fit; the fourth would not
    assert "MAX_BYTES" in err.value.message and "4000000" in err.value.message
    assert list(state.tensors) == ["a"]


def test_intermediates_and_saved_tensors_count_while_they_are_held():
    """A chain keeps every saved input alive: 1 MB per op; the graph is refused at the budget, though
    no single named tensor is large."""
    ops = [{"op": "rand", "args": [250_000], "kwargs": {"requires_grad": True}, "out": "h"}]
    ops += [{"op": "exp", "args": ["h"], "out": "h"}] * 20
    with pytest.raises(LimitExceededError):
        E.run_program(E.State(), ops, limits=limits(8 * MB))
    E.run_program(E.State(), ops, limits=limits(30 * MB))


def test_what_a_run_frees_is_not_counted():
    """200 results of 1 MB, each dropped by the next: 200 MB allocated, never more than 3 MB held."""
    state = E.State()
    E.run_program(state, [{"op": "ones", "args": [250_000], "out": "a"}], limits=limits(4 * MB))
    E.run_program(state, [{"op": "mul", "args": ["a", 2.0], "out": "b"}], repeat=200, limits=limits(4 * MB))


def test_in_place_loops_keep_one_undo_copy_and_roll_back_exactly():
    state = E.State()
    E.run_program(state, [{"op": "ones", "args": [250_000], "kwargs": {"requires_grad": True}, "out": "w"}])
    w = state.tensors["w"]
    ops = [{"op": "mul", "args": ["w", 3.0], "out": "y"}, {"op": "sum", "args": ["y"], "out": "s"},
           {"op": "backward", "args": ["s"]}, {"op": "sub_", "args": ["w", "w.grad"], "no_grad": True},
           {"op": "zero_grad"}]
    E.run_program(state, ops, repeat=50, limits=limits(8 * MB))  # 50 undo copies would be 50 MB
    np.testing.assert_array_equal(w.data, 1 - 50 * 3)
    # a failure after many in-place updates restores the first value
    with pytest.raises(E.EngineError):
        E.run_program(state, [*ops, {"op": "nope"}], repeat=1, limits=limits(8 * MB))
    with pytest.raises(E.EngineError):
        E.run_program(state, [{"op": "add_", "args": ["w", 1.0], "no_grad": True}] * 10 + [{"op": "nope"}])
    np.testing.assert_array_equal(w.data, 1 - 50 * 3)
    assert w.grad is None and w.version == 50


def test_an_in_place_ops_saved_old_value_counts_before_it_is_copied():
    """abs_ saves the value it overwrites: each of the 20 ops keeps a private 1 MB copy alive in the graph. The
    copies count as they are made, so the run stops at the op whose copy would not fit (not at the end of the
    run, after the work, with the whole graph built)."""
    ops = [{"op": "rand", "args": [250_000], "kwargs": {"requires_grad": True}, "out": "h"},
           {"op": "mul", "args": ["h", 1.0], "out": "y"}]
    ops += [{"op": "abs_", "args": ["y"]}] * 20
    state = E.State()
    with pytest.raises(LimitExceededError) as err:
        E.run_program(state, ops, limits=limits(8 * MB))
    assert err.value.op_index is not None and 2 <= err.value.op_index < 8
    assert "the saved value of a tensor changed in place needs 1000000 bytes" in err.value.message
    assert state.tensors == {}
    E.run_program(state, ops, limits=limits(30 * MB))
    assert E.program.graph_stats(state.tensors.values())[1] == 22 * MB + 8  # 20 saved copies, h, y, the scalar


def test_records_are_counted_against_the_response_budget_before_they_are_copied():
    state = E.State()
    E.run_program(state, [{"op": "zeros", "args": [1000], "out": "x"}])  # 4 kB
    lim = limits(100 * MB, max_response_bytes=40_000)
    E.run_program(state, [{"op": "add_", "args": ["x", 1.0]}], repeat=9, record=["x"], limits=lim)
    with pytest.raises(LimitExceededError) as err:
        E.run_program(state, [{"op": "add_", "args": ["x", 1.0]}], repeat=11, record=["x"], limits=lim)
    assert "record 'x'" in err.value.message
    assert state.tensors["x"].data[0] == 9


def test_control_is_checked_between_ops_and_between_backward_nodes():
    state = E.State()
    ops = [{"op": "tensor", "args": [[1.0, 2.0]], "kwargs": {"requires_grad": True}, "out": "x"},
           {"op": "mul", "args": ["x", 1.0], "out": "h"}]
    ops += [{"op": "sin", "args": ["h"], "out": "h"}] * 100
    ops += [{"op": "sum", "args": ["h"], "out": "s"}]
    E.run_program(state, ops)

    class CancelsMidBackward(Control):
        """Cancelled by another party after the backward pass has gone through 30 nodes."""
        checks = 0

        def check(self):
            self.checks += 1
            if self.checks == 32:  # 1 before the op, then one per node
                self.cancel("test")
            super().check()

    control = CancelsMidBackward()
    with pytest.raises(CancelledError):
        E.run_program(state, [{"op": "backward", "args": ["s"]}], control=control)
    assert control.checks == 32
    assert state.tensors["x"].grad is None
    E.run_program(state, [{"op": "backward", "args": ["s"]}])  # the graph was not freed
    assert state.tensors["x"].grad is not None

    with pytest.raises(DeadlineExceededError) as err:
        E.run_program(state, [{"op": "add", "args": ["x", 1.0], "out": "y"}] * 10_000,
                      control=Control(0.0, setting="DEADLINE"))
    assert "DEADLINE" in err.value.message and "y" not in state.tensors
