"""`apply --persist`: a systemd unit that re-applies the profile at every boot.

PCI config space and /sys, /proc settings are lost at reboot (and config space at a device
reset). The unit runs `xputune apply` once at boot with the same profile and flags. Installing
it is two ordinary journaled changes: the unit file and the multi-user.target.wants link that
`systemctl enable` would create, so `rollback` removes them like any other change, together with
the directories the install had to create (their list is journaled with the change). Under
--root both are written into the root.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from typing import Any

from xputune.errors import HostError
from xputune.host import HostView
from xputune.tune.knobs.base import DRIFT, OK, Row
from xputune.tune.state import atomic_write, fs_path, fsync_dir
from xputune.tune.steps import Accessor, Change, register

UNIT_NAME = "xputune.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
WANTS_LINK = f"/etc/systemd/system/multi-user.target.wants/{UNIT_NAME}"


class FileAccessor(Accessor):
    """A whole file's text; None means absent (writing None removes it)."""

    kind = "file"

    def read(self, view: HostView, target: dict[str, Any]) -> str | None:
        try:
            with open(fs_path(view, target["path"]), encoding="utf-8") as fh:
                return fh.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HostError(f"cannot read {target['path']}: {exc.strerror}") from exc

    def write(self, view: HostView, target: dict[str, Any], value: Any) -> None:
        path = fs_path(view, target["path"])
        try:
            if value is None:
                if os.path.lexists(path):
                    os.unlink(path)
                    fsync_dir(os.path.dirname(path))
                _remove_created_dirs(view, target)
                return
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write(path, str(value).encode(), mode=int(target.get("mode", 0o644)))
        except OSError as exc:
            raise HostError(f"cannot write {target['path']}: {exc.strerror}") from exc


class LinkAccessor(Accessor):
    """A symlink's target; None means absent."""

    kind = "symlink"

    def read(self, view: HostView, target: dict[str, Any]) -> str | None:
        path = fs_path(view, target["path"])
        return os.readlink(path) if os.path.islink(path) else None

    def write(self, view: HostView, target: dict[str, Any], value: Any) -> None:
        path = fs_path(view, target["path"])
        try:
            if os.path.lexists(path):
                os.unlink(path)
            if value is not None:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.symlink(str(value), path)
            if os.path.isdir(os.path.dirname(path)):
                fsync_dir(os.path.dirname(path))
            if value is None:
                _remove_created_dirs(view, target)
        except OSError as exc:
            raise HostError(f"cannot write link {target['path']}: {exc.strerror}") from exc


register(FileAccessor())
register(LinkAccessor())


def _missing_dirs(view: HostView, host_path: str) -> list[str]:
    """The ancestors of host_path that do not exist yet, deepest first."""
    missing = []
    folder = os.path.dirname(host_path)
    while folder not in ("/", "") and not os.path.isdir(fs_path(view, folder)):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing


def _remove_created_dirs(view: HostView, target: dict[str, Any]) -> None:
    """Undo the makedirs of an install: remove the directories it created, if still empty."""
    for folder in target.get("created_dirs", ()):
        path = fs_path(view, folder)
        try:
            os.rmdir(path)
        except FileNotFoundError:
            continue
        except OSError:
            return  # not empty: something else lives there now; keep it and its parents
        fsync_dir(os.path.dirname(path))


def unit_text(args: list[str]) -> str:
    """The unit: oneshot after modules load, before services that use the cards."""
    command = shlex.join([sys.executable, "-m", "xputune", "apply", *args, "--wait"])
    return (
        "# Installed by `xputune apply --persist`; removed by `xputune rollback`.\n"
        "[Unit]\n"
        "Description=xputune: re-apply host tuning (PCIe ordering, THP, /dev/shm, NUMA)\n"
        "After=systemd-modules-load.service local-fs.target\n"
        "Before=multi-user.target\n"
        "DefaultDependencies=no\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        f"ExecStart={command}\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def installed_args(unit: str) -> list[str] | None:
    """The apply flags an installed unit runs at boot (None: not a unit of ours)."""
    for line in unit.splitlines():
        if line.startswith("ExecStart="):
            try:
                words = shlex.split(line[len("ExecStart=") :])
            except ValueError:
                return None
            if "apply" not in words:
                return None
            return [w for w in words[words.index("apply") + 1 :] if w != "--wait"]
    return None


def check_row(view: HostView, args: list[str]) -> Row | None:
    """A `check` row for the boot unit when one is installed; None when there is none.

    Persistence is optional, so an absent unit is no drift. An installed one that would apply
    other settings at the next boot, or is not enabled, is: the reboot would undo the check.
    """
    unit = view.read_optional(UNIT_PATH)
    # Listed, not followed: systemctl's link is absolute, which the view treats as an escape.
    wants_dir, link_name = WANTS_LINK.rsplit("/", 1)
    enabled = link_name in view.listdir(wants_dir)
    if unit is None and not enabled:
        return None
    expected = f"enabled, applies {shlex.join(args)} at boot"
    fix = f"xputune apply --persist {shlex.join(args)}"
    if unit is None:
        return Row("persist", UNIT_PATH, expected, "missing (link left)", DRIFT, fix, "warn")
    found = installed_args(unit)
    if found is None:
        actual = "not written by xputune"
    elif found != args:
        actual = f"applies {shlex.join(found)}"
    elif not enabled:
        actual = "installed, not enabled"
    else:
        return Row("persist", UNIT_PATH, expected, "enabled, same settings", OK, "", "warn")
    return Row("persist", UNIT_PATH, expected, actual, DRIFT, fix, "warn")


def plan(view: HostView, args: list[str]) -> list[Change]:
    """The changes that install (or update) the unit; [] when it is already in place."""
    files = FileAccessor()
    links = LinkAccessor()
    changes = []
    want = unit_text(args)
    current = files.read(view, {"path": UNIT_PATH})
    if current != want:
        changes.append(
            Change(
                "persist",
                FileAccessor.kind,
                {"path": UNIT_PATH, "mode": 0o644, "created_dirs": _missing_dirs(view, UNIT_PATH)},
                UNIT_PATH,
                current,
                want,
                "absent" if current is None else "other",
                "re-apply at boot",
            )
        )
    link = links.read(view, {"path": WANTS_LINK})
    if link != UNIT_PATH:
        changes.append(
            Change(
                "persist",
                LinkAccessor.kind,
                {"path": WANTS_LINK, "created_dirs": _missing_dirs(view, WANTS_LINK)},
                WANTS_LINK,
                link,
                UNIT_PATH,
                "absent" if link is None else link,
                "enabled",
            )
        )
    return changes


def reload_systemd(view: HostView) -> str | None:
    """Live host only: let systemd see the new unit; a warning text when that fails."""
    if not view.live:
        return None
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return "systemctl not found: the unit is installed but systemd was not reloaded"
    done = subprocess.run([systemctl, "daemon-reload"], capture_output=True, text=True, check=False)
    if done.returncode:
        return f"systemctl daemon-reload failed: {done.stderr.strip()}"
    return None
