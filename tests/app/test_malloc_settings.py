"""glibc's malloc thresholds as the server sets them (app.memory.configure_malloc): arrays of a few MiB freed
at the end of a run are reused by the next one instead of being returned and faulted in again."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradserve_server.app.config import Settings
from gradserve_server.app.memory import configure_malloc, set_malloc_thresholds, thresholds_from_environment

ROOT = Path(__file__).resolve().parents[2]

GLIBC = sys.platform.startswith("linux") and "libc.so.6" in (ctypes.util.find_library("c") or "")

# Runs of 24 arrays of 4 MiB (96 MiB), all freed at the end of each; the minor page faults of the later runs.
RUNS = """
import resource, sys
import numpy as np
from gradserve_server.app.config import Settings
from gradserve_server.app.memory import configure_malloc
print(configure_malloc(Settings()), file=sys.stderr)
faults = []
for run in range(4):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    arrays = [np.ones(1_000_000, np.float32) for _ in range(24)]
    del arrays
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(max(faults[2:]))
"""


def later_runs_faults(**env) -> int:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GRADSERVE_", "MALLOC_", "GLIBC_TUNABLES"))}
    done = subprocess.run([sys.executable, "-c", RUNS], cwd=ROOT, env={**clean, "PYTHONPATH": str(ROOT), **env},
                          capture_output=True, text=True, timeout=120, check=True)
    return int(done.stdout)


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_freed_arrays_are_reused_with_the_servers_thresholds_and_faulted_again_without():
    pages = 24 * 4_000_000 // 4096
    assert later_runs_faults() < pages // 20  # the default settings: kept
    off = {"GRADSERVE_MALLOC_MMAP_THRESHOLD": "0", "GRADSERVE_MALLOC_TRIM_THRESHOLD": "0"}
    assert later_runs_faults(**off) > pages // 2  # glibc's dynamic thresholds: returned and faulted again
    # thresholds given to glibc itself are glibc's: the app leaves them alone
    assert later_runs_faults(MALLOC_TRIM_THRESHOLD_="1048576") > pages // 2


def test_what_is_set_is_said():
    said = configure_malloc(Settings(malloc_mmap_threshold=64 << 20, malloc_trim_threshold=256 << 20))
    if GLIBC and not thresholds_from_environment():
        assert "mmap threshold 32 MiB" in said and "trim threshold 256 MiB" in said  # 32 MiB: glibc's largest
    assert set_malloc_thresholds(0, 0) is False
    configure_malloc(Settings())  # back to the server's defaults for the rest of this process
