"""Hypothesis against the config-space codec: random bytes never crash it, and an IDO write
through it never changes a bit outside the two it owns."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xputune.errors import HostDataError
from xputune.host import HostView, pciconfig
from xputune.tune import pciwrite


class MemoryView(HostView):
    """One config file held in memory."""

    label = "memory"

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self.data = bytearray(data)

    def _realpath(self, path: str) -> str:
        return path

    def _read(self, real: str) -> bytes:
        return bytes(self.data)

    def _listdir(self, real: str) -> list[str]:
        return []

    def _kind(self, real: str) -> str | None:
        return "file"

    def writable(self) -> bool:
        return True

    def write_bytes(self, path: str, data: bytes, offset: int | None = None) -> None:
        assert offset is not None
        self.data[offset : offset + len(data)] = data


sizes = st.sampled_from([64, 128, 256, 4096])


def _with_pcie(data: bytes, at: int) -> bytes:
    """Random bytes, but with a capability list that leads to a PCIe capability at `at`."""
    out = bytearray(data)
    struct.pack_into("<H", out, 0x06, struct.unpack_from("<H", out, 0x06)[0] | 0x10)
    out[0x34] = at
    out[at] = pciconfig.CAP_ID_PCIE
    return bytes(out)


@pytest.mark.slow
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_decode_never_crashes(data):
    size = data.draw(sizes)
    raw = data.draw(st.binary(min_size=size, max_size=size))
    try:
        space = pciconfig.decode(raw)
    except HostDataError:
        return
    assert space.size == size
    if space.pcie is not None:
        assert 0x40 <= space.pcie.offset <= 0xFF
        assert space.pcie.port_type_name


@pytest.mark.slow
@settings(max_examples=250, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_ido_write_touches_only_owned_bits(data):
    size = data.draw(st.sampled_from([256, 4096]))
    raw = data.draw(st.binary(min_size=size, max_size=size))
    if data.draw(st.booleans()):  # half the cases: make sure a PCIe capability is reachable
        raw = _with_pcie(raw, data.draw(st.integers(0x40, 0xD4)) & 0xFC)
    view = MemoryView(raw)
    want = data.draw(st.sampled_from([0, 0x0100, 0x0200, 0x0300]))
    try:
        reg, cap = pciwrite.pcie_register(view, "config", "devctl2", pciconfig.DEVCTL2_IDO, "x")
    except HostDataError:
        assert view.data == raw
        return
    pciwrite.write_bits(view, reg, want)  # memory keeps every bit, so no VerifyError
    before = int.from_bytes(raw, "little")
    after = int.from_bytes(bytes(view.data), "little")
    owned = pciconfig.DEVCTL2_IDO << (8 * (cap.offset + pciconfig.PCIE_DEVCTL2))
    assert (before ^ after) & ~owned == 0
    assert pciwrite.read_bits(view, reg) == want


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF))
def test_masked_value_matches_masked_word(current, mask, value):
    value &= mask
    assert pciwrite.masked_value(current, mask, value) == pciconfig.masked_word(
        current, mask, value
    )
    result = pciwrite.masked_value(current, mask, value)
    assert result & ~mask == current & ~mask
    assert result & mask == value
