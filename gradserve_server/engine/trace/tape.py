"""The trace layer's one executor: the recorded kernel calls of a run (``kernel.Recorder``) made into steps,
optimised, and run as generated code or by a loop, for whole-list plans (``engine.trace.plan``) and per-op
fragments (``engine.trace.compose``) alike.

* **The step** (the IR): ``(fn, template, where, out, multi, conv, reg, free)``. ``fn`` the kernel (or its
  direct form), ``template`` its positional arguments with ``None`` where ``where``'s ``(position, slot)``
  pairs put a slot's array; ``out`` the slot of its result (``multi`` True: a tuple of slots, one per result;
  ``multi`` 2: an in-place call writing into its first argument, ``out`` the slot naming the target after
  the write); ``conv``: the call may return a numpy scalar (made a 0-d array); ``reg``: the register (a
  buffer of the plan's) its result is written into, -1 none; ``free``: the slots dead after it.
* **Extraction** (``extract``): the Recorder's steps with copies a caller cannot tell from their source left
  out (``copy_renames``) and each step's ``conv``; ``fold`` computes the steps of constants once.
* **The optimiser** (``Tape``): constants folded, repeated calls once (CSE), direct forms, registers (buffer
  reuse) and frees, each checked on the recorded arrays bit for bit. A fragment (``fragment``) gets the
  folding and CSE; its results all escape, so it takes no registers.
* **The code generator**: one line emitter (``_emit``) for two frames: a plan's chunks (``compile_tape``:
  slots in a buffer ``b``, deadline checks every ``CHECK_EVERY`` calls) and a fragment's closure
  (``compile_fragment``: slots as locals, its outputs returned). Every line ends in a comment naming the op
  and the kernel it runs (``# op 3 mul (multiply)``), and every function is registered with ``linecache``
  (``engine.trace.sources``), so tracebacks and profilers show it.
* **The loop interpreter** (``interpreted``, ``run_steps``) for what compiling would cost more than it saves:
  a long tape (checked against the deadline every chunk), a long fragment.
* **Replay** (``replay``): a plan's slots from its inputs, with a register set of the replay's own.
"""

from __future__ import annotations

import functools
import itertools
from bisect import bisect_right

import numpy as np

from .. import kernel as K
from . import sources as S
from .replayed import _same_bits

_PLAN_IDS = itertools.count(1)  # numbers a plan's compiled chunks' file names (``engine.trace.sources``)
CHECK_EVERY = 256      # a replay checks the deadline every this many kernel calls
CHUNK = 2000           # kernel calls per compiled function of a plan
COMPILE_MAX_STEPS = 20_000  # longer tapes are interpreted (compiling them would cost more than it saves)
FRAGMENT_CODEGEN_MAX = 24   # a fragment of more steps or inputs is interpreted, not compiled
#: copies a plan may replace by the array itself when nothing in it writes in place and no array of it
#: outlives the response (a one-shot run of its own): the report's snapshots, a leaf's private .grad copy
COPIES = frozenset({K.snapshot, K.copy})
CONST_MAX_BYTES = 1 << 20     # a larger constant of a plan is made on every replay (its bytes count them)
FRAGMENT_CONST_BYTES = 1 << 16  # a fragment's constants are smaller (a process keeps thousands of fragments)
#: ufuncs whose every element is one correctly rounded operation on the same elements of the inputs: the
#: same bits whatever loop numpy takes, so one may write over an input (``out=`` the input's own buffer)
_EXACT_UFUNCS = frozenset({np.add, np.subtract, np.multiply, np.true_divide, np.negative})
#: ufuncs a register is passed to by keyword (numpy deprecates a third positional argument for these; a keyword
#: costs every other call ~0.2 us)
_OUT_BY_KEYWORD = frozenset({np.maximum, np.minimum})
_ndarray = np.ndarray
_asarray = np.asarray


class GiveUp(Exception):
    """A trace gives up (a composed run: ``engine.trace.compose``; ``args[0]``: why, ``route.COMPOSE_CODES``)."""


# ----- extraction --------------------------------------------------------------------------------------------
def root(a):
    """The object owning an array's memory: its base, followed (an ndarray's, a memoryview's object, a
    strided view's DummyArray's)."""
    while True:
        c = a.__class__
        b = a.base if c is np.ndarray else a.obj if c is memoryview else getattr(a, "base", None)
        if b is None:
            return a
        a = b


def groups(arrays: dict) -> dict:
    """slot -> its memory group (the smallest slot of the group): the slots whose recorded arrays have one
    owner of their memory, an array and its views. (Every recorded array is alive until the steps are made:
    the owners' identities are distinct.)"""
    first: dict = {}
    group = {}
    for s in sorted(arrays):
        group[s] = first.setdefault(id(root(arrays[s])), s)
    return group


def _step_groups(rec: K.Recorder, steps: list) -> dict:
    """``groups`` of the inputs' and the steps' slots."""
    arrs = rec.keep
    used = {s: arrs[s] for s in rec.inputs}
    for st in steps:
        for s in (st[3] if st[4] is True else (st[3],)):
            used[s] = arrs[s]
    return groups(used)


def copy_renames(rec: K.Recorder) -> dict:
    """slot -> the slot it is a copy of (followed to the first array), for the copies a plan leaves out: those
    whose result has the layout of the array copied (strides, writeable; a copy of a broadcast or of a
    strided view is made)."""
    ren = {}
    arrs = rec.keep
    for fn, _, where, out, multi in rec.steps:
        if fn in COPIES and not multi:
            src = where[0][1]
            a, c = arrs[src], arrs[out]
            if a.strides == c.strides and a.dtype == c.dtype and a.flags.writeable:
                ren[out] = ren.get(src, src)
    return ren


def written_inputs(rec: K.Recorder) -> tuple:
    """The positions (in the replay's inputs) of the inputs whose memory an in-place kernel writes into."""
    roots = {}
    for i, s in enumerate(rec.inputs):
        roots.setdefault(id(root(rec.keep[s])), []).append(i)
    out = set()
    for _, _, where, _, multi in rec.steps:
        if multi == 2:
            out.update(roots.get(id(root(rec.keep[where[0][1]])), ()))
    return tuple(sorted(out))


def extract(rec: K.Recorder, ren: dict | None = None) -> list:
    """The recorded steps as (fn, template, where, out, multi, conv): the copies in ``ren`` (slot -> the slot
    copied) left out, their readers reading the array copied. ``conv``: a kernel returns a numpy scalar only
    for a 0-d result (an array of more dimensions is an array)."""
    arrs = rec.keep
    converted = rec.converted
    steps = []
    for i, (fn, tmpl, where, out, multi) in enumerate(rec.steps):
        if ren:
            if out in ren and not multi:
                continue
            where = tuple([(p, ren.get(s, s)) for p, s in where])
        steps.append((fn, tmpl, where, out, multi, i in converted or (multi is False and arrs[out].ndim == 0)))
    return steps


def fold(steps: list, arrs: list, may, max_bytes: int) -> tuple[list, dict]:
    """Constants: a step without inputs from the run (a literal, a seed of ones) or only constants among them,
    whose outputs ``may(outs)`` allows (they never reach the caller, nothing writes into them), is run here,
    once; its results (read-only; at most ``max_bytes`` of memory of their own) become static arguments of
    the steps reading them. (steps left, slot -> constant)."""
    consts: dict = {}
    own: set = set()  # ids of the constants owning their memory (a view of one costs nothing more)
    out_steps = []
    for st in steps:
        fn, tmpl, where, out, multi, conv = st
        if multi != 2 and all(s in consts for _, s in where):
            outs = out if multi is True else (out,)
            vals = None
            if may(outs):
                args = list(tmpl)
                for p, s in where:
                    args[p] = consts[s]
                try:
                    r = fn(*args)
                    vals = tuple(r) if multi is True else (r if r.__class__ is np.ndarray else np.asarray(r),)
                    # an array of its own, the plan's alone (a kernel might hand out one it keeps)
                    vals = tuple([np.array(v, order="K") if v.__class__ is np.ndarray and v.base is None
                                  else v for v in vals])
                except Exception:  # noqa: BLE001 - not a constant then: the step stays
                    vals = None
            if vals is not None and len(vals) == len(outs) and \
                    sum(v.nbytes for v in vals if v.base is None or id(root(v)) not in own) <= max_bytes and \
                    all(_same_bits(v, arrs[o]) for v, o in zip(vals, outs)):
                for v, o in zip(vals, outs):
                    v.flags.writeable = False  # (a kernel writing into it fails: the run falls back)
                    consts[o] = v
                    if v.base is None:
                        own.add(id(v))
                continue
        if any(s in consts for _, s in where):
            tmpl = list(tmpl)
            for p, s in where:
                if s in consts:
                    tmpl[p] = consts[s]
            tmpl = tuple(tmpl)
            where = tuple([(p, s) for p, s in where if s not in consts])
        out_steps.append((fn, tmpl, where, out, multi, conv))
    return out_steps, consts


def static_key(v):
    """A static argument as a key: equal only for arguments a kernel cannot tell apart (the type and every
    bit: 0.0 and -0.0 differ, NaNs by payload; arrays, the plan's constants, by identity)."""
    c = v.__class__
    if v is None or c is bool or c is int or c is str:
        return c, v
    if c is float:
        return c, v.hex() if v == v else repr(np.float64(v).tobytes())
    if isinstance(v, np.generic):
        return c, v.tobytes()
    if c is tuple:
        return c, tuple([static_key(x) for x in v])
    if c is slice:
        return c, static_key(v.start), static_key(v.stop), static_key(v.step)
    if c is np.ndarray:
        return c, id(v)
    return c, v  # dtypes, types, functions, Ellipsis (hashable; equal when the same)


def cse_key(fn, tmpl, where):
    slots = dict(where)
    try:
        key = (fn, tuple([("slot", slots[i]) if i in slots else static_key(v) for i, v in enumerate(tmpl)]))
        hash(key)
    except TypeError:
        return None
    return key


def origins(rec: K.Recorder):
    """Which op a recorded slot comes from, as a generated line's comment says it (``op 3 mul``): the op whose
    start (``Recorder.marks``: the slot count when it began) is the last at or before the slot."""
    marks = rec.marks
    starts = [m[0] for m in marks]

    def origin(slot: int) -> str:
        i = bisect_right(starts, slot) - 1
        return f"op {marks[i][1]} {marks[i][2]!s:.40}" if i >= 0 else "input"
    return origin


def label(name) -> str:
    """A name for a generated line's comment (printable, short)."""
    s = str(name)
    if s.isascii() and s.replace("_", "a").replace(".", "a").isalnum():  # (a kernel's or an op's name: as it is)
        return s[:40]
    return "".join(c if c.isalnum() or c in "_." else "?" for c in s)[:40]


# ----- the optimiser ---------------------------------------------------------------------------------------
def cse(steps: list, arrs: list, group: dict, keep, written) -> tuple[list, dict]:
    """Steps that repeat an earlier step (the same kernel on the same slots and static arguments) read its
    result instead: a kernel's result is a function of its arguments, so the two are the same bits, when
    neither is shown to the caller and nothing writes in place into either or into what they read. The
    memory group of the repeat joins the earlier result's (its views now view that)."""
    seen: dict = {}
    ren: dict = {}
    parent: dict = {}
    shown = {group[k] for k in keep if k in group}

    def find(g):
        while g in parent:
            g = parent[g]
        return g
    out = []
    for fn, tmpl, where, o, multi, conv in steps:
        if ren:
            where = tuple([(p, ren.get(s, s)) for p, s in where])
        if multi is False and o not in keep and not (written and (group[o] in written or any(
                group[s] in written for _, s in where))):
            key = cse_key(fn, tmpl, where)
            first = seen.get(key) if key is not None else None
            if first is not None:
                a, b = find(group[o]), find(group[first])
                # an array of its own, shown (or a view of it shown): its memory stays its own
                if arrs[o].base is not None or (a not in shown and b not in shown):
                    ren[o] = first
                    if a != b:
                        parent[max(a, b)] = min(a, b)
                        if a in shown or b in shown:
                            shown.add(min(a, b))
                    continue
            if key is not None:
                seen[key] = o
        out.append((fn, tmpl, where, o, multi, conv))
    if parent:
        group = {s: find(g) for s, g in group.items()}
    return out, group


def frees(steps: list, keep) -> list:
    """Each step with the slots dead after it (not shown to the caller, not in a register)."""
    last: dict = {}
    regs = set()
    for i, (_, _, where, out, multi, _, reg) in enumerate(steps):
        for _, s in where:
            last[s] = i
        for s in (out if multi is True else (out,)):
            last.setdefault(s, i)
        if reg >= 0:
            regs.add(out)
    dead = [[] for _ in steps]
    for s, i in last.items():
        if s not in keep and s not in regs:
            dead[i].append(s)
    return [(*st, tuple(dead[i])) for i, st in enumerate(steps)]


class Tape:
    """The recorded steps made into the steps a replay runs, each one's result the recorded one bit for bit:

    * copies the plan leaves out (``ren``) are not run: their slot reads the array copied;
    * **constants**: a step without inputs from the run (a literal, a seed of ones) or only constants among
      them is run here, once, when its result never reaches the caller and nothing writes into it; its
      result (read-only) is a static argument of the steps reading it;
    * **common steps**: a step that repeats an earlier one (same kernel, slots and static arguments) reads its
      result (``cse``);
    * **direct calls**: a kernel with a direct form (``kernel.direct_form``: its ufunc, the array method a
      numpy function calls) is called as that;
    * **registers**: an intermediate made by a ufunc-like call (``kernel.takes_out``) that never reaches the
      caller, C-contiguous and owning its memory, is written into a buffer of the plan (``out=``), a buffer
      another such intermediate freed before (liveness over the intermediate and its views), or, for an
      exact elementwise ufunc, the buffer of an input that dies with the step. A replay takes a set of
      buffers of its own (``replay``): concurrent replays never share one.

    Memory groups (an array and its views, by the owner of their memory) decide what may be folded, shared
    or reused: nothing in a group the caller sees, that holds an input, or that is written in place. Each
    direct form and register is checked on the recorded arrays (the same bits, dtype, shape and strides as
    the kernel gave) before it is used. ``steps``: (fn, template, where, out, multi, conv, reg, free);
    ``conv``: the call may return a numpy scalar (made an array); ``reg``: the register the result is
    written into (-1: none)."""

    def __init__(self, rec: K.Recorder, keep: set, ren: dict):
        arrs = rec.keep
        steps = extract(rec, ren)
        group = _step_groups(rec, steps)
        written = set()
        for _, _, where, out, multi, _ in steps:
            if multi == 2:  # (in place: the target and the slot naming it after the write)
                written.add(group[where[0][1]])
                written.add(group[out])
        self.written = written
        # groups that are not the plan's to fold or reuse: shown to the caller, inputs, written in place
        bad = {group[s] for s in keep if s in group} | {group[s] for s in rec.inputs} | written
        steps, _ = fold(steps, arrs, lambda outs: all(group[o] not in bad for o in outs), CONST_MAX_BYTES)
        steps, group = cse(steps, arrs, group, keep, written)
        bad = {group[g] for g in bad}
        self.regs: list = []
        self.reg_bytes = 0
        self._checked: dict = {}
        steps = self._direct(steps, arrs, group, bad, keep)
        self.steps = frees(steps, keep)

    def _direct(self, steps, arrs, group, bad, keep) -> list:
        # last use of each slot, and of each group (an array is needed while any view of it is)
        last: dict = {}
        for i, (_, _, where, out, multi, _) in enumerate(steps):
            for _, s in where:
                last[s] = i
            for s in (out if multi is True else (out,)):
                last.setdefault(s, i)
        gend: dict = {}
        for s, i in last.items():
            g = group.get(s, s)
            if gend.get(g, -1) < i:
                gend[g] = i
        written = self.written
        forms: dict = {}
        slot_reg: dict = {}
        free_regs: dict = {}
        release: dict = {}
        out_steps = []
        for i, st in enumerate(steps):
            fn, tmpl, where, out, multi, conv = st
            reg = -1
            has = forms.get(fn)
            if has is None:
                has = forms[fn] = fn.__class__ is np.ufunc or getattr(fn, "direct", None) is not None or \
                    fn in K._NUMPY_FORMS
            if has and multi is False and not (written and any(group[s] in written for _, s in where)):
                st = self._form(fn, tmpl, where, arrs, arrs[out], group[out] == out and out not in bad)
                if st is not None:
                    fn, tmpl, where, reg_ok = st
                    if reg_ok:
                        a = arrs[out]
                        key = (a.shape, a.dtype.str)
                        spare = free_regs.get(key)
                        # an exact elementwise ufunc may write over an input register that dies here
                        dying = [(key, slot_reg[s]) for _, s in where if s in slot_reg and gend[group[s]] == i
                                 and (key, slot_reg[s]) in release.get(i, ())] if fn in _EXACT_UFUNCS else ()
                        if dying:
                            release[i].remove(dying[0])
                            reg = dying[0][1]
                        elif spare:
                            reg = spare.pop()
                        else:
                            reg = len(self.regs)
                            self.regs.append((a.shape, a.dtype))
                            self.reg_bytes += a.nbytes
                        release.setdefault(gend[out], []).append((key, reg))
                        slot_reg[out] = reg
                        conv = False
            out_steps.append((fn, tmpl, where, out, multi, conv, reg))
            for key, r in release.pop(i, ()):
                free_regs.setdefault(key, []).append(r)
        return out_steps

    def _form(self, fn, tmpl, where, arrs, a, may_reg: bool):
        """(callable, template, where, register) of the step's direct form, checked on the recorded arrays
        (``a``: the recorded result), or None. ``register``: the result goes into a register (``may_reg``: it
        may, as far as its lifetime goes). A direct form gives the kernel's bits for every input of the same
        shapes, dtypes and layouts: it is checked once per such signature."""
        args = list(tmpl)
        for p, s in where:
            args[p] = arrs[s]
        try:
            form = K.direct_form(fn, tuple(args))
        except Exception:  # noqa: BLE001 - no direct form for these arguments
            return None
        if form is None:
            return None
        call, cargs = form
        slot_of = {id(arrs[s]): s for _, s in where}
        if len(slot_of) != len({s for _, s in where}):
            return None  # (one array in two slots)
        ntmpl, nwhere, sig = [], [], [fn, call, a.dtype.str, a.shape, a.strides]
        for p, x in enumerate(cargs):
            if x.__class__ is np.ndarray and id(x) in slot_of:
                nwhere.append((p, slot_of[id(x)]))
                ntmpl.append(None)
            elif (x.__class__ is np.ndarray and not x.flags.writeable and any(x is v for v in tmpl)) \
                    or K._static_ok(x):
                ntmpl.append(x)  # a static argument, or a constant of the plan
            else:
                return None
            sig.append((x.dtype.str, x.shape, x.strides) if x.__class__ is np.ndarray else static_key(x))
        may_reg = may_reg and a.base is None and a.flags.c_contiguous and a.size > 0 and K.takes_out(call)
        sig.append(may_reg)
        try:
            sig = tuple(sig)
            verdict = self._checked.get(sig)
        except TypeError:  # (an unhashable static argument: checked here, not remembered)
            sig, verdict = None, None
        if verdict is None:
            verdict = self._check(call, cargs, a, may_reg)
            if sig is not None:
                self._checked[sig] = verdict
        if verdict is False:
            return None
        return call, tuple(ntmpl), tuple(nwhere), verdict == "reg"

    @staticmethod
    def _check(call, cargs, a, may_reg):
        """"reg" when ``call`` gives ``a`` writing into a buffer, True when it gives it, False when neither."""
        try:
            if may_reg:
                o = np.empty(a.shape, a.dtype)
                r = call(*cargs, out=o) if call in _OUT_BY_KEYWORD else call(*cargs, o)
                if r is o and _same_bits(o, a):
                    return "reg"
            r = call(*cargs)  # (a form that only writes into a buffer raises here)
        except Exception:  # noqa: BLE001 - not usable so
            return False
        if r.__class__ is not np.ndarray and a.ndim == 0:
            r = np.asarray(r)
        return _same_bits(r, a)


def fragment(rec: K.Recorder, escaping: list, saved=()):
    """The recorded steps of one op (or one VJP) as a fragment runs them, its slots the recorder's (its inputs
    first), optimised as far as is safe for code that threads share and whose results all escape: constants
    folded where the constant is not, nor shares memory with, an array the fragment hands out (``escaping``),
    and repeated calls made once (``cse``; ``saved``: arrays its nodes save, returned too). No registers (a
    fragment's intermediates die with its call; its outputs escape) and no direct forms (each costs a check
    when the fragment is made, and most fragments are made by a run that meets them only a few times).
    (steps, bytes and largest size of the arrays the remaining steps make, slot -> constant), or None: a step
    a fragment cannot take (in place, an array made outside a kernel)."""
    for _, _, where, _, multi in rec.steps:
        if multi == 2:
            return None
        for _, s in where:  # (a loop, not any() over a generator: a step reads one or two slots)
            if s < 0:
                return None
    arrs = rec.keep
    if len(rec.steps) == 1 and rec.steps[0][2]:  # (one call reading an input: nothing to fold, nothing repeated)
        fn, tmpl, where, out, multi = rec.steps[0]
        steps, consts = [(fn, tmpl, where, out, multi, 0 in rec.converted or (
            multi is False and arrs[out].ndim == 0))], {}
    else:
        steps, consts = optimised(rec, escaping, saved)
    nbytes = maxsize = 0
    for st in steps:
        for s in (st[3] if st[4] is True else (st[3],)):
            a = arrs[s]
            if a.__class__ is _ndarray:
                nbytes += a.nbytes
                if a.size > maxsize:
                    maxsize = a.size
    return [(*st, -1, ()) for st in steps], nbytes, maxsize, consts


def optimised(rec: K.Recorder, escaping: list, saved=()) -> tuple:
    """``fragment``'s steps, constants folded and repeated calls made once: (steps, slot -> constant)."""
    arrs = rec.keep
    roots = {id(root(arrs[s])) for s in escaping}
    steps, consts = fold(extract(rec), arrs, lambda outs: all(
        o not in escaping and id(root(arrs[o])) not in roots for o in outs), FRAGMENT_CONST_BYTES)
    if len(steps) > 1:
        steps, _ = cse(steps, arrs, _step_groups(rec, steps), {*escaping, *saved}, ())
    return steps, consts


# ----- code generation ---------------------------------------------------------------------------------------
def _emit(step, slot, kernel, const, why: str) -> list:
    """The line(s) of one step: ``slot(s)``, ``kernel(fn)`` and ``const(v)`` spell a slot, a kernel and a static
    argument in the frame's terms; the call's line ends in ``why`` (the op's comment)."""
    fn, template, where, out, multi, conv, reg, free = step
    slots = dict(where)
    k = kernel(fn)
    args = [slot(slots[i]) if i in slots else const(v) for i, v in enumerate(template)]
    if reg >= 0:
        args.append(f"out=R[{reg}]" if fn in _OUT_BY_KEYWORD else f"R[{reg}]")
    call = f"{k}({', '.join(args)})"
    if multi is True:
        lines = [f"{', '.join(slot(o) for o in out)}, = {call}{why}"]
    elif multi:  # in place: the target is the first argument
        lines = [f"{call}; {slot(out)} = {slot(slots[0])}{why}"]
    elif conv:
        lines = [f"x = {call}; {slot(out)} = x if x.__class__ is N else A(x){why}"]
    else:
        lines = [f"{slot(out)} = {call}{why}"]
    if free:
        lines.append(f"{' = '.join(slot(f) for f in free)} = None")
    return lines


def _why(origin, step) -> str:
    fn, out, multi = step[0], step[3], step[4]
    return f"  # {origin(out[0] if multi is True else out)} ({label(getattr(fn, '__name__', '?'))})"


def compile_tape(steps: list, origin=None) -> tuple:
    """A plan's steps as Python functions of straight-line code, one per ``CHUNK`` kernel calls: each step one
    line (``b[5] = k[0](b[1], c[2])``: slots, kernels, constants and registers by index), so a replay pays one
    call per kernel and nothing to interpret; the deadline is read every ``CHECK_EVERY`` calls. Each chunk is
    registered with ``linecache`` under a name of its own (``engine.trace.sources``), each call's line ending in a
    comment naming the op (``origin``: by its output slot) and the kernel it runs."""
    tag = next(_PLAN_IDS)
    kernels: list = []
    kidx: dict = {}
    consts: list = []
    chunks = []

    def kernel(fn) -> str:
        ki = kidx.get(id(fn))
        if ki is None:
            ki = kidx[id(fn)] = len(kernels)
            kernels.append(fn)
        return f"k[{ki}]"

    def const(v) -> str:
        consts.append(v)
        return f"c[{len(consts) - 1}]"

    def slot(s) -> str:
        return f"b[{s}]"
    for lo in range(0, len(steps), CHUNK):
        lines = ["def run(b, k, c, chk, N, A, R):"]
        for j, st in enumerate(steps[lo:lo + CHUNK]):
            lines += [" " + ln for ln in _emit(st, slot, kernel, const, _why(origin, st) if origin else "")]
            if j % CHECK_EVERY == CHECK_EVERY - 1:
                lines.append(" if chk is not None: chk()")
        chunks.append(S.compile_function("\n".join(lines) + "\n", f"plan {tag:x} chunk {lo // CHUNK}",
                                         numbered=False))
    return tuple(chunks), kernels, consts


def compile_fragment(steps: list, m: int, ret: list, name: str = "?", maker=None):
    """A fragment's steps as one Python function of its ``m`` input arrays (slots 0..m-1) returning the arrays
    of slots ``ret`` (-1: None): straight-line code over locals, kernels and constants bound in its closure, each
    call's line naming the op (``name``, made a ``label`` here) and the kernel it runs. A long fragment is
    interpreted instead. The source depends only on the steps' structure (slots, arity, op and kernel names;
    the kernels and constants are the closure's values): ``maker(src)`` (``cache.PlanCache.maker``: a cache
    partition's memo, so that a form met again in that partition is not compiled again) gives its compiled
    maker; None: ``compile_maker``."""
    if len(steps) > FRAGMENT_CODEGEN_MAX or m > FRAGMENT_CODEGEN_MAX:
        return fragment_interpreter(steps, m, ret)
    names: list = []
    values: list = []

    def bind(v) -> str:
        names.append(f"k{len(names)}")
        values.append(v)
        return names[-1]

    def slot(s) -> str:
        return f"s{s}"

    name = label(name)

    def origin(_):
        return f"op {name}"
    body = []
    for st in steps:
        body += ["  " + ln for ln in _emit(st, slot, bind, bind, _why(origin, st))]
    body.append("  return (" + "".join("None, " if s < 0 else f"s{s}, " for s in ret) + ")")
    src = "\n".join([f"def make({', '.join(['N', 'A', *names])}):",
                     f" def f({', '.join(f's{i}' for i in range(m))}):", *body, " return f"])
    return (maker or compile_maker)(src)(_ndarray, _asarray, *values)


def compile_maker(src: str):
    """``compile_fragment``'s source compiled: ``make(N, A, *closure values) -> f`` (registered with
    ``linecache`` until ``sources.MAX_ENTRIES`` newer ones push it out: fragments made by it may outlive it)."""
    return S.compile_function(src, "fragment", "make", tie=False)


def shared_maker(src: str):
    """``compile_maker``'s maker of ``src`` from a process-wide memo by source text (``_MAKERS``): compiling is a
    pure function of the text, so a cache partition meeting a fragment form that any partition compiled before
    does not compile it again (a new key's first run, or a cold run on a fresh cache, paid 25-60 us per distinct
    source: 2% of bench/engine.py's cold LSTM). Each partition still keeps and counts the maker it uses as its own
    entry (``cache.PlanCache.maker``). Its source is registered again if newer entries had pushed it out of
    ``linecache``, so a traceback through a remembered maker reads its lines."""
    make = _MAKERS(src)
    S.register(make.__code__.co_filename, src)
    return make


_MAKERS = functools.lru_cache(maxsize=1024)(compile_maker)


# ----- the loop interpreter ----------------------------------------------------------------------------------
def interpreted(steps: list) -> list:
    """The steps for ``run_steps``, in chunks of ``CHECK_EVERY`` steps: (kind, fn, x, y, z, out, conv, free),
    the common call shapes (one or two slots, constants after them, a register last) as kinds of their own so
    that a step costs little more than its call."""
    out = []
    for fn, tmpl, where, o, multi, conv, reg, free in steps:
        n, slots = len(tmpl), dict(where)
        if multi is not False:
            st = (9 if multi is True else 10, fn, tmpl, where, reg, o, conv, free)
        elif reg >= 0 and fn in _OUT_BY_KEYWORD:  # (the generic kind: its register by keyword)
            st = (8, fn, tmpl, where, reg, o, conv, free)
        elif n == 1 and 0 in slots:
            st = (0 if reg < 0 else 4, fn, slots[0], None, reg, o, conv, free)
        elif n == 2 and 0 in slots and 1 in slots:
            st = (1 if reg < 0 else 5, fn, slots[0], slots[1], reg, o, conv, free)
        elif n == 2 and 0 in slots:
            st = (2 if reg < 0 else 6, fn, slots[0], tmpl[1], reg, o, conv, free)
        elif n == 2 and 1 in slots:
            st = (3 if reg < 0 else 7, fn, slots[1], tmpl[0], reg, o, conv, free)
        elif reg < 0 and n > 2 and list(slots) == [0]:
            st = (11, fn, slots[0], tmpl[1:], reg, o, conv, free)
        elif reg < 0 and n > 2 and sorted(slots) == [0, 1]:
            st = (12, fn, slots[0], slots[1], tmpl[2:], o, conv, free)
        else:
            st = (8, fn, tmpl, where, reg, o, conv, free)
        out.append(st)
    return [out[i:i + CHECK_EVERY] for i in range(0, len(out), CHECK_EVERY)]
def run_steps(chunks: list, b: list, R, chk) -> None:
    N, A = np.ndarray, np.asarray
    for chunk in chunks:
        for kind, fn, x, y, z, out, conv, free in chunk:
            if kind == 1:
                r = fn(b[x], b[y])
            elif kind == 5:
                r = fn(b[x], b[y], R[z])
            elif kind == 2:
                r = fn(b[x], y)
            elif kind == 11:
                r = fn(b[x], *y)
            elif kind == 0:
                r = fn(b[x])
            elif kind == 12:
                r = fn(b[x], b[y], *z)
            elif kind == 6:
                r = fn(b[x], y, R[z])
            elif kind == 4:
                r = fn(b[x], R[z])
            elif kind == 3:
                r = fn(y, b[x])
            elif kind == 7:
                r = fn(y, b[x], R[z])
            else:
                args = list(x)
                for i, s in y:
                    args[i] = b[s]
                if kind == 9:
                    for s, o in zip(out, fn(*args)):
                        b[s] = o
                    if free:
                        for s in free:
                            b[s] = None
                    continue
                if kind == 10:  # in place: the target is the first argument
                    fn(*args)
                    b[out] = args[0]
                    if free:
                        for s in free:
                            b[s] = None
                    continue
                r = fn(*args) if z < 0 else fn(*args, out=R[z]) if fn in _OUT_BY_KEYWORD else fn(*args, R[z])
            if conv and r.__class__ is not N:
                r = A(r)
            b[out] = r
            if free:
                for s in free:
                    b[s] = None
        if chk is not None:
            chk()


def fragment_interpreter(steps: list, m: int, ret: list):
    """``compile_fragment``'s function for a long fragment (compiling it would cost more than it saves): the
    loop interpreter over a buffer of the fragment's slots (an object whose slots hold its steps, constants
    included, for ``cache.footprint`` to count)."""
    ret = tuple(ret)
    n = 1 + max([m - 1, *ret, *[s for st in steps for s in (st[3] if st[4] is True else (st[3],))]])
    return _Interpreted(interpreted(steps), n, m, ret)


class _Interpreted:
    __slots__ = ("chunks", "n", "m", "ret")

    def __init__(self, chunks: list, n: int, m: int, ret: tuple):
        self.chunks, self.n, self.m, self.ret = chunks, n, m, ret

    def __call__(self, *ins):
        b = [None] * self.n
        b[:self.m] = ins
        run_steps(self.chunks, b, None, None)
        return tuple([None if s < 0 else b[s] for s in self.ret])


# ----- replay ------------------------------------------------------------------------------------------------
def replay(plan, inputs: list, control) -> list:
    """A plan's slots (``replayed.Plan``: its compiled ``code``, else its interpreted ``steps``) from its
    inputs, numpy's floating-point errors ignored (as the cold run ignores them)."""
    with np.errstate(all="ignore"):
        return replay_quiet(plan, inputs, control)


def replay_quiet(plan, inputs: list, control) -> list:
    """``replay`` where numpy's floating-point errors are already ignored (as the cold run ignores them)."""
    buf = [None] * plan.n_slots
    for s, a in zip(plan.input_slots, inputs):
        buf[s] = a
    chk = control.check if control is not None else None
    R = None
    if plan.regs:  # a register set of this replay's own (list.pop/append are atomic)
        try:
            R = plan.pool.pop()
        except IndexError:
            R = [np.empty(shape, dtype) for shape, dtype in plan.regs]
    if plan.code:
        k, c = plan.kernels, plan.consts
        for run in plan.code:
            run(buf, k, c, chk, np.ndarray, np.asarray, R)
    else:
        run_steps(plan.steps, buf, R, chk)
    if R is not None and len(plan.pool) < plan.pool_cap:
        plan.pool.append(R)  # (nothing the result holds is in it: registers are never shown)
    return buf

