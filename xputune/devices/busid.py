"""PCI bus ids in one spelling, so vendor records join topology cards.

NVML writes "00000000:18:00.0" (32-bit domain), sysfs "0000:18:00.0", some tools "18:00.0"
or upper case. The canonical form is sysfs's: 4-digit domain, lower case.
"""

from __future__ import annotations

import re

_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<dev>[0-9a-fA-F]{1,2})\.(?P<fn>[0-7])$"
)


def normalize_bus_id(text: str) -> str | None:
    """The sysfs spelling of a bus id ("0000:18:00.0"), or None when `text` is not one."""
    m = _BUS_ID.match(text.strip())
    if m is None:
        return None
    domain = int(m["domain"] or "0", 16)
    if domain > 0xFFFF or int(m["dev"], 16) > 0x1F:
        return None
    return f"{domain:04x}:{int(m['bus'], 16):02x}:{int(m['dev'], 16):02x}.{m['fn']}"
