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
    ("sinc", "gradgrad", "values differ"): (
        "sinc's second derivative at inputs near 0: torch's first derivative (pi x cos(pi x) - sin(pi x)) / (pi x^2) "
        "cancels catastrophically there, and the engine's double backward adds the same terms in another order: "
        "the two agree to about 1e-5 relative at those few points (2 of 943,593 in the reference sample), bit for "
        "bit or to an ulp elsewhere"),
    ("clamp", "reverse", "doesn't match the broadcast shape"): (
        "clamp with bounds of a higher rank than the input: torch's own backward fails (its gradient for self is "
        "written into the input's shape); the engine sums the gradient back to the input's shape"),
    # issue 24's ops
    **{("nn.functional.scaled_dot_product_attention", cls, "values differ"): (
        "attention with dropout_p > 0: the dropout mask is random (torch's math route draws it from its own "
        "stream of the generator; the values agree without dropout)")
       for cls in ("forward", "reverse", "gradgrad", "float32")},
    **{("nn.functional.scaled_dot_product_attention", f"{dt} {cls}", "values differ"): (
        "float16/bfloat16 attention with dropout_p > 0: the mask is random (as above); without dropout both routes "
        "agree (the fused flash kernel's blocked float32 arithmetic is reproduced: bit for bit on the samples)")
       for dt in ("float16", "bfloat16") for cls in ("forward", "reverse")},
    **{("new_empty", cls, ""): (
        "Tensor.new_empty's values are uninitialised memory in torch; the engine's are zeros (shape and dtype agree)")
       for cls in ("forward", "float32", "http", "float16 forward", "bfloat16 forward")},
    **{(op, f"{dt} {cls}", "values differ"): (
        "sorting float16/bfloat16 values: rounding to 11 or 8 bits makes many ties, and torch's CPU sort (not "
        "stable unless asked) orders tied elements differently from the engine's stable sort: the sorted values "
        "agree, the indices of tied elements (and so the gradient's placement) differ")
       for op in ("sort", "argsort") for dt in ("float16", "bfloat16") for cls in ("forward", "reverse")},
    **{(op, f"{dt} {cls}", "values differ"): (
        "digamma/polygamma of float16/bfloat16 inputs near the poles (non-positive integers): torch evaluates its "
        "float32 series, the engine its float64 one, rounded; near a pole the two differ by more than the type's "
        "ulps (the float64 samples agree)")
       for op in ("digamma", "polygamma.polygamma_n_0", "polygamma.polygamma_n_1", "polygamma.polygamma_n_2",
                  "polygamma.polygamma_n_3", "polygamma.polygamma_n_4", "special.polygamma.special_polygamma_n_0")
       for dt in ("float16", "bfloat16") for cls in ("forward", "reverse")},
    **{(op, cls, ""): _SVD_SIGNS for op in ("svd", "linalg.svd")
       for cls in ("forward", "reverse", "gradgrad", "forward_ad", "float32")},
    ("scatter", "refused", "unexpected keyword argument 'reduce'"): (
        "scatter(..., reduce='add'|'multiply') is not in the catalog: torch deprecates it for scatter_reduce and "
        "has no gradient for it (its grad_fn is NotImplemented); the engine refuses the keyword"),
    ("nn.functional.layer_norm", "bfloat16 reverse", "values differ at 2 of 2"): (
        "bfloat16 layer_norm over two elements: the input's gradient is 0 in exact arithmetic (the output is +-1 "
        "whatever the input), so both sides give rounding noise of a few bfloat16 ulps of the terms that cancel "
        "(torch's fused float32 kernel ~0.002, the engine's float32 formula of bfloat16 saved values ~0.02)"),
    **{("nn.functional.nll_loss", f"{dt} forward", "values differ at 1 of 1"): (
        "float16/bfloat16 nll_loss of a 4-d input (nll_loss2d) with reduction 'sum' or 'mean': torch's kernel sums "
        "the picked values in an order and precision the engine does not reproduce (neither a float32 sum nor a "
        "running sum in the type matches it more than half the time): a few ulps on the scalar result")
       for dt in ("float16", "bfloat16")},
    ("randn", "forward", "values differ"): _RANDOM,
    ("randn", "float32", "values differ"): _RANDOM,
    # F.dropout(training=True): which elements are zeroed is random (and so every gradient through it)
    **{("nn.functional.dropout", cls, "values differ"): _RANDOM
       for cls in ("forward", "reverse", "gradgrad", "forward_ad", "float32", "float16 forward", "float16 reverse",
                   "bfloat16 forward", "bfloat16 reverse")},
    **{(op, f"{dt} reverse", "values differ"): (
        "a float16/bfloat16 gradient torch computes in one float32 kernel and the engine as a composition of engine "
        "ops, each rounded to the type: where the gradient is a small difference of large terms (normalize's "
        "projection, logcumsumexp's weighted sums) the roundings show beyond two ulps of the result "
        "(docs/explanation/deviations.md, float16 and bfloat16)")
       for op in ("nn.functional.normalize", "logcumsumexp") for dt in ("float16", "bfloat16")},
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
