"""The dtype of an op's result, from the op table's ``promotion`` declaration (the catalog's), decided when a call is
recorded: torch's errors that depend only on dtypes (``mean(): could not infer output dtype...``, ``"gelu" not
implemented for 'Long'``, ``result type Float can't be cast...``) are raised at the line that made the call, and a
result's dtype is known without asking (an integer result does not require grad).

A declaration is a rule, optionally with the operands it reads and the refusals torch makes, separated by `` | ``::

    result_type                     torch.result_type of the operands
    float                           the same, then an integral or bool dtype gives the default float (exp, atan2)
    true_divide                     float, unless a rounding_mode is given: result_type (div)
    long                            the same, then an integral or bool dtype gives int64 (sum, cumsum)
    same                            the first operand's dtype (neg, relu, amax)
    bool / int64 / float64          that dtype (comparisons; argmax; float_power)
    broadcast_type                  result_type of the operands broadcast first (torch.broadcast_tensors: a
                                    0-d tensor among tensors with dimensions counts as one of them: mse_loss)
    result_type(self,other)         the operands: those arguments (default: every tensor argument; ``float()``:
                                    none, the default float: linspace)
    ... | integral: RuntimeError: mean(): ... Got: {dtype}
                                    a refusal: when the operands' result_type is not floating, torch's exception
                                    class and message ({dtype}: the ScalarType name, ``Long``)

An op returning a named tuple (``returns``) declares its fields' dtypes after `` => ``, one rule each:
``same => same,int64`` (sort's values keep the input's dtype, its indices are int64); the rule before them is its
one-tensor form's (``max(x, y)``).

Refusal conditions: ``bool`` (the operands' result_type is bool), ``integral`` (it is not floating), ``any_bool``
(an operand is bool, tensor or number), ``all_bool`` (every operand is), ``bool_tensors`` (every operand is a bool
tensor), ``bool_number`` (the result_type is bool and an operand is a Python number). They are tried in order.
Everything is read from the dtype table ``_dtypes.FACTS``.
"""

from __future__ import annotations

from gradserve.torch._dtypes import FACTS, default_float

#: a dtype's category in torch's promotion: bool < integral < floating
CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}
#: an operand's priority: a tensor with dimensions, a 0-d tensor, a Python number
DIM, ZERO, NUMBER = 2, 1, 0


def category(dtype: str) -> int:
    return CATEGORY[FACTS[dtype][0]]


def is_floating(dtype: str) -> bool:
    return FACTS[dtype][0] == "f"


def promote(a: str, b: str) -> str:
    """c10's promoteTypes: bool yields to anything, integers to floats, the wider of one kind; an unsigned and a
    signed integer give the signed one when it is wider, else the signed of twice the unsigned's size."""
    if a == b:
        return a
    (ka, sa, _), (kb, sb, _) = FACTS[a], FACTS[b]
    if ka == "b":
        return b
    if kb == "b":
        return a
    if (ka == "f") != (kb == "f"):
        return a if ka == "f" else b
    if ka == kb:
        if sa != sb:
            return a if sa > sb else b
        return "float32" if ka == "f" else a  # (two floats of one size: float16 and bfloat16 give float32)
    unsigned, signed = (a, b) if ka == "u" else (b, a)
    if FACTS[signed][1] > FACTS[unsigned][1]:
        return signed
    return next(d for d, (k, size, _) in FACTS.items() if k == "i" and size == 2 * FACTS[unsigned][1])


def number_dtype(value) -> str:
    """The dtype of a Python number as an operand."""
    if isinstance(value, bool):
        return "bool"
    return "int64" if isinstance(value, int) else default_float()


def result_type(operands: list[tuple[str, int]]) -> str | None:
    """torch.result_type of (dtype, priority) operands: each priority group promoted within, then a lower group
    counts only where it is of a higher category (or the higher group is bool)."""
    groups: list[str | None] = [None, None, None]
    for dtype, priority in operands:
        have = groups[priority]
        groups[priority] = dtype if have is None else promote(have, dtype)
    out = None
    for dtype in reversed(groups):  # dimensions first
        if dtype is None:
            continue
        if out is None:
            out = dtype
        elif category(out) == 0 or category(dtype) > category(out):
            out = promote(out, dtype)
    return out


class Refused(Exception):
    """torch's refusal of the operands' dtypes: ``kind`` (the exception class's name) and ``message``."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind, self.message = kind, message


_PARSED: dict[str, tuple] = {}


def parse(declaration: str) -> tuple[str, tuple[str, ...] | None, tuple[tuple[str, str, str], ...]]:
    """(rule, operand argument names or None, refusals as (condition, class, message))."""
    got = _PARSED.get(declaration)
    if got is None:
        head, *rest = [part.strip() for part in declaration.split(" | ")]
        head = head.partition(" => ")[0]
        rule, sep, names = head.partition("(")
        operands = tuple(n.strip() for n in names.rstrip(")").split(",") if n.strip()) if sep else None
        refusals = []
        for part in rest:
            condition, _, tail = part.partition(": ")
            kind, _, message = tail.partition(": ")
            refusals.append((condition, kind, message))
        got = _PARSED[declaration] = (rule, operands, tuple(refusals))
    return got


def fields(declaration: str) -> tuple[str, ...]:
    """The rules of a named tuple's fields (``same => same,int64``: ``("same", "int64")``), or ()."""
    got = _FIELDS.get(declaration)
    if got is None:
        tail = declaration.split(" | ")[0].partition(" => ")[2]
        got = _FIELDS[declaration] = tuple(r.strip() for r in tail.split(",") if r.strip())
    return got


_FIELDS: dict[str, tuple] = {}


def predict(declaration: str, operands: list[tuple[str, int]], rounding_mode=None) -> str | None:
    """The result's dtype under ``declaration`` for (dtype, priority) operands; raises ``Refused``. None: not
    decided by the rule."""
    rule, _, refusals = parse(declaration)
    if rule in _FIXED and not refusals:
        return rule
    if not operands:  # (a creation op's: float() is the default float)
        return default_float() if rule == "float" else rule if rule in _FIXED else None
    if rule == "broadcast_type":
        if any(p == DIM for _, p in operands):  # (broadcast, every tensor has the dimensions)
            operands = [(d, DIM if p == ZERO else p) for d, p in operands]
        rule = "result_type"
    promoted = result_type(operands)
    for condition, kind, message in refusals:
        if _holds(condition, promoted, operands):
            raise Refused(kind, message.replace("{dtype}", FACTS[promoted][2]))
    if rule == "result_type" or rule == "true_divide" and rounding_mode is not None:
        return promoted
    if rule in ("float", "true_divide"):
        return promoted if is_floating(promoted) else default_float()
    if rule == "long":
        return promoted if is_floating(promoted) else "int64"
    if rule == "same":
        return operands[0][0]
    if rule in _FIXED:
        return rule
    return None


#: rules that name their result's dtype
_FIXED = frozenset({"bool", "int64", "float64"})


def _holds(condition: str, promoted: str, operands: list[tuple[str, int]]) -> bool:
    if condition == "bool":
        return promoted == "bool"
    if condition == "integral":
        return not is_floating(promoted)
    if condition == "any_bool":
        return any(d == "bool" for d, _ in operands)
    if condition == "all_bool":
        return all(d == "bool" for d, _ in operands)
    if condition == "bool_tensors":
        return all(d == "bool" and p != NUMBER for d, p in operands)
    if condition == "bool_number":
        return promoted == "bool" and any(p == NUMBER for _, p in operands)
    return False


def can_hold(result: str, target: str) -> bool:
    """Can an in-place op write a ``result`` into a ``target`` (torch's canCast: no float into an integer, no
    integer into bool)?"""
    return category(result) <= category(target)
