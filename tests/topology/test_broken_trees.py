"""Broken and quirky trees (tests/fixtures/CASES.yaml) through the in-process CLI.

Discovery degrades: an odd value gives exit 0, JSON, and a warning naming it. Only a tree that
is not a host tree, escapes its root or loops is fatal: one "xputune: error:" line, a non-zero
exit, nothing on stdout. A traceback is a bug either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fixtures.trees import broken_tree, copy_tree, load_cases

CASES = load_cases()

OK_KEYS = {
    "warnings_contain",
    "no_warnings",
    "cards",
    "numa_nodes",
    "node_cpus",
    "node_distances",
    "logical_cpus",
    "pci_contains",
    "nics",
    "nic_speed_null",
}
COMMON_KEYS = {"description", "base", "mutations", "expect"}


def test_every_case_is_well_formed() -> None:
    for name, spec in CASES.items():
        assert spec.get("description"), name
        assert spec["expect"] in ("ok", "error"), name
        allowed = COMMON_KEYS | (OK_KEYS if spec["expect"] == "ok" else {"message_contains"})
        assert set(spec) <= allowed, (name, set(spec) - allowed)
        if spec["expect"] == "error":
            assert spec.get("message_contains"), name


def _check_ok(spec: dict[str, Any], doc: dict[str, Any]) -> None:
    warnings = doc["warnings"]
    for needle in spec.get("warnings_contain", []):
        assert any(needle in w for w in warnings), f"no warning mentions {needle!r}: {warnings}"
    if spec.get("no_warnings"):
        assert warnings == []
    if "cards" in spec:
        assert len(doc["cards"]) == spec["cards"], [c["bdf"] for c in doc["cards"]]
    nodes = {n["id"]: n for n in doc["numa_nodes"]}
    if "numa_nodes" in spec:
        assert [n["id"] for n in doc["numa_nodes"]] == spec["numa_nodes"]
    for node, cpus in spec.get("node_cpus", {}).items():
        assert nodes[node]["cpus"] == cpus, (node, nodes[node]["cpus"])
    for node, row in spec.get("node_distances", {}).items():
        assert nodes[node]["distances"] == row, (node, nodes[node]["distances"])
    if "logical_cpus" in spec:
        assert doc["cpu"]["logical_cpus"] == spec["logical_cpus"]
    bdfs = {fn["bdf"] for fn in doc["pci"]}
    for bdf in spec.get("pci_contains", []):
        assert bdf in bdfs, f"{bdf} not among {sorted(bdfs)}"
    nics = {nic["name"]: nic for nic in doc["nics"]}
    if "nics" in spec:
        assert [nic["name"] for nic in doc["nics"]] == spec["nics"]
    for name in spec.get("nic_speed_null", []):
        assert name in nics, f"NIC {name} missing: {sorted(nics)}"
        assert nics[name]["speed_mbps"] is None, nics[name]


@pytest.mark.parametrize("case", sorted(CASES))
def test_case(case: str, tmp_path: Path, run_cli) -> None:
    spec = CASES[case]
    tree = broken_tree(case, tmp_path / spec["base"])
    code, out, err = run_cli("probe", "--root", str(tree), "-f", "json")
    assert "Traceback" not in err, err
    if spec["expect"] == "ok":
        assert code == 0, f"exit {code}: {err.strip()}"
        _check_ok(spec, json.loads(out))
        return
    lines = err.strip().splitlines()
    assert code != 0 and out == "", (code, out[:200])
    assert len(lines) == 1 and lines[0].startswith("xputune: error:"), err
    assert spec["message_contains"] in lines[0]


# -------------------------------------------------------------------------------------------------
# Whole-tree mutation: any single damaged file gives JSON or one clean error line, never worse
# -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mutable_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_tree("small-base", tmp_path_factory.mktemp("mutate") / "box")


def _files(root: Path) -> list[Path]:
    """Every regular file of the tree, reached without following links (each once)."""
    out = []
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath, name)
            if path.is_file() and not path.is_symlink():
                out.append(path)
    return sorted(out)


MUTATIONS = st.sampled_from(
    ["delete", "truncate", "nul-pad", "garbage", "binary", "directory", "fifo"]
)
PROBE_LIMIT_S = 8  # a probe of small-base takes well under a second


class ProbeHung(AssertionError):
    pass


@contextlib.contextmanager
def _hang_guard(what: str):
    """Fail (instead of blocking forever) when one probe takes longer than PROBE_LIMIT_S.

    pytest-timeout alone is not enough here: its alarm fires once, and Hypothesis would then
    replay the hanging example with no alarm left.
    """

    def expired(_signum, _frame):
        raise ProbeHung(f"probe still running after {PROBE_LIMIT_S} s: {what}")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(PROBE_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.timeout(120)
@settings(
    max_examples=60,
    deadline=None,
    # no shrinking: one mutation of one file is already minimal, and replaying a hang is slow
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data(), how=MUTATIONS)
def test_mutated_tree_never_tracebacks(
    mutable_tree: Path, data: st.DataObject, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from xputune.cli.entry import main

    target = data.draw(st.sampled_from(_files(mutable_tree)))
    original = target.read_bytes()
    try:
        if how == "delete":
            target.unlink()
        elif how == "truncate":
            target.write_bytes(original[: data.draw(st.integers(0, max(0, len(original) - 1)))])
        elif how == "nul-pad":
            target.write_bytes(original + b"\0" * data.draw(st.integers(1, 8)))
        elif how == "garbage":
            target.write_bytes(data.draw(st.text(max_size=30)).encode())
        elif how == "binary":
            target.write_bytes(data.draw(st.binary(max_size=300)))
        elif how == "directory":
            target.unlink()
            target.mkdir()
        else:
            target.unlink()
            os.mkfifo(target)
        capsys.readouterr()
        with _hang_guard(f"{how} {target.relative_to(mutable_tree)}"):
            code = main(["probe", "--root", str(mutable_tree), "-f", "json"])
        out, err = capsys.readouterr()
        assert "Traceback" not in err, err
        if code == 0:
            assert isinstance(json.loads(out), dict)
        else:
            lines = err.strip().splitlines()
            assert out == "" and len(lines) == 1, (target, how, err)
            assert lines[0].startswith("xputune: error:"), err
    finally:
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif os.path.lexists(target):
            os.unlink(target)
        target.write_bytes(original)
