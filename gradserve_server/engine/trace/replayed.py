"""What a replay leaves, shared by whole-list plans (``engine.trace.plan``) and composed runs
(``engine.trace.compose``): the ``Plan`` record, the result and namespace a replay or a composed run hands back
(tensors made from descriptors when read), and the bit-for-bit array comparison both check their shortcuts with. Both
modules import this one; neither imports the other's internals (``plan`` calls ``compose`` through its public ``run``
with its ``PlanCache``, which holds the fragments too)."""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field

import numpy as np

from ..program import AutogradRecord, GradEntry, OpOutcome, ProgramResult
from ..tensor import Tensor
from . import route as R


class _Name:
    """A replayed tensor's grad_fn: only its name is observable in a one-shot response."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name



@dataclass
class Plan:
    code: tuple              # compiled functions of the tape (``tape.compile_tape``); empty: ``steps`` are interpreted
    kernels: list
    consts: list
    steps: list
    n_slots: int
    input_slots: tuple
    namespace: list          # (name, descriptor; None: the preset input tensor) in the namespace's order
    preset: list             # (name, grad descriptor or None, grad_accumulations) of preset input tensors
    ops: list
    changed: list
    autograd: list           # (op_index, op, [(name, contribution slot, grad descriptor, accumulations)])
    backward_passes: int
    nbytes: int = 0
    held_bytes: int | None = None  # a session's held bytes after the run (session plans)
    next_key: tuple | None = None  # (key, layout) of the session state the run leaves (session plans)
    chainable: bool = False        # a repeat may replay it without building the state between iterations
    iter_bytes: int = 0            # bytes of the arrays one run makes (session plans)
    regs: list = field(default_factory=list)  # (shape, dtype) of the registers (tape.Tape) a replay writes into
    pool_cap: int = 0              # register sets kept between replays
    pool: list = field(default_factory=list)  # idle register sets
    lazy: tuple | None = None      # (name -> descriptor, names of preset tensors): made on a first one-shot replay
    written: tuple = ()            # positions of the inputs an in-place kernel writes into (restored if it fails)
    after: object = None           # what a session replay rebuilds besides the descriptors (``plan._After``)
    names: list | None = None      # a session plan's names in canonical order (``plan._canonical``) as recorded
    pins: tuple | None = None      # (positions, values' keys) of the lifted literals it is pinned on


def _same_bits(a, b) -> bool:
    """Whether two arrays are the same to a caller: class, dtype, shape, strides and every bit."""
    if a.__class__ is not np.ndarray or b.__class__ is not np.ndarray or a.dtype != b.dtype \
            or a.shape != b.shape or a.strides != b.strides:
        return False
    if a.dtype.hasobject:
        return False
    if a.nbytes <= 65536:
        return a.tobytes() == b.tobytes()
    return np.array_equal(np.ascontiguousarray(a).reshape(-1).view(np.uint8),
                          np.ascontiguousarray(b).reshape(-1).view(np.uint8))



_new_tensor = Tensor.__new__
_ndarray = np.ndarray


def _tensor(buf, d) -> Tensor:
    """The replayed tensor of a descriptor (``_desc``): ``Tensor(...)``'s slots set directly (a run's budget
    counts its tensors as they are made; after the run there is none to count)."""
    s, rg, fn, retains, version, accs, g = d
    a = buf[s]
    if a.__class__ is not _ndarray:
        a = np.asarray(a)
    t = _new_tensor(Tensor)
    t.data = a
    t._requires_grad = rg
    t._grad_fn = None if fn is None else _Name(fn)
    t.output_nr = 0
    t._grad = None if g is None else _tensor(buf, g)
    t._vc = [version]
    t.retains_grad = retains
    t.grad_accumulations = accs
    t._base = None
    t._accumulator = None
    t._wrapped = False
    t._fw_grad = None
    t._creation = None
    t._attr_version = 0
    return t


def _plain(buf, s) -> Tensor:
    """``Tensor(buf[s])``: an autograd report's contribution."""
    return _tensor(buf, (s, False, None, False, 0, 0, None))


class _PlannedResult(ProgramResult):
    """A replay's or a composed run's result: ``ops``, ``changed`` and ``autograd`` are made from the plan on
    first access (a one-shot response reads the autograd report only, a repeat's inner iterations none of them);
    what they hold is what ``_finish`` always made. A composed run's plan holds its op outcomes as (the op list,
    {index: names bound} where that is not [its out name])."""

    route = R.REPLAYED  # (``plan.run_planned``'s route of a replay; a composed run sets its own)

    def __init__(self, plan: Plan, buf: list):
        self._plan, self._buf = plan, buf
        self._ops = self._changed = self._autograd = None
        self.records, self.warnings, self.returned, self.iterations = {}, [], {}, 1

    @property
    def ops(self) -> list:
        if self._ops is None:
            ops = self._plan.ops
            if ops.__class__ is tuple:  # (a composed run's)
                ops, special = ops
                self._ops = [OpOutcome(i, op.get("op"), list(special[i]) if i in special else [op.get("out")])
                             for i, op in enumerate(ops)]
            else:
                self._ops = [OpOutcome(o.index, o.op, list(o.bound)) for o in ops]
        return self._ops

    @ops.setter
    def ops(self, value) -> None:
        self._ops = value

    @property
    def changed(self) -> list:
        if self._changed is None:
            self._changed = list(self._plan.changed)
        return self._changed

    @changed.setter
    def changed(self, value) -> None:
        self._changed = value

    @property
    def autograd(self) -> list:
        if self._autograd is None:
            buf = self._buf
            self._autograd = [
                AutogradRecord(index, op, [GradEntry(name, _plain(buf, c), None if g is None else _tensor(buf, g), accs)
                                           for name, c, g, accs in entries])
                for index, op, entries in self._plan.autograd]
        return self._autograd

    @autograd.setter
    def autograd(self, value) -> None:
        self._autograd = value


class _Namespace(MutableMapping):
    """The namespace a one-shot replay leaves (``state.tensors`` after ``run_planned``), each tensor made on
    first access and kept (so a name reads as the same object every time) and a name never read never made.
    Names in the cold run's order. A change (set, delete) first makes every tensor and then behaves as a
    dict does."""

    __slots__ = ("_buf", "_descs", "_built", "_own")

    def __init__(self, buf: list, descs: dict, built: dict):
        self._buf = buf
        self._descs = descs    # name -> descriptor, in order (the plan's own: copied before a change)
        self._built = built    # name -> the tensor made (the preset input tensors from the start)
        self._own = False

    def __getitem__(self, name):
        t = self._built.get(name)
        if t is None:
            t = self._built[name] = _tensor(self._buf, self._descs[name])
        return t

    def get(self, name, default=None):
        t = self._built.get(name)
        if t is None:
            d = self._descs.get(name)
            if d is None:
                return default
            t = self._built[name] = _tensor(self._buf, d)
        return t

    def __contains__(self, name) -> bool:
        return name in self._descs

    def __iter__(self):
        return iter(self._descs)

    def __len__(self) -> int:
        return len(self._descs)

    def _materialize(self) -> None:
        if not self._own:
            for name in self._descs:
                self[name]
            self._descs = dict.fromkeys(self._descs)
            self._own = True

    def __setitem__(self, name, t) -> None:
        self._materialize()
        self._descs[name] = None
        self._built[name] = t

    def __delitem__(self, name) -> None:
        self._materialize()
        del self._descs[name]
        del self._built[name]

    def copy(self) -> dict:
        return dict(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self)!r})"
