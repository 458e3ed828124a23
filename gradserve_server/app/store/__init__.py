"""Where sessions live between requests.

``SessionStore`` is the protocol. ``memory.MemoryStore`` (the default) keeps sessions in this process;
``redis.RedisStore`` keeps them in Redis, shared by every worker and replica, serialised with
``engine.dumps``/``engine.loads`` (JSON metadata and raw buffers, never pickle). ``make_store`` picks one
from ``GRADSERVE_STORE_URL``.

A request uses a session inside ``with store.open(session_id, write=...) as session:``. A writer holds
the session exclusively for the whole block (across processes, for Redis) and calls ``store.save`` after
its change succeeded; a reader sees one consistent state. Leaving the block without a save discards any
change, which is what keeps a failing request from changing anything.

Every session has an *owner*: the SHA-256 digest of the API key that created it (``""`` when the server runs
without keys). ``open``, ``delete`` and ``list`` take the requester's owner, and a session of another owner
is answered exactly as a session that does not exist (``SessionNotFound``), without renewing it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(eq=False)
class Session:
    id: str
    state: Any  # engine.State; None in listings of stores that do not load states to list them
    created_at: float = field(default_factory=time.time)
    last_used_at: float = field(default_factory=time.time)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    version: int = 0  # the stored version this state was loaded at (Redis store)
    listed_tensor_count: int = 0  # for listings without a state
    lease: Any = field(default=None, repr=False)  # the store's own bookkeeping for an open session
    owner: str = ""  # the digest of the creating API key ("" without keys); never the key
    client: str = ""  # without keys: the address that created it, for the per-address quota ("" with keys)

    def expires_at(self, ttl_seconds: float) -> float:
        return self.last_used_at + ttl_seconds

    @property
    def tensor_count(self) -> int:
        return self.listed_tensor_count if self.state is None else len(self.state.tensors)


@dataclass
class StoreStats:
    """What this process's store did, for /metrics (plain ints: one writer each, read when scraped)."""

    created: int = 0
    deleted: int = 0
    expired: int = 0
    evicted: int = 0


class SessionStore(Protocol):
    stats: StoreStats

    def create(self, state: Any, owner: str = "", client: str = "") -> Session:
        """Store a new session; raises TooManySessions when full and SessionQuotaExceeded when ``owner``
        holds its maximum, or on an open server (``owner`` ""), when the sessions ``client`` (its address)
        created do."""

    def open(self, session_id: str, *, write: bool, owner: str = "") -> AbstractContextManager[Session]:
        """The live session (its TTL renewed) for the duration of a with-block; raises SessionNotFound for
        unknown, expired or others' ids and SessionBusy when a writer cannot have it in time."""

    def save(self, session: Session) -> None:
        """Persist the session after a successful change, inside ``open(..., write=True)``."""

    def delete(self, session_id: str, owner: str = "") -> None:
        """Remove the session; raises SessionNotFound (also for another owner's session)."""

    def list(self, owner: str | None = None) -> list[Session]:
        """Every live session of ``owner`` (of everyone when None; ``state`` may be None: use
        ``tensor_count``)."""

    def count(self) -> int: ...

    def sweep(self) -> int:
        """Free expired sessions; returns how many."""

    def close(self) -> None: ...


class SeveralWorkersError(RuntimeError):
    """The memory store under several worker processes."""


def declared_workers(settings_workers: int, environ: Mapping[str, str] = os.environ,
                     argv: Sequence[str] = sys.argv) -> int:
    """The most worker processes anything says this app runs under: GRADSERVE_WORKERS, WEB_CONCURRENCY
    (uvicorn's and gunicorn's default), UVICORN_WORKERS, or ``--workers N`` on uvicorn's command line
    (uvicorn's spawned workers see the parent's argv)."""
    counts = [settings_workers]
    for name in ("WEB_CONCURRENCY", "UVICORN_WORKERS"):
        if environ.get(name, "").strip().isdigit():
            counts.append(int(environ[name]))
    prog = argv[0] if argv else ""
    if os.path.basename(prog) == "uvicorn" or prog.endswith(os.path.join("uvicorn", "__main__.py")):
        for flag, value in zip(argv, [*argv[1:], ""]):
            if flag.startswith("--workers="):
                flag, value = flag.split("=", 1)
            if flag == "--workers" and value.isdigit():
                counts.append(int(value))
    return max(counts)


def make_store(settings) -> SessionStore:
    """The store ``GRADSERVE_STORE_URL`` names. The memory store refuses to start under several workers:
    each would hold its own sessions and requests would find them only by chance."""
    url = settings.store_url
    if url.startswith(("redis://", "rediss://", "unix://")):
        from gradserve_server.app.store.redis import RedisStore

        return RedisStore.from_settings(settings)
    if url != "memory://":
        raise ValueError(f"GRADSERVE_STORE_URL={url!r}: expected memory:// or redis://host:port/db")
    workers = declared_workers(settings.workers)
    if workers > 1:
        raise SeveralWorkersError(f"the memory session store serves one process, but this app is configured for "
                           f"{workers} workers (GRADSERVE_WORKERS, WEB_CONCURRENCY, UVICORN_WORKERS or "
                           f"--workers): each worker would hold its own sessions and requests would get "
                           f"random 404s. Set GRADSERVE_STORE_URL=redis://host:6379/0 or run one worker.")
    from gradserve_server.app.store.memory import MemoryStore

    return MemoryStore(max_sessions=settings.max_sessions, ttl_seconds=settings.session_ttl_seconds,
                       max_sessions_per_owner=settings.max_sessions_per_key,
                       lock_wait_seconds=settings.lock_wait_seconds,
                       max_sessions_per_client=settings.max_sessions_per_client)
