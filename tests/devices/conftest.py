"""Test stand-ins for the vendor libraries, compiled once per session from clib/*.c.

A library loaded into the process stays mapped, so each fixture resets the stand-in's own state
(forced faults, init count) and makes the binding forget its handle, before and after a test.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from xputune.devices import nvml, xpuml
from xputune.devices.libpath import NVML_ENV, XPUML_ENV

CLIB = Path(__file__).resolve().parent / "clib"
DATA = Path(__file__).resolve().parent / "data" / "xpusmi"


def _build(factory: pytest.TempPathFactory, source: str, name: str, soname: str) -> Path:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (gcc) to build the vendor-library stand-ins")
    out = factory.mktemp("clib") / name
    cmd = [
        cc,
        "-shared",
        "-fPIC",
        "-O1",
        f"-Wl,-soname,{soname}",
        "-o",
        str(out),
        str(CLIB / source),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"building {source} failed:\n{done.stderr}")
    return out


@pytest.fixture(scope="session")
def fake_xpuml_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "fake_xpuml.c", "libxpuml.so", "libxpuml.so")


@pytest.fixture(scope="session")
def fake_nvml_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory, "fake_nvml.c", "libnvidia-ml.so.1", "libnvidia-ml.so.1")


@pytest.fixture
def fake_xpuml(fake_xpuml_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ctypes.CDLL]:
    """The stand-in's control handle, with XPUTUNE_XPUML_LIBRARY pointing at it."""
    control = ctypes.CDLL(str(fake_xpuml_path))
    control.fake_xpuml_fail.argtypes = [ctypes.c_char_p, ctypes.c_int]
    control.fake_xpuml_reset()
    xpuml.forget_library()
    monkeypatch.setenv(XPUML_ENV, str(fake_xpuml_path))
    yield control
    control.fake_xpuml_reset()
    xpuml.forget_library()


@pytest.fixture
def fake_nvml(fake_nvml_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ctypes.CDLL]:
    """The NVML stand-in's control handle, with XPUTUNE_NVML_LIBRARY pointing at it."""
    pytest.importorskip("pynvml")
    control = ctypes.CDLL(str(fake_nvml_path))
    control.fake_nvml_fail.argtypes = [ctypes.c_char_p, ctypes.c_int]
    control.fake_nvml_reset()
    nvml.forget_library()
    monkeypatch.setenv(NVML_ENV, str(fake_nvml_path))
    yield control
    control.fake_nvml_reset()
    nvml.forget_library()


@pytest.fixture(autouse=True)
def _no_vendor_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own override must not leak into these tests."""
    monkeypatch.delenv(XPUML_ENV, raising=False)
    monkeypatch.delenv(NVML_ENV, raising=False)
