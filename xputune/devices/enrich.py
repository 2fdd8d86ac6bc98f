"""Vendor details per topology card, from whichever vendor library is at hand.

The probe calls this after discovery. Only providers for vendors the topology has cards of are
tried, and only with a library file found by the rule in `libpath` (live host: usual paths;
recording: the explicit environment override only). A provider that fails to load or
initialise is skipped: the probe output is then what it was without one. When the user named
the library explicitly, the failure is reported as a note, since silence would hide a typo.
Vendor modules (ctypes, pynvml) are imported only once a library file is known, which keeps
the probe's start-up unchanged on hosts without one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from xputune.devices.info import VendorInfo
from xputune.devices.libpath import (
    NVML_ENV,
    NVML_PATHS,
    XPUML_ENV,
    XPUML_PATHS,
    library_for,
    override,
)
from xputune.errors import XputuneError

if TYPE_CHECKING:
    from xputune.topology.model import Topology


class Provider(NamedTuple):
    vendor: str  # Card.vendor this provider describes
    env: str
    paths: tuple[str, ...]
    module: str  # imported lazily; has read_cards(path) -> dict[bus id, VendorInfo]


PROVIDERS = (
    Provider("kunlunxin", XPUML_ENV, XPUML_PATHS, "xputune.devices.xpuml_provider"),
    Provider("nvidia", NVML_ENV, NVML_PATHS, "xputune.devices.nvml"),
)


class Enrichment(NamedTuple):
    """VendorInfo by card bus id, plus notes for explicit overrides that failed."""

    cards: dict[str, VendorInfo]
    notes: tuple[str, ...] = ()

    def as_json(self) -> dict[str, dict[str, Any]]:
        """Per bus id, the probe document's "vendor_info" object."""
        return {bdf: info.as_json() for bdf, info in self.cards.items()}


def _read(provider: Provider, path: str) -> dict[str, VendorInfo]:
    read_cards: Callable[[str], dict[str, VendorInfo]] = importlib.import_module(
        provider.module
    ).read_cards
    return read_cards(path)


def vendor_info(topo: Topology, live: bool) -> Enrichment:
    """VendorInfo for each card of `topo` that a vendor library reports, keyed by bus id."""
    cards: dict[str, VendorInfo] = {}
    notes: list[str] = []
    for provider in PROVIDERS:
        wanted = {c.bdf for c in topo.cards if c.vendor == provider.vendor}
        if not wanted:
            continue
        path = library_for(provider.env, provider.paths, live)
        if path is None:
            continue
        try:
            found = _read(provider, path)
        except Exception as exc:  # an optional vendor library must never break the probe
            if override(provider.env):
                why = str(exc) if isinstance(exc, XputuneError) else f"{type(exc).__name__}: {exc}"
                notes.append(f"{provider.env}={path}: {why}; vendor details skipped")
            continue
        cards.update({bdf: info for bdf, info in found.items() if bdf in wanted})
    return Enrichment(cards, tuple(notes))
