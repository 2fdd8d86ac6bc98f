"""The provider-neutral record of what a vendor library says about one card.

Kunlunxin's xpuml and NVIDIA's NVML answer the same questions under different names; the
probe and its JSON see only this record, so a third vendor adds a provider, not a format.
"""

from __future__ import annotations

from xputune.tuples import NamedTuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    from typing import Any


class VendorInfo(NamedTuple):
    """One card as its vendor library reports it; None where the library cannot say."""

    provider: str  # "xpuml" or "nvml": which library answered
    product_name: str | None
    memory_total_bytes: int | None
    driver_version: str | None
    serial: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The per-card "vendor_info" object of the probe document (schema_version 1, additive)."""
        return {
            "provider": self.provider,
            "product_name": self.product_name,
            "memory_total_bytes": self.memory_total_bytes,
            "driver_version": self.driver_version,
            "serial": self.serial,
        }
