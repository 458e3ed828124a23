"""Kernels: the pure numpy functions plannable ops compute with, and the recorder that turns a cold run into a
plan's tape (see ``engine.trace.plan``).

An op declared ``plannable`` in the op table computes every array it makes through ``kcall(kernel, *args)``:
``kernel`` is a module-level function of numpy arrays and static parameters (numbers, shapes, dtypes) that
returns an array (or a tuple of arrays) and raises for any value-dependent error (an index out of range), so
that the same call can run again on other values. The cold path calls the kernel itself: one place, so a
replayed plan computes bit for bit what the cold run does.

While a plan is being recorded (``recording()``), ``kcall`` notes each call: the kernel, which earlier
arrays (slots) it read and its static arguments. Provenance: an array reaching a kernel or the result must
be a program input, a kernel's output or a shape-only constant made by a kernel; anything else makes the
program unplannable (``Recorder.bad``), so a value computed outside a kernel is never frozen into a plan.
"""

from __future__ import annotations

import contextvars
import functools
import types

import ml_dtypes
import numpy as np

_recorder: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar("gradserve_plan_recorder",
                                                                             default=None)
_get = _recorder.get
_ndarray = np.ndarray
_F32 = np.dtype(np.float32)
_F16, _BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
_HALF = frozenset((_F16, _BF16))
#: static arguments: literals, dtypes and the kernels' own helpers (functions are code, never values)
_STATIC = (int, float, bool, str, type(None), np.generic, np.dtype, slice, type, np.ufunc, types.FunctionType,
           types.BuiltinFunctionType, type(Ellipsis))


def ones(shape: tuple, dtype) -> np.ndarray:
    """A shape-only constant (a seed gradient)."""
    return np.ones(shape, dtype)


def zeros(shape: tuple, dtype) -> np.ndarray:
    return np.zeros(shape, dtype)


def copy(a: np.ndarray) -> np.ndarray:
    return a.copy()


def takes_literals(fn):
    """Decorator: ``fn``'s number arguments may be given as 0-d float64 arrays holding the Python float (a plan's
    lifted literal, ``Lit``): it reads each through ``number`` before anything else, so it computes what it
    computes with the float itself, bit for bit, errors included."""
    fn.literals = True
    return fn


def number(v):
    """A kernel's number argument as the Python number it stands for (a lifted literal's array: its float)."""
    return float(v) if v.__class__ is np.ndarray else v


@takes_literals
def literal(value, dtype) -> np.ndarray:
    """A program literal (a Python number) as a 0-d array (a wrapped number)."""
    value = number(value)
    return np.array(value) if dtype is None else np.array(value, dtype=dtype)


@takes_literals
def number_as(value, npdt) -> np.ndarray:
    """A Python float as a 0-d array of a floating dtype (``ops.common.number_as`` of a lifted literal)."""
    return np.asarray(npdt.type(number(value)))


def snapshot(a: np.ndarray) -> np.ndarray:
    return np.array(a, copy=True)


def view(a: np.ndarray) -> np.ndarray:
    """A new view of the whole array (a dual tensor's primal)."""
    return a.view()


def broadcast_to(a: np.ndarray, shape: tuple) -> np.ndarray:
    return np.broadcast_to(a, shape)


def astype(a: np.ndarray, dtype) -> np.ndarray:
    """``a`` converted to ``dtype``; to float16/bfloat16 through float32, as c10 converts (a double rounding
    numpy's direct cast does not do: float64 1 + 2**-11 + 2**-40 is float16 1.0 in torch)."""
    if dtype in _HALF and a.dtype != _F32 and a.dtype not in _HALF:
        return a.astype(_F32).astype(dtype)
    return a.astype(dtype)


def zeros_like(a: np.ndarray) -> np.ndarray:
    return np.zeros_like(a)


def assign(target: np.ndarray, a: np.ndarray) -> None:
    """``target[...] = a``, cast to target's dtype: an in-place op's write (``engine.ops.inplace``)."""
    np.copyto(target, a, casting="unsafe")


def add_into(target: np.ndarray, a: np.ndarray) -> None:
    """``target += a`` (a gradient accumulated in place, cast to target's dtype)."""
    np.add(target, a, out=target, casting="unsafe")


#: kernels whose errors depend on shapes and strides alone (registered by their modules)
STRUCTURAL: set = set()

#: kernels that only move, select or reinterpret elements (clone, slices, joins, views; registered by their
#: modules): on float16/bfloat16 arrays they run as they are, not in float32, so the bits come through as torch's
#: copies keep them (a bfloat16 NaN's payload: ml_dtypes' rounding from float32 makes it the canonical NaN)
MOVES: set = set()


# ----- direct forms: what a plan may call instead of a kernel ------------------------------------------------
# A kernel may carry ``direct``: a function of the kernel's arguments (as recorded: arrays and static values)
# returning ``(callable, args)``, a call that gives the kernel's result bit for bit (values, dtype, shape and
# strides) for every input of those shapes, dtypes and layouts, whatever their values; or None where it has
# none. A plan then calls it in the kernel's place (one Python frame less per step). When ``callable`` is a
# ufunc (or carries ``takes_out``), it also accepts a trailing output array and returns it: a plan whose
# intermediate never escapes the run writes it into a buffer it reuses. A plan checks every direct form it
# uses on the recorded arrays before it trusts it (the same bits with and without the output buffer).

def direct(form):
    """Decorator: the kernel's direct form (``form(*args) -> (callable, args) | None``)."""
    def mark(fn):
        fn.direct = form
        return fn
    return mark


def ufunc(uf):
    """Decorator: the kernel is ``uf`` called on its arguments (``return a + b`` is ``np.add(a, b)``)."""
    return direct(lambda *args: (uf, args))


#: numpy functions used as kernels, as the array methods they call (without numpy's Python layer)
_NUMPY_FORMS = {
    np.transpose: lambda a, *axes: (np.ndarray.transpose, (a, *axes)),
    np.swapaxes: lambda a, d0, d1: (np.ndarray.swapaxes, (a, d0, d1)),
    np.reshape: lambda a, *rest: (np.ndarray.reshape, (a, *rest)) if len(rest) == 1 else None,
}


def direct_form(fn, args: tuple):
    """``(callable, args)`` a plan may call in place of ``fn(*args)``, or None."""
    if fn.__class__ is np.ufunc:
        return (fn, args) if fn.nout == 1 and len(args) == fn.nin else None
    form = getattr(fn, "direct", None) or _NUMPY_FORMS.get(fn)
    return None if form is None else form(*args)


def takes_out(fn) -> bool:
    """Whether ``fn(*args, out)`` writes its result into ``out`` (C-contiguous, of the result's dtype and
    shape) and returns it, with the bits of ``fn(*args)``."""
    return (fn.__class__ is np.ufunc and fn.nout == 1) or getattr(fn, "takes_out", False)


# ----- float16 and bfloat16: computed in float32, rounded once ---------------------------------------------
# torch's CPU kernels load float16/bfloat16 values as float32, compute the whole kernel there (its scalars
# and accumulators too) and round the result once; numpy's loops round after every step. ``kcall`` runs a
# kernel whose array arguments are of one of these types on float32 copies (a dtype argument naming that type
# becomes float32) and rounds its float32 results back. Not when a dtype argument names another type (a
# conversion, or an explicit accumulation type: it runs as written), nor when a result is a view of an
# argument (a view kernel runs on the array itself, so that the view shares its base's buffer). An expanded
# argument stays expanded (``_widen``): kernels such as clone read its layout.

def _dtype_arg(a) -> np.dtype | None:
    if a.__class__ is np.dtype or isinstance(a, np.dtype):
        return a
    if isinstance(a, type) and issubclass(a, np.generic):
        return np.dtype(a)
    return None


def _half_of(args) -> np.dtype | None:
    """The reduced-precision dtype of a kernel call to run in float32, or None (the common case: one identity
    test per array argument, numpy's dtype objects being singletons)."""
    found = None
    for a in args:
        if a.__class__ is _ndarray:
            dt = a.dtype
            if dt is _F16 or dt is _BF16:
                if found is not None and dt is not found:
                    return None
                found = dt
    if found is None:
        return None
    for a in args:
        if a.__class__ is not _ndarray:
            dt = _dtype_arg(a)
            if dt is not None and dt != found:
                return None
    return found


def _widen(a: np.ndarray) -> np.ndarray:
    """A float32 copy of ``a`` with its layout where a kernel may read it: an expanded array (zero strides, as
    torch's expand makes them) stays expanded, over a float32 copy of the values it repeats."""
    if 0 in a.strides and any(st == 0 and n > 1 for st, n in zip(a.strides, a.shape)):
        one = tuple(slice(0, 1) if st == 0 and n > 1 else slice(None) for st, n in zip(a.strides, a.shape))
        return np.broadcast_to(a[one].astype(_F32), a.shape)
    return a.astype(_F32)


def _in_f32(fn, args, half: np.dtype):
    wide = tuple(_widen(a) if a.__class__ is _ndarray and a.dtype == half
                 else (_F32 if _dtype_arg(a) == half else a) for a in args)
    out = fn(*wide)
    outs = out if out.__class__ is tuple else (out,)
    arrays = [w for w in wide if w.__class__ is _ndarray]
    if any(o.__class__ is _ndarray and o.base is not None and any(np.may_share_memory(o, w) for w in arrays)
           for o in outs):
        return fn(*args)  # a view kernel
    rounded = tuple(np.asarray(o).astype(half) if np.asarray(o).dtype == _F32 else o for o in outs)
    return rounded if out.__class__ is tuple else rounded[0]


class _InFloat32:
    """A float16/bfloat16 kernel call as a plan's step: ``fn`` run by ``_in_f32`` (on float32 copies, its results
    rounded once), so that a replay computes what the cold run computed, bit for bit."""

    __slots__ = ("fn", "half", "__name__")

    def __init__(self, fn, half: np.dtype):
        self.fn, self.half = fn, half
        self.__name__ = f"{getattr(fn, '__name__', 'kernel')}_in_float32"

    def __call__(self, *args):
        return _in_f32(self.fn, args, self.half)


@functools.lru_cache(maxsize=1024)
def in_float32(fn, half: np.dtype) -> _InFloat32:
    """The step that runs ``fn`` in float32 for ``half`` arrays (one per kernel and type: a plan's common
    subexpressions stay common)."""
    return _InFloat32(fn, half)


def kcall(fn, *args):
    """Run ``fn(*args)`` (a kernel); while recording, note the call on the tape."""
    rec = _get()
    if rec is None:
        for a in args:  # (no float16/bfloat16 array, the common case: decided here, without a call)
            if a.__class__ is _ndarray:
                dt = a.dtype
                if dt is _F16 or dt is _BF16:
                    half = _half_of(args)
                    if half is not None and fn not in MOVES:
                        out = _in_f32(fn, args, half)
                        return out if out.__class__ is _ndarray or out.__class__ is tuple else np.asarray(out)
                    break
        out = fn(*args)
        return out if out.__class__ is _ndarray or out.__class__ is tuple else np.asarray(out)
    return rec.call(fn, args)


def kcall_for(npdt: np.dtype):
    """The kernel call for a caller whose array arguments are all of dtype ``npdt`` (a binary op's
    ``binary_operands``, a unary op's input): ``kcall`` for float16/bfloat16 (run in float32, rounded once), else
    ``kcall_plain``, which skips ``kcall``'s test of each argument (about 150 ns of a 400 ns call)."""
    return kcall if npdt is _F16 or npdt is _BF16 else kcall_plain


def kcall_plain(fn, *args):
    """``kcall`` for arguments among which no float16/bfloat16 array is (``kcall_for``): the same call without
    that test. Recording is unchanged."""
    rec = _get()
    if rec is None:
        out = fn(*args)
        return out if out.__class__ is _ndarray or out.__class__ is tuple else np.asarray(out)
    return rec.call(fn, args)


def kinplace(fn, target: np.ndarray, *args):
    """A kernel that writes into ``target`` (an accumulation): recorded like ``kcall``; the recorder also
    notes that ``target``'s contents changed through a kernel (other in-place writes make a run unplannable)."""
    rec = _get()
    if rec is None:
        fn(target, *args)
        return target
    rec.mutated.add(id(target))
    return rec.call(fn, (target, *args), inplace=True)


def _plain(v: tuple) -> bool:
    """A tuple of ints, slices, None and Ellipsis only (a shape, a basic index: the common tuple arguments):
    static, and holding no lifted literal (``unlit`` would return it as it is)."""
    for x in v:
        c = x.__class__
        if c is not int and c is not slice and x is not None and x is not Ellipsis:
            return False
    return True


def _static_ok(v) -> bool:
    if isinstance(v, _STATIC):
        return True
    if v.__class__ is tuple:
        for x in v:  # (a loop, not all() over a generator: most are a shape's or an index's few items)
            if not (x.__class__ is int or isinstance(x, _STATIC) or _static_ok(x)):
                return False
        return True
    return False


# ----- lifted literals -----------------------------------------------------------------------------------
# A float of a session list is keyed by its type only (``plan._canonical``); while the list's plan is recorded
# the op receives a ``Lit`` in its place. A Lit reads as a float to every Python-level test (isinstance, its
# ``__class__``), and gives its value to any arithmetic, comparison or conversion (``np.float32(v)`` too),
# noting that the value was read (``Recorder.pins``: its value then goes into the plan's key). A kernel
# declared ``takes_literals`` gets the literal's input slot instead (a 0-d float64 array, fed anew on every
# replay). numpy may not take it as an operand (it would compute with a float64 array where a Python float is
# a weak scalar): that raises ``LiteralEscape``, the run is undone, and the list is keyed by all its values.

class LiteralEscape(Exception):
    """A lifted literal reached numpy outside a kernel while a plan was recorded."""


class Lit:
    """A lifted literal (see above): ``value`` (the float), ``index`` (its place among the list's literals),
    ``slot`` (its input slot), ``rec`` (the recorder; None after the recording)."""

    __slots__ = ("value", "index", "slot", "array", "rec")

    def __init__(self, value: float, index: int, rec: Recorder):
        self.value, self.index, self.rec = value, index, rec
        self.array = np.array(value)  # (float64, 0-d: the Python float exactly)
        self.slot = -1

    @property
    def __class__(self):  # noqa: F811 - reads as a float to isinstance and ``v.__class__ is float``
        return float

    def pin(self) -> float:
        """The value, noted as read by the recording (the plan is keyed by it)."""
        rec = self.rec
        if rec is not None:
            rec.pins.add(self.index)
        return self.value

    def __array__(self, dtype=None, copy=None):
        if dtype is not None:  # a conversion to a dtype (``np.float32(v)``): what a float gives
            return np.asarray(self.pin(), dtype)
        rec = self.rec
        if rec is not None:  # an operand of numpy's (a Python float would be a weak scalar there)
            rec.escaped = True
            raise LiteralEscape("a lifted literal reached numpy outside a kernel")
        return np.asarray(self.value)

    def __getattr__(self, name):
        attr = getattr(self.value, name)  # (float's methods and attributes; others: AttributeError, not read)
        self.pin()
        return attr


def _lit_method(name: str):
    def method(self, *args):
        args = [a.pin() if type(a) is Lit else a for a in args]
        return getattr(self.pin(), name)(*args)
    method.__name__ = name
    return method


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "divmod", "radd", "rsub", "rmul",
              "rtruediv", "rfloordiv", "rmod", "rpow", "rdivmod", "eq", "ne", "lt", "le", "gt", "ge", "neg", "pos",
              "abs", "float", "int", "bool", "round", "trunc", "floor", "ceil", "hash", "repr", "str", "format",
              "reduce", "reduce_ex", "getnewargs"):
    setattr(Lit, f"__{_name}__", _lit_method(f"__{_name}__"))
Lit.__copy__ = Lit.__deepcopy__ = lambda self, *memo: self.pin()
Lit.__name__ = Lit.__qualname__ = "float"  # (``type(v).__name__`` in an error message: the cold run's words)


def unlit(v):
    """``v`` with every Lit in it (a tuple's, a list's) replaced by its value, pinned."""
    if type(v) is Lit:
        return v.pin()
    if v.__class__ is tuple or v.__class__ is list:
        for x in v:  # (most are flat, of ints: nothing to replace)
            t = type(x)
            if t is Lit or t is tuple or t is list:
                break
        else:
            return v
        items = [unlit(x) for x in v]
        if any(x is not y for x, y in zip(items, v)):
            return v.__class__(items)
    return v


class Recorder:
    """The tape of one cold run: ``steps`` of (kernel, argument template, slot positions, output slots)."""

    def __init__(self):
        self.slots: dict[int, int] = {}     # id(array) -> slot
        self.keep: list = []                # every array seen (keeps ids unique while recording)
        self.n = 0
        self.inputs: list[int] = []         # the input slots, in the order the inputs were made
        self.writes: set[int] = set()       # ids of arrays written in place (engine.journal.array_)
        self.steps: list = []
        self.mutated: set[int] = set()
        self.reason: str | None = None      # why the run cannot be planned (None: it can), for a person
        self.code: str | None = None        # the same as a reason code of engine.trace.route's (``REASONS``)
        self.converted: set[int] = set()    # steps whose kernel returned a non-array (a numpy scalar)
        self.marks: list = []               # (slot count, op index, op name) as each op began (engine.trace.sources)
        self.pins: set[int] = set()         # the lifted literals whose values the run read (plan._canonical)
        self.escaped = False                # a lifted literal reached numpy outside a kernel (LiteralEscape)

    def bad(self, code: str, reason: str) -> None:
        """The run cannot be planned: ``code`` (``engine.trace.route.REASONS``), ``reason`` (which kernel, which op)."""
        if self.reason is None:
            self.code, self.reason = code, reason

    def _new_slot(self, arr: np.ndarray) -> int:
        s = self.n
        self.n += 1
        self.slots[id(arr)] = s
        self.keep.append(arr)
        return s

    def add_input(self, arr: np.ndarray) -> None:
        """A program input (a preset name, a tensor op's result): the next input slot."""
        if arr.__class__ is not _ndarray:
            self.bad("untraced_array", "an input that is not an array")
            return
        self.inputs.append(self._new_slot(arr))

    def unknown_writes(self) -> bool:
        """Whether an array was written in place outside a kernel."""
        return bool(self.writes - self.mutated)

    def slot_of(self, arr) -> int | None:
        return self.slots.get(id(arr)) if arr.__class__ is _ndarray else None

    def add_literal(self, lit: Lit) -> None:
        """A lifted literal: the next input slot (its 0-d float64 array)."""
        self.add_input(lit.array)
        lit.slot = self.inputs[-1]

    def call(self, fn, args: tuple, inplace: bool = False):
        template = list(args)
        where = []
        lifted = None
        half = False  # (a float16/bfloat16 array among them: ``_half_of`` decides then)
        slots = self.slots
        for i, a in enumerate(args):
            c = a.__class__
            if c is _ndarray:
                s = slots.get(id(a))
                if s is None:
                    self.bad("untraced_array", f"{getattr(fn, '__name__', fn)} read an array made outside a kernel")
                    s = -1
                where.append((i, s))
                template[i] = None
                if not half:
                    dt = a.dtype
                    half = dt is _F16 or dt is _BF16
            elif c is tuple and _plain(a):  # (a shape, an index: nothing lifted in it, static)
                continue
            elif type(a) is Lit or c is tuple:  # (a Lit's __class__ reads float)
                if type(a) is Lit and a.rec is self and getattr(fn, "literals", False):
                    where.append((i, a.slot))  # the literal's input slot: fed anew on every replay
                    template[i] = None
                    v = a.array
                else:
                    v = template[i] = unlit(a)
                    if not _static_ok(v):
                        self.bad("non_static_argument",
                                 f"{getattr(fn, '__name__', fn)} got a non-static argument {type(v).__name__}")
                if v is not a:
                    if lifted is None:
                        lifted = list(args)
                    lifted[i] = v
            elif not _static_ok(a):
                self.bad("non_static_argument",
                         f"{getattr(fn, '__name__', fn)} got a non-static argument {type(a).__name__}")
        if lifted is not None:
            args = tuple(lifted)
        half = None if not half or inplace or fn in MOVES else _half_of(args)
        try:
            if inplace:
                fn(*args)
                out = args[0]
            else:
                out = fn(*args) if half is None else _in_f32(fn, args, half)
                if out.__class__ is not _ndarray and out.__class__ is not tuple:
                    out = np.asarray(out)
                    self.converted.add(len(self.steps))
        except Exception:
            # the op may catch it and go another way, which a replay on other values would not follow; only
            # kernels whose failure depends on shapes alone (STRUCTURAL) may fail in a plannable run
            if fn not in STRUCTURAL:
                self.bad("recording_raised", f"{getattr(fn, '__name__', fn)} raised")
            raise
        step = fn if half is None else in_float32(fn, half)  # (a replay runs the kernel as the cold run did)
        if out.__class__ is tuple:
            outs = []
            for o in out:
                if o.__class__ is not _ndarray:
                    self.bad("untraced_array", f"{getattr(fn, '__name__', fn)} returned a non-array")
                    return out
                outs.append(self._new_slot(o))
            self.steps.append((step, tuple(template), tuple(where), tuple(outs), True))
        else:
            self.steps.append((step, tuple(template), tuple(where), self._new_slot(out), 2 if inplace else False))
        return out


class recording:
    """Context manager: record the kernel calls of the code run inside it into ``self.recorder``."""

    def __init__(self):
        self.recorder = Recorder()
        self._token = None

    def __enter__(self) -> Recorder:
        self._token = _recorder.set(self.recorder)
        return self.recorder

    def __exit__(self, *exc):
        _recorder.reset(self._token)
        return False


#: the recorder of the plan being recorded in this context, or None (the ContextVar's own getter: no Python frame
#: on the eager interpreter's per-op path)
active = _get
