"""Where sessions live between requests.

``SessionStore`` is the protocol; ``memory.MemoryStore`` is the default (and, for now, the only) store.
A store hands out ``Session`` objects whose ``lock`` serializes requests on one session; a store that keeps
sessions elsewhere would serialize ``state`` with ``engine.dumps``/``engine.loads`` (never pickle) in
``get``/``save``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(eq=False)
class Session:
    id: str
    state: Any  # engine.State
    created_at: float = field(default_factory=time.time)
    last_used_at: float = field(default_factory=time.time)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def expires_at(self, ttl_seconds: float) -> float:
        return self.last_used_at + ttl_seconds


class SessionStore(Protocol):
    def create(self, state: Any) -> Session:
        """Store a new session; raises TooManySessions when full."""

    def get(self, session_id: str) -> Session:
        """The live session (its TTL renewed); raises SessionNotFound for unknown or expired ids."""

    def save(self, session: Session) -> None:
        """Persist the session after a successful change."""

    def delete(self, session_id: str) -> None:
        """Remove the session; raises SessionNotFound."""

    def list(self) -> list[Session]:
        """Every live session."""

    def count(self) -> int: ...

    def sweep(self) -> int:
        """Free expired sessions; returns how many."""

    def close(self) -> None: ...
