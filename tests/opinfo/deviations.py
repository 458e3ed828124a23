"""Where the engine knowingly differs from torch on an OpInfo sample, each with its reason; and the
mismatches another branch (opfix, issue 21's wrong gradients and server errors) is fixing.

A rule is ``(OpInfo name, mismatch class, text the detail contains or "")``. The suite reports a mismatch
that matches a rule as a documented deviation (or as pending), never as passing; the README's deviations
section summarises this table.
"""

from __future__ import annotations

#: documented deviations: rule -> reason
DEVIATIONS: dict[tuple[str, str, str], str] = {
}

#: mismatches issue 21 lists under "Wrong gradients" and "Server errors on valid input": fixed on the
#: opfix branch; until it is merged the suite shows them here
PENDING_OPFIX: dict[tuple[str, str, str], str] = {
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
