"""The memory knobs: selector files, /dev/shm huge=, NUMA balancing, on a tree and live-like."""

from __future__ import annotations

import pytest

from tests.tune import minihost
from tests.tune.views import LiveLikeView
from xputune.errors import HostDataError, UnsupportedError
from xputune.host.values import current_choice, rebracket
from xputune.host.view import DirView
from xputune.tune.kinds import accessor
from xputune.tune.knobs import KNOBS, TuneContext, Want
from xputune.tune.knobs import shm_huge as shm

THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def test_rebracket_moves_only_the_brackets():
    text = "always [madvise] never\n"
    moved = rebracket(text, "never", THP)
    assert moved == "always madvise [never]\n"
    assert rebracket(moved, "madvise", THP) == text
    assert current_choice(moved, THP) == "never"


def test_rebracket_refuses_a_word_the_kernel_does_not_offer():
    with pytest.raises(HostDataError):
        rebracket("always [madvise] never\n", "sometimes", THP)


@pytest.mark.parametrize("text", ["always madvise never", "[always] [never]", ""])
def test_selector_without_exactly_one_current_choice_is_bad_data(text):
    with pytest.raises(HostDataError):
        current_choice(text, THP)


def test_thp_plan_and_apply_on_a_tree(mini):
    ctx = TuneContext(DirView(mini))
    knob = KNOBS["thp.enabled"]
    want = Want("madvise")
    [change] = knob.plan(ctx, want)
    assert (change.before, change.after) == ("always", "madvise")
    knob.apply(ctx, change)
    assert knob.verify(ctx, change)
    with open(mini + THP) as fh:
        assert fh.read() == "always [madvise] never\n"
    assert knob.plan(ctx, want) == []
    assert knob.check(ctx, want)[0].verdict == "ok"


def test_accepted_values_hold_without_a_change(mini):
    ctx = TuneContext(DirView(mini))
    assert KNOBS["thp.enabled"].plan(ctx, Want("madvise", ("always",))) == []


def test_missing_thp_file_is_unsupported_in_check_and_refused_in_plan(mini):
    import os

    os.unlink(mini + THP)
    ctx = TuneContext(DirView(mini))
    row = KNOBS["thp.enabled"].check(ctx, Want("madvise"))[0]
    assert row.verdict == "unsupported"
    with pytest.raises(UnsupportedError, match=r"--skip thp\.enabled"):
        KNOBS["thp.enabled"].plan(ctx, Want("madvise"))


def test_shm_huge_rewrites_only_the_dev_shm_line(mini):
    view = DirView(mini)
    acc = accessor("shm-huge")
    assert acc.read(view, {"mount_point": "/dev/shm"}) == "never"
    acc.write(view, {"mount_point": "/dev/shm"}, "advise")
    with open(mini + shm.MOUNTINFO) as fh:
        lines = fh.read().splitlines()
    original = minihost.MOUNTINFO.splitlines()
    assert [i for i in range(len(lines)) if lines[i] != original[i]] == [4]
    assert lines[4].endswith("rw,size=65536k,inode64,huge=advise")
    acc.write(view, {"mount_point": "/dev/shm"}, "never")  # the kernel omits huge=never
    with open(mini + shm.MOUNTINFO) as fh:
        assert fh.read() == minihost.MOUNTINFO


def test_shm_reads_the_last_of_two_stacked_mounts():
    text = minihost.MOUNTINFO + (
        "40 26 0:40 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=1024k,huge=within_size\n"
    )
    mount = shm.find_mount(text, "/dev/shm", shm.MOUNTINFO)
    assert mount is not None and mount.huge == "within_size"


def test_shm_refuses_when_dev_shm_is_not_tmpfs(tmp_path):
    root = minihost.build(str(tmp_path / "h"), shm_fstype="ramfs")
    ctx = TuneContext(DirView(root))
    with pytest.raises(UnsupportedError, match="not tmpfs"):
        KNOBS["shm.huge"].plan(ctx, Want("advise"))
    assert KNOBS["shm.huge"].check(ctx, Want("advise"))[0].verdict == "drift"


def test_shm_live_path_remounts_then_verifies_from_mountinfo(mini, monkeypatch):
    view = LiveLikeView(mini)
    calls = []

    def fake_remount(point: str, option: str) -> None:  # what the kernel would then show
        calls.append((point, option))
        with open(mini + shm.MOUNTINFO) as fh:
            text = fh.read()
        with open(mini + shm.MOUNTINFO, "w") as fh:
            fh.write(shm.with_huge(text, point, option.split("=")[1]))

    monkeypatch.setattr(shm.ACCESSOR, "remount", fake_remount)
    shm.ACCESSOR.write(view, {"mount_point": "/dev/shm"}, "advise")
    assert calls == [("/dev/shm", "huge=advise")]


def test_shm_live_remount_that_does_not_take_is_a_verify_error(mini, monkeypatch):
    from xputune.tune.errors import VerifyError

    monkeypatch.setattr(shm.ACCESSOR, "remount", lambda point, option: None)
    with pytest.raises(VerifyError, match="mountinfo shows huge=never"):
        shm.ACCESSOR.write(LiveLikeView(mini), {"mount_point": "/dev/shm"}, "advise")


@pytest.mark.parametrize(
    ("raw", "value"),
    [(False, 0), (True, 1), ("off", 0), ("on", 1), ("tiering", 2), (0, 0), ("1", 1)],
)
def test_numa_balancing_values(raw, value):
    assert KNOBS["numa.balancing"].parse(raw, "here") == value


def test_numa_balancing_apply_writes_what_the_kernel_prints(mini):
    ctx = TuneContext(DirView(mini))
    knob = KNOBS["numa.balancing"]
    [change] = knob.plan(ctx, Want(0))
    assert (change.before_text, change.after_text) == ("on", "off")
    knob.apply(ctx, change)
    with open(mini + "/proc/sys/kernel/numa_balancing") as fh:
        assert fh.read() == "0\n"


def test_numa_balancing_absent_counts_as_off(mini):
    import os

    os.unlink(mini + "/proc/sys/kernel/numa_balancing")
    ctx = TuneContext(DirView(mini))
    assert KNOBS["numa.balancing"].check(ctx, Want(0))[0].verdict == "ok"
    assert KNOBS["numa.balancing"].plan(ctx, Want(0)) == []
    with pytest.raises(UnsupportedError):
        KNOBS["numa.balancing"].plan(ctx, Want(1))
