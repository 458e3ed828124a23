"""bench/functional.py's repeat workload as plain data (it imports no engine): an explicit Euler step of
dy/dt = -y^3 + sin(t) on a 10-dimensional state, run ``repeat=200`` times on a session holding ``y`` and ``t``.
bench/gate.py's workers read it from the driver's tree, so a tree from before this file existed is timed on
the same list."""

from __future__ import annotations

#: one step: y += 0.01 * (sin(t) - y^3); t += 0.01
STEP = [{"op": "pow", "args": ["y", 3], "out": "y3"}, {"op": "sin", "args": ["t"], "out": "st"},
        {"op": "sub", "args": ["st", "y3"], "out": "f"}, {"op": "mul", "args": ["f", 0.01], "out": "hf"},
        {"op": "add", "args": ["y", "hf"], "out": "y"}, {"op": "add", "args": ["t", 0.01], "out": "t"}]
REPEAT = 200


def float64_tensor(name: str, a) -> dict:
    """The op that makes ``name`` a float64 tensor over ``a`` (bench/functional.py's inputs too)."""
    return {"op": "tensor", "args": [a], "kwargs": {"dtype": "float64"}, "out": name}


def state_ops(y0, t0) -> list:
    """The ops that make the session's state: ``y`` and ``t`` as float64 tensors over ``y0`` and ``t0``."""
    return [float64_tensor("y", y0), float64_tensor("t", t0)]
