"""Torch scenarios run line by line: each line in its own ``try``, what it raises (class and message) and
prints recorded, so that a run with ``import torch`` and one with ``gradserve.torch`` compare line by line.

A scenario file holds scenarios separated by blank lines; ``#`` lines are comments. Every scenario starts
from a namespace with ``torch`` (and ``F``, ``nn``) only.

    python -m tests.client.scenario_check         # rewrites the fixtures from the installed torch
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

HERE = Path(__file__).parent / "scenarios"
FILES = sorted(HERE.glob("*.txt"))
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def scenarios(path: Path) -> list[list[str]]:
    out, block = [], []
    for line in [*path.read_text().splitlines(), ""]:
        if not line.strip():
            if block:
                out.append(block)
            block = []
        elif not line.startswith("#"):
            block.append(line)
    return out


def run(torch, lines: list[str]) -> list[dict]:
    """Each line's outcome: ``printed`` (stdout) and ``raised`` ([class name, message] or None)."""
    import importlib

    names = {"torch": torch, "F": importlib.import_module(torch.__name__ + ".nn.functional"),
             "nn": importlib.import_module(torch.__name__ + ".nn")}
    outcomes = []
    for line in lines:
        printed, raised = io.StringIO(), None
        with contextlib.redirect_stdout(printed):
            try:
                exec(compile(line, "<scenario>", "exec"), names)  # noqa: S102 - the scenario's own line
            except Exception as exc:  # noqa: BLE001 - what the line raises is the outcome
                raised = [type(exc).__name__, str(exc)]
        outcomes.append({"line": line, "printed": _ADDRESS.sub(" at 0x", printed.getvalue()), "raised": raised})
    return outcomes


def fixture_path(path: Path) -> Path:
    return HERE / f"{path.stem}.torch.json"


def main() -> None:
    import torch

    for path in FILES:
        fixture = {"torch": torch.__version__, "scenarios": [run(torch, block) for block in scenarios(path)]}
        fixture_path(path).write_text(json.dumps(fixture, indent=1) + "\n")
        print(f"{fixture_path(path).name}: {sum(len(s) for s in fixture['scenarios'])} lines")


if __name__ == "__main__":
    main()
