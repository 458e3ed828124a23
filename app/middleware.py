"""Pure ASGI middleware that refuses request bodies above the configured size, before anything parses them."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import problem_response


class BodySizeLimit:
    """413 by Content-Length up front, and by counting streamed bytes (chunked or lying clients).

    The streamed check raises an HTTPException(413) from ``receive``; FastAPI re-raises HTTPExceptions met
    while reading a body, so the one exception handler turns it into the same problem response.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int):
        self.app = app
        self.max_body_bytes = max_body_bytes

    def detail(self) -> str:
        return f"request body exceeds the limit of {self.max_body_bytes} bytes (GRADSERVE_MAX_BODY_BYTES)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0  # the server rejects malformed lengths; counting below still applies
                if declared > self.max_body_bytes:
                    response = problem_response(413, "body_too_large", self.detail(),
                                                headers={"Connection": "close"})
                    await response(scope, receive, send)
                    return
                break

        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise HTTPException(413, self.detail())
            return message

        await self.app(scope, counting_receive, send)
