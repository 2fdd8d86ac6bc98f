"""Archives as people really make them, read as GNU tar reads them.

Two misreadings found on third-party data, each shown here with input made at test time by the
real `tar` binary (so nothing binary is committed and the archive is what GNU tar writes):

- a plain snapshot, `tar czf snap.tgz -C / sys proc`, has sys/ and proc/ at its top, not
  under one top folder as a recording has; it was refused ("expected one top folder").
- an archive appended to with `tar -r` (or joined with `tar -A`) repeats the directory entries
  (and the files) it already held; GNU tar extracts it, the last copy of a file winning, and
  it was refused ("appears twice").

Each archive is also extracted by GNU tar itself, and the view must hold exactly what the
extraction holds: every path, its kind, every file's bytes and every link's target.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import host_tree
from tests.host.hostile import write
from xputune.errors import RecordingError
from xputune.host.view import DirView, TarView
from xputune.topology.discover import discover


def _gnu_tar() -> str | None:
    tar = shutil.which("tar")
    if tar is None:
        return None
    version = subprocess.run([tar, "--version"], capture_output=True, text=True).stdout
    return tar if "GNU tar" in version else None


TAR = _gnu_tar()
needs_gnu_tar = pytest.mark.skipif(TAR is None, reason="needs GNU tar (the `tar` binary)")


def tar(*args: str | os.PathLike[str]) -> None:
    assert TAR is not None
    subprocess.run([TAR, *map(str, args)], check=True, capture_output=True)


def extracted(archive: Path, dest: Path) -> Path:
    """What GNU tar makes of `archive`: the folder it extracts to."""
    dest.mkdir()
    tar("xf", archive, "-C", dest)
    return dest


def tree_of(folder: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry under `folder` by host path: ("dir", b""), ("file", bytes), ("link", target)."""
    found: dict[str, tuple[str, bytes | str]] = {}
    for here, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(here) / name
            host = "/" + str(path.relative_to(folder))
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                found[host] = ("link", os.readlink(path))
            elif stat.S_ISDIR(mode):
                found[host] = ("dir", b"")
            else:
                found[host] = ("file", path.read_bytes())
    return found


def view_of(view: TarView) -> dict[str, tuple[str, bytes | str]]:
    """The same listing, from a view's tables."""
    return {path: (kind, payload) for path, kind, payload in view.members()}


def same_host(a, b) -> bool:
    """Two discoveries of one host, whatever each was read from."""
    return a._replace(source="") == b._replace(source="")


# -- plain snapshots: sys/ and proc/ at the top ----------------------------------------------


@needs_gnu_tar
@pytest.mark.parametrize(
    ("args", "name"),
    [
        (("sys", "proc"), "snap.tgz"),  # tar czf snap.tgz -C / sys proc
        (("proc", "sys"), "snap.tar.xz"),  # the other order: proc/ read first
        ((".",), "snap.tar.bz2"),  # tar cjf snap.tar.bz2 -C snapshot-dir .  ("./sys/...")
    ],
)
def test_a_plain_snapshot_is_the_host(tmp_path: Path, args: tuple[str, ...], name: str) -> None:
    tree = host_tree("small-base")
    snap = tmp_path / name
    tar("caf", snap, "-C", tree, *args)
    view = TarView(str(snap))
    assert view_of(view) == tree_of(extracted(snap, tmp_path / "x"))
    assert same_host(discover(view), discover(DirView(str(tree))))


@needs_gnu_tar
def test_a_snapshot_of_sys_alone_is_the_host_without_proc(tmp_path: Path) -> None:
    tree = host_tree("small-base")
    snap = tmp_path / "sys.tgz"
    tar("czf", snap, "-C", tree, "sys")  # one name at the top, and it is sys itself
    view = TarView(str(snap))
    assert view.is_dir("/sys/devices") and not view.exists("/proc")
    assert (
        view.read_bytes("/sys/devices/system/node/online")
        == (tree / "sys/devices/system/node/online").read_bytes()
    )


@needs_gnu_tar
def test_a_recording_whose_top_folder_is_named_sys_stays_one(tmp_path: Path) -> None:
    tree = host_tree("small-base")
    (tmp_path / "sys").mkdir()
    for part in ("sys", "proc"):
        shutil.copytree(tree / part, tmp_path / "sys" / part, symlinks=True)
    rec = tmp_path / "rec.tar.gz"
    tar("czf", rec, "-C", tmp_path, "sys")
    view = TarView(str(rec))
    assert view.is_dir("/sys/devices") and view.is_dir("/proc")
    assert same_host(discover(view), discover(DirView(str(tree))))


@needs_gnu_tar
def test_a_snapshot_with_a_file_beside_sys_and_proc(tmp_path: Path) -> None:
    tree = tmp_path / "snap"
    shutil.copytree(host_tree("small-base"), tree, symlinks=True)
    (tree / "README").write_text("taken on box 7\n")
    snap = tmp_path / "snap.tar"
    tar("cf", snap, "-C", tree, "README", "sys", "proc")  # a file first: no top folder
    view = TarView(str(snap))
    assert view.read_text("/README") == "taken on box 7"
    assert view_of(view) == tree_of(extracted(snap, tmp_path / "x"))


@needs_gnu_tar
def test_two_top_folders_without_a_host_are_still_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "f").write_text("1")
    archive = tmp_path / "two.tar"
    tar("cf", archive, "-C", tmp_path, "a", "b")
    with pytest.raises(RecordingError, match="expected one top folder, or sys/ and proc/"):
        TarView(str(archive))


# -- repeated entries: appended archives -----------------------------------------------------


def _box(tmp_path: Path) -> Path:
    box = tmp_path / "src" / "box"
    shutil.copytree(host_tree("small-base"), box, symlinks=True)
    return box


@needs_gnu_tar
def test_an_archive_appended_with_its_own_folder_again_reads_as_gnu_tar_extracts_it(
    tmp_path: Path,
) -> None:
    box = _box(tmp_path)
    rec = tmp_path / "rec.tar"
    tar("cf", rec, "-C", box.parent, "box")
    online = box / "sys/devices/system/node/online"
    online.write_text("0-1\n")  # changed between the two copies: the appended one wins
    tar("rf", rec, "-C", box.parent, "box")  # every directory (and file) entry repeats
    listing = subprocess.run([TAR, "tf", rec], capture_output=True, text=True).stdout
    assert listing.count("box/sys/\n") == 2  # the directory entry really repeats
    view = TarView(str(rec))
    assert view.read_text("/sys/devices/system/node/online") == "0-1"
    got = extracted(rec, tmp_path / "x") / "box"
    assert view_of(view) == tree_of(got)
    assert same_host(discover(view), discover(DirView(str(got))))


@needs_gnu_tar
def test_appended_members_that_change_kind(tmp_path: Path) -> None:
    """A file replaced by a folder, a link by a file, an empty folder by a link: GNU tar
    removes the earlier entry and extracts the later one; so does the view."""
    box = _box(tmp_path)
    extra = box / "sys" / "extra"
    extra.mkdir()
    (extra / "was-file").write_text("old\n")
    (extra / "was-link").symlink_to("was-file")
    (extra / "was-empty-dir").mkdir()
    rec = tmp_path / "rec.tar"
    tar("cf", rec, "-C", box.parent, "box")
    (extra / "was-file").unlink()
    (extra / "was-file").mkdir()
    (extra / "was-file" / "inside").write_text("new\n")
    (extra / "was-link").unlink()
    (extra / "was-link").write_text("now a file\n")
    (extra / "was-empty-dir").rmdir()
    (extra / "was-empty-dir").symlink_to("was-link")
    tar("rf", rec, "-C", box.parent, "box/sys/extra")
    view = TarView(str(rec))
    assert view.read_text("/sys/extra/was-file/inside") == "new"
    assert view.read_text("/sys/extra/was-empty-dir") == "now a file"
    assert view_of(view) == tree_of(extracted(rec, tmp_path / "x") / "box")


@needs_gnu_tar
def test_concatenated_archives(tmp_path: Path) -> None:
    box = _box(tmp_path)
    first, second = tmp_path / "a.tar", tmp_path / "b.tar"
    tar("cf", first, "-C", box.parent, "box/sys")
    tar("cf", second, "-C", box.parent, "box/proc", "box/sys/devices/system")
    tar("Af", first, second)  # tar --concatenate: b.tar's members after a.tar's
    view = TarView(str(first))
    assert view.is_dir("/sys/devices") and view.exists("/proc/cpuinfo")
    assert view_of(view) == tree_of(extracted(first, tmp_path / "x") / "box")


def test_a_folder_with_members_under_it_is_not_replaced(tmp_path: Path) -> None:
    from tests.host.hostile import archive, member

    data = archive(member(b"box/sys/a/b", b"1"), member(b"box/sys/a", b"2"))
    with pytest.raises(RecordingError, match="other members lie under it"):
        TarView(write(tmp_path / "r.tar", data))
