"""--root DIR of a recording extracted as its advice says.

A read-only recording tells the user to extract it and pass the folder as --root. `tar xf`
leaves the recording's one top folder inside that folder, so --root takes the folder whose
single top folder holds sys/ and proc/ as well as the top folder itself, and never follows a
link to reach it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import host_tree
from xputune.errors import HostError
from xputune.host import open_host
from xputune.host.open import example_path
from xputune.host.view import DirView, TarView
from xputune.topology.discover import discover

needs_tar = pytest.mark.skipif(shutil.which("tar") is None, reason="needs the tar binary")


def extract(archive: str | Path, dest: Path) -> Path:
    dest.mkdir()
    subprocess.run(["tar", "xf", str(archive), "-C", str(dest)], check=True)
    return dest


def same_host(a, b) -> bool:
    return a._replace(source="") == b._replace(source="")


@needs_tar
def test_the_folder_a_recording_was_extracted_into_is_the_host(tmp_path: Path) -> None:
    folder = extract(example_path("h3c-hygon-p800"), tmp_path / "copy")
    (top,) = os.listdir(folder)
    view = open_host(str(folder))
    assert isinstance(view, DirView) and view.root == str(folder / top)
    assert not view.live and view.writable()
    expected = discover(TarView(example_path("h3c-hygon-p800")))
    assert same_host(discover(view), expected)


def test_the_top_folder_itself_and_a_plain_tree_are_read_as_before(tmp_path: Path) -> None:
    tree = host_tree("small-base")
    assert open_host(str(tree)).root == str(tree)
    (tmp_path / "sys").mkdir()
    (tmp_path / "only").mkdir()  # sys/ at the top: this folder is the host, whatever else
    assert open_host(str(tmp_path)).root == str(tmp_path)


def test_a_hidden_entry_beside_the_top_folder_does_not_count(tmp_path: Path) -> None:
    shutil.copytree(host_tree("small-base"), tmp_path / "box", symlinks=True)
    (tmp_path / ".DS_Store").write_bytes(b"\0")
    assert open_host(str(tmp_path)).root == str(tmp_path / "box")


def test_two_folders_are_not_guessed_between(tmp_path: Path) -> None:
    for name in ("a", "b"):
        shutil.copytree(host_tree("small-base"), tmp_path / name, symlinks=True)
    view = open_host(str(tmp_path))
    assert view.root == str(tmp_path)
    with pytest.raises(HostError, match="not a host tree"):
        discover(view)


def test_a_top_folder_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    os.symlink("/", tmp_path / "top")  # holds sys/ and proc/: the live host's
    view = open_host(str(tmp_path))
    assert view.root == str(tmp_path) and not view.live
    with pytest.raises(HostError, match="not a host tree"):
        discover(view)


def test_a_top_folder_without_a_host_tree_is_not_taken(tmp_path: Path) -> None:
    (tmp_path / "box" / "etc").mkdir(parents=True)
    assert open_host(str(tmp_path)).root == str(tmp_path)


@needs_tar
def test_probe_reads_the_extracted_folder(run_cli, tmp_path: Path) -> None:
    folder = extract(example_path("nvidia-hgx-h100"), tmp_path / "copy")
    code, out, err = run_cli("probe", "--root", str(folder), "-f", "json")
    assert code == 0, err
    code, ref, err = run_cli("probe", "--example", "nvidia-hgx-h100", "-f", "json")
    assert code == 0, err
    mine, theirs = json.loads(out), json.loads(ref)
    assert mine["cards"] == theirs["cards"] and mine["numa_nodes"] == theirs["numa_nodes"]
