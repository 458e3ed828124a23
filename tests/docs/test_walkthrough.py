"""The documentation's curl walk-throughs (the tutorial's first gradient and graph picture, the README's first
example), each page's commands run one by one, in order, against a live server, with every `# →` claim
checked against what the command printed (tests/docs/walkthrough.py reads them)."""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
import subprocess

import pytest

from tests.deploy.servers import RedisServer, Uvicorn, redis_server_binary
from tests.docs.walkthrough import DOCS, README, ROOT, blocks, check_claims, pages, walkthrough, where

#: curl writes the status to stderr after the body, so that stdout stays what the reader sees
CURL = "curl() { command curl -w '%{stderr}\\n@@status %{http_code}\\n' \"$@\"; }\n"


#: the pages with a walk-through, and at least how many commands and claims each has
WALKTHROUGHS = {DOCS / "tutorial" / "first-gradient.md": (14, 40), DOCS / "tutorial" / "graph.md": (6, 15),
                DOCS / "how-to" / "monitoring.md": (4, 8), DOCS / "how-to" / "keys.md": (7, 7),
                DOCS / "how-to" / "redis.md": (7, 12), DOCS / "how-to" / "limits.md": (3, 7),
                README: (1, 3)}
#: the command line of the server a page's walk-through runs against (the page starts it so; `{redis}`: the
#: test's own redis-server); the others run against the default server
SERVERS = {
    DOCS / "how-to" / "keys.md":
        "GRADSERVE_API_KEYS=alice-key-8f3a61c2d9e04b7a,bob-key-2c7e90d14a6f53b8 python3 dev.py serve",
    DOCS / "how-to" / "redis.md": "GRADSERVE_STORE_URL={redis} python3 dev.py serve --workers 2",
    DOCS / "how-to" / "limits.md":
        "GRADSERVE_MAX_OPS_PER_REQUEST=3 GRADSERVE_MAX_ELEMENTS_PER_TENSOR=1000 python3 dev.py serve",
}
PAGE_REDIS = "redis://127.0.0.1:6379/0"


@contextlib.contextmanager
def page_server(page, workdir):
    """The server the page starts: its environment and uvicorn arguments, on a free port (and the test's own
    redis-server where the page uses a Redis)."""
    line = SERVERS[page]
    assert line.format(redis=PAGE_REDIS) in page.read_text(), f"{page.name} starts its server otherwise"
    redis_server = None
    if "{redis}" in line:
        if redis_server_binary() is None:
            pytest.skip("redis-server is not on PATH (Debian's redis-server; python3 dev.py test installs it)")
        redis_server = RedisServer(workdir).start()
    words = line.format(redis=redis_server.url if redis_server else PAGE_REDIS).split()
    env = dict(w.split("=", 1) for w in words if "=" in w and w.startswith("GRADSERVE_"))
    extra = words[words.index("serve") + 1:]
    srv = Uvicorn.for_app(env, workdir / "uvicorn.log", *extra)
    try:
        yield srv.start()
    finally:
        srv.stop()
        if redis_server is not None:
            redis_server.stop()


def run_walkthrough(base_url: str, workdir, page) -> list[tuple[int, int]]:
    """Run every command of the page in one shell state (variables carry over); return (claims checked, line)."""
    state = workdir / "state.sh"
    state.write_text("")
    done = []
    for step in walkthrough(page):
        command = step.command.replace("localhost:8000", base_url.removeprefix("http://"))
        assigned = re.findall(r"^([A-Za-z_]\w*)=", command, flags=re.M)
        save = "".join(f"declare -p {name} >> {shlex.quote(str(state))}\n" for name in assigned)
        script = f"{CURL}. {shlex.quote(str(state))}\nset -o pipefail\n{command}\n{save}"
        ran = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True,
                             timeout=60, cwd=workdir)
        at = f"{where(page, step.line)}: {step.command.splitlines()[0]}"
        assert ran.returncode == 0, f"{at}\nexit {ran.returncode}: {ran.stderr}"
        statuses = re.findall(r"@@status (\d{3})", ran.stderr)
        assert statuses, f"{at}: curl reported no status: {ran.stderr}"
        if assigned:
            for name in assigned:
                assert re.search(rf"declare -\S* {name}=\"[^\"]+\"", state.read_text()), f"{at}: {name} is empty"
        else:
            assert step.claims, f"{at}: a command without a '# →' line saying what it answers"
        try:
            checked = check_claims(step.claims, int(statuses[-1]), ran.stdout)
        except AssertionError as exc:
            raise AssertionError(f"{at}\n{exc}") from None
        done.append((checked, step.line))
    return done


@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("bash") is None,
                    reason="the walk-through needs curl and bash on PATH")
@pytest.mark.parametrize("page", list(WALKTHROUGHS), ids=lambda p: str(p.relative_to(ROOT)))
def test_walkthrough_runs_in_order_and_every_claim_is_true(server, tmp_path, page):
    if page not in SERVERS:
        done = run_walkthrough(server.url, tmp_path, page)
    else:
        with page_server(page, tmp_path) as own:
            done = run_walkthrough(own.url, tmp_path, page)
    commands, claims = WALKTHROUGHS[page]
    assert len(done) >= commands
    assert sum(checked for checked, _ in done) >= claims


def test_every_page_with_a_walkthrough_is_run():
    found = {p for p in pages() if any(b.is_walkthrough for b in blocks(p))}
    assert found == set(WALKTHROUGHS)


def test_the_walkthrough_reader_finds_every_command_and_claim():
    steps = walkthrough()
    assert steps[0].command.startswith("S=$(curl")
    assert all(s.command.startswith(("S=", "curl ")) for s in steps)
    multi = [s for s in steps if "\n" in s.command]
    assert multi and all(s.command.count("'") % 2 == 0 for s in multi)
    assert steps[-1].claims == ["404 session_not_found"]


OPS_BODY = ('{"ops": [], "tensors": {"x": {"name": "x", "data": 2.0, "grad": 3.0, "grad_fn": null, '
            '"grad_accumulations": 1}, "dw": {"name": "dw", "data": [2.0, 4.0], "grad": null}}}')


@pytest.mark.parametrize("claim", ["201", "x = 2.5", "x.grad = 4", "x.grad = null", "x.grad_fn = MulBackward0",
                                   "dw = [2, 5]", "dw = [2]", "x.grad_accumulations = 2", "q = 1", "x.nope = 1",
                                   'contains "AddBackward0"', "x.grad is 3", "200 not_found"])
def test_the_checker_rejects_a_claim_the_response_contradicts(claim):
    with pytest.raises(AssertionError):
        check_claims([claim], 200, OPS_BODY)


def test_the_checker_accepts_true_claims():
    claims = ["200; x = 2; x.grad = 3 (three); x.grad_fn = null; x.grad_accumulations = 1",
              'dw = [2, 4]; contains "dw"']
    assert check_claims(claims, 200, OPS_BODY) == 7
    problem = '{"status": 409, "code": "graph_freed", "op_index": 3, "detail": "Trying to backward"}'
    assert check_claims(['409 graph_freed; op_index = 3; contains "Trying"'], 409, problem) == 3


def test_the_walkthroughs_warning_is_true_backward_through_a_spent_graph_is_409():
    """The comment before the convenience endpoints: /backward on the y every earlier backward spent."""
    from fastapi.testclient import TestClient

    from gradserve_server.app.main import create_app

    t = {"dtype": "float32", "requires_grad": True}
    with TestClient(create_app()) as client:
        sid = client.post("/v1/sessions").json()["id"]
        r = client.post(f"/v1/sessions/{sid}/ops", json={"ops": [
            {"op": "tensor", "out": "x", "args": [2.0], "kwargs": t},
            {"op": "tensor", "out": "w", "args": [3.0], "kwargs": t},
            {"op": "tensor", "out": "b", "args": [1.0], "kwargs": t},
            {"op": "mul", "out": "wx", "args": ["w", "x"]}, {"op": "add", "out": "y", "args": ["wx", "b"]},
            {"op": "backward", "args": ["y"]}]})
        assert r.status_code == 200
        r = client.post(f"/v1/sessions/{sid}/backward", json={"tensor": "y"})
        assert r.status_code == 409 and r.json()["code"] == "graph_freed"
