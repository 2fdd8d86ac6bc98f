"""`apply --persist`: a systemd unit that re-applies the profile at every boot.

PCI config space and /sys, /proc settings are lost at reboot (and config space at a device
reset). The unit runs `xputune apply` once at boot with the same profile and flags. Installing
it is two ordinary journaled changes: the unit file and the multi-user.target.wants link that
`systemctl enable` would create, so `rollback` removes them like any other change, together with
the directories the install had to create (their list is journaled with the change). Under
--root both are written into the root.

`apply --persist --watch` installs a second unit the same way: xputune-watch.service, a
long-running `xputune watch` with the same flags (Restart=on-failure), which re-applies the
settings when a card reset, hot-plug or driver rebind loses them between boots. Rollback removes
it like the boot unit and, on the live host, stops it.

Both units start in / at boot, so every path they carry is absolute: the interpreter, and a
profile given as a file (resolved at apply time against the caller's folder, see unit_args).
What they need at boot (the interpreter, the xputune package) is asserted (AssertPathExists=),
so a moved virtual environment or clone fails the unit by name, and apply --persist warns
when one of those lies where things move (a git clone, /home, /root; see interpreter_warnings).
Both run sandboxed (see _HARDENING for what stays open and why).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xputune import trail
from xputune.errors import HostError
from xputune.host import HostView
from xputune.host.view import DirView, clean_tmp_at
from xputune.tune.knobs.base import DRIFT, OK, Row
from xputune.tune.state import writable_dir_view
from xputune.tune.steps import Accessor, Change, register

UNIT_NAME = "xputune.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
WANTS_LINK = f"/etc/systemd/system/multi-user.target.wants/{UNIT_NAME}"
WATCH_UNIT_NAME = "xputune-watch.service"
WATCH_UNIT_PATH = f"/etc/systemd/system/{WATCH_UNIT_NAME}"
WATCH_WANTS_LINK = f"/etc/systemd/system/multi-user.target.wants/{WATCH_UNIT_NAME}"


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


#: Flags of ours whose value may be a file path (a profile given as a file, not a name).
PATH_FLAGS = ("--profile",)


def unit_args(args: list[str], cwd: str | None = None) -> list[str]:
    """`args` with every path argument made absolute against `cwd` (the caller's).

    systemd starts a unit in /, so a relative `--profile ./rc.yaml` would name another file
    at boot, or none. A profile given by name stays a name. Paths are made absolute, not
    resolved: a link the operator points at the profile to switch it keeps working.
    """
    from xputune.tune.profiles import names_a_file

    base = cwd or os.getcwd()
    out = list(args)
    for i, word in enumerate(out[:-1]):
        value = out[i + 1]
        if word in PATH_FLAGS and names_a_file(value) and not os.path.isabs(value):
            out[i + 1] = os.path.normpath(os.path.join(base, value))
    return out


def _interpreter() -> str:
    """This Python, by absolute path (a venv's own, not resolved: its packages come with it)."""
    if not sys.executable:
        raise HostError("cannot tell this Python's path (sys.executable is empty); no unit")
    return os.path.abspath(sys.executable)


# -- what the units depend on ------------------------------------------------------------------
# A unit runs `<this python> -m xputune` at every boot, long after the apply that wrote it.
# When that python is a virtual environment in a git clone, or xputune is imported from one
# (an editable install), moving or deleting the clone breaks the unit, and systemd's only
# word for it would be status=203/EXEC, or a ModuleNotFoundError in the journal. So every path
# the unit needs becomes an AssertPathExists= (a moved clone fails the unit at boot, saying
# which path is gone), and apply says plainly when one of them lives where things move.

#: Folders whose contents are people's own and move with them.
MOVABLE_HOMES = ("/home", "/root")


def _package_dir() -> str:
    import xputune

    return os.path.dirname(os.path.abspath(xputune.__file__))


def dependencies() -> list[str]:
    """The paths a unit written now needs at boot: the interpreter and the xputune package."""
    return list(dict.fromkeys((_interpreter(), _package_dir())))


def _git_work_tree(path: str) -> str | None:
    """The work tree of a git clone `path` lies in (a folder holding .git), or None."""
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    while True:
        if os.path.lexists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def movable(path: str) -> str | None:
    """Why `path` may not be there at the next boot (in a git clone, or under /home or /root),
    or None."""
    tree = _git_work_tree(path)
    if tree is not None:
        return f"inside the git work tree {tree}"
    for home in MOVABLE_HOMES:
        if path == home or path.startswith(home + "/"):
            return f"under {home}"
    return None


def interpreter_warnings() -> list[str]:
    """What apply --persist says when the units depend on paths that can move: which paths,
    why, and how to make the units survive. [] for a system-wide install."""
    interpreter, package = _interpreter(), _package_dir()
    real = os.path.realpath(interpreter)
    said = []
    why, why_real = movable(interpreter), movable(real) if real != interpreter else None
    if why or why_real:
        run = f"run {interpreter}" + (f" ({why})" if why else "")
        said.append(run + (f", which is {real} ({why_real})" if why_real else ""))
    if why_package := movable(package):
        said.append(f"import xputune from {package} ({why_package})")
    if not said:
        return []
    return [
        f"the boot and watch units {' and '.join(said)}: if that moves or is deleted, the "
        "units fail at boot (AssertPathExists= names the missing path) and these settings "
        "are not re-applied. To make them survive, install xputune system-wide (pip install "
        "--prefix /usr/local xputune, or pipx install xputune) and re-run xputune apply "
        "--persist with that install"
    ]


def _assertions() -> str:
    """AssertPathExists= lines for dependencies(). A path is written as it is, `%` doubled
    (the only specifier syntax a path line has); one systemd would not read back unchanged
    (a control character, blanks at either end, which the parser strips) gets no line."""
    lines = []
    for path in dependencies():
        if path != path.strip() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
            continue
        lines.append(f"AssertPathExists={path.replace('%', '%%')}\n")
    return "".join(lines)


# -- hardening (systemd.exec(5)) -------------------------------------------------------------
# What the units must still do: write PCI config space, THP and other /sys attributes and
# /proc/sys/kernel/numa_balancing (so no ProtectKernelTunables, and /sys, /proc stay
# writable: ProtectSystem=strict leaves the API file systems /proc, /sys and /dev alone);
# read all of config space and remount /dev/shm (CAP_SYS_ADMIN and the @mount system calls,
# for mount(8)); write the state directory (StateDirectory: /var/lib/xputune, 0700); read a
# profile or run a virtual environment under /home or /root (ProtectHome=read-only, not
# yes); the watch service also hears udev over netlink (AF_NETLINK, and no PrivateNetwork:
# udevd's events are sent in the host's network namespace).
#
# Most of these options give the service a mount namespace of its own. The /dev/shm remount
# still reaches the host: `mount -o remount,huge=MODE` changes an option of the tmpfs
# superblock, which every namespace's copy of the mount shares (verified with unshare(1) and
# a slave copy; the host's mountinfo shows the new huge=), and the service's /dev is the
# host's (no PrivateDevices, which would give it a tmpfs of its own). Left out on purpose:
# PrivateDevices (see above), ProtectClock (it implies a device allow-list, and vendor tools
# and NVML open the cards' device nodes), ProtectProc/ProcSubset (the lock names its holder
# by pid; /proc/sys must stay), MemoryDenyWriteExecute (ctypes callbacks, vendor
# libraries), PrivateUsers (the capabilities would be the namespace's, not the host's).
_HARDENING = (
    "NoNewPrivileges=yes",
    "CapabilityBoundingSet=CAP_SYS_ADMIN",
    "ProtectSystem=strict",
    "StateDirectory=xputune",
    "StateDirectoryMode=0700",
    "ProtectHome=read-only",
    "PrivateTmp=yes",
    "PrivateIPC=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectHostname=yes",
    "RestrictNamespaces=yes",
    "RestrictRealtime=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    "IPAddressDeny=any",
    "SystemCallArchitectures=native",
    "SystemCallFilter=@system-service @mount",
    "SystemCallErrorNumber=EPERM",
    "UMask=0077",
)


def hardening(families: str) -> str:
    """The unit's sandbox lines; `families`: the socket address families it may open."""
    return "".join(f"{line}\n" for line in (*_HARDENING, f"RestrictAddressFamilies={families}"))


def unit_text(args: list[str]) -> str:
    """The unit: oneshot after modules load, before services that use the cards."""
    command = systemd_command([_interpreter(), "-m", "xputune", "apply", *args, "--wait"])
    return (
        "# Installed by `xputune apply --persist`; removed by `xputune rollback`.\n"
        "[Unit]\n"
        "Description=xputune: re-apply host tuning (PCIe ordering, THP, /dev/shm, NUMA)\n"
        "After=systemd-modules-load.service local-fs.target\n"
        "Before=multi-user.target\n"
        "DefaultDependencies=no\n"
        f"{_assertions()}"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        f"ExecStart={command}\n"
        f"{hardening('AF_UNIX')}"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def watch_unit_text(args: list[str]) -> str:
    """The watch service: `xputune watch` with the same selection, restarted when it fails.

    It starts after the boot unit (so the two do not race for the state lock at boot) and after
    udevd (its event source). A clean stop (SIGTERM from `systemctl stop`) exits 0, and a
    watch paused by a rollback keeps running without re-applying; only a crash restarts it.
    """
    command = systemd_command([_interpreter(), "-m", "xputune", "watch", *args])
    return (
        "# Installed by `xputune apply --persist --watch`; removed by `xputune rollback`.\n"
        "[Unit]\n"
        "Description=xputune watch: re-apply host tuning after card resets, hot-plug and "
        "driver rebinds\n"
        f"After={UNIT_NAME} systemd-udevd.service\n"
        f"{_assertions()}"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={command}\n"
        "Restart=on-failure\n"
        "RestartSec=10s\n"
        "TimeoutStopSec=30s\n"
        f"{hardening('AF_UNIX AF_NETLINK')}"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


@dataclass(frozen=True)
class Unit:
    """One unit xputune installs: where it lives, its wants link, the command it runs."""

    name: str
    verb: str  # the xputune command of its ExecStart
    text: Callable[[list[str]], str]
    role: str  # what the unit does, for check rows and the diff ("re-apply at boot")
    flags: str  # the apply flags that install it

    @property
    def path(self) -> str:
        return f"/etc/systemd/system/{self.name}"

    @property
    def link(self) -> str:
        return f"/etc/systemd/system/multi-user.target.wants/{self.name}"


BOOT = Unit(UNIT_NAME, "apply", unit_text, "re-apply at boot", "--persist")
WATCH = Unit(WATCH_UNIT_NAME, "watch", watch_unit_text, "watch and re-apply", "--persist --watch")
UNITS = (BOOT, WATCH)


def exec_argv(unit: str) -> list[str] | None:
    """The argv of a unit's first ExecStart= (None: none, or not in the syntax we write)."""
    for line in unit.splitlines():
        if line.startswith("ExecStart="):
            try:
                return parse_exec(line[len("ExecStart=") :])
            except (ValueError, IndexError):
                return None
    return None


def installed_args(unit: str, verb: str = "apply") -> list[str] | None:
    """The flags an installed unit passes to `xputune VERB` (None: not a unit of ours)."""
    words = exec_argv(unit)
    if words is None or verb not in words:
        return None
    return [w for w in words[words.index(verb) + 1 :] if w != "--wait"]


def asserted_paths(unit: str) -> list[str]:
    """The paths a unit asserts (AssertPathExists=, as _assertions writes them)."""
    prefix = "AssertPathExists="
    return [
        line[len(prefix) :].strip().replace("%%", "%")
        for line in unit.splitlines()
        if line.startswith(prefix) and line[len(prefix) :].strip().startswith("/")
    ]


def check_row(view: HostView, args: list[str], unit: Unit = BOOT) -> Row | None:
    """A `check` row for one unit when it is installed; None when there is none.

    Persistence is optional, so an absent unit is no drift. An installed one that would apply
    other settings at the next boot (or watch for other ones), or is not enabled, is: the
    reboot would undo the check.
    """
    args = unit_args(args)
    text = view.read_optional(unit.path)
    # Listed, not followed: systemctl's link is absolute, which the view treats as an escape.
    wants_dir, link_name = unit.link.rsplit("/", 1)
    enabled = link_name in view.listdir(wants_dir)
    if text is None and not enabled:
        return None
    what = "applies" if unit is BOOT else "watches"
    when = " at boot" if unit is BOOT else ""
    expected = f"enabled, {what} {shlex.join(args)}{when}"
    fix = f"xputune apply {unit.flags} {shlex.join(args)}"
    if text is None:
        return Row("persist", unit.path, expected, "missing (link left)", DRIFT, fix, "warn")
    found = installed_args(text, unit.verb)
    if found is None:
        actual = "not written by xputune"
    elif found != args:
        actual = f"{what} {shlex.join(found)}"
    elif not enabled:
        actual = "installed, not enabled"
    else:
        return Row("persist", unit.path, expected, "enabled, same settings", OK, "", "warn")
    return Row("persist", unit.path, expected, actual, DRIFT, fix, "warn")


def check_rows(view: HostView, args: list[str]) -> list[Row]:
    """The rows of every installed unit (boot, then watch)."""
    return [row for unit in UNITS if (row := check_row(view, args, unit)) is not None]


def plan(view: HostView, args: list[str], watch: bool = False) -> list[Change]:
    """The changes that install (or update) the boot unit, and with `watch` the watch service;
    [] when they are already in place. Without `watch` an installed watch unit is left alone
    (check reports it when its settings differ)."""
    changes: list[Change] = []
    args = unit_args(args)
    for unit in (BOOT, WATCH) if watch else (BOOT,):
        changes += _unit_changes(view, unit, args)
    return changes


def _unit_changes(view: HostView, unit: Unit, args: list[str]) -> list[Change]:
    files = FileAccessor()
    links = LinkAccessor()
    changes = []
    want = unit.text(args)
    current = files.read(view, {"path": unit.path})
    if current != want:
        changes.append(
            Change(
                "persist",
                FileAccessor.kind,
                {"path": unit.path, "mode": 0o644, "created_dirs": _missing_dirs(view, unit.path)},
                unit.path,
                current,
                want,
                "absent" if current is None else "other",
                unit.role,
            )
        )
    link = links.read(view, {"path": unit.link})
    if link != unit.path:
        changes.append(
            Change(
                "persist",
                LinkAccessor.kind,
                {"path": unit.link, "created_dirs": _missing_dirs(view, unit.link)},
                unit.link,
                link,
                unit.path,
                "absent" if link is None else link,
                "enabled",
            )
        )
    return changes


def _systemctl(*args: str) -> str | None:
    """Run systemctl; a warning text when it is missing or fails."""
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return f"systemctl not found: could not run systemctl {' '.join(args)}"
    done = trail.run([systemctl, *args], capture_output=True, text=True, check=False)
    if done.returncode:
        return f"systemctl {' '.join(args)} failed: {done.stderr.strip()}"
    return None


def reload_systemd(view: HostView, restart: tuple[str, ...] = ()) -> list[str]:
    """Live host only: let systemd see the new units, then (re)start `restart` (the watch
    service, so a changed selection takes effect now); warnings when that fails."""
    if not view.live:
        return []
    warning = _systemctl("daemon-reload")
    if warning:
        return [warning]
    return [w for name in restart if (w := _systemctl("restart", name))]


def stop_removed(view: HostView, removed_paths: set[str]) -> list[str]:
    """Live host only, after a rollback: stop the watch service whose unit it removed (a
    running service outlives its file) and let systemd forget the units; warnings."""
    if not view.live or not removed_paths & {u.path for u in UNITS}:
        return []
    warnings = []
    if WATCH.path in removed_paths and (w := _systemctl("stop", WATCH.name)):
        warnings.append(w)
    if w := _systemctl("daemon-reload"):
        warnings.append(w)
    return warnings
