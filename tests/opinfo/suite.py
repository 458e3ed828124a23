"""Run torch's OpInfo samples in torch and in the engine, phase by phase, and compare.

A sample ``(input, *args, **kwargs)`` becomes one engine program: a ``tensor`` (or ``zeros`` for an empty
shape) op per tensor in it, then the catalog op's call with those tensors by name. Phases, each its own
program so that a failure is attributed to the phase that failed:

* ``forward``: float64 values, dtype, shape and ``grad_fn`` names of every output;
* ``reverse``: ``grad(outputs, inputs, grad_outputs=<random cotangents>, allow_unused=True)``;
* ``gradgrad`` (where the OpInfo supports it): the same with ``create_graph=True``, then ``grad`` of the
  first-order gradients with random cotangents again;
* ``forward_ad`` (where the OpInfo supports it): ``make_dual`` of every differentiable input with a random
  tangent, the call, ``unpack_dual`` of every output;
* ``float32``: the float32 samples' forward values;
* ``error``: ``error_inputs``: torch's exception class and message (or the OpInfo's regex for it).

* ``float16``/``bfloat16``: where the OpInfo supports the dtype on the CPU, its samples' forward values (and
  gradients, in the tensor's dtype); where it does not, a float32 sample cast to it, for torch's refusal.

A sample the op list cannot express (a complex or uint16 tensor, ``out=``, a callable, a device, ...)
raises ``NotExpressible(reason)`` before anything runs: the figures count it by reason.
"""

from __future__ import annotations

import math
import re
import signal
import threading
import warnings
import zlib
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import torch
import torch.autograd.forward_ad as fwAD

from gradserve_server.engine import State, run_program
from gradserve_server.engine.errors import EngineError

from .mapping import ARGUMENT_ORDER, ON_A_CLONE, opinfo_name

DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.bool: "bool",
          torch.int32: "int32", torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8",
          torch.float16: "float16", torch.bfloat16: "bfloat16"}
HALF = (torch.float16, torch.bfloat16)
#: keyword arguments the op list has no way to say (a tensor to write into, a device, a memory layout)
UNSAYABLE_KWARGS = ("out", "device", "layout", "pin_memory", "memory_format", "generator")
# rtol, atol (atol scaled by the reference's largest magnitude: gradients that cancel to ~0 carry rounding
# noise proportional to the terms that cancelled)
TOL = {"float64": (1e-7, 1e-10), "float32": (1e-4, 1e-5),
       # two units in the last place: torch rounds a float32 result once, the engine too where its kernel is one
       # (values that are not bit-exact are counted apart: ``HALF_INEXACT``)
       "float16": (2 * 2.0**-10, 2.0**-10), "bfloat16": (2 * 2.0**-7, 2.0**-7)}
#: half-precision comparisons within the tolerance but not bit for bit, by OpInfo name (the figures print them)
HALF_INEXACT: dict[str, int] = {}


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor's values as numpy holds them: bfloat16 (which torch's numpy() refuses) as ml_dtypes' type."""
    if t.dtype == torch.bfloat16:
        return t.detach().view(torch.int16).numpy(force=True).view(ml_dtypes.bfloat16)
    return t.detach().resolve_conj().numpy(force=True)


#: ops whose result depends on the input's memory layout (contiguous() copies a non-contiguous input, view
#: refuses one); a program creates contiguous leaves only
LAYOUT_OPS = frozenset({"contiguous", "view"})


class NotExpressible(Exception):
    """The sample needs something the op list cannot say; ``reason`` is what the figures count."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Mismatch:
    op: str          # OpInfo name (``name.variant``)
    kind: str        # sample, reference, error
    index: int
    cls: str         # forward, dtype, shape, grad_fn, structure, refused, accepted, error_class, error_message,
                     # reverse, gradgrad, forward_ad, float32, http
    detail: str


@dataclass
class Outcome:
    """What one phase produced on one side: tensors by position (None: no gradient), or an error."""

    tensors: list = field(default_factory=list)
    error: tuple[str, str] | None = None
    grad_fns: list = field(default_factory=list)


# ----- encoding a sample as ops ---------------------------------------------------------------------------


def plain(v):
    """A JSON value: NaN and the infinities as the strings the API takes."""
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


class Encoder:
    """Turns sample values into program values; every tensor met becomes a name ``a<i>`` (a tensor met twice
    keeps its name), listed in ``tensors`` for the creation ops."""

    def __init__(self):
        self.tensors: list[torch.Tensor] = []
        self._names: dict[int, str] = {}

    def name(self, t: torch.Tensor) -> str:
        if id(t) not in self._names:
            if t.is_complex():
                raise NotExpressible("complex tensor")
            if t.dtype not in DTYPES:
                raise NotExpressible(f"{str(t.dtype).replace('torch.', '')} tensor")
            if t.layout != torch.strided:
                raise NotExpressible("sparse tensor")
            if t.dim() > 32:  # numpy's limit is 64 dims, the JSON nesting limit of a request lower
                raise NotExpressible("tensor of more than 32 dims")
            self._names[id(t)] = f"a{len(self.tensors)}"
            self.tensors.append(t)
        return self._names[id(t)]

    def value(self, v):
        if isinstance(v, torch.Tensor):
            return self.name(v)
        if isinstance(v, torch.dtype):
            if v not in DTYPES:
                raise NotExpressible(f"dtype={str(v).replace('torch.', '')}")
            return DTYPES[v]
        if isinstance(v, (list, tuple)):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {k: self.value(x) for k, x in v.items()}
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return v  # a non-finite one becomes its JSON string on the wire (transport.py), as the app decodes
        if isinstance(v, complex):
            raise NotExpressible("complex scalar")
        if v is Ellipsis:
            return "..."
        if isinstance(v, slice):
            return ":".join("" if x is None else str(x) for x in (v.start, v.stop, v.step))
        if isinstance(v, (np.integer, np.floating)):
            return v.item()
        if callable(v):
            raise NotExpressible("callable argument")
        raise NotExpressible(f"{type(v).__name__} argument")


def creation_op(t: torch.Tensor, name: str, requires_grad: bool) -> dict:
    kwargs = {"dtype": DTYPES[t.dtype]}
    if requires_grad:
        kwargs["requires_grad"] = True
    if t.numel() == 0:  # nested lists cannot say (0, 3)
        return {"op": "zeros", "args": list(t.shape), "kwargs": kwargs, "out": name}
    # an array: the engine takes it as it is (HttpEval writes it as JSON lists)
    return {"op": "tensor", "args": [to_numpy(t).copy()], "kwargs": kwargs, "out": name}


@dataclass
class Call:
    """A sample as ops: ``setup`` creates the tensors, ``call`` runs the op (its outputs bound by the phase)."""

    tensors: list
    setup: list
    op: str
    args: list
    kwargs: dict
    pre: list = field(default_factory=list)  # ops between the tensors' creation and the call

    def call(self, out) -> list[dict]:
        return [*self.pre, {"op": self.op, "args": self.args, "kwargs": self.kwargs, "out": out}]


def encode(catalog_op: str, sample, differentiable: bool = True, name: str = "") -> Call:
    """``name``: the OpInfo entry (``mapping.ARGUMENT_ORDER`` and ``ON_A_CLONE`` say how its lambda calls)."""
    for k in sample.kwargs:
        if k in UNSAYABLE_KWARGS:
            raise NotExpressible(f"{k}=")
    enc = Encoder()
    inp, rest = enc.value(sample.input), enc.value(list(sample.args))
    args = ARGUMENT_ORDER[name](inp, rest) if name in ARGUMENT_ORDER else [inp, *rest]
    if catalog_op == "getitem" and isinstance(sample.args[0], list):
        args[1] = [args[1]]  # x[[0, 2]]: the program format's list is a tuple of per-dim items
    kwargs = enc.value(dict(sample.kwargs))
    if catalog_op in LAYOUT_OPS and not sample.input.is_contiguous():
        raise NotExpressible("non-contiguous input to a layout op")  # a program's leaves are contiguous
    setup = [creation_op(t, f"a{i}", differentiable and t.requires_grad) for i, t in enumerate(enc.tensors)]
    pre = []
    if name in ON_A_CLONE:
        pre.append({"op": "clone", "args": [args[0]], "out": "copy"})
        args[0] = "copy"
    return Call(enc.tensors, setup, catalog_op, args, kwargs, pre)


# ----- running torch --------------------------------------------------------------------------------------


def _exc_name(exc: BaseException) -> str:
    return "torch.linalg.LinAlgError" if isinstance(exc, torch.linalg.LinAlgError) else type(exc).__name__


def _substitute(v, repl: dict):
    if isinstance(v, torch.Tensor):
        return repl.get(id(v), v)
    if isinstance(v, list):
        return [_substitute(x, repl) for x in v]
    if isinstance(v, tuple) and not isinstance(v, torch.Size):
        items = [_substitute(x, repl) for x in v]
        return type(v)(*items) if hasattr(v, "_fields") else tuple(items)
    if isinstance(v, dict):
        return {k: _substitute(x, repl) for k, x in v.items()}
    return v


def fresh_leaves(call: Call, sample, differentiable: bool = True):
    """Leaf copies of the sample's tensors (as the engine's creation ops make them) and the sample's call
    with them substituted."""
    leaves = [t.detach().clone().requires_grad_(differentiable and t.requires_grad) for t in call.tensors]
    repl = {id(t): leaf for t, leaf in zip(call.tensors, leaves)}
    return leaves, repl, (_substitute(sample.input, repl), _substitute(list(sample.args), repl),
                          _substitute(dict(sample.kwargs), repl))


def torch_outputs(out) -> list | None:
    """The tensors a call returned, in order (None: a result the phase cannot compare)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
        return list(out)
    return None


def _quiet():
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("ignore")
    return ctx


def run_torch(info, args) -> tuple:
    ctx = _quiet()
    try:
        return info.op(args[0], *args[1], **args[2]), None
    except Exception as exc:  # noqa: BLE001 - torch's exception is the expected outcome
        return None, (_exc_name(exc), str(exc).strip())
    finally:
        ctx.__exit__(None, None, None)


# ----- running the engine ---------------------------------------------------------------------------------


#: an engine program of one sample that runs longer than this is stopped and reported (torch takes
#: milliseconds on every OpInfo sample): a kernel whose time grows with the data is a finding, not a wait
ENGINE_SECONDS = 10.0


class EngineTimeout(BaseException):  # not an Exception: no handler inside the engine may swallow it
    pass


def _alarm(signum, frame):
    raise EngineTimeout(f"the engine took over {ENGINE_SECONDS:.0f} s")


def run_engine(ops: list[dict], names: list[str]) -> Outcome:
    state = State()
    ctx = _quiet()
    timed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if timed:
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, ENGINE_SECONDS)
    try:
        run_program(state, ops)
    except EngineError as exc:
        return Outcome(error=(exc.exception, exc.message.strip()))
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        ctx.__exit__(None, None, None)
    ts = [state.tensors.get(n) for n in names]
    return Outcome(tensors=[None if t is None else (t.data, t.dtype) for t in ts],
                   grad_fns=[None if t is None or t.grad_fn is None else t.grad_fn.name for t in ts])


# ----- comparing ------------------------------------------------------------------------------------------


def as_array(t: torch.Tensor) -> tuple:
    if t.layout != torch.strided:  # embedding(sparse=True)'s gradient: compared by value (deviations.py)
        t = t.to_dense()
    return to_numpy(t), DTYPES.get(t.dtype, str(t.dtype))


def tensor_diff(ref, got, zero_is_none: bool = False, op: str = "") -> str | None:
    """Why ``got`` (array, dtype) differs from ``ref`` (array, dtype), or None. ``zero_is_none``: a missing
    gradient equals zeros (torch's None for an unused input, an engine's materialised zeros, or back)."""
    if ref is None or got is None:
        if zero_is_none and (ref is None or not np.any(ref[0])) and (got is None or not np.any(got[0])):
            return None
        return None if ref is None and got is None else \
            f"torch {'None' if ref is None else 'a tensor'}, engine {'None' if got is None else 'a tensor'}"
    (x, xd), (y, yd) = ref, got
    if xd != yd:
        return f"dtype: torch {xd}, engine {yd}"
    if tuple(x.shape) != tuple(y.shape):
        return f"shape: torch {tuple(x.shape)}, engine {tuple(y.shape)}"
    if xd in TOL:
        rtol, atol = TOL[xd]
        xf, yf = x.astype(np.float64), y.astype(np.float64)
        finite = np.isfinite(xf)
        scale = float(np.max(np.abs(xf[finite]), initial=1.0))
        same = np.isclose(yf, xf, rtol=rtol, atol=atol * scale, equal_nan=True)
        # signed zeros and infinities compare equal by isclose only when both sides agree on them
        if not same.all():
            bad = np.argwhere(~same)[:3]
            pts = ", ".join(f"{tuple(int(i) for i in b)}: torch {xf[tuple(b)]!r} engine {yf[tuple(b)]!r}"
                            for b in bad)
            return f"values differ at {int((~same).sum())} of {x.size} ({pts})"
        if xd in ("float16", "bfloat16") and not np.array_equal(xf, yf, equal_nan=True):
            HALF_INEXACT[op] = HALF_INEXACT.get(op, 0) + 1
        return None
    if not np.array_equal(x, y):
        return f"values differ: torch {x.tolist()!r:.120} engine {y.tolist()!r:.120}"
    return None


def error_diff(ref: tuple[str, str] | None, got: tuple[str, str] | None, regex: str | None = None):
    """(class, detail) of an error mismatch, or None when both agree (or neither raised)."""
    if ref is None and got is None:
        return None
    if ref is None:
        return "refused", f"engine raised {got[0]}: {got[1][:300]}"
    if got is None:
        return "accepted", f"torch raised {ref[0]}: {ref[1][:300]}"
    if ref[0] != got[0]:
        return "error_class", f"torch {ref[0]}: {ref[1][:200]} / engine {got[0]}: {got[1][:200]}"
    if ref[1] != got[1] and not (regex and re.search(regex, got[1])):
        return "error_message", f"torch: {ref[1][:200]} / engine: {got[1][:200]}"
    return None


def seeded(op: str, kind: str, index: int) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(f"{op}/{kind}/{index}".encode()))


def randn_like(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(t.shape, dtype=t.dtype, generator=gen)


def _torch_grad(outputs, inputs, cotangents, create_graph: bool):
    """torch.autograd.grad's gradients, or (exception class, message) when it raises."""
    ctx = _quiet()
    try:
        return torch.autograd.grad(outputs, inputs, cotangents, allow_unused=True, create_graph=create_graph)
    except Exception as exc:  # noqa: BLE001 - torch's exception is the expected outcome
        return _exc_name(exc), str(exc).strip()
    finally:
        ctx.__exit__(None, None, None)


# ----- phases ---------------------------------------------------------------------------------------------


def out_names(n: int | None, stem: str = "y") -> str | list[str]:
    return stem if n is None else [f"{stem}{i}" for i in range(n)]


def names_of(out) -> list[str]:
    return [out] if isinstance(out, str) else list(out)


class Phases:
    """One sample's phases; each returns a list of ``(class, detail)``."""

    def __init__(self, info, catalog_op: str, sample, gen: torch.Generator, differentiable: bool = True):
        self.info, self.sample, self.gen = info, sample, gen
        self.call = encode(catalog_op, sample, differentiable, opinfo_name(info))
        self.differentiable = differentiable
        self.runner = run_engine  # or an HTTP transport's: the same programs, the same comparisons

    def _torch(self):
        leaves, _, args = fresh_leaves(self.call, self.sample, self.differentiable)
        out, err = run_torch(self.info, args)
        return leaves, out, err

    def _out(self, out):
        outs = torch_outputs(out)
        if outs is None:
            raise NotExpressible(f"{type(out).__name__} result")
        return outs, ("y" if isinstance(out, torch.Tensor) else out_names(len(outs)))

    def forward(self, check_grad_fn: bool = True) -> list:
        _, out, err = self._torch()
        if err is not None:
            got = self.runner([*self.call.setup, *self.call.call("y")], [])
            e = error_diff(err, got.error)
            return [e] if e else []
        outs, out = self._out(out)
        got = self.runner([*self.call.setup, *self.call.call(out)], names_of(out))
        if got.error is not None:
            return [("refused", f"engine raised {got.error[0]}: {got.error[1][:300]}")]
        found = []
        for i, (r, g) in enumerate(zip(outs, got.tensors)):
            d = tensor_diff(as_array(r), g, op=opinfo_name(self.info))
            if d:
                cls = d.split(":")[0] if d.startswith(("dtype", "shape")) else "forward"
                found.append((cls, f"output {i}: {d}"))
            ref_fn = type(r.grad_fn).__name__ if r.grad_fn is not None else None
            if check_grad_fn and ref_fn != got.grad_fns[i]:
                found.append(("grad_fn", f"output {i}: torch {ref_fn}, engine {got.grad_fns[i]}"))
        return found

    def _reverse_setup(self, create_graph: bool):
        leaves, out, err = self._torch()
        if err is not None:
            return None
        outs, out = self._out(out)
        names = names_of(out)
        diff = [i for i, o in enumerate(outs) if o.requires_grad]
        inputs = [i for i, leaf in enumerate(leaves) if leaf.requires_grad]
        if not diff or not inputs:
            return None
        cots = [randn_like(outs[i], self.gen) for i in diff]
        grads = _torch_grad([outs[i] for i in diff], [leaves[i] for i in inputs], cots, create_graph)
        ops = [*self.call.setup, *(creation_op(c, f"c{k}", False) for k, c in enumerate(cots)),
               *self.call.call(out),
               {"op": "grad", "args": [[names[i] for i in diff], [f"a{i}" for i in inputs]],
                "kwargs": {"grad_outputs": [f"c{k}" for k in range(len(cots))], "allow_unused": True,
                           "create_graph": create_graph},
                "out": [f"g{k}" for k in range(len(inputs))]}]
        return leaves, inputs, grads, ops

    def reverse(self) -> list:
        setup = self._reverse_setup(False)
        if setup is None:
            return []
        _, inputs, grads, ops = setup
        got = self.runner(ops, [f"g{k}" for k in range(len(inputs))])
        return self._compare_grads("reverse", grads, got)

    def gradgrad(self) -> list:
        setup = self._reverse_setup(True)
        if setup is None:
            return []
        leaves, inputs, grads, ops = setup
        if isinstance(grads, tuple) and grads and isinstance(grads[0], str):
            return []  # the first order already failed in torch: the reverse phase compared that
        diff2 = [k for k, g in enumerate(grads) if g is not None and g.requires_grad]
        if not diff2:
            return []
        vs = [randn_like(grads[k], self.gen) for k in diff2]
        ggs = _torch_grad([grads[k] for k in diff2], [leaves[i] for i in inputs], vs, False)
        ops = [*ops, *(creation_op(v, f"v{k}", False) for k, v in enumerate(vs)),
               {"op": "grad", "args": [[f"g{k}" for k in diff2], [f"a{i}" for i in inputs]],
                "kwargs": {"grad_outputs": [f"v{k}" for k in range(len(vs))], "allow_unused": True},
                "out": [f"h{k}" for k in range(len(inputs))]}]
        got = self.runner(ops, [f"h{k}" for k in range(len(inputs))])
        return self._compare_grads("gradgrad", ggs, got)

    def _compare_grads(self, cls: str, ref: tuple, got: Outcome) -> list:
        if isinstance(ref, tuple) and ref and isinstance(ref[0], str):  # torch's backward raised
            e = error_diff(ref, got.error)
            return [(cls if e[0] in ("accepted", "refused") else e[0], f"{cls}: {e[1]}")] if e else []
        if got.error is not None:
            return [(cls, f"engine raised {got.error[0]}: {got.error[1][:300]}")]
        found = []
        for k, (r, g) in enumerate(zip(ref, got.tensors)):
            d = tensor_diff(None if r is None else as_array(r), g, zero_is_none=True, op=opinfo_name(self.info))
            if d:
                found.append((cls, f"input {k}: {d}"))
        return found

    def forward_ad(self) -> list:
        leaves, _, args = fresh_leaves(self.call, self.sample, self.differentiable)
        duals = [i for i, leaf in enumerate(leaves) if leaf.requires_grad]
        if not duals:
            return []
        tangents = [randn_like(leaves[i], self.gen) for i in duals]
        ctx = _quiet()
        try:
            with fwAD.dual_level():
                repl = {id(self.call.tensors[i]): fwAD.make_dual(leaves[i].detach(), t)
                        for i, t in zip(duals, tangents)}
                repl.update({id(t): leaf for t, leaf in zip(self.call.tensors, leaves) if id(t) not in repl})
                out = self.info.op(_substitute(self.sample.input, repl),
                                   *_substitute(list(self.sample.args), repl),
                                   **_substitute(dict(self.sample.kwargs), repl))
                outs, out = self._out(out)
                ref = [fwAD.unpack_dual(o).tangent for o in outs]
                ref = [None if t is None else t.clone() for t in ref]
        except NotExpressible:
            raise
        except Exception:  # noqa: BLE001 - torch cannot run it in forward mode: nothing to compare
            return []
        finally:
            ctx.__exit__(None, None, None)
        # the engine: primals as p<i>, their duals bound to the names the call uses
        setup = []
        for op_ in self.call.setup:
            i = int(op_["out"][1:])
            setup.append({**op_, "out": f"p{i}" if i in duals else op_["out"]})
        names = names_of(out)
        ops = [*setup, *(creation_op(t, f"t{k}", False) for k, t in enumerate(tangents)),
               {"op": "enter_dual_level"},
               *({"op": "make_dual", "args": [f"p{i}", f"t{k}"], "out": f"a{i}"} for k, i in enumerate(duals)),
               *self.call.call(out),
               *({"op": "unpack_dual", "args": [n], "out": [f"{n}_primal", f"{n}_tangent"]} for n in names),
               {"op": "exit_dual_level"}]
        got = self.runner(ops, [f"{n}_tangent" for n in names])
        if got.error is not None:
            return [("forward_ad", f"engine raised {got.error[0]}: {got.error[1][:300]}")]
        found = []
        for k, (r, g) in enumerate(zip(ref, got.tensors)):
            d = tensor_diff(None if r is None else as_array(r), g, zero_is_none=True)
            if d:
                found.append(("forward_ad", f"output {k}: {d}"))
        return found


def error_input(info, catalog_op: str, ei) -> tuple[bool, tuple | None]:
    """(agrees, mismatch) for one ``ErrorInput``: torch's actual exception against the engine's."""
    sample = ei.sample_input
    call = encode(catalog_op, sample, name=opinfo_name(info))
    _, _, args = fresh_leaves(call, sample)
    out, ref = run_torch(info, args)
    if ref is None and torch_outputs(out) is None:  # Tensor.__rpow__(2, 3) returns NotImplemented
        raise NotExpressible(f"{type(out).__name__} result")
    got = run_engine([*call.setup, *call.call("y")], [])
    if ref is None:  # the OpInfo expects an error torch 2.13 no longer raises: the engine should not either
        e = error_diff(None, got.error)
    else:
        e = error_diff(ref, got.error, ei.error_regex)
    return e is None, e
