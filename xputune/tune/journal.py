"""The journal: every original value, on disk, before the change that overwrites it.

TuneD keeps originals in memory, so a crash loses them. Here each step's original goes to
<state dir>/journal.json (atomic replace, fsync, mode 0600) *before* the write it protects. If
the process dies anywhere, the journal names every place that may have changed, and restoring an
original that was never overwritten is harmless; so `rollback` simply replays all recorded
originals in reverse, whatever state the apply died in.

One journal holds the transactions since the host was last rolled back, oldest first: a second
apply that changes more appends to it, and rollback returns the host to where it was before the
first. A completed rollback moves the journal to history/ (kept for the record).
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

from xputune.tune.errors import JournalError
from xputune.tune.state import atomic_write, fsync_dir

SCHEMA_VERSION = 1
JOURNAL = "journal.json"
HISTORY = "history"

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

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Transaction:
        steps = [Step(**step) for step in raw.get("steps", [])]
        return cls(**{**raw, "steps": steps})


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class Journal:
    """The journal file of one state directory."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.path = os.path.join(folder, JOURNAL)
        self.host = ""
        self.transactions: list[Transaction] = []
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as fh:
                raw = json.load(fh)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise JournalError(
                f"journal {self.path} is unreadable ({exc}); inspect it and move it away "
                "before applying again"
            ) from exc
        try:
            if raw.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"schema_version {raw.get('schema_version')!r}")
            self.host = raw.get("host", "")
            self.transactions = [Transaction.from_dict(t) for t in raw["transactions"]]
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise JournalError(f"journal {self.path} has an unexpected layout ({exc})") from exc

    # -- queries ----------------------------------------------------------------------------
    @property
    def exists(self) -> bool:
        return os.path.exists(self.path)

    def active(self) -> list[Transaction]:
        """Transactions whose changes may still be on the host, oldest first."""
        return [t for t in self.transactions if t.state != ROLLED_BACK]

    def interrupted(self) -> Transaction | None:
        for txn in self.transactions:
            if txn.state == IN_PROGRESS:
                return txn
        return None

    # -- updates ----------------------------------------------------------------------------
    def begin(self, profile: str, command: list[str], host: str) -> Transaction:
        """A new transaction; it reaches the disk with its first step."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        txn = Transaction(f"{stamp}-{os.getpid()}", _now(), IN_PROGRESS, profile, command, [])
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
        data = {
            "schema_version": SCHEMA_VERSION,
            "host": self.host,
            "transactions": [
                {**asdict(t), "steps": [asdict(s) for s in t.steps]} for t in self.transactions
            ],
        }
        atomic_write(self.path, (json.dumps(data, indent=1) + "\n").encode())

    def archive(self) -> str | None:
        """Move the journal to history/ once nothing in it is active; the new path or None."""
        if self.active() or not self.exists:
            return None
        history = os.path.join(self.folder, HISTORY)
        os.makedirs(history, mode=0o700, exist_ok=True)
        dest = os.path.join(history, f"journal-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.json")
        os.replace(self.path, dest)
        fsync_dir(history)
        fsync_dir(self.folder)
        self.transactions = []
        return dest
