"""Files a user names: one clear line for each way they fail, and what --model/--config name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.errors import XputuneError
from xputune.userfiles import (
    CONFIG_MAX,
    bounded,
    config_path,
    loads,
    model_config,
    open_binary,
    printable,
    read_bytes,
    read_json,
    read_lines,
    read_text,
)


def test_each_failure_is_one_line_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "gone.csv"
    with pytest.raises(XputuneError, match=f"^points file not found: {missing}$"):
        read_text(missing, "points file")
    with pytest.raises(XputuneError, match=f"^trace is a directory: {tmp_path}$"):
        open_binary(tmp_path, "trace")
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"tokens,ms\n\xe9\n")
    with pytest.raises(XputuneError, match="is not UTF-8 text"):
        read_lines(latin, "measured table")


def test_lines_split_at_newlines_only(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    table.write_bytes(b"1,2\n3,4\x0c5\r\n")  # a form feed is not a line break here
    assert read_lines(table, "table") == ["1,2\n", "3,4\x0c5\n"]


def test_model_names_a_file_a_folder_or_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "GLM-5"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 78}))
    assert config_path(str(folder)) == folder / "config.json"
    assert model_config(str(folder), None) == ("GLM-5", {"num_hidden_layers": 78})
    assert model_config(None, folder / "config.json") == ("GLM-5", {"num_hidden_layers": 78})
    assert model_config("glm-5", None) is None  # a preset name: plan/models.py resolves it
    assert model_config("zai-org/GLM-5", None) is None  # a Hugging Face id, no such folder
    assert model_config(None, None) is None


@pytest.mark.parametrize(
    ("text", "expected"), [("{", "not JSON"), ("[1, 2]", "expected a JSON object")]
)
def test_a_config_that_is_not_a_json_object_is_refused(
    tmp_path: Path, text: str, expected: str
) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(text)
    with pytest.raises(XputuneError, match=expected):
        model_config(str(bad), None)
    with pytest.raises(XputuneError, match="not both"):
        model_config("glm-5", bad)
    with pytest.raises(XputuneError, match="model config not found"):
        model_config(str(tmp_path / "other.json"), None)


# ------------------------------------------------------ what a path may name, and its size


@pytest.mark.timeout(30)
def test_fifos_devices_and_sockets_are_refused_before_reading(tmp_path: Path) -> None:
    """A FIFO with no writer would block a read forever, /dev/zero never ends, a socket
    cannot be opened: each is one line, and nothing waits."""
    import socket

    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(XputuneError, match=f"^trace is a FIFO, not a regular file: {fifo}$"):
        open_binary(fifo, "trace")
    with pytest.raises(XputuneError, match=r"^points file is a character device, not a reg"):
        read_lines(Path("/dev/zero"), "points file")
    sock = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(sock))
        with pytest.raises(XputuneError, match=f"^model config is a socket, not a reg.*: {sock}$"):
            read_json(sock, "model config", CONFIG_MAX)
    with pytest.raises(XputuneError, match=f"^model config is a directory: {tmp_path}$"):
        read_json(tmp_path, "model config", CONFIG_MAX)


def test_a_file_over_its_cap_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "config.json"
    with big.open("wb") as fh:
        fh.truncate(CONFIG_MAX + 1)  # sparse: no disk spent
    with pytest.raises(XputuneError, match=rf"^model config too large: {big} \(more than 4 MiB\)$"):
        model_config(None, big)
    exact = tmp_path / "exact.csv"
    exact.write_bytes(b"1,2\n" * 256)
    assert len(read_bytes(exact, "table", 1024)) == 1024  # a file of just the cap is read
    with pytest.raises(XputuneError, match=r"more than 1,023 bytes\)$"):
        read_bytes(exact, "table", 1023)


def test_a_file_that_grows_while_read_is_cut_at_its_cap(tmp_path: Path) -> None:
    """The cap holds on what is read, not only on what fstat said: a /proc or /sys file tells
    no size, and a file may grow between the fstat and the read."""
    grows = tmp_path / "grows.json"
    grows.write_bytes(b"[" + b"1," * 10)
    fh = open_binary(grows, "document", limit=1000)
    with grows.open("ab") as more:
        more.write(b"1," * 1000)
    with fh, pytest.raises(XputuneError, match=f"document too large: {grows}"):
        fh.read()
    assert read_text(Path("/proc/self/status"), "status", 1 << 20).startswith("Name:")


def test_a_stream_read_through_bounded_stops_at_its_cap() -> None:
    import io

    source = io.BytesIO(b"x" * 5000)
    capped = bounded(source, "smi output", 4096)
    with pytest.raises(XputuneError, match=r"^smi output too large: stdin \(more than 4 KiB\)$"):
        capped.read()
    capped.close()
    assert not source.closed  # stdin stays open
    assert bounded(io.BytesIO(b"y" * 10), "smi output", 10).read() == b"y" * 10


# ------------------------------------------------------------------------ strict JSON


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"a": NaN}', "NaN is not a number JSON allows"),
        ('{"a": [Infinity]}', "Infinity is not a number JSON allows"),
        ('{"a": -Infinity}', "-Infinity is not a number JSON allows"),
        ('{"a": 1e400}', "1e400 is beyond the range of a number"),
        ('{"a": -2.5e308}', "-2.5e308 is beyond the range"),
        ('{"a": ' + "9" * 5000 + "}", "an integer of thousands of digits"),
        ("[" * 100_000, "nested too deeply"),
        ('{"a": ' * 100_000, "nested too deeply"),
        ('{"a": 1,\n "b": }', "not JSON (Expecting value at line 2 column 7)"),
    ],
)
def test_strict_json_refuses_what_json_is_not(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(XputuneError) as err:
        model_config(None, path)
    assert str(err.value) == f"{path}: {loads_reason(text)}" and says in str(err.value)


def loads_reason(text: str) -> str:
    try:
        loads(text)
    except ValueError as exc:
        return str(exc)
    raise AssertionError("accepted")


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                    allow_infinity=False) | st.text(), lambda inner: st.lists(inner) |
                    st.dictionaries(st.text(), inner), max_leaves=20))  # fmt: skip
def test_strict_json_reads_every_document_json_writes(value) -> None:
    assert loads(json.dumps(value)) == value


@given(st.text())
def test_printable_escapes_exactly_what_is_not_printable(text: str) -> None:
    shown = printable(text)
    assert shown.isprintable()
    assert (shown == text) is text.isprintable()
    if text.isprintable():
        return
    # each character that was not printable is its escape, the rest stay as they are
    assert shown == "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def test_printable_examples() -> None:
    assert printable("0000:ab:00.0") == "0000:ab:00.0"
    assert printable("P800 昆仑") == "P800 昆仑"  # printable non-ASCII stays
    assert printable("a\x1b[2Jb\n\u202ec\x7f") == "a\\x1b[2Jb\\n\\u202ec\\x7f"


def test_without_o_path_or_proc_the_same_checks_hold(tmp_path: Path, monkeypatch) -> None:
    """Where os.O_PATH is missing the path is opened for reading (O_NONBLOCK: a FIFO does not
    wait) and checked; where /proc is missing the regular file is opened again by path and
    must be the inode first checked (a swap in between is refused)."""
    import xputune.userfiles as userfiles

    fifo, plain, other = tmp_path / "fifo", tmp_path / "a.csv", tmp_path / "b.csv"
    os.mkfifo(fifo)
    plain.write_text("1,2\n")
    other.write_text("3,4\n")
    real_open = os.open
    with monkeypatch.context() as m:
        m.delattr(os, "O_PATH")
        with pytest.raises(XputuneError, match=r"^trace is a FIFO, not a regular file"):
            open_binary(fifo, "trace")
        assert read_lines(plain, "table") == ["1,2\n"]

    def no_proc(path, flags, *args):
        if str(path).startswith("/proc/self/fd/"):
            raise FileNotFoundError(path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(userfiles.os, "open", no_proc)
    assert read_lines(plain, "table") == ["1,2\n"]

    def swapped(path, flags, *args):  # the second open finds another file at the path
        if str(path).startswith("/proc/self/fd/"):
            raise FileNotFoundError(path)
        return real_open(other if flags & os.O_NONBLOCK else path, flags, *args)

    monkeypatch.setattr(userfiles.os, "open", swapped)
    with pytest.raises(XputuneError, match=f"^table changed while it was opened: {plain}$"):
        read_lines(plain, "table")
