"""Write a session's whole state out and read it back, without pickle.

Format: ``b"GSV1"``, an 8-byte little-endian header length, a JSON header, then the raw bytes of every
distinct array buffer. The header lists tensors, graph nodes (op name, input references, saved slots),
shared version counters and names. Views are restored as views of the same buffer, so storage sharing
(views, ``detach()``) survives the round trip. Loading executes no code: only JSON and numpy buffers.
"""

from __future__ import annotations

import json
import math
import struct

import numpy as np

from . import dtypes as D
from .errors import EngineError
from .node import Node, SavedTensor
from .program import State
from .tensor import Tensor

MAGIC = b"GSV1"


class CorruptStateError(EngineError):
    code = "corrupt_state"
    exception = "ValueError"


def _owner(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


class _Writer:
    def __init__(self):
        self.tensors: dict[int, dict] = {}
        self.tensor_objs: list[Tensor] = []
        self.nodes: dict[int, dict] = {}
        self.node_objs: list[Node] = []
        self.counters: dict[int, int] = {}
        self.counter_objs: list[list] = []
        self.buffers: dict[int, int] = {}
        self.buffer_objs: list[np.ndarray] = []

    def array(self, a: np.ndarray) -> dict:
        own = _owner(a)
        if own.base is not None or not (own.flags.c_contiguous or own.flags.f_contiguous
                                        or _dense(own)):
            own = a = np.array(a, copy=True)
        key = id(own)
        if key not in self.buffers:
            self.buffers[key] = len(self.buffer_objs)
            self.buffer_objs.append(own)
        lo = own.__array_interface__["data"][0]
        off = a.__array_interface__["data"][0] - lo if a.size else 0
        return {"buf": self.buffers[key], "dtype": D.of_array(a), "shape": list(a.shape),
                "strides": list(a.strides), "offset": off, "writeable": bool(a.flags.writeable)}

    def counter(self, vc: list) -> int:
        key = id(vc)
        if key not in self.counters:
            self.counters[key] = len(self.counter_objs)
            self.counter_objs.append(vc)
        return self.counters[key]

    def tensor(self, t: Tensor | None):
        if t is None:
            return None
        key = id(t)
        if key in self.tensors:
            return self.tensors[key]["id"]
        entry = {"id": len(self.tensor_objs)}
        self.tensors[key] = entry
        self.tensor_objs.append(t)
        entry.update(array=self.array(t.data), requires_grad=t.requires_grad, output_nr=t.output_nr,
                     vc=self.counter(t._vc), retains_grad=t.retains_grad, grad_accumulations=t.grad_accumulations,
                     wrapped=t._wrapped)
        entry["grad"] = self.tensor(t._grad)
        entry["base"] = self.tensor(t._base)
        entry["grad_fn"] = self.node(t.grad_fn)
        entry["accumulator"] = self.node(t._accumulator)
        return entry["id"]

    def node(self, n: Node | None):
        if n is None:
            return None
        key = id(n)
        if key in self.nodes:
            return self.nodes[key]["id"]
        entry = {"id": len(self.node_objs)}
        self.nodes[key] = entry
        self.node_objs.append(n)
        entry.update(name=n.name, prim=n.prim, n_outputs=n.n_outputs,
                     input_meta=[None if m is None else [list(m[0]), np.dtype(m[1]).name] for m in n.input_meta])
        entry["next"] = [None if c is None else [self.node(c), nr] for c, nr in n.next_functions]
        entry["saved"] = {k: self.value(v) for k, v in n.saved.items()}
        entry["retained"] = {str(k): self.tensor(v) for k, v in (n.retained or {}).items()} \
            if n.retained is not None else None
        entry["variable"] = self.tensor(n.variable)
        return entry["id"]

    def value(self, v):
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, (float, np.floating)):
            v = float(v)
            return v if math.isfinite(v) else {"float": repr(v)}
        if isinstance(v, SavedTensor):
            return {"saved": self.tensor(v.tensor), "version": v.version, "is_output": v.is_output,
                    "shape": list(v.shape), "dtype": v.dtype}
        if isinstance(v, Tensor):
            return {"tensor": self.tensor(v)}
        if isinstance(v, Node):
            return {"node": self.node(v)}
        if isinstance(v, np.ndarray):
            return {"array": self.array(v)}
        if isinstance(v, tuple):
            return {"tuple": [self.value(x) for x in v]}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, np.dtype):
            return {"np_dtype": v.name}
        raise TypeError(f"cannot serialise a value of type {type(v).__name__}")


def _dense(a: np.ndarray) -> bool:
    return a.size * a.itemsize == _span(a)


def _span(a: np.ndarray) -> int:
    if a.size == 0:
        return 0
    return sum((n - 1) * abs(s) for n, s in zip(a.shape, a.strides)) + a.itemsize


def dumps(state: State) -> bytes:
    w = _Writer()
    names = {name: w.tensor(t) for name, t in state.tensors.items()}
    header = {
        "version": 1,
        "names": names,
        "backward_passes": state.backward_passes,
        "warned": sorted(state.warned),
        "counter": state.counter,
        "counters": [vc[0] for vc in w.counter_objs],
        "tensors": [w.tensors[id(t)] for t in w.tensor_objs],
        "nodes": [w.nodes[id(n)] for n in w.node_objs],
        "buffers": [],
    }
    chunks = []
    pos = 0
    for own in w.buffer_objs:
        raw = np.ravel(own, order="K").tobytes() if own.size else b""
        header["buffers"].append({"offset": pos, "nbytes": len(raw), "dtype": D.of_array(own)})
        chunks.append(raw)
        pos += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<Q", len(head)) + head + b"".join(chunks)


def loads(blob: bytes) -> State:
    try:
        return _loads(blob)
    except CorruptStateError:
        raise
    except Exception as exc:  # noqa: BLE001 - anything malformed is reported as corrupt state
        raise CorruptStateError(f"cannot read the stored session state: {exc}") from exc


def _loads(blob: bytes) -> State:
    if blob[:4] != MAGIC:
        raise CorruptStateError("not a gradserve state (bad magic)")
    (hlen,) = struct.unpack("<Q", blob[4:12])
    header = json.loads(blob[12:12 + hlen])
    data = memoryview(blob)[12 + hlen:]
    buffers = []
    for b in header["buffers"]:
        raw = data[b["offset"]:b["offset"] + b["nbytes"]]
        buffers.append(np.frombuffer(raw, dtype=D.NP_DTYPES[b["dtype"]]).copy())
    counters = [[v] for v in header["counters"]]

    def array(ref):
        buf = buffers[ref["buf"]]
        dt = D.NP_DTYPES[ref["dtype"]]
        shape = tuple(ref["shape"])
        if not buf.size or 0 in shape:
            return np.zeros(shape, dt)
        a = np.ndarray(shape, dt, buffer=buf, offset=ref["offset"], strides=tuple(ref["strides"]))
        if not ref["writeable"]:
            a.flags.writeable = False
        return a

    tensors = [Tensor.__new__(Tensor) for _ in header["tensors"]]
    nodes = [Node.__new__(Node) for _ in header["nodes"]]

    def tensor(i):
        return None if i is None else tensors[i]

    def node(i):
        return None if i is None else nodes[i]

    def value(v):
        if isinstance(v, list):
            return [value(x) for x in v]
        if isinstance(v, dict):
            if "saved" in v:
                s = SavedTensor.__new__(SavedTensor)
                s.tensor, s.version, s.is_output = tensor(v["saved"]), v["version"], v["is_output"]
                s.shape, s.dtype = tuple(v["shape"]), v["dtype"]
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
                return np.dtype(v["np_dtype"])
            raise CorruptStateError(f"unknown value encoding {sorted(v)}")
        return v

    for t, e in zip(tensors, header["tensors"]):
        t.data = array(e["array"])
        t.requires_grad = e["requires_grad"]
        t.output_nr = e["output_nr"]
        t._vc = counters[e["vc"]]
        t.retains_grad = e["retains_grad"]
        t.grad_accumulations = e["grad_accumulations"]
        t._wrapped = e["wrapped"]
        t._grad = tensor(e["grad"])
        t._base = tensor(e["base"])
        t.grad_fn = node(e["grad_fn"])
        t._accumulator = node(e["accumulator"])
    for n, e in zip(nodes, header["nodes"]):
        n.name, n.prim, n.n_outputs = e["name"], e["prim"], e["n_outputs"]
        n.input_meta = tuple(None if m is None else (tuple(m[0]), np.dtype(m[1])) for m in e["input_meta"])
        n.next_functions = tuple((None, 0) if x is None else (node(x[0]), x[1]) for x in e["next"])
        n.saved = {k: value(v) for k, v in e["saved"].items()}
        n.retained = None if e["retained"] is None else {int(k): tensor(v) for k, v in e["retained"].items()}
        n.variable = tensor(e["variable"])
    state = State()
    state.tensors = {name: tensors[i] for name, i in header["names"].items()}
    state.backward_passes = header["backward_passes"]
    state.warned = set(header["warned"])
    state.counter = header["counter"]
    return state
