"""Where xputune keeps its own state (journal, lock, history) and how it writes it safely.

The state directory is /var/lib/xputune on the live host and <root>/var/lib/xputune under
--root, so a fixture carries its own journal and tests never touch the machine's. These are
xputune's files, not host settings: they are written through the host view's strict
primitives, walked from the root openat-style with O_NOFOLLOW, so a symlink at var, var/lib,
var/lib/xputune or any file in it is refused rather than followed out of the root. The
directory is created 0700 and, before use, must be owned by root (or, under --root, by the
invoking user) and closed to everyone else.
"""

from __future__ import annotations

import contextlib
import os
import stat

from xputune.errors import HostError, PermissionRequired
from xputune.host import HostView
from xputune.host.view import DirView, clean_tmp_at, write_replace_at

STATE_DIR = "/var/lib/xputune"
MACHINE_ID_PATHS = ("/etc/machine-id", "/var/lib/dbus/machine-id")


class StateDir(str):
    """The state directory's filesystem path, carrying the view it belongs to.

    A str, so code that only needs the path keeps working; `open()` hands out a fresh
    descriptor walked from the root without following symlinks, which every write uses.
    """

    view: DirView | None
    host_path: str
    host_id: str

    def __new__(cls, path: str, view: DirView | None = None, host_id: str = "") -> StateDir:
        obj = super().__new__(cls, path)
        obj.view = view
        obj.host_path = STATE_DIR
        obj.host_id = host_id
        return obj

    def open(self) -> int:
        return open_state_fd(self)


def open_state_fd(folder: str) -> int:
    """A directory descriptor on `folder` (a StateDir: walked from its root; a plain path:
    its last component must not be a symlink)."""
    view = getattr(folder, "view", None)
    if isinstance(view, DirView):
        return view.open_dir(STATE_DIR)
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        raise HostError(f"cannot open state directory {folder}: {exc.strerror}") from exc


def fs_path(view: HostView, host_path: str) -> str:
    """The filesystem path of a host path under the view's root (writable views only)."""
    root = getattr(view, "root", None)
    if not isinstance(root, str) or not view.writable():
        raise HostError(f"{view.label} is read-only; extract it to a directory to change it")
    return root.rstrip("/") + host_path  # the live root "/" adds nothing


def writable_dir_view(view: HostView) -> DirView:
    if not isinstance(view, DirView) or not view.writable():
        raise HostError(f"{view.label} is read-only; extract it to a directory to change it")
    return view


def host_id(view: HostView) -> str:
    """The host's identity for the journal: its machine-id (a recording's own under --root)."""
    reader = getattr(view, "read_strict", None)
    for path in MACHINE_ID_PATHS:
        with contextlib.suppress(HostError, OSError, ValueError):
            data = reader(path, 4096) if reader else view.read_bytes(path)
            text = (data or b"").decode("ascii", "replace").strip()
            if text:
                return text[:64]
    return ""


def allowed_owner(view: DirView) -> set[int]:
    """Who may own the state dir: root; under --root also the invoking user."""
    return {0} if view.live else {0, os.getuid()}


def state_dir(view: HostView, create: bool = True) -> StateDir:
    """The state directory, created 0700 when `create`, checked before use.

    Refuses (HostError, one line) a symlink anywhere on var/lib/xputune, a state directory
    owned by someone else, or one others can write to. Without `create`, a missing directory
    is returned as is (nothing to roll back).
    """
    dview = writable_dir_view(view)
    path = fs_path(view, STATE_DIR)
    ident = host_id(view)
    try:
        if create:
            dview.makedirs(os.path.dirname(STATE_DIR), 0o755)
            fd = dview.open_dir(STATE_DIR, create=True, mode=0o700)
        else:
            try:
                fd = dview.open_dir(STATE_DIR)
            except (FileNotFoundError, NotADirectoryError):
                return StateDir(path, dview, ident)
    except HostError:
        raise
    except PermissionError:
        raise cannot_write(view, f"cannot create state directory {path}") from None
    except OSError as exc:
        raise HostError(f"cannot create state directory {path}: {exc.strerror}") from exc
    try:
        check_state_fd(fd, path, allowed_owner(dview))
    finally:
        os.close(fd)
    return StateDir(path, dview, ident)


def cannot_write(view: HostView, what: str) -> PermissionRequired:
    """The one line for a change this user may not make: the exit table's permission status
    (4), not a usage error (2) or a failed step (8), since being root, or owning the tree
    given with --root, is the whole fix."""
    fix = (
        "run it as root, e.g. with sudo"
        if view.live
        else "this user may not write the tree given with --root; run it as root, or on a "
        "copy of this user's own (`mkdir box && tar xf RECORDING -C box`)"
    )
    return PermissionRequired(f"{what}: permission denied: {fix} (nothing was changed)")


def needs_root(path: str) -> PermissionRequired:
    """The one line for a state file this user may not read."""
    return PermissionRequired(
        f"cannot read {path}: permission denied (xputune's state directory is root's and "
        "mode 0700): run it as root, e.g. with sudo (nothing was changed)"
    )


def readable_state_dir(view: HostView) -> StateDir | None:
    """The state directory for a reader that takes no lock and writes nothing (a dry-run
    rollback, `xputune status`, a watch choosing its profile); None when there is none.

    Nothing is created and nothing is fixed up (state_dir closes a directory others may read;
    a reader leaves it as it is). A recording (not a directory tree) has none. Refused, one
    line each: a directory this user may not enter (PermissionRequired: the live one is
    root's, 0700), a symlink on the way, one owned by someone else or writable by others.
    """
    if not isinstance(view, DirView):
        return None
    path = view.root.rstrip("/") + STATE_DIR
    try:
        fd = view.open_dir(STATE_DIR)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except PermissionError:
        raise needs_root(path) from None
    except OSError as exc:
        raise HostError(f"cannot open state directory {path}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    owners = allowed_owner(view)
    if st.st_uid not in owners:
        raise HostError(
            f"state directory {path} is owned by uid {st.st_uid}, not "
            f"{' or '.join(f'uid {u}' for u in sorted(owners))}; refusing to read it"
        )
    if stat.S_IMODE(st.st_mode) & 0o022:
        raise HostError(
            f"state directory {path} is writable by others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); refusing to read it"
        )
    return StateDir(path, view, host_id(view))


def check_state_fd(fd: int, path: str, owners: set[int]) -> None:
    st = os.fstat(fd)
    if st.st_uid not in owners:
        raise HostError(
            f"state directory {path} is owned by uid {st.st_uid}, not "
            f"{' or '.join(f'uid {u}' for u in sorted(owners))}; refusing to use it"
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        if stat.S_IMODE(st.st_mode) & 0o022:
            raise HostError(
                f"state directory {path} is writable by others "
                f"(mode {stat.S_IMODE(st.st_mode):04o}); refusing to use it"
            )
        os.fchmod(fd, 0o700)  # ours and only readable by others: close it


def clean_tmp(folder: str, names: tuple[str, ...]) -> list[str]:
    """Remove temporary files a killed writer left in the state dir (lock held)."""
    fd = open_state_fd(folder)
    try:
        return clean_tmp_at(fd, names)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file.

    Temp file O_EXCL in the same directory, fsync, rename over, fsync the directory. The
    directory itself must not be a symlink. The mode is set explicitly, whatever the umask.
    """
    folder = os.path.dirname(path) or "."
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        write_replace_at(fd, os.path.basename(path), data, mode)
    finally:
        os.close(fd)
