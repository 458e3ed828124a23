"""Where the engine knowingly differs from torch on an OpInfo sample, each with its reason; and the
mismatches another branch (opfix, issue 21's wrong gradients and server errors) is fixing.

A rule is ``(OpInfo name, mismatch class, text the detail contains or "")``. The suite reports a mismatch
that matches a rule as a documented deviation (or as pending), never as passing; the README's deviations
section summarises this table.
"""

from __future__ import annotations

_SVD_SIGNS = ("singular vectors are unique up to sign: numpy's LAPACK and torch's MKL pick the sign of a "
              "(U column, Vh row) pair differently about a third of the time (README, Deviations from torch); "
              "the singular values and every sign-invariant result agree")
_RANDOM = "random numbers come from numpy's generator, not torch's: shapes and dtypes agree, values cannot"

#: documented deviations: rule -> reason
DEVIATIONS: dict[tuple[str, str, str], str] = {
    ("clamp", "reverse", "doesn't match the broadcast shape"): (
        "clamp with bounds of a higher rank than the input: torch's own backward fails (its gradient for self is "
        "written into the input's shape); the engine sums the gradient back to the input's shape"),
    # issue 24's ops
    **{("nn.functional.scaled_dot_product_attention", cls, "values differ"): (
        "attention with dropout_p > 0: the dropout mask is random (torch's math route draws it from its own "
        "stream of the generator; the values agree without dropout)")
       for cls in ("forward", "reverse", "gradgrad", "float32")},
    **{("new_empty", cls, ""): (
        "Tensor.new_empty's values are uninitialised memory in torch; the engine's are zeros (shape and dtype agree)")
       for cls in ("forward", "float32", "http")},
    **{(op, cls, ""): _SVD_SIGNS for op in ("svd", "linalg.svd")
       for cls in ("forward", "reverse", "gradgrad", "forward_ad", "float32")},
    ("scatter", "refused", "unexpected keyword argument 'reduce'"): (
        "scatter(..., reduce='add'|'multiply') is not in the catalog: torch deprecates it for scatter_reduce and "
        "has no gradient for it (its grad_fn is NotImplemented); the engine refuses the keyword"),
    ("randn", "forward", "values differ"): _RANDOM,
    ("randn", "float32", "values differ"): _RANDOM,
    # F.dropout(training=True): which elements are zeroed is random (and so every gradient through it)
    **{("nn.functional.dropout", cls, "values differ"): _RANDOM
       for cls in ("forward", "reverse", "gradgrad", "forward_ad", "float32")},
}

_CONSTANT_GRAD = ("backward(create_graph=True) through a formula that yields a constant: torch's gradient "
                  "requires grad, the engine's does not (issue 21, found by random programs)")

#: mismatches fixed on another branch, shown here until it is merged: none (issue 21's opfix branch has landed;
#: what it fixed now counts as a mismatch again if it comes back)
PENDING_OPFIX: dict[tuple[str, str, str], str] = {}


def _match(table: dict, m) -> str | None:
    for (op, cls, text), reason in table.items():
        if op == m.op and cls == m.cls and text in m.detail:
            return reason
    return None


def classify(m) -> tuple[str, str | None]:
    """("deviation" | "pending" | "mismatch", reason)."""
    reason = _match(DEVIATIONS, m)
    if reason is not None:
        return "deviation", reason
    reason = _match(PENDING_OPFIX, m)
    if reason is not None:
        return "pending", reason
    return "mismatch", None
