"""Which of an op's names torch binds as ``torch.<name>`` and as ``Tensor.<name>`` (``registry.public_names``, read
by the catalog's ``functions`` and ``methods``, from which the client builds its namespaces), against torch 2.13:
``torch.abs_`` is torch's, ``torch.add_`` and ``Tensor.gelu`` are not, and a program's own spellings (``iadd``,
``getitem``) are neither."""

from __future__ import annotations

import pytest

import gradserve_server.engine  # noqa: F401  (fills the op table)
from gradserve_server.engine.registry import OPS, public_names

#: a name torch has that the client does not bind there: Tensor.polygamma(n) takes its arguments in another order
MISSING = {("polygamma", "method")}


def _specs():
    seen = {}
    for spec in OPS.values():
        seen.setdefault(id(spec), spec)
    return sorted(seen.values(), key=lambda s: s.name)


def test_a_programs_own_spellings_are_not_public():
    by_name = {s.name: s for s in _specs()}
    functions, methods = public_names(by_name["add_"])
    assert functions == [] and methods == ["add_"]  # (iadd, __iadd__: a program's and Python's spellings)
    assert public_names(by_name["abs_"])[0] == ["abs_"]
    assert public_names(by_name["gelu"]) == ([], [])
    assert public_names(by_name["getitem"]) == ([], [])
    assert public_names(by_name["conv2d"])[0] == ["conv2d"] and public_names(by_name["linear"])[0] == []


def test_the_public_names_are_torchs():
    torch = pytest.importorskip("torch")
    wrong = []
    for spec in _specs():
        names = [n for n in (spec.name, *spec.aliases) if not n.startswith("__") and "." not in n]
        functions, methods = public_names(spec)
        theirs_f = [n for n in names if callable(getattr(torch, n, None)) and
                    not isinstance(getattr(torch, n), torch.dtype)]
        theirs_m = [n for n in names if hasattr(torch.Tensor, n) and (n, "method") not in MISSING]
        if functions != theirs_f or methods != theirs_m:
            wrong.append((spec.name, functions, theirs_f, methods, theirs_m))
    assert wrong == []
