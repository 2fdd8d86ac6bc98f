"""Write deploy/kubernetes/requirements.txt: xputune[udev]'s runtime dependencies, each pinned
at the version installed in the running environment (the one xputune was tested in), with the
sha256 of every wheel pip may pick for it on Linux x86_64 and aarch64 under CPython 3.11 to
3.14 (the image runs 3.11; the Ansible role builds its venv with the host's python3).

Both deploy/kubernetes/Containerfile and the Ansible role install it with
`pip install --require-hashes --only-binary=:all:`: a file whose hash is not listed is
refused, and nothing is built from source. xputune itself is not in it: it is installed from
the wheel of this checkout.

    python deploy/lock-requirements.py [--pip-arg=--isolated ...]

It runs `pip download` (the configured index: it needs the network) and `pip hash` on each
file. --pip-arg passes options to `pip download`, e.g. --isolated to ignore local wheel
folders whose builds would not match the index's files.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

HERE = Path(__file__).resolve().parent
OUT = HERE / "kubernetes" / "requirements.txt"
PYTHONS = ("3.11", "3.12", "3.13", "3.14")
MACHINES = ("x86_64", "aarch64")
#: manylinux tags a Debian 12 / RHEL 9-era glibc accepts, newest first.
PLATFORMS = ("manylinux_2_28", "manylinux_2_27", "manylinux_2_17", "manylinux2014",
             "manylinux_2_12", "manylinux2010")  # fmt: skip


def closure(root: str = "xputune", extras: frozenset[str] = frozenset({"udev"})) -> dict[str, str]:
    """name -> installed version of every distribution `root[extras]` needs on Linux under
    any of PYTHONS (markers evaluated for each)."""
    found: dict[str, str] = {}
    todo = [(root, extras)]
    while todo:
        name, wanted = todo.pop()
        dist = md.distribution(name)
        key = canonicalize_name(dist.metadata["Name"])
        if key in found:
            continue
        if key != canonicalize_name(root):
            found[key] = dist.version
        for line in dist.requires or ():
            req = Requirement(line)
            if _needed(req, wanted):
                todo.append((req.name, frozenset(req.extras)))
    return found


def _needed(req: Requirement, extras: frozenset[str]) -> bool:
    if req.marker is None:
        return True
    for python in PYTHONS:
        for extra in (*extras, ""):
            env = {**default_environment(), "python_version": python, "extra": extra,
                   "python_full_version": f"{python}.0", "sys_platform": "linux",
                   "platform_system": "Linux"}  # fmt: skip
            if req.marker.evaluate(env):  # type: ignore[arg-type]
                return True
    return False


def download(pins: dict[str, str], folder: Path, extra: list[str]) -> None:
    """Every wheel pip would pick for the pins, for each Python and machine."""
    reqs = folder / "pins.txt"
    reqs.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
    for python in PYTHONS:
        abi = "cp" + python.replace(".", "")
        for machine in MACHINES:
            tags = [f"--platform={p}_{machine}" for p in PLATFORMS]
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                 "--only-binary=:all:", f"--python-version={python}", "--implementation=cp",
                 f"--abi={abi}", "--abi=abi3", "--abi=none", *tags, "--platform=any",
                 "-d", str(folder / "wheels"), "-r", str(reqs), *extra],
                check=True,
            )  # fmt: skip


def hashes(folder: Path) -> dict[str, list[str]]:
    """name -> sorted `--hash=sha256:...` of its downloaded wheels, by `pip hash`."""
    out: dict[str, set[str]] = {}
    for wheel in sorted((folder / "wheels").glob("*.whl")):
        done = subprocess.run([sys.executable, "-m", "pip", "hash", str(wheel)],
                              check=True, capture_output=True, text=True)  # fmt: skip
        [line] = [x for x in done.stdout.splitlines() if x.startswith("--hash=sha256:")]
        name = canonicalize_name(wheel.name.split("-")[0])
        out.setdefault(name, set()).add(line.strip())
    return {name: sorted(lines) for name, lines in out.items()}


def render(pins: dict[str, str], found: dict[str, list[str]]) -> str:
    lines = [
        "# xputune[udev]'s runtime dependencies with the hashes of their wheels (Linux x86_64 and",
        "# aarch64, CPython 3.11-3.14). Made by deploy/lock-requirements.py; do not edit.",
        "# pip install --require-hashes --only-binary=:all: -r requirements.txt",
    ]
    for name, version in sorted(pins.items()):
        if name not in found:
            raise SystemExit(f"no wheel downloaded for {name}=={version}")
        lines.append(f"{name}=={version} \\")
        lines += [f"    {h} \\" for h in found[name][:-1]]
        lines.append(f"    {found[name][-1]}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pip-arg", action="append", default=[], help="passed to pip download")
    args = parser.parse_args()
    pins = closure()
    with tempfile.TemporaryDirectory() as tmp:
        download(pins, Path(tmp), args.pip_arg)
        OUT.write_text(render(pins, hashes(Path(tmp))))
    print(f"wrote {OUT} ({len(pins)} distributions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
