"""write_atomic as root into a folder another user owns (node_exporter's textfile folder, NFD's
features.d): the folder's owner may rename and plant entries while we write, and must never
lend our root privileges to a file of its choice.

The attack that worked before descriptors: swap the temporary file for a symlink to a root-only
0600 file between its creation and the chmod by path, which then made that file 0644.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from tests import otheruser
from xputune.errors import XputuneError
from xputune.fleet.atomic import STALE_TMP_AGE, write_atomic
from xputune.host.view import tmp_name

NAME = "xputune.prom"

#: The other user's loop: each temporary of ours (whatever its name) that is not yet a link
#: becomes a link to the secret. Prints how many it swapped.
SWAP_FOR_LINKS = """
import os, sys
stop, folder, secret, name = sys.argv[1:5]
swaps = 0
while not os.path.exists(stop):
    for entry in os.listdir(folder):
        if entry.startswith("." + name + "."):
            path = os.path.join(folder, entry)
            try:
                if not os.path.islink(path):
                    os.unlink(path)
                    os.symlink(secret, path)
                    swaps += 1
            except OSError:
                pass
print(swaps)
"""


@pytest.fixture
def place():
    """(folder owned by the other user, a root-only 0600 secret elsewhere, the base)."""
    otheruser.require()
    with otheruser.reachable_dir() as base:
        folder = base / "textfile"
        folder.mkdir(mode=0o755)
        otheruser.give(folder)
        vault = base / "vault"
        vault.mkdir(mode=0o700)
        secret = vault / "secret"
        secret.write_text("root only\n")
        os.chmod(secret, 0o600)
        yield folder, secret, base


def _intact(secret: Path) -> None:
    st = os.stat(secret)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0
    assert secret.read_text() == "root only\n"


def test_swapping_the_temporary_for_a_link_never_reaches_the_secret(place) -> None:
    folder, secret, base = place
    outcomes = {"written": 0, "refused": 0}
    with otheruser.attacker(
        SWAP_FOR_LINKS, str(folder), str(secret), NAME, stop_file=base / "stop"
    ) as other:
        for i in range(300):
            text = f"xputune_pass {i}\n"
            try:
                write_atomic(str(folder), NAME, text, mode=0o644)
            except XputuneError as exc:  # our temporary was swapped: said in one line
                assert "replaced by another process" in str(exc) or "cannot write" in str(exc)
                outcomes["refused"] += 1
            else:  # what stands at the name is our file (the loop leaves the name alone)
                st = os.lstat(folder / NAME)
                assert stat.S_ISREG(st.st_mode) and st.st_uid == 0
                assert (folder / NAME).read_text() == text
                outcomes["written"] += 1
            _intact(secret)
    print(f"\n300 writes under attack: {outcomes}, temporaries swapped: {other.out.strip()}")
    assert int(other.out) > 0  # the attack ran against our files
    _intact(secret)


def test_a_link_planted_at_the_target_is_replaced_not_followed(place) -> None:
    folder, secret, _ = place
    os.symlink(secret, folder / NAME)
    assert write_atomic(str(folder), NAME, "new\n", mode=0o644) == str(folder / NAME)
    st = os.lstat(folder / NAME)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644
    assert (folder / NAME).read_text() == "new\n"
    _intact(secret)


def test_a_planted_temporary_name_is_never_written_through(place) -> None:
    folder, secret, _ = place
    os.symlink(secret, folder / tmp_name(NAME, hidden=True))  # our next temporary's name
    write_atomic(str(folder), NAME, "ok\n", mode=0o600)
    assert (folder / NAME).read_text() == "ok\n"
    assert stat.S_IMODE(os.stat(folder / NAME).st_mode) == 0o600
    assert sorted(os.listdir(folder)) == [NAME]
    _intact(secret)


def test_leftovers_of_killed_writers_go_at_the_next_write(tmp_path: Path) -> None:
    stale = [f".{NAME}.tmp.4242", f".{NAME}.tmp.77"]
    for entry in stale:
        (tmp_path / entry).write_text("half")
    os.symlink("/nonexistent", tmp_path / f".{NAME}.tmp.5")  # a link goes too, unfollowed
    old = time.time() - STALE_TMP_AGE - 5
    for entry in [*stale, f".{NAME}.tmp.5"]:
        os.utime(tmp_path / entry, (old, old), follow_symlinks=False)
    live = f".{NAME}.tmp.99999"  # another writer's, seconds old: kept
    (tmp_path / live).write_text("in flight")
    others = [f".{NAME}.tmp.x", "other.prom", f"{NAME}.tmp.1"]  # not our pattern
    for entry in others:
        (tmp_path / entry).write_text("keep")
        os.utime(tmp_path / entry, (old, old))
    write_atomic(str(tmp_path), NAME, "x 1\n")
    assert sorted(os.listdir(tmp_path)) == sorted([NAME, live, *others])


def test_the_temporary_is_hidden_from_readers() -> None:
    name = tmp_name(NAME, hidden=True)
    assert name.startswith(".") and not name.endswith(".prom")  # NFD and node_exporter
    assert tmp_name("xputune", hidden=True).startswith(".")


def test_errors_are_one_line(tmp_path: Path) -> None:
    (tmp_path / NAME).mkdir()
    with pytest.raises(XputuneError, match="is a directory"):
        write_atomic(str(tmp_path), NAME, "x\n")
    with pytest.raises(XputuneError, match="no such directory"):
        write_atomic(str(tmp_path / "nope"), NAME, "x\n")
    (tmp_path / "file").write_text("")
    with pytest.raises(XputuneError, match="no such directory"):
        write_atomic(str(tmp_path / "file"), NAME, "x\n")
    with pytest.raises(XputuneError, match="not a file name"):
        write_atomic(str(tmp_path), "../escape", "x\n")
    assert sorted(os.listdir(tmp_path)) == ["file", NAME]
