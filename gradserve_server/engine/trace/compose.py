"""Composed one-shot runs: an op list that has no plan runs as a sequence of per-op fragments.

The trace layer at the granularity of one op (``engine.trace.plan``: of a whole list), with the same steps in the same
places: an op is keyed by ``engine.trace.key`` (``_key_of``, its common forms inline in ``_compose``'s loop; a VJP's
by ``_vjp_key``), traced by ``kernel.Recorder`` (``_make_frag``), optimised and executed by ``engine.trace.tape``, its
result read through ``engine.trace.replayed``, cached in ``cache.PlanCache``. This module holds what only a per-op run
needs: light nodes, the backward over them, and when to give up.

A ``/v1/eval`` run of an op list never seen before (no plan of its structure: ``engine.trace.plan``) would run op by
op through the object engine (a Tensor, a Node, SavedTensors, the checks of ``_Runner.run_op`` and the VJP's
Python per op). Most ops of a long list repeat: the same op on inputs of the same shapes, dtypes and flags.
``compose`` runs such a list from **fragments**, recorded once per op form and kept in the key's
``cache.PlanCache`` with its plans (one table, bytes and counters; ``PlanCache.stats()`` and /metrics):

* **Forward fragment** (``_Frag``), keyed by the op's name, its arguments with each tensor name replaced by its
  tensor's (shape, dtype, strides, requires_grad) and which argument is which tensor (aliasing), literals kept
  (typed: ``1``, ``1.0``, ``True``, ``-0.0`` differ; getitem's literal indices), the form of ``out`` and the op's
  grad mode. Made on a miss by running the op once through the real engine (``_Runner.run_op`` on a throwaway
  namespace of fresh leaf tensors over the run's own arrays) under a ``kernel.Recorder``: its kernel steps
  (``tape.fragment``: slots relative to the op, its inputs then its own; constants folded), compiled at the
  fragment's first hit into one straight-line function (``tape.compile_fragment``; the code of one structure
  compiled once per cache partition), or, one kernel call on the op's inputs, called by the loop itself; its outputs and
  their flags; and the recipes of the nodes it made (``_graph``: the outputs' node and, for a composite op such as
  cross_entropy, the nodes it made inside, children first: primitive, which input or inner node each edge comes
  from, which saved slot is which input, output or array of the fragment, the static saved values). The miss's own
  arrays are the run's results (nothing runs twice). An op is not composable (its key remembered as such) when
  anything is not certainly reproducible from that: the recorder's provenance reasons, a warning, an in-place
  write, an output that is an input, a view whose requires_grad is not its history's (made under no_grad of a base
  that requires grad), an edge leading outside the op, a saved value of another kind, a forward-mode tangent... An
  op of many tensor inputs (a stack of 1000, whose form hardly repeats) runs **live**: unrecorded, as the cold run
  runs it, its VJP through the engine too; only its node's recipe is kept for the run.
* **Backward.** ``backward`` of one root (with a gradient tensor, retain_graph; not inputs/create_graph; once
  per list) runs the engine's own schedule (``autograd._run_all``) over light nodes made from the recipes
  (edges to producer nodes, or to one accumulator per leaf), with gradients as arrays: each node's VJP is a
  **VJP fragment** of its recipe, keyed by the incoming gradients' layout (and whether one is a saved array),
  made on a miss by building a real ``Node`` from the recipe and calling the real ``autograd._apply`` under a
  recorder. Two gradients of one input are summed as ``_add_unrecorded`` sums them (the same kernel); the seed,
  the leaves' ``.grad`` (``_accumulate_leaf``'s copy rule), retain_grad's clones and the autograd report
  (``_Runner.report``) are made as the engine makes them. As in a replayed plan of a one-shot run
  (``tape.copy_renames``), copies of arrays that die with the response (the report's snapshots, a leaf's
  private ``.grad`` copy) are the arrays themselves when the copy would have their layout: nothing in a composed
  run writes in place. ``del``, ``bind`` (of a name or a leaf's ``.grad``) and ``retain_grad`` are covered.
* **Result.** The namespace, op outcomes, ``changed`` and the autograd report as a ``Plan`` of no steps
  whose slots are the run's arrays, finished as a replay finishes (``replayed._Namespace``: tensors, and here
  their descriptors too, made when read; the outcomes made from the op list when read).

Whatever cannot be composed gives up before anything is visible: the caller then runs the list cold (which
gives the result, or the error and its op index; its route says why: ``not_composable:<code>``, ``engine.trace.route``,
and at which op). It gives up on an op or action it does not cover, any
exception (a kernel's value check, the deadline), a run whose bytes (every array it made, an upper bound) or
nodes could come near the limits, a response over its bytes limit, and early when the fragments it meets are
mostly new (``_MISS_SLACK``, one more per ``_MISS_PER`` ops), and at its first miss before any hit, before
recording it, when the ops ahead do not look as if they repeat the forms met (``_repeats``: a list whose forms do
not repeat records nothing and pays about two ops' worth; ``bench/norepeat.py``). Lists of fewer than
``_MIN_OPS`` ops run cold. Nothing a composed run does writes into an array it did not make, so giving up leaves
no trace.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from itertools import islice, repeat
from operator import attrgetter, itemgetter
from time import monotonic as _monotonic

import numpy as np

from .. import kernel as K
from ..autograd import _apply, _run_all
from ..budget import SMALL_RESPONSE_ELEMENTS, Budget
from ..grad_mode import Limits, WarningSink, set_grad_enabled
from ..node import ACCUMULATE_GRAD, Node, SavedTensor
from ..program import (
    _TENSOR,
    ProgramResult,
    State,
    _Runner,
)
from ..tensor import Tensor
from . import route as R
from . import tape as T
from .key import _FORMS, _NO_NAMES, _form, _key_of, _lit, _names, _op_sig, _vjp_key
from .replayed import Plan, _Namespace, _PlannedResult

_ndarray = np.ndarray
_asarray = np.asarray
_get = dict.get
_third = itemgetter(2)
_nbytes = attrgetter("nbytes")
_size = attrgetter("size")
_isidentifier = str.isidentifier
_isascii = str.isascii

#: a run gives up once its fragment misses outnumber its hits by more than this many, or by one per
#: ``_MISS_PER`` ops of the list if that is more (a miss costs a few times the op run cold: a list whose forms do not
#: repeat pays a few percent; a long one may meet all its forms in its first steps)
_MISS_SLACK = 4
_MISS_PER = 100
#: at the first miss that outnumbers the hits by more than this (0: a run's first miss before any hit), before
#: recording it, the run looks ahead (``_repeats``): a list whose next ops' forms cannot repeat the ones it met gives
#: up there, without recording anything (each recorded miss costs ~5x the op run cold)
_MISS_EARLY = 0
_LOOK_BACK = 256  # ops whose signatures ``_repeats`` compares the next ones with
_LOOK_AHEAD = 32
#: a list of this many ops past a first miss whose look-ahead says no looks again in the middle of them (a long
#: prologue of forms of their own, then a loop; the slack of such a list covers the prologue's misses)
_LOOK_AGAIN = 1000
#: lists of fewer ops (inputs left out) run cold: too short for their fragments to repeat much, and a first
#: sighting of them costs little cold (and a plan is recorded at the second); a list whose forms never repeat
#: pays about two ops' worth for the attempt (the look-ahead), ~3% at this length (``bench/norepeat.py``)
_MIN_OPS = 100
#: fragments a cache keeps by default (forward op forms; each keeps at most ``_VJPS_PER_FRAG`` VJP forms); their
#: bytes are measured and bounded with the plans' (``cache.PlanCache``)
FRAGMENT_ENTRIES = 4096
_VJPS_PER_FRAG = 16
#: actions a composed run covers (anything else: the list runs cold)
_ACTIONS = frozenset({"backward", "del", "bind", "retain_grad"})
_ACC = ACCUMULATE_GRAD.name
_CHECK_EVERY = 32  # ops between two reads of the deadline
_CHECK_MASK = _CHECK_EVERY - 1


_GiveUp = T.GiveUp  # (a composed run gives up; ``args[0]``: why, ``route.COMPOSE_CODES``, default ``form``)


def _no(why: int):
    """Not composable (``why``: which check said so, for a debugger)."""
    return None


class _Frag:
    """A forward fragment. ``fn(*input arrays)`` -> its outputs' arrays, then the saved arrays it made itself
    (``recipe.saved_at``); ``binds`` (position in ``out`` or -1 for a name, output index) in the order the op
    binds its outputs; ``rgs`` each output's requires_grad; ``recipe`` the node (None: none);
    ``nbytes``/``maxsize`` the bytes and the largest element count of the arrays it makes; ``used``: hit since the
    cache's eviction last passed it (``cache.PlanCache``). ``k`` (None: not
    so): a fragment of one kernel call on its one or (``two``) two input arrays, in order, then the constants
    ``pre``, returning its one output: the caller calls it, ``fn``'s call without its frame. ``mode`` (0: none
    of these) the common forms of one output that requires grad, bound to a name, and one node (``_mode``);
    ``inline``: both (``k`` and a ``mode``)."""

    __slots__ = ("fn", "code", "nout", "binds", "rgs", "recipe", "nbytes", "maxsize", "single", "rg0", "graph",
                 "cbytes", "k", "pre", "two", "mode", "inline", "used")


class _Recipe:
    """A node as a forward fragment makes it: ``edges`` per edge the op input it comes from (-1: none),
    ``refs`` the distinct saved arrays ((0, input j), (1, output i), (2, a saved array the op made itself),
    (3, a constant array)), ``saved`` (slot, ref index or -1, static value) in the node's order, ``nrs`` each
    output's output_nr; ``vjps``: the VJP fragments, by the gradients' layout; ``cls``: the light node class;
    ``owner``: the cache key of the forward fragment it belongs to (its VJP fragments' bytes are counted there)."""

    __slots__ = ("prim", "name", "n_outputs", "input_meta", "needs", "edges", "refs", "saved", "nrs", "in_rg",
                 "out_rg", "vjps", "cls", "take", "fixed", "star", "live", "own", "owner")


class _VjpFrag:
    __slots__ = ("fn", "code", "nbytes", "maxsize", "cbytes")


class _NodeBase:
    """A light node for ``autograd._run_all`` (what the schedule reads of a ``Node``): a class per recipe
    holds ``prim``, ``n_outputs`` and the recipe; an instance its edges and saved arrays."""

    __slots__ = ("next_functions", "saved", "retained")
    variable = None

    def __init__(self, next_functions, saved):
        self.next_functions = next_functions
        self.saved = saved


class _Acc:
    """A leaf that requires grad, as its accumulator (what ``_run_all`` reads of an AccumulateGrad node; it hands
    the node itself over with its gradient): its variable, its ``.grad`` (once a backward gave it one: its slot in
    the run's buffer, made a variable when a ``bind`` first names it) and accumulations. ``_Run.leaves`` maps the
    variable's id to ``((acc, 0),)``, the next_functions of a node whose one edge leads to it."""

    __slots__ = ("var", "accs", "gvar")
    next_functions = ()
    n_outputs = 1
    retained = None
    prim = _ACC

    def __init__(self, var):
        self.var = var
        self.accs = 0
        self.gvar = None


# a variable (a tensor of the run) is a tuple (array, requires_grad, ((node, output_nr),) or None, its slot in the
# run's buffer): the third is the next_functions of a node whose one edge leads to it; a leaf that requires grad
# has an ``_Acc`` (``_Run.leaves``, by the variable's id) once an edge or a backward needs it


# ----- steps (``engine.trace.tape``) ----------------------------------------------------------------------------
def _compiled(owner, cache=None):
    """A fragment's function, compiled at its first use (``tape.compile_fragment``: a fragment made by a miss
    whose form never comes again is never compiled; the code of one structure compiled once per ``cache``
    partition, ``PlanCache.maker``); ``owner.code`` holds (steps, inputs, slots returned) until then. Fragments
    are shared between threads: another run may have compiled it since this one read ``owner.fn`` (``fn`` is
    set before ``code`` is cleared)."""
    code = owner.code
    if code is None:
        return owner.fn
    fn = owner.fn = T.compile_fragment(*code, maker=cache.maker if cache is not None else None)
    owner.code = None
    return fn


# ----- making fragments --------------------------------------------------------------------------------------
def _make_frag(index: int, op: dict, no_grad_all: bool, vs: list, limits, ns: dict, live: bool = False):
    """Run ``op`` once through the engine on fresh leaves over the arrays of ``vs``, recording it: (fragment or
    None when it is not composable, this run's result of ``fn``). Raises _GiveUp when the op fails (a value may
    decide: the form is not marked).

    ``live``: an op of many tensor inputs (a stack of 1000), whose form hardly repeats: it runs unrecorded, as
    the cold run runs it, and its fragment (``fn`` None: not to be kept) holds only its node's recipe (its
    recipe ``live``: its VJP runs through the engine each time, unrecorded too)."""
    temps = [Tensor(v[0], v[1]) for v in vs]
    byvar = {id(v): t for v, t in zip(vs, temps)}
    tns = {}
    for n in _names(op):
        t = byvar.get(id(ns.get(n)))
        if t is not None:
            tns[n] = t
    sink = WarningSink(set())
    runner = _Runner(State(), tns, sink, ProgramResult())
    budget = Budget(limits if limits is not None else _NO_LIMITS)
    try:
        with K.recording() if not live else _no_recording() as rec, sink, np.errstate(all="ignore"):
            if rec is not None:
                for t in temps:
                    rec.add_input(t.data)
            with budget:
                bound = runner.run_op(index, op, no_grad_all)
    except Exception:  # noqa: BLE001 - the cold run gives the error
        raise _GiveUp("raised") from None
    if sink.messages or (rec is not None and (rec.reason is not None or rec.unknown_writes()
                                              or len(rec.inputs) != len(temps))):
        return _no(1), None
    outs_t: list = []
    binds = []
    out = op.get("out")
    p = 0
    for n in bound:
        t = tns.get(n)
        if t is None or t.__class__ is not Tensor:
            return _no(2), None
        i = next((k for k, o in enumerate(outs_t) if o is t), None)
        if i is None:
            i = len(outs_t)
            outs_t.append(t)
        if out.__class__ is str:
            if n == out and len(bound) == 1:
                binds.append((-1, i))
            else:  # (a tuple's items bound to out_0, out_1...: those that are tensors)
                while p < 1024 and n != f"{out}_{p}":
                    p += 1
                if p >= 1024:
                    return _no(3), None
                binds.append((p, i))
                p += 1
        else:  # (the names bound are a subsequence of out: a tuple's items that are tensors)
            while p < len(out) and out[p] != n:
                p += 1
            if p >= len(out):
                return _no(4), None
            binds.append((p, i))
            p += 1
    if not bound:
        return _no(5), None
    slots = []
    node = None
    rgs = []
    m = len(temps)
    for t in outs_t:
        if any(t is x for x in temps) or t._fw_grad is not None or t.retains_grad or \
                t._grad is not None or t._vc[0] != 0 or t.grad_accumulations or t._wrapped:
            return _no(6), None
        # a view of an input (nothing in a composed run writes in place, so it shows as any tensor does): only
        # one whose requires_grad is its history's (not a view made under no_grad of a base that requires grad)
        if t._base is not None and not (any(t._base is x for x in temps) and t._requires_grad == t.requires_grad
                                         and t.requires_grad == (t._grad_fn is not None)):
            return _no(17), None
        if rec is None:
            if any(t.data is x.data for x in temps):
                return _no(7), None
            s = t.data
        else:
            s = rec.slot_of(t.data)
            if s is None or s < m:
                return _no(7), None
        fn = t._grad_fn
        if t._requires_grad != (fn is not None):
            return _no(8), None
        if fn is not None:
            if node is None:
                node = fn
            elif fn is not node:
                return _no(9), None
        slots.append(s)
        rgs.append(bool(t._requires_grad))
    recipe = graph = None
    if node is not None:
        graph = _graph(node, temps, outs_t, rec)
        if graph is None:
            return _no(10), None
        recipe = graph[-1]
    if rec is None:  # (live: the arrays themselves; the bytes as the budget counted them)
        f = _Frag()
        f.fn = f.k = None
        f.used = False
        f.cbytes = 0
        f.nout = len(slots)
        f.nbytes, f.maxsize = budget.total(), max(a.size for a in slots)
        f.binds, f.rgs, f.recipe, f.graph = tuple(binds), tuple(rgs), recipe, None
        f.single = len(slots) == 1 and binds == [(-1, 0)]
        f.rg0 = rgs[0]
        f.mode = 0
        f.inline = False
        if recipe is not None:
            _takes(recipe, recipe.refs)
        return f, tuple(slots)
    made = T.fragment(rec, slots, [i for r in graph or () for k, i in r.refs if k == 2])
    if made is None:
        return _no(11), None
    steps, nbytes, maxsize, consts = made
    ret = list(slots)
    for r in graph or ():
        refs = []
        for k, i in r.refs:
            if k == 2 and i in consts:
                refs.append((3, consts[i]))  # (a saved constant folded: the node reads the fragment's array)
            elif k == 2:
                refs.append((2, len(ret)))
                ret.append(i)
            else:
                refs.append((k, i))
        _takes(r, tuple(refs))

    f = _Frag()
    f.fn, f.code = None, (steps, m, ret, op.get("op"))  # (the name made a label when compiled)
    f.k = None
    f.used = False
    if len(steps) == 1 and m <= 2:
        kfn, tmpl, where, o, multi = steps[0][:5]
        if multi is False and ret == [o] and where == ((0, 0), (1, 1))[:m]:
            f.k, f.pre, f.two = kfn, tuple(tmpl[m:]), m == 2
    f.cbytes = sum(c.nbytes for c in consts.values())
    f.nout = len(slots)
    f.nbytes, f.maxsize = nbytes, maxsize
    f.binds = tuple(binds)
    f.rgs = tuple(rgs)
    f.recipe = recipe
    f.graph = graph if graph is not None and len(graph) > 1 else None
    f.single = len(slots) == 1 and binds == [(-1, 0)]
    f.rg0 = rgs[0]
    f.mode = _mode(f)
    f.inline = f.k is not None and f.mode != 0
    return f, tuple([rec.keep[s] for s in ret])


def vjp_dicts(frag) -> list:
    """The VJP dicts of forward fragment ``frag``'s recipes (None: an uncomposable marker): what
    ``cache.PlanCache`` counts as each VJP fragment comes, not with the forward fragment's own bytes."""
    if frag is None:
        return []
    return [r.vjps for r in (frag.graph if frag.graph is not None else (frag.recipe,)) if r is not None]


def _mode(f) -> int:
    """The node form of fragment ``f`` that ``_compose`` makes inline (its output's variable a name's, requiring
    grad, edge ((node, 0),)): 1, one node of one edge, from the input 0, saving nothing of the run's, the input
    0 alone or the output alone (``_takes``); 2, one node of two edges, from inputs 0 and 1, saving both in that
    order; 3, as 1 with a second edge of none (mul's literal); 4, as 1 with an edge from each of its (more than
    two) inputs in order (stack's); 0, any other (the general code)."""
    r = f.recipe
    if r is None or f.graph is not None or not f.single or not f.rg0 or r.live or r.nrs != (0,):
        return 0
    if r.edges == (0, 1) and r.star and r.take == ((0, 0), (0, 1)):
        return 2
    if not (r.take is None or r.take is _INPUT0 or r.take is _OUTPUT0):
        return 0
    if r.edges == (0,):
        return 1
    if r.edges == (0, -1):
        return 3
    if len(r.edges) > 2 and r.edges == tuple(range(len(r.edges))) and len(r.in_rg) == len(r.edges):
        return 4
    return 0


def _takes(recipe, refs: tuple) -> None:
    """What a node of the recipe keeps (``_NodeBase.saved``): one array as itself, else a tuple of them; arrays
    of the fragment alone (constants): one object for every node."""
    recipe.refs = refs
    recipe.star = len(refs) != 1
    recipe.fixed = ()
    recipe.take = refs
    if all(k == 3 for k, _ in refs):
        recipe.take = None
        recipe.fixed = tuple([a for _, a in refs]) if recipe.star else refs[0][1]
    elif refs == _INPUT0:
        recipe.take = _INPUT0
    elif refs == _OUTPUT0:
        recipe.take = _OUTPUT0


class _no_recording:
    """``K.recording()``'s place in a live run: nothing recorded."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _static(v) -> bool:
    c = v.__class__
    if v is None or c is int or c is float or c is bool or c is str:
        return True
    if c is tuple or c is list:
        return all(_static(x) for x in v)
    return False


def _graph(top, temps: list, outs_t: list, rec):
    """The recipes of the nodes an op made: ``top`` (its outputs' node) last, and before it, children first, the
    nodes a composite op made inside (cross_entropy's log_softmax...), whose edges lead to the op's inputs or to
    each other only. None: not composable so (an edge elsewhere, a saved value of another kind...)."""
    accs = {t._accumulator: j for j, t in enumerate(temps) if t._accumulator is not None}
    order: list = []
    index: dict = {}
    stack = [(top, False)]
    while stack:  # (post-order: a node after the nodes its edges lead to)
        n, done = stack.pop()
        if done:
            if n not in index:
                index[n] = len(order)
                order.append(n)
            continue
        if n in index:
            continue
        if n.__class__ is not Node or n.retained or n.variable is not None or len(order) > 64:
            return None
        stack.append((n, True))
        for c, _ in n.next_functions:
            if c is not None and c not in accs and c not in index:
                stack.append((c, False))
    if len(order) > 1 and rec is None:
        return None  # (a live op: one node only)
    out = []
    for n in order:
        r = _recipe(n, temps, outs_t if n is top else (), rec, accs, index)
        if r is None:
            return None
        out.append(r)
    return out


def _recipe(node, temps: list, outs_t, rec, accs: dict, index: dict):
    """One node's recipe (see ``_Recipe``); ``outs_t``: the op's outputs when ``node`` is their node, else ()
    (a node made inside the op: its own outputs are arrays of the fragment). Edges to the op's inputs are their
    index, to another node of the op (``index``: its place) ``(-2 - place, output_nr)``."""
    edges = []
    ids = {id(t): j for j, t in enumerate(temps)}
    for c, nr in node.next_functions:
        if c is None:
            edges.append(-1)
            continue
        j = accs.get(c)
        if j is None:
            k = index.get(c)
            if k is None or k >= index[node]:
                return None
            edges.append((-2 - k, nr))
            continue
        if nr != 0 or c.prim != _ACC or c.variable is not temps[j]:
            return None
        edges.append(j)
    refs: list = []
    own: dict = {}  # ref index -> (output_nr, requires_grad) of a saved output of a node made inside the op
    saved = []
    for slot, v in node.saved.items():
        if v.__class__ is SavedTensor:
            if v.version != 0:
                return None
            if v.is_output:
                t = v._ref()
                ref = None
                for i, o in enumerate(outs_t):
                    if o is t:
                        ref = (1, i)
                if outs_t and (ref is None or v._nr != t.output_nr):
                    return None
                if ref is None:  # (a node made inside the op: its own output, an array of the fragment)
                    sl = None if rec is None or v._data is None else rec.slot_of(v._data)
                    if sl is None:
                        return None
                    ref = (2, sl)
                    own_meta = (v._nr, bool(v._rg))
                else:
                    own_meta = None
            else:
                own_meta = None
                t = v._tensor
                j = ids.get(id(t))
                ref = None if j is None else (0, j)
                if ref is None:
                    # a tensor the op made itself (mul's literal, a composite's intermediate): its array
                    if t.__class__ is not Tensor or t._base is not None or t._vc[0] != 0 or t._fw_grad is not None \
                            or (t._requires_grad and (t._grad_fn is None or t._grad_fn not in index)):
                        return None
                    if rec is None:  # (live: the array itself)
                        ref = (3, t.data)
                    else:
                        sl = rec.slot_of(t.data)
                        if sl is None:
                            return None
                        ref = (2, sl)
                    if t._requires_grad:
                        own_meta = ("in", True)  # (a saved input of the node that requires grad)
            at = next((i for i, r in enumerate(refs) if r[0] == ref[0] and r[1] is ref[1]), None)
            if at is None:
                at = len(refs)
                refs.append(ref)
                if own_meta is not None:
                    own[at] = own_meta
            elif own.get(at) != own_meta:
                return None
            saved.append((slot, at, None))
        elif _static(v):
            saved.append((slot, -1, v))
        else:
            return None
    r = _Recipe()
    r.owner = None
    r.prim, r.name, r.n_outputs = node.prim, node.name, node.n_outputs
    r.input_meta, r.needs = node.input_meta, node.needs
    r.edges = tuple(edges)
    r.refs = tuple(refs)
    r.own = own
    r.saved = tuple(saved)
    r.nrs = tuple(int(t.output_nr) for t in outs_t)
    r.in_rg = tuple(bool(t._requires_grad) for t in temps)
    r.out_rg = tuple(bool(t._requires_grad) for t in outs_t)
    r.vjps = {}
    r.live = rec is None
    r.cls = None  # (made by _cls at the recipe's first node of a hit: a miss's own node is a _Node)
    return r


class _Node(_NodeBase):
    """A light node of a recipe without its class yet (``_cls``): its class attributes as its own."""

    __slots__ = ("prim", "n_outputs", "recipe")


def _cls(r):
    """The light node class of recipe ``r`` (``prim``, ``n_outputs`` and ``recipe`` as class attributes)."""
    r.cls = type("ComposedNode", (_NodeBase,), {"__slots__": (), "prim": r.prim, "n_outputs": r.n_outputs,
                                                "recipe": r})
    return r.cls


def _new_node(r, fresh: bool):
    """A light node of recipe ``r`` (its two fields to set): of its class, or (``fresh``: a miss's) a _Node."""
    if fresh:
        node = object.__new__(_Node)
        node.prim, node.n_outputs, node.recipe = r.prim, r.n_outputs, r
        return node
    return object.__new__(r.cls or _cls(r))


def _make_vjp(recipe: _Recipe, grads: list, saved: list, ins: list, budget=None):
    """Run the recipe's VJP once through the engine (a real Node over the arrays, ``autograd._apply``) under a
    recorder: (VJP fragment, this run's gradients per edge), or (None, None)."""
    dummy = Node(_ACC, _ACC, ())
    nexts = tuple((None, 0) if e.__class__ is int and e == -1 else (dummy, 0) for e in recipe.edges)
    node = Node(recipe.name, recipe.prim, nexts, None, recipe.input_meta, recipe.n_outputs)
    node._needs = recipe.needs
    tensors = []
    own = recipe.own
    outputs = set()
    for at, ((kind, i), a) in enumerate(zip(recipe.refs, saved)):
        o = own.get(at)
        if kind == 0:
            tensors.append(Tensor(a, recipe.in_rg[i]))
        elif kind == 1:
            tensors.append(Tensor(a, recipe.out_rg[i], node, recipe.nrs[i]))
            outputs.add(at)
        elif o is not None and o[0] != "in":  # (a node made inside the op: its own output)
            tensors.append(Tensor(a, o[1], node, o[0]))
            outputs.add(at)
        else:
            tensors.append(Tensor(a, o is not None))
    s = node.saved
    for slot, ref, value in recipe.saved:
        if ref < 0:
            s[slot] = value
        else:
            s[slot] = SavedTensor(tensors[ref], ref in outputs)
    gts = [None if g is None else Tensor(g) for g in grads]
    sink = WarningSink(set())
    live = recipe.live
    try:
        with K.recording() if not live else _no_recording() as rec, sink, np.errstate(all="ignore"), \
                set_grad_enabled(False):
            if live:
                with budget:
                    outs = _apply(node, gts)
            else:
                for a in ins:
                    rec.add_input(a)
                outs = _apply(node, gts)
    except Exception:  # noqa: BLE001 - the cold run gives the error
        return _no(12), None
    if sink.messages or (not live and (rec.reason is not None or rec.unknown_writes() or len(rec.inputs) != len(ins))):
        return _no(13), None
    if live:
        if any(o is not None and (o.__class__ is not Tensor or o._requires_grad or o._grad_fn is not None)
               for o in outs):
            return _no(14), None
        res = [None if o is None else o.data for o in outs]
        return True, (*res, *[None] * (len(recipe.edges) - len(res)))  # (one per edge: _run_all's apply)
    res = []
    slots = []
    for o in outs:
        if o is None:
            slots.append(-1)
            res.append(None)
            continue
        if o.__class__ is not Tensor or o._requires_grad or o._grad_fn is not None:
            return _no(14), None
        sl = rec.slot_of(o.data)
        if sl is None:
            return _no(15), None
        slots.append(sl)
        res.append(o.data)
    for _ in range(len(recipe.edges) - len(slots)):  # (one gradient per edge: _run_all's apply)
        slots.append(-1)
        res.append(None)
    made = T.fragment(rec, [s for s in slots if s >= 0])
    if made is None:
        return _no(16), None
    steps, nbytes, maxsize, consts = made
    f = _VjpFrag()
    f.fn, f.code = None, (steps, len(ins), slots, recipe.name)
    f.cbytes = sum(c.nbytes for c in consts.values())
    f.nbytes, f.maxsize = nbytes, maxsize
    return f, tuple(res)


# ----- the run -----------------------------------------------------------------------------------------------
class _Run:
    """One composed run's counters and limits, and its VJP (``apply``) for ``_run_all``."""

    def __init__(self, cache, limits):
        self.cache = cache  # (a ``cache.PlanCache``: the fragments' table)
        self.hits = self.misses = 0
        self.nbytes = 0
        self.nodes = 0
        self.limits = limits
        self.max_el = limits.max_elements_per_tensor if limits is not None else 1 << 62
        self.max_bytes = limits.max_bytes // 2 if limits is not None else 1 << 62
        self.max_nodes = limits.max_nodes // 2 if limits is not None else 1 << 62
        self.buf: list = []  # the run's arrays (a descriptor's slot is its place here)
        self.control = None
        self.slack = _MISS_SLACK
        self.leaves: dict = {}  # id(variable) -> ((its _Acc, 0),)
        self.retains: dict = {}  # id(variable) -> the non-leaf variables retain_grad marked
        # id(variable) -> after the backward, a leaf's .grad slot in ``buf`` (its descriptor made when read:
        # ``_Descs``), or a retained non-leaf's descriptor
        self.grads: dict | None = None
        self.ops: list = []  # the list, its inputs' places and metadata (for ``_repeats``)
        self.inputs_at: list = []
        self.metas: tuple = ()
        self.looked = False
        self.why = ""  # why it gave up (``route.COMPOSE_CODES``), and where
        self.at = None
        self.detail = ""

    def miss(self, index: int = -1, ns: dict | None = None) -> None:
        """A fragment not found (at op ``index`` of the forward, ``ns`` its names so far; -1: in the backward),
        about to be recorded: gives up instead when the misses would outnumber the hits by more than the slack, or
        (once, early: at a run's first miss before any hit, by default) when the list does not look as if it
        repeats itself (``_repeats``, again in the middle of a long list). A miss that gives up records nothing
        and is not counted."""
        m = self.misses + 1
        if m > _MISS_EARLY + self.hits and index >= 0 and not self.looked:
            self.looked = True
            ops, at, metas = self.ops, self.inputs_at, self.metas
            if not _repeats(ops, index, at, metas, ns) and (len(ops) - index < _LOOK_AGAIN or not _repeats(
                    ops, (index + len(ops)) // 2, at, metas, ns, _LOOK_AHEAD)):
                raise _GiveUp("misses")
        if m > self.slack + self.hits:
            raise _GiveUp("misses")
        self.misses = m

    def made(self, nbytes: int, maxsize: int) -> None:
        self.nbytes += nbytes
        if self.nbytes > self.max_bytes or maxsize > self.max_el:
            raise _GiveUp

    def apply(self, node, g) -> tuple:
        """The composed VJP of ``node`` (``_run_all``'s ``apply``): ``g`` its gradient as an array (a multi-output
        node's: the list, per output), one gradient per edge."""
        recipe = node.recipe
        if g.__class__ is list:
            return self._apply_slow(recipe, g, node.saved if recipe.star else (node.saved,))
        saved = node.saved
        if recipe.star:
            for a in saved:
                if a is g:
                    return self._apply_slow(recipe, [g], saved)
        elif saved is g:
            return self._apply_slow(recipe, [g], (saved,))
        vf = recipe.vjps.get((g.shape, g.dtype, g.strides))  # (``key._vjp_key``'s first form, inline)
        if vf is None:
            return self._apply_slow(recipe, [g], saved if recipe.star else (saved,))
        n = self.nbytes = self.nbytes + vf.nbytes
        h = self.hits = self.hits + 1
        if n > self.max_bytes or vf.maxsize > self.max_el:
            raise _GiveUp
        if not h % _CHECK_EVERY and self.control is not None:
            self.control.check()  # (a deadline or a cancellation stops a long pass between nodes)
        fn = vf.fn or _compiled(vf, self.cache)
        return fn(g, *saved) if recipe.star else fn(g, saved)

    def _apply_slow(self, recipe, grads, saved) -> tuple:
        """``apply`` for a multi-output node, a gradient that is a saved array, a miss, or a live recipe."""
        gl = list(grads)
        ins = []
        seen = set()
        for a in (*gl, *saved):
            if a is not None and id(a) not in seen:
                seen.add(id(a))
                ins.append(a)
        if recipe.live:  # (through the engine, unrecorded, as the cold run runs it)
            budget = Budget(self.limits if self.limits is not None else _NO_LIMITS)
            ok, res = _make_vjp(recipe, gl, saved, ins, budget)
            if ok is None:
                raise _GiveUp
            self.made(budget.total(), max([0, *[a.size for a in res if a is not None]]))
            return res
        key = _vjp_key(gl, saved, ins, recipe.n_outputs)
        vf = recipe.vjps.get(key)
        if vf is None:
            self.miss()
            vf, res = _make_vjp(recipe, gl, saved, ins)
            if vf is None:
                raise _GiveUp
            if len(recipe.vjps) < _VJPS_PER_FRAG:
                self.cache.add_vjp(recipe.owner, recipe.vjps, key, vf)
            self.made(vf.nbytes, vf.maxsize)
            return res
        self.hits += 1
        self.made(vf.nbytes, vf.maxsize)
        if self.control is not None:
            self.control.check()
        return (vf.fn or _compiled(vf, self.cache))(*ins)


def _add(a, b):
    """``autograd._add_unrecorded`` on arrays: two gradients of one dtype and shape, through add's kernel."""
    if (a.dtype is not b.dtype and a.dtype != b.dtype) or a.shape != b.shape:
        raise _GiveUp
    r = np.add(a, b)
    return r if r.__class__ is _ndarray else _asarray(r)


def _copy_is_itself(a) -> bool:
    """A copy of ``a`` (``np.array(a, copy=True)``, order K or C) would have its layout: ``a`` is writable,
    C-contiguous and has the strides a fresh C array of its shape has (a C-contiguous view may not: a (1, 3) row
    of a transposed (3, 1) has strides (4, 4), its copy (12, 4))."""
    flags = a.flags
    if not (flags.c_contiguous and flags.writeable):
        return False
    if a.size == 0:
        return a.strides == np.empty(a.shape, a.dtype).strides
    s = a.itemsize
    strides = a.strides
    for i in range(a.ndim - 1, -1, -1):
        if strides[i] != s:
            return False
        s *= a.shape[i]
    return True


def _alias_or_copy(a):
    """``kernel.snapshot(a)`` where nothing writes in place and every array dies with the response: ``a``
    itself when the copy would have its layout (``tape.copy_renames``' rule)."""
    if _copy_is_itself(a):
        return a
    return np.array(a, copy=True)


def compose(cache, state: State, ops: list, inputs_at: list, inputs: list, metas: tuple, kwargs: dict,
            shown):
    """The one-shot run of ``ops`` (inputs: the arrays ``plan._key`` made for the ``tensor`` ops at
    ``inputs_at``) composed from fragments: ((plan, buffer) or None when it gives up, the run's counters)."""
    limits = kwargs.get("limits")
    run = _Run(cache, limits)
    run.slack = max(_MISS_SLACK, len(ops) // _MISS_PER)
    run.ops, run.inputs_at, run.metas = ops, inputs_at, metas
    if state.tensors or state.functions:
        run.why = "state"
        return None, run
    try:
        with np.errstate(all="ignore"):
            made = _compose(run, ops, inputs_at, inputs, metas, kwargs, shown)
    except _GiveUp as e:
        made, run.why = None, e.args[0] if e.args else "form"
    except Exception as e:  # noqa: BLE001 - a kernel's check, the deadline...: the cold run gives it
        made, run.why = None, "raised"
        run.detail = type(e).__name__  # (not its message, which may quote values: the cold run's error has it)
    return made, run


_NOT_LOOKED_AT = _ACTIONS | {"tensor"}


def _repeats(ops: list, index: int, inputs_at: list = (), metas: tuple = (), ns: dict | None = None,
             back: int = _LOOK_BACK) -> bool:
    """Whether the list may repeat its op forms from op ``index`` on: at least a quarter of the next
    ``_LOOK_AHEAD`` ops (inputs and actions left out) have the signature (``_op_sig``: equal forms have equal
    signatures) of an op before them (one of the ``back`` ops up to ``index``, or an earlier one of those ahead: a
    loop's first steps), a name there standing for its tensor's shape, dtype and flag when it is bound before
    (``ns``) or an input (``metas``, of the inputs at ``inputs_at``; an intermediate not bound yet: None).
    Nothing ahead: True (a few more misses at most). It stops as soon as the answer is certain (a quarter of the
    window seen again, or more than three quarters new): a list that never repeats pays for three quarters of
    the window's signatures (~0.7 us each; ~20 us in all, ~1% of a 100-op list's cold run)."""
    skip = _NOT_LOOKED_AT
    sig = _op_sig
    if ns is None:
        ns = _NO_NAMES
    ahead: dict = {}
    seen: set = set()
    add = seen.add
    enough, too_many = _LOOK_AHEAD, 3 * _LOOK_AHEAD  # (4 * repeated, 4 * new: certain either way)
    n = same = 0
    lo = max(0, index - back)
    j = bisect_left(inputs_at, lo)  # (the next input's place in ``inputs_at``)
    at = inputs_at[j] if j < len(inputs_at) else -1
    for i, op in enumerate(islice(ops, lo, None), lo):
        if i == at:
            ahead[op.get("out")] = metas[j]
            j += 1
            at = inputs_at[j] if j < len(inputs_at) else -1
            continue
        if op.get("op") in skip:
            continue
        s = sig(op, ns, ahead)
        if i <= index:
            add(s)
            continue
        n += 1
        if s in seen:
            same += 1
            if 4 * same >= enough:
                return True
        else:
            add(s)
            if 4 * (n - same) > too_many:
                return False
        if n == _LOOK_AHEAD:
            break
    return n == 0 or 4 * same >= n


def _plain_name(out) -> bool:
    return out.__class__ is str and out.isidentifier() and len(out) <= 64 and out.isascii()


def _plain_names(names: list) -> bool:
    """``_plain_name`` of every name of ``names`` (a TypeError: one is not a string), in C-level passes."""
    return not names or (all(map(_isidentifier, names)) and all(map(_isascii, names)) and max(map(len, names)) <= 64)


def _compose(run: _Run, ops: list, inputs_at: list, inputs: list, metas: tuple, kwargs: dict, shown):
    frags = run.cache.table
    put = run.cache.put_fragment
    no_grad_all = bool(kwargs.get("no_grad", False))
    control = kwargs.get("control")
    ns: dict = {}
    special: dict = {}  # op index -> the names it bound, where that is not [its out name]
    autograd = []
    buf: list = run.buf
    leaves = run.leaves
    passes = 0
    nodes = 0
    hits = 0
    nbytes = 0
    max_bytes, max_el = run.max_bytes, run.max_el
    max_nodes = run.max_nodes
    # the inputs the list begins with (a /v1/eval request's, usually all of them), bound in a few C-level passes
    lead = bisect_right(range(len(inputs_at)), 0, key=lambda i: inputs_at[i] - i)  # (inputs_at: sorted, distinct)
    if lead:
        arrs = inputs[:lead]
        names = list(map(_get, ops[:lead], repeat("out")))
        if not _plain_names(names):
            raise _GiveUp
        ns.update(zip(names, zip(arrs, map(_third, metas), repeat(None), range(lead))))  # ((arr, rg, None, slot))
        buf += arrs
        nbytes = sum(map(_nbytes, arrs))
        if max(map(_size, arrs)) > max_el:
            raise _GiveUp("limits")
    inp = iter(zip(inputs_at[lead:], inputs[lead:], metas[lead:]))
    nxt = next(inp, None)
    at = nxt[0] if nxt is not None else -1
    forms = _FORMS
    new = object.__new__
    try:
        for index in range(lead, len(ops)):
            op = ops[index]
            if index == at:
                arr, rg = nxt[1], nxt[2][2]
                nxt = next(inp, None)
                at = nxt[0] if nxt is not None else -1
                out = op.get("out")
                if not (out.__class__ is str and out.isidentifier() and out.isascii() and len(out) <= 64):
                    raise _GiveUp
                ns[out] = (arr, rg, None, len(buf))
                buf.append(arr)
                nbytes += arr.nbytes
                if arr.size > max_el:
                    raise _GiveUp("limits")
                continue
            if not index & _CHECK_MASK and control is not None and (control.reason is not None or (
                    control.deadline is not None and _monotonic() > control.deadline)):
                raise _GiveUp("limits")
            name = op["op"]
            args = op.get("args") or _NO_ARGS
            kw = op.get("kwargs") or _NO_KWARGS
            out = op.get("out")
            if args.__class__ is not list or kw.__class__ is not dict:
                raise _GiveUp
            form = forms.get(name)
            if form is None:
                if name in _ACTIONS:
                    run.nbytes, run.nodes, run.hits = nbytes, nodes, run.hits + hits
                    hits = 0
                    passes += _action(run, index, name, args, kw, out, op, ns, special, autograd, passes, control)
                    nbytes, nodes = run.nbytes, run.nodes
                    continue
                form = _form(name)
            if form is False:
                raise _GiveUp("op")
            grad_on = not (no_grad_all or op.get("no_grad", False))
            if out.__class__ is str and out.isidentifier() and out.isascii() and len(out) <= 64:
                oform = 0
            elif out.__class__ is list and out and all(_plain_name(n) for n in out):
                oform = len(out)
            else:
                raise _GiveUp
            na = len(args)
            fast = form[5] if not kw and 0 < na <= 2 else 0
            a = args[0] if fast else None
            # the inputs: ``vs`` (None: [v] or, w not None, [v, w]); v and w its first two (or None)
            if fast and a.__class__ is str and na == 1:
                # one tensor argument: the common form, its key made as one tuple
                v = ns.get(a)
                if v is None:
                    raise _GiveUp
                vs = w = None
                x = v[0]
                key = (name, grad_on, oform, x.shape, x.dtype, x.strides, v[1])
            elif fast == 2 and a.__class__ is str:
                # a tensor and a number or another tensor
                v = ns.get(a)
                if v is None:
                    raise _GiveUp
                vs = w = None
                x = v[0]
                b = args[1]
                c = b.__class__
                if c is str and form[1][1] == _TENSOR:
                    w = ns.get(b)
                    if w is None:
                        raise _GiveUp
                    if w is v:
                        w = None
                        key = (name, grad_on, oform, x.shape, x.dtype, x.strides, v[1], 0)
                    else:
                        y = w[0]
                        key = (name, grad_on, oform, x.shape, x.dtype, x.strides, v[1], y.shape, y.dtype, y.strides,
                               w[1])
                elif c is float and b == b and b != 0.0 or c is int or c is bool:
                    key = (name, grad_on, oform, x.shape, x.dtype, x.strides, v[1], (c, b))
                else:
                    key = (name, grad_on, oform, x.shape, x.dtype, x.strides, v[1], _lit(b))
            else:
                key = [name, grad_on, oform]
                vs = []
                _key_of(form, args, kw, ns, key, vs)
                key = tuple(key)
                n = len(vs)
                v = vs[0] if n else None
                w = vs[1] if n > 1 else None
            frag = frags.get(key, _ABSENT)
            if frag.__class__ is _Frag and frag.inline:  # (a hit of one kernel call and a node form: all inline)
                hits += 1
                frag.used = True  # (the cache's least-recently-used order, applied when its eviction meets it)
                k = frag.k
                r0 = k(v[0], w[0], *frag.pre) if frag.two else k(v[0], *frag.pre)
                if r0.__class__ is not _ndarray:
                    r0 = _asarray(r0)
                mode = frag.mode
            else:
                if vs is None:
                    vs = [v] if w is None else [v, w]
                mode = 0
                fresh = frag is _ABSENT
                if fresh:
                    if form[4] is not None and not form[4](args, kw):
                        raise _GiveUp  # (the call-form check reads nothing the key holds not: a hit passed it)
                    run.hits += hits
                    hits = 0
                    if len(vs) > T.FRAGMENT_CODEGEN_MAX:  # (a wide op: run live, nothing kept)
                        frag, res = _make_frag(index, op, no_grad_all, vs, run.limits, ns, live=True)
                    else:
                        run.miss(index, ns)
                        frag, res = _make_frag(index, op, no_grad_all, vs, run.limits, ns)
                        if frag is not None:
                            for r in frag.graph or (frag.recipe,):
                                if r is not None:
                                    r.owner = key
                        put(key, frag)
                    if frag is None:
                        raise _GiveUp("op")
                elif frag is None:
                    raise _GiveUp("op")
                else:
                    hits += 1
                    frag.used = True
                    k = frag.k
                    if k is not None:  # (one kernel call: ``fn`` inline)
                        r0 = k(v[0], w[0], *frag.pre) if frag.two else k(v[0], *frag.pre)
                        if r0.__class__ is not _ndarray:
                            r0 = _asarray(r0)
                        res = (r0,)
                    else:
                        n = len(vs)
                        fn = frag.fn or _compiled(frag, run.cache)
                        res = fn(vs[0][0]) if n == 1 else fn(vs[0][0], vs[1][0]) if n == 2 else \
                            fn(*[v[0] for v in vs])
                        r0 = res[0]
                    mode = frag.mode
            if mode:  # (the common node forms of a hit, straight: what the general code below does for them)
                nbytes += frag.nbytes
                if nbytes > max_bytes or frag.maxsize > max_el:
                    raise _GiveUp("limits")
                recipe = frag.recipe
                nexts = v[2]
                if nexts is None:
                    nexts = leaves.get(id(v))
                    if nexts is None:
                        acc = new(_Acc)  # (``_Acc(v)`` without its __init__ frame: every field set here)
                        acc.var, acc.accs, acc.gvar = v, 0, None
                        nexts = leaves[id(v)] = ((acc, 0),)
                        nodes += 1
                node = new(recipe.cls or _cls(recipe))
                if mode == 2:  # (two edges, from the two inputs; both saved)
                    n0 = len(leaves)
                    node.next_functions = (nexts[0], _edge(w, leaves))
                    nodes += len(leaves) - n0  # (the accumulator made)
                    node.saved = (v[0], w[0])
                else:
                    if mode == 1:
                        node.next_functions = nexts
                    elif mode == 3:  # (and no edge: mul's literal)
                        node.next_functions = (nexts[0], _NO_EDGE)
                    else:  # (an edge from each input, in order: stack's)
                        n0 = len(leaves)
                        node.next_functions = (nexts[0], *[_edge(w, leaves) for w in vs[1:]])
                        nodes += len(leaves) - n0  # (the accumulators made)
                    take = recipe.take
                    node.saved = recipe.fixed if take is None else v[0] if take is _INPUT0 else r0
                node.retained = None
                nodes += 1
                if nodes > max_nodes:
                    raise _GiveUp("limits")
                ns[out] = (r0, True, ((node, 0),), len(buf))
                buf.append(r0)
                continue
            nbytes += frag.nbytes
            if nbytes > max_bytes or frag.maxsize > max_el:
                raise _GiveUp("limits")
            recipe = frag.recipe
            if recipe is None:
                e1 = None
            elif frag.graph is not None:  # (a composite op: its nodes, children first)
                run.nodes = nodes
                node = _nodes(frag.graph, vs, res, leaves, run, fresh)
                nodes = run.nodes
                if nodes > max_nodes:
                    raise _GiveUp("limits")
                e1 = ((node, 0),)
            else:
                edges = recipe.edges
                if len(edges) == 1:
                    e = edges[0]
                    if e < 0:
                        nexts = _NO_EDGES
                    else:
                        v = vs[e]
                        nexts = v[2]
                        if nexts is None:
                            nexts = leaves.get(id(v))
                            if nexts is None:
                                nexts = leaves[id(v)] = ((_Acc(v), 0),)
                                nodes += 1
                else:
                    n0 = len(leaves)
                    nexts = tuple([_NO_EDGE if e < 0 else _edge(vs[e], leaves) for e in edges])
                    nodes += len(leaves) - n0  # (the accumulators made)
                take = recipe.take
                cls = recipe.cls  # (_NodeBase's fields set here: no __init__ frame per node)
                node = new(cls) if cls is not None and not fresh else _new_node(recipe, fresh)
                node.next_functions = nexts
                node.retained = None
                if take is None:
                    node.saved = recipe.fixed
                elif take is _INPUT0:
                    node.saved = vs[0][0]
                elif take is _OUTPUT0:
                    node.saved = res[0]
                else:
                    sv = tuple([vs[i][0] if k == 0 else res[i] if k != 3 else i for k, i in take])
                    node.saved = sv if recipe.star else sv[0]
                nodes += 1
                if nodes > max_nodes:
                    raise _GiveUp("limits")
                e1 = ((node, 0),)
            if frag.single:
                if frag.rg0:
                    ns[out] = (res[0], True, e1, len(buf))
                else:
                    ns[out] = (res[0], False, None, len(buf))
                buf.append(res[0])
                continue
            made = []
            for i in range(frag.nout):
                rg = frag.rgs[i]
                made.append((res[i], rg, ((node, recipe.nrs[i]),) if rg else None, len(buf)))
                buf.append(res[i])
            bound = []
            for pos, i in frag.binds:
                n = out[pos] if out.__class__ is list else out if pos < 0 else f"{out}_{pos}"
                ns[n] = made[i]
                bound.append(n)
            if bound != [out]:
                special[index] = bound
    except Exception:
        run.at = index  # (where it gave up: the route's detail)
        raise
    finally:
        run.hits += hits
    run.nbytes, run.nodes = nbytes, nodes
    # ----- the result, as a replay of a one-shot run leaves it
    names = list(ns)
    grads = run.grads  # id(variable) -> its .grad after the backward (``_Run.grads``)
    if shown is None:
        items = ns.items()
    else:
        keep = set(shown)
        for _, entries in autograd:
            keep.update([e[0] for e in entries])
        items = [(n, v) for n, v in ns.items() if n in keep]
    namespace = _Descs(dict(items) if items.__class__ is list else ns, grads or {}, run.retains)
    reports = []
    for index, entries in autograd:
        es = []
        for n, accs, c, gc in entries:
            cs = len(buf)
            buf.append(c)
            if gc is c:
                gs = cs
            else:
                gs = len(buf)
                buf.append(gc)
            es.append((n, cs, (gs, False, None, False, 0, 0, None), accs))
        reports.append((index, "backward", es))
    lim = run.limits
    if lim is not None and lim.max_response_bytes is not None:
        _response(namespace, reports, buf, kwargs, lim, names)
    plan = Plan((), [], [], [], len(buf), (), namespace, [], (ops, special), names, reports, passes)
    return plan, buf


class _Descs(Mapping):
    """The namespace's descriptors (``plan._desc``'s form) by name, each made when first read: what a
    ``replayed._Namespace`` reads of its dict of descriptors (a response reads the names it shows). The rest of the
    read-only mapping protocol (get, keys, items) is ``Mapping``'s."""

    __slots__ = ("_vars", "_grads", "_retains")

    def __init__(self, variables: dict, grads: dict, retains: dict):
        self._vars = variables
        self._grads = grads
        self._retains = retains

    def __getitem__(self, name):
        v = self._vars[name]
        d = self._grads.get(id(v))
        if d is None:
            e = v[2]
            d = (v[3], v[1], None if e is None else e[0][0].recipe.name, id(v) in self._retains, 0, 0, None)
        elif d.__class__ is int:  # (a leaf's .grad, at slot d, of its one accumulation)
            d = (v[3], v[1], None, False, 0, 1, (d, False, None, False, 0, 0, None))
        return d

    def __contains__(self, name) -> bool:  # (without making the descriptor)
        return name in self._vars

    def __iter__(self):
        return iter(self._vars)

    def __len__(self) -> int:
        return len(self._vars)


_NO_EDGE = (None, 0)
_NO_EDGES = (_NO_EDGE,)
_NO_ARGS: list = []  # (read only)
_NO_LIMITS = Limits()  # a budget's limits where the run has none (it only counts)
_NO_KWARGS: dict = {}  # (read only)
_INPUT0 = ((0, 0),)  # a recipe's ``take`` that saves its first input alone (the common cases, inline)
_OUTPUT0 = ((1, 0),)


def _edge(v, leaves: dict) -> tuple:
    """The edge into a node from the variable ``v``: its producer's, or (a leaf) its accumulator's, made on
    first use (``leaves`` grows by one then)."""
    e = v[2]
    if e is None:
        e = leaves.get(id(v))
        if e is None:
            e = leaves[id(v)] = ((_Acc(v), 0),)
    return e[0]


def _nodes(graph: list, vs: list, res: tuple, leaves: dict, run: _Run, fresh: bool):
    """The light nodes of a composite op's recipes (children first): the last, its outputs' node."""
    made: list = []
    for r in graph:
        n0 = len(leaves)
        nexts = tuple([(made[-2 - e[0]], e[1]) if e.__class__ is tuple else _NO_EDGE if e < 0 else _edge(vs[e], leaves)
                       for e in r.edges])
        run.nodes += len(leaves) - n0  # (the accumulators made)
        node = _new_node(r, fresh)
        node.next_functions = nexts
        node.retained = None
        take = r.take
        if take is None:
            node.saved = r.fixed
        else:
            sv = tuple([vs[i][0] if k == 0 else res[i] if k != 3 else i for k, i in take])
            node.saved = sv if r.star else sv[0]
        run.nodes += 1
        made.append(node)
    return made[-1]


def _action(run: _Run, index, name, args, kw, out, op, ns, special, autograd, passes, control) -> int:
    """``backward`` (one root, no other argument, once), ``del`` and ``bind`` (of a name, or of a leaf's
    ``.grad``); anything else gives up. Returns the backward passes it ran."""
    if name == "backward":
        # Tensor.backward(gradient=None, retain_graph=None, create_graph=False) of one root, once (the graph is
        # freed by then or not: nothing a one-shot run shows, but a second pass would read it)
        kw = dict(kw)
        tensors = args[0] if args else kw.pop("tensors", None)
        if len(args) > 2 or (len(args) == 2 and "gradient" in kw):
            raise _GiveUp
        gradient = args[1] if len(args) == 2 else kw.pop("gradient", None)
        retain = kw.pop("retain_graph", None)
        if passes or kw.pop("create_graph", False) is not False or kw.pop("inputs", None) is not None or kw \
                or not (retain is None or retain.__class__ is bool):
            raise _GiveUp
        if tensors.__class__ is list and len(tensors) == 1:
            tensors = tensors[0]
        root = ns.get(tensors) if tensors.__class__ is str else None
        g = ns.get(gradient) if gradient.__class__ is str else None
        if root is None or (gradient is not None and g is None):
            raise _GiveUp
        autograd.append((index, _backward(run, root, ns, control, g)))
        special[index] = []
        return 1
    if name == "retain_grad":
        # Tensor.retain_grad(): a leaf's is nothing, a non-leaf's .grad is kept by the next backward
        t = args[0] if args else kw.get("self")
        v = ns.get(t) if t.__class__ is str else None
        if v is None or len(args) + len(kw) != 1 or not v[1]:
            raise _GiveUp  # (an unknown name, a tensor that does not require grad: the cold run's error)
        e = v[2]
        if e is not None:
            node, nr = e[0]
            if node.retained is None:
                node.retained = {}
            node.retained.setdefault(nr, v)
            run.retains[id(v)] = v
        special[index] = []
        return 0
    if name == "del":
        if kw or not all(a.__class__ is str for a in args):
            raise _GiveUp
        for a in args:
            ns.pop(a, None)
        special[index] = []
        return 0
    # bind
    if len(args) != 1 or kw or not _plain_name(out) or args[0].__class__ is not str:
        raise _GiveUp
    base, dot, attr = args[0].partition(".")
    v = ns.get(base)
    if v is None or (dot and attr != "grad"):
        raise _GiveUp
    if dot:
        leaf = run.leaves.get(id(v))
        leaf = None if leaf is None else leaf[0][0]
        if leaf is None or leaf.gvar is None:
            raise _GiveUp  # (a non-leaf's .grad warns; an unset one unbinds)
        v = leaf.gvar
        if v.__class__ is int:  # (its slot in the buffer: the variable made at its first bind)
            v = leaf.gvar = (run.buf[v], False, None, v)
    ns[out] = v
    return 0


def _response(namespace, reports, buf, kwargs, lim, names) -> None:
    """The response's bytes as ``program._count_response`` counts them; over the limit: give up (the cold run
    gives the error)."""
    respond = kwargs.get("respond", "changed")
    size = kwargs.get("response_size")
    variables, grads = namespace._vars, namespace._grads
    small = SMALL_RESPONSE_ELEMENTS
    total = 0

    def count(a):
        n = a.size
        return 25 * n + 64 if n <= small else size(a) if size is not None else a.nbytes
    shown = names if isinstance(respond, str) else respond
    for n in shown:
        if n.__class__ is not str:
            continue
        base, dot, attr = n.partition(".")
        if dot and attr != "grad":
            raise _GiveUp
        v = variables.get(base)
        if v is None:
            continue
        g = grads.get(id(v)) if grads else None
        if not dot:
            a = v[0]
            total += 25 * a.size + 64 if a.size <= small else count(a)
        if g is not None:
            total += count(buf[g if g.__class__ is int else g[6][0]])
    for _, _, es in reports:
        for _, c, g, _ in es:
            total += count(buf[c])
            if g is not None:
                total += count(buf[g[0]])
    if total > lim.max_response_bytes:
        raise _GiveUp


def _backward(run: _Run, root: tuple, ns: dict, control, gradient: tuple | None = None) -> list:
    """``backward(root)``: the pass over the composed graph (``autograd._run_all`` with ``run.apply``); sets the
    leaves' ``.grad`` (as ``_accumulate_leaf`` does) and returns the report's entries (name, accumulations,
    the contribution's snapshot, the .grad's snapshot), as ``_Runner.report`` makes them."""
    a = root[0]
    if not root[1]:
        raise _GiveUp  # (the cold run's error)
    if gradient is None:
        if a.size != 1:
            raise _GiveUp
        seed = np.ones(a.shape, a.dtype)
    else:  # (_make_grads: the caller's tensor itself, of the root's shape and dtype; anything else cold)
        seed = gradient[0]
        if seed.shape != a.shape or seed.dtype != a.dtype:
            raise _GiveUp
    if root[2] is not None:
        node, nr = root[2][0]
    else:
        e1 = run.leaves.get(id(root))
        if e1 is None:
            e1 = run.leaves[id(root)] = ((_Acc(root), 0),)
        node, nr = e1[0]
    b = [None] * node.n_outputs
    b[nr] = seed
    buffers: dict = {node: b}
    leaf_grads: list = []
    retained: list = []
    executed: list = []
    run.control = control  # (read every _CHECK_EVERY nodes by run.apply: _run_all checks none)
    # (retain_grad hooks: only where a retain_grad marked a node, else no node's ``retained`` is read)
    _run_all([node], buffers, False, bool(run.retains), None, leaf_grads, retained, executed, run.apply, _add)
    claimed = {id(seed)}
    buf = run.buf
    put = buf.append
    at = len(buf)
    grads = run.grads = {}
    # the report's entries, in the order the gradients came: the variable's id, the snapshots of the contribution
    # and of the .grad (parallel lists: no tuple per leaf)
    ids: list = []
    cs: list = []
    gcs: list = []
    for leaf, g in zip(leaf_grads[::2], leaf_grads[1::2]):
        if leaf.gvar is not None:
            raise _GiveUp
        v = leaf.var
        a = v[0]
        if g.dtype is not a.dtype and g.dtype != a.dtype:
            g = g.astype(a.dtype)
        # _accumulate_leaf: a gradient array that may be shared gets a copy (here: itself where the copy would
        # have its layout)
        flags = g.flags
        # (a copy would have g's layout: g itself stands for it; a 0-d array is C-contiguous, its copy too)
        same = flags.writeable if g.ndim == 0 else _copy_is_itself(g)
        i = id(g)
        if flags.writeable and flags.owndata and i not in claimed:
            ga = g
            claimed.add(i)
        else:
            ga = g if same else g.copy()
        leaf.accs = 1  # (its first: a list runs one backward, and gvar was None)
        # the leaf's .grad: a variable of its own (``gvar``: its slot in the buffer until ``bind x.grad`` names
        # it), and the leaf's descriptor
        put(ga)
        leaf.gvar = at
        i = id(v)
        grads[i] = at  # (its descriptor, of its one accumulation, made when read: _Descs)
        at += 1
        c = g if same else np.array(g, copy=True)
        ids.append(i)
        cs.append(c)
        gcs.append(c if ga is g else ga)  # (ga: a fresh copy, its snapshot is itself)
    for v, g in retained:  # retain_grad: a clone of the gradient (here: itself where the clone has its layout)
        if id(v) in grads:
            raise _GiveUp
        same = _copy_is_itself(g)
        ga = g if same else np.array(g, copy=True, order="K")
        c = g if same else np.array(g, copy=True)
        gd = (len(buf), False, None, False, 0, 0, None)
        buf.append(ga)
        e = v[2][0][0]
        grads[id(v)] = (v[3], v[1], e.recipe.name, True, 0, 1, gd)
        ids.append(id(v))
        cs.append(c)
        gcs.append(ga if ga is g else _alias_or_copy(ga))
    # the report: each leaf under its first name (one pass over the namespace), of its one accumulation
    want = dict(zip(ids, range(len(ids))))
    names = [None] * len(ids)
    left = len(ids)
    if left:
        find = want.pop
        for n, v in ns.items():
            k = find(id(v), None)
            if k is not None:
                names[k] = n
                left -= 1
                if not left:
                    break
    return [(n, 1, c, gc) for n, c, gc in zip(names, cs, gcs) if n is not None]


_ABSENT = object()


def run(cache, state: State, ops: list, inputs_at: list, inputs: list, metas: tuple, kwargs: dict, shown):
    """``compose`` through ``cache`` (a ``cache.PlanCache``: its fragments, its counters): (the run's result, None),
    or (None, the cold route and why: nothing changed, the caller runs the list cold)."""
    if len(ops) - len(inputs_at) < _MIN_OPS:
        return None, R.COLD_SHORT
    if cache.fragment_entries <= 0:
        return None, _NOT_COMPOSABLE["disabled"]
    made, r = compose(cache, state, ops, inputs_at, inputs, metas, kwargs, shown)
    cache.count_compose(r.hits, r.misses, made is not None)
    if made is None:
        if r.at is None and not r.detail:
            return None, _NOT_COMPOSABLE.get(r.why) or _NOT_COMPOSABLE["form"]
        op = ops[r.at] if r.at is not None and r.at < len(ops) else None
        where = f"op {r.at} {op.get('op')!s:.40}" if op.__class__ is dict else ""
        detail = f"{where}{'; ' if where and r.detail else ''}{r.detail}"
        return None, R.Route("cold", f"not_composable:{r.why if r.why in R.COMPOSE_CODES else 'form'}", detail)
    plan, buf = made
    state.tensors = _Namespace(buf, plan.namespace, {})
    state.backward_passes += plan.backward_passes
    return _PlannedResult(plan, buf), None


_NOT_COMPOSABLE = {code: R.Route("cold", f"not_composable:{code}") for code in R.COMPOSE_CODES}
