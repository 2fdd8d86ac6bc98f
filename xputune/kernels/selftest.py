"""Check every copy operator against the numpy reference on whatever this machine has.

Placements: host numpy (always), the XPU backend over the host-memory XRE stand-in (wherever a
C++ compiler exists), torch CPU tensors when torch is installed, and the torch device (CUDA or
Kunlunxin posing as CUDA) in direct and, on CUDA, kernel mode when one is visible.
"""

from __future__ import annotations

import ctypes
import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from xputune.errors import XputuneError
from xputune.kernels.cases import (
    FIXED_DIRECTION,
    OPERATORS,
    Placement,
    directions_for,
    run_case,
)

DIRECTIONS = ("h2d", "d2h")


@dataclass
class Outcome:
    placement: str
    operator: str
    direction: str
    ok: bool
    detail: str


def fake_xpu_placement() -> Placement:
    """Device buffers are xpu_malloc'ed by the stand-in runtime, so kinds are checked."""
    from xputune.kernels.backends.xpu import XpuBackend

    backend = XpuBackend.fake()
    lib = backend.lib
    lib.xpu_malloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64]

    def device(a: np.ndarray) -> np.ndarray:
        ptr = ctypes.c_void_p()
        if lib.xpu_malloc(ctypes.byref(ptr), a.nbytes) != 0:
            raise MemoryError("fake xpu_malloc failed")
        raw = (ctypes.c_uint8 * max(a.nbytes, 1)).from_address(ptr.value)
        arr = np.frombuffer(raw, dtype=np.uint8, count=a.nbytes).view(a.dtype).reshape(a.shape)
        arr[...] = a
        return arr

    return Placement(
        name="xpu (test runtime)",
        device=device,
        kwargs=lambda direction: {"backend": backend, "direction": direction},
    )


def torch_placements() -> Iterator[Placement]:
    import torch

    def host(a: np.ndarray) -> Any:
        return torch.from_numpy(a.copy())

    yield Placement(
        name="host (torch cpu)", host=host, device=host, to_numpy=lambda t: t.numpy(),
        indices=torch.from_numpy, address=lambda t: t.data_ptr(), table=torch.from_numpy,
    )  # fmt: skip
    if not torch.cuda.is_available():
        return
    from xputune.kernels.backends import device_backend_name

    name = device_backend_name()

    def dev(a: np.ndarray) -> Any:
        return torch.from_numpy(a.copy()).to("cuda")

    for mode in ("direct", "kernel") if name == "cuda" else ("direct",):
        yield Placement(
            name=f"device ({name}, {mode})",
            host=lambda a: torch.from_numpy(a.copy()).pin_memory(),
            device=dev,
            to_numpy=lambda t: t.cpu().numpy(),
            indices=dev,
            address=lambda t: t.data_ptr(),
            table=dev,
            kwargs=(lambda m: lambda direction: {"mode": m})(mode),
            sync=torch.cuda.synchronize,
        )


def placements() -> Iterator[tuple[Placement | None, str, str]]:
    """(placement or None, name, why skipped)."""
    yield Placement(name="host (numpy)"), "host (numpy)", ""
    try:
        yield fake_xpu_placement(), "xpu (test runtime)", ""
    except XputuneError as exc:
        yield None, "xpu (test runtime)", str(exc)
    if importlib.util.find_spec("torch") is None:
        yield None, "torch", "torch is not installed"
        return
    for place in torch_placements():
        yield place, place.name, ""


def run(
    rounds: int = 3, seed: int = 0, progress: Callable[[str], None] | None = None
) -> list[Outcome]:
    """Every operator x direction x placement, `rounds` random cases each."""
    outcomes: list[Outcome] = []
    for place, name, why in placements():
        if place is None:
            outcomes.append(Outcome(name, "*", "*", True, f"skipped: {why}"))
            continue
        for op in OPERATORS:
            if "kernel" in name and op in FIXED_DIRECTION:
                continue  # SGLang has no kernel form of the page_first_direct copies
            for direction in directions_for(op):
                rng = np.random.default_rng(
                    [seed, OPERATORS.index(op), DIRECTIONS.index(direction)]
                )
                failures: list[str] = []
                detail = ""
                for _ in range(rounds):
                    try:
                        result = run_case(op, direction, rng, place)
                    except Exception as exc:  # reported per case, the run goes on
                        failures.append(f"{type(exc).__name__}: {exc}")
                        continue
                    detail = result.detail
                    if not result.ok:
                        failures.append(result.detail)
                ok = not failures
                outcomes.append(Outcome(name, op, direction, ok, detail if ok else failures[0]))
                if progress:
                    progress(f"{name}: {op} {direction}")
    return outcomes
