"""API keys, session ownership and per-key rate limits.

Keys come from ``GRADSERVE_API_KEYS`` (comma-separated; an entry ``sha256:<hex>`` is a key's digest, so that
the key itself need not be in the environment). Only SHA-256 digests are kept; a presented key is hashed
and compared with every digest by ``hmac.compare_digest``. A request presents its key as
``Authorization: Bearer <key>`` or ``X-API-Key: <key>``.

The key's digest is the request's *owner*: sessions are stored with the digest of the key that created them
(never the key), and a session whose owner is not the request's is answered exactly like a session that does
not exist (404). Without keys the server is open and every request's owner is ``""``.

Rate limits are counted by the `limits` package (a moving window: at most ``burst`` requests in any
``burst / rate`` seconds), in Redis when the session store is Redis (``GRADSERVE_STORE_URL=redis://...``:
one budget shared by every worker and replica, counted atomically by a Lua script) and in this process
otherwise (the memory store serves one process anyway). With keys the budget is per key; without keys, per
client address (``GRADSERVE_CLIENT_RATE_LIMIT_*``), and the address is passed on (``scope["state"]["client"]``)
for the per-address session quota.

With keys, wrong keys are counted per client address (``GRADSERVE_AUTH_FAILURES_*``). Past that budget the
address's requests presenting a key are refused with 429, whatever the key, so that guessing is slow and a
guesser learns nothing from the answers; except a key that was valid *from that address* before
(remembered, per key and address, for ``TRUST_SECONDS``): one guesser behind a NAT or a proxy does not lock
out the clients already working behind the same address. The address is the peer's, or the one a trusted
proxy forwarded (uvicorn's ``--proxy-headers`` with ``FORWARDED_ALLOW_IPS``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import time

from limits import RateLimitItemPerSecond
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gradserve_server.app.errors import problem_response

log = logging.getLogger("gradserve")

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


def limit_storage(settings) -> Storage:
    """Where rate limits are counted: the session store's Redis (under its key prefix), or this process."""
    url = settings.store_url
    if url.startswith(("redis://", "rediss://", "unix://")):
        target = "async+redis+" + url if url.startswith("unix://") else "async+" + url
        return RedisStorage(target, implementation="redispy", key_prefix=f"{settings.redis_key_prefix}limits",
                            socket_timeout=5, socket_connect_timeout=5)
    return MemoryStorage()


class RateLimiter:
    """At most ``burst`` requests in any ``burst / rate`` seconds (at least 1 s) per identity, a moving window
    counted in ``storage`` (``rate`` 0: no limit)."""

    def __init__(self, storage: Storage, rate: float, burst: int, name: str = "rate"):
        self.rate = rate
        self.burst = burst
        self.window = max(1, round(burst / rate)) if rate > 0 else 0
        self.item = RateLimitItemPerSecond(burst, self.window, namespace=name) if rate > 0 else None
        self.storage = storage
        self._strategy = MovingWindowRateLimiter(storage)

    def describe(self) -> str:
        return f"{self.burst} requests in {self.window} s"

    async def take(self, *identity: str) -> float:
        """0 when the request may go ahead (and it is counted), else the seconds until it may."""
        if self.item is None:
            return 0.0
        if await self._strategy.hit(self.item, *identity):
            return 0.0
        return await self._reset(identity)

    async def wait(self, *identity: str) -> float:
        """The seconds until ``identity`` may make a request again (0: now), without counting one."""
        if self.item is None or await self._strategy.test(self.item, *identity):
            return 0.0
        return await self._reset(identity)

    async def _reset(self, identity: tuple[str, ...]) -> float:
        stats = await self._strategy.get_window_stats(self.item, *identity)
        return max(0.001, stats.reset_time - time.time())


#: How long a key that was valid from an address stays exempt from that address's wrong-key lockout
TRUST_SECONDS = 3600


class Trust:
    """The (key, address) pairs that presented a valid key, each remembered for ``TRUST_SECONDS`` in the
    limiter's storage (written at most once a minute per pair and process)."""

    def __init__(self, storage: Storage):
        self.storage = storage
        self._noted: dict[tuple[str, str], float] = {}

    @staticmethod
    def _key(owner: str, address: str) -> str:
        return f"trusted/{owner}/{address}"

    async def note(self, owner: str, address: str) -> None:
        now = time.monotonic()
        if now - self._noted.get((owner, address), -math.inf) < 60:
            return
        if len(self._noted) > 10_000:
            self._noted.clear()
        self._noted[(owner, address)] = now
        await self.storage.clear(self._key(owner, address))  # incr keeps an expiry it set before
        await self.storage.incr(self._key(owner, address), TRUST_SECONDS)

    async def holds(self, owner: str, address: str) -> bool:
        return await self.storage.get(self._key(owner, address)) > 0


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
    keys, the address's) rate, and 429 for an address past its wrong-key budget (a key valid from it before
    excepted). 503 ``store_unavailable`` when the limits cannot be counted (Redis unreachable)."""

    def __init__(self, app: ASGIApp, keys: KeyRing, limiter: RateLimiter, metrics_open: bool = True,
                 client_limiter: RateLimiter | None = None, failures: RateLimiter | None = None):
        self.app = app
        self.keys = keys
        self.limiter = limiter
        self.metrics_open = metrics_open
        storage = limiter.storage
        self.client_limiter = client_limiter or RateLimiter(storage, 0, 1)  # per address, without keys
        self.failures = failures or RateLimiter(storage, 0, 1, "failures")  # wrong keys per address, with keys
        self.trust = Trust(storage)

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
        try:
            refusal = await self._refusal(scope, state, address)
        except Exception as exc:  # noqa: BLE001 - the limits' storage (Redis) failed: refuse, never let through
            log.warning("rate limits could not be counted: %r", exc)
            refusal = problem_response(503, "store_unavailable", f"the rate limits cannot be counted right now "
                                       f"(their store, the session store's Redis, answered: {exc}); retry later",
                                       headers={"Retry-After": "5"})
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _refusal(self, scope: Scope, state: dict, address: str) -> Response | None:
        """None when the request may go on (``state`` then says its owner), else the response refusing it."""
        if not self.keys.enabled:
            state["owner"] = ""
            wait = await self.client_limiter.take(address)
            if wait > 0:
                return too_many(wait, f"this client address exceeds its rate of {self.client_limiter.describe()} "
                                "(GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND, GRADSERVE_CLIENT_RATE_LIMIT_BURST)")
            return None
        key = presented_key(scope.get("headers", []))
        owner = None if key is None else self.keys.owner(key)
        if key is not None:
            wait = await self.failures.wait(address)
            # past the budget, every key is refused before its answer can tell anything (a guesser learns
            # nothing however fast it asks), except a key that was valid from this address before
            if wait > 0 and (owner is None or not await self.trust.holds(owner, address)):
                return too_many(wait, "too many wrong API keys from this client address "
                                "(GRADSERVE_AUTH_FAILURES_PER_MINUTE)")
        if owner is None:
            if key is not None:
                await self.failures.take(address)
            detail = ("this server needs an API key: send `Authorization: Bearer <key>` or `X-API-Key: <key>`"
                      if key is None else "the API key is not valid")
            return problem_response(401, "unauthorized", detail,
                                    headers={"WWW-Authenticate": 'Bearer realm="gradserve"'})
        await self.trust.note(owner, address)
        state["owner"] = owner
        state["key_id"] = short_id(owner)
        wait = await self.limiter.take(owner)
        if wait > 0:
            return too_many(wait, f"this API key exceeds its rate of {self.limiter.describe()} "
                            "(GRADSERVE_RATE_LIMIT_PER_SECOND, GRADSERVE_RATE_LIMIT_BURST)")
        return None
