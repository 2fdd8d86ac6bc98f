"""The recording-index cache: a second open reads the cache, and a bad cache is never trusted.

(Entries and folders another user could have planted: tests/host/test_usercache_attacks.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from xputune.host import tarcache, usercache
from xputune.host.open import example_path
from xputune.host.view import TarView


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("XPUTUNE_CACHE", raising=False)
    return tmp_path / "cache" / "recordings"


SEED = example_path("h3c-hygon-p800")
CARD = "/sys/bus/pci/devices/0000:23:00.0/vendor"


def _tables(view: TarView) -> dict:
    return {path: (kind, payload) for path, kind, payload in view.members()}


def test_second_open_reads_the_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = TarView(SEED)
    (entry,) = cache.iterdir()
    assert oct(entry.stat().st_mode & 0o777) == "0o600"
    assert oct(cache.stat().st_mode & 0o777) == "0o700"

    def refuse(path: str):
        raise AssertionError("the recording was parsed again")

    monkeypatch.setattr(tarcache, "iter_members", refuse)
    again = TarView(SEED)
    assert _tables(again) == _tables(first)
    assert again.read_text(CARD).strip() == "0x1d22"  # Kunlunxin, through the cached tables
    monkeypatch.setenv("XPUTUNE_CACHE", "off")
    with pytest.raises(AssertionError, match="parsed again"):
        TarView(SEED)


def test_cache_off_reads_the_same_tables(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cached = _tables(TarView(SEED))
    monkeypatch.setenv("XPUTUNE_CACHE", "off")
    assert _tables(TarView(SEED)) == cached


GARBLED = [
    b"",
    b"not marshal",
    usercache.pack(("x",))[:-1],  # truncated
    usercache.pack(("x",)) + b"\0",  # longer than its header says
    b"\x00" * 8 + usercache.pack(("x",))[8:],  # not our magic
]

# Forged with a valid header (only this user could write one): the tables' own check holds.
MALFORMED = [
    [("x", "exec", "rm -rf /")],
    {"/": {"x": 7}},  # a value of no kind
    {"/": {"x": ("a FIFO", "and more")}},  # an "other" saying two things
    {"/": {"x": b""}, "x": {}},  # a folder not named by its host path
    {"/": {"x": None}, "/x": ["y"]},  # a folder's row not a mapping
    {"/": {7: b""}},  # a name not text
    {"/x": {}},  # no root
    ({"/": "dir"}, {}, {}, {}),  # the tables of format 3
]


@pytest.mark.parametrize(
    "junk", GARBLED + [usercache.pack(m) for m in MALFORMED], ids=lambda j: f"{len(j)}B"
)
def test_a_tampered_or_garbled_entry_is_ignored(
    cache: Path, junk: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = _tables(TarView(SEED))
    (entry,) = cache.iterdir()
    entry.write_bytes(junk)
    capsys.readouterr()
    assert _tables(TarView(SEED)) == expected
    assert entry.read_bytes() != junk  # rewritten from the recording itself
    assert _tables(TarView(SEED)) == expected  # and read back as written
    warned = capsys.readouterr().err
    assert warned.count("warning") == (1 if junk in GARBLED else 0), warned
    if junk in GARBLED:
        assert f"cache entry {entry} refused" in warned


def test_entries_of_an_older_format_are_dropped(cache: Path) -> None:
    TarView(SEED)
    (entry,) = cache.iterdir()
    digest = entry.name.split("-", 1)[0]
    older = cache / f"{digest}-cpython-311-m4-f1"
    # Another recording's, for another Python: kept. Keyed by SHA-256 (formats 1-3): dropped,
    # since no recording opened now is keyed so.
    other = cache / f"0123456789abcdef0123456789abcdef-cpython-312-m4-f{tarcache.FORMAT}"
    sha_keyed = cache / "fedcba9876543210fedcba9876543210-cpython-311-m4-f3"
    for path in (older, other, sha_keyed):
        path.write_bytes(b"old table")
    entry.unlink()
    TarView(SEED)
    assert sorted(p.name for p in cache.iterdir()) == sorted([entry.name, other.name])


def test_another_recording_gets_another_entry(cache: Path, tmp_path: Path) -> None:
    other = tmp_path / "copy.tar.xz"
    other.write_bytes(Path(SEED).read_bytes() + b"\0" * 512)  # same members, other bytes
    TarView(SEED)
    TarView(str(other))
    assert len(list(cache.iterdir())) == 2


def test_off_switch_and_unwritable_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPUTUNE_CACHE", "off")
    TarView(SEED)
    assert not cache.exists()
    monkeypatch.delenv("XPUTUNE_CACHE")
    cache.parent.mkdir(parents=True)
    cache.write_text("a file where the directory should be")
    assert TarView(SEED).is_dir("/sys/devices")
