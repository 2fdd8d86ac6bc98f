"""Asking the host: xpu-smi (XML form first, text form when that fails), else NVML.

xpu-smi can hang when a card is wedged, so every run has a timeout. It is looked up on PATH,
then where Kunlunxin's runtime installs it. Intel ships an unrelated tool of the same name;
its output parses as none of the forms, and the error says so. A host without xpu-smi but with
libnvidia-ml is read through NVML (nvml_report), never by scraping nvidia-smi.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from xputune import trail
from xputune.devices.xpusmi import parse
from xputune.devices.xpusmi.model import SmiError, SmiReport

TOOL = "xpu-smi"
KNOWN_PATHS = ("/opt/xre/bin/xpu-smi", "/usr/local/xpu/bin/xpu-smi")
ATTEMPTS = (("-q", "-x"), ("-q",))
TIMEOUT_S = 15.0


class SmiTimeout(SmiError):
    """xpu-smi did not answer in time; a second form would hang the same way."""


def find_tool() -> str | None:
    """xpu-smi on PATH, else at a known install path, else None."""
    found = shutil.which(TOOL)
    if found:
        return found
    return next((p for p in KNOWN_PATHS if os.access(p, os.X_OK)), None)


def run_bytes(tool: str, args: tuple[str, ...], timeout: float) -> bytes:
    """What `tool args` prints on stdout; SmiTimeout, or SmiError on a failure or non-zero exit.

    Any vendor tool (xpu-smi, nvidia-smi): `record` saves their outputs this way.
    """
    try:
        done = trail.run(
            [tool, *args],
            capture_output=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise SmiTimeout(f"{tool} {' '.join(args)}: no answer within {timeout:g} s") from None
    except OSError as exc:
        raise SmiError(f"{tool}: cannot run: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
        detail = said[-1] if said else "no output"
        raise SmiError(f"{tool} {' '.join(args)}: exit {done.returncode}: {detail}")
    return done.stdout


def _run(tool: str, args: tuple[str, ...], timeout: float) -> str:
    return run_bytes(tool, args, timeout).decode("utf-8", "replace")


def _nvml_report() -> SmiReport | None:
    """The cards through NVML when a libnvidia-ml is found on this host, else None."""
    from xputune.devices.libpath import NVML_ENV, NVML_PATHS, library_for

    path = library_for(NVML_ENV, NVML_PATHS, True)
    if path is None:
        return None
    from xputune.devices.nvml_report import read_report

    return read_report(path)


def query(tool: str | None = None, timeout: float | None = None) -> SmiReport:
    """The cards as the installed xpu-smi reports them (timeout per run, TIMEOUT_S if None)."""
    timeout = TIMEOUT_S if timeout is None else timeout
    tool = tool or find_tool()
    if tool is None:
        nvidia = _nvml_report()
        if nvidia is not None:
            return nvidia
        raise SmiError(
            f"{TOOL} not found on PATH (nor in {', '.join(KNOWN_PATHS)}) and no NVIDIA "
            "library (libnvidia-ml); install the vendor's driver tools or pass --input with a "
            "saved output"
        )
    failures: list[str] = []
    for args in ATTEMPTS:
        try:
            return parse(_run(tool, args, timeout))
        except SmiTimeout:
            raise
        except SmiError as exc:
            failures.append(str(exc))
    unknown = any("not a known form" in f for f in failures)
    hint = " (is this Intel's unrelated tool of the same name?)" if unknown else ""
    raise SmiError(f"{failures[-1]}{hint}")
