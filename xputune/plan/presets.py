"""Named model presets (xputune/data/models.yaml): config.json fields of common models.

The one read in plan/ is of this read-only file shipped in the package; it is data, like a
constant table, and is cached after the first call.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from xputune.errors import XputuneError


@cache
def presets() -> dict[str, dict[str, Any]]:
    """Preset name -> {"aliases": [...], "config": {...}}."""
    from importlib.resources import files

    import yaml

    text = files("xputune").joinpath("data/models.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["models"]


def preset_config(name: str) -> tuple[str, dict[str, Any]]:
    """(canonical name, config) for a preset name or alias, case-insensitively."""
    wanted = name.strip().lower()
    for key, entry in presets().items():
        if wanted == key or wanted in (a.lower() for a in entry.get("aliases", [])):
            return key, dict(entry["config"])
    raise XputuneError(
        f"unknown model {name!r} (known: {', '.join(presets())}; or pass --config config.json)"
    )
