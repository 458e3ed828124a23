"""The client's own failures say what happened and what to do: an unreachable server, a lost session, a
request past a server limit, a name the client lacks; tracebacks without the client's frames; logging."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

import gradserve
import gradserve.torch as torch
from tests.deploy.servers import Uvicorn, free_port


def test_an_unreachable_server_is_a_connection_error_naming_the_url_and_its_source(monkeypatch):
    port = free_port()
    monkeypatch.setenv("GRADSERVE_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(ConnectionError) as info:
        gradserve.Client(retries=0).create_session()
    error = info.value
    assert isinstance(error, gradserve.ConnectionError) and error.url == f"http://127.0.0.1:{port}"
    message = str(error)
    assert f"http://127.0.0.1:{port} (from GRADSERVE_URL)" in message and "python3 dev.py serve" in message
    assert error.__suppress_context__  # no httpx traceback under it
    monkeypatch.delenv("GRADSERVE_URL")
    assert gradserve.Client(retries=0).url_source == "the default; GRADSERVE_URL is not set"


def test_a_url_without_a_scheme_says_how_to_write_it():
    with pytest.raises(gradserve.ConnectionError, match=r"localhost:1 \(given to the client\): the address has no "
                                                        r"http:// or https:// scheme .* write it as http://localhost:1"):
        gradserve.Client("localhost:1", retries=0).create_session()


def test_an_uncaught_client_error_prints_the_user_s_lines_only(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import gradserve.torch as torch\n\ndef f():\n    return torch.tensor([1.0]) + 1\n\nf()\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env={"GRADSERVE_URL": f"http://127.0.0.1:{free_port()}", "PATH": ""})
    lines = out.stderr.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):" and lines[-1].startswith("gradserve.ConnectionError: ")
    frames = [line for line in lines if line.startswith("  File ")]
    assert len(frames) == 2 and all(str(script) in f for f in frames), out.stderr  # <module> and f, nothing else
    assert "httpx" not in out.stderr and out.returncode == 1


def test_a_lost_session_names_the_tensors_that_are_gone_and_the_next_op_starts_a_new_one(ctx):
    weights = torch.tensor([1.0, 2.0], requires_grad=True)
    bias = torch.tensor([0.5])
    assert (weights * 2).tolist() == [2.0, 4.0]
    old = ctx.session_id
    ctx.client.delete_session(old)   # as if the server restarted or the session expired
    y = weights * bias
    with pytest.raises(gradserve.SessionLostError) as info:
        y.tolist()
    error = info.value
    assert isinstance(error, RuntimeError) and error.session_id == old
    assert {"weights", "bias", "y"} <= set(error.tensors)
    assert f"no longer has this program's session {old}" in str(error) and "weights, bias" in str(error)
    with pytest.raises(gradserve.SessionLostError):
        weights + 1                   # a tensor of the lost session
    fresh = torch.tensor([3.0])
    assert (fresh * 2).tolist() == [6.0] and ctx.session_id not in (None, old)


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory):
    srv = Uvicorn.for_app({"GRADSERVE_RATE_LIMIT_PER_SECOND": "0", "GRADSERVE_CLIENT_RATE_LIMIT_PER_SECOND": "0",
                           "GRADSERVE_MAX_OPS_PER_REQUEST": "20",
                           "GRADSERVE_MAX_ELEMENTS_PER_TENSOR": "1000000", "GRADSERVE_REQUEST_DEADLINE_SECONDS": "0.2"},
                          tmp_path_factory.mktemp("strict") / "uvicorn.log")
    srv.start()
    yield srv
    srv.stop()


def test_a_request_over_a_per_request_limit_names_the_setting_and_the_two_ways_out(strict_server):
    with gradserve.session(client=gradserve.Client(strict_server.url)) as ctx:
        x = torch.tensor([1.0])
        for _ in range(30):
            x = x + 1
        with pytest.raises(RuntimeError) as info:
            x.item()
        notes = "\n".join(info.value.__notes__)
        assert "GRADSERVE_MAX_OPS_PER_REQUEST" in str(info.value)
        assert "sync more often" in notes and "raise GRADSERVE_MAX_OPS_PER_REQUEST on the server" in notes
        assert "applied" not in notes  # nothing of the request was applied, and nothing claims otherwise
        y = torch.tensor([1.0])
        for _ in range(5):
            y = y * 2
        assert y.item() == 32.0 and ctx.session_id is not None


def test_a_sync_past_the_deadline_applies_nothing_says_so_and_names_the_two_ways_out(strict_server):
    with gradserve.session(client=gradserve.Client(strict_server.url)):
        # 8 float64 products of 2 GFLOP each and a 1000 x 1000 SVD: past 0.2 s on any machine, within the
        # strict server's 20 ops (float32 products alone were not past it on an idle machine)
        x = torch.rand(1000, 1000, dtype=torch.float64)
        gradserve.sync()
        y = x
        for _ in range(8):
            y = (y @ x).tanh()
        y = torch.linalg.svdvals(y)
        with pytest.raises(RuntimeError) as info:
            y.sum().item()
        assert "ran past its deadline of 0.2 s (GRADSERVE_REQUEST_DEADLINE_SECONDS); nothing was applied" in \
            str(info.value)
        notes = "\n".join(info.value.__notes__)
        assert "sync more often" in notes and "raise GRADSERVE_REQUEST_DEADLINE_SECONDS on the server" in notes
        assert "are applied" not in notes
        with pytest.raises(RuntimeError, match="never computed"):
            y.tolist()
        assert x.shape == (1000, 1000) and (x[0, :2] * 0).tolist() == [0.0, 0.0]  # the session goes on


def test_a_tensor_over_a_size_limit_names_the_setting(strict_server):
    with gradserve.session(client=gradserve.Client(strict_server.url)):
        with pytest.raises(RuntimeError) as info:
            torch.zeros(2_000_000).sum().item()
        assert "GRADSERVE_MAX_ELEMENTS_PER_TENSOR" in str(info.value)
        assert "raise GRADSERVE_MAX_ELEMENTS_PER_TENSOR on the server" in "\n".join(info.value.__notes__)


def test_a_name_the_client_lacks_says_it_is_gradserve_s_module_and_where_the_list_is(ctx):
    with pytest.raises(AttributeError, match=r"^module 'torch' has no attribute 'stft' \(this is gradserve.torch, "
                                             r"gradserve's torch-like module, not PyTorch: .* listed at http"):
        torch.stft  # noqa: B018
    with pytest.raises(AttributeError, match=r"^'Tensor' object has no attribute 'no_such_method' \(this is "):
        torch.tensor([1.0]).no_such_method  # noqa: B018
    for missing, module in ((lambda: torch.nn.Conv3d, "torch.nn"), (lambda: torch.optim.LBFGS, "torch.optim"),
                            (lambda: torch.nn.functional.no_such_function, "torch.nn.functional")):
        with pytest.raises(AttributeError, match=rf"^module '{module}' has no attribute '\w+' \(this is gradserve"):
            missing()
    assert not hasattr(torch, "__wrapped__")  # protocol probes stay plain
    assert torch.nn.Linear and torch.optim.SGD  # what the client has is found as before


def test_requests_are_logged_at_debug_with_sizes_and_times(ctx, caplog):
    with caplog.at_level(logging.DEBUG, logger="gradserve"):
        (torch.tensor([1.0]) * 2).item()
    lines = [r.getMessage() for r in caplog.records if r.name == "gradserve"]
    assert any(line.startswith("POST /v1/sessions/") and " -> 200: " in line and "bytes sent" in line
               and line.endswith(" ms") for line in lines), lines
    assert any(line.startswith("sync: 3 ops sent") for line in lines), lines


def test_the_client_s_frames_are_marked_for_ipython_and_pytest_to_hide(ctx):
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    for line in (lambda: x.add_(1), lambda: x + torch.ones(3), lambda: x[torch.tensor([9])].tolist()):
        with pytest.raises(Exception) as info:  # noqa: PT011 - the classes are torch's, checked elsewhere
            line()
        tb, ours = info.value.__traceback__, []
        while tb is not None:
            if tb.tb_frame.f_globals.get("__name__", "").startswith("gradserve."):
                ours.append((tb.tb_frame.f_code.co_name, "__tracebackhide__" in tb.tb_frame.f_locals))
            tb = tb.tb_next
        assert ours and all(hidden for _, hidden in ours), ours
