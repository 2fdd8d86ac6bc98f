"""Ask SGLang's interpreter what it has, before anything starts.

`launch sglang` runs `PYTHON -m sglang.launch_server`, where PYTHON is --python, else
$XPUTUNE_SGLANG_PYTHON, else the interpreter running xputune: SGLang may live in another
environment than xputune (a tool venv beside SGLang's). A child process of PYTHON answers in one
JSON line:

  - sglang's version, from its metadata (nothing of sglang is imported);
  - whether the entry point `xputune` of group sglang.srt.plugins is visible there (how
    SGLang finds the plugin), whether it loads (xputune.sglang.plugin imports neither sglang
    nor torch) and which xputune version it comes from;
  - whether the `mooncake` package is there (the L3 tier's store).

Only where launch/releases.py does not know the release (an untested one) does a second child
import sglang.srt.server_args and report its parser's option strings and storage backends
(about 5 s). The first child is started early (`start`) and read when its answer is needed
(`Pending.result`), so it runs beside the probe and the plan.

Bounds: each child has a deadline and is killed past it; stdin is /dev/null; stdout is read up
to MAX_ANSWER bytes and the answer is the last line that carries the marker; of stderr only
the last lines are kept, for the reason when there is no answer.
"""

from __future__ import annotations

import json
import os
import selectors
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from xputune import trail
from xputune.launch.releases import NEWEST, RELEASES, SUPPORTED_RANGE, Release, from_parser
from xputune.launch.releases import outside_range as _outside_range
from xputune.launch.sglang import LaunchError

PYTHON_VARIABLE = "XPUTUNE_SGLANG_PYTHON"
PROBE_DEADLINE = 30.0  # seconds: metadata and one small import
PARSER_DEADLINE = 120.0  # seconds: sglang.srt.server_args imports much of SGLang
MAX_ANSWER = 1 << 20  # bytes of stdout read from a child
MAX_REASON = 2048  # bytes of stderr kept
MARK = "xputune-preflight "
GROUP = "sglang.srt.plugins"

# Runs in SGLang's interpreter (any Python 3.8+), so it uses nothing of xputune but the plugin's
# entry point. argv[1]: "probe" or "parser".
SCRIPT = r"""
import json, sys
out = {}
def why(exc):
    return (type(exc).__name__ + ": " + str(exc)).replace("\n", " ")[:300]
try:
    if sys.argv[1] == "probe":
        import importlib.util
        from importlib import metadata
        try:
            out["sglang"] = metadata.version("sglang")
        except metadata.PackageNotFoundError:
            out["sglang"] = None
        eps = metadata.entry_points()
        eps = eps.select(group=GROUP) if hasattr(eps, "select") else eps.get(GROUP, ())
        ours = [e for e in eps if e.name == "xputune"]
        out["plugin"] = ours[0].value if ours else None
        if ours:
            try:
                ours[0].load()
                out["xputune"] = str(getattr(sys.modules.get("xputune"), "__version__", ""))
            except BaseException as exc:
                out["plugin_error"] = why(exc)
        out["mooncake"] = importlib.util.find_spec("mooncake") is not None
    else:
        import argparse, warnings
        warnings.simplefilter("ignore")
        from sglang.srt.server_args import ServerArgs
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        options, backends = set(), []
        for action in parser._actions:
            options.update(action.option_strings)
            if "--hicache-storage-backend" in action.option_strings and action.choices:
                backends = [str(c) for c in action.choices]
        out["options"] = sorted(options)
        out["storage_backends"] = backends
except BaseException as exc:
    out["error"] = why(exc)
sys.stdout.write("\n" + MARK + json.dumps(out) + "\n")
sys.stdout.flush()
""".replace("GROUP", repr(GROUP)).replace("MARK", repr(MARK))


def interpreter(python: str | None) -> str:
    """The interpreter SGLang runs in: --python, else $XPUTUNE_SGLANG_PYTHON, else this one.

    A name without a slash is looked up on PATH; the result is absolute but not resolved (a
    venv's python is a link out of the venv, and the venv is what matters).
    """
    given, where = python, "--python"
    if given is None:
        given, where = os.environ.get(PYTHON_VARIABLE), PYTHON_VARIABLE
    if given is None:
        return sys.executable
    if not given:
        raise LaunchError(f"{where} is empty: name SGLang's interpreter, or leave it unset")
    found = given if "/" in given else shutil.which(given)
    if found is None:
        raise LaunchError(f"{where} {given}: not found on PATH")
    path = os.path.abspath(found)
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise LaunchError(f"{where} {shlex.quote(given)}: not an executable file")
    return path


@dataclass(frozen=True)
class Installed:
    """What SGLang's interpreter said it has."""

    python: str
    sglang: str | None = None  # the version; None: not installed there
    plugin: str | None = None  # the entry point's value, when visible
    plugin_error: str | None = None  # why it did not load
    xputune: str | None = None  # the xputune version the plugin comes from
    mooncake: bool | None = None
    error: str | None = None  # why the interpreter gave no answer
    #: An untested release: its parser's option strings and storage backends, or why not.
    parser: dict[str, Any] = field(default_factory=dict)


def _quoted(python: str) -> str:
    return shlex.quote(python)


class Pending:
    """A preflight under way; result() waits for its answer (once)."""

    def __init__(self, python: str) -> None:
        self.python = python
        self._answer: Installed | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._started = time.monotonic()
        try:
            self._proc = _spawn(python, "probe")
        except OSError as exc:
            self._answer = Installed(python, error=f"cannot run it: {exc.strerror or exc}")

    def result(self) -> Installed:
        if self._answer is None:
            assert self._proc is not None
            proc, self._proc = self._proc, None
            doc, error = _collect(proc, self._started + PROBE_DEADLINE)
            ended = error or f"exit {proc.returncode}"
            trail.tool([self.python, "-c", "PREFLIGHT"], time.monotonic() - self._started, ended)
            self._answer = _installed(self.python, doc, error)
        return self._answer

    def __del__(self) -> None:
        """A preflight nobody read (the launch stopped first): its child is ended, not left."""
        proc, self._proc = getattr(self, "_proc", None), None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                _kill(proc)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        except Exception:  # at interpreter shutdown there is nothing left to do
            pass


def start(python: str | None) -> Pending:
    """Start asking the interpreter of `python` (see interpreter()) what it has."""
    return Pending(interpreter(python))


def ask(python: str | None) -> Installed:
    """start(python).result(): the answer, waited for."""
    return start(python).result()


def _spawn(python: str, mode: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [python, "-c", SCRIPT, mode],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip


def _collect(proc: subprocess.Popen[bytes], deadline: float) -> tuple[dict | None, str | None]:
    """(the answer, None) or (None, why there is none); the child is gone afterwards."""
    out = bytearray()
    err = bytearray()
    problem = None
    with selectors.DefaultSelector() as sel:
        assert proc.stdout is not None and proc.stderr is not None
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                problem = "no answer within the deadline"
                break
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                key.data.extend(chunk)
                if key.data is err and len(err) > MAX_REASON:
                    del err[: len(err) - MAX_REASON]
            if len(out) > MAX_ANSWER:
                problem = f"it wrote more than {MAX_ANSWER // 1024} KiB"
                break
    if problem is not None:
        _kill(proc)
    else:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill(proc)
            problem = "no answer within the deadline"
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    if problem is not None:
        return None, problem
    for line in reversed(out.decode("utf-8", "replace").splitlines()):
        if line.startswith(MARK):
            try:
                doc = json.loads(line[len(MARK) :])
            except ValueError:
                break
            if isinstance(doc, dict):
                return doc, None
            break
    tail = [ln.strip() for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
    reason = f"exit status {proc.returncode}" if proc.returncode else "no answer"
    return None, reason + (f": {tail[-1][:200]}" if tail else "")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _text(value: object, limit: int = 300) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def _installed(python: str, doc: dict | None, error: str | None) -> Installed:
    if doc is None:
        return Installed(python, error=error)
    if doc.get("error"):
        return Installed(python, error=_text(doc.get("error")) or "no answer")
    mooncake = doc.get("mooncake")
    found = Installed(
        python,
        sglang=_text(doc.get("sglang"), 64),
        plugin=_text(doc.get("plugin")),
        plugin_error=_text(doc.get("plugin_error")),
        xputune=_text(doc.get("xputune"), 64),
        mooncake=mooncake if isinstance(mooncake, bool) else None,
    )
    if found.sglang is not None and found.sglang not in RELEASES:
        found = _with_parser(found)
    return found


def _with_parser(found: Installed) -> Installed:
    """An untested release: its own parser's option strings (a second child, ~5 s)."""
    try:
        proc = _spawn(found.python, "parser")
    except OSError as exc:
        return _replace_parser(found, {"error": f"cannot run it: {exc.strerror or exc}"})
    doc, error = _collect(proc, time.monotonic() + PARSER_DEADLINE)
    if doc is None or doc.get("error"):
        why = error if doc is None else _text(doc.get("error")) or "no answer"
        return _replace_parser(found, {"error": why})
    options = doc.get("options")
    backends = doc.get("storage_backends")
    if not _strings(options) or not _strings(backends, empty=True):
        return _replace_parser(found, {"error": "its parser's answer is not a list of options"})
    return _replace_parser(found, {"options": options, "storage_backends": backends})


def _strings(value: object, empty: bool = False) -> bool:
    return (
        isinstance(value, list)
        and (empty or bool(value))
        and all(isinstance(v, str) and len(v) < 200 for v in value)
    )


def _replace_parser(found: Installed, parser: dict[str, Any]) -> Installed:
    from dataclasses import replace

    return replace(found, parser=parser)


# --------------------------------------------------------------------- what the answer means


def release_of(found: Installed) -> tuple[Release, list[str]]:
    """The release to write flags for, and the lines that say how it was chosen."""
    python = _quoted(found.python)
    if found.sglang is None:
        return RELEASES[NEWEST], [
            f"note: no sglang in {python}: the flags assume sglang {NEWEST}, the newest supported"
        ]
    if found.sglang in RELEASES:
        return RELEASES[found.sglang], []
    side = _outside_range(found.sglang)
    where = (
        f"older than the supported {SUPPORTED_RANGE}"
        if side == "older"
        else f"untested (supported: {SUPPORTED_RANGE})"
    )
    options = found.parser.get("options")
    if options:
        release = from_parser(found.sglang, options, found.parser.get("storage_backends", []))
        return release, [
            f"warning: sglang {found.sglang} in {python} is {where}: the flags are checked "
            "against its own parser"
        ]
    why = found.parser.get("error", "no answer")
    return RELEASES[NEWEST], [
        f"warning: sglang {found.sglang} in {python} is {where}, and its parser could not be "
        f"read ({why}): the flags assume sglang {NEWEST}"
    ]


def problems(found: Installed, *, plugin_needed: bool, plain_ok: bool = False) -> list[str]:
    """What stops a real launch with this interpreter, each with its fix (exit 3).

    `plugin_needed`: the launch switches on plugin features; `plain_ok`: --features none would
    do without them (not on --device cpu, which serves through the plugin's host buffer).
    """
    from xputune import __version__

    python = _quoted(found.python)
    if found.error is not None:
        return [
            f"{python} did not say what it has ({found.error}): name SGLang's interpreter "
            f"with --python or {PYTHON_VARIABLE}"
        ]
    out = []
    if found.sglang is None:
        out.append(
            f"sglang is not installed for {python}: install it there (`{python} -m pip "
            f"install sglang=={NEWEST}`), or name SGLang's own interpreter with --python or "
            f"{PYTHON_VARIABLE}"
        )
    if not plugin_needed:
        return out
    install = f"`{python} -m pip install xputune=={__version__}`"
    plain = ", or --features none for plain SGLang" if plain_ok else ""
    if found.plugin is None:
        out.append(
            f"xputune's SGLang plugin is not installed for {python} (no entry point xputune "
            f"in {GROUP}): {install}{plain}"
        )
    elif found.plugin_error is not None:
        out.append(
            f"xputune's SGLang plugin does not load in {python} ({found.plugin_error}): "
            f"{install}{plain}"
        )
    elif found.xputune != __version__:
        out.append(
            f"{python} has the SGLang plugin of xputune {found.xputune or '(unknown)'}, this "
            f"launcher is xputune {__version__}: {install}"
        )
    allowed = os.environ.get("SGLANG_PLUGINS")
    if allowed and "xputune" not in {x.strip() for x in allowed.split(",")}:
        out.append(
            f"SGLANG_PLUGINS={shlex.quote(allowed)} leaves the xputune plugin out: add "
            "xputune to it, or unset it"
        )
    return out


def describe(found: Installed) -> str | None:
    """One line on what the interpreter has, when it answered and has sglang."""
    if found.error is not None or found.sglang is None:
        return None
    tested = "tested" if found.sglang in RELEASES else "untested"
    plugin = (
        f"with the SGLang plugin of xputune {found.xputune}"
        if found.plugin and not found.plugin_error
        else "without xputune's SGLang plugin"
    )
    return f"note: sglang {found.sglang} ({tested}) in {_quoted(found.python)}, {plugin}"
