"""host/usercache.py: where caches live, which folders are trusted, and the entry codec.

Attacks by another uid (which need root to stage): tests/host/test_usercache_attacks.py.
"""

from __future__ import annotations

import os
import stat
import struct
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xputune.host import usercache

CAP = 1 << 16
#: The examples of one test share its cache folder; each writes the same entry afresh.
SHARED = [HealthCheck.function_scoped_fixture]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("XPUTUNE_CACHE", raising=False)
    return tmp_path / "cache"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- where --------------------------------------------------------------------------------------


def test_root_ignores_home_and_xdg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XPUTUNE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/home/someone/.cache")
    monkeypatch.setenv("HOME", "/home/someone")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert usercache.base_dir() == usercache.ROOT_DIR == "/var/cache/xputune"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert usercache.base_dir() == "/home/someone/.cache/xputune"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert usercache.base_dir() == "/home/someone/.cache/xputune"
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", "/srv/cache")
    for euid in (0, 1000):
        monkeypatch.setattr(os, "geteuid", lambda euid=euid: euid)
        assert usercache.base_dir() == "/srv/cache"


# -- folders ------------------------------------------------------------------------------------


def test_folders_are_made_0700_whatever_the_umask(cache: Path) -> None:
    old = os.umask(0)
    try:
        assert usercache.store("things", "a", [1, 2], CAP)
    finally:
        os.umask(old)
    assert _mode(cache) == _mode(cache / "things") == 0o700
    assert _mode(cache / "things" / "a") == 0o600
    assert usercache.load("things", "a", CAP) == [1, 2]


def test_a_looser_folder_of_ours_is_tightened(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (cache / "things").mkdir(parents=True)
    cache.chmod(0o755)  # what the kernels cache used to be made with
    (cache / "things").chmod(0o777)
    assert usercache.store("things", "a", 1, CAP)
    assert _mode(cache) == _mode(cache / "things") == 0o700
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"xputune: warning: cache {cache / 'things'} was writable by others (mode 0777); now 0700"
    ]


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o777])
def test_a_folder_above_that_others_can_write_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], mode: int
) -> None:
    above = tmp_path / "shared"
    above.mkdir()
    above.chmod(mode)
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(above / "cache"))
    for _ in range(2):  # one warning, however often the cache is asked
        assert usercache.store("things", "a", 1, CAP) is False
        assert usercache.load("things", "a", CAP) is None
    assert not (above / "cache").exists()
    assert capsys.readouterr().err == (
        f"xputune: warning: no cache this run: {above} is writable by others (mode {mode:04o})\n"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="a sticky folder above counts only when root's")
def test_a_sticky_root_folder_above_is_allowed(tmp_path: Path) -> None:
    public = tmp_path / "public"
    public.mkdir()
    public.chmod(0o1777)
    assert usercache.checked(str(public / "mine"), create=True) is not None


def test_a_link_to_the_cache_is_followed_once_then_checked(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (tmp_path / "link").symlink_to(real)
    found = usercache.checked(str(tmp_path / "link"), create=True)
    assert found is not None and found.path == str(real)
    assert os.path.samestat(os.fstat(found.fd), real.stat())


def test_a_link_swapped_in_after_resolving_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "swapped").symlink_to(tmp_path / "real")
    monkeypatch.setattr(usercache.os.path, "realpath", lambda p: p)  # the race, made certain
    assert usercache.checked(str(tmp_path / "swapped" / "cache"), create=True) is None
    assert f"{tmp_path / 'swapped'} is not a directory" in capsys.readouterr().err
    assert not (tmp_path / "real" / "cache").exists()


def test_a_file_where_the_folder_should_be(cache: Path, capsys) -> None:
    cache.mkdir()
    (cache / "things").write_text("not a folder")
    assert usercache.store("things", "a", 1, CAP) is False
    assert f"no cache this run: {cache / 'things'} is not a directory" in capsys.readouterr().err


def test_off_means_no_folder_and_no_entry(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPUTUNE_CACHE", "off")
    assert usercache.store("things", "a", 1, CAP) is False
    assert usercache.load("things", "a", CAP) is None
    assert not cache.exists()


def test_a_folder_replaced_in_the_same_process_is_checked_again(cache: Path) -> None:
    assert usercache.store("things", "a", 1, CAP)
    (cache / "things" / "a").unlink()
    (cache / "things").rmdir()
    (cache / "things").mkdir(mode=0o755)
    assert usercache.store("things", "a", 2, CAP)
    assert _mode(cache / "things") == 0o700 and (cache / "things" / "a").exists()


# -- entries ------------------------------------------------------------------------------------

DATA = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=DATA)
def test_what_is_stored_is_loaded(cache: Path, data: object) -> None:
    assert usercache.store("things", "a", data, CAP)
    assert usercache.load("things", "a", CAP) == data


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=DATA, where=st.integers(min_value=0), bit=st.integers(min_value=0, max_value=7))
def test_any_flipped_bit_is_refused_before_marshal(
    cache: Path, monkeypatch: pytest.MonkeyPatch, data: object, where: int, bit: int
) -> None:
    blob = bytearray(usercache.pack(data))
    blob[where % len(blob)] ^= 1 << bit
    usercache.store("things", "a", None, CAP)  # makes the folder
    (cache / "things" / "a").write_bytes(bytes(blob))
    with monkeypatch.context() as spied:
        spied.setattr(usercache, "marshal", _NoLoads)
        assert usercache.load("things", "a", CAP) is None


class _NoLoads:
    @staticmethod
    def loads(_data: object) -> object:
        raise AssertionError("marshal.loads saw an entry that failed its header")


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(junk=st.binary(max_size=200))
def test_arbitrary_bytes_never_reach_marshal(
    cache: Path, monkeypatch: pytest.MonkeyPatch, junk: bytes
) -> None:
    usercache.store("things", "a", None, CAP)
    (cache / "things" / "a").write_bytes(junk)
    with monkeypatch.context() as spied:
        spied.setattr(usercache, "marshal", _NoLoads)
        assert usercache.load("things", "a", CAP) is None


#: Five bytes that once cost 16 s of CPU on every run: marshal's list of 2**31 - 1 items.
BOMB = b"[\xff\xff\xff\x7f"


def test_a_marshal_bomb_is_refused_by_its_missing_header(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    usercache.store("things", "a", None, CAP)
    (cache / "things" / "a").write_bytes(BOMB)
    monkeypatch.setattr(usercache, "marshal", _NoLoads)  # time bound: never unmarshalled
    assert usercache.load("things", "a", CAP) is None
    assert "(shorter than its header); rebuilt" in capsys.readouterr().err


@pytest.mark.parametrize("error", [MemoryError, SystemError, KeyError, RecursionError, EOFError])
def test_any_failure_of_marshal_is_a_bad_entry(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys, error: type[BaseException]
) -> None:
    assert usercache.store("things", "a", [1], CAP)

    class Failing:
        @staticmethod
        def loads(_data: object) -> object:
            raise error("from marshal")

    monkeypatch.setattr(usercache, "marshal", Failing)
    assert usercache.load("things", "a", CAP) is None
    assert f"(unreadable ({error.__name__})); rebuilt" in capsys.readouterr().err


def test_an_entry_is_refused_unless_a_plain_private_file(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert usercache.store("things", "a", [1], CAP)
    entry = cache / "things" / "a"
    entry.chmod(0o660)
    assert usercache.load("things", "a", CAP) is None
    entry.chmod(0o600)
    os.link(entry, cache / "things" / "b")
    assert usercache.load("things", "a", CAP) is None
    (cache / "things" / "b").unlink()
    entry.rename(cache / "things" / "c")
    entry.symlink_to("c")
    assert usercache.load("things", "a", CAP) is None
    assert usercache.load("things", "c", CAP) == [1]
    assert usercache.load("things", "c", 2) is None  # over its cap
    err = capsys.readouterr().err
    for why in ("writable by others (mode 0660)", "2 hard links", "a symbolic link",
                f"larger than {2 + usercache._HEADER.size} bytes"):  # fmt: skip
        assert why in err, err
    assert usercache.store("things", "a", [2], CAP)  # a symlink is replaced, never followed
    assert not entry.is_symlink() and usercache.load("things", "c", CAP) == [1]


def test_a_fifo_entry_does_not_block(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    usercache.store("things", "x", None, CAP)
    os.mkfifo(cache / "things" / "a", 0o600)
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(usercache.load("things", "a", CAP)))
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive() and result == [None]
    assert "not a regular file" in capsys.readouterr().err


def test_too_large_data_is_not_kept(cache: Path) -> None:
    assert usercache.store("things", "a", b"x" * 100, 50) is False
    assert not (cache / "things" / "a").exists()
    assert [p.name for p in (cache / "things").iterdir()] == []


def test_prune_removes_only_the_stale_entries(cache: Path) -> None:
    for name in ("k-new", "k-old", "k-older", "other-old"):
        assert usercache.store("things", name, name, CAP)
    (cache / "things" / "k-new.tmp.123").write_bytes(b"")  # a writer's, left alone
    usercache.prune("things", lambda name: name.startswith("k-") and name != "k-new")
    assert sorted(p.name for p in (cache / "things").iterdir()) == [
        "k-new", "k-new.tmp.123", "other-old",
    ]  # fmt: skip


def test_an_older_xputunes_entry_is_rebuilt_without_a_warning(
    cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries of the SHA-256 header (magic xputune\\x01) are not ours to read any more."""
    import hashlib
    import marshal

    assert usercache.store("things", "a", [1], CAP)
    payload = marshal.dumps([1])
    older = struct.pack("<8sQ32s", b"xputune\x01", len(payload), hashlib.sha256(payload).digest())
    (cache / "things" / "a").write_bytes(older + payload)
    monkeypatch.setattr(usercache, "marshal", _NoLoads)
    assert usercache.load("things", "a", CAP) is None
    assert capsys.readouterr().err == ""
