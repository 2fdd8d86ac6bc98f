"""PCI configuration space codec: capability walk, PCI Express fields, masked 16-bit writes.

It is pure (bytes in, values out) so that the probe can decode what it reads and the tuning
knobs can plan their writes with the same code. Debian's lspci does not decode the ID-based
ordering bits, so we decode them ourselves.

What a reader sees depends on privilege: root reads 256 or 4096 bytes, anyone else only the
64-byte header, where the capability list is invisible. A 64-byte read is therefore "unknown",
never "off".
"""

from __future__ import annotations

from xputune.errors import HostDataError
from xputune.tuples import NamedTuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    from xputune.host.view import SparseBytes

    #: What decode reads: bytes, or anything that indexes, slices and len()s as they do.
    Bytes = bytes | SparseBytes

HEADER_BYTES = 64
STATUS_CAP_LIST = 0x0010
CAP_POINTER = 0x34
CAP_ID_PCIE = 0x10
EXT_CAP_START = 0x100

# Offsets inside the PCI Express capability structure.
PCIE_CAPS = 0x02
PCIE_DEVCTL = 0x08
PCIE_LNKCAP = 0x0C
PCIE_LNKSTA = 0x12
PCIE_DEVCTL2 = 0x28

DEVCTL_RELAXED_ORDERING = 0x0010
DEVCTL2_IDO_REQUEST = 0x0100
DEVCTL2_IDO_COMPLETION = 0x0200
DEVCTL2_IDO = DEVCTL2_IDO_REQUEST | DEVCTL2_IDO_COMPLETION

PORT_TYPES = {
    0x0: "endpoint",
    0x1: "legacy endpoint",
    0x4: "root port",
    0x5: "switch upstream",
    0x6: "switch downstream",
    0x7: "pcie-to-pci bridge",
    0x8: "pci-to-pcie bridge",
    0x9: "rc integrated endpoint",
    0xA: "rc event collector",
}


class PcieCapability(NamedTuple):
    """The fields of the PCI Express capability that xputune reads or owns."""

    offset: int
    port_type: int
    devctl: int
    devctl2: int
    link_cap: int
    link_status: int

    @property
    def port_type_name(self) -> str:
        return PORT_TYPES.get(self.port_type, f"type {self.port_type:#x}")

    @property
    def relaxed_ordering(self) -> bool:
        return bool(self.devctl & DEVCTL_RELAXED_ORDERING)

    @property
    def ido_request(self) -> bool:
        return bool(self.devctl2 & DEVCTL2_IDO_REQUEST)

    @property
    def ido_completion(self) -> bool:
        return bool(self.devctl2 & DEVCTL2_IDO_COMPLETION)

    @property
    def devctl2_offset(self) -> int:
        return self.offset + PCIE_DEVCTL2


class ConfigSpace(NamedTuple):
    """A decoded config space; `pcie` is None when invisible (non-root) or absent (plain PCI)."""

    size: int
    vendor_id: int
    device_id: int
    header_type: int
    capabilities: tuple[tuple[int, int], ...]  # (id, offset)
    ext_capabilities: tuple[tuple[int, int], ...]  # (id, offset)
    pcie: PcieCapability | None
    class_code: int = 0  # 24-bit: base class, subclass, prog-if
    secondary_bus: int | None = None  # the bus behind a bridge (type 1 header)

    @property
    def visible(self) -> bool:
        """False when only the 64-byte header could be read (capabilities need root)."""
        return self.size > HEADER_BYTES


def _u16(data: Bytes, offset: int) -> int:
    """The word at `offset`, which decode has checked lies inside `data`."""
    return int.from_bytes(data[offset : offset + 2], "little")


def _u32(data: Bytes, offset: int) -> int:
    return int.from_bytes(data[offset : offset + 4], "little")


def decode(data: Bytes, path: str = "config") -> ConfigSpace:
    """Decode config space bytes; HostDataError for what no real kernel would hand out.

    `data` is the whole file's bytes, or what HostView.read_sparse gives for it, which reads
    only what is looked at here: a live probe's config accesses are the words of the header
    it uses, of each capability in the chain, of the PCIe capability's fields and of each
    extended capability's header, not the whole 256 or 4096 bytes.
    """
    if len(data) < HEADER_BYTES:
        raise HostDataError(path, f"{len(data)} bytes", "config space is at least 64 bytes")
    vendor_id = _u16(data, 0x00)
    device_id = _u16(data, 0x02)
    status = _u16(data, 0x06)
    header_type = data[0x0E] & 0x7F
    class_code = int.from_bytes(data[0x09:0x0C], "little")
    secondary = data[0x19] if header_type == 1 else None
    if len(data) == HEADER_BYTES or not status & STATUS_CAP_LIST:
        return ConfigSpace(
            len(data), vendor_id, device_id, header_type, (), (), None, class_code, secondary
        )

    caps = _walk_capabilities(data, path)
    ext_caps = _walk_ext_capabilities(data, path) if len(data) > EXT_CAP_START else ()
    pcie = None
    for cap_id, offset in caps:
        if cap_id == CAP_ID_PCIE:
            if offset + PCIE_DEVCTL2 + 2 > len(data):
                raise HostDataError(path, f"capability at {offset:#x}", "PCIe capability truncated")
            pcie = PcieCapability(
                offset=offset,
                port_type=(_u16(data, offset + PCIE_CAPS) >> 4) & 0xF,
                devctl=_u16(data, offset + PCIE_DEVCTL),
                devctl2=_u16(data, offset + PCIE_DEVCTL2),
                link_cap=_u32(data, offset + PCIE_LNKCAP),
                link_status=_u16(data, offset + PCIE_LNKSTA),
            )
            break
    return ConfigSpace(
        len(data), vendor_id, device_id, header_type, caps, ext_caps, pcie, class_code, secondary
    )


def _walk_capabilities(data: Bytes, path: str) -> tuple[tuple[int, int], ...]:
    found: list[tuple[int, int]] = []
    seen: set[int] = set()
    pointer = data[CAP_POINTER]
    limit = min(len(data), 256)
    while pointer:
        if pointer & 0x3:
            raise HostDataError(path, f"pointer {pointer:#x}", "capability pointer not aligned")
        if pointer < HEADER_BYTES or pointer + 2 > limit:
            raise HostDataError(path, f"pointer {pointer:#x}", "capability outside 0x40-0xff")
        if pointer in seen:
            raise HostDataError(path, f"pointer {pointer:#x}", "capability list loops")
        seen.add(pointer)
        found.append((data[pointer], pointer))
        pointer = data[pointer + 1]
    return tuple(found)


def _walk_ext_capabilities(data: Bytes, path: str) -> tuple[tuple[int, int], ...]:
    found: list[tuple[int, int]] = []
    seen: set[int] = set()
    pointer = EXT_CAP_START
    while pointer:
        if pointer < EXT_CAP_START or pointer + 4 > len(data):
            raise HostDataError(path, f"pointer {pointer:#x}", "extended capability out of range")
        if pointer in seen:
            raise HostDataError(path, f"pointer {pointer:#x}", "extended capability list loops")
        seen.add(pointer)
        header = _u32(data, pointer)
        if header in (0, 0xFFFFFFFF):
            break  # no extended capabilities
        found.append((header & 0xFFFF, pointer))
        pointer = (header >> 20) & 0xFFC
    return tuple(found)


def masked_word(current: int, mask: int, value: int) -> int:
    """The 16-bit word after setting the `mask` bits to `value`; other bits stay as they are."""
    if not 0 <= mask <= 0xFFFF or value & ~mask:
        raise ValueError(f"value {value:#x} must lie inside mask {mask:#x}")
    return (current & ~mask & 0xFFFF) | value


def pack_u16(value: int) -> bytes:
    import struct  # here: the probe decodes without it (start-up time)

    return struct.pack("<H", value)


def read_u16(data: bytes, offset: int) -> int:
    import struct

    return struct.unpack_from("<H", data, offset)[0]
