"""How a command suggests another: a command line that works when followed.

A suggestion that only reads the host (check, probe) works on anything the user read, so it
carries the same --root/--example. One that changes the host (apply) does not work on a
recording, which is read-only: it is worded for the host the recording was made on, and for a
copy made here first. Its own module, so a command that suggests imports no other command.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xputune.host import HostView


def same_host(root: str | None, example: str | None) -> str:
    """The --root/--example the user ran, for a suggested command to target the same host
    (a command that only reads it; one that changes it is worded by `suggested`)."""
    return (f" --root {shlex.quote(root)}" if root else "") + (
        f" --example {shlex.quote(example)}" if example else ""
    )


def suggested(words: list[str], view: HostView, root: str | None, mark: str = "") -> str:
    """`xputune WORDS`, a command that changes the host, worded to work when followed.

    The live host: the command. A folder (--root DIR): the command with --root DIR. A
    recording (--example NAME, --root FILE) is read-only: the command is for the host it was
    recorded on, and the line that runs it here first makes a copy (TarView.copy_command),
    which --root then reads. `mark` goes around each command (a backquote inside a sentence).
    """
    from xputune.host.view import TarView

    command = shlex.join(["xputune", *words])
    if isinstance(view, TarView):
        make, folder = view.copy_command()
        return (
            f"{mark}{command}{mark} on the host it was recorded on; here, on a copy: "
            f"{mark}{make} && {command} --root {folder}{mark}"
        )
    if view.live or not root:
        return f"{mark}{command}{mark}"
    return f"{mark}{command} --root {shlex.quote(root)}{mark}"
