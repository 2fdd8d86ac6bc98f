"""A model named any way a user names it, turned into its KV geometry; and the TP size.

One vocabulary in every command (plan, model, tiers, launch): `--model` takes a preset name or
alias (glm-5), a Hugging Face id (zai-org/GLM-5: its last part is matched against the presets),
a config.json file, or a folder holding one; `--config FILE` stays as the explicit spelling of
the last. `--tp` defaults to the number of cards of the host, and is required where that cannot
be known. Odd TP sizes are warned about with the reason.

The one read here is of the config.json the user names (plus the package's preset table,
plan/presets.py); everything else is arithmetic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from xputune.errors import XputuneError
from xputune.plan.inputs import read_text


def _read_config(path: Path) -> dict[str, Any]:
    text = read_text(path, "model config")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise XputuneError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise XputuneError(f"{path}: expected a JSON object")
    return data


def preset_for(name: str) -> str | None:
    """The preset a name or Hugging Face id stands for (glm-5, GLM5, zai-org/GLM-5), or None."""
    from xputune.plan.presets import presets

    wanted = name.strip().rstrip("/").lower()
    tails = [wanted, wanted.rsplit("/", 1)[-1]]
    tails += [t.replace("_", "-") for t in tails]
    for key, entry in presets().items():
        names = {key, *(a.lower() for a in entry.get("aliases", []))}
        if any(t in names for t in tails):
            return key
    return None


def config_path(name: str) -> Path | None:
    """The config.json a --model value names: the file itself, or a folder holding one."""
    path = Path(name).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json"
    if path.is_file() or name.endswith(".json"):
        return path
    return None


def resolve_model(model: str | None, config: Path | None) -> tuple[str, dict[str, Any]] | None:
    """(name, config fields) of what --model/--config name; None when neither is given."""
    from xputune.plan.presets import preset_config, presets

    if model and config:
        raise XputuneError("give --model or --config, not both")
    if config is None and model:
        config = config_path(model)
        if config is None:
            key = preset_for(model)
            if key is None:
                raise XputuneError(
                    f"unknown model {model!r}: give a preset ({', '.join(presets())}), a Hugging "
                    "Face id whose last part is one of them, or a config.json (file or folder)"
                )
            return preset_config(key)
    if config is not None:
        stem = config.parent.name if config.name == "config.json" and config.parent.name else None
        return stem or config.stem, _read_config(config)
    return None


def load_geometry(model: str | None, config: Path | None, tp: int, dtype: str):
    """KV geometry (plan.geometry.KVGeometry) of a model at a TP size; None without a model."""
    return load_model(model, config, tp, dtype)[0]


def load_model(
    model: str | None, config: Path | None, tp: int, dtype: str, cards: int | None = None
):
    """(KV geometry or None, warnings about the TP size for this model and host)."""
    from xputune.plan.geometry import geometry_from_config

    found = resolve_model(model, config)
    if found is None:
        return None, tp_warnings(tp, cards)
    name, data = found
    warnings = tp_warnings(tp, cards, data)
    return geometry_from_config(data, tp=tp, dtype=dtype, name=name), warnings


def resolve_tp(tp: int | None, cards: int | None, where: str = "--tp") -> int:
    """The TP size: as given, else the number of cards of the host; required without cards."""
    if tp is not None:
        if tp < 1:
            raise XputuneError(f"{where} must be at least 1, got {tp}")
        return tp
    if cards:
        return cards
    raise XputuneError(
        f"give {where} N: it defaults to the number of cards of the host, and this one has none"
    )


def tp_warnings(
    tp: int, cards: int | None = None, config: dict[str, Any] | None = None
) -> list[str]:
    """Why a TP size is odd, one line per reason (empty when it is an ordinary one)."""
    out = []
    fields = (
        (config or {}).get("text_config")
        if config and "num_hidden_layers" not in config
        else config
    )
    heads = (fields or {}).get("num_attention_heads")
    if isinstance(heads, int) and heads % tp:
        out.append(
            f"TP {tp} does not divide the model's {heads} attention heads: SGLang splits heads "
            "evenly over the ranks and refuses this size"
        )
    elif tp > 1 and tp & (tp - 1):
        out.append(
            f"TP {tp} is not a power of two: the heads and experts of common models do not "
            "split evenly over it, and two ranks under one PCIe switch cannot always pair up"
        )
    if cards and tp > cards:
        out.append(f"TP {tp} is more than the {cards} card(s) of this host: it needs more hosts")
    elif cards and cards % tp:
        out.append(
            f"TP {tp} does not divide the {cards} cards: servers of TP {tp} leave "
            f"{cards % tp} card(s) idle"
        )
    return out
