import os
import tarfile
from pathlib import Path

import pytest

from xputune.errors import HostError, RootEscapeError
from xputune.host import open_host
from xputune.host.view import DirView, TarView


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "box"
    dev = root / "sys/devices/pci0000:00/0000:00:01.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x1d22\n")
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink(
        "../../../devices/pci0000:00/0000:00:01.0", root / "sys/bus/pci/devices/0000:00:01.0"
    )
    (root / "proc").mkdir()
    return root


def _tar(root: Path, out: Path) -> Path:
    with tarfile.open(out, "w:gz") as tar:
        tar.add(root, arcname=root.name)
    return out


@pytest.mark.parametrize("kind", ["dir", "tar"])
def test_reads_through_relative_symlinks(tree: Path, tmp_path: Path, kind: str) -> None:
    view = DirView(str(tree)) if kind == "dir" else TarView(str(_tar(tree, tmp_path / "r.tgz")))
    assert view.read_text("/sys/bus/pci/devices/0000:00:01.0/vendor") == "0x1d22"
    assert (
        view.realpath("/sys/bus/pci/devices/0000:00:01.0") == "/sys/devices/pci0000:00/0000:00:01.0"
    )
    assert view.listdir("/sys/bus/pci/devices") == ["0000:00:01.0"]
    assert view.read_optional("/sys/bus/pci/devices/0000:00:01.0/numa_node") is None
    assert "/sys/bus/pci/devices/0000:00:01.0/vendor" in view.accessed


@pytest.mark.parametrize("kind", ["dir", "tar"])
@pytest.mark.parametrize(
    ("target", "error"),
    [
        ("../../../../../../../../etc", RootEscapeError),
        ("/etc", RootEscapeError),
        ("loop", HostError),
    ],
)
def test_escapes_and_loops_are_refused(
    tree: Path, tmp_path: Path, kind: str, target: str, error: type[Exception]
) -> None:
    link = tree / "sys/bus/pci/devices/bad"
    os.symlink(target, link)
    if target == "loop":
        os.symlink("bad", tree / "sys/bus/pci/devices/loop")
    view = DirView(str(tree)) if kind == "dir" else TarView(str(_tar(tree, tmp_path / "r.tgz")))
    with pytest.raises(error):
        view.read_text("/sys/bus/pci/devices/bad/vendor")


def test_tarball_is_read_only(tree: Path, tmp_path: Path) -> None:
    view = TarView(str(_tar(tree, tmp_path / "r.tgz")))
    with pytest.raises(HostError, match="read-only"):
        view.write_bytes("/sys/bus/pci/devices/0000:00:01.0/vendor", b"x")


def test_directory_root_writes_in_place(tree: Path) -> None:
    view = DirView(str(tree))
    path = "/sys/bus/pci/devices/0000:00:01.0/vendor"
    view.write_bytes(path, b"ZZ", offset=2)
    assert (tree / "sys/devices/pci0000:00/0000:00:01.0/vendor").read_text() == "0xZZ22\n"


def test_open_host_errors(tmp_path: Path) -> None:
    with pytest.raises(HostError, match="no such file"):
        open_host(str(tmp_path / "missing"))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(HostError, match="not a directory"):
        open_host(str(tmp_path / "notes.txt"))
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not a tarball")
    with pytest.raises(HostError, match="not a readable tarball"):
        open_host(str(bad))
    with pytest.raises(HostError, match="no example named"):
        open_host(example="nope")
