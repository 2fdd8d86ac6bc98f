"""Shell completion of option values: what each flag accepts, with a word on what it is.

Every completer imports what it lists only when the shell asks, so commands pay nothing for
them at start-up; each returns (value, help) pairs that start with what was typed.
"""

from __future__ import annotations

from collections.abc import Iterable

from xputune.cli.output import Format

FORMAT_HELP = {
    Format.table: "tables for people",
    Format.json: "JSON for scripts (xputune schema NAME)",
    Format.yaml: "YAML for scripts",
}


def _starting(incomplete: str, pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(value, why) for value, why in pairs if value.startswith(incomplete)]


def complete_examples(incomplete: str) -> list[tuple[str, str]]:
    """--example: the recordings shipped with xputune."""
    from xputune.host.open import example_names

    return _starting(incomplete, ((n, "shipped recording") for n in example_names()))


def complete_formats(incomplete: str) -> list[tuple[str, str]]:
    """--format, with what each is for."""
    return _starting(incomplete, ((f.value, why) for f, why in FORMAT_HELP.items()))


def complete_models(incomplete: str) -> list[tuple[str, str]]:
    """--model: the preset names (a Hugging Face id or a config.json path works too)."""
    from xputune.plan.presets import presets

    pairs = []
    for name, entry in presets().items():
        config = entry.get("config", {})
        kind = "MLA" if config.get("kv_lora_rank") else "GQA/MHA"
        pairs.append((name, f"{kind}, {config.get('num_hidden_layers', '?')} layers"))
    return _starting(incomplete, pairs)


def complete_strategies(incomplete: str) -> list[tuple[str, str]]:
    """--strategy: the binding strategies plan and launch know."""
    from xputune.plan.bindings import STRATEGIES

    why = {
        "local": "card's own node (safe)",
        "all-nodes": "a node per card (needs IDO)",
        "shared": "one TP-shared host buffer (MLA)",
    }
    return _starting(incomplete, ((s, why.get(s, "")) for s in STRATEGIES))


def complete_profiles(incomplete: str) -> list[tuple[str, str]]:
    """--profile: the profiles found (the package's and /etc/xputune/profiles)."""
    from xputune.tune.profiles import profile_names

    return _starting(incomplete, ((n, "tuning profile") for n in profile_names()))


def complete_knobs(incomplete: str) -> list[tuple[str, str]]:
    """--only/--skip: the knobs xputune manages."""
    from xputune.tune.knobs import KNOBS

    return _starting(incomplete, ((name, "knob") for name in KNOBS))


def complete_schemas(incomplete: str) -> list[tuple[str, str]]:
    """schema NAME: the shipped JSON Schemas."""
    from xputune.cli.schema_cmds import schema_names

    return _starting(incomplete, ((n, "JSON Schema") for n in schema_names()))
