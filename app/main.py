"""The FastAPI application: ``create_app(settings=None)`` and the module-level ``app``."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.staticfiles import StaticFiles
from pydantic import TypeAdapter

from app import errors
from app.config import Settings, get_settings
from app.middleware import BodySizeLimit
from app.routes import autograd, graph, meta, ops, sessions
from app.schemas.ops import EvalRequest, OpsRequest
from app.schemas.problems import Problem
from app.schemas.tensors import Base64Tensor
from app.service import SessionService
from app.store import SeveralWorkersError, make_store

STATIC_DIR = Path(__file__).parent / "static"

DESCRIPTION = """\
PyTorch's autograd semantics over HTTP, computed by a numpy engine.

Create a session, send op lists written the way torch spells them (`tensor`, `mul`, `backward`, `grad`,
`zero_grad`, ...), and read back values, gradients, grad_fn names and the graph. Errors are
`application/problem+json` with PyTorch's own messages.
"""


async def _sweep_periodically(store, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        with contextlib.suppress(Exception):  # a store that is briefly unreachable is swept next time
            await asyncio.to_thread(store.sweep)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    sweeper = asyncio.create_task(_sweep_periodically(app.state.store, settings.sweep_interval_seconds))
    try:
        yield
    finally:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
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
    for methods in schema.get("paths", {}).values():
        for operation in methods.values():
            responses = operation.get("responses", {})
            if "HTTPValidationError" in str(responses.get("422", "")):
                responses["422"] = problem_422
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    app.openapi_schema = schema
    return schema


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(title="gradserve", version="0.1.0", description=DESCRIPTION, lifespan=lifespan,
                  docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.state.store = make_store(settings)
    app.state.service = SessionService(app.state.store, settings)

    errors.install(app)
    app.add_middleware(BodySizeLimit, max_body_bytes=settings.max_body_bytes)
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
