"""The acceptance check of issue 25: torch scenarios run line by line with ``gradserve.torch`` raise (class and
message) and print what torch does at the same line. Torch's outcomes are committed fixtures
(``python -m tests.client.scenario_check`` rewrites them); with torch installed they are checked against it."""

from __future__ import annotations

import json

import pytest

import gradserve
import gradserve.torch as gtorch
from tests.client import scenario_check

CASES = [(path, i) for path in scenario_check.FILES
         for i in range(len(scenario_check.scenarios(path)))]


def _expected(path, i):
    return json.loads(scenario_check.fixture_path(path).read_text())["scenarios"][i]


@pytest.mark.parametrize(("path", "index"), CASES, ids=[f"{p.stem}-{i}" for p, i in CASES])
def test_each_line_raises_and_prints_as_torch(server, path, index):
    lines = scenario_check.scenarios(path)[index]
    with gradserve.session(client=gradserve.Client(server.url)):
        got = scenario_check.run(gtorch, lines)
    assert got == _expected(path, index)


@pytest.mark.parametrize("path", scenario_check.FILES, ids=[p.stem for p in scenario_check.FILES])
def test_the_fixtures_are_what_the_installed_torch_does(path):
    torch = pytest.importorskip("torch")
    fixture = json.loads(scenario_check.fixture_path(path).read_text())
    assert fixture["torch"] == torch.__version__
    assert [scenario_check.run(torch, block) for block in scenario_check.scenarios(path)] == fixture["scenarios"]
