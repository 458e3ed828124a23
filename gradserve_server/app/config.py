"""Service settings, read from the environment with the prefix ``GRADSERVE_``."""

from __future__ import annotations

import os
from functools import lru_cache

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Limits and session policy. Defaults are safe for a laptop."""

    model_config = SettingsConfigDict(env_prefix="GRADSERVE_", frozen=True)

    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1,
                                description="Largest accepted request body: 413 above, by Content-Length and by "
                                "counting streamed bytes.")
    max_elements_per_tensor: int = Field(4_000_000, ge=1, description="Largest tensor (elements) a request "
                                         "may send or create.")
    max_ops_per_request: int = Field(10_000, ge=1, description="Most ops in one op list.")
    max_repeat: int = Field(1000, ge=1, description="Largest `repeat` of an op list.")
    max_op_executions: int = Field(100_000, ge=1, description="Most op executions one request may ask for "
                                   "(ops x repeat), checked before anything runs.")
    max_nodes_per_session: int = Field(100_000, ge=1, description="Most autograd nodes alive in one session.")
    max_bytes_per_session: int = Field(256 * 1024 * 1024, ge=1, description="Most bytes of arrays one session holds "
                                       "at any point of a request: its tensors, graphs and gradients plus the "
                                       "request's intermediates, saved tensors, undo copies and records, counted as "
                                       "they are allocated (refused before the allocation where its size is known: "
                                       "creation, broadcasting, matmul, expand/repeat/cat/stack; otherwise passed by "
                                       "at most one tensor); 422 `limit_exceeded` naming it, nothing applied. "
                                       "`/eval` runs in a session of its own.")
    max_response_bytes: int = Field(128 * 1024 * 1024, ge=1, description="Most bytes of tensor data one "
                                    "response may carry (records x repeat, changed and returned tensors, "
                                    "autograd reports, tensor reads), estimated before it is built from element "
                                    "counts and the encoding (an upper bound: JSON 6-25 bytes per element, "
                                    "base64 4/3 of the raw bytes); 422 above, nothing applied.")
    request_deadline_seconds: float = Field(30.0, gt=0, description="Compute deadline of one request, checked "
                                            "between ops, in `repeat` and between the nodes of a backward pass (504 "
                                            "`deadline_exceeded` after it, nothing applied, the session's lock "
                                            "released).")
    max_heavy_requests: int = Field(default_factory=lambda: max(1, (os.cpu_count() or 2) - 1), ge=1,
                                    description="Heavy requests computing at once: op lists that do not run on the "
                                    "event loop, `/backward`, `/grad`, `/zero_grad`, SVG graphs. Light requests "
                                    "(health, readiness, reads, small op lists) never wait for them. A heavy request "
                                    "whose client disconnects is stopped at the engine's next check (499 `cancelled` "
                                    "in the log and metrics); default: one less than the number of CPUs, at least "
                                    "1 (a CPU stays with the event loop and light requests: on two cores a cheap "
                                    "request's p99 under heavy load was 4.8-8.5x its unloaded p99 with two slots, "
                                    "1.7-2.2x with one, and heavy throughput did not drop; `bench/mixedload.py`).")
    max_heavy_queue: int = Field(16, ge=0, description="Heavy requests waiting for a slot; beyond it 503 "
                                 "`server_busy` with Retry-After, and `/readyz` answers 503.")
    heavy_queue_wait_seconds: float = Field(10.0, gt=0, description="Longest wait for a heavy slot (503 "
                                            "`server_busy` after it).")
    heavy_nice: int = Field(10, ge=0, le=19, description="Niceness of the threads heavy requests run on (and of "
                            "the BLAS library's own threads, which only heavy work uses): the event loop and light "
                            "requests come first for the CPU; 0 turns it off. Raised once per thread, never "
                            "lowered again (that would need privileges).")
    plan_cache_entries: int = Field(256, ge=0, description="`/eval` and session op lists: most compiled plans "
                                    "(op lists recorded as kernel calls, replayed by later requests of the same "
                                    "structure) kept per API key (per client address on an open server: each "
                                    "has a cache of its own, which no other can observe or flush), least "
                                    "recently used out; 0 turns plans off.")
    plan_cache_bytes: int = Field(64 * 1024 * 1024, ge=0, description="Most bytes of compiled plans and "
                                  "per-op fragments per process, all keys together (measured: every object a "
                                  "plan or a fragment holds, its compiled code and its key included; they hold "
                                  "no tensor data); past it, the key holding the most gives back its least "
                                  "recently used first.")
    plan_cache_partitions: int = Field(64, ge=1, description="Most plan caches kept (one per API key, or per "
                                       "client address on an open server); the least recently used is dropped "
                                       "whole.")
    plan_record_after: int = Field(2, ge=1, description="`/eval` and session op lists: the run of an op list's "
                                   "structure that records its plan (1: the first; 2: the second, so a structure "
                                   "run once never pays for recording, which costs up to ~3x its cold run); loops "
                                   "(`repeat`) record on their first iteration, and so does a session list with a "
                                   "backward and an in-place update under no_grad (a training loop's iteration).")
    plan_segments: bool = Field(True, description="Session op lists: a training loop's list (a prefix under "
                                "no_grad, its forward and backward, its trailing dels) runs in segments, each "
                                "keyed on the session tensors it names and replayed on its own, so a client loop's "
                                "second request replays the forward and backward its first recorded; false: such a "
                                "list plans whole only (its loop replays from its third request).")
    plan_fragment_entries: int = Field(4096, ge=0, description="`/eval`: most per-op fragments kept per API key "
                                       "(per client address on an open server), in the key's plan cache, for "
                                       "composed runs (a list of 100+ ops without a plan runs from fragments of the "
                                       "op forms it repeats instead of op by op); their bytes count in "
                                       "`GRADSERVE_PLAN_CACHE_BYTES`; 0 turns composition off (such lists then run "
                                       "op by op). Counted in `/metrics` (`gradserve_plan_composed`, "
                                       "`_uncomposable`, `_fragment_hits`, `_fragment_misses`).")
    max_graph_render_nodes: int = Field(1000, ge=1, description="Most graph nodes drawn as SVG, DOT or Mermaid "
                                        "(422 `limit_exceeded` above; the JSON graph has no such limit).")
    graph_render_timeout_seconds: float = Field(5.0, gt=0, description="Longest Graphviz `dot` run for an SVG; "
                                                "after it (or if dot fails) the built-in layout is drawn.")
    max_sessions: int = Field(1000, ge=1, description="Most live sessions (429 above).")
    session_ttl_seconds: float = Field(3600.0, gt=0, description="Idle time after which a session expires "
                                       "(sliding: every access renews it).")
    inline_max_body_bytes: int = Field(2048, ge=0, description="Op lists (`/ops`, `/eval`) with bodies up to this "
                                       "size, at most `GRADSERVE_INLINE_MAX_OPS` ops of bounded cost and no `repeat` "
                                       "run on the event loop instead of the thread pool (a session only when it is "
                                       "free and its last run was quick and left small tensors); 0 turns this off.")
    inline_max_ops: int = Field(16, ge=0, description="Most ops in an op list run on the event loop.")
    sweep_interval_seconds: float = Field(60.0, gt=0, description="How often expired sessions are freed (they are "
                                          "also refused on access); with Redis, how often expired ids leave the "
                                          "session index.")

    # ----- security: keys, ownership, rate limits, CORS -----
    api_keys: SecretStr = Field(SecretStr(""), description="Comma-separated API keys, or `sha256:<hex>` digests of "
                                "keys (so that the keys themselves need not be in the environment). Empty: the "
                                "server is open. Only their SHA-256 digests are kept in memory.")
    max_sessions_per_key: int = Field(100, ge=1, description="Most live sessions one API key may own (429 "
                                      "above); with keys only.")
    rate_limit_per_second: float = Field(50.0, ge=0, description="Requests per second one API key may make: "
                                         "at most `rate_limit_burst` requests in any `burst / rate` seconds (a "
                                         "moving window), counted across every worker and replica with the Redis "
                                         "store; 0 disables it.")
    rate_limit_burst: int = Field(100, ge=1, description="Requests one key may make at once after a "
                                  "pause (the moving window holds this many).")
    metrics_require_key: bool = Field(False, description="Whether `/metrics` needs an API key too (it holds no "
                                      "tensor data, keys or session ids).")
    cors_allow_origins: str = Field("", description="Comma-separated origins allowed by CORS (`*` for any); "
                                    "empty: no CORS headers at all.")

    # ----- observability -----
    log_level: str = Field("INFO", description="Level of the JSON log lines on stderr.")
    access_log: bool = Field(True, description="One JSON line per request.")
    shutdown_grace_seconds: float = Field(30.0, ge=0, description="At shut-down, how long to wait for requests "
                                          "still running before the session store is closed.")

    # ----- deployment: where sessions live -----
    store_url: str = Field("memory://", description="`memory://` (sessions in this process; one worker only) or "
                           "`redis://[user:password@]host:port/db` (`rediss://` for TLS, `unix:///path.sock?db=0` "
                           "for a socket): sessions shared by every worker and replica.")
    workers: int = Field(1, ge=1, description="Worker processes serving this app, declared for the memory store's "
                         "start-up check: the memory store refuses to start above 1 (it also checks WEB_CONCURRENCY, "
                         "UVICORN_WORKERS and uvicorn's --workers).")
    lock_ttl_seconds: float = Field(10.0, gt=0, description="Redis store: how long a request's lock on a session "
                                    "lives without renewal; renewed every third of it while held, so it only matters "
                                    "when a process dies holding it (the session is then free again after at most "
                                    "this long).")
    lock_wait_seconds: float = Field(5.0, ge=0, description="How long a request waits for a session another request "
                                     "is using (Redis: changing); then 409 `session_busy` with `Retry-After` (so "
                                     "that requests for a busy session do not hold the thread pool's threads for a "
                                     "heavy request's whole deadline).")
    redis_key_prefix: str = Field("gradserve:", description="Redis store: prefix of every key, so that "
                                  "several deployments can share one Redis database.")
    redis_cache_bytes: int = Field(64 * 1024 * 1024, ge=0, description="Redis store: per-process cache of "
                                   "deserialised session states, reused while the stored version is "
                                   "unchanged (0 disables it).")

    # ----- fairness on an open server, slow clients, memory (issue 10) -----
    max_sessions_per_client: int = Field(100, ge=1, description="Without API keys: most live sessions created "
                                         "from one client address (429 session_quota_exceeded above). With keys "
                                         "the quota is per key (`max_sessions_per_key`).")
    client_rate_limit_per_second: float = Field(200.0, ge=0, description="Without API keys: requests per "
                                                "second one client address may make (a moving window of "
                                                "`client_rate_limit_burst` requests, across every worker and "
                                                "replica with the Redis store; 429 with Retry-After above); 0 "
                                                "disables it.")
    client_rate_limit_burst: int = Field(400, ge=1, description="Without API keys: requests one address "
                                         "may make at once after a pause.")
    auth_failures_per_minute: float = Field(10.0, ge=0, description="With API keys: wrong keys one client "
                                            "address may present per minute (after a burst of "
                                            "`auth_failures_burst`, across every worker and replica with the "
                                            "Redis store); past that its requests presenting a key get 429, "
                                            "except keys that were valid from that address before. 0 disables "
                                            "it.")
    auth_failures_burst: int = Field(10, ge=1, description="With API keys: wrong keys one address may present "
                                     "at once before the per-minute rate applies.")
    body_read_timeout_seconds: float = Field(30.0, gt=0, description="How long a request body may take to "
                                             "arrive in full (408 body_timeout after, and the connection is "
                                             "closed).")
    memory_trim_interval_seconds: float = Field(30.0, ge=0, description="How often freed heap memory is given "
                                                "back to the system (glibc `malloc_trim`), besides after every "
                                                "session deleted or expired; 0: only then.")
    malloc_arenas: int = Field(2, ge=0, description="Most glibc malloc arenas (`M_ARENA_MAX`), set when the "
                               "app starts: fewer arenas keep memory freed by thread-pool threads from staying "
                               "fragmented across them; 0 keeps glibc's default (8 per core).")
    malloc_mmap_threshold: int = Field(32 * 1024 * 1024, ge=0, description="glibc's `M_MMAP_THRESHOLD`, set "
                                       "when the app starts: arrays from this size (at most 32 MiB) get their "
                                       "own mapping, returned when freed; smaller ones come from the heap. 0 "
                                       "(with `malloc_trim_threshold` 0) keeps glibc's dynamic threshold.")
    malloc_trim_threshold: int = Field(128 * 1024 * 1024, ge=0, description="glibc's `M_TRIM_THRESHOLD`, set "
                                       "when the app starts: up to this many freed bytes at the top of each "
                                       "malloc arena's heap are kept for the next request instead of being "
                                       "returned and faulted in again (the periodic `malloc_trim` returns them "
                                       "regardless). 0 (with `malloc_mmap_threshold` 0) keeps glibc's dynamic "
                                       "threshold.")

@lru_cache
def get_settings() -> Settings:
    return Settings()
