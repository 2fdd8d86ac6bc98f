"""The fuzz's cage (cage.py) holds: no process, no signal, no write outside, no live write.

Every probe here is harmless even if the cage failed: the programs started are `true`, the
writes go to this test's own folder (one outside the cage's), and the live host's paths
written to do not exist.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import arg_fuzz
from tests.cli.cage import Cage, Caged, FuzzTimeout
from tests.tune import minihost

MISSING = "/nonexistent-xputune-cage-test"


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    """(the cage's folder, a folder outside it holding one file, keep)."""
    inside, outside = tmp_path / "cage", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    (outside / "keep").write_text("kept")
    return inside, outside


def test_no_process_starts_and_no_signal_is_sent(places) -> None:
    inside, _ = places
    with Cage(inside) as cage:
        with pytest.raises(FileNotFoundError, match="cage"):
            subprocess.run(["true"], check=False)
        with pytest.raises(FileNotFoundError, match="cage"):
            os.system("true")
        for event, args in (
            ("os.exec", ("/bin/true", ["true"], None)),
            ("os.posix_spawn", ("/bin/true", ["true"], None)),
            ("os.fork", ()),
        ):
            with pytest.raises(FileNotFoundError, match="cage"):
                sys.audit(event, *args)
        with pytest.raises(PermissionError, match="cage"):
            os.kill(os.getpid(), 0)
    assert len(cage.spawns) == 5
    subprocess.run(["true"], check=True)  # outside the cage, all is as before


def test_writes_outside_the_cage_are_refused(places) -> None:
    inside, outside = places
    os.symlink(outside, inside / "link")
    with Cage(inside) as cage:
        attempts = [
            lambda: open(outside / "a", "w"),  # noqa: SIM115
            lambda: os.open(outside / "b", os.O_WRONLY | os.O_CREAT),
            lambda: os.mkdir(outside / "d"),
            lambda: os.unlink(outside / "keep"),
            lambda: os.chmod(outside / "keep", 0o777),
            lambda: os.symlink("/etc", outside / "l"),
            lambda: open(inside / "link" / "e", "w"),  # noqa: SIM115 - a symlink out of the cage
            lambda: os.rename(inside / "x", outside / "x"),
        ]
        (inside / "x").write_text("mine")
        for attempt in attempts:
            with pytest.raises(Caged):
                attempt()
        dir_fd = os.open(outside, os.O_RDONLY | os.O_DIRECTORY)  # reading is fine
        try:
            with pytest.raises(Caged):
                os.open("c", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=dir_fd)
            with pytest.raises(Caged):
                os.replace("keep", "moved", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        (inside / "ok").write_text("fine")  # inside, and /dev/null, are writable
        with open("/dev/null", "w") as null:
            null.write("x")
    assert sorted(p.name for p in outside.iterdir()) == ["keep"]
    assert (outside / "keep").read_text() == "kept"
    assert len(cage.trips) == len(attempts) + 2
    (outside / "after").write_text("the cage is gone")


def test_the_live_host_view_is_read_only(places) -> None:
    from xputune.host import open_host

    inside, _ = places
    with Cage(inside):
        live = open_host()
        assert live.read_text("/proc/self/stat")  # reads are fine
        os.close(live.open_dir("/proc"))  # so is opening an existing folder to read
        for write in (
            lambda: live.write_bytes(f"{MISSING}/x", b"1"),
            lambda: live.replace_file(f"{MISSING}/y", b"1"),
            lambda: live.open_dir(MISSING, create=True),
            lambda: live.makedirs(f"{MISSING}/z"),
            lambda: live.remove(f"{MISSING}/w"),
        ):
            with pytest.raises(Caged):
                write()
        tree = open_host(minihost.build(str(inside / "host")))
        tree.write_bytes("/sys/kernel/mm/transparent_hugepage/enabled", b"never")  # a tree: fine
    assert not os.path.exists(MISSING)


def test_a_blocked_open_ends_at_the_alarm(places) -> None:
    inside, _ = places
    os.mkfifo(inside / "fifo")
    with Cage(inside) as cage, pytest.raises(FuzzTimeout), cage.alarm(0.2):
        open(inside / "fifo", "rb")  # noqa: SIM115 - no writer: blocks until the alarm


def test_watch_ends_after_one_wait_of_the_real_interval(places) -> None:
    inside, _ = places
    mini = minihost.build(str(inside / "host"))
    with Cage(inside) as cage:
        outcome = arg_fuzz.run(cage, ["watch", "--root", mini, "--interval", "86400"])
    assert outcome.problem() is None and outcome.code == 0, outcome.err
    assert "event=start" in outcome.err and "event=stop" in outcome.err
    assert outcome.seconds < 30


def test_everything_is_put_back(places) -> None:
    from xputune.host.view import DirView

    inside, outside = places
    before = (os.open, DirView.write_bytes, os.getcwd(), os.environ.get("HOME"))
    with Cage(inside):
        assert os.getcwd() != before[2]
    assert (os.open, DirView.write_bytes, os.getcwd(), os.environ.get("HOME")) == before
    (outside / "free").write_text("writable again")
