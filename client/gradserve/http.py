"""A plain, typed client of the gradserve HTTP API, for programs that write op lists themselves.

    with gradserve.Client("http://127.0.0.1:8000") as c:
        s = c.create_session()["id"]
        c.run_ops(s, [{"op": "tensor", "out": "x", "args": [2.0], "kwargs": {"requires_grad": True}},
                      {"op": "pow", "out": "y", "args": ["x", 2]}, {"op": "backward", "args": ["y"]}],
                  returns=["x.grad"])["tensors"]["x.grad"]["data"]         # 4.0

One ``httpx.Client`` (connection reuse), a timeout on every request, and retries only where a retry cannot
apply a change twice: idempotent requests (GET, DELETE) on transport errors and on 503, any request whose
connection could not be opened, and any request the server refused for now before doing anything (``LATER``: its
rate limit, a busy session, every heavy slot taken), after the ``Retry-After`` it asks for, within ``max_wait``
seconds a request. Every problem answer is raised as ``ProblemError``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Literal, NotRequired, TypedDict

import httpx

from gradserve import errors
from gradserve.errors import ProblemError
from gradserve.progress import Watch
from gradserve.progress import enabled as watching

try:  # (optional: the client needs httpx and numpy only; with orjson the recorder's requests encode faster)
    import orjson
except ImportError:  # pragma: no cover - depends on the environment
    orjson = None

log = logging.getLogger("gradserve")

DEFAULT_URL = "http://127.0.0.1:8000"
START_HINT = ("start one with `python3 dev.py serve` (or `uvicorn gradserve_server.app.main:app`), or set "
              "GRADSERVE_URL to the address of a running server")
IDEMPOTENT = frozenset({"GET", "HEAD", "DELETE", "PUT"})
#: the refusals the server answers before doing anything, to be sent again after ``Retry-After`` (whatever the method:
#: nothing was applied); not a session count or quota (their wait is a minute: raised) nor a store that could not be
#: reached (a failed save may have reached it)
LATER = frozenset({(429, "rate_limited"), (409, "session_busy"), (503, "server_busy")})
Encoding = Literal["json", "base64"]
GraphFormat = Literal["json", "dot", "mermaid", "svg"]


class SessionInfo(TypedDict):
    id: str
    created_at: str
    last_used_at: str
    expires_at: str
    ttl_seconds: NotRequired[float]
    tensor_count: NotRequired[int]


class TensorView(TypedDict):
    name: str
    shape: list[int]
    dtype: str
    requires_grad: bool
    is_leaf: bool
    grad_fn: str | None
    retains_grad: bool
    version: int
    grad_accumulations: int
    data: NotRequired[Any]   # absent at the "meta" view level
    grad: NotRequired[Any]


class OpsResponse(TypedDict):
    ops: list[dict]
    tensors: dict[str, TensorView | None]
    autograd: list[dict]
    warnings: list[str]
    records: NotRequired[dict[str, list]]


class Client:
    """The HTTP API, one method per route. ``url`` defaults to ``GRADSERVE_URL`` (else
    http://127.0.0.1:8000), ``api_key`` to ``GRADSERVE_API_KEY``. ``requests`` counts the HTTP requests
    sent (retries included). ``max_wait``: the seconds one request may spend waiting out the server's refusals
    for now (``LATER``: its rate limit, a busy session, a full queue) before the refusal is raised; 0 raises
    the first."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 60.0,
                 retries: int = 2, max_wait: float = 30.0, transport: httpx.BaseTransport | None = None):
        env = os.environ.get("GRADSERVE_URL")
        #: where the URL came from, for error messages
        self.url_source = "given to the client" if url else "from GRADSERVE_URL" if env else \
            "the default; GRADSERVE_URL is not set"
        self.url = (url or env or DEFAULT_URL).rstrip("/")
        api_key = api_key if api_key is not None else os.environ.get("GRADSERVE_API_KEY")
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.retries = retries
        self.max_wait = max_wait
        self.requests = 0
        self.waited = 0.0  # seconds spent waiting out refusals for now (``LATER``), over all requests
        try:
            self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)
        except httpx.InvalidURL as exc:
            raise self._unreachable(exc, "is not a valid URL", "write it as http://host:port") from None
        self._http._cookies = _Cookies()  # (httpx's own store, which its cookies setter would copy into a plain one)
        self._urls: dict[tuple[str, str], httpx.URL] = {}

    # ----- plumbing -----------------------------------------------------------------------------------
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, method: str, path: str | httpx.URL, **kwargs) -> httpx.Response:
        """Send, retrying what may be retried; raise ProblemError for any 4xx/5xx answer. ``path``: a route, or
        its absolute URL (``_url``)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        attempt, waited = 0, 0.0
        while True:
            self.requests += 1
            started = time.perf_counter()
            try:
                response = self._http.request(method, path, **kwargs)
            except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
                raise self._unreachable(exc, "has no http:// or https:// scheme", "write it as "
                                        f"http://{self.url.split('://')[-1]}") from None
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt >= self.retries:  # never sent: safe to retry any method
                    raise self._unreachable(exc, "does not answer") from None
            except httpx.TransportError as exc:
                if method not in IDEMPOTENT or attempt >= self.retries:
                    raise errors.ConnectionError(
                        f"gradserve: the connection to the server at {self.url} broke during {method} {_route(path)} "
                        f"({type(exc).__name__}: {exc or 'no detail'}); if the server stopped, its sessions and "
                        f"every tensor in them are gone; {START_HINT}", self.url, self.url_source) from None
            else:
                if log.isEnabledFor(logging.DEBUG):
                    body = response.request.content if response.request is not None else b""
                    log.debug("%s %s -> %d: %d bytes sent, %d received, %.1f ms", method, _route(path),
                              response.status_code, len(body), len(response.content),
                              (time.perf_counter() - started) * 1e3)
                if response.status_code < 400:
                    return response
                wait = self._later(response, method, path, waited)
                if wait is not None:
                    time.sleep(wait)
                    waited += wait
                    self.waited += wait
                    continue
                if response.status_code != 503 or method not in IDEMPOTENT or attempt >= self.retries:
                    raise _problem(response)
            attempt += 1
            time.sleep(min(0.05 * 2 ** attempt, 1.0))

    def _later(self, response: httpx.Response, method: str, path, waited: float) -> float | None:
        """The seconds to wait before sending a request the server refused for now (``LATER``), or None: another
        answer, or a wait past what is left of ``max_wait``. The first wait of a client is logged as a warning (a
        loop that outruns the server's rate limit slows down to it; the warning says why), later ones at INFO."""
        if response.status_code not in (429, 409, 503):
            return None
        problem = _problem(response)
        if (response.status_code, problem.code) not in LATER:
            return None
        try:
            wait = max(0.0, float(response.headers.get("retry-after", "1")))
        except ValueError:  # (an HTTP date: not what this server sends)
            wait = 1.0
        if waited + wait > self.max_wait:
            return None
        level = logging.WARNING if not self.waited else logging.INFO
        log.log(level, "gradserve: the server at %s refused %s %s for now (%s: %s); waiting %g s and sending it "
                "again (at most %g s a request: gradserve.Client(max_wait=...))", self.url, method, _route(path),
                problem.code, problem.detail, wait, self.max_wait)
        return wait

    def _unreachable(self, exc: Exception, what: str, hint: str = START_HINT) -> errors.ConnectionError:
        return errors.ConnectionError(
            f"gradserve: cannot reach a gradserve server at {self.url} ({self.url_source}): the address {what} "
            f"({type(exc).__name__}: {exc or 'no detail'}); {hint}", self.url, self.url_source)

    def _url(self, path: str, encoding: Encoding) -> httpx.URL | str:
        """The absolute URL of a route that is called again and again (a session's ops), parsed once: httpx
        parses a relative path and a query on every request, a third of a request's client CPU time."""
        url = self._urls.get((path, encoding))
        if url is None:
            try:
                url = httpx.URL(self.url + path, params=_enc(encoding))
            except httpx.InvalidURL:
                return path  # (request() says what is wrong with the address)
            if len(self._urls) >= 64:
                self._urls.clear()
            self._urls[path, encoding] = url
        return url

    def _json(self, method: str, path: str | httpx.URL, **kwargs) -> Any:
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        return self.request(method, path, **kwargs).json()

    # ----- sessions -----------------------------------------------------------------------------------
    def create_session(self) -> SessionInfo:
        return self._json("POST", "/v1/sessions")

    def list_sessions(self) -> list[SessionInfo]:
        return self._json("GET", "/v1/sessions")["sessions"]

    def get_session(self, session_id: str) -> dict:
        """Tensor summaries by name, node count, backward passes, memory."""
        return self._json("GET", f"/v1/sessions/{session_id}")

    def delete_session(self, session_id: str) -> None:
        self.request("DELETE", f"/v1/sessions/{session_id}")

    # ----- op lists -----------------------------------------------------------------------------------
    def run_ops(self, session_id: str, ops: list[dict], *, no_grad: bool = False, repeat: int = 1,
                record: list[str] | None = None, returns: list[str] | dict[str, str] | None = None,
                encoding: Encoding = "json", progress: bool | None = None, fast_json: bool = False) -> OpsResponse:
        """``POST /ops``: atomic. ``returns``: the request's ``return`` (names, or {name: "full" | "meta" |
        "auto"}): only those tensors come back. ``progress``: draw a bar on stderr if it runs long (None: on a
        terminal, unless ``GRADSERVE_PROGRESS=0``; see ``gradserve.progress``). ``fast_json``: the body encoded
        and the answer decoded with orjson when it is installed (``dumps``, ``loads``: the same JSON either way)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        body: dict[str, Any] = {"ops": ops}
        if no_grad:
            body["no_grad"] = True
        if repeat != 1:
            body["repeat"] = repeat
        if record:
            body["record"] = record
        if returns is not None:
            body["return"] = returns
        url = self._url(f"/v1/sessions/{session_id}/ops", encoding)
        params = None if isinstance(url, httpx.URL) else _enc(encoding)
        if fast_json and orjson is not None:
            sent = {"content": dumps(body), "headers": _JSON_HEADERS}
        else:
            sent = {"json": body}
        if progress is False or progress is None and not watching():
            response = self.request("POST", url, params=params, **sent)
        else:
            request_id = os.urandom(12).hex()
            with Watch(self._http, request_id):
                response = self.request("POST", url, params=params,
                                        **{**sent, "headers": {**sent.get("headers", {}), "x-request-id": request_id}})
        return loads(response.content) if fast_json else response.json()

    def progress(self, request_id: str) -> dict:
        """``GET /v1/requests/{id}/progress``: ops run of the ops a running request runs."""
        return self._json("GET", f"/v1/requests/{request_id}/progress")

    def eval(self, ops: list[dict], returns: list[str] | None = None, *, no_grad: bool = False,
             encoding: Encoding = "json") -> dict:
        """``POST /v1/eval``: one-shot, no session."""
        body: dict[str, Any] = {"ops": ops}
        if no_grad:
            body["no_grad"] = True
        if returns is not None:
            body["return"] = returns
        url = self._url("/v1/eval", encoding)
        return self._json("POST", url, json=body, params=None if isinstance(url, httpx.URL) else _enc(encoding))

    def backward(self, session_id: str, tensor: str, gradient: str | None = None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs: list[str] | None = None) -> OpsResponse:
        body = {"tensor": tensor, "gradient": gradient, "retain_graph": retain_graph, "create_graph": create_graph,
                "inputs": inputs}
        return self._json("POST", f"/v1/sessions/{session_id}/backward", json=_present(body))

    def grad(self, session_id: str, outputs: str | list[str], inputs: str | list[str], *,
             grad_outputs: str | list[str | None] | None = None, retain_graph: bool | None = None,
             create_graph: bool = False, allow_unused: bool | None = None, materialize_grads: bool = False,
             out: str | list[str] | None = None) -> OpsResponse:
        body = {"outputs": outputs, "inputs": inputs, "grad_outputs": grad_outputs, "retain_graph": retain_graph,
                "create_graph": create_graph, "allow_unused": allow_unused,
                "materialize_grads": materialize_grads, "out": out}
        return self._json("POST", f"/v1/sessions/{session_id}/grad", json=_present(body))

    def zero_grad(self, session_id: str, tensors: list[str] | None = None, set_to_none: bool = True) -> OpsResponse:
        return self._json("POST", f"/v1/sessions/{session_id}/zero_grad",
                          json=_present({"tensors": tensors, "set_to_none": set_to_none}))

    # ----- reading ------------------------------------------------------------------------------------
    def tensors(self, session_id: str, encoding: Encoding = "json") -> dict[str, TensorView]:
        return self._json("GET", f"/v1/sessions/{session_id}/tensors", params=_enc(encoding))["tensors"]

    def tensor(self, session_id: str, name: str, encoding: Encoding = "json") -> TensorView:
        """One view; ``name`` may be ``x.grad``."""
        return self._json("GET", f"/v1/sessions/{session_id}/tensors/{name}", params=_enc(encoding))

    def graph(self, session_id: str, root: str | None = None, format: GraphFormat = "json") -> dict | str:
        """The autograd graph: a dict for ``json``, text for ``dot``, ``mermaid`` and ``svg``."""
        params = {"format": format} | ({"root": root} if root is not None else {})
        response = self.request("GET", f"/v1/sessions/{session_id}/graph", params=params)
        return response.json() if format == "json" else response.text

    def ops_catalog(self) -> list[dict]:
        """``GET /v1/ops``: every op and autograd action, with its arguments."""
        return self._json("GET", "/v1/ops")["ops"]


class _Cookies(httpx.Cookies):
    """httpx's cookie store, which reads a response's cookies only when it sets one (gradserve's never do; a
    proxy's may): httpx builds urllib request and response stand-ins for every response it reads cookies of."""

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


_JSON_HEADERS = {"content-type": "application/json"}


def dumps(body: Any) -> bytes:
    """``body`` as JSON, the bytes httpx writes for ``json=`` (compact, UTF-8, NaN and the infinities refused):
    orjson's where they are the same, else the standard library's. orjson writes a non-finite float as ``null`` and
    refuses what the standard library takes (an int past 64 bits, a float subclass, a non-str key): a text with a
    ``null`` in it, or a refusal, is encoded again by the standard library, which raises what httpx would."""
    if orjson is not None:
        try:
            text = orjson.dumps(body)
        except TypeError:
            text = None
        if text is not None and b"null" not in text:
            return text
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def loads(content: bytes) -> Any:
    """A JSON answer: orjson's reading where it reads it (what it refuses, such as ``NaN``, the standard
    library's, as ``httpx.Response.json``). orjson reads an integer past 64 bits as a float: the server writes its
    answers with orjson, which refuses to write one."""
    if orjson is not None:
        try:
            return orjson.loads(content)
        except ValueError:
            pass
    return json.loads(content)


def _route(path: str | httpx.URL) -> str:
    """A route as messages name it (``/v1/sessions/{id}/ops``), given as a path or as ``_url``'s URL."""
    return path if isinstance(path, str) else path.path


def _enc(encoding: Encoding) -> dict:
    return {} if encoding == "json" else {"encoding": encoding}


def _present(body: dict) -> dict:
    return {k: v for k, v in body.items() if v is not None}


def _problem(response: httpx.Response) -> ProblemError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"status": response.status_code, "code": "http_error", "detail": response.text or response.reason_phrase}
    body.setdefault("status", response.status_code)
    return ProblemError(body)
