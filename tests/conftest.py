"""Shared test helpers: where the fixtures live and how to run the CLI in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HOSTS = FIXTURES / "hosts"
BROKEN = FIXTURES / "broken"
SEED_BOX = HOSTS / "h3c-hygon-p800"
NVIDIA_BOX = HOSTS / "nvidia-hgx-h100"


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]):
    """Run `xputune ARGS...` in-process; returns (exit code, stdout, stderr)."""
    from xputune.cli.entry import main

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
