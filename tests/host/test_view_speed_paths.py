"""The probe's fast paths through the views read exactly what the slow ones did.

- TarView remembers every resolved prefix: a path resolves as a fresh walk would, in any
  order of asking, and as the same tree extracted to disk resolves through DirView.
- DirView takes the fstat it needs anyway as proof that the file it opened is the inode lstat
  found while resolving; a file replaced since (our own writes replace files) falls back to
  the /proc/self/fd check and reads the new content.
- A file on disk ends where a read stops short: every size around the read sizes reads whole.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from xputune.errors import HostError
from xputune.host.open import example_path
from xputune.host.replace import write_replace_at
from xputune.host.view import DirView, TarView

HWLOC = Path(__file__).resolve().parents[1] / "data" / "hwloc"
RECORDINGS = [
    str(HWLOC / "32intel64-2p8co2t+8ve.tar.bz2"),  # PLX switches, a bridge only in sys/devices
    str(HWLOC / "nvidia-dgx-gb10.tar.bz2"),
    str(HWLOC / "2pa-pcidomain32bits.tar.bz2"),
    example_path("h3c-hygon-p800"),
]


def outcome(view, path: str) -> str:
    try:
        return view.realpath(path)
    except (OSError, HostError) as exc:
        return type(exc).__name__


def probes(view: TarView) -> list[str]:
    """Every member, and through every link its parent and a sibling of its target."""
    kinds = {path: kind for path, kind, _ in view.members()}
    paths = sorted(kinds)
    links = [p for p in paths if kinds[p] == "link"]
    return paths + [f"{p}/.." for p in links] + [f"{p}/../{p.rsplit('/', 1)[1]}" for p in links]


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda p: Path(p).name.split(".")[0])
def test_remembered_prefixes_resolve_as_a_fresh_walk(recording: str) -> None:
    paths = probes(TarView(recording))
    forward, backward = TarView(recording), TarView(recording)
    fresh = {p: outcome(TarView(recording), p) for p in paths[:: max(1, len(paths) // 40)]}
    first = {p: outcome(forward, p) for p in paths}
    second = {p: outcome(backward, p) for p in reversed(paths)}
    assert first == second
    assert all(first[p] == fresh[p] for p in fresh)


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs the tar binary")
@pytest.mark.parametrize("recording", RECORDINGS[:2], ids=lambda p: Path(p).name.split(".")[0])
def test_a_recording_resolves_as_its_extracted_tree(recording: str, tmp_path: Path) -> None:
    subprocess.run(["tar", "xf", recording, "-C", str(tmp_path)], check=True)
    (top,) = os.listdir(tmp_path)
    tar, folder = TarView(recording), DirView(str(tmp_path / top))
    for path in probes(tar):
        assert outcome(tar, path) == outcome(folder, path), path


def test_a_file_replaced_after_resolving_reads_its_new_content(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys" / "value").write_text("old\n")
    view = DirView(str(tmp_path))
    assert view.read_text("/sys/value") == "old"
    fd = os.open(tmp_path / "sys", os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_replace_at(fd, "value", b"new\n", 0o644)  # a new inode, as apply writes
    finally:
        os.close(fd)
    assert view.read_text("/sys/value") == "new"


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 65535, 65536, 65537, 200_000])
def test_a_file_on_disk_reads_whole_at_every_size(tmp_path: Path, size: int) -> None:
    (tmp_path / "sys").mkdir()
    data = bytes(i % 251 for i in range(size))
    (tmp_path / "sys" / "blob").write_bytes(data)
    assert DirView(str(tmp_path)).read_bytes("/sys/blob") == data


def _reference_well_formed(index: object) -> bool:
    """The per-entry loop _index_well_formed stands for: the same verdict on every input."""
    if not isinstance(index, dict) or not isinstance(index.get("/"), dict):
        return False
    for folder, row in index.items():
        if type(folder) is not str or folder[:1] != "/" or type(row) is not dict:
            return False
        for name, value in row.items():
            if type(name) is not str:
                return False
            if type(value) is tuple:
                if len(value) != 1 or type(value[0]) is not str:
                    return False
            elif value is not None and type(value) not in (bytes, str):
                return False
    return True


def _good() -> dict:
    return {"/": {"sys": None}, "/sys": {"a": b"1\n", "l": "a", "d": ("a FIFO",), "e": None},
            "/sys/e": {}}  # fmt: skip


def _variants() -> list[object]:
    out: list[object] = [_good(), None, (), [*_good().items()], {}, {"/sys": {}}]
    for folder, name, value in [
        (7, None, {}),  # a folder not named by text
        ("sys/x", None, {}),  # nor by a host path
        ("/sys/x", None, ["a"]),  # a row not a mapping
        ("/", None, {"sys": None, 7: b""}),  # a name not text
        ("/sys", "a", 1),  # a value of no kind
        ("/sys", "a", bytearray(b"1")),
        ("/sys", "d", ()),  # an "other" saying nothing
        ("/sys", "d", ("a FIFO", "twice")),
        ("/sys", "d", (b"a FIFO",)),
        ("/sys", "l", ["a"]),
        ("/", "sys", {}),
    ]:
        index = {k: dict(v) for k, v in _good().items()}
        if name is None:
            index[folder] = value  # type: ignore[index]
        else:
            index[folder][name] = value
        out.append(index)
    return out


@pytest.mark.parametrize("index", _variants(), ids=str)
def test_the_cache_check_gives_the_loops_verdict(index: object) -> None:
    from xputune.host.view import _index_well_formed

    assert _index_well_formed(index) is _reference_well_formed(index)
