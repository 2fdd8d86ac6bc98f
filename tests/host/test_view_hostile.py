"""A host tree that holds what no sysfs does: each odd file is an unreadable value, never a hang.

A FIFO would block a plain open() forever, /dev/zero or a sparse file of gigabytes would grow
memory without bound; the view refuses each with UnreadableValueError, which discovery turns
into an unknown value with a warning.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.host.hostile import archive, member, write
from xputune.errors import HostError, RootEscapeError, UnreadableValueError
from xputune.host import view as view_module
from xputune.host.view import DirView, TarView

NODE = "/sys/devices/system/node/online"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "box"
    (root / "sys/devices/system/node").mkdir(parents=True)
    (root / "proc").mkdir()
    (root / "proc/cpuinfo").write_text("processor\t: 0\n")
    return root


def _node(root: Path) -> Path:
    return root / NODE.lstrip("/")


@pytest.mark.timeout(10)
def test_fifo_is_unreadable_not_waited_on(tree: Path) -> None:
    os.mkfifo(_node(tree))
    view = DirView(str(tree))
    with pytest.raises(UnreadableValueError, match=r"online is not a regular file \(a FIFO\)"):
        view.read_text(NODE)
    assert view.exists(NODE)


@pytest.mark.timeout(10)
def test_fifo_with_a_writer_is_still_refused(tree: Path) -> None:
    fifo = _node(tree)
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR)  # a writer is there: open() would now succeed and read
    try:
        with pytest.raises(UnreadableValueError):
            DirView(str(tree)).read_bytes(NODE)
    finally:
        os.close(fd)


@pytest.mark.timeout(10)
def test_writing_to_a_fifo_is_refused_not_waited_on(tree: Path) -> None:
    os.mkfifo(_node(tree))
    with pytest.raises(HostError, match="not a regular file"):
        DirView(str(tree)).write_bytes(NODE, b"0\n")


@pytest.mark.timeout(10)
def test_socket_is_unreadable(tree: Path) -> None:
    import socket

    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(_node(tree)))
        with pytest.raises(UnreadableValueError, match="socket"):
            DirView(str(tree)).read_bytes(NODE)
    finally:
        sock.close()


@pytest.mark.timeout(10)
def test_character_device_on_the_live_host_is_unreadable() -> None:
    with pytest.raises(UnreadableValueError, match="character device"):
        DirView("/").read_bytes("/dev/null")


@pytest.mark.timeout(10)
@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_dev_zero_inside_a_tree_is_unreadable(tree: Path) -> None:
    os.mknod(_node(tree), stat.S_IFCHR | 0o444, os.makedev(1, 5))  # what /dev/zero is
    with pytest.raises(UnreadableValueError, match="character device"):
        DirView(str(tree)).read_text(NODE)


@pytest.mark.timeout(10)
def test_sparse_file_of_two_gib_is_refused_without_reading(tree: Path) -> None:
    with open(_node(tree), "wb") as fh:
        fh.truncate(2 << 30)
    with pytest.raises(UnreadableValueError, match=r"online is larger than 1048576 bytes"):
        DirView(str(tree)).read_bytes(NODE)


def test_a_file_just_under_the_cap_is_read(tree: Path) -> None:
    _node(tree).write_bytes(b"1" * (1 << 20))
    assert len(DirView(str(tree)).read_bytes(NODE)) == 1 << 20


def test_procfs_files_are_read_to_the_end_whatever_st_size_says() -> None:
    view = DirView("/")
    assert os.stat("/proc/self/status").st_size == 0
    status = view.read_text("/proc/self/status")
    assert "VmRSS" in status
    assert len(view.read_bytes("/proc/self/maps")) > 4096  # several reads of a seq_file


def test_procfs_file_past_its_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(view_module, "READ_CAPS", (("/proc/", 64),))
    with pytest.raises(UnreadableValueError, match="larger than 64 bytes"):
        DirView("/").read_bytes("/proc/self/status")


def test_caps_by_prefix() -> None:
    assert view_module.read_cap("/sys/bus/pci/devices/0000:00:00.0/config") == 1 << 20
    assert view_module.read_cap("/proc/cpuinfo") == 16 << 20
    assert view_module.read_cap("/usr/share/hwdata/pci.ids") == 16 << 20


@pytest.mark.parametrize("kind", ["dir", "tar"])
@pytest.mark.parametrize(
    ("raw", "text"),
    [(b"0-3\n\x00", "0-3"), (b"0-3\x00\n", "0-3"), (b"0-3\n\x00\x00\n", "0-3"), (b"\x00", "")],
)
def test_trailing_nul_of_old_kernels_is_stripped(
    tree: Path, tmp_path: Path, kind: str, raw: bytes, text: str
) -> None:
    view = _view(tree, tmp_path, kind, raw)
    assert view.read_text(NODE) == text


@pytest.mark.parametrize("kind", ["dir", "tar"])
def test_non_utf8_value_is_unreadable(tree: Path, tmp_path: Path, kind: str) -> None:
    view = _view(tree, tmp_path, kind, b"0-3\xff\n")
    with pytest.raises(UnreadableValueError, match="not UTF-8"):
        view.read_text(NODE)


def _view(tree: Path, tmp_path: Path, kind: str, raw: bytes) -> DirView | TarView:
    if kind == "dir":
        _node(tree).write_bytes(raw)
        return DirView(str(tree))
    return TarView(write(tmp_path / "r.tar", archive(member(b"box" + NODE.encode(), raw))))


def test_directory_where_a_file_is_expected(tree: Path) -> None:
    with pytest.raises(HostError, match="is a directory"):
        DirView(str(tree)).read_bytes("/sys/devices/system/node")


@pytest.mark.timeout(20)
def test_very_long_symlink_targets_do_not_overflow_the_stack(tree: Path) -> None:
    link = tree / "sys/devices/system/node/deep"
    os.symlink("/".join(["."] * 2000) + "/online", link)
    _node(tree).write_text("0\n")
    assert DirView(str(tree)).read_text("/sys/devices/system/node/deep") == "0"
    os.symlink("/".join([".."] * 1300), tree / "sys/up")  # a target is at most 4 KiB
    with pytest.raises(RootEscapeError):
        DirView(str(tree)).read_text("/sys/up/x")


def test_live_link_name_of_a_missing_link_is_none(tmp_path: Path) -> None:
    view = DirView("/")
    assert view.link_name(str(tmp_path / "no-driver")) is None
    assert not view.exists(str(tmp_path / "no-driver"))
    with pytest.raises(FileNotFoundError):
        view.read_bytes(str(tmp_path / "no-driver"))
    os.symlink("loop", tmp_path / "loop")
    with pytest.raises(HostError, match="symlink loop"):
        view.read_bytes(str(tmp_path / "loop"))


@pytest.mark.parametrize("kind", ["dir", "tar"])
def test_escaping_link_targets_are_shown_escaped(tree: Path, tmp_path: Path, kind: str) -> None:
    os.symlink("/\x1b[2Jetc", tree / "sys/bad")
    if kind == "dir":
        view: DirView | TarView = DirView(str(tree))
    else:
        view = TarView(
            write(tmp_path / "r.tar", archive(member(b"box/sys/bad", kind=b"2", link=b"/\x1b[2J")))
        )
    with pytest.raises(RootEscapeError) as info:
        view.read_bytes("/sys/bad")
    assert "\x1b" not in str(info.value)
