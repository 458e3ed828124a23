"""The recorder: one server session, the ops recorded and not yet sent, and the one request that sends them.

Ops are recorded as the HTTP API's own op objects (``{"op", "args", "kwargs", "out", "no_grad"}``) and sent
as ONE ``POST /v1/sessions/{id}/ops`` when a value is needed (``flush``). The request names what it wants
back in ``return``: the tensors asked for, plus what is cheap and likely to be read next (see
``_prefetch``): the gradients of leaves that require grad (bound to names with ``bind``, so that a handle
is the gradient tensor itself) and the small tensors this request made whose handles are still alive.

Names of handles the program dropped are released with a ``del`` op at the end of the next request.

Op lists are atomic: when op ``i`` of a request fails, nothing of it was applied. The recorder then sends
ops ``0..i-1`` again, so that the session holds what eager torch would hold when the failing line raised;
ops from ``i`` on are dropped and the handles they would have made are marked as never computed. The
exception raised is the torch class with torch's message, and its traceback ends at the user's line that
recorded op ``i``.
"""

from __future__ import annotations

import atexit
import contextvars
import itertools
import logging
import os
import re
import sys
import threading
import time
import traceback
import types
import warnings
import weakref

from gradserve.errors import ProblemError, SessionLostError, is_ours, torch_error, user_traceback
from gradserve.http import Client
from gradserve.torch._meta import _tensor_class

_PACKAGE = __name__.split(".")[0] + "."
log = logging.getLogger("gradserve")
#: problems that fail a whole request, whatever op it had reached: nothing of it is applied
WHOLE_REQUEST = frozenset({"deadline_exceeded", "cancelled", "body_too_large"})
#: settings that bound one request: syncing more often (smaller requests) keeps under them
PER_REQUEST = frozenset({"GRADSERVE_REQUEST_DEADLINE_SECONDS", "GRADSERVE_MAX_OPS_PER_REQUEST",
                         "GRADSERVE_MAX_BODY_BYTES", "GRADSERVE_MAX_OP_EXECUTIONS", "GRADSERVE_MAX_RESPONSE_BYTES"})


def user_frame(start=None):
    """The innermost frame outside this package: the user's line. ``start``: a frame the walk may start from (a
    frame of this package's call chain): each frame the walk reads of a call in progress is made into a frame object,
    so a caller that took its own caller's frame saves the frames between (in a loop, most of a recorded op's cost
    of finding its line)."""
    f = sys._getframe(1) if start is None else start
    ours = _OURS
    while f is not None:
        code = f.f_code
        known = ours.get(id(code))
        if known is None:
            if len(ours) >= 4096:  # (a program that execs new code objects: start over)
                ours.clear()
            known = ours[id(code)] = (code, f.f_globals.get("__name__", "").startswith(_PACKAGE))
        if not known[1]:
            return f
        f = f.f_back
    return None


def line_of(code: types.CodeType, lasti: int) -> int:
    """The line of the instruction at offset ``lasti`` of ``code`` (a frame's ``f_lineno`` when its ``f_lasti`` was
    ``lasti``): a site keeps the offset and its line is found when a failure needs it (``f_lineno`` reads the
    code's line table from its start: in a loop at a long module's top level, most of an op's recording)."""
    for start, end, line in code.co_lines():
        if start <= lasti < end and line is not None:
            return line
    return code.co_firstlineno


#: per code object, by its id: (the code object, is it this package's?) (record asks on every op, for each frame up to
#: the user's). By id: a code object's hash is worked out anew each time from its bytecode, constants and names (a
#: long module's: most of an op's recording); the code object is held, so that its id names no other while kept.
_OURS: dict = {}


def user_stacklevel() -> int:
    """``warnings.warn``'s stacklevel that points at the user's line, for a warning given by the caller."""
    f, level = sys._getframe(1), 1
    while f is not None and f.f_globals.get("__name__", "").startswith(_PACKAGE):
        f, level = f.f_back, level + 1
    return level


class Storage:
    """What handles that may share memory on the server share: in-place changes bump ``version``, which
    invalidates every cached view of them. ``is_grad``: a gradient, changed in place by backward too.
    ``memory``: a count of in-place changes shared with the detached aliases of these handles (``w.detach()``
    shares ``w``'s values, not its autograd facts: a change through it invalidates ``w``'s values only)."""

    __slots__ = ("version", "is_grad", "memory", "root", "shared")

    def __init__(self, is_grad: bool = False, memory: list | None = None):
        self.version = 0
        self.is_grad = is_grad
        self.memory = [0] if memory is None else memory
        self.root = None  # (the name of the handle made with it, whose views follow its requires_grad; None: not known)
        self.shared = False  # (another handle was made with it: a view, a piece)


class HandleRef(weakref.ref):
    """A weak reference to a handle that knows the handle's name (set after it is made: a Python-level
    ``__new__``/``__init__`` pair tripled the cost of a recorded op's handle): its callback releases the name."""

    __slots__ = ("name",)


def handle_ref(handle, callback, name: str) -> HandleRef:
    ref = HandleRef(handle, callback)
    ref.name = name
    return ref


class _ThreadRecorder:
    """One thread's part of a context: the ops it recorded and has not sent, whether it is tracing or in a
    dual level, and the error of its ops when another thread sent them and they failed (raised in this
    thread at its next op or read)."""

    __slots__ = ("pending", "sites", "made", "tracing", "dual_depth", "lock", "error")

    def __init__(self):
        self.pending: list[dict] = []
        self.sites: list = []
        self.made: list[tuple] = []
        self.tracing = self.dual_depth = 0
        self.lock = threading.Lock()  # the three lists change together (another thread may send them)
        self.error: BaseException | None = None


#: ops that change the .grad of leaves when they run
_CHANGES_GRADS = frozenset({"backward", "zero_grad", "set_grad"})


def _per_thread(field: str) -> property:
    return property(lambda self: getattr(self.recorder(), field),
                    lambda self, value: setattr(self.recorder(), field, value),
                    doc=f"The calling thread's ``{field}`` (see _ThreadRecorder).")


class Context:
    """One server session and its recorder. Created lazily by the first op; ``close()`` sends what is
    pending and deletes the session.

    Threads share the session and its names; each records into its own op list (``recorder()``), so that
    torch's multithreaded pattern (threads each running forward and backward) works. Requests go one at a
    time (``lock``); a request first sends what other threads recorded and have not sent (each their own
    request), so that every op recorded before a read is applied when the read is answered, as in eager
    torch."""

    pending = _per_thread("pending")
    sites = _per_thread("sites")
    made = _per_thread("made")
    tracing = _per_thread("tracing")
    dual_depth = _per_thread("dual_depth")

    def __init__(self, url: str | None = None, api_key: str | None = None, client: Client | None = None):
        self._local = threading.local()
        self.lock = threading.RLock()                # one request at a time
        self.owners: dict[str, _ThreadRecorder] = {}  # name -> the recorder whose unsent op makes it
        self._recorders: list[_ThreadRecorder] = []
        self.client = client or Client(url, api_key)
        self.session_id: str | None = None
        self.pending: list[dict] = []
        self.sites: list[tuple] = []               # per pending op: (frame, lasti, None) of the user's line, seq
        self.made: list[tuple] = []                # per pending op: weakrefs of the handles it makes
        self.released: list[str] = []              # names of dropped handles, to `del` with the next request
        self.refs: dict[str, HandleRef] = {}      # name -> weak reference to its live handle
        self.grad_epoch = 0                        # +1 when any .grad may have changed (backward, ...)
        self.failures = 0                          # +1 per failed request
        self.closed = False
        self.tracing = 0                           # >0 while a function for autograd.functional is traced
        self.dual_depth = 0                        # >0 inside `with forward_ad.dual_level():`
        self.maybe_unbound: set[str] = set()       # names an op may leave unbound (unpack_dual's tangent)
        self.grad_level = "meta"                   # the view level of prefetched gradients (``_prefetch``)
        self._names = itertools.count(1)
        self._seq = itertools.count()              # recording order across threads (the 4th field of a site)
        self._on_drop = self._dropped              # (the bound method, made once: every new handle's callback)
        _LIVE.add(self)  # closed at exit: what is pending is sent (its errors raised), the session deleted

    def recorder(self) -> _ThreadRecorder:
        """The calling thread's recorder."""
        rec = getattr(self._local, "recorder", None)
        if rec is None:
            rec = self._local.recorder = _ThreadRecorder()
            self._recorders.append(rec)  # kept after its thread ends: its unsent ops are sent by the next request
            if len(self._recorders) == 2:  # (a second thread: gradients are bound to names of their own)
                self.materialize_all()
        return rec

    def _send_others(self) -> None:
        """Send, in the order they were recorded, the ops other threads recorded before this call and have not
        sent (under ``lock``): each run of one thread's ops as a request of its own, so that a failure is
        raised in the thread that recorded the op (kept for it; raised here if it is this thread's). What is
        left is this thread's pending list, sent next with the read."""
        mine = self.recorder()
        cutoff = next(self._seq)  # ops recorded after this call began need not go before this thread's read
        while True:
            heads = []
            for i, rec in enumerate(list(self._recorders)):
                with rec.lock:
                    if rec.pending and rec.sites[0][3] < cutoff:
                        heads.append((rec.sites[0][3], i, rec))
            if not heads or (len(heads) == 1 and heads[0][2] is mine):
                return
            heads.sort(key=lambda head: head[0])
            first, following = heads[0][2], heads[1][0] if len(heads) > 1 else cutoff
            with first.lock:
                limit = next((k for k, site in enumerate(first.sites) if site[3] > following), len(first.sites))
            if first is mine:
                self._send({}, limit)  # this thread's ops that others' ops read: its errors are raised here
                continue
            self._local.recorder = first
            try:
                self._send({}, limit)
            except Exception as exc:  # noqa: BLE001 - raised in the thread that recorded the op
                if first.error is None:  # (the first failure; what follows from it fails too)
                    first.error = exc
            finally:
                self._local.recorder = mine

    def raise_thread_error(self, rec: _ThreadRecorder | None = None) -> None:
        """Raise (once) the error of this thread's ops that another thread sent, if they failed."""
        rec = rec or self.recorder()
        if rec.error is not None:
            error, rec.error = rec.error, None
            raise error

    # ----- names and handles --------------------------------------------------------------------------
    def fresh_name(self) -> str:
        return f"_t{next(self._names)}"

    def adopt(self, handle) -> None:
        """Track a new handle: its name is released when it is dropped."""
        name = handle._name
        ref = HandleRef(handle, self._on_drop)
        ref.name = name
        self.refs[name] = ref

    def _dropped(self, ref: HandleRef) -> None:
        if self.refs.get(ref.name) is ref:  # (not a handle of a lost session)
            del self.refs[ref.name]
            if "." not in ref.name:  # (a leaf's gradient under its ``x.grad`` name: nothing bound to release)
                self.released.append(ref.name)

    # ----- gradients under their leaf's name --------------------------------------------------------------
    # A leaf's gradient the client fetches (``_prefetch``: the ``.grad`` of every parameter after a backward) is a
    # handle named ``x.grad``, as the raw API names it: nothing is bound for it, and ops read it by that name (an
    # optimizer's step is then the list a hand-written loop sends). That name stays right while the leaf's
    # gradient is that tensor. Before an op that may replace it is recorded (``zero_grad`` to None, ``x.grad =``,
    # a backward with create_graph), or when the leaf's own name is released, a handle still held under it is
    # bound to a name of its own (``bind``, where the raw API would bind it): ``materialize``. With more than one
    # recording thread, gradients are bound at once, as before.
    def aliasing(self) -> bool:
        """Gradients may be handles named ``x.grad`` (one recording thread, not tracing, no dual level)."""
        return len(self._recorders) <= 1 and not self.tracing and not self.dual_depth

    def materialize(self, alias: str, returns: dict[str, str] | None = None) -> None:
        """Bind the live handle named ``alias`` (``x.grad``), if any, to a name of its own (and ask a read's
        ``returns`` for it under that name)."""
        ref = self.refs.get(alias)
        handle = ref() if ref is not None else None
        if handle is None:
            return
        name = self._rename(handle, self.fresh_name())
        self.record({"op": "bind", "args": [alias], "out": name}, (handle,))
        if returns is not None and alias in returns:
            returns[name] = returns.pop(alias)

    def _rename(self, handle, name: str) -> str:
        """Track ``handle`` under ``name`` instead of its own."""
        del self.refs[handle._name]
        handle._name = name
        self.refs[name] = handle_ref(handle, self._dropped, name)
        return name

    def _unbound(self, op: dict, refs: tuple) -> bool:
        """A ``bind`` of a gradient that ``materialize`` recorded and the server did not apply: its handle takes its
        leaf's name again (the op it preceded, which would have replaced the gradient, was not applied either)."""
        alias = op["args"][0]
        handle = refs[0]() if len(refs) == 1 else None
        if handle is None or not isinstance(alias, str) or "." not in alias or handle._name != op["out"] or \
                not self.aliasing() or self.handle(alias) is not None:
            return False
        self._rename(handle, alias)
        return True

    def materialize_all(self, returns: dict[str, str] | None = None) -> None:
        """``materialize`` every gradient handle held under its leaf's name (a read's ``returns`` renamed)."""
        for alias in [n for n in self.refs if "." in n]:
            self.materialize(alias, returns)

    def grads_read(self) -> dict[str, str]:
        """The program reads a gradient's values: from now on prefetched gradients come with theirs (``_prefetch``);
        returns the gradient handles held under their leaf's name whose values are not known, to ask for now."""
        self.grad_level = "auto"
        asks = {}
        for name, ref in list(self.refs.items()):  # (a handle dropped meanwhile leaves it: a copy)
            handle = ref() if "." in name else None
            if handle is not None and handle._error is None and handle._array is None:
                asks[name] = "auto"
        return asks

    def handle(self, name: str):
        """The live handle named ``name``, or None."""
        ref = self.refs.get(name)
        return ref() if ref is not None else None

    def session(self) -> str:
        if self.closed:
            raise RuntimeError("gradserve: this session is closed")
        if self.session_id is None:
            self.session_id = self.client.create_session()["id"]
        return self.session_id

    # ----- recording ----------------------------------------------------------------------------------
    def _recording(self, frame=None) -> tuple[_ThreadRecorder, tuple]:
        """The calling thread's recorder (its other thread's error raised first) and the user's line (looked for
        from ``frame`` on, when given): an op's site without its sequence number."""
        if self.closed:
            raise RuntimeError("gradserve: this session is closed")
        f = user_frame(frame)
        rec = self.recorder()
        if rec.error is not None:
            self.raise_thread_error(rec)
        return rec, ((f, f.f_lasti, None) if f is not None else (None, 0, 0))

    def record(self, op: dict, made: tuple = (), frame=None, adopt: bool = False) -> int:
        """Append an op; ``made``: the handles it binds; ``frame``: where to look for the user's line from (a frame of
        the caller's chain); ``adopt``: ``made`` are new handles, tracked here (``adopt``, inline). Returns its index in
        the pending list."""
        if adopt:
            for h in made:
                ref = self.refs[h._name] = HandleRef(h, self._on_drop)
                ref.name = h._name
        if self.closed:  # (``_recording``, inline: every op is recorded here)
            raise RuntimeError("gradserve: this session is closed")
        f = user_frame(frame)
        rec = getattr(self._local, "recorder", None) or self.recorder()
        if rec.error is not None:
            self.raise_thread_error(rec)
        with rec.lock:
            rec.pending.append(op)
            rec.sites.append((f, f.f_lasti, None, next(self._seq)) if f is not None else
                             (None, 0, 0, next(self._seq)))
            if len(made) == 1:  # (an op's one result, the common case)
                name = made[0]._name
                rec.made.append((self.refs[name],))
                self.owners[name] = rec
            elif made:
                refs, owners = self.refs, self.owners
                rec.made.append(tuple([refs[h._name] for h in made]))
                for h in made:
                    owners[h._name] = rec
            else:
                rec.made.append(())
            return len(rec.pending) - 1

    def record_all(self, ops: list[dict]) -> None:
        """``record`` each of ``ops`` (which make no handles), from one user line."""
        rec, site = self._recording()
        with rec.lock:
            rec.pending.extend(ops)
            rec.sites.extend([(*site, next(self._seq)) for _ in ops])
            rec.made.extend([()] * len(ops))

    # ----- sending ------------------------------------------------------------------------------------
    def flush(self, returns: dict[str, str] | None = None, deferrable: bool = False) -> dict:
        """Send the pending ops (and ``del`` of released names) as one request; ``returns`` maps names to
        view levels. Returns the response (``{}`` when there was nothing to send or ask).

        While a function is traced nothing can be sent; inside a dual level a ``deferrable`` send (one made
        only to raise errors early, as ``backward``'s) waits for the level's exit, and any other raises."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        rec = getattr(self._local, "recorder", None) or self.recorder()  # (its fields read once, not as properties)
        if rec.tracing:
            raise RuntimeError("gradserve: a function given to torch.autograd.functional, or a custom "
                               "autograd.Function's forward or backward, is traced into one op list: it cannot read "
                               "tensor values or metadata the client does not know yet, nor call backward (use "
                               "torch.autograd.grad)")
        if rec.error is not None:
            self.raise_thread_error(rec)
        if rec.dual_depth:
            if deferrable:
                return {}
            with self.lock:
                return self._flush_in_dual_level(dict(returns or {}))
        with self.lock:
            if len(self._recorders) > 1:
                self._send_others()
            return self._send(dict(returns or {}))

    def _flush_in_dual_level(self, returns: dict[str, str]) -> dict:
        """A read inside ``with dual_level():``. A dual level lives within one op list on the server, so the level
        is closed at the end of this request and opened again at the start of the next: before the exit every live
        handle's tangent is unpacked into a name of its own (only the server knows which tensors have one), and
        the next request re-enters the level and makes each of those tensors dual again with its tangent (the
        name rebound to the dual tensor). The tangents of the handles read come back too, for ``repr``."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        probes = []
        self.materialize_all(returns)  # (each name below is unpacked and may be rebound: a name of its own)
        for name, ref in list(self.refs.items()):
            handle = ref()
            if handle is None or handle._error is not None or name in self.maybe_unbound:
                continue
            primal, tangent = self.fresh_name(), self.fresh_name()
            self.pending.append({"op": "unpack_dual", "args": [name], "out": [primal, tangent]})
            self.sites.append((None, 0, 0, next(self._seq)))
            self.made.append(())
            probes.append((len(self.pending) - 1, name, primal, tangent))
        self.pending.append({"op": "exit_dual_level"})
        self.sites.append((None, 0, 0, next(self._seq)))
        self.made.append(())
        for _, name, _, tangent in probes:
            if name in returns:
                returns[tangent] = "full"
        response = self._send(returns)
        self.record({"op": "enter_dual_level"})
        outcomes = response.get("ops", [])
        unbind = [p for _, _, p, _ in probes]
        for index, name, _, tangent in probes:
            bound = outcomes[index]["bound"] if index < len(outcomes) else []
            handle = self.handle(name)
            if tangent in bound:  # (the handle keeps the view it has: the same values)
                self.record({"op": "make_dual", "args": [name, tangent], "out": name})
            if handle is not None and name in returns:
                handle._dual_tangent = (self.failures, response["tensors"].get(tangent) if tangent in bound else None)
            unbind.append(tangent)
        self.released.extend(unbind)
        return response

    def _send(self, returns: dict[str, str], limit: int | None = None) -> dict:
        """Send the calling thread's pending ops (the first ``limit`` of them) with ``returns`` (see ``flush``)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        for name in self.released:  # (a leaf dropped while a handle of its gradient lives under its name)
            if name + ".grad" in self.refs:
                self.materialize(name + ".grad", returns)
        prefetched = self._prefetch(returns)
        rec = self.recorder()
        with rec.lock:
            if limit is None or limit >= len(rec.pending):
                pending, sites, made = rec.pending, rec.sites, rec.made
                rec.pending, rec.sites, rec.made = [], [], []
                if len(self._recorders) <= 1:  # (every name in owners is this recorder's)
                    self.owners.clear()
                else:
                    for name in [n for n, owner in list(self.owners.items()) if owner is rec]:
                        del self.owners[name]
            else:
                pending, sites, made = rec.pending[:limit], rec.sites[:limit], rec.made[:limit]
                del rec.pending[:limit], rec.sites[:limit], rec.made[:limit]
                for refs in made:
                    for ref in refs:
                        if self.owners.get(ref.name) is rec:
                            del self.owners[ref.name]
        # a name an unsent op makes or reads (another thread's, or this thread's not sent now) is released
        # after that op is sent
        dropped, self.released = self.released, []
        if self.owners or len(self._recorders) > 1:
            held = self._held_by_unsent() if len(self._recorders) > 1 else ()
            released = [n for n in dropped if n not in self.owners and n not in held]
            self.released.extend(n for n in dropped if n in self.owners or n in held)
        else:  # (nothing unsent: every dropped name goes)
            released = dropped
        ops = pending + ([{"op": "del", "args": released}] if released else [])
        if not ops and not returns:
            return {}
        started = time.perf_counter()
        try:
            response = self.client.run_ops(self.session(), ops, returns=returns, encoding="base64", fast_json=True)
        except ProblemError as exc:
            self.released.extend(released)
            if exc.code == "session_not_found" and self.session_id is not None:
                self._session_lost(exc, pending, made)
            self._failed(exc, pending, sites, made)
        except BaseException as exc:
            self.released.extend(released)
            self._lost(pending, made, "the request that carried it did not complete")
            if isinstance(exc, ConnectionError) and self.session_id is not None:
                exc.add_note(f"gradserve: session {self.session_id} held {self._tensor_names()}; if the server "
                             "stopped, they are gone")
            raise
        if len(self._recorders) > 1 and any(op["op"] in _CHANGES_GRADS for op in pending):
            # another thread may have cached a .grad between this op's recording and now: stale from here on
            self.grad_epoch += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug("sync: %d ops sent, %d tensors asked for, %.1f ms", len(ops), len(returns),
                      (time.perf_counter() - started) * 1e3)
        self._check_bound(response["ops"], pending, made)
        if self.maybe_unbound:
            bound = {n for outcome in response["ops"] for n in outcome["bound"]}
            self.maybe_unbound -= bound
        for name, view in response["tensors"].items():
            handle = self.handle(name)
            if handle is not None and view is not None:
                handle._set_view(view)
        for owner, grad in prefetched:
            view = response["tensors"].get(f"{owner._name}.grad")
            if view is not None and grad._view is not view:  # (not set above, under its name)
                grad._set_view(view)
            owner._known_grad = (self.grad_epoch, grad if view is not None else None)
        if response["warnings"]:
            level = user_stacklevel()
            for message in response["warnings"]:
                warnings.warn(message, UserWarning, stacklevel=level)
        return response

    def _held_by_unsent(self) -> set[str]:
        """The names that unsent ops read: not deleted before those ops are sent (a handle dropped after its
        last use was recorded, while another thread's request was in flight)."""
        held: set[str] = set()

        def walk(value) -> None:
            if isinstance(value, str):
                held.add(value.partition(".")[0])  # (``_t2.grad`` reads _t2)
            elif isinstance(value, (list, tuple)):
                for v in value:
                    walk(v)
            elif isinstance(value, dict):
                for v in value.values():
                    walk(v)

        for rec in list(self._recorders):
            if rec.pending:
                with rec.lock:
                    for op in rec.pending:
                        walk(op.get("args"))
                        walk(op.get("kwargs"))
        return held

    def _prefetch(self, returns: dict[str, str]) -> list[tuple]:
        """Add what a request should bring back besides ``returns``: the ``.grad`` of every live leaf that
        requires grad whose gradient is not known (a handle named ``x.grad``, see ``materialize``; bound to a new name
        with more than one recording thread), at ``grad_level``: ``meta`` (whether there is one, its metadata)
        until the program reads a gradient's values, ``auto`` from then on (data for small tensors: a training loop
        that only steps with its gradients is not sent their values every iteration, one that prints them reads
        them from what came back); and, at the ``auto`` level (data only for small tensors), live handles made by
        the pending ops whose view is not known."""
        Tensor = _tensor_class()
        epoch = self.grad_epoch
        for refs in self.made:
            for ref in refs:
                handle = ref()
                if handle is None:
                    continue
                s = handle._storage  # (``_stamp()``, inline)
                if handle._view_stamp != (s.version, epoch if s.is_grad else 0) or "name" not in handle._view \
                        and handle._array is None:  # (a view the client inferred, values unknown)
                    returns.setdefault(handle._name, "auto")
        prefetched = []
        mine = self.recorder()
        aliasing = len(self._recorders) <= 1 and not mine.tracing and not mine.dual_depth  # (``aliasing()``)
        owners = self.owners
        for ref in list(self.refs.values()):
            handle = ref()
            if handle is not None and handle._param and handle._error is None and not (
                    handle._known_grad is not None and handle._known_grad[0] == epoch) \
                    and (not owners or owners.get(handle._name, mine) is mine):  # (not another thread's unsent leaf)
                alias = f"{handle._name}.grad"
                grad = self.handle(alias) if aliasing else None  # (one held already: still that gradient)
                if grad is None:
                    grad = Tensor._alias_grad(self, handle) if aliasing else Tensor._bound_grad(self, handle)
                prefetched.append((handle, grad))
                returns.setdefault(alias, self.grad_level)
        return prefetched

    def _check_bound(self, outcomes: list[dict], pending: list[dict], made: list[tuple]) -> None:
        """A handle whose op bound other names (an op the client took for one-output returned several)."""
        for outcome, op, refs in zip(outcomes, pending, made):
            if not refs:  # (no handle to mark: most ops of a loop, in-place ones)
                continue
            out = op.get("out")
            bound = outcome["bound"]
            if isinstance(out, str) and op["op"] != "bind" and (len(bound) != 1 or bound[0] != out):
                for ref in refs:
                    handle = ref()
                    if handle is not None:
                        handle._error = RuntimeError(
                            f"gradserve: {op['op']} bound {outcome['bound']} where one tensor was expected; "
                            f"call it through gradserve.Client to get every output")

    def _lost(self, ops: list[dict], made: list[tuple], why: str, cause: BaseException | None = None) -> None:
        """``ops`` were not applied: their results are errors, and what the client inferred of the tensors they
        name (an in-place op's target, a flag set) is stale; the facts of the others stay true."""
        self.failures += 1
        self.grad_epoch += 1
        for op in ops:
            if not _changes_its_arguments(op["op"]):
                continue
            for name in _names(op):
                ref = self.refs.get(name)
                handle = ref() if ref is not None else None
                if handle is not None:
                    handle._storage.version += 1
        for op, refs in zip(ops, made):
            if op["op"] == "bind" and self._unbound(op, refs):
                continue
            for ref in refs:
                handle = ref()
                if handle is not None:
                    error = RuntimeError(f"gradserve: this tensor was never computed: its op ({op['op']}) was not "
                                         f"applied ({why})")
                    error.__cause__ = cause
                    handle._error = error

    def _tensor_names(self) -> str:
        """The live handles of this context, by the names the user's variables give them."""
        names = _variable_names(self)
        unnamed = sum(1 for ref in self.refs.values() if ref() is not None) - len(names)
        listed = ", ".join(names) if names else "no tensor bound to a variable here"
        return f"{listed}" + (f" (and {unnamed} more tensors)" if unnamed > 0 else "")

    def _session_lost(self, exc: ProblemError, pending: list[dict], made: list[tuple]):
        """The server no longer has the session: every handle of it is gone. The next op starts a new one."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        lost = self.session_id
        names = tuple(_variable_names(self))
        error = SessionLostError(
            f"gradserve: the server no longer has this program's session {lost} (the server restarted, or the "
            f"session expired after GRADSERVE_SESSION_TTL_SECONDS idle, or it was deleted): every tensor in it "
            f"is gone: {self._tensor_names()}. Make them again: the next op starts a new session", lost, names)
        self.failures += 1
        self.grad_epoch += 1
        for ref in list(self.refs.values()):
            handle = ref()
            if handle is not None:
                handle._error = error
        self.session_id = None
        self.refs.clear()
        self.released.clear()
        raise error from None

    def _failed(self, exc: ProblemError, pending: list[dict], sites: list, made: list[tuple]):
        """Raise ``exc`` as torch would have, at the line that recorded the failing op, after re-sending
        the ops before it (see the module docstring)."""
        __tracebackhide__ = True  # (IPython and pytest hide the client's frames)
        error = torch_error(exc.problem)
        setting = re.search(r"GRADSERVE_[A-Z_]+", exc.detail or "")
        if setting is not None and exc.code in (*WHOLE_REQUEST, "limit_exceeded"):
            if setting.group() in PER_REQUEST:
                error.add_note(f"gradserve: the {len(pending)} ops of this request were sent together (they were "
                               f"recorded since the last sync). Two ways out: sync more often (read a value, such "
                               f"as loss.item(), or call gradserve.sync() every few steps) so that each request is "
                               f"smaller, or raise {setting.group()} on the server")
            else:
                error.add_note(f"gradserve: {setting.group()} bounds this on the server: use smaller tensors or "
                               f"free some (del), or raise {setting.group()} on the server")
        i = exc.op_index if exc.op_index is not None and exc.op_index < len(pending) else None
        if i is None or exc.code in WHOLE_REQUEST:
            self._lost(pending, made, f"the request failed: {exc.detail}", error)
            raise error from None
        self._lost(pending[i:], made[i:], f"an op before it in the same request failed: {exc.detail}", error)
        if i > 0:
            try:
                self.client.run_ops(self.session(), pending[:i], returns={}, encoding="base64", fast_json=True)
            except ProblemError as again:  # e.g. the session expired meanwhile
                self._lost(pending[:i], made[:i], f"re-sending it failed: {again.detail}", error)
        error.add_note(f"gradserve: op {i} of the {len(pending)} sent together failed ({pending[i]['op']}): nothing of "
                       f"that request was applied; the {i} before it were sent again and are applied, it and the "
                       f"{len(pending) - i - 1} after it are not")
        site = sites[i]
        tb = types.TracebackType(None, site[0], site[1], line_of(site[0].f_code, site[1])) if site[0] is not None \
            else None
        raise error.with_traceback(tb) from None

    # ----- closing ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Send what is pending, then delete the session."""
        if self.closed:
            return
        try:
            self.flush()
        finally:
            self.discard()

    def discard(self) -> None:
        """Delete the session without sending what is pending."""
        if self.closed:
            return
        self.closed = True
        self.pending, self.sites, self.made = [], [], []
        _LIVE.discard(self)
        if self.session_id is not None:
            try:
                self.client.delete_session(self.session_id)
            except Exception:  # noqa: BLE001 - best effort (at exit, the server may be gone)
                pass
        self.client.close()


def _changes_its_arguments(name: str) -> bool:
    """An op (an in-place one, ``F.embedding(max_norm=)``) or action (``requires_grad_``, ``backward``...) that may
    change what the client knows of the tensors it names; the catalog's other ops only make new ones."""
    from gradserve.torch import _catalog

    entry = _catalog.catalog().get(name)
    return entry is None or entry["inplace"] or bool(entry.get("changes_argument"))


def _names(value):
    """The strings of an op (its name, arguments, outputs), where the names of the tensors it uses are."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _names(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _names(v)


def _variable_names(ctx: Context) -> list[str]:
    """Names of the user's variables (the innermost user frame's locals, then its globals) bound to live
    handles of ``ctx``."""
    from gradserve.torch._tensor import Tensor

    f = user_frame()
    names: dict[str, None] = {}
    seen: set[int] = set()
    for scope in ((f.f_locals, f.f_globals) if f is not None else ()):
        for name, value in list(scope.items()):
            if isinstance(value, Tensor) and value._ctx is ctx and id(value) not in seen and not name.startswith("_"):
                seen.add(id(value))
                names[name] = None
    return list(names)


_LIVE: set[Context] = set()
_current: contextvars.ContextVar[Context | None] = contextvars.ContextVar("gradserve_context", default=None)
_default: list[Context] = []


def current() -> Context:
    """The context ops are recorded into: the innermost ``gradserve.session(...)``, else the process's
    default one (server from GRADSERVE_URL, key from GRADSERVE_API_KEY)."""
    ctx = _current.get()
    if ctx is not None:
        return ctx
    if not _default or _default[0].closed:
        _default[:] = [Context()]
    return _default[0]


class session:
    """``with gradserve.session(url=None, api_key=None) as ctx:``: ops inside are recorded into a new server
    session, which is deleted (after sending what is pending) on exit."""

    def __init__(self, url: str | None = None, api_key: str | None = None, client: Client | None = None):
        self.context = Context(url, api_key, client)
        self._token = None

    def __enter__(self) -> Context:
        self._token = _current.set(self.context)
        return self.context

    def __exit__(self, exc_type, *exc) -> bool:
        _current.reset(self._token)
        if exc_type is None:
            self.context.close()
        else:
            self.context.discard()
        return False


def sync() -> None:
    """Send what the current context has recorded (``gradserve.sync()``)."""
    current().flush()


@atexit.register
def _at_exit() -> None:
    """Send what is pending and delete every live session. A failure is reported as an uncaught torch
    error would be (traceback, exit status 1), unless the program is already dying of one."""
    dying = hasattr(sys, "last_value") or hasattr(sys, "last_exc")
    for ctx in list(_LIVE):
        if dying:
            ctx.discard()
            continue
        try:
            ctx.close()
        except Exception as exc:  # noqa: BLE001
            if is_ours(exc) and not os.environ.get("GRADSERVE_FULL_TRACEBACKS"):
                exc = exc.with_traceback(user_traceback(exc.__traceback__) or exc.__traceback__)
            traceback.print_exception(exc)
            sys.stdout.flush()
            sys.stderr.flush()
            for other in list(_LIVE):
                other.discard()
            os._exit(1)
