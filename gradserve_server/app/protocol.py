"""uvicorn's HTTP protocols, answering the requests it refuses itself (malformed HTTP: a bad request line,
header or chunk, which never reach the app) with a problem+json 400 instead of a ``text/plain`` one.

Select with ``uvicorn --http app.protocol:HTTPProtocol`` (the image's command does): httptools when
installed, else h11, as uvicorn's ``auto``.
"""

from __future__ import annotations

import asyncio

import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

from gradserve_server.app.errors import PROBLEM_MEDIA_TYPE, problem_type

_CONTENT_TYPE = PROBLEM_MEDIA_TYPE.encode()


def bad_request_body(message: str) -> bytes:
    return orjson.dumps({"type": problem_type("bad_http_request"), "title": "Malformed HTTP request",
                         "status": 400, "detail": f"{message} (the request could not be parsed as HTTP/1.1)",
                         "code": "bad_http_request"})


class ProblemH11Protocol(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        import h11

        body = bad_request_body(msg)
        headers = [(b"content-type", _CONTENT_TYPE), (b"content-length", str(len(body)).encode()),
                   (b"x-content-type-options", b"nosniff"), (b"connection", b"close")]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                      h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()


HTTPProtocol: type[asyncio.Protocol]
try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is part of uvicorn[standard]
    HTTPProtocol = ProblemH11Protocol
else:

    class ProblemHttpToolsProtocol(HttpToolsProtocol):
        def send_400_response(self, msg: str) -> None:
            body = bad_request_body(msg)
            content = [b"HTTP/1.1 400 Bad Request\r\n"]
            for name, value in self.server_state.default_headers:
                content.extend([name, b": ", value, b"\r\n"])
            content.extend([b"content-type: ", _CONTENT_TYPE, b"\r\n",
                            b"content-length: ", str(len(body)).encode(), b"\r\n",
                            b"x-content-type-options: nosniff\r\n", b"connection: close\r\n\r\n", body])
            self.transport.write(b"".join(content))
            self.transport.close()

    HTTPProtocol = ProblemHttpToolsProtocol
