"""Generated code that a traceback or a profiler can read: each compiled plan chunk and composed fragment
(``engine.trace.tape``'s code generator, for ``engine.trace.plan`` and ``engine.trace.compose``) gets a file name of
its own (``<gradserve plan 1a chunk 0>``) and its source in ``linecache``, and each generated line ends in a comment
naming the op it runs (``# op 3 mul``).

The entries are bounded: one lives as long as the function compiled from it (removed when a plan or fragment
is evicted and freed), and at most ``MAX_ENTRIES`` are kept (the oldest dropped first: its traceback lines
then read as empty, nothing else changes).
"""

from __future__ import annotations

import itertools
import linecache
import threading
import weakref
from collections import OrderedDict

#: every generated file name starts so (``cache.footprint`` counts such code as the plan's own)
PREFIX = "<gradserve "
MAX_ENTRIES = 4096

_ids = itertools.count(1)
_lock = threading.Lock()
_names: OrderedDict[str, None] = OrderedDict()


def _forget(filename: str) -> None:
    with _lock:
        _names.pop(filename, None)
    linecache.cache.pop(filename, None)


def compile_function(src: str, what: str, fn_name: str = "run", tie: bool = True, numbered: bool = True):
    """``src`` (defining ``fn_name``) compiled under a new file name ``<gradserve {what} {n}>`` (``numbered``
    False: ``what`` names it uniquely already, ``<gradserve {what}>``), registered in
    ``linecache`` (``tie``: while the function lives; else until ``MAX_ENTRIES`` newer ones push it out): the
    function, out of its own globals (it reads none), so a plan evicted is freed at once, not at the next
    garbage collection."""
    filename = f"{PREFIX}{what} {next(_ids):x}>" if numbered else f"{PREFIX}{what}>"
    namespace: dict = {}
    exec(compile(src, filename, "exec"), namespace)  # noqa: S102 - our own code
    fn = namespace.pop(fn_name)
    _register(filename, src)
    if tie:
        weakref.finalize(fn, _forget, filename)
    return fn


def register(filename: str, src: str) -> None:
    """Register ``src`` under ``filename`` again if newer entries have pushed it out (its code lives on)."""
    if filename not in linecache.cache:
        _register(filename, src)


def _register(filename: str, src: str) -> None:
    lines = src.splitlines(keepends=True)
    with _lock:
        _names[filename] = None
        while len(_names) > MAX_ENTRIES:
            old, _ = _names.popitem(last=False)
            linecache.cache.pop(old, None)
    # (mtime None: ``linecache.checkcache`` keeps it; there is no file to compare with)
    linecache.cache[filename] = (len(src), None, lines, filename)


def source_bytes(filename: str) -> int:
    """The bytes of a generated file's registered source (0: none)."""
    entry = linecache.cache.get(filename)
    return entry[0] if entry is not None else 0


def comment(filename: str, lineno: int) -> str:
    """The op comment of a generated line (``op 3 mul``), or ""."""
    line = linecache.getline(filename, lineno)
    return line.rpartition("# ")[2].strip() if "# " in line else ""
