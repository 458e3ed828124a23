"""The trace layer's one keyer: every key a list, an op or a literal is cached under is made here.

A plan (``engine.trace.plan``) and a fragment (``engine.trace.compose``) are one thing at two granularities, a traced op
list: a whole list, or one op of it. Both are looked up in one table (``cache.PlanCache``) under keys this module
makes by one rule: what the run can observe, and nothing else.

* **Literals** (``literal_key``): typed (``1``, ``1.0`` and ``True`` differ), a float by every bit where ``==``
  would not tell (-0.0, infinities, NaN payloads). A list's JSON text writes inf, -inf, NaN and None alike as
  ``null``: ``null_bits`` carries their bits after the text, so a text key tells them apart as a literal key does.
* **A tensor**, as an op's input: its array's shape, dtype, strides and requires_grad; the same tensor met again
  as its input index (aliasing). As a list's input: shape, dtype (its ``str``) and requires_grad, and for a
  session tensor also strides, flags, whether it has a gradient, and which tensors share an object, a version
  counter or a base (``_session_key``).
* **A list** (``_key``): its JSON text with the input ops' data left out (``_dumps``; the bare text is the
  replayed lookup's key, a dict lookup on it, the ``null`` check left to a miss: ``_nulls_later``), the inputs'
  metas (the input ops' arrays are made while it is built: ``_direct_input``), and the caller's part
  (``caller_key``: grad mode, limits, response). A session list adds the session's state (``_session_key``) and
  is keyed under canonical names (``_canonical``: the names a client's counter gives each iteration read as one
  list, its float operands lifted to inputs); ``_pre_key`` is the cheap key a list known unplannable is
  remembered under.
* **An op** (a fragment, ``_key_of``): the op's name, grad mode, the form of its ``out``, then its arguments by
  the op table's kinds (``_form``): tensors as above, literals by ``literal_key``, getitem's indices by
  ``_index``. ``compose._compose`` builds the commonest forms of this key (one tensor; a tensor and a tensor or a
  number) inline, the same tuples. A VJP fragment's key (``_vjp_key``): its gradients' layouts and aliasing.
  ``_literal_form``: a key with its int and float values left out, the form the cache measures fragments by;
  ``_op_sig``: the coarser signature compose's look-ahead compares; ``_code_key``: a fragment's compiled code.
* **Plannability** (``_scan``, ``_plannable_op``): whether the op table declares every op of a list traceable.

Where a list is traced, optimised, executed and cached: ``kernel.Recorder`` records it, ``tape`` folds, optimises,
compiles or interprets its steps, ``replayed`` rebuilds what a replay returns, ``cache.PlanCache`` holds plans and
fragments under these keys, and ``dispatch`` picks the route.
"""

from __future__ import annotations

import struct
import weakref
from itertools import repeat

import numpy as np
import orjson

from .. import dtypes as D
from ..grad_mode import WarningSink
from ..ops.creation import Owned
from ..program import _INDEX, _PLAIN, _SLICE_RE, _TENSOR, _TENSOR_LIST, ProgramResult, State, _op_layout, _Runner
from ..registry import OPS, traceable
from ..tensor import Tensor, as_array
from .tape import GiveUp

# ----- literals --------------------------------------------------------------------------------------------
_F64 = struct.Struct("<d")


def literal_key(v):
    """A literal as a key, typed (1, 1.0 and True differ) and every bit of a float (-0.0, infinities, NaN
    payloads where ``==`` would not tell them: -0.0 equals 0.0, a NaN never equals itself): per-op fragment keys
    (``engine.trace.compose``) and the float values a session plan is pinned on (``engine.trace.plan``). A form no key
    covers (a dict, an Owned array...) raises ``GiveUp``."""
    c = v.__class__
    if c is str or v is None:
        return v
    if c is float:
        return (float, v) if v == v and v != 0.0 else ("f", _F64.pack(v))
    if c is int or c is bool:
        return (c, v)
    if c is list or c is tuple:
        return (c, tuple([literal_key(x) for x in v]))
    raise GiveUp


def null_bits(obj) -> bytes:
    """What an op list's JSON text (orjson's, a whole-list plan key: ``engine.trace.plan``) does not tell: orjson
    writes inf, -inf and every NaN as ``null``, as it writes None. Each ``null`` of the text in order: ``n`` for a
    None, ``f`` and the float's bits (``literal_key``'s) for a non-finite float, ``a`` and the bytes of a float
    array holding one. Appended to the text where it holds a ``null`` (a finite list without None pays only that
    search), it keys those values bit for bit, as ``literal_key`` does."""
    out: list[bytes] = []
    _nulls(obj, out)
    return b"".join(out)


def _nulls(v, out: list) -> None:
    c = v.__class__
    if v is None or c is Owned:  # (``plan._dumps_owned`` writes an Owned as null, as the None it stands for)
        out.append(b"n")
    elif c is dict:
        for x in v.values():
            _nulls(x, out)
    elif c is list or c is tuple:
        for x in v:
            _nulls(x, out)
    elif c is float or isinstance(v, (float, np.floating)):
        if v != v or v in (np.inf, -np.inf):
            out.append(b"f" + _F64.pack(float(v)))
    elif c is np.ndarray:
        if v.dtype.kind in "fV" and v.size and not np.isfinite(v).all():
            out.append(b"a" + np.ascontiguousarray(v).tobytes())


# ----- lists: one-shot and session keys ---------------------------------------------------------------
#: ops whose results are program inputs: their data is not part of the key, they run cold on every request
INPUT_OPS = frozenset({"tensor"})


#: autograd and name actions a plan may contain (structural: no arrays of their own)
PLANNABLE_ACTIONS = frozenset({"backward", "grad", "del", "bind", "retain_grad", "zero_grad", "set_grad"})


def _fresh_leaf(t) -> bool:
    return (isinstance(t, Tensor) and t._grad_fn is None and t._base is None and t._grad is None
            and t._vc[0] == 0 and not t.retains_grad and t._fw_grad is None and t.grad_accumulations == 0
            and t.data.__class__ is np.ndarray)


def _plannable_op(op) -> bool:
    """Whether the op (a program's op object) can be planned: an action or input op a plan holds, or a call
    the op table's declaration says is traceable (``registry.traceable``)."""
    if not isinstance(op, dict):
        return False
    name = op.get("op")
    if name.__class__ is not str:  # (a malformed name, maybe unhashable: the cold run refuses it)
        return False
    if name in PLANNABLE_ACTIONS or name in INPUT_OPS:
        return True
    t = traceable(name)
    return t if t.__class__ is bool else t(op.get("args") or [], op.get("kwargs") or {})


def _plannable_name(name) -> bool | None:
    """Whether every op called ``name`` is plannable (True/False), or None when that depends on the call."""
    if name in PLANNABLE_ACTIONS or name in INPUT_OPS:
        return True
    t = traceable(name)
    return t if t.__class__ is bool else None


_get_op = dict.get


#: op names every call of which is plannable: ``_plannable_name``'s True answers, remembered (the op table
#: only grows, and a name's answer is fixed once its op exists; other answers are not remembered)
_PLANNABLE_NAMES: set = set(PLANNABLE_ACTIONS | INPUT_OPS)


def _scan(ops: list, plannable: bool = True) -> list | None:
    """The positions of the input (``tensor``) ops of ``ops``; None when an op is not an object or (with
    ``plannable``) when one is not ``_plannable_op``. C-level passes over the op names, one test per distinct
    name (the per-call test only for the ops whose call form decides)."""
    try:
        names = list(map(_get_op, ops, repeat("op")))  # (TypeError: an op that is not an object)
        distinct = set(names)                          # (TypeError: an unhashable op name)
    except TypeError:
        return None
    if plannable and not _PLANNABLE_NAMES.issuperset(distinct):
        for name in distinct.difference(_PLANNABLE_NAMES):
            ok = _plannable_name(name)
            if ok:
                _PLANNABLE_NAMES.add(name)
            elif ok is None:
                if not all(_plannable_op(o) for o, m in zip(ops, names) if m == name):
                    return None
            else:
                return None
    if INPUT_OPS.isdisjoint(distinct):
        return []
    n = sum(map(names.count, INPUT_OPS & distinct))
    if INPUT_OPS.issuperset(names[:n]):  # (the inputs first, the common /v1/eval list: C-level passes)
        return list(range(n))
    return [i for i, m in enumerate(names) if m in INPUT_OPS]


_FLOAT32_MAX = 3.4e38  # a Python float strictly inside this range casts to float32 without overflow


def _input_form(op: dict) -> tuple | None:
    """``(data, dtype, requires_grad)`` of a ``tensor`` op called as ``tensor(data, dtype=..., requires_grad=...)``
    with a Python number, a list, an array or an ``Owned`` array as data, a dtype name (canonical) or none, and a
    bool flag; None for any other form (the caller runs the op as the program does)."""
    args = op["args"]
    if args.__class__ is not list or len(args) != 1:
        return None
    kw = op.get("kwargs")
    dtype, rg = None, False
    if kw:
        if kw.__class__ is not dict:
            return None
        for k, v in kw.items():
            if k == "requires_grad" and v.__class__ is bool:
                rg = v
            elif k == "dtype" and v.__class__ is str:
                dtype = D.ALIASES.get(v)
                if dtype is None:
                    return None
            elif k != "dtype" or v is not None:
                return None
    data = args[0]
    cls = data.__class__
    if cls is float or cls is int or cls is bool or cls is list or cls is np.ndarray or cls is Owned:
        return data, dtype, rg
    return None


def _direct_input(data, dtype, rg, adopt: bool = False) -> np.ndarray | None:
    """The array ``creation.tensor`` makes of one Python number or of an array already of the dtype it keeps,
    by the steps ``tensor.as_array`` takes for them (so bit for bit the same array, and no step that could
    meet a floating-point error); None for anything else (list data, an array to cast, an int outside int64,
    a float cast to an integer dtype or overflowing float32, NaN, requires_grad on an integer dtype): the
    caller then takes the general way.

    ``Owned`` data (``adopt``: a one-shot run, whose tensors die with its response) is the array itself when
    that array is what the copy would be (C-contiguous, writable, owning its memory, of the dtype the op keeps
    in native byte order: ``_KEPT`` holds native dtypes only), once per ``Owned``; any other is copied."""
    cls = data.__class__
    if cls is Owned:
        arr = _kept(data, rg, dtype) if adopt else None
        if arr is not None:
            return arr
        data = data.array
        cls = data.__class__
    if cls is np.ndarray:
        # as_array: an array of a dtype the engine keeps, asked for no other, is copied (C order, writable)
        if (dtype is None or data.dtype == D.NP_DTYPES[dtype]) and data.dtype in _KEPT \
                and (not rg or data.dtype.kind in "fV"):
            return np.array(data, copy=True, order="C")
        return None
    if cls is float:
        # np.asarray gives float64 (_out_of_int64 keeps a float), cast to float32 unless float64 is asked for
        if dtype == D.FLOAT64:
            return np.asarray(data)
        if (dtype is None or dtype == D.FLOAT32) and -_FLOAT32_MAX < data < _FLOAT32_MAX:
            return np.asarray(data).astype(np.float32)
        return None
    if cls is int or cls is bool:
        if cls is int and not -(1 << 63) <= data < (1 << 63):
            return None
        arr = np.asarray(data)  # int64 or bool, 0-d
        if dtype is not None:
            target = D.NP_DTYPES[dtype]
            if target.kind in "iu" and target.itemsize < 8:
                return None  # a narrow integer type: as_array checks the range (torch's overflow error)
            if arr.dtype != target:
                arr = arr.astype(target)
        if rg and arr.dtype.kind not in "fV":
            return None
        return arr
    return None


def _kept(owned: Owned, rg: bool, dtype: str | None = None) -> np.ndarray | None:
    """The array of ``owned`` when a one-shot run keeps it as the op's copy (see ``_direct_input``), taken;
    None: the op's copy is made."""
    arr = owned.array
    if owned.taken or arr.__class__ is not np.ndarray or arr.base is not None or arr.dtype not in _KEPT \
            or (dtype is not None and arr.dtype != D.NP_DTYPES[dtype]) or (rg and arr.dtype.kind not in "fV"):
        return None
    flags = arr.flags
    if not (flags.c_contiguous and flags.writeable and flags.aligned):
        return None
    owned.taken = True
    return arr


#: a tensor op's args in its key, data left out (only ever serialised)
_NO_DATA = [None]


def _without_data(op: dict) -> dict:
    """An input op as a list's text keys it: its data left out (a None in its place)."""
    args = op["args"]
    return {**op, "args": _NO_DATA if len(args) == 1 else [None, *args[1:]]}


#: the dtypes ``as_array`` keeps an array in when no dtype is asked for
_KEPT = frozenset(D.NP_DTYPES.values())


#: an input's dtype in its key (one string object per dtype)
_DTYPE_STR = {dt: dt.str for dt in _KEPT}


def _input_meta(arr: np.ndarray, rg: bool) -> tuple:
    """A list input's part of its key (``_key``'s metas): shape, dtype (its ``str``) and requires_grad; also what
    compose's look-ahead reads a bound name as (``_arg_sig``)."""
    return (arr.shape, _DTYPE_STR.get(arr.dtype) or arr.dtype.str, rg)


def caller_key(kwargs: dict, extra, session: bool = False, respond=None) -> tuple:
    """The caller's part of a list's key (its ``extra``): grad mode, limits, the caller's own ``extra`` and what
    the response shows (``respond``, by default ``kwargs``'; a list of names as a tuple); a session list's
    starts with ``"session"``."""
    if respond is None:
        respond = kwargs.get("respond", "changed")
    part = (bool(kwargs.get("no_grad", False)), kwargs.get("limits"), extra,
            respond if isinstance(respond, str) else tuple(respond))
    return ("session", *part) if session else part


def _key(state: State, ops: list, extra: tuple, made: list | None = None, text: bytes | None = None,
         adopt: bool = False, later: list | None = None):
    """(key, input arrays) or None when the run cannot be planned at all; input ops run here (as the program
    runs them: the same arrays), and their results' structure goes into the key. ``made``: the positions of
    the input ops (``_scan``), ``text``: the op list's text (``_pre_key``'s), when the caller has them;
    ``adopt``: a one-shot run, which may keep ``Owned`` arrays (``_direct_input``). ``later``: a list the
    text's ``null`` check is left to (``_nulls_later``: the text made is then the bare one)."""
    inputs, metas = [], []
    for name, t in state.tensors.items():
        if not _fresh_leaf(t):
            return None
        inputs.append(t.data)
        metas.append((name, t.data.shape, t.data.dtype.str, t._requires_grad))
    if state.functions:
        return None
    if made is None:
        made = _scan(ops, plannable=False)
        if made is None:
            return None
    stripped = ops
    owned = 0  # input ops of one Owned argument: left out of the text by orjson's default hook (no copy)
    if made:
        rest = []  # (position, op, its form or None) of the inputs made under the run's error state
        for i in made:
            op = ops[i]
            args = op.get("args")
            if not args:
                return None
            data = args[0]
            if data.__class__ is Owned and len(args) == 1:
                owned += 1
                if adopt:  # the common one-shot input: ``_kept``, inline
                    kw = op.get("kwargs")
                    rg = False if not kw else kw.get("requires_grad") if len(kw) == 1 else None
                    arr = data.array
                    if rg.__class__ is bool and not data.taken and arr.__class__ is np.ndarray and arr.base is None:
                        ds = _DTYPE_STR.get(arr.dtype)
                        # (flags.carray: C-contiguous, writeable and aligned)
                        if ds is not None and arr.flags.carray and (not rg or arr.dtype.kind in "fV"):
                            data.taken = True
                            metas.append((arr.shape, ds, rg))  # (``_input_meta``, inline: a replay's path)
                            inputs.append(arr)
                            continue
            elif text is None:
                if stripped is ops:
                    stripped = list(ops)
                stripped[i] = _without_data(op)
            form = _input_form(op)
            arr = None if form is None else _direct_input(*form, adopt)
            if arr is None:
                rest.append((len(inputs), op, form))
                metas.append(None)
            else:
                metas.append(_input_meta(arr, form[2]))
            inputs.append(arr)
        if rest and not _run_inputs(rest, inputs, metas):
            return None
    if text is None:
        if owned:
            left = [owned]
            text = _dumps_owned(stripped, left, len(made), later)
            if left[0]:  # (an Owned elsewhere than as an input's data: every input's data left out the usual way)
                text = None
                if later:
                    later.clear()
                stripped = list(stripped)
                for i in made:
                    stripped[i] = _without_data(ops[i])
        if text is None:
            try:
                text = _dumps(stripped, nulls=len(made), later=later)
            except TypeError:
                return None
    return (text, tuple(metas), extra), inputs


def _dumps(obj, default=None, nulls: int = 0, later: list | None = None) -> bytes:
    """``orjson.dumps(obj, default=default, option=OPT_SERIALIZE_NUMPY | OPT_NON_STR_KEYS)``: the same bytes,
    tried first without OPT_NON_STR_KEYS (which costs orjson ~40% more on a long op list), a dict of another key
    than a str (a TypeError then) written again with it. Copied to its exact size: it becomes a cache key, and
    orjson's own bytes object keeps the buffer it grew (16 KiB for a 300-byte text). orjson writes inf, -inf and
    every NaN as ``null``, as it writes None: a text with more ``null``s than ``nulls`` (the Nones the caller put
    in for the input ops' data) and its ops' ``"out":null``s (two C-level counts) is followed by a NUL byte and
    ``tape.null_bits`` (each null's value, a float by its bits, as ``tape.literal_key`` keys it), so that
    ``x * inf`` and ``x * -inf`` have two keys. ``later``: that check is left to the caller (``_nulls_later``)."""
    try:
        text = orjson.dumps(obj, default=default, option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError:
        text = orjson.dumps(obj, default=default, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    return _nulls_keyed(bytes(memoryview(text)), obj, nulls, later)


def _nulls_keyed(text: bytes, obj, nulls: int, later: list | None) -> bytes:
    """``text``, followed by a NUL byte and ``tape.null_bits(obj)`` when it holds more ``null``s than ``nulls``
    and its ops' ``"out":null``s (inf, -inf, NaN: null too; two C-level counts); with ``later`` (a list), the
    bare text, the check left to ``_nulls_later`` (``later`` gets what it needs)."""
    if later is not None:
        later += (obj, nulls)
        return text
    if text.count(b"null") != nulls + text.count(b'"out":null'):
        return text + b"\0" + null_bits(obj)
    return text


def _nulls_later(key: tuple, later: list) -> tuple:
    """The key ``_key(..., later=later)`` would have made without ``later``: its text checked now. A key's text
    that is its bare op-list text passed the check when it was made (the suffix starts with a NUL byte, which
    orjson never writes, and whether the check passes is a function of the text alone), so a lookup by the
    bare text finds only what the checked key would: a caller looks that up first and checks on a miss only
    (a replayed finite list pays no count)."""
    if not later:
        return key
    text = _nulls_keyed(key[0], later[0], later[1], None)
    return key if text is key[0] else (text, *key[1:])


def _dumps_owned(ops: list, left: list, nulls: int, later: list | None = None) -> bytes | None:
    """The op list's text with each ``Owned`` written as null (what ``{**op, "args": [None]}`` writes for an
    input op of one argument); ``left[0]``: the Owned arguments expected, counted down (not 0 after: an Owned
    somewhere else, so the text is not the stripped list's)."""
    expected = left[0]

    def hook(o):
        if o.__class__ is Owned:
            left[0] -= 1
            return None
        raise TypeError
    try:
        text = orjson.dumps(ops, default=hook, option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError:
        left[0] = expected  # (again with non-str keys: ``_dumps``)
        try:
            text = orjson.dumps(ops, default=hook, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
        except TypeError:
            left[0] = -1
            return None
    if later is not None:  # (``_nulls_keyed``'s first case, inline: a replay's path)
        later += (ops, nulls)
        return text
    return _nulls_keyed(text, ops, nulls, None)  # (as ``_dumps``; an Owned: a None)


def _run_inputs(rest: list, inputs: list, metas: list) -> bool:
    """The input ops ``_direct_input`` left, as the program runs them (list or array data through the tensor
    op's own conversion, other forms through the op itself), into their places of ``inputs`` and ``metas``;
    False when one fails or warns (the cold run reports it, with its op index)."""
    sink = WarningSink(set())
    runner = None
    try:  # (grad mode does not matter to a tensor op)
        with sink, np.errstate(all="ignore"):
            for at, op, form in rest:
                if form is not None:
                    data, dtype, rg = form
                    arr = as_array(data.array if data.__class__ is Owned else data, dtype)
                    if rg and arr.dtype.kind not in "fV":
                        return False
                else:
                    if runner is None:
                        runner = _Runner(State(), {}, sink, ProgramResult())
                    spec = OPS[op["op"]]
                    a, k = runner.bind_args(spec, op["args"], op.get("kwargs") or {}, op["op"])
                    t = spec.fn(*a, **k)
                    if not _fresh_leaf(t):
                        return False
                    arr, rg = t.data, t._requires_grad
                inputs[at] = arr
                metas[at] = _input_meta(arr, rg)
    except Exception:  # noqa: BLE001 - the cold run reports it, with its op index
        return False
    return not sink.messages


# ----- session lists: the session's state, canonical names, the pre-key ------------------------------------
#: a function definition's JSON text: a FunctionDef is frozen plain data (its ops a private deep copy, arrays
#: read-only), so the text of one object never changes
_FN_TEXT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _functions_key(functions: dict) -> tuple | None:
    """The session's function definitions as (name, JSON text) pairs, each text dumped once per definition."""
    out = []
    for name, f in functions.items():
        text = _FN_TEXT.get(f)
        if text is None:
            try:
                text = _dumps(f.to_json())
            except TypeError:
                return None
            _FN_TEXT[f] = text
        out.append((name, text))
    return tuple(out)


def _historyless(t) -> bool:
    """A tensor without history: no graph, no base, no gradient of its own, no tangent."""
    return (t.__class__ is Tensor and t._grad_fn is None and t._base is None and t._grad is None
            and t._fw_grad is None and t.data.__class__ is np.ndarray)


def _strings(v, add, keys: bool = False) -> None:
    """Every string in ``v``, through lists, tuples and dict values (``keys``: and dict keys), to ``add``."""
    c = v.__class__
    if c is str:
        add(v)
    elif c is list or c is tuple:
        for x in v:
            _strings(x, add, keys)
    elif c is dict:
        for k, x in v.items():
            if keys:
                _strings(k, add, keys)
            _strings(x, add, keys)


def _dropped_names(ops: list) -> set:
    """The names the list unbinds (``del``) or binds anew (``out``) before anything could read them: a session
    tensor under such a name may carry a graph, which the run never reads (its nodes stay the session's)."""
    read, dropped = set(), set()
    for o in ops:
        if o.__class__ is not dict:
            return set()
        reads, binds = [], []
        for k, v in o.items():
            if k != "op":
                _strings(v, (binds if k == "out" or (k == "args" and o.get("op") == "del") else reads).append, True)
        read.update({n.partition(".")[0] for n in reads} - dropped)
        dropped.update({n.partition(".")[0] for n in binds} - read)
    return dropped


def _session_key(state: State, ops: list, extra: tuple, text: bytes | None = None, strict: bool = False,
                 ren: dict | None = None, dropped: set | None = None):
    """The key of a session list: everything of the session state the run can depend on (each tensor's name,
    shape, dtype, flags, aliasing, its gradient's; the function definitions; the warned set; the name
    counter). Not the version counters: a run depends on their moves only, and a replay moves them as the
    recorded run did (``_After``). None when a session tensor has a history the run could read: a graph (but
    under a name the list only unbinds), a view, a gradient with a graph (``strict``: any graph or gradient,
    what a repeat loop's chained replays assume)."""
    metas, tids, vcs, bases = [], {}, {}, {}
    for name, t in state.tensors.items():
        if ren is not None:
            t_name, name = name, ren[name]
        if t.__class__ is not Tensor or t._base is not None or t._fw_grad is not None \
                or t.data.__class__ is not np.ndarray:
            return None
        base = t.data.base if t.data.base is not None else t.data
        if t._grad_fn is not None:
            if strict:
                return None
            if dropped is None:  # (with ``ren``, the caller gives them, by the session's names)
                dropped = _dropped_names(ops)
            if (name if ren is None else t_name) not in dropped or t._grad is not None:
                return None
            metas.append((name, "dropped", tids.setdefault(id(t), len(tids)), vcs.setdefault(id(t._vc), len(vcs)),
                          bases.setdefault(id(base), len(bases))))
            continue
        g = t._grad
        gm = None
        if g is not None:
            if strict or not _historyless(g) or g._requires_grad:
                return None
            gb = g.data.base if g.data.base is not None else g.data
            gm = (g.data.shape, g.data.dtype.str, g.data.strides, g.retains_grad, tids.setdefault(id(g), len(tids)),
                  vcs.setdefault(id(g._vc), len(vcs)), bases.setdefault(id(gb), len(bases)))
        metas.append((name, t.data.shape, t.data.dtype.str, t.data.strides, t._requires_grad, t.retains_grad,
                      t.grad_accumulations if strict else t.grad_accumulations > 0, tids.setdefault(id(t), len(tids)),
                      vcs.setdefault(id(t._vc), len(vcs)), bases.setdefault(id(base), len(bases)), gm))
    fns = _functions_key(state.functions)
    if fns is None:
        return None
    saved = state.tensors
    state.tensors = {}  # _key's own checks are a one-shot run's; the session tensors are keyed above
    saved_fns = state.functions
    state.functions = {}
    try:
        made = _key(state, ops, extra, text=text)
    finally:
        state.tensors, state.functions = saved, saved_fns
    if made is None:
        return None
    (text, imetas, ex), inputs = made
    key = (text, (tuple(metas), imetas, fns, tuple(sorted(state.warned)), state.counter, strict), ex)
    return key, _session_inputs(state.tensors) + inputs


def _session_inputs(tensors: dict) -> list:
    """The arrays of a session state a run reads: each tensor's, then each gradient's (``rec.add_input``'s order)."""
    out = [t.data for t in tensors.values()]
    out += [t._grad.data for t in tensors.values() if t._grad is not None]
    return out


#: the parameters of the actions that take tensor names (by position and by keyword)
_NAME_PARAMS = {"backward": ((0, "tensors"), (1, "gradient"), (4, "inputs")),
                "grad": ((0, "outputs"), (1, "inputs"), (2, "grad_outputs")),
                "zero_grad": ((0, "tensors"),), "retain_grad": ((0, "self"),), "bind": ((0, "self"),),
                "set_grad": ((0, "self"), (1, "grad")), "requires_grad_": ((0, "self"),)}


_OP_KEYS = frozenset({"op", "args", "kwargs", "out", "no_grad"})


class _Names:
    """The canonical names of a session list (``_canonical``): the session's names in its order, then the
    names the list brings, in the order they come; and which names the list unbinds or rebinds before it reads
    them (``_dropped_names``, from the same pass)."""

    __slots__ = ("ren", "names", "read", "dropped", "lits")

    def __init__(self, tensors: dict):
        self.names = list(tensors)
        self.ren = {n: f"\x00{i}" for i, n in enumerate(self.names)}
        self.read, self.dropped = set(), set()
        self.lits: list = []  # the lifted floats: (op index, position or keyword, value), in the list's order

    def name(self, v, bind: bool = False):
        """A value at a position that takes a tensor name (a name, a name's ``.grad``, a list of them, or any
        other value); ``bind``: the position binds or unbinds the name (``out``, ``del``), else it reads it."""
        if v.__class__ is str:
            ren = self.ren
            c = ren.get(v)
            if c is not None:
                base, suffix = v, ""
            else:
                base, dot, attr = v.partition(".")
                suffix = dot + attr
                c = ren.get(base)
                if c is None:
                    c = ren[base] = f"\x00{len(self.names)}"
                    self.names.append(base)
            if bind:
                if base not in self.read:
                    self.dropped.add(base)
            elif base not in self.dropped:
                self.read.add(base)
            return c + suffix if suffix else c
        if v.__class__ is list:
            return [self.name(x, bind) for x in v]
        return v


_SCALARS = frozenset({int, float, bool, type(None)})


def _literal_ok(v, ren: dict) -> bool:
    """A literal kept as it is: no string that could read as a canonical name (the key stays one-to-one), nor
    one that names a tensor (an index naming a tensor, a string an op might read as a name: the list is then
    keyed under its own names)."""
    c = v.__class__
    if c in _SCALARS:
        return True
    if c is str:
        return not v.startswith("\x00") and v.partition(".")[0] not in ren
    if c is list or c is tuple:
        return all(_literal_ok(x, ren) for x in v)
    if c is dict:
        return all(_literal_ok(k, ren) and _literal_ok(x, ren) for k, x in v.items())
    return True


#: a lifted float's place in a canonical list (no literal string starts with NUL: ``_literal_ok``)
_LIFTED = "\x00f"


def _canonical(ops: list, tensors: dict):
    """(the list with every tensor name replaced by its canonical name, ``_Names``), or None where the list has
    a form whose names are not known by position (then it plans under its own names). Names are read where the
    program reads names: ``out``, an op's tensor parameters (by its signature's kinds), an action's name
    parameters, ``del``'s arguments; everything else is a literal, kept, but a float given to an op as an
    argument (``nm.lits``), which is lifted: written as ``_LIFTED`` (its type, not its value), fed to the plan
    as an input (``_with_literals``); the values the recording finds it read go into the key (``_Pinned``)."""
    for o in ops:  # (a form without canonical names, a transform's call: refused before the names are made)
        op = o.get("op") if o.__class__ is dict else None
        if op.__class__ is not str or (op not in OPS and op not in INPUT_OPS and op != "del"
                                       and op not in _NAME_PARAMS):
            return None
    nm = _Names(tensors)
    name, ren, lits = nm.name, nm.ren, nm.lits
    out = []
    append = out.append
    keys = _OP_KEYS.issuperset
    for j, o in enumerate(ops):
        if o.__class__ is not dict or not keys(o):
            return None
        op, args, kwargs = o.get("op"), o.get("args") or [], o.get("kwargs") or {}
        if args.__class__ is not list or kwargs.__class__ is not dict or op.__class__ is not str:
            return None
        if op in INPUT_OPS:
            if kwargs and not _literal_ok(kwargs, ren):
                return None
            n = dict(o)
        elif op == "del":
            n = {**o, "args": [name(a, True) for a in args]}
        elif op in _NAME_PARAMS:
            params = _NAME_PARAMS[op]
            pos, kws = {i for i, _ in params}, {kw for _, kw in params}
            if not (_literal_ok([v for i, v in enumerate(args) if i not in pos], ren)
                    and _literal_ok({key: v for key, v in kwargs.items() if key not in kws}, ren)):
                return None
            n = {**o, "args": [name(v) if i in pos else v for i, v in enumerate(args)],
                 "kwargs": {key: name(v) if key in kws else v for key, v in kwargs.items()}}
        else:
            spec = OPS.get(op)
            if spec is None:
                return None
            pos_kinds, varargs_tensor, kinds, _ = _op_layout(spec, op)[1]
            npos = len(pos_kinds)
            rest = _TENSOR if varargs_tensor else 0
            a = []
            for i, v in enumerate(args):
                if v.__class__ is float:  # a float literal (an operand, alpha, a weight): keyed by its type
                    lits.append((j, i, v))
                    a.append(_LIFTED)
                    continue
                kind = pos_kinds[i] if i < npos else rest
                if kind == _TENSOR or kind == _TENSOR_LIST:
                    a.append(name(v))
                elif v.__class__ in _SCALARS or _literal_ok(v, ren):
                    a.append(v)
                else:
                    return None
            if kwargs:
                k = {}
                for key, v in kwargs.items():
                    if v.__class__ is float and key.__class__ is str:
                        lits.append((j, key, v))
                        k[key] = _LIFTED
                        continue
                    kind = kinds.get(key, 0)
                    if kind == _TENSOR or kind == _TENSOR_LIST:
                        k[key] = name(v)
                    elif (v.__class__ in _SCALARS or _literal_ok(v, ren)) and _literal_ok(key, ren):
                        k[key] = v
                    else:
                        return None
                n = {**o, "args": a, "kwargs": k}
            else:
                n = {**o, "args": a}
        if "out" in o:
            n["out"] = name(o["out"], True)
        append(n)
    return out, nm


def _pinned_key(base: tuple, pins: tuple, lits: list) -> tuple:
    """A session list's key (``base``) with the values of its pinned lifted floats (``pins``: their indices in
    ``lits``, ``_Names.lits``), each keyed as a literal (``literal_key``: -0.0 and 0.0 differ)."""
    return (base, pins, tuple([literal_key(lits[i][2]) for i in pins]))


def _pre_key(state: State, ops: list, extra: tuple, ren: dict | None = None):
    """A coarser key, cheap to build, under which a list recorded unplannable is remembered so: the op list
    (tensor data left out), the function definitions, and each session tensor's name, shape, dtype and
    requires_grad (what decides which code runs), without what the full key adds (strides, versions,
    aliasing, the warned set, the name counter). Looked up where the full key finds no plan: a list it marks
    runs cold, and a state that differs only in what the full key adds is not recorded again (a cold run is
    always exact). None when the list cannot be keyed (nor planned: a session tensor that is not a plain leaf
    without a gradient)."""
    stripped = []
    nulls = 0  # (the Nones written for the input ops' data)
    for op in ops:
        if not isinstance(op, dict):
            return None
        if op.get("op") in INPUT_OPS and op.get("args"):
            op = _without_data(op)
            nulls += 1
        stripped.append(op)
    metas = []
    for n, t in state.tensors.items():
        if not (t.__class__ is Tensor and t._base is None and t._fw_grad is None and t.data.__class__ is np.ndarray):
            return None  # (the full key refuses it too: the session holds a view or a tangent)
        g = t._grad
        metas.append((n if ren is None else ren[n], t.data.shape, t.data.dtype, t._requires_grad, t._grad_fn is None,
                      None if g is None else (g.data.shape, g.data.dtype)))
    fns = _functions_key(state.functions)
    try:
        text = _dumps(stripped, nulls=nulls)
    except TypeError:
        return None
    if fns is None:
        return None
    return (text, ("pre", tuple(metas), fns), extra)


def _layout(state: State) -> tuple:
    """What a plan's carried key is checked against: each session tensor's name, shape, dtype and strides."""
    return tuple([(n, t.data.shape, t.data.dtype, t.data.strides) for n, t in state.tensors.items()])


# ----- ops: a fragment's key ---------------------------------------------------------------------------
_KW = object()  # separates positional arguments from keyword arguments in a key


_lit = literal_key  # (the common form's name in the keys below)


def _tensor(a: str, ns: dict, key: list, vs: list, seen: dict | None = None) -> None:
    """A tensor argument into the key: its variable's descriptor (shape, dtype, strides, requires_grad) the first
    time, its input index after, found in ``vs`` or, for an op of many tensor arguments (a stack of 1000), by
    ``seen`` (variable ids to indices, filled as it goes)."""
    v = ns.get(a)
    if v is None:
        raise GiveUp  # (an unbound name, "x.grad": the cold run resolves or refuses it)
    if seen is None:
        for j, w in enumerate(vs):
            if w is v:
                key.append(j)  # (an int: a literal is never a bare int in a key)
                return
    else:
        if not seen and vs:
            for j, w in enumerate(vs):
                seen[id(w)] = j
        j = seen.get(id(v))
        if j is not None:
            key.append(j)
            return
        seen[id(v)] = len(vs)
    vs.append(v)
    x = v[0]
    key += (x.shape, x.dtype, x.strides, v[1])


def _op_key(form, args: list, kwargs: dict, ns: dict, key: list, vs: list) -> None:
    """The arguments' part of an op's key (appended to ``key``), its distinct input variables into ``vs``."""
    pos_kinds, kinds, vname = form[1], form[2], form[3]
    npos = len(pos_kinds)
    many = len(args) > 8
    seen: dict = {}
    for i, a in enumerate(args):
        k = pos_kinds[i] if i < npos else _PLAIN
        if k == _TENSOR and a.__class__ is str:
            _tensor(a, ns, key, vs, seen if many else None)
        elif k == _PLAIN or k == _TENSOR:
            key.append(_lit(a))
        elif k == _INDEX:
            key.append(_index(a))
        elif k == _TENSOR_LIST and a.__class__ is list:
            if not vs and _names_key(a, ns, key, vs):
                continue
            key.append(("L", len(a)))
            big = many or len(a) > 8
            for x in a:
                if x.__class__ is not str:
                    key.append(_lit(x))
                else:
                    _tensor(x, ns, key, vs, seen if big else None)
        else:
            raise GiveUp
    if kwargs:
        key.append(_KW)
        for kname, a in kwargs.items():
            key.append(kname)
            k = kinds.get(kname)
            if k is None or kname == vname:
                raise GiveUp
            if k == _TENSOR and a.__class__ is str:
                _tensor(a, ns, key, vs, seen)
            elif k == _PLAIN or k == _TENSOR:
                key.append(_lit(a))
            elif k == _TENSOR_LIST and a.__class__ is list:
                key.append(("L", len(a)))
                for x in a:
                    if x.__class__ is str:
                        _tensor(x, ns, key, vs, seen)
                    else:
                        key.append(_lit(x))
            else:
                raise GiveUp


def _names_key(a: list, ns: dict, key: list, vs: list) -> bool:
    """A tensor list argument of names of distinct variables, none of them an input met before (``vs`` empty):
    its part of the key as ``_op_key`` makes it, in a few C-level passes; False (nothing done): not so."""
    try:
        vl = list(map(ns.get, a))
    except TypeError:  # (an unhashable literal)
        return False
    if None in vl or len(set(map(id, vl))) != len(vl):
        return False
    key.append(("L", len(a)))
    for v in vl:
        x = v[0]
        key += (x.shape, x.dtype, x.strides, v[1])
    vs += vl
    return True


def _index(v):
    """An index argument (``getitem``'s) as a key: its literal form, when it names no tensor (ints, None,
    "...", "a:b:c" slices, {"slice": [...]}, lists of ints); else a GiveUp."""
    c = v.__class__
    if c is str:
        if v == "..." or _SLICE_RE.match(v):
            return v
        raise GiveUp  # (a tensor name)
    if c is dict:
        if set(v) != {"slice"} or v["slice"].__class__ is not list or \
                not all(x is None or x.__class__ is int for x in v["slice"]):
            raise GiveUp
        return ("S", tuple(v["slice"]))
    if c is list:
        return (list, tuple([_index(x) for x in v]))
    return _lit(v)


#: op name -> (spec, positional kinds, {keyword: kind}, *args name, the call-form check or None, which inline key
#: form ``_compose`` may use: 0 none, 1 a tensor first, 2 a tensor then a tensor or a literal); False for an op a
#: fragment never covers (no kernels, in place)
_FORMS: dict = {}


def _form(name):
    f = _FORMS.get(name)
    if f is None:
        t = traceable(name)  # (the op table's declaration: every call, none, or a call-form check)
        spec = OPS[name] if t is not False else None
        if spec is None or spec.inplace:
            f = False
        else:
            pos_kinds, varargs_tensor, kinds, vname = _op_layout(spec, name)[1]
            # (the forms ``_compose`` keys inline: a tensor first, then (2) a tensor or a literal)
            fast = 0 if not pos_kinds or pos_kinds[0] != _TENSOR else \
                2 if len(pos_kinds) > 1 and pos_kinds[1] <= _TENSOR else 1
            f = False if varargs_tensor else (spec, pos_kinds, kinds, vname, None if t is True else t, fast)
        if name.__class__ is str:
            _FORMS[name] = f
    return f


def _names(op: dict) -> list:
    """Every string among an op's arguments (the names a throwaway namespace must map)."""
    out: list = []
    _strings(op.get("args") or [], out.append)
    _strings(op.get("kwargs") or {}, out.append)
    return out


def _sig(v):
    """A signature of an op's arguments that equal op forms share (``_lit``'s literals, coarser: every string, a
    tensor's name or not, is None; numbers by value)."""
    c = v.__class__
    if c is str:
        return None
    if c is list or c is tuple:
        return tuple([_sig(x) for x in v])
    if c is dict:
        return tuple([(k, _sig(x)) for k, x in v.items()])
    if c is float or c is int or c is bool or v is None:
        return v
    return c  # (an array, an Owned...: by kind)


_NO_NAMES: dict = {}  # (read only)


def _op_sig(op, ns: dict = _NO_NAMES, ahead: dict = _NO_NAMES):
    """``_sig`` of an op's name, no_grad flag, arguments and keyword arguments (none and ``{}`` alike); the common
    argument lists (one or two names or numbers) without ``_sig``'s calls, a name there as its tensor's (shape,
    dtype, requires_grad) when it is bound (``ns``: the composed loop's names) or an input ahead (``ahead``: its
    ``metas`` entry; ops on inputs of other shapes are other forms), else None."""
    args = op.get("args")
    if args.__class__ is list and len(args) <= 2:
        args = tuple([_arg_sig(a, ns, ahead) for a in args])
    else:
        args = _sig(args)
    kw = op.get("kwargs")
    return op.get("op"), op.get("no_grad"), args, _sig(kw) if kw else None


def _arg_sig(a, ns: dict, ahead: dict):
    """``_op_sig``'s signature of one argument: a name as its tensor's (shape, dtype, requires_grad) when bound
    (``ns``) or an input ahead (``ahead``), else None; a number as itself; anything else ``_sig``'s."""
    if a.__class__ is str:
        v = ns.get(a)
        return ahead.get(a) if v is None else _input_meta(v[0], v[1])
    return a if a.__class__ in _SCALARS else _sig(a)


def _literal_form(key):
    """A forward fragment's key with the values of its top-level int and float literals left out
    (``literal_key``'s ``(int, 3)``), or None when it has none: the form whose fragments
    ``PlanCache._measure`` counts by one measure."""
    form = None
    for i, x in enumerate(key):
        if x.__class__ is tuple and len(x) == 2 and (x[0] is int or x[0] is float):
            if form is None:
                form = list(key)
            form[i] = x[0]
    return None if form is None else tuple(form)


def _key_of(form, args: list, kw: dict, ns: dict, key: list, vs: list) -> None:
    """An op's key after its head: ``_op_key``, inline for a few positional arguments (tensor names and scalar
    literals)."""
    pk = form[1]
    if kw or len(args) > 4 or len(args) > len(pk):
        return _op_key(form, args, kw, ns, key, vs)
    for i, a in enumerate(args):
        c = a.__class__
        k = pk[i]
        if c is str and k == _TENSOR:
            v = ns.get(a)
            if v is None:
                raise GiveUp
            for j, w in enumerate(vs):
                if w is v:
                    key.append(j)
                    break
            else:
                vs.append(v)
                x = v[0]
                key += (x.shape, x.dtype, x.strides, v[1])
        elif k == _TENSOR_LIST and c is list and len(a) <= 8:  # (a short list: ``_op_key``'s key, inline)
            if not vs and _names_key(a, ns, key, vs):
                continue
            key.append(("L", len(a)))
            for b in a:
                if b.__class__ is str:
                    _tensor(b, ns, key, vs)
                else:
                    key.append(_lit(b))
        elif k != _PLAIN and k != _TENSOR:
            del key[3:]
            vs.clear()
            return _op_key(form, args, kw, ns, key, vs)
        elif c is float:
            key.append((float, a) if a == a and a != 0.0 else _lit(a))  # (``_lit``'s rule, its common case inline)
        elif c is int or c is bool:
            key.append((c, a))
        else:
            key.append(_lit(a))


def _vjp_key(grads: list, saved, ins: list, n_outputs: int) -> tuple:
    """A VJP fragment's key, within its recipe (``compose._Recipe.vjps``): the incoming gradients' layout (shape,
    dtype, strides; None: no gradient for that output) and, where one of the VJP's inputs (``ins``: the distinct
    arrays of the gradients, then of the saved arrays) is met twice, which is which. A single-output node's one
    gradient that is no saved array: its layout alone (``compose._Run.apply`` looks that form up inline)."""
    if n_outputs == 1 and len(ins) == 1 + len(saved):
        g = grads[0]
        return (g.shape, g.dtype, g.strides)
    pat = tuple([-1 if a is None else next(i for i, b in enumerate(ins) if a is b) for a in (*grads, *saved)])
    return (tuple([None if g is None else (g.shape, g.dtype, g.strides) for g in grads]), pat)


_CODE = object()  # (a compiled maker's key is (_CODE, its source): no list's or op's key starts so)


def _code_key(src: str) -> tuple:
    """The key a fragment's compiled maker is kept under in its partition's table (``cache.PlanCache.maker``):
    its source, one entry per structure whatever the constants."""
    return (_CODE, src)
