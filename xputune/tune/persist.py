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
from xputune.host.view import DirView, clean_tmp_at
from xputune.tune.knobs.base import DRIFT, OK, Row
from xputune.tune.state import writable_dir_view
from xputune.tune.steps import Accessor, Change, register

UNIT_NAME = "xputune.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
WANTS_LINK = f"/etc/systemd/system/multi-user.target.wants/{UNIT_NAME}"


#: Directories an install may create (and a rollback may remove), by installed path.
def allowed_dirs(host_path: str) -> list[str]:
    """The ancestors of `host_path` under /etc, deepest first: the only dirs ever created."""
    out = []
    folder = os.path.dirname(host_path)
    while folder not in ("/", ""):
        out.append(folder)
        folder = os.path.dirname(folder)
    return out


class FileAccessor(Accessor):
    """A whole file's text; None means absent (writing None removes it).

    Read and written through the view's strict primitives: the path is walked from the root
    without following any symlink (a symlink at /etc, /etc/systemd, ... is refused), the file
    is replaced atomically and never gets more than rwxrwxrwx (no setuid, setgid or sticky).
    """

    kind = "file"

    def read(self, view: HostView, target: dict[str, Any]) -> str | None:
        dview = writable_dir_view(view)
        try:
            data = dview.read_strict(target["path"])
        except OSError as exc:
            raise HostError(f"cannot read {target['path']}: {exc.strerror}") from exc
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data.decode("utf-8", "replace")

    def write(self, view: HostView, target: dict[str, Any], value: Any) -> None:
        dview = writable_dir_view(view)
        path = target["path"]
        try:
            _clean_tmp(dview, path)
            if value is None:
                dview.remove(path)
                _remove_created_dirs(dview, target)
                return
            mode = int(target.get("mode", 0o644)) & 0o777
            dview.replace_file(path, str(value).encode(), mode=mode)
        except OSError as exc:
            raise HostError(f"cannot write {path}: {exc.strerror}") from exc


class LinkAccessor(Accessor):
    """A symlink's target; None means absent. The link itself is never followed."""

    kind = "symlink"

    def read(self, view: HostView, target: dict[str, Any]) -> str | None:
        return writable_dir_view(view).readlink_strict(target["path"])

    def write(self, view: HostView, target: dict[str, Any], value: Any) -> None:
        dview = writable_dir_view(view)
        path = target["path"]
        try:
            if value is None:
                if dview.lkind(path) == "link":
                    dview.remove(path)
                _remove_created_dirs(dview, target)
                return
            dview.symlink(path, str(value))
        except OSError as exc:
            raise HostError(f"cannot write link {path}: {exc.strerror}") from exc


register(FileAccessor())
register(LinkAccessor())


def _clean_tmp(view: DirView, host_path: str) -> None:
    """Remove "<unit>.tmp.<pid>" files a killed install left next to the unit."""
    folder, _, name = host_path.rpartition("/")
    try:
        fd = view.open_dir(folder or "/")
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        clean_tmp_at(fd, (name,))
    finally:
        os.close(fd)


def _missing_dirs(view: HostView, host_path: str) -> list[str]:
    """The ancestors of host_path that do not exist yet, deepest first."""
    dview = writable_dir_view(view)
    return [d for d in allowed_dirs(host_path) if dview.lkind(d) is None]


def _remove_created_dirs(view: DirView, target: dict[str, Any]) -> None:
    """Undo the makedirs of an install: remove the directories it created, if still empty.

    Only ancestors of the target's own path are ever considered (the journal is validated
    before a rollback, and this holds again here).
    """
    allowed = set(allowed_dirs(str(target["path"])))
    for folder in target.get("created_dirs", ()):
        if folder not in allowed:
            continue
        if view.lkind(folder) is None:
            continue
        if not view.rmdir(folder):
            return  # not empty: something else lives there now; keep it and its parents


# -- systemd unit syntax ---------------------------------------------------------------------
# systemd.service(5) "Command lines" and systemd.unit(5) "Specifiers": in ExecStart= systemd
# first expands %-specifiers over the whole line, then splits words (double or single quotes,
# C escapes in and out of quotes), then substitutes $VAR and ${VAR} in each word. So a word is
# written as: `$` -> `$$`, then C-escaped and double-quoted when it holds anything but plain
# characters, then `%` -> `%%` over the result. A lone `;` separates commands: it is escaped.
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=./:,@")
_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def systemd_word(word: str) -> str:
    """One ExecStart= argument, escaped so systemd hands `word` to the process unchanged."""
    if "\0" in word:
        raise HostError(f"cannot put a NUL byte into a unit file: {word!r}")
    word = word.replace("$", "$$")
    if word and all(c in _PLAIN or c == "$" for c in word):
        quoted = word
    else:
        out = []
        for c in word:
            if c in _C_ESCAPES:
                out.append(_C_ESCAPES[c])
            elif ord(c) < 0x20 or ord(c) == 0x7F:
                out.append(f"\\x{ord(c):02x}")
            else:
                out.append(c)
        quoted = '"' + "".join(out) + '"'
    return quoted.replace("%", "%%")


def systemd_command(argv: list[str]) -> str:
    return " ".join(systemd_word(w) for w in argv)


_UNESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r", " ": " ",
              ";": ";", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "s": " "}  # fmt: skip


def parse_exec(value: str) -> list[str]:
    """The argv systemd runs for an ExecStart= value (the subset of the syntax we write):
    specifiers other than %% and variables other than $$ are refused (ValueError)."""
    if value[:1] in "-@:+!":
        raise ValueError("ExecStart prefixes are not written by xputune")
    text = []
    i = 0
    while i < len(value):  # specifiers, over the whole line
        c = value[i]
        if c == "%":
            if value[i + 1 : i + 2] != "%":
                raise ValueError(f"specifier %{value[i + 1 : i + 2]} in ExecStart")
            i += 1
        text.append(c)
        i += 1
    line = "".join(text)
    words: list[str] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            break
        word: list[str] = []
        quote = ""
        literal = False  # quoted or escaped somewhere: a ";" word is then an argument
        while i < n:
            c = line[i]
            if not quote and c in " \t":
                break
            if c == "\\":
                if i + 1 >= n:
                    raise ValueError("trailing backslash")
                e = line[i + 1]
                literal = True
                if e == "x":
                    word.append(chr(int(line[i + 2 : i + 4], 16)))
                    i += 4
                    continue
                if e not in _UNESCAPES:
                    raise ValueError(f"unknown escape \\{e}")
                word.append(_UNESCAPES[e])
                i += 2
                continue
            if quote and c == quote:
                quote = ""
            elif not quote and c in "\"'":
                quote = c
                literal = True
            else:
                word.append(c)
            i += 1
        if quote:
            raise ValueError("unclosed quote")
        raw = "".join(word)
        if raw == ";" and not literal:
            raise ValueError("a second command in ExecStart")
        words.append(_unvar(raw))
    return words


def _unvar(word: str) -> str:
    out = []
    i = 0
    while i < len(word):
        if word[i] == "$":
            if word[i + 1 : i + 2] != "$":
                raise ValueError("environment variable in ExecStart")
            i += 1
        out.append(word[i])
        i += 1
    return "".join(out)


def unit_text(args: list[str]) -> str:
    """The unit: oneshot after modules load, before services that use the cards."""
    command = systemd_command([sys.executable, "-m", "xputune", "apply", *args, "--wait"])
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
                words = parse_exec(line[len("ExecStart=") :])
            except (ValueError, IndexError):
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
