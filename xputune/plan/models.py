"""A model named any way a user names it, turned into its KV geometry; and the TP size.

One vocabulary in every command (plan, model, tiers, launch): `--model` takes a preset name or
alias (glm-5), a Hugging Face id (zai-org/GLM-5: its last part is matched against the presets),
a config.json file, or a folder holding one; `--config FILE` stays as the explicit spelling of
the last. `--tp` defaults to the number of cards of the host, and is required where that cannot
be known. Odd TP sizes are warned about with the reason.

No file is read here: the config.json a user names is read by xputune/userfiles.py and
handed in (the package's preset table, plan/presets.py, is constant data); the rest is
arithmetic.
"""

from __future__ import annotations

from typing import Any

from xputune.errors import XputuneError

#: How a TP-size warning that SGLang would refuse the size ends (plan_for_host refuses it).
REFUSES = "refuses this size"


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


#: (name, config.json fields) of a config file the user named, as userfiles.model_config
#: reads it; None when --model is a preset name or a Hugging Face id.
NamedConfig = tuple[str, dict[str, Any]]


def resolve_model(model: str | None, named: NamedConfig | None) -> NamedConfig | None:
    """(name, config fields) of the model: the file's when one was named, else the preset's
    that --model names; None when no model is given."""
    from xputune.plan.presets import preset_config, presets

    if named is not None:
        return named
    if not model:
        return None
    key = preset_for(model)
    if key is None:
        raise XputuneError(
            f"unknown model {model!r}: give a preset ({', '.join(presets())}), a Hugging "
            "Face id whose last part is one of them, or a config.json (file or folder)"
        )
    return preset_config(key)


def load_geometry(model: str | None, named: NamedConfig | None, tp: int, dtype: str):
    """KV geometry (plan.geometry.KVGeometry) of a model at a TP size; None without a model."""
    return load_model(model, named, tp, dtype)[0]


def load_model(
    model: str | None, named: NamedConfig | None, tp: int, dtype: str, cards: int | None = None
):
    """(KV geometry or None, warnings about the TP size for this model and host)."""
    found = resolve_model(model, named)
    if found is None:
        return None, tp_warnings(tp, cards)
    return model_geometry(found, tp, dtype, cards)


def model_geometry(model: NamedConfig, tp: int, dtype: str, cards: int | None = None):
    """(KV geometry of a resolved model at a TP size, warnings about that size here)."""
    from xputune.plan.geometry import geometry_from_config

    name, data = model
    return geometry_from_config(data, tp=tp, dtype=dtype, name=name), tp_warnings(tp, cards, data)


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
            f"evenly over the ranks and {REFUSES}"
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
