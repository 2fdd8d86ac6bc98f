"""Broken trees: one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import BROKEN, HOSTS
from xputune.errors import XputuneError
from xputune.host import open_host
from xputune.topology.discover import discover

CASES = yaml.safe_load((BROKEN / "CASES.yaml").read_text())


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_broken_tree_fails_with_one_clear_line(case: str, run_cli) -> None:
    spec = CASES[case]
    code, out, err = run_cli("probe", "--root", str(BROKEN / case), "-f", "json")
    if spec["expect"] == "ok":
        assert code == 0
        return
    assert code != 0 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xputune: error:"), err
    assert spec["message_contains"] in lines[0]


@pytest.fixture(scope="module")
def mutable_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mutate") / "box"
    shutil.copytree(HOSTS / "small-base", root, symlinks=True)
    return root


def _files(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and "cpu" not in p.name
    )


MUTATIONS = st.sampled_from(["garbage", "truncate", "delete", "directory", "binary"])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), how=MUTATIONS)
def test_mutated_fixture_never_tracebacks(
    mutable_tree: Path, data: st.DataObject, how: str
) -> None:
    files = _files(mutable_tree)
    target = data.draw(st.sampled_from(files))
    original = target.read_bytes()
    try:
        if how == "garbage":
            target.write_bytes(data.draw(st.text(max_size=30)).encode())
        elif how == "binary":
            target.write_bytes(data.draw(st.binary(max_size=300)))
        elif how == "truncate":
            target.write_bytes(original[: data.draw(st.integers(0, max(0, len(original) - 1)))])
        elif how == "delete":
            target.unlink()
        else:
            target.unlink()
            target.mkdir()
        try:
            discover(open_host(str(mutable_tree)))
        except XputuneError as exc:
            assert str(exc) and "\n" not in str(exc)
    finally:
        if target.is_dir():
            target.rmdir()
        elif target.exists():
            os.unlink(target)
        target.write_bytes(original)
