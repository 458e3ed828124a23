"""The in-memory session store (the default): sessions live in this process until they expire."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from app.errors import SessionNotFound, TooManySessions
from app.store import Session


class MemoryStore:
    def __init__(self, *, max_sessions: int, ttl_seconds: float, clock=time.time):
        self.max_sessions = max_sessions
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()  # guards the map; each session has its own lock for its state

    def _expired(self, session: Session, now: float) -> bool:
        return now >= session.expires_at(self.ttl_seconds)

    def create(self, state: Any) -> Session:
        now = self._clock()
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                self._sweep_locked(now)
            if len(self._sessions) >= self.max_sessions:
                raise TooManySessions(f"the service holds its maximum of {self.max_sessions} sessions "
                                      "(GRADSERVE_MAX_SESSIONS); delete one or retry after some expire")
            session = Session(id=secrets.token_urlsafe(24), state=state, created_at=now, last_used_at=now)
            self._sessions[session.id] = session
            return session

    def get(self, session_id: str) -> Session:
        now = self._clock()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                raise SessionNotFound(session_id)
            if self._expired(session, now):
                del self._sessions[session_id]
                raise SessionNotFound(session_id)
            session.last_used_at = now
            return session

    @contextmanager
    def open(self, session_id: str, *, write: bool = False) -> Iterator[Session]:
        """Readers take the session's lock too: they read the very arrays writers change."""
        session = self.get(session_id)
        with session.lock:
            yield session

    def save(self, session: Session) -> None:
        session.last_used_at = self._clock()  # the state object itself is already the stored one

    def delete(self, session_id: str) -> None:
        with self._lock:
            if self._sessions.pop(session_id, None) is None:
                raise SessionNotFound(session_id)

    def list(self) -> list[Session]:
        now = self._clock()
        with self._lock:
            self._sweep_locked(now)
            return list(self._sessions.values())

    def count(self) -> int:
        with self._lock:
            return len(self._sessions)

    def sweep(self) -> int:
        with self._lock:
            return self._sweep_locked(self._clock())

    def _sweep_locked(self, now: float) -> int:
        expired = [sid for sid, s in self._sessions.items() if self._expired(s, now)]
        for sid in expired:
            del self._sessions[sid]
        return len(expired)

    def close(self) -> None:
        with self._lock:
            self._sessions.clear()
