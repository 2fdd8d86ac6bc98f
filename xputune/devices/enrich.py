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
from xputune.tuples import NamedTuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    from typing import Any

    from xputune.topology.model import Topology


class Provider(NamedTuple):
    vendor: str  # Card.vendor this provider describes
    env: str
    paths: tuple[str, ...]
    module: str  # imported lazily; has read_cards(path) -> dict[bus id, VendorInfo]
    # and, where the library knows links between cards, read(path) -> (cards, links)


PROVIDERS = (
    Provider("kunlunxin", XPUML_ENV, XPUML_PATHS, "xputune.devices.xpuml_provider"),
    Provider("nvidia", NVML_ENV, NVML_PATHS, "xputune.devices.nvml"),
)


class Enrichment(NamedTuple):
    """VendorInfo by card bus id, plus notes for explicit overrides that failed.

    `links` holds the links between cards that a library reported in the same session
    ({bus id: {bus id: "NV18"}}, NVML only; see devices/links.py), with the library's name.
    """

    cards: dict[str, VendorInfo]
    notes: tuple[str, ...] = ()
    links: dict[str, dict[str, str]] | None = None
    links_source: str | None = None

    def as_json(self) -> dict[str, dict[str, Any]]:
        """Per bus id, the probe document's "vendor_info" object."""
        return {bdf: info.as_json() for bdf, info in self.cards.items()}


LINK_SOURCES = {"nvidia": "NVLink (NVML)"}


def _read(provider: Provider, path: str) -> tuple[dict[str, VendorInfo], dict | None]:
    module = importlib.import_module(provider.module)
    read: Callable[[str], tuple[dict[str, VendorInfo], dict]] | None = getattr(module, "read", None)
    if read is not None:
        return read(path)
    read_cards: Callable[[str], dict[str, VendorInfo]] = module.read_cards
    return read_cards(path), None


def vendor_info(topo: Topology, live: bool) -> Enrichment:
    """VendorInfo for each card of `topo` that a vendor library reports, keyed by bus id."""
    cards: dict[str, VendorInfo] = {}
    notes: list[str] = []
    links: dict[str, dict[str, str]] | None = None
    links_source: str | None = None
    for provider in PROVIDERS:
        wanted = {c.bdf for c in topo.cards if c.vendor == provider.vendor}
        if not wanted:
            continue
        path = library_for(provider.env, provider.paths, live)
        if path is None:
            continue
        try:
            found, found_links = _read(provider, path)
        except Exception as exc:  # an optional vendor library must never break the probe
            if override(provider.env):
                why = str(exc) if isinstance(exc, XputuneError) else f"{type(exc).__name__}: {exc}"
                notes.append(f"{provider.env}={path}: {why}; vendor details skipped")
            continue
        cards.update({bdf: info for bdf, info in found.items() if bdf in wanted})
        if found_links is not None:
            links = {**(links or {}), **found_links}
            links_source = LINK_SOURCES.get(provider.vendor, provider.vendor)
    return Enrichment(cards, tuple(notes), links, links_source)
