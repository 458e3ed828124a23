"""Acceptance: the tutorials' code runs with `import torch` bound to gradserve.torch and prints what torch
2.13 printed (stdout, exit status, exception line, warnings), against a real server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TUTORIALS = Path(__file__).resolve().parents[2].parent / "shared" / "tutorials"


def test_every_tutorial_prints_what_torch_prints(server):
    if not (TUTORIALS / "check.py").exists():
        pytest.skip(f"the tutorials are not here ({TUTORIALS} is absent): nothing to check against")
    count = len(list(TUTORIALS.glob("seed*.py")))
    env = {**os.environ, "GRADSERVE_URL": server.url}
    env.pop("GRADSERVE_API_KEY", None)
    p = subprocess.run([sys.executable, str(TUTORIALS / "check.py"), "--module", "gradserve.torch", "--python",
                        sys.executable], capture_output=True, text=True, env=env, timeout=600)
    assert p.stdout.splitlines()[-1] == f"tutorials: {count} passed, 0 failed", p.stdout + p.stderr
    assert p.returncode == 0
