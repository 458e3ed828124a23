"""A fast accept-only check of op-list requests, equivalent to the TypeAdapters on what they accept as is.

``OpsRequestAdapter``/``EvalRequestAdapter`` stay the definition (and the OpenAPI schema) of a valid body.
For the common body, whose every value already has its exact JSON type, validating is only a check: pydantic
would return an equal copy. These functions make that check with whole-list passes in C (``map``,
``set().union``, ``str.join``) instead of per-op work, which keeps a 10,000-op list well under the time
``orjson.loads`` takes. They answer True (the parsed data is the validated request, unchanged) or False;
False means "not known valid", and the caller then runs the TypeAdapter, which coerces what lax mode
coerces and reports errors exactly as before. So nothing is accepted here that the adapter would reject,
and every error still comes from the adapter (``tests/app/test_fast_validation.py`` checks both on random
bodies).

The input must come from ``orjson.loads`` (dict keys are strings).
"""

from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import Any

OP_KEYS = frozenset({"op", "args", "kwargs", "out", "no_grad"})
OPS_REQUEST_KEYS = frozenset({"ops", "no_grad", "repeat", "record", "return", "until"})
VIEW_LEVELS = frozenset({"full", "meta", "auto"})  # ViewLevel in app.schemas.ops
EVAL_REQUEST_KEYS = frozenset({"ops", "no_grad", "return"})
MAX_NAME_LENGTH = 200  # Name in app.schemas.ops
MAX_OUT_NAME_LENGTH = 64  # OutName in app.schemas.ops (the engine's limit on names it binds)

_get = dict.get
_op_name = itemgetter("op")
_NONE = type(None)


def _strings(values) -> str | None:
    """The concatenation of ``values`` when every one is a str, else None (str.join checks the types)."""
    try:
        return "".join(values)
    except TypeError:
        return None


def _names_ok(names: list, joined: str) -> bool:
    """Name: 1 to 200 characters."""
    return (not names or (min(map(len, names)) >= 1 and (len(joined) <= MAX_NAME_LENGTH
                                                           or max(map(len, names)) <= MAX_NAME_LENGTH)))


def _out_names_ok(names: list) -> bool:
    """OutName: ^[A-Za-z_][A-Za-z0-9_]*$ (an ASCII identifier), at most 200 characters."""
    joined = _strings(names)
    if joined is None or not joined.isascii():
        return False
    return all(map(str.isidentifier, names)) and (len(joined) <= MAX_OUT_NAME_LENGTH
                                                   or max(map(len, names), default=0) <= MAX_OUT_NAME_LENGTH)


def _name_list_ok(value: Any) -> bool:
    if type(value) is not list:
        return False
    joined = _strings(value)
    return joined is not None and _names_ok(value, joined)


def ops_ok(ops: Any) -> bool:
    """``list[Op]`` with exact types."""
    if type(ops) is not list:
        return False
    if not ops:
        return True
    n = len(ops)
    if set(map(type, ops)) != {dict}:
        return False
    keys = set().union(*ops)
    if not OP_KEYS.issuperset(keys):
        return False
    try:
        if _strings(map(_op_name, ops)) is None:  # every op has "op", a str
            return False
    except KeyError:
        return False
    if "args" in keys and not {list}.issuperset(map(type, map(_get, ops, repeat("args", n), repeat([], n)))):
        return False
    if "kwargs" in keys and not {dict}.issuperset(map(type, map(_get, ops, repeat("kwargs", n),
                                                                 repeat({}, n)))):
        return False
    if "no_grad" in keys and not {bool}.issuperset(map(type, map(_get, ops, repeat("no_grad", n),
                                                                  repeat(False, n)))):
        return False
    if "out" in keys:
        outs = list(map(_get, ops, repeat("out", n)))
        types = set(map(type, outs))
        if types == {str}:
            return _out_names_ok(outs)
        if not {str, list, _NONE}.issuperset(types):
            return False
        if not _out_names_ok([o for o in outs if type(o) is str]):
            return False
        if not all(map(_out_names_ok, [o for o in outs if type(o) is list])):
            return False
    return True


def ops_request_ok(data: Any) -> bool:
    """True when ``data`` is an ``OpsRequest`` exactly as ``OpsRequestAdapter.validate_python`` returns it."""
    if type(data) is not dict or "ops" not in data or not OPS_REQUEST_KEYS.issuperset(data):
        return False
    if "no_grad" in data and type(data["no_grad"]) is not bool:
        return False
    if "repeat" in data and (type(data["repeat"]) is not int or data["repeat"] < 1):
        return False
    if "until" in data and not _out_names_ok([data["until"]]):
        return False
    if "record" in data and not _name_list_ok(data["record"]):
        return False
    if "return" in data and not _return_ok(data["return"]):
        return False
    return ops_ok(data["ops"])


def _return_ok(value: Any) -> bool:
    """``list[Name] | dict[Name, ViewLevel]``."""
    if type(value) is dict:
        return (_name_list_ok(list(value)) and _strings(value.values()) is not None
                and VIEW_LEVELS.issuperset(value.values()))
    return _name_list_ok(value)


def eval_request_ok(data: Any) -> bool:
    """True when ``data`` is an ``EvalRequest`` exactly as ``EvalRequestAdapter.validate_python`` returns it."""
    if type(data) is not dict or "ops" not in data or not EVAL_REQUEST_KEYS.issuperset(data):
        return False
    if "no_grad" in data and type(data["no_grad"]) is not bool:
        return False
    if "return" in data and not _name_list_ok(data["return"]):
        return False
    return ops_ok(data["ops"])
