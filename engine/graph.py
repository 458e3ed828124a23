"""The backward graph as plain data, and DOT / Mermaid text rendered from it.

Function nodes carry torch's class names, each leaf that requires grad appears once as an AccumulateGrad
node, ``next_functions`` edges keep their ``None`` entries, saved values show shape, dtype and whether
they were freed, and each node names the session tensor it produced (when one is bound to a name).
"""

from __future__ import annotations

import math

import numpy as np

from .errors import UnknownTensorError
from .node import Node, SavedTensor
from .tensor import Tensor


def _plain(v):
    if isinstance(v, (bool, int, str)) or v is None:
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else ("NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity"))
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, Tensor):
        return {"kind": "tensor", "shape": list(v.data.shape), "dtype": v.dtype}
    if isinstance(v, np.ndarray):
        return {"kind": "array", "shape": list(v.shape)}
    return repr(v)


def export_graph(tensors: dict, root: str | None = None) -> dict:
    """Graph of ``root`` (a name or ``name.grad``) or of every named tensor when ``root`` is None."""
    names_by_id: dict[int, str] = {}
    for n, t in tensors.items():
        names_by_id.setdefault(id(t), n)
    if root is not None:
        from .program import _lookup
        t = _lookup(tensors, root)
        if t is None:
            raise UnknownTensorError(f"{root!r} is None (no gradient yet)")
        roots = [(root, t)]
    else:
        roots = list(tensors.items())

    ids: dict[int, str] = {}
    order: list[Node] = []

    def node_id(n: Node) -> str:
        key = id(n)
        if key not in ids:
            ids[key] = f"n{len(ids)}"
            order.append(n)
        return ids[key]

    def root_node(t: Tensor):
        if t.grad_fn is not None:
            return t.grad_fn
        if t.requires_grad:
            from .registry import accumulator
            return accumulator(t)
        return None

    root_ids = {}
    for name, t in roots:
        n = root_node(t)
        if n is not None:
            root_ids[name] = node_id(n)
    i = 0
    while i < len(order):
        n = order[i]
        i += 1
        for c, _ in n.next_functions:
            if c is not None:
                node_id(c)
        fn = n.saved.get("fn") if n.name == "CopySlices" else None
        if isinstance(fn, Node):
            node_id(fn)

    producers: dict[int, str] = {}
    for n, t in tensors.items():
        if t.grad_fn is not None and id(t.grad_fn) in ids and t.output_nr == 0:
            producers.setdefault(id(t.grad_fn), n)

    nodes = []
    for n in order:
        entry = {"id": ids[id(n)], "name": n.name,
                 "kind": "accumulate_grad" if n.name == "AccumulateGrad" else "function",
                 "next_functions": [None if c is None else [ids[id(c)], nr] for c, nr in n.next_functions]}
        if n.name == "AccumulateGrad":
            entry["variable"] = names_by_id.get(id(n.variable))
            entry["tensor"] = entry["variable"]
        else:
            entry["tensor"] = producers.get(id(n))
        saved = []
        for slot, v in n.saved.items():
            item = {"name": f"_saved_{slot}"}
            if isinstance(v, SavedTensor):
                item.update(kind="tensor", shape=list(v.shape), dtype=v.dtype, freed=v.tensor is None,
                            is_output=v.is_output)
                if v.tensor is not None and id(v.tensor) in names_by_id:
                    item["is"] = names_by_id[id(v.tensor)]
            elif isinstance(v, Node):
                item.update(kind="node", node=ids.get(id(v)))
            else:
                item.update(kind="value", value=_plain(v))
            saved.append(item)
        entry["saved"] = saved
        nodes.append(entry)
    return {"root": root, "roots": root_ids, "nodes": nodes}


def _label(node: dict) -> str:
    if node["kind"] == "accumulate_grad":
        return f"AccumulateGrad\\n{node.get('variable') or '?'}"
    lines = [node["name"]]
    if node.get("tensor"):
        lines.append(f"-> {node['tensor']}")
    for s in node["saved"]:
        if s["kind"] == "tensor":
            shape = "[" + ", ".join(map(str, s["shape"])) + "]"
            lines.append(f"{s['name']}: {s['dtype']}{shape}{' (freed)' if s['freed'] else ''}")
    return "\\n".join(lines)


def to_dot(graph: dict) -> str:
    """Graphviz DOT text (edges point from a node to its next_functions, as gradients flow)."""
    out = ["digraph backward {", '  rankdir=TB;', '  node [fontname="Helvetica", fontsize=10];']
    for name, nid in graph["roots"].items():
        out.append(f'  "root_{name}" [label="{name}", shape=oval, style=filled, fillcolor="#d6eaf8"];')
        out.append(f'  "root_{name}" -> "{nid}";')
    for n in graph["nodes"]:
        shape = 'shape=box, style="rounded,filled", fillcolor="#d5f5e3"' if n["kind"] == "accumulate_grad" \
            else 'shape=box, style=filled, fillcolor="#fdebd0"'
        out.append(f'  "{n["id"]}" [label="{_label(n)}", {shape}];')
        for e in n["next_functions"]:
            if e is not None:
                out.append(f'  "{n["id"]}" -> "{e[0]}";')
    out.append("}")
    return "\n".join(out) + "\n"


def to_mermaid(graph: dict) -> str:
    """Mermaid flowchart text."""
    out = ["flowchart TB"]
    for name, nid in graph["roots"].items():
        out.append(f'  root_{name}(["{name}"]) --> {nid}')
    for n in graph["nodes"]:
        label = _label(n).replace("\\n", "<br/>").replace('"', "'")
        out.append(f'  {n["id"]}["{label}"]')
        for e in n["next_functions"]:
            if e is not None:
                out.append(f"  {n['id']} --> {e[0]}")
    return "\n".join(out) + "\n"
