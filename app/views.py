"""Plain-data views of engine objects (tensors, run results, sessions), ready for orjson.

Arrays stay numpy arrays here: orjson writes them directly (OPT_SERIALIZE_NUMPY), which is what makes
large tensors cheap to return. Views must be serialised while the session lock is held, because the
arrays are the session's own (see ``dump``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from app.codec import Encoding, encode

_DUMP_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def dump(obj: Any) -> bytes:
    return orjson.dumps(obj, option=_DUMP_OPTIONS)


def timestamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def readable_grad(t) -> Any:
    """``t.grad`` without tripping torch's non-leaf warning: a non-leaf that does not retain grad has none,
    unless one was assigned (``set_grad``) or written by ``backward(inputs=[t])``, as in torch."""
    return t._grad


def tensor_view(name: str, t, encoding: Encoding) -> dict:
    grad = readable_grad(t)
    return {
        "name": name,
        "shape": list(t.shape),
        "dtype": t.dtype,
        "data": encode(t.data, encoding),
        "requires_grad": bool(t.requires_grad),
        "is_leaf": t.grad_fn is None,
        "grad_fn": t.grad_fn.name if t.grad_fn is not None else None,
        "grad": None if grad is None else encode(grad.data, encoding),
        "retains_grad": bool(t.retains_grad),
        "version": int(t.version),
        "grad_accumulations": int(t.grad_accumulations),
    }


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


def run_view(state, res, encoding: Encoding, with_records: bool) -> dict:
    """The response to an op list: bound names per op, changed tensors, autograd reports, warnings."""
    body = {
        "ops": [{"index": o.index, "op": o.op, "bound": list(o.bound)} for o in res.ops],
        "tensors": {name: tensor_view(name, state.resolve(name), encoding)
                    for name in res.changed if name in state.tensors},
        "autograd": autograd_views(res.autograd, encoding),
        "warnings": list(res.warnings),
    }
    if with_records:
        body["records"] = {name: [encode(t.data, encoding) for t in values]
                           for name, values in res.records.items()}
    return body


def session_times(session, ttl_seconds: float) -> dict:
    return {
        "id": session.id,
        "created_at": timestamp(session.created_at),
        "last_used_at": timestamp(session.last_used_at),
        "expires_at": timestamp(session.expires_at(ttl_seconds)),
    }
