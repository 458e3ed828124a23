"""Pure ASGI middleware for the request body, before anything parses it, and the security headers of every
response.

``RequestBody`` refuses a body that is not JSON (415: a ``text/plain`` or form body is what a browser may send
cross-site without a CORS preflight), larger than the configured size (413, by Content-Length up front and by
counting streamed bytes), or not fully received within the read timeout (408: a client trickling its body
holds a connection and a request slot). A client that hangs up before its body is complete is noted in the
request's context (``disconnected``), so that the access log and the metrics show a disconnect, not an error.

Refusals found while the body streams (413, 408) are raised as ``HTTPException`` from ``receive``: FastAPI
re-raises HTTPExceptions met while reading a body, and the one exception handler makes the problem response.
"""

from __future__ import annotations

import asyncio

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gradserve_server.app.errors import REQUEST, problem_response

#: Methods whose body the routes read
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def is_json_media_type(value: bytes | None) -> bool:
    """``application/json`` or ``application/<anything>+json``, with no charset or UTF-8 (RFC 8259)."""
    if not value:
        return False
    media, _, params = value.decode("latin-1").partition(";")
    media = media.strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        return False
    for param in params.split(";"):
        name, _, arg = param.partition("=")
        if name.strip().lower() == "charset" and arg.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return False
    return True


class RequestBody:
    """JSON only (415), at most ``max_body_bytes`` (413), read within ``read_timeout`` seconds (408)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, read_timeout: float = 30.0):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.read_timeout = read_timeout

    def detail(self) -> str:
        return f"request body exceeds the limit of {self.max_body_bytes} bytes (GRADSERVE_MAX_BODY_BYTES)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = 0
        content_type = None
        chunked = False
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0  # the server rejects malformed lengths; counting below still applies
            elif name == b"content-type":
                content_type = value
            elif name == b"transfer-encoding":
                chunked = True
        if not (declared > 0 or chunked):
            # no body: nothing to check or time (the server answers a body without a length as malformed)
            await self.app(scope, receive, send)
            return
        if scope["method"] in BODY_METHODS and not is_json_media_type(content_type):
            given = content_type.decode("latin-1") if content_type else "none"
            response = problem_response(415, "unsupported_media_type", f"the request body must be JSON, sent with "
                                        f"`Content-Type: application/json` (got: {given})",
                                        headers={"Accept-Post": "application/json", "Connection": "close"})
            await response(scope, receive, send)
            return
        if declared > self.max_body_bytes:
            response = problem_response(413, "body_too_large", self.detail(), headers={"Connection": "close"})
            await response(scope, receive, send)
            return

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.read_timeout
        received = 0
        complete = False

        async def guarded_receive() -> Message:
            nonlocal received, complete
            if complete:  # after the body: waiting for a disconnect (streaming responses) is not timed
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise HTTPException(408, f"the request body was not received within {self.read_timeout:g} s "
                                         "(GRADSERVE_BODY_READ_TIMEOUT_SECONDS)",
                                    headers={"Connection": "close"}) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise HTTPException(413, self.detail(), headers={"Connection": "close"})
                complete = not message.get("more_body", False)
            elif message["type"] == "http.disconnect":
                complete = True
                context = REQUEST.get()
                if context is not None:
                    context["disconnected"] = True
            return message

        await self.app(scope, guarded_receive, send)


#: Kept for callers of the earlier name
BodySizeLimit = RequestBody

# ----- security headers -------------------------------------------------------------------------------------
NOSNIFF = (b"x-content-type-options", b"nosniff")
NO_STORE = (b"cache-control", b"no-store")
#: Everything but the docs pages: JSON, text and SVG that must never run anything or be framed (an SVG graph
#: opened directly in a browser is a document that could carry script)
API_CSP = (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'; base-uri 'none'")
#: Paths that answer session data (tensors, gradients, graphs, op results): never cached by browsers or proxies
NO_STORE_PREFIXES = ("/v1/sessions", "/v1/eval")
#: Pages that set their own policy (the docs: app.routes.meta)
OWN_CSP_PATHS = frozenset({"/docs", "/redoc"})


def security_headers(path: str) -> list[tuple[bytes, bytes]]:
    """The headers every response to ``path`` gets (``app.observability.Observe`` adds them)."""
    headers = [NOSNIFF]
    if path.startswith(NO_STORE_PREFIXES):
        headers.append(NO_STORE)
    if path not in OWN_CSP_PATHS and not path.startswith("/static/"):
        headers.append(API_CSP)
    return headers
