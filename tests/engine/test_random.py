"""Random ops draw torch's CPU numbers bit for bit: every program of ``random_cases`` (seeds, sizes around
torch's path changes, float32/float64, generators, get/set state) against the committed fixture of torch's
outputs and generator states, and against torch itself when it is installed."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from gradserve_server.engine import State, dumps, loads, run_program
from gradserve_server.engine.errors import EngineError
from gradserve_server.engine.generator import Generator, Generators, use

from .random_cases import FIXTURE, HALF_FIXTURE, HALF_SEEDS, SEEDS, cases, digest, half_cases, run_torch

_FIXTURE = json.loads(FIXTURE.read_text())["cases"]
_CASES = dict(cases())
_HALF_FIXTURE = json.loads(HALF_FIXTURE.read_text())["cases"]
_HALF_CASES = dict(half_cases())


def _run(seed: int, ops: list) -> State:
    state = State()
    run_program(state, [{"op": "manual_seed", "args": [seed]}, *ops])
    return state


def _state_sha(state: State) -> str:
    g = state.generator if state.generator is not None else Generator()
    return hashlib.sha256(g.get_state()).hexdigest()


@pytest.mark.parametrize("seed", SEEDS)
def test_every_case_matches_torchs_fixture(seed):
    rows = [r for r in _FIXTURE if r["seed"] == seed]
    assert len(rows) == len(_CASES)
    bad = []
    for row in rows:
        state = _run(seed, _CASES[row["case"]])
        if digest(state.tensors["r"].data) != row["r"] or _state_sha(state) != row["state_sha256"]:
            bad.append(row["case"])
    assert not bad


def _mismatches(rows: list, programs: dict) -> list:
    bad = []
    for row in rows:
        state = _run(row["seed"], programs[row["case"]])
        if digest(state.tensors["r"].data) != row["r"] or _state_sha(state) != row["state_sha256"]:
            bad.append(row["case"])
    return bad


@pytest.mark.parametrize("seed", HALF_SEEDS)
def test_float16_and_bfloat16_draws_match_torchs_fixture(seed):
    """randn/normal_ at every size to 64 and some large ones (torch's block kernel from 16 values on), rand,
    uniform_, the *_like forms, exponential_, bernoulli_, dropout, random_: values and generator state."""
    rows = [r for r in _HALF_FIXTURE if r["seed"] == seed]
    assert len(rows) == len(_HALF_CASES)
    assert not _mismatches(rows, _HALF_CASES)


def test_float16_and_bfloat16_draws_against_torch_itself():
    torch = pytest.importorskip("torch")
    bad = []
    for seed in (2**40 + 1, 12345):
        for name, ops in half_cases():
            want, state_bytes = run_torch(torch, seed, ops)
            state = _run(seed, ops)
            if digest(state.tensors["r"].data) != want["r"] or state.generator.get_state() != state_bytes:
                bad.append((seed, name))
    assert not bad


def test_against_torch_itself():
    torch = pytest.importorskip("torch")
    bad = []
    for seed in (2**40 + 1,):
        for name, ops in cases():
            want, state_bytes = run_torch(torch, seed, ops)
            state = _run(seed, ops)
            if digest(state.tensors["r"].data) != want["r"] or \
                    state.generator.get_state() != state_bytes:
                bad.append((seed, name))
    assert not bad


def test_get_rng_state_is_torchs_layout_and_round_trips():
    state = _run(5, [{"op": "randn", "args": [3], "out": "a"}, {"op": "get_rng_state", "out": "s"},
                     {"op": "initial_seed", "out": "i"}])
    s = state.tensors["s"].data
    assert s.shape == (5056,) and s.dtype == np.int64 and s[0] == 5 and s[5040] == 1  # a cached double normal
    assert state.tensors["i"].data.item() == 5
    g = Generator()
    g.set_state(s.astype(np.uint8).tobytes())
    assert g == state.generator


def test_a_seed_of_2_64_minus_1_reads_back_negative_as_int64():
    state = _run(-1, [{"op": "initial_seed", "out": "i"}])
    assert state.tensors["i"].data.item() == -1 and state.generator.initial_seed() == 2**64 - 1


def test_a_failed_program_leaves_the_generator_as_it_was():
    state = _run(1, [])
    before = state.generator.get_state()
    with pytest.raises(EngineError):
        run_program(state, [{"op": "randn", "args": [40], "out": "a"}, {"op": "Generator", "out": "g"},
                            {"op": "rand", "args": [2], "kwargs": {"generator": "nope"}, "out": "b"}])
    assert state.generator.get_state() == before and not state.generators and "a" not in state.tensors


def test_generators_survive_the_session_codec():
    state = _run(9, [{"op": "randn", "args": [3], "out": "a"}, {"op": "Generator", "out": "g"},
                     {"op": "rand", "args": [2], "kwargs": {"generator": "g"}, "out": "b"}])
    back = loads(dumps(state))
    assert back.generator == state.generator and back.generators == state.generators
    ops = [{"op": "randn", "args": [5], "out": "c"}, {"op": "rand", "args": [3], "kwargs": {"generator": "g"},
                                                      "out": "d"}]
    run_program(state, ops)
    run_program(back, ops)
    for n in "cd":
        np.testing.assert_array_equal(state.tensors[n].data, back.tensors[n].data)


def test_an_untouched_session_stores_no_generator():
    state = State()
    run_program(state, [{"op": "zeros", "args": [2], "out": "z"}])
    assert state.generator is None and b"generators" not in dumps(state)


@pytest.mark.parametrize("ops,message", [
    ([{"op": "randint", "args": [5, 3, [3]]}], "random_ expects 'from' to be less than 'to', but got from=5 >= to=3"),
    ([{"op": "rand", "args": [2], "kwargs": {"dtype": "int64"}}],
     "\"check_uniform_bounds\" not implemented for 'Long'"),
    ([{"op": "zeros", "args": [3], "out": "x"}, {"op": "uniform_", "args": ["x", 2, 1]}],
     "uniform_ expects to return a [from, to) range, but found from=2 > to=1"),
    ([{"op": "zeros", "args": [3], "out": "x"}, {"op": "normal_", "args": ["x", 0, -1]}],
     "normal expects std >= 0.0, but found std -1"),
    ([{"op": "zeros", "args": [3], "out": "x"}, {"op": "bernoulli_", "args": ["x", 1.5]}],
     "bernoulli_ expects p to be in [0, 1], but got p=1.5"),
    ([{"op": "tensor", "args": [[0.2, 0.3]], "out": "p"}, {"op": "multinomial", "args": ["p", 3]}],
     "cannot sample n_sample > prob_dist.size(-1) samples without replacement"),
    ([{"op": "tensor", "args": [[0.0, 0.0]], "out": "p"}, {"op": "multinomial", "args": ["p", 1]}],
     "invalid multinomial distribution (sum of probabilities <= 0)"),
    ([{"op": "tensor", "args": [[1, 2]], "out": "p"}, {"op": "multinomial", "args": ["p", 1]}],
     "multinomial only supports floating-point dtypes for input, got: Long"),
    ([{"op": "zeros", "args": [10], "kwargs": {"dtype": "int64"}, "out": "s"}, {"op": "set_rng_state", "args": ["s"]}],
     "Expected a CPUGeneratorImplState of size 5056 but found the input RNG state size to be 10"),
    ([{"op": "zeros", "args": [5056], "kwargs": {"dtype": "int64"}, "out": "s"},
      {"op": "set_rng_state", "args": ["s"]}], "Invalid mt19937 state"),
])
def test_errors_carry_torchs_messages_and_change_nothing(ops, message):
    state = _run(2, [])
    before = state.generator.get_state()
    with pytest.raises(EngineError) as e:
        run_program(state, [{"op": "rand", "args": [3], "out": "a"}, *ops])
    assert message in str(e.value)
    assert state.generator.get_state() == before


def test_engine_calls_outside_a_program_use_a_table_of_their_own():
    from gradserve_server.engine.ops.random import rand
    table = Generators(Generator(4))
    token = use(table)
    try:
        a = rand(3)
    finally:
        from gradserve_server.engine.generator import reset
        reset(token)
    assert np.array_equal(a.data, rand(3, generator=Generator(4)).data)


def test_normal_of_tensors_has_torchs_zero_gradient_and_grad_fn():
    state = _run(0, [{"op": "tensor", "args": [[1.0, 2.0]], "kwargs": {"requires_grad": True}, "out": "m"},
                     {"op": "tensor", "args": [[0.5, 1.5]], "kwargs": {"requires_grad": True}, "out": "s"},
                     {"op": "normal", "args": ["m", 1.0], "out": "a"}, {"op": "normal", "args": [0.0, "s"], "out": "b"},
                     {"op": "normal", "args": ["m", "s"], "out": "c"}, {"op": "add", "args": ["a", "b"], "out": "ab"},
                     {"op": "add", "args": ["ab", "c"], "out": "t"}, {"op": "sum", "args": ["t"], "out": "z"},
                     {"op": "backward", "args": ["z"]}])
    assert [state.tensors[n].grad_fn.name for n in "abc"] == ["NormalBackward1", "NormalBackward2", "NormalBackward3"]
    assert state.tensors["m"].grad.data.tolist() == [0.0, 0.0] and state.tensors["s"].grad.data.tolist() == [0.0, 0.0]


def test_a_session_holds_a_bounded_number_of_generators():
    from gradserve_server.engine.generator import MAX_GENERATORS
    state = State()
    run_program(state, [{"op": "Generator", "out": f"g{i}"} for i in range(MAX_GENERATORS)])
    run_program(state, [{"op": "Generator", "out": "g0"}])  # rebinding a name is no new generator
    with pytest.raises(EngineError) as e:
        run_program(state, [{"op": "Generator", "out": "one_more"}])
    assert e.value.code == "limit_exceeded" and len(state.generators) == MAX_GENERATORS


def test_multinomial_checks_its_result_against_the_limits_before_drawing():
    from gradserve_server.engine.grad_mode import Limits
    state = _run(0, [{"op": "tensor", "args": [[0.5, 0.5]], "out": "p"}])
    before = state.generator.get_state()
    with pytest.raises(EngineError) as e:
        run_program(state, [{"op": "multinomial", "args": ["p", 10**9, True], "out": "r"}],
                    limits=Limits(max_elements_per_tensor=10**6))
    assert e.value.code == "limit_exceeded" and state.generator.get_state() == before


@pytest.mark.parametrize("dtype,low,high,message", [
    ("float16", 0, 70000, "to - 1 is out of bounds for c10::Half"),
    ("float16", -70000, 5, "from is out of bounds for c10::Half"),
    ("bfloat16", 0, 2**40 * 2**90, None),  # (past int64: refused by the argument parser, before any bound)
])
def test_random_bounds_past_a_half_dtypes_range_are_torchs_errors_and_change_nothing(dtype, low, high, message):
    state = State()
    run_program(state, [{"op": "manual_seed", "args": [3]}, {"op": "zeros", "args": [4], "kwargs": {"dtype": dtype},
                                                              "out": "r"}])
    before = state.generator.get_state()
    with pytest.raises(EngineError) as e:
        run_program(state, [{"op": "random_", "args": ["r", low, high]}])
    if message is not None:
        assert e.value.message == message and type(e.value).__name__ == "TorchRuntimeError"
    assert state.generator.get_state() == before and not state.tensors["r"].data.any()


def test_random_bounds_past_a_floating_dtypes_integers_warn_as_torch():
    res = run_program(State(), [{"op": "empty", "args": [3], "kwargs": {"dtype": "float16"}, "out": "r"},
                                {"op": "random_", "args": ["r", -50, 3000]}])
    assert list(res.warnings) == [
        "to - 1 is out of bounds [-(2^11), 2^11]. Due to precision limitations c10::Half can support discrete "
        "uniform distribution only within this range. This warning will become an error in version 1.7 release, "
        "please fix the code in advance"]
