"""The session service: load the session, run the engine, save. The only thing routes call.

Each request on a session uses it inside ``store.open`` from load to the serialised response; writers hold
it exclusively (across processes with the Redis store), so concurrent requests on one session run one after
the other (N concurrent backward calls accumulate N times) and a response never shows a later request's
changes. The engine is atomic (a failing op list leaves the state as it was) and the store is only saved
after success, so a failing request changes nothing.

Small op lists run on the event loop (``inline_ok``, ``run_ops(..., inline=True)``): handing a request of
a few hundred microseconds to the thread pool costs about as much again. What may run there is bounded
up front: a body of at most ``GRADSERVE_INLINE_MAX_BODY_BYTES``, at most ``GRADSERVE_INLINE_MAX_OPS`` ops,
no ``repeat``, only ops whose cost follows the size of their inputs (no creation from sizes, no
expand/repeat, no matmul family), and, for a session, a session held in this process (the memory store),
free right now (its lock is never waited for on the loop), whose last run was quick and left only small
named tensors. With the Redis store (``run_ops_async``), a session this process has cached, small, whose
last run here was quick and light: ``RedisStore.write_async`` runs the engine on the loop and saves with
``await`` on an asyncio Redis client (optimistically, with one compare-and-set, when the cached state is
current; under the session's lock otherwise). Everything else runs in the thread pool, as before.

Every session call takes the requester's ``owner`` (the digest of its API key, ``""`` on an open server):
the store answers another owner's session as unknown.
"""

from __future__ import annotations

import functools
import shutil
import time
import weakref
from itertools import chain, repeat
from typing import Any

import orjson
from pydantic import ValidationError

from gradserve_server import engine
from gradserve_server.app import jsonbody, views
from gradserve_server.app.codec import (
    BlobsLeft,
    Encoding,
    blobs_left,
    decode_payload,
    decode_value,
    encoded_size,
    lift_blobs,
)
from gradserve_server.app.config import Settings
from gradserve_server.app.errors import REQUEST, AppError, GradNotSet, InvalidInput, LimitExceeded
from gradserve_server.app.schemas.fast import eval_request_ok, ops_request_ok
from gradserve_server.app.schemas.ops import EvalRequestAdapter, OpsRequestAdapter
from gradserve_server.app.store import Session, SessionStore
from gradserve_server.app.store.memory import MemoryStore
from gradserve_server.app.svg import render_svg
from gradserve_server.engine import (
    DeadlineExceededError,
    LimitExceededError,
    PlanCaches,
    WarningSink,
)

#: What stops an inline run that turned out not to be cheap (its bounds: INLINE_DEADLINE_SECONDS,
#: INLINE_MAX_ELEMENTS); the request then runs in the thread pool under the real limits
INLINE_STOPS = (DeadlineExceededError, LimitExceededError)

RESERVED_NAMES = frozenset({"NaN", "Infinity", "-Infinity"})

#: The settings behind the engine's limits, named in its messages
SETTING_NAMES = (("max_elements_per_tensor", "GRADSERVE_MAX_ELEMENTS_PER_TENSOR"),
                 ("max_nodes", "GRADSERVE_MAX_NODES_PER_SESSION"), ("max_bytes", "GRADSERVE_MAX_BYTES_PER_SESSION"),
                 ("max_response_bytes", "GRADSERVE_MAX_RESPONSE_BYTES"))

#: A session may run small requests inline while its last run took less than this much CPU time (the
#: thread's own: time spent waiting for the GIL under load does not make a cheap request heavy)...
INLINE_MAX_RUN_SECONDS = 0.002
#: An inline run is stopped past this much time, or at a tensor of more than INLINE_MAX_ELEMENTS elements,
#: rolled back and run again in the thread pool: what stalls the event loop is bounded by the work itself,
#: whatever the op list looks like
INLINE_DEADLINE_SECONDS = 0.05
#: A cheap op list that could not run on the event loop (its session busy or held elsewhere, or the loop's
#: bound passed under load) runs in the thread pool in a lane of its own (``app.state.light``), never behind
#: heavy work, within the same bounds of size and this deadline; past them it goes to the heavy lane
LIGHT_DEADLINE_SECONDS = 1.0
#: ... and its named tensors (and their gradients) have at most this many elements, and there are at most
INLINE_MAX_ELEMENTS = 65536
INLINE_MAX_NAMES = 256  # of them


def inline_op_names() -> frozenset[str]:
    """Ops whose cost follows their inputs' sizes (the catalog's ``cost``, declared with each op): a small
    request of them may run inline. Creation ops and expand size their results from arguments, transforms
    call a function once per row or pass: never inline."""
    names = set()
    for entry in engine.op_catalog():
        if entry["cost"] == "inputs":
            names.add(entry["name"])
            names.update(entry.get("aliases", ()))
    return frozenset(names)


_SCALARS = frozenset({str, int, float, bool, type(None)})


def flat_arguments(ops: list[dict]) -> bool:
    """No op has a list or an object among its args or kwargs values: in whole-list passes."""
    n = len(ops)
    args = chain.from_iterable(map(dict.get, ops, repeat("args", n), repeat((), n)))
    if not _SCALARS.issuperset(map(type, args)):
        return False
    kwargs = chain.from_iterable(map(dict.values, map(dict.get, ops, repeat("kwargs", n), repeat({}, n))))
    return _SCALARS.issuperset(map(type, kwargs))


def light_state(state) -> bool:
    """Few, small named tensors: a cheap bound on what the next small request can touch."""
    tensors = state.tensors
    if len(tensors) > INLINE_MAX_NAMES:
        return False
    for t in tensors.values():
        if t.data.size > INLINE_MAX_ELEMENTS:
            return False
        grad = views.readable_grad(t)
        if grad is not None and grad.data.size > INLINE_MAX_ELEMENTS:
            return False
    return True


#: The response budget's estimate of an array's encoded size, by encoding
RESPONSE_SIZE = {"json": functools.partial(encoded_size, encoding="json"),
                 "base64": functools.partial(encoded_size, encoding="base64")}


def _arrays(tensors):
    """The arrays a view of these tensors shows: data, and a gradient where one is readable."""
    for t in tensors:
        yield t.data
        grad = views.readable_grad(t)
        if grad is not None:
            yield grad.data


def load_json(body: bytes) -> Any:
    if not body:
        raise InvalidInput("the request needs a JSON body", code="invalid_json")
    try:
        return jsonbody.loads(body)  # orjson, refusing repeated keys (422 duplicate_key)
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


def _routed(plans, state: engine.State, ops: list, **kwargs) -> engine.ProgramResult:
    """``engine.dispatch``'s result; the route it took (or the route of the run that raised) goes into the
    request's context (``errors.REQUEST``), where the access log, the metrics and the debug header read it
    (``app.observability.Observe``): the last run of the request counts (a run retried in another lane
    replaces the first's)."""
    context = REQUEST.get()
    try:
        res, route = engine.dispatch(plans, state, ops, **kwargs)
    except Exception as e:
        if context is not None and getattr(e, "route", None) is not None:
            context["engine_route"] = e.route
        raise
    if context is not None:
        context["engine_route"] = route
    return res


class SessionService:
    def __init__(self, store: SessionStore, settings: Settings, metrics=None):
        self.store = store
        self.settings = settings
        self.metrics = metrics  # app.observability.Metrics: backward passes run
        #: compiled plans of op lists (engine.trace.plan), one cache per API key (per client address on an open
        #: server): no key can observe or flush another's; bounded, counted in /metrics for the process only
        self.plans = PlanCaches(settings.plan_cache_partitions, settings.plan_cache_entries,
                                settings.plan_cache_bytes, settings.plan_record_after,
                                fragment_entries=settings.plan_fragment_entries,
                                segments=settings.plan_segments) \
            if settings.plan_cache_entries > 0 else None
        self.inline_ops = inline_op_names()
        #: sessions whose last run was slow or left large named tensors: never run on the event loop
        self._heavy: weakref.WeakKeyDictionary[Session, bool] = weakref.WeakKeyDictionary()
        #: the Redis store when it can run small requests on the event loop (``run_ops_async``)
        self._async_store = store if getattr(store, "async_url", None) else None

    @staticmethod
    def partition_of(state) -> str:
        """The plan cache partition of a request (its ``scope["state"]``): its API key, else its address."""
        owner = getattr(state, "owner", None)
        return f"key:{owner}" if owner else f"client:{getattr(state, 'client', '')}"

    def _plans(self, partition: str):
        return self.plans.of(partition) if self.plans is not None else None

    # ----- parsing ------------------------------------------------------------------------------------
    def parse_ops(self, body: bytes) -> dict:
        """Bytes -> a validated ``OpsRequest`` whose data is decoded (payload objects -> arrays)."""
        return self._parse(body, OpsRequestAdapter, ops_request_ok)

    def parse_eval(self, body: bytes) -> dict:
        """``parse_ops`` for a one-shot run: the base64 data of its tensor ops is handed over to the engine
        (``codec.decode_payload(owned=True)``: nothing else holds it, and nothing outlives the response)."""
        return self._parse(body, EvalRequestAdapter, eval_request_ok, own=True)

    def _parse(self, body: bytes, adapter, exact, own: bool = False) -> dict:
        lifted, blobs = lift_blobs(body)
        if blobs:
            # the fast way for large base64 uploads; any doubt (or error) and the original body is parsed,
            # so that what is accepted and every error message are the same either way
            try:
                request = self._validated(lifted, adapter, exact)
                self._prepare_ops(request["ops"], lifted, blobs, own)
                blobs_left(blobs)
                return request
            except (AppError, BlobsLeft):
                pass
        request = self._validated(body, adapter, exact)
        self._prepare_ops(request["ops"], body, own=own)
        return request

    @staticmethod
    def _validated(body: bytes, adapter, exact) -> dict:
        """The TypeAdapter decides; ``exact`` only recognises, in bulk, bodies it would return unchanged."""
        data = load_json(body)
        return data if exact(data) else validate(adapter, data)

    def _prepare_ops(self, ops: list[dict], body: bytes, blobs: dict | None = None, own: bool = False) -> None:
        """Check names and decode data, in place. Byte scans of the body let the common request (no
        payload objects, no non-finite strings, no escapes) skip the per-op walk entirely. ``own``: a tensor
        op's payload data is decoded into an array handed over with it (``codec.decode_payload``)."""
        limit = self.settings.max_ops_per_request
        if len(ops) > limit:
            raise LimitExceeded(f"{len(ops)} ops exceed the limit of {limit} per request "
                                "(GRADSERVE_MAX_OPS_PER_REQUEST)")
        # A short list is walked: that costs less than scanning a large body. A long one is walked only when
        # scans say it may need it: single-byte ones (memchr) first, for bodies of megabytes. A non-finite
        # string or such a name needs an "N" or an "I" byte, or a backslash (a \u escape can spell a letter);
        # a payload object an "encoding" key (and so a "c" byte); and only arguments that are not all
        # scalars can have depth to check.
        if len(ops) <= 64:
            nonfinite = True
        else:
            nonfinite = b"\\" in body or b"N" in body or b"I" in body
            payloads = b"c" in body and b'"encoding"' in body
            if not nonfinite and not payloads and flat_arguments(ops):
                return
        max_elements = self.settings.max_elements_per_tensor
        for op in ops:
            out = op.get("out")
            reserved = RESERVED_NAMES.intersection(out if isinstance(out, list) else [out])
            if nonfinite and reserved:
                raise InvalidInput(f"{sorted(reserved)[0]!r} cannot be a tensor name: it is a number",
                                   code="invalid_name")
            if "args" in op:
                args = op["args"]
                if own and args and args[0].__class__ is dict and "encoding" in args[0] and op.get("op") == "tensor":
                    op["args"] = [decode_payload(args[0], max_elements, blobs, owned=True),
                                  *[decode_value(a, max_elements, blobs=blobs) for a in args[1:]]]
                else:
                    op["args"] = [decode_value(a, max_elements, blobs=blobs) for a in args]
            if "kwargs" in op:
                op["kwargs"] = {k: decode_value(v, max_elements, blobs=blobs) for k, v in op["kwargs"].items()}

    # ----- where a request runs -----------------------------------------------------------------------
    def small_body(self, body: bytes) -> bool:
        """Whether parsing the body (and perhaps running it) may happen on the event loop."""
        return len(body) <= self.settings.inline_max_body_bytes

    def check_executions(self, request: dict) -> None:
        """ops x repeat, before anything runs: 10,000 ops repeated 1,000 times would be 10M op calls."""
        repeat = request.get("repeat", 1)
        if repeat > self.settings.max_repeat:
            raise LimitExceeded(f"repeat={repeat} exceeds the limit of {self.settings.max_repeat} "
                                "(GRADSERVE_MAX_REPEAT)")
        executions = len(request["ops"]) * repeat
        if executions > self.settings.max_op_executions:
            raise LimitExceeded(f"{len(request['ops'])} ops x repeat {repeat} = {executions} op executions "
                                f"exceed the limit of {self.settings.max_op_executions} per request "
                                "(GRADSERVE_MAX_OP_EXECUTIONS)")

    def inline_ok(self, request: dict) -> bool:
        """A parsed small body whose ops are few, not repeated, and of bounded cost (see the module doc)."""
        ops = request["ops"]
        return (len(ops) <= self.settings.inline_max_ops and request.get("repeat", 1) == 1
                and self.inline_ops.issuperset([op["op"] for op in ops]))

    def _inline_limits(self) -> engine.Limits:
        s = self.settings
        return engine.Limits(max_elements_per_tensor=min(s.max_elements_per_tensor, INLINE_MAX_ELEMENTS),
                             max_nodes=s.max_nodes_per_session, max_bytes=s.max_bytes_per_session,
                             max_response_bytes=s.max_response_bytes, names=SETTING_NAMES)

    @staticmethod
    def _inline_control() -> engine.Control:
        return engine.Control(INLINE_DEADLINE_SECONDS)

    def _limits(self) -> engine.Limits:
        s = self.settings
        return engine.Limits(max_elements_per_tensor=s.max_elements_per_tensor,
                             max_nodes=s.max_nodes_per_session, max_bytes=s.max_bytes_per_session,
                             max_response_bytes=s.max_response_bytes, names=SETTING_NAMES)

    def control(self) -> engine.Control:
        """The deadline of a request that did not come through ``app.admission`` (run on the event loop)."""
        return engine.Control(self.settings.request_deadline_seconds, setting="GRADSERVE_REQUEST_DEADLINE_SECONDS")

    def check_response(self, arrays, encoding: Encoding) -> None:
        """Reads: the tensors' encoded size, estimated before anything is encoded."""
        limit = self.settings.max_response_bytes
        total = 0
        for arr in arrays:
            total += encoded_size(arr, encoding)
            if total > limit:
                hint = " (base64 is 3-5x smaller than JSON)" if encoding == "json" else ""
                raise LimitExceeded(f"the response would carry more than {limit} bytes of tensor data "
                                    f"(GRADSERVE_MAX_RESPONSE_BYTES){hint}; read fewer tensors at a time")

    # ----- sessions -----------------------------------------------------------------------------------
    def create_session(self, owner: str = "", client: str = "") -> dict:
        session = self.store.create(engine.State(), owner, client)
        return {**views.session_times(session, self.store_ttl), "ttl_seconds": self.store_ttl}

    @property
    def store_ttl(self) -> float:
        return self.settings.session_ttl_seconds

    def list_sessions(self, owner: str = "") -> dict:
        out = []
        for s in self.store.list(owner):
            out.append({**views.session_times(s, self.store_ttl), "tensor_count": s.tensor_count})
        return {"sessions": out}

    def summary(self, session_id: str, owner: str = "") -> dict:
        with self.store.open(session_id, write=False, owner=owner) as session:
            state = session.state
            return {
                **views.session_times(session, self.store_ttl),
                "tensors": {name: views.tensor_summary(t) for name, t in state.tensors.items()},
                "node_count": int(state.node_count()),
                "backward_passes": int(state.backward_passes),
                "memory_bytes": int(state.nbytes()),
            }

    def delete_session(self, session_id: str, owner: str = "") -> None:
        self.store.delete(session_id, owner)

    # ----- running ops --------------------------------------------------------------------------------
    def run_ops(self, session_id: str, request: dict, encoding: Encoding, *, owner: str = "",
                inline: bool = False, control: engine.Control | None = None,
                partition: str | None = None, light: bool = False) -> bytes | None:
        """Run and serialise while holding the session. ``inline=True`` (on the event loop, for a request
        ``inline_ok`` accepted) never waits: it returns None unless the session is in this process, free
        right now and light, and the caller then runs the request in the thread pool."""
        self.check_executions(request)
        plans = self._plans(f"key:{owner}" if partition is None else partition)
        if inline:
            return self._run_inline(session_id, request, encoding, owner, plans)
        control = control or self.control()
        if light:  # the light lane: within the inline bounds of size, else None (then the heavy lane)
            try:
                with self.store.open(session_id, write=True, owner=owner) as session:
                    return self._run_held(session, request, encoding, control, plans, self._inline_limits())
            except INLINE_STOPS:
                return None
        with self.store.open(session_id, write=True, owner=owner) as session:
            return self._run_held(session, request, encoding, control, plans)

    async def run_ops_async(self, session_id: str, request: dict, encoding: Encoding, *,
                            owner: str = "", partition: str | None = None) -> bytes | None:
        """A request ``inline_ok`` accepted, on the event loop; None: run it in the thread pool instead.
        The memory store: ``run_ops(..., inline=True)``. The Redis store, for a session this process holds
        light (``RedisStore.light``): ``RedisStore.write_async`` runs it on the loop and saves it with
        ``await`` (optimistically when its cached state is current, else under the lock, with the same
        checks as the blocking path)."""
        if self._async_store is None:
            return self.run_ops(session_id, request, encoding, owner=owner, inline=True, partition=partition)
        store = self._async_store
        if not store.light(session_id):
            return None
        self.check_executions(request)
        control, limits = self._inline_control(), self._inline_limits()
        plans = self._plans(f"key:{owner}" if partition is None else partition)
        try:
            return await store.write_async(
                session_id, owner,
                lambda session: self._run_program(session, request, control, encoding, plans, limits),
                lambda session, ran: self._finish(session, request, *ran, encoding))
        except INLINE_STOPS:
            return None  # past the inline bounds, nothing applied (and the session noted heavy): the thread pool

    def _run_inline(self, session_id: str, request: dict, encoding: Encoding, owner: str, plans) -> bytes | None:
        if not isinstance(self.store, MemoryStore):  # other stores do I/O: never on the event loop
            return None
        session = self.store.get(session_id, owner)
        if session in self._heavy or not session.lock.acquire(blocking=False):
            return None
        try:
            return self._run_held(session, request, encoding, self._inline_control(), plans, self._inline_limits())
        except INLINE_STOPS:
            self._heavy[session] = True
            return None  # past the inline bounds, nothing applied (and the session noted heavy): the thread pool
        finally:
            session.lock.release()

    def _run_held(self, session: Session, request: dict, encoding: Encoding, control: engine.Control, plans,
                  limits: engine.Limits | None = None) -> bytes:
        res, passes = self._run_program(session, request, control, encoding, plans, limits)
        self.store.save(session)
        return self._finish(session, request, res, passes, encoding)

    def _run_program(self, session: Session, request: dict, control: engine.Control, encoding: Encoding, plans,
                     limits: engine.Limits | None = None) -> tuple[Any, int]:
        """Run on the held session; note whether its next small request may run on the event loop."""
        started = time.thread_time()
        passes = session.state.backward_passes
        try:
            res = _routed(plans, session.state, request["ops"], session=True, extra=(encoding,),
                          no_grad=request.get("no_grad", False),
                          repeat=request.get("repeat", 1), record=tuple(request.get("record", ())),
                          limits=limits or self._limits(), returns=tuple(request.get("return", ())),
                          control=control, response_size=RESPONSE_SIZE[encoding],
                          respond=self._respond(request.get("return")), until=request.get("until"))
        finally:
            light = time.thread_time() - started < INLINE_MAX_RUN_SECONDS and light_state(session.state)
            if self._async_store is not None:
                self._async_store.note_light(session, light)
            elif light:
                self._heavy.pop(session, None)
            else:
                self._heavy[session] = True
        return res, passes

    def _respond(self, returns) -> str | list[str]:
        """What the engine counts against the response limit before anything is applied: every changed tensor,
        or the names ``return`` shows in full. A ``meta`` view carries no data; an ``auto`` one at most
        ``views.AUTO_FULL_ELEMENTS`` elements (data and gradient), bounded here, up front."""
        if returns is None:
            return "changed"
        if isinstance(returns, list):
            return list(returns)
        auto = sum(level == "auto" for level in returns.values())
        most = auto * views.AUTO_MAX_BYTES
        if most > self.settings.max_response_bytes:
            raise LimitExceeded(f"{auto} tensors returned at the `auto` level may carry {most} bytes of tensor "
                                f"data; the limit is {self.settings.max_response_bytes} bytes "
                                "(GRADSERVE_MAX_RESPONSE_BYTES); nothing was applied")
        return [name for name, level in returns.items() if level == "full"]

    def _finish(self, session: Session, request: dict, res: Any, passes: int, encoding: Encoding) -> bytes:
        """After the save: count the backward passes and serialise."""
        self._count_backward(session.state.backward_passes - passes)
        return views.dump(views.run_view(session.state, res, encoding, with_records=bool(request.get("record")),
                                         returns=request.get("return"), until=request.get("until")))

    def _count_backward(self, passes: int) -> None:
        if self.metrics is not None:
            self.metrics.backward(passes)

    def run_one(self, session_id: str, op: dict, encoding: Encoding, owner: str = "",
                control: engine.Control | None = None, partition: str | None = None) -> bytes:
        """The convenience endpoints: a one-op list."""
        op = {"args": [], "kwargs": {}, "out": None, "no_grad": False, **op}
        max_elements = self.settings.max_elements_per_tensor
        op["args"] = [decode_value(a, max_elements) for a in op["args"]]
        op["kwargs"] = {k: decode_value(v, max_elements) for k, v in op["kwargs"].items()}
        return self.run_ops(session_id, {"ops": [op]}, encoding, owner=owner, control=control, partition=partition)

    def eval_inline(self, request: dict, encoding: Encoding, partition: str = "",
                    control: engine.Control | None = None) -> bytes | None:
        """``eval`` within the inline bounds (on the event loop, or in the light lane with its ``control``);
        None (nothing kept) past them."""
        try:
            return self.eval(request, encoding, control or self._inline_control(), self._inline_limits(), partition)
        except INLINE_STOPS:
            return None

    def eval(self, request: dict, encoding: Encoding, control: engine.Control | None = None,
             limits: engine.Limits | None = None, partition: str = "") -> bytes:
        """Each value once: the tensors ``return`` names (all named ones without it), and an autograd report
        that names where each pass's gradient is (``views.eval_autograd_views``) instead of repeating it."""
        self.check_executions(request)
        state = engine.State()
        names = request.get("return")
        res = _routed(self._plans(partition), state, request["ops"], no_grad=request.get("no_grad", False),
                      limits=limits or self._limits(), control=control or self.control(),
                      respond="all" if names is None else names, response_size=RESPONSE_SIZE[encoding],
                      extra=(encoding,))
        self._count_backward(state.backward_passes)
        if names is None:
            names = list(state.tensors)
        tensors = {}
        # reading "x.grad" of a non-leaf gives torch's warning: into the response, with the program's
        with WarningSink() as read:
            for name in names:
                t = state.resolve(name)
                tensors[name] = None if t is None else views.tensor_view(name, t, encoding)
        return views.dump({"tensors": tensors,
                           "autograd": views.eval_autograd_views(state, request["ops"], res.autograd),
                           "warnings": [*res.warnings, *read.messages]})

    # ----- reading ------------------------------------------------------------------------------------
    def tensors(self, session_id: str, encoding: Encoding, owner: str = "") -> bytes:
        with self.store.open(session_id, write=False, owner=owner) as session:
            self.check_response(_arrays(session.state.tensors.values()), encoding)
            return views.dump({"tensors": {name: views.tensor_view(name, t, encoding)
                                           for name, t in session.state.tensors.items()}})

    def tensor(self, session_id: str, name: str, encoding: Encoding, owner: str = "") -> bytes:
        with self.store.open(session_id, write=False, owner=owner) as session:
            with WarningSink() as read:  # torch's warning for the .grad of a non-leaf: into the problem body
                t = session.state.resolve(name)
            if t is None:
                raise GradNotSet(name, read.messages)
            self.check_response(_arrays([t]), encoding)
            return views.dump(views.tensor_view(name, t, encoding))

    def graph(self, session_id: str, root: str | None, fmt: str, owner: str = "",
              control: engine.Control | None = None) -> Any:
        """JSON, or drawn (DOT, Mermaid, SVG) up to ``GRADSERVE_MAX_GRAPH_RENDER_NODES`` nodes; Graphviz runs
        at most ``GRADSERVE_GRAPH_RENDER_TIMEOUT_SECONDS`` (then the built-in layout is drawn)."""
        with self.store.open(session_id, write=False, owner=owner) as session:
            graph = engine.export_graph(session.state, root)
        if fmt == "json":
            return views.dump(graph)
        nodes = len(graph.get("nodes", ()))
        limit = self.settings.max_graph_render_nodes
        if nodes > limit:
            raise LimitExceeded(f"the graph has {nodes} nodes; at most {limit} are drawn "
                                f"(GRADSERVE_MAX_GRAPH_RENDER_NODES): ask for the JSON graph (GET .../graph), or for "
                                f"the graph behind one tensor (root=NAME)")
        if fmt == "dot":
            return engine.to_dot(graph)
        if fmt == "mermaid":
            return engine.to_mermaid(graph)
        timeout = self.settings.graph_render_timeout_seconds
        if control is not None and control.deadline is not None:
            timeout = min(timeout, max(0.001, control.deadline - time.monotonic()))
        return render_svg(graph, engine.to_dot(graph), shutil.which("dot"), timeout=timeout)

    def op_catalog(self, q: str | None = None, family: str | None = None, differentiable: bool | None = None,
                   inplace: bool | None = None, offset: int = 0, limit: int | None = None) -> bytes:
        """The catalog, or the entries that match every filter given (``q``: a case-insensitive substring of
        the name, an alias, a grad_fn name or the doc), from ``offset``, at most ``limit`` of them; ``total``
        counts the matches."""
        ops = engine.op_catalog()
        if q:
            needle = q.lower()
            ops = [e for e in ops if any(needle in s.lower() for s in (e["name"], *e.get("aliases", ()),
                                                                         *e.get("grad_fns", ()), e.get("doc", "")))]
        if family is not None:
            ops = [e for e in ops if e.get("family") == family]
        if differentiable is not None:
            ops = [e for e in ops if e["differentiable"] is differentiable]
        if inplace is not None:
            ops = [e for e in ops if e["inplace"] is inplace]
        total = len(ops)
        ops = ops[offset:] if limit is None else ops[offset:offset + limit]
        return views.dump({"ops": ops, "total": total})

    def readiness(self) -> dict:
        return {"status": "ready", "sessions": self.store.count(), "max_sessions": self.settings.max_sessions}
