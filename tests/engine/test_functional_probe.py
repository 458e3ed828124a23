"""A forward-mode jacobian's shape probe (``functional._probe_outputs``): one plain call of the function before
the batched pass, so that a result over the limits is refused from its shapes before the pass runs. For every
request it accepts, the probe leaves no trace: results, errors, warnings, the generators' states, in-place
writes and version counters are bit for bit those of the same run without it (the differential tests below
run each program both ways)."""

from __future__ import annotations

import time

import pytest

from gradserve_server import engine
from gradserve_server.engine import functional as EF
from gradserve_server.engine.budget import Control
from gradserve_server.engine.errors import DeadlineExceededError, EngineError, LimitExceededError
from gradserve_server.engine.grad_mode import Limits, limits

FORWARD = {"vectorize": True, "strategy": "forward-mode"}


def program(body: list, outputs="y", inputs=("a",), args=("x",), setup=(), after=()) -> list:
    """Session tensors x (3, requires grad), w (3, a plain tensor the body may write into) and v (4, a leaf
    that requires grad, for a backward inside the body); then ``f`` and its forward-mode jacobian J."""
    return [{"op": "tensor", "out": "x", "args": [[0.5, -1.25, 2.0]], "kwargs": {"requires_grad": True}},
            {"op": "tensor", "out": "w", "args": [[1.0, 2.0, 3.0]]},
            {"op": "tensor", "out": "v", "args": [[1.0, -1.0, 0.5, 2.0]], "kwargs": {"requires_grad": True}},
            {"op": "tensor", "out": "i", "args": [[0]]},
            *setup,
            {"op": "function", "out": "f", "kwargs": {"inputs": list(inputs), "outputs": outputs, "ops": body}},
            {"op": "jacobian", "args": ["f", list(args) if len(args) > 1 else args[0]],
             "out": "J" if isinstance(outputs, str) else [f"J{i}" for i in range(len(outputs))], "kwargs": FORWARD},
            *after]


BODIES = {
    "randn": [{"op": "randn", "args": [3], "out": "r"}, {"op": "mul", "args": ["a", "r"], "out": "y"}],
    "rand, randperm, bernoulli": [
        {"op": "rand", "args": [3, 2], "out": "r"}, {"op": "randperm", "args": [3], "out": "p"},
        {"op": "index_select", "args": ["a", 0, "p"], "out": "s"}, {"op": "bernoulli", "args": ["r"], "out": "m"},
        {"op": "unsqueeze", "args": ["s", 1], "out": "s"}, {"op": "mul", "args": ["s", "m"], "out": "y"}],
    "normal_ into a session tensor": [{"op": "normal_", "args": ["w"]},
                                      {"op": "mul", "args": ["a", "w"], "out": "y"}],
    "dropout": [{"op": "dropout", "args": ["a"], "kwargs": {"p": 0.5, "training": True}, "out": "y"}],
    "named generator and manual_seed": [
        {"op": "manual_seed", "args": [7]}, {"op": "Generator", "out": "g"},
        {"op": "randn", "args": [3], "kwargs": {"generator": "g"}, "out": "r"},
        {"op": "rand", "args": [3], "out": "q"}, {"op": "add", "args": ["r", "q"], "out": "r"},
        {"op": "mul", "args": ["a", "r"], "out": "y"}],
    "in-place writes into a session tensor": [
        {"op": "add_", "args": ["w", 1.0]}, {"op": "mul_", "args": ["w", "w"]},
        {"op": "mul", "args": ["a", "w"], "out": "y"}],
    "backward inside the body": [
        {"op": "mul", "args": ["v", "v"], "out": "s"}, {"op": "sum", "args": ["s"], "out": "s"},
        {"op": "backward", "args": ["s"]}, {"op": "sum", "args": ["v.grad"], "out": "t"},
        {"op": "mul", "args": ["a", "t"], "out": "y"}],
    "a warning (cross without dim)": [{"op": "cross", "args": ["a", "w"], "out": "y"}],
    "a warn-once warning (index_fill_ on an expanded tensor)": [
        {"op": "expand", "args": ["w", [2, 3]], "out": "e"},
        {"op": "index_fill_", "args": ["e", 1, "i", 0.0]},
        {"op": "mul", "args": ["a", 2.0], "out": "y"}],
    "no batching rule (cumprod): the loop, with randn": [
        {"op": "randn", "args": [3], "out": "r"}, {"op": "mul", "args": ["a", "r"], "out": "p"},
        {"op": "cumprod", "args": ["p", 0], "out": "y"}],
    "value-dependent shape (nonzero of rand)": [
        {"op": "rand", "args": [3], "out": "r"}, {"op": "gt", "args": ["r", 0.5], "out": "m"},
        {"op": "nonzero", "args": ["m"], "out": "n"}, {"op": "mul", "args": ["a", 2.0], "out": "y"},
        {"op": "sum", "args": ["n"], "out": "k"}, {"op": "mul", "args": ["y", "k"], "out": "y"}],
    "two outputs": [{"op": "randn", "args": [2, 3], "out": "r"}, {"op": "mul", "args": ["r", "a"], "out": "y"},
                    {"op": "sin", "args": ["a"], "out": "z"}],
    "a shape error": [{"op": "randn", "args": [4], "out": "r"}, {"op": "mul", "args": ["a", "r"], "out": "y"}],
    "a nested dual level": [{"op": "enter_dual_level"}, {"op": "exit_dual_level"},
                            {"op": "mul", "args": ["a", 2.0], "out": "y"}],
    "a jacobian inside": [
        {"op": "function", "out": "g", "kwargs": {"inputs": ["u"], "outputs": "o", "ops": [
            {"op": "randn", "args": [3], "out": "r"}, {"op": "mul", "args": ["u", "r"], "out": "o"}]}},
        {"op": "jacobian", "args": ["g", "a"], "out": "y"}],
}
OUTPUTS = {"two outputs": ["y", "z"]}


def snapshot(state, result=None, error=None) -> dict:
    """Everything a run leaves: each tensor's bytes, dtype, shape, flags, grad_fn, version and gradient; the
    generators' states; the warnings; or the error."""
    tensors = {}
    for name, t in state.tensors.items():
        g = t._grad
        tensors[name] = (t.data.tobytes(), str(t.data.dtype), t.data.shape, t.requires_grad,
                         None if t.grad_fn is None else t.grad_fn.name, t._vc[0],
                         None if g is None else g.data.tobytes())
    gens = {n: g.get_state() for n, g in state.generators.items()}
    return {"tensors": tensors, "generator": None if state.generator is None else state.generator.get_state(),
            "generators": gens, "warned": sorted(map(str, state.warned)),
            "warnings": None if result is None else list(result.warnings),
            "error": None if error is None else (type(error).__name__, error.code, str(error))}


def run_both(monkeypatch, ops: list, lim: Limits | None = None) -> tuple[dict, dict, list]:
    """The program run with the probe and without it (each on a fresh session, the same seed); what the probe
    returned each time it ran."""
    real, told = EF._probe_outputs, []

    def probe(func, inputs):
        shapes = real(func, inputs)
        told.append(shapes)
        return shapes
    out = []
    for patched in (probe, lambda func, inputs: None):
        monkeypatch.setattr(EF, "_probe_outputs", patched)
        state = engine.State()
        engine.run_program(state, [{"op": "manual_seed", "args": [1234]}])
        try:
            result = engine.run_program(state, ops, limits=lim or Limits())
            out.append(snapshot(state, result))
        except EngineError as e:
            out.append(snapshot(state, error=e))
    return out[0], out[1], told


@pytest.mark.parametrize("name", list(BODIES))
def test_the_probe_leaves_results_errors_rng_and_warnings_as_they_were(monkeypatch, name):
    ops = program(BODIES[name], OUTPUTS.get(name, "y"),
                  after=[{"op": "randn", "args": [2], "out": "after"}])  # the generator as the pass left it
    probed, plain, told = run_both(monkeypatch, ops)
    assert probed == plain
    assert len(told) == 1  # the probe ran (once: the jacobian inside the function's does not probe again)
    if plain["error"] is None and name != "a nested dual level":
        assert told[0] is not None, "the probe told no shapes: nothing would be refused early"
        names = ["J"] if len(told[0]) == 1 else [f"J{i}" for i in range(len(told[0]))]
        assert [(*shape, 3) for shape in told[0]] == [plain["tensors"][n][2] for n in names]  # the pass's too


def test_the_differential_tests_can_fail(monkeypatch):
    """A probe whose call was not undone would leave its in-place writes for the pass to read: the comparison sees
    it. (A forward-mode jacobian's body cannot draw random numbers: torch's vmap refuses them, and so does the
    engine's pass, so the probe's draws from copies of the generators are never the only difference.)"""
    real = EF._probe_outputs

    def leaky(func, inputs):
        func(*inputs)  # (not under a journal: its writes into w stay)
        return real(func, inputs)
    body = program(BODIES["in-place writes into a session tensor"])
    monkeypatch.setattr(EF, "_probe_outputs", leaky)
    state = engine.State()
    engine.run_program(state, [{"op": "manual_seed", "args": [1234]}])
    engine.run_program(state, body, limits=Limits())
    monkeypatch.undo()
    _, plain, _ = run_both(monkeypatch, body)
    assert snapshot(state)["tensors"]["J"] != plain["tensors"]["J"]


def test_the_existing_transform_functions_give_the_same_bits_with_the_probe(monkeypatch):
    """tests/engine/test_functional_vmap's functions (batched rules, a loop, a forward-over-reverse hessian) at
    the engine level under limits: the same arrays with and without the probe, which the hessian skips."""
    pytest.importorskip("torch")
    from tests.engine import test_functional_vmap as V
    E = engine.tensor
    cases = [lambda: EF.jacobian(V.batched(V.EN), (E(V.X), E(V.Y)), **FORWARD),
             lambda: EF.jacobian(V.fallback(V.EN), (E(V.X), E(V.Y)), **FORWARD),
             lambda: EF.hessian(V.energy(V.EN), E(V.X), vectorize=True, outer_jacobian_strategy="forward-mode")]
    flat, real, told = [], EF._probe_outputs, []
    for patched in (lambda func, inputs: told.append(real(func, inputs)) or told[-1], lambda func, inputs: None):
        monkeypatch.setattr(EF, "_probe_outputs", patched)
        with limits(Limits()):
            got = [c() for c in cases]
        flat.append(list(arrays(got)))
    assert flat[0] == flat[1] and len(flat[0]) == 9
    # the two jacobians probed (each output's shape); the hessian's blocks were refused from its inputs' shapes
    assert told == [((15,), (2, 5)), ((5,), (4, 2))]


def arrays(value):
    """The bytes of every tensor in a transform's nested tuples."""
    if isinstance(value, (tuple, list)):
        for v in value:
            yield from arrays(v)
    else:
        yield value.data.tobytes()


def tall(n: int, m: int, sines: int = 0) -> list:
    """x of n elements; f(a) = the outer product of a with a ramp of m, then ``sines`` sines: an (n, m) output,
    an (n, m, n) jacobian."""
    body = [{"op": "arange", "args": [m], "kwargs": {"dtype": "float32"}, "out": "r"},
            {"op": "unsqueeze", "args": ["a", 1], "out": "p"}, {"op": "mul", "args": ["p", "r"], "out": "y"},
            *[{"op": "sin", "args": ["y"], "out": "y"}] * sines]
    return [{"op": "ones", "out": "x", "args": [n], "kwargs": {"requires_grad": True}},
            {"op": "function", "out": "f", "kwargs": {"inputs": ["a"], "outputs": "y", "ops": body}},
            {"op": "jacobian", "args": ["f", "x"], "out": "J", "kwargs": FORWARD}]


@pytest.mark.parametrize("lim, words", [
    (Limits(max_elements_per_tensor=50_000), "jacobian block of shape [20, 200, 20] would have 80000 elements"),
    (Limits(max_bytes=300_000), "a jacobian block of shape [20, 200, 20] needs 320000 bytes"),
    (Limits(max_response_bytes=100_000), "the jacobian in the response would carry about"),
])
def test_a_forward_mode_jacobian_over_a_limit_is_refused_before_its_batched_pass(monkeypatch, lim, words):
    """Per tensor, per run, and the response (the result returned): each refused from the probe's shapes, the
    batched pass never run. Its tangents (20, 20, 200) would fit each limit until the last op makes them."""
    passes = []
    real = EF._jvp_batched
    monkeypatch.setattr(EF, "_jvp_batched", lambda *a: passes.append(1) or real(*a))
    with pytest.raises(LimitExceededError) as err:
        engine.run_program(engine.State(), tall(20, 200), limits=lim, respond=["J"])
    assert words in str(err.value) and passes == []
    result = engine.run_program(engine.State(), tall(20, 20), limits=lim, respond=["J"])  # within: computed
    assert result.changed and passes == [1]


def test_the_response_limit_applies_only_when_the_response_shows_the_result(monkeypatch):
    ops = [*tall(20, 200), {"op": "sum", "args": ["J"], "out": "s"}]
    result = engine.run_program(engine.State(), ops, limits=Limits(max_response_bytes=100_000), respond=["s"])
    assert "s" in result.changed


def test_the_probe_runs_under_the_deadline(monkeypatch):
    """The probe is the function's call like any other: a deadline that passes while it runs stops it there
    (the request's 504), and the batched pass never starts."""
    control, passes, stopped = Control(30), [], []
    real_probe, real_pass = EF._probe_outputs, EF._jvp_batched

    def probe(func, inputs):
        control.deadline = time.monotonic() - 1  # passed as the probe starts: its first op stops it
        try:
            return real_probe(func, inputs)
        except DeadlineExceededError:
            stopped.append(1)
            raise
    monkeypatch.setattr(EF, "_probe_outputs", probe)
    monkeypatch.setattr(EF, "_jvp_batched", lambda *a: passes.append(1) or real_pass(*a))
    with pytest.raises(DeadlineExceededError):
        engine.run_program(engine.State(), tall(20, 20, sines=5), limits=Limits(), control=control)
    assert stopped == [1] and passes == []


def test_a_probe_over_the_limits_leaves_the_error_to_the_pass(monkeypatch):
    """The probe's own refusal (an intermediate over the per-tensor limit) tells nothing: the pass runs as it
    would have and its error is the one given, word for word."""
    body = [{"op": "expand", "args": ["a", [400, 3]], "out": "e"}, {"op": "mul", "args": ["e", 2.0], "out": "m"},
            {"op": "sum", "args": ["m", 0], "out": "y"}]
    probed, plain, told = run_both(monkeypatch, program(body), Limits(max_elements_per_tensor=1000))
    assert told == [None] and probed == plain and plain["error"][0] == "LimitExceededError"


def test_a_function_that_takes_its_own_forward_mode_jacobian_stops_at_once():
    """Recursion: the inner jacobian's dual level is nested in the outer's (torch's error), in the probe and
    then in the pass, at the second level; a probe's RecursionError (a reverse-mode jacobian's recursion under
    it) is raised, not retried, so no function costs a probe per level."""
    ops = [{"op": "tensor", "args": [[1.0, 2.0]], "out": "x"},
           {"op": "function", "out": "g", "kwargs": {"inputs": ["u"], "outputs": "y", "ops": [
               {"op": "jacobian", "args": ["g", "u"], "out": "y", "kwargs": FORWARD}]}},
           {"op": "jacobian", "args": ["g", "x"], "kwargs": FORWARD}]
    started = time.monotonic()
    with pytest.raises(EngineError) as err:
        engine.run_program(engine.State(), ops, limits=Limits())
    assert err.value.code == "nested_dual_level" and time.monotonic() - started < 1


def test_a_recorded_plan_holds_the_pass_alone(monkeypatch):
    """A session's forward-mode jacobian of a function writing in place is recorded, then replayed: the probe's
    write (undone by its journal, outside any kernel) is not on the plan's tape, so every replay writes once,
    as the eager interpreter does."""
    from gradserve_server.engine.trace.cache import PlanCache
    from gradserve_server.engine.trace.dispatch import dispatch
    setup = program([{"op": "add_", "args": ["w", 1.0]}, {"op": "mul", "args": ["a", "w"], "out": "y"}])[:-1]
    ops = program([])[-1:]
    cache, planned, eager = PlanCache(), engine.State(), engine.State()
    for state in (planned, eager):
        engine.run_program(state, setup)
    routes = []
    for _ in range(4):
        routes.append(dispatch(cache, planned, ops, session=True, limits=Limits(), respond="all")[1].name)
        engine.run_program(eager, ops, limits=Limits())
        assert snapshot(planned) == snapshot(eager)
    assert routes == ["recorded", "recorded", "replayed", "replayed"]
