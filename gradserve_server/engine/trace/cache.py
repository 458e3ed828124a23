"""The trace layer's one cache: plans and per-op fragments of one partition in one table (``PlanCache``), one
partition per API key (``PlanCaches``), every entry measured by what evicting it gives back (``footprint``), and the
markers of structures seen, unplannable (``Unplannable``) or pinned."""

from __future__ import annotations

import sys
import threading
import types
from collections import OrderedDict

import numpy as np

from ..node import Prim
from . import compose as _compose
from . import route as R
from . import sources as S
from . import tape as T
from .key import _code_key, _literal_form

_CONTAINERS = (list, tuple, dict, set, frozenset)
#: what a plan refers to but shares with the process (the op table's kernels, types, numpy's functions)
_SHARED = (type, type(np), type(len), np.ufunc, np.dtype, Prim)


#: exact types that hold no references of their own (counted by ``sys.getsizeof`` alone), and the containers
#: walked by their items; ``footprint``'s fast path for the bulk of a plan (its tuples, ints and strings)
_ATOMS = frozenset((int, float, complex, str, bytes))
_SEQS = frozenset((tuple, list, set, frozenset))


def footprint(root, skip=()) -> int:
    """The bytes a plan (or a key) really holds: every object reachable from it, counted once, by
    ``sys.getsizeof`` (arrays by their buffers), except what the process shares (kernels defined in modules,
    types, numpy's functions): what evicting it gives back, so that the cache's bytes bound is a true one.
    ``skip``: objects counted elsewhere (neither they nor what only they reach)."""
    seen: set[int] = set(map(id, skip)) if skip else set()
    stack = [root]
    total = 0
    getsizeof = sys.getsizeof
    pop, push, extend, mark = stack.pop, stack.append, stack.extend, seen.add
    while stack:
        obj = pop()
        t = type(obj)
        if t is tuple or t in _SEQS or t in _ATOMS or t is dict:  # (the exact types: a subclass walks below)
            i = id(obj)
            if i in seen:
                continue
            mark(i)
            total += getsizeof(obj)
            if t in _ATOMS:
                continue
            # the items: an atom counted here (most of a key's objects), None and bools skipped, as the walk
            # would; anything else walked
            for x in ((*obj.keys(), *obj.values()) if t is dict else obj):
                c = type(x)
                if c in _ATOMS:
                    i = id(x)
                    if i not in seen:
                        mark(i)
                        total += getsizeof(x)
                elif x is not None and c is not bool:
                    push(x)
            continue
        if obj is None or obj.__class__ is bool or id(obj) in seen or isinstance(obj, _SHARED):
            continue
        mark(id(obj))
        cls = obj.__class__
        if cls is np.ndarray:
            total += getsizeof(obj) + (obj.nbytes if obj.base is None else 0)
            if obj.base is not None:
                push(obj.base)
            continue
        if isinstance(obj, types.FunctionType):
            code = obj.__code__
            if not code.co_filename.startswith(S.PREFIX):  # a kernel of a module: shared
                continue
            total += (getsizeof(obj) + getsizeof(code) + getsizeof(code.co_linetable)  # (bytecode: inside code)
                      + getsizeof(code.co_exceptiontable) + getsizeof(obj.__globals__)
                      + S.source_bytes(code.co_filename))  # (its source, held by linecache while it lives)
            extend(code.co_consts)
            extend(code.co_names)
            if obj.__closure__:  # (a fragment's function: its kernels, shared, and its constants, its own)
                for cell in obj.__closure__:
                    total += getsizeof(cell)
                    push(cell.cell_contents)
            continue
        total += getsizeof(obj)
        if isinstance(obj, _CONTAINERS):
            if cls is dict:
                extend(obj.keys())
                extend(obj.values())
            else:
                extend(obj)
        elif hasattr(obj, "__dict__"):
            push(obj.__dict__)
        elif hasattr(obj, "__slots__"):
            extend(getattr(obj, name, None) for name in obj.__slots__)
    return total


class Unplannable:
    """Why a structure cannot be planned: ``code`` (a reason of ``engine.trace.route``'s vocabulary) and ``reason``, the
    detail (which op, which name), given where the refusal is found (the recorder, ``_build``, ``_after``...)."""

    __slots__ = ("reason", "code", "nbytes")

    def __init__(self, code: str, reason: str):
        assert code in R.REASONS, code
        self.code = code
        self.reason = reason
        self.nbytes = 64

    def route(self) -> R.Route:
        return R.Route("cold", self.code, self.reason)


class _Seen:
    """A structure seen ``n`` times without a plan (``PlanCache.records``)."""

    __slots__ = ("n",)
    nbytes = 64

    def __init__(self, n: int):
        self.n = n


class PlanCache:
    """The trace layer's cache of one partition (``PlanCaches``: one per API key): whole-list plans (with the
    markers of structures seen, unplannable or pinned) and per-op fragments (``engine.trace.compose``: forward
    fragments, their VJP fragments, uncomposable markers) in **one** table, with one accounting of bytes (every
    entry's ``footprint``, its key's included: what evicting it gives back; a composed run's new fragments measured
    as the next run that may add entries begins, ``settle``), one eviction policy and one set of
    counters. Bounds: ``max_entries`` plans and markers, ``fragment_entries`` fragments (0: nothing composes),
    ``max_bytes`` bytes of both. Eviction: least recently used out (over a count bound, of that kind; over the
    bytes bound, of either). A plan's use moves it at once (``get``, one per run); a fragment's hits, found by
    the composed run's hot loop without a lock, set its ``used`` flag, and the eviction moves a flagged
    fragment to the young end instead of dropping it (its use applied when eviction reaches it). Thread-safe
    (one-shot runs happen on worker threads): lookups are plain dict reads, changes take the lock."""

    def __init__(self, max_entries: int = 256, max_bytes: int = 64 << 20, record_after: int = 1,
                 fragment_entries: int | None = None, segments: bool = True):
        self.max_entries = max_entries
        self.segments = segments  # a training loop's session list runs in segments (``_segments``)
        self.max_bytes = max_bytes
        self.fragment_entries = _compose.FRAGMENT_ENTRIES if fragment_entries is None else fragment_entries
        self.record_after = record_after  # the sighting of a structure that records its plan (1: the first)
        #: key -> entry, least recently used first: plans and markers (``_sizes``), fragments (``_fsizes``;
        #: composed runs read it directly: ``table``)
        self._entries: OrderedDict = OrderedDict()
        self.table = self._entries
        self._sizes: dict = {}   # plan or marker key -> the bytes counted for it
        self._fsizes: dict = {}  # fragment key -> the bytes counted for it and its VJP fragments
        self._formed: dict = {}  # a fragment form measured -> its structure's bytes (``_measure``)
        self._forms: dict = {}   # fragment key -> the forms measured on it (dropped with it)
        #: fragments kept but not measured yet (``settle``): (key, fragment, VJP key or None, bytes counted, the
        #: entry under key then)
        self._pending: list = []
        self._lock = threading.Lock()
        self.on_grow = None  # called after an entry was added (``PlanCaches``: the bound over all partitions)
        self.bytes = 0
        self.hits = self.misses = self.unplannable = self.fallbacks = self.evictions = self.deferred = 0
        # composed runs (engine.trace.compose): fragments found and made, runs composed and runs given up (then cold)
        self.fragment_hits = self.fragment_misses = self.composed = self.uncomposable = 0

    def records(self, key, eager: bool = False) -> bool:
        """Whether a run of ``key``'s structure, which has no plan yet, records one now: at its
        ``record_after``-th sighting (or ``eager``: a loop, known to run it again). An earlier sighting is
        remembered (a ``_Seen`` entry, bounded like the plans) and counted as ``deferred``: a structure run once
        never pays for recording and building a plan (for a long list, ~3x its cold run)."""
        if self._pending:
            self.settle()
        if eager or self.record_after <= 1:
            return True
        with self._lock:
            seen = self._entries.get(key)
            n = seen.n + 1 if isinstance(seen, _Seen) else 1
            if n < self.record_after:
                self.deferred += 1
        if n >= self.record_after:
            return True
        self.put(key, _Seen(n))
        return False

    def get(self, key):
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key, entry) -> None:
        """Keep a plan or a marker (``entry.nbytes``: its measured footprint)."""
        if self._pending:
            self.settle()
        self._add(key, entry, entry.nbytes + footprint(key), self._sizes)

    def put_fragment(self, key, frag) -> None:
        """Keep a forward fragment (None: the op form is not composable), counted by ``_unmeasured`` until the
        next ``settle`` measures it with its key (``_measure``)."""
        size = _unmeasured(frag)
        with self._lock:
            if self._add_locked(key, frag, size, self._fsizes):
                self._pending.append((key, frag, None, size, frag))
        if self.on_grow is not None:
            self.on_grow()

    def add_vjp(self, owner, vjps: dict, key, vf) -> None:
        """Keep ``vf`` in ``vjps`` (a recipe's VJP fragments) under ``key``, its bytes counted with the forward
        fragment ``owner`` (the key it is kept under; not kept any more: the recipe dies with the run), by
        ``_unmeasured`` until the next ``settle``."""
        size = _UNMEASURED + 2 * vf.cbytes  # (``_unmeasured``, inline)
        with self._lock:
            vjps[key] = vf
            fsizes = self._fsizes
            if owner not in fsizes:
                return
            self._pending.append((owner, vf, key, size, self._entries.get(owner)))
            fsizes[owner] += size
            self.bytes += size
            if self.bytes > self.max_bytes:
                self._shrink()
        if self.on_grow is not None:
            self.on_grow()

    def settle(self) -> None:
        """Measure the fragments kept since the last settle (``put_fragment``, ``add_vjp``: counted until then by
        their constant arrays and ``_UNMEASURED``), so that the bytes bound holds on their measured bytes before
        a run's work: called as a run that may add entries begins (``records``, ``put``), and by ``stats``. A
        composed run's own fragments are measured after its response, not on its path (``footprint`` walks
        every object of each: a first LSTM run's ~35 new forms cost it ~1.5 ms); what it made is bounded in
        number (``fragment_entries``) and in array bytes (counted at once) meanwhile."""
        with self._lock:
            pending, self._pending = self._pending, []
            for key, obj, vkey, counted, entry in pending:
                if self._entries.get(key) is not entry or key not in self._fsizes:
                    continue  # (evicted since: its count went with it)
                form = _literal_form(key) if obj is not None else None
                if vkey is None:
                    size, base = self._measure(form, key, obj, _compose.vjp_dicts(obj))
                else:
                    form = None if form is None else (form, vkey)
                    size, base = self._measure(form, vkey, obj)
                if base is not None:
                    self._remember(key, form, base)
                self._fsizes[key] += size - counted
                self.bytes += size - counted
            self._shrink()

    def _measure(self, form, key, frag, skip=()) -> tuple:
        """The bytes of fragment ``frag`` kept under ``key``: ``footprint``, except for a form measured before
        (``form``: its key's, ``_form``; None: measure it). Fragments whose keys differ only in the values of their
        top-level int or float literals (``x[t]`` for t = 0..99: a composed LSTM's one-off forms) are made by the
        same code with the same structure: the first of a form is measured, and each later one counted as its
        structure (the first's ``footprint`` less its constant arrays as ``footprint`` counts them) plus its own
        constant arrays (``cbytes``). Returns (bytes, the structure's bytes to remember for ``form`` or None); the
        memo entry lives as long as the fragment measured for it and is counted with it (``_remember``).
        ``tests/engine/test_compose.py`` pins the counts against a re-measure of every fragment."""
        if form is None:
            return footprint((key, frag), skip) + _EMPTY_DICT * len(skip), None
        own = 2 * frag.cbytes  # (an array owning its data: its size, data included, and its buffer)
        base = self._formed.get(form)
        if base is not None:
            return base + own, None
        size = footprint((key, frag), skip) + _EMPTY_DICT * len(skip)
        memo = _MEMO_ENTRY + sys.getsizeof(form) + (sys.getsizeof(form[0]) if form[0].__class__ is tuple else 0)
        return size + memo, size - own

    def _remember(self, key, form, base: int) -> None:
        """Remember ``form``'s structure bytes, dropped with the fragment kept under ``key`` (the lock held)."""
        self._formed[form] = base
        self._forms.setdefault(key, []).append(form)

    def maker(self, src: str):
        """The compiled maker of a fragment's source (``tape.compile_fragment``), kept as a fragment entry of this
        partition (measured, least recently used out), so a form met again here is looked up here; on a miss, from
        the process-wide memo of compiled sources (``tape.shared_maker``: the code of a source another partition
        compiled is the same code)."""
        key = _code_key(src)
        with self._lock:
            make = self._entries.get(key)
            if make is not None:
                self._entries.move_to_end(key)
                return make
        make = T.shared_maker(src)
        self._add(key, make, footprint((key, make)), self._fsizes)
        return make

    def _add(self, key, entry, size: int, sizes: dict) -> None:
        with self._lock:
            self._add_locked(key, entry, size, sizes)
        if self.on_grow is not None:
            self.on_grow()

    def _add_locked(self, key, entry, size: int, sizes: dict) -> bool:
        """``_add``'s body (the lock held): whether the entry was kept."""
        bound = self.max_entries if sizes is self._sizes else self.fragment_entries
        if bound <= 0 or size > self.max_bytes:
            return False
        if self._entries.pop(key, _ABSENT) is not _ABSENT:
            self.bytes -= self._sizes.pop(key, 0) + self._fsizes.pop(key, 0)
            self._forget(key)
        self._entries[key] = entry
        sizes[key] = size
        self.bytes += size
        while len(sizes) > bound:
            self._evict_oldest(sizes)
        if self.bytes > self.max_bytes:
            self._shrink()
        return True

    def _shrink(self) -> None:
        while self.bytes > self.max_bytes and self._entries:
            self._evict_oldest()

    def _evict_oldest(self, kind: dict | None = None) -> int:
        """Drop the least recently used entry (of ``kind``: ``_sizes`` or ``_fsizes``; None: either), a
        fragment flagged ``used`` moved young instead (the caller holds the lock); the bytes it freed."""
        entries, fsizes = self._entries, self._fsizes
        used = []
        victim = _ABSENT
        for k in entries:
            is_frag = k in fsizes
            if kind is not None and is_frag is not (kind is fsizes):
                continue
            if is_frag:
                e = entries[k]
                if getattr(e, "used", False):  # (a forward fragment hit since; None, a maker: no flag)
                    e.used = False
                    used.append(k)
                    continue
            victim = k
            break
        for k in used:
            entries.move_to_end(k)
        if victim is _ABSENT:  # (every one flagged: the oldest of them, now unflagged)
            if not used:
                return 0
            victim = used[0]
        del entries[victim]
        size = self._sizes.pop(victim, 0) + fsizes.pop(victim, 0)
        self._forget(victim)
        self.bytes -= size
        self.evictions += 1
        return size

    def _forget(self, key) -> None:
        for form in self._forms.pop(key, ()):
            self._formed.pop(form, None)

    def evict_oldest(self) -> int:
        """Drop the least recently used entry, plan or fragment; the bytes freed (0: nothing left)."""
        with self._lock:
            return self._evict_oldest() if self._entries else 0

    @property
    def held(self) -> int:
        """Bytes of its plans and fragments (``bytes``)."""
        return self.bytes

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + n)

    def count_compose(self, hits: int, misses: int, composed: bool) -> None:
        with self._lock:
            self.fragment_hits += hits
            self.fragment_misses += misses
            if composed:
                self.composed += 1
            else:
                self.uncomposable += 1

    @property
    def fragments(self) -> int:
        """The fragments (and uncomposable markers) it holds."""
        return len(self._fsizes)

    def __len__(self) -> int:
        """The plans and markers it holds."""
        return len(self._sizes)

    def stats(self) -> dict:
        if self._pending:
            self.settle()
        with self._lock:
            return {"entries": len(self._sizes), "bytes": self.bytes, "hits": self.hits, "misses": self.misses,
                    "unplannable": self.unplannable, "fallbacks": self.fallbacks, "evictions": self.evictions,
                    "deferred": self.deferred, "composed": self.composed, "uncomposable": self.uncomposable,
                    "fragment_hits": self.fragment_hits, "fragment_misses": self.fragment_misses,
                    "fragments": len(self._fsizes)}


_ABSENT = object()
#: a fragment's bytes besides its constant arrays' until ``PlanCache.settle`` measures it (a small fragment's
#: order: most measure 1-4 KiB)
_UNMEASURED = 2048
_EMPTY_DICT = sys.getsizeof({})  # (a recipe's VJP dict as a forward fragment is kept: its VJPs counted as they come)


def _unmeasured(frag) -> int:
    """What a fragment (None: an uncomposable marker) is counted by until it is measured: its constant arrays
    as ``footprint`` counts them (an array owning its data: its size, data included, and its buffer) and
    ``_UNMEASURED``."""
    return _UNMEASURED + (2 * frag.cbytes if frag is not None else 0)


#: a memo entry's share of the dicts holding it (``PlanCache._formed``, ``_forms``: a slot in each, a list),
#: besides its form's own tuples (its items are its key's)
_MEMO_ENTRY = 160


_COUNTERS = ("hits", "misses", "unplannable", "fallbacks", "evictions", "deferred", "composed", "uncomposable",
             "fragment_hits", "fragment_misses")


class PlanCaches:
    """One ``PlanCache`` per partition (the app: per API key, per client address on an open server), so that
    no partition can tell whether another ran an op list (a hit is faster) or flush another's plans by its
    own one-offs. Each partition holds at most ``max_entries`` plans; all of them together at most
    ``max_bytes`` of plans and fragments (measured, ``footprint``): past it, the partition holding the most
    gives bytes back, oldest first, so a partition that floods the cache evicts its own. At most
    ``partitions`` partitions are kept, the least recently used dropped whole. ``stats`` sums them: figures
    of the process, never of one partition."""

    def __init__(self, partitions: int = 64, max_entries: int = 256, max_bytes: int = 64 << 20,
                 record_after: int = 1, fragment_entries: int | None = None, segments: bool = True):
        self.partitions = partitions
        self.segments = segments
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.record_after = record_after
        self.fragment_entries = fragment_entries
        self._caches: OrderedDict[str, PlanCache] = OrderedDict()
        self._lock = threading.Lock()
        self._dropped = dict.fromkeys(_COUNTERS, 0)  # counters of partitions dropped whole
        self.dropped_partitions = 0

    def of(self, partition: str) -> PlanCache:
        with self._lock:
            cache = self._caches.get(partition)
            if cache is not None:
                self._caches.move_to_end(partition)
                return cache
            cache = PlanCache(self.max_entries, self.max_bytes, self.record_after,
                              fragment_entries=self.fragment_entries, segments=self.segments)
            cache.on_grow = self._settle
            self._caches[partition] = cache
            while len(self._caches) > self.partitions:
                _, old = self._caches.popitem(last=False)
                stats = old.stats()
                for name in _COUNTERS:
                    self._dropped[name] += stats[name]
                self.dropped_partitions += 1
            return cache

    def _settle(self) -> None:
        """Over the bytes bound: the partition holding the most gives back its oldest, until under it."""
        with self._lock:
            caches = list(self._caches.values())
            total = sum(c.held for c in caches)
            while total > self.max_bytes and caches:
                largest = max(caches, key=lambda c: c.held)
                freed = largest.evict_oldest()
                if not freed:
                    break
                total -= freed

    def __len__(self) -> int:
        with self._lock:
            return sum(len(c) for c in self._caches.values())

    def stats(self) -> dict:
        with self._lock:
            caches = list(self._caches.values())
            out = dict(self._dropped)
        out.update(entries=0, bytes=0, fragments=0, partitions=len(caches))
        for cache in caches:
            stats = cache.stats()
            for name in (*_COUNTERS, "entries", "fragments"):
                out[name] += stats[name]
            out["bytes"] += cache.held
        return out
