"""The reference pages generated from the code at every build (mkdocs hook, named in mkdocs.yml):

- ``reference/ops.md``: the op catalog, from the engine's op table (``gradserve_server.engine.op_catalog()``,
  what ``GET /v1/ops`` answers), as one table a reader filters in the page (``assets/catalog.js``);
- ``reference/settings.md``: every setting of ``gradserve_server.app.config.Settings`` (its field, the
  environment variable, type, default, bounds and description);
- ``reference/http.md``: every operation and schema of the committed OpenAPI document
  (``openapi/openapi.json``);
- ``tutorial/graph.svg``: the graph picture of the tutorial's program (the op list its page sends), drawn by
  the server's own built-in SVG layout.

The pages exist only in the built site; nothing generated is committed.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
OPENAPI = ROOT / "openapi" / "openapi.json"


def on_files(files, config):
    for uri, content in (("reference/ops.md", ops_page()), ("reference/settings.md", settings_page()),
                         ("reference/http.md", http_page())):
        files.append(File.generated(config, uri, content=content))
    files.append(File.generated(config, "tutorial/graph.svg", content=graph_picture()))
    return files


# ----- the tutorial's graph picture -----

def graph_picture() -> str:
    """The SVG that `GET /graph?root=s&format=svg` gives for the op list tutorial/graph.md sends (the
    built-in layout, as a server without Graphviz draws it)."""
    import re

    import gradserve_server.engine as E
    from gradserve_server.app.svg import render_svg

    page = (ROOT / "docs" / "tutorial" / "graph.md").read_text()
    body = json.loads(re.search(r"/ops -H 'content-type: application/json' -d '(.*?)'", page, re.S).group(1))
    state = E.State()
    E.run_program(state, body["ops"])
    graph = E.export_graph(state, "s")
    return render_svg(graph, E.to_dot(graph), None)


# ----- the op catalog -----

def _signature(entry: dict) -> str:
    parts = []
    for arg in entry["arguments"]:
        text = arg["name"]
        if arg.get("tensor_list"):
            text += ": Tensor[]"
        elif arg.get("tensor"):
            text += ": Tensor"
        if not arg.get("required", True):
            text += f"={arg.get('default')!r}"
        parts.append(text)
    return f"{entry['name']}({', '.join(parts)})"


def _cell(text: str) -> str:
    return html.escape(text, quote=False)


def ops_page() -> str:
    from gradserve_server.engine import op_catalog

    catalog = sorted(op_catalog(), key=lambda e: e["name"])
    rows = []
    for e in catalog:
        aliases = ", ".join(e["aliases"])
        grad_fns = ", ".join(e["grad_fns"]) or "-"
        flags = [f for f, on in (("method", e["method"]), ("in-place", e["inplace"]),
                                 ("forward AD", e["forward_ad"]), ("differentiable", e["differentiable"])) if on]
        rows.append(
            f'<tr id="op-{_cell(e["name"])}"><td><code>{_cell(e["name"])}</code></td>'
            f"<td>{_cell(aliases)}</td><td>{_cell(e['family'])}</td>"
            f"<td><code>{_cell(_signature(e))}</code></td><td>{_cell(grad_fns)}</td>"
            f"<td>{_cell(', '.join(flags))}</td><td>{_cell(e['doc'])}</td></tr>")
    families = sorted({e["family"] for e in catalog})
    return f"""---
hide:
  - navigation
  - toc
---

# Op catalog

Every op of the engine's op table ({len(catalog)} ops), as `GET /v1/ops` lists them; this page is generated
from the table at each build of the site. Type in the box to keep the rows that contain every word typed (a
name, an alias, a family such as `{families[0]}`, a `grad_fn` name such as `MulBackward0`, or a word of the
description); a link to this page with `?op=words` opens it filtered. An op's name is what an op list's `"op"`
says; `method` means it is also a Tensor method in `gradserve.torch`; arguments are torch's names, with their
defaults. Names with a dot belong to a torch submodule (`linalg.det` is `torch.linalg.det`); see
[op names and torch's namespaces](requests.md#op-names-and-torchs-namespaces).

<div class="gs-catalog">
<label for="catalog-filter">Filter</label>
<input id="catalog-filter" type="search" placeholder="e.g. linalg, MulBackward0, softmax" autocomplete="off">
<span id="catalog-count">{len(catalog)} of {len(catalog)} ops</span>
<table id="catalog-table">
<thead><tr><th>op</th><th>aliases</th><th>family</th><th>signature</th><th>grad_fn</th><th>flags</th>
<th>description</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody>
</table>
</div>
"""


# ----- settings -----

def _default(name: str, field) -> str:
    if field.default_factory is not None:
        return "computed at start-up (see its description)"
    value = field.default
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) and "bytes" in name and value >= 1024:
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value % size == 0:
                return f"`{value}` ({value // size} {unit})"
    if value == "":
        return "empty"
    return f"`{value}`"


def _bounds(field) -> str:
    out = []
    for m in field.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                out.append(f"{sign} {getattr(m, attr)}")
    return ", ".join(out)


def _type(field) -> str:
    t = field.annotation
    name = getattr(t, "__name__", str(t))
    return {"SecretStr": "str (secret)"}.get(name, name)


def settings_page() -> str:
    from gradserve_server.app.config import Settings

    prefix = Settings.model_config.get("env_prefix", "")
    rows = []
    for name, field in Settings.model_fields.items():
        desc = " ".join((field.description or "").split()).replace("|", "\\|")
        bounds = _bounds(field)
        rows.append(f"| `{prefix}{name.upper()}` | {_type(field)} | {_default(name, field)} | "
                    f"{bounds or '-'} | {desc} |")
    return f"""---
hide:
  - navigation
---

# Settings

Every setting of the server, generated from its settings class (`gradserve_server/app/config.py`,
pydantic-settings) at each build of the site: {len(rows)} settings. Each is read from the environment at
start-up, under the name in the first column; a value out of bounds stops the server at start-up with
pydantic's message. The compose stack passes every one of them through to the API containers (see
[Deploy with Docker and compose](../how-to/docker.md)); what the limits protect is explained in
[Limits and what they protect](../explanation/limits.md).

| environment variable | type | default | bounds | meaning |
|---|---|---|---|---|
{chr(10).join(rows)}
"""


# ----- the HTTP API -----

def _schema_text(schema: dict) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#schema-{name.lower()})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " \\| ".join(_schema_text(s) for s in schema[key])
    t = schema.get("type", "any")
    if t == "array":
        return f"array of {_schema_text(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    return str(t)


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def http_page() -> str:
    doc = json.loads(OPENAPI.read_text())
    out = [f"""# HTTP API

Every operation of the HTTP API, generated at each build of the site from the committed OpenAPI document
(`openapi/openapi.json`, {doc['openapi']}; regenerate it with `python -m gradserve_server.app.openapi_dump`
whenever the API changes: a test fails when it is stale). A running server serves the same document at
`/openapi.json`, Swagger UI at `/docs` (with selectable examples: [Swagger UI](../tutorial/swagger.md)) and
ReDoc at `/redoc`; both work offline. Bodies are JSON; errors are `application/problem+json`
([error model](errors.md)); what an op list may say is in [requests and tensor data](requests.md).

{doc['info'].get('description', '').strip()}

## Endpoints

| method and path | summary |
|---|---|"""]
    ops = [(path, method, op) for path, item in doc["paths"].items() for method, op in item.items()]
    for path, method, op in ops:
        anchor = op["operationId"].replace("_", "-").lower()
        out.append(f"| [`{method.upper()} {path}`](#{anchor}) | {_one_line(op.get('summary'))} |")
    for path, method, op in ops:
        anchor = op["operationId"].replace("_", "-").lower()
        out.append(f"\n## `{method.upper()} {path}` {{ #{anchor} }}\n")
        if op.get("summary"):
            out.append(f"**{op['summary']}**\n")
        if op.get("description"):
            out.append(op["description"].strip() + "\n")
        params = op.get("parameters", [])
        if params:
            out.append("| parameter | in | required | type | meaning |\n|---|---|---|---|---|")
            for p in params:
                schema = p.get("schema", {})
                default = f" (default `{schema['default']}`)" if "default" in schema else ""
                out.append(f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                           f"{_schema_text(schema)}{default} | {_one_line(p.get('description'))} |")
            out.append("")
        body = op.get("requestBody")
        if body:
            for media, content in body.get("content", {}).items():
                examples = ", ".join(f"`{k}`" for k in content.get("examples", {}))
                out.append(f"Request body ({media}): {_schema_text(content.get('schema', {}))}"
                           + (f"; examples in Swagger UI: {examples}" if examples else "") + "\n")
        out.append("| status | meaning | media types |\n|---|---|---|")
        for status, resp in op.get("responses", {}).items():
            media = ", ".join(f"`{m}`" for m in resp.get("content", {}))
            out.append(f"| {status} | {_one_line(resp.get('description'))} | {media or '-'} |")
    out.append("\n## Schemas\n")
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        out.append(f"\n### {name} {{ #schema-{name.lower()} }}\n")
        if schema.get("description"):
            out.append(_one_line(schema["description"]) + "\n")
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            out.append("| field | type | required | meaning |\n|---|---|---|---|")
            for field, spec in props.items():
                out.append(f"| `{field}` | {_schema_text(spec)} | {'yes' if field in required else 'no'} | "
                           f"{_one_line(spec.get('description'))} |")
        elif "type" in schema or "anyOf" in schema:
            out.append(f"A {_schema_text(schema)}.")
    return "\n".join(out) + "\n"
