"""An undo journal that makes a program atomic.

While ``run_program`` runs, every mutation of a pre-existing engine object (an attribute, a dict slot, a
list item or the contents of an array) is first recorded here; if any op fails, the journal is replayed
backwards and the state is exactly what it was. Outside a program the journal is off and recording is a
single context-variable read.
"""

from __future__ import annotations

import contextvars

import numpy as np

from .kernel import _recorder

_journal: contextvars.ContextVar[list | None] = contextvars.ContextVar("gradserve_journal", default=None)


def setattr_(obj, name: str, value) -> None:
    j = _journal.get()
    if j is not None:
        key = (0, id(obj), name)
        if key not in j.seen:  # undoing needs only the value before the first change (see array_)
            j.seen.add(key)
            j.append((0, obj, name, getattr(obj, name)))
    setattr(obj, name, value)


def setitem_(container, key, value) -> None:
    j = _journal.get()
    if j is not None:
        seen = (1, id(container), key)
        if seen not in j.seen:
            j.seen.add(seen)
            j.append((1, container, key, container.get(key, _MISSING) if isinstance(container, dict)
                      else container[key]))
    container[key] = value


def array_(arr: np.ndarray) -> None:
    """Call before writing into ``arr`` in place."""
    rec = _recorder.get()
    if rec is not None:  # a plan being recorded: the write must be a kernel's (engine.kernel.kinplace)
        rec.writes.add(id(arr))
    j = _journal.get()
    if j is not None and id(arr) not in j.seen:
        from .budget import counted_copy
        copy = counted_copy(arr, "the undo copy of a tensor changed in place")
        j.seen.add(id(arr))
        j.append((2, arr, None, copy))


_MISSING = object()


class _Entries(list):
    """The journal's entries, and what they already cover: undoing replays them backwards, so only the first
    change of an attribute, a slot or an array's contents in a program needs an entry (a loop of in-place
    updates or of ``zero_grad`` keeps one copy, not one per iteration). An entry keeps its object alive, so
    the ids in ``seen`` are not reused while the program runs."""

    __slots__ = ("seen",)

    def __init__(self):
        super().__init__()
        self.seen: set = set()


class Journal:
    """Context manager: collect mutations; ``rollback()`` undoes them."""

    def __init__(self):
        self.entries = _Entries()
        self._token = None

    def __enter__(self):
        self._token = _journal.set(self.entries)
        return self

    def __exit__(self, *exc):
        _journal.reset(self._token)
        return False

    def rollback(self) -> None:
        for kind, obj, key, old in reversed(self.entries):
            if kind == 0:
                setattr(obj, key, old)
            elif kind == 1:
                if old is _MISSING:
                    obj.pop(key, None)
                else:
                    obj[key] = old
            elif kind == 3:  # saved tensor slots freed by a backward (engine.node.release_all)
                for slot, t, data in zip(obj, key, old):
                    slot._tensor = t
                    slot._data = data
            else:
                np.copyto(obj, old)
        self.entries.clear()
        self.entries.seen.clear()
