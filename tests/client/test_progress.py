"""Progress of long requests: the server's progress route, fed by the engine, and the client's bar on stderr."""

from __future__ import annotations

import re
import threading
import time

import gradserve.torch as torch
from gradserve.progress import bar

# elementwise ops on 250,000 elements: about a millisecond each on any machine, without BLAS threads
LONG = [{"op": "exp", "args": ["x"], "out": "y"}, {"op": "log", "args": ["y"], "out": "x"}]


def test_the_progress_route_reports_ops_run_of_ops_x_repeat_while_a_request_runs(http):
    s = http.create_session()["id"]
    http.run_ops(s, [{"op": "rand", "out": "x", "args": [[500, 500]]}])
    for ops, repeat in ((LONG * 60, 1), (LONG, 60)):
        rid = f"progress-test-{repeat}"
        work = threading.Thread(target=lambda ops=ops, repeat=repeat, rid=rid: http.request(
            "POST", f"/v1/sessions/{s}/ops", json={"ops": ops, "repeat": repeat}, headers={"x-request-id": rid}))
        work.start()
        seen = []
        while work.is_alive():
            seen.append(http.progress(rid))
            time.sleep(0.005)
        work.join()
        running = [p for p in seen if p["state"] == "running" and p["total"]]  # (total 0: not started yet)
        assert running, seen
        assert all(p["total"] == 120 and 0 <= p["done"] <= 120 and p["elapsed_seconds"] >= 0 for p in running), \
            running
        assert [p["done"] for p in running] == sorted(p["done"] for p in running)
        after = http.progress(rid)
        assert after == {"request_id": rid, "state": "unknown", "done": 0, "total": 0, "elapsed_seconds": 0.0}


def test_the_bar_format():
    assert bar(30, 120, 3.14) == "gradserve: 30/120 ops |######                  |  25% 3.1s"
    assert bar(5, 0, 1.0) == "gradserve: 5 ops 1.0s"


def _long_sync():
    x = torch.rand(500, 500)
    for _ in range(60):
        x = x.exp().log()
    return x.sum().item()


def test_a_long_sync_draws_a_bar_on_stderr_and_erases_it(ctx, capsys, monkeypatch):
    monkeypatch.setenv("GRADSERVE_PROGRESS", "1")        # (stderr is not a terminal under pytest)
    monkeypatch.setenv("GRADSERVE_PROGRESS_AFTER", "0.01")
    _long_sync()
    err = capsys.readouterr().err
    assert "\rgradserve: " in err and re.search(r"/12\d ops \|#* *\| +\d+% \d+\.\ds", err), err
    assert err.endswith("\r") and err.rstrip("\r").split("\r")[-1].strip() == ""  # erased at the end


def test_no_bar_when_turned_off_or_not_a_terminal(ctx, capsys, monkeypatch):
    monkeypatch.setenv("GRADSERVE_PROGRESS_AFTER", "0.01")
    monkeypatch.delenv("GRADSERVE_PROGRESS", raising=False)
    _long_sync()
    monkeypatch.setenv("GRADSERVE_PROGRESS", "0")
    _long_sync()
    assert capsys.readouterr().err == ""
