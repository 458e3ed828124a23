"""The random-op programs checked against torch bit for bit (``test_random.py``), and the fixture they are
checked against without torch: ``python -m tests.engine.random_cases`` (torch installed) rewrites
``tests/fixtures/torch_random.json`` with torch's outputs (sha256 of each tensor's bytes, its first values)
and generator state after each program."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torch_random.json"
HALF_FIXTURE = FIXTURE.with_name("torch_random_half.json")
SEEDS = (0, 1, 42, 2**33 + 7, 2**64 - 1)
HALF_SEEDS = (0, 2**33 + 7)
# sizes around torch's path changes: 16 (the block normal kernel), multiples of 16 and not
SIZES = (1, 2, 7, 15, 16, 17, 31, 33, 100, 1025)
# float16/bfloat16 normals: every size to 64 (the block kernel's partial last block), then some large ones
HALF_SIZES = (*range(1, 65), 100, 1000, 4099, 65537)
HALF = ("float16", "bfloat16")


def _op(name, *args, out=None, **kwargs) -> dict:
    d = {"op": name, "args": list(args), "kwargs": kwargs}
    if out:
        d["out"] = out
    return d


def cases() -> list[tuple[str, list]]:
    """(case name, op list); each program starts with manual_seed(seed) (added per seed)."""
    out = []
    for n in SIZES:
        for dt in ("float32", "float64"):
            out += [
                (f"rand[{n},{dt}]", [_op("rand", n, dtype=dt, out="r")]),
                (f"randn[{n},{dt}]", [_op("randn", n, dtype=dt, out="r")]),
                (f"randn_after_odd[{n},{dt}]", [_op("randn", 3, dtype=dt, out="a"),
                                                _op("randn", n, dtype=dt, out="r")]),
                (f"normal_[{n},{dt}]", [_op("zeros", n, dtype=dt, out="r"), _op("normal_", "r", 0.5, 0.02)]),
                (f"uniform_[{n},{dt}]", [_op("zeros", n, dtype=dt, out="r"), _op("uniform_", "r", -0.3, 0.7)]),
                (f"bernoulli[{n},{dt}]", [_op("full", [n], 0.3, dtype=dt, out="p"), _op("bernoulli", "p", out="r")]),
                (f"bernoulli_[{n},{dt}]", [_op("zeros", n, dtype=dt, out="r"), _op("bernoulli_", "r", 0.7)]),
                (f"dropout[{n},{dt}]", [_op("ones", n, dtype=dt, out="x"), _op("dropout", "x", 0.3, out="r")]),
                (f"rand_like[{n},{dt}]", [_op("ones", n, dtype=dt, out="x"), _op("rand_like", "x", out="r")]),
                (f"randn_like[{n},{dt}]", [_op("ones", n, dtype=dt, out="x"), _op("randn_like", "x", out="r")]),
            ]
        out += [
            (f"randint[{n}]", [_op("randint", -3, 10, [n], out="r")]),
            (f"randint_2**40[{n}]", [_op("randint", 0, 2**40, [n], out="r")]),
            (f"randint_like[{n}]", [_op("ones", n, out="x"), _op("randint_like", "x", 7, out="r")]),
            (f"randperm[{n}]", [_op("randperm", n, out="r")]),
            (f"multinomial_replacement[{n}]", [_op("tensor", [0.1, 0.2, 0.3, 0.4], out="p"),
                                               _op("multinomial", "p", n, True, out="r")]),
        ]
    out += [
        ("randn_2d[4,8]", [_op("randn", 4, 8, out="r")]),
        ("randn_3d[2,3,5]", [_op("randn", 2, 3, 5, out="r")]),
        ("multinomial_2d", [_op("tensor", [[0.1, 0.2, 0.3, 0.4, 1.0, 2.0], [1.0] * 6], out="p"),
                            _op("multinomial", "p", 4, out="r")]),
        ("multinomial_one", [_op("tensor", [0.1, 0.2, 0.7], dtype="float64", out="p"),
                             _op("multinomial", "p", 1, out="r")]),
        # a transposed view is filled in memory order (torch's TensorIterator), by the pairwise normal path
        *[(f"{op}_transposed[{n}x{m}]", [_op("zeros", n, m, out="r"), _op("t", "r", out="v"), _op(op, "v", *args)])
          for n, m in ((4, 5), (8, 8)) for op, args in (("normal_", (0.0, 1.0)), ("uniform_", (-1.0, 1.0)),
                                                        ("bernoulli_", (0.4,)))],
        *[(f"random_[{dt}]", [_op("empty", 40, dtype=dt, out="r"), _op("random_", "r")])
          for dt in ("int64", "float32", "float64", "bool")],
        *[(f"exponential_[{dt}]", [_op("empty", 33, dtype=dt, out="r"), _op("exponential_", "r", 2.5)])
          for dt in ("float32", "float64")],
        *[(f"bernoulli_tensor_p[{dt}]", [_op("rand", 3, 1, dtype=dt, out="p"), _op("zeros", 3, 7, out="r"),
                                          _op("bernoulli_", "r", "p")]) for dt in ("float32", "float64")],
        ("random_to", [_op("empty", 20, dtype="int64", out="r"), _op("random_", "r", 10)]),
        ("random_from_to", [_op("empty", 20, out="r"), _op("random_", "r", -5, 10)]),
        ("random_0d_int64", [_op("empty", [], dtype="int64", out="r"), _op("random_", "r")]),
        ("normal_numbers", [_op("normal", 1.5, 2.0, [20], out="r")]),
        ("normal_tensor_mean", [_op("tensor", [1.0, 2.0, 3.0], out="m"), _op("normal", "m", 2.0, out="r")]),
        ("normal_tensor_std", [_op("tensor", [0.5, 1.0, 2.0], out="s"), _op("normal", 1.5, "s", out="r")]),
        ("normal_tensors", [_op("tensor", [[1.0], [2.0]], out="m"), _op("tensor", [0.5, 1.0, 2.0], out="s"),
                            _op("normal", "m", "s", out="r")]),
        ("generator", [_op("Generator", out="g"), _op("manual_seed", 7, generator="g"),
                       _op("rand", 5, generator="g", out="a"), _op("randn", 20, generator="g", out="r")]),
        ("get_set_state", [_op("randn", 3, out="a"), _op("get_rng_state", out="s"), _op("randn", 5, out="b"),
                           _op("set_rng_state", "s"), _op("randn", 5, out="r")]),
    ]
    return out


def half_cases() -> list[tuple[str, list]]:
    """float16/bfloat16 programs (their own fixture): the normal kernels at every size to 64 and some large
    ones, the other draws at ``SIZES``; and random_() of the other dtypes, uniform_'s upper bound in every
    floating dtype."""
    out = []
    for dt in HALF:
        for n in HALF_SIZES:
            out += [(f"randn[{n},{dt}]", [_op("randn", n, dtype=dt, out="r")]),
                    (f"normal_[{n},{dt}]", [_op("empty", n, dtype=dt, out="r"), _op("normal_", "r", -2.7, 11.3)])]
        for n in SIZES:
            out += [
                (f"rand[{n},{dt}]", [_op("rand", n, dtype=dt, out="r")]),
                (f"randn_after_odd[{n},{dt}]", [_op("randn", 3, dtype=dt, out="a"),
                                                _op("randn", n, dtype=dt, out="r")]),
                (f"uniform_[{n},{dt}]", [_op("zeros", n, dtype=dt, out="r"), _op("uniform_", "r", -0.3, 0.7)]),
                (f"rand_like[{n},{dt}]", [_op("ones", n, dtype=dt, out="x"), _op("rand_like", "x", out="r")]),
                (f"randn_like[{n},{dt}]", [_op("ones", n, dtype=dt, out="x"), _op("randn_like", "x", out="r")]),
                (f"normal_numbers[{n},{dt}]", [_op("normal", 1.5, 0.1, [n], dtype=dt, out="r")]),
                (f"exponential_[{n},{dt}]", [_op("empty", n, dtype=dt, out="r"), _op("exponential_", "r", 2.5)]),
                (f"bernoulli_[{n},{dt}]", [_op("zeros", n, dtype=dt, out="r"), _op("bernoulli_", "r", 0.7)]),
                (f"dropout[{n},{dt}]", [_op("ones", n, dtype=dt, out="x"), _op("dropout", "x", 0.3, out="r")]),
            ]
        out += [
            (f"randn_2d[{dt}]", [_op("randn", 4, 8, dtype=dt, out="r")]),
            (f"normal_transposed[{dt}]", [_op("zeros", 8, 5, dtype=dt, out="x"), _op("t", "x", out="r"),
                                          _op("normal_", "r", 0.0, 1.0)]),
            (f"normal_tensor_mean[{dt}]", [_op("ones", 20, dtype=dt, out="m"), _op("normal", "m", 2.0, out="r")]),
            (f"random_[{dt}]", [_op("empty", 40, dtype=dt, out="r"), _op("random_", "r", -5, 10)]),
        ]
    out += [(f"random_full[{dt}]", [_op("empty", 40, dtype=dt, out="r"), _op("random_", "r")])
            for dt in (*HALF, "int32", "int16", "int8", "uint8")]
    # random_(from, to) and randint past the integers a floating dtype holds: torch moves the bounds to ones it holds
    for dt, low, high in (("float16", -50, 3000), ("bfloat16", 0, 2**40), ("float32", -(2**25) - 7, 2**25),
                          ("float64", 0, 2**60), ("float16", 2047, 2049), ("bfloat16", -300, 7)):
        out.append((f"random_bounds[{dt},{low},{high}]", [_op("empty", 40, dtype=dt, out="r"),
                                                          _op("random_", "r", low, high)]))
    out.append(("randint_bounds[float16]", [_op("randint", -50, 3000, [40], dtype="float16", out="r")]))
    # uniform_ where many draws round to the upper bound in the dtype (torch writes the lower one instead)
    for dt, low in (("float16", 100.0), ("bfloat16", 100.0), ("float32", 1e6), ("float64", 2.0**53)):
        out.append((f"uniform_upper_bound[{dt}]", [_op("empty", 300, dtype=dt, out="r"),
                                                   _op("uniform_", "r", low, low + 2.0)]))
    return out


def digest(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a)
    first = a.reshape(-1)[:4]
    return {"dtype": str(a.dtype), "shape": list(a.shape), "sha256": hashlib.sha256(a.tobytes()).hexdigest(),
            "first": (first.astype(np.float32) if a.dtype.kind == "V" else first).tolist()}


def _numpy(torch, t) -> np.ndarray:
    """A torch tensor's values as numpy's (bfloat16, which numpy lacks, as ml_dtypes' of the same bits)."""
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def run_torch(torch, seed: int, ops: list) -> tuple[dict, bytes]:
    """The op list with torch: names bound as the program binds them; returns (digests, rng state)."""
    torch.manual_seed(seed)
    ns: dict = {}

    def val(v):
        return ns[v] if isinstance(v, str) and v in ns else v

    for o in ops:
        name, kw = o["op"], dict(o["kwargs"])
        args = [val(a) for a in o["args"]]
        if "dtype" in kw:
            kw["dtype"] = getattr(torch, kw["dtype"])
        if "generator" in kw:
            kw["generator"] = ns[kw["generator"]]
        if name == "Generator":
            ns[o["out"]] = torch.Generator()
        elif name == "manual_seed":
            kw.get("generator", torch).manual_seed(*args)
        elif name == "get_rng_state":
            ns[o["out"]] = torch.get_rng_state()
        elif name == "set_rng_state":
            torch.set_rng_state(*args)
        elif name == "dropout":
            ns[o["out"]] = torch.nn.functional.dropout(*args, **kw)
        elif name.endswith("_"):
            getattr(args[0], name)(*args[1:], **kw)
        elif name == "zeros" or name == "ones":
            ns[o["out"]] = getattr(torch, name)(*args, **kw)
        else:
            ns[o["out"]] = getattr(torch, name)(*args, **kw)
    return {"r": digest(_numpy(torch, ns["r"]))}, torch.get_rng_state().numpy().tobytes()


def main() -> None:
    import torch
    for path, seeds, programs in ((FIXTURE, SEEDS, cases()), (HALF_FIXTURE, HALF_SEEDS, half_cases())):
        table = []
        for seed in seeds:
            for name, ops in programs:
                d, state = run_torch(torch, seed, ops)
                table.append({"seed": seed, "case": name, "r": d["r"],
                              "state_sha256": hashlib.sha256(state).hexdigest()})
        lines = ",\n".join(json.dumps(row, separators=(",", ":")) for row in table)  # one case a line
        path.write_text(f'{{"torch":"{torch.__version__}","cases":[\n{lines}\n]}}\n')
        print(f"{len(table)} cases -> {path}")


if __name__ == "__main__":
    main()
