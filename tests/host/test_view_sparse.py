"""The live probe's cheap paths read what the whole reads and the plain resolver gave.

- read_sparse: a config space read where decode looks (a live host's every word is a config
  access, trapped in a VM) indexes, slices and len()s as the whole file's bytes, decodes the
  same, and says what the file is where a privilege cut it short (sysfs gives anyone but root
  64 bytes); a recording being made still gets the whole file.
- read_mapped: pci.ids mapped, not copied, on the live host only; the same bytes.
- The live resolver, which remembers every prefix, resolves as os.path.realpath(strict=True)
  does: links relative and absolute, "..", missing paths, loops.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.host.test_pciconfig import make_config
from xputune.errors import HostDataError, HostError, SymlinkLoopError
from xputune.host import pciconfig, view
from xputune.host.view import DirView, SparseBytes


def sparse_view(root: Path) -> DirView:
    """A tree on disk read the live host's way (its config files word by word)."""
    found = DirView(str(root))
    found.sparse_reads = True
    return found


def write(root: Path, data: bytes, name: str = "config") -> str:
    (root / name).write_bytes(data)
    return f"/{name}"


def decoded(data: bytes | SparseBytes) -> object:
    try:
        return pciconfig.decode(data, "config")
    except HostDataError as exc:
        return str(exc)


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=300),
    keys=st.lists(
        st.one_of(
            st.integers(-320, 320),
            st.builds(
                slice,
                st.none() | st.integers(-320, 320),
                st.none() | st.integers(-320, 320),
                st.none() | st.sampled_from([1, 2, 3, -1]),
            ),
        ),
        max_size=12,
    ),
)
def test_sparse_bytes_index_and_slice_as_bytes_do(tmp_path_factory, data, keys) -> None:
    root = tmp_path_factory.mktemp("sparse")
    with sparse_view(root).read_sparse(write(root, data)) as sparse:
        assert len(sparse) == len(data)
        for key in keys:
            try:
                expected = data[key]
            except IndexError:
                with pytest.raises(IndexError):
                    sparse[key]
                continue
            assert sparse[key] == expected, key


@st.composite
def config_spaces(draw) -> bytes:
    """A real layout (capabilities, PCIe, extended ones) with a few bytes garbled and cut
    anywhere: loops, pointers out of range, truncated capabilities, odd lengths."""
    size = draw(st.sampled_from([256, 4096]))
    data = bytearray(make_config(draw(st.integers(0, 0xFFFF)), draw(st.integers(0, 15)), size))
    for _ in range(draw(st.integers(0, 4))):
        data[draw(st.integers(0, size - 1))] = draw(st.integers(0, 255))
    return bytes(data[: draw(st.integers(0, size))] if draw(st.booleans()) else data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096) | config_spaces())
def test_a_config_space_read_sparsely_decodes_as_read_whole(tmp_path_factory, data) -> None:
    root = tmp_path_factory.mktemp("config")
    with sparse_view(root).read_sparse(write(root, data)) as sparse:
        assert decoded(sparse) == decoded(data)


def test_only_the_words_decode_looks_at_are_read(tmp_path: Path, monkeypatch) -> None:
    data = make_config(devctl2=0x0300, port_type=6)
    asked: list[tuple[int, int]] = []
    pread = os.pread

    def counting(fd: int, size: int, offset: int) -> bytes:
        asked.append((offset, size))
        return pread(fd, size, offset)

    monkeypatch.setattr(view.os, "pread", counting)
    with sparse_view(tmp_path).read_sparse(write(tmp_path, data)) as sparse:
        assert pciconfig.decode(sparse) == pciconfig.decode(data)
    assert asked[0] == (4095, 2)  # where the file ends: as st_size says
    read = sum(size for offset, size in asked[1:])
    assert read == 14 * 4, asked  # header 5, capabilities 3, PCIe fields 4, extended 2


def test_what_a_privilege_cuts_short_is_what_is_read(tmp_path: Path, monkeypatch) -> None:
    """sysfs says 4096 bytes but gives anyone but root 64: the length is what a read gives,
    and decode says "needs root", never "off"."""
    data = make_config(devctl2=0x0300)
    pread = os.pread
    monkeypatch.setattr(view.os, "pread", lambda fd, n, at: pread(fd, max(0, min(n, 64 - at)), at))
    with sparse_view(tmp_path).read_sparse(write(tmp_path, data)) as sparse:
        assert len(sparse) == 64
        space = pciconfig.decode(sparse)
    assert space == pciconfig.decode(data[:64]) and not space.visible


def test_a_file_that_ends_nowhere_expected_is_read_whole(tmp_path: Path, monkeypatch) -> None:
    data = make_config()
    pread = os.pread
    monkeypatch.setattr(view.os, "pread", lambda fd, n, at: pread(fd, max(0, min(n, 100 - at)), at))
    with sparse_view(tmp_path).read_sparse(write(tmp_path, data)) as whole:
        assert whole == data  # (the whole read is os.read, which the cut does not reach)


def test_a_failing_word_read_is_a_host_error(tmp_path: Path, monkeypatch) -> None:
    path = write(tmp_path, make_config())
    with sparse_view(tmp_path).read_sparse(path) as sparse:

        def failing(fd: int, size: int, offset: int) -> bytes:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(view.os, "pread", failing)
        with pytest.raises(HostError, match=r"cannot read /config: Input/output error"):
            pciconfig.decode(sparse)


def test_sparse_reads_keep_read_bytes_errors(tmp_path: Path) -> None:
    tree = sparse_view(tmp_path)
    with pytest.raises(FileNotFoundError):
        tree.read_sparse("/missing")
    (tmp_path / "folder").mkdir()
    with pytest.raises(HostError, match="is a directory"):
        tree.read_sparse("/folder")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(HostError, match="not a regular file"):
        tree.read_sparse("/fifo")
    (tmp_path / "sys").mkdir()
    write(tmp_path, b"\0" * ((1 << 20) + 1), "sys/big")  # past the cap of a /sys/... path
    with pytest.raises(HostError, match="larger than"):
        tree.read_sparse("/sys/big")
    assert "/missing" in tree.accessed and "/fifo" in tree.accessed


def test_a_host_being_recorded_keeps_the_whole_file(tmp_path: Path) -> None:
    data = make_config()
    tree = sparse_view(tmp_path)
    tree.keep_contents()
    path = write(tmp_path, data)
    with tree.read_sparse(path) as got:
        assert pciconfig.decode(got) == pciconfig.decode(data)
    assert tree.contents == {path: data}


def test_only_the_live_host_reads_sparsely(tmp_path: Path) -> None:
    assert DirView("/").sparse_reads and not DirView(str(tmp_path)).sparse_reads
    path = write(tmp_path, make_config())
    with DirView(str(tmp_path)).read_sparse(path) as whole:
        assert type(whole) is bytes


def _config_files() -> list[str]:
    folder = "/sys/bus/pci/devices"
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return [f"{folder}/{name}/config" for name in names[:32]]


@pytest.mark.skipif(not _config_files(), reason="no PCI functions on this machine")
def test_the_live_hosts_config_spaces_decode_alike() -> None:
    live = DirView("/")
    for path in _config_files():
        try:
            whole = live.read_bytes(path)
        except HostError:
            continue
        with live.read_sparse(path) as sparse:
            assert len(sparse) == len(whole), path
            assert decoded(sparse) == decoded(whole), path


# -- read_mapped ---------------------------------------------------------------------------------


def test_the_live_host_maps_a_file_on_disk(tmp_path: Path) -> None:
    data = b"1af4  Red Hat, Inc.\n\t1000  Virtio network device\n" * 1000
    (tmp_path / "pci.ids").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    live = DirView("/")
    mapped = live.read_mapped(str(tmp_path / "pci.ids"))
    assert type(mapped) is not bytes and mapped[:] == data and len(mapped) == len(data)
    assert mapped.find(b"\n\t1000", 0, 100) == data.find(b"\n\t1000", 0, 100)
    assert live.read_mapped(str(tmp_path / "empty")) == b""
    assert str(tmp_path / "pci.ids") in live.accessed
    with pytest.raises(FileNotFoundError):
        live.read_mapped(str(tmp_path / "missing"))


def test_only_live_files_outside_sys_and_proc_are_mapped(tmp_path: Path) -> None:
    (tmp_path / "pci.ids").write_bytes(b"data")
    assert DirView(str(tmp_path)).read_mapped("/pci.ids") == b"data"  # a tree: read
    recording = DirView("/")
    recording.keep_contents()
    path = str(tmp_path / "pci.ids")
    assert recording.read_mapped(path) == b"data"
    assert recording.contents == {path: b"data"}  # a recording keeps what it reads
    assert type(DirView("/").read_mapped("/proc/self/status")) is bytes


# -- the live resolver ---------------------------------------------------------------------------


def _plain(path: str) -> str:
    try:
        return os.path.realpath(path, strict=True)
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as exc:
        return "loop" if exc.errno == errno.ELOOP else f"error {exc.errno}"


def _ours(live: DirView, path: str) -> str:
    try:
        return live.realpath(path)
    except FileNotFoundError:
        return "missing"
    except SymlinkLoopError:
        return "loop"
    except HostError as exc:
        return f"error {exc}"


def test_the_live_resolver_resolves_as_realpath(tmp_path: Path) -> None:
    top = tmp_path.resolve()
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "file").write_text("x")
    (top / "rel").symlink_to("a/b")
    (top / "abs").symlink_to(top / "a")
    (top / "a" / "up").symlink_to("..")
    (top / "a" / "b" / "chain").symlink_to("../../abs/b/file")
    (top / "dangling").symlink_to("nowhere")
    (top / "loop1").symlink_to("loop2")
    (top / "loop2").symlink_to("loop1")
    (top / "root").symlink_to("/")
    names = [
        "a", "a/b/file", "rel", "rel/file", "rel/..", "rel/../b/file", "abs/b", "abs/../rel",
        "a/up/a/up/rel/file", "a/b/chain", "a/b/chain/..", "dangling", "dangling/x", "loop1",
        "loop1/x", "a/b/file/x", "a/b/file/..", "root/proc/self/status", "root/..", "missing",
        "./a//b/", "rel/./../../a",
    ]  # fmt: skip
    paths = [f"{top}/{name}" for name in names] + ["/", "/..", "/proc/self/exe", "/proc/self/fd/0"]
    live = DirView("/")
    for path in paths + paths[::-1]:  # the second time round, from remembered prefixes
        assert _ours(live, path) == _plain(path), path
    fresh = DirView("/")
    assert [_ours(fresh, p) for p in reversed(paths)] == [_plain(p) for p in reversed(paths)]


def test_the_live_resolver_lstats_each_prefix_once(tmp_path: Path, monkeypatch) -> None:
    device = tmp_path.resolve() / "devices" / "pci0000:00" / "0000:00:01.0"
    device.mkdir(parents=True)
    for name in ("vendor", "device", "class", "numa_node"):
        (device / name).write_text("0x1234\n")
    (tmp_path / "bus").mkdir()
    (tmp_path / "bus" / "0000:00:01.0").symlink_to("../devices/pci0000:00/0000:00:01.0")
    seen: list[str] = []
    lstat = os.lstat
    monkeypatch.setattr(view.os, "lstat", lambda p: seen.append(p) or lstat(p))
    live = DirView("/")
    for name in ("vendor", "device", "class", "numa_node"):
        assert live.read_text(f"{tmp_path}/bus/0000:00:01.0/{name}") == "0x1234"
    assert len(seen) == len(set(seen))  # no component of any of the paths twice
    assert sum(p.startswith(str(device)) for p in seen) == 5  # the folder, then each file once


def test_proc_self_is_whoever_asks(tmp_path: Path) -> None:
    """A child forked with a live view resolves /proc/self to itself, whatever the parent
    resolved below it before."""
    live = DirView("/")
    assert live.realpath("/proc/self/status") == f"/proc/{os.getpid()}/status"
    out = tmp_path / "child"
    pid = os.fork()
    if pid == 0:  # the child: write what it resolved, and leave at once
        try:
            out.write_text(live.realpath("/proc/self/stat") + " " + str(os.getpid()))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    resolved, child = out.read_text().split()
    assert resolved == f"/proc/{child}/stat"
