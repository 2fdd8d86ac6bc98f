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
