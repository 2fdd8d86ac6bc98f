"""Turn a --root / --example choice into a host view."""

from __future__ import annotations

import os
import stat

from xputune.errors import HostError
from xputune.host.view import HOST_TOPS, TARBALL_SUFFIXES, DirView, HostView, TarView

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


def source_name(label: str) -> str:
    """How a header names a host's source: a shipped recording by its example name (its path
    inside an installed package is long and says nothing), anything else as given."""
    folder, name = os.path.split(label)
    if folder == EXAMPLES_DIR and name.endswith(EXAMPLE_SUFFIX):
        return f"example {name[: -len(EXAMPLE_SUFFIX)]}"
    return label


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
        return _dir_view(root)
    if root.endswith(TARBALL_SUFFIXES):
        return TarView(root)
    raise HostError(f"{root}: not a directory or a .tar.{{gz,bz2,xz}} recording")


def _dir_view(root: str) -> DirView:
    """The host tree in folder `root`: the folder itself, or its one top folder.

    A recording extracted as its own advice says (`tar xf rec.tar.xz -C DIR`) leaves its top
    folder in DIR, so DIR holding no sys/ and no proc/ but one folder that does is read from
    that folder, and apply under --root DIR changes that folder. The top folder must be a
    folder itself (lstat, not a link to one): a planted `top -> /` must never make a tree
    the live host, and a view that comes out live anyway is refused.
    """
    try:
        names = [n for n in os.listdir(root) if not n.startswith(".")]
    except OSError:
        return DirView(root)  # discovery names what is wrong with it
    if any(n in HOST_TOPS for n in names) or len(names) != 1:
        return DirView(root)
    inner = os.path.join(root, names[0])
    try:
        is_dir = stat.S_ISDIR(os.lstat(inner).st_mode)
        holds = is_dir and any(os.path.lexists(os.path.join(inner, n)) for n in HOST_TOPS)
    except OSError:
        holds = False
    if not holds:
        return DirView(root)
    view = DirView(inner)
    if view.live:
        raise HostError(f"{root}: its top folder {names[0]!r} leads to / (changed meanwhile?)")
    return view
