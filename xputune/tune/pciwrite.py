"""Masked read-modify-write of PCI config space through the sysfs `config` file.

This is the only code that writes config space. It writes exactly one aligned register (1, 2 or
4 bytes) per call, changes only the bits of `mask`, and reads the register back: a bit that was
set but reads back 0 is reported as unsupported (PCIe has no "IDO supported" bit, so the read-back
is the only test), a bit that reads back wrong in any other way is a failed write. Bits outside
the mask are written back exactly as they were read, so a knob can never disturb a neighbour.

The decoder (capability walk, field offsets) lives in host/pciconfig.py because the probe needs it
too; this module only adds the write side on top of it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from xputune.errors import HostDataError
from xputune.host import HostView, pciconfig
from xputune.tune.errors import UnsupportedBits, VerifyError

_FORMATS = {1: "<B", 2: "<H", 4: "<I"}

#: Names of the bits xputune owns, for messages.
BIT_NAMES = {
    ("devctl2", pciconfig.DEVCTL2_IDO_REQUEST): "IDO request enable",
    ("devctl2", pciconfig.DEVCTL2_IDO_COMPLETION): "IDO completion enable",
    ("devctl", pciconfig.DEVCTL_RELAXED_ORDERING): "relaxed ordering enable",
}


@dataclass(frozen=True)
class Register:
    """One aligned register of one function's config space, and the bits a knob owns in it."""

    config_path: str  # host path of the sysfs config file
    offset: int
    width: int  # bytes: 1, 2 or 4
    mask: int
    label: str = ""  # what the operator reads in messages ("0000:13:00.0 devctl2")
    field: str = ""  # "devctl" or "devctl2" for PCIe-capability registers, for bit names

    def __post_init__(self) -> None:
        if self.width not in _FORMATS:
            raise ValueError(f"register width must be 1, 2 or 4 bytes, got {self.width}")
        if self.offset < 0 or self.offset % self.width:
            raise ValueError(f"offset {self.offset:#x} is not aligned to {self.width} bytes")
        if not 0 < self.mask < 1 << (8 * self.width):
            raise ValueError(f"mask {self.mask:#x} does not fit {self.width} bytes")

    @property
    def name(self) -> str:
        return self.label or f"{self.config_path}@{self.offset:#x}"


def masked_value(current: int, mask: int, value: int, width: int = 2) -> int:
    """The register after setting the `mask` bits to `value`; all other bits as they were."""
    full = (1 << (8 * width)) - 1
    if not 0 <= mask <= full or value & ~mask:
        raise ValueError(f"value {value:#x} must lie inside mask {mask:#x}")
    return (current & ~mask & full) | value


def read_register(view: HostView, reg: Register) -> int:
    """The whole register as it reads now (not only the owned bits)."""
    data = view.read_bytes(reg.config_path)
    if reg.offset + reg.width > len(data):
        visible = len(data)
        hint = " (non-root readers see only 64 bytes)" if visible == 64 else ""
        raise HostDataError(
            reg.config_path, f"{visible} bytes", f"register at {reg.offset:#x} is beyond{hint}"
        )
    return struct.unpack_from(_FORMATS[reg.width], data, reg.offset)[0]


def read_bits(view: HostView, reg: Register) -> int:
    """Only the owned bits of the register."""
    return read_register(view, reg) & reg.mask


def write_bits(view: HostView, reg: Register, value: int) -> bool:
    """Set the owned bits to `value` and verify by reading back; False when already so.

    Raises UnsupportedBits when set bits read back 0, VerifyError for any other mismatch.
    """
    if value & ~reg.mask:
        raise ValueError(f"value {value:#x} has bits outside mask {reg.mask:#x}")
    current = read_register(view, reg)
    new = masked_value(current, reg.mask, value, reg.width)
    if new == current:
        return False
    view.write_bytes(reg.config_path, struct.pack(_FORMATS[reg.width], new), offset=reg.offset)
    got = read_register(view, reg) & reg.mask
    if got != value:
        stuck_zero = value & ~got
        if stuck_zero and not (got & ~value):
            raise UnsupportedBits(reg.name, stuck_zero, bit_names(reg, stuck_zero))
        raise VerifyError(
            f"{reg.name}: wrote {value:#06x} under mask {reg.mask:#06x}, read back {got:#06x}"
        )
    return True


def bit_names(reg: Register, bits: int) -> str:
    """Human names of `bits` where known (IDO, relaxed ordering), else the hex value."""
    names = [name for (f, bit), name in BIT_NAMES.items() if f == reg.field and bits & bit]
    return ", ".join(names) if names else f"bits {bits:#x}"


def pcie_register(
    view: HostView, config_path: str, field: str, mask: int, label: str
) -> tuple[Register, pciconfig.PcieCapability]:
    """The owned bits of one PCIe-capability register (devctl or devctl2) of one function.

    Raises HostDataError when the capability cannot be found: config space invisible (not
    root), plain PCI function, or malformed.
    """
    data = view.read_bytes(config_path)
    space = pciconfig.decode(data, config_path)
    if space.pcie is None:
        why = (
            "only the 64-byte header is readable (needs root)"
            if not space.visible
            else "no PCI Express capability"
        )
        raise HostDataError(config_path, f"{len(data)} bytes", why)
    field_offsets = {"devctl": pciconfig.PCIE_DEVCTL, "devctl2": pciconfig.PCIE_DEVCTL2}
    offset = space.pcie.offset + field_offsets[field]
    return Register(config_path, offset, 2, mask, f"{label} {field}", field), space.pcie


def setpci_command(bdf: str, field: str, mask: int, value: int) -> str:
    """The equivalent setpci line an operator can run by hand (CAP_EXP is the PCIe capability)."""
    offsets = {"devctl": pciconfig.PCIE_DEVCTL, "devctl2": pciconfig.PCIE_DEVCTL2}
    return f"setpci -s {bdf} CAP_EXP+{offsets[field]:x}.w={value:04x}:{mask:04x}"
