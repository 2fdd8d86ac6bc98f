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

    python deploy/lock-requirements.py --l3

writes deploy/kubernetes/l3/requirements.txt instead: the Mooncake store's wheel (MOONCAKE at
MOONCAKE_VERSION, which must be the version installed here: the one the L3 lane is tested
with) and its runtime dependencies that requirements.txt does not already pin (the L3 image
installs both files in one pip call, so a package pinned in both would be a conflict waiting
to happen), for CPython 3.11 only: the image's Python (Mooncake ships no wheel for 3.14).
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
OUT_L3 = HERE / "kubernetes" / "l3" / "requirements.txt"
PYTHONS = ("3.11", "3.12", "3.13", "3.14")
#: The L3 image's Python: its base image's (python:3.11-slim-bookworm).
PYTHONS_L3 = ("3.11",)
#: The Mooncake store's build without CUDA: mooncake_master and a DRAM donor's mooncake_client
#: touch no GPU memory, and the CUDA build needs CUDA's runtime libraries in the image.
MOONCAKE = "mooncake-transfer-engine-non-cuda"
MOONCAKE_VERSION = "0.3.13.post1"
MACHINES = ("x86_64", "aarch64")
#: manylinux tags a Debian 12 / RHEL 9-era glibc accepts, newest first.
PLATFORMS = ("manylinux_2_28", "manylinux_2_27", "manylinux_2_17", "manylinux2014",
             "manylinux_2_12", "manylinux2010")  # fmt: skip


def closure(
    root: str = "xputune",
    extras: frozenset[str] = frozenset({"udev"}),
    pythons: tuple[str, ...] = PYTHONS,
    keep_root: bool = False,
) -> dict[str, str]:
    """name -> installed version of every distribution `root[extras]` needs on Linux under
    any of `pythons` (markers evaluated for each); `root` itself only with keep_root."""
    found: dict[str, str] = {}
    todo = [(root, extras)]
    while todo:
        name, wanted = todo.pop()
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise SystemExit(
                f"{name} is not installed here: run this in the environment xputune is tested "
                f"in (it pins what is installed), with {root} and all it needs"
            ) from None
        key = canonicalize_name(dist.metadata["Name"])
        if key in found:
            continue
        if key != canonicalize_name(root) or keep_root:
            found[key] = dist.version
        for line in dist.requires or ():
            req = Requirement(line)
            if _needed(req, wanted, pythons):
                todo.append((req.name, frozenset(req.extras)))
    return found


def l3_pins(base: dict[str, str]) -> dict[str, str]:
    """The L3 image's pins beyond `base` (requirements.txt's): the Mooncake store at
    MOONCAKE_VERSION and what it needs under PYTHONS_L3. A package both need must be pinned
    at the same version in both."""
    pins = closure(MOONCAKE, frozenset(), PYTHONS_L3, keep_root=True)
    if pins[canonicalize_name(MOONCAKE)] != MOONCAKE_VERSION:
        raise SystemExit(
            f"{MOONCAKE} {pins[canonicalize_name(MOONCAKE)]} is installed here, the image pins "
            f"{MOONCAKE_VERSION}: install that version (and test it) first"
        )
    for name in pins.keys() & base.keys():
        if pins[name] != base[name]:
            raise SystemExit(f"{name}: {pins[name]} here, {base[name]} in {OUT.name}")
    return {name: version for name, version in pins.items() if name not in base}


def _needed(req: Requirement, extras: frozenset[str], pythons: tuple[str, ...] = PYTHONS) -> bool:
    if req.marker is None:
        return True
    for python in pythons:
        for extra in (*extras, ""):
            env = {**default_environment(), "python_version": python, "extra": extra,
                   "python_full_version": f"{python}.0", "sys_platform": "linux",
                   "platform_system": "Linux"}  # fmt: skip
            if req.marker.evaluate(env):  # type: ignore[arg-type]
                return True
    return False


def download(
    pins: dict[str, str], folder: Path, extra: list[str], pythons: tuple[str, ...] = PYTHONS
) -> None:
    """Every wheel pip would pick for the pins, for each Python and machine."""
    reqs = folder / "pins.txt"
    reqs.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
    for python in pythons:
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


HEADER = (
    "# xputune[udev]'s runtime dependencies with the hashes of their wheels (Linux x86_64 and",
    "# aarch64, CPython 3.11-3.14). Made by deploy/lock-requirements.py; do not edit.",
    "# pip install --require-hashes --only-binary=:all: -r requirements.txt",
)
HEADER_L3 = (
    "# The Mooncake store (mooncake_master, mooncake_client) and its runtime dependencies that",
    "# ../requirements.txt does not pin, with the hashes of their wheels (Linux x86_64 and",
    "# aarch64, CPython 3.11: the L3 image's). Made by deploy/lock-requirements.py --l3; do not",
    "# edit. pip install --require-hashes --only-binary=:all: -r ../requirements.txt -r this",
)


def render(
    pins: dict[str, str], found: dict[str, list[str]], header: tuple[str, ...] = HEADER
) -> str:
    lines = list(header)
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
    parser.add_argument("--l3", action="store_true", help=f"write {OUT_L3} instead")
    args = parser.parse_args()
    if args.l3:
        out, pythons, header = OUT_L3, PYTHONS_L3, HEADER_L3
        pins = l3_pins(locked(OUT))
    else:
        out, pythons, header = OUT, PYTHONS, HEADER
        pins = closure()
    with tempfile.TemporaryDirectory() as tmp:
        download(pins, Path(tmp), args.pip_arg, pythons)
        out.write_text(render(pins, hashes(Path(tmp)), header))
    print(f"wrote {out} ({len(pins)} distributions)")
    return 0


def locked(path: Path) -> dict[str, str]:
    """name -> version of a requirements file this script wrote."""
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            name, _, version = line.split()[0].partition("==")
            out[canonicalize_name(name)] = version
    return out


if __name__ == "__main__":
    sys.exit(main())
