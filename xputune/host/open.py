"""Turn a --root / --example choice into a host view."""

from __future__ import annotations

import os

from xputune.errors import HostError
from xputune.host.view import DirView, HostView, TarView

TARBALL_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
EXAMPLE_SUFFIX = ".tar.xz"


EXAMPLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def example_names() -> list[str]:
    """Names of the recordings shipped inside the package (`xputune examples`)."""
    return sorted(
        name[: -len(EXAMPLE_SUFFIX)]
        for name in os.listdir(EXAMPLES_DIR)
        if name.endswith(EXAMPLE_SUFFIX)
    )


def example_path(name: str) -> str:
    path = os.path.join(EXAMPLES_DIR, f"{name}{EXAMPLE_SUFFIX}")
    if "/" in name or not os.path.isfile(path):
        known = ", ".join(example_names()) or "none"
        raise HostError(f"no example named {name!r} (known: {known})")
    return path


def open_host(root: str | None = None, example: str | None = None) -> HostView:
    """The live host when neither is given; a directory or tarball for --root; an example.

    An empty root or example is refused, never read as "not given": a script's unset
    variable (`--root "$TREE"`) must not turn into the live host, which apply would change.
    """
    for flag, value in (("--root", root), ("--example", example)):
        if value == "":
            raise HostError(
                f"{flag}: empty value (an unset variable?); give one or leave {flag} out"
            )
    if root and example:
        raise HostError("give --root or --example, not both")
    if example:
        return TarView(example_path(example))
    if not root or root == "/":
        return DirView("/")
    if not os.path.exists(root):
        raise HostError(f"{root}: no such file or directory")
    if os.path.isdir(root):
        return DirView(root)
    if root.endswith(TARBALL_SUFFIXES):
        return TarView(root)
    raise HostError(f"{root}: not a directory or a .tar.{{gz,bz2,xz}} recording")
