"""What one run may take: a byte budget counted as memory is taken, a deadline, and cancellation.

``run_program`` installs a ``Budget`` for the ops it runs (a context variable, like grad mode: each thread
and task sees its own). Every array the run wraps in a Tensor is reported to it (``Budget.track``, from
``Tensor.__init__``): arrays of ``TRACK_MIN_BYTES`` and more are followed to their release through a weak
reference, so ``live`` is what the run holds right now (op results, intermediates, saved tensors,
gradients, the journal's undo copies, records, and garbage the cycle collector has not freed yet); smaller
ones are summed. Where a result's size is known before numpy allocates it (creation from sizes,
broadcasting, matmul, expand/repeat/cat/stack, the journal's copies, records) the op asks first
(``Budget.reserve``), so an allocation that would pass the budget is refused before it is made. A result
the size of its inputs is counted as it is wrapped: the budget can be passed by at most that one tensor,
itself bounded by the per-tensor element limit, before the run stops.

The running count is an upper bound (a view may be counted as if it were a copy, a freed small array stays
counted). Before anything is refused it is made exact: the arrays reachable from the session's names, the
run's namespace and the journal (``measure``), plus the followed arrays still alive, after a collection of
reference cycles if that is what it takes. So the estimate can only cost a measurement, never refuse a run
that fits.

``Control`` carries a request's deadline and cancel flag. The engine checks it between ops (``repeat``
included) and between the nodes of a backward pass: a monotonic clock read and two attribute loads.
Another thread may cancel it (the server does when the client disconnects).
"""

from __future__ import annotations

import contextvars
import gc
import time
import weakref
from collections.abc import Callable

import numpy as np

from .errors import CancelledError, DeadlineExceededError, LimitExceededError

#: Arrays at least this large are followed to their release; smaller ones are only summed
TRACK_MIN_BYTES = 4096

#: Arrays of at most this many elements are counted in the response at 25 bytes each plus 64
SMALL_RESPONSE_ELEMENTS = 256

_budget: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("gradserve_budget", default=None)


def current_budget() -> Budget | None:
    return _budget.get()


def counted_copy(arr: np.ndarray, what: str) -> np.ndarray:
    """``arr.copy()`` made inside a run's byte budget: refused before it allocates when it cannot fit, and
    followed while it lives (an array the engine copies outside a Tensor: an undo copy, an in-place op's saved
    old value)."""
    budget = _budget.get()
    if budget is None:
        return arr.copy()
    budget.reserve(arr.nbytes, what)
    copy = arr.copy()
    budget.track(copy)
    return copy


def current_control() -> Control | None:
    b = _budget.get()
    return None if b is None else b.control


class Control:
    """A request's deadline (``seconds`` from now) and cancel flag, checked by the engine."""

    __slots__ = ("deadline", "seconds", "reason", "setting", "done", "total", "started")

    def __init__(self, seconds: float | None = None, *, setting: str = ""):
        self.seconds = seconds
        self.started = time.monotonic()
        self.deadline = None if seconds is None else self.started + seconds
        self.reason: str | None = None
        self.setting = setting  # the setting's name, for the message
        # progress, read from another thread (the progress route): ops run of the ops the request will run
        self.done = 0
        self.total = 0

    def cancel(self, reason: str = "cancelled") -> None:
        """From any thread: the engine stops at its next check."""
        if self.reason is None:
            self.reason = reason

    @property
    def cancelled(self) -> bool:
        return self.reason is not None

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def check(self) -> None:
        if self.reason is not None:
            raise CancelledError(f"the request was cancelled ({self.reason}); nothing was applied")
        deadline = self.deadline
        if deadline is not None and time.monotonic() > deadline:
            where = f" ({self.setting})" if self.setting else ""
            raise DeadlineExceededError(f"the request ran past its deadline of {self.seconds:g} s{where}; "
                                        "nothing was applied")


class Budget:
    """Bytes a run holds against ``limits.max_bytes``; its response's bytes against
    ``limits.max_response_bytes``; its ``Control``."""

    def __init__(self, limits, *, held: int = 0, control: Control | None = None,
                 measure: Callable[[], dict[int, int]] | None = None,
                 response_size: Callable[[np.ndarray], int] | None = None):
        self.limits = limits
        self.max_elements = limits.max_elements_per_tensor
        self.max_bytes = limits.max_bytes
        self.max_response = limits.max_response_bytes
        self.held = held        # bytes not followed: what the session held, then what a measurement found
        self.live = 0           # followed arrays, alive now
        # max_bytes - held - live - (arrays under TRACK_MIN_BYTES since the last measurement): one number to
        # update and test per array
        self.room = self.max_bytes - held
        self.response = 0       # the response's bytes so far (records)
        #: a transform runs whose result the response will surely show (``program``): it checks its result's
        #: size against the response limit from the shapes, before any pass
        self.sending = False
        self.measurements = 0
        self.control = control
        self.measure = measure  # -> {id(array owning memory): nbytes} reachable now
        self.response_size = response_size
        self._refs: dict[int, weakref.KeyedRef] = {}
        self._token = None

    def __enter__(self):
        self._token = _budget.set(self)
        return self

    def __exit__(self, *exc):
        _budget.reset(self._token)
        self._refs.clear()  # the callbacks die with their references
        return False

    # ----- bytes ------------------------------------------------------------------------------------
    def total(self) -> int:
        return self.max_bytes - self.room

    def track(self, a: np.ndarray) -> None:
        """A new array of the run (after numpy made it)."""
        n = a.nbytes
        if n < TRACK_MIN_BYTES:
            room = self.room - n
            self.room = room
            if room < 0:
                self._settle(0, None)
            return
        base = a.base
        if base is None or base.__class__ is not np.ndarray:
            base = a
        key = id(base)
        if key in self._refs:
            return
        nb = base.nbytes
        self._refs[key] = weakref.KeyedRef(base, self._released, (key, nb))
        self.live += nb
        self.room -= nb
        if self.room < 0:
            self._settle(0, None)

    def _released(self, ref) -> None:
        key, nb = ref.key
        if self._refs.get(key) is ref:
            del self._refs[key]
            self.live -= nb
            self.room += nb

    def reserve(self, nbytes: int, what: str | None = None) -> None:
        """Before numpy allocates ``nbytes``: refuse if they cannot fit."""
        if nbytes > self.room:
            self._settle(nbytes, what)

    def _settle(self, incoming: int, what: str | None) -> None:
        """The running count says the budget is passed: measure, collect cycles if needed, then refuse."""
        for attempt in range(2):
            if self.measure is not None:
                self.measurements += 1
                reach = self.measure()
                refs = self._refs
                self.held = sum(nb for key, nb in reach.items() if key not in refs)
                self.room = self.max_bytes - self.held - self.live  # small arrays: measured, or gone
            total = self.max_bytes - self.room + incoming
            if total <= self.max_bytes:
                return
            if attempt == 0:
                gc.collect()  # reference cycles awaiting the collector hold memory the count includes
        name = self.limits.setting("max_bytes")
        if incoming and what:
            raise LimitExceededError(f"{what} needs {incoming} bytes, which would bring the tensors this "
                                     f"session holds to {total} bytes; the limit is {self.max_bytes} bytes"
                                     f"{name}; nothing was applied")
        raise LimitExceededError(f"the tensors this session holds would take {total} bytes (this request's "
                                 f"intermediates included); the limit is {self.max_bytes} bytes{name}; "
                                 f"nothing was applied")

    # ----- the response -----------------------------------------------------------------------------
    def _response_bytes(self, arr: np.ndarray) -> int:
        n = arr.size
        if n <= SMALL_RESPONSE_ELEMENTS:
            return 25 * n + 64  # enough for any encoding of a small array, without asking
        return self.response_size(arr) if self.response_size is not None else arr.nbytes

    def respond_ahead(self, shapes, what: str) -> None:
        """Refuse, before they are computed, arrays of these (shape, dtype) the response will carry (counted
        again when it does: nothing is added here)."""
        if self.max_response is None:
            return
        size = self.response
        for shape, dtype in shapes:  # (a broadcast zero: the shape and dtype without the memory)
            size += self._response_bytes(np.broadcast_to(np.zeros((), dtype), shape))
        if size > self.max_response:
            raise LimitExceededError(f"{what} would carry about {size} bytes of tensor data; the limit "
                                     f"is {self.max_response} bytes{self.limits.setting('max_response_bytes')}"
                                     "; nothing was applied")

    def respond(self, arr: np.ndarray | None, what: str = "the response") -> None:
        """Count an array the response will carry (before it is copied or encoded)."""
        if arr is None or self.max_response is None:
            return
        self.response += self._response_bytes(arr)
        if self.response > self.max_response:
            raise LimitExceededError(f"{what} would carry about {self.response} bytes of tensor data; the limit "
                                     f"is {self.max_response} bytes{self.limits.setting('max_response_bytes')}"
                                     "; nothing was applied")

    # ----- time -------------------------------------------------------------------------------------
    def check(self) -> None:
        c = self.control
        if c is not None:
            c.check()
