"""What `--verbose` adds: the host files, user files and tools a command consulted, and what
each tool and the whole command took.

Recording is off until the CLI calls start(), so on an ordinary run each hook below costs one
test of a module global. The module sits below every layer, beside errors.py, so the host view,
the user-file opener and the tool runners report to it without knowing who listens; the CLI
prints the account once, on stderr, when the command ends (report()).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

# The host view imports this, so every probe does: no typing, and subprocess only once a tool
# is run (tests/cli/test_probe_imports.py).

_on = False
_started = 0.0
_views: list = []  # the host views opened (each has .label and .accessed)
_files: list[tuple[str, str]] = []  # (what the command called it, the path as given)
_tools: list[tuple[str, float, str]] = []  # (command line, seconds, how it ended)

#: A host path is listed under its first components (/sys/bus/pci/ with a count, not 900 lines
#: of device attributes); a folder with one path consulted shows that path.
_GROUP_DEPTH = {"sys": 3, "proc": 2}


def start() -> None:
    """Record from now on (the CLI calls this for --verbose)."""
    global _on, _started
    _on, _started = True, time.monotonic()
    _views.clear()
    _files.clear()
    _tools.clear()


def stop() -> None:
    """Keep nothing from now on (each command line sets its own verbosity)."""
    global _on
    _on = False


def active() -> bool:
    return _on


def host_view(view: object) -> None:
    """A host view was opened: the paths it read are listed at the end."""
    if _on:
        _views.append(view)


def user_file(what: str, path: object) -> None:
    """A file the user named (a trace, a config.json, a recording) was opened."""
    if _on:
        _files.append((what, str(path)))


def tool(argv: Sequence[object], seconds: float, ended: str) -> None:
    """Another program was run: its command line, its time and how it ended."""
    if _on:
        _tools.append((" ".join(str(a) for a in argv), seconds, ended))


def run(argv: Sequence, **kwargs: object):  # -> subprocess.CompletedProcess
    """subprocess.run, recorded as a tool consulted (its time and exit status)."""
    import subprocess

    began = time.monotonic()
    try:
        done = subprocess.run(argv, **kwargs)
    except subprocess.TimeoutExpired:
        tool(argv, time.monotonic() - began, "no answer in time")
        raise
    except OSError as exc:
        tool(argv, time.monotonic() - began, f"could not start: {exc.strerror or exc}")
        raise
    tool(argv, time.monotonic() - began, f"exit {done.returncode}")
    return done


def _group(path: str) -> str:
    parts = path.rstrip("/").split("/")
    depth = _GROUP_DEPTH.get(parts[1] if len(parts) > 1 else "", 0)
    return "/".join(parts[: depth + 1]) + "/" if depth and len(parts) > depth else path


def _paths(accessed: Iterable[str]) -> list[str]:
    """The paths consulted, a line per folder of a few levels (how many in it) or per path."""
    groups: dict[str, list[str]] = {}
    for path in accessed:
        groups.setdefault(_group(path), []).append(path)
    return [
        paths[0] if len(paths) == 1 else f"{key} ({len(paths)} paths)"
        for key, paths in sorted(groups.items())
    ]


def report() -> list[str]:
    """The account of what was consulted, one line each (empty when not recording)."""
    if not _on:
        return []
    lines = []
    seen: set[int] = set()
    for view in _views:
        if id(view) in seen:
            continue
        seen.add(id(view))
        lines.append(f"host view {view.label}: {len(view.accessed)} paths consulted")
        lines += [f"  {line}" for line in _paths(view.accessed)]
    lines += [f"file ({what}): {path}" for what, path in dict.fromkeys(_files)]
    lines += [f"ran {argv}: {seconds * 1000:.0f} ms, {ended}" for argv, seconds, ended in _tools]
    lines.append(f"took {(time.monotonic() - _started) * 1000:.0f} ms in all")
    return lines
