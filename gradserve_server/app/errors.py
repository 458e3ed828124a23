"""Problem details (RFC 9457) for every error, from one place.

Engine errors carry torch's exception type and message; app errors carry their own. Both become an
``application/problem+json`` body with ``type``, ``title``, ``status``, ``detail`` and a stable ``code``;
op errors add ``op_index``, ``op`` and ``exception``. Routes raise, they never build error bodies.

Status policy (also in docs/reference/errors.md): unknown session or tensor name -> 404; a request the engine cannot run
as written (bad argument, shape, dtype, unknown op, limits) -> 422; a request that is fine but conflicts
with the session's current state (graph already freed, tensor modified in place since it was saved, in-place
on a leaf that requires grad) -> 409, and so is a session another request holds too long (``session_busy``);
too many sessions, a key's or an address's session quota or rate -> 429; missing or invalid API key -> 401;
body too large -> 413; body not JSON -> 415; body too slow to arrive -> 408; session store unreachable, or
every heavy slot taken and the queue full -> 503 (with Retry-After); a request past its compute deadline
(``GRADSERVE_REQUEST_DEADLINE_SECONDS``) -> 504 ``deadline_exceeded``; a request whose client went away ->
499 ``cancelled`` (nobody reads it; it is for logs and metrics). Every problem carries the request's id
(``request_id``, also in the ``X-Request-ID`` header).
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from http import HTTPStatus
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from gradserve_server.engine import EngineError

log = logging.getLogger("gradserve")

PROBLEM_MEDIA_TYPE = "application/problem+json"

#: The request being served: {"request_id": ..., "code": ...}, set by app.observability's middleware. A dict
#: shared with the thread-pool copies of the context, so that the code of a problem raised there is seen
#: by the access log.
REQUEST: ContextVar[dict[str, Any] | None] = ContextVar("gradserve_request", default=None)

#: Engine codes whose status is not 422. Unknown codes fall back to 422.
ENGINE_STATUS = {
    "unknown_tensor": 404,
    "graph_freed": 409,
    "version_mismatch": 409,
    "leaf_inplace": 409,
    "deadline_exceeded": 504,
    "cancelled": 499,
}

TITLES = {
    "unknown_tensor": "Unknown tensor",
    "unknown_op": "Unknown op",
    "graph_freed": "Graph already freed",
    "version_mismatch": "Tensor modified in place",
    "leaf_inplace": "In-place operation on a leaf that requires grad",
    "shape_mismatch": "Shape mismatch",
    "invalid_argument": "Invalid argument",
    "limit_exceeded": "Limit exceeded",
    "deadline_exceeded": "Deadline exceeded",
    "cancelled": "Request cancelled",
    "server_busy": "Server busy",
    "session_not_found": "Session not found",
    "grad_not_set": "Gradient not set",
    "invalid_name": "Invalid tensor name",
    "too_many_sessions": "Too many sessions",
    "session_busy": "Session busy",
    "session_quota_exceeded": "Session quota exceeded",
    "unauthorized": "Missing or invalid API key",
    "rate_limited": "Rate limit exceeded",
    "store_unavailable": "Session store unavailable",
    "body_too_large": "Request body too large",
    "validation_error": "Invalid request",
    "invalid_json": "Malformed JSON",
    "invalid_tensor_payload": "Invalid tensor payload",
    "unsupported_media_type": "Unsupported media type",
    "duplicate_key": "Duplicate JSON key",
    "body_timeout": "Request body too slow",
    "bad_http_request": "Malformed HTTP request",
    "client_disconnected": "Client disconnected",
    "graphviz_failed": "Graph rendering failed",
    "not_found": "Not found",
    "method_not_allowed": "Method not allowed",
    "internal_error": "Internal server error",
}


def problem_type(code: str) -> str:
    """A stable URI per code; a URN so that no host is implied."""
    return f"urn:gradserve:problem:{code}"


def problem_body(status: int, code: str, detail: str, **extra) -> dict:
    title = TITLES.get(code) or TITLES.get(code.removesuffix("_error")) or HTTPStatus(status).phrase
    body = {"type": problem_type(code), "title": title, "status": status, "detail": detail, "code": code}
    body.update({k: v for k, v in extra.items() if v is not None})
    request = REQUEST.get()
    if request is not None:
        body["request_id"] = request["request_id"]
        request["code"] = code
    return body


def problem_response(status: int, code: str, detail: str, headers: dict | None = None, **extra) -> Response:
    return Response(orjson.dumps(problem_body(status, code, detail, **extra)), status_code=status,
                    media_type=PROBLEM_MEDIA_TYPE, headers=headers)


class AppError(Exception):
    """An error the service itself raises (not the engine)."""

    status = 400
    code = "bad_request"
    retry_after: int | None = None  # seconds, sent as Retry-After

    def __init__(self, detail: str, *, code: str | None = None, status: int | None = None, **extra):
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.extra = extra


class SessionNotFound(AppError):
    status = 404
    code = "session_not_found"

    def __init__(self, session_id: str):
        super().__init__(f"no session {session_id!r} (it may have expired)")


class GradNotSet(AppError):
    status = 404
    code = "grad_not_set"

    def __init__(self, name: str, warnings: list[str] | None = None):
        base = name.removesuffix(".grad")
        super().__init__(f"{base}.grad is None: no backward pass has reached {base} since its gradient was "
                         f"last cleared (a non-leaf keeps one only after retain_grad())", warnings=warnings or None)


class TooManySessions(AppError):
    status = 429
    code = "too_many_sessions"
    retry_after = 60


class SessionQuotaExceeded(AppError):
    status = 429
    code = "session_quota_exceeded"
    retry_after = 60


class SessionBusy(AppError):
    """Another request holds the session (in any process) longer than GRADSERVE_LOCK_WAIT_SECONDS, or held
    it so long that its lock expired and a newer state was saved; nothing was applied, retry."""

    status = 409
    code = "session_busy"
    retry_after = 1


class ServerBusy(AppError):
    """Every heavy slot is taken and the queue for them is full (or the wait for one too long)."""

    status = 503
    code = "server_busy"
    retry_after = 2


class StoreUnavailable(AppError):
    status = 503
    code = "store_unavailable"
    retry_after = 5


class InvalidInput(AppError):
    status = 422
    code = "validation_error"


class LimitExceeded(AppError):
    status = 422
    code = "limit_exceeded"


def engine_status(code: str) -> int:
    return ENGINE_STATUS.get(code, 422)


#: What JSON makes of a number torch's message cannot know about: the ``hint`` beside torch's ``detail``
INTEGER_DATA_HINT = (
    "The tensor's dtype is not floating point. JSON integers (2, [1, 2]) make int64 tensors, as "
    "torch.tensor(2) does, and some JSON writers (browsers, JavaScript's JSON.stringify) write 2.0 as 2. "
    "Write the data as floats (2.0) if your JSON writer keeps them, or pass the dtype in the op's kwargs: "
    '{"op": "tensor", "args": [2], "kwargs": {"dtype": "float32", "requires_grad": true}}.')


def engine_hint(exc: EngineError) -> str | None:
    """A hint for errors whose cause is how JSON carries numbers (torch's own message stays the detail)."""
    if exc.code == "requires_grad" and "floating point" in exc.message:
        return INTEGER_DATA_HINT
    return None


def _engine_error(request: Request, exc: EngineError) -> Response:
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.op_error(exc.code)
    return problem_response(engine_status(exc.code), exc.code, exc.message, op_index=exc.op_index,
                            op=exc.op, exception=exc.exception, hint=engine_hint(exc))


def _app_error(request: Request, exc: AppError) -> Response:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
    return problem_response(exc.status, exc.code, exc.detail, headers=headers, **exc.extra)


def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
              for e in exc.errors()]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    detail = f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}" if first["loc"] else first["msg"]
    # a body that is not JSON at all is the same problem on every route (the op-list routes parse their own)
    code = "invalid_json" if any(e["type"] == "json_invalid" for e in errors) else "validation_error"
    return problem_response(422, code, detail, errors=errors)


def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    if exc.status_code == 400:
        # FastAPI's only 400: a body it cannot decode (not UTF-8, not JSON); the op-list routes say 422
        # invalid_json for the same body, and so do these
        return problem_response(422, "invalid_json", f"malformed JSON body: {exc.detail}")
    codes = {404: "not_found", 405: "method_not_allowed", 408: "body_timeout", 413: "body_too_large",
             415: "unsupported_media_type"}
    code = codes.get(exc.status_code, "http_error")
    detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    headers = getattr(exc, "headers", None)
    templates = getattr(request.app.state, "templates", None)
    if exc.status_code == 405 and templates is not None:
        # Starlette names the methods of the first route with this path only; a path has several routes
        found = templates.match(request.url.path)
        if found is not None:
            headers = {**(headers or {}), "Allow": ", ".join(found[1])}
            detail = f"{request.method} is not allowed here; allowed: {', '.join(found[1])}"
    return problem_response(exc.status_code, code, detail, headers=headers)


def unexpected_problem(exc: BaseException) -> Response:
    """A 500 that says what kind of failure it was but not its message (which may quote request data)."""
    log.error("unhandled %s", type(exc).__name__, exc_info=exc)
    return problem_response(500, "internal_error", f"the server failed on this request ({type(exc).__name__}); "
                            "it is logged under this request's id")


def _client_disconnect(request: Request, exc: ClientDisconnect) -> Response:
    """The client hung up while its body was read: nobody to answer. Observed as 499, logged at info (never
    the 500 and traceback of an unexpected failure)."""
    context = REQUEST.get()
    if context is not None:
        context["disconnected"] = True
    return Response(status_code=499)


def _unexpected(request: Request, exc: Exception) -> Response:
    return unexpected_problem(exc)


def install(app: FastAPI) -> None:
    """Register the one set of exception handlers."""
    app.add_exception_handler(EngineError, _engine_error)
    app.add_exception_handler(AppError, _app_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ClientDisconnect, _client_disconnect)
    app.add_exception_handler(Exception, _unexpected)
