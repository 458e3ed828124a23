"""The narrow integer dtypes (int32, int16, int8, uint8) against torch 2.13: the promotion table of
``torch.result_type`` over every pair of dtypes and operand kinds (dimensioned tensor, 0-d tensor, Python
number), and the cases of ``dtype_cases.py`` (creation, conversion, wrap-around, refusals).

torch's outcomes are recorded in ``tests/fixtures/dtype_cases.json``; with torch installed every record is
recomputed live. Re-record with ``python -m tests.engine.test_dtypes_torch --record``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gradserve_server.engine import dtypes as D
from gradserve_server.engine.torch_compat import F as EF
from gradserve_server.engine.torch_compat import torch as etorch

from .dtype_cases import CASES
from .test_conformance_ops import run_code, same

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dtype_cases.json"
DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64")
# an operand of each kind, as torch code: a dimensioned tensor, a 0-d tensor, a Python number
KINDS = {"dim": "torch.zeros(2, dtype=torch.{})", "zero": "torch.zeros((), dtype=torch.{})"}
SCALARS = {"True": True, "2": 2, "2.5": 2.5}


def _operands(dtypes=DTYPES):
    out = {f"{k}:{d}": (tmpl.format(d), k, d) for k, tmpl in KINDS.items() for d in dtypes}
    out.update({f"number:{s}": (s, "number", v) for s, v in SCALARS.items()})
    return out


def promotion_table(torch_mod, dtypes=DTYPES) -> dict:
    """result_type(x, y) for every pair of operands, by 'kind:dtype' keys."""
    ops = _operands(dtypes)
    table = {}
    for ka, (ca, _, _) in ops.items():
        for kb, (cb, _, _) in ops.items():
            if ka.startswith("number") and kb.startswith("number"):
                continue
            table[f"{ka} {kb}"] = str(torch_mod.result_type(eval(ca, {"torch": torch_mod}),  # noqa: S307
                                                            eval(cb, {"torch": torch_mod}))).removeprefix("torch.")
    return table


@pytest.fixture(scope="module")
def recorded() -> dict:
    with open(FIXTURE) as f:
        return json.load(f)


def test_every_case_is_recorded(recorded):
    assert set(CASES) == set(recorded["cases"]), sorted(set(CASES) ^ set(recorded["cases"]))


def test_promotion_table_matches_recorded_torch(recorded):
    ops = _operands()
    wrong = {}
    for key, want in recorded["promotion"].items():
        ka, kb = key.split()
        args = []
        for k in (ka, kb):
            code, kind, d = ops[k]
            args.append(d if kind == "number" else eval(code, {"torch": etorch})._t)  # noqa: S307
        got = D.result_type(*args)
        if got != want:
            wrong[key] = (got, want)
    assert len(recorded["promotion"]) == 2 * 16 * 3 + 16 * 16
    assert not wrong, wrong


def test_promote_types_is_symmetric_and_matches_the_table(recorded):
    for a in DTYPES:
        for b in DTYPES:
            assert D.promote(a, b) == D.promote(b, a) == recorded["promotion"][f"dim:{a} dim:{b}"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_engine_matches_recorded_torch(name, recorded):
    got = run_code(CASES[name], etorch, EF)
    want = recorded["cases"][name]
    assert same(got, want), f"{name}\n  engine: {got}\n  torch:  {want}"


def test_recorded_outcomes_are_what_torch_does(recorded):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as TF
    assert promotion_table(torch) == recorded["promotion"]
    for name, code in CASES.items():
        live = run_code(code, torch, TF)
        assert same(live, recorded["cases"][name]), f"{name}: torch {torch.__version__} gives {live}"


def record() -> None:
    import torch
    import torch.nn.functional as TF
    out = {"cases": {name: run_code(code, torch, TF) for name, code in sorted(CASES.items())},
           "promotion": promotion_table(torch)}
    FIXTURE.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(out['cases'])} cases and {len(out['promotion'])} promotions from torch "
          f"{torch.__version__} into {FIXTURE.name}")


if __name__ == "__main__":
    if "--record" in sys.argv:
        record()


REPRS = ("x = T.tensor([1, 2], dtype=T.int32)", "x = T.tensor([[200, 3]], dtype=T.uint8)",
         "x = T.tensor(-5, dtype=T.int8)", "x = T.zeros(0, dtype=T.int16)",
         "x = T.tensor([100, -100], dtype=T.int8) * 2", "x = T.arange(12, dtype=T.int16).reshape(3, 4)",
         "x = T.arange(2000, dtype=T.int32)")


def test_engine_reprs_match_live_torch():
    torch = pytest.importorskip("torch")
    for code in REPRS:
        mine, theirs = {"T": etorch}, {"T": torch}
        exec(code, mine)
        exec(code, theirs)
        assert repr(mine["x"]) == repr(theirs["x"]), code


def test_session_state_with_narrow_dtypes_round_trips_and_keeps_its_graph():
    from gradserve_server.engine import serialize
    from gradserve_server.engine.program import State, run_program
    state = State()
    run_program(state, [
        {"op": "tensor", "out": "a", "args": [[100, -100]], "kwargs": {"dtype": "int8"}},
        {"op": "tensor", "out": "u", "args": [[200, 3]], "kwargs": {"dtype": "uint8"}},
        {"op": "add", "out": "c", "args": ["a", "u"]},
        {"op": "tensor", "out": "w", "args": [[1.0, 2.0]], "kwargs": {"requires_grad": True}},
        {"op": "mul", "out": "g", "args": ["w", "c"]}])
    restored = serialize.loads(serialize.dumps(state))
    for name, dtype in (("a", "int8"), ("u", "uint8"), ("c", "int16"), ("g", "float32")):
        assert restored.tensors[name].dtype == dtype
        assert restored.tensors[name].data.tolist() == state.tensors[name].data.tolist()
    run_program(restored, [{"op": "sum", "out": "l", "args": ["g"]}, {"op": "backward", "args": ["l"]}])
    grad = restored.resolve("w.grad")
    assert grad.dtype == "float32" and grad.data.tolist() == [300.0, -97.0]
