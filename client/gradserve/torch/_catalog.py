"""The op catalog (``GET /v1/ops``), fetched once per process, and how a call becomes an op object.

Which namespace an op appears in follows the catalog: every op is a ``gradserve.torch`` function and,
where its entry says ``method``, a Tensor method; a dotted name (``linalg.det``) is its submodule's; the
entry's ``exports`` add the other public names torch gives it (``torch.nn.functional.relu``,
``torch.special.expit``). An entry with a ``namespaces`` list (e.g. ``["torch.autograd.functional"]``) goes
exactly there. What a call returns (a tuple, a named tuple, a Python value) is the entry's too: the client
holds no per-op table, so an op added to the server's table needs nothing here.
"""

from __future__ import annotations

import functools
import math
from collections import namedtuple

import numpy as np

from gradserve.torch import _context
from gradserve.torch._dtypes import DTYPES, Size, dtype

_CATALOG: dict[str, dict] = {}

#: parameters that take a size or a list of dims, which torch also takes as trailing ints (x.view(2, 3))
SIZE_PARAMS = frozenset({"size", "shape", "sizes", "dims", "repeats"})
#: an entry's ``python_result`` (torch returns a Python value, the server binds a 0-d tensor: read at once)
PYTHON_TYPES = {"bool": bool, "int": int, "float": float}


@functools.cache
def return_type(op: str):
    """The named tuple type of an op whose catalog entry lists ``returns`` (torch.return_types.linalg_svd...),
    or None."""
    fields = catalog()[op].get("returns")
    return namedtuple(op.replace(".", "_"), fields) if fields else None


def returns_named_tuple(entry: dict, args: tuple, kwargs: dict) -> bool:
    """Does this call of an op with ``returns`` give the named tuple? Always, unless the entry names the
    argument whose presence makes it one (``max(x)`` is a tensor, ``max(x, 0)`` a (values, indices) pair)."""
    when = entry.get("returns_when")
    if not when:
        return True
    value = argument(entry["name"], when, args, kwargs)
    from gradserve.torch._tensor import Tensor
    return value is not None and not isinstance(value, Tensor)


def returns_tuple(entry: dict, args: tuple, kwargs: dict) -> bool:
    """Does this call return a plain tuple of tensors (split's pieces, max_pool2d(return_indices=True))?"""
    return entry.get("variable_outputs", False) or any(
        argument(entry["name"], flag[1:], args, kwargs) is None if flag[0] == "!" else
        argument(entry["name"], flag, args, kwargs) for flag in entry.get("tuple_when", ()))


def catalog() -> dict[str, dict]:
    """Op name (and alias) -> catalog entry, from ``GET /v1/ops`` of the current context's server."""
    if not _CATALOG:
        for entry in _context.current().client.ops_catalog():
            for name in (entry["name"], *entry.get("aliases", ())):
                _CATALOG.setdefault(name, entry)
    return _CATALOG


@functools.cache
def names_in(namespace: str) -> dict[str, str]:
    """Public name -> op name of the catalog's ops in ``namespace`` (``torch``, ``torch.nn.functional``...)."""
    return public_names(catalog(), namespace)


@functools.cache
def methods() -> dict[str, str]:
    return public_names(catalog(), "Tensor")


def public_names(entries: dict[str, dict], namespace: str) -> dict[str, str]:
    """Public name -> op name of ``entries`` (the catalog by op name and alias) in ``namespace``; ``Tensor``:
    the Tensor methods."""
    out: dict[str, str] = {}
    if namespace == "Tensor":  # (the op's names torch binds as methods: ``add_``, not ``iadd``, nor ``gelu``)
        return {name: entry["name"] for name, entry in entries.items() if name in entry["methods"]}
    for name, entry in entries.items():
        prefix, dot, rest = name.rpartition(".")
        if dot:  # a torch submodule's function: "linalg.det" is torch.linalg.det, "special.gammaln" ...
            if namespace == f"torch.{prefix}" and not name.startswith("__"):
                out[rest] = entry["name"]
        elif namespace == "torch" and name in entry["functions"]:
            out[name] = entry["name"]
    for entry in entries.values():  # the catalog's own submodule entries (linalg.norm...) come first
        for public in entry.get("exports", ()):
            where, _, rest = public.rpartition(".")
            if where == namespace:
                out.setdefault(rest, entry["name"])
    return out


def covered(namespace: str) -> tuple[dict[str, str], bool]:
    """(public name -> op name in ``namespace``, whether the server's catalog said so): the catalog's, or where no
    server answers, the names the client was built with (``_covered``), so that a name it lacks is still torch's
    AttributeError, and ``hasattr`` says False, without a server."""
    from gradserve.errors import ConnectionError as Unreachable

    try:
        return (methods() if namespace == "Tensor" else names_in(namespace)), True
    except Unreachable:
        from gradserve.torch._covered import NAMES
        return NAMES.get(namespace, {}), False


# ----- arguments ----------------------------------------------------------------------------------------
def pack_sizes(op: str, args: tuple) -> tuple:
    """``x.view(2, 3)`` -> ``x.view([2, 3])``: trailing ints for a size parameter become one list."""
    i = size_param(op)
    if i is not None:
        tail = args[i:]
        if tail and all(isinstance(a, int) and not isinstance(a, bool) for a in tail):
            return (*args[:i], list(tail))
    return args


@functools.cache
def size_param(op: str) -> int | None:
    """The position of ``op``'s size (or dims) parameter, if it has one (a tensor parameter, as
    repeat_interleave's ``repeats``, is not a size)."""
    tensors = {a["name"] for a in catalog()[op]["arguments"] if a.get("tensor")}
    return next((i for p, i in positions(op).items() if p in SIZE_PARAMS and p not in tensors), None)


@functools.cache
def positions(op: str) -> dict[str, int]:
    """``op``'s parameters that may be passed positionally -> their positions."""
    params = []
    for a in catalog()[op]["arguments"]:
        if a.get("kind") in ("varargs", "kwargs"):
            break  # what follows is keyword-only
        params.append(a["name"])
    return {p: i for i, p in enumerate(params)}


@functools.cache
def varargs(op: str) -> str | None:
    """The name of ``op``'s ``*args`` parameter (``zeros(*size)``), if it has one."""
    return next((a["name"] for a in catalog()[op]["arguments"] if a.get("kind") == "varargs"), None)


def argument(op: str, name: str, args: tuple, kwargs: dict, default=None):
    """The value a call gives ``op``'s parameter ``name``, positionally or by keyword."""
    i = positions(op).get(name)
    return args[i] if i is not None and i < len(args) else kwargs.get(name, default)


def encode(value, ctx):
    """A Python argument -> its JSON form: a tensor handle is its name, a dtype its name, numbers stay
    numbers (NaN and the infinities as the HTTP API's strings), arrays become base64 payloads."""
    from gradserve.torch._tensor import Tensor

    if isinstance(value, Tensor):
        return value._ref(ctx)
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else ("NaN" if math.isnan(value) else
                                                   ("Infinity" if value > 0 else "-Infinity"))
    if isinstance(value, dtype):
        return value.name
    if isinstance(value, (list, tuple, Size)):
        return [encode(v, ctx) for v in value]
    if isinstance(value, np.ndarray):
        return payload(value)
    if isinstance(value, np.generic):
        return encode(value.item(), ctx)
    from gradserve.torch._random import Generator
    if isinstance(value, Generator):  # generator=g: its name in the session (None: the default one)
        return value._where()[1].get("generator")
    raise TypeError(f"gradserve.torch cannot send a {type(value).__name__} to the server")


def payload(a: np.ndarray) -> dict:
    import base64

    if a.dtype.name not in DTYPES:  # torch.tensor keeps a numpy array's dtype: no silent cast
        raise TypeError(f"gradserve.torch: unsupported numpy dtype {a.dtype}")
    data = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    return {"dtype": a.dtype.name, "shape": list(a.shape), "encoding": "base64",
            "data": base64.b64encode(data.tobytes()).decode("ascii")}


def encode_index(key, ctx):
    """``x[key]`` -> the HTTP API's index: a tuple is a JSON list of per-dimension items."""
    if isinstance(key, tuple):
        return [_index_item(k, ctx) for k in key]
    if isinstance(key, list):
        return [_index_item(key, ctx)]
    return _index_item(key, ctx)


def _index_item(k, ctx):
    if k is Ellipsis:
        return "..."
    if isinstance(k, slice):
        return {"slice": [k.start, k.stop, k.step]}
    if isinstance(k, list):
        return [_index_item(v, ctx) for v in k]
    return encode(k, ctx)
