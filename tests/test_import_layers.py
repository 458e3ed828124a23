"""The import contract of the packages (issue #22): the engine's layers only point down, the engine has no
import cycle, the app sees the engine through its package surface only, the client never imports the server.

Imports are read with ``ast`` from the source, so an import inside a function or method counts as much as
one at the top of a module (a lazy import hides a cycle from Python, not from this test), and so does
``importlib.import_module("...")`` with a literal name. The tests under ``tests/`` are not checked: they test
internals and may import any submodule.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The engine's layers, lowest first, as module names under ``gradserve_server.engine`` ("" is the package
#: itself). A module imports modules of its own layer or of lower ones; a lower layer that must call up has
#: a hook slot the upper module fills at import (``engine/__init__`` imports every layer, so hooks are set).
LAYERS: tuple[tuple[str, ...], ...] = (
    # 1. core object model: tensors, graph nodes, the modes (grad, forward AD level, vmap level), budgets
    ("rules", "dtypes", "errors", "journal", "budget", "kernel", "grad_mode", "dual", "generator", "printing",
     "node", "tensor", "views"),
    # 2. the op table, the argument parser and the batching rules (declared with the ops, run by autodiff);
    # torch_args is torch's parser itself, with no engine import (the client links it)
    ("torch_args", "registry", "signature", "batching"),
    # 3. what every family shares, then the families (and the package that imports them all)
    ("ops.common",),
    ("ops", "ops.attention", "ops.backward", "ops.composites", "ops.conv", "ops.creation",
     "ops.decompositions", "ops.einsum", "ops.elementwise", "ops.indexing", "ops.inplace", "ops.linalg",
     "ops.matrix", "ops.nn", "ops.nn_functional", "ops.normalization", "ops.order_stats", "ops.pooling",
     "ops.queries", "ops.random", "ops.reduction", "ops.scan", "ops.shape", "ops.special", "ops.upsample"),
    # 4. autodiff: the backward scheduler, forward mode
    ("autograd", "forward_ad"),
    # 5. transforms and user-defined functions
    ("custom_function", "functional"),
    # 6. the eager interpreter
    ("program",),
    # 7. the trace layer, one package: the routes' vocabulary, what a replay returns, generated code's sources, the
    # one executor (steps, optimiser, code generator, interpreter), the one keyer, per-op composition, the one
    # cache, whole-list plans, and the one dispatch over them
    ("trace", "trace.route", "trace.replayed", "trace.sources", "trace.tape", "trace.key", "trace.compose",
     "trace.cache", "trace.plan", "trace.dispatch"),
    # 8. the surface
    ("serialize", "torch_compat", "graph", "testing", ""),
)

#: Imports that break the contract today, each with the reason it is still there. Every entry must still
#: exist (a stale entry fails the test): the list only shrinks.
KNOWN: dict[tuple[str, str], str] = {}

ENGINE = "gradserve_server.engine"


# --- reading imports ---------------------------------------------------------------------------------------


def modules_of(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package rooted at ``root`` (a directory holding ``__init__.py``), by dotted name."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((package, *parts))] = path
    return out


def _resolve(target: str, known: dict[str, Path]) -> str | None:
    """The longest known module that ``target`` (a dotted name) is or lies in, None when outside them."""
    while target:
        if target in known:
            return target
        target = target.rpartition(".")[0]
    return None


def _import_module_name(node: ast.Call) -> tuple[str, bool] | None:
    """The literal name given to ``importlib.import_module`` (and whether it is relative to this package)."""
    fn = node.func
    name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
    if name != "import_module" or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value, arg.value.startswith(".")
    return None


def imports_of(module: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """``(imported module, line, inside a function)`` for each first-party import of ``module``."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]

    def absolute(name: str, level: int) -> str:
        base = package
        for _ in range(level - 1):
            base = base.rpartition(".")[0]
        return f"{base}.{name}" if name else base

    found: list[tuple[str, int, bool]] = []

    def add(target: str, line: int, lazy: bool) -> None:
        resolved = _resolve(target, known)
        if resolved is not None and resolved != module:
            found.append((resolved, line, lazy))

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name, child.lineno, lazy)
            elif isinstance(child, ast.ImportFrom):
                base = absolute(child.module or "", child.level) if child.level else child.module or ""
                for alias in child.names:
                    # ``from pkg import sub`` imports the submodule; ``from mod import name`` the module
                    add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base, child.lineno, lazy)
            elif isinstance(child, ast.Call) and (name := _import_module_name(child)):
                text, relative = name
                if relative:
                    dots = len(text) - len(text.lstrip("."))
                    text = absolute(text[dots:], dots)
                add(text, child.lineno, lazy)
            visit(child, lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, list[tuple[str, int, bool]]]:
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


# --- checks ------------------------------------------------------------------------------------------------


def layer_table(layers: tuple[tuple[str, ...], ...], package: str) -> dict[str, int]:
    return {(f"{package}.{m}" if m else package): i for i, layer in enumerate(layers) for m in layer}


def upward_imports(graph, layer: dict[str, int], known: dict[tuple[str, str], str], package: str):
    """Imports from a module to a module of a higher layer, as ``(src, dst, line)``, known ones left out."""
    out = []
    for src, deps in graph.items():
        for dst, line, _ in deps:
            if src in layer and dst in layer and layer[dst] > layer[src] and _short(src, dst, package) not in known:
                out.append((src, dst, line))
    return sorted(set(out))


def cycles(graph, known: dict[tuple[str, str], str], package: str) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), known edges left out."""
    edges = {m: sorted({d for d, _, _ in deps if d in graph and _short(m, d, package) not in known})
             for m, deps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return sorted(out)


def stale(graph, known: dict[tuple[str, str], str], package: str) -> list[tuple[str, str]]:
    present = {_short(src, dst, package) for src, deps in graph.items() for dst, _, _ in deps}
    return sorted(set(known) - present)


def _short(src: str, dst: str, package: str) -> tuple[str, str]:
    def cut(m: str) -> str:
        return "" if m == package else m.removeprefix(package + ".")
    return cut(src), cut(dst)


# --- the contract ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server_graph():
    return import_graph(modules_of(ROOT / "gradserve_server", "gradserve_server"))


@pytest.fixture(scope="module")
def engine_graph(server_graph):
    return {m: [d for d in deps if d[0].startswith(ENGINE)] for m, deps in server_graph.items()
            if m == ENGINE or m.startswith(ENGINE + ".")}


def test_every_engine_module_has_a_layer(engine_graph):
    layer = layer_table(LAYERS, ENGINE)
    assert sorted(set(engine_graph) - set(layer)) == []
    assert sorted(set(layer) - set(engine_graph)) == []


def test_engine_imports_point_down(engine_graph):
    up = upward_imports(engine_graph, layer_table(LAYERS, ENGINE), KNOWN, ENGINE)
    assert [f"{s} -> {d} (line {n})" for s, d, n in up] == []


def test_engine_has_no_import_cycle(engine_graph):
    assert cycles(engine_graph, KNOWN, ENGINE) == []


def test_known_exceptions_still_exist(engine_graph):
    assert stale(engine_graph, KNOWN, ENGINE) == []


def test_app_imports_only_the_engine_package(server_graph):
    bad = [f"{m} -> {d} (line {n})" for m, deps in server_graph.items() if m.startswith("gradserve_server.app")
           for d, n, _ in deps if d.startswith(ENGINE + ".")]
    assert bad == []


def test_client_imports_no_server_package():
    graph = import_graph(modules_of(ROOT / "client" / "gradserve", "gradserve"))
    assert graph, "the client package was not found"
    bad = []
    for module, path in modules_of(ROOT / "client" / "gradserve", "gradserve").items():
        names = {"gradserve_server": None, "gradserve_server.engine": None, "gradserve_server.app": None}
        bad += [f"{module} -> {d} (line {n})" for d, n, _ in imports_of(module, path, names)]
    assert bad == []


# --- the checker on a package with violations ------------------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


SYNTHETIC_LAYERS = (("core",), ("table",), ("top",), ("",))


def test_checker_finds_an_upward_import_inside_a_function(tmp_path):
    _write(tmp_path / "pkg", {
        "__init__.py": "from . import top\n",
        "core.py": "def backward():\n    from .top import run\n    return run()\n",
        "table.py": "from .core import backward\n",
        "top.py": "from . import table\n\ndef run():\n    return table\n",
    })
    graph = import_graph(modules_of(tmp_path / "pkg", "pkg"))
    layer = layer_table(SYNTHETIC_LAYERS, "pkg")
    assert upward_imports(graph, layer, {}, "pkg") == [("pkg.core", "pkg.top", 2)]
    assert cycles(graph, {}, "pkg") == [["pkg.core", "pkg.table", "pkg.top"]]
    # a known exception is left out of both checks, and reported once it is gone
    known = {("core", "top"): "reason"}
    assert upward_imports(graph, layer, known, "pkg") == []
    assert cycles(graph, known, "pkg") == []
    assert stale(graph, {("table", "top"): "gone"}, "pkg") == [("table", "top")]


def test_checker_reads_relative_import_module_and_nested_functions(tmp_path):
    _write(tmp_path / "pkg", {
        "__init__.py": "",
        "core.py": """\
            import importlib

            class A:
                def f(self):
                    def g():
                        return importlib.import_module(".sub.deep", __package__)
                    return g
            """,
        "sub/__init__.py": "",
        "sub/deep.py": "from ..core import A\n",
    })
    graph = import_graph(modules_of(tmp_path / "pkg", "pkg"))
    assert graph["pkg.core"] == [("pkg.sub.deep", 6, True)]
    assert graph["pkg.sub.deep"] == [("pkg.core", 1, False)]
    assert cycles(graph, {}, "pkg") == [["pkg.core", "pkg.sub.deep"]]


def test_checker_sees_a_submodule_import_from_outside(tmp_path):
    _write(tmp_path / "pkg", {
        "__init__.py": "",
        "engine/__init__.py": "from .plan import run\n",
        "engine/plan.py": "def run():\n    pass\n",
        "app.py": "import pkg.engine\n\ndef f():\n    from pkg.engine.plan import run\n    return run\n",
    })
    graph = import_graph(modules_of(tmp_path / "pkg", "pkg"))
    assert graph["pkg.app"] == [("pkg.engine", 1, False), ("pkg.engine.plan", 4, True)]
