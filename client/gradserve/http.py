"""A plain, typed client of the gradserve HTTP API, for programs that write op lists themselves.

    with gradserve.Client("http://127.0.0.1:8000") as c:
        s = c.create_session()["id"]
        c.run_ops(s, [{"op": "tensor", "out": "x", "args": [2.0], "kwargs": {"requires_grad": True}},
                      {"op": "pow", "out": "y", "args": ["x", 2]}, {"op": "backward", "args": ["y"]}],
                  returns=["x.grad"])["tensors"]["x.grad"]["data"]         # 4.0

One ``httpx.Client`` (connection reuse), a timeout on every request, and retries only where a retry cannot
apply a change twice: idempotent requests (GET, DELETE) on transport errors and on 503, any request whose
connection could not be opened. Every problem answer is raised as ``ProblemError``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Literal, NotRequired, TypedDict

import httpx

from gradserve.errors import ProblemError

DEFAULT_URL = "http://127.0.0.1:8000"
IDEMPOTENT = frozenset({"GET", "HEAD", "DELETE", "PUT"})
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
    sent (retries included)."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 60.0,
                 retries: int = 2, transport: httpx.BaseTransport | None = None):
        self.url = (url or os.environ.get("GRADSERVE_URL") or DEFAULT_URL).rstrip("/")
        api_key = api_key if api_key is not None else os.environ.get("GRADSERVE_API_KEY")
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.retries = retries
        self.requests = 0
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    # ----- plumbing -----------------------------------------------------------------------------------
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        """Send, retrying what may be retried; raise ProblemError for any 4xx/5xx answer."""
        attempt = 0
        while True:
            self.requests += 1
            try:
                response = self._http.request(method, path, **kwargs)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                if attempt >= self.retries:  # never sent: safe to retry any method
                    raise
            except httpx.TransportError:
                if method not in IDEMPOTENT or attempt >= self.retries:
                    raise
            else:
                if response.status_code < 400:
                    return response
                if response.status_code != 503 or method not in IDEMPOTENT or attempt >= self.retries:
                    raise _problem(response)
            attempt += 1
            time.sleep(min(0.05 * 2 ** attempt, 1.0))

    def _json(self, method: str, path: str, **kwargs) -> Any:
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
                encoding: Encoding = "json") -> OpsResponse:
        """``POST /ops``: atomic. ``returns``: the request's ``return`` (names, or {name: "full" | "meta" |
        "auto"}): only those tensors come back."""
        body: dict[str, Any] = {"ops": ops}
        if no_grad:
            body["no_grad"] = True
        if repeat != 1:
            body["repeat"] = repeat
        if record:
            body["record"] = record
        if returns is not None:
            body["return"] = returns
        return self._json("POST", f"/v1/sessions/{session_id}/ops", json=body, params=_enc(encoding))

    def eval(self, ops: list[dict], returns: list[str] | None = None, *, no_grad: bool = False,
             encoding: Encoding = "json") -> dict:
        """``POST /v1/eval``: one-shot, no session."""
        body: dict[str, Any] = {"ops": ops}
        if no_grad:
            body["no_grad"] = True
        if returns is not None:
            body["return"] = returns
        return self._json("POST", "/v1/eval", json=body, params=_enc(encoding))

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
