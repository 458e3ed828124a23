"""Names without a server (issue 25): a name torch has and the client lacks is torch's AttributeError saying whose
module this is, ``hasattr`` False, even where no server answers (the client carries the names it covers,
``_covered``, checked here against the server's catalog); a name it covers is found and records once a server
answers."""

from __future__ import annotations

import socket
import subprocess
import sys

import gradserve
import gradserve.torch as torch
from gradserve.torch import _catalog, _covered
from tests.client import covered_names


def test_the_committed_names_are_the_server_catalogs(http):
    assert covered_names.names(http.ops_catalog()) == _covered.NAMES, \
        "client/gradserve/torch/_covered.py is stale: run python -m tests.client.covered_names"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # (closed again when this returns: nothing listens there)


_NO_SERVER = """
import gradserve, gradserve.torch as torch
import gradserve.torch.nn.functional as F
for probe in (lambda: torch.stft, lambda: torch.linalg.qr, lambda: F.no_such_function, lambda: torch.nn.Conv3d):
    try:
        probe()
    except AttributeError as e:
        assert getattr(e, "_gradserve", False) and "this is gradserve.torch" in str(e), e
        print(str(e).split(" (")[0])
print(hasattr(torch, "stft"), hasattr(torch.linalg, "eigh"), hasattr(torch, "exp"), hasattr(torch.linalg, "det"))
print(torch.exp.__name__, F.relu.__module__, "arctan2" in dir(torch), "stft" in dir(torch))
try:
    torch.exp(torch.zeros(2))
except gradserve.ConnectionError:
    print("the call needs the server")
"""


def test_without_a_server_a_missing_name_is_torchs_attribute_error_and_a_covered_one_is_found():
    env = {"GRADSERVE_URL": f"http://127.0.0.1:{_closed_port()}", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", _NO_SERVER], capture_output=True, text=True, env=env, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "module 'torch' has no attribute 'stft'", "module 'torch.linalg' has no attribute 'qr'",
        "module 'torch.nn.functional' has no attribute 'no_such_function'",
        "module 'torch.nn' has no attribute 'Conv3d'",
        "False False True True", "exp torch.nn.functional True False", "the call needs the server"]


def test_with_a_server_its_catalog_decides(ctx, monkeypatch):
    monkeypatch.setattr(_covered, "NAMES", {})  # (the server's catalog answers: the committed names are not read)
    assert _catalog.covered("torch") == (_catalog.names_in("torch"), True)
    assert torch.linalg.det.__doc__ and (torch.ones(2, 2) * 2).arctan2(torch.ones(2, 2)).shape == (2, 2)
    assert not hasattr(torch, "stft") and isinstance(gradserve.ConnectionError("x"), ConnectionError)
