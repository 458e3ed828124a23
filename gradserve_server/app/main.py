"""The FastAPI application: ``create_app(settings=None)`` and the module-level ``app``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi
from fastapi.staticfiles import StaticFiles
from pydantic import TypeAdapter

from gradserve_server._version import __version__
from gradserve_server.app import errors
from gradserve_server.app.admission import LIGHT_QUEUE, LIGHT_SLOTS, HeavyWork, lower_native_pools
from gradserve_server.app.auth import METRICS_PATH, OPEN_PATHS, Auth, KeyRing, RateLimiter, limit_storage
from gradserve_server.app.config import Settings, get_settings
from gradserve_server.app.memory import MemoryTrimmer, configure_gc, configure_malloc
from gradserve_server.app.middleware import RequestBody, security_headers
from gradserve_server.app.observability import InFlight, Metrics, Observe, RouteTemplates, configure_logging
from gradserve_server.app.routes import autograd, graph, meta, ops, sessions
from gradserve_server.app.schemas.ops import EvalRequest, OpsRequest
from gradserve_server.app.schemas.problems import Problem, problem_responses
from gradserve_server.app.schemas.tensors import Base64Tensor
from gradserve_server.app.service import LIGHT_DEADLINE_SECONDS, SessionService
from gradserve_server.app.store import SeveralWorkersError, make_store

STATIC_DIR = Path(__file__).parent / "static"
#: The interpreter's thread switch interval while serving (bench/mixedload.py: cheap requests' p99 under load)
SWITCH_INTERVAL_SECONDS = 0.0005

DESCRIPTION = """\
PyTorch's autograd semantics over HTTP, computed by a numpy engine.

Create a session, send op lists written the way torch spells them (`tensor`, `mul`, `backward`, `grad`,
`zero_grad`, ...), and read back values, gradients, grad_fn names and the graph. Errors are
`application/problem+json` with PyTorch's own messages.

**Authentication.** When the server is configured with API keys (`GRADSERVE_API_KEYS`), every operation but
health, readiness, metrics and these docs needs one, as `Authorization: Bearer <key>` or `X-API-Key: <key>`
(the Authorize button). A session belongs to the key that created it; other keys get 404 for it. Without
keys the server is open and keys are ignored. Every response carries an `X-Request-ID` header (a sane
incoming one is kept), also given as `request_id` in problem bodies.
"""

log = logging.getLogger("gradserve")

SECURITY_SCHEMES = {
    "bearerAuth": {"type": "http", "scheme": "bearer", "description": "An API key as a bearer token."},
    "apiKeyHeader": {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "An API key."},
}


async def _sweep_periodically(store, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        with contextlib.suppress(Exception):  # a store that is briefly unreachable is swept next time
            await asyncio.to_thread(store.sweep)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    keys: KeyRing = app.state.keys
    if keys.enabled:
        log.info("API keys required: %d key(s) configured (GRADSERVE_API_KEYS); sessions belong to their key",
                 len(keys.digests))
        if keys.short_keys:
            log.warning("%d API key(s) are shorter than 16 characters: use long random keys", keys.short_keys)
    else:
        log.warning("no API keys configured (GRADSERVE_API_KEYS): the server is OPEN, anyone who can reach it "
                    "can create, read and delete any session")
    sweeper = asyncio.create_task(_sweep_periodically(app.state.store, settings.sweep_interval_seconds))
    trimmer = asyncio.create_task(app.state.trimmer.run())
    undo_gc = configure_gc()  # (app.memory: the startup heap frozen, young collections less often)
    # the event loop waits for the GIL at every step while heavy work computes in the thread pool: a shorter
    # switch interval (CPython's default: 5 ms) keeps health checks and cheap requests quick under load
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    lower_native_pools(settings.heavy_nice)  # the BLAS library's threads: heavy work only (app.admission)
    try:
        yield
    finally:
        sys.setswitchinterval(switch_interval)
        app.state.heavy.close()
        undo_gc()
        # the server stops taking requests before this runs; wait for those still running (thread-pool work
        # included) before the store goes away under them
        if not await app.state.inflight.wait_idle(settings.shutdown_grace_seconds):
            log.warning("shutting down with %d request(s) still running after %g s",
                        app.state.inflight.count, settings.shutdown_grace_seconds)
        for task in (sweeper, trimmer):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        aclose = getattr(app.state.store, "aclose", None)  # the Redis store's asyncio client
        if aclose is not None:
            await aclose()
        app.state.store.close()


def _schema_with_components(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema plus the models that routes reading their own bodies refer to by name."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description,
                         routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in (OpsRequest, EvalRequest, Base64Tensor, Problem):
        extra = TypeAdapter(model).json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in extra.pop("$defs", {}).items():
            components.setdefault(name, definition)
        components.setdefault(extra.get("title", model.__name__), extra)
    # FastAPI documents its own 422 body; ours is a Problem (errors.install converts validation errors)
    problem_422 = {"description": "Invalid input.", "content": {"application/problem+json": {
        "schema": {"$ref": "#/components/schemas/Problem"}}}}
    body_problems = problem_responses(408, 415)  # app.middleware.RequestBody, on every route taking a body
    for response in body_problems.values():
        response.pop("model", None)
    for methods in schema.get("paths", {}).values():
        for operation in methods.values():
            responses = operation.get("responses", {})
            if "HTTPValidationError" in str(responses.get("422", "")):
                responses["422"] = problem_422
            if "requestBody" in operation:
                for status, response in body_problems.items():
                    responses.setdefault(str(status), response)
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    _document_security(app, schema)
    _document_links(schema)
    app.openapi_schema = schema
    return schema


def _document_security(app: FastAPI, schema: dict[str, Any]) -> None:
    """Security schemes, and on every operation that needs a key (when keys are configured) the schemes,
    401 and 429. Without keys the requirement is optional (`{}`), as the server then ignores keys."""
    keys: KeyRing = app.state.keys
    schema["components"]["securitySchemes"] = SECURITY_SCHEMES
    required = [{"bearerAuth": []}, {"apiKeyHeader": []}]
    open_paths = set(OPEN_PATHS)
    if not app.state.settings.metrics_require_key:
        open_paths.add(METRICS_PATH)
    extra = problem_responses(401, 429)
    for name, response in extra.items():
        response.pop("model", None)
        if name == 429:
            response["headers"] = {"Retry-After": {"description": "Seconds to wait before retrying.",
                                                   "schema": {"type": "integer"}}}
    for path, methods in schema.get("paths", {}).items():
        for operation in methods.values():
            if path in open_paths:
                operation["security"] = []
                continue
            operation["security"] = required if keys.enabled else [{}, *required]
            responses = operation.setdefault("responses", {})
            for status, response in extra.items():
                responses.setdefault(str(status), response)


def _document_links(schema: dict[str, Any]) -> None:
    """OpenAPI links from a created session to every operation on it (stateful fuzzing follows them)."""
    paths = schema.get("paths", {})
    created = paths.get("/v1/sessions", {}).get("post", {}).get("responses", {}).get("201")
    if created is None:
        return
    links = {}
    for path, methods in paths.items():
        if "{session_id}" not in path:
            continue
        for method, operation in methods.items():
            name = "".join(part.title() for part in operation["operationId"].split("_v1_")[0].split("_"))
            links[name] = {"operationId": operation["operationId"],
                           "parameters": {"session_id": "$response.body#/id"},
                           "description": f"`{method.upper()} {path}` on the created session."}
    created["links"] = links


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(title="gradserve API", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                  docs_url=None, redoc_url=None)
    configure_logging(settings.log_level)
    app.state.settings = settings
    app.state.keys = KeyRing(settings.api_keys.get_secret_value())
    configure_malloc(settings)
    app.state.trimmer = MemoryTrimmer(settings.memory_trim_interval_seconds)
    app.state.store = make_store(settings)
    if hasattr(app.state.store, "on_release"):  # the memory store says when sessions end
        app.state.store.on_release = app.state.trimmer.released
    app.state.metrics = Metrics(app.state.store)
    app.state.inflight = InFlight()
    app.state.service = SessionService(app.state.store, settings, app.state.metrics)
    app.state.metrics.watch_plans(app.state.service.plans)
    # heavy work on threads of its own, nicer than the event loop's (app.admission)
    app.state.heavy = HeavyWork(settings.max_heavy_requests, settings.max_heavy_queue,
                                settings.heavy_queue_wait_seconds, settings.request_deadline_seconds,
                                nice=settings.heavy_nice)
    # cheap op lists that could not run on the event loop: a lane of their own, never behind heavy work
    app.state.light = HeavyWork(LIGHT_SLOTS, LIGHT_QUEUE, settings.heavy_queue_wait_seconds, LIGHT_DEADLINE_SECONDS)

    errors.install(app)
    # innermost first: the body's type, size and read time, then keys and rate limits, CORS (preflights need
    # no key), and outermost the request id, security headers, metrics and access log, which see every response
    app.add_middleware(RequestBody, max_body_bytes=settings.max_body_bytes,
                       read_timeout=settings.body_read_timeout_seconds)
    limits = limit_storage(settings)  # the session store's Redis when it is Redis: limits across processes
    app.add_middleware(Auth, keys=app.state.keys,
                       limiter=RateLimiter(limits, settings.rate_limit_per_second, settings.rate_limit_burst, "key"),
                       metrics_open=not settings.metrics_require_key,
                       client_limiter=RateLimiter(limits, settings.client_rate_limit_per_second,
                                                  settings.client_rate_limit_burst, "client"),
                       failures=RateLimiter(limits, settings.auth_failures_per_minute / 60,
                                            settings.auth_failures_burst, "failures"))
    origins = [o.strip() for o in settings.cors_allow_origins.split(",") if o.strip()]
    if origins:
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "X-API-Key", "Content-Type", "X-Request-ID"],
                           expose_headers=["X-Request-ID", "Retry-After", "Location", "WWW-Authenticate"])
    app.state.templates = RouteTemplates(lambda: app.openapi()["paths"])
    app.add_middleware(Observe, metrics=app.state.metrics, inflight=app.state.inflight,
                       templates=app.state.templates, access=settings.access_log, headers=security_headers)
    for module in (sessions, ops, autograd, graph, meta):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.openapi = lambda: _schema_with_components(app)
    return app


def _app_for_server() -> FastAPI:
    """``create_app()`` for ``uvicorn app.main:app``. A worker that raises at import is restarted by uvicorn's
    supervisor forever; exit status 3 (uvicorn's startup failure) makes it stop the whole server instead."""
    try:
        return create_app()
    except SeveralWorkersError as exc:
        print(f"gradserve: refusing to start: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(3) from exc


app = _app_for_server()
