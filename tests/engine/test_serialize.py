"""State serialisation: ``dump_parts`` / ``dumps`` / ``loads``.

The writer emits the GSV1 header's JSON text directly; ``reference_dumps`` below is the previous release's
writer (dicts and ``json.dumps``), kept as the definition of the format: the new writer must produce the same
bytes, so blobs stored by either release load in the other. ``test_program.py`` already checks a round trip
of a linear graph continuing exactly; these tests cover the other tensor kinds, views and version counters,
zero-copy buffers and malformed blobs.
"""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import gradserve_server.engine as E
from gradserve_server.engine import dtypes as D
from gradserve_server.engine.errors import FREED_GRAPH, EngineError
from gradserve_server.engine.node import Node, SavedTensor
from gradserve_server.engine.program import State, run_program
from gradserve_server.engine.serialize import CorruptStateError, dump_parts
from gradserve_server.engine.tensor import Tensor

from .test_properties import SETUP as PROPERTY_SETUP
from .test_properties import program_ops

# ----- the previous release's writer: the GSV1 format's reference ------------------------------------------

def _ref_dense(a):
    span = sum((n - 1) * abs(s) for n, s in zip(a.shape, a.strides)) + a.itemsize if a.size else 0
    return a.size * a.itemsize == span


class _RefWriter:
    def __init__(self):
        self.tensors, self.tensor_objs, self.nodes, self.node_objs = {}, [], {}, []
        self.counters, self.counter_objs, self.buffers, self.buffer_objs = {}, [], {}, []

    def array(self, a):
        own = a
        while isinstance(own.base, np.ndarray):
            own = own.base
        if own.base is not None or not (own.flags.c_contiguous or own.flags.f_contiguous or _ref_dense(own)):
            own = a = np.array(a, copy=True)
        if id(own) not in self.buffers:
            self.buffers[id(own)] = len(self.buffer_objs)
            self.buffer_objs.append(own)
        lo = own.__array_interface__["data"][0]
        off = a.__array_interface__["data"][0] - lo if a.size else 0
        return {"buf": self.buffers[id(own)], "dtype": D.of_array(a), "shape": list(a.shape),
                "strides": list(a.strides), "offset": off, "writeable": bool(a.flags.writeable)}

    def counter(self, vc):
        if id(vc) not in self.counters:
            self.counters[id(vc)] = len(self.counter_objs)
            self.counter_objs.append(vc)
        return self.counters[id(vc)]

    def tensor(self, t):
        if t is None:
            return None
        if id(t) in self.tensors:
            return self.tensors[id(t)]["id"]
        entry = self.tensors[id(t)] = {"id": len(self.tensor_objs)}
        self.tensor_objs.append(t)
        entry.update(array=self.array(t.data), requires_grad=t._requires_grad, output_nr=t.output_nr,
                     vc=self.counter(t._vc), retains_grad=t.retains_grad, grad_accumulations=t.grad_accumulations,
                     wrapped=t._wrapped)
        entry["grad"] = self.tensor(t._grad)
        entry["base"] = self.tensor(t._base)
        entry["grad_fn"] = self.node(t._grad_fn)
        entry["accumulator"] = self.node(t._accumulator)
        entry["view"] = None if t._base is None else [t._creation or "default", t._attr_version]
        return entry["id"]

    def node(self, n):
        if n is None:
            return None
        if id(n) in self.nodes:
            return self.nodes[id(n)]["id"]
        entry = self.nodes[id(n)] = {"id": len(self.node_objs)}
        self.node_objs.append(n)
        entry.update(name=n.name, prim=n.prim, n_outputs=n.n_outputs,
                     input_meta=[None if m is None else [list(m[0]), np.dtype(m[1]).name] for m in n.input_meta])
        entry["next"] = [None if c is None else [self.node(c), nr] for c, nr in n.next_functions]
        entry["saved"] = {k: self.value(v) for k, v in n.saved.items()}
        entry["retained"] = None if n.retained is None else {str(k): self.tensor(v) for k, v in n.retained.items()}
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
        raise TypeError(type(v).__name__)


def reference_dumps(state: State) -> bytes:
    w = _RefWriter()
    names = {name: w.tensor(t) for name, t in state.tensors.items()}
    header = {"version": 1, "names": names, "backward_passes": state.backward_passes,
              "warned": sorted(state.warned), "counter": state.counter,
              "counters": [vc[0] for vc in w.counter_objs], "tensors": [w.tensors[id(t)] for t in w.tensor_objs],
              "nodes": [w.nodes[id(n)] for n in w.node_objs], "buffers": []}
    chunks, pos = [], 0
    for own in w.buffer_objs:
        raw = np.ravel(own, order="K").tobytes() if own.size else b""
        header["buffers"].append({"offset": pos, "nbytes": len(raw), "dtype": D.of_array(own)})
        chunks.append(raw)
        pos += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"GSV1" + struct.pack("<Q", len(head)) + head + b"".join(chunks)


# ----- states ----------------------------------------------------------------------------------------------

def T(name, data, **kw):
    return {"op": "tensor", "out": name, "args": [data], "kwargs": kw}


def run(state, ops, **kw):
    run_program(state, ops, **kw)
    return state


def tiny() -> State:
    return run(State(), [T("x", 2.0, requires_grad=True), T("w", 3.0, requires_grad=True),
                         {"op": "mul", "out": "y", "args": ["w", "x"]}, {"op": "sum", "out": "s", "args": ["y"]},
                         {"op": "backward", "args": ["s"]}])


def kinds() -> State:
    """float32/float64/int64/bool, 0-d and empty tensors, views (basic slice, transpose, detach) sharing
    storage and version counters, a retained non-leaf grad, a live graph (retain_graph) and a freed one."""
    return run(State(), [
        T("x", [1.0, -2.0, 3.0, 4.0], requires_grad=True),
        T("m", [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype="float64", requires_grad=True),
        T("i", [0, 2, 1], dtype="int64"), T("b", [True, False, True]), T("z", 1.5), T("e", []),
        {"op": "getitem", "out": "xv", "args": ["x", "1:3"]},     # a view of a leaf
        {"op": "mul", "out": "h", "args": ["x", 2.0]},
        {"op": "retain_grad", "args": ["h"]},
        {"op": "getitem", "out": "hs", "args": ["h", "::2"]},     # a strided (non-contiguous) view
        {"op": "transpose", "out": "mt", "args": ["m", 0, 1]},  # a non-contiguous view
        {"op": "detach", "out": "hd", "args": ["h"]},             # shares storage and version with h
        {"op": "mul", "out": "p", "args": ["mt", "mt"]}, {"op": "sum", "out": "ps", "args": ["p"]},
        {"op": "exp", "out": "ex", "args": ["hs"]}, {"op": "sum", "out": "es", "args": ["ex"]},
        {"op": "backward", "args": ["es"], "kwargs": {"retain_graph": True}},
        {"op": "backward", "args": ["ps"]},                       # frees p's graph
    ])


def big() -> State:
    s = State()
    rng = np.random.default_rng(0)
    s.tensors["x"] = Tensor(rng.random(52_428, dtype=np.float32), requires_grad=True)
    s.tensors["w"] = Tensor(rng.random(52_428, dtype=np.float32), requires_grad=True)
    return run(s, [{"op": "mul", "out": "y", "args": ["w", "x"]}, {"op": "sum", "out": "s", "args": ["y"]},
                   {"op": "backward", "args": ["s"]}])


def layouts() -> State:
    """Owners that are Fortran-ordered, permuted but dense, read-only, or memory numpy does not own."""
    s = State()
    s.tensors["f"] = Tensor(np.asfortranarray(np.arange(12.0).reshape(3, 4)))
    s.tensors["p"] = Tensor(np.empty_like(np.zeros((2, 3, 4)).transpose(1, 0, 2)))
    s.tensors["p"].data[...] = np.arange(24.0).reshape(3, 2, 4)
    ro = np.arange(5, dtype=np.int64)
    ro.flags.writeable = False
    s.tensors["ro"] = Tensor(ro)
    s.tensors["fb"] = Tensor(np.frombuffer(bytearray(np.arange(4, dtype=np.float32).tobytes()), np.float32))
    s.tensors["fv"] = Tensor(s.tensors["f"].data[1:, ::2])
    return s


def views() -> State:
    """How views were made (split/unbind outputs, a no_grad view), a view made stale by an in-place change
    of its base, a CopySlices base, and a fused double-backward node."""
    return run(State(), [
        T("x", [[1.0, 2.0], [3.0, 4.0]], requires_grad=True), {"op": "mul", "out": "y", "args": ["x", 2.0]},
        {"op": "unbind", "out": "u", "args": ["y"]}, {"op": "split", "out": "p", "args": ["y", 1]},
        {"op": "getitem", "out": "ng", "args": ["x", 0], "no_grad": True},
        {"op": "select", "out": "s", "args": ["y", 1, 0]}, {"op": "mul_", "args": ["y", 3.0]},
        T("c", [0.0, 0.0, 0.0]), T("w", 5.0, requires_grad=True), {"op": "setitem", "args": ["c", 1, "w"]},
        {"op": "gelu", "out": "g", "args": ["x"]}, {"op": "sum", "out": "gs", "args": ["g"]},
        {"op": "grad", "out": "dg", "args": [["gs"], ["x"]], "kwargs": {"create_graph": True}},
    ])


STATES = {"empty": State, "tiny": tiny, "kinds": kinds, "big": big, "layouts": layouts, "views": views}


def test_views_keep_how_they_were_made_and_stay_stale_across_a_round_trip():
    s = views()
    t = E.loads(E.dumps(s)).tensors
    assert [t[n]._creation for n in ("u_0", "p_1", "ng", "s")] == ["multi", "multi", "no_grad", "default"]
    assert t["ng"].requires_grad and t["ng"].is_leaf
    assert t["c"].grad_fn.name == "CopySlices" and t["dg"].grad_fn.name == "GeluBackwardBackward0"
    # the base changed after s was made: s regenerates its history on use, after loading as before
    assert t["s"]._vc[0] != t["s"]._attr_version
    assert t["s"].grad_fn.name == s.tensors["s"].grad_fn.name == "AsStridedBackward0"
    # an unbind output whose base changed is refused, with torch's message
    with pytest.raises(EngineError, match="Output 0 of Unbind is a view and its base or another view"):
        run_program(E.loads(E.dumps(s)), [{"op": "mul", "out": "z", "args": ["u_0", 2.0]}])
    ops = [{"op": "sum", "out": "q", "args": ["dg"]}, {"op": "backward", "args": ["q"]},
           {"op": "sum", "out": "cs", "args": ["c"]}, {"op": "backward", "args": ["cs"]}]
    a, b = run(views(), ops), run(E.loads(E.dumps(views())), ops)
    assert a.tensors["x"].grad.data.tolist() == b.tensors["x"].grad.data.tolist()
    assert b.tensors["w"].grad.data.tolist() == 1.0


@pytest.mark.parametrize("make", STATES.values(), ids=STATES.keys())
def test_parts_join_to_dumps_and_to_the_previous_releases_bytes(make):
    s = make()
    parts = dump_parts(s)
    assert isinstance(parts[0], bytes) and all(isinstance(p, memoryview) and p.format == "B" for p in parts[1:])
    blob = E.dumps(s)
    assert b"".join(parts) == blob == reference_dumps(s)
    assert E.dumps(E.loads(blob)) == blob


SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))


@SETTINGS
@given(ops=st.lists(program_ops, max_size=8))
def test_random_sessions_serialise_as_before_and_round_trip(ops):
    s = run(State(), PROPERTY_SETUP)
    for op in ops:  # grads, freed graphs, in-place updates, views, warnings
        try:
            run_program(s, [op])
        except EngineError:
            pass
    blob = E.dumps(s)
    assert blob == reference_dumps(s) == b"".join(dump_parts(s))
    assert E.dumps(E.loads(blob)) == blob


# ----- zero copy -------------------------------------------------------------------------------------------

def _owner(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def test_contiguous_buffers_are_views_of_the_live_arrays():
    s = big()
    parts = dump_parts(s)
    assert len(parts[0]) < 8192  # the header only
    arrays = {id(_owner(t.data)): _owner(t.data) for t in s.tensors.values()}
    arrays.update({id(_owner(t.grad.data)): _owner(t.grad.data) for t in (s.tensors["x"], s.tensors["w"])})
    big_parts = [p for p in parts[1:] if p.nbytes > 1000]
    assert len(big_parts) == 5  # x, w, y and two grads
    for p in big_parts:
        assert isinstance(p.obj, np.ndarray) and any(p.obj is a for a in arrays.values())
        assert any(np.shares_memory(np.frombuffer(p, np.uint8), a) for a in arrays.values())
    # the views alias the state: a later in-place change shows through (callers write them out first)
    x = s.tensors["x"].data
    view = next(p for p in parts[1:] if np.shares_memory(np.frombuffer(p, np.uint8), x))
    x[0] = 42.0
    assert np.frombuffer(view, np.float32)[0] == 42.0


def test_fortran_and_permuted_owners_are_views_too_and_foreign_memory_is_copied():
    s = layouts()
    parts = dump_parts(s)
    raw = [np.frombuffer(p, np.uint8) for p in parts[1:]]
    for name in ("f", "p", "ro"):
        assert sum(np.shares_memory(r, s.tensors[name].data) for r in raw) == 1, name
    assert not any(np.shares_memory(r, s.tensors["fb"].data) for r in raw)  # a bytearray's memory: copied
    s2 = E.loads(b"".join(parts))
    for name, t in s.tensors.items():
        assert np.array_equal(s2.tensors[name].data, t.data) and s2.tensors[name].data.strides == t.data.strides
    assert not s2.tensors["ro"].data.flags.writeable and s2.tensors["f"].data.flags.writeable
    assert np.shares_memory(s2.tensors["fv"].data, s2.tensors["f"].data)


def test_empty_buffers_are_left_out():
    s = run(State(), [T("e", []), T("z", [[]], dtype="int64")])
    parts = dump_parts(s)
    assert len(parts) == 1
    s2 = E.loads(b"".join(parts))
    assert s2.tensors["e"].shape == (0,) and s2.tensors["z"].shape == (1, 0) and s2.tensors["z"].dtype == "int64"


# ----- round trip ------------------------------------------------------------------------------------------

def test_round_trip_keeps_values_dtypes_views_versions_and_grads():
    s = kinds()
    s2 = E.loads(E.dumps(s))
    assert list(s2.tensors) == list(s.tensors)
    for name, t in s.tensors.items():
        u = s2.tensors[name]
        assert u.dtype == t.dtype and u.data.shape == t.data.shape and u.data.strides == t.data.strides, name
        assert np.array_equal(u.data, t.data) and u.version == t.version, name
        assert (u.requires_grad, u.is_leaf, u.retains_grad, u.grad_accumulations) == \
            (t.requires_grad, t.is_leaf, t.retains_grad, t.grad_accumulations), name
        assert (t._grad is None) == (u._grad is None), name
        assert t._grad is None or np.array_equal(u._grad.data, t._grad.data), name
    t2 = s2.tensors
    assert {n: t2[n].dtype for n in ("x", "m", "i", "b", "z", "e")} == \
        {"x": "float32", "m": "float64", "i": "int64", "b": "bool", "z": "float32", "e": "float32"}
    assert t2["z"].shape == () and t2["e"].shape == (0,)
    assert not t2["hs"].data.flags.c_contiguous and not t2["mt"].data.flags.c_contiguous
    # storage and version counters are shared as before: views and detach() results
    for a, b in (("xv", "x"), ("hs", "h"), ("hd", "h"), ("mt", "m")):
        assert np.shares_memory(t2[a].data, t2[b].data) and t2[a]._vc is t2[b]._vc, (a, b)
    assert not np.shares_memory(t2["x"].data, t2["h"].data)
    run(s2, [{"op": "mul_", "args": ["hd", 10.0]}])
    assert t2["h"].version == t2["hs"].version == s.tensors["h"].version + 1
    assert t2["h"].data.tolist() == (s.tensors["h"].data * 10).tolist()
    assert s.tensors["h"].version == s.tensors["hd"].version  # the original is untouched


def test_loaded_graph_continues_and_freed_saved_tensors_still_fail():
    s = kinds()
    s2 = E.loads(E.dumps(s))
    for st_ in (s, s2):
        # the retained graph of es runs again; h's grad is retained; x's grad accumulates
        run(st_, [{"op": "backward", "args": ["es"]}])
    for name in ("x", "h", "m"):
        assert np.array_equal(s2.tensors[name]._grad.data, s.tensors[name]._grad.data), name
    assert s2.tensors["x"].grad_accumulations == s.tensors["x"].grad_accumulations == 2
    assert s2.backward_passes == s.backward_passes == 3
    for st_ in (s, s2):
        for root in ("es", "ps"):  # both graphs have been freed now
            with pytest.raises(EngineError) as ei:
                run(st_, [{"op": "backward", "args": [root]}])
            assert ei.value.code == "graph_freed" and ei.value.message == FREED_GRAPH
            assert "Trying to backward through the graph a second time" in ei.value.message


def test_in_place_change_after_reload_is_caught_by_the_saved_version():
    s = run(State(), [T("a", [1.0, 2.0], requires_grad=True), {"op": "mul", "out": "c", "args": ["a", 1.0]},
                      {"op": "pow", "out": "p", "args": ["c", 2]}, {"op": "sum", "out": "q", "args": ["p"]}])
    s2 = E.loads(E.dumps(s))
    run(s2, [{"op": "mul_", "args": ["c", 2.0]}])
    with pytest.raises(EngineError) as ei:
        run(s2, [{"op": "backward", "args": ["q"]}])
    assert ei.value.code == "version_mismatch"
    s3 = E.loads(E.dumps(s))
    run(s3, [{"op": "backward", "args": ["q"]}])
    assert s3.tensors["a"].grad.data.tolist() == [2.0, 4.0]


def test_warnings_counters_and_nonfinite_saved_scalars_survive():
    s = run(State(), [T("x", [1.0, 2.0], requires_grad=True), {"op": "pow", "out": "y", "args": ["x", math.inf]},
                      {"op": "pow", "out": "n", "args": ["x", -math.inf]},
                      {"op": "pow", "out": "u", "args": ["x", 0.1]}, {"op": "mul", "out": "h", "args": ["x", 2.0]},
                      {"op": "sum", "out": "z", "args": ["h"]}, {"op": "backward", "args": ["z"]}])
    s.tensors["y"].grad_fn.saved["nan"] = math.nan
    s.warned.update({"some warning", "another, with \"quotes\" and \u00e9"})
    s.counter = 7
    s2 = E.loads(E.dumps(s))
    assert s2.warned == s.warned and s2.counter == 7 and s2.backward_passes == 1
    saved = {name: s2.tensors[name].grad_fn.saved for name in ("y", "n", "u")}
    assert (saved["y"]["exponent"], saved["n"]["exponent"], saved["u"]["exponent"]) == (math.inf, -math.inf, 0.1)
    assert math.isnan(saved["y"]["nan"])
    assert E.dumps(s2) == E.dumps(s) == reference_dumps(s)


# ----- GSV1 compatibility ----------------------------------------------------------------------------------

def _blob(header: dict, data: bytes = b"") -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"GSV1" + struct.pack("<Q", len(head)) + head + data


def _gsv1_leaf() -> bytes:
    """A GSV1 blob written out by hand: a leaf x = [1, 2] (float32, requires grad) with grad [3, 4] and its
    AccumulateGrad node, plus y, a read-only view of x[1:], and an int64 counter k."""
    arr = {"dtype": "float32", "shape": [2], "strides": [4], "offset": 0, "writeable": True}

    def tensor(i, array, vc, **kw):
        return {"id": i, "array": array, "requires_grad": False, "output_nr": 0, "vc": vc, "retains_grad": False,
                "grad_accumulations": 0, "wrapped": False, "grad": None, "base": None, "grad_fn": None,
                "accumulator": None, **kw}

    header = {
        "version": 1, "names": {"x": 0, "y": 2, "k": 3}, "backward_passes": 1, "warned": [], "counter": 0,
        "counters": [2, 0, 0],
        "tensors": [
            tensor(0, {"buf": 0, **arr}, 0, requires_grad=True, grad_accumulations=1, grad=1, accumulator=0),
            tensor(1, {"buf": 1, **arr}, 1),
            tensor(2, {"buf": 0, "dtype": "float32", "shape": [1], "strides": [4], "offset": 4,
                       "writeable": False}, 0, base=0),
            tensor(3, {"buf": 2, "dtype": "int64", "shape": [], "strides": [], "offset": 0, "writeable": True}, 2),
        ],
        "nodes": [{"id": 0, "name": "AccumulateGrad", "prim": "AccumulateGrad", "n_outputs": 1, "input_meta": [],
                   "next": [], "saved": {}, "retained": None, "variable": 0}],
        "buffers": [{"offset": 0, "nbytes": 8, "dtype": "float32"}, {"offset": 8, "nbytes": 8, "dtype": "float32"},
                    {"offset": 16, "nbytes": 8, "dtype": "int64"}],
    }
    data = np.array([1, 2, 3, 4], np.float32).tobytes() + np.array(9, np.int64).tobytes()
    return _blob(header, data)


def test_a_hand_written_gsv1_blob_loads():
    s = E.loads(_gsv1_leaf())
    x, y, k = s.tensors["x"], s.tensors["y"], s.tensors["k"]
    assert x.data.tolist() == [1.0, 2.0] and x.grad.data.tolist() == [3.0, 4.0] and x.requires_grad
    assert x.version == 2 and y.version == 2 and y._vc is x._vc and y._base is x
    assert y._creation == "default" and y._attr_version == 2  # saved before views recorded how they were made
    assert y.data.tolist() == [2.0] and np.shares_memory(x.data, y.data) and not y.data.flags.writeable
    assert k.data.dtype == np.int64 and k.data.shape == () and int(k.data) == 9
    assert x._accumulator.variable is x
    run(s, [{"op": "mul", "out": "h", "args": ["x", "x"]}, {"op": "sum", "out": "z", "args": ["h"]},
            {"op": "backward", "args": ["z"]}])
    assert x.grad.data.tolist() == [5.0, 8.0] and x.grad_accumulations == 2


# ----- malformed blobs -------------------------------------------------------------------------------------

def test_every_truncation_is_corrupt_state():
    blob = E.dumps(tiny())
    for n in range(len(blob)):
        with pytest.raises(CorruptStateError):
            E.loads(blob[:n])
    with pytest.raises(CorruptStateError):
        E.loads(blob + b"\0")  # trailing bytes


@pytest.mark.parametrize("blob", [b"", b"GSV", b"GSV2" + bytes(8), b"\x80\x04\x95" + bytes(20), "GSV1", None,
                                  b"GSV1" + struct.pack("<Q", 2) + b"{]", b"GSV1" + struct.pack("<Q", 4) + b"null",
                                  b"GSV1" + struct.pack("<Q", 2) + b"[]", b"GSV1" + struct.pack("<Q", 1 << 63)],
                         ids=["empty", "short", "magic", "pickle", "str", "none", "json", "null", "list", "hlen"])
def test_bad_magic_lengths_and_json_are_corrupt_state(blob):
    with pytest.raises(CorruptStateError):
        E.loads(blob)


def _edit(edit):
    blob = _gsv1_leaf()
    (hlen,) = struct.unpack("<Q", blob[4:12])
    header = json.loads(blob[12:12 + hlen])
    data = blob[12 + hlen:]
    data = edit(header) or data
    return _blob(header, data)


BAD = {
    "version": lambda h: h.update(version=2),
    "buffer_ref_negative": lambda h: h["tensors"][1]["array"].update(buf=-1),
    "buffer_ref_past_end": lambda h: h["tensors"][1]["array"].update(buf=3),
    "buffer_ref_bool": lambda h: h["tensors"][1]["array"].update(buf=True),
    "tensor_ref_negative": lambda h: h["names"].update(x=-1),
    "tensor_ref_past_end": lambda h: h["tensors"][0].update(grad=4),
    "tensor_ref_string": lambda h: h["tensors"][0].update(grad="1"),
    "node_ref_negative": lambda h: h["tensors"][0].update(accumulator=-1),
    "node_ref_past_end": lambda h: h["tensors"][0].update(grad_fn=1),
    "counter_ref": lambda h: h["tensors"][0].update(vc=3),
    "counter_value": lambda h: h["counters"].__setitem__(0, "2"),
    "buffer_overlap": lambda h: h["buffers"][1].update(offset=4),
    "buffer_past_data": lambda h: h["buffers"][2].update(nbytes=16),
    "buffer_partial_element": lambda h: h["buffers"][2].update(nbytes=7),
    "buffer_dtype": lambda h: h["buffers"][0].update(dtype="object"),
    "array_dtype": lambda h: h["tensors"][1]["array"].update(dtype="complex64"),
    "array_offset": lambda h: h["tensors"][2]["array"].update(offset=8),
    "array_strides": lambda h: h["tensors"][1]["array"].update(strides=[400]),
    "array_shape": lambda h: h["tensors"][1]["array"].update(shape=[3]),
    "array_negative_shape": lambda h: h["tensors"][1]["array"].update(shape=[-2]),
    "requires_grad": lambda h: h["tensors"][0].update(requires_grad="yes"),
    "prim": lambda h: h["nodes"][0].update(prim="os.system"),
    "np_dtype": lambda h: h["nodes"][0]["saved"].update(d={"np_dtype": "object"}),
    "value_encoding": lambda h: h["nodes"][0]["saved"].update(d={"pickle": "gASV"}),
    "saved_tensor": lambda h: h["nodes"][0]["saved"].update(
        s={"saved": 0, "version": 0, "is_output": False, "shape": [2], "dtype": "complex128"}),
    "missing_key": lambda h: h["tensors"][0].pop("wrapped"),
    "names_not_a_dict": lambda h: h.update(names=[["x", 0]]),
    "trailing_data": lambda h: b"\0" * 25,
    "short_data": lambda h: b"\0" * 23,
}


@pytest.mark.parametrize("edit", BAD.values(), ids=BAD.keys())
def test_malformed_headers_are_corrupt_state(edit):
    E.loads(_edit(lambda h: None))  # the unedited blob loads
    with pytest.raises(CorruptStateError):
        E.loads(_edit(edit))


def test_corrupt_state_is_an_engine_error_with_a_stable_code():
    with pytest.raises(E.EngineError) as ei:
        E.loads(b"nope")
    assert ei.value.code == "corrupt_state" and ei.value.exception == "ValueError"


def test_restored_tensors_take_part_in_forward_mode():
    """A state read back (the Redis store's path) holds tensors without a tangent, as fresh ones: a dual level
    over them works as on the state that was saved (it used to fail: the slot was never set)."""
    state = State()
    run_program(state, [{"op": "tensor", "args": [[0.5, -1.0]], "kwargs": {"dtype": "float64"}, "out": "x"},
                        {"op": "tensor", "args": [[1.0, 2.0]], "kwargs": {"dtype": "float64"}, "out": "v"}])
    restored = E.loads(E.dumps(state))
    ops = [{"op": "enter_dual_level"}, {"op": "make_dual", "args": ["x", "v"], "out": "d"},
           {"op": "sin", "args": ["d"], "out": "y"}, {"op": "unpack_dual", "args": ["y"], "out": ["p", "t"]},
           {"op": "exit_dual_level"}]
    run_program(restored, ops)
    np.testing.assert_array_equal(restored.tensors["t"].data, np.cos([0.5, -1.0]) * [1.0, 2.0])
    assert restored.tensors["x"]._fw_grad is None


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_sessions_round_trip_with_their_graphs(dtype):
    """A session holding float16/bfloat16 tensors (values, a graph, a gradient, a transposed view) is stored and
    read back as it was (the Redis store's path; bfloat16 has no buffer format of its own)."""
    s = E.State()
    E.run_program(s, [{"op": "tensor", "out": "x", "args": [[[1.5, -2.25, 3.0], [0.1, 7.0, -0.5]]],
                       "kwargs": {"dtype": dtype, "requires_grad": True}},
                      {"op": "mul", "out": "y", "args": ["x", "x"]}, {"op": "t", "out": "xt", "args": ["x"]},
                      {"op": "sum", "out": "l", "args": ["y"]}])
    s2 = E.loads(E.dumps(s))
    for name in ("x", "y", "xt"):
        a, b = s.tensors[name], s2.tensors[name]
        assert b.dtype == a.dtype == dtype and b.data.strides == a.data.strides
        assert np.array_equal(b.data.astype(np.float32), a.data.astype(np.float32)), name
    E.run_program(s2, [{"op": "backward", "args": ["l"]}])
    np.testing.assert_array_equal(s2.tensors["x"].grad.data.astype(np.float32),
                                  (2 * s.tensors["x"].data.astype(np.float32)).astype(D.NP_DTYPES[dtype]).astype(
                                      np.float32))
