"""An undo journal that makes a program atomic.

While ``run_program`` runs, every mutation of a pre-existing engine object (an attribute, a dict slot, a
list item or the contents of an array) is first recorded here; if any op fails, the journal is replayed
backwards and the state is exactly what it was. Outside a program the journal is off and recording is a
single context-variable read.
"""

from __future__ import annotations

import contextvars

import numpy as np

_journal: contextvars.ContextVar[list | None] = contextvars.ContextVar("gradserve_journal", default=None)


def setattr_(obj, name: str, value) -> None:
    j = _journal.get()
    if j is not None:
        j.append((0, obj, name, getattr(obj, name)))
    setattr(obj, name, value)


def setitem_(container, key, value) -> None:
    j = _journal.get()
    if j is not None:
        j.append((1, container, key, container.get(key, _MISSING) if isinstance(container, dict)
                  else container[key]))
    container[key] = value


def array_(arr: np.ndarray) -> None:
    """Call before writing into ``arr`` in place."""
    j = _journal.get()
    if j is not None:
        j.append((2, arr, None, arr.copy()))


_MISSING = object()


class Journal:
    """Context manager: collect mutations; ``rollback()`` undoes them."""

    def __init__(self):
        self.entries: list = []
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
            else:
                np.copyto(obj, old)
        self.entries.clear()
