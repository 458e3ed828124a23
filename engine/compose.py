"""Composed one-shot runs: an op list that has no plan runs as a sequence of per-op fragments.

A ``/v1/eval`` run of an op list never seen before (no plan of its structure: ``engine.plan``) would run op by
op through the object engine (a Tensor, a Node, SavedTensors, the checks of ``_Runner.run_op`` and the VJP's
Python per op). Most ops of a long list repeat: the same op on inputs of the same shapes, dtypes and flags.
``compose`` runs such a list from **fragments**, recorded once per op form and kept in a bounded cache
(``Fragments``, owned by the ``PlanCache``):

* **Forward fragment** (``_Frag``), keyed by the op's name, its arguments with each tensor name replaced by
  its tensor's (shape, dtype, strides, requires_grad) and which argument is which tensor (aliasing), literals
  kept (typed: ``1``, ``1.0``, ``True``, ``-0.0`` differ), the form of ``out`` and the op's grad mode. Made on a
  miss by running the op once through the real engine (``_Runner.run_op`` on a throwaway namespace of fresh
  leaf tensors over the run's own arrays) under a ``kernel.Recorder``: its kernel steps (slots relative to
  the op: its inputs, then its own), its outputs and their flags, and the recipe of the node it made (the
  primitive, which input each edge comes from, which saved slot is which input or output, the static saved
  values). The miss's own arrays are the run's results (nothing runs twice). An op is not composable (its key
  remembered as such) when anything is not certainly reproducible from that: the recorder's provenance
  reasons, a warning, an in-place write, a view, an output that is an input, a node whose edges lead anywhere
  but to the op's own inputs (a composite op's internal nodes), a saved tensor that is neither an input nor an
  output, a forward-mode tangent...
* **Backward.** ``backward`` of one root (no other arguments) runs the engine's own schedule
  (``autograd._run_all``) over light nodes made from the recipes (edges to producer nodes, or to one
  accumulator per leaf), with gradients as arrays: each node's VJP is a **VJP fragment** of its forward
  fragment, keyed by the incoming gradients' layout (and whether one is a saved array), made on a miss by
  building a real ``Node`` from the recipe and calling the real ``autograd._apply`` under a recorder. Two
  gradients of one input are summed as ``_add_unrecorded`` sums them (the same kernel); the seed, the leaves'
  ``.grad`` (``_accumulate_leaf``'s copy rule) and the autograd report (``_Runner.report``) are made as the
  engine makes them. As in a replayed plan of a one-shot run (``plan._copy_renames``), copies of arrays that
  die with the response (the report's snapshots, a leaf's private ``.grad`` copy) are the arrays themselves
  when the copy would have their layout: nothing in a composed run writes in place.
* **Result.** The namespace, op outcomes, ``changed`` and the autograd report as a ``Plan`` of no steps
  whose slots are the run's arrays, finished as a replay finishes (``plan._finish_oneshot``: lazy tensors).

Whatever cannot be composed gives up before anything is visible: ``compose`` returns None and the caller runs
the list cold (which gives the result, or the error and its op index). It gives up on an op or action it
does not cover, any exception (a kernel's value check, the deadline), a run whose bytes (every array it made,
an upper bound) or nodes could come near the limits, a response over its bytes limit, and early when the
fragments it meets are mostly new (``_MISS_SLACK``: a list that does not repeat pays a few recorded ops).
Nothing a composed run does writes into an array it did not make, so giving up leaves no trace.
"""

from __future__ import annotations

import struct
from time import monotonic as _monotonic

import numpy as np

from . import kernel as K
from .autograd import _apply, _run_all
from .budget import SMALL_RESPONSE_ELEMENTS, Budget
from .grad_mode import WarningSink, set_grad_enabled
from .node import Node, SavedTensor
from .program import (
    _PLAIN,
    _TENSOR,
    _TENSOR_LIST,
    OpOutcome,
    ProgramResult,
    State,
    _op_layout,
    _Runner,
)
from .registry import OPS
from .tensor import Tensor

_ndarray = np.ndarray
_asarray = np.asarray
_F64 = struct.Struct("<d")

#: a run gives up once its fragment misses outnumber its hits by more than this many
_MISS_SLACK = 16
#: fragments a cache keeps (forward op forms; each keeps at most ``_VJPS_PER_FRAG`` VJP forms)
FRAGMENT_ENTRIES = 4096
_VJPS_PER_FRAG = 16
#: actions a composed run covers (anything else: the list runs cold)
_ACTIONS = frozenset({"backward", "del", "bind"})


class _GiveUp(Exception):
    pass


#: why fragments were not made (the last few), for tests and debugging
WHY: list = []


def _no3(why):
    WHY.append(why)
    del WHY[:-8]
    return None, None, None


def _no2(why):
    WHY.append(why)
    del WHY[:-8]
    return None, None


class Fragments:
    """The fragments of a process (a ``PlanCache`` owns one): op key -> ``_Frag``, or None for an op form
    that is not composable. Bounded (oldest out); plain dict operations (atomic under the GIL), so concurrent
    runs may share it: a fragment is immutable once made, except its dict of VJP fragments (the same)."""

    def __init__(self, max_entries: int = FRAGMENT_ENTRIES):
        self.max_entries = max_entries
        self.ops: dict = {}

    def put(self, key, frag) -> None:
        d = self.ops
        if len(d) >= self.max_entries:
            try:
                del d[next(iter(d))]
            except (RuntimeError, StopIteration, KeyError):  # (another thread changed it meanwhile)
                pass
        d[key] = frag


class _Frag:
    """A forward fragment: ``steps`` over local slots (0..m-1 the op's distinct input tensors' arrays),
    ``outs`` the local slots of its distinct output tensors, ``binds`` (position in ``out`` or -1 for a name,
    output index) in the order the op binds them, ``rgs`` each output's requires_grad, ``recipe`` the node
    (None: no node), ``nbytes``/``maxsize`` the bytes and largest element count of the arrays it makes."""

    __slots__ = ("n", "m", "steps", "outs", "binds", "rgs", "recipe", "nbytes", "maxsize")


class _Recipe:
    """A node as a forward fragment makes it: ``edges`` per edge the op input it comes from (-1: none),
    ``refs`` the distinct saved arrays ((0, input j) or (1, output i)), ``saved`` (slot, ref index or -1,
    static value) in the node's order, ``nrs`` each output's output_nr; ``vjps``: the VJP fragments, by key."""

    __slots__ = ("prim", "name", "n_outputs", "input_meta", "needs", "edges", "refs", "saved", "nrs", "in_rg",
                 "out_rg", "vjps")


class _VjpFrag:
    __slots__ = ("n", "ins", "steps", "outs", "nbytes", "maxsize")


class _Var:
    """A tensor of a composed run: its array, whether it requires grad, its node and output number (None: a
    leaf, with ``acc`` its accumulator once an edge needs one), its ``.grad`` (an array) and accumulations."""

    __slots__ = ("arr", "meta", "requires_grad", "node", "nr", "acc", "grad", "accs", "slot", "gslot")

    def __init__(self, arr, rg, node, nr):
        self.arr = arr
        self.meta = (arr.shape, arr.dtype, arr.strides, rg)
        self.requires_grad = rg
        self.node = node
        self.nr = nr
        self.acc = None
        self.grad = None
        self.accs = 0
        self.slot = None
        self.gslot = None


class _CNode:
    """A light node for ``autograd._run_all``: what the schedule reads of a ``Node``."""

    __slots__ = ("next_functions", "n_outputs", "retained", "prim", "variable", "recipe", "saved")

    def __init__(self, next_functions, n_outputs, prim, recipe, saved, variable=None):
        self.next_functions = next_functions
        self.n_outputs = n_outputs
        self.retained = None
        self.prim = prim
        self.recipe = recipe
        self.saved = saved
        self.variable = variable


_ACC = "AccumulateGrad"


# ----- keys --------------------------------------------------------------------------------------------------
_T = object()   # marks a tensor argument in a key (its meta and its input index follow)
_KW = object()  # separates positional arguments from keyword arguments


def _lit(v):
    """A literal as a key: typed (1, 1.0 and True differ), every bit of a float (-0.0, NaN payloads)."""
    c = v.__class__
    if c is str or v is None:
        return v
    if c is float:
        return (float, v) if v == v and v != 0.0 else ("f", _F64.pack(v))
    if c is int or c is bool:
        return (c, v)
    if c is list or c is tuple:
        return (c, tuple([_lit(x) for x in v]))
    raise _GiveUp  # (a dict, an Owned array...: not a form a fragment covers)


def _op_key(spec, name: str, op: dict, args, kwargs, ns: dict, grad_on: bool, out):
    """(key, the op's distinct input variables, their names per variable) or a _GiveUp."""
    layout = _op_layout(spec, name)
    pos_kinds, varargs_tensor, kinds, vname = layout[1]
    if varargs_tensor:
        raise _GiveUp
    oc = out.__class__
    key = [name, grad_on, 0 if oc is str else len(out) if oc is list else _lit(out)]
    ins: dict = {}  # variable -> [its input index, its names]
    npos = len(pos_kinds)
    for i, a in enumerate(args):
        k = pos_kinds[i] if i < npos else _PLAIN
        if k == _TENSOR and a.__class__ is str:
            _tensor_key(a, ns, key, ins)
        elif k == _PLAIN or k == _TENSOR:
            key.append(_lit(a))
        elif k == _TENSOR_LIST and a.__class__ is list:
            key.append(len(a))
            for x in a:
                if x.__class__ is str:
                    _tensor_key(x, ns, key, ins)
                else:
                    key.append(_lit(x))
        else:
            raise _GiveUp
    if kwargs:
        key.append(_KW)
        for kname, a in kwargs.items():
            key.append(kname)
            k = kinds.get(kname)
            if k is None or kname == vname:
                raise _GiveUp
            if k == _TENSOR and a.__class__ is str:
                _tensor_key(a, ns, key, ins)
            elif k == _PLAIN or k == _TENSOR:
                key.append(_lit(a))
            elif k == _TENSOR_LIST and a.__class__ is list:
                key.append(len(a))
                for x in a:
                    if x.__class__ is str:
                        _tensor_key(x, ns, key, ins)
                    else:
                        key.append(_lit(x))
            else:
                raise _GiveUp
    return tuple(key), ins


def _tensor_key(a: str, ns: dict, key: list, ins: dict) -> None:
    v = ns.get(a)
    if v is None:
        raise _GiveUp  # (an unbound name, "x.grad": the cold run resolves or refuses it)
    e = ins.get(v)
    if e is None:
        e = ins[v] = [len(ins), a]
    elif a not in e:
        e.append(a)
    key.append(_T)
    key.append(v.meta)
    key.append(e[0])


# ----- steps -------------------------------------------------------------------------------------------------
def _root(a):
    while True:
        b = a.base if a.__class__ is _ndarray else None
        if b is None:
            return a
        a = b


def _steps(rec: K.Recorder, m: int, escaping: list) -> tuple:
    """The recorded steps as a fragment runs them: (fn, template, where, out, multi), and constants folded
    (a step of no input array, or only constants: run once, its result read-only and a static argument of
    the steps reading it) where the constant is not, nor shares memory with, an array the fragment hands
    out. Also (bytes, largest size) of the arrays the remaining steps make. None: a step it cannot take."""
    arrs = rec.keep
    roots = {id(_root(arrs[s])) for s in escaping}
    consts: dict = {}
    out_steps = []
    nbytes = maxsize = 0
    for fn, tmpl, where, out, multi in rec.steps:
        if multi == 2:
            return None  # (in place)
        if any(s < 0 for _, s in where):
            return None
        if multi is False and all(s in consts for _, s in where) and out not in escaping and \
                id(_root(arrs[out])) not in roots:
            args = list(tmpl)
            for p, s in where:
                args[p] = consts[s]
            try:
                r = fn(*args)
                if r.__class__ is not _ndarray:
                    r = _asarray(r)
                if r.base is None:
                    r = np.array(r, order="K")
            except Exception:  # noqa: BLE001 - not a constant then
                r = None
            from .plan import _same_bits
            if r is not None and _same_bits(r, arrs[out]) and r.nbytes <= 1 << 16:
                r.flags.writeable = False
                consts[out] = r
                continue
        if consts and any(s in consts for _, s in where):
            tmpl = list(tmpl)
            for p, s in where:
                if s in consts:
                    tmpl[p] = consts[s]
            tmpl = tuple(tmpl)
            where = tuple([(p, s) for p, s in where if s not in consts])
        for s in (out if multi is True else (out,)):
            a = arrs[s]
            if a.__class__ is _ndarray:
                nbytes += a.nbytes
                if a.size > maxsize:
                    maxsize = a.size
        out_steps.append((fn, tmpl, where, out, multi))
    return out_steps, nbytes, maxsize, consts


def _run(steps: list, loc: list) -> None:
    """A fragment's steps on ``loc`` (its slots: the inputs set), as ``kernel.kcall`` calls each kernel."""
    for fn, tmpl, where, out, multi in steps:
        if where:
            args = list(tmpl)
            for p, s in where:
                args[p] = loc[s]
            r = fn(*args)
        else:
            r = fn(*tmpl)
        if multi is True:
            for s, o in zip(out, r):
                loc[s] = o
        else:
            loc[out] = r if r.__class__ is _ndarray else _asarray(r)


# ----- making fragments --------------------------------------------------------------------------------------
def _make_frag(run, index: int, op: dict, no_grad_all: bool, ins: list, names: list, limits):
    """Run ``op`` once through the engine on fresh leaves over ``ins``' arrays, recording it: (fragment or None
    when it is not composable, the local arrays of this run, the output tensors)."""
    temps = [Tensor(v.arr, v.requires_grad) for v in ins]
    tns = {}
    for t, ns in zip(temps, names):
        for n in ns:
            tns[n] = t
    sink = WarningSink(set())
    runner = _Runner(State(), tns, sink, ProgramResult())
    budget = Budget(limits) if limits is not None else None
    try:
        with K.recording() as rec, sink, np.errstate(all="ignore"):
            for t in temps:
                rec.add_input(t.data)
            if budget is not None:
                with budget:
                    bound = runner.run_op(index, op, no_grad_all)
            else:
                bound = runner.run_op(index, op, no_grad_all)
    except Exception:  # noqa: BLE001 - the cold run gives the error (the form is not marked: values may decide)
        raise _GiveUp from None
    if rec.reason is not None or sink.messages or rec.unknown_writes() or len(rec.inputs) != len(temps):
        return _no3(1)
    m = len(temps)
    outs_t: list = []
    binds = []
    out = op.get("out")
    p = 0
    for n in bound:
        t = tns.get(n)
        if t is None or t.__class__ is not Tensor:
            return _no3(2)
        i = next((k for k, o in enumerate(outs_t) if o is t), None)
        if i is None:
            i = len(outs_t)
            outs_t.append(t)
        if out.__class__ is str:
            if n != out or len(bound) != 1:
                return _no3(3)
            binds.append((-1, i))
        else:  # (the names bound are a subsequence of out: a tuple's items that are tensors)
            while p < len(out) and out[p] != n:
                p += 1
            if p >= len(out):
                return _no3(4)
            binds.append((p, i))
            p += 1
    if not bound:
        return _no3(5)
    slots = []
    node = None
    rgs = []
    for t in outs_t:
        if any(t is x for x in temps) or t._base is not None or t._fw_grad is not None or t.retains_grad or \
                t._grad is not None or t._vc[0] != 0 or t.grad_accumulations or t._wrapped:
            return _no3(6)
        s = rec.slot_of(t.data)
        if s is None or s < m:
            return _no3(7)
        fn = t._grad_fn
        if t._requires_grad != (fn is not None):
            return _no3(8)
        if fn is not None:
            if node is None:
                node = fn
            elif fn is not node:
                return _no3(9)
        slots.append(s)
        rgs.append(bool(t._requires_grad))
    recipe = None
    if node is not None:
        recipe = _recipe(node, temps, outs_t, rec)
        if recipe is None:
            return _no3(10)
    made = _steps(rec, m, slots)
    if made is None:
        return _no3(11)
    if recipe is not None and any(k == 2 for k, _ in recipe.refs):
        consts = made[3]  # (a saved constant folded: the node reads the fragment's array)
        recipe.refs = tuple([(3, consts[i]) if k == 2 and i in consts else (k, i) for k, i in recipe.refs])
    f = _Frag()
    f.n = rec.n
    f.m = m
    f.steps, f.nbytes, f.maxsize, _ = made
    f.outs = tuple(slots)
    f.binds = tuple(binds)
    f.rgs = tuple(rgs)
    f.recipe = recipe
    return f, rec.keep, None


def _static(v) -> bool:
    c = v.__class__
    if v is None or c is int or c is float or c is bool or c is str:
        return True
    if c is tuple or c is list:
        return all(_static(x) for x in v)
    return False


def _recipe(node, temps: list, outs_t: list, rec):
    if node.__class__ is not Node or node.retained or node.variable is not None:
        return None
    edges = []
    accs = {t._accumulator: j for j, t in enumerate(temps) if t._accumulator is not None}
    ids = {id(t): j for j, t in enumerate(temps)}
    for c, nr in node.next_functions:
        if c is None:
            edges.append(-1)
            continue
        j = accs.get(c)
        if j is None or nr != 0 or c.prim != _ACC or c.variable is not temps[j]:
            return None
        edges.append(j)
    refs: list = []
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
                if ref is None or v._nr != t.output_nr:
                    return None
            else:
                t = v._tensor
                j = ids.get(id(t))
                ref = None if j is None else (0, j)
                if ref is None:
                    # a tensor the op made of a literal (mul's other): a constant of the node
                    if t.__class__ is not Tensor or t._grad_fn is not None or t._requires_grad or \
                            t._base is not None or t._vc[0] != 0 or t._fw_grad is not None:
                        return None
                    sl = rec.slot_of(t.data)
                    if sl is None:
                        return None
                    ref = (2, sl)
            if ref not in refs:
                refs.append(ref)
            saved.append((slot, refs.index(ref), None))
        elif _static(v):
            saved.append((slot, -1, v))
        else:
            return None
    r = _Recipe()
    r.prim, r.name, r.n_outputs = node.prim, node.name, node.n_outputs
    r.input_meta, r.needs = node.input_meta, node.needs
    r.edges = tuple(edges)
    r.refs = tuple(refs)
    r.saved = tuple(saved)
    r.nrs = tuple(int(t.output_nr) for t in outs_t)
    r.in_rg = tuple(bool(t._requires_grad) for t in temps)
    r.out_rg = tuple(bool(t._requires_grad) for t in outs_t)
    r.vjps = {}
    return r


def _make_vjp(recipe: _Recipe, grads: list, saved: list, ins: list):
    """Run the recipe's VJP once through the engine (a real Node over the arrays, ``autograd._apply``) under a
    recorder: (VJP fragment or None, the gradients of this run per edge)."""
    dummy = Node(_ACC, _ACC, ())
    nexts = tuple((dummy, 0) if e >= 0 else (None, 0) for e in recipe.edges)
    node = Node(recipe.name, recipe.prim, nexts, None, recipe.input_meta, recipe.n_outputs)
    node._needs = recipe.needs
    tensors = []
    for (kind, i), a in zip(recipe.refs, saved):
        if kind == 0:
            tensors.append(Tensor(a, recipe.in_rg[i]))
        elif kind == 1:
            tensors.append(Tensor(a, recipe.out_rg[i], node, recipe.nrs[i]))
        else:
            tensors.append(Tensor(a))
    s = node.saved
    for slot, ref, value in recipe.saved:
        if ref < 0:
            s[slot] = value
        else:
            s[slot] = SavedTensor(tensors[ref], recipe.refs[ref][0] == 1)
    gts = [None if g is None else Tensor(g) for g in grads]
    sink = WarningSink(set())
    try:
        with K.recording() as rec, sink, np.errstate(all="ignore"), set_grad_enabled(False):
            for a in ins:
                rec.add_input(a)
            outs = _apply(node, gts)
    except Exception:  # noqa: BLE001 - the cold run gives the error
        return _no2(12)
    if rec.reason is not None or sink.messages or rec.unknown_writes() or len(rec.inputs) != len(ins):
        return _no2(13)
    res = []
    slots = []
    for o in outs:
        if o is None:
            slots.append(-1)
            res.append(None)
            continue
        if o.__class__ is not Tensor or o._requires_grad or o._grad_fn is not None:
            return _no2(14)
        sl = rec.slot_of(o.data)
        if sl is None:
            return _no2(15)
        slots.append(sl)
        res.append(o.data)
    made = _steps(rec, len(ins), [s for s in slots if s >= 0])
    if made is None:
        return _no2(16)
    f = _VjpFrag()
    f.n = rec.n
    f.ins = len(ins)
    f.steps, f.nbytes, f.maxsize, _ = made
    f.outs = tuple(slots)
    return f, res


# ----- the run -----------------------------------------------------------------------------------------------
class _Run:
    """One composed run's counters and limits."""

    def __init__(self, frags: Fragments, limits):
        self.frags = frags
        self.hits = self.misses = 0
        self.nbytes = 0
        self.nodes = 0
        self.limits = limits
        self.max_el = limits.max_elements_per_tensor if limits is not None else None
        self.max_bytes = limits.max_bytes // 2 if limits is not None else None
        self.max_nodes = limits.max_nodes // 2 if limits is not None else None

    def miss(self) -> None:
        self.misses += 1
        if self.misses > _MISS_SLACK + self.hits:
            raise _GiveUp

    def made(self, nbytes: int, maxsize: int) -> None:
        self.nbytes += nbytes
        if self.max_bytes is not None and (self.nbytes > self.max_bytes or maxsize > self.max_el):
            raise _GiveUp

    def apply(self, node: _CNode, grads: list) -> list:
        """The composed VJP of ``node`` (``_run_all``'s ``apply``): gradients as arrays, one per edge."""
        recipe = node.recipe
        saved = node.saved
        if recipe.n_outputs == 1:
            g = grads[0]
            al = -1
            for i, a in enumerate(saved):
                if a is g:
                    al = i
            key = (g.shape, g.dtype, g.strides, al)
            ins = [g, *saved] if al < 0 else saved
            gl = [g]
        else:
            gl = list(grads)
            key = tuple([None if g is None else (g.shape, g.dtype, g.strides) for g in gl])
            ins = []
            for a in (*gl, *saved):
                if a is not None and not any(a is b for b in ins):
                    ins.append(a)
            pat = tuple([-1 if a is None else next(i for i, b in enumerate(ins) if a is b) for a in (*gl, *saved)])
            key = (key, pat)
        vf = recipe.vjps.get(key)
        if vf is None:
            self.miss()
            vf, res = _make_vjp(recipe, gl, saved, ins)
            if vf is None:
                raise _GiveUp
            if len(recipe.vjps) < _VJPS_PER_FRAG:
                recipe.vjps[key] = vf
            self.made(vf.nbytes, vf.maxsize)
            return res
        self.hits += 1
        self.made(vf.nbytes, vf.maxsize)
        loc = [None] * vf.n
        loc[:len(ins)] = ins
        _run(vf.steps, loc)
        return [None if s < 0 else loc[s] for s in vf.outs]


def _add(a, b):
    """``autograd._add_unrecorded`` on arrays: two gradients of one dtype and shape, through add's kernel."""
    if a.dtype != b.dtype or a.shape != b.shape:
        raise _GiveUp
    r = np.add(a, b)
    return r if r.__class__ is _ndarray else _asarray(r)


def _alias_or_copy(a):
    """``kernel.snapshot(a)`` where nothing writes in place and every array dies with the response: ``a``
    itself when the copy would have its layout (``plan._copy_renames``' rule)."""
    if a.flags.c_contiguous and a.flags.writeable:
        return a
    return np.array(a, copy=True)


def compose(frags: Fragments, state: State, ops: list, inputs_at: list, inputs: list, metas: tuple, kwargs: dict,
            shown):
    """The one-shot run of ``ops`` (inputs: the arrays ``plan._key`` made for the ``tensor`` ops at
    ``inputs_at``) composed from fragments: its result (``state`` left as the run leaves it), or None (nothing
    changed; the caller runs it cold)."""
    if state.tensors or state.functions:
        return None
    limits = kwargs.get("limits")
    run = _Run(frags, limits)
    try:
        with np.errstate(all="ignore"):
            made = _compose(run, ops, inputs_at, inputs, metas, kwargs, shown)
    except _GiveUp:
        made = None
    except Exception:  # noqa: BLE001 - a kernel's check, the deadline...: the cold run gives it
        made = None
    return made, run


def _compose(run: _Run, ops: list, inputs_at: list, inputs: list, metas: tuple, kwargs: dict, shown):
    from .plan import Plan  # (plan imports this module)
    frags = run.frags.ops
    no_grad_all = bool(kwargs.get("no_grad", False))
    control = kwargs.get("control")
    ns: dict = {}
    outcomes = []
    autograd = []
    passes = 0
    inp = iter(zip(inputs_at, inputs, metas))
    next_in = next(inp, None)
    ops_map = OPS
    for index, op in enumerate(ops):
        if control is not None and (control.reason is not None or (
                control.deadline is not None and _monotonic() > control.deadline)):
            raise _GiveUp
        name = op["op"]
        out = op.get("out")
        if next_in is not None and next_in[0] == index:
            _, arr, meta = next_in
            next_in = next(inp, None)
            if not _plain_name(out):
                raise _GiveUp
            ns[out] = _Var(arr, bool(meta[2]), None, 0)
            run.made(arr.nbytes, arr.size)
            outcomes.append(OpOutcome(index, name, [out]))
            continue
        args = op.get("args") or []
        kw = op.get("kwargs") or {}
        if args.__class__ is not list or kw.__class__ is not dict:
            raise _GiveUp
        if name in _ACTIONS:
            if name == "backward":
                if passes or kw or len(args) != 1 or args[0].__class__ is not str or op.get("no_grad"):
                    raise _GiveUp
                root = ns.get(args[0])
                if root is None:
                    raise _GiveUp
                autograd.append((index, _backward(run, root, ns, control)))
                passes += 1
                outcomes.append(OpOutcome(index, name, []))
            elif name == "del":
                if kw or not all(a.__class__ is str for a in args):
                    raise _GiveUp
                for a in args:
                    ns.pop(a, None)
                outcomes.append(OpOutcome(index, name, []))
            else:  # bind
                if len(args) != 1 or kw or not _plain_name(out) or args[0].__class__ is not str:
                    raise _GiveUp
                base, dot, attr = args[0].partition(".")
                v = ns.get(base)
                if v is None or (dot and attr != "grad"):
                    raise _GiveUp
                if dot:
                    if v.node is not None or v.grad is None:
                        raise _GiveUp  # (a non-leaf's .grad warns; an unset one unbinds)
                    v = v.grad
                ns[out] = v
                outcomes.append(OpOutcome(index, name, [out]))
            continue
        spec = ops_map.get(name)
        if spec is None or spec.inplace or not (spec.plannable or _div_form(name, args, kw)):
            raise _GiveUp
        if not (out.__class__ is str and _plain_name(out)) and not (
                out.__class__ is list and out and all(_plain_name(n) for n in out)):
            raise _GiveUp
        grad_on = not (no_grad_all or op.get("no_grad", False))
        key, inmap = _op_key(spec, name, op, args, kw, ns, grad_on, out)
        ins = list(inmap)
        frag = frags.get(key, _ABSENT)
        if frag is _ABSENT:
            run.miss()
            frag, loc, _ = _make_frag(run, index, op, no_grad_all, ins, [e[1:] for e in inmap.values()],
                                      run.limits)
            run.frags.put(key, frag)
            if frag is None:
                raise _GiveUp
        elif frag is None:
            raise _GiveUp
        else:
            run.hits += 1
            loc = [None] * frag.n
            for j, v in enumerate(ins):
                loc[j] = v.arr
            _run(frag.steps, loc)
        run.made(frag.nbytes, frag.maxsize)
        recipe = frag.recipe
        if recipe is None:
            vs = [_Var(loc[s], False, None, 0) for s in frag.outs]
        else:
            nexts = []
            for e in recipe.edges:
                if e < 0:
                    nexts.append((None, 0))
                    continue
                v = ins[e]
                if v.node is not None:
                    nexts.append((v.node, v.nr))
                else:
                    acc = v.acc
                    if acc is None:
                        acc = v.acc = _CNode((), 1, _ACC, None, None, v)
                        run.nodes += 1
                    nexts.append((acc, 0))
            saved = [ins[i].arr if kind == 0 else loc[frag.outs[i]] if kind == 1 else loc[i] if kind == 2 else i
                     for kind, i in recipe.refs]
            node = _CNode(tuple(nexts), recipe.n_outputs, recipe.prim, recipe, saved)
            run.nodes += 1
            vs = [_Var(loc[s], rg, node if rg else None, nr)
                  for s, rg, nr in zip(frag.outs, frag.rgs, recipe.nrs)]
        if run.max_nodes is not None and run.nodes > run.max_nodes:
            raise _GiveUp
        bound = []
        if out.__class__ is str:
            ns[out] = vs[0]
            bound.append(out)
        else:
            for pos, i in frag.binds:
                n = out[pos]
                ns[n] = vs[i]
                bound.append(n)
        outcomes.append(OpOutcome(index, name, bound))
    # ----- the result, as a replay of a one-shot run leaves it
    names = list(ns)
    keep = None
    if shown is not None:
        keep = set(shown)
        for _, entries in autograd:
            keep.update([e[0] for e in entries])
    buf: list = []
    namespace = []
    for n in names:
        if keep is not None and n not in keep:
            continue
        v = ns[n]
        namespace.append((n, _desc(v, buf)))
    reports = []
    for index, entries in autograd:
        es = []
        for n, v, c, gc in entries:
            cs = len(buf)
            buf.append(c)
            if gc is c:
                gs = cs
            else:
                gs = len(buf)
                buf.append(gc)
            es.append((n, cs, (gs, False, None, False, 0, 0, None), v.accs))
        reports.append((index, "backward", es))
    lim = run.limits
    if lim is not None and lim.max_response_bytes is not None:
        _response(namespace, reports, buf, kwargs, lim, names)
    plan = Plan((), [], [], [], len(buf), (), namespace, [], outcomes, names, reports, passes)
    return plan, buf


def _response(namespace, reports, buf, kwargs, lim, names) -> None:
    """The response's bytes as ``program._count_response`` counts them; over the limit: give up (the cold run
    gives the error)."""
    respond = kwargs.get("respond", "changed")
    size = kwargs.get("response_size")
    descs = dict(namespace)
    total = 0

    def count(a):
        n = a.size
        return 25 * n + 64 if n <= SMALL_RESPONSE_ELEMENTS else size(a) if size is not None else a.nbytes
    shown = names if isinstance(respond, str) else respond
    for n in shown:
        if n.__class__ is not str:
            continue
        base, dot, attr = n.partition(".")
        if dot and attr != "grad":
            raise _GiveUp
        d = descs.get(base)
        if d is None:
            continue
        if dot:
            d = d[6]
            if d is None:
                continue
            total += count(buf[d[0]])
            continue
        total += count(buf[d[0]])
        if d[6] is not None:
            total += count(buf[d[6][0]])
    for _, _, es in reports:
        for _, c, g, _ in es:
            total += count(buf[c])
            if g is not None:
                total += count(buf[g[0]])
    if total > lim.max_response_bytes:
        raise _GiveUp


def _desc(v: _Var, buf: list):
    s = v.slot
    if s is None:
        s = v.slot = len(buf)
        buf.append(v.arr)
    g = None
    if v.grad is not None:
        g = _desc(v.grad, buf)
    return (s, v.requires_grad, None if v.node is None else v.node.recipe.name, False, 0, v.accs, g)


def _backward(run: _Run, root: _Var, ns: dict, control) -> list:
    """``backward(root)``: the pass over the composed graph; returns the report's entries (name, leaf
    variable, its gradient variable), the leaves' ``.grad`` set."""
    if not root.requires_grad:
        raise _GiveUp
    a = root.arr
    if a.size != 1:
        raise _GiveUp
    seed = np.ones(a.shape, a.dtype)
    if root.node is not None:
        node, nr = root.node, root.nr
    else:
        node = root.acc
        if node is None:
            node = root.acc = _CNode((), 1, _ACC, None, None, root)
        nr = 0
    buffers: dict = {node: [None] * node.n_outputs}
    buffers[node][nr] = seed
    leaf_grads: list = []
    retained: list = []
    executed: list = []
    _run_all([node], buffers, False, True, control, leaf_grads, retained, executed, run.apply, _add)
    if retained:
        raise _GiveUp
    contrib = {}
    claimed = {id(seed)}
    for leaf, g in leaf_grads:
        if leaf.node is not None or leaf.grad is not None:
            raise _GiveUp
        if g.dtype != leaf.arr.dtype:
            g = g.astype(leaf.arr.dtype)
        # _accumulate_leaf: a gradient array that may be shared gets a copy (here: itself where the copy would
        # have its layout)
        flags = g.flags
        if id(g) in claimed or not flags.owndata or not flags.writeable:
            a = g if flags.c_contiguous and flags.writeable else g.copy()
        else:
            a = g
            claimed.add(id(g))
        # the report's snapshots of the contribution and of the .grad (one when the .grad is the contribution)
        c = _alias_or_copy(g)
        gv = _Var(a, False, None, 0)
        gv.slot = c if a is g else _alias_or_copy(a)  # (an array here; made a slot by _compose)
        contrib[leaf] = c
        leaf.grad = gv
        leaf.accs += 1
    # the report: each leaf under its first name (one pass over the namespace), its contribution and .grad
    # (a copy of each: the arrays themselves here, see _alias_or_copy)
    want = {id(v): v for v in contrib}
    first = {}
    for n, v in ns.items():
        i = id(v)
        if i in want:
            first[i] = n
            del want[i]
            if not want:
                break
    entries = []
    for leaf, c in contrib.items():
        n = first.get(id(leaf))
        if n is None:
            continue
        entries.append((n, leaf, c, leaf.grad.slot))
    for leaf in contrib:
        leaf.grad.slot = None
    return entries


def _plain_name(out) -> bool:
    return out.__class__ is str and out.isidentifier() and len(out) <= 64 and out.isascii()


def _div_form(name, args, kwargs) -> bool:
    from .plan import _PLANNABLE_CALLS
    f = _PLANNABLE_CALLS.get(name)
    return f is not None and f(args, kwargs)


_ABSENT = object()


def run(cache, state: State, ops: list, inputs_at: list, inputs: list, metas: tuple, kwargs: dict, shown):
    """``compose`` through ``cache`` (a ``plan.PlanCache``: its fragments, its counters): the run's result, or
    None (nothing changed: the caller runs the list cold)."""
    from .plan import _finish_oneshot
    made, r = compose(cache.fragments, state, ops, inputs_at, inputs, metas, kwargs, shown)
    cache.count_compose(r.hits, r.misses, made is not None)
    if made is None:
        return None
    plan, buf = made
    return _finish_oneshot(plan, buf, state, {})
