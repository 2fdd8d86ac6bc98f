"""What `record` saves of the vendor tools: stand-in nvidia-smi / xpu-smi scripts on PATH."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from tests.conftest import NVIDIA_BOX, SEED_BOX
from tests.devices.conftest import DATA
from xputune.devices import vendor_files
from xputune.devices.xpusmi import run
from xputune.host import open_host
from xputune.topology.discover import discover

CAT = shutil.which("cat")
REAL = DATA.parent / "real"
HGX_TOPO = Path(str(NVIDIA_BOX)) / "xputune/vendor/nvidia-smi-topo-m.txt"


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding only the stand-ins written into it (no known install paths)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setattr(run, "KNOWN_PATHS", ())
    monkeypatch.setattr(vendor_files, "NVIDIA_SMI_PATHS", ())
    return folder


def _tool(folder: Path, name: str, answers: dict[str, Path]) -> None:
    lines = [f'[ "$*" = "{args}" ] && exec {CAT} {path}' for args, path in answers.items()]
    script = folder / name
    script.write_text("#!/bin/sh\n" + "\n".join(lines) + '\necho "bad option" >&2\nexit 3\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_live_host_saves_nvidia_smi_outputs(tools: Path) -> None:
    xml = REAL / "nvsmi-q-x-hadoop-p100x2.xml"
    _tool(tools, "nvidia-smi", {"topo -m": HGX_TOPO, "-q -x": xml})
    _tool(tools, "xpu-smi", {"topo -m": DATA / "topo-xl.txt"})
    hgx = discover(open_host(str(NVIDIA_BOX)))
    files, notes = vendor_files.capture(open_host("/"), hgx)
    assert notes == []
    assert set(files) == {
        "/xputune/vendor/nvidia-smi-topo-m.txt",
        "/xputune/vendor/nvidia-smi-q-x.xml",
    }  # no Kunlunxin card: xpu-smi is not asked
    assert files["/xputune/vendor/nvidia-smi-topo-m.txt"] == HGX_TOPO.read_bytes()
    saved = files["/xputune/vendor/nvidia-smi-q-x.xml"]
    assert b"<serial>scrubbed</serial>" in saved and b"<uuid>scrubbed</uuid>" in saved
    assert b"GPU-" not in saved and b"<product_name>Tesla P100" in saved
    kept, _ = vendor_files.capture(open_host("/"), hgx, scrub=False)
    assert kept["/xputune/vendor/nvidia-smi-q-x.xml"] == xml.read_bytes()


def test_failing_missing_or_foreign_tools_cost_only_their_file(tools: Path) -> None:
    seed = discover(open_host(str(SEED_BOX)))
    files, notes = vendor_files.capture(open_host("/"), seed)
    assert files == {} and notes == [
        "xpu-smi not found: xpu-smi topo -m not saved",
        "xpu-smi not found: xpu-smi -q -x not saved",
    ]
    intel = tools / "intel.txt"
    intel.write_text("Intel(R) XPU System Management Interface -- v1.2\n")
    _tool(tools, "xpu-smi", {"topo -m": intel})
    files, notes = vendor_files.capture(open_host("/"), seed)
    assert files == {} and len(notes) == 2
    assert "not a known form" in notes[0] and notes[0].endswith("; xpu-smi topo -m not saved")
    assert "-q -x: exit 3: bad option" in notes[1]
    _tool(tools, "xpu-smi", {"topo -m": DATA / "query.xml", "-q -x": DATA / "query.xml"})
    files, notes = vendor_files.capture(open_host("/"), seed)
    assert list(files) == ["/xputune/vendor/xpu-smi-q-x.xml"]
    assert notes == [
        "output reads as the xpu-smi -q -x form, not xpu-smi topo -m; xpu-smi topo -m not saved"
    ]


def test_a_recording_is_read_never_run(tools: Path) -> None:
    marker = tools / "ran"
    (tools / "nvidia-smi").write_text(f"#!/bin/sh\necho > {marker}\n")
    (tools / "nvidia-smi").chmod(0o755)
    hgx_view = open_host(str(NVIDIA_BOX))
    files, notes = vendor_files.capture(hgx_view, discover(hgx_view))
    assert (files, notes) == ({"/xputune/vendor/nvidia-smi-topo-m.txt": HGX_TOPO.read_bytes()}, [])
    assert not marker.exists()
