"""Documented deviations from torch that the fuzzer accepts, each with its reason
(docs/explanation/deviations.md)."""

from __future__ import annotations

#: (mismatch class prefix, predicate on (op, torch outcome, engine outcome, tensor name), reason)
ALLOWED = [
    ("grad_fn:", lambda op, ref, got, n: got.get("http") and _refused_view(ref, n),
     "over HTTP a view whose base changed after split/chunk/unbind or no_grad shows its last grad_fn; torch "
     "raises on reading grad_fn (the engine raises torch's error when the view is used)"),
    ("is_leaf:", lambda op, ref, got, n: got.get("http") and _refused_view(ref, n),
     "as grad_fn: torch raises on reading is_leaf of such a view"),
    ("error-", lambda op, ref, got, n: bool(ref["error"]) and "INTERNAL ASSERT FAILED" in ref["error"][1],
     "torch fails its own internal assertion (a torch bug, e.g. variable.cpp's `out != nullptr` on an in-place "
     "op of a tensor whose grad_fn was retained through a view): the engine does what the op means"),
]


def _refused_view(ref: dict, name: str | None) -> bool:
    t = ref["tensors"].get(name) if name else None
    return t is not None and isinstance(t["grad_fn"], str) and t["grad_fn"].startswith("error: ")


def allowed(cls: str, op: dict, ref: dict, got: dict, tensor: str | None) -> bool:
    return any(cls.startswith(prefix) and pred(op, ref, got, tensor) for prefix, pred, _ in ALLOWED)
