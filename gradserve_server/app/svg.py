"""SVG of the autograd graph: Graphviz ``dot`` when installed, else a layered layout in pure Python.

Either way each node shows torch's name and, under it, what ``engine.graph.node_lines`` says about it (the
tensor's name, shape and small values, a leaf's ``.grad`` and accumulation count, a retained grad, saved
values and whether they were freed); a graph without nodes is a picture of the message saying why.

The fallback is deliberately plain: nodes in layers by longest path from the roots (outputs at the top,
leaves' AccumulateGrad nodes below), ordered within a layer by the mean position of their parents, and
straight edges with arrowheads, from each node to its next_functions, as torchviz draws them.
"""

from __future__ import annotations

import logging
import subprocess
from html import escape
from typing import Any

from gradserve_server.engine import node_lines

log = logging.getLogger("gradserve")

BOX_H, GAP_X, GAP_Y, CHAR_W, PAD = 34, 28, 56, 7.2, 12


def graph_edges(graph: dict[str, Any]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Labels by node id and (consumer, input) edges from the exported graph; None edges have no target
    node and are omitted from the drawing (they appear in the JSON form)."""
    labels: dict[str, str] = {}
    edges: list[tuple[str, str]] = []
    for node in graph.get("nodes", []):
        nid = str(node["id"])
        labels[nid] = "\n".join(node_lines(node))
        for edge in node.get("next_functions", []):
            if isinstance(edge, dict):
                target = edge.get("node")
            else:
                target = edge[0] if isinstance(edge, list) else edge
            if target is not None:
                edges.append((nid, str(target)))
    return labels, edges


def _layers(labels: dict[str, str], edges: list[tuple[str, str]]) -> list[list[str]]:
    children: dict[str, list[str]] = {n: [] for n in labels}
    indegree = dict.fromkeys(labels, 0)
    for src, dst in edges:
        if src in children and dst in indegree:
            children[src].append(dst)
            indegree[dst] += 1
    depth = dict.fromkeys(labels, 0)
    queue = [n for n in labels if indegree[n] == 0]
    remaining = dict(indegree)
    while queue:  # Kahn's order gives the longest-path depth in one pass (the graph is a DAG)
        node = queue.pop()
        for child in children[node]:
            depth[child] = max(depth[child], depth[node] + 1)
            remaining[child] -= 1
            if remaining[child] == 0:
                queue.append(child)
    layers: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for node in labels:
        layers[depth[node]].append(node)
    position: dict[str, float] = {}
    parents: dict[str, list[str]] = {n: [] for n in labels}
    for src, dst in edges:
        if dst in parents:
            parents[dst].append(src)
    for layer in layers:
        layer.sort(key=lambda n: sum(position.get(p, 0) for p in parents[n]) / max(len(parents[n]), 1))
        for i, n in enumerate(layer):
            position[n] = i - (len(layer) - 1) / 2
    return layers


def layered_svg(labels: dict[str, str], edges: list[tuple[str, str]]) -> str:
    layers = _layers(labels, edges)
    width_of = {n: max(len(line) for line in labels[n].split("\n")) * CHAR_W + 2 * PAD for n in labels}
    height_of = {n: BOX_H + 14 * (labels[n].count("\n")) for n in labels}
    row_widths = [sum(width_of[n] for n in layer) + GAP_X * (len(layer) - 1) for layer in layers]
    total_w = max(row_widths, default=0) + 2 * GAP_X
    box: dict[str, tuple[float, float, float, float]] = {}
    y = GAP_X / 2
    for layer, row_w in zip(layers, row_widths, strict=True):
        x = (total_w - row_w) / 2
        row_h = max(height_of[n] for n in layer)
        for n in layer:
            box[n] = (x, y, width_of[n], height_of[n])
            x += width_of[n] + GAP_X
        y += row_h + GAP_Y
    total_h = y - GAP_Y + GAP_X / 2
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" height="{total_h:.0f}" '
           f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" font-family="monospace" font-size="12">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" '
           'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z"/></marker></defs>']
    for src, dst in edges:
        if src in box and dst in box:
            sx, sy, sw, sh = box[src]
            dx, dy, dw, _ = box[dst]
            out.append(f'<line x1="{sx + sw / 2:.1f}" y1="{sy + sh:.1f}" '
                       f'x2="{dx + dw / 2:.1f}" y2="{dy:.1f}" stroke="#555" marker-end="url(#arrow)"/>')
    for n, (x, y0, w, h) in box.items():
        fill = "#d9ead3" if labels[n].startswith("AccumulateGrad") else "#dae8fc"
        out.append(f'<g class="node"><rect x="{x:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{h:.1f}" rx="4" '
                   f'fill="{fill}" stroke="#333"/>')
        for i, line in enumerate(labels[n].split("\n")):
            weight = ' font-weight="bold"' if i == 0 else ""
            out.append(f'<text x="{x + w / 2:.1f}" y="{y0 + 21 + 14 * i:.1f}" text-anchor="middle"{weight}>'
                       f'{escape(line)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def message_svg(message: str) -> str:
    """A picture of a sentence (wrapped at about 80 characters), for a graph with nothing to draw."""
    lines: list[str] = []
    for word in message.split():
        if lines and len(lines[-1]) + 1 + len(word) <= 80:
            lines[-1] += " " + word
        else:
            lines.append(word)
    w = max(len(line) for line in lines) * CHAR_W + 2 * PAD
    h = 14 * len(lines) + 2 * PAD + 8
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" '
           'font-family="monospace" font-size="12">',
           f'<rect class="message" x="0.5" y="0.5" width="{w - 1:.0f}" height="{h - 1:.0f}" rx="4" fill="#fff8e1" '
           'stroke="#b08800"/>']
    for i, line in enumerate(lines):
        out.append(f'<text x="{PAD}" y="{PAD + 12 + 14 * i}">{escape(line)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def render_svg(graph: dict[str, Any], dot_source: str, dot_binary: str | None, timeout: float = 5.0) -> str:
    """Graphviz when installed; when it fails or takes longer than ``timeout`` seconds (its layout can take
    minutes on some graphs of a few hundred nodes), the built-in layout."""
    if dot_binary:
        try:
            done = subprocess.run([dot_binary, "-Tsvg"], input=dot_source, capture_output=True, text=True,
                                  timeout=timeout, check=True)
        except (subprocess.SubprocessError, OSError) as exc:
            log.warning("Graphviz dot failed (%s): the built-in layout is drawn instead", type(exc).__name__)
        else:
            return done.stdout
    if not graph.get("nodes"):
        return message_svg(graph.get("message") or "No autograd graph")
    return layered_svg(*graph_edges(graph))
