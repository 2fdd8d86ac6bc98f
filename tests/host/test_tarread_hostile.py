"""A recording from an untrusted machine: every malformed or oversized one is one clear line.

Each case is a RecordingError naming the file and what was wrong: never a hang, never another
exception, never memory that grows with what the archive claims.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import os
import tarfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.host.hostile import (
    ZEROS,
    archive,
    header,
    member,
    pax,
    peak_rss_mib,
    record,
    write,
    zero_bomb,
)
from xputune.errors import HostError, RecordingError, RootEscapeError, UnreadableValueError
from xputune.host import tarread
from xputune.host.tarread import iter_members
from xputune.host.view import TarView


def members(path: str) -> list[tuple[str, str, bytes | str]]:
    return list(iter_members(path))


def refused(tmp_path: Path, data: bytes, match: str, name: str = "r.tar") -> RecordingError:
    path = write(tmp_path / name, data)
    with pytest.raises(RecordingError, match=match) as info:
        TarView(path)
    message = str(info.value)
    assert message.startswith(path + ": ")
    assert "\n" not in message
    return info.value


# -- pax records ---------------------------------------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("records", "why"),
    [
        (b"0 path=box/x\n", "length"),  # looped forever
        (b"-5 path=box/x\n", "length"),  # ValueError
        (b"abc path=box/x\n", "length"),  # ValueError
        (b"+9 path=x\n", "length"),  # int() would take it
        (b"99 path=box/x\n", "past the end"),
        (b"16 path=box/x\nX", "past the end"),
        (b"14 path=box/xZ", "newline"),
        (b"14 pathbox/xy\n", "="),
        (b"12 =box/xyz\n", "="),
        (b"14 p\xffth=box/x\n", "UTF-8"),  # UnicodeDecodeError
        (b"no records at all", "length"),
        (b"9 path", "past the end"),
    ],
)
def test_malformed_pax_records_are_refused(tmp_path: Path, records: bytes, why: str) -> None:
    data = archive(pax(records), member(b"box/sys/a", b"1\n"))
    error = refused(tmp_path, data, "not a readable tarball")
    assert why in str(error)
    assert "pax" in str(error)


@pytest.mark.timeout(10)
def test_malformed_global_pax_header_is_refused(tmp_path: Path) -> None:
    refused(tmp_path, archive(pax(b"0 x=y\n", kind=b"g")), "pax")


def test_pax_path_and_linkpath_are_honoured(tmp_path: Path) -> None:
    long = b"box/sys/" + b"d" * 150 + b"/value"
    data = archive(
        pax(record(b"path", long) + record(b"mtime", b"1.5")),
        member(b"ignored", b"42\n"),
        pax(record(b"linkpath", b"d" * 150)),
        member(b"box/sys/link", kind=b"2"),
    )
    got = members(write(tmp_path / "r.tar", data))
    assert (long.decode(), "file", b"42\n") in got
    assert ("box/sys/link", "link", "d" * 150) in got


@pytest.mark.parametrize("value", [b"box/a\x00b", b"box/\xff"])
def test_pax_names_with_nul_or_bad_utf8_are_refused(tmp_path: Path, value: bytes) -> None:
    refused(tmp_path, archive(pax(record(b"path", value)), member(b"x", b"1")), "name")


def test_pax_size_overrides_the_header(tmp_path: Path) -> None:
    data = archive(pax(record(b"size", b"3")), member(b"box/sys/a", b"abc", size_field=b"0" * 12))
    assert ("box/sys/a", "file", b"abc") in members(write(tmp_path / "r.tar", data))
    bad = archive(pax(record(b"size", b"-3")), member(b"box/sys/a", b"abc"))
    refused(tmp_path, bad, "size")


def test_oversized_pax_header_is_refused(tmp_path: Path) -> None:
    big = record(b"comment", b"x" * (tarread.MAX_HEADER + 1))
    refused(tmp_path, archive(pax(big), member(b"box/a", b"1")), "pax header")


# -- numbers and sizes ---------------------------------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "field",
    [
        b"-0000001000\0",  # int(, 8) took it: the reader stepped back and looped forever
        b"00000000x12\0",
        b"0o000000012\0",
        b"0000_000012\0",
        b"\xff" * 12,  # GNU base-256, negative
    ],
)
def test_bad_size_fields_are_refused(tmp_path: Path, field: bytes) -> None:
    data = archive(header(b"box/a", size_field=field), member(b"box/b", b"1"))
    refused(tmp_path, data, "size")


def test_absurd_base256_size_is_refused_without_reading(tmp_path: Path) -> None:
    field = b"\x80" + (2**87).to_bytes(11, "big")
    data = archive(header(b"box/a", size_field=field), member(b"box/b", b"1"))
    refused(tmp_path, data, "unpacks to more than 64 MiB")


def test_base256_size_in_range_is_read(tmp_path: Path) -> None:
    field = b"\x80" + (3).to_bytes(11, "big")
    data = archive(header(b"box/a", size_field=field) + tarread_body(b"xyz"))
    assert ("box/a", "file", b"xyz") in members(write(tmp_path / "r.tar", data))


def tarread_body(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def test_member_running_past_the_end_is_refused(tmp_path: Path) -> None:
    data = member(b"box/", kind=b"5") + header(b"box/a", 5000) + b"x" * 700
    refused(tmp_path, data, "truncated")


def test_partial_header_is_refused(tmp_path: Path) -> None:
    data = member(b"box/", kind=b"5") + member(b"box/a", b"1") + b"ustar" * 10
    refused(tmp_path, data, "truncated")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "no ustar header"),
        (b"not a tarball", "no ustar header"),
        (ZEROS * 4, "no ustar header"),
        (bytes(range(256)) * 8, "no ustar header"),
    ],
)
def test_garbage_is_refused(tmp_path: Path, data: bytes, match: str) -> None:
    refused(tmp_path, data, match)


def test_bad_header_after_a_good_one_names_its_offset(tmp_path: Path) -> None:
    data = member(b"box/", kind=b"5") + b"x" * 512 + ZEROS * 2
    refused(tmp_path, data, "bad header at byte 512")


@pytest.mark.parametrize("compress", [gzip.compress, lzma.compress, bz2.compress])
def test_truncated_or_corrupt_compression_is_refused(tmp_path: Path, compress) -> None:
    packed = compress(archive(member(b"box/a", os.urandom(20000))))
    refused(tmp_path, packed[: len(packed) // 2], "truncated|corrupt", name="r.tar.x")
    broken = packed[:40] + bytes(b ^ 0x55 for b in packed[40:80]) + packed[80:]
    refused(tmp_path, broken, "truncated|corrupt|tarball", name="r.tar.x")


def test_zstd_is_named(tmp_path: Path) -> None:
    refused(tmp_path, b"\x28\xb5\x2f\xfd" + b"\0" * 600, "zstd")


def test_concatenated_streams_are_read(tmp_path: Path) -> None:
    data = archive(member(b"box/a", b"1"), member(b"box/b", b"2"))
    for compress in (gzip.compress, lzma.compress, bz2.compress):
        path = write(tmp_path / "r.tar.x", compress(data[:1024]) + compress(data[1024:]))
        assert [m[0] for m in members(path)] == ["box/", "box/a", "box/b"]


def test_xz_needing_a_huge_dictionary_is_refused(tmp_path: Path) -> None:
    packed = xz_with_dictionary(archive(member(b"box/a", b"1")), 36)  # 1 GiB
    refused(tmp_path, packed, "memory")


def xz_with_dictionary(data: bytes, code: int) -> bytes:
    """xz whose block header claims a dictionary of size code `code` (the encoder's own would
    need ten times that much memory to make it for real)."""
    packed = bytearray(lzma.compress(data, preset=0))
    size = (packed[12] + 1) * 4
    block = packed[12 : 12 + size]
    at = block.index(b"\x21\x01") + 2
    block[at] = code
    block[-4:] = zlib.crc32(bytes(block[:-4])).to_bytes(4, "little")
    packed[12 : 12 + size] = block
    return bytes(packed)


# -- caps ----------------------------------------------------------------------------------------


def test_too_many_members(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tarread, "MAX_MEMBERS", 50)
    data = archive(*(member(b"box/f%d" % n, b"1") for n in range(60)))
    refused(tmp_path, gzip.compress(data), "more than 50 members", name="r.tgz")
    ok = archive(*(member(b"box/f%d" % n, b"1") for n in range(40)))
    assert len(members(write(tmp_path / "ok.tar", ok))) == 41


def test_input_larger_than_the_cap_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.tar.xz"
    with open(path, "wb") as fh:
        fh.truncate(tarread.MAX_INPUT + 1)  # sparse: costs nothing to make
    with pytest.raises(RecordingError, match="larger than 64 MiB"):
        TarView(str(path))


@pytest.mark.timeout(10)
def test_fifo_as_recording_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "r.tar.gz"
    os.mkfifo(fifo)
    with pytest.raises(RecordingError, match="not a regular file"):
        TarView(str(fifo))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("compress", ["gz", "xz"])
def test_decompression_bomb_is_refused_in_bounded_memory(tmp_path: Path, compress: str) -> None:
    # 32 members of 32 MiB: 1 GiB of zeros in a file of at most about a MB.
    bomb = zero_bomb(tmp_path / f"bomb.tar.{compress}", 32, 32 << 20, compress)
    assert os.path.getsize(bomb) < 2 << 20
    code, err, peak = peak_rss_mib(
        "import sys\n"
        "from xputune.errors import RecordingError\n"
        "from xputune.host.view import TarView\n"
        "try:\n"
        "    TarView(sys.argv[1])\n"
        "except RecordingError as exc:\n"
        "    print(exc, file=sys.stderr)\n"
        "    sys.exit(3)\n",
        bomb,
    )
    assert code == 3, err
    assert "unpacks to more than 64 MiB" in err
    assert peak < 200, f"peak RSS {peak:.0f} MiB"


@pytest.mark.timeout(30)
def test_many_small_members_bomb_is_refused(tmp_path: Path) -> None:
    bomb = zero_bomb(tmp_path / "bomb.tgz", 70, 1 << 20)
    with pytest.raises(RecordingError, match="unpacks to more than 64 MiB"):
        TarView(bomb)


def test_member_over_its_read_cap_is_unreadable_not_fatal(tmp_path: Path) -> None:
    big = b"x" * ((1 << 20) + 1)
    data = archive(member(b"box/sys/big", big), member(b"box/proc/big", big))
    view = TarView(write(tmp_path / "r.tar", gzip.compress(data)))
    with pytest.raises(UnreadableValueError, match=r"/sys/big is larger than 1048576 bytes"):
        view.read_bytes("/sys/big")
    assert view.read_bytes("/proc/big") == big  # /proc/ allows cpuinfo of 1,024-CPU boxes


# -- members a recording never holds -------------------------------------------------------------


def test_hard_link_reads_its_target(tmp_path: Path) -> None:
    data = archive(member(b"box/sys/a", b"7\n"), member(b"box/sys/b", kind=b"1", link=b"box/sys/a"))
    view = TarView(write(tmp_path / "r.tar", data))
    assert view.read_text("/sys/b") == "7"


@pytest.mark.parametrize("link", [b"box/sys/nope", b"box/sys", b"../etc/passwd", b""])
def test_hard_link_to_nothing_readable_is_refused(tmp_path: Path, link: bytes) -> None:
    data = archive(member(b"box/sys/a", b"7"), member(b"box/sys/b", kind=b"1", link=link))
    with pytest.raises((RecordingError, RootEscapeError), match=r"hard link|outside"):
        TarView(write(tmp_path / "r.tar", data))


@pytest.mark.parametrize(
    ("kind", "what"),
    [(b"3", "character device"), (b"4", "block device"), (b"6", "FIFO"), (b"S", "sparse")],
)
def test_special_members_are_unreadable_values(tmp_path: Path, kind: bytes, what: str) -> None:
    data = archive(member(b"box/sys/node", kind=kind), member(b"box/sys/ok", b"1"))
    view = TarView(write(tmp_path / "r.tar", data))
    assert view.exists("/sys/node")
    with pytest.raises(UnreadableValueError, match=f"not a regular file.*{what}"):
        view.read_text("/sys/node")
    assert view.read_text("/sys/ok") == "1"


def test_tarfile_made_device_member(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        top = tarfile.TarInfo("box")
        top.type = tarfile.DIRTYPE
        tar.addfile(top)
        info = tarfile.TarInfo("box/zero")
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 5
        tar.addfile(info)
    view = TarView(write(tmp_path / "r.tar", buf.getvalue()))
    with pytest.raises(UnreadableValueError):
        view.read_bytes("/zero")


@pytest.mark.parametrize(
    ("members_", "match"),
    [
        ((member(b"box/a/b", b"1"), member(b"box/a", b"2")), "lie under it"),
        ((member(b"box/a/b", b"1"), member(b"box/a", kind=b"2", link=b"c")), "lie under it"),
        ((member(b"box/a", b"1"), member(b"box/a/b", b"2")), "not a directory"),
        ((member(b"box/l", kind=b"2", link=b"a"), member(b"box/l/x", b"2")), "not a directory"),
        ((member(b"box/l", kind=b"2"),), "empty target"),
        ((member(b"/box/a", b"1"),), "absolute"),
        ((member(b"other/a", b"1"),), "one top folder"),
        ((member(b"box/\xffa", b"1"),), "UTF-8"),
        ((member(b"box", b"file"),), "one top folder"),
        ((member(b"box/sys/a", b"1"), member(b"box", b"file")), "lie under it"),
    ],
)
def test_inconsistent_trees_are_refused(tmp_path: Path, members_: tuple, match: str) -> None:
    refused(tmp_path, archive(*members_), match)


def test_dotdot_member_is_a_root_escape(tmp_path: Path) -> None:
    with pytest.raises(RootEscapeError):
        TarView(write(tmp_path / "r.tar", archive(member(b"box/../x", b"1"))))


def test_names_are_normalised(tmp_path: Path) -> None:
    data = archive(member(b"./box//sys/./a", b"1"), member(b"box/sys/d/", kind=b"\0"))
    view = TarView(write(tmp_path / "r.tar", data))
    assert view.read_text("/sys/a") == "1"
    assert view.is_dir("/sys/d")


def test_control_characters_in_names_are_shown_escaped(tmp_path: Path) -> None:
    error = refused(tmp_path, archive(member(b"\x1b[2Jx/a", b"1")), "one top folder")
    assert "\x1b" not in str(error)


@pytest.mark.timeout(20)
def test_long_link_chains_resolve_quickly(tmp_path: Path) -> None:
    dots = b"/".join([b"."] * 20000) + b"/a"
    data = archive(
        member(b"box/a", b"1"), pax(record(b"linkpath", dots)), member(b"box/l", kind=b"2")
    )
    view = TarView(write(tmp_path / "r.tar", data))
    assert view.read_text("/l") == "1"


# -- fuzzing -------------------------------------------------------------------------------------


def _valid() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [("box/sys/a", b"1\n"), ("box/proc/" + "p" * 120, b"x" * 700)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("box/sys/l")
        link.type, link.linkname = tarfile.SYMTYPE, "a"
        tar.addfile(link)
        gnu = tarfile.TarInfo("box/sys/" + "g" * 120)
        gnu.size = 3
        tar.addfile(gnu, io.BytesIO(b"abc"))
    return buf.getvalue()


VALID = _valid()
FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _outcome(tmp_path: Path, data: bytes, name: str = "f.tar") -> None:
    path = write(tmp_path / name, data)
    try:
        view = TarView(path)
    except (RecordingError, RootEscapeError):
        return
    for entry, _, _ in list(view.members()):
        with contextlib.suppress(FileNotFoundError, HostError):
            view.read_bytes(entry)


@pytest.mark.timeout(120)
@FUZZ
@given(data=st.binary(max_size=4096))
def test_random_bytes_never_crash(tmp_path: Path, data: bytes) -> None:
    _outcome(tmp_path, data)
    _outcome(tmp_path, b"ustar" + data)


@pytest.mark.timeout(120)
@FUZZ
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8
    ),
    cut=st.integers(0, len(VALID)),
    compress=st.sampled_from([None, gzip.compress, lzma.compress, bz2.compress]),
)
def test_mutated_recordings_never_crash(
    tmp_path: Path, edits: list[tuple[int, int]], cut: int, compress
) -> None:
    data = bytearray(VALID)
    for pos, value in edits:
        data[pos] = value
    raw = bytes(data[:cut] if cut % 3 == 0 else data)
    _outcome(tmp_path, compress(raw) if compress else raw)


@pytest.mark.timeout(120)
@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=6))
def test_mutated_compressed_streams_never_crash(
    tmp_path: Path, edits: list[tuple[int, int]]
) -> None:
    data = bytearray(gzip.compress(VALID))
    for pos, value in edits:
        if pos < len(data):
            data[pos] = value
    _outcome(tmp_path, bytes(data), "f.tgz")


def test_valid_recording_is_read_like_tarfile(tmp_path: Path) -> None:
    path = write(tmp_path / "r.tar", VALID)
    ours = {name: payload for name, _kind, payload in members(path)}
    with tarfile.open(path) as tar:
        for info in tar.getmembers():
            if info.isfile():
                assert ours[info.name] == tar.extractfile(info).read()
            elif info.issym():
                assert ours[info.name] == info.linkname
