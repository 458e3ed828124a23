"""Run the engine's program format (one JSON op dict per step) in real PyTorch.

The program format is the engine's (``{"op", "args", "kwargs", "out", "no_grad"}``); which arguments name
tensors is read off the engine's op table, so both sides bind the same names. Each step's outcome is a
plain-data snapshot of every named tensor (or the exception torch raised), comparable with the engine's.
"""

from __future__ import annotations

import math
import re
import warnings

import torch
import torch.nn.functional as F

from gradserve_server.engine.registry import OPS

DTYPES = {name: getattr(torch, name) for name in ("float32", "float64", "float16", "bfloat16", "int64", "int32",
                                                  "int16", "int8", "uint8", "bool")}
_SLICE_RE = re.compile(r"^\s*(-?\d+)?\s*:\s*(-?\d+)?\s*(?::\s*(-?\d+)?\s*)?$")
# ops whose engine name is not torch's function name
_REFLECTED = {"rtruediv": "__rtruediv__", "rpow": "__rpow__", "rmatmul": "__rmatmul__"}


class UnknownName(Exception):
    pass


def plain(x):
    """A float for JSON: NaN and infinities as strings (the engine's tensor payload convention)."""
    if isinstance(x, float):
        if math.isnan(x):
            return "NaN"
        if math.isinf(x):
            return "Infinity" if x > 0 else "-Infinity"
    return x


def _plain_list(v):
    if isinstance(v, list):
        return [_plain_list(x) for x in v]
    return plain(v)


def tensor_value(t) -> list | float | int | bool:
    return _plain_list(t.detach().tolist())


def snapshot_tensor(t) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = t.grad
    try:
        fn = t.grad_fn
        grad_fn = type(fn).__name__ if fn is not None else None
        is_leaf = t.is_leaf
    except RuntimeError as exc:  # a multi-output view whose base was modified: torch refuses to rebase it
        grad_fn = is_leaf = f"error: {exc}"
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "value": tensor_value(t),
            "requires_grad": t.requires_grad, "is_leaf": is_leaf, "grad_fn": grad_fn,
            "retains_grad": t.retains_grad, "version": t._version,
            "grad": None if g is None else {"dtype": str(g.dtype).replace("torch.", ""), "value": tensor_value(g),
                                             "requires_grad": g.requires_grad}}


class TorchRunner:
    """A namespace of named torch tensors; ``step(op)`` runs one op dict and returns its outcome."""

    def __init__(self):
        self.ns: dict = {}
        self.counter = 0

    # ----- names -------------------------------------------------------------------------------------
    def lookup(self, ref):
        if not isinstance(ref, str):
            return ref
        base, dot, attr = ref.partition(".")
        if base not in self.ns:
            raise UnknownName(f"name {base!r} is not defined")
        t = self.ns[base]
        if dot:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return t.grad
        return t

    def tensor_list(self, v):
        if isinstance(v, str):
            return self.lookup(v)
        if isinstance(v, (list, tuple)):
            return [self.lookup(x) for x in v]
        return v

    def index(self, v):
        def item(x):
            if isinstance(x, str):
                if x == "...":
                    return Ellipsis
                m = _SLICE_RE.match(x)
                if m:
                    return slice(*(int(g) if g is not None else None for g in m.groups()))
                return self.lookup(x)
            if isinstance(x, dict) and "slice" in x:
                return slice(*x["slice"])
            return x
        if isinstance(v, list):
            return tuple(item(x) for x in v)
        return item(v)

    def fresh(self) -> str:
        while True:
            self.counter += 1
            if f"t{self.counter}" not in self.ns:
                return f"t{self.counter}"

    def bind(self, out, value):
        """The engine's binding rules (gradserve_server/engine/program.py ``_Runner.bind``)."""
        if value is None:
            return
        if isinstance(value, torch.Tensor):
            if out is None:
                if any(t is value for t in self.ns.values()):
                    return
                out = self.fresh()
            if isinstance(out, list):
                out = out[0]
            self.ns[out] = value
            return
        if isinstance(value, tuple):
            items = list(value)
            if len(items) == 1 and isinstance(out, str):
                return self.bind(out, items[0])
            if isinstance(out, list):
                names = out
            else:
                stem = out if out is not None else self.fresh()
                names = [f"{stem}_{i}" for i in range(len(items))]
            for n, v in zip(names, items):
                if isinstance(v, torch.Tensor):
                    self.ns[n] = v

    # ----- one step --------------------------------------------------------------------------------
    def step(self, op: dict) -> dict:
        """Run one op; return ``{"error": None | [type, message], "tensors": {name: snapshot}}``."""
        err = None
        try:
            with torch.set_grad_enabled(not op.get("no_grad", False)), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._run(op)
        except UnknownName as exc:
            err = ["UnknownTensor", str(exc)]
        except Exception as exc:  # noqa: BLE001 - torch's own exception is the expected outcome
            # torch.linalg.LinAlgError is torch._C._LinAlgError: the public name, as the engine reports it
            kind = "torch.linalg.LinAlgError" if isinstance(exc, torch.linalg.LinAlgError) else type(exc).__name__
            err = [kind, _first_line(str(exc))]
        return {"error": err, "tensors": self.snapshot()}

    def snapshot(self) -> dict:
        return {n: snapshot_tensor(t) for n, t in self.ns.items()}

    def _run(self, op: dict) -> None:
        name = op["op"]
        args = list(op.get("args") or [])
        kwargs = dict(op.get("kwargs") or {})
        out = op.get("out")
        if name == "backward":
            tensors = self.tensor_list(args[0] if args else kwargs.pop("tensors"))
            g = kwargs.pop("gradient", args[1] if len(args) > 1 else None)
            g = self.tensor_list(g) if isinstance(g, list) else self.lookup(g)
            if "inputs" in kwargs:
                kwargs["inputs"] = self.tensor_list(kwargs["inputs"])
            torch.autograd.backward(tensors, g, **kwargs)
            return
        if name == "grad":
            names = ["outputs", "inputs", "grad_outputs", "retain_graph", "create_graph", "allow_unused",
                     "materialize_grads"]
            kw = dict(zip(names, args))
            kw.update(kwargs)
            kw["outputs"] = self.tensor_list(kw["outputs"])
            kw["inputs"] = self.tensor_list(kw["inputs"])
            if "grad_outputs" in kw:
                go = kw["grad_outputs"]
                kw["grad_outputs"] = self.tensor_list(go) if isinstance(go, list) else self.lookup(go)
            self.bind(out, torch.autograd.grad(**kw))
            return
        if name == "zero_grad":
            tensors = args[0] if args else kwargs.get("tensors")
            set_to_none = kwargs.get("set_to_none", True)
            targets = self.tensor_list(tensors if isinstance(tensors, list) else [tensors]) if tensors is not None \
                else [t for t in self.ns.values() if _is_leaf(t) and t.requires_grad]
            # optimizer.zero_grad()
            for t in {id(t): t for t in targets}.values():
                if t.grad is None:
                    continue
                if set_to_none:
                    t.grad = None
                else:
                    if t.grad.grad_fn is not None:
                        t.grad.detach_()
                    else:
                        t.grad.requires_grad_(False)
                    t.grad.zero_()
            return
        if name == "set_grad":
            t = self.lookup(args[0])
            t.grad = self.lookup(args[1]) if args[1] is not None else None
            return
        if name == "requires_grad_":
            self.lookup(args[0]).requires_grad_(args[1] if len(args) > 1 else kwargs.get("requires_grad", True))
            return
        if name == "retain_grad":
            self.lookup(args[0]).retain_grad()
            return
        if name == "manual_seed":  # the engine's program action for torch.manual_seed (the default generator)
            torch.manual_seed(args[0])
            return
        spec = OPS[name]
        pos = [p.name for p in spec.params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        rest = next((p.name for p in spec.params if p.kind == p.VAR_POSITIONAL), None)  # einsum's *operands

        def conv(pname, v):
            if spec.name in ("getitem", "setitem") and pname == "index":
                return self.index(v)
            if pname in spec.tensor_lists:
                return self.tensor_list(v)
            if pname in spec.tensors:
                return self.lookup(v)
            if pname == "dtype" and isinstance(v, str):
                return DTYPES[v]
            if pname == "ord" and v in ("inf", "-inf"):  # the program format's spelling of an infinite order
                return float(v)
            return v

        a = [conv(pos[i], v) if i < len(pos) else conv(rest, v) if rest is not None else v
             for i, v in enumerate(args)]
        k = {n: conv(n, v) for n, v in kwargs.items()}
        self.bind(out, _call(spec, a, k))


def _is_leaf(t) -> bool:
    try:
        return t.is_leaf
    except RuntimeError:  # a multi-output view whose base changed: not a parameter
        return False


def _first_line(msg: str) -> str:
    return msg.strip()


def _call(spec, a: list, k: dict):
    name = spec.name
    if name == "tensor":
        return torch.tensor(*a, **k)
    if name in ("zeros", "ones", "full", "arange", "linspace", "eye"):
        return getattr(torch, name)(*a, **k)
    if name in ("zeros_like", "ones_like", "full_like"):
        return getattr(torch, name)(*a, **k)
    if "." in name:  # torch.linalg.*, torch.special.*: the namespace's function
        fn = torch
        for part in name.split("."):
            fn = getattr(fn, part)
        out = fn(*a, **k)
        return tuple(out) if isinstance(out, tuple) else out
    if name == "getitem":
        return a[0][a[1]]
    if name == "setitem":
        a[0][a[1]] = a[2]
        return None
    if name in ("to", "view") and a[1:] and isinstance(a[1], str):
        return getattr(a[0], name)(DTYPES[a[1]])
    if name == "to" and "dtype" in k:
        return a[0].to(**k)
    if name in _REFLECTED:
        return getattr(a[0], _REFLECTED[name])(*a[1:], **k)
    if name in ("max", "min") and "other" in k:
        return getattr(torch, name)(a[0], k["other"])
    if name == "where":
        return torch.where(*a, **k)
    if name == "dropout":
        return F.dropout(*a, **k)
    if spec.inplace:
        return getattr(a[0], name)(*a[1:], **k)
    if not spec.method and hasattr(F, name):
        return getattr(F, name)(*a, **k)
    if spec.method and a and isinstance(a[0], torch.Tensor) and hasattr(torch.Tensor, name):
        out = getattr(a[0], name)(*a[1:], **k)
    elif hasattr(torch, name):
        out = getattr(torch, name)(*a, **k)
    elif hasattr(F, name):
        out = getattr(F, name)(*a, **k)
    else:
        out = getattr(a[0], name)(*a[1:], **k)
    if isinstance(out, tuple):  # (values, indices) named tuples
        return tuple(out)
    return out
