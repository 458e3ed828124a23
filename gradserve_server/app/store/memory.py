"""The in-memory session store (the default): sessions live in this process until they expire."""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gradserve_server.app.errors import SessionBusy, SessionNotFound, SessionQuotaExceeded, TooManySessions
from gradserve_server.app.store import Session, StoreStats


class MemoryStore:
    def __init__(self, *, max_sessions: int, ttl_seconds: float, max_sessions_per_owner: int | None = None,
                 max_sessions_per_client: int | None = None, clock=time.time, on_release=None,
                 lock_wait_seconds: float | None = None):
        self.max_sessions = max_sessions
        self.max_sessions_per_owner = max_sessions_per_owner  # for owners that are keys (not "")
        self.max_sessions_per_client = max_sessions_per_client  # per creating address, for owner ""
        self._clients: Counter[str] = Counter()  # address -> sessions it created (owner "" only)
        self.on_release = on_release  # called (no arguments) after sessions were deleted or expired
        self.ttl_seconds = ttl_seconds
        self.lock_wait_seconds = lock_wait_seconds  # None: wait as long as it takes
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._owned: Counter[str] = Counter()  # owner -> sessions held
        self._lock = threading.Lock()  # guards the map; each session has its own lock for its state
        self.stats = StoreStats()

    def _expired(self, session: Session, now: float) -> bool:
        return now >= session.expires_at(self.ttl_seconds)

    def _quota_full(self, owner: str) -> bool:
        return bool(owner) and self.max_sessions_per_owner is not None and \
            self._owned[owner] >= self.max_sessions_per_owner

    def _client_full(self, owner: str, client: str) -> bool:
        return not owner and bool(client) and self.max_sessions_per_client is not None and \
            self._clients[client] >= self.max_sessions_per_client

    def create(self, state: Any, owner: str = "", client: str = "") -> Session:
        now = self._clock()
        client = "" if owner else client
        with self._lock:
            if (len(self._sessions) >= self.max_sessions or self._quota_full(owner)
                    or self._client_full(owner, client)):
                self._sweep_locked(now)
            if len(self._sessions) >= self.max_sessions:
                raise TooManySessions(f"the service holds its maximum of {self.max_sessions} sessions "
                                      "(GRADSERVE_MAX_SESSIONS); delete one or retry after some expire")
            if self._quota_full(owner):
                raise SessionQuotaExceeded(f"this API key holds its maximum of {self.max_sessions_per_owner} "
                                           "sessions (GRADSERVE_MAX_SESSIONS_PER_KEY); delete one or retry "
                                           "after some expire")
            if self._client_full(owner, client):
                raise SessionQuotaExceeded(f"this client address holds its maximum of "
                                           f"{self.max_sessions_per_client} sessions "
                                           "(GRADSERVE_MAX_SESSIONS_PER_CLIENT); delete one or retry after some "
                                           "expire")
            session = Session(id=secrets.token_urlsafe(24), state=state, created_at=now, last_used_at=now,
                              owner=owner, client=client)
            self._sessions[session.id] = session
            self._owned[owner] += 1
            if client:
                self._clients[client] += 1
            self.stats.created += 1
            return session

    def get(self, session_id: str, owner: str = "") -> Session:
        now = self._clock()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None or session.owner != owner:
                raise SessionNotFound(session_id)
            expired = self._expired(session, now)
            if expired:
                self._remove_locked(session)
                self.stats.expired += 1
            else:
                session.last_used_at = now
        if expired:
            self._released()
            raise SessionNotFound(session_id)
        return session

    def _released(self) -> None:
        if self.on_release is not None:
            self.on_release()

    def _remove_locked(self, session: Session) -> None:
        del self._sessions[session.id]
        self._owned[session.owner] -= 1
        if not self._owned[session.owner]:
            del self._owned[session.owner]
        if session.client:
            self._clients[session.client] -= 1
            if not self._clients[session.client]:
                del self._clients[session.client]

    @contextmanager
    def open(self, session_id: str, *, write: bool = False, owner: str = "") -> Iterator[Session]:
        """Readers take the session's lock too: they read the very arrays writers change. A request waits at
        most ``lock_wait_seconds`` for it (409 session_busy after), so that requests for a session a heavy
        request holds do not each keep a thread of the pool for that request's whole deadline."""
        session = self.get(session_id, owner)
        timeout = -1 if self.lock_wait_seconds is None else self.lock_wait_seconds
        if not session.lock.acquire(timeout=timeout):
            raise SessionBusy(f"another request has been using session {session_id!r} for more than "
                              f"{self.lock_wait_seconds:g} s (GRADSERVE_LOCK_WAIT_SECONDS); nothing was applied, "
                              "retry")
        try:
            yield session
        finally:
            session.lock.release()

    def save(self, session: Session) -> None:
        session.last_used_at = self._clock()  # the state object itself is already the stored one

    def delete(self, session_id: str, owner: str = "") -> None:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None or session.owner != owner:
                raise SessionNotFound(session_id)
            self._remove_locked(session)
            self.stats.deleted += 1
        self._released()

    def list(self, owner: str | None = None) -> list[Session]:
        now = self._clock()
        with self._lock:
            self._sweep_locked(now)
            return [s for s in self._sessions.values() if owner is None or s.owner == owner]

    def count(self) -> int:
        with self._lock:
            return len(self._sessions)

    def sweep(self) -> int:
        with self._lock:
            swept = self._sweep_locked(self._clock())
        if swept:
            self._released()
        return swept

    def _sweep_locked(self, now: float) -> int:
        expired = [s for s in self._sessions.values() if self._expired(s, now)]
        for session in expired:
            self._remove_locked(session)
        self.stats.expired += len(expired)
        return len(expired)

    def close(self) -> None:
        with self._lock:
            self._sessions.clear()
            self._owned.clear()
            self._clients.clear()
