"""Files a user names on the command line (a model's config.json, tables of measurements, a
trace), opened with one clear line for each way that fails.

The commands and the launcher read these; plan/ stays pure and gets their contents. Like
errors.py this sits below every layer and imports none of them.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, BinaryIO

from xputune.errors import XputuneError


def _refusal(exc: OSError, path: Path, what: str) -> XputuneError:
    if isinstance(exc, FileNotFoundError):
        return XputuneError(f"{what} not found: {path}")
    if isinstance(exc, IsADirectoryError):
        return XputuneError(f"{what} is a directory: {path}")
    if isinstance(exc, PermissionError):
        return XputuneError(f"{what} not readable (permission denied): {path}")
    return XputuneError(f"{what} not readable: {path} ({exc.strerror or exc})")


def open_binary(path: Path, what: str) -> BinaryIO:
    """The file, open for reading bytes (buffered: peek works)."""
    try:
        return path.open("rb")
    except OSError as exc:
        raise _refusal(exc, path, what) from None


def read_text(path: Path, what: str) -> str:
    """The file as UTF-8 text."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _refusal(exc, path, what) from None
    except UnicodeDecodeError:
        raise XputuneError(f"{what} is not UTF-8 text: {path}") from None


def read_lines(path: Path, what: str) -> list[str]:
    return io.StringIO(read_text(path, what)).readlines()  # split at newlines only


def config_path(name: str) -> Path | None:
    """The config.json a --model value names: the file itself, or a folder holding one."""
    path = Path(name).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json"
    if path.is_file() or name.endswith(".json"):
        return path
    return None


def model_config(model: str | None, config: Path | None) -> tuple[str, dict[str, Any]] | None:
    """(name, fields) of the config.json that --model or --config names; None when neither
    names a file (--model is then a preset name or a Hugging Face id, for plan/models.py)."""
    if model and config:
        raise XputuneError("give --model or --config, not both")
    path = config if config is not None else config_path(model) if model else None
    if path is None:
        return None
    text = read_text(path, "model config")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise XputuneError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise XputuneError(f"{path}: expected a JSON object")
    stem = path.parent.name if path.name == "config.json" and path.parent.name else None
    return stem or path.stem, data
