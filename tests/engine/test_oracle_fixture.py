"""The committed oracle copy is the reference the parity tests read; it must match shared/ when present."""

from __future__ import annotations

import pytest

from tests.engine.oracle import FIXTURE_PATH, SHARED_PATH, catalog


def test_committed_catalog_is_complete():
    c = catalog()
    assert (len(c["grad_fn"]), len(c["errors"]), len(c["behaviours"])) == (189, 84, 39)
    assert c["meta"]["torch"] == "2.13.0+cpu"


def test_committed_catalog_matches_shared_reference():
    if not SHARED_PATH.exists():
        pytest.skip("shared/oracle is not beside this checkout")
    assert FIXTURE_PATH.read_bytes() == SHARED_PATH.read_bytes()
