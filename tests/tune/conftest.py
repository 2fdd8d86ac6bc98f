"""Shared fixtures for the tuning tests: fresh host trees to write to."""

from __future__ import annotations

import pytest

from tests.fixtures.trees import copy_tree
from tests.tune import minihost


@pytest.fixture
def mini(tmp_path) -> str:
    """A fresh 2-card Hygon + P800 tree (IDO off, THP always, numa balancing on)."""
    return minihost.build(str(tmp_path / "host"))


def copy_fixture(name: str, dest) -> str:
    """A writable copy of a recorded host tree (extracted from its recording) at dest/name."""
    return str(copy_tree(name, dest / name))


@pytest.fixture
def seedbox(tmp_path) -> str:
    """A writable copy of the seed's H3C Hygon + 8 x P800 box."""
    return copy_fixture("h3c-hygon-p800", tmp_path)
