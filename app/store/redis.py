"""The Redis session store: every worker and replica serves the same sessions.

Keys (``GRADSERVE_REDIS_KEY_PREFIX``, default ``gradserve:``):

- ``{prefix}s:{id}``: a hash with ``state`` (``engine.dumps``: JSON metadata and raw array buffers, loaded
  without executing anything), ``version`` (1 at creation, +1 per save), ``created_at``, ``last_used_at``,
  ``tensor_count`` and ``owner`` (the SHA-256 digest of the creating API key, empty without keys; never the
  key). Redis expires it after ``GRADSERVE_SESSION_TTL_SECONDS`` idle; every access renews it.
- ``{prefix}lock:{id}``: the owner token of the request writing the session (``SET NX PX``). The owner
  renews it every third of ``GRADSERVE_LOCK_TTL_SECONDS`` while it works, so it only lapses when the owner
  dies (or stalls); releasing deletes it only if the token is still ours.
- ``{prefix}index``: a sorted set of session ids scored by expiry time (ms), for listing, counting and the
  session limit across processes.
- ``{prefix}owner:{digest}``: the same for one owner's sessions, for listing them and the per-key quota.

Every script that reads or writes a session checks its owner first: another owner's session is reported as
gone (and is neither renewed nor locked).

A writer takes the lock and reads the state (one script), runs, and saves with a compare-and-set that also
releases the lock (one script): the save applies only if the stored version is still the one it loaded and
no other request holds the lock. So a writer whose lock lapsed cannot overwrite a newer state: its request
fails with 409 ``session_busy`` (nothing applied) rather than losing someone else's update. A writer that
cannot get the lock within ``GRADSERVE_LOCK_WAIT_SECONDS`` gets the same 409 with ``Retry-After``. Readers
take no lock: they read one stored version, atomically (one script). Two round trips per write, one per read.

Small requests on sessions this process holds light run on the event loop (``open_async``/``save_async``,
see ``app.service``): the same scripts, awaited on ``redis.asyncio`` connections; their locks are renewed by
the same renewer thread.

Each process keeps the states it last loaded or saved (up to ``GRADSERVE_REDIS_CACHE_BYTES``) and reuses
one when the stored version is unchanged, which spares the download and the deserialisation when a client
keeps talking to the same process. Scripts touch a session key and the index together, so a Redis Cluster
would need both in one hash slot: use a single Redis (with replicas and persistence if wanted).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

import engine
from app.errors import SessionBusy, SessionNotFound, SessionQuotaExceeded, StoreUnavailable, TooManySessions
from app.store import Session, StoreStats

log = logging.getLogger("gradserve.store")

# KEYS: session, index, owner index. ARGV: id, now (s), expiry score (ms), ttl (ms), max sessions, state,
# tensor count, owner, max sessions of the owner (0: none). Returns 1, 0 when full, -2 over the owner's quota,
# -1 when the id is taken.
_CREATE = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[2] * 1000)
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then return 0 end
if tonumber(ARGV[9]) > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[2] * 1000)
  if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[9]) then return -2 end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
redis.call('HSET', KEYS[1], 'state', ARGV[6], 'version', 1, 'created_at', ARGV[2], 'last_used_at', ARGV[2],
           'tensor_count', ARGV[7], 'owner', ARGV[8])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
return 1
"""

# Renew and read. KEYS: session, index, owner index. ARGV: id, now, expiry score, ttl, the version the caller
# has cached, owner. Returns false when gone, 0 when another owner's, else {version, created_at, state or ''
# when the cached version is current}.
_TOUCH = """
local v = redis.call('HGET', KEYS[1], 'version')
if not v then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return false
end
if (redis.call('HGET', KEYS[1], 'owner') or '') ~= ARGV[6] then return 0 end
redis.call('HSET', KEYS[1], 'last_used_at', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
local state = ''
if v ~= ARGV[5] then state = redis.call('HGET', KEYS[1], 'state') end
return {v, redis.call('HGET', KEYS[1], 'created_at'), state}
"""

# Take the lock and read, in one round trip. KEYS: lock, session, index, owner index. ARGV: token, lock ttl
# (ms), then _TOUCH's ARGV. Returns 0 when someone else holds the lock, -1 when the session is gone, -2 when
# it is another owner's (no lock taken either way), else what _TOUCH returns.
_ACQUIRE = """
local v = redis.call('HGET', KEYS[2], 'version')
if not v then
  redis.call('ZREM', KEYS[3], ARGV[3])
  return -1
end
if (redis.call('HGET', KEYS[2], 'owner') or '') ~= ARGV[8] then return -2 end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
redis.call('HSET', KEYS[2], 'last_used_at', ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[3])
local state = ''
if v ~= ARGV[7] then state = redis.call('HGET', KEYS[2], 'state') end
return {v, redis.call('HGET', KEYS[2], 'created_at'), state}
"""

# Compare-and-set, then release the lock. KEYS: session, lock, index, owner index. ARGV: id, now, expiry
# score, ttl, expected version, token, state, tensor count. Returns the new version, 0 when superseded or the lock is
# someone else's (nothing written, the lock left as it is), -1 when the session is gone.
_SAVE = """
local v = redis.call('HGET', KEYS[1], 'version')
if not v then return -1 end
if v ~= ARGV[5] then return 0 end
local owner = redis.call('GET', KEYS[2])
if owner and owner ~= ARGV[6] then return 0 end
local new = tonumber(v) + 1
redis.call('HSET', KEYS[1], 'state', ARGV[7], 'version', new, 'last_used_at', ARGV[2], 'tensor_count', ARGV[8])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1])
if owner then redis.call('DEL', KEYS[2]) end
return new
"""

# KEYS: session, index, owner index. ARGV: id, owner. Returns 1 when deleted, 0 when gone or another owner's.
_DELETE = """
local owner = redis.call('HGET', KEYS[1], 'owner')
if not redis.call('HGET', KEYS[1], 'version') then return 0 end
if (owner or '') ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
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
    lock: threading.Lock = field(default_factory=threading.Lock)
    valid: bool = True
    light: bool = False  # the last run on it was quick and left small tensors (set by the service)


@dataclass(eq=False)
class _Lease:
    lock_key: str
    token: str
    entry: _Cached
    saved: bool = False  # saving also releases the lock


#: The event-loop path serves sessions stored in at most this many bytes, and deserialises no larger state
#: on the loop (it does that in the thread pool)
ASYNC_LOAD_BYTES = 256 * 1024


class RedisStore:
    def __init__(self, client: redis.Redis, *, max_sessions: int, ttl_seconds: float, lock_ttl_seconds: float,
                 lock_wait_seconds: float, key_prefix: str = "gradserve:", cache_bytes: int = 64 << 20,
                 max_sessions_per_owner: int | None = None, async_url: str | None = None):
        self.redis = client
        self.async_url = async_url  # for the event-loop path (open_async); None: no such path
        self.max_sessions = max_sessions
        self.max_sessions_per_owner = max_sessions_per_owner  # for owners that are keys (not "")
        self.stats = StoreStats()
        self.ttl_seconds = ttl_seconds
        self.lock_ttl_seconds = lock_ttl_seconds
        self.lock_wait_seconds = lock_wait_seconds
        self.prefix = key_prefix
        self.cache_bytes = cache_bytes
        self._index = f"{key_prefix}index"
        self._create = client.register_script(_CREATE)
        self._touch = client.register_script(_TOUCH)
        self._acquire_script = client.register_script(_ACQUIRE)
        self._save = client.register_script(_SAVE)
        self._release = client.register_script(_RELEASE)
        self._delete = client.register_script(_DELETE)
        self._extend = client.register_script(_EXTEND)
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._cache_used = 0
        self._cache_lock = threading.Lock()
        self._held: dict[str, str] = {}  # lock key -> token, renewed by the renewer thread
        self._held_lock = threading.Lock()
        self._renewer: threading.Thread | None = None
        self._closing = threading.Event()
        self._lock_ms = max(1, int(lock_ttl_seconds * 1000))
        self._ttl_ms = max(1, int(ttl_seconds * 1000))
        self._aclient: redis.asyncio.Redis | None = None  # bound to the event loop that made it
        self._aclient_loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_settings(cls, settings) -> RedisStore:
        client = redis.Redis.from_url(settings.store_url, socket_timeout=10, socket_connect_timeout=5,
                                      health_check_interval=30)
        return cls(client, max_sessions=settings.max_sessions, ttl_seconds=settings.session_ttl_seconds,
                   lock_ttl_seconds=settings.lock_ttl_seconds, lock_wait_seconds=settings.lock_wait_seconds,
                   key_prefix=settings.redis_key_prefix, cache_bytes=settings.redis_cache_bytes,
                   max_sessions_per_owner=settings.max_sessions_per_key, async_url=settings.store_url)

    # ----- keys and times -----------------------------------------------------------------------------
    def _key(self, session_id: str) -> str:
        return f"{self.prefix}s:{session_id}"

    def _lock_key(self, session_id: str) -> str:
        return f"{self.prefix}lock:{session_id}"

    def _owner_index(self, owner: str) -> str:
        return f"{self.prefix}owner:{owner}"

    def _times(self) -> tuple[float, int, int]:
        """now (s), the expiry score of a session touched now (ms), the TTL (ms)."""
        now = time.time()
        return now, int(now * 1000) + self._ttl_ms, self._ttl_ms

    # ----- the protocol -------------------------------------------------------------------------------
    def create(self, state: Any, owner: str = "") -> Session:
        blob = engine.dumps(state)
        now, score, ttl_ms = self._times()
        quota = self.max_sessions_per_owner if owner and self.max_sessions_per_owner else 0
        for _ in range(3):
            session_id = secrets.token_urlsafe(24)
            with _unavailable_as_503():
                created = self._create(keys=[self._key(session_id), self._index, self._owner_index(owner)],
                                       args=[session_id, repr(now), score, ttl_ms, self.max_sessions, blob,
                                             len(state.tensors), owner, quota])
            if created == 0:
                raise TooManySessions(f"the service holds its maximum of {self.max_sessions} sessions "
                                      "(GRADSERVE_MAX_SESSIONS); delete one or retry after some expire")
            if created == -2:
                raise SessionQuotaExceeded(f"this API key holds its maximum of {quota} sessions "
                                           "(GRADSERVE_MAX_SESSIONS_PER_KEY); delete one or retry after some "
                                           "expire")
            if created == 1:
                self._remember(session_id, _Cached(1, state, len(blob), light=len(blob) <= ASYNC_LOAD_BYTES))
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
        lock_key = self._lock_key(session_id)
        token = secrets.token_hex(16)
        deadline = time.monotonic() + self.lock_wait_seconds
        session, entry = self._acquire(session_id, lock_key, token, owner, deadline)
        lease = session.lease = _Lease(lock_key, token, entry)
        try:
            yield session
        finally:
            self._unhold(lock_key)
            if not lease.saved:  # failed or abandoned: the state may hold unsaved changes, and the lock is ours
                self._forget(session_id, entry)
            entry.lock.release()
            if not lease.saved:
                with _unavailable_as_503():
                    self._release(keys=[lock_key], args=[token])

    def save(self, session: Session) -> None:
        lease: _Lease = session.lease
        blob = engine.dumps(session.state)
        now, score, ttl_ms = self._times()
        self._unhold(lease.lock_key)  # no renewal while the script releases it (nor after a refusal)
        with _unavailable_as_503():
            new = self._save(keys=[self._key(session.id), lease.lock_key, self._index,
                                   self._owner_index(session.owner)],
                             args=[session.id, repr(now), score, ttl_ms, session.version, lease.token, blob,
                                   len(session.state.tensors)])
        self._saved(session, lease, new, now, len(blob))

    def _saved(self, session: Session, lease: _Lease, new: int, now: float, nbytes: int) -> None:
        """What _SAVE answered: the new version, or the refusal."""
        if new == -1:
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
        with _unavailable_as_503():
            deleted = self._delete(keys=[self._key(session_id), self._index, self._owner_index(owner)],
                                   args=[session_id, owner])
        if not deleted:
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
        """Whether this process holds the session's state, stored in at most ``ASYNC_LOAD_BYTES``, and its
        last run here was quick and left small tensors (``note_light``): what ``open_async`` is for. A guess
        (another process may have changed the session since), so ``open_async`` still bounds what it
        deserialises on the loop. Larger states go through the thread pool, where serialising and moving
        their bytes overlaps with the event loop's other work."""
        if self.async_url is None:
            return False
        entry = self._cache.get(session_id)  # a dict read: atomic under the GIL, and a guess anyway
        return entry is not None and entry.light and entry.valid and entry.nbytes <= ASYNC_LOAD_BYTES

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
        keys = [lock_key, self._key(session_id), self._index, self._owner_index(owner)]
        delay = 0.0005
        while True:
            cached = self._cache.get(session_id)
            now, score, ttl_ms = self._times()
            with _unavailable_as_503():
                found = await scripts(_ACQUIRE, keys, [token, self._lock_ms, session_id, repr(now), score, ttl_ms,
                                                       cached.version if cached else "", owner])
            if found in (-1, -2):
                if found == -1:
                    self._forget(session_id)
                raise SessionNotFound(session_id)
            if found != 0:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._busy(session_id)
            await asyncio.sleep(min(left, delay * random.uniform(0.5, 1.5)))
            delay = min(delay * 2, 0.02)
        self._hold(lock_key, token)
        try:
            held = self._materialize_now(session_id, found, cached, now)
            if held is None:
                from starlette.concurrency import run_in_threadpool

                held = await run_in_threadpool(self._materialize, session_id, found, cached, now, blocking=True)
            session, entry = held
            session.owner = owner
        except BaseException:
            self._unhold(lock_key)
            with contextlib.suppress(redis.RedisError):
                await scripts(_RELEASE, [lock_key], [token])
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
                with _unavailable_as_503():
                    await scripts(_RELEASE, [lock_key], [token])

    def _materialize_now(self, session_id: str, found: list, cached: _Cached | None,
                         now: float) -> tuple[Session, _Cached] | None:
        """``_materialize`` when it needs neither a wait nor a large deserialisation; else None."""
        version, created_at, blob = int(found[0]), float(found[1]), found[2]
        if not blob:
            if cached is None or not cached.lock.acquire(blocking=False):
                return None
            if cached.valid and cached.version == version:
                return self._session(session_id, cached.state, version, created_at, now), cached
            cached.lock.release()
            return None
        if len(blob) > ASYNC_LOAD_BYTES:
            return None
        entry = _Cached(version, engine.loads(blob), len(blob), light=True)
        entry.lock.acquire()
        self._remember(session_id, entry)
        return self._session(session_id, entry.state, version, created_at, now), entry

    async def save_async(self, session: Session) -> None:
        """``save`` with ``await`` (inside ``open_async``)."""
        lease: _Lease = session.lease
        blob = engine.dumps(session.state)
        now, score, ttl_ms = self._times()
        self._unhold(lease.lock_key)
        scripts = self._async_client()
        with _unavailable_as_503():
            new = await scripts(_SAVE, [self._key(session.id), lease.lock_key, self._index,
                                        self._owner_index(session.owner)],
                                [session.id, repr(now), score, ttl_ms, session.version, lease.token, blob,
                                 len(session.state.tensors)])
        self._saved(session, lease, new, now, len(blob))

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
        now, score, ttl_ms = self._times()
        with _unavailable_as_503():
            found = self._touch(keys=[self._key(session_id), self._index, self._owner_index(owner)],
                                args=[session_id, repr(now), score, ttl_ms, cached.version if cached else "",
                                      owner])
        if not found:
            if found is None:  # gone; when another owner's, the cache entry (if any) is theirs and still good
                self._forget(session_id)
            raise SessionNotFound(session_id)
        session, entry = self._materialize(session_id, found, cached, now, blocking=False)
        session.owner = owner
        return session, entry

    def _materialize(self, session_id: str, found: list, cached: _Cached | None, now: float, *,
                     blocking: bool) -> tuple[Session, _Cached]:
        """The state of what _TOUCH/_ACQUIRE returned: the cached one when still current, else the stored
        one, deserialised. A reader (``blocking=False``) does not wait for a writer of this process to
        finish with the cached state: it downloads the stored version instead."""
        version, created_at, blob = int(found[0]), float(found[1]), found[2]
        if cached is not None and not blob:
            if cached.lock.acquire(blocking=blocking):
                if cached.valid and cached.version == version:
                    return self._session(session_id, cached.state, version, created_at, now), cached
                cached.lock.release()
            with _unavailable_as_503():  # a local writer has it, changed it or dropped it: read what is stored
                blob, stored = self.redis.hmget(self._key(session_id), "state", "version")
            if blob is None:
                raise SessionNotFound(session_id)
            version = int(stored)
        entry = _Cached(version, engine.loads(blob), len(blob))
        entry.lock.acquire()
        self._remember(session_id, entry)
        return self._session(session_id, entry.state, version, created_at, now), entry

    @staticmethod
    def _session(session_id: str, state: Any, version: int, created_at: float, now: float) -> Session:
        return Session(id=session_id, state=state, created_at=created_at, last_used_at=now, version=version)

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

    def _acquire(self, session_id: str, lock_key: str, token: str, owner: str,
                 deadline: float) -> tuple[Session, _Cached]:
        """Take the session's lock (waiting until ``deadline``) and load the session, with one script call
        per attempt."""
        lock_ms = self._lock_ms
        delay = 0.0005
        while True:
            with self._cache_lock:
                cached = self._cache.get(session_id)
            now, score, ttl_ms = self._times()
            with _unavailable_as_503():
                found = self._acquire_script(keys=[lock_key, self._key(session_id), self._index,
                                                   self._owner_index(owner)],
                                             args=[token, lock_ms, session_id, repr(now), score, ttl_ms,
                                                   cached.version if cached else "", owner])
            if found in (-1, -2):
                if found == -1:
                    self._forget(session_id)
                raise SessionNotFound(session_id)
            if found != 0:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._busy(session_id)
            time.sleep(min(left, delay * random.uniform(0.5, 1.5)))
            delay = min(delay * 2, 0.02)
        self._hold(lock_key, token)
        try:
            session, entry = self._materialize(session_id, found, cached, now, blocking=True)
            session.owner = owner
            return session, entry
        except BaseException:
            self._unhold(lock_key)
            with contextlib.suppress(redis.RedisError):
                self._release(keys=[lock_key], args=[token])
            raise

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
                lost = self._extend(keys=[k for k, _ in held],
                                    args=[max(1, int(self.lock_ttl_seconds * 1000)), *[t for _, t in held]])
                with self._held_lock:  # a lock released since the snapshot was not lost
                    lapsed = [k for k, t in held if k.encode() in lost and self._held.get(k) == t]
                if lapsed:
                    log.warning("%d session lock(s) lapsed before renewal; their saves will be refused",
                                len(lapsed))
            except redis.RedisError as exc:
                log.warning("renewing session locks failed: %s", exc)


class _AsyncScripts:
    """Scripts over ``redis.asyncio`` connections, driven with the connection's own send and read: on a
    round trip of ~100 us, the client's per-command layers (a task for the write timeout, retries, events,
    the pool's lock and bookkeeping) were a third of it. The timeout covers the write and the read together;
    a connection that fails or is interrupted mid-command is disconnected, never reused half-read; idle
    connections wait in a free list (the pool's health check still runs on each before a command)."""

    def __init__(self, url: str, *, timeout: float):
        self.client = redis.asyncio.Redis.from_url(url, socket_timeout=None, socket_connect_timeout=5,
                                                   health_check_interval=30)
        self.pool = self.client.connection_pool
        self.timeout = timeout
        self._free: list = []
        self._sha: dict[str, str] = {}

    async def __call__(self, script: str, keys: list, args: list) -> Any:
        sha = self._sha.get(script)
        if sha is None:
            sha = self._sha[script] = hashlib.sha1(script.encode()).hexdigest()
        conn = self._free.pop() if self._free else await self.pool.get_connection()
        try:
            async with asyncio.timeout(self.timeout):
                command = conn.pack_command("EVALSHA", sha, len(keys), *keys, *args)
                await conn.send_packed_command(command)
                try:
                    reply = await conn.read_response()
                except NoScriptError:  # a restarted or flushed Redis: load it, once per connection that sees it
                    await conn.send_packed_command(conn.pack_command("SCRIPT", "LOAD", script))
                    await conn.read_response()
                    await conn.send_packed_command(command)
                    reply = await conn.read_response()
        except ResponseError:  # a whole error reply was read: the connection is fine
            self._free.append(conn)
            raise
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await conn.disconnect(nowait=True)
            await self.pool.release(conn)
            if isinstance(exc, TimeoutError):  # asyncio's (the builtin): the store's
                raise RedisTimeoutError(f"no reply within {self.timeout:g} s") from None
            raise
        self._free.append(conn)
        return reply

    async def aclose(self) -> None:
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
