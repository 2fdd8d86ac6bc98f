"""`xputune smi` on an NVIDIA host: NVML through the real pynvml against the C stand-in.

Also checks that the names and bus ids smi prints are the ones probe prints for
the same host (the stand-in describes the 8 H100 of the bundled HGX fixture).
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest

from tests.conftest import NVIDIA_BOX
from tests.devices.test_smi_cli import no_tool  # noqa: F401 - fixture
from xputune.devices.nvml_report import read_report
from xputune.host import open_host
from xputune.topology.discover import discover

H100_BUS_IDS = [f"0000:{b}:00.0" for b in ("18", "19", "3a", "3b", "9a", "9b", "bb", "bc")]


def test_report_lists_every_gpu_but_the_lost_one(
    fake_nvml: ctypes.CDLL, fake_nvml_path: Path
) -> None:
    report = read_report(str(fake_nvml_path))
    assert (report.vendor, report.form, report.tool) == ("nvidia", "nvml", "NVML")
    assert [c.bus_id for c in report.cards] == [b for b in H100_BUS_IDS if b != "0000:3b:00.0"]
    gpu0 = report.cards[0]
    assert (gpu0.card, gpu0.name, gpu0.memory_total_mib) == ("gpu0", "NVIDIA H100 80GB HBM3", 81559)
    assert report.driver_version == "550.54.15" and gpu0.serial == "1652223012340"
    assert any("GPU 3" in w for w in report.warnings)
    assert fake_nvml.fake_nvml_init_count() == 0  # nvmlShutdown ran


def test_smi_and_probe_name_the_same_cards(fake_nvml: ctypes.CDLL, fake_nvml_path: Path) -> None:
    topo = discover(open_host(str(NVIDIA_BOX)))
    probe = {c.bdf: c.name for c in topo.cards if c.vendor == "nvidia"}
    smi = {c.bus_id: c.card for c in read_report(str(fake_nvml_path)).cards}
    assert smi and all(probe[bdf] == name for bdf, name in smi.items())


def test_cli_without_xpu_smi_uses_nvml(
    run_cli,
    fake_nvml: ctypes.CDLL,
    no_tool: Path,  # noqa: F811
) -> None:
    code, out, err = run_cli("smi", "-f", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["vendor"] == "nvidia" and doc["form"] == "nvml" and len(doc["cards"]) == 7


@pytest.mark.parametrize("form", ["xml", "query"])
def test_saved_nvidia_outputs_join_like_probe(form: str) -> None:
    from xputune.devices.xpusmi import parse

    topo = discover(open_host(str(NVIDIA_BOX)))
    probe = {c.bdf: c.name for c in topo.cards if c.vendor == "nvidia"}
    if form == "xml":
        body = "".join(
            f'<gpu id="00000000:{b[5:7].upper()}:00.0"><product_name>H100</product_name></gpu>'
            for b in H100_BUS_IDS
        )
        text = f"<nvidia_smi_log><attached_gpus>8</attached_gpus>{body}</nvidia_smi_log>"
    else:
        text = "Attached GPUs : 8\n" + "".join(
            f"GPU 00000000:{b[5:7].upper()}:00.0\n    Product Name : H100\n" for b in H100_BUS_IDS
        )
    report = parse(text)
    assert {c.bus_id: c.card for c in report.cards} == probe
