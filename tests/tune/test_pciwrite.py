"""The write side of the config-space codec: masked, aligned, verified, owned bits only."""

from __future__ import annotations

import struct

import pytest

from tests.tune import minihost
from tests.tune.views import HardwiredView
from xputune.errors import HostDataError
from xputune.host import pciconfig
from xputune.host.view import DirView
from xputune.tune import pciwrite
from xputune.tune.errors import UnsupportedBits, VerifyError

CARD = next(f for f in minihost.FUNCTIONS if f.bdf == "0000:03:00.0")
CONFIG = f"/sys/devices/{CARD.rel}/config"
DEVCTL2 = minihost.PCIE_AT + pciconfig.PCIE_DEVCTL2


def _bytes(root: str) -> bytes:
    with open(root + CONFIG, "rb") as fh:
        return fh.read()


def test_pcie_register_points_at_devctl2_of_the_pcie_capability(mini):
    reg, cap = pciwrite.pcie_register(
        DirView(mini), CONFIG, "devctl2", pciconfig.DEVCTL2_IDO, CARD.bdf
    )
    assert reg.offset == DEVCTL2
    assert cap.port_type_name == "endpoint"
    assert reg.width == 2 and reg.mask == 0x0300


def test_write_sets_only_owned_bits_and_reports_change(mini):
    view = DirView(mini)
    before = _bytes(mini)
    reg, _ = pciwrite.pcie_register(view, CONFIG, "devctl2", pciconfig.DEVCTL2_IDO, CARD.bdf)
    assert pciwrite.write_bits(view, reg, pciconfig.DEVCTL2_IDO) is True
    after = _bytes(mini)
    diff = [i for i in range(len(before)) if before[i] != after[i]]
    assert diff == [DEVCTL2 + 1]  # bits 8 and 9 live in the high byte of the word
    assert after[DEVCTL2 + 1] ^ before[DEVCTL2 + 1] == 0x03
    assert pciwrite.write_bits(view, reg, pciconfig.DEVCTL2_IDO) is False  # already so


def test_other_bits_of_the_register_survive(mini):
    path = mini + CONFIG
    with open(path, "r+b") as fh:  # a device with other devctl2 bits set (completion timeout)
        fh.seek(DEVCTL2)
        fh.write(struct.pack("<H", 0x0415))
    view = DirView(mini)
    reg, _ = pciwrite.pcie_register(view, CONFIG, "devctl2", pciconfig.DEVCTL2_IDO, CARD.bdf)
    pciwrite.write_bits(view, reg, pciconfig.DEVCTL2_IDO)
    assert pciwrite.read_register(view, reg) == 0x0415 | 0x0300
    pciwrite.write_bits(view, reg, 0)
    assert pciwrite.read_register(view, reg) == 0x0415


def test_bits_that_stay_zero_are_unsupported_not_success(mini):
    view = HardwiredView(mini, {CONFIG}, DEVCTL2, pciconfig.DEVCTL2_IDO_COMPLETION)
    reg, _ = pciwrite.pcie_register(view, CONFIG, "devctl2", pciconfig.DEVCTL2_IDO, CARD.bdf)
    with pytest.raises(UnsupportedBits) as err:
        pciwrite.write_bits(view, reg, pciconfig.DEVCTL2_IDO)
    assert err.value.bits == pciconfig.DEVCTL2_IDO_COMPLETION
    assert "IDO completion enable" in str(err.value)
    assert "unsupported" in str(err.value)


def test_a_bit_that_will_not_clear_is_a_verify_error(mini):
    view = DirView(mini)
    reg = pciwrite.Register(CONFIG, DEVCTL2, 2, 0x0300, "x")
    pciwrite.write_bits(view, reg, 0x0300)

    class Sticky(DirView):
        def write_bytes(self, path, data, offset=None):
            super().write_bytes(path, struct.pack("<H", 0x0300), offset)

    with pytest.raises(VerifyError) as err:
        pciwrite.write_bits(Sticky(mini), reg, 0)
    assert not isinstance(err.value, UnsupportedBits)


def test_header_only_config_space_says_root_is_needed(mini):
    with open(mini + CONFIG, "r+b") as fh:
        fh.truncate(64)
    with pytest.raises(HostDataError, match="needs root"):
        pciwrite.pcie_register(DirView(mini), CONFIG, "devctl2", 0x0300, CARD.bdf)


@pytest.mark.parametrize(
    ("offset", "width", "mask"),
    [(0x69, 2, 0x0300), (0x6A, 4, 0x1), (0x68, 3, 0x1), (0x68, 2, 0x10000), (0x68, 2, 0)],
)
def test_register_rejects_misaligned_or_oversized(offset, width, mask):
    with pytest.raises(ValueError):
        pciwrite.Register("config", offset, width, mask)


@pytest.mark.parametrize("width", [1, 2, 4])
def test_all_widths_write_only_their_bytes(mini, width):
    view = DirView(mini)
    before = _bytes(mini)
    mask = 0x80 << (8 * (width - 1))
    reg = pciwrite.Register(CONFIG, 0x100 + 0x10, width, mask, "platform")
    pciwrite.write_bits(view, reg, mask)
    after = _bytes(mini)
    diff = [i for i in range(len(before)) if before[i] != after[i]]
    assert diff == [0x110 + width - 1]


def test_setpci_equivalent():
    assert (
        pciwrite.setpci_command("0000:13:00.0", "devctl2", 0x0300, 0x0300)
        == "setpci -s 0000:13:00.0 CAP_EXP+28.w=0300:0300"
    )


def test_masked_value_rejects_value_outside_mask():
    with pytest.raises(ValueError):
        pciwrite.masked_value(0, 0x0300, 0x0400)
    assert pciwrite.masked_value(0xFFFF, 0x0300, 0) == 0xFCFF
