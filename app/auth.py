"""API keys, session ownership and per-key rate limits.

Keys come from ``GRADSERVE_API_KEYS`` (comma-separated; an entry ``sha256:<hex>`` is a key's digest, so that
the key itself need not be in the environment). Only SHA-256 digests are kept; a presented key is hashed
and compared with every digest by ``hmac.compare_digest``. A request presents its key as
``Authorization: Bearer <key>`` or ``X-API-Key: <key>``.

The key's digest is the request's *owner*: sessions are stored with the digest of the key that created them
(never the key), and a session whose owner is not the request's is answered exactly like a session that does
not exist (404). Without keys the server is open and every request's owner is ``""``.

The rate limit is a token bucket per key, in this process: with several workers or replicas each has its
own buckets, so a key may make up to (workers x replicas) times the rate overall.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import threading
import time

from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import problem_response

#: Paths anyone may read: liveness, readiness, the API docs and their assets (and /metrics, unless
#: GRADSERVE_METRICS_REQUIRE_KEY)
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/docs", "/redoc", "/openapi.json"})
OPEN_PREFIXES = ("/static/",)
METRICS_PATH = "/metrics"


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def short_id(digest: str) -> str:
    """What logs show of an owner: enough to tell keys apart, never the key."""
    return digest[:12]


class KeyRing:
    """The digests of the configured keys."""

    def __init__(self, spec: str):
        digests = []
        self.short_keys = 0
        for entry in (e.strip() for e in spec.split(",")):
            if not entry:
                continue
            if entry.startswith("sha256:"):
                digest = entry.removeprefix("sha256:").lower()
                if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                    raise ValueError("GRADSERVE_API_KEYS: a sha256: entry needs 64 hex digits")
                digests.append(digest)
            else:
                self.short_keys += len(entry) < 16
                digests.append(key_digest(entry))
        self.digests = tuple(dict.fromkeys(digests))

    @property
    def enabled(self) -> bool:
        return bool(self.digests)

    def owner(self, key: str) -> str | None:
        """The digest of ``key`` when it is one of ours, else None; compares with every digest."""
        candidate = key_digest(key)
        found = None
        for digest in self.digests:
            if hmac.compare_digest(digest, candidate):
                found = digest
        return found


def presented_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    bearer = api_key = None
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                bearer = token.strip()
        elif name == b"x-api-key":
            api_key = value.decode("latin-1").strip() or None
    return bearer or api_key


class RateLimiter:
    """A token bucket per owner: ``rate`` tokens a second, at most ``burst``; a request takes one."""

    def __init__(self, rate: float, burst: int, clock=time.monotonic):
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # owner -> (tokens, when)
        self._lock = threading.Lock()

    def take(self, owner: str) -> float:
        """0 when the request may go ahead, else the seconds until it may."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        with self._lock:
            tokens, then = self._buckets.get(owner, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate)
            if tokens >= 1:
                self._buckets[owner] = (tokens - 1, now)
                return 0.0
            self._buckets[owner] = (tokens, now)
            return (1 - tokens) / self.rate


class Auth:
    """Pure ASGI middleware: the owner of every request (``scope["state"]["owner"]``), 401 without a valid
    key on protected paths, 429 over the key's rate."""

    def __init__(self, app: ASGIApp, keys: KeyRing, limiter: RateLimiter, metrics_open: bool = True):
        self.app = app
        self.keys = keys
        self.limiter = limiter
        self.metrics_open = metrics_open

    def is_open(self, path: str) -> bool:
        return (path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)
                or (path == METRICS_PATH and self.metrics_open))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        if not self.keys.enabled:
            state["owner"] = ""
            await self.app(scope, receive, send)
            return
        if self.is_open(scope["path"]):
            state["owner"] = None  # nobody: open paths touch no session
            await self.app(scope, receive, send)
            return
        key = presented_key(scope.get("headers", []))
        owner = None if key is None else self.keys.owner(key)
        if owner is None:
            detail = ("this server needs an API key: send `Authorization: Bearer <key>` or `X-API-Key: <key>`"
                      if key is None else "the API key is not valid")
            await problem_response(401, "unauthorized", detail,
                                   headers={"WWW-Authenticate": 'Bearer realm="gradserve"'})(scope, receive, send)
            return
        state["owner"] = owner
        state["key_id"] = short_id(owner)
        wait = self.limiter.take(owner)
        if wait > 0:
            retry = max(1, math.ceil(wait))
            await problem_response(429, "rate_limited", f"this API key exceeds its rate of "
                                   f"{self.limiter.rate:g} requests/s (burst {self.limiter.burst}; "
                                   f"GRADSERVE_RATE_LIMIT_PER_SECOND); retry after {retry} s",
                                   headers={"Retry-After": str(retry)})(scope, receive, send)
            return
        await self.app(scope, receive, send)
