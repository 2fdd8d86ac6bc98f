"""The journal: every original value, on disk, before the change that overwrites it.

TuneD keeps originals in memory, so a crash loses them. Here each step's original goes to
<state dir>/journal.json (atomic replace, fsync, mode 0600) *before* the write it protects. If
the process dies anywhere, the journal names every place that may have changed, and restoring an
original that was never overwritten is harmless; so `rollback` simply replays all recorded
originals in reverse, whatever state the apply died in.

One journal holds the transactions since the host was last rolled back, oldest first: a second
apply that changes more appends to it, and rollback returns the host to where it was before the
first. A completed rollback moves the journal to history/ (kept for the record).

The journal is data, not commands. It carries a SHA-256 checksum over its transactions and the
identity of the host that wrote it (its machine-id, a recording's own under --root); a journal
whose checksum does not match, or that was written on another host, is refused with one line
before anything runs. Its steps are then validated against the knobs that own them
(tune/validate.py) before rollback executes any of them. Every file here is opened relative to
the state directory's descriptor, never through a symlink, and temporary files a killed writer
left behind are removed when the journal is next opened (always under the state lock).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import json
import os
import stat
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from xputune import __version__
from xputune.errors import HostError
from xputune.host.view import DEFAULT_READ_CAP, clean_tmp_at, write_replace_at
from xputune.tune.errors import JournalError
from xputune.tune.state import needs_root, open_state_fd

SCHEMA_VERSION = 1
JOURNAL = "journal.json"
#: Largest journal read (a transaction is a few KiB; raw originals are small sysfs files).
MAX_JOURNAL = DEFAULT_READ_CAP
HISTORY = "history"
#: Present while the host is rolled back and not applied since (see mark_rolled_back).
ROLLED_BACK_MARK = "rolled-back"

#: Commands whose journaled words after the verb are the selection flags they applied.
SELECTING_VERBS = ("apply", "watch")

IN_PROGRESS = "in-progress"
APPLIED = "applied"
ROLLED_BACK = "rolled-back"


@dataclass
class Step:
    """One change as journaled: enough to restore it with no profile and no topology."""

    n: int
    knob: str
    kind: str
    target: dict[str, Any]
    label: str
    original: Any
    new: Any
    original_raw: str | None = None  # base64 of the whole file (fixture roots only)
    done: bool = False
    original_text: str = ""  # the original as people read it ("off", "huge=never")

    def raw_bytes(self) -> bytes | None:
        return None if self.original_raw is None else base64.b64decode(self.original_raw)


def encode_raw(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass
class Transaction:
    id: str
    started: str
    state: str
    profile: str
    command: list[str]
    steps: list[Step]
    finished: str | None = None
    error: str | None = None
    #: The profile's platform_registers this apply could write (what validation allows).
    platform_registers: list[dict[str, Any]] = field(default_factory=list)
    #: The xputune version that wrote the transaction (None: a journal from before it was
    #: recorded; `xputune status` says "unknown").
    version: str | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Transaction:
        steps = [Step(**step) for step in raw.get("steps", [])]
        return cls(**{**raw, "steps": steps})

    def selection_args(self) -> list[str] | None:
        """The selection flags this transaction applied (engine.Selection.persist_args), read
        from its command: `apply ARGS` or, for a watch's re-apply, `watch ARGS`. None for a
        command of another shape (written by a test, or by hand)."""
        command = self.command
        if not isinstance(command, list) or not command or command[0] not in SELECTING_VERBS:
            return None
        if not all(isinstance(word, str) for word in command):
            return None
        return list(command[1:])


def utc_stamp(when: float) -> str:
    """A moment as every command says it: ISO 8601 in UTC with Z (2026-12-05T13:13:01Z).

    One form for the journal, status, rollback and watch: a journal time printed in local
    time with its offset (+0000, +0800) beside a rollback mark in Z read as two clocks."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def utc_text(stamp: str) -> str:
    """A journaled time in utc_stamp's form. Journals written before it kept local time with
    its offset (2026-12-05T21:13:01+0800): converted; anything else is shown as it is."""
    from datetime import datetime

    try:
        return utc_stamp(datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z").timestamp())
    except (ValueError, OverflowError, OSError):
        return stamp


def _now() -> str:
    return utc_stamp(time.time())


class Journal:
    """The journal file of one state directory."""

    def __init__(self, folder: str, clean: bool = True) -> None:
        """Load the journal of `folder`. `clean` removes temporary files a killed writer left,
        which only a holder of the state lock may do; a reader without the lock (a dry-run
        rollback, `xputune status`, the watch choosing its profile) passes False."""
        self.folder = folder
        self._clean = clean
        self.path = os.path.join(folder, JOURNAL)
        self.host = ""
        #: The machine-id the journal belongs to (kept from the file, else this host's).
        self.host_id: str = getattr(folder, "host_id", "") or ""
        self.transactions: list[Transaction] = []
        self._load()

    def _load(self) -> None:
        try:
            dir_fd = open_state_fd(self.folder)
        except FileNotFoundError:
            return
        except PermissionError:
            raise needs_root(self.folder) from None
        except HostError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):
                return
            if isinstance(exc.__cause__, PermissionError):
                raise needs_root(self.folder) from None
            raise JournalError(str(exc)) from exc
        try:
            if self._clean:
                clean_tmp_at(dir_fd, (JOURNAL,))
            data = _read_at(dir_fd, JOURNAL, self.path)
        except PermissionError:
            raise needs_root(self.path) from None
        except OSError as exc:
            raise JournalError(
                f"journal {self.path} is unreadable ({exc.strerror or exc}); inspect it and "
                "move it away before applying again"
            ) from exc
        finally:
            os.close(dir_fd)
        if data is None:
            return
        try:
            raw = json.loads(data)
        except ValueError as exc:
            raise JournalError(
                f"journal {self.path} is unreadable ({exc}); inspect it and move it away "
                "before applying again"
            ) from exc
        try:
            if raw.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"schema_version {raw.get('schema_version')!r}")
            self.host = raw.get("host", "")
            transactions = raw["transactions"]
            if not isinstance(transactions, list):
                raise TypeError("transactions is not a list")
            self.transactions = [Transaction.from_dict(t) for t in transactions]
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise JournalError(f"journal {self.path} has an unexpected layout ({exc})") from exc
        recorded_id = raw.get("host_id", "")
        if raw.get("checksum") != checksum(transactions, recorded_id):
            raise JournalError(
                f"journal {self.path}: checksum does not match its steps (altered or damaged); "
                "refusing to act on it (nothing was changed). Inspect it, restore by hand, and "
                "move it away"
            )
        current = getattr(self.folder, "host_id", None)
        if current is not None and recorded_id != current:
            raise JournalError(
                f"journal {self.path} was written on host {recorded_id or 'unknown'!r}, this is "
                f"{current or 'unknown'!r}; refusing to act on it (nothing was changed)"
            )
        self.host_id = recorded_id

    # -- queries ----------------------------------------------------------------------------
    @property
    def exists(self) -> bool:
        return os.path.lexists(self.path)

    def active(self) -> list[Transaction]:
        """Transactions whose changes may still be on the host, oldest first."""
        return [t for t in self.transactions if t.state != ROLLED_BACK]

    def interrupted(self) -> Transaction | None:
        for txn in self.transactions:
            if txn.state == IN_PROGRESS:
                return txn
        return None

    def last_applied(self) -> Transaction | None:
        """The newest finished transaction whose selection is known (an apply, or a watch's
        re-apply): what the host was last set to and is to be held at; None when there is
        none (no journal, rolled back, or only transactions of another shape)."""
        for txn in reversed(self.transactions):
            if txn.state == APPLIED and txn.selection_args() is not None:
                return txn
        return None

    # -- updates ----------------------------------------------------------------------------
    def begin(self, profile: str, command: list[str], host: str) -> Transaction:
        """A new transaction; it reaches the disk with its first step."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        txn = Transaction(f"{stamp}-{os.getpid()}", _now(), IN_PROGRESS, profile, command, [])
        txn.version = __version__
        self.host = self.host or host
        self.transactions.append(txn)
        return txn

    def record(self, txn: Transaction, step: Step) -> None:
        """Persist a step's original; returns only once it is on disk."""
        txn.steps.append(step)
        self.save()

    def finish(self, txn: Transaction, state: str, error: str | None = None) -> None:
        txn.state = state
        txn.finished = _now()
        txn.error = error
        if txn.steps:
            self.save()
        else:
            self.transactions.remove(txn)

    def save(self) -> None:
        transactions = [
            {**asdict(t), "steps": [asdict(s) for s in t.steps]} for t in self.transactions
        ]
        data = {
            "schema_version": SCHEMA_VERSION,
            "host": self.host,
            "host_id": self.host_id,
            "checksum": checksum(transactions, self.host_id),
            "transactions": transactions,
        }
        dir_fd = open_state_fd(self.folder)
        try:
            write_replace_at(dir_fd, JOURNAL, (json.dumps(data, indent=1) + "\n").encode(), 0o600)
        finally:
            os.close(dir_fd)

    def archive(self) -> str | None:
        """Move the journal to history/ once nothing in it is active; the new path or None."""
        if self.active() or not self.exists:
            return None
        name = f"journal-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.json"
        dir_fd = open_state_fd(self.folder)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(HISTORY, 0o700, dir_fd=dir_fd)
            hist_fd = os.open(
                HISTORY, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
            )
            try:
                if stat.S_IMODE(os.fstat(hist_fd).st_mode) != 0o700:
                    os.fchmod(hist_fd, 0o700)
                name = _unused_name(hist_fd, name)
                os.replace(JOURNAL, name, src_dir_fd=dir_fd, dst_dir_fd=hist_fd)
                os.fsync(hist_fd)
            finally:
                os.close(hist_fd)
            os.fsync(dir_fd)
        except OSError as exc:
            raise JournalError(
                f"cannot move {self.path} to {HISTORY}/: {exc.strerror or exc} (is "
                f"{HISTORY} a symlink?)"
            ) from exc
        finally:
            os.close(dir_fd)
        self.transactions = []
        return os.path.join(self.folder, HISTORY, name)


def _unused_name(dir_fd: int, name: str) -> str:
    """NAME, or NAME with -2, -3, ... before .json when taken: one process (a watch) can
    archive twice within a second, and a history file is never replaced. The state lock
    is held, so nobody else names one meanwhile."""
    stem, n = name.removesuffix(".json"), 1
    while True:
        try:
            os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return name
        n += 1
        name = f"{stem}-{n}.json"


def mark_rolled_back(folder: str, when: float | None = None) -> None:
    """Note, under the state lock, that a rollback returned the host to its originals.

    A watch agent (`xputune watch`) would otherwise see the restored originals as drift and
    re-apply them, undoing the rollback; while the mark is there it reports drift and changes
    nothing. The next apply clears it (clear_rolled_back), and the watch resumes.
    """
    stamp = time.time() if when is None else when
    dir_fd = open_state_fd(folder)
    try:
        clean_tmp_at(dir_fd, (ROLLED_BACK_MARK,))
        write_replace_at(dir_fd, ROLLED_BACK_MARK, f"{stamp:.3f}\n".encode(), 0o600)
    finally:
        os.close(dir_fd)


def rolled_back_at(folder: str) -> float | None:
    """When the host was rolled back, if it has not been applied since; None otherwise.

    A mark whose content is not a time still counts (as 0.0): it was put there by a rollback,
    and reading it must never turn a paused watch back on.
    """
    try:
        dir_fd = open_state_fd(folder)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except HostError as exc:
        if isinstance(exc.__cause__, FileNotFoundError | NotADirectoryError):
            return None
        raise
    try:
        try:
            os.stat(ROLLED_BACK_MARK, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        try:
            data = _read_at(dir_fd, ROLLED_BACK_MARK, os.path.join(folder, ROLLED_BACK_MARK))
            return float((data or b"").decode("ascii", "replace").strip())
        except (OSError, JournalError, ValueError):
            return 0.0
    finally:
        os.close(dir_fd)


def clear_rolled_back(folder: str) -> None:
    """Drop the rollback mark (lock held): an apply has tuned the host again."""
    dir_fd = open_state_fd(folder)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(ROLLED_BACK_MARK, dir_fd=dir_fd)
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def checksum(transactions: Any, host_id: str) -> str:
    """SHA-256 over the transactions (canonical JSON) and the host identity."""
    blob = json.dumps(
        {"host_id": host_id, "transactions": transactions}, sort_keys=True, separators=(",", ":")
    )
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


def _read_at(dir_fd: int, name: str, shown: str) -> bytes | None:
    """A regular file in dir_fd, not followed if a symlink; None when absent."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            raise JournalError(
                f"journal {shown} is a symlink or special file; refusing it"
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise JournalError(f"journal {shown} is not a regular file; refusing it")
        if st.st_size > MAX_JOURNAL:
            raise JournalError(f"journal {shown} is larger than {MAX_JOURNAL} bytes; refusing it")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            if sum(map(len, chunks)) > MAX_JOURNAL:
                raise JournalError(f"journal {shown} is larger than {MAX_JOURNAL} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)
