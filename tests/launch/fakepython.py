"""A stand-in for SGLang's interpreter: a shell script that answers the launcher's preflight
(xputune/launch/preflight.py) as told, and logs each call. Test scaffold only.

The preflight runs `PYTHON -c SCRIPT probe` (and `... parser` for an untested release); the
stand-in ignores the script and prints the given answer after the marker, so every branch of
what the answer means can be driven without an SGLang environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from xputune import __version__
from xputune.launch.preflight import MARK

#: What .venv's python says, give or take: sglang 0.5.20 and this xputune's plugin.
GOOD = {
    "sglang": "0.5.20",
    "plugin": "xputune.sglang.plugin:register",
    "xputune": __version__,
    "mooncake": True,
}


def fake_python(
    folder: Path,
    probe: dict[str, Any] | None = None,
    parser: dict[str, Any] | None = None,
    *,
    name: str = "python",
    status: int = 0,
    stderr: str = "",
    sleep: float = 0.0,
    raw: str | None = None,
) -> Path:
    """An executable at folder/name answering `probe` (GOOD by default) and `parser`; each
    call appends its mode to folder/calls. `raw`: print this instead of an answer."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    log = folder / "calls"

    def answer(doc: dict[str, Any] | None) -> str:
        if raw is not None:
            return raw
        return "" if doc is None else MARK + json.dumps(doc)

    lines = [
        "#!/bin/sh",
        f'echo "$3" >> {_sh(str(log))}',
        f"sleep {sleep}" if sleep else ":",
        f"echo {_sh(stderr)} >&2" if stderr else ":",
        'if [ "$3" = parser ]; then',
        "cat <<'XPUTUNE_EOF'",
        "some import chatter",
        answer(parser),
        "XPUTUNE_EOF",
        "else",
        "cat <<'XPUTUNE_EOF'",
        answer(GOOD if probe is None else probe),
        "XPUTUNE_EOF",
        "fi",
        f"exit {status}",
    ]
    path.write_text("\n".join(lines) + "\n")
    os.chmod(path, 0o755)
    return path


def calls(folder: Path) -> list[str]:
    """The modes the stand-in was called with, in order."""
    try:
        return (folder / "calls").read_text().split()
    except FileNotFoundError:
        return []


def _sh(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"
