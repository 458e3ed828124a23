"""Giving memory back after sessions end.

A session's arrays are freed when it is deleted or expires, but the process keeps the memory: the engine's
graphs hold reference cycles (a tensor's grad_fn and the node's saved tensors), which only the cyclic
collector frees, and the server raises its youngest generation's threshold and freezes the start-up heap
(``app.main``), so that collection comes late; and glibc's malloc keeps freed heap pages (of the main arena
and of each thread's arena: every thread-pool thread gets one) for reuse rather than returning them.

``configure_malloc`` sets glibc's malloc up when the app is made (and ``bench/engine.py`` calls it too, so
that the benchmark measures the server's allocator):

- it caps glibc's arenas (``GRADSERVE_MALLOC_ARENAS``, 2), before the thread pool's threads exist: with one
  arena per contending thread, memory freed under a multi-threaded load stayed fragmented across them and
  was not returned (measured in docs/explanation/limits.md);
- it fixes the mmap threshold (``GRADSERVE_MALLOC_MMAP_THRESHOLD``, 32 MiB, glibc's largest) and the trim
  threshold (``GRADSERVE_MALLOC_TRIM_THRESHOLD``, 128 MiB). With glibc's dynamic defaults, a request's
  arrays of a few MiB come from the heap, and when the request ends and frees them all, more than twice
  the largest array is free at the heap's top, so ``free`` hands it all back to the system and the next
  request faults every page in again (zeroed by the kernel): the 1M-element chain of ``bench/engine.py``
  took ~22,400 page faults (88 MiB) per cold run, 2.7x numpy's time. With these, up to 128 MiB freed at the
  top of each arena's heap stays for the next request; arrays above 32 MiB are still mapped and unmapped on
  their own. ``MemoryTrimmer``'s ``malloc_trim(0)`` (after sessions end and every
  ``GRADSERVE_MEMORY_TRIM_INTERVAL_SECONDS``) returns what is kept regardless of the threshold, so an idle
  server gives it back. 0 leaves glibc's own (dynamic) behaviour; setting either fixes both (glibc stops
  adjusting them once one is set). Thresholds given to glibc itself (``MALLOC_MMAP_THRESHOLD_``,
  ``MALLOC_TRIM_THRESHOLD_``, or ``GLIBC_TUNABLES``) are left as they are.

``MemoryTrimmer`` is told (``released()``, from any thread, a plain flag) whenever sessions were deleted or
expired, and a task on the event loop then, at most every ``MIN_GAP`` seconds, collects garbage and calls
glibc's ``malloc_trim(0)`` in a worker thread; it also does so every ``interval`` seconds regardless
(states dropped from the Redis store's cache, responses' buffers). Measured in
docs/explanation/limits.md ("Memory comes back").
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import os
import time

log = logging.getLogger("gradserve")

#: At most one trim per this many seconds, however many sessions end
MIN_GAP = 1.0
#: How often the task looks at the flag
POLL = 0.25


#: mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
#: glibc refuses a larger M_MMAP_THRESHOLD on 64-bit systems (HEAP_MAX_SIZE / 2)
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def _mallopt():
    """glibc's ``mallopt``, or None (musl, macOS)."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    if mallopt is None:
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


def limit_malloc_arenas(count: int) -> bool:
    """At most ``count`` glibc malloc arenas (``mallopt(M_ARENA_MAX)``; glibc's default is 8 per core, and
    each thread-pool thread that meets contention gets its own, whose freed memory fragments and stays). For
    the threads that start from now on; 0 leaves the default. False where there is no glibc."""
    mallopt = _mallopt() if count > 0 else None
    return mallopt is not None and bool(mallopt(M_ARENA_MAX, count))


def set_malloc_thresholds(mmap_threshold: int, trim_threshold: int) -> bool:
    """Fix glibc's mmap threshold (allocations of at least this many bytes get their own mapping, returned
    when freed; at most ``MMAP_THRESHOLD_MAX``) and trim threshold (``free`` gives the heap's top back to the
    system once this much is free there). 0 for both leaves glibc's dynamic defaults; a 0 beside a value
    leaves that one at glibc's current value, but no longer adjusted. False where there is no glibc or it
    refused a value."""
    if mmap_threshold <= 0 and trim_threshold <= 0:
        return False
    mallopt = _mallopt()
    if mallopt is None:
        return False
    done = True
    if mmap_threshold > 0:
        done &= bool(mallopt(M_MMAP_THRESHOLD, min(mmap_threshold, MMAP_THRESHOLD_MAX)))
    if trim_threshold > 0:
        done &= bool(mallopt(M_TRIM_THRESHOLD, min(trim_threshold, 2**31 - 1)))
    return done


def thresholds_from_environment() -> bool:
    """Whether glibc was given an mmap or trim threshold through the environment (then it is glibc's)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return ("MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ
            or "malloc.mmap_threshold" in tunables or "malloc.trim_threshold" in tunables)


def configure_malloc(settings) -> str:
    """The process's malloc as the server runs it (``settings``: app.config.Settings): the arena cap and the
    thresholds. Returns what was set, for a log line or a benchmark's header."""
    arenas = limit_malloc_arenas(settings.malloc_arenas)
    environment = thresholds_from_environment()
    thresholds = not environment and set_malloc_thresholds(settings.malloc_mmap_threshold,
                                                           settings.malloc_trim_threshold)
    mib = 1024 * 1024
    if thresholds:
        mmap, trim = settings.malloc_mmap_threshold, settings.malloc_trim_threshold
        said = (f"mmap threshold {min(mmap, MMAP_THRESHOLD_MAX) / mib:g} MiB" if mmap > 0 else "",
                f"trim threshold {trim / mib:g} MiB" if trim > 0 else "")
        thresholds_said = ", ".join(filter(None, said))
    else:
        thresholds_said = "mmap/trim thresholds " + ("from the environment" if environment else "glibc's (dynamic)")
    return f"glibc malloc: arenas {'<= ' + str(settings.malloc_arenas) if arenas else 'default'}, {thresholds_said}"


def _malloc_trim():
    """glibc's ``malloc_trim``, or None (musl, macOS: nothing to call)."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


#: Net allocations of container objects between collections of the youngest generation (CPython: 700)
YOUNG_GC_THRESHOLD = 5000
#: Collections of the youngest generation between collections of the middle one (CPython: 10)
MIDDLE_GC_THRESHOLD = 100


def configure_gc():
    """The collector as the server runs it, undone by calling what this returns: what is loaded by now (the
    framework, the schemas, the engine's tables: ~90k objects) lives as long as the server; frozen, it is left
    out of the cyclic collector's full passes, which otherwise take tens of ms each, often enough under load to
    show in p99. And the youngest generation is collected after ``YOUNG_GC_THRESHOLD`` net allocations
    instead of 700: requests that await Redis keep their objects alive across collections, which at 700 ran
    several times per request batch (~5% of the Redis store's CPU per request; no change measured for the
    memory store), and a cold op list leaves ~8 container objects per op alive until it ends. The middle
    generation is collected after ``MIDDLE_GC_THRESHOLD`` young collections instead of 10: a cold op list's
    graph lives until the run ends, so every pass over it finds nothing (the engine's graphs are freed by
    reference counting), and at 10 the middle generation's passes (with the full passes every 10 of them)
    took 6-12% of a 10,000-op cold run (``bench/engine.py``'s scalar10k and rk4 rows; measured in the commit
    that set it). The cycles the engine does leave (a leaf and its AccumulateGrad node, a dropped session's)
    are collected by ``MemoryTrimmer`` when sessions end and every ``GRADSERVE_MEMORY_TRIM_INTERVAL_SECONDS``,
    whatever the thresholds. The app's lifespan calls it (undone at shutdown, so that an app made and
    dropped in a longer-lived process, the tests, leaves the collector as it found it), and so does
    ``bench/engine.py``."""
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, MIDDLE_GC_THRESHOLD, *thresholds[2:])

    def undo() -> None:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
    return undo


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
