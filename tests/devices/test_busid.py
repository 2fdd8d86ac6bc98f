"""Bus id spellings of NVML, sysfs and tools all join to sysfs's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xputune.devices.busid import normalize_bus_id


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00000000:18:00.0", "0000:18:00.0"),  # NVML
        ("0000:3B:00.0", "0000:3b:00.0"),
        ("3b:00.0", "0000:3b:00.0"),
        (" 0001:e4:1f.7 ", "0001:e4:1f.7"),
        ("0000:18:00.8", None),
        ("0000:18:20.0", None),  # device numbers stop at 0x1f
        ("00010000:18:00.0", None),  # domain beyond 16 bits
        ("xpu0", None),
        ("", None),
    ],
)
def test_forms(text: str, expected: str | None) -> None:
    assert normalize_bus_id(text) == expected


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7))
def test_every_spelling_of_one_address_agrees(domain: int, bus: int, dev: int, fn: int) -> None:
    canonical = f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"
    assert normalize_bus_id(canonical) == canonical
    assert normalize_bus_id(f"{domain:08X}:{bus:02X}:{dev:02X}.{fn}") == canonical
