"""The Redis session store: every worker and replica serves the same sessions.

Keys (``GRADSERVE_REDIS_KEY_PREFIX``, default ``gradserve:``):

- ``{prefix}s:{id}``: a hash with ``version`` (1 at creation, +1 per save), ``created_at``,
  ``last_used_at``, ``tensor_count`` and ``owner`` (the SHA-256 digest of the creating API key, empty
  without keys; never the key). Redis expires it after ``GRADSERVE_SESSION_TTL_SECONDS`` idle; every access
  renews it.
- ``{prefix}state:{id}``: the session's whole state, ``engine.dumps`` (JSON metadata and raw array buffers,
  loaded without executing anything); it expires with the hash (both renewed in the same scripts).
- ``{prefix}stage:{id}:{tag}``: a state on its way in. A writer SETs it (with a short expiry) in the same
  round trip as its script, which RENAMEs it onto ``state`` when the write applies and deletes it when not:
  states of megabytes never pass through Lua (copying them into Lua strings costs ~1.4 ms per MB in Redis).
- ``{prefix}lock:{id}``: the owner token of the request writing the session (``SET NX PX``). The owner
  renews it every third of ``GRADSERVE_LOCK_TTL_SECONDS`` while it works, so it only lapses when the owner
  dies (or stalls); releasing deletes it only if the token is still ours.
- ``{prefix}index``: a sorted set of session ids scored by expiry time (ms), for listing, counting and the
  session limit across processes.
- ``{prefix}owner:{digest}``: the same for one owner's sessions, for listing them and the per-key quota.

Every script that reads or writes a session checks its owner first: another owner's session is reported as
gone (and is neither renewed nor locked).

Writes are serialised per session across processes, two ways, both ending in the same compare-and-set
(``_SAVE``: it applies only if the stored version is still the one the writer started from and no other
request holds the lock, and releases the writer's lock):

- Under the lock: a writer takes the lock and learns the stored version (one script; the state itself only
  when its cached copy is stale), runs, and saves. A writer whose lock lapsed cannot overwrite a newer state:
  its request fails with 409 ``session_busy`` (nothing applied) rather than losing someone else's update. A
  writer that cannot get the lock within ``GRADSERVE_LOCK_WAIT_SECONDS`` gets the same 409 with
  ``Retry-After``.
- Optimistically (``write_async``, small requests on the event loop): a writer whose cached state is the
  current one runs first and saves after, in one round trip; the compare-and-set refuses it if anyone wrote
  or holds the lock meanwhile, and then it runs again under the lock. It never overrides a lock holder.

Readers take no lock: they read one stored version (one script, plus a transaction fetching the state when
their cached copy is stale).

Each process keeps the states it last loaded or saved (up to ``GRADSERVE_REDIS_CACHE_BYTES``) and reuses
one when the stored version is unchanged, which spares the download and the deserialisation when a client
keeps talking to the same process. Scripts touch a session's keys and the index together, so a Redis Cluster
would need them in one hash slot: use a single Redis (with replicas and persistence if wanted).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import random
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import (
    MasterDownError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError

from gradserve_server import engine
from gradserve_server.app.errors import (
    SessionBusy,
    SessionNotFound,
    SessionQuotaExceeded,
    StoreUnavailable,
    TooManySessions,
)
from gradserve_server.app.store import Session, StoreStats

log = logging.getLogger("gradserve.store")

# Every script on a session takes KEYS: session, index, owner index, state (and the lock fifth, the staged
# state sixth), and ARGV: id, now (s), expiry score (ms), ttl (ms), owner, then its own. They are built from
# these pieces. States never pass through Lua (a Lua string copy costs ~1.4 ms per MB inside Redis): a writer
# sends its state with a plain SET to a staging key of its own, pipelined before the script, and the script
# RENAMEs it into place (O(1)) or deletes it.

# The session's version and creation time; -1 when gone (its index entry dropped), -2 when another owner's
# (the staged state, if any, dropped either way).
_CHECK = """
local found = redis.call('HMGET', KEYS[1], 'version', 'owner', 'created_at')
local v = found[1]
if not v or (found[2] or '') ~= ARGV[5] then
  if KEYS[6] then redis.call('DEL', KEYS[6]) end
  if not v then
    redis.call('ZREM', KEYS[2], ARGV[1])
    return -1
  end
  return -2
end
"""

# Sliding expiry: the session, its state and both index entries.
_RENEW = """
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[4], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
"""

# Renew and answer {version, created_at, 1 when ARGV[6] (the caller's cached version) is not current}.
_READ = """
redis.call('HSET', KEYS[1], 'last_used_at', ARGV[2])
""" + _RENEW + """
return {v, found[3], v ~= ARGV[6] and 1 or 0}
"""

# ARGV (own): max sessions, max sessions of the owner (0: none), tensor count, max sessions of the creating
# client address (0: none), the prefix of session keys; KEYS[7]: that address's index (the ids it created,
# checked against the sessions still existing: it is not renewed on access, only bounded by the quota).
# Returns 1, 0 when the service is full, -2 over the owner's quota, -3 over the address's, -1 when the id is
# taken.
_CREATE = """
local refused = nil
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[2] * 1000)
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[6]) then refused = 0
elseif tonumber(ARGV[7]) > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[2] * 1000)
  if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[7]) then refused = -2 end
elseif tonumber(ARGV[9]) > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[7], 0, -1)) do
    if redis.call('EXISTS', ARGV[10] .. id) == 0 then redis.call('ZREM', KEYS[7], id) end
  end
  if redis.call('ZCARD', KEYS[7]) >= tonumber(ARGV[9]) then refused = -3 end
end
if not refused and redis.call('EXISTS', KEYS[1]) == 1 then refused = -1 end
if refused then
  redis.call('DEL', KEYS[6])
  return refused
end
redis.call('RENAME', KEYS[6], KEYS[4])
redis.call('HSET', KEYS[1], 'version', 1, 'created_at', ARGV[2], 'last_used_at', ARGV[2], 'tensor_count',
           ARGV[8], 'owner', ARGV[5])
if tonumber(ARGV[9]) > 0 then
  redis.call('ZADD', KEYS[7], ARGV[2], ARGV[1])
  redis.call('PEXPIRE', KEYS[7], ARGV[4])
end
""" + _RENEW + """
return 1
"""

# A reader. ARGV (own): the cached version. Returns -1/-2 (_CHECK) or what _READ returns.
_TOUCH = _CHECK + _READ

# A writer takes the lock and reads, in one round trip. ARGV (own): the cached version, token, lock ttl (ms).
# Returns 0 when someone else holds the lock, -1/-2 (_CHECK; no lock taken), or what _READ returns.
_ACQUIRE = _CHECK + """
if not redis.call('SET', KEYS[5], ARGV[7], 'NX', 'PX', ARGV[8]) then return 0 end
""" + _READ

# Compare-and-set of the staged state. ARGV (own): the version the writer loaded, its lock token ('' for a
# writer that holds no lock), tensor count. Applies only if the stored version is still the loaded one and
# the lock is the writer's or free (a writer without a lock: free), and then releases the lock. Returns the
# new version, 0 when superseded or the lock is someone else's (nothing written, the lock left as it is), or
# -1/-2.
_SAVE = _CHECK + """
local holder = redis.call('GET', KEYS[5])
if v ~= ARGV[6] or (holder and holder ~= ARGV[7]) then
  redis.call('DEL', KEYS[6])
  return 0
end
redis.call('RENAME', KEYS[6], KEYS[4])
local new = tonumber(v) + 1
redis.call('HSET', KEYS[1], 'version', new, 'last_used_at', ARGV[2], 'tensor_count', ARGV[8])
""" + _RENEW + """
if holder then redis.call('DEL', KEYS[5]) end
return new
"""

# Returns 1 when deleted, or -1/-2.
_DELETE = _CHECK + """
redis.call('DEL', KEYS[1], KEYS[4])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
"""

# KEYS: lock. ARGV: token.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: locks. ARGV: ttl (ms), tokens (one per key). Returns the keys that were no longer ours.
_EXTEND = """
local lost = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i + 1] then
    redis.call('PEXPIRE', key, ARGV[1])
  else
    table.insert(lost, key)
  end
end
return lost
"""


@dataclass(eq=False)
class _Cached:
    """A state as of a stored version. Its lock is held by whoever uses the state in this process."""

    version: int
    state: Any
    nbytes: int
    created_at: float = 0.0
    owner: str = ""  # the session's owner, as the store last confirmed it
    lock: threading.Lock = field(default_factory=threading.Lock)
    valid: bool = True
    light: bool = False  # the last run on it was quick and left small tensors (set by the service)


@dataclass(eq=False)
class _Lease:
    lock_key: str
    token: str  # "" for an optimistic writer, which holds no lock
    entry: _Cached
    saved: bool = False  # saving also releases the lock


#: The event-loop path deserialises no larger state on the loop (it does that in the thread pool)...
ASYNC_LOAD_BYTES = 256 * 1024
#: ... and serves sessions stored in at most this many bytes (saving sends the arrays' own memory)
ASYNC_SAVE_BYTES = 4 * 1024 * 1024
#: After an optimistic save was refused (another writer got there first), writes to that session take the
#: lock first for this long: under contention, running first and checking after wastes the run
CONTENDED_SECONDS = 5.0


class _Turnstile:
    """At most ``capacity`` holders at once on one event loop, the others admitted in the order they came.
    ``asyncio.Semaphore`` does the same, but this one costs nothing until someone has to wait (no lock or
    future is made on the way in), which matters on a path taken once per small request."""

    __slots__ = ("capacity", "active", "waiters")

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.active = 0
        self.waiters: deque[asyncio.Future] | None = None

    @property
    def idle(self) -> bool:
        return not self.active and not self.waiters

    async def enter(self) -> None:
        if self.active < self.capacity and not self.waiters:
            self.active += 1
            return
        if self.waiters is None:
            self.waiters = deque()
        turn = asyncio.get_running_loop().create_future()
        self.waiters.append(turn)
        try:
            await turn  # the holder leaving hands its place over (``active`` unchanged)
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.leave()  # handed over just as it was cancelled: pass it on
            else:
                self.waiters.remove(turn)
            raise

    def leave(self) -> None:
        while self.waiters:
            turn = self.waiters.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.active -= 1


#: How soon a lock that could not be released (Redis down) is tried again (doubling up to 0.5 s)
ORPHAN_RETRY_SECONDS = 0.05
#: Tokens remembered per lock key for release (see ``RedisStore._orphan``)
ORPHANS_PER_LOCK = 16

#: Optimistic writes under way at once on one event loop (see ``RedisStore.write_async``)
LOOP_OPTIMISTIC_WRITERS = 4

_RETRY = object()  # an optimistic attempt that did not apply: take the lock and run again


class RedisStore:
    def __init__(self, client: redis.Redis, *, max_sessions: int, ttl_seconds: float, lock_ttl_seconds: float,
                 lock_wait_seconds: float, key_prefix: str = "gradserve:", cache_bytes: int = 64 << 20,
                 max_sessions_per_owner: int | None = None, async_url: str | None = None,
                 max_sessions_per_client: int | None = None):
        self.redis = client
        self.max_sessions_per_client = max_sessions_per_client  # per creating address, for owner ""
        self.async_url = async_url  # for the event-loop path (write_async); None: no such path
        self.max_sessions = max_sessions
        self.max_sessions_per_owner = max_sessions_per_owner  # for owners that are keys (not "")
        self.stats = StoreStats()
        self.ttl_seconds = ttl_seconds
        self.lock_ttl_seconds = lock_ttl_seconds
        self.lock_wait_seconds = lock_wait_seconds
        self.prefix = key_prefix
        self.cache_bytes = cache_bytes
        self._index = f"{key_prefix}index"
        self._stage_tag = secrets.token_hex(8)  # staging keys: this store's tag and a counter
        self._stage_counter = itertools.count()
        self._scripts = _SyncScripts(client)
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._cache_used = 0
        self._cache_lock = threading.Lock()
        self._gates: dict[str, _Turnstile] = {}  # session id -> its event-loop writers (write_async), one at a time
        self._contended: dict[str, float] = {}  # session id -> when an optimistic save of it was refused
        self._held: dict[str, str] = {}  # lock key -> token, renewed by the renewer thread
        self._held_lock = threading.Lock()
        self._renewer: threading.Thread | None = None
        self._orphans: dict[str, list[str]] = {}  # lock key -> tokens perhaps ours, not released (Redis was away)
        self._releaser: threading.Thread | None = None
        self._closing = threading.Event()
        self._lock_ms = max(1, int(lock_ttl_seconds * 1000))
        self._ttl_ms = max(1, int(ttl_seconds * 1000))
        self._aclient: _AsyncScripts | None = None  # bound to the event loop that made it
        self._aclient_loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_settings(cls, settings) -> RedisStore:
        client = redis.Redis.from_url(settings.store_url, socket_timeout=10, socket_connect_timeout=5,
                                      health_check_interval=30)
        return cls(client, max_sessions=settings.max_sessions, ttl_seconds=settings.session_ttl_seconds,
                   lock_ttl_seconds=settings.lock_ttl_seconds, lock_wait_seconds=settings.lock_wait_seconds,
                   key_prefix=settings.redis_key_prefix, cache_bytes=settings.redis_cache_bytes,
                   max_sessions_per_owner=settings.max_sessions_per_key, async_url=settings.store_url,
                   max_sessions_per_client=settings.max_sessions_per_client)

    # ----- keys, times and script arguments -----------------------------------------------------------
    def _key(self, session_id: str) -> str:
        return f"{self.prefix}s:{session_id}"

    def _lock_key(self, session_id: str) -> str:
        return f"{self.prefix}lock:{session_id}"

    def _owner_index(self, owner: str) -> str:
        return f"{self.prefix}owner:{owner}"

    def _state_key(self, session_id: str) -> str:
        return f"{self.prefix}state:{session_id}"

    def _keys(self, session_id: str, owner: str, *, staged: bool = False) -> list[str]:
        """A session script's KEYS: session, index, owner index, state, lock, and with ``staged`` a staging
        key of this call's own for the state it writes (scripts ignore the keys they do not use)."""
        keys = [self._key(session_id), self._index, self._owner_index(owner), self._state_key(session_id),
                self._lock_key(session_id)]
        if staged:
            keys.append(f"{self.prefix}stage:{session_id}:{self._stage_tag}{next(self._stage_counter)}")
        return keys

    def _args(self, session_id: str, owner: str) -> tuple[float, list]:
        """now (s), and the ARGV every session script starts with: id, now, the expiry score of a session
        touched now (ms), the TTL (ms), owner."""
        now = time.time()
        return now, [session_id, repr(now), int(now * 1000) + self._ttl_ms, self._ttl_ms, owner]

    # ----- the protocol -------------------------------------------------------------------------------
    def create(self, state: Any, owner: str = "", client: str = "") -> Session:
        parts = engine.dump_parts(state)
        quota = self.max_sessions_per_owner if owner and self.max_sessions_per_owner else 0
        client_quota = self.max_sessions_per_client if not owner and client and self.max_sessions_per_client else 0
        for _ in range(3):
            session_id = secrets.token_urlsafe(24)
            now, args = self._args(session_id, owner)
            keys = [*self._keys(session_id, owner, staged=True), f"{self.prefix}client:{client}"]
            with _unavailable_as_503():
                created = self._scripts(_CREATE, keys, [*args, self.max_sessions, quota, len(state.tensors),
                                                        client_quota, f"{self.prefix}s:"], staged=parts)
            if created == 0:
                raise TooManySessions(f"the service holds its maximum of {self.max_sessions} sessions "
                                      "(GRADSERVE_MAX_SESSIONS); delete one or retry after some expire")
            if created == -2:
                raise SessionQuotaExceeded(f"this API key holds its maximum of {quota} sessions "
                                           "(GRADSERVE_MAX_SESSIONS_PER_KEY); delete one or retry after some "
                                           "expire")
            if created == -3:
                raise SessionQuotaExceeded(f"this client address holds its maximum of {client_quota} sessions "
                                           "(GRADSERVE_MAX_SESSIONS_PER_CLIENT); delete one or retry after some "
                                           "expire")
            if created == 1:
                nbytes = _nbytes(parts)
                self._remember(session_id, _Cached(1, state, nbytes, now, owner, light=nbytes <= ASYNC_LOAD_BYTES))
                self.stats.created += 1
                return Session(id=session_id, state=state, created_at=now, last_used_at=now, version=1,
                               owner=owner)
        raise RuntimeError("could not draw an unused session id")  # 2**192 ids: not reached

    @contextmanager
    def open(self, session_id: str, *, write: bool = False, owner: str = "") -> Iterator[Session]:
        if not write:
            with self._read(session_id, owner) as session:
                yield session
            return
        token = secrets.token_hex(16)
        deadline = time.monotonic() + self.lock_wait_seconds
        session, entry = self._acquire(session_id, token, owner, deadline)
        lock_key = self._lock_key(session_id)
        lease = session.lease = _Lease(lock_key, token, entry)
        try:
            yield session
        finally:
            self._unhold(lock_key)
            if not lease.saved:  # failed or abandoned: the state may hold unsaved changes, and the lock is ours
                self._forget(session_id, entry)
            entry.lock.release()
            if not lease.saved:
                self._release(lock_key, token)

    def save(self, session: Session) -> None:
        lease: _Lease = session.lease
        parts = engine.dump_parts(session.state)
        self._unhold(lease.lock_key)  # no renewal while the script releases it (nor after a refusal)
        now, args = self._save_args(session, lease)
        with _unavailable_as_503():
            new = self._scripts(_SAVE, self._keys(session.id, session.owner, staged=True), args, staged=parts)
        self._saved(session, lease, new, now, _nbytes(parts))

    def _save_args(self, session: Session, lease: _Lease) -> tuple[float, list]:
        now, args = self._args(session.id, session.owner)
        return now, [*args, lease.entry.version, lease.token, len(session.state.tensors)]

    def _saved(self, session: Session, lease: _Lease, new: int, now: float, nbytes: int) -> None:
        """What _SAVE answered: the new version, or the refusal."""
        if new < 0:
            raise SessionNotFound(session.id)
        if new == 0:
            raise SessionBusy(f"session {session.id!r} was changed by another request after this one's lock "
                              f"expired (it held the session longer than GRADSERVE_LOCK_TTL_SECONDS without "
                              f"renewing); nothing was applied, retry")
        lease.saved = True
        session.version = lease.entry.version = int(new)
        session.last_used_at = now
        self._remember(session.id, lease.entry, nbytes=nbytes)

    def delete(self, session_id: str, owner: str = "") -> None:
        _, args = self._args(session_id, owner)
        with _unavailable_as_503():
            deleted = self._scripts(_DELETE, self._keys(session_id, owner)[:4], args)
        if deleted != 1:
            raise SessionNotFound(session_id)
        self._forget(session_id)
        self.stats.deleted += 1

    def list(self, owner: str | None = None) -> list[Session]:
        with _unavailable_as_503():
            ids = self._live_ids(self._index if owner is None else self._owner_index(owner))
            pipe = self.redis.pipeline(transaction=False)
            for session_id in ids:
                pipe.hmget(self._key(session_id), "created_at", "last_used_at", "tensor_count")
            rows = pipe.execute()
        return [Session(id=session_id, state=None, created_at=float(created), last_used_at=float(used),
                        listed_tensor_count=int(count))
                for session_id, (created, used, count) in zip(ids, rows) if created is not None]

    def count(self) -> int:
        with _unavailable_as_503():
            pipe = self.redis.pipeline()
            pipe.zremrangebyscore(self._index, "-inf", int(time.time() * 1000))
            pipe.zcard(self._index)
            return int(pipe.execute()[1])

    def sweep(self) -> int:
        """Redis expires the sessions themselves; this drops their ids from the index."""
        with _unavailable_as_503():
            expired = int(self.redis.zremrangebyscore(self._index, "-inf", int(time.time() * 1000)))
        self.stats.expired += expired
        cutoff = time.monotonic() - CONTENDED_SECONDS
        for session_id, when in list(self._contended.items()):
            if when < cutoff:
                self._contended.pop(session_id, None)
        return expired

    def ping(self) -> bool:
        with _unavailable_as_503():
            return bool(self.redis.ping())

    def close(self) -> None:
        self._closing.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        with self._cache_lock:
            self._cache.clear()
            self._cache_used = 0
        self.redis.close()

    # ----- the event-loop path (small requests on light sessions) -------------------------------------
    def light(self, session_id: str) -> bool:
        """Whether this process holds the session's state, stored in at most ``ASYNC_SAVE_BYTES``, and its
        last run here was quick and left small tensors (``note_light``): what ``write_async`` is for. A guess
        (another process may have changed the session since), so ``write_async`` still bounds what it
        deserialises on the loop. Larger states go through the thread pool."""
        if self.async_url is None:
            return False
        entry = self._cache.get(session_id)  # a dict read: atomic under the GIL, and a guess anyway
        return entry is not None and entry.light and entry.valid and entry.nbytes <= ASYNC_SAVE_BYTES

    def note_light(self, session: Session, light: bool) -> None:
        """After a run on ``session`` (held for writing): may its next small request run on the loop?"""
        lease = session.lease
        if lease is not None:
            lease.entry.light = light

    def _async_client(self) -> _AsyncScripts:
        """The asyncio client (its scripts), for the running loop: a client's connections belong to the loop
        that opened them, so a new loop (as under some test clients) gets its own."""
        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aclient_loop is not loop:
            self._aclient = _AsyncScripts(self.async_url, timeout=10)
            self._aclient_loop = loop
        return self._aclient

    async def aclose(self) -> None:
        """Close the asyncio client, from the loop it belongs to (the lifespan's)."""
        client, self._aclient = self._aclient, None
        if client is not None and self._aclient_loop is asyncio.get_running_loop():
            with contextlib.suppress(Exception):
                await client.aclose()

    async def write_async(self, session_id: str, owner: str, work: Callable[[Session], Any],
                          finish: Callable[[Session, Any], Any]) -> Any:
        """``work(session)``, saved, then ``finish(session, its result)``, on the event loop, all while
        holding the session; returns what ``finish`` returns. ``work`` must be an engine run: atomic (an
        ``engine.EngineError`` leaves the state as it was) and free to run again.

        When this process holds the session's current state it runs first and saves after (optimistic): one
        round trip, the save's compare-and-set, which applies only if nobody changed the session since and
        no writer holds its lock (a script is atomic in Redis: the lock taken and released in one step). If
        it does not apply, or the cached state turns out to have been stale, the run is thrown away and done
        again under the lock (``open_async``), as any writer that cannot run first.

        Writers of one session on this event loop go one at a time (a local gate, before anything is sent):
        a second request arriving while the first awaits its save would otherwise find the state in use,
        take the Redis lock, and so refuse the first one's optimistic save. And at most
        ``LOOP_OPTIMISTIC_WRITERS`` optimistic attempts (of any sessions) are under way on the loop at once,
        the others waiting their turn in order: with every request free to start, a request's second half
        (after its save's reply) queued behind however many newcomers' first halves arrived meanwhile, and
        latencies spread (p99 1.6x the median under load); with a few at a time, the round trips still
        overlap other requests' work, and requests finish in the order they came (p99 1.1x)."""
        gate = self._gates.get(session_id)
        if gate is None:
            gate = self._gates[session_id] = _Turnstile(1)
        await gate.enter()
        try:
            return await self._write_async(session_id, owner, work, finish)
        finally:
            gate.leave()
            if gate.idle:
                del self._gates[session_id]

    async def _write_async(self, session_id: str, owner: str, work, finish) -> Any:
        entry = self._cache.get(session_id)
        if (entry is not None and entry.valid and entry.owner == owner
                and time.monotonic() - self._contended.get(session_id, -CONTENDED_SECONDS) >= CONTENDED_SECONDS
                and entry.lock.acquire(blocking=False)):
            admission = self._async_client().admission
            try:
                await admission.enter()
                try:
                    done = await self._write_first(session_id, owner, entry, work, finish)
                finally:
                    admission.leave()
            finally:
                entry.lock.release()
            if done is not _RETRY:
                return done
        async with self.open_async(session_id, owner) as session:
            result = work(session)
            await self.save_async(session)
            return finish(session, result)

    async def _write_first(self, session_id: str, owner: str, entry: _Cached, work, finish) -> Any:
        """The optimistic attempt of ``write_async`` (``entry.lock`` held); _RETRY when it did not apply."""
        if not entry.valid:
            return _RETRY
        scripts = self._async_client()
        now, args = self._args(session_id, owner)
        session = self._session(session_id, entry.state, entry.version, entry.created_at, now)
        session.owner = owner
        lease = session.lease = _Lease("", "", entry)
        try:
            result = work(session)
        except engine.EngineError:
            # nothing changed; the error stands if the state it ran on was the stored one (and renews it)
            with _unavailable_as_503():
                found = await scripts(_TOUCH, self._keys(session_id, owner)[:4], [*args, entry.version])
            if found == -1:
                self._forget(session_id, entry)
            if found in (-1, -2):
                raise SessionNotFound(session_id) from None
            if found[2]:  # stale
                return _RETRY
            raise
        except BaseException:
            self._forget(session_id, entry)
            raise
        parts = engine.dump_parts(session.state)
        try:
            with _unavailable_as_503():
                new = await scripts(_SAVE, self._keys(session_id, owner, staged=True),
                                    [*args, entry.version, "", len(session.state.tensors)], staged=parts)
        except BaseException:
            self._forget(session_id, entry)
            raise
        if new <= 0:  # not applied: the cached state holds this run's changes, which are not the stored state
            self._forget(session_id, entry)
            if new < 0:
                raise SessionNotFound(session_id)  # deleted (or expired) meanwhile
            self._contended[session_id] = time.monotonic()  # someone else's change came first
            return _RETRY
        self._saved(session, lease, new, now, _nbytes(parts))
        return finish(session, result)

    @asynccontextmanager
    async def open_async(self, session_id: str, owner: str = "") -> AsyncIterator[Session]:
        """``open(..., write=True)`` with ``await``: the same lock (token, renewal by the renewer thread, the
        same scripts and checks) and the same wait (``asyncio.sleep`` between attempts, then SessionBusy),
        without a thread. Save with ``save_async``. A state that has to be deserialised and is larger than
        ``ASYNC_LOAD_BYTES``, or whose cached copy a reader of this process is using, is loaded in the
        thread pool instead."""
        deadline = time.monotonic() + self.lock_wait_seconds
        scripts = self._async_client()
        lock_key = self._lock_key(session_id)
        token = secrets.token_hex(16)
        steps, reply = self._acquiring(session_id, token, owner, deadline), None
        while True:
            try:
                keys, args, pause = steps.send(reply)
            except StopIteration as done:
                found, cached, now = done.value
                break
            if pause:
                await asyncio.sleep(pause)
                continue
            try:
                with _unavailable_as_503():
                    reply = await scripts(_ACQUIRE, keys, args)
            except StoreUnavailable:
                self._orphan(lock_key, token)  # the lock may have been taken, the reply lost
                raise
        self._hold(lock_key, token)
        try:
            session, entry = await self._materialize_async(session_id, found, cached, now, owner)
        except BaseException:
            self._unhold(lock_key)
            try:
                await scripts(_RELEASE, [lock_key], [token])
            except redis.RedisError:
                self._orphan(lock_key, token)
            raise
        lease = session.lease = _Lease(lock_key, token, entry)
        try:
            yield session
        finally:
            self._unhold(lock_key)
            if not lease.saved:
                self._forget(session_id, entry)
            entry.lock.release()
            if not lease.saved:
                try:
                    await scripts(_RELEASE, [lock_key], [token])
                except (RedisConnectionError, RedisTimeoutError) as exc:
                    self._orphan(lock_key, token)
                    raise StoreUnavailable(f"the session store (Redis) is unreachable: {exc}") from exc

    async def _materialize_async(self, session_id: str, found: list, cached: _Cached | None, now: float,
                                 owner: str) -> tuple[Session, _Cached]:
        """``_materialize`` for a writer on the event loop (its lock taken): a state larger than
        ``ASYNC_LOAD_BYTES`` is deserialised in the thread pool; a cached state a reader of this process is
        using right now is not waited for (the stored one is downloaded instead)."""
        version, created_at, stale = int(found[0]), float(found[1]), found[2]
        if not stale and cached is not None and cached.lock.acquire(blocking=False):
            if cached.valid and cached.version == version:
                return self._session(session_id, cached.state, version, created_at, now, owner), cached
            cached.lock.release()
        with _unavailable_as_503():
            blob = await self._async_client().command("GET", self._state_key(session_id))  # ours: `version`
        if blob is None:
            raise SessionNotFound(session_id)
        if len(blob) <= ASYNC_LOAD_BYTES:
            state = engine.loads(blob)
        else:
            from starlette.concurrency import run_in_threadpool

            state = await run_in_threadpool(engine.loads, blob)
        entry = _Cached(version, state, len(blob), created_at, owner, light=True)
        entry.lock.acquire()
        self._remember(session_id, entry)
        return self._session(session_id, entry.state, version, created_at, now, owner), entry

    async def save_async(self, session: Session) -> None:
        """``save`` with ``await`` (inside ``open_async``)."""
        lease: _Lease = session.lease
        parts = engine.dump_parts(session.state)
        self._unhold(lease.lock_key)
        now, args = self._save_args(session, lease)
        with _unavailable_as_503():
            new = await self._async_client()(_SAVE, self._keys(session.id, session.owner, staged=True), args,
                                             staged=parts)
        self._saved(session, lease, new, now, _nbytes(parts))

    # ----- reading and loading ------------------------------------------------------------------------
    def _live_ids(self, index: str) -> list[str]:
        pipe = self.redis.pipeline()
        now_ms = int(time.time() * 1000)
        pipe.zremrangebyscore(index, "-inf", now_ms)
        pipe.zrangebyscore(index, now_ms, "+inf")
        return [i.decode() for i in pipe.execute()[1]]

    @contextmanager
    def _read(self, session_id: str, owner: str) -> Iterator[Session]:
        session, entry = self._load(session_id, owner)
        try:
            yield session
        finally:
            entry.lock.release()

    def _load(self, session_id: str, owner: str) -> tuple[Session, _Cached]:
        """A reader's session, renewed, its cache entry locked by the caller (release ``entry.lock``)."""
        with self._cache_lock:
            cached = self._cache.get(session_id)
        now, args = self._args(session_id, owner)
        with _unavailable_as_503():
            found = self._scripts(_TOUCH, self._keys(session_id, owner)[:4],
                                  [*args, cached.version if cached else ""])
        self._found(session_id, found)
        return self._materialize(session_id, found, cached, now, owner, writer=False)

    def _found(self, session_id: str, found: Any) -> None:
        """Raise SessionNotFound for a script's -1 (gone: forgotten here too) or -2 (another owner's: the
        cache entry, if any, is theirs and still good)."""
        if found == -1:
            self._forget(session_id)
        if found in (-1, -2):
            raise SessionNotFound(session_id)

    def _materialize(self, session_id: str, found: list, cached: _Cached | None, now: float, owner: str, *,
                     writer: bool) -> tuple[Session, _Cached]:
        """The state of what _TOUCH/_ACQUIRE returned: the cached one when still current, else the stored
        one, deserialised. A reader does not wait for a writer of this process to finish with the cached
        state: it downloads the stored version instead (with its version number, in one transaction: no
        lock keeps it still); a writer holds the lock, so the stored state is the version it was told."""
        version, created_at, stale = int(found[0]), float(found[1]), found[2]
        if not stale and cached is not None:
            if cached.lock.acquire(blocking=writer):
                if cached.valid and cached.version == version:
                    return self._session(session_id, cached.state, version, created_at, now, owner), cached
                cached.lock.release()
        with _unavailable_as_503():
            if writer:
                blob = self.redis.get(self._state_key(session_id))
            else:
                pipe = self.redis.pipeline(transaction=True)
                pipe.hget(self._key(session_id), "version")
                pipe.get(self._state_key(session_id))
                stored, blob = pipe.execute()
                version = int(stored) if stored is not None else version
        if blob is None:
            raise SessionNotFound(session_id)
        entry = _Cached(version, engine.loads(blob), len(blob), created_at, owner)
        entry.lock.acquire()
        self._remember(session_id, entry)
        return self._session(session_id, entry.state, version, created_at, now, owner), entry

    @staticmethod
    def _session(session_id: str, state: Any, version: int, created_at: float, now: float,
                 owner: str = "") -> Session:
        return Session(id=session_id, state=state, created_at=created_at, last_used_at=now, version=version,
                       owner=owner)

    # ----- the per-process cache ----------------------------------------------------------------------
    def _remember(self, session_id: str, entry: _Cached, nbytes: int | None = None) -> None:
        """Make ``entry`` the session's cached state (the newest this process knows of)."""
        with self._cache_lock:
            old = self._cache.pop(session_id, None)
            if old is not None:
                self._cache_used -= old.nbytes
                old.valid = old is entry
            if nbytes is not None:
                entry.nbytes = nbytes
            if entry.nbytes > self.cache_bytes:
                entry.valid = False
                return
            entry.valid = True
            self._cache[session_id] = entry
            self._cache_used += entry.nbytes
            while self._cache_used > self.cache_bytes:
                _, evicted = self._cache.popitem(last=False)
                self._cache_used -= evicted.nbytes
                evicted.valid = False
                self.stats.evicted += 1

    def _forget(self, session_id: str, entry: _Cached | None = None) -> None:
        with self._cache_lock:
            current = self._cache.get(session_id)
            if current is not None and (entry is None or current is entry):
                del self._cache[session_id]
                self._cache_used -= current.nbytes
            if entry is not None:
                entry.valid = False
            elif current is not None:
                current.valid = False

    # ----- the lock -----------------------------------------------------------------------------------
    def _busy(self, session_id: str) -> SessionBusy:
        return SessionBusy(f"session {session_id!r} is busy with another request; it was not free within "
                           f"{self.lock_wait_seconds:g} s (GRADSERVE_LOCK_WAIT_SECONDS)")

    def _acquire(self, session_id: str, token: str, owner: str, deadline: float) -> tuple[Session, _Cached]:
        """Take the session's lock (waiting until ``deadline``) and load the session, with one script call
        per attempt."""
        steps, reply = self._acquiring(session_id, token, owner, deadline), None
        while True:
            try:
                keys, args, pause = steps.send(reply)
            except StopIteration as done:
                found, cached, now = done.value
                break
            if pause:
                time.sleep(pause)
                continue
            try:
                with _unavailable_as_503():
                    reply = self._scripts(_ACQUIRE, keys, args)
            except StoreUnavailable:
                self._orphan(self._lock_key(session_id), token)  # the lock may have been taken, the reply lost
                raise
        lock_key = self._lock_key(session_id)
        self._hold(lock_key, token)
        try:
            return self._materialize(session_id, found, cached, now, owner, writer=True)
        except BaseException:
            self._unhold(lock_key)
            with contextlib.suppress(StoreUnavailable):
                self._release(lock_key, token)
            raise

    def _release(self, lock_key: str, token: str) -> None:
        """Release our lock; if Redis cannot be reached, have it released as soon as it can (``_orphan``) and
        raise StoreUnavailable."""
        try:
            self._scripts(_RELEASE, [lock_key], [token])
        except (RedisConnectionError, RedisTimeoutError) as exc:
            self._orphan(lock_key, token)
            raise StoreUnavailable(f"the session store (Redis) is unreachable: {exc}") from exc

    def _orphan(self, lock_key: str, token: str) -> None:
        """A lock of ours that could not be released (Redis was down or restarting). An append-only Redis
        restores it on restart, and then nobody would own it: every writer of that session would wait for it
        to lapse (GRADSERVE_LOCK_TTL_SECONDS). A thread releases such locks as soon as Redis answers again."""
        with self._held_lock:
            tokens = self._orphans.setdefault(lock_key, [])
            # the first ones are the requests that were under way when Redis went; attempts made while it was
            # away (each with its own token) never reached it
            if token not in tokens and len(tokens) < ORPHANS_PER_LOCK:
                tokens.append(token)
            if self._releaser is None or not self._releaser.is_alive():
                self._releaser = threading.Thread(target=self._release_orphans, name="gradserve-lock-releaser",
                                                  daemon=True)
                self._releaser.start()

    def _release_orphans(self) -> None:
        delay = ORPHAN_RETRY_SECONDS
        while not self._closing.is_set():
            with self._held_lock:
                orphans = [(key, token) for key, tokens in self._orphans.items() for token in tokens]
                if not orphans:
                    self._releaser = None
                    return
            try:
                for lock_key, token in orphans:
                    self._scripts(_RELEASE, [lock_key], [token])
                    with self._held_lock:
                        tokens = self._orphans.get(lock_key, [])
                        if token in tokens:
                            tokens.remove(token)
                        if not tokens:
                            self._orphans.pop(lock_key, None)
                delay = ORPHAN_RETRY_SECONDS
            except Exception:  # noqa: BLE001 - Redis still away (or anything else): try again
                self._closing.wait(delay)
                delay = min(delay * 2, 0.5)

    def _acquiring(self, session_id: str, token: str, owner: str,
                   deadline: float) -> Generator[tuple[list, list, float], Any, tuple[Any, _Cached | None, float]]:
        """The lock-taking loop of ``_acquire`` and ``open_async``, without I/O: yields (KEYS, ARGV, 0) for an
        ``_ACQUIRE`` call and is sent its reply, or (_, _, seconds) to pause before the next attempt (what it
        is sent then is ignored), backing off from 0.5 to 20 ms with jitter. Returns the reply that took the
        lock (with the cache entry and the time it was made with); raises SessionNotFound, or SessionBusy
        after ``deadline``."""
        keys = self._keys(session_id, owner)
        delay = 0.0005
        while True:
            with self._cache_lock:
                cached = self._cache.get(session_id)
            now, args = self._args(session_id, owner)
            found = yield keys, [*args, cached.version if cached else "", token, self._lock_ms], 0.0
            if found != 0:
                self._found(session_id, found)
                return found, cached, now
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._busy(session_id)
            yield keys, [], min(left, delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 0.02)

    def _hold(self, lock_key: str, token: str) -> None:
        with self._held_lock:
            self._held[lock_key] = token
            if self._renewer is None:
                self._renewer = threading.Thread(target=self._renew_forever, name="gradserve-lock-renewer",
                                                 daemon=True)
                self._renewer.start()

    def _unhold(self, lock_key: str) -> None:
        with self._held_lock:
            self._held.pop(lock_key, None)

    def _renew_forever(self) -> None:
        """Extend every lock this process holds, every third of the lock TTL."""
        while not self._closing.wait(self.lock_ttl_seconds / 3):
            with self._held_lock:
                held = list(self._held.items())
            if not held:
                continue
            try:
                lost = self._scripts(_EXTEND, [k for k, _ in held], [self._lock_ms, *[t for _, t in held]])
                with self._held_lock:  # a lock released since the snapshot was not lost
                    lapsed = [k for k, t in held if k.encode() in lost and self._held.get(k) == t]
                if lapsed:
                    log.warning("%d session lock(s) lapsed before renewal; their saves will be refused",
                                len(lapsed))
            except redis.RedisError as exc:
                log.warning("renewing session locks failed: %s", exc)


# ----- sending scripts ------------------------------------------------------------------------------------
# Scripts go out as EVALSHA commands packed here, on connections of redis-py's pools, blocking (thread pool)
# or on the event loop. A state to write (``staged``, from ``engine.dump_parts``) goes first, in the same
# round trip, as a SET of the call's staging key (the script's KEYS[6], expiring by itself should the script
# never run): its pieces (the header and the arrays' own memory) are sent as one bulk string without being
# joined into one copy first.

#: A staged state the script never got to (the connection dropped in between) is gone after this long
STAGE_TTL_MS = 60_000


def _nbytes(parts: list) -> int:
    return sum(memoryview(p).nbytes for p in parts)


#: A state of at most this many bytes is joined into one piece before sending (cheaper than many small ones)
JOIN_BELOW_BYTES = 64 * 1024


def _resp(*args: Any) -> list:
    """The command in RESP (Redis's wire format), as a list of chunks; a list argument is one bulk string
    made of its pieces (sent as they are when large)."""
    chunks: list = []
    buf = bytearray(b"*%d\r\n" % len(args))
    for arg in args:
        if isinstance(arg, list):
            size = _nbytes(arg)
            if size > JOIN_BELOW_BYTES:
                buf += b"$%d\r\n" % size
                chunks.append(bytes(buf))
                chunks.extend(arg)
                buf = bytearray(b"\r\n")
                continue
            arg = b"".join(arg)
        if isinstance(arg, str):
            arg = arg.encode()
        elif not isinstance(arg, bytes):
            arg = str(arg).encode()
        buf += b"$%d\r\n%s\r\n" % (len(arg), arg)
    chunks.append(bytes(buf))
    return chunks


_SHA: dict[str, str] = {}  # script -> its SHA-1 (a cache of a pure function)


def _exchange(script: str, keys: list, args: list, staged: list | None) -> Generator[tuple[list, int], list, Any]:
    """One script call as a conversation, without I/O: yields (chunks to send, how many replies to read),
    is sent those replies (an error reply as its exception), and returns the script's reply or raises its
    error. A Redis that does not know the script (restarted, flushed) is sent it with SCRIPT LOAD and asked
    again, once."""
    sha = _SHA.get(script)
    if sha is None:
        sha = _SHA[script] = hashlib.sha1(script.encode()).hexdigest()
    command = _resp("EVALSHA", sha, len(keys), *keys, *args)
    first = command if staged is None else _resp("SET", keys[5], staged, "PX", STAGE_TTL_MS) + command
    replies = yield first, 1 if staged is None else 2
    if isinstance(replies[-1], NoScriptError) and not any(isinstance(r, ResponseError) for r in replies[:-1]):
        replies = yield _resp("SCRIPT", "LOAD", script) + command, 2
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies[-1]


def _plain(*args: Any) -> Generator[tuple[list, int], list, Any]:
    """A plain command, as an ``_exchange``."""
    (reply,) = yield _resp(*args), 1
    if isinstance(reply, ResponseError):
        raise reply
    return reply


class _SyncScripts:
    """Exchanges over the blocking client's pool (its socket timeout bounds each read and write). A
    connection that fails mid-exchange is disconnected, never reused half-read."""

    def __init__(self, client: redis.Redis):
        self.pool = client.connection_pool

    def __call__(self, script: str, keys: list, args: list, staged: list | None = None) -> Any:
        return self.run(_exchange(script, keys, args, staged))

    def run(self, exchange: Generator) -> Any:
        conn = self.pool.get_connection()
        try:
            chunks, n = next(exchange)
            while True:
                conn.send_packed_command(chunks)
                replies = []
                for _ in range(n):
                    try:
                        replies.append(conn.read_response())
                    except ResponseError as exc:  # a whole error reply was read: the connection is fine
                        replies.append(exc)
                try:
                    chunks, n = exchange.send(replies)
                except StopIteration as done:
                    return done.value
        except ResponseError:
            raise
        except BaseException:
            conn.disconnect()
            raise
        finally:
            self.pool.release(conn)


class _AsyncScripts:
    """Exchanges over ``redis.asyncio`` connections, driven with the connection's own send and read: on a
    round trip of ~100 us, the client's per-command layers (a task for the write timeout, retries, events,
    the pool's lock and bookkeeping) were a third of it. Idle connections wait in a free list (the pool's
    health check still runs on each before a command); a connection that fails or is interrupted
    mid-exchange is disconnected, never reused half-read.

    The timeout covers a whole exchange. It is kept by a watchdog task (every quarter of the timeout, at most
    every second) that disconnects connections whose exchange has run too long, failing it with a timeout
    error, rather than by a timer per exchange (``asyncio.timeout``: ~10% of a small request's cost)."""

    def __init__(self, url: str, *, timeout: float):
        self.client = redis.asyncio.Redis.from_url(url, socket_timeout=None, socket_connect_timeout=5,
                                                   health_check_interval=30)
        self.pool = self.client.connection_pool
        self.timeout = timeout
        self._free: list = []
        #: the loop's optimistic writers (``RedisStore.write_async``): a client is made per event loop
        self.admission = _Turnstile(LOOP_OPTIMISTIC_WRITERS)
        self._deadlines: dict[Any, float] = {}  # connection -> when its exchange has run too long
        self._expired: set = set()  # connections the watchdog cut off
        self._watchdog: asyncio.Task | None = None

    async def __call__(self, script: str, keys: list, args: list, staged: list | None = None) -> Any:
        return await self.run(_exchange(script, keys, args, staged))

    async def command(self, *args: Any) -> Any:
        return await self.run(_plain(*args))

    async def run(self, exchange: Generator) -> Any:
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())
        deadline = time.monotonic() + self.timeout
        conn = self._free.pop() if self._free else await self.pool.get_connection()
        self._deadlines[conn] = deadline
        try:
            chunks, n = next(exchange)
            while True:
                await conn.send_packed_command(chunks)
                replies = []
                for _ in range(n):
                    try:
                        replies.append(await conn.read_response())
                    except ResponseError as exc:
                        replies.append(exc)
                try:
                    chunks, n = exchange.send(replies)
                except StopIteration as done:
                    reply = done.value
                    break
        except ResponseError:  # raised by the exchange after whole replies were read: the connection is fine
            del self._deadlines[conn]
            self._free.append(conn)
            raise
        except BaseException:
            del self._deadlines[conn]
            with contextlib.suppress(Exception):
                await conn.disconnect(nowait=True)
            await self.pool.release(conn)
            if conn in self._expired:
                self._expired.discard(conn)
                raise RedisTimeoutError(f"no reply within {self.timeout:g} s") from None
            raise
        del self._deadlines[conn]
        self._free.append(conn)
        return reply

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.timeout / 4))
            now = time.monotonic()
            for conn, deadline in list(self._deadlines.items()):
                if now > deadline and conn not in self._expired:
                    self._expired.add(conn)
                    with contextlib.suppress(Exception):
                        await conn.disconnect(nowait=True)  # its pending read fails

    async def aclose(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        free, self._free = self._free, []
        for conn in free:
            await self.pool.release(conn)
        await self.client.aclose()


@contextmanager
def _unavailable_as_503() -> Iterator[None]:
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError) as exc:
        raise StoreUnavailable(f"the session store (Redis) is unreachable: {exc}") from exc
    except (OutOfMemoryError, ReadOnlyError, MasterDownError, TryAgainError) as exc:
        # full (maxmemory with noeviction), a replica after a failover, a master that is down: nothing was
        # written (a script's writes come after its checks, and a refused SET leaves its RENAME failing)
        raise StoreUnavailable(f"the session store (Redis) refused the request: {exc}") from exc
