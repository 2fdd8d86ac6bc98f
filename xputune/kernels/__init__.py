"""KV-cache copy kernels: a segment planner and SGLang-compatible copy operators.

`from xputune.kernels import transfer_kv_per_layer_mla` works, but importing this package loads
neither numpy nor torch nor any compiled library: names resolve on first use (module
__getattr__), so the CLI and the SGLang plugin stay fast to import.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

OPERATORS: tuple[str, ...] = (
    "transfer_kv_per_layer_mla",
    "transfer_kv_all_layer_mla",
    "transfer_kv_per_layer",
    "transfer_kv_all_layer",
    "transfer_kv_per_layer_direct_pf_lf",
    "transfer_kv_all_layer_direct_lf_pf",
    "transfer_kv_per_layer_mla_pf_lf",
    "transfer_kv_all_layer_mla_lf_pf",
    "transfer_kv_per_layer_pf_lf",
    "transfer_kv_all_layer_lf_pf",
    "transfer_kv_direct",
)

_LAZY: dict[str, str] = {
    **dict.fromkeys(OPERATORS, "xputune.kernels.ops"),
    "plan": "xputune.kernels.planner",
    "Endpoint": "xputune.kernels.planner",
    "SegmentPlan": "xputune.kernels.planner",
    "KernelArgumentError": "xputune.kernels.planner",
    "host_transfer_plan": "xputune.kernels.planner",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'xputune.kernels' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
