"""The SGLang releases the lanes run, and where each one's own environment lives.

0.5.20 lives in the test environment itself (the in-process lane, tests/sglang, imports it);
every newer release gets a virtual environment of its own under .venvs/ in the checkout, built
by tests/sglang/install_sglang.py, with xputune installed into it the way a user installs it
beside SGLang. The server lanes start each release's servers with that environment's Python
(`xputune launch sglang --python PATH`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import cache
from pathlib import Path

from xputune.sglang.targets import NEWEST, OLDEST, TESTED_SGLANG

__all__ = ["NEWEST", "OLDEST", "RELEASES", "VENVS", "python_for", "unavailable", "venv_for"]

ROOT = Path(__file__).resolve().parents[2]
RELEASES = TESTED_SGLANG
VENVS = ROOT / ".venvs"


def venv_for(release: str) -> Path | None:
    """The environment folder of `release` (None: the test environment itself)."""
    return None if release == OLDEST else VENVS / f"sglang-{release}"


def python_for(release: str) -> Path:
    """The interpreter that runs `release` (it may not exist yet)."""
    venv = venv_for(release)
    return Path(sys.executable) if venv is None else venv / "bin" / "python"


@cache
def installed_release(python: str) -> str | None:
    """The sglang version `python` has installed (from its metadata), or None."""
    if not os.access(python, os.X_OK):
        return None
    code = (
        "from importlib.metadata import version\n"
        "try:\n    print(version('sglang'))\n"
        "except Exception:\n    print('')\n"
    )
    try:
        out = subprocess.run(
            [python, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def unavailable(release: str) -> str | None:
    """Why the lane of `release` cannot run here, or None when it can."""
    python = python_for(release)
    found = installed_release(str(python))
    if found is None:
        return f"sglang {release} is not installed at {python} (tests/sglang/install_sglang.py)"
    if found != release:
        return f"sglang {found} is installed at {python}; this lane needs {release}"
    return None
