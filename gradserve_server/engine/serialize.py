"""Write a session's whole state out and read it back, without pickle.

Format: ``b"GSV1"``, an 8-byte little-endian header length, a JSON header, then the raw bytes of every
distinct array buffer. The header lists tensors, graph nodes (op name, input references, saved slots),
shared version counters and names. Views are restored as views of the same buffer, so storage sharing
(views, ``detach()``) survives the round trip. Loading executes no code: only JSON and numpy buffers.

The writer emits the header's JSON text directly (fixed key order, compact separators, ASCII), byte for
byte what ``json.dumps(header, separators=(",", ":"))`` of the equivalent dicts gives: this is on every
write request's path (the Redis store serialises after each one), and building the dicts and encoding
them took most of the time. ``dump_parts`` hands the array buffers out as zero-copy views.
"""

from __future__ import annotations

import functools
import json
import math
import struct
from json.encoder import encode_basestring_ascii as _q

import numpy as np

from . import custom_function
from . import dtypes as D
from .errors import EngineError
from .functional import from_json
from .generator import Generator
from .node import ACCUMULATE_GRAD, Node, SavedTensor
from .program import State, function_def
from .registry import PRIMS
from .tensor import VIEW_DEFAULT, VIEW_MULTI, VIEW_NO_GRAD, Tensor

MAGIC = b"GSV1"
_VERSION = 1
_LEN = struct.Struct("<Q")

# np.dtype -> its engine name as a JSON string
_DTYPE_JSON = {dt: _q(name) for name, dt in D.NP_DTYPES.items()}
_BOOL_JSON = {True: "true", False: "false"}

_ARRAY = '{"buf":%d,"dtype":%s,"shape":%s,"strides":%s,"offset":%d,"writeable":%s}'
_ARRAY0 = '{"buf":%d,"dtype":%s,"shape":[],"strides":[],"offset":%d,"writeable":%s}'
_TENSOR = ('{"id":%s,"array":%s,"requires_grad":%s,"output_nr":%d,"vc":%s,"retains_grad":%s,'
           '"grad_accumulations":%d,"wrapped":%s,"grad":%s,"base":%s,"grad_fn":%s,"accumulator":%s,"view":%s}')
_NODE = ('{"id":%s,"name":%s,"prim":%s,"n_outputs":%d,"input_meta":%s,"next":%s,"saved":%s,"retained":%s,'
         '"variable":%s}')
_SAVED = '{"saved":%s,"version":%d,"is_output":%s,"shape":%s,"dtype":%s}'
_BUFFER = '{"offset":%d,"nbytes":%d,"dtype":%s}'
_HEADER = ('{"version":%d,"names":{%s},"backward_passes":%d,"warned":[%s],"counter":%d,"counters":[%s],'
           '"tensors":[%s],"nodes":[%s],"buffers":[%s]}')


class CorruptStateError(EngineError):
    code = "corrupt_state"
    exception = "ValueError"


def _ints(t) -> str:
    """A tuple of ints as a JSON list."""
    return "[" + ",".join(map(str, t)) + "]" if t else "[]"


def _dtype_json(dt) -> str:
    return _DTYPE_JSON.get(dt) or _q(np.dtype(dt).name)


@functools.lru_cache(maxsize=4096)
def _input_meta(meta: tuple) -> str:
    """A node's ``input_meta`` (per edge ``(shape, dtype)`` or None) as JSON; memoised (a pure function of
    its argument), as a few shapes and dtypes recur in every node."""
    return "[" + ",".join("null" if m is None else f"[{_ints(m[0])},{_dtype_json(m[1])}]" for m in meta) + "]"


class _Writer:
    """One walk over the objects reachable from the named tensors. Ids are handed out in discovery order
    (depth first, an object before what it refers to); each entry's JSON text is stored at its id."""

    def __init__(self):
        self.tensor_ids: dict[int, str] = {}
        self.tensors: list[str | None] = []
        self.tensor_objs: list[Tensor] = []   # keeps ids stable while walking
        self.node_ids: dict[int, str] = {}
        self.nodes: list[str | None] = []
        self.node_objs: list[Node] = []
        self.counter_ids: dict[int, str] = {}
        self.counter_objs: list[list] = []
        self.buffer_ids: dict[int, int] = {}
        self.buffer_objs: list[np.ndarray] = []

    def array(self, a: np.ndarray) -> str:
        own = a
        while isinstance(own.base, np.ndarray):
            own = own.base
        idx = self.buffer_ids.get(id(own))
        if idx is None:
            f = own.flags
            if own.base is not None or not (f.c_contiguous or f.f_contiguous or _dense(own)):
                own = a = np.array(a, copy=True)  # memory numpy does not own, or with gaps: write a copy
            idx = self.buffer_ids[id(own)] = len(self.buffer_objs)
            self.buffer_objs.append(own)
        if a is own or not a.size:
            off = 0  # an owner starts its buffer; only a real view has an offset
        else:
            off = a.__array_interface__["data"][0] - own.__array_interface__["data"][0]
        shape = a.shape
        if shape:
            return _ARRAY % (idx, _DTYPE_JSON[a.dtype], _ints(shape), _ints(a.strides), off,
                             "true" if a.flags.writeable else "false")
        return _ARRAY0 % (idx, _DTYPE_JSON[a.dtype], off, "true" if a.flags.writeable else "false")

    def counter(self, vc: list) -> str:
        s = self.counter_ids.get(id(vc))
        if s is None:
            s = self.counter_ids[id(vc)] = str(len(self.counter_objs))
            self.counter_objs.append(vc)
        return s

    def tensor(self, t: Tensor | None) -> str:
        if t is None:
            return "null"
        s = self.tensor_ids.get(id(t))
        if s is not None:
            return s
        idx = len(self.tensors)
        s = self.tensor_ids[id(t)] = str(idx)
        self.tensors.append(None)
        self.tensor_objs.append(t)
        # evaluated left to right: buffers, counters and the referenced objects get their ids in this order
        # (None checks inline: most references are empty)
        # the stored grad_fn as it is (a stale view regenerates it on its next use, after loading too)
        g, b, fn, acc = t._grad, t._base, t._grad_fn, t._accumulator
        self.tensors[idx] = _TENSOR % (
            s, self.array(t.data), _BOOL_JSON[t._requires_grad], t.output_nr, self.counter(t._vc),
            _BOOL_JSON[t.retains_grad], t.grad_accumulations, _BOOL_JSON[t._wrapped],
            "null" if g is None else self.tensor(g), "null" if b is None else self.tensor(b),
            "null" if fn is None else self.node(fn), "null" if acc is None else self.node(acc),
            "null" if b is None else f'[{_q(t._creation or "default")},{t._attr_version:d}]')
        return s

    def node(self, n: Node | None) -> str:
        if n is None:
            return "null"
        s = self.node_ids.get(id(n))
        if s is not None:
            return s
        idx = len(self.nodes)
        s = self.node_ids[id(n)] = str(idx)
        self.nodes.append(None)
        self.node_objs.append(n)
        meta = _input_meta(n.input_meta)
        parts = []
        for c, nr in n.next_functions:
            parts.append("null" if c is None else f"[{self.node(c)},{nr:d}]")
        nexts = "[" + ",".join(parts) + "]"
        parts = []
        for k, v in n.saved.items():
            parts.append(_q(k) + ":" + self.value(v))
        saved = "{" + ",".join(parts) + "}"
        if n.retained is None:
            retained = "null"
        else:
            parts = []
            for k, v in n.retained.items():
                parts.append(_q(str(k)) + ":" + self.tensor(v))
            retained = "{" + ",".join(parts) + "}"
        var = n.variable
        self.nodes[idx] = _NODE % (s, _q(n.name), _q(n.prim), n.n_outputs, meta, nexts, saved, retained,
                                   "null" if var is None else self.tensor(var))
        return s

    def value(self, v) -> str:
        if v.__class__ is SavedTensor:
            return _SAVED % (self.tensor(v.tensor), v.version, _BOOL_JSON[v.is_output], _ints(v.shape),
                             _q(v.dtype))
        if v is None:
            return "null"
        if v is True or v is False:
            return _BOOL_JSON[v]
        if isinstance(v, str):
            return _q(v)
        if isinstance(v, (int, np.integer)):
            return int.__repr__(int(v))
        if isinstance(v, (float, np.floating)):
            v = float(v)
            return float.__repr__(v) if math.isfinite(v) else f'{{"float":{_q(repr(v))}}}'
        if isinstance(v, Tensor):
            return f'{{"tensor":{self.tensor(v)}}}'
        if isinstance(v, Node):
            return f'{{"node":{self.node(v)}}}'
        if isinstance(v, np.ndarray):
            return f'{{"array":{self.array(v)}}}'
        if isinstance(v, tuple):
            return '{"tuple":[' + ",".join([self.value(x) for x in v]) + "]}"
        if isinstance(v, list):
            return "[" + ",".join([self.value(x) for x in v]) + "]"
        if isinstance(v, np.dtype):
            return f'{{"np_dtype":{_q(v.name)}}}'
        raise TypeError(f"cannot serialise a value of type {type(v).__name__}")


def _dense(a: np.ndarray) -> bool:
    return a.size * a.itemsize == _span(a)


def _span(a: np.ndarray) -> int:
    if a.size == 0:
        return 0
    return sum((n - 1) * abs(s) for n, s in zip(a.shape, a.strides)) + a.itemsize


def _raw(own: np.ndarray) -> memoryview:
    """The bytes of a dense array in memory order, without copying (the old writer's
    ``np.ravel(own, order="K").tobytes()``, minus the copy)."""
    if not own.flags.c_contiguous:
        own = np.ravel(own, order="K")  # Fortran order or permuted axes: a view, in memory order
    if own.dtype.kind == "V":  # bfloat16 (an extension type) has no buffer format: its bytes through a uint8 view
        return memoryview(own.reshape(-1).view(np.uint8))
    return memoryview(own).cast("B")


def dump_parts(state: State) -> list[bytes | memoryview]:
    """The serialised state as pieces whose concatenation is exactly ``dumps(state)``: first the magic, the
    header length and the header (``bytes``), then each non-empty array buffer as a byte-format
    ``memoryview`` of the array's own memory (no copy; arrays whose memory numpy does not own or that have
    gaps are copied first, as ``dumps`` always did).

    The views alias the state's live arrays: write them out (or join them) before anything modifies the
    state again, or the stored bytes may mix two versions. Send them with a vectored write or
    ``b"".join`` them."""
    w = _Writer()
    tensor = w.tensor
    names = ",".join([_q(name) + ":" + tensor(t) for name, t in state.tensors.items()])
    parts: list[bytes | memoryview] = [b""]
    buffers = []
    pos = 0
    for own in w.buffer_objs:
        n = own.nbytes
        buffers.append(_BUFFER % (pos, n, _DTYPE_JSON[own.dtype]))
        if n:
            parts.append(_raw(own))
            pos += n
    head = (_HEADER % (_VERSION, names, state.backward_passes, ",".join(map(_q, sorted(state.warned))),
                       state.counter, ",".join([str(vc[0]) for vc in w.counter_objs]), ",".join(w.tensors),
                       ",".join(w.nodes), ",".join(buffers)))
    if state.functions:  # plain data (names and an op list); absent when there are none (the format is unchanged)
        head = head[:-1] + ',"functions":' + json.dumps({n: f.to_json() for n, f in state.functions.items()},
                                                        separators=(",", ":")) + "}"
    if state.generator is not None or state.generators:  # plain data (engine.generator); absent when untouched
        head = head[:-1] + ',"generators":' + json.dumps(
            {"default": None if state.generator is None else state.generator.to_plain(),
             "named": {n: g.to_plain() for n, g in state.generators.items()}}, separators=(",", ":")) + "}"
    head = head.encode("ascii")
    parts[0] = MAGIC + _LEN.pack(len(head)) + head
    return parts


def dumps(state: State) -> bytes:
    """The serialised state as one ``bytes`` object (``b"".join(dump_parts(state))``)."""
    return b"".join(dump_parts(state))


def loads(blob: bytes) -> State:
    """Read a state written by ``dumps`` (this release's or the previous one's: the format is unchanged).
    Anything malformed raises ``CorruptStateError``; nothing in the blob is executed."""
    try:
        return _loads(blob)
    except CorruptStateError:
        raise
    except Exception as exc:  # noqa: BLE001 - anything malformed is reported as corrupt state
        raise CorruptStateError(f"cannot read the stored session state: {exc}") from exc


_CREATIONS = (VIEW_DEFAULT, VIEW_MULTI, VIEW_NO_GRAD)


def _bad(what: str, v=None):
    raise CorruptStateError(f"bad {what} in the stored session state: {v!r}")


_decode = json.JSONDecoder().decode


def _loads(blob: bytes) -> State:
    # Every reference is checked to be a non-negative int (an index past the end raises IndexError, reported
    # as corrupt state), scalars to have their type, buffers to tile the data exactly, backward functions to
    # exist. Lookups of missing keys and wrong container types raise and are reported the same way.
    if blob[:4] != MAGIC:
        raise CorruptStateError("not a gradserve state (bad magic)")
    if len(blob) < 12:
        raise CorruptStateError("truncated state (no header length)")
    (hlen,) = _LEN.unpack(blob[4:12])
    if 12 + hlen > len(blob):
        raise CorruptStateError("truncated state (header)")
    header = _decode(bytes(blob[12:12 + hlen]).decode("utf-8"))
    if header.__class__ is not dict or header.get("version") != _VERSION:
        raise CorruptStateError("not a version 1 state header")
    data = memoryview(blob)[12 + hlen:]
    NP = D.NP_DTYPES
    buffers = []
    pos = 0
    for b in header["buffers"]:
        dt = NP[b["dtype"]]
        nbytes = b["nbytes"]
        if b["offset"] != pos or nbytes.__class__ is not int or nbytes < 0 or pos + nbytes > len(data) \
                or nbytes % dt.itemsize:
            _bad("buffer extent", b)
        buffers.append(np.frombuffer(data, dt, nbytes // dt.itemsize, pos).copy() if nbytes else np.empty(0, dt))
        pos += nbytes
    if pos != len(data):
        raise CorruptStateError("the stored session state has bytes after its buffers")
    counters = []
    for v in header["counters"]:
        if v.__class__ is not int:
            _bad("version counter", v)
        counters.append([v])
    entries_t = header["tensors"]
    entries_n = header["nodes"]
    tensors = [Tensor.__new__(Tensor) for _ in entries_t]
    nodes = [Node.__new__(Node) for _ in entries_n]

    def tensor(i):
        if i is None:
            return None
        if i.__class__ is not int or i < 0:
            _bad("tensor reference", i)
        return tensors[i]

    def node(i):
        if i is None:
            return None
        if i.__class__ is not int or i < 0:
            _bad("node reference", i)
        return nodes[i]

    def array(r):
        i = r["buf"]
        if i.__class__ is not int or i < 0:
            _bad("buffer reference", i)
        buf = buffers[i]
        dt = NP[r["dtype"]]
        shape = tuple(r["shape"])
        if 0 in shape:
            return np.zeros(shape, dt)
        off, writeable = r["offset"], r["writeable"]
        if off.__class__ is not int or writeable.__class__ is not bool:
            _bad("array", r)
        a = np.ndarray(shape, dt, buffer=buf, offset=off, strides=tuple(r["strides"]))
        if not writeable:
            a.flags.writeable = False
        return a

    def value(v):
        if v.__class__ is list:
            return [value(x) for x in v]
        if v.__class__ is dict:
            if "saved" in v:
                s = SavedTensor.__new__(SavedTensor)
                s.is_output, s.version = v["is_output"], v["version"]
                s.tensor = tensor(v["saved"])  # after is_output: a node's own output is held weakly
                s.shape, s.dtype = tuple(v["shape"]), v["dtype"]
                if s.version.__class__ is not int or s.is_output.__class__ is not bool or s.dtype not in NP:
                    _bad("saved tensor", v)
                return s
            if "tensor" in v:
                return tensor(v["tensor"])
            if "node" in v:
                return node(v["node"])
            if "array" in v:
                return array(v["array"])
            if "tuple" in v:
                return tuple(value(x) for x in v["tuple"])
            if "float" in v:
                return float(v["float"])
            if "np_dtype" in v:
                return NP[v["np_dtype"]]
            raise CorruptStateError(f"unknown value encoding {sorted(v)}")
        return v

    for t, e in zip(tensors, entries_t):
        t.data = array(e["array"])
        t._requires_grad, t.retains_grad, t._wrapped = e["requires_grad"], e["retains_grad"], e["wrapped"]
        t.output_nr, t.grad_accumulations, vc = e["output_nr"], e["grad_accumulations"], e["vc"]
        if t._requires_grad.__class__ is not bool or t.retains_grad.__class__ is not bool \
                or t._wrapped.__class__ is not bool or t.output_nr.__class__ is not int \
                or t.grad_accumulations.__class__ is not int or vc.__class__ is not int or vc < 0:
            _bad("tensor", e)
        t._vc = counters[vc]
        t._grad = tensor(e["grad"])
        t._base = tensor(e["base"])
        t._grad_fn = node(e["grad_fn"])
        view = e.get("view")  # absent in states saved before views recorded how they were made
        if view is None:
            t._creation, t._attr_version = (None, 0) if t._base is None else (VIEW_DEFAULT, t._vc[0])
        elif view.__class__ is not list or len(view) != 2 or view[0] not in _CREATIONS \
                or view[1].__class__ is not int:
            _bad("view", view)
        else:
            t._creation, t._attr_version = view
        t._accumulator = node(e["accumulator"])
        t._fw_grad = None  # tangents live only inside a dual level, which never outlasts a request
    for n, e in zip(nodes, entries_n):
        n.name, n.prim, n.n_outputs = e["name"], e["prim"], e["n_outputs"]
        if n.name.__class__ is not str or n.n_outputs.__class__ is not int \
                or (n.prim not in PRIMS and n.prim != ACCUMULATE_GRAD.name):
            _bad("backward function", e)
        n.input_meta = tuple(None if m is None else (tuple(m[0]), NP[m[1]]) for m in e["input_meta"])
        nexts = []
        for x in e["next"]:
            if x is None:
                nexts.append((None, 0))
            elif x[1].__class__ is not int:
                _bad("edge", x)
            else:
                nexts.append((node(x[0]), x[1]))
        n.next_functions = tuple(nexts)
        n._needs = None  # computed from next_functions on first use
        n.saved = {k: value(v) for k, v in e["saved"].items()}
        retained = e["retained"]
        n.retained = None if retained is None else {int(k): tensor(v) for k, v in retained.items()}
        n.variable = tensor(e["variable"])
    state = State()
    state.tensors = {name: tensor(i) for name, i in header["names"].items()}
    state.backward_passes, state.counter = header["backward_passes"], header["counter"]
    state.warned = set(header["warned"])
    functions = header.get("functions", {})
    if functions.__class__ is not dict:
        _bad("functions", functions)
    for name, f in functions.items():
        try:
            if f.__class__ is not dict:
                _bad("function", name)
            if set(f) == {"autograd_function"}:  # a custom autograd.Function (engine.custom_function)
                state.functions[name] = custom_function.from_stored(f["autograd_function"])
            else:
                state.functions[name] = function_def({**f, "ops": from_json(f.get("ops"))})
        except EngineError:
            _bad("function", name)
    gens = header.get("generators")
    if gens is not None:
        try:
            d = gens["default"]
            state.generator = None if d is None else Generator.from_plain(d)
            state.generators = {str(n): Generator.from_plain(g) for n, g in gens["named"].items()}
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
            _bad("generators", gens)
    if state.backward_passes.__class__ is not int or state.counter.__class__ is not int \
            or any(w.__class__ is not str for w in state.warned):
        _bad("session counters", header)
    return state
