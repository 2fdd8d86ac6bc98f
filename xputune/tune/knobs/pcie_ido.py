"""pcie.ido: PCIe ID-based ordering on every card and every port on its path to the root port.

Two cards under one switch share an uplink; with strict PCIe ordering the posted writes of one
card wait behind the other's, and D2H bandwidth collapses once both write to far NUMA nodes. IDO
lets the ports order only traffic of the same requester ID. It is Device Control 2 bits 8
(request enable) and 9 (completion enable) of the PCIe capability, and it takes effect only
where the whole path honours it, so the knob owns those two bits in the card and in every
bridge port between it and its root port. Nothing else in config space is ever written.

A platform may also need a root-complex register (the field report's Hygon fix is one,
docs/field-report.md, 2.5; the register is not public): a profile can describe such writes (device
match, offset, width, mask, value). They are off unless a profile names them, and they are planned
only when IDO is wanted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xputune.errors import HostDataError, HostError
from xputune.host import HostView, pciconfig
from xputune.topology.model import Topology
from xputune.tune import pciwrite
from xputune.tune.errors import ProfileError
from xputune.tune.knobs.base import DRIFT, OK, UNKNOWN, Knob, Row, TuneContext, Want
from xputune.tune.preflight import require_pci_writes
from xputune.tune.steps import Accessor, Change, register

WHEN_SHARED = "when-shared-uplinks"
IDO = pciconfig.DEVCTL2_IDO


class PciBitsAccessor(Accessor):
    """The owned bits of one config-space register: masked write, read back, verify."""

    kind = "pci-bits"

    @staticmethod
    def register_of(target: dict[str, Any]) -> pciwrite.Register:
        return pciwrite.Register(
            target["path"],
            int(target["offset"]),
            int(target["width"]),
            int(target["mask"]),
            str(target.get("label", "")),
            str(target.get("field", "")),
        )

    def read(self, view: HostView, target: dict[str, Any]) -> int:
        return pciwrite.read_bits(view, self.register_of(target))

    def write(self, view: HostView, target: dict[str, Any], value: Any) -> None:
        pciwrite.write_bits(view, self.register_of(target), int(value))


register(PciBitsAccessor())


@dataclass(frozen=True)
class Port:
    """One function on a card's path: the card itself or a bridge port above it."""

    bdf: str
    role: str  # "card xpu0", "root port", "switch upstream", ...
    config_path: str
    cards: tuple[str, ...]  # names of the cards below (or the card itself)

    @property
    def label(self) -> str:
        if self.role.startswith("card"):
            return f"{self.bdf} {self.role}"
        return f"{self.bdf} {self.role} ({', '.join(self.cards)})"


def ido_ports(topology: Topology) -> list[Port]:
    """Every card and every port between it and its root port, each once, root side first."""
    ports: dict[str, Port] = {}
    for card in topology.cards:
        for fn in topology.ports_on_path(card):
            role = f"card {card.name}" if fn.bdf == card.bdf else (fn.port_type or fn.kind)
            known = ports.get(fn.bdf)
            cards = (*known.cards, card.name) if known else (card.name,)
            ports[fn.bdf] = Port(fn.bdf, role, f"{fn.sysfs_path}/config", cards)
    return sorted(ports.values(), key=lambda p: (len(p.config_path), p.config_path))


def shared_uplinks(topology: Topology) -> bool:
    return any(len(uplink.cards) > 1 for uplink in topology.uplinks)


def describe_bits(bits: int) -> str:
    if bits == IDO:
        return "on"
    if not bits:
        return "off"
    half = "req" if bits & pciconfig.DEVCTL2_IDO_REQUEST else "cpl"
    return f"{half} only"


def _hex(raw: Any, where: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ProfileError(f"{where}: {raw!r} is not a number")
    try:
        return raw if isinstance(raw, int) else int(raw, 0)
    except ValueError:
        raise ProfileError(f"{where}: {raw!r} is not a number (use 0x1d94 or 7572)") from None


def parse_platform_register(raw: Any, where: str) -> dict[str, Any]:
    """One profile-described register write, validated; width in bits (8, 16, 32)."""
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: expected a mapping with name, vendor, offset, mask, value")
    allowed = {"name", "vendor", "device", "offset", "width", "mask", "value", "note"}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ProfileError(f"{where}: unknown key {unknown[0]!r} (allowed: {sorted(allowed)})")
    for key in ("name", "vendor", "offset", "mask", "value"):
        if key not in raw:
            raise ProfileError(f"{where}: missing {key!r}")
    width = raw.get("width", 32)
    if width not in (8, 16, 32):
        raise ProfileError(f"{where}.width: {width!r} is not 8, 16 or 32")
    entry = {
        "name": str(raw["name"]),
        "vendor": _hex(raw["vendor"], f"{where}.vendor"),
        "device": _hex(raw["device"], f"{where}.device") if "device" in raw else None,
        "offset": _hex(raw["offset"], f"{where}.offset"),
        "width": width // 8,
        "mask": _hex(raw["mask"], f"{where}.mask"),
        "value": _hex(raw["value"], f"{where}.value"),
        "note": str(raw.get("note", "")),
    }
    try:
        pciwrite.Register("config", entry["offset"], entry["width"], entry["mask"])
        pciwrite.masked_value(0, entry["mask"], entry["value"], entry["width"])
    except ValueError as exc:
        raise ProfileError(f"{where}: {exc}") from None
    if entry["offset"] + entry["width"] > 4096:
        raise ProfileError(f"{where}.offset: {entry['offset']:#x} is beyond config space")
    return entry


class PcieIdo(Knob):
    name = "pcie.ido"
    summary = "PCIe ID-based ordering on cards and their switch/root ports (Device Control 2)"
    needs_topology = True

    def parse(self, raw: Any, where: str) -> bool | str:
        if isinstance(raw, bool) or raw == WHEN_SHARED:
            return raw
        raise ProfileError(f"{where}: {raw!r} is not a pcie.ido value (true, false, {WHEN_SHARED})")

    def describe(self, value: Any) -> str:
        return {True: "on", False: "off"}.get(value, str(value))

    # -- what is wanted where ---------------------------------------------------------------
    def _effective(self, ctx: TuneContext, want: Want) -> bool | None:
        """True/False, or None when not needed (when-shared-uplinks and no shared uplink)."""
        if want.value == WHEN_SHARED:
            return True if ctx.topology and shared_uplinks(ctx.topology) else None
        return bool(want.value)

    def _registers(self, ctx: TuneContext) -> list[tuple[str, pciwrite.Register | str]]:
        """(label, register or the reason it cannot be read) for every owned register."""
        assert ctx.topology is not None
        out: list[tuple[str, pciwrite.Register | str]] = []
        for port in ido_ports(ctx.topology):
            try:
                reg, _ = pciwrite.pcie_register(
                    ctx.view, port.config_path, "devctl2", IDO, port.bdf
                )
            except HostDataError as exc:
                out.append((port.label, f"{port.config_path}: {exc.expected}"))
                continue
            except FileNotFoundError:
                out.append((port.label, f"{port.config_path}: no config file"))
                continue
            out.append((port.label, reg))
        return out

    def _platform(self, ctx: TuneContext) -> list[tuple[str, pciwrite.Register, int]]:
        assert ctx.topology is not None
        out = []
        for entry in ctx.platform_registers:
            for fn in sorted(ctx.topology.pci.values(), key=lambda f: f.bdf):
                if fn.vendor_id != entry["vendor"]:
                    continue
                if entry["device"] is not None and fn.device_id != entry["device"]:
                    continue
                reg = pciwrite.Register(
                    f"{fn.sysfs_path}/config",
                    entry["offset"],
                    entry["width"],
                    entry["mask"],
                    f"{fn.bdf} {entry['name']}",
                )
                out.append((f"{fn.bdf} platform {entry['name']}", reg, entry["value"]))
        return out

    # -- check / plan -----------------------------------------------------------------------
    def check(self, ctx: TuneContext, want: Want) -> list[Row]:
        wanted = self._effective(ctx, want)
        if wanted is None:
            return [
                Row(
                    self.name,
                    "all cards",
                    "not needed",
                    "-",
                    OK,
                    "",
                    want.severity,
                    "no two cards share an uplink",
                )
            ]
        if ctx.topology is None or not ctx.topology.cards:
            return [
                Row(
                    self.name,
                    "all cards",
                    self.describe(wanted),
                    "no cards found",
                    OK,
                    "",
                    want.severity,
                )
            ]
        rows = []
        bits = IDO if wanted else 0
        for label, reg in self._registers(ctx):
            if isinstance(reg, str):
                rows.append(
                    Row(
                        self.name,
                        label,
                        self.describe(wanted),
                        "unknown",
                        UNKNOWN,
                        "run as root to read config space",
                        want.severity,
                        reg,
                    )
                )
                continue
            actual = pciwrite.read_bits(ctx.view, reg)
            verdict = OK if actual == bits else DRIFT
            fix = (
                ""
                if verdict == OK
                else pciwrite.setpci_command(label.split()[0], "devctl2", IDO, bits)
            )
            rows.append(
                Row(
                    self.name,
                    label,
                    self.describe(wanted),
                    describe_bits(actual),
                    verdict,
                    fix,
                    want.severity,
                )
            )
        if wanted:
            for label, reg, value in self._platform(ctx):
                actual = pciwrite.read_bits(ctx.view, reg)
                verdict = OK if actual == value else DRIFT
                width = reg.width * 2
                fix = (
                    ""
                    if verdict == OK
                    else (
                        f"setpci -s {label.split()[0]} {reg.offset:x}.{'bwl'[reg.width // 2]}="
                        f"{value:0{width}x}:{reg.mask:0{width}x}"
                    )
                )
                rows.append(
                    Row(
                        self.name,
                        label,
                        f"{value:#x}",
                        f"{actual:#x}",
                        verdict,
                        fix,
                        want.severity,
                        f"mask {reg.mask:#x}",
                    )
                )
        return rows

    def plan(self, ctx: TuneContext, want: Want) -> list[Change]:
        wanted = self._effective(ctx, want)
        if wanted is None or ctx.topology is None:
            return []
        bits = IDO if wanted else 0
        changes = []
        for label, reg in self._registers(ctx):
            if isinstance(reg, str):
                raise HostError(f"pcie.ido: cannot read {label}: {reg}")
            actual = pciwrite.read_bits(ctx.view, reg)
            if actual != bits:
                changes.append(_change(self.name, label, reg, actual, bits, describe_bits))
        if wanted:
            for label, reg, value in self._platform(ctx):
                actual = pciwrite.read_bits(ctx.view, reg)
                if actual != value:
                    changes.append(_change(self.name, label, reg, actual, value, hex))
        return changes

    def preflight(self, ctx: TuneContext, changes: list[Change]) -> None:
        if changes:
            require_pci_writes(ctx.view)


def _change(
    knob: str, label: str, reg: pciwrite.Register, before: int, after: int, show: Any
) -> Change:
    target = {
        "path": reg.config_path,
        "offset": reg.offset,
        "width": reg.width,
        "mask": reg.mask,
        "label": reg.label,
        "field": reg.field,
    }
    return Change(
        knob, PciBitsAccessor.kind, target, label, before, after, show(before), show(after)
    )
