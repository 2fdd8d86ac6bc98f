"""Shared test helpers: where the fixtures live and how to run the CLI in-process.

Host trees come from compressed recordings (tests/fixtures/trees.py): `host_tree(name)` extracts
one once and shares it, so a test that writes must copy first (`copy_tree`). SEED_BOX and
NVIDIA_BOX are lazy paths: `str(SEED_BOX)` extracts on first use, not at import.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.fixtures.trees import LazyTree, broken_tree, copy_tree, host_tree

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SEED_BOX = LazyTree("h3c-hygon-p800")
NVIDIA_BOX = LazyTree("nvidia-hgx-h100")

# Recordings' parsed tables, profiles and kernels are cached (host/usercache.py); tests keep
# theirs apart so a run neither reads nor leaves entries in the real cache (~/.cache, or
# /var/cache/xputune for root, which XDG_CACHE_HOME does not move).
os.environ["XDG_CACHE_HOME"] = _CACHE = tempfile.mkdtemp(prefix="xputune-test-cache-")
os.environ["XPUTUNE_CACHE_DIR"] = os.path.join(_CACHE, "xputune")
atexit.register(shutil.rmtree, _CACHE, True)

__all__ = ["FIXTURES", "NVIDIA_BOX", "SEED_BOX", "broken_tree", "copy_tree", "host_tree"]


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]):
    """Run `xputune ARGS...` in-process; returns (exit code, stdout, stderr)."""
    from xputune.cli.entry import main

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
