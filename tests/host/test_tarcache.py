"""The member-table cache: a second open reads the cache, and a bad cache is never trusted."""

from __future__ import annotations

from pathlib import Path

import pytest

from xputune.host import tarcache
from xputune.host.open import example_path
from xputune.host.tarread import iter_members
from xputune.host.view import TarView


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("XPUTUNE_CACHE", raising=False)
    return tmp_path / "cache" / "xputune" / "recordings"


SEED = example_path("h3c-hygon-p800")


def test_second_open_reads_the_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = tarcache.members(SEED)
    (entry,) = cache.iterdir()
    assert oct(entry.stat().st_mode & 0o777) == "0o600"
    assert oct(cache.stat().st_mode & 0o777) == "0o700"

    def refuse(path: str):
        raise AssertionError("the recording was parsed again")

    monkeypatch.setattr(tarcache, "iter_members", refuse)
    assert tarcache.members(SEED) == first == list(iter_members(SEED))


def test_a_tampered_or_garbled_entry_is_ignored(cache: Path) -> None:
    expected = tarcache.members(SEED)
    (entry,) = cache.iterdir()
    import marshal
    import zlib

    for junk in (
        b"not zlib",
        zlib.compress(b"not marshal"),
        zlib.compress(marshal.dumps([("x", "exec", "rm -rf /")])),
    ):
        entry.write_bytes(junk)
        assert tarcache.members(SEED) == expected
        assert entry.read_bytes() != junk  # rewritten from the recording itself


def test_another_recording_gets_another_entry(cache: Path, tmp_path: Path) -> None:
    other = tmp_path / "copy.tar.xz"
    other.write_bytes(Path(SEED).read_bytes() + b"\0" * 512)  # same members, other bytes
    tarcache.members(SEED)
    tarcache.members(str(other))
    assert len(list(cache.iterdir())) == 2


def test_off_switch_and_unwritable_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPUTUNE_CACHE", "off")
    tarcache.members(SEED)
    assert not cache.exists()
    monkeypatch.delenv("XPUTUNE_CACHE")
    cache.parent.mkdir(parents=True)
    cache.write_text("a file where the directory should be")
    assert TarView(SEED).is_dir("/sys/devices")
