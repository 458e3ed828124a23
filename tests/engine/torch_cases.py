"""Case tables whose outcomes were read off torch 2.13 into a committed fixture (``{"torch": version, "cases":
{key: outcome}}``): the fixture's outcomes, the cases torch now answers otherwise, and writing the fixture again.
``run(key, torch_module)`` gives a case's outcome under either torch or the engine's facade."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest


def recorded_cases(fixture: Path) -> dict:
    return json.loads(fixture.read_text())["cases"]


def not_torchs(cases: Iterable[str], run: Callable, recorded: dict) -> list:
    """The cases whose recorded outcome is not what the installed torch gives (skips without torch)."""
    torch = pytest.importorskip("torch")
    return [k for k in cases if run(k, torch) != recorded[k]]


def record(fixture: Path, cases: Iterable[str], run: Callable) -> None:
    import torch
    out = {"torch": torch.__version__, "cases": {k: run(k, torch) for k in cases}}
    fixture.write_text(json.dumps(out, separators=(",", ":"), sort_keys=True) + "\n")
