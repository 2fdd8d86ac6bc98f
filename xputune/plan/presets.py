"""Named model presets (xputune/data/models.json): config.json fields of common models.

JSON, not YAML, so that a plan does not pay for importing a YAML parser at start-up; the
sources and status of each entry are in the file's "_about" lines.

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
    import json
    import os

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # as host/open.py does
    with open(os.path.join(here, "data", "models.json"), encoding="utf-8") as fh:
        return json.load(fh)["models"]


def preset_config(name: str) -> tuple[str, dict[str, Any]]:
    """(canonical name, config) for a preset name or alias, case-insensitively."""
    wanted = name.strip().lower()
    for key, entry in presets().items():
        if wanted == key or wanted in (a.lower() for a in entry.get("aliases", [])):
            return key, dict(entry["config"])
    raise XputuneError(
        f"unknown model {name!r} (known: {', '.join(presets())}; or pass --config config.json)"
    )
