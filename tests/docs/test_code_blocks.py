"""Every code block of the documentation (docs/**/*.md and README.md) runs in a test: curl walk-throughs in
tests/docs/test_walkthrough.py, Python programs and JSON request bodies here, against a live server. A Python
line `print(...)  # text` claims that it prints `text` (up to a ` -- ` comment); a JSON body's
`<!-- expect: ... -->` marker is checked against its response like a walk-through's `# →` line. A block that
cannot run in a test says why in a `<!-- not run: ... -->` marker naming the test that checks it instead."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import httpx
import pytest

from tests.docs.walkthrough import ROOT, blocks, check_claims, pages, where

ALL = [b for p in pages() for b in blocks(p)]
PYTHON = [b for b in ALL if b.lang == "python" and b.marker is None]
JSON = [b for b in ALL if b.lang == "json"]


def block_id(block) -> str:
    return where(block.path, block.line)


def test_every_block_runs_somewhere_or_says_which_test_checks_it():
    for block in ALL:
        at = block_id(block)
        if block.marker and block.marker[0] == "not run":
            named = re.findall(r"tests/[\w/]+\.py", block.marker[1])
            assert named, f"{at}: a 'not run' block must name the test that checks it instead"
            for path in named:
                assert (ROOT / path).is_file(), f"{at}: {path} does not exist"
            continue
        assert block.is_walkthrough or block.lang in ("python", "json"), (
            f"{at}: a {block.lang or 'plain'} block no test runs: make it a curl walk-through, or mark it "
            "<!-- not run: why; tests/... --> naming the test that checks what it shows")
    assert len(PYTHON) >= 4 and len(JSON) >= 2


def expected_prints(code: str) -> list[str]:
    out = []
    for line in code.splitlines():
        if m := re.match(r"\s*print\(.*\)\s+#\s*(.+)$", line):
            out.append(m.group(1).split(" -- ")[0].strip())
    return out


@pytest.mark.parametrize("block", PYTHON, ids=block_id)
def test_python_block_runs_and_prints_what_it_says(block, server, tmp_path):
    code = block.code.replace("http://127.0.0.1:8000", server.url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSERVE_")}
    env["GRADSERVE_URL"] = server.url
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=env)
    assert ran.returncode == 0, f"{block_id(block)}\n{ran.stderr[-3000:]}"
    expected = expected_prints(block.code)
    printed = [line.strip() for line in ran.stdout.splitlines()]
    assert printed == expected, f"{block_id(block)}: printed {printed}, the page says {expected}"


@pytest.mark.parametrize("block", JSON, ids=block_id)
def test_json_block_is_a_request_body_that_eval_accepts(block, server):
    assert block.marker and block.marker[0] == "expect", f"{block_id(block)}: say what it answers in <!-- expect: -->"
    r = httpx.post(f"{server.url}/v1/eval", json=json.loads(block.code), timeout=60)
    try:
        assert check_claims([block.marker[1]], r.status_code, r.text) >= 2
    except AssertionError as exc:
        raise AssertionError(f"{block_id(block)}\n{exc}") from None


def test_a_print_claim_that_the_program_contradicts_fails(server, tmp_path):
    class Fake:
        path, line, code = ROOT / "README.md", 1, "print(1 + 1)  # 3"

    with pytest.raises(AssertionError, match="printed"):
        test_python_block_runs_and_prints_what_it_says(Fake, server, tmp_path)
