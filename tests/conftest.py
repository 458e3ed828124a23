"""Suite-wide: the ``whole_module`` fixture, for the checks that judge what their module's other tests did (every
forward formula reached, every batching rule exercised). Such a check can only judge a run of the whole module
on one worker; it says so, instead of failing with a list of what the tests it did not run would have reached."""

from __future__ import annotations

import pytest

#: test files some of whose tests this run deselected (``-k``, ``-m``)
_PARTIAL: set[str] = set()


def pytest_deselected(items) -> None:
    for item in items:
        _PARTIAL.add(item.nodeid.split("::")[0])


@pytest.fixture
def whole_module(request) -> None:
    """Skip, saying why, where the run does not run every test of the requesting test's file on this worker."""
    path = request.node.nodeid.split("::")[0]
    if path in _PARTIAL:
        pytest.skip(f"judges every test of {path}; this run deselected some: run the whole file")
    if _spread(request.config):
        pytest.skip(f"judges every test of {path}; pytest-xdist spreads them over workers here: add --dist loadfile "
                    "(as python3 dev.py test does)")


def _spread(config) -> bool:
    """Whether this is a pytest-xdist worker of several whose controller deals out tests one by one (its default
    ``--dist load``), not a file (``loadfile``) or a module (``loadscope``) to a worker. A worker's own options say
    neither: its controller's command line (``workerinput["mainargv"]``) does."""
    given = getattr(config, "workerinput", None)
    if given is None or given.get("workercount", 1) <= 1:
        return False
    argv = list(given.get("mainargv", ()))
    dist = "load"
    for i, a in enumerate(argv):
        if a == "--dist" and i + 1 < len(argv):
            dist = argv[i + 1]
        elif a.startswith("--dist="):
            dist = a.partition("=")[2]
    return dist not in ("loadfile", "loadscope")
