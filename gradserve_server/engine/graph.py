"""The backward graph as plain data, and DOT / Mermaid text rendered from it.

Function nodes carry torch's class names, each leaf that requires grad appears once as an AccumulateGrad
node, ``next_functions`` edges keep their ``None`` entries, saved values show shape, dtype and whether
they were freed, and each node names the session tensor it produced (when one is bound to a name).

Beside torch's names, each node also describes its tensor the way a learner inspects it (``tensor_info``):
name, shape, dtype, the values of small tensors, and its gradient: a leaf's ``.grad`` with the number of
backward passes accumulated into it, a non-leaf's retained grad. The drawings (DOT, Mermaid, SVG) print
these lines under the node's name, and a graph without nodes says why instead of being blank.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import UnknownTensorError
from .node import ACCUMULATE_GRAD, Node, P, SavedTensor
from .tensor import Tensor

_ACC = ACCUMULATE_GRAD.name
_COPY_SLICES = P.CopySlices.name


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


#: tensors of at most this many elements show their values in the graph
SMALL = 6


def _values(arr) -> object:
    """The values of a small array as plain data (numbers, nested lists), else None."""
    arr = np.asarray(arr)
    if arr.size > SMALL:
        return None
    return _plain(arr.tolist())


def tensor_info(name: str, t: Tensor) -> dict:
    """What a learner looks for in a tensor of the graph: name, shape, dtype, small values, gradient."""
    grad = t._grad if (t.grad_fn is None or t.retains_grad) else None
    info = {"name": name, "shape": list(t.data.shape), "dtype": t.dtype, "value": _values(t.data),
            "is_leaf": t.grad_fn is None, "retains_grad": bool(t.retains_grad),
            "grad": None if grad is None else {"shape": list(grad.data.shape), "dtype": grad.dtype,
                                               "value": _values(grad.data)},
            "grad_accumulations": int(t.grad_accumulations)}
    return info


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
        fn = n.saved.get("fn") if n.name == _COPY_SLICES else None
        if isinstance(fn, Node):
            node_id(fn)

    producers: dict[int, str] = {}
    produced: dict[int, Tensor] = {}
    for n, t in tensors.items():
        if t.grad_fn is not None and id(t.grad_fn) in ids and t.output_nr == 0 and id(t.grad_fn) not in producers:
            producers[id(t.grad_fn)] = n
            produced[id(t.grad_fn)] = t

    nodes = []
    for n in order:
        entry = {"id": ids[id(n)], "name": n.name,
                 "kind": "accumulate_grad" if n.name == _ACC else "function",
                 "next_functions": [None if c is None else [ids[id(c)], nr] for c, nr in n.next_functions]}
        if n.name == _ACC:
            entry["variable"] = names_by_id.get(id(n.variable))
            entry["tensor"] = entry["variable"]
            variable = n.variable
            entry["tensor_info"] = tensor_info(entry["variable"] or "?", variable) if variable is not None \
                else None
        else:
            entry["tensor"] = producers.get(id(n))
            t = produced.get(id(n))
            entry["tensor_info"] = None if t is None else tensor_info(entry["tensor"], t)
        saved = []
        for slot, v in n.saved.items():
            if slot == "function" and n.prim == P.CustomFunctionBackward.name:
                continue  # a custom Function's backward bodies (engine.custom_function): not a saved value
            item = {"name": f"_saved_{slot}"}
            if isinstance(v, SavedTensor):
                item.update(kind="tensor", shape=list(v.shape), dtype=v.dtype, freed=v.freed,
                            is_output=v.is_output)
                live = v.live()
                if live is not None and id(live) in names_by_id:
                    item["is"] = names_by_id[id(live)]
            elif isinstance(v, Node):
                item.update(kind="node", node=ids.get(id(v)))
            else:
                item.update(kind="value", value=_plain(v))
            saved.append(item)
        entry["saved"] = saved
        nodes.append(entry)
    out = {"root": root, "roots": root_ids, "nodes": nodes}
    if not nodes:
        out["message"] = empty_message(root, tensors)
    return out


def empty_message(root: str | None, tensors: dict) -> str:
    """Why a graph has no nodes, and what would give it some."""
    if root is not None:
        return (f"{root} has no autograd graph: it does not require grad (made without requires_grad=True, "
                "under no_grad, or by detach)")
    if not tensors:
        return "No autograd graph: this session holds no tensors yet"
    return ("No autograd graph: no tensor in this session requires grad (create one with requires_grad=True "
            "and a float dtype, then compute with it)")


def _number(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _show(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return _number(value)


def _shape(shape: list) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _tensor_lines(info: dict) -> list[str]:
    head = f"{info['name']}: {info['dtype']}{_shape(info['shape'])}"
    if info["value"] is not None:
        head += f" = {_show(info['value'])}"
    lines = [head]
    grad = info["grad"]
    if grad is None:
        shown = f"{info['name']}.grad = None"
    elif grad["value"] is not None:
        shown = f"{info['name']}.grad = {_show(grad['value'])}"
    else:
        shown = f"{info['name']}.grad: {grad['dtype']}{_shape(grad['shape'])}"
    if info["is_leaf"]:
        n = info["grad_accumulations"]
        lines.append(shown + (f" ({n} accumulation{'s' if n != 1 else ''})" if grad is not None else ""))
    elif info["retains_grad"]:
        lines.append(f"{shown} (retained)")
    return lines


def node_lines(node: dict) -> list[str]:
    """A node's label: torch's name, then its tensor (name, shape, small values, grad) and saved values."""
    lines = [node["name"]]
    info = node.get("tensor_info")
    if info is not None:
        lines.extend(_tensor_lines(info))
    elif node["kind"] == "accumulate_grad":
        lines.append(node.get("variable") or "?")
    elif node.get("tensor"):
        lines.append(f"-> {node['tensor']}")
    for s in node["saved"]:
        if s["kind"] == "tensor":
            lines.append(f"{s['name']}: {s['dtype']}{_shape(s['shape'])}{' (freed)' if s['freed'] else ''}")
    return lines


def _label(node: dict) -> str:
    return "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in node_lines(node))


def to_dot(graph: dict) -> str:
    """Graphviz DOT text (edges point from a node to its next_functions, as gradients flow)."""
    out = ["digraph backward {", '  rankdir=TB;', '  node [fontname="Helvetica", fontsize=10];']
    if not graph["nodes"]:
        out.append(f'  "empty" [shape=note, style=filled, fillcolor="#fff8e1", '
                   f'label="{graph.get("message", "No autograd graph")}"];')
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
    if not graph["nodes"]:
        out.append(f'  empty["{graph.get("message", "No autograd graph")}"]')
    for name, nid in graph["roots"].items():
        out.append(f'  root_{name}(["{name}"]) --> {nid}')
    for n in graph["nodes"]:
        label = _label(n).replace("\\n", "<br/>").replace('"', "'")
        out.append(f'  {n["id"]}["{label}"]')
        for e in n["next_functions"]:
            if e is not None:
                out.append(f"  {n['id']} --> {e[0]}")
    return "\n".join(out) + "\n"
