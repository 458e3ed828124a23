"""torch's random numbers through the HTTP API: one generator per session (the default and named ones),
kept between requests and restored by a failed op list; errors as problem+json with torch's message.
The values are checked against the committed fixture of torch's outputs (tests/fixtures/torch_random.json)."""

from __future__ import annotations

import json

import numpy as np

from tests.engine.random_cases import FIXTURE, digest

from .conftest import assert_problem, ok, run

_FIXTURE = {(r["seed"], r["case"]): r for r in json.loads(FIXTURE.read_text())["cases"]}


def _values(client, sid, name, dtype="float32") -> np.ndarray:
    body = ok(client.get(f"/v1/sessions/{sid}/tensors/{name}"))
    return np.asarray(body["data"], dtype=body.get("dtype", dtype))


def test_a_seeded_session_draws_torchs_numbers_across_requests(client, session):
    ok(run(client, session, [{"op": "manual_seed", "args": [42]}]))
    ok(run(client, session, [{"op": "randn", "args": [3], "out": "a"}]))  # leaves a cached normal
    ok(run(client, session, [{"op": "randn", "args": [17], "out": "r"}]))
    assert digest(_values(client, session, "r")) == _FIXTURE[(42, "randn_after_odd[17,float32]")]["r"]


def test_named_generators_over_http(client, session):
    ok(run(client, session, [{"op": "manual_seed", "args": [1]}, {"op": "Generator", "out": "g"},
                             {"op": "manual_seed", "args": [7], "kwargs": {"generator": "g"}}]))
    ok(run(client, session, [{"op": "rand", "args": [5], "kwargs": {"generator": "g"}, "out": "a"},
                             {"op": "randn", "args": [20], "kwargs": {"generator": "g"}, "out": "r"}]))
    assert digest(_values(client, session, "r")) == _FIXTURE[(1, "generator")]["r"]


def test_a_failed_op_list_does_not_advance_the_generator(client, session):
    ok(run(client, session, [{"op": "manual_seed", "args": [0]}]))
    body = assert_problem(run(client, session, [{"op": "rand", "args": [100], "out": "x"},
                                                {"op": "randint", "args": [5, 3, [2]], "out": "y"}]), 422,
                          "invalid_argument", "random_ expects 'from' to be less than 'to', but got from=5 >= to=3")
    assert body["op_index"] == 1 and body["exception"] == "RuntimeError"
    ok(run(client, session, [{"op": "rand", "args": [16], "out": "r"}]))
    assert digest(_values(client, session, "r")) == _FIXTURE[(0, "rand[16,float32]")]["r"]


def test_get_and_set_rng_state_and_initial_seed(client, session):
    ok(run(client, session, [{"op": "manual_seed", "args": [2**64 - 1]}, {"op": "get_rng_state", "out": "s"},
                             {"op": "initial_seed", "out": "i"}, {"op": "rand", "args": [7], "out": "x"},
                             {"op": "set_rng_state", "args": ["s"]}, {"op": "rand", "args": [16], "out": "r"}]))
    assert _values(client, session, "s", "int64").shape == (5056,)
    assert int(_values(client, session, "i", "int64")) == -1  # 2**64 - 1 as int64
    assert digest(_values(client, session, "r")) == _FIXTURE[(2**64 - 1, "rand[16,float32]")]["r"]


def test_bad_generator_calls_are_problems(client, session):
    cases = [
        ([{"op": "rand", "args": [2], "kwargs": {"generator": "nope"}}], "TypeError", "no generator named 'nope'"),
        ([{"op": "zeros", "args": [3], "kwargs": {"dtype": "int64"}, "out": "s"},
          {"op": "set_rng_state", "args": ["s"]}],
         "RuntimeError", "Expected a CPUGeneratorImplState of size 5056 but found the input RNG state size to be 3"),
        ([{"op": "manual_seed", "args": ["a"]}], "TypeError", "manual_seed expected an int, got str"),
        ([{"op": "manual_seed", "args": [2**64]}], "ValueError", "Overflow when unpacking long long"),
    ]
    for ops, exception, detail in cases:
        r = run(client, session, ops)
        assert 400 <= r.status_code < 500 and r.headers["content-type"] == "application/problem+json", r.text
        assert r.json()["exception"] == exception and detail in r.json()["detail"]


def test_repeated_requests_and_repeat_draw_new_numbers_as_torch_does(client, session):
    """The plan cache never replays a random op as a constant: the same request sent three times (the cache
    records a list on its first runs) and ``repeat`` draw on, as three calls of torch's ``rand(16)`` would."""
    ok(run(client, session, [{"op": "manual_seed", "args": [0]}]))
    seen = []
    for _ in range(3):
        ok(run(client, session, [{"op": "rand", "args": [16], "out": "r"}, {"op": "mul", "args": ["r", 2.0],
                                                                              "out": "y"}]))
        seen.append(_values(client, session, "r"))
    assert digest(seen[0]) == _FIXTURE[(0, "rand[16,float32]")]["r"]
    assert not np.array_equal(seen[0], seen[1]) and not np.array_equal(seen[1], seen[2])
    ok(run(client, session, [{"op": "manual_seed", "args": [0]}]))
    ok(run(client, session, [{"op": "rand", "args": [16], "out": "r"}], repeat=3))
    np.testing.assert_array_equal(_values(client, session, "r"), seen[2])
