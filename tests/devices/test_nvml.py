"""The NVML provider through the real pynvml against the compiled stand-in (clib/fake_nvml.c)."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest

from tests.conftest import NVIDIA_BOX
from xputune.devices import nvml
from xputune.devices.enrich import vendor_info
from xputune.errors import XputuneError
from xputune.host import open_host
from xputune.topology.discover import discover

H100_BUS_IDS = [f"0000:{b}:00.0" for b in ("18", "19", "3a", "3b", "9a", "9b", "bb", "bc")]


def test_provider_reads_every_gpu_but_the_lost_one(
    fake_nvml: ctypes.CDLL, fake_nvml_path: Path
) -> None:
    cards = nvml.read_cards(str(fake_nvml_path))
    assert sorted(cards) == sorted(set(H100_BUS_IDS) - {"0000:3b:00.0"})  # NVML's "00000000:3B.."
    gpu0 = cards["0000:18:00.0"]
    assert gpu0.provider == "nvml" and gpu0.product_name == "NVIDIA H100 80GB HBM3"
    assert gpu0.memory_total_bytes == 81559 << 20 and gpu0.driver_version == "550.54.15"
    assert gpu0.serial == "1652223012340" and cards["0000:bc:00.0"].serial is None
    assert fake_nvml.fake_nvml_init_count() == 0  # nvmlShutdown ran


def test_pynvml_is_pointed_at_the_given_file(fake_nvml: ctypes.CDLL, fake_nvml_path: Path) -> None:
    import pynvml

    nvml.use_library(str(fake_nvml_path))
    pynvml.nvmlInit()
    try:
        assert pynvml.nvmlDeviceGetCount() == 8
        assert fake_nvml.fake_nvml_init_count() == 1
    finally:
        pynvml.nvmlShutdown()
    nvml.forget_library()
    assert pynvml.nvmlLib is None


def test_init_failure_is_one_user_error(fake_nvml: ctypes.CDLL, fake_nvml_path: Path) -> None:
    fake_nvml.fake_nvml_fail(b"nvmlInit", 9)
    with pytest.raises(nvml.NvmlError) as caught:
        nvml.read_cards(str(fake_nvml_path))
    assert isinstance(caught.value, XputuneError)
    assert str(caught.value) == "nvml: Driver Not Loaded"


def test_unloadable_library(tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    with pytest.raises(nvml.NvmlError, match="cannot load"):
        nvml.read_cards(str(tmp_path / "libnvidia-ml.so.1"))


def test_missing_nvidia_ml_py_is_one_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(nvml.NvmlError, match="nvidia-ml-py is not installed"):
        nvml.read_cards("/nonexistent/libnvidia-ml.so.1")


def test_joined_to_the_topology_by_bus_id(fake_nvml: ctypes.CDLL) -> None:
    topo = discover(open_host(str(NVIDIA_BOX)))
    found = vendor_info(topo, live=False)
    assert found.notes == ()
    by_card = {c.name: found.cards.get(c.bdf) for c in topo.cards}
    assert by_card["gpu3"] is None  # lost
    assert all(by_card[f"gpu{i}"].product_name == "NVIDIA H100 80GB HBM3" for i in (0, 1, 2, 4))


def test_preloaded_file_answers_pynvmls_own_dlopen(fake_nvml: ctypes.CDLL) -> None:
    """The fallback of use_library: pynvml's dlopen("libnvidia-ml.so.1") finds the loaded file
    by its soname, so a pynvml without the module globals still uses the given library."""
    import pynvml

    nvml.forget_library()
    pynvml.nvmlInit()  # loads by name; the stand-in (soname libnvidia-ml.so.1) is mapped
    try:
        assert fake_nvml.fake_nvml_init_count() == 1
        assert pynvml.nvmlSystemGetDriverVersion() == "550.54.15"
    finally:
        pynvml.nvmlShutdown()
