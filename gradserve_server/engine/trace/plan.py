"""Plans: an op list that ran once compiles into a tape of kernel calls that later runs replay.

The trace layer at the granularity of a whole list (``engine.trace.compose``: of one op). Each step has one place: a
list is keyed by ``engine.trace.key``, traced by ``kernel.Recorder`` (here: ``run_planned``, ``_session_step``),
optimised and executed by ``engine.trace.tape``, rebuilt for the caller by ``engine.trace.replayed``, cached in
``PlanCache`` (below), and routed by ``engine.trace.dispatch``. This module holds what only a whole list needs: the
cache, building a plan from a recording, sessions, segments and loops.

Where a plan applies nothing can observe the difference: a one-shot run (``/v1/eval``: a fresh namespace,
thrown away after the response), whose response is values, gradients and structural metadata (grad_fn names,
requires_grad, versions...), the same for every run of the same op list over inputs of the same shapes.

* **Record.** The first run of an op list is an ordinary cold ``run_program`` with a ``Recorder`` active
  (``engine.kernel``): every kernel call of the forward and of the backward (VJPs are engine ops, so a
  backward, and a double backward under create_graph, is itself a sequence of kernel calls) goes on a tape,
  its inputs as slots (program inputs, earlier outputs) and its static parameters as given; an in-place op's
  write is a kernel's too. Provenance: an array that reaches a kernel or the response without coming from an
  input or a kernel, an op not declared ``plannable`` in the op table (an in-place op: as its out-of-place op
  is), an in-place write outside a kernel, a warning, or a forward-mode op make the op list unplannable: it
  is cached as such and runs cold from then on. Only successful cold runs are cached.
  ``PlanCache(record_after=N)`` records at the N-th run of a structure (the app: 2, so a list run once never
  pays for recording and building; a ``repeat`` loop records at its first iteration, and so does a session list
  that is recognisably a training loop's iteration: ``_training_step``).
* **Key** (``key._key``). The op list with the data of its ``tensor`` ops left out (names, literals, flags
  stay), and the inputs' shapes, dtypes and requires_grad flags, the grad mode, the limits and the response
  encoding. The ``tensor`` ops' arrays are made while the key is built: a Python number, or an array of a dtype
  the op keeps, by ``tensor.as_array``'s own steps (no op dispatch); list data by ``as_array``; any other form by
  the op itself, as the program runs it. A form that fails gives no key (the cold run reports it). An array
  handed over with its op (``Owned``: the service's freshly decoded base64 payload) is kept as it is, not copied,
  by a one-shot run when the copy would be indistinguishable from it (``_direct_input``).
* **Replay.** A flat loop over (kernel, argument slots), freeing each slot after its last use; the final
  namespace and autograd report are rebuilt from the recorded structure and the replayed arrays: for a
  one-shot run lazily (``_Namespace``: a tensor is made when first read, in the cold run's name order;
  ``_PlannedResult``: the op outcomes and the autograd report when first accessed), so a response pays for
  what it reads. A kernel that raises (a value-dependent check: an index out of range, a target out of
  bounds) falls back to a cold run of the whole list, so the error, its op index and atomicity are exactly
  the cold path's.
* **Composed first runs.** A one-shot list without a plan that is not recorded now (a structure's first
  sighting under ``record_after=2``) is composed from per-op fragments where it can be (``engine.trace.compose``),
  else run cold; either way what the caller observes is the cold run's.
* **The tape** (``tape.Tape``: the executor plans and fragments share) is the recorded calls made cheaper where
  nothing can tell: constants computed once, repeated calls once, kernels called through their direct forms (their
  ufuncs, array methods), intermediates no caller sees written into buffers a replay reuses, copies of arrays that
  die with the response left out; each checked against the recorded arrays, bit for bit and layout for layout.
* **What a one-shot response shows.** Without ``return`` a ``/v1/eval`` response shows every named tensor, so
  every name's array is a result. With ``return`` (``respond``: a list of names, part of the key) it shows
  those names, and its autograd report points at the ``out`` names of ``grad`` ops and at the tensors each
  pass reached; a run through ``run_planned`` leaves only these in ``state.tensors`` (``_prune``: cold,
  recorded or replayed alike), so the other names' arrays (a chain's intermediates) are intermediates of the
  plan, written into registers.

* **Sessions and loops.** A session list plans too (``run_session_planned``; its key adds the session's tensors
  and their gradients, function definitions, warned set and name counter): a training loop's iteration (forward,
  backward, an optimizer's in-place step under no_grad, zero_grad) replays. What a replay rebuilds beyond the
  tensors' descriptors (``_After``): the preset tensors' version counters moved as the cold run moved them
  (versions are not in the key), their gradients replaced, dropped or written in place, their accumulation counts
  moved or reset (only whether each is zero is in the key), and the graphs a backward left on new tensors (nodes
  copied, their saved tensors freed). A session tensor carrying a graph keys only under a name the list unbinds
  or rebinds before reading it (``key._session_key``). Names are keyed canonically
  (``key._canonical``: where the program reads names), so a client whose name counter gives every iteration
  new names finds one plan. Inputs a replay writes in place are restored if a guard fires (then the cold run). A
  list recorded unplannable is remembered under a coarser pre-key as well, looked up where the full key finds
  no plan (the full key first: a list with a plan replays without making its pre-key). A ``repeat``/``until``
  loop (without in-place ops) keys strictly (no gradients, no graphs): a plan carries the key (and the tensors'
  layout) of the state it leaves, an iteration finds its plan by the carried key, and iterations but the stopping
  one replay on a lazy state (no tensors built between them); a layout that does not match, or a state whose key
  differs, builds the key and records as usual.

``PlanCache`` is the trace layer's one cache (per key: ``PlanCaches``): plans and per-op fragments in one table,
bounded in entries and measured bytes (least recently used out), with one set of counters: hits, misses,
unplannable runs, fallbacks, evictions, composed runs and fragment hits and misses (``/metrics``). ``run_planned``
(its result's ``route``) and ``route_session`` (what ``engine.trace.dispatch`` calls) give with the result the route the
run took and why (``engine.trace.route``), decided where each decision above is made.
"""

from __future__ import annotations

import copy
import dataclasses
import weakref
from dataclasses import dataclass

import numpy as np

from .. import kernel as K
from ..budget import Budget
from ..functional import TRANSFORMS
from ..node import ACCUMULATE_GRAD, Node, SavedTensor
from ..program import (
    NAME_RE,
    AutogradRecord,
    OpOutcome,
    ProgramResult,
    State,
    _count_response,
    _fingerprint,
    graph_stats,
    resolve_quietly,
    run_program,
)
from ..registry import OPS
from ..tensor import Tensor
from ..views import accumulator
from . import compose as _compose
from . import route as R
from . import sources as S
from . import tape as T
from .cache import (
    PlanCache,
    Unplannable,
    footprint,
)
from .key import (
    INPUT_OPS,
    _canonical,
    _historyless,
    _key,
    _layout,
    _nulls_later,
    _pinned_key,
    _plannable_op,
    _pre_key,
    _scan,
    _session_inputs,
    _session_key,
    caller_key,
)
from .replayed import Plan, _Namespace, _PlannedResult, _tensor

_ACC = ACCUMULATE_GRAD.name
_STEP_BYTES = 160      # a lower bound of a tape step's size: a plan surely too large is not compiled
_CHECK_LOOP = 64       # a planned repeat loop checks it every this many iterations too


# ----- recording -------------------------------------------------------------------------------------------
def _desc(rec: K.Recorder, t, depth: int = 0):
    """A tensor's observable state as (data slot, requires_grad, grad_fn name, retains_grad, version,
    grad_accumulations, grad descriptor); None when its data does not come from the tape."""
    s = rec.slot_of(t.data)
    if s is None:
        return None
    fn = t.grad_fn
    g = t._grad
    gd = None
    if g is not None:
        if depth > 1:
            return None
        gd = _desc(rec, g, depth + 1)
        if gd is None:
            return None
    return (s, bool(t.requires_grad), None if fn is None else fn.name, bool(t.retains_grad), int(t._vc[0]),
            int(t.grad_accumulations), gd)


def _build(rec: K.Recorder, state: State, preset: dict, res: ProgramResult, journal_ok: bool, max_bytes: int):
    """The plan of a recorded run, or the reason it cannot be one."""
    if rec.reason is not None:
        return Unplannable(rec.code, rec.reason)
    if _STEP_BYTES * (len(rec.steps) + len(state.tensors)) + 256 > max_bytes:
        return Unplannable("too_large", "the plan would exceed the cache's bytes")  # (known before compiling it)
    if not journal_ok:
        return Unplannable("inplace_outside_kernel", "an array was changed in place outside a kernel")
    if res.warnings:
        return Unplannable("warning", "the run warned")
    namespace = []
    for name, t in state.tensors.items():
        if name in preset and preset[name] is t:
            namespace.append((name, None))
            continue
        d = _desc(rec, t)
        if d is None:
            return Unplannable("untraced_array", f"{name!r} holds an array made outside a kernel")
        namespace.append((name, d))
    pre = []
    for name, t in preset.items():
        g = None
        if t._grad is not None:
            g = _desc(rec, t._grad, 1)
            if g is None:
                return Unplannable("untraced_array", f"the gradient of {name!r} was made outside a kernel")
        pre.append((name, g, int(t.grad_accumulations)))
    autograd = []
    for r in res.autograd:
        entries = []
        for e in r.entries:
            c = rec.slot_of(e.contribution.data)
            g = None if e.grad is None else _desc(rec, e.grad, 1)
            if c is None or (e.grad is not None and g is None):
                return Unplannable("untraced_array", "a gradient was made outside a kernel")
            entries.append((e.name, c, g, e.grad_accumulations))
        autograd.append((r.op_index, r.op, entries))
    # nothing writes in place and every array dies with the response: copies need not be made (a copy's
    # result is the array it copies)
    alias = not preset and not any(step[4] == 2 for step in rec.steps)
    ren = T.copy_renames(rec) if alias else {}
    if ren:
        namespace = [(n, _renamed(d, ren)) for n, d in namespace]
        pre = [(n, _renamed(g, ren), a) for n, g, a in pre]
        autograd = [(i, op, [(n, ren.get(c, c), _renamed(g, ren), a) for n, c, g, a in es])
                    for i, op, es in autograd]
    keep = {d[0] for _, d in namespace if d is not None} | {c for _, _, es in autograd for _, c, _, _ in es}

    def grads(d):
        while d is not None:
            keep.add(d[0])
            d = d[6]
    for _, d in namespace:
        if d is not None:
            grads(d[6])
    for _, g, _ in pre:
        grads(g)
    for _, _, es in autograd:
        for e in es:
            grads(e[2])
    with np.errstate(all="ignore"):  # (the kernels run here as in a replay)
        tape = T.Tape(rec, keep, ren)
    if len(tape.steps) <= T.COMPILE_MAX_STEPS:
        code, kernels, consts = T.compile_tape(tape.steps, T.origins(rec))
        steps = []
    else:  # compiling costs more than it saves once: a long tape is interpreted
        code, kernels, consts = (), [], []
        steps = T.interpreted(tape.steps)
    plan = Plan(code, kernels, consts, steps, rec.n, tuple(rec.inputs), namespace, pre, list(res.ops),
                list(res.changed), autograd, state.backward_passes, regs=tape.regs, written=T.written_inputs(rec))
    nbytes = footprint(plan)
    if nbytes > max_bytes:
        return Unplannable("too_large", "the plan would exceed the cache's bytes")
    # the register set a replay leaves for the next (allocated by the first replay), when it fits
    plan.pool_cap = _POOL_SETS if nbytes + _POOL_SETS * tape.reg_bytes <= max_bytes // 2 else 0
    plan.nbytes = nbytes + plan.pool_cap * tape.reg_bytes
    return plan


# ----- the tape: what a replay runs (``engine.trace.tape``) ----------------------------------------------------
_POOL_SETS = 1          # idle register sets a plan keeps (a replay takes one; concurrent replays make more)
_replay_quiet = T.replay_quiet  # (what a planned repeat loop replays its iterations with)


def _renamed(d, ren):
    if d is None:
        return None
    return (ren.get(d[0], d[0]), *d[1:6], _renamed(d[6], ren))


def _guarded_replay(cache: PlanCache, plan: Plan, inputs, control):
    """The plan's slots, or the fallback route when a kernel's guard fired (counted; the caller runs the list
    cold, which gives the error or the result). Inputs it writes into in place are as they were then: a replay
    is all or nothing, as the cold run is."""
    undo = [(a, a.copy()) for a in map(inputs.__getitem__, plan.written)] if plan.written else None
    try:
        buf = T.replay(plan, inputs, control)
    except Exception as e:  # noqa: BLE001 - a guard: the cold run gives the error (or the result)
        if undo:
            for a, old in undo:
                np.copyto(a, old)
        cache.count("fallbacks")
        return _fallback(e)
    cache.count("hits")
    return buf


def _fallback(e: Exception) -> R.Route:
    """The route of a run whose replay raised ``e``: where (the generated line's op) and what."""
    tb, at = e.__traceback__, ""
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(S.PREFIX):
            at = S.comment(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    # (the exception's type, not its message: a message may quote values; the error the cold run gives has it)
    return R.Route("fallback", "kernel_raised", f"{at}{': ' if at else ''}{type(e).__name__}")


def _finish(plan: Plan, buf: list, state: State, preset: dict) -> ProgramResult:
    """The state and result a replay leaves (the namespace's tensors made now: a session's)."""
    for name, g, accs in plan.preset:
        t = preset[name]
        t._grad = None if g is None else _tensor(buf, g)
        t.grad_accumulations = accs
    state.tensors = {name: preset[name] if d is None else _tensor(buf, d) for name, d in plan.namespace}
    state.backward_passes += plan.backward_passes
    return _PlannedResult(plan, buf)


def _finish_oneshot(plan: Plan, buf: list, state: State, preset: dict) -> ProgramResult:
    """``_finish`` for a one-shot run: the namespace is a ``_Namespace`` (its tensors made when read)."""
    lazy = plan.lazy
    if lazy is None:  # (made once per plan; two threads making it at once make the same)
        lazy = plan.lazy = (dict(plan.namespace), [name for name, d in plan.namespace if d is None])
    for name, g, accs in plan.preset:
        t = preset[name]
        t._grad = None if g is None else _tensor(buf, g)
        t.grad_accumulations = accs
    descs, kept = lazy
    state.tensors = _Namespace(buf, descs, {name: preset[name] for name in kept} if kept else {})
    state.backward_passes += plan.backward_passes
    return _PlannedResult(plan, buf)


def _shown(ops: list, respond) -> frozenset | None:
    """The names a one-shot run's caller reads after it when the response shows ``respond`` (a list of names,
    ``/v1/eval``'s ``return``): those names (``x`` of ``x.grad``) and the names its autograd report points at,
    the ``out`` names of ``grad`` ops (and, known after the run, the tensors each pass reached: ``_prune``).
    None: every name (``"all"``, ``"changed"``)."""
    if isinstance(respond, str) or respond is None:
        return None
    names = set()
    for n in respond:
        if isinstance(n, str):
            names.add(n.partition(".")[0])
    for o in ops:
        if o.__class__ is dict and o.get("op") == "grad":
            out = o.get("out")
            for n in (out if isinstance(out, list) else (out,)):
                if isinstance(n, str):
                    names.add(n)
    return frozenset(names)


def _prune(state: State, res: ProgramResult, shown: frozenset | None) -> None:
    """A one-shot run that shows only ``shown`` (``_shown``) keeps only those names and the tensors its
    autograd passes reached: the other names' arrays are the run's own (a plan writes them into registers it
    reuses), whichever way the run went (cold, recorded or replayed), so every run of a key leaves the same."""
    if shown is None:
        return
    keep = set(shown)
    for r in res.autograd:
        keep.update(e.name for e in r.entries)
    if any(n not in keep for n in state.tensors):
        state.tensors = {n: t for n, t in state.tensors.items() if n in keep}


def run_planned(cache: PlanCache | None, state: State, ops: list, *, extra: tuple = (), **kwargs) -> ProgramResult:
    """``run_program(state, ops, **kwargs)`` for a one-shot run (``state`` fresh, or holding only fresh leaf
    tensors that are the run's inputs), through ``cache``: a replayed plan when there is one, else a cold run
    that records one. What the caller can observe is the cold run's, bit for bit. With ``respond`` a list of
    names (``/v1/eval``'s ``return``), what the caller can observe is those names, the autograd report and the
    names it points at: ``state.tensors`` is left with only these (``_prune``), whichever way the run went.
    The result's ``route`` is the route the run took (``engine.trace.route``; a replay's: its class's)."""
    respond = kwargs.get("respond", "changed")
    shown = _shown(ops, respond) if isinstance(ops, list) else None
    if cache is None:
        return _cold(state, ops, kwargs, shown, R.COLD_DISABLED)
    if kwargs.get("repeat", 1) != 1 or kwargs.get("record") or kwargs.get("until") is not None \
            or kwargs.get("returns"):
        return _cold(state, ops, kwargs, shown, R.COLD_OPTIONS)
    inputs_at = _scan(ops) if isinstance(ops, list) else None
    if inputs_at is None:
        cache.count("unplannable")
        return _cold(state, ops, kwargs, shown, R.COLD_UNPLANNABLE)
    later: list = []
    made = _key(state, ops, caller_key(kwargs, extra, respond=respond), inputs_at, None, True, later)
    if made is None:
        cache.count("unplannable")
        return _cold(state, ops, kwargs, shown, R.COLD_UNKEYABLE)
    key, inputs = made
    entry = cache.get(key)  # (by the bare text: the null check only on a miss, ``_nulls_later``)
    if entry is None and later:
        checked = _nulls_later(key, later)
        if checked is not key:
            key = checked
            entry = cache.get(key)
    if isinstance(entry, Plan):
        preset = dict(state.tensors)
        buf = _guarded_replay(cache, entry, inputs, kwargs.get("control"))
        if buf.__class__ is not list:
            return _cold(state, ops, kwargs, shown, buf)
        return _finish_oneshot(entry, buf, state, preset)  # (its route: ``_PlannedResult.route``, REPLAYED)
    if isinstance(entry, Unplannable):
        cache.count("unplannable")
        return _cold(state, ops, kwargs, shown, entry.route())
    if not cache.records(key):
        # a structure without a plan, not recorded now: composed from per-op fragments where it can be
        res, why = _compose.run(cache, state, ops, inputs_at, inputs, key[1], kwargs, shown)
        if res is not None:
            res.route = R.COMPOSED
            return res
        return _cold(state, ops, kwargs, shown, why)
    cache.count("misses")
    preset = dict(state.tensors)
    ctx = K.recording()
    with ctx as rec:
        for t in preset.values():
            rec.add_input(t.data)
        try:
            res = run_program(state, ops, **kwargs)
        except Exception as e:
            e.route = R.RECORDED
            raise
    _prune(state, res, shown)
    plan = _build(rec, state, preset, res, not rec.unknown_writes(), cache.max_bytes)
    cache.put(key, plan)
    res.route = plan.route() if plan.__class__ is Unplannable else R.RECORDED
    return res


def route_oneshot(cache: PlanCache | None, state: State, ops: list, *, extra: tuple = (),
                  **kwargs) -> tuple[ProgramResult, R.Route]:
    """``run_planned``, and the route the run took (``engine.trace.route``)."""
    res = run_planned(cache, state, ops, extra=extra, **kwargs)
    return res, res.route


def _cold(state: State, ops: list, kwargs: dict, shown: frozenset | None, route: R.Route):
    """The cold run, its result's ``route`` ``route``; an error it raises carries ``route`` (``.route``: the app
    reports it)."""
    try:
        res = run_program(state, ops, **kwargs)
    except Exception as e:
        e.route = route
        raise
    _prune(state, res, shown)
    res.route = route
    return res


def _cold_session(state: State, ops: list, kwargs: dict, route: R.Route):
    """``_cold`` for a session's run (nothing pruned)."""
    try:
        return run_program(state, ops, **kwargs), route
    except Exception as e:
        e.route = route
        raise


# ----- session op lists ------------------------------------------------------------------------------------
def _plannable_session_op(op, functions: dict, depth: int = 0) -> bool:
    """An op of a session list (or of a function a transform calls): a plannable op, or a transform of a
    function whose ops are all plannable (transforms of transforms up to a few levels)."""
    if _plannable_op(op):
        return True
    if not isinstance(op, dict) or op.get("op").__class__ is not str or op["op"] not in TRANSFORMS or depth > 3:
        return False
    args, kwargs = op.get("args") or [], op.get("kwargs") or {}
    fname = args[0] if args else kwargs.get("func")
    fdef = functions.get(fname) if isinstance(fname, str) else None
    if fdef is None:
        return False
    # (a definition whose ops are all plannable calls is so whatever the session's names: remembered)
    if _FN_PLAIN.get(fdef) or all(_plannable_op(o) for o in fdef.ops):
        _FN_PLAIN[fdef] = True
        return True
    return all(_plannable_session_op(o, functions, depth + 1) for o in fdef.ops)


#: function definitions (immutable) whose every op ``_plannable_op`` accepts, remembered while they live
_FN_PLAIN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _plannable_session_list(ops, functions: dict) -> bool:
    """Every op of a session list ``_plannable_session_op`` (the name scan first: transforms are the rest)."""
    if not isinstance(ops, list):
        return False
    return _scan(ops) is not None or all(_plannable_session_op(op, functions) for op in ops)


def _vcs(tensors: dict) -> list:
    """The version counters of a session state (each tensor's, then its gradient's), each once, in order."""
    seen, out = set(), []
    for t in tensors.values():
        for vc in (t._vc, None if t._grad is None else t._grad._vc):
            if vc is not None and id(vc) not in seen:
                seen.add(id(vc))
                out.append(vc)
    return out


def _session_check(state: State, preset: dict, before: tuple, rec: K.Recorder) -> Unplannable | None:
    """Why the cold run's final state is one a replay could not rebuild exactly (None: it can)."""
    counter, functions, versions = before
    if state.counter != counter or state.functions is not functions and state.functions != functions:
        return Unplannable("session_state", "the run changed the session's names or functions")
    old = {id(t) for t in preset.values()}
    grads = {id(t._grad) for t in preset.values() if t._grad is not None}
    seen, vcs = set(), {id(t._vc) for t in preset.values()}
    for name, t in state.tensors.items():
        if preset.get(name) is t:
            continue
        if id(t) in old or id(t) in grads or id(t) in seen:
            return Unplannable("session_state", f"{name!r} names a tensor the session held under another name")
        seen.add(id(t))
        if t.requires_grad or t._grad_fn is not None or t._base is not None or t._grad is not None \
                or getattr(t, "_fw_grad", None) is not None or id(t._vc) in vcs:
            return Unplannable("session_state", f"{name!r} carries a graph, a gradient or a view relationship")
        vcs.add(id(t._vc))
    for name, t in preset.items():
        if t._vc[0] != versions[name]:
            return Unplannable("session_state", f"{name!r} was changed in place")
        g = t._grad
        if g is not None and (g.requires_grad or g._base is not None or g._grad is not None or id(g._vc) in vcs):
            return Unplannable("session_state", f"the gradient of {name!r} carries a graph")
    inputs = set(rec.inputs)
    for _, _, where, _, multi in rec.steps:
        if multi == 2 and dict(where).get(0) in inputs:
            return Unplannable("session_state", "a kernel wrote into a session array")
    return None


@dataclass
class _After:
    """What a session replay rebuilds besides the tensors' descriptors: the preset tensors' gradients (per
    preset tensor: None; -1, the one it had, kept (maybe written in place); ("n", name), the new tensor bound
    to ``name``; ("d", descriptor)), the moves of the preset state's version counters ((position in ``_vcs``,
    delta)), and the graphs of the new tensors: nodes in post order (``("acc", "p"|"n", name)``: that
    tensor's AccumulateGrad; ``("f", node, next edges)``: a copy of ``node``, its saved tensors freed) and
    (name, output_nr, node position) per tensor."""

    grads: tuple
    deltas: tuple
    nodes: tuple
    graphs: tuple
    accs: tuple | None = None  # per preset tensor: its grad_accumulations after, ("abs", n) or ("rel", delta)
    aliases: tuple = ()        # (new name, "t" | "g", preset name): a preset tensor (its gradient before the run)
    relative: bool | None = None  # whether an autograd entry's accumulations are relative (set at the first replay)


# ----- gradient accumulation counts: a run moves them (a backward adds one) or resets them (zero_grad) --------
_OFFSET = 1 << 40  # a preset tensor's count is offset by a multiple of this while a plan is recorded


def _offset(preset: dict) -> dict | None:
    """Offset each preset tensor's nonzero accumulation count by its own multiple of ``_OFFSET`` while a plan is
    recorded, so that after the run a count still above ``_OFFSET`` was moved (a replay moves it by as much) and
    one below was reset and counted anew (a replay sets it). Zero counts need nothing: moved or reset, both give
    the same. name -> (position, count before)."""
    offsets = {}
    for i, (name, t) in enumerate(preset.items()):
        if t.grad_accumulations > 0:
            offsets[name] = (i, t.grad_accumulations)
            t.grad_accumulations += (i + 1) * _OFFSET
    return offsets or None


def _unoffset(preset: dict, offsets: dict) -> tuple:
    """Take the offsets back (after the run, or its rollback): (per preset tensor ("abs", n) or ("rel", delta),)."""
    out = []
    for i, (name, t) in enumerate(preset.items()):
        v = t.grad_accumulations
        if name in offsets and v >= _OFFSET:
            t.grad_accumulations = v - (i + 1) * _OFFSET
            out.append(("rel", t.grad_accumulations - offsets[name][1]))
        else:
            out.append(("abs", v))
    return tuple(out)


def _unoffset_report(res: ProgramResult, offsets: dict) -> dict:
    """The autograd report's counts taken back; (record, entry) -> (preset position, delta) of those moved."""
    moved = {}
    befores = {i: b for i, b in offsets.values()}
    for k, r in enumerate(res.autograd):
        for j, e in enumerate(r.entries):
            v = e.grad_accumulations
            if v >= _OFFSET:
                i = v // _OFFSET - 1
                e.grad_accumulations = v - (i + 1) * _OFFSET
                moved[(k, j)] = (i, e.grad_accumulations - befores[i])
    return moved


_ATTRS = ("_requires_grad", "_grad_fn", "_base", "output_nr", "retains_grad", "data", "_fw_grad")


def _before(preset: dict) -> tuple:
    """What ``_after`` compares the preset tensors with after the run."""
    return ({n: t._grad for n, t in preset.items()}, [(vc, vc[0]) for vc in _vcs(preset)],
            {n: tuple([getattr(t, a) for a in _ATTRS]) for n, t in preset.items()})


def _after(state: State, preset: dict, before: tuple, rec: K.Recorder) -> _After | Unplannable:
    """How the cold run's final state differs from the preset one, as a replay can rebuild it; or why it
    cannot. What a run may leave: new tensors (each under one name, without a view relationship, a graph
    only once its backward freed it), preset tensors moved in place (their versions), their gradients
    replaced, dropped or written in place."""
    counter, functions, (grads0, vcs0, attrs0) = before
    if state.counter != counter or state.functions is not functions and state.functions != functions:
        return Unplannable("session_state", "the run changed the session's names or functions")
    old = {id(t): ("t", n) for n, t in preset.items()}
    old.update((id(g), ("g", n)) for n, g in grads0.items() if g is not None)
    pvcs = {id(vc) for vc, _ in vcs0}
    new, aliases, named = {}, [], set()
    for name, t in state.tensors.items():
        if preset.get(name) is t:
            continue
        if id(t) in old:
            # a name bound to a tensor the session held (``g = w.grad`` of a gradient kept in place): the same
            # object after a replay, once
            if id(t) in named:
                return Unplannable("session_state", f"{name!r} names a tensor the session held under another name")
            named.add(id(t))
            aliases.append((name, *old[id(t)]))
            continue
        if id(t) in new:
            return Unplannable("session_state", f"{name!r} names a tensor the session held under another name")
        new[id(t)] = name
        if t._base is not None or t._fw_grad is not None or id(t._vc) in pvcs:
            return Unplannable("session_state", f"{name!r} has a view relationship with the session")
        g = t._grad
        if g is not None and (not _historyless(g) or g._requires_grad or id(g._vc) in pvcs):
            return Unplannable("session_state", f"the gradient of {name!r} carries a graph")
    grads = []
    for name, t in preset.items():
        if not all(getattr(t, a) is v for a, v in zip(_ATTRS, attrs0[name])):  # (identity: data is an array)
            return Unplannable("session_state", f"{name!r} changed its autograd metadata")
        g, g0 = t._grad, grads0[name]
        if g is None:
            grads.append(None)
            continue
        if not _historyless(g) or g._requires_grad:
            return Unplannable("session_state", f"the gradient of {name!r} carries a graph")
        if g is g0:
            grads.append(-1)
        elif id(g) in new:
            grads.append(("n", new[id(g)]))
        elif id(g) in old or id(g._vc) in pvcs:
            return Unplannable("session_state", f"the gradient of {name!r} is a tensor the session held")
        else:
            d = _desc(rec, g, 1)
            if d is None:
                return Unplannable("untraced_array", f"the gradient of {name!r} was made outside a kernel")
            grads.append(("d", d))
    deltas = tuple((i, vc[0] - v) for i, (vc, v) in enumerate(vcs0) if vc[0] != v)
    roots = [(name, t) for name, t in state.tensors.items() if id(t) in new and t._grad_fn is not None]
    nodes, graphs = (), ()
    if roots:
        made = _graph_template(roots, preset, new)
        if made.__class__ is Unplannable:
            return made
        nodes, graphs = made
    return _After(tuple(grads), deltas, nodes, graphs, aliases=tuple(aliases))


_SAVED_PLAIN = (int, float, bool, str, type(None), tuple)


def _graph_template(roots: list, preset: dict, new: dict):
    """(nodes, graphs) of ``_After`` for the new tensors ``roots`` that carry a graph, or why not: every node
    must hold no saved tensor any more (a backward without retain_graph freed them) and retain nothing, and
    every AccumulateGrad be a preset or new tensor's own."""
    order, index = [], {}
    for _, t in roots:
        stack = [(t._grad_fn, False)]
        while stack:
            n, done = stack.pop()
            if id(n) in index:
                continue
            if done:
                index[id(n)] = len(order)
                order.append(n)
                continue
            stack.append((n, True))
            if n.prim != _ACC:
                stack.extend((c, False) for c, _ in n.next_functions if c is not None and id(c) not in index)
    by_id = {id(t): name for name, t in preset.items()}
    nodes = []
    for n in order:
        if n.prim == _ACC:
            v = n.variable
            if v is None or v._accumulator is not n:
                return Unplannable("session_state", "a graph reaches an accumulator of no session tensor")
            if id(v) in by_id:
                nodes.append(("acc", "p", by_id[id(v)]))
            elif id(v) in new:
                nodes.append(("acc", "n", new[id(v)]))
            else:
                return Unplannable("session_state", "a graph reaches a leaf the session does not hold")
            continue
        if n.retained or n.variable is not None or n.holds_saved_tensors():
            return Unplannable("session_state", "a result's graph still holds saved tensors")
        for v in n.saved.values():
            if v.__class__ is list:
                if not all(x.__class__ is SavedTensor for x in v):
                    return Unplannable("session_state", "a graph node saves a value a replay cannot copy")
            elif v.__class__ is not SavedTensor and not isinstance(v, _SAVED_PLAIN):
                return Unplannable("session_state", "a graph node saves a value a replay cannot copy")
        nodes.append(("f", n, tuple([(None if c is None else index[id(c)], nr) for c, nr in n.next_functions])))
    graphs = tuple((name, t.output_nr, index[id(t._grad_fn)]) for name, t in roots)
    return tuple(nodes), graphs


_new_node = Node.__new__


def _rebuild_graph(nodes: tuple, preset: dict, new: dict) -> list:
    """The nodes of a template (``_graph_template``), made anew for a replay's tensors; freed saved tensors are
    shared (nothing writes a freed slot)."""
    built = []
    for e in nodes:
        if e[0] == "acc":
            built.append(accumulator(preset[e[2]] if e[1] == "p" else new[e[2]]))
            continue
        _, src, nexts = e
        n = _new_node(Node)
        n.name, n.prim, n.input_meta, n.n_outputs, n._needs = src.name, src.prim, src.input_meta, src.n_outputs, \
            src._needs
        n.saved = {k: list(v) if v.__class__ is list else v for k, v in src.saved.items()}
        n.retained = n.variable = None
        n.next_functions = tuple([(None if c is None else built[c], nr) for c, nr in nexts])
        built.append(n)
    return built


def _finish_session(plan: Plan, buf: list, state: State, preset: dict) -> ProgramResult:
    """``_finish`` for a session plan with an ``_After``: the preset tensors' versions and gradients as the
    cold run leaves them, new tensors with their graphs."""
    after = plan.after
    if after.deltas:
        vcs = _vcs(preset)
        for i, d in after.deltas:
            vcs[i][0] += d
    relative = after.relative
    if relative is None:
        relative = after.relative = any(a.__class__ is tuple for _, _, es in plan.autograd for _, _, _, a in es)
    if relative:
        bases = [t.grad_accumulations for t in preset.values()]
        plan = dataclasses.replace(plan, autograd=[
            (i, op, [(n, c, g, a if a.__class__ is int else bases[a[0]] + a[1]) for n, c, g, a in es])
            for i, op, es in plan.autograd])
    ns, new = {}, {}
    aliases = {name: preset[p] if kind == "t" else preset[p]._grad for name, kind, p in after.aliases} \
        if after.aliases else ()
    for name, d in plan.namespace:
        if d is None:
            ns[name] = preset[name]
        elif name in aliases:
            ns[name] = aliases[name]
        else:
            ns[name] = new[name] = _tensor(buf, d)
    for k, ((name, _, accs), how) in enumerate(zip(plan.preset, after.grads)):
        t = preset[name]
        if how is None:
            t._grad = None
        elif how != -1:
            t._grad = new[how[1]] if how[0] == "n" else _tensor(buf, how[1])
        if after.accs is None:
            t.grad_accumulations = accs
        else:
            kind, n = after.accs[k]
            t.grad_accumulations = n if kind == "abs" else t.grad_accumulations + n
    if after.graphs:
        built = _rebuild_graph(after.nodes, preset, new)
        for name, nr, i in after.graphs:
            t = new[name]
            t._grad_fn = built[i]
            t.output_nr = nr
    state.tensors = ns
    state.backward_passes += plan.backward_passes
    return _PlannedResult(plan, buf)


def _renamer(plan: Plan, names: list):
    """recorded name -> this run's name, or None when they are the same."""
    if plan.names is None or plan.names == names:
        return None
    return dict(zip(plan.names, names))


def _renamed_plan(plan: Plan, r: dict) -> Plan:
    """``plan`` as its result reads under this run's names (the tape, registers and pool shared)."""
    g = r.get
    after = plan.after
    if after is not None:
        after = _After(tuple([h if h is None or h == -1 or h[0] != "n" else ("n", g(h[1], h[1])) for h in after.grads]),
                       after.deltas,
                       tuple([e if e[0] != "acc" else ("acc", e[1], g(e[2], e[2])) for e in after.nodes]),
                       tuple([(g(n, n), nr, i) for n, nr, i in after.graphs]), after.accs,
                       tuple([(g(n, n), k, g(p, p)) for n, k, p in after.aliases]))
    return dataclasses.replace(
        plan, namespace=[(g(n, n), d) for n, d in plan.namespace], preset=[(g(n, n), d, a) for n, d, a in plan.preset],
        ops=[OpOutcome(o.index, o.op, [g(b, b) for b in o.bound]) for o in plan.ops],
        changed=[g(n, n) for n in plan.changed],
        autograd=[(i, op, [(g(n, n), c, d, a) for n, c, d, a in es]) for i, op, es in plan.autograd], after=after)


class _Pinned:
    """Under a lifted key: the lifted literals whose values its recording read (``kernel.Lit.pin``): its plans
    are keyed by these values too (``(key, pins, values)``)."""

    __slots__ = ("pins",)
    nbytes = 64

    def __init__(self, pins):
        self.pins = tuple(sorted(pins))


def _with_literals(ops: list, lits: list, rec: K.Recorder, pinned: tuple | None) -> tuple[list, list]:
    """``ops`` with each lifted float replaced by a ``kernel.Lit`` of ``rec`` (its input slot added), but the
    ``pinned`` ones (their values are in the key), and the Lits."""
    out, made = list(ops), []
    for index, (j, where, v) in enumerate(lits):
        if pinned is not None and index in pinned:
            rec.add_input(np.array(v))  # (its slot, unread: the inputs keep their places)
            continue
        lit = K.Lit(v, index, rec)
        rec.add_literal(lit)
        made.append(lit)
        o = out[j]
        if o is ops[j]:
            o = out[j] = {**o, "args": list(o.get("args") or ()), "kwargs": dict(o.get("kwargs") or {})}
        if where.__class__ is int:
            o["args"][where] = lit
        else:
            o["kwargs"][where] = lit
    return out, made


def _unlit_graphs(state: State, lits: list) -> None:
    """After a recording: the values of the Lits graph nodes saved (a replay rebuilds those nodes with the recorded
    values: the key holds them, pinned), and no Lit left anywhere the session keeps."""
    seen, stack = set(), []
    for t in state.tensors.values():
        for x in (t, t._grad):
            if x is not None and x._grad_fn is not None:
                stack.append(x._grad_fn)
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        saved = n.saved
        for k, v in saved.items():
            u = K.unlit(v)
            if u is not v:
                saved[k] = u
        stack.extend(c for c, _ in n.next_functions if c is not None and id(c) not in seen)
    for lit in lits:
        lit.rec = None


def _keyed(cache: PlanCache, state: State, ops: list, kwargs: dict, carried: tuple | None = None,
           strict: bool = False):
    """A session list's key on ``state`` and what a run of it needs: (key, base key (before pins), the cache's
    entry, the inputs, the canonical names, the lifted literals, the pinned literals, the pre-key, the key's
    extra); or the route of a list that cannot be keyed (unkeyable, known unplannable)."""
    respond = kwargs.get("respond", "changed")
    pre = names = kops = ren = None
    lits = ()
    extra = caller_key(kwargs, kwargs.get("extra"), True, respond)
    if carried is not None and _layout(state) == carried[1]:
        # the state a plan just left (a repeat's previous iteration): its key is the one that plan carries
        key, inputs = carried[0], [t.data for t in state.tensors.values()]
    else:
        # a loop's list under other names each time (a client's name counter) is one key: its canonical names
        canon = None if strict else _canonical(ops, state.tensors)
        kops, ren = ops, None
        if canon is not None:
            kops, nm = canon
            names, ren, lits = nm.names, nm.ren, nm.lits
            if not isinstance(respond, str):
                extra = caller_key(kwargs, kwargs.get("extra"), True, [nm.name(n) for n in respond])
        # the full key first: a list with a plan (the common request) replays without its pre-key; the pre-key
        # is made where the full key finds no plan (a list marked unplannable under it runs cold, as before)
        made = _session_key(state, kops, extra, None, strict, ren, None if canon is None else nm.dropped)
        if made is None:
            pre = _marked(cache, state, kops, extra, ren)
            return pre if pre.__class__ is R.Route else R.COLD_UNKEYABLE
        key, inputs = made
        if lits:  # the lifted floats are inputs, after the session's arrays (``_with_literals``' slots)
            n = len(state.tensors) + sum(t._grad is not None for t in state.tensors.values())
            inputs[n:n] = [np.array(v) for _, _, v in lits]
    base = key
    entry = cache.get(key)
    pinned = None
    if entry.__class__ is _Pinned:
        pinned = entry.pins
        key = _pinned_key(base, pinned, lits)
        entry = cache.get(key)
    if kops is not None and not isinstance(entry, Plan):
        pre = _marked(cache, state, kops, extra, ren)
        if pre.__class__ is R.Route:
            return pre
    return key, base, entry, inputs, names, lits, pinned, pre, extra


def _marked(cache: PlanCache, state: State, ops: list, extra: tuple, ren: dict | None):
    """A session list's pre-key (``key._pre_key``), or the route it runs: known unplannable (marked under the
    pre-key), or unkeyable (no pre-key)."""
    pre = _pre_key(state, ops, extra, ren)
    if pre is None:
        return R.COLD_UNKEYABLE
    known = cache.get(pre)
    return known.route() if isinstance(known, Unplannable) else pre


def _session_step(cache: PlanCache, state: State, ops: list, kwargs: dict, plannable: bool | None = None,
                  carried: tuple | None = None, eager: bool = False, strict: bool = False, keyed=None,
                  recorded: R.Route | None = None):
    """One run of a session list through ``cache``: (result, plan, route) when it replayed a plan or recorded
    one, (None, False, route) without running anything when it would run cold unrecorded (unplannable,
    unkeyable, or a plan known to be unplannable), (None, None, route) when a replay's guard failed (nothing
    changed) or the run is a deferred sighting (both counted already), (result, False, route) when it ran cold
    recording and turned out unplannable. ``route``: the way the run went, or goes (``engine.trace.route``).
    ``keyed``: the list's ``_keyed`` on this state, when the caller has it; ``recorded``: the route of a run that
    records (its reason: why it records now)."""
    if plannable is None:
        plannable = _plannable_session_list(ops, state.functions)
    if not plannable:
        return None, False, R.COLD_UNPLANNABLE
    if keyed is None:
        keyed = _keyed(cache, state, ops, kwargs, carried, strict)
    if keyed.__class__ is R.Route:
        return None, False, keyed
    key, base, entry, inputs, names, lits, pinned, pre, extra = keyed
    run = {k: v for k, v in kwargs.items() if k not in ("extra", "repeat", "until", "run_limits")}
    if "run_limits" in kwargs:  # (a segment's: keyed under the list's limits, run under its own share of them)
        run["limits"] = kwargs["run_limits"]
    if isinstance(entry, Plan):
        preset = dict(state.tensors)
        buf = _guarded_replay(cache, entry, inputs, kwargs.get("control"))
        if buf.__class__ is not list:
            return None, None, buf
        if entry.after is None:
            res = _finish(entry, buf, state, preset)
        else:
            r = _renamer(entry, names)
            res = _finish_session(entry if r is None else _renamed_plan(entry, r), buf, state, preset)
        state.held_bytes = entry.held_bytes
        return res, entry, R.REPLAYED
    if isinstance(entry, Unplannable):
        return None, False, entry.route()
    # (a training step records at its first sighting: ``_training_step``)
    if recorded is None:
        recorded = R.RECORDED_STEP if not eager and cache.record_after > 1 and _training_step(ops) else R.RECORDED
    if not cache.records(key, eager or recorded is R.RECORDED_STEP):
        # a sighting before the one that records: counted as deferred, not unplannable
        return None, None, R.COLD_FIRST
    cache.count("misses")
    preset = dict(state.tensors)
    before = (state.counter, state.functions, {n: t._vc[0] for n, t in preset.items()} if strict else
              _before(preset))
    passes = state.backward_passes
    offsets = None if strict else _offset(preset)
    made_lits = ()
    try:
        with K.recording() as rec:
            for a in _session_inputs(preset):
                rec.add_input(a)
            rops = ops
            if lits:
                rops, made_lits = _with_literals(ops, lits, rec, pinned)
            try:
                res = run_program(state, rops, **run)
            except Exception as e:
                if not made_lits:
                    e.route = recorded
                    raise
                res = None  # (undone: the cold run below gives the result or the error)
    finally:
        accs = None if offsets is None else _unoffset(preset, offsets)
        for lit in made_lits:
            lit.rec = None
    if res is None:
        # the run failed with stand-ins for its floats: the list fails of itself (the cold run raises its error), or
        # a stand-in was taken where only a float can be (numpy took it as an operand: ``rec.escaped``)
        try:
            res = run_program(state, ops, **run)
        except Exception as e:
            e.route = recorded
            raise
        cache.put(base, _Pinned(range(len(lits))))  # (this structure keys its floats by value from now on)
        return res, False, R.Route("cold", "literal_escaped", "numpy took a float literal as an operand" if rec.escaped
                                   else "a float literal failed where a float does not")
    if lits:
        _unlit_graphs(state, made_lits)  # (pins the values graph nodes saved)
        pins = set(rec.pins) if pinned is None else set(rec.pins).union(pinned)
        if pinned is None or not pins.issubset(pinned):
            if pins or pinned is not None:
                cache.put(base, _Pinned(pins))
            pins = tuple(sorted(pins))  # (which floats, and their values: a key is one set's)
            key = base if not pins else _pinned_key(base, pins, lits)
    moved = None if offsets is None else _unoffset_report(res, offsets)
    after = _session_check(state, preset, before, rec) if strict else _after(state, preset, before, rec)
    plan = after if after.__class__ is Unplannable else \
        _build(rec, state, preset, res, not rec.unknown_writes(), cache.max_bytes)
    if isinstance(after, _After) and isinstance(plan, Plan):
        after.accs = accs
        if moved:
            plan.autograd = [(i, op, [(n, c, g, moved.get((k, j), a)) for j, (n, c, g, a) in enumerate(es)])
                             for k, (i, op, es) in enumerate(plan.autograd)]
        plan.after, plan.names = after, names
    if plan.__class__ is Unplannable:
        cache.put(base, plan)
        if pre is not None:
            cache.put(pre, plan)
        return res, False, plan.route()
    plan.backward_passes = state.backward_passes - passes
    plan.held_bytes = state.held_bytes
    ins = {id(t.data) for t in preset.values()}
    plan.iter_bytes = sum(a.nbytes for a in rec.keep if a.__class__ is np.ndarray and id(a) not in ins)
    if strict and not any(isinstance(op, dict) and op.get("op") in INPUT_OPS for op in ops):
        # the key of the state this run leaves (a replay leaves the same structure): a repeat's next
        # iteration finds its plan without building it
        then = _session_key(state, ops, extra, None, strict)
        if then is not None:
            plan.next_key = (key if then[0] == key else then[0], _layout(state))
            # a repeat may run it on a lazy state (_chain_step): no gradients to give, none to rebuild
            plan.chainable = all(g is None for _, g, _ in plan.preset) and \
                all(d is None or d[6] is None for _, d in plan.namespace)
    if key is not base:
        plan.pins = key[1:]
    cache.put(key, plan)
    return res, plan, recorded


def _training_step(ops: list) -> bool:
    """Whether a session list is recognisably a training loop's iteration, which the loop sends again: it runs a
    backward and writes a tensor in place under ``no_grad`` (an optimizer's update; ``gradserve.torch`` sends
    the last step's update with the next forward and backward). Its plan is recorded at its first sighting, so a
    client loop replays from its third request: its first makes the tensors and has no update yet, its second is
    the loop's list (an optimizer's first step sends the ops of every later one)."""
    backward = update = False
    for o in ops:
        if o.__class__ is not dict:
            return False
        name = o.get("op")
        if name == "backward" or name == "grad":
            backward = True
        elif o.get("no_grad") is True and name.__class__ is str:
            spec = OPS.get(name)
            update = update or (spec is not None and spec.inplace)
    return backward and update


def run_session_planned(cache: PlanCache | None, state: State, ops: list, *, extra: tuple = (),
                        **kwargs) -> ProgramResult:
    """``run_program(state, ops, **kwargs)`` on a session's state through ``cache``: a session list whose
    results carry no graph (every tensor it leaves bound is a new one without requires_grad, only leaf .grad
    updates besides) replays its plan; anything else, or anything the key cannot cover, runs cold. With
    ``repeat``, every iteration runs so (``_repeat``). What the caller can observe (state, result, errors,
    atomicity) is the cold run's."""
    return route_session(cache, state, ops, extra=extra, **kwargs)[0]


def route_session(cache: PlanCache | None, state: State, ops: list, *, extra: tuple = (),
                  **kwargs) -> tuple[ProgramResult, R.Route]:
    """``run_session_planned``, and the route the run took (``engine.trace.route``)."""
    returns = kwargs.get("returns") or ()
    if cache is None:
        return _cold_session(state, ops, kwargs, R.COLD_DISABLED)
    if kwargs.get("record") or not _plain_refs(returns):
        return _cold_session(state, ops, kwargs, R.COLD_OPTIONS)
    plannable = _plannable_session_list(ops, state.functions)
    if kwargs.get("repeat", 1) != 1 or kwargs.get("until") is not None:
        # (a loop's iterations run on the session's arrays: one that writes them in place runs cold, whose journal
        # undoes a failed loop whole)
        if plannable and isinstance(kwargs.get("repeat", 1), int) and kwargs.get("repeat", 1) >= 1 \
                and not _writes_in_place(ops, state.functions):
            res = _repeat(cache, state, ops, {**kwargs, "extra": extra})
            if res is not None:
                return _returned(res, state, returns), R.REPLAYED_LOOP
            return _cold_session(state, ops, kwargs, R.COLD_LOOP)
        return _cold_session(state, ops, kwargs, R.COLD_OPTIONS if plannable else R.COLD_UNPLANNABLE)
    kw = {**kwargs, "extra": extra}
    whole = _keyed(cache, state, ops, kw) if plannable else None  # (the whole list's key first: the fast path)
    entry = None if whole is None or whole.__class__ is R.Route else whole[2]
    if entry is _FUSE:
        # every segment of this structure replayed in an earlier run: the whole list records its plan now (as a
        # training step's first sighting does), and later runs replay that one plan, as without segments
        res, planned, route = _session_step(cache, state, ops, kw, plannable, eager=True, keyed=whole,
                                            recorded=R.RECORDED_FUSED)
        if res is not None:
            return _returned(res, state, returns), route
        return _cold_session(state, ops, kwargs, route)
    if cache.segments and not isinstance(entry, (Plan, Unplannable)) and not kwargs.get("no_grad") \
            and (not plannable or _training_step(ops)):
        # (a list that plans whole, a training step's aside, does: a loop's first request, which cannot, records
        # its forward and backward as a segment, and its second, a training step, replays them)
        cuts = _segments(ops, state.functions)
        if cuts is not None:
            # (a training loop's list: its parts plan on their own, so that the grad-mode part its first request
            # recorded replays in its second; None: a segment's tensors alias others, nothing run)
            done = _run_segments(cache, state, ops, cuts, {**kwargs, "extra": (extra, "segment")},
                                 whole[0] if entry is None and whole.__class__ is tuple else None)
            if done is not None:
                return _returned(done[0], state, returns), done[1]
    res, planned, route = _session_step(cache, state, ops, kw, plannable, keyed=whole)
    if res is not None:
        return _returned(res, state, returns), route
    if planned is not None:  # (None: a fallback or a deferred sighting, counted)
        cache.count("unplannable")
    return _cold_session(state, ops, kwargs, route)


# ----- segments: a list run in parts, each planned on the session tensors it names ---------------------------
#: what a segment may hold besides the op table's ops (no transforms, functions or forward-mode actions)
_SEGMENT_ACTIONS = frozenset({"backward", "zero_grad", "bind", "del", "set_grad", "retain_grad", "requires_grad_"})


#: what a prefix holds besides ops under no_grad: creations, zero_grad, dels
_PREFIX_OPS = INPUT_OPS | {"zero_grad", "del"}


def _tail_del(o: dict) -> bool:
    """A ``del`` of plain names, nothing else: what ends a client's list (the names it let go of)."""
    return o.get("op") == "del" and o.keys() <= {"op", "args", "kwargs"} and not o.get("kwargs") \
        and all(a.__class__ is str for a in o.get("args") or ())


def _segments(ops: list, functions: dict) -> list | None:
    """Where a session list with a backward cuts into segments, as (start, end) index ranges: a prefix of ops
    under ``no_grad``, creations, ``zero_grad`` and ``del`` s (a client's last update, or its tensors and optimizer
    state), the grad-mode part (forward, backward, gradients bound to names), and a tail of ``del`` s. None:
    not a list of that shape (one part only, an op a segment may not hold, a grad-mode part that cannot plan,
    or a segment that unbinds a name and binds it again: its place in the session's order is then not the one
    a merge would give)."""
    if ops.__class__ is not list:
        return None
    backward = False
    for o in ops:
        if o.__class__ is not dict:
            return None
        name = o.get("op")
        if name.__class__ is not str or (name not in _SEGMENT_ACTIONS and (name not in OPS or name in TRANSFORMS)):
            return None
        backward = backward or name == "backward"
    if not backward:
        return None
    n = end = len(ops)
    while end > 0 and _tail_del(ops[end - 1]):
        end -= 1
    start = 0
    while start < end and (ops[start].get("no_grad") is True or ops[start].get("op") in _PREFIX_OPS):
        start += 1
    grad = ops[start:end]
    if (start == 0 and end == n) or not any(o.get("op") == "backward" for o in grad) \
            or not _plannable_session_list(grad, functions):
        return None
    cuts = ([(0, start, False)] if start else []) + [(start, end, False)] + ([(end, n, True)] if end < n else [])
    for a, b, _ in cuts:
        dropped = set()
        for o in ops[a:b]:
            out = o.get("out")
            for name in (out if out.__class__ is list else (out,)):
                if name in dropped:
                    return None
            if o.get("op") == "del":
                dropped.update(o.get("args") or ())
    return cuts


def _named(ops: list, tensors: dict | None) -> set:
    """The session's names a segment's ops mention anywhere (a ``NAME.grad`` by its ``NAME``; ``tensors`` None:
    every string). A creation's data is not read (numbers only)."""
    found = set()
    stack = []
    for o in ops:
        for k, v in o.items():
            if k == "args" and o["op"] in INPUT_OPS:
                continue
            if v.__class__ is str:
                stack.append(v)
            elif v.__class__ is list or v.__class__ is dict:
                stack.append(v)
    while stack:
        v = stack.pop()
        c = v.__class__
        if c is str:
            base = v.partition(".")[0] if "." in v else v
            if tensors is None or base in tensors:
                found.add(base)
        elif c is list or c is tuple:
            for x in v:
                if x.__class__ is str or x.__class__ is list or x.__class__ is dict or x.__class__ is tuple:
                    stack.append(x)
        elif c is dict:
            stack.extend(v.keys())
            for x in v.values():
                if x.__class__ is str or x.__class__ is list or x.__class__ is dict or x.__class__ is tuple:
                    stack.append(x)
    return found


def _apart(tensors: dict, names: set) -> bool:
    """Whether no tensor outside ``names`` shares a tensor, a version counter or an array with one of ``names``
    or its gradient: a segment's run then touches nothing the session holds under the other names (and its
    autograd report names each tensor it reached as the whole list's run would)."""
    inside, outside = set(), set()
    for n, t in tensors.items():
        into = inside if n in names else outside
        for x in (t, t._grad):
            if x is not None:
                if x.__class__ is not Tensor:
                    return False
                d = x.data
                into.add(id(x))
                into.add(id(x._vc))
                into.add(id(d) if d.base is None else id(d.base))
    return inside.isdisjoint(outside)


_STATE_FIELDS = ("functions", "backward_passes", "warned", "counter", "held_bytes", "generator", "generators")
_UNDO_ATTRS = ("_requires_grad", "_grad_fn", "_grad", "retains_grad", "grad_accumulations", "output_nr")


class _Undo:
    """What the segments may change, kept so that a failed segment (or a check after them) leaves the session as
    it was: the state's fields and namespace, each named tensor's (and its gradient's) attributes, version and
    array contents (an op may write an argument besides ``self``: batch_norm's running statistics)."""

    def __init__(self, state: State, names):
        self.fields = {f: getattr(state, f) for f in _STATE_FIELDS}
        self.fields["warned"] = set(state.warned)
        if state.generator is not None or state.generators:  # (plain data a random op moves)
            self.fields["generator"] = copy.deepcopy(state.generator)
            self.fields["generators"] = copy.deepcopy(state.generators)
        self.tensors = dict(state.tensors)
        self.kept = []
        seen = set()
        for n in names:
            t = state.tensors[n]
            for x in (t, t._grad):
                if x is not None and id(x) not in seen:
                    seen.add(id(x))
                    self.kept.append((x, [getattr(x, a) for a in _UNDO_ATTRS], x._vc[0], x.data, x.data.copy()))

    def restore(self, state: State) -> None:
        for x, attrs, version, arr, data in self.kept:
            for a, v in zip(_UNDO_ATTRS, attrs):
                setattr(x, a, v)
            x._vc[0] = version
            np.copyto(arr, data)
        for f, v in self.fields.items():
            setattr(state, f, v)
        state.tensors = self.tensors


class _SegmentFailed(Exception):
    """A segment raised, or a check after them failed: the state is put back and the list runs whole."""


def _sub_state(state: State, tensors: dict) -> State:
    """A state of ``tensors`` (some of the session's), the session's other fields shared."""
    sub = State.__new__(State)
    sub.__dict__.update(state.__dict__)
    sub.tensors = tensors
    return sub


def _merge(state: State, sub: State, names) -> None:
    """``sub``'s run into the session: its fields, and its namespace in the session's order (a name it kept keeps
    its place, a new one comes last, as the cold run of the whole list binds them)."""
    after = sub.tensors
    ns = {}
    for n, t in state.tensors.items():
        if n not in names:
            ns[n] = t
        elif n in after:
            ns[n] = after[n]
    for n, t in after.items():
        if n not in names:
            if n in ns:  # (a fresh name the segment made is one the session holds elsewhere)
                raise _SegmentFailed
            ns[n] = t
    for f in _STATE_FIELDS:
        setattr(state, f, getattr(sub, f))
    state.tensors = ns


def _run_segment(cache: PlanCache, state: State, seg: list, names: set, kwargs: dict, respond,
                 copies: int | None = None) -> tuple:
    """One segment on a state of the tensors it names: replayed, recorded (at its first sighting) or cold; its
    result and its route. Its run counts its own tensors' bytes: with limits,
    it runs (keyed as the list's limits say) under a bytes bound less what the rest of the session holds and
    ``copies`` (the undo copies the whole list's cold run would hold), so it fails where that run would."""
    sub = _sub_state(state, {n: t for n, t in state.tensors.items() if n in names})
    run = {**kwargs, "respond": respond}
    limits = kwargs.get("limits")
    if limits is not None:
        sub.held_bytes = own = graph_stats(sub.tensors.values())[1]
        room = limits.max_bytes - (graph_stats(state.tensors.values())[1] - own) - copies
        if room <= own:
            raise _SegmentFailed
        run["run_limits"] = dataclasses.replace(limits, max_bytes=room)
    try:
        res, planned, route = _session_step(cache, sub, seg, run, eager=True)
        if res is None:
            if planned is not None:  # (None: a replay's guard fired, nothing changed; counted)
                cache.count("unplannable")
            own = run.get("run_limits")
            run = {k: v for k, v in run.items() if k not in ("extra", "repeat", "until", "run_limits")}
            if own is not None:
                run["limits"] = own
            res = run_program(sub, seg, **run)
    except Exception as e:
        raise _SegmentFailed from e
    _merge(state, sub, names)
    return res, route


class _Fuse:
    """Under a whole list's key: every segment of a run of this structure replayed (``_run_segments``), so its next
    run records the whole list's plan (``route_session``): one plan replayed per run from then on, the steady state
    of a list planned whole (two plans replayed one after another cost 15-40% more on a small model)."""

    __slots__ = ()
    nbytes = 64


_FUSE = _Fuse()


def _apply_dels(state: State, ops: list, start: int, result: ProgramResult) -> None:
    """A list's tail of ``del`` s from ``start`` on, as the cold run applies them (an unbound name ignored)."""
    for i in range(start, len(ops)):
        for n in ops[i].get("args") or ():
            state.tensors.pop(n, None)
            if n in state.functions:
                state.functions = {k: f for k, f in state.functions.items() if k != n}
        result.ops.append(OpOutcome(i, "del", []))


def _run_segments(cache: PlanCache, state: State, ops: list, cuts: list, kwargs: dict, whole=None):
    """A session list run as its segments (``_segments``) one after another on the session's state, each keyed
    on the tensors it names, so that the grad-mode part a client sends with its first update replays the plan
    its first request recorded. One transaction: a segment that raises, or a limit the whole list's cold run
    would meet, puts the state back and the list runs whole, cold (which gives the result or the error, at its
    op index). The result is the whole list's: op outcomes and autograd records at their indices, warnings in
    order, ``changed`` taken as the cold run takes it. None (nothing run): a segment's tensors share an array, a
    counter or a tensor with others in the session. ``whole``: the whole list's key, under which a run whose
    planned segments all replayed leaves the ``_Fuse`` marker."""
    tensors = state.tensors
    limits, respond = kwargs.get("limits"), kwargs.get("respond", "changed")
    named = set()
    for k, (a, b, tail) in enumerate(cuts):
        if not tail:
            names = _named(ops[a:b], tensors)
            if k == 0 and not _apart(tensors, names):  # (a later segment's: checked when it comes)
                return None
            named |= names
    # (a name no segment mentions does not change: ``_apart``)
    before = {n: _fingerprint(tensors[n]) for n in named}
    undo = _Undo(state, named)
    control = kwargs.get("control")
    if control is not None and not control.total:
        control.total = len(ops)
    result, routes, made = ProgramResult(), [], 0
    if limits is not None:
        # (the undo copies the cold run of the whole list holds of what it writes: at most every named array)
        start = state.held_bytes if state.held_bytes is not None else graph_stats(tensors.values())[1]
        copies = sum(a.nbytes for _, _, _, a, _ in undo.kept)
    try:
        for a, b, tail in cuts:
            seg = ops[a:b]
            if tail:
                _apply_dels(state, ops, a, result)
                routes.append((b - a, "applied"))
                continue
            names = _named(seg, state.tensors)  # (with the names a segment before this one bound)
            if not _apart(state.tensors, names):
                raise _SegmentFailed
            # (a list of names is what the response shows: this segment's, and those it may make)
            shown = respond if respond.__class__ is str else \
                [n for n in respond if n.partition(".")[0] in names or n.partition(".")[0] not in state.tensors]
            res, route = _run_segment(cache, state, seg, names, kwargs, shown, None if limits is None else copies)
            routes.append((b - a, route.name))
            result.ops += [OpOutcome(o.index + a, o.op, list(o.bound)) for o in res.ops]
            result.autograd += [AutogradRecord(r.op_index + a, r.op, r.entries) for r in res.autograd]
            result.warnings += res.warnings
            if route.name == "replayed":  # (a replay counts nothing: every array its recording made, bounded)
                made += res._plan.iter_bytes
        ns = state.tensors
        old = undo.tensors
        result.changed = [n for n, t in ns.items() if n not in old or (n in before and before[n] != _fingerprint(t))]
        if limits is not None:
            # the checks the whole list's cold run makes at its end, and its peak bytes bounded from above
            nodes, nbytes = graph_stats(ns.values())
            if nodes > limits.max_nodes or start + copies + made + nbytes > limits.max_bytes:
                raise _SegmentFailed
            if limits.max_response_bytes is not None:
                budget = Budget(limits, response_size=kwargs.get("response_size"))
                try:
                    _count_response(budget, result, ns, result.changed if respond == "changed" else
                                    list(ns) if respond == "all" else respond)
                except Exception as e:
                    raise _SegmentFailed from e
            state.held_bytes = nbytes
        else:
            state.held_bytes = None
    except _SegmentFailed:
        undo.restore(state)
        return _cold_session(state, ops, {k: v for k, v in kwargs.items() if k != "extra"}, R.FALLBACK_SEGMENTS)
    if whole is not None and all(r in ("replayed", "applied") for _, r in routes):
        cache.put(whole, _FUSE)  # (every planned segment replayed: the next run records the whole list)
    replayed = sum(r == "replayed" for _, r in routes)
    recorded = sum(r == "recorded" for _, r in routes)
    detail = f"{replayed} of {len(cuts)} segments replayed: " + ", ".join(f"{n} ops {r}" for n, r in routes)
    return result, R.Route("replayed" if replayed else "recorded" if recorded else "cold", "segments", detail)


def _writes_in_place(ops: list, functions: dict) -> bool:
    """Whether the list (or a function of the session) calls an in-place op."""
    names = {o.get("op") for o in ops if o.__class__ is dict}
    for f in functions.values():
        names.update(o.get("op") for o in f.ops if o.__class__ is dict)
    for name in names:
        spec = OPS.get(name) if name.__class__ is str else None
        if spec is not None and spec.inplace:
            return True
    return False


def _plain_refs(returns) -> bool:
    """Whether every name ``return`` reads is ``NAME`` or ``NAME.grad``: what a planned run reads after the
    fact (``_returned``) without an error; anything else runs cold, which reports it."""
    for n in returns:
        if n.__class__ is not str:
            return False
        _, dot, attr = n.partition(".")
        if dot and attr != "grad":
            return False
    return True


def _returned(res: ProgramResult, state: State, returns) -> ProgramResult:
    """``res`` with the tensors ``return`` reads after the run (what the cold run's ``returns`` gives)."""
    if returns and not res.returned:
        ns = state.tensors
        res.returned = {n: resolve_quietly(ns, n) for n in returns}
    return res


_TENSOR_ATTRS = ("_grad", "grad_accumulations", "retains_grad", "_requires_grad")


def _repeat(cache: PlanCache, state: State, ops: list, kwargs: dict) -> ProgramResult | None:
    """A ``repeat`` (``until``) loop of a plannable list, one iteration at a time on a scratch copy of the
    state: each replays the list's plan for the state it meets (the first records it). The per-iteration plans
    leave exactly the cold states, so the last leaves the cold loop's state; the loop's result is rebuilt as
    the cold loop reports it. None (the state untouched) when an iteration cannot plan, fails, or the loop's
    bytes could pass a limit the cold loop counts over all iterations: the caller then runs the loop cold."""
    from ..budget import Budget
    from ..program import _count_response, _fingerprint, _until_reached

    repeat, until, limits = kwargs.get("repeat", 1), kwargs.get("until"), kwargs.get("limits")
    if until is not None and not (isinstance(until, str) and NAME_RE.match(until)):
        return None
    saved = {id(t): (t, [getattr(t, a) for a in _TENSOR_ATTRS]) for t in state.tensors.values()}
    before = {n: _fingerprint(t) for n, t in state.tensors.items()}
    scratch = State()
    scratch.tensors, scratch.functions, scratch.counter = dict(state.tensors), state.functions, state.counter
    scratch.warned, scratch.backward_passes, scratch.held_bytes = set(state.warned), state.backward_passes, \
        state.held_bytes
    held, most = None, 0
    res, done, carried, lazy = None, 0, None, None
    control = kwargs.get("control")
    chain = _Chain(cache)
    try:
        # (every run of the loop ignores numpy's floating-point errors: chained replays enter that once)
        with np.errstate(all="ignore"):
            if control is not None:
                control.total = repeat * len(ops)
            for i in range(repeat):
                done += 1
                plan = None
                if control is not None:
                    control.done = i * len(ops)  # (progress, read by the app's progress route)
                if control is not None and i % _CHECK_LOOP == _CHECK_LOOP - 1:
                    control.check()  # (short plans never reach a replay's own check; the cold loop reports)
                if carried is not None:
                    cur = scratch.tensors if lazy is None else lazy
                    plan, buf = _chain_replay(chain, cur, carried, control)
                    if plan is not None:
                        lazy = _chain_state(plan, buf, cur)
                        stop = i == repeat - 1
                        if until is not None and not stop:
                            o = lazy.get(until)
                            ns = {} if o is None else {until: o if o.__class__ is Tensor else _tensor(o[0], o[1])}
                            stop = _until_reached(ns, until)
                        if stop:  # the loop's last iteration: its state and result as a replay gives them
                            preset = {n: o if o.__class__ is Tensor else _tensor(o[0], o[1]) for n, o in cur.items()}
                            scratch.tensors = dict(preset)
                            res = _finish(plan, buf, scratch, preset)
                            scratch.held_bytes = plan.held_bytes
                            lazy = None
                        else:
                            scratch.backward_passes += plan.backward_passes
                            scratch.held_bytes = plan.held_bytes
                if plan is None:
                    if lazy is not None:
                        scratch.tensors = {n: o if o.__class__ is Tensor else _tensor(o[0], o[1])
                                           for n, o in lazy.items()}
                        lazy = None
                    res, plan, _ = _session_step(cache, scratch, ops, kwargs, True, carried, eager=True, strict=True)
                    if not plan:
                        raise _Abort
                carried = plan.next_key
                if limits is not None:
                    if held is None:
                        held = state.held_bytes if state.held_bytes is not None else \
                            graph_stats(state.tensors.values())[1]
                    # the cold loop may hold every iteration's arrays at once (its journal keeps them): plan only
                    # where that cannot pass the bytes limit
                    most = max(most, plan.iter_bytes)
                    if held + repeat * most > limits.max_bytes:
                        raise _Abort
                if lazy is not None:
                    continue
                if res.warnings:
                    raise _Abort
                if until is not None and _until_reached(scratch.tensors, until):
                    break
        changed = [n for n, t in scratch.tensors.items() if before.get(n) != _fingerprint(t)]
        respond = kwargs.get("respond", "changed")
        if limits is not None and limits.max_response_bytes is not None:
            budget = Budget(limits, response_size=kwargs.get("response_size"))
            _count_response(budget, res, scratch.tensors, changed if respond == "changed" else
                            list(scratch.tensors) if respond == "all" else respond)
    except Exception:  # noqa: BLE001 - the cold loop gives the result or the error
        for t, values in saved.values():
            for a, v in zip(_TENSOR_ATTRS, values):
                setattr(t, a, v)
        return None
    finally:
        chain.flush()
    state.tensors, state.counter, state.warned = scratch.tensors, scratch.counter, scratch.warned
    state.backward_passes, state.held_bytes = scratch.backward_passes, scratch.held_bytes
    return ProgramResult(ops=res.ops, changed=changed, autograd=res.autograd, iterations=done)


class _Chain:
    """A repeat loop's use of the plan cache: the entry of the key it met last (an iteration usually carries
    the key of the plan it replayed: looked up once per loop, not per iteration), and the hits of its replays
    (counted into the cache once, when the loop ends)."""

    __slots__ = ("cache", "key", "entry", "hits")

    def __init__(self, cache: PlanCache):
        self.cache, self.key, self.entry, self.hits = cache, None, None, 0

    def get(self, key):
        if key is not self.key or self.entry is None:
            self.key, self.entry = key, self.cache.get(key)
        return self.entry

    def flush(self) -> None:
        if self.hits:
            self.cache.count("hits", self.hits)
            self.hits = 0


def _chain_replay(chain: _Chain, cur: dict, carried: tuple, control):
    """A repeat iteration on the state the previous one left (``cur``: name -> its tensor, or (buffer,
    descriptor) of a tensor not built yet): (plan, buffer) of the chainable plan the carried key finds,
    replayed; (None, None) when the key does not fit the state or finds none. A replay that raises aborts the
    loop to cold (which gives the error)."""
    datas = [o.data if o.__class__ is Tensor else o[0][o[1][0]] for o in cur.values()]
    if tuple([(n, a.shape, a.dtype, a.strides) for n, a in zip(cur, datas)]) != carried[1]:
        return None, None
    entry = chain.get(carried[0])
    if not isinstance(entry, Plan) or not entry.chainable:
        return None, None
    try:
        buf = _replay_quiet(entry, datas, control)  # (_repeat ignores numpy's floating-point errors)
    except Exception:  # noqa: BLE001 - the cold loop gives the error
        chain.cache.count("fallbacks")
        raise _Abort from None
    chain.hits += 1
    return entry, buf


def _chain_state(plan: Plan, buf: list, cur: dict) -> dict:
    """The state a replay leaves, lazily (no tensors built): ``_finish`` without the result, for a chainable
    plan (no gradients to give)."""
    for name, _, accs in plan.preset:
        o = cur[name]
        if o.__class__ is Tensor:
            if o.grad_accumulations != accs:
                o.grad_accumulations = accs
        elif o[1][5] != accs:
            cur[name] = (o[0], (*o[1][:5], accs, o[1][6]))
    return {name: cur[name] if d is None else (buf, d) for name, d in plan.namespace}


class _Abort(Exception):
    pass

