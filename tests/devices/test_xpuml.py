"""The xpuml ctypes binding end to end against the compiled stand-in (clib/fake_xpuml.c)."""

from __future__ import annotations

import ctypes
import pickle
from pathlib import Path

import pytest

from xputune.devices import xpuml
from xputune.devices.libpath import XPUML_ENV
from xputune.devices.xpuml_provider import read_cards
from xputune.errors import XputuneError

SEED_BUS_IDS = [f"0000:{b}:00.0" for b in ("23", "24", "63", "64", "a3", "a4", "e3", "e4")]


@pytest.fixture
def initialised(fake_xpuml: ctypes.CDLL):
    xpuml.xpumlInit()
    yield fake_xpuml
    xpuml.xpumlShutdown()


def test_struct_layouts_match_the_header() -> None:
    assert ctypes.sizeof(xpuml.c_xpumlPciInfo_t) == 6 * 4 + 32
    assert ctypes.sizeof(xpuml.c_xpumlMemory_t) == 3 * 8
    assert ctypes.sizeof(xpuml.c_xpumlUtilization_t) == 2 * 4


def test_success_values(initialised) -> None:
    assert xpuml.xpumlSystemGetDriverVersion() == "5.0.21.26"
    assert xpuml.xpumlDeviceGetCount() == 8
    for index, bus_id in enumerate(SEED_BUS_IDS):
        if index == 6:
            continue  # the lost one
        handle = xpuml.xpumlDeviceGetHandleByIndex(index)
        pci = xpuml.xpumlDeviceGetPciInfo(handle)
        assert pci.busId.decode().lower() == bus_id
        assert pci.bus == int(bus_id[5:7], 16) and pci.domain == 0 and pci.function == 0
        assert pci.pciDeviceId == 0x36881D22
        assert xpuml.xpumlDeviceGetName(handle) == "Kunlunxin P800"
        memory = xpuml.xpumlDeviceGetMemoryInfo(handle)
        assert memory.total == 96 << 30 and memory.used == index << 30
        assert memory.free == memory.total - memory.used
        util = xpuml.xpumlDeviceGetUtilizationRates(handle)
        assert (util.gpu, util.memory) == (10 * index, 3 * index)
        assert xpuml.xpumlDeviceGetTemperature(handle) == 41 + index
        assert xpuml.xpumlDeviceGetMinorNumber(handle) == index
    assert xpuml.xpumlDeviceGetSerial(xpuml.xpumlDeviceGetHandleByIndex(0)) == "02P8K2500000"


def test_device_lost_on_one_index(initialised) -> None:
    handle = xpuml.xpumlDeviceGetHandleByIndex(6)
    with pytest.raises(xpuml.XPUMLError_DeviceLost) as caught:
        xpuml.xpumlDeviceGetPciInfo(handle)
    assert caught.value.value == xpuml.XPUML_ERROR_DEVICE_LOST
    assert isinstance(caught.value, XputuneError)
    assert str(caught.value) == "xpuml: XPU is lost (code 15)"  # the library's own text


def test_not_supported_serial(initialised) -> None:
    with pytest.raises(xpuml.XPUMLError_NotSupported):
        xpuml.xpumlDeviceGetSerial(xpuml.xpumlDeviceGetHandleByIndex(7))


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (3, xpuml.XPUMLError_NotSupported),
        (9, xpuml.XPUMLError_DriverNotLoaded),
        (12, xpuml.XPUMLError_LibraryNotFound),
        (13, xpuml.XPUMLError_FunctionNotFound),
        (15, xpuml.XPUMLError_DeviceLost),
        (999, xpuml.XPUMLError_Unknown),
        (42, xpuml.XPUMLError),
    ],
)
def test_each_return_code_maps_to_its_class(initialised, code: int, cls: type) -> None:
    initialised.fake_xpuml_fail(b"xpumlDeviceGetCount", code)
    with pytest.raises(xpuml.XPUMLError) as caught:
        xpuml.xpumlDeviceGetCount()
    assert type(caught.value) is cls and caught.value.value == code
    assert f"(code {code})" in str(caught.value) and "\n" not in str(caught.value)


def test_driver_not_loaded_before_init(fake_xpuml: ctypes.CDLL) -> None:
    with pytest.raises(xpuml.XPUMLError_DriverNotLoaded):
        xpuml.xpumlDeviceGetCount()


def test_missing_function_names_itself(initialised, fake_xpuml_path: Path) -> None:
    handle = xpuml.xpumlDeviceGetHandleByIndex(0)
    with pytest.raises(xpuml.XPUMLError_FunctionNotFound) as caught:
        xpuml.xpumlDeviceGetPowerUsage(handle)
    assert caught.value.value == 13
    assert "xpumlDeviceGetPowerUsage" in str(caught.value) and str(fake_xpuml_path) in str(
        caught.value
    )


def test_library_not_found(tmp_path: Path) -> None:
    xpuml.forget_library()
    with pytest.raises(xpuml.XPUMLError_LibraryNotFound) as caught:
        xpuml.load_library(str(tmp_path / "libxpuml.so"))
    assert caught.value.value == 12 and XPUML_ENV in str(caught.value)
    assert xpuml.library_path() is None


def test_env_override_is_the_only_candidate(
    fake_xpuml: ctypes.CDLL, fake_xpuml_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert xpuml.candidate_paths() == [str(fake_xpuml_path)]
    xpuml.xpumlInit()
    assert xpuml.library_path() == str(fake_xpuml_path)
    assert fake_xpuml.fake_xpuml_init_count() == 1
    xpuml.xpumlShutdown()
    assert fake_xpuml.fake_xpuml_init_count() == 0
    xpuml.forget_library()
    monkeypatch.setenv(XPUML_ENV, str(fake_xpuml_path) + ".missing")
    with pytest.raises(xpuml.XPUMLError_LibraryNotFound):
        xpuml.xpumlInit()


def test_without_override_only_existing_install_paths_then_the_soname() -> None:
    candidates = xpuml.candidate_paths()
    assert candidates[-1] == xpuml.SONAME
    assert set(candidates[:-1]) <= set(xpuml.XPUML_PATHS)


def test_forget_library_allows_a_fresh_load(fake_xpuml: ctypes.CDLL) -> None:
    xpuml.load_library()
    assert xpuml.library_path() is not None
    xpuml.forget_library()
    assert xpuml.library_path() is None
    assert xpuml.xpumlErrorString(15) == "device lost"  # built-in text with no library


def test_error_objects_behave_like_pynvml_ones() -> None:
    err = xpuml.XPUMLError(15)
    assert type(err) is xpuml.XPUMLError_DeviceLost
    assert xpuml.XPUMLError_NotSupported().value == 3
    again = pickle.loads(pickle.dumps(xpuml.XPUMLError(9, "detail")))
    assert type(again) is xpuml.XPUMLError_DriverNotLoaded and again.detail == "detail"


def test_provider_reads_every_card_but_the_lost_one(fake_xpuml: ctypes.CDLL) -> None:
    cards = read_cards()
    assert sorted(cards) == sorted(set(SEED_BUS_IDS) - {"0000:e3:00.0"})
    first = cards["0000:23:00.0"]
    assert first.provider == "xpuml" and first.product_name == "Kunlunxin P800"
    assert first.memory_total_bytes == 96 << 30 and first.driver_version == "5.0.21.26"
    assert first.serial == "02P8K2500000" and cards["0000:e4:00.0"].serial is None
    assert fake_xpuml.fake_xpuml_init_count() == 0  # shut down again


def test_provider_raises_when_init_fails(fake_xpuml: ctypes.CDLL) -> None:
    fake_xpuml.fake_xpuml_fail(b"xpumlInit", 9)
    with pytest.raises(xpuml.XPUMLError_DriverNotLoaded):
        read_cards()
