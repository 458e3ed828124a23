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

#: mismatches issue 21 lists under "Wrong gradients", "Server errors on valid input" and "found by random
#: programs": fixed on the opfix branch; until it is merged the suite shows them here
PENDING_OPFIX: dict[tuple[str, str, str], str] = {
    ("clamp", "reverse", ""): "clamp with tensor bounds where min > max: the gradient goes to min, torch's to max",
    ("clamp", "forward_ad", ""): "clamp with tensor bounds where min > max: the tangent follows min, torch's max",
    ("clamp", "gradgrad", ""): "clamp with tensor bounds where min > max",
    ("masked_select", "reverse", "nonzero on 0d"): "masked_select backward of a 0-d input: numpy's error",
    ("masked_select", "gradgrad", "nonzero on 0d"): "masked_select backward of a 0-d input: numpy's error",
    **{(op, "gradgrad", "does not require grad"): _CONSTANT_GRAD
       for op in ("softmax", "softmax.with_dtype", "nn.functional.softmin", "nn.functional.softmin.with_dtype",
                  "log_softmax", "log_softmax.with_dtype")},
    **{("nn.functional.pad.circular", cls, "single memory location"): "circular pad of an empty batch"
       for cls in ("refused", "reverse", "gradgrad", "forward_ad", "float32")},
    **{("cat", cls, "Dimension out of range"): "cat with a legacy 1-D empty tensor"
       for cls in ("refused", "reverse", "gradgrad", "forward_ad", "float32")},
    ("squeeze.multiple", "reverse", "tuple index out of range"): "squeeze(0-d, (0,)) backward",
    ("squeeze.multiple", "gradgrad", "tuple index out of range"): "squeeze(0-d, (0,)) backward",
    ("trace", "reverse", ""): "trace backward on a tall matrix: stray ones below the diagonal",
    ("trace", "gradgrad", ""): "trace backward on a tall matrix: stray ones below the diagonal",
    **{(op, cls, "cannot reshape array of size 0"): "det/slogdet/logdet/cholesky/solve of empty matrices"
       for op in ("logdet", "linalg.det", "linalg.slogdet", "linalg.cholesky", "linalg.solve", "linalg.inv")
       for cls in ("refused", "reverse", "gradgrad", "forward_ad", "float32")},
    **{(op, "timeout", ""): "polygamma(n >= 1) (digamma's derivatives) at large negative x: time linear in |x|"
       for op in ("digamma", "polygamma.polygamma_n_0", "polygamma.polygamma_n_1", "polygamma.polygamma_n_2",
                  "polygamma.polygamma_n_3", "polygamma.polygamma_n_4", "special.polygamma.special_polygamma_n_0",
                  "mvlgamma.mvlgamma_p_1", "mvlgamma.mvlgamma_p_3", "mvlgamma.mvlgamma_p_5", "lgamma")},
    ("prod", "gradgrad", "does not require grad"): "prod's second derivative where the input holds a zero",
    ("nn.functional.nll_loss", "gradgrad", "does not require grad"): _CONSTANT_GRAD,
    **{(op, cls, "to have non-zero size"): "linalg.norm(empty(0, 0), inf)"
       for op in ("linalg.norm", "linalg.norm.subgradients_at_zero")
       for cls in ("refused", "float32", "reverse", "gradgrad", "forward_ad")},
    ("nn.functional.normalize", "forward_ad", "AttributeError"): "JVP of a p=0 norm: an internal AttributeError",
    ("linalg.vector_norm", "forward_ad", "AttributeError"): "JVP of a p=0 norm: an internal AttributeError",
    ("linalg.norm", "forward_ad", "AttributeError"): "JVP of a p=0 norm: an internal AttributeError",
    ("linalg.norm.subgradients_at_zero", "forward_ad", "AttributeError"): "JVP of a p=0 norm: an internal "
                                                                          "AttributeError",
    ("norm", "forward_ad", "AttributeError"): "JVP of a p=0 norm: an internal AttributeError",
}


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
