"""Plain-data views of engine objects (tensors, run results, sessions), ready for orjson.

Arrays stay numpy arrays here: orjson writes them directly (OPT_SERIALIZE_NUMPY), which is what makes
large tensors cheap to return. Views must be serialised while the session lock is held, because the
arrays are the session's own (see ``dump``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson

from gradserve_server.app.codec import Encoding, encode

_DUMP_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def dump(obj: Any) -> bytes:
    return orjson.dumps(obj, option=_DUMP_OPTIONS)


def timestamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def readable_grad(t) -> Any:
    """``t.grad`` without tripping torch's non-leaf warning: a non-leaf that does not retain grad has none,
    unless one was assigned (``set_grad``) or written by ``backward(inputs=[t])``, as in torch."""
    return t._grad


def tensor_view(name: str, t, encoding: Encoding, data: bool = True) -> dict:
    """torch's view of a tensor; ``data=False``: without ``data`` and ``grad`` (the ``meta`` view level)."""
    view = {"name": name, "shape": list(t.shape), "dtype": t.dtype}
    if data:  # the values first, the autograd flags after them
        grad = readable_grad(t)
        view["data"] = encode(t.data, encoding)
        view["grad"] = None if grad is None else encode(grad.data, encoding)
    view["requires_grad"] = bool(t.requires_grad)
    view["is_leaf"] = t.grad_fn is None
    view["grad_fn"] = t.grad_fn.name if t.grad_fn is not None else None
    view["retains_grad"] = bool(t.retains_grad)
    view["version"] = int(t.version)
    view["grad_accumulations"] = int(t.grad_accumulations)
    return view


def tensor_summary(t) -> dict:
    return {
        "shape": list(t.shape),
        "dtype": t.dtype,
        "requires_grad": bool(t.requires_grad),
        "is_leaf": t.grad_fn is None,
        "grad_fn": t.grad_fn.name if t.grad_fn is not None else None,
        "has_grad": readable_grad(t) is not None,
        "version": int(t.version),
    }


def autograd_views(records, encoding: Encoding) -> list[dict]:
    return [
        {
            "op_index": rec.op_index,
            "op": rec.op,
            "entries": [
                {
                    "name": e.name,
                    "contribution": encode(e.contribution.data, encoding),
                    "grad": None if e.grad is None else encode(e.grad.data, encoding),
                    "grad_accumulations": int(e.grad_accumulations),
                }
                for e in rec.entries
            ],
        }
        for rec in records
    ]


def _as_list(v) -> list:
    return v if isinstance(v, list) else [v]


def _grad_op_outs(op: dict) -> dict[str, str]:
    """A ``grad`` op's inputs by name -> the names its results were bound to (``out``), in order."""
    args, kwargs = op.get("args") or [], op.get("kwargs") or {}
    inputs = kwargs.get("inputs", args[1] if len(args) > 1 else None)
    out = op.get("out")
    if inputs is None or out is None:
        return {}
    return {i: o for i, o in zip(_as_list(inputs), _as_list(out)) if isinstance(i, str) and o is not None}


def _current(state, ref: str):
    """The tensor ``ref`` (``x`` or ``x.grad``) names at the end of a run, or None; never warns or raises."""
    base, _, attr = ref.partition(".")
    t = state.tensors.get(base)
    if t is None or attr not in ("", "grad"):
        return None
    return readable_grad(t) if attr else t


def _same_value(a, b) -> bool:
    return b is not None and a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a.data, b.data))


def eval_autograd_views(state, ops: list[dict], records) -> list[dict]:
    """Each backward/grad pass of a one-shot run, without its data: the tensors it reached, their
    accumulation counts, and the name that holds the pass's gradient at the end of the run (``x.grad`` for
    a backward, the ``out`` name for a ``grad`` op) when that name's value is still exactly it, else null.
    The values themselves are returned once, in ``tensors``, for the names ``return`` asks for."""
    out = []
    for rec in records:
        outs = _grad_op_outs(ops[rec.op_index]) if rec.op == "grad" else {}
        entries = []
        for e in rec.entries:
            ref = outs.get(e.name) if rec.op == "grad" else f"{e.name}.grad"
            if ref is not None and not _same_value(e.contribution, _current(state, ref)):
                ref = None
            entries.append({"name": e.name, "contribution": ref, "grad_accumulations": int(e.grad_accumulations)})
        out.append({"op_index": rec.op_index, "op": rec.op, "entries": entries})
    return out


#: ``auto`` view level: tensors (with their gradient) of at most this many elements are shown in full
AUTO_FULL_ELEMENTS = 64
#: ... so that one carries at most this many bytes of tensor data (25 per element in JSON, as the engine counts)
AUTO_MAX_BYTES = 25 * AUTO_FULL_ELEMENTS + 2 * 64


def returned_view(name: str, t, level: str, encoding: Encoding) -> dict | None:
    """A tensor asked for with ``return``: ``full`` (tensor_view), ``meta`` (no data, no grad) or ``auto``."""
    if t is None:
        return None
    if level == "auto":
        grad = readable_grad(t)
        size = t.data.size + (grad.data.size if grad is not None else 0)
        level = "full" if size <= AUTO_FULL_ELEMENTS else "meta"
    return tensor_view(name, t, encoding, data=level == "full")


def run_view(state, res, encoding: Encoding, with_records: bool, returns=None, until=None) -> dict:
    """The response to an op list: bound names per op, changed tensors (or those asked for in ``returns``,
    a list of names or a {name: view level} object), autograd reports (none with ``returns``), warnings."""
    if returns is None:
        tensors = {name: tensor_view(name, state.resolve(name), encoding)
                   for name in res.changed if name in state.tensors}
    else:
        levels = returns if isinstance(returns, dict) else dict.fromkeys(returns, "full")
        tensors = {name: returned_view(name, res.returned[name], level, encoding) for name, level in levels.items()}
    # values first (what a reader looks for), bookkeeping (which op bound which names) last
    body = {"tensors": tensors}
    if with_records:
        body["records"] = {name: [encode(t.data, encoding) for t in values]
                           for name, values in res.records.items()}
    if until is not None:
        body["iterations"] = res.iterations
    body["autograd"] = autograd_views(res.autograd, encoding) if returns is None else []
    body["warnings"] = list(res.warnings)
    body["ops"] = [{"index": o.index, "op": o.op, "bound": list(o.bound)} for o in res.ops]
    return body


def session_times(session, ttl_seconds: float) -> dict:
    return {
        "id": session.id,
        "created_at": timestamp(session.created_at),
        "last_used_at": timestamp(session.last_used_at),
        "expires_at": timestamp(session.expires_at(ttl_seconds)),
    }
