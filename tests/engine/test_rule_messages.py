"""One op, one place (issue #22): a refusal declared as a rule is written once, in the op's declaration.

An op's ``checks=`` declarations (``"rule(arguments) | ExceptionClass: message"``) are raised by the engine itself,
before the op runs (``registry._checking``, through ``engine.rules``, the evaluator the client links), so an engine
``raise`` that writes the same message again is a second copy to keep in step. This test reads the engine's sources
with ``ast`` and fails when a piece of a declared message (the text between its ``{...}`` fields, long enough to be
the message's own) is written in a string of a ``raise`` statement. ``KNOWN`` lists the copies still there, each
with its reason; it only shrinks (a stale entry fails).
"""

from __future__ import annotations

import ast
import json
import re
import warnings

import numpy as np

from gradserve_server.engine import rules
from gradserve_server.engine.dtypes import NP_DTYPES
from gradserve_server.engine.errors import EngineError
from gradserve_server.engine.registry import OPS
from gradserve_server.engine.tensor import Tensor
from tests.client.dtype_rules_fixture import CHECK_CASES, FIXTURE, case_key
from tests.engine.test_one_place import engine_sources

#: a piece shorter than this is wording many messages share ("but got ", "Expected size ")
MIN_PIECE = 20

_E = "gradserve_server.engine.ops."
#: a helper that also serves ops declaring no such rule: the check belongs to every caller
_SHARED = "a helper's check for ops that declare no such rule too"
#: the declared checks are a part of a longer sequence of torch's checks the op makes in order
_INTERLEAVED = "interleaved with the op's undeclared checks, which torch makes between them"
#: (module, piece) -> why that raise still writes a declared message's text
#: getitem declares the bounds of a basic index's ints; the same words are torch's for an index tensor's values
_INDEX_VALUES = "the values of an index tensor (gather, scatter, index_select, advanced indexing): known at run time"
KNOWN: dict[tuple[str, str], str] = {
    ("gradserve_server.engine.autograd", " is out of bounds for dimension "): _INDEX_VALUES,
    (_E + "indexing", " is out of bounds for dimension "): _INDEX_VALUES,
    (_E + "shape", " is out of bounds for dimension "): _INDEX_VALUES + "; and select(), the helper other ops index "
                                                        "with (getitem raises its declaration first)",
    (_E + "nn_functional", " out of range for tensor of size "): _INDEX_VALUES + " (embedding's max_norm selects a "
                                                                                "row by an index's value)",
    (_E + "nn_functional", "narrow(): length must be non-negative."): "F.pad's negative padding (torch narrows)",
    ("gradserve_server.engine.autograd", " is out of bounds for dimension 0 with size 0"):
        "grad(is_grads_batched=True) of an empty batch, which torch indexes",
    (_E + "indexing", "Dimension specified as "): "index_add/index_copy's 0-d source: their own check, not roll's",
    (_E + "shape", "select() cannot be applied to a 0-dim tensor."): "select(), the helper other ops index with",
    (_E + "shape", "tensors used as indices must be long, int, byte or bool tensors"):
        "a list of numbers that are not ints (the declaration reads the index's tensors)",
    (_E + "common", " appears multiple times in the list of dims"): _SHARED + " (wrap_dims: every multi-dim op)",
    (_E + "common", "The size of tensor a ("): _SHARED + " (broadcast_shapes: every broadcasting op)",
    (_E + "conv", ") should be the same"): _INTERLEAVED + " (and MKLDNN's dtype message, line 130)",
    (_E + "conv", ", expected weight to be divisible by "): _INTERLEAVED + " (groups, padding strings, signs)",
    (_E + "conv", "Given weight of size "): _INTERLEAVED,
    (_E + "conv", "Calculated padded input size per channel: ("): _INTERLEAVED,
    (_E + "linalg", "mat1 and mat2 shapes cannot be multiplied ("): _SHARED + " (mm, addmm, matmul)",
    (_E + "conv", "expected scalar type "): "torch's generic dtype check (bmm declares it), conv's own",
    (_E + "decompositions", "expected scalar type "): _SHARED + " (torch's generic dtype check)",
    (_E + "decompositions", "linalg.matrix_norm: Expected a floating point or complex tensor as input. Got "):
        _SHARED + " (linalg.norm's matrix path); torch checks the order first",
    (_E + "decompositions", "linalg.matrix_norm: The input tensor A must have at least 2 dimensions."):
        _SHARED + " (linalg.norm's matrix path); torch checks the order first",
    (_E + "decompositions", "linalg.svd: Expected a floating point or complex tensor as input. Got "):
        _SHARED + " (svd)",
    (_E + "decompositions", "linalg.svd: The input tensor A must have at least 2 dimensions."): _SHARED + " (svd)",
    (_E + "decompositions", "linalg.vector_norm: Expected a floating point or complex tensor as input. Got "):
        "linalg.norm's vector path with an ord, which its rule (unless ord) leaves out",
    (_E + "inplace", " can't be cast to the desired output type "):
        "every in-place op's result check (the client's comes from promotion=); clamp_'s number bounds are one "
        "declared case of it",
    (_E + "inplace", "masked_fill_ only supports boolean masks, but got mask with dtype "):
        "setitem with a uint8 mask fills through masked_fill_ in torch: another op's check",
    (_E + "linalg", "addmv input tensors must have the same dtype, but got "): _SHARED + " (matmul's vector forms)",
    (_E + "linalg", "expected m1 and m2 to have the same dtype, but got: "): _SHARED + " (addmm, matmul, linear)",
    (_E + "linalg", "expected scalar type "): _SHARED + " (torch's generic dtype check)",
    (_E + "nn", " can't be cast to the desired output type "): "dropout of an integer input (no declared rule)",
    (_E + "nn", '"binary_cross_entropy" not implemented for \''): _INTERLEAVED + " (weight, reduction)",
    (_E + "nn", '"nll_loss_out_frame" not implemented for \''): _INTERLEAVED + " (_nll_check, cross_entropy's too)",
    (_E + "nn", "0D or 1D target tensor expected, multi-target not supported"): _INTERLEAVED + " (_nll_check)",
    (_E + "nn", "only batches of spatial targets supported (3D tensors) but got targets of dimension: "):
        _INTERLEAVED + " (_nll_check)",
    (_E + "nn", "Expected target size "): _INTERLEAVED + " (_nll_check)",
    (_E + "nn", "size mismatch (got input: "): _INTERLEAVED + " (_nll_check; a 1-d input's own too)",
    (_E + "nn", "expected scalar type "): _INTERLEAVED + " (_nll_check's weight)",
    (_E + "nn", "expected target dtype to be Long or Byte, but got "): _INTERLEAVED + " (_nll_check)",
    (_E + "nn_functional", '"LayerNormKernelImpl" not implemented for \''): _INTERLEAVED + " (normalized_shape)",
    (_E + "nn_functional", "expected scalar type "): _SHARED + " (torch's generic dtype check)",
    (_E + "normalization", '"batch_norm" not implemented for \''): _INTERLEAVED + " (running statistics)",
    (_E + "normalization", "Dimension out of range (expected to be in range of ["): _SHARED + " (torch's dim check)",
    (_E + "pooling", "Dimension out of range (expected to be in range of ["): _SHARED + " (torch's dim check)",
    (_E + "reduction", "linalg.vector_norm: Expected a floating point or complex tensor as input. Got "):
        "torch.norm's integral check, declared under another rule form (by p): " + _INTERLEAVED,
}


def declared_messages() -> dict[str, set[str]]:
    """Each declared message -> the ops declaring it."""
    out: dict[str, set[str]] = {}
    for spec in OPS.values():
        for declaration in spec.checks:
            out.setdefault(rules.parse(declaration)[6], set()).add(spec.name)
    return out


def pieces(message: str) -> list[str]:
    return [p for p in re.split(r"\{[^}]*\}", message) if len(p.strip()) >= MIN_PIECE]


def raises(src: str) -> list[tuple[int, list[str]]]:
    """(line, the strings written in it) of every ``raise`` statement (an f-string's literal parts each)."""
    out = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            texts = [sub.value for sub in ast.walk(node.exc)
                     if isinstance(sub, ast.Constant) and sub.value.__class__ is str]
            if texts:
                out.append((node.lineno, texts))
    return out


def copies(sources: dict[str, str], messages) -> dict[tuple[str, str], list[int]]:
    """(module, a declared message's first piece) -> the lines of the raises that write every piece of it."""
    wanted = [ps for ps in (pieces(m) for m in messages) if ps]
    found: dict[tuple[str, str], list[int]] = {}
    for module, src in sources.items():
        for line, texts in raises(src):
            for ps in wanted:
                if all(any(p in t for t in texts) for p in ps):
                    found.setdefault((module, ps[0]), []).append(line)
    return found


def test_a_declared_message_is_not_written_again_in_an_engine_raise():
    found = copies(engine_sources(), declared_messages())
    new = {k: v for k, v in found.items() if k not in KNOWN}
    assert new == {}, "raise from the op's declared checks (registry._checking) instead of writing the message"
    assert sorted(k for k in KNOWN if k not in found) == [], "a KNOWN copy is gone: remove its entry"


def test_the_check_fails_on_what_it_forbids():
    message = "permute(): duplicate dims are not allowed, got {dims} for a tensor of {n} dimensions"
    twice = {"pkg.shape": 'def permute(x, dims):\n'
                          '    raise E(f"permute(): duplicate dims are not allowed, got {dims} for a tensor")\n'}
    assert list(copies(twice, [message])) == [("pkg.shape", "permute(): duplicate dims are not allowed, got ")]
    once = {"pkg.shape": 'CHECK = "permute(): duplicate dims are not allowed, got {dims}"\n'
                         'def permute(x, dims):\n    return x\n'}
    assert copies(once, [message]) == {}


def _engine_value(value):
    """A fixture case's argument for the engine: ``dtype[shape]`` a tensor of ones (as the fixture's torch calls)."""
    if isinstance(value, str) and value.endswith("]"):
        dtype, _, dims = value[:-1].partition("[")
        return Tensor(np.ones([int(d) for d in dims.split(",") if d], NP_DTYPES[dtype]))
    if isinstance(value, list) and any(isinstance(v, str) for v in value):
        return [_engine_value(v) for v in value]
    return value


def engine_outcome(op: str, args: list, kwargs: dict):
    """The engine's answer to a fixture case, as the fixture writes torch's: the (first) result's dtype, or the
    exception as [class, message]."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = [_engine_value(a) for a in args]
            if op in ("getitem", "setitem") and isinstance(values[1], list):
                values[1] = tuple(values[1])  # (the fixture writes a tuple index as a list)
            out = OPS[op].fn(*values, **{k: _engine_value(v) for k, v in kwargs.items()})
    except EngineError as e:
        return {"error": [e.exception, e.message]}
    except Exception as e:  # noqa: BLE001 - an engine bug, shown as such
        return {"crash": repr(e)}
    return (out[0] if isinstance(out, tuple) else out).dtype


def test_the_engine_raises_torchs_error_for_each_declared_check_case():
    """Every call of ``tests/client/dtype_rules.json``'s check cases (torch 2.13's answers: the ops with ``checks``,
    refused by a rule, by a check of the op's own that torch makes first, or let through) gets torch's answer from
    the engine: the declared rules run before the op, in torch's order."""
    recorded = json.loads(FIXTURE.read_text())["checks"]
    wrong = {}
    for op, cases in CHECK_CASES.items():
        for args, kwargs in cases:
            key = case_key(op, args, kwargs)
            want, got = recorded[key], engine_outcome(op, args, kwargs)
            if got != want:
                wrong[key] = f"engine {got}, torch {want}"
    assert {k: v for k, v in wrong.items() if k not in ENGINE_DEVIATIONS} == {}
    assert sorted(k for k in ENGINE_DEVIATIONS if k not in wrong) == [], "fixed: remove its ENGINE_DEVIATIONS entry"


_PROMOTION = "a refusal declared in promotion= (the client's), which the engine does not evaluate"
#: cases the engine still answers otherwise than torch, and why (the list only shrinks)
ENGINE_DEVIATIONS = {"mse_loss(int64[3], int64[3])": _PROMOTION + ": it computes",
                     "mse_loss(bool[3], bool[3])": _PROMOTION + ": numpy's message"}
