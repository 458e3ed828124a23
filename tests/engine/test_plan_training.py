"""A training loop's session lists through plans (engine.trace.plan.route_session), planned whole (``segments=False``;
with segments, tests/engine/test_plan_segments.py): a list with a backward and an in-place
update under no_grad (what gradserve.torch sends for a loop's iteration: the last step's update, zero_grad, the
next forward and backward) records its plan at its first sighting, whatever ``record_after``, and replays from its
second; any other list still waits for its ``record_after``-th. Every run is compared with the eager interpreter's
(state, result, error) bit for bit. And SGD's first step as the client sends it (a buffer of -0.0s, the steady ops)
gives torch's ``clone(grad)`` bits."""

from __future__ import annotations

import numpy as np
import pytest

from gradserve_server.engine.program import State, run_program
from gradserve_server.engine.trace.cache import PlanCache
from gradserve_server.engine.trace.plan import _training_step

from .test_literal_lifting import LIMITS, T, Twins, op

NAMES = ("w1", "b1", "w2", "b2")


def setup(seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    shapes = {"w1": (8, 3), "b1": (8,), "w2": (1, 8), "b2": (1,)}
    ops = [T(n, rng.uniform(-0.5, 0.5, s).astype(np.float32).tolist(), requires_grad=True) for n, s in shapes.items()]
    ops += [T("x", rng.uniform(-1, 1, (16, 3)).astype(np.float32).tolist()),
            T("y", rng.uniform(-1, 1, (16, 1)).astype(np.float32).tolist())]
    ops += [op("full_like", n, -0.0, out=f"buf_{n}", no_grad=True) for n in NAMES]  # SGD's buffers (the client's)
    ops += [op("zeros_like", n, out=f"{k}_{n}", no_grad=True) for n in NAMES for k in ("m", "v")]  # Adam's state
    return ops


def body(i: int) -> list:
    """zero_grad, the forward and the backward, the gradients bound to new names (the client's ``p.grad``)."""
    return [op("zero_grad", list(NAMES), set_to_none=True),
            op("linear", "x", "w1", "b1", out=f"h{i}"), op("relu", f"h{i}", out=f"r{i}"),
            op("linear", f"r{i}", "w2", "b2", out=f"o{i}"), op("mse_loss", f"o{i}", "y", out=f"loss{i}"),
            op("backward", f"loss{i}"), *[op("bind", f"{n}.grad", out=f"g{i}_{n}") for n in NAMES],
            op("del", f"h{i}", f"r{i}", f"o{i}")]


def sgd(i: int, momentum: float = 0.9, lr: float = 0.05) -> list:
    """SGD with momentum's update of the gradients bound in iteration ``i`` (every step the same ops)."""
    out = []
    for n in NAMES:
        out += [op("mul_", f"buf_{n}", momentum, no_grad=True),
                op("add_", f"buf_{n}", f"g{i}_{n}", alpha=1, no_grad=True),
                op("add_", n, f"buf_{n}", alpha=-lr, no_grad=True)]
    return out


def adam(i: int, lr: float = 0.01, b1: float = 0.9, b2: float = 0.999) -> list:
    """torch's single-tensor Adam update of iteration ``i``'s gradients (step ``i``): new bias corrections every
    step."""
    bc1, bc2 = 1 - b1 ** i, 1 - b2 ** i
    out = []
    for n in NAMES:
        g = f"g{i}_{n}"
        out += [op("lerp_", f"m_{n}", g, 1 - b1, no_grad=True), op("mul_", f"v_{n}", b2, no_grad=True),
                op("addcmul_", f"v_{n}", g, g, value=1 - b2, no_grad=True),
                op("sqrt", f"v_{n}", out=f"s{i}_{n}", no_grad=True),
                op("div", f"s{i}_{n}", bc2 ** 0.5, out=f"d{i}_{n}", no_grad=True),
                op("add_", f"d{i}_{n}", 1e-8, no_grad=True),
                op("addcdiv_", n, f"m_{n}", f"d{i}_{n}", value=-lr / bc1, no_grad=True)]
    return out


def loop(update, iterations: int) -> list:
    """The requests of a client loop: the setup with the first forward and backward, then the last step's update
    with the next forward and backward, then the names the client let go (the gradients the update read, the last
    loss), as gradserve.torch sends them."""
    lists = [setup() + body(1)]
    for i in range(1, iterations):
        drop = [f"loss{i}"] + [f"{k}{i}_{n}" for k in ("g", "s", "d") if k == "g" or update is not sgd for n in NAMES]
        lists.append(update(i) + body(i + 1) + [op("del", *drop)])
    return lists


@pytest.mark.parametrize("record_after", [2, 3])
@pytest.mark.parametrize("update", ["sgd", "adam"])
def test_a_training_loop_records_its_step_at_first_sighting_and_replays_from_its_third_request(update, record_after):
    make = sgd if update == "sgd" else adam
    tw = Twins([], PlanCache(record_after=record_after, segments=False))
    routes = [(r.name, r.reason) for r in map(tw.run, loop(make, 8))]
    assert routes[1] == ("recorded", "training_step"), routes
    assert routes[2:] == [("replayed", "plan_hit")] * 6, routes
    assert tw.cache.hits == 6 and tw.cache.fallbacks == 0


def test_a_list_without_an_update_waits_for_its_record_after_sighting():
    """A forward and backward alone, or an in-place op outside no_grad, is no training step: deferred as before."""
    tw = Twins(setup(), PlanCache(record_after=2, segments=False))
    fwd = [op("linear", "x", "w1", "b1", out="h"), op("sum", "h", out="s"), op("backward", "s"),
           op("zero_grad", list(NAMES), set_to_none=True), op("del", "h", "s")]
    assert not _training_step(fwd)
    assert not _training_step(fwd + [op("mul_", "x", 2.0)])           # in place, but with grad mode on
    assert not _training_step([op("add_", "x", 1.0, no_grad=True)])    # an update without a backward
    assert _training_step(fwd + [op("add_", "x", 1.0, no_grad=True)])
    routes = [(r.name, r.reason) for r in (tw.run(fwd) for _ in range(3))]
    assert routes == [("cold", "first_sighting"), ("recorded", "no_plan"), ("replayed", "plan_hit")]


def test_a_training_step_that_fails_at_its_first_sighting_gives_the_cold_error_and_leaves_the_state():
    lists = loop(sgd, 2)
    tw = Twins(lists[0], PlanCache(record_after=2, segments=False))
    bad = lists[1][:-1] + [op("add_", "w1", "x", no_grad=True), lists[1][-1]]  # shapes (8, 3) and (16, 3)
    failed = tw.run(bad)  # (the error and the state it leaves: the cold run's)
    assert failed.name == "recorded" and failed.reason == "training_step"
    assert tw.cache.hits == 0 and len(tw.cache) == 0
    assert tw.run(lists[1]) == failed


SPECIAL = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e-42, -1e-42, 3.4e38], dtype=np.float64)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("momentum, alpha", [(0.9, 1), (0.5, 1.0), (1e-30, 1)])
def test_sgd_s_first_step_on_a_minus_zero_buffer_is_the_gradient_s_bits(dtype, momentum, alpha):
    """gradserve.torch's SGD makes its momentum buffer as -0.0s with the optimizer and runs the steady ops at the
    first step (``buf.mul_(momentum).add_(grad, alpha=1)``): the buffer then holds the gradient's bits, as torch's
    ``clone(grad)`` does, zeros of either sign, infinities and NaN included."""
    data = SPECIAL if dtype != "float16" else np.where(np.abs(SPECIAL) > 6e4, np.inf, SPECIAL)
    state = State()
    run_program(state, [T("g", data.tolist(), dtype=dtype), op("full_like", "g", -0.0, out="buf"),
                        op("clone", "g", out="want"),
                        op("mul_", "buf", momentum), op("add_", "buf", "g", alpha=alpha)], limits=LIMITS)
    got, want = state.tensors["buf"].data, state.tensors["want"].data
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
