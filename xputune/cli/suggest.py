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


def suggestion(words: list[str], view: HostView, root: str | None) -> tuple[str, str | None]:
    """`xputune WORDS`, a command that changes the host, as (the command, None) or, for a
    read-only recording, (the command for the host it was recorded on, the line that runs it
    here on a copy first: TarView.copy_command). A folder (--root DIR) gets --root DIR."""
    from xputune.host.view import TarView

    command = shlex.join(["xputune", *words])
    if isinstance(view, TarView):
        make, folder = view.copy_command()
        return command, f"{make} && {command} --root {folder}"
    if view.live or not root:
        return command, None
    return f"{command} --root {shlex.quote(root)}", None


def suggested(words: list[str], view: HostView, root: str | None, mark: str = "") -> str:
    """suggestion() as one sentence; `mark` goes around each command (a backquote)."""
    command, on_copy = suggestion(words, view, root)
    if on_copy is None:
        return f"{mark}{command}{mark}"
    here = f"here, on a copy: {mark}{on_copy}{mark}"
    return f"{mark}{command}{mark} on the host it was recorded on; {here}"
