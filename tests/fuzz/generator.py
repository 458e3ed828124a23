"""A seeded generator of random autograd programs, guided by real torch.

Each step is chosen from the current torch namespace (shapes, dtypes, requires_grad, leaves) and run in
torch at once, so the program and torch's outcome of every step come out together. A program ends after
5-30 steps or at the first step torch refuses (the engine's failed op lists change nothing while torch
may have half-applied, so nothing after an error is comparable).

Step kinds: tensor creation, any op of the catalog (arguments shaped by the per-op samples of
tests/engine/samples.py), views (including multi-output split/chunk/unbind), in-place ops on tensors
and views (under no_grad too; the in-place random ops right after a ``manual_seed`` step, so both sides
draw alike), retain_grad, backward and grad with every argument, set_grad, requires_grad_, zero_grad.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from gradserve_server.engine.registry import OPS
from gradserve_server.engine.tensor import Tensor
from tests.engine.samples import SAMPLES, S, T, mask

from .torch_exec import TorchRunner

# ops of the catalog without gradcheck samples (not differentiable, or creation)
EXTRA_SAMPLES = {
    "eq": [S(T(3), T(3)), S(T(2, 3), 0.5)], "ne": [S(T(3), T(3))], "lt": [S(T(2, 3), T(3))],
    "le": [S(T(3), 0.0)], "gt": [S(T(3), T(3))], "ge": [S(T(3), 0.1)],
    "logical_and": [S(mask(True, False, True), mask(True, True, False))],
    "logical_or": [S(mask(True, False, True), mask(False, False, True))],
    "logical_xor": [S(mask(True, False), mask(True, True))], "logical_not": [S(mask(True, False, True))],
    "isnan": [S(T(3))], "isfinite": [S(T(2, 3))], "argmax": [S(T(4)), S(T(2, 3), 1)],
    "argmin": [S(T(2, 3), 0, keepdim=True)], "bool": [S(T(3))], "detach": [S(T(2, 3))],
}
CREATION = ("tensor", "zeros", "ones", "full", "arange", "linspace", "eye")
# random ops draw torch's numbers only from a generator seeded as torch's is (tests/engine/test_random.py checks
# them); a fuzzed program does not seed both sides alike
SKIPPED = {"rand", "randn", "dropout", "randint", "randperm", "rand_like", "randn_like", "randint_like",
           "uniform_", "normal_", "bernoulli", "bernoulli_", "multinomial", "normal", "random_", "exponential_",
           "empty"}
# singular vectors are defined up to a sign per (U column, Vh row) pair, and numpy's LAPACK and torch's MKL pick
# differently about a third of the time (docs/explanation/deviations.md); svdvals and the norms through it are drawn
SKIPPED |= {"linalg.svd", "svd"}
INPLACE_UNARY = ("exp_", "log_", "neg_", "sqrt_", "abs_", "sigmoid_", "tanh_", "relu_", "zero_", "sin_", "cos_",
                 "tan_", "asin_", "acos_", "atan_", "sinh_", "cosh_", "floor_",
                 "ceil_", "round_", "sign_", "square_", "erf_", "erfinv_", "expm1_", "log1p_", "log2_", "log10_",
                 "reciprocal_", "rsqrt_", "digamma_", "lgamma_", "nan_to_num_", "trunc_", "frac_", "exp2_", "deg2rad_",
                 "rad2deg_", "sgn_", "sinc_", "logit_")
INPLACE_BINARY = ("add_", "sub_", "mul_", "div_", "atan2_", "hypot_", "remainder_", "xlogy_")
# the in-place random ops and their arguments after self (each drawn after a manual_seed step)
RANDOM_INPLACE = {
    "uniform_": lambda g: g.rng.choice([[], [-1.0, 2.0]]),
    "normal_": lambda g: g.rng.choice([[], [0.5, 2.0]]),
    "bernoulli_": lambda g: [g.rng.choice([0.3, 0.5])],
    "exponential_": lambda g: g.rng.choice([[], [2.0]]),
    "random_": lambda g: g.rng.choice([[0, 10], [5]]),
}
KINDS = (("create", 8), ("op", 30), ("view", 14), ("inplace", 16), ("retain_grad", 5), ("backward", 9),
         ("grad", 8), ("set_grad", 3), ("requires_grad_", 3), ("zero_grad", 2), ("sgd", 2))


#: Tensor.view(dtype)'s targets per source dtype: mostly of the same element size (any layout), some smaller or
#: larger (torch's layout rules), integers read as floats kept to float32/float64 (no half-precision arithmetic on
#: reinterpreted bits later in the program)
VIEW_DTYPES = {"float32": ("int32", "int32", "float32", "int16", "uint8", "float64"),
               "float64": ("int64", "int64", "float32", "int32"),
               "int64": ("float64", "int32", "int64"), "int32": ("float32", "int64"), "bool": ("uint8", "int8"),
               "float16": ("int16", "uint8"), "bfloat16": ("int16", "uint8"), "int16": ("int8",),
               "int8": ("uint8", "bool"), "uint8": ("int8",)}


def catalog_ops() -> list[str]:
    """Every op of the catalog the generator can call out of place (primary names)."""
    names = sorted({s.name for s in OPS.values()})
    return [n for n in names if n not in SKIPPED and not OPS[n].inplace and n not in CREATION
            and (n in SAMPLES or n in EXTRA_SAMPLES)]


def inplace_ops() -> list[str]:
    return sorted({s.name for s in OPS.values() if s.inplace})


class Stop(Exception):
    """Torch refused a step: the program ends there."""


class Generator:
    def __init__(self, seed: int, min_steps: int = 5, max_steps: int = 30):
        self.rng = random.Random(seed)
        self.nprng = np.random.default_rng(seed)
        self.torch = TorchRunner()
        self.program: list[dict] = []
        self.expected: list[dict] = []
        self.k = 0
        self.length = self.rng.randint(min_steps, max_steps)
        self.gradients: list = []   # tensors passed as gradient / grad_outputs

    # ----- plumbing ------------------------------------------------------------------------------------
    def emit(self, op: dict) -> None:
        if len(self.program) >= self.length:
            raise Stop
        if self.rng.random() < 0.12 and op["op"] not in ("tensor", "retain_grad", "set_grad"):
            op["no_grad"] = True
        if self._crashes_torch(op):
            raise Stop
        out = self.torch.step(op)
        self.program.append(op)
        self.expected.append(out)
        if out["error"] is not None:
            raise Stop

    def _crashes_torch(self, op: dict) -> bool:
        """torch 2.13 segfaults in a later backward/grad after an in-place op on (a view of) a tensor that
        retains its grad and is output 1+ of a multi-output node (slogdet's logabsdet): the retain_grad hook
        moves to the rebased history at the wrong output. Such a program ends before that op."""
        name = op["op"]
        if not (name.endswith("_") or name == "setitem") or not op.get("args"):
            return False
        t = self.torch.ns.get(op["args"][0]) if isinstance(op["args"][0], str) else None
        if t is None:
            return False
        for c in (t, t._base):
            try:
                if c is not None and c.retains_grad and c.output_nr > 0:
                    return True
            except RuntimeError:
                return True
        return False

    def name(self) -> str:
        self.k += 1
        return f"v{self.k}"

    def tensors(self, pred=lambda t: True) -> list[str]:
        out = []
        for n, t in self.torch.ns.items():
            try:
                if pred(t):
                    out.append(n)
            except RuntimeError:  # a multi-output view whose base was modified: its grad_fn raises
                if self.rng.random() < 0.3:
                    out.append(n)
        return out

    def pick(self, names):
        return self.rng.choice(names) if names else None

    def value(self):
        r = self.rng.random()
        if r < 0.03:
            return 0.0
        return round(self.rng.uniform(-2, 2), 2)

    def data(self, shape, ints_=False):
        if not shape:
            return self.rng.randint(0, 3) if ints_ else self.value()
        return [self.data(shape[1:], ints_) for _ in range(shape[0])]

    def shape(self):
        return self.rng.choice([(), (3,), (2, 3), (3, 2), (1, 3), (2, 1, 3), (4,), (2, 2)])

    def create(self, shape=None, dtype=None, rg=None, data=None) -> str:
        shape = self.shape() if shape is None else tuple(shape)
        dtype = dtype or ("float32" if self.rng.random() < 0.8 else "float64")
        rg = (self.rng.random() < 0.7) if rg is None else rg
        kw = {"dtype": dtype}
        if rg and dtype.startswith("float"):
            kw["requires_grad"] = True
        n = self.name()
        if data is None:
            data = self.data(shape, dtype in ("int64",))
            if dtype == "bool":
                data = (np.asarray(data) > 0).tolist()
        op = {"op": "tensor", "out": n, "args": [data], "kwargs": kw}
        op_ = dict(op)
        self.emit(op_)
        return n

    def floats(self, pred=lambda t: True):
        return self.tensors(lambda t: t.dtype.is_floating_point and pred(t))

    def same_shape(self, shape, float_=True):
        return self.floats(lambda t: tuple(t.shape) == tuple(shape)) if float_ else \
            self.tensors(lambda t: tuple(t.shape) == tuple(shape))

    # ----- step kinds ----------------------------------------------------------------------------------
    def step(self) -> None:
        kinds, weights = zip(*KINDS)
        kind = self.rng.choices(kinds, weights)[0]
        if not self.torch.ns and kind != "create":
            kind = "create"
        getattr(self, "k_" + kind)()

    def k_create(self) -> None:
        r = self.rng.random()
        if r < 0.75:
            self.create()
            return
        n = self.name()
        which = self.rng.choice(CREATION[1:])
        dt = self.rng.choice([None, "float64", "float32"])
        kw = {"dtype": dt} if dt else {}
        if self.rng.random() < 0.4 and which != "arange":
            kw["requires_grad"] = True
        args = {"zeros": [[2, 3]], "ones": [[3]], "full": [[2, 2], 1.5], "arange": [0.0, 3.0, 0.5],
                "linspace": [0.0, 1.0, 4], "eye": [3]}[which]
        self.emit({"op": which, "out": n, "args": args, "kwargs": kw})

    def tensor_for(self, sample_arg: Tensor) -> str:
        """An existing tensor shaped like the sample's argument, or a new one with its values."""
        shape = sample_arg.data.shape
        kind = sample_arg.data.dtype.kind
        if kind == "f":
            cands = self.same_shape(shape)
            if cands and self.rng.random() < 0.6:
                return self.pick(cands)
            data = np.round(sample_arg.data, 3).tolist()
            return self.create(shape, rg=sample_arg.requires_grad and self.rng.random() < 0.8, data=data)
        dtype = "bool" if kind == "b" else "int64"
        cands = self.tensors(lambda t: tuple(t.shape) == shape and str(t.dtype) == "torch." + dtype)
        if cands and self.rng.random() < 0.5:
            return self.pick(cands)
        return self.create(shape, dtype=dtype, rg=False, data=sample_arg.data.tolist())

    def convert(self, v, index=False):
        if isinstance(v, Tensor):
            return self.tensor_for(v)
        if isinstance(v, list) and v and all(isinstance(x, Tensor) for x in v):
            return [self.tensor_for(x) for x in v]
        if isinstance(v, slice):
            return f"{'' if v.start is None else v.start}:{'' if v.stop is None else v.stop}" + \
                ("" if v.step is None else f":{v.step}")
        if v is Ellipsis:
            return "..."  # the program format's spelling of an Ellipsis index
        if isinstance(v, tuple):
            return [self.convert(x) for x in v]
        if isinstance(v, list) and index:
            return [v]  # an int list index (a top-level list is a tuple of per-dim items)
        return v

    def k_op(self) -> None:
        name = self.rng.choice(catalog_ops())
        samples = SAMPLES.get(name) or EXTRA_SAMPLES[name]
        sample = self.rng.choice(samples)
        spec = OPS[name]
        pos = [p.name for p in spec.params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        rest = next((p.name for p in spec.params if p.kind == p.VAR_POSITIONAL), None)
        pos += [rest] * max(len(sample.args) - len(pos), 0) if rest in spec.tensors else []  # einsum's operands
        for i, a in enumerate(sample.args):
            if isinstance(a, Tensor) and (i >= len(pos) or pos[i] not in spec.tensors):
                if name in ("max", "min") and i == 1:
                    continue
                return  # a varargs or non-tensor position: not expressible in the program format
        args, kwargs = [], {}
        for i, a in enumerate(sample.args):
            if name in ("max", "min") and i == 1 and isinstance(a, Tensor):
                kwargs["other"] = self.convert(a)
                continue
            args.append(self.convert(a, index=name == "getitem" and i == 1))
        for k, v in sample.kwargs.items():
            kwargs[k] = self.convert(v)
        op = {"op": name, "out": self.name(), "args": args}
        if kwargs:
            op["kwargs"] = kwargs
        self.emit(op)

    def k_view(self) -> None:
        src = self.pick(self.tensors())
        t = self.torch.ns[src]
        nd = t.dim()
        shp = list(t.shape)
        opts = [("detach", []), ("unsqueeze", [0]), ("view", [-1]), ("reshape", [-1]), ("flatten", []),
                ("expand", [2] + shp), ("squeeze", []), ("getitem", ["..."])]
        if nd >= 1:
            n0 = shp[0]
            opts += [("getitem", [self.rng.randrange(-n0, n0) if n0 else 0]), ("getitem", [":"]),
                     ("getitem", [f"{self.rng.randint(0, max(n0 - 1, 0))}:"]), ("getitem", [f":{n0}"]),
                     ("select", [0, self.rng.randrange(n0) if n0 else 0]), ("narrow", [0, 0, max(n0 - 1, 0)]),
                     ("split", [1]), ("split", [2]), ("chunk", [2]), ("unbind", []), ("transpose", [0, -1]),
                     ("permute", list(range(nd))[::-1]), ("t", []) if nd <= 2 else ("t", []),
                     ("unbind", [nd - 1])]
            others = self.tensors(lambda o: o.dim() >= nd and list(o.shape[o.dim() - nd:]) == shp)
            if others:
                opts.append(("expand_as", [self.pick(others)]))
        else:
            opts += [("getitem", [[]]), ("t", []), ("view", [1])]
        # Tensor.view(dtype): the bits reinterpreted, the last dimension scaled between element sizes (a layout
        # torch refuses ends the program on its message); of a tensor made from data and unchanged only, whose
        # bits are torch's exactly (a computed value's last bits are compared with a tolerance, its bits are not)
        if t._version == 0 and any(o["op"] == "tensor" and o.get("out") == src for o in self.program) and \
                self.rng.random() < 0.3:
            dtype = self.rng.choice(VIEW_DTYPES[str(t.dtype).replace("torch.", "")])
            self.emit({"op": "view", "out": self.name(), "args": [src], "kwargs": {"dtype": dtype}})
            return
        op, extra = self.rng.choice(opts)
        if op == "getitem":
            args = [src, extra[0]]
        else:
            args = [src, *extra]
        out = self.name()
        self.emit({"op": op, "out": out, "args": args})

    def inplace_target(self):
        # never a tensor given as a gradient (or a view of one): torch's AccumulateGrad may have kept it as a
        # leaf's .grad, which the engine copies (docs/explanation/deviations.md)
        prefer = self.tensors(lambda t: t.dtype.is_floating_point and (not t.is_leaf or not t.requires_grad)
                              and not self.is_gradient(t))
        if prefer and self.rng.random() < 0.85:
            return self.pick(prefer)
        return self.pick(self.floats(lambda t: not self.is_gradient(t))) or self.create()

    def is_gradient(self, t) -> bool:
        """``t`` shares memory with a tensor passed as a gradient."""
        ptr = t.untyped_storage().data_ptr()
        return any(g.untyped_storage().data_ptr() == ptr for g in self.gradients)

    def operand(self, shape):
        r = self.rng.random()
        if r < 0.4:
            return self.value()
        if r < 0.55:
            return self.pick(self.floats(lambda t: t.dim() == 0)) or self.create(())
        cands = self.same_shape(shape)
        if cands and r < 0.85:
            return self.pick(cands)
        return self.create(shape)

    def k_inplace(self) -> None:
        tgt = self.inplace_target()
        t = self.torch.ns[tgt]
        shp = list(t.shape)
        which = self.rng.choice(inplace_ops())
        if which in INPLACE_UNARY:
            op = {"op": which, "args": [tgt]}
        elif which in INPLACE_BINARY:
            op = {"op": which, "args": [tgt, self.operand(shp)]}
        elif which == "pow_":
            op = {"op": which, "args": [tgt, self.rng.choice([2, 0.5, self.operand(shp)])]}
        elif which == "clamp_":
            op = {"op": which, "args": [tgt, -0.5, 0.5]}
        elif which in ("clamp_min_", "clamp_max_"):
            op = {"op": which, "args": [tgt, 0.1]}
        elif which == "fill_":
            v = self.value() if self.rng.random() < 0.5 else (self.pick(self.floats(lambda o: o.dim() == 0))
                                                               or self.create(()))
            op = {"op": which, "args": [tgt, v]}
        elif which == "copy_":
            op = {"op": which, "args": [tgt, self.operand(shp) if self.rng.random() < 0.8 else self.create(shp)]}
            if not isinstance(op["args"][1], str):
                op["args"][1] = self.create(())
        elif which == "masked_fill_":
            m = self.create(shp, dtype="bool", rg=False)
            op = {"op": which, "args": [tgt, m, self.value()]}
        elif which == "setitem":
            if shp:
                idx = self.rng.choice([0, -1, ":1", "1:", [0], ["...", 0] if len(shp) > 1 else ":"])
            else:
                idx = []
            with torch.no_grad():  # only the shape is wanted (a refused view raises in grad mode)
                sub = self.torch.ns[tgt][self.torch.index(idx)] if not isinstance(idx, list) or idx else None
            sub_shape = list(sub.shape) if sub is not None else []
            v = self.value() if self.rng.random() < 0.4 else self.operand(sub_shape)
            op = {"op": which, "args": [tgt, idx, v]}
        elif which in ("index_add_", "index_copy_", "index_fill_") and shp and all(shp):
            d = self.rng.randrange(len(shp))
            k = self.rng.randint(1, shp[d])
            # index_copy_ with a repeated index is nondeterministic in torch: distinct positions there
            idx = self.rng.sample(range(shp[d]), k) if which == "index_copy_" else \
                [self.rng.randrange(shp[d]) for _ in range(k)]
            ix = self.create((k,), dtype="int64", rg=False, data=idx)
            if which == "index_fill_":
                v = self.value() if self.rng.random() < 0.6 else (self.pick(self.floats(lambda o: o.dim() == 0))
                                                                  or self.create(()))
            else:
                v = self.operand(shp[:d] + [k] + shp[d + 1:])
            op = {"op": which, "args": [tgt, d, ix, v]}
        elif which in ("scatter_", "scatter_add_") and shp and all(shp):
            d = self.rng.randrange(len(shp))
            # scatter_ writes one position per slice along d (a repeated target is nondeterministic in torch)
            ishape = shp[:d] + [1] + shp[d + 1:] if which == "scatter_" else shp
            ix = self.create(ishape, dtype="int64", rg=False,
                             data=np.asarray([self.rng.randrange(shp[d]) for _ in range(int(np.prod(ishape)))],
                                             dtype=np.int64).reshape(ishape).tolist())
            op = {"op": which, "args": [tgt, d, ix, self.operand(ishape)]}
        elif which in ("addcmul_", "addcdiv_"):
            t1 = self.operand(shp) if self.rng.random() < 0.3 else self.create(shp)
            t2 = self.create(shp, data=self.data_away_from_zero(shp)) if which == "addcdiv_" else self.operand(shp)
            op = {"op": which, "args": [tgt, t1 if isinstance(t1, str) else self.create(()), t2]}
            if isinstance(op["args"][2], float):
                op["args"][2] = self.create(())
            if self.rng.random() < 0.6:
                op["kwargs"] = {"value": self.rng.choice([0.5, -2.0, 1e-3, 1])}
        elif which == "lerp_":
            end = self.operand(shp)
            end = end if isinstance(end, str) else self.create(shp)
            weight = self.rng.choice([0.25, 0.9, -0.5]) if self.rng.random() < 0.6 else \
                self.create(shp, rg=self.rng.random() < 0.3)
            op = {"op": which, "args": [tgt, end, weight]}
        elif which in RANDOM_INPLACE:
            # both sides draw from the default generator seeded alike just before (tests/engine/test_random.py
            # checks the streams themselves)
            self.emit({"op": "manual_seed", "args": [self.rng.randrange(2**31)]})
            op = {"op": which, "args": [tgt, *RANDOM_INPLACE[which](self)]}
        else:
            return
        self.emit(op)

    def data_away_from_zero(self, shape):
        """Values with |v| >= 0.5 (a divisor)."""
        v = np.asarray(self.data(shape), dtype=np.float64)
        return np.where(np.abs(v) < 0.5, np.where(v < 0, -0.5, 0.5) + v, v).round(2).tolist()

    def grad_tensors(self):
        return self.tensors(lambda t: t.requires_grad)

    def k_retain_grad(self) -> None:
        cands = self.tensors(lambda t: t.requires_grad and not t.is_leaf)
        n = self.pick(cands) if cands and self.rng.random() < 0.9 else self.pick(self.tensors())
        self.emit({"op": "retain_grad", "args": [n]})

    def root(self):
        cands = self.tensors(lambda t: t.requires_grad and not t.is_leaf)
        if not cands or self.rng.random() < 0.05:
            cands = self.tensors()
        n = self.pick(cands)
        t = self.torch.ns[n]
        if t.numel() != 1 and t.requires_grad and self.rng.random() < 0.4:
            s = self.name()
            self.emit({"op": "sum", "out": s, "args": [n]})
            return s
        return n

    def gradient_for(self, n):
        t = self.torch.ns[n]
        if t.numel() == 1 and self.rng.random() < 0.7:
            return None
        if self.rng.random() < 0.05:
            return None
        g = self.create(list(t.shape), dtype=str(t.dtype).replace("torch.", "") if t.dtype.is_floating_point
                        else "float32", rg=self.rng.random() < 0.1)
        self.gradients.append(self.torch.ns[g])
        return g

    def some_inputs(self):
        cands = self.grad_tensors()
        if not cands:
            return None
        return self.rng.sample(cands, min(len(cands), self.rng.randint(1, 3)))

    def k_backward(self) -> None:
        root = self.root()
        g = self.gradient_for(root)
        kw = {}
        if g is not None:
            kw["gradient"] = g
        if self.rng.random() < 0.5:
            kw["retain_graph"] = True
        if self.rng.random() < 0.1:
            kw["create_graph"] = True
        if self.rng.random() < 0.3:
            ins = self.some_inputs()
            if ins:
                kw["inputs"] = ins
        self.emit({"op": "backward", "args": [root], "kwargs": kw})

    def k_grad(self) -> None:
        root = self.root()
        ins = self.some_inputs() or [root]
        g = self.gradient_for(root)
        kw = {}
        if g is not None:
            kw["grad_outputs"] = g
        if self.rng.random() < 0.5:
            kw["retain_graph"] = True
        if self.rng.random() < 0.2:
            kw["create_graph"] = True
        if self.rng.random() < 0.35:
            kw["allow_unused"] = True
        if self.rng.random() < 0.15:
            kw["materialize_grads"] = True
        out = self.name()
        self.emit({"op": "grad", "out": out, "args": [[root], ins], "kwargs": kw})
        # torch's results may alias each other and grad_outputs (expanded views): not modified in place
        self.gradients.extend(t for n, t in self.torch.ns.items() if n == out or n.startswith(out + "_"))

    def k_set_grad(self) -> None:
        n = self.pick(self.floats())
        if n is None:
            return
        t = self.torch.ns[n]
        r = self.rng.random()
        if r < 0.3:
            g = None
        elif r < 0.9:
            g = self.create(list(t.shape), dtype=str(t.dtype).replace("torch.", ""), rg=False)
        else:
            g = self.create([5], rg=False)
        self.emit({"op": "set_grad", "args": [n, g]})

    def k_requires_grad_(self) -> None:
        cands = self.tensors(lambda t: t.is_leaf)
        n = self.pick(cands) if cands and self.rng.random() < 0.9 else self.pick(self.tensors())
        self.emit({"op": "requires_grad_", "args": [n, self.rng.random() < 0.6]})

    def k_zero_grad(self) -> None:
        kw = {"set_to_none": self.rng.random() < 0.5}
        args = []
        if self.rng.random() < 0.5:
            ins = self.some_inputs()
            if ins:
                args = [ins]
        self.emit({"op": "zero_grad", "args": args, "kwargs": kw})

    def k_sgd(self) -> None:
        """``with no_grad(): p.sub_(p.grad)`` (p.grad may be None: torch's argument message)."""
        p = self.pick(self.tensors(lambda t: t.is_leaf and t.requires_grad))
        if p is None:
            return
        self.emit({"op": "sub_", "args": [p, f"{p}.grad"], "no_grad": True})

    def run(self) -> tuple[list[dict], list[dict]]:
        try:
            while len(self.program) < self.length:
                self.step()
        except Stop:
            pass
        return self.program, self.expected


def generate(seed: int, min_steps: int = 5, max_steps: int = 30) -> tuple[list[dict], list[dict]]:
    """(program, torch's outcome of each step) for ``seed``."""
    return Generator(seed, min_steps, max_steps).run()
