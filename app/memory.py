"""Giving memory back after sessions end.

A session's arrays are freed when it is deleted or expires, but the process keeps the memory: the engine's
graphs hold reference cycles (a tensor's grad_fn and the node's saved tensors), which only the cyclic
collector frees, and the server raises its youngest generation's threshold and freezes the start-up heap
(``app.main``), so that collection comes late; and glibc's malloc keeps freed heap pages (of the main arena
and of each thread's arena: every thread-pool thread gets one) for reuse rather than returning them.

``limit_malloc_arenas`` caps glibc's arenas (``GRADSERVE_MALLOC_ARENAS``, 2) when the app is made, before
the thread pool's threads exist: with one arena per contending thread, memory freed under a multi-threaded
load stayed fragmented across them and was not returned (measured in the README).

``MemoryTrimmer`` is told (``released()``, from any thread, a plain flag) whenever sessions were deleted or
expired, and a task on the event loop then, at most every ``MIN_GAP`` seconds, collects garbage and calls
glibc's ``malloc_trim(0)`` in a worker thread; it also does so every ``interval`` seconds regardless
(states dropped from the Redis store's cache, responses' buffers). Measured in the README ("Limits and what
they protect").
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import time

log = logging.getLogger("gradserve")

#: At most one trim per this many seconds, however many sessions end
MIN_GAP = 1.0
#: How often the task looks at the flag
POLL = 0.25


#: mallopt's parameter number for the most malloc arenas (glibc's malloc.h: M_ARENA_MAX)
M_ARENA_MAX = -8


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def limit_malloc_arenas(count: int) -> bool:
    """At most ``count`` glibc malloc arenas (``mallopt(M_ARENA_MAX)``; glibc's default is 8 per core, and
    each thread-pool thread that meets contention gets its own, whose freed memory fragments and stays). For
    the threads that start from now on; 0 leaves the default. False where there is no glibc."""
    if count <= 0:
        return False
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, count))


def _malloc_trim():
    """glibc's ``malloc_trim``, or None (musl, macOS: nothing to call)."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class MemoryTrimmer:
    def __init__(self, interval: float):
        self.interval = interval
        self._malloc_trim = _malloc_trim()
        self._due = False
        self.trims = 0

    def released(self) -> None:
        """Sessions ended: trim soon. Any thread; costs a store of a flag."""
        self._due = True

    def trim(self) -> None:
        gc.collect()  # what frees the ended sessions' arrays (their graphs are cycles)
        if self._malloc_trim is not None:
            self._malloc_trim(0)  # and what hands the freed heap pages back
        self.trims += 1

    async def run(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(POLL)
            now = time.monotonic()
            if now - last < MIN_GAP:
                continue
            if self._due or (self.interval > 0 and now - last >= self.interval):
                self._due = False
                last = now
                try:
                    await asyncio.to_thread(self.trim)
                except Exception:  # noqa: BLE001 - never let memory housekeeping stop the server
                    log.warning("trimming memory failed", exc_info=True)
