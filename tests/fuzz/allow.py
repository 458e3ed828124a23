"""Documented deviations from torch that the fuzzer accepts, each with its reason (README: "Deviations
from torch")."""

from __future__ import annotations

#: (mismatch class prefix, predicate on (op, torch outcome, engine outcome, tensor name), reason)
ALLOWED = []


def allowed(cls: str, op: dict, ref: dict, got: dict, tensor: str | None) -> bool:
    return any(cls.startswith(prefix) and pred(op, ref, got, tensor) for prefix, pred, _ in ALLOWED)
