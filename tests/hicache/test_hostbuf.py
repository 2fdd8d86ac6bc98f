"""Private host buffer: step order, placement, huge pages, pinning, safe close."""

from __future__ import annotations

import errno
import mmap

import pytest

from xputune.devices.runtime import HostRegistrar
from xputune.errors import HostError
from xputune.hicache import linux_mm, numa_mem
from xputune.hicache.hostbuf import HostBuffer, mlock_registrar, populate

SIZE = 8 << 20


def _thp_mode() -> str:
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        text = f.read()
    return text[text.index("[") + 1 : text.index("]")]


def test_bound_buffer_is_aligned_placed_and_usable():
    node = numa_mem.allowed_nodes()[0]
    with HostBuffer(SIZE, node=node) as buf:
        assert buf.address % linux_mm.HUGE_PAGE_SIZE == 0
        assert buf.placement is not None and buf.placement.ok
        assert buf.placement.pages == {node: SIZE // linux_mm.PAGE_SIZE}
        assert numa_mem.get_mempolicy(buf.address) == (numa_mem.MPOL_BIND, (node,))
        arr = buf.array("float16", (4, -1))
        arr[3, -1] = 1.5
        assert buf.view()[SIZE - 2 :].tobytes() == arr[3, -1:].tobytes()
        del arr


def test_interleave_true_uses_every_allowed_node():
    with HostBuffer(SIZE, interleave=True) as buf:
        assert buf.expected_nodes == numa_mem.allowed_nodes()
        assert buf.placement.mode == "interleave" and buf.placement.ok


def test_registration_sees_huge_page_and_dontfork_advice_already_applied():
    seen = {}

    def register(ptr, size):
        seen["flags"] = linux_mm.mapping_stats(ptr).vm_flags
        seen["args"] = (ptr, size)

    reg = HostRegistrar("probe", register, lambda ptr: seen.setdefault("unregistered", ptr))
    buf = HostBuffer(SIZE, registrar=reg)
    assert seen["args"] == (buf.address, SIZE)
    assert {"hg", "dc"} <= set(seen["flags"])
    assert buf.registered_with == "probe"
    buf.close()
    assert seen["unregistered"] == buf.address


def test_huge_false_asks_for_no_huge_pages():
    with HostBuffer(SIZE, huge=False) as buf:
        stats = buf.stats()
        assert "nh" in stats.vm_flags and stats.anon_huge == 0


@pytest.mark.skipif(_thp_mode() == "never", reason="THP disabled on this host")
def test_madv_hugepage_gets_anonymous_huge_pages():
    with HostBuffer(SIZE) as buf:
        assert buf.stats().anon_huge > 0


def test_mlock_registrar_pins_the_whole_buffer():
    with HostBuffer(SIZE, registrar=mlock_registrar()) as buf:
        assert buf.stats().locked == SIZE
        assert "register_s" in buf.timings


def test_close_refuses_while_a_view_is_alive():
    buf = HostBuffer(SIZE, populate=False)
    view = buf.array()
    with pytest.raises(BufferError, match="live views"):
        buf.close()
    del view
    buf.close()
    buf.close()  # idempotent


def test_bad_arguments():
    with pytest.raises(HostError):
        HostBuffer(0)
    with pytest.raises(HostError):
        HostBuffer(SIZE, node=0, interleave=[0])
    with pytest.raises(HostError, match="may only use"):
        HostBuffer(SIZE, node=max(numa_mem.online_nodes()) + 1)


def test_misplaced_pages_raise_and_unmap(monkeypatch):
    from xputune.hicache import hostbuf
    from xputune.hicache.numa_mem import Placement, PlacementError

    monkeypatch.setattr(
        hostbuf.numa_mem, "check_placement", lambda *a, **k: Placement((1,), "bind", {0: 5})
    )
    with pytest.raises(PlacementError, match="MISPLACED"):
        HostBuffer(SIZE)
    buf = HostBuffer(SIZE, strict=False)  # reported, not raised, when asked
    assert not buf.placement.ok
    buf.close()


class _OldKernelMap(mmap.mmap):
    """A mapping on a kernel without MADV_POPULATE_* (before 5.14)."""

    def madvise(self, option, *args):
        if option in (linux_mm.MADV_POPULATE_READ, linux_mm.MADV_POPULATE_WRITE):
            raise OSError(errno.EINVAL, "Invalid argument")
        return super().madvise(option, *args)


@pytest.mark.parametrize("write", [True, False])
def test_populate_falls_back_to_touching_pages(write):
    buf = _OldKernelMap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        buf[5] = 9
        populate(buf, 0, SIZE, write=write)
        # move_pages, not smaps: the kernel may merge this VMA with a neighbour of equal flags
        nodes = numa_mem.page_nodes(linux_mm.buffer_address(buf), SIZE, SIZE // linux_mm.PAGE_SIZE)
        assert len(nodes) == SIZE // linux_mm.PAGE_SIZE
        if write:
            assert min(nodes) >= 0  # every page faulted in
        assert buf[5] == 9  # contents kept
    finally:
        buf.close()
