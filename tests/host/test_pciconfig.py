import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xputune.errors import HostDataError
from xputune.host import pciconfig


def make_config(devctl2: int = 0, port_type: int = 0, size: int = 4096) -> bytes:
    """A type-0 header with PM -> PCIe -> MSI-X, and AER -> ACS extended capabilities."""
    data = bytearray(size)
    struct.pack_into("<HHHH", data, 0, 0x1D22, 0x3688, 0x0406, 0x0010)
    data[0x0E] = 0x00
    data[0x34] = 0x40
    data[0x40:0x42] = bytes([0x01, 0x70])  # PM -> 0x70
    data[0x70:0x72] = bytes([0x10, 0xB0])  # PCIe -> 0xb0
    struct.pack_into("<H", data, 0x72, 0x0002 | port_type << 4)
    struct.pack_into("<H", data, 0x78, 0x2910)  # DevCtl with relaxed ordering on
    struct.pack_into("<H", data, 0x70 + 0x28, devctl2)
    data[0xB0:0xB2] = bytes([0x11, 0x00])  # MSI-X, end
    if size > 0x100:
        struct.pack_into("<I", data, 0x100, 0x0001 | 2 << 16 | 0x148 << 20)
        struct.pack_into("<I", data, 0x148, 0x000D | 1 << 16)
    return bytes(data)


def test_decodes_chain_and_ordering_bits() -> None:
    cfg = pciconfig.decode(make_config(devctl2=0x0300 | 0x0005, port_type=6))
    assert [c for c, _ in cfg.capabilities] == [0x01, 0x10, 0x11]
    assert [c for c, _ in cfg.ext_capabilities] == [0x0001, 0x000D]
    assert cfg.pcie is not None
    assert cfg.pcie.port_type_name == "switch downstream"
    assert (cfg.pcie.ido_request, cfg.pcie.ido_completion) == (True, True)
    assert cfg.pcie.relaxed_ordering
    assert cfg.pcie.devctl2_offset == 0x98


def test_header_only_read_is_unknown_not_off() -> None:
    cfg = pciconfig.decode(make_config(devctl2=0x0300)[:64])
    assert not cfg.visible and cfg.pcie is None


def test_truncated_config_is_an_error() -> None:
    with pytest.raises(HostDataError, match="at least 64"):
        pciconfig.decode(make_config()[:37])


def test_pointer_into_the_header_is_an_error() -> None:
    data = bytearray(make_config())
    data[0x41] = 0x20  # PM -> 0x20: inside the standard header, never a capability
    with pytest.raises(HostDataError, match="outside"):
        pciconfig.decode(bytes(data))


def test_capability_loop_is_an_error() -> None:
    data = bytearray(make_config())
    data[0x71] = 0x40  # PCIe -> PM again
    with pytest.raises(HostDataError, match="loops"):
        pciconfig.decode(bytes(data))


@given(st.binary(min_size=0, max_size=4096))
def test_random_bytes_never_crash(data: bytes) -> None:
    try:
        cfg = pciconfig.decode(data, "config")
    except HostDataError:
        return
    assert cfg.size == len(data)


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF))
def test_masked_word_touches_only_owned_bits(current: int, mask: int, value: int) -> None:
    value &= mask
    out = pciconfig.masked_word(current, mask, value)
    assert out & ~mask & 0xFFFF == current & ~mask & 0xFFFF
    assert out & mask == value
