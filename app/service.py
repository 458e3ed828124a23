"""The session service: load the session, run the engine, save. The only thing routes call.

Each request on a session holds the session's lock from load to the serialised response, so concurrent
requests on one session run one after the other (N concurrent backward calls accumulate N times) and a
response never shows a later request's changes. The engine is atomic (a failing op list leaves the state
as it was) and the store is only saved after success, so a failing request changes nothing.
"""

from __future__ import annotations

import shutil
from typing import Any

import orjson
from pydantic import ValidationError

import engine
from app import views
from app.codec import Encoding, decode_value
from app.config import Settings
from app.errors import GradNotSet, InvalidInput, LimitExceeded
from app.schemas.ops import EvalRequestAdapter, OpsRequestAdapter
from app.store import SessionStore
from app.svg import render_svg

RESERVED_NAMES = frozenset({"NaN", "Infinity", "-Infinity"})


def load_json(body: bytes) -> Any:
    if not body:
        raise InvalidInput("the request needs a JSON body", code="invalid_json")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"malformed JSON: {exc}", code="invalid_json") from None


def validate(adapter, data: Any) -> Any:
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        errors = [{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        first = errors[0]
        raise InvalidInput(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}",
                           errors=errors) from None


class SessionService:
    def __init__(self, store: SessionStore, settings: Settings):
        self.store = store
        self.settings = settings

    # ----- parsing ------------------------------------------------------------------------------------
    def parse_ops(self, body: bytes) -> dict:
        """Bytes -> a validated ``OpsRequest`` whose data is decoded (payload objects -> arrays)."""
        request = validate(OpsRequestAdapter, load_json(body))
        self._prepare_ops(request["ops"], body)
        return request

    def parse_eval(self, body: bytes) -> dict:
        request = validate(EvalRequestAdapter, load_json(body))
        self._prepare_ops(request["ops"], body)
        return request

    def _prepare_ops(self, ops: list[dict], body: bytes) -> None:
        """Check names and decode data, in place. Byte scans of the body let the common request (no
        payload objects, no non-finite strings, no suspicious names) skip the per-op walk entirely."""
        limit = self.settings.max_ops_per_request
        if len(ops) > limit:
            raise LimitExceeded(f"{len(ops)} ops exceed the limit of {limit} per request "
                                "(GRADSERVE_MAX_OPS_PER_REQUEST)")
        # A walk costs per op, a byte scan per byte: short lists are walked; long ones only when memchr-speed
        # scans find a possible non-finite string ("NaN", "Infinity") or payload object ("encoding").
        nonfinite = b"N" in body or b"I" in body
        if len(ops) > 64 and not nonfinite and b'"encoding"' not in body:
            return
        max_elements = self.settings.max_elements_per_tensor
        for op in ops:
            out = op.get("out")
            reserved = RESERVED_NAMES.intersection(out if isinstance(out, list) else [out])
            if nonfinite and reserved:
                raise InvalidInput(f"{sorted(reserved)[0]!r} cannot be a tensor name: it is a number",
                                   code="invalid_name")
            if "args" in op:
                op["args"] = [decode_value(a, max_elements) for a in op["args"]]
            if "kwargs" in op:
                op["kwargs"] = {k: decode_value(v, max_elements) for k, v in op["kwargs"].items()}

    def _limits(self) -> engine.Limits:
        s = self.settings
        return engine.Limits(max_elements_per_tensor=s.max_elements_per_tensor,
                             max_nodes=s.max_nodes_per_session, max_bytes=s.max_bytes_per_session)

    # ----- sessions -----------------------------------------------------------------------------------
    def create_session(self) -> dict:
        session = self.store.create(engine.State())
        return {**views.session_times(session, self.store_ttl), "ttl_seconds": self.store_ttl}

    @property
    def store_ttl(self) -> float:
        return self.settings.session_ttl_seconds

    def list_sessions(self) -> dict:
        out = []
        for s in self.store.list():
            out.append({**views.session_times(s, self.store_ttl), "tensor_count": len(s.state.tensors)})
        return {"sessions": out}

    def summary(self, session_id: str) -> dict:
        session = self.store.get(session_id)
        with session.lock:
            state = session.state
            return {
                **views.session_times(session, self.store_ttl),
                "tensors": {name: views.tensor_summary(t) for name, t in state.tensors.items()},
                "node_count": int(state.node_count()),
                "backward_passes": int(state.backward_passes),
                "memory_bytes": int(state.nbytes()),
            }

    def delete_session(self, session_id: str) -> None:
        self.store.delete(session_id)

    # ----- running ops --------------------------------------------------------------------------------
    def run_ops(self, session_id: str, request: dict, encoding: Encoding) -> bytes:
        repeat = request.get("repeat", 1)
        if repeat > self.settings.max_repeat:
            raise LimitExceeded(f"repeat={repeat} exceeds the limit of {self.settings.max_repeat} "
                                "(GRADSERVE_MAX_REPEAT)")
        record = request.get("record", [])
        session = self.store.get(session_id)
        with session.lock:
            res = engine.run_program(session.state, request["ops"], no_grad=request.get("no_grad", False),
                                     repeat=repeat, record=tuple(record), limits=self._limits())
            self.store.save(session)
            return views.dump(views.run_view(session.state, res, encoding, with_records=bool(record)))

    def run_one(self, session_id: str, op: dict, encoding: Encoding) -> bytes:
        """The convenience endpoints: a one-op list."""
        op = {"args": [], "kwargs": {}, "out": None, "no_grad": False, **op}
        max_elements = self.settings.max_elements_per_tensor
        op["args"] = [decode_value(a, max_elements) for a in op["args"]]
        op["kwargs"] = {k: decode_value(v, max_elements) for k, v in op["kwargs"].items()}
        return self.run_ops(session_id, {"ops": [op]}, encoding)

    def eval(self, request: dict, encoding: Encoding) -> bytes:
        state = engine.State()
        res = engine.run_program(state, request["ops"], no_grad=request.get("no_grad", False),
                                 limits=self._limits())
        names = request.get("return")
        if names is None:
            names = list(state.tensors)
        tensors = {}
        for name in names:
            t = state.resolve(name)
            tensors[name] = None if t is None else views.tensor_view(name, t, encoding)
        return views.dump({"tensors": tensors, "autograd": views.autograd_views(res.autograd, encoding),
                           "warnings": list(res.warnings)})

    # ----- reading ------------------------------------------------------------------------------------
    def tensors(self, session_id: str, encoding: Encoding) -> bytes:
        session = self.store.get(session_id)
        with session.lock:
            return views.dump({"tensors": {name: views.tensor_view(name, t, encoding)
                                           for name, t in session.state.tensors.items()}})

    def tensor(self, session_id: str, name: str, encoding: Encoding) -> bytes:
        session = self.store.get(session_id)
        with session.lock:
            t = session.state.resolve(name)
            if t is None:
                raise GradNotSet(name)
            return views.dump(views.tensor_view(name, t, encoding))

    def graph(self, session_id: str, root: str | None, fmt: str) -> Any:
        session = self.store.get(session_id)
        with session.lock:
            graph = engine.export_graph(session.state, root)
        if fmt == "json":
            return views.dump(graph)
        if fmt == "dot":
            return engine.to_dot(graph)
        if fmt == "mermaid":
            return engine.to_mermaid(graph)
        return render_svg(graph, engine.to_dot(graph), shutil.which("dot"))

    def op_catalog(self) -> bytes:
        return views.dump({"ops": engine.op_catalog()})

    def readiness(self) -> dict:
        return {"status": "ready", "sessions": self.store.count(), "max_sessions": self.settings.max_sessions}
