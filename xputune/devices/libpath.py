"""Where a vendor library is loaded from, and the rule for recorded hosts.

A library on this machine describes this machine. On the live host ("/") the usual install
paths are searched; for a recording (--root, --example) only an explicit environment override
counts, because the recording's cards are not this machine's. Only os.path checks are made:
ctypes.util.find_library would spawn ldconfig, which the probe cannot afford.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

XPUML_ENV = "XPUTUNE_XPUML_LIBRARY"
NVML_ENV = "XPUTUNE_NVML_LIBRARY"
# "off" skips every vendor library, e.g. where nvmlInit takes seconds (no persistence mode).
SWITCH_ENV = "XPUTUNE_VENDOR_LIBRARIES"

XPUML_PATHS = (
    "/usr/local/xpu/lib64/libxpuml.so",
    "/usr/local/xpu/lib/libxpuml.so",
    "/opt/xre/lib/libxpuml.so",
    "/opt/xre/lib64/libxpuml.so",
    "/usr/lib/x86_64-linux-gnu/libxpuml.so",
    "/usr/lib/aarch64-linux-gnu/libxpuml.so",
    "/usr/lib64/libxpuml.so",
    "/usr/local/lib/libxpuml.so",
    "/usr/lib/libxpuml.so",
)
NVML_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1",
    "/usr/lib64/libnvidia-ml.so.1",
    "/usr/lib/libnvidia-ml.so.1",
    "/usr/local/nvidia/lib64/libnvidia-ml.so.1",
    "/usr/lib/wsl/lib/libnvidia-ml.so.1",
)


def override(env: str) -> str | None:
    """The explicit library path from the environment, or None when unset or empty."""
    return os.environ.get(env) or None


def first_existing(paths: Iterable[str]) -> str | None:
    """The first path that exists; no subprocess, no dlopen."""
    return next((p for p in paths if os.path.exists(p)), None)


def library_for(env: str, paths: Iterable[str], live: bool) -> str | None:
    """The library to load for a probe: the override, else (live host only) a known path;
    None for every provider when XPUTUNE_VENDOR_LIBRARIES=off."""
    if os.environ.get(SWITCH_ENV, "").strip().lower() == "off":
        return None
    explicit = override(env)
    if explicit or not live:
        return explicit
    return first_existing(paths)
