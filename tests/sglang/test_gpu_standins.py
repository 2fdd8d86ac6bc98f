"""The GPU-only stand-ins: per-release versions, and triton's driver lookup failing as on a CPU."""

from __future__ import annotations

import importlib

import pytest

from tests.sglang import gpu_standins


@pytest.mark.parametrize(
    ("release", "kernel", "triton"),
    [
        ("0.5.20", "0.4.7", "3.5.1"),
        ("0.5.22", "0.4.7", "3.5.1"),  # between two known releases: the older one's
        ("0.5.23", "0.4.10", "3.8.0"),
        ("0.5.23.post1", "0.4.10", "3.8.0"),
        ("0.6.0", "0.4.10", "3.8.0"),  # newer than every known one: the newest's
        (None, "0.4.7", "3.5.1"),  # sglang's version unknown: the oldest's
        ("dev", "0.4.7", "3.5.1"),
    ],
)
def test_versions_follow_the_sglang_release(release: str | None, kernel: str, triton: str) -> None:
    found = gpu_standins.versions_for(release)
    assert (found["sgl_kernel"], found["triton"]) == (kernel, triton)
    assert set(found) == set(gpu_standins.GPU_ONLY)


def test_triton_has_no_active_driver_like_real_triton_without_a_gpu() -> None:
    gpu_standins.install()
    triton = importlib.import_module("triton")
    if not getattr(triton, "__xputune_stand_in__", False):
        pytest.skip("a real triton is importable here")
    assert triton.__version__ == gpu_standins.versions()["triton"]
    with pytest.raises(RuntimeError, match="active drivers"):
        triton.runtime.driver.active.get_current_target()  # fla/utils.py's question, at import
    driver = importlib.import_module("triton.runtime.driver")
    with pytest.raises(RuntimeError):
        _ = driver.active
    with pytest.raises(RuntimeError):
        _ = driver.default
    assert triton.jit(len) is len  # everything else stands in as before
    assert triton.runtime.driver.set_active is not None
