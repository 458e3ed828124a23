"""Writes ``tests/client/dtype_rules.json``: what torch (2.13) gives for the unary and binary ops of the op table
(elementwise ops, reductions, special functions) called on each dtype, and on each pair of dtypes, as tensors with
dimensions, 0-d tensors and Python numbers: the result's dtype, or the exception's class and message. The
client's dtype rules (``promotion`` in the catalog) are checked against it where torch is not installed
(``test_dtype_rules.py``). Run it by hand: ``.venv/bin/python -m tests.client.dtype_rules_fixture``."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "dtype_rules.json"
FAMILIES = ("elementwise", "reduction", "special", "scan")
#: ops whose first operand comes second in torch's spelling (``2 ** x`` is the table's rpow(x, 2))
REFLECTED = {"rpow": lambda a, b: b ** a, "rsub": lambda a, b: b - a, "rtruediv": lambda a, b: b / a}
NUMBERS = {"int": 2, "float": 2.5, "bool": True}
#: what else a call needs (a dimension, an order), given by keyword
EXTRA = {"cumsum": {"dim": 0}, "cumprod": {"dim": 0}, "logcumsumexp": {"dim": 0}, "logsumexp": {"dim": 0},
         "flip": {"dims": [0]}, "mvlgamma": {"p": 1}, "clamp": {"min": 0}}


def operand_kinds(arity: int, dtypes: list[str]) -> list[tuple[str, ...]]:
    """The operand combinations tried: ``dim:<dtype>`` (a tensor with dimensions), ``zero:<dtype>`` (0-d),
    ``number:<int|float|bool>`` (a Python number, second operand only)."""
    if arity == 1:
        return [(f"dim:{d}",) for d in dtypes]
    out = []
    for a in dtypes:
        out += [(f"dim:{a}", f"dim:{b}") for b in dtypes]
        out += [(f"dim:{a}", f"zero:{b}") for b in dtypes]
        out += [(f"dim:{a}", f"number:{n}") for n in NUMBERS]
    return out


def arity(entry: dict) -> int | None:
    """1 or 2: the op's required tensor arguments (None: another arity, not tried)."""
    required = [a for a in entry["arguments"] if a.get("tensor") and "default" not in a and a.get("required", True)]
    return len(required) if len(required) in (1, 2) and not any(a.get("tensor_list") for a in required) else None


def torch_callable(torch, name: str):
    if name in REFLECTED:
        return REFLECTED[name]
    if name == "polygamma":  # polygamma(n, input)
        return lambda x: torch.polygamma(1, x)
    for space in (torch, torch.nn.functional, torch.special):
        fn = getattr(space, name, None)
        if fn is not None:
            return fn
    return None


def make(torch, kind: str):
    where, _, what = kind.partition(":")
    if where == "number":
        return NUMBERS[what]
    dtype = getattr(torch, what)
    values = [True, True, True] if what == "bool" else [1, 2, 3] if not dtype.is_floating_point else [0.5, 0.25, 0.75]
    t = torch.tensor(values, dtype=dtype)
    return t[0].clone() if where == "zero" else t


def outcome(torch, fn, kinds: tuple[str, ...], kwargs: dict):
    import warnings

    args = [make(torch, k) for k in kinds]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - torch's exception is the fact recorded
        return {"error": [type(e).__name__, str(e)]}
    if isinstance(out, tuple):
        out = out[0]
    return str(out.dtype).removeprefix("torch.")


def build() -> dict:
    import torch

    import gradserve_server.engine as E
    from gradserve_server.engine import dtypes

    out: dict = {"torch": torch.__version__, "dtypes": list(dtypes.NAMES), "ops": {}}
    for entry in E.op_catalog():
        n = arity(entry)
        if entry["family"] not in FAMILIES or entry["inplace"] or n is None:
            continue
        fn = torch_callable(torch, entry["name"])
        if fn is None:
            continue
        extra = EXTRA.get(entry["name"], {})
        out["ops"][entry["name"]] = {" ".join(k): outcome(torch, fn, k, extra)
                                     for k in operand_kinds(n, list(dtypes.NAMES))}
    return out


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(build(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}")
