"""On CPU hosts, the storage (L3) path's staging page must not be pinned.

SGLang's host pools (pool_host/mla.py, mha.py; 0.5.20 through 0.5.23) build the page an L3
read lands in with torch.zeros(..., pin_memory=self.pin_memory), and the pool keeps
pin_memory=True on a CPU server. Pinning needs an accelerator, so the first L3 read of a CPU
server dies: "pin_memory=True requires a CUDA or other accelerator backend" with a CPU build
of torch, "Found no NVIDIA driver on your system" with a CUDA build on a host without a GPU
(0.5.23 requires torch 2.14.1, which has no CPU build). Host memory on a CPU server is never
pinned anyway, so the pool's flag is set False there.

The workaround is decided by behaviour, not by version or message: on a host without an
accelerator where pinning one byte fails, the pool's own get_dummy_flat_data_page is called
once; only when that raises too is the flag changed, and the startup line names it. A release
that fixes the allocation passes the probe, and the workaround is gone without a change here.
"""

from __future__ import annotations

from typing import Any

NAME = "cpu_unpinned_pages"
PROBED_ATTR = "__xputune_pin_probed__"


def _has_accelerator() -> bool:
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and callable(getattr(accelerator, "is_available", None)):
        return bool(accelerator.is_available())
    return bool(torch.cuda.is_available())


def _pinning_works() -> bool:
    import torch

    try:
        torch.empty(1, pin_memory=True)
    except RuntimeError:
        return False
    return True


def _page_fails(pool: Any) -> bool:
    try:
        pool.get_dummy_flat_data_page()
    except RuntimeError:
        return True
    except Exception:  # a pool without flat pages (hybrid) has nothing to fix
        return False
    return False


def unpin(pools: list[Any]) -> list[str]:
    """Switch pinning off on the pools whose staging page cannot be pinned here; their names."""
    fixed: list[str] = []
    if not pools or _has_accelerator() or _pinning_works():
        return fixed
    for pool in pools:
        if pool is None or pool.__dict__.get(PROBED_ATTR):
            continue
        pool.__dict__[PROBED_ATTR] = True
        if getattr(pool, "pin_memory", False) and _page_fails(pool):
            pool.pin_memory = False
            fixed.append(type(pool).__name__)
    return fixed
