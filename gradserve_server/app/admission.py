"""Heavy work: a bounded number of requests computing at once, a bounded queue for more, and a watcher that
stops a request's work when its client goes away.

Heavy: whatever runs the engine or Graphviz in the thread pool (op lists not run on the event loop, the
autograd endpoints, SVG graphs). Light requests (health, readiness, reads, small op lists run on the event
loop) never pass through here, so they keep answering while heavy ones run: heavy work runs on
``GRADSERVE_MAX_HEAVY_REQUESTS`` threads of its own, never the thread pool's. Beyond those, up to
``GRADSERVE_MAX_HEAVY_QUEUE`` requests wait in order (at most ``GRADSERVE_HEAVY_QUEUE_WAIT_SECONDS``); more
are answered 503 ``server_busy`` with ``Retry-After`` at once, and ``/readyz`` says the server is saturated.

Each admitted request computes under an ``engine.Control``: its deadline (``GRADSERVE_REQUEST_DEADLINE_SECONDS``
from admission) and a cancel flag, set when the ASGI receive channel reports ``http.disconnect``. The engine
checks both between ops and between backward nodes, so an abandoned request stops within one op, rolls back
and releases its session (and its slot) instead of computing for minutes.

Heavy work runs on threads of its own at a lower CPU priority (``GRADSERVE_HEAVY_NICE``, and the BLAS
library's pool, which only heavy work uses, at the same): under CPU contention the event loop, the light lane
and the reads come first. bench/mixedload.py: a cheap request's loaded p50 went from 17-29 ms to 7-12 ms on
two shared cores, its p99 from 2.7-8.4x to 1.9-3.9x its unloaded p99. Making heavy work give way to light
requests for the GIL as well (the engine waiting at its checks while a light request was served) measured no
better than this alone, and was removed.

Everything here runs on the event loop (plain counters, no locks).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from gradserve_server import engine
from gradserve_server.app.errors import REQUEST, ServerBusy
from gradserve_server.engine import CancelledError

DEADLINE_SETTING = "GRADSERVE_REQUEST_DEADLINE_SECONDS"
#: The light lane (``app.state.light``): cheap op lists that could not run on the event loop. Each is bounded
#: (at most ``GRADSERVE_INLINE_MAX_OPS`` ops of bounded cost on tensors of at most 65,536 elements, stopped
#: after ``service.LIGHT_DEADLINE_SECONDS``), so a few slots and a long queue serve them in milliseconds
LIGHT_SLOTS = 4
LIGHT_QUEUE = 256


def lower_priority(nice: int, tid: int | None = None) -> None:
    """Make a thread (this one by default) nicer; Linux schedules threads by their own niceness. Raising it
    needs no privilege; never undone (lowering it again would)."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    tid = threading.get_native_id() if tid is None else tid
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        if current < nice:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError:  # a thread gone meanwhile, a platform without per-thread niceness: nothing to do
        pass


def lower_native_pools(nice: int) -> int:
    """The threads no Python code started (a BLAS library's pool, started when numpy loads it), made nicer:
    only heavy work (matmul and its family, never run inline or in the light lane) hands work to them.
    Returns how many."""
    if nice <= 0 or not os.path.isdir("/proc/self/task"):
        return 0
    python = {t.native_id for t in threading.enumerate()}
    native = [int(tid) for tid in os.listdir("/proc/self/task") if int(tid) not in python]
    for tid in native:
        lower_priority(nice, tid)
    return len(native)


async def disconnected(request: Request) -> None:
    """Returns when the client has gone away (the body must have been read already)."""
    receive = request.receive
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class HeavyWork:
    def __init__(self, slots: int, queue: int, wait_seconds: float, deadline_seconds: float,
                 nice: int | None = None):
        #: ``nice`` given (the heavy lane: GRADSERVE_HEAVY_NICE), its requests run on threads of their own at that
        #: niceness (made at the first request, shut down by ``close`` at the app's shutdown, made again if the
        #: app serves after that: an app object may live through several lifespans); else (the light lane) in
        #: the thread pool
        self.nice = nice
        self._executor: ThreadPoolExecutor | None = None
        self.slots = slots
        self.queue = queue
        self.wait_seconds = wait_seconds
        self.deadline_seconds = deadline_seconds
        self.running = 0
        self._waiting: deque[asyncio.Future] = deque()
        self.refused = 0
        self.cancelled = 0
        #: request id -> the Control of a heavy request running now (its progress, for GET /v1/requests/...)
        self.active: dict[str, engine.Control] = {}

    @property
    def executor(self) -> ThreadPoolExecutor | None:
        if self.nice is None:
            return None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.slots, thread_name_prefix="gradserve-heavy",
                                                initializer=functools.partial(lower_priority, self.nice))
        return self._executor

    def close(self) -> None:
        """Shut the lane's threads down (the app's shutdown); a later request makes new ones."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    @property
    def queued(self) -> int:
        return len(self._waiting)

    @property
    def saturated(self) -> bool:
        return self.running >= self.slots and self.queued >= self.queue

    def stats(self) -> dict:
        return {"running": self.running, "queued": self.queued, "slots": self.slots, "queue": self.queue}

    def control(self) -> engine.Control:
        return engine.Control(self.deadline_seconds, setting=DEADLINE_SETTING)

    async def run(self, request: Request, fn: Callable[..., Any], *args, **kwargs) -> Any:
        """``fn(*args, control=..., **kwargs)`` in the thread pool once a slot is free."""
        watcher = asyncio.ensure_future(disconnected(request))
        try:
            await self._acquire(watcher)
            context = REQUEST.get()
            request_id = context["request_id"] if context is not None else None
            try:
                control = self.control()
                if request_id is not None:
                    self.active[request_id] = control
                if self.executor is None:
                    work = asyncio.ensure_future(run_in_threadpool(fn, *args, control=control, **kwargs))
                else:  # (the request's context variables go along, as run_in_threadpool's do)
                    call = functools.partial(contextvars.copy_context().run, fn, *args, control=control, **kwargs)
                    work = asyncio.get_running_loop().run_in_executor(self.executor, call)
                done, _ = await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
                if work not in done:
                    control.cancel("the client disconnected")
                    self.cancelled += 1
                    await asyncio.wait({work})  # it stops at its next check; the slot is free only then
                return work.result()
            finally:
                if request_id is not None:
                    self.active.pop(request_id, None)
                self._release()
        finally:
            watcher.cancel()

    async def _acquire(self, watcher: asyncio.Future) -> None:
        if self.running < self.slots and not self._waiting:
            self.running += 1
            return
        if len(self._waiting) >= self.queue:
            self.refused += 1
            raise ServerBusy(f"{self.running} heavy requests are running and {len(self._waiting)} waiting, the most "
                             f"this server takes (GRADSERVE_MAX_HEAVY_REQUESTS={self.slots}, "
                             f"GRADSERVE_MAX_HEAVY_QUEUE={self.queue}); retry later")
        slot = asyncio.get_running_loop().create_future()
        self._waiting.append(slot)
        try:
            await asyncio.wait({slot, watcher}, timeout=self.wait_seconds, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            self._abandon(slot)
            raise
        if not slot.done():
            self._abandon(slot)
            if watcher.done():
                raise CancelledError("the request was cancelled (the client disconnected while it waited for a "
                                     "heavy slot); nothing was applied")
            self.refused += 1
            raise ServerBusy(f"no heavy slot was free within {self.wait_seconds:g} s "
                             "(GRADSERVE_HEAVY_QUEUE_WAIT_SECONDS); retry later")
        # the slot was handed over by _release: running already counts it

    def _abandon(self, slot: asyncio.Future) -> None:
        if slot.done() and not slot.cancelled():
            self._release()  # handed over meanwhile: pass it on
            return
        slot.cancel()
        try:
            self._waiting.remove(slot)
        except ValueError:
            pass

    def _release(self) -> None:
        while self._waiting:
            slot = self._waiting.popleft()
            if not slot.done():
                slot.set_result(None)  # the slot passes to the next waiter: running is unchanged
                return
        self.running -= 1
