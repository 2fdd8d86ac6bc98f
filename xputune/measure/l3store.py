"""The L3 store between a sweep's sizes: every size starts with an empty one, or the sweep says
why not.

A sweep starts a server per L2 size. L1 and L2 end with their server; an L3 store does not: a
file store's folder stays on disk, and a Mooncake pool keeps what its donors' segments hold
(`xputune launch l3-donors`) whatever the servers that filled it do. A later size's server
would find in L3 what an earlier size stored there, and count it as its own hits: the
comparison between sizes would be wrong. So, by backend (the dry run's
--hicache-storage-backend, with HiCache on):

  file    each size gets a new empty folder of its own (0700, a unique name), inside the
          store's folder: the launcher's --l3-dir (SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR),
          so its pages go to the disk the user chose, or the sweep's own private folder when
          none is set. The size's server is given that folder; once it has stopped, the pages
          written are counted and the folder is removed. Nothing else in the store's folder is
          read, cleared or removed (SGLang's own clear of a file store deletes every file in
          the folder, the user's too).
  mooncake, when each step starts its own master (a cluster sweep with no --l3-master):
          new with every step, so empty.
  others  (mooncake and every backend the sweep cannot give a store of its own) refused
          before anything starts, unless the user chooses: --clear-l3 empties the store
          through each size's server once it is ready, before its replay (POST
          /hicache/storage-backend/clear, in SGLang 0.5.20 through 0.5.23), which empties a
          shared pool for every instance using it; --keep-l3 leaves it as it is, and the
          result says that later sizes may find what earlier ones stored.

--keep-l3 with a file store uses the folder as configured, for every size alike; --clear-l3
with a file store changes nothing (each size's folder is new and empty already).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xputune.errors import XputuneError
from xputune.userfiles import printable

if TYPE_CHECKING:
    from xputune.measure.client import Endpoint
    from xputune.measure.serverproc import Command

FILE_DIR = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
SGLANG_FILE_DEFAULT = "/tmp/hicache"  # HiCacheFile's folder when the variable is not set
CLEAR = "/hicache/storage-backend/clear"
CLEAR_TIMEOUT = 120.0  # seconds: a store of many pages takes a while to empty
PAGES_MAX = 10_000_000  # files counted in a size's folder, at most

OWN_FOLDER = "own_folder"
#: A Mooncake store whose master a cluster run starts itself: new, so empty, at every run.
OWN_MASTER = "own_master"
CLEARED = "cleared"
KEPT = "kept"


@dataclass(frozen=True)
class Policy:
    """What the sweep does with the L3 store between sizes."""

    backend: str
    between_sizes: str  # OWN_FOLDER, CLEARED or KEPT
    folder: str | None  # file: where each size's folder is made (OWN_FOLDER), or the store's
    folder_from: str | None  # "launcher", "environment", "sweep" or "sglang default"

    def document(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "between_sizes": self.between_sizes,
            "folder": self.folder,
            "folder_from": self.folder_from,
        }


def backend_of(command: Command) -> str | None:
    """The storage backend the dry run's command gives a HiCache server (None: no L3)."""
    from xputune.launch.sglang import user_value

    if user_value(command.flags, "--enable-hierarchical-cache") is None:
        return None
    value = user_value(command.flags, "--hicache-storage-backend")
    return value[-1] if value else None


def policy(
    command: Command, *, clear: bool, keep: bool, own: str, master_in_set: bool = False
) -> Policy | None:
    """The policy for this sweep's L3 (None: it has none); XputuneError for a choice that
    cannot be made, before anything starts. `own`: the sweep's private folder;
    `master_in_set`: each step starts its own Mooncake master (a cluster with no
    --l3-master), so its store is new and empty whatever --clear-l3 or --keep-l3 say."""
    if clear and keep:
        raise XputuneError("--clear-l3 and --keep-l3 contradict each other: give one")
    backend = backend_of(command)
    if backend is None:
        if clear or keep:
            flag = "--clear-l3" if clear else "--keep-l3"
            raise XputuneError(
                f"{flag}: this sweep's servers have no L3 tier (--launch-opt '--l3 file "
                "--l3-dir DIR' or '--l3 mooncake ...' adds one)"
            )
        return None
    if backend == "file":
        folder, source = command.env.get(FILE_DIR), "launcher"
        if not folder and os.environ.get(FILE_DIR):
            folder, source = os.environ[FILE_DIR], "environment"
        if keep:
            return Policy(backend, KEPT, folder or SGLANG_FILE_DEFAULT,
                          source if folder else "sglang default")  # fmt: skip
        return Policy(backend, OWN_FOLDER, folder or own, source if folder else "sweep")
    if backend == "mooncake" and master_in_set:
        return Policy(backend, OWN_MASTER, None, None)
    if keep:
        return Policy(backend, KEPT, None, None)
    if clear:
        return Policy(backend, CLEARED, None, None)
    raise XputuneError(
        f"sweep with an L3 tier on {printable(backend)[:40]}: its store outlives each size's "
        "server, so later sizes would count what earlier ones stored as their own L3 hits. "
        "Give --clear-l3 to empty it before each size (a shared pool is emptied for every "
        "instance using it), or --keep-l3 to measure with what it holds (said in the result)"
    )


@dataclass
class StepStore:
    """One size's L3: its own folder (a file store), whether it was emptied, what it holds."""

    folder: str | None = None
    cleared: bool = False
    pages: int | None = None  # files in its own folder once its server stopped
    removed: bool = False
    note: str | None = None

    def document(self, policy: Policy) -> dict[str, Any]:
        return {
            **policy.document(),
            "folder": self.folder or policy.folder,
            "cleared": self.cleared,
            "pages_written": self.pages,
            "removed": self.removed,
            "note": self.note,
        }


def prepare(policy: Policy, index: int, label: str) -> tuple[StepStore, dict[str, str]]:
    """A size's store and what its server's environment gets: for a file store of its own, a
    new empty folder (0700, a unique name, never one that was there)."""
    if policy.between_sizes != OWN_FOLDER:
        return StepStore(), {}
    assert policy.folder is not None
    try:
        folder = tempfile.mkdtemp(prefix=f"xputune-sweep-l3-{index}-{label}-", dir=policy.folder)
    except OSError as exc:
        raise XputuneError(
            f"cannot make the L3 folder of size {label} in {printable(policy.folder)}: "
            f"{printable(exc.strerror or str(exc))}"
        ) from None
    return StepStore(folder=folder), {FILE_DIR: folder}


def clear(endpoint: Endpoint, store: StepStore) -> None:
    """Empty the store through a ready server (POST /hicache/storage-backend/clear);
    ServerError, with what the server said, when it does not."""
    from xputune.measure.client import post_body

    post_body(endpoint, CLEAR, CLEAR_TIMEOUT)
    store.cleared = True


def finish(store: StepStore) -> None:
    """Once the size's server has stopped: count the pages in its own folder, remove it."""
    folder = store.folder
    if folder is None:
        return
    try:
        with os.scandir(folder) as entries:
            count = 0
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    count += 1
                    if count >= PAGES_MAX:
                        break
        store.pages = count
    except OSError as exc:
        store.note = f"its pages could not be counted: {printable(exc.strerror or str(exc))}"
    try:
        shutil.rmtree(folder)  # by descriptors, links not followed (rmtree.avoids_symlink_attacks)
        store.removed = True
    except OSError as exc:
        store.note = f"its folder could not be removed: {printable(exc.strerror or str(exc))}"
