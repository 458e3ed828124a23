"""The documentation's code as data: every fenced block of every page (``docs/**/*.md`` and README.md), the
curl walk-throughs among them as commands, in order, each with the claims of the `# →` lines under it, and a
checker for those claims against what the command printed.

A block runs in a test by its kind: a ``sh`` block of curl commands is a walk-through (its page's blocks run
in order in one shell state, tests/docs/test_walkthrough.py), a ``python`` block runs against a live server
and a ``json`` block is a request body sent to ``POST /v1/eval`` (tests/docs/test_code_blocks.py). A block
that cannot run in a test (one that starts a server which runs until stopped, or needs Docker) is preceded by
``<!-- not run: why; the test that checks it instead -->``; a block preceded by ``<!-- expect: claims -->``
has its response checked against those claims.

Claim grammar (one `# →` line, parts separated by `;`, a trailing parenthesis is commentary):
``200`` or ``409 graph_freed`` (status and, for problems, the code); ``name = value`` (a tensor's data, or a
gradient: ``x.grad``); ``name.field = value`` (a field of the tensor's view); for a problem, ``field = value``
(a field of the problem body); ``contains "text"``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
ARROW = "# →"
MARKER = re.compile(r"<!--\s*(not run|expect):\s*(.*?)\s*-->\s*$")


def pages() -> list[Path]:
    """Every page a reader sees: README.md and the site's hand-written pages."""
    return [README, *sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)]


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


@dataclass
class Block:
    path: Path
    line: int  # of the block's first line of code, 1-based
    lang: str
    code: str
    marker: tuple[str, str] | None = None  # ("not run", why) or ("expect", claims)

    @property
    def is_walkthrough(self) -> bool:
        return self.lang == "sh" and self.marker is None and any(
            ln.startswith(("curl ", "S=$(curl")) for ln in self.code.splitlines())


def blocks(path: Path, text: str | None = None) -> list[Block]:
    """The page's fenced code blocks, with the marker comment on the line before each, if any."""
    text = path.read_text() if text is None else text
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            lang = line[3:].strip().split(" ")[0]
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            assert j < len(lines), f"{where(path, i + 1)}: a code block that never ends"
            marker = None
            if i > 0 and (m := MARKER.match(lines[i - 1].strip())):
                marker = (m.group(1), m.group(2))
            found.append(Block(path, i + 2, lang, "\n".join(lines[i + 1:j]), marker))
            i = j + 1
        else:
            i += 1
    return found


@dataclass
class Step:
    command: str
    line: int  # in the page, 1-based
    path: Path = README
    claims: list[str] = field(default_factory=list)


def walkthrough(path: Path = DOCS / "tutorial" / "first-gradient.md", text: str | None = None) -> list[Step]:
    """The commands of the page's walk-through blocks, in order, each with its claims."""
    steps: list[Step] = []
    for block in blocks(path, text):
        if not block.is_walkthrough:
            continue
        open_lines: list[str] = []
        for offset, line in enumerate(block.code.splitlines()):
            if open_lines:
                open_lines.append(line)
            elif line.startswith(ARROW):
                assert steps, f"{where(path, block.line + offset)}: a claim before any command"
                steps[-1].claims.append(line[len(ARROW):].strip())
                continue
            elif not line.strip() or line.lstrip().startswith("#"):
                continue
            else:
                open_lines = [line]
                steps.append(Step("", block.line + offset, path))
            joined = "\n".join(open_lines)
            if joined.count("'") % 2 == 0 and not joined.endswith("\\"):
                steps[-1].command = joined
                open_lines = []
        assert not open_lines, f"{where(path, block.line)}: the walk-through ends inside a command"
    return steps


def parse_value(text: str):
    text = re.sub(r"\s*\(.*\)$", "", text.strip())
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def same(actual, expected) -> bool:
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(
            same(a, e) for a, e in zip(actual, expected, strict=True))
    if isinstance(expected, bool) or expected is None or isinstance(expected, str):
        return actual == expected and type(actual) is type(expected)
    if isinstance(expected, (int, float)):
        return (isinstance(actual, (int, float)) and not isinstance(actual, bool)
                and math.isclose(actual, expected, rel_tol=1e-6, abs_tol=1e-9))
    return actual == expected


def _views(body) -> dict:
    if not isinstance(body, dict):
        return {}
    if isinstance(body.get("tensors"), dict):
        return body["tensors"]
    if "name" in body and "data" in body:
        return {body["name"]: body}
    return {}


def _actual(body, status: int, target: str):
    """The value a claim's left side names in the response."""
    if status >= 400:
        return body[target]
    views = _views(body)
    if target in views:
        return views[target]["data"]
    base, _, fld = target.rpartition(".")
    if not base or base not in views:
        raise AssertionError(f"the response has no tensor {base or target!r} (it has {sorted(views)})")
    if fld == "grad":
        return views[base]["grad"]
    if fld not in views[base]:
        raise AssertionError(f"a tensor view has no field {fld!r}")
    return views[base][fld]


def check_claims(claims: list[str], status: int, text: str) -> int:
    """Raise AssertionError at the first claim the response contradicts; return how many were checked."""
    body = None
    if text.strip():
        try:
            body = json.loads(text)
        except json.JSONDecodeError:
            body = None
    checked = 0
    for claim_line in claims:
        for part in (p.strip() for p in claim_line.split(";")):
            if not part:
                continue
            checked += 1
            if m := re.fullmatch(r"(\d{3})(?:\s+([a-z_]+))?(?:\s*\(.*\))?", part):
                assert status == int(m.group(1)), f"{part!r}: the status is {status}: {text[:300]}"
                if m.group(2):
                    assert body is not None and body.get("code") == m.group(2), f"{part!r}: {text[:300]}"
            elif m := re.fullmatch(r'contains "(.+)"', part):
                assert m.group(1) in text, f"{part!r}: not in the response: {text[:300]}"
            elif m := re.fullmatch(r"([A-Za-z_][\w.]*)\s*=\s*(.+)", part):
                assert body is not None, f"{part!r}: the response is not JSON: {text[:300]}"
                expected = parse_value(m.group(2))
                actual = _actual(body, status, m.group(1))
                assert same(actual, expected), f"{part!r}: the response says {m.group(1)} = {actual!r}"
            else:
                raise AssertionError(f"a claim this checker cannot read: {part!r}")
    return checked
