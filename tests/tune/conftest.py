"""Shared fixtures for the tuning tests: fresh host trees to write to."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.tune import minihost

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "hosts")


@pytest.fixture
def mini(tmp_path) -> str:
    """A fresh 2-card Hygon + P800 tree (IDO off, THP always, numa balancing on)."""
    return minihost.build(str(tmp_path / "host"))


def copy_fixture(name: str, dest) -> str:
    """A writable copy of a recorded host tree; skips when that fixture is not present."""
    src = os.path.join(FIXTURES, name)
    if not os.path.isdir(src):
        pytest.skip(f"fixture {name} not present")
    target = str(dest / name)
    shutil.copytree(src, target, symlinks=True)
    return target


@pytest.fixture
def seedbox(tmp_path) -> str:
    """A writable copy of the seed's H3C Hygon + 8 x P800 box."""
    return copy_fixture("h3c-hygon-p800", tmp_path)
