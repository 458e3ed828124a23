"""Writes ``tests/client/line_fuzz.json``: what each line of the programs of ``line_fuzz.SEEDS`` prints and raises
in torch (2.13), for ``test_line_fuzz.py``, which compares ``gradserve.torch`` with it without torch. Per program
(by seed): the digest of its text (the test regenerates the program and checks it, so that the generator is not
changed without the fixture) and per line ``[printed, raised]``. Run it by hand after changing the generator:
``.venv/bin/python -m tests.client.line_fuzz_fixture``."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

from tests.client import line_fuzz

FIXTURE = Path(__file__).resolve().parent / "line_fuzz.json"


def digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def record(torch, seed: int) -> dict:
    lines = line_fuzz.program(seed)
    return {"digest": digest(lines), "outcomes": [[o["printed"], o["raised"]] for o in line_fuzz.run(torch, lines)]}


def build() -> dict:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's UserWarnings: not what the lines are compared by)
        programs = {str(seed): record(torch, seed) for seed in line_fuzz.SEEDS}
    return {"torch": torch.__version__, "programs": programs}


if __name__ == "__main__":
    fixture = build()
    programs = ",\n".join(f"{json.dumps(seed)}: {json.dumps(p)}" for seed, p in fixture["programs"].items())
    FIXTURE.write_text(f'{{"torch": {json.dumps(fixture["torch"])}, "programs": {{\n{programs}}}}}\n')
    print(f"wrote {FIXTURE}")
