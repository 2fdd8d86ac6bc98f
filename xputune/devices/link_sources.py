"""Where the probe's NV#/XL links come from, and the matrix's source label.

Per vendor with cards, the first of:
  1. `probe --vendor-topo FILE`: a saved `nvidia-smi topo -m` / `xpu-smi topo -m` (any host;
     the user vouches it describes this one). It replaces every other source.
  2. A recording's saved outputs (vendor_files: <top>/xputune/vendor/<tool>-topo-m.txt, with
     <tool>-q-x.xml for bus ids when present).
  3. The vendor library's links, read in the enrichment's session (NVML: NVLink state and
     remote PCI info per link). On a recording only an explicitly named library is loaded
     (libpath's rule), as for the vendor details.
  4. Live Kunlunxin host: libxpuml has no link or topology call (docs/platform.md, 5), so
     `xpu-smi topo -m` is run (with a short timeout; XPUTUNE_VENDOR_LIBRARIES=off skips it).
     Never for a recording: a tool on this machine describes this machine.
Without any, the matrix is sysfs's PCIe picture and its label says so ("PCIe (sysfs)").
Problems with a recorded or live source are warnings (discovery degrades); a --vendor-topo
file that is missing or not a topo -m matrix is the user's error, one line.
"""

from __future__ import annotations

import io
import os

from xputune.devices.enrich import LINK_SOURCES
from xputune.devices.libpath import SWITCH_ENV
from xputune.devices.vendor_files import OUTPUTS, Output, read_saved
from xputune.errors import HostError
from xputune.topology.serialize import PCIE_ONLY
from xputune.tuples import NamedTuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    from xputune.devices.enrich import Enrichment
    from xputune.devices.xpusmi.links import Matrix
    from xputune.devices.xpusmi.model import SmiReport
    from xputune.host import HostView
    from xputune.topology.model import Topology

LIVE_TOOL_TIMEOUT_S = 5.0


class Linked(NamedTuple):
    topo: Topology
    source: str  # "PCIe (sysfs)", "PCIe (sysfs) + NVLink (NVML)", ...


def label(sources: list[str]) -> str:
    """The relation matrix's source, e.g. "PCIe (sysfs) + nvidia-smi topo -m"."""
    return " + ".join([PCIE_ONLY, *dict.fromkeys(sources)])


def _topo_matrix(report: SmiReport, ids: SmiReport | None = None) -> Matrix:
    from xputune.devices.xpusmi.links import relation_matrix

    return relation_matrix(report, ids)


def load_vendor_topo(path: str) -> SmiReport:
    """The `topo -m` report in a user's file; SmiError (one line) when it is not one."""
    from xputune.devices.xpusmi.model import SmiError, SmiParseError
    from xputune.devices.xpusmi.source import load

    try:
        report = load(path)
    except SmiParseError as exc:
        raise SmiError(f"{path}: {exc}") from None
    if report.form != "topo":
        raise SmiError(f"{path}: not a topo -m matrix (it reads as {report.tool} output)")
    return report


def merge_links(topo: Topology, matrix: Matrix, where: str) -> tuple[Topology, bool]:
    """devices/links.merge_links, imported only when there is a matrix to merge (a probe of a
    recording without vendor outputs, the common case, needs none of it)."""
    from xputune.devices.links import merge_links as merge

    return merge(topo, matrix, where)


def _noted(topo: Topology, where: str, warnings: tuple[str, ...] | list[str]) -> Topology:
    if not warnings:
        return topo
    return topo._replace(warnings=(*topo.warnings, *(f"{where}: {w}" for w in warnings)))


def _saved(host: HostView, topo: Topology, vendor: str) -> tuple[Topology, Matrix | None, str]:
    """The recording's saved matrix for `vendor` (keyed by bus id where -q -x is saved too)."""
    outputs: dict[str, Output] = {o.form: o for o in OUTPUTS if o.vendor == vendor}
    saved = outputs["topo"]
    try:
        data = read_saved(host, saved.path)
    except HostError as exc:
        return _noted(topo, "relation matrix", [f"{exc}; PCIe only"]), None, ""
    if data is None:
        return topo, None, ""  # the parsers are not even imported
    from xputune.devices.xpusmi import parse_bytes, parse_file
    from xputune.devices.xpusmi.model import SmiError

    where = f"recorded {saved.command} ({saved.path})"
    try:
        report = parse_bytes(data, "topo")
    except SmiError as exc:
        return _noted(topo, where, [f"{exc}; PCIe only"]), None, ""
    topo = _noted(topo, where, report.warnings)
    ids: SmiReport | None = None
    xml = outputs["xml"]
    try:
        raw = read_saved(host, xml.path)
        ids = parse_file(io.BytesIO(raw)) if raw is not None else None
    except (HostError, SmiError) as exc:
        topo = _noted(topo, f"recorded {xml.command} ({xml.path})", [f"{exc}; cards by order"])
    else:
        if ids is not None:
            topo = _noted(topo, f"recorded {xml.command} ({xml.path})", ids.warnings)
    return topo, _topo_matrix(report, ids), where


def _live_xpu_smi(topo: Topology) -> tuple[Topology, Matrix | None, str]:
    """`xpu-smi topo -m` on this host, or nothing when it is absent or switched off."""
    if os.environ.get(SWITCH_ENV, "").strip().lower() == "off":
        return topo, None, ""
    from xputune.devices.xpusmi import parse
    from xputune.devices.xpusmi.model import SmiError
    from xputune.devices.xpusmi.run import _run, find_tool

    tool = find_tool()
    if tool is None:
        return topo, None, ""
    try:
        report = parse(_run(tool, ("topo", "-m"), LIVE_TOOL_TIMEOUT_S), "topo")
    except SmiError as exc:
        return _noted(topo, "relation matrix", [f"{exc}; PCIe only"]), None, ""
    where = "xpu-smi topo -m"
    return _noted(topo, where, report.warnings), _topo_matrix(report), where


def vendor_links(
    topo: Topology,
    host: HostView,
    enrichment: Enrichment | None = None,
    vendor_topo: str | None = None,
) -> Linked:
    """`topo` with the vendor's NV#/XL links merged in (links.with_vendor_links), and the
    label of what its relation matrix is made of."""
    if vendor_topo is not None:
        report = load_vendor_topo(vendor_topo)
        where = f"{report.tool} ({vendor_topo})"
        topo = _noted(topo, where, report.warnings)
        topo, matched = merge_links(topo, _topo_matrix(report), where)
        return Linked(topo, label([report.tool] if matched else []))
    sources: list[str] = []
    for vendor in dict.fromkeys(c.vendor for c in topo.cards):
        topo, matrix, where, name = _for_vendor(topo, host, enrichment, vendor)
        if matrix is not None:
            topo, matched = merge_links(topo, matrix, where)
            if matched:
                sources.append(name)
    return Linked(topo, label(sources))


def _for_vendor(
    topo: Topology, host: HostView, enrichment: Enrichment | None, vendor: str
) -> tuple[Topology, Matrix | None, str, str]:
    """(topo with any warnings, the first source's matrix or None, where, its label)."""
    tools = {o.vendor: o.command for o in OUTPUTS if o.form == "topo"}
    if not host.live and vendor in tools:
        topo, matrix, where = _saved(host, topo, vendor)
        if matrix is not None:
            return topo, matrix, where, tools[vendor]
    library = LINK_SOURCES.get(vendor)
    if (
        library
        and enrichment
        and enrichment.links is not None
        and enrichment.links_source == library
    ):
        return topo, enrichment.links, library, library
    if host.live and vendor == "kunlunxin":
        topo, matrix, where = _live_xpu_smi(topo)
        if matrix is not None:
            return topo, matrix, where, tools[vendor]
    return topo, None, "", ""
