"""One op, one place (issue #22): a grad_fn name is written once, where its primitive is declared.

Every autograd node kind (torch's grad_fn class: ``MulBackward0``, ``AccumulateGrad``, the double-backward nodes
``GeluBackwardBackward0``...) is declared once (``registry.vjp("MulBackward0", ...)``, ``node.declare(...)``, a
``double_backward=`` name) and every other place holds its handle, ``P.MulBackward0``. This test reads the engine's
sources with ``ast`` and fails when a node name is written as a string literal twice, outside the module that
declares it, or built from pieces (an f-string), and when code refers to a handle that nothing declares.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from gradserve_server.engine.node import P, Prim
from gradserve_server.engine.registry import PRIMS

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "gradserve_server" / "engine"
#: what a grad_fn name looks like (the names without "Backward", AccumulateGrad and friends, come from the table)
_LOOKS_LIKE = re.compile(r"[A-Z][A-Za-z0-9]*Backward[A-Za-z0-9_]*")
#: a piece of an f-string that makes a torch grad_fn name (an overload number): ``f"{kind}Pad{k}DBackward0"``; a
#: custom Function's node, ``f"{name}Backward"``, is named after the user's class, as torch names it
_BUILT = re.compile(r"Backward\d")


def _declared() -> dict[str, Prim]:
    return {k: v for k, v in vars(P).items() if isinstance(v, Prim)}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def scan(sources: dict[str, str], names: set[str]) -> tuple[dict, list, list]:
    """(literal name -> [(module, line)], f-strings that build a grad_fn name, ``P.<x>`` references) of the
    given module sources."""
    literals: dict[str, list] = defaultdict(list)
    built, refs = [], []
    for module, src in sources.items():
        tree = ast.parse(src)
        in_fstring = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                parts = [v.value for v in node.values if isinstance(v, ast.Constant)]
                in_fstring.update(id(v) for v in node.values)
                if any(_BUILT.search(p) for p in parts):
                    built.append((module, node.lineno))
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "P" \
                    and not node.attr.startswith("_"):
                refs.append((node.attr, module, node.lineno))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value.__class__ is str and id(node) not in in_fstring:
                if node.value in names or _LOOKS_LIKE.fullmatch(node.value):
                    literals[node.value].append((module, node.lineno))
    return literals, built, refs


def problems(sources: dict[str, str], declared: dict[str, Prim]) -> list[str]:
    literals, built, refs = scan(sources, set(declared))
    out = []
    for name, where in sorted(literals.items()):
        p = declared.get(name)
        if p is None or not p.declared:
            out.append(f"{name}: written at {where} but never declared")
        elif len(where) > 1:
            out.append(f"{name}: written {len(where)} times {where}; write it once, refer to P.{name}")
        elif where[0][0] != p.module:
            out.append(f"{name}: written in {where[0][0]} but declared in {p.module}; refer to P.{name}")
    out += [f"a grad_fn name built from pieces at {m}:{line}: write it out" for m, line in built]
    for attr, module, line in refs:
        p = declared.get(attr)
        if p is None or not p.declared:
            out.append(f"P.{attr} at {module}:{line}: no such primitive is declared")
    return out


def engine_sources() -> dict[str, str]:
    return {_module_name(p): p.read_text() for p in sorted(ENGINE.rglob("*.py"))}


def test_each_grad_fn_name_is_written_once_where_it_is_declared():
    assert problems(engine_sources(), _declared()) == []


def test_every_handle_is_declared_and_every_primitive_has_its_handle():
    declared = _declared()
    assert [n for n, p in declared.items() if not p.declared] == []  # a P.<typo> reached at import
    assert all(declared.get(n) is p for n, p in PRIMS.items())
    for p in PRIMS.values():  # a double backward's node name is a declared node kind too
        assert not p.double_backward or declared[p.double_backward].declared


def test_every_declared_name_is_written_once():
    """The count the issue asks for: as many grad_fn name literals in the engine as declared node kinds."""
    declared = _declared()
    literals, _, _ = scan(engine_sources(), set(declared))
    assert sorted(literals) == sorted(declared)
    assert sum(len(w) for w in literals.values()) == len(declared)


def test_the_check_fails_on_what_it_forbids():
    fake = Prim("MulBackward0")
    fake.declared, fake.module = True, "pkg.elementwise"
    other = Prim("AddBackward0")
    other.declared, other.module = True, "pkg.elementwise"
    declared = {"MulBackward0": fake, "AddBackward0": other}
    ok = {"pkg.elementwise": 'vjp("MulBackward0")\nvjp("AddBackward0")\nrecord(P.MulBackward0)\n'}
    assert problems(ok, declared) == []
    twice = {"pkg.elementwise": 'vjp("MulBackward0")\nvjp("AddBackward0")\nrecord("MulBackward0")\n'}
    assert any("written 2 times" in p for p in problems(twice, declared))
    elsewhere = {"pkg.elementwise": 'vjp("AddBackward0")\n', "pkg.inplace": 'vjp("MulBackward0")\n'}
    assert any("declared in pkg.elementwise" in p for p in problems(elsewhere, declared))
    undeclared = {"pkg.elementwise": 'vjp("MulBackward0")\nvjp("AddBackward0")\nrecord("SubBackward0")\n'}
    assert any("never declared" in p for p in problems(undeclared, declared))
    typo = {"pkg.elementwise": 'vjp("MulBackward0")\nvjp("AddBackward0")\nrecord(P.MulBackwrd0)\n'}
    assert any("P.MulBackwrd0" in p for p in problems(typo, declared))
    built = {"pkg.elementwise": 'vjp("MulBackward0")\nvjp("AddBackward0")\nx = f"{k}Backward0"\n'}
    assert any("built from pieces" in p for p in problems(built, declared))
