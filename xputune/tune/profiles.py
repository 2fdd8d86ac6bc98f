"""Profiles: YAML files that say what each knob should be on one kind of host.

A profile names expected knob values (with a severity, and optionally other values that also
hold), optional platform register writes, and `match` rules for `xputune recommend`. `include:`
pulls in other profiles first; later wins, field by field for knobs (a child can change only a
severity), wholesale for platform_registers. `match` is never inherited: it describes the file
it is written in. A knob set to null is dropped (not managed).

Profiles ship in profiles/ (installed as xputune/profiles); /etc/xputune/profiles adds site
profiles on the live host; a path ending in .yaml loads that file. Every error names the file
and the key, because a profile is the input an operator edits by hand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from xputune.host import usercache
from xputune.topology.verdicts import BASELINE
from xputune.tune.errors import ProfileError
from xputune.tune.knobs import KNOBS, Want
from xputune.tune.knobs.base import SEVERITIES
from xputune.tune.knobs.pcie_ido import parse_platform_register

SCHEMA_VERSION = 1
SITE_DIR = "/etc/xputune/profiles"
TOP_KEYS = {"schema_version", "description", "include", "match", "knobs", "platform_registers"}
KNOB_KEYS = {"value", "accept", "severity", "why"}
MATCH_KEYS = {"cpu_vendor", "card_vendor", "card_model", "card_ids", "min_cards"}
_CACHE_MAX = 1 << 20  # a parsed profile larger than this is not cached
_CACHE_KIND = "profiles"


@dataclass(frozen=True)
class Match:
    """Rules for `recommend`; every rule given must hold. Empty: matches anything (score 0)."""

    cpu_vendor: tuple[str, ...] = ()
    card_vendor: tuple[str, ...] = ()
    card_model: tuple[str, ...] = ()
    card_ids: tuple[tuple[int, int], ...] = ()
    min_cards: int = 0

    @property
    def empty(self) -> bool:
        return self == Match()


@dataclass(frozen=True)
class Profile:
    name: str
    path: str
    description: str
    chain: tuple[str, ...]  # included profiles first, this one last
    match: Match
    knobs: dict[str, Want] = field(hash=False)
    why: dict[str, str] = field(hash=False)  # knob -> reason, for people
    platform_registers: tuple[dict[str, Any], ...] = ()


def builtin_dir() -> str:
    # Next to this package's code, as host/open.py finds the examples (importlib.resources
    # would cost every check and launch a few ms of imports).
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "profiles")


def search_dirs() -> list[str]:
    dirs = [builtin_dir()]
    if os.path.isdir(SITE_DIR):
        dirs.append(SITE_DIR)
    return dirs


def profile_names() -> list[str]:
    names: set[str] = set()
    for folder in search_dirs():
        for entry in os.listdir(folder):
            if entry.endswith(".yaml") and not entry.startswith("."):
                names.add(entry[: -len(".yaml")])
    return sorted(names)


def names_a_file(name: str) -> bool:
    """Whether `--profile NAME` names a file (a path or a .yaml name) rather than a profile."""
    return name.endswith((".yaml", ".yml")) or os.sep in name


def locate(name: str) -> str:
    """The file of a profile name, or the path itself when it names a .yaml file."""
    if names_a_file(name):
        if not os.path.isfile(name):
            raise ProfileError(f"profile file {name} does not exist")
        return name
    for folder in reversed(search_dirs()):  # site profiles shadow built-in ones
        path = os.path.join(folder, f"{name}.yaml")
        if os.path.isfile(path):
            return path
    raise ProfileError(f"no profile named {name!r} (known: {', '.join(profile_names())})")


def _display(path: str) -> str:
    """A path as people read it: relative to the built-in folder when it is one of ours."""
    builtin = builtin_dir()
    if path.startswith(builtin + os.sep):
        return "profiles/" + path[len(builtin) + 1 :]
    return path


def _read(path: str) -> dict[str, Any]:
    from pathlib import Path

    from xputune.userfiles import PROFILE_MAX, read_text

    shown = _display(path)
    text = read_text(Path(path), "profile", PROFILE_MAX)  # a regular file, capped: one line
    raw = _parse(path, text, shown)
    if not isinstance(raw, dict):
        raise ProfileError(f"{shown}: expected a mapping at the top level")
    unknown = sorted(set(raw) - TOP_KEYS)
    if unknown:
        raise ProfileError(f"{shown}: unknown key {unknown[0]!r} (allowed: {sorted(TOP_KEYS)})")
    if raw.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise ProfileError(
            f"{shown}: schema_version {raw['schema_version']!r} (this xputune reads "
            f"{SCHEMA_VERSION})"
        )
    return raw


def _parse(path: str, text: str, shown: str) -> Any:
    """A profile's YAML, kept per user from an earlier run while the file holds the same text.

    check and launch read every profile on each run, and importing a YAML parser costs them more
    than the parsing (docs/benchmarks.md: start-up within 2x of the probe). The cache entry
    holds the text it was parsed from; an edited file is parsed again. host/usercache.py loads
    only an entry this user wrote into a folder nobody else can write, and the profile is
    validated from its parsed form as always. XPUTUNE_CACHE=off, a refused cache or an odd entry
    only mean parsing: with libyaml when PyYAML has it, and an error is worded by the
    pure-Python parser, as it always was.
    """
    entry = _cache_entry(path)
    kept = usercache.load(_CACHE_KIND, entry, _CACHE_MAX) if entry else None
    if isinstance(kept, tuple) and len(kept) == 2 and kept[0] == text:
        return kept[1]
    import yaml

    try:
        raw = _load_yaml(yaml, text, shown)
    except RecursionError:  # [[[[... 50,000 deep: no profile is, and it is one line
        raise ProfileError(f"{shown}: not a profile (nested too deeply)") from None
    if entry:
        usercache.store(_CACHE_KIND, entry, (text, raw), _CACHE_MAX)
    return raw


def _load_yaml(yaml: Any, text: str, shown: str) -> Any:
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark else ""
            problem = " ".join(str(getattr(exc, "problem", exc)).split())  # one line
            raise ProfileError(f"{shown}:{where} not valid YAML ({problem})") from exc


def _cache_entry(path: str) -> str | None:
    """The cache entry name of the profile at `path`, or None when caching is off."""
    import marshal
    import sys
    import zlib

    if not usercache.enabled():
        return None
    real = os.path.realpath(path)
    name = f"{os.path.basename(real)}-{zlib.crc32(real.encode()):08x}"
    # c2: entries with usercache's header (older ones are never opened).
    return f"{name}-{sys.implementation.cache_tag}-m{marshal.version}-c2"


def _str_list(raw: Any, where: str) -> tuple[str, ...]:
    items = raw if isinstance(raw, list) else [raw]
    if not all(isinstance(i, str) and i for i in items):
        raise ProfileError(f"{where}: expected a string or a list of strings, got {raw!r}")
    return tuple(items)


def _parse_match(raw: Any, where: str) -> Match:
    if raw is None:
        return Match()
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: expected a mapping")
    unknown = sorted(set(raw) - MATCH_KEYS)
    if unknown:
        raise ProfileError(f"{where}: unknown key {unknown[0]!r} (allowed: {sorted(MATCH_KEYS)})")
    ids = []
    for item in _str_list(raw.get("card_ids", []), f"{where}.card_ids"):
        try:
            vendor, device = item.split(":")
            ids.append((int(vendor, 16), int(device, 16)))
        except ValueError:
            raise ProfileError(f"{where}.card_ids: {item!r} is not vendor:device hex") from None
    min_cards = raw.get("min_cards", 0)
    if isinstance(min_cards, bool) or not isinstance(min_cards, int) or min_cards < 0:
        raise ProfileError(f"{where}.min_cards: {min_cards!r} is not a card count")
    return Match(
        cpu_vendor=_str_list(raw.get("cpu_vendor", []), f"{where}.cpu_vendor"),
        card_vendor=_str_list(raw.get("card_vendor", []), f"{where}.card_vendor"),
        card_model=_str_list(raw.get("card_model", []), f"{where}.card_model"),
        card_ids=tuple(ids),
        min_cards=min_cards,
    )


def _knob_fields(raw: Any, where: str) -> dict[str, Any] | None:
    """A knob entry as a partial mapping of fields (a bare value means {value: ...})."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        return {"value": raw}
    unknown = sorted(set(raw) - KNOB_KEYS)
    if unknown:
        raise ProfileError(f"{where}: unknown key {unknown[0]!r} (allowed: {sorted(KNOB_KEYS)})")
    return dict(raw)


def _want(name: str, fields: dict[str, Any], where: str, source: str) -> Want:
    knob = KNOBS[name]
    if "value" not in fields and "accept" not in fields and name in BASELINE:
        # One verdict for probe and check: the values come from the probe's baseline.
        fields = {**fields, "value": BASELINE[name][0], "accept": list(BASELINE[name][1:])}
    if "value" not in fields:
        raise ProfileError(f"{where}: no value (set knobs.{name}.value here or in an include)")
    value = knob.parse(fields["value"], f"{where}.value")
    accept_raw = fields.get("accept", [])
    if not isinstance(accept_raw, list):
        accept_raw = [accept_raw]
    accept = tuple(knob.parse(a, f"{where}.accept") for a in accept_raw)
    severity = fields.get("severity", "warn")
    if severity not in SEVERITIES:
        raise ProfileError(f"{where}.severity: {severity!r} is not one of {', '.join(SEVERITIES)}")
    return Want(value, accept, severity, source)


def load(name: str) -> Profile:
    """Load a profile with its includes, validated; ProfileError names file and key."""
    return _load(name, ())


def _load(name: str, stack: tuple[str, ...]) -> Profile:
    path = locate(name)
    key = os.path.realpath(path)
    if key in stack:
        raise ProfileError(f"{_display(path)}: include loop ({' -> '.join((*stack, key))})")
    raw = _read(path)
    shown = _display(path)
    own = os.path.basename(path).rsplit(".", 1)[0]

    fields: dict[str, dict[str, Any] | None] = {}
    sources: dict[str, str] = {}
    registers: tuple[dict[str, Any], ...] = ()
    chain: list[str] = []
    why: dict[str, str] = {}
    for parent_name in _str_list(raw.get("include", []), f"{shown}: include"):
        parent = _load(parent_name, (*stack, key))
        chain.extend(c for c in parent.chain if c not in chain)
        for knob, want in parent.knobs.items():
            fields[knob] = {
                "value": want.value,
                "accept": list(want.accept),
                "severity": want.severity,
            }
            sources[knob] = want.source
        why.update(parent.why)
        registers = parent.platform_registers
    chain.append(own)

    knobs_raw = raw.get("knobs", {}) or {}
    if not isinstance(knobs_raw, dict):
        raise ProfileError(f"{shown}: knobs: expected a mapping of knob name to value")
    for knob, entry in knobs_raw.items():
        where = f"{shown}: knobs.{knob}"
        if knob not in KNOBS:
            raise ProfileError(f"{where}: unknown knob (known: {', '.join(KNOBS)})")
        partial = _knob_fields(entry, where)
        if partial is None:
            fields[knob] = None
            continue
        if isinstance(partial.get("why"), str):
            why[knob] = partial.pop("why")
        fields[knob] = {**(fields.get(knob) or {}), **partial}
        sources[knob] = own

    if "platform_registers" in raw:
        regs = raw["platform_registers"] or []
        if not isinstance(regs, list):
            raise ProfileError(f"{shown}: platform_registers: expected a list")
        registers = tuple(
            parse_platform_register(r, f"{shown}: platform_registers[{i}]")
            for i, r in enumerate(regs)
        )

    wants = {
        knob: _want(knob, f, f"{shown}: knobs.{knob}", sources[knob])
        for knob, f in fields.items()
        if f is not None
    }
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ProfileError(f"{shown}: description: expected text")
    return Profile(
        name=own,
        path=path,
        description=description.strip(),
        chain=tuple(chain),
        match=_parse_match(raw.get("match"), f"{shown}: match"),
        knobs={k: wants[k] for k in KNOBS if k in wants},
        why=why,
        platform_registers=registers,
    )


def load_all() -> list[Profile]:
    return [load(name) for name in profile_names()]


def list_document(loaded: list[Profile]) -> dict[str, Any]:
    """`xputune profiles --format json` (schema "profiles")."""
    return {
        "schema_version": 1,
        "profiles": [
            {"name": p.name, "description": p.description, "include": list(p.chain[:-1])}
            for p in loaded
        ],
    }


def document(p: Profile) -> dict[str, Any]:
    """`xputune profiles NAME --format json`: the effective settings after includes."""
    knobs = {
        k: {
            "value": KNOBS[k].describe(w.value),
            "accept": [KNOBS[k].describe(a) for a in w.accept],
            "severity": w.severity,
            "from": w.source,
            "why": p.why.get(k, ""),
        }
        for k, w in p.knobs.items()
    }
    return {
        "schema_version": 1,
        "name": p.name,
        "path": p.path,
        "chain": list(p.chain),
        "description": p.description,
        "knobs": knobs,
        "platform_registers": [{**r, "width": r["width"] * 8} for r in p.platform_registers],
    }
