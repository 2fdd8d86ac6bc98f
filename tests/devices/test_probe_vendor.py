"""The probe with a vendor library: names, memory and driver per card; unchanged without one."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import NVIDIA_BOX, SEED_BOX
from xputune.devices import enrich
from xputune.devices.libpath import XPUML_ENV
from xputune.host import open_host
from xputune.topology.discover import discover


def _json(run_cli, *args: str) -> dict:
    code, out, err = run_cli("probe", *args, "-f", "json")
    assert code == 0 and err == ""
    return json.loads(out)


def _without_vendor_info(doc: dict) -> dict:
    for card in doc["cards"]:
        card.pop("vendor_info")
    return doc


def test_json_gains_vendor_info_per_card(run_cli, fake_xpuml: ctypes.CDLL) -> None:
    doc = _json(run_cli, "--root", str(SEED_BOX))
    assert doc["schema_version"] == 1
    info = {c["name"]: c["vendor_info"] for c in doc["cards"]}
    assert info["xpu6"] is None  # the stand-in's lost card
    assert info["xpu0"] == {
        "provider": "xpuml",
        "product_name": "Kunlunxin P800",
        "memory_total_bytes": 96 << 30,
        "driver_version": "5.0.21.26",
        "serial": "02P8K2500000",
    }
    assert all(info[f"xpu{i}"]["memory_total_bytes"] == 96 << 30 for i in (1, 2, 3, 4, 5, 7))


def test_only_vendor_info_differs(run_cli, fake_xpuml: ctypes.CDLL, monkeypatch) -> None:
    with_lib = _json(run_cli, "--root", str(SEED_BOX))
    monkeypatch.delenv(XPUML_ENV)
    without = _json(run_cli, "--root", str(SEED_BOX))
    assert all(c["vendor_info"] is None for c in without["cards"])
    assert _without_vendor_info(with_lib) == _without_vendor_info(without)


def test_table_shows_names_memory_and_driver(run_cli, fake_xpuml: ctypes.CDLL) -> None:
    code, out, _ = run_cli("probe", "--root", str(SEED_BOX))
    assert code == 0
    assert "Cards as the vendor library reports them" in out
    rows = [line for line in out.splitlines() if "Kunlunxin P800" in line]
    assert len(rows) == 7 and all("96.0" in r and "5.0.21.26" in r for r in rows)
    assert not any("xpu6" in r for r in rows)


def test_no_library_leaves_the_probe_unchanged(run_cli, tmp_path: Path, monkeypatch) -> None:
    plain = run_cli("probe", "--root", str(SEED_BOX))
    assert "vendor library" not in plain[1]
    monkeypatch.setenv(XPUML_ENV, "")  # empty means unset
    assert run_cli("probe", "--root", str(SEED_BOX)) == plain


def test_broken_override_keeps_stdout_and_says_why_once(
    run_cli, tmp_path: Path, monkeypatch
) -> None:
    plain = run_cli("probe", "--root", str(SEED_BOX), "-f", "json")
    missing = tmp_path / "libxpuml.so"
    monkeypatch.setenv(XPUML_ENV, str(missing))
    code, out, err = run_cli("probe", "--root", str(SEED_BOX), "-f", "json")
    assert (code, out) == plain[:2]
    assert err.count("\n") == 1 and err.startswith(f"note: {XPUML_ENV}={missing}: xpuml: ")


def test_fast_path_prints_what_typer_prints(run_cli, fake_xpuml: ctypes.CDLL, monkeypatch) -> None:
    for args in (("--root", str(SEED_BOX)), ("--root", str(SEED_BOX), "-f", "yaml")):
        fast = run_cli("probe", *args)
        monkeypatch.setenv("XPUTUNE_NO_FASTPATH", "1")
        slow = run_cli("probe", *args)
        monkeypatch.delenv("XPUTUNE_NO_FASTPATH")
        assert fast == slow and "Kunlunxin P800" in fast[1]


def test_recording_ignores_libraries_found_on_this_machine(
    fake_xpuml_path: Path, fake_xpuml: ctypes.CDLL, monkeypatch
) -> None:
    """A library at a usual path describes this machine: used live, never for a recording."""
    monkeypatch.delenv(XPUML_ENV)
    found_here = enrich.Provider(
        "kunlunxin", XPUML_ENV, (str(fake_xpuml_path),), "xputune.devices.xpuml_provider"
    )
    monkeypatch.setattr(enrich, "PROVIDERS", (found_here,))
    topo = discover(open_host(str(SEED_BOX)))
    assert enrich.vendor_info(topo, live=False).cards == {}
    assert len(enrich.vendor_info(topo, live=True).cards) == 7


def test_live_host_failure_is_silent(fake_xpuml_path: Path, fake_xpuml, monkeypatch) -> None:
    monkeypatch.delenv(XPUML_ENV)
    fake_xpuml.fake_xpuml_fail(b"xpumlInit", 9)
    found_here = enrich.Provider(
        "kunlunxin", XPUML_ENV, (str(fake_xpuml_path),), "xputune.devices.xpuml_provider"
    )
    monkeypatch.setattr(enrich, "PROVIDERS", (found_here,))
    topo = discover(open_host(str(SEED_BOX)))
    assert enrich.vendor_info(topo, live=True) == enrich.Enrichment({}, ())


def test_switch_off_skips_even_an_explicit_library(
    run_cli, fake_xpuml: ctypes.CDLL, monkeypatch
) -> None:
    with_lib = _json(run_cli, "--root", str(SEED_BOX))
    assert any(c["vendor_info"] for c in with_lib["cards"])
    monkeypatch.setenv("XPUTUNE_VENDOR_LIBRARIES", "off")
    without = _json(run_cli, "--root", str(SEED_BOX))
    assert all(c["vendor_info"] is None for c in without["cards"])


def test_providers_only_for_vendors_present(run_cli, fake_xpuml: ctypes.CDLL) -> None:
    """The xpuml override does not touch an NVIDIA box (no Kunlunxin card there)."""
    doc = _json(run_cli, "--root", str(NVIDIA_BOX))
    assert all(c["vendor_info"] is None for c in doc["cards"])


def test_nvidia_box_with_nvml_stand_in(run_cli, fake_nvml: ctypes.CDLL) -> None:
    doc = _json(run_cli, "--root", str(NVIDIA_BOX))
    names = {c["name"]: (c["vendor_info"] or {}).get("product_name") for c in doc["cards"]}
    assert names["gpu0"] == "NVIDIA H100 80GB HBM3" and names["gpu3"] is None


def test_probe_without_a_library_imports_no_vendor_code() -> None:
    """Start-up: no ctypes, pynvml or binding is imported when no library is found."""
    code = (
        "import sys\n"
        "from xputune.cli.entry import main\n"
        f"main(['probe', '--root', {str(SEED_BOX)!r}, '-f', 'json'])\n"
        "heavy = {'ctypes', 'pynvml', 'xputune.devices.xpuml', 'typer'} & set(sys.modules)\n"
        "sys.stderr.write(repr(sorted(heavy)))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stderr == "[]"
