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

Without keys, the same kind of bucket is kept per client address (``GRADSERVE_CLIENT_RATE_LIMIT_*``), and the
request's address is passed on (``scope["state"]["client"]``) for the per-address session quota. With keys,
wrong keys are counted per address: past ``GRADSERVE_AUTH_FAILURES_*`` an address's requests presenting a key
are refused with 429 before the key is checked, so that guessing keys is slow. The address is the peer's,
or the one a trusted proxy forwarded (uvicorn's ``--proxy-headers`` with ``FORWARDED_ALLOW_IPS``).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import threading
import time

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gradserve_server.app.errors import problem_response

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

    #: Buckets kept before those that have refilled completely (the same as new ones) are dropped
    PRUNE_ABOVE = 10_000

    def take(self, owner: str) -> float:
        """0 when the request may go ahead, else the seconds until it may."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        with self._lock:
            tokens = self._tokens(owner, now)
            if tokens >= 1:
                self._buckets[owner] = (tokens - 1, now)
                if len(self._buckets) > self.PRUNE_ABOVE:
                    self._prune(now)
                return 0.0
            self._buckets[owner] = (tokens, now)
            return (1 - tokens) / self.rate

    def wait(self, owner: str) -> float:
        """The seconds until ``owner`` has a token again (0: it has one), without taking it."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            tokens = self._tokens(owner, self._clock())
        return 0.0 if tokens >= 1 else (1 - tokens) / self.rate

    def _tokens(self, owner: str, now: float) -> float:
        """``owner``'s bucket refilled up to ``now`` (a new owner's is full); the caller holds the lock."""
        tokens, then = self._buckets.get(owner, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - then) * self.rate)

    def _prune(self, now: float) -> None:
        """Drop the buckets that are full again (keyed by client address, they are as many as clients)."""
        full = [k for k, (tokens, then) in self._buckets.items() if tokens + (now - then) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return client[0] if client else ""


def too_many(wait: float, detail: str) -> Response:
    retry = max(1, math.ceil(wait))
    return problem_response(429, "rate_limited", f"{detail}; retry after {retry} s",
                            headers={"Retry-After": str(retry)})


class Auth:
    """Pure ASGI middleware: the owner of every request (``scope["state"]["owner"]``) and its client address
    (``scope["state"]["client"]``), 401 without a valid key on protected paths, 429 over the key's (or without
    keys, the address's) rate, and 429 for an address that presented too many wrong keys."""

    def __init__(self, app: ASGIApp, keys: KeyRing, limiter: RateLimiter, metrics_open: bool = True,
                 client_limiter: RateLimiter | None = None, failures: RateLimiter | None = None):
        self.app = app
        self.keys = keys
        self.limiter = limiter
        self.metrics_open = metrics_open
        self.client_limiter = client_limiter or RateLimiter(0, 1)  # per address, without keys
        self.failures = failures or RateLimiter(0, 1)  # wrong keys per address, with keys

    def is_open(self, path: str) -> bool:
        return (path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)
                or (path == METRICS_PATH and self.metrics_open))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        address = state["client"] = client_address(scope)
        if self.is_open(scope["path"]):
            state["owner"] = "" if not self.keys.enabled else None  # with keys: nobody; open paths touch no session
            await self.app(scope, receive, send)
            return
        if not self.keys.enabled:
            state["owner"] = ""
            wait = self.client_limiter.take(address)
            if wait > 0:
                await too_many(wait, f"this client address exceeds its rate of {self.client_limiter.rate:g} "
                               f"requests/s (burst {self.client_limiter.burst}; "
                               "GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND)")(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        key = presented_key(scope.get("headers", []))
        if key is not None:
            wait = self.failures.wait(address)
            if wait > 0:  # refused before the key is checked: a guesser learns nothing, however fast it asks
                await too_many(wait, "too many wrong API keys from this client address (GRADSERVE_AUTH_FAILURES_"
                               "PER_MINUTE)")(scope, receive, send)
                return
        owner = None if key is None else self.keys.owner(key)
        if owner is None:
            if key is not None:
                self.failures.take(address)
            detail = ("this server needs an API key: send `Authorization: Bearer <key>` or `X-API-Key: <key>`"
                      if key is None else "the API key is not valid")
            await problem_response(401, "unauthorized", detail,
                                   headers={"WWW-Authenticate": 'Bearer realm="gradserve"'})(scope, receive, send)
            return
        state["owner"] = owner
        state["key_id"] = short_id(owner)
        wait = self.limiter.take(owner)
        if wait > 0:
            await too_many(wait, f"this API key exceeds its rate of {self.limiter.rate:g} requests/s (burst "
                           f"{self.limiter.burst}; GRADSERVE_RATE_LIMIT_PER_SECOND)")(scope, receive, send)
            return
        await self.app(scope, receive, send)
