"""The op catalog, health, readiness, metrics, and the offline API docs."""

from __future__ import annotations

import base64
import hashlib
import re
import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import HTMLResponse, Response

from gradserve_server.app.deps import ServiceDep
from gradserve_server.app.errors import ServerBusy, problem_response
from gradserve_server.app.routes import TensorJSON
from gradserve_server.app.schemas.meta import Health, OpCatalog, Progress, Readiness
from gradserve_server.app.schemas.problems import problem_responses

router = APIRouter(tags=["meta"])


#: "Try it out" in Swagger UI starts from a page of 20 ops (rendering the whole catalog there takes long)
CATALOG_PAGE = {"page": {"summary": "a page of 20 ops", "value": 20}}


@router.get("/v1/ops", response_model=OpCatalog, responses=problem_responses(422), summary="The op catalog")
def op_catalog(
        service: ServiceDep,
        q: Annotated[str | None, Query(max_length=200, description="Only ops whose name, an alias, a grad_fn "
                                       "name or the doc contains this (case-insensitive): `svd`, `Mul`, "
                                       "`softmax`.")] = None,
        family: Annotated[str | None, Query(max_length=64, description="Only this family: `elementwise`, "
                                            "`reduction`, `shape`, `linalg`, `nn`, `autograd`, ...")] = None,
        differentiable: Annotated[bool | None, Query(description="Only differentiable ops (true) or only "
                                                     "the others (false).")] = None,
        inplace: Annotated[bool | None, Query(description="Only in-place ops (true) or only the others "
                                              "(false).")] = None,
        offset: Annotated[int, Query(ge=0, le=100_000, description="Skip this many matches.")] = 0,
        limit: Annotated[int | None, Query(ge=1, le=1000, description="At most this many ops (all the "
                                           "matches when omitted).", openapi_examples=CATALOG_PAGE)] = None,
) -> TensorJSON:
    """Every op the engine knows, from its one table: argument names, grad_fn names, whether it is
    differentiable or in-place, and a docstring. Without parameters, the whole catalog (about 120 KB);
    to browse it here, filter (`q`, `family`, `differentiable`, `inplace`) or page (`offset`, `limit`).
    `total` counts the matching ops."""
    return TensorJSON(service.op_catalog(q, family, differentiable, inplace, offset, limit))


@router.get("/v1/requests/{request_id}/progress", response_model=Progress, summary="A running request's progress")
async def progress(request_id: str, request: Request) -> dict:
    """For a request sent with an `X-Request-ID` header: the ops it has run of those it will run, while it runs
    in the thread pool (heavy requests: the ones that may take long). The client polls it to draw a progress bar
    for a sync that takes more than a couple of seconds."""
    control = request.app.state.heavy.active.get(request_id)
    if control is None:
        return {"request_id": request_id, "state": "unknown", "done": 0, "total": 0, "elapsed_seconds": 0.0}
    done, total = control.done, control.total
    return {"request_id": request_id, "state": "running", "done": min(done, total), "total": total,
            "elapsed_seconds": round(time.monotonic() - control.started, 3)}


@router.get("/healthz", response_model=Health, summary="Liveness")
async def healthz() -> dict:
    return {"status": "ok"}


@router.get("/readyz", response_model=Readiness, responses=problem_responses(503), summary="Readiness")
def readyz(request: Request, service: ServiceDep) -> Any:
    """Ready, with the live sessions and the heavy requests running and queued; 503 `server_busy` (with the
    same counts as `heavy`) while every heavy slot is taken and the queue is full, and `store_unavailable`
    while the session store is unreachable."""
    heavy = request.app.state.heavy
    body = service.readiness()
    body["heavy"] = heavy.stats()
    if heavy.saturated:
        return problem_response(503, "server_busy", "every heavy slot is taken and the queue for them is full "
                                "(GRADSERVE_MAX_HEAVY_REQUESTS, GRADSERVE_MAX_HEAVY_QUEUE)",
                                headers={"Retry-After": str(ServerBusy.retry_after)}, heavy=body["heavy"])
    return body


@router.get("/metrics", response_class=Response, summary="Prometheus metrics",
            responses={200: {"description": "The Prometheus text exposition format.",
                             "content": {"text/plain": {"schema": {"type": "string"}}}}})
def metrics(request: Request) -> Response:
    """Requests and latency by route template and status, problems by code, live sessions, sessions
    created, deleted, expired and evicted, op errors by code and backward passes. Holds no tensor data,
    session ids or keys; open unless `GRADSERVE_METRICS_REQUIRE_KEY`."""
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def with_csp(page: HTMLResponse, *, styles: str = "'self'") -> HTMLResponse:
    """The docs page with a Content-Security-Policy that allows exactly what it runs: its own files from
    /static, its inline scripts by their SHA-256 (FastAPI writes Swagger UI's set-up inline), requests to
    this server only (the OpenAPI document, "Try it out"), images from here or data: URLs, ReDoc's web
    worker (a blob: URL); no other origin, no framing, no forms, no plugins."""
    html = page.body.decode()
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()}'"
                      for script in INLINE_SCRIPT.findall(html))
    page.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src 'self' {hashes}; style-src {styles}; img-src 'self' data:; "
        "font-src 'self'; connect-src 'self'; worker-src blob:; frame-ancestors 'none'; base-uri 'none'; "
        "form-action 'none'")
    return page


INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


SWAGGER_JS = '<script src="/static/swagger-ui-bundle.js"></script>'
#: Swagger UI's plugin that shows an SVG response (the graph drawn) as a picture; it must load between the
#: bundle and FastAPI's inline set-up script
SVG_PICTURE_JS = '<script src="/static/svg-picture.js"></script>'


@router.get("/docs", include_in_schema=False)
async def swagger_ui(request: Request) -> HTMLResponse:
    page = get_swagger_ui_html(openapi_url=request.app.openapi_url, title=f"{request.app.title} - Swagger UI",
                               swagger_js_url="/static/swagger-ui-bundle.js",
                               swagger_css_url="/static/swagger-ui.css",
                               swagger_favicon_url="/static/favicon-32x32.png")
    html = page.body.decode()
    if html.count(SWAGGER_JS) != 1:
        raise RuntimeError("FastAPI's Swagger UI page changed: the SVG picture plugin has no place to go")
    return with_csp(HTMLResponse(html.replace(SWAGGER_JS, SWAGGER_JS + SVG_PICTURE_JS)))


@router.get("/redoc", include_in_schema=False)
async def redoc(request: Request) -> HTMLResponse:
    # ReDoc styles itself with <style> elements it writes at run time (styled-components), and FastAPI's page
    # has one inline: styles need 'unsafe-inline' here (scripts still do not)
    return with_csp(get_redoc_html(openapi_url=request.app.openapi_url, title=f"{request.app.title} - ReDoc",
                                   redoc_js_url="/static/redoc.standalone.js",
                                   redoc_favicon_url="/static/favicon-32x32.png", with_google_fonts=False),
                    styles="'self' 'unsafe-inline'")
