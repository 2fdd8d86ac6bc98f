"""The view's strict write primitives: walked from the root, no symlink anywhere, atomic."""

from __future__ import annotations

import os
import stat

import pytest

from xputune.errors import HostError, RootEscapeError
from xputune.host.view import DirView


@pytest.fixture
def box(tmp_path):
    root = tmp_path / "box"
    (root / "etc").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("precious")
    return DirView(str(root)), root, outside


def test_replace_file_creates_dirs_with_exact_modes_and_leaves_no_tmp(box):
    view, root, _ = box
    old = os.umask(0o077)
    try:
        created = view.replace_file("/etc/systemd/system/u.service", b"x", mode=0o644)
    finally:
        os.umask(old)
    assert created == ["/etc/systemd/system", "/etc/systemd"]
    assert stat.S_IMODE(os.stat(root / "etc/systemd").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(root / "etc/systemd/system/u.service").st_mode) == 0o644
    assert os.listdir(root / "etc/systemd/system") == ["u.service"]
    assert view.read_strict("/etc/systemd/system/u.service") == b"x"


@pytest.mark.parametrize("where", ["/etc", "/etc/systemd"])
def test_a_symlink_anywhere_in_the_path_is_refused(box, where, tmp_path):
    view, root, outside = box
    if where == "/etc":
        os.rmdir(root / "etc")
        os.symlink(outside, root / "etc")
    else:
        os.symlink("../etc", root / "etc/systemd")  # even one that stays inside the root
    for act in (
        lambda: view.replace_file("/etc/systemd/x", b"evil"),
        lambda: view.symlink("/etc/systemd/l", "/etc/shadow"),
        lambda: view.makedirs("/etc/systemd/system"),
        lambda: view.read_strict("/etc/systemd/x"),
        lambda: view.remove("/etc/systemd/victim"),
    ):
        with pytest.raises(HostError, match="symlink"):
            act()
    assert sorted(os.listdir(outside)) == ["victim"]


def test_a_symlink_as_the_file_itself_is_never_followed(box):
    view, root, outside = box
    os.symlink(outside / "victim", root / "etc/f")
    with pytest.raises(HostError, match="not a regular file"):
        view.replace_file("/etc/f", b"evil")
    with pytest.raises(HostError, match="symlink"):
        view.read_strict("/etc/f")
    assert view.remove("/etc/f")  # the link goes, never its target
    assert (outside / "victim").read_text() == "precious"


def test_dotdot_is_refused(box):
    view, _, outside = box
    with pytest.raises(RootEscapeError):
        view.replace_file("/../outside/victim", b"evil")
    with pytest.raises(RootEscapeError):
        view.remove("/etc/../../outside/victim")
    assert (outside / "victim").read_text() == "precious"


def test_rmdir_keeps_non_empty_directories(box):
    view, root, _ = box
    view.replace_file("/etc/a/b", b"")
    assert not view.rmdir("/etc/a")
    assert view.remove("/etc/a/b") and view.rmdir("/etc/a")
    assert not (root / "etc/a").exists()


@pytest.fixture
def sysfs_like(tmp_path):
    """A tree with a sysfs-style link inside it, and a copy of its device outside."""
    root = tmp_path / "tree"
    dev = root / "sys/devices/pci0000:00/0000:00:01.0"
    dev.mkdir(parents=True)
    (dev / "config").write_bytes(b"\x00" * 64)
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:01.0", root / "sys/bus/pci/devices/d")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config").write_bytes(b"\x00" * 64)
    return root, outside


def _swap(folder, target) -> None:
    os.rename(folder, str(folder) + ".hide")
    os.symlink(target, folder)


def test_write_bytes_follows_links_inside_the_tree_and_writes_by_descriptor(sysfs_like):
    root, _ = sysfs_like
    view = DirView(str(root))
    view.write_bytes("/sys/bus/pci/devices/d/config", b"\x01", offset=4)
    assert (root / "sys/devices/pci0000:00/0000:00:01.0/config").read_bytes()[4] == 1


@pytest.mark.parametrize(
    "swapped", ["sys/devices/pci0000:00", "sys/devices/pci0000:00/0000:00:01.0"]
)
def test_a_directory_swapped_after_resolving_is_refused_not_followed(sysfs_like, swapped):
    root, outside = sysfs_like
    view = DirView(str(root))
    path = "/sys/bus/pci/devices/d/config"
    view.realpath(path)  # resolved (and remembered) while the tree was as it should be
    target = outside if swapped.endswith("01.0") else outside.parent / "pci-outside"
    if not swapped.endswith("01.0"):
        os.makedirs(target / "0000:00:01.0")
        (target / "0000:00:01.0/config").write_bytes(b"\x00" * 64)
    _swap(root / swapped, target)
    with pytest.raises(HostError, match="symlink; refusing to write through it"):
        view.write_bytes(path, b"\xff" * 4, offset=0)
    with pytest.raises(HostError, match="moved while being opened"):
        view.read_bytes(path)  # nor read through it: a rollback must not verify outside
    assert (outside / "config").read_bytes() == b"\x00" * 64
    assert not any(b"\xff" in p.read_bytes() for p in target.rglob("config"))


@pytest.mark.parametrize("checked", [False, True])
def test_a_swap_while_resolving_fools_only_an_unchecked_read(sysfs_like, checked):
    """The folder is known (resolved before) and swapped before the file in it is first
    resolved: lstat of the file follows the swapped-in link, so the inode the read would be
    checked against is the copy's. A probe may read the copy (nothing is written from it);
    apply and rollback, which decide and verify writes by reads, check every read by name."""
    root, outside = sysfs_like
    view = DirView(str(root))
    view.realpath("/sys/devices/pci0000:00/0000:00:01.0")  # known while the tree was whole
    (outside / "config").write_bytes(b"\x07" * 64)  # the copy differs from the tree
    _swap(root / "sys/devices/pci0000:00/0000:00:01.0", outside)
    if checked:
        view.check_every_read()
        with pytest.raises(HostError, match="moved while being opened"):
            view.read_bytes("/sys/devices/pci0000:00/0000:00:01.0/config")
    else:
        assert view.read_bytes("/sys/devices/pci0000:00/0000:00:01.0/config") == b"\x07" * 64


def test_the_value_itself_swapped_for_a_link_is_refused(sysfs_like):
    root, outside = sysfs_like
    view = DirView(str(root))
    path = "/sys/devices/pci0000:00/0000:00:01.0/config"
    view.realpath(path)
    real = root / path.lstrip("/")
    os.unlink(real)
    os.symlink(outside / "config", real)
    with pytest.raises(HostError, match="symlink"):
        view.write_bytes(path, b"x")
    assert (outside / "config").read_bytes() == b"\x00" * 64
