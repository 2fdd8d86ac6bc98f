"""The wheel carries its native code: built when the wheel is built, so an installed
xputune runs `tiers` and `bench copy` with no compiler anywhere on PATH.

The wheel is built from a copy of this working tree (pip wheel: build/ of the checkout could
hold leftovers of older builds), installed into a new venv that sees no other site-packages
(its dependencies come from the package index pip is configured with, as for any user), and
run with PATH holding only that venv's bin/ and CC, CXX, NVCC, CUDA_HOME unset or pointing
nowhere. A command that had to build a library would fail there ("no C compiler found"), and
the kernels cache stays empty. The run is printed (pytest -s shows it).
"""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from tests.fixtures.wheel import copy_tree, run
from xputune.kernels import native

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "nvcc")


def _trace(path: Path) -> None:
    """A small Mooncake trace: a shared root, three recurring branches, one-off requests."""
    lines = []
    for i in range(200):
        ids = [0, 1 + i % 3, 10 + i % 3] if i % 2 else [0, 20 + i]
        doc = {"timestamp": i, "input_length": 512 * len(ids) - 100, "output_length": 1}
        lines.append(json.dumps({**doc, "hash_ids": ids}) + "\n")
    path.write_text("".join(lines))


def test_the_installed_wheel_needs_no_compiler(tmp_path: Path) -> None:
    src, dist, venv, home = (tmp_path / n for n in ("src", "dist", "venv", "home"))
    src.mkdir()
    home.mkdir()
    copy_tree(src)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)])
    (wheel,) = dist.glob("xputune-*.whl")
    assert wheel.name.split("-")[2:4] == ["py3", "none"] and not wheel.name.endswith("-any.whl")
    with zipfile.ZipFile(wheel) as zf:
        shipped = {n.rsplit("/", 1)[1] for n in zf.namelist() if "/kernels/libs/" in n}
    sources = ROOT / "kernels"
    wanted = {
        native.packaged_name(lib, sources)
        for lib in native.LIBRARIES.values()
        if lib.when == native.WHEEL
    }
    assert shipped == wanted  # named for these very sources: the loader will find them

    run([sys.executable, "-m", "venv", str(venv)])
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)])
    bare = str(venv / "bin")
    assert not [c for c in COMPILERS if shutil.which(c, path=bare)]
    cache = tmp_path / "cache"
    env = {
        "PATH": bare,
        "HOME": str(home),
        "XPUTUNE_CACHE_DIR": str(cache),
        "CUDA_HOME": str(tmp_path / "no-cuda"),  # nvcc's usual place, looked in without PATH
        "LANG": "C.UTF-8",
        "COLUMNS": "100",
    }
    trace = tmp_path / "trace.jsonl"
    _trace(trace)
    runs = [
        ["xputune", "tiers", "--trace", str(trace)],
        ["xputune", "bench", "copy", "--tokens", "4096", "--repeats", "3", "--layout",
         "layer_first"],
        ["xputune", "kernels", "build", "-f", "json"],
    ]  # fmt: skip
    shown = [f"wheel: {wheel.name} ({', '.join(sorted(shipped))})", f"PATH={bare} (CC unset)"]
    outputs = []
    for argv in runs:
        done = run([str(venv / "bin" / argv[0]), *argv[1:]], env=env, cwd=home)
        outputs.append(done.stdout)
        shown += [f"$ {' '.join(argv)}", done.stdout.rstrip(), done.stderr.rstrip()]
    print("\n".join(line for line in shown if line))

    assert "prefix hit rate" in outputs[0]
    assert "layer_first" in outputs[1] and "memcpy GB/s" in outputs[1]
    status = {r["backend"]: (r["status"], r["detail"]) for r in json.loads(outputs[2])["backends"]}
    for lib in native.LIBRARIES.values():
        state, detail = status[lib.title]
        if lib.when == native.WHEEL:
            assert state == "installed" and detail.startswith(str(venv)), (lib.title, detail)
        else:
            assert state == "skipped", (lib.title, detail)  # no nvcc, no XRE here
    kernels = cache / "kernels"
    assert not kernels.exists() or not list(kernels.iterdir())  # nothing was built
