"""torch's refusals that depend on arguments' metadata only, from the op table's ``checks`` declarations (the
catalog's): ``where`` of a float condition, ``linalg.inv`` of a non-square or integer matrix, ``conv2d`` of an input
whose channels are not the weight's, ``nll_loss`` of a float target... are raised at the line that made the call,
with torch's class and message, and nothing is sent. The rules and their evaluator are the engine's
(``_rules``, a link to ``gradserve_server/engine/rules.py``, where the declaration format and every rule are
described); here they read a handle's known facts: a check whose facts the client does not know (a shape or dtype
the server has not said) is left to the server, which raises the same error at the next sync.
"""

from __future__ import annotations

from gradserve.torch import _promotion as P
from gradserve.torch import _rules
from gradserve.torch._rules import RULES, UNKNOWN, failure, first_failure, parse  # noqa: F401


def _tensor_facts(t):
    """(dtype or None, shape tuple or None) of a handle; (None, None) for anything else."""
    from gradserve.torch._tensor import Tensor

    if not isinstance(t, Tensor):
        return None, None
    return t._dtype, (tuple(t._shape) if t._shape is not None else None)


def _number_result(dtype: str, number) -> str:
    return P.result_type([(dtype, P.DIM), (P.number_dtype(number), P.NUMBER)])


def _route_facts(t):
    """(requires_grad or None, strides or None) of a handle, where the client knows them."""
    from gradserve.torch import _layout, _meta
    from gradserve.torch._tensor import Tensor

    if not isinstance(t, Tensor):
        return None, None
    grad, layout = _meta.peek(t, "requires_grad"), _layout.of(t)
    return (None if grad is _meta.UNKNOWN else bool(grad)), (None if layout is None else tuple(layout[0]))


_rules.bind(_tensor_facts, _number_result, P.can_hold, _route_facts)
