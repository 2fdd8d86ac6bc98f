"""shm.huge: the huge= mount option of /dev/shm, where the TP-shared host KV buffer lives.

The TP-shared buffer is a MAP_SHARED file in /dev/shm marked MADV_HUGEPAGE (the accelerator
driver cannot register hugetlbfs, but THP-backed tmpfs registers fine). tmpfs only hands out huge
pages when mounted with huge=always|within_size|advise; the default is never, and that is NOT
what thp.shmem_enabled controls. The live change is `mount -o remount,huge=MODE /dev/shm`, which
keeps the files; the truth is read back from /proc/self/mountinfo (/proc/mounts can list /dev/shm
twice, and the last mount listed is the visible one).
"""

from __future__ import annotations

import shutil
from typing import Any

from xputune import trail
from xputune.errors import HostDataError, HostError, UnsupportedError
from xputune.host import HostView
from xputune.host.values import Mount, find_mount
from xputune.tune.errors import ProfileError, VerifyError
from xputune.tune.knobs.base import DRIFT, OK, Knob, Row, TuneContext, Want, expected_text
from xputune.tune.steps import Accessor, Change, register

MOUNTINFO = "/proc/self/mountinfo"
MOUNT_POINT = "/dev/shm"
MODES = ("never", "always", "within_size", "advise")


def with_huge(text: str, mount_point: str, mode: str) -> str:
    """mountinfo text with the visible mount's huge= set as the kernel would print it."""
    mount = find_mount(text, mount_point, MOUNTINFO)
    if mount is None:
        raise HostDataError(MOUNTINFO, None, f"expected a mount at {mount_point}")
    lines = text.split("\n")
    fields = lines[mount.line].split(" ")
    sep = fields.index("-", 6)
    opts = [o for o in fields[sep + 3].split(",") if not o.startswith("huge=")]
    if mode != "never":
        opts.append(f"huge={mode}")
    fields[sep + 3] = ",".join(opts)
    lines[mount.line] = " ".join(fields)
    return "\n".join(lines)


def live_remount(mount_point: str, option: str) -> None:
    """`mount -o remount,OPTION MOUNT_POINT` on the live host."""
    mount = shutil.which("mount")
    if mount is None:
        raise HostError("the mount command is not installed; cannot remount " + mount_point)
    done = trail.run(
        [mount, "-o", f"remount,{option}", mount_point],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        why = done.stderr.strip() or f"exit code {done.returncode}"
        raise HostError(f"mount -o remount,{option} {mount_point} failed: {why}")


class ShmHugeAccessor(Accessor):
    """Read huge= from mountinfo; live: remount, fixture: rewrite the mountinfo line."""

    kind = "shm-huge"

    def __init__(self) -> None:
        #: Replaced by tests and by the CLI context; never called on a fixture root.
        self.remount = live_remount

    def read(self, view: HostView, target: dict[str, Any]) -> str:
        point = target["mount_point"]
        mount = find_mount(view.read_text(MOUNTINFO), point, MOUNTINFO)
        if mount is None:
            raise HostDataError(MOUNTINFO, None, f"expected a mount at {point}")
        return mount.huge

    def write(self, view: HostView, target: dict[str, Any], value: Any) -> None:
        point = target["mount_point"]
        if view.live:
            self.remount(point, f"huge={value}")
        else:
            text = view.read_bytes(MOUNTINFO).decode()
            view.write_bytes(MOUNTINFO, with_huge(text, point, str(value)).encode())
        got = self.read(view, target)
        if got != value:
            raise VerifyError(f"{point}: remounted with huge={value}, mountinfo shows huge={got}")

    def raw_path(self, target: dict[str, Any]) -> str | None:
        return MOUNTINFO


ACCESSOR = register(ShmHugeAccessor())


class ShmHuge(Knob):
    name = "shm.huge"
    summary = "huge= option of the /dev/shm tmpfs (THP for the TP-shared host KV buffer)"

    def parse(self, raw: Any, where: str) -> str:
        if not isinstance(raw, str) or raw not in MODES:
            raise ProfileError(f"{where}: {raw!r} is not a huge= mode (one of {', '.join(MODES)})")
        return raw

    def read(self, ctx: TuneContext) -> Mount | None:
        text = ctx.view.read_optional(MOUNTINFO)
        return None if text is None else find_mount(text, MOUNT_POINT, MOUNTINFO)

    def _usable(self, mount: Mount | None) -> Mount:
        if mount is None:
            raise UnsupportedError(f"shm.huge: nothing is mounted at {MOUNT_POINT}")
        if mount.fstype != "tmpfs":
            raise UnsupportedError(
                f"shm.huge: {MOUNT_POINT} is {mount.fstype}, not tmpfs; huge= is a tmpfs option "
                f"(leave it out with --skip shm.huge)"
            )
        return mount

    def check(self, ctx: TuneContext, want: Want) -> list[Row]:
        expected = expected_text(want)
        mount = self.read(ctx)
        if mount is None or mount.fstype != "tmpfs":
            actual = "not mounted" if mount is None else f"{mount.fstype}, not tmpfs"
            fix = f"mount -t tmpfs -o huge={want.value} tmpfs {MOUNT_POINT}"
            return [Row(self.name, MOUNT_POINT, expected, actual, DRIFT, fix, want.severity)]
        verdict = OK if want.holds(mount.huge) else DRIFT
        fix = "" if verdict == OK else f"mount -o remount,huge={want.value} {MOUNT_POINT}"
        return [Row(self.name, MOUNT_POINT, expected, mount.huge, verdict, fix, want.severity)]

    def plan(self, ctx: TuneContext, want: Want) -> list[Change]:
        mount = self._usable(self.read(ctx))
        if want.holds(mount.huge):
            return []
        return [
            Change(
                self.name,
                ShmHugeAccessor.kind,
                {"mount_point": MOUNT_POINT},
                MOUNT_POINT,
                mount.huge,
                want.value,
                f"huge={mount.huge}",
                f"huge={want.value}",
            )
        ]
