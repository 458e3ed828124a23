"""Request ids, JSON logs and Prometheus metrics, from one outermost ASGI middleware.

Every request gets an id: the client's ``X-Request-ID`` when it is a sane token (1 to 128 of
``A-Za-z0-9._:-``), else a fresh one. It is echoed in the ``X-Request-ID`` response header, in every problem
body (``request_id``) and in every log line written while the request runs. One JSON line per request
(``gradserve.access``) says what was asked and how it ended; tensor data, request bodies and API keys are
never logged (an owner shows as the first 12 hex digits of its key's SHA-256, ``key_id``).

Metrics are counted here for every request, whichever path served it (the event loop's inline fast path or
the thread pool), under the route's template (``/v1/sessions/{session_id}/ops``), never its raw path.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gradserve_server.app.errors import REQUEST, unexpected_problem

REQUEST_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
#: Fields a log line may carry besides time, level, logger and message
LOG_FIELDS = ("request_id", "method", "path", "route", "status", "duration_ms", "session_id", "code", "key_id",
              "client", "engine_route", "engine_reason", "engine_detail")
#: ``X-Gradserve-Debug: route`` on an op list request asks for ``X-Gradserve-Route`` on its response
DEBUG_HEADER = b"x-gradserve-debug"
ROUTE_HEADER = b"x-gradserve-route"

access_log = logging.getLogger("gradserve.access")

disable_created_metrics()  # no *_created series: they double the exposition and nobody here reads them


# ----- logs -------------------------------------------------------------------------------------------------
def _timestamp(created: float) -> str:
    """UTC, ISO 8601 to the millisecond, ``Z``."""
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the request's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request = REQUEST.get()
        if request is not None:
            line["request_id"] = request["request_id"]
        for name in LOG_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line).decode()


_HANDLER_MARK = "_gradserve_json"
_gradserve_log = logging.getLogger("gradserve")
_root_log = logging.getLogger()


def configure_logging(level: str) -> None:
    """JSON lines on stderr for the ``gradserve`` loggers (once per process; the level follows the latest
    app). Other loggers (uvicorn's) are left as their owner configured them."""
    logger = _gradserve_log
    logger.setLevel(level.upper())
    if not any(getattr(h, _HANDLER_MARK, False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        setattr(handler, _HANDLER_MARK, True)
        logger.addHandler(handler)


def _sole_json_handler(level: int) -> logging.StreamHandler | None:
    """The handler ``configure_logging`` installed, when an access line at ``level`` would go to it alone,
    formatted by its JsonFormatter: then the line can be written without building a LogRecord and walking
    the logger hierarchy (about half of the access log's cost per request). Any other configuration (more
    handlers or filters anywhere on the way, a handler on the root logger, another formatter, the level
    off) answers None, and the line goes through ``logging`` as usual."""
    if not access_log.isEnabledFor(level) or access_log.handlers or access_log.filters or not access_log.propagate:
        return None
    handlers = _gradserve_log.handlers
    if len(handlers) != 1 or _gradserve_log.filters or (_gradserve_log.propagate and _root_log.handlers):
        return None
    handler = handlers[0]
    if (not getattr(handler, _HANDLER_MARK, False) or handler.filters or level < handler.level
            or type(handler.formatter) is not JsonFormatter):
        return None
    return handler


# ----- metrics ----------------------------------------------------------------------------------------------
class _StoreCollector:
    """Session gauges and counters read from the store when scraped."""

    def __init__(self, store):
        self.store = store

    def collect(self):
        live = GaugeMetricFamily("gradserve_sessions_live", "Sessions alive now (across processes with Redis).")
        try:
            live.add_metric([], float(self.store.count()))
        except Exception:  # noqa: BLE001 - an unreachable store must not break the scrape
            live.add_metric([], float("nan"))
        yield live
        stats = self.store.stats
        for name, help_text in (("created", "Sessions created by this process."),
                                ("deleted", "Sessions deleted by request in this process."),
                                ("expired", "Sessions this process found or swept expired (idle past their TTL)."),
                                ("evicted", "Session states dropped from this process's cache to make room "
                                            "(Redis store; the session itself stays in Redis).")):
            counter = CounterMetricFamily(f"gradserve_sessions_{name}", help_text)
            counter.add_metric([], float(getattr(stats, name)))
            yield counter


class _PlanCollector:
    """The plan caches of this process (engine.trace.cache.PlanCaches), summed, read when scraped: figures of the
    process, never of one key."""

    _COUNTERS = (("hits", "One-shot runs replayed from a compiled plan."),
                 ("misses", "One-shot runs recorded (run cold) because no plan of their structure was cached."),
                 ("deferred", "Runs of a structure without a plan that ran cold unrecorded: sightings before "
                              "GRADSERVE_PLAN_RECORD_AFTER."),
                 ("unplannable", "Runs that cannot be planned (an op without kernels, a value-dependent form, a "
                                 "warning...) and ran cold."),
                 ("fallbacks", "Replays that met a value-dependent check (an index out of range...) and ran the "
                               "op list cold instead."),
                 ("evictions", "Plans and fragments dropped to stay within GRADSERVE_PLAN_CACHE_ENTRIES, "
                               "_FRAGMENT_ENTRIES and _CACHE_BYTES."),
                ("composed", "One-shot runs without a plan composed from per-op fragments (engine.trace.compose)."),
                ("uncomposable", "One-shot runs without a plan that could not be composed and ran op by op."),
                ("fragment_hits", "Ops and backward nodes of composed runs that found their fragment."),
                ("fragment_misses", "Ops and backward nodes of composed runs that recorded a new fragment."))

    def __init__(self, cache):
        self.cache = cache

    def collect(self):
        stats = self.cache.stats()
        for name, help_text in self._COUNTERS:
            counter = CounterMetricFamily(f"gradserve_plan_{name}", help_text)
            counter.add_metric([], float(stats[name]))
            yield counter
        for name, help_text in (("entries", "Plans (and unplannable markers) cached in this process."),
                                ("bytes", "Bytes of the plans and fragments cached in this process (measured)."),
                                ("fragments", "Per-op fragments (uncomposable markers and compiled fragment code "
                                              "included) cached in this process."),
                                ("partitions", "Plan caches kept: one per API key (per client address on an open "
                                               "server).")):
            gauge = GaugeMetricFamily(f"gradserve_plan_cache_{name}", help_text)
            gauge.add_metric([], float(stats[name]))
            yield gauge


class Metrics:
    """The app's Prometheus registry (one per app, so several apps in one process do not collide)."""

    def __init__(self, store):
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("gradserve_requests", "HTTP requests by route template and status.",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("gradserve_request_duration_seconds", "Request latency by route and status.",
                                 ["method", "route", "status"], registry=self.registry,
                                 buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.problems = Counter("gradserve_problems", "Problem responses by code.", ["code"],
                                registry=self.registry)
        self.op_errors = Counter("gradserve_op_errors", "Op lists refused by the engine, by error code.",
                                 ["code"], registry=self.registry)
        self.backward_passes = Counter("gradserve_backward_passes", "backward/grad passes run (repeats "
                                       "included).", registry=self.registry)
        # labels from the engine's fixed vocabularies (engine.ROUTES, engine.REASONS): bounded, and summed over
        # every key (no figure of one key's runs)
        self.routes = Counter("gradserve_route", "Op list runs (/v1/eval, session ops) by the route they took "
                              "and why (docs: explanation/plans.md).", ["route", "reason"], registry=self.registry)
        self.registry.register(_StoreCollector(store))
        self.plans = None  # the service's engine.trace.cache.PlanCaches, read when scraped
        #: (method, route template, status) -> the requests counter's and latency histogram's series. Bounded:
        #: routes are templates (never raw paths) and methods and statuses few
        self._children: dict[tuple[str, str, int], tuple] = {}
        self._routes: dict[tuple[str, str], Any] = {}  # (route, reason) -> the routes counter's series

    def watch_plans(self, cache) -> None:
        if cache is not None and self.plans is None:
            self.plans = cache
            self.registry.register(_PlanCollector(cache))

    def op_error(self, code: str) -> None:
        self.op_errors.labels(code).inc()

    def route(self, route) -> None:
        child = self._routes.get((route.name, route.reason))
        if child is None:  # (looked up once per label pair: the vocabularies are fixed)
            child = self._routes[(route.name, route.reason)] = self.routes.labels(route.name, route.reason)
        child.inc()

    def backward(self, passes: int) -> None:
        if passes > 0:
            self.backward_passes.inc(passes)

    def request(self, method: str, route: str, status: int, seconds: float, code: str | None) -> None:
        children = self._children.get((method, route, status))
        if children is None:  # the labelled series, looked up once (``labels`` validates and locks each time)
            labels = (method, route, str(status))
            children = self._children[(method, route, status)] = (self.requests.labels(*labels),
                                                                    self.latency.labels(*labels))
        children[0].inc()
        children[1].observe(seconds)
        if code is not None:
            self.problems.labels(code).inc()


# ----- the middleware ---------------------------------------------------------------------------------------
def _debug_route(scope: Scope) -> bool:
    """Whether the request asked for its route (``X-Gradserve-Debug: route``; a comma-separated list may
    name more)."""
    for name, value in scope.get("headers", ()):
        if name == DEBUG_HEADER and b"route" in [v.strip().lower() for v in value.split(b",")]:
            return True
    return False


class InFlight:
    """Requests being served, for a shut-down that waits for them."""

    def __init__(self):
        self.count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def enter(self) -> None:
        self.count += 1
        self._idle.clear()

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False


class RouteTemplates:
    """The documented path templates: which one a request was aimed at, and the methods it allows."""

    def __init__(self, paths):
        self._paths = paths  # a callable returning the OpenAPI document's paths, read on first need
        self._compiled: list[tuple[re.Pattern, str, list[str]]] | None = None

    def match(self, path: str) -> tuple[str, list[str]] | None:
        if self._compiled is None:
            self._compiled = [(compile_path(template)[0], template, sorted(m.upper() for m in methods))
                              for template, methods in self._paths().items()]
        for regex, template, methods in self._compiled:
            if regex.match(path):
                return template, methods
        return None

    def __call__(self, scope: Scope) -> str:
        """The template of the route that served (or would have served) the request; never its raw path."""
        route = scope.get("route")
        if route is not None:
            return getattr(route, "path", None) or "unmatched"
        # refused before routing (401, 429, 413 by Content-Length): find what it was aimed at
        found = self.match(scope["path"])
        return found[0] if found else "unmatched"


#: The status a request is counted and logged under when its client hung up before its body was complete
#: (nginx's "client closed request"): nobody received an answer, and it was not the server's failure
CLIENT_CLOSED = 499


class Observe:
    """Outermost middleware: request id, security headers, access log, metrics, in-flight count, and a
    problem+json 500 for anything unhandled. A request whose client hung up mid-body
    (``app.middleware.RequestBody`` notes it) is logged at info and counted as 499, whatever the app made of
    its truncated body."""

    def __init__(self, app: ASGIApp, metrics: Metrics, inflight: InFlight, templates: RouteTemplates,
                 access: bool = True, headers: Callable[[str], list[tuple[bytes, bytes]]] | None = None):
        self.app = app
        self.metrics = metrics
        self.inflight = inflight
        self.templates = templates
        self.access = access
        self.headers = headers  # the path's extra response headers (app.middleware.security_headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        incoming = None
        for name, value in scope.get("headers", ()):
            if name == b"x-request-id":
                incoming = value.decode("latin-1")
                break
        request_id = incoming if incoming and REQUEST_ID.fullmatch(incoming) else os.urandom(16).hex()
        context = {"request_id": request_id, "code": None, "engine_route": None}
        token = REQUEST.set(context)
        extra = [(b"x-request-id", request_id.encode())]
        if self.headers is not None:
            extra += self.headers(scope["path"])
        status = 500
        response_started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status = message["status"]
                response_started = True
                message["headers"] = [*message.get("headers", ()), *extra]
                if context["engine_route"] is not None and _debug_route(scope):
                    message["headers"].append((ROUTE_HEADER, context["engine_route"].header().encode("ascii")))
            await send(message)

        self.inflight.enter()
        try:
            try:
                await self.app(scope, receive, send_with_id)
            except Exception as exc:  # noqa: BLE001 - every failure becomes a problem, logged with the id
                if context.get("disconnected"):
                    pass  # nobody to answer, and the failure is the truncated body's
                elif response_started:
                    raise
                else:
                    await unexpected_problem(exc)(scope, receive, send_with_id)
        finally:
            self.inflight.leave()
            elapsed = time.perf_counter() - started
            if context.get("disconnected"):
                status = CLIENT_CLOSED
                context["code"] = "client_disconnected"
            route = self.templates(scope)
            self.metrics.request(scope["method"], route, status, elapsed, context["code"])
            if context["engine_route"] is not None:
                self.metrics.route(context["engine_route"])
            if self.access:
                self._log(scope, route, status, elapsed, context)
            REQUEST.reset(token)

    @staticmethod
    def _log(scope: Scope, route: str, status: int, elapsed: float, context: dict) -> None:
        state = scope.get("state") or {}
        path_params = scope.get("path_params") or {}
        client = scope.get("client")
        level = logging.ERROR if status >= 500 else logging.INFO
        message = "%s %s %d" if status != CLIENT_CLOSED else "%s %s %d: the client disconnected before its body " \
            "was complete"
        fields = {"method": scope["method"], "path": scope["path"], "route": route, "status": status,
                  "duration_ms": round(elapsed * 1000, 3), "session_id": path_params.get("session_id"),
                  "code": context["code"], "key_id": state.get("key_id"),
                  "client": client[0] if client else None}
        ran = context.get("engine_route")
        if ran is not None:
            fields["engine_route"], fields["engine_reason"] = ran.name, ran.reason
            if ran.detail:
                fields["engine_detail"] = ran.detail
        handler = _sole_json_handler(level)
        if handler is not None:
            # the line JsonFormatter would write for this record (tests/app/test_observability.py compares)
            line = {"time": _timestamp(time.time()), "level": logging.getLevelName(level).lower(),
                    "logger": access_log.name, "message": message % (scope["method"], scope["path"], status),
                    "request_id": context["request_id"]}
            for name, value in fields.items():
                if value is not None:
                    line[name] = value
            try:
                text = orjson.dumps(line).decode() + handler.terminator
                with handler.lock:
                    handler.stream.write(text)
                    handler.flush()
                return
            except Exception:  # noqa: BLE001 - say it the usual way (logging reports its own failures)
                pass
        access_log.log(level, message, scope["method"], scope["path"], status, extra=fields)
