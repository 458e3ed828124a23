"""Service settings, read from the environment with the prefix ``GRADSERVE_``."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Limits and session policy. Defaults are safe for a laptop."""

    model_config = SettingsConfigDict(env_prefix="GRADSERVE_", frozen=True)

    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1,
                                description="Largest accepted request body (413 above).")
    max_elements_per_tensor: int = Field(4_000_000, ge=1, description="Largest tensor (elements) a request "
                                         "may send or create.")
    max_ops_per_request: int = Field(10_000, ge=1, description="Most ops in one op list.")
    max_repeat: int = Field(1000, ge=1, description="Largest `repeat` of an op list.")
    max_nodes_per_session: int = Field(100_000, ge=1, description="Most autograd nodes alive in one session.")
    max_bytes_per_session: int = Field(256 * 1024 * 1024, ge=1, description="Most tensor bytes held by one "
                                       "session.")
    max_sessions: int = Field(1000, ge=1, description="Most live sessions (429 above).")
    session_ttl_seconds: float = Field(3600.0, gt=0, description="Idle time after which a session expires "
                                       "(sliding: every access renews it).")
    inline_max_body_bytes: int = Field(2048, ge=0, description="Op lists with bodies up to this size (and "
                                       "at most `inline_max_ops` ops of bounded cost) run on the event loop "
                                       "instead of the thread pool; 0 never does.")
    inline_max_ops: int = Field(16, ge=0, description="Most ops in an op list run on the event loop.")
    sweep_interval_seconds: float = Field(60.0, gt=0, description="How often expired sessions are freed.")

    # ----- deployment: where sessions live -----
    store_url: str = Field("memory://", description="`memory://` (sessions in this process; one worker only) "
                           "or `redis://[user:password@]host:port/db` (`rediss://` for TLS): sessions shared "
                           "by every worker and replica.")
    workers: int = Field(1, ge=1, description="Worker processes serving this app, declared for the memory "
                         "store's start-up check (WEB_CONCURRENCY and uvicorn's --workers are checked too).")
    lock_ttl_seconds: float = Field(10.0, gt=0, description="Redis store: how long a request's lock on a "
                                    "session lives without renewal; renewed every third of it while held, so "
                                    "it only matters when a process dies holding it.")
    lock_wait_seconds: float = Field(5.0, ge=0, description="Redis store: how long a request waits for a "
                                     "session another request holds (409 session_busy with Retry-After "
                                     "after).")
    redis_key_prefix: str = Field("gradserve:", description="Redis store: prefix of every key, so that "
                                  "several deployments can share one Redis database.")
    redis_cache_bytes: int = Field(64 * 1024 * 1024, ge=0, description="Redis store: per-process cache of "
                                   "deserialised session states, reused while the stored version is "
                                   "unchanged (0 disables it).")


@lru_cache
def get_settings() -> Settings:
    return Settings()
