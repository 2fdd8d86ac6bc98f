"""Build the recordings `xputune verify` is tested on: real hosts' /sys with an SGLang server's
/proc written in (shapes.py says where each format comes from).

  seedbox-tp8-drift   the seed box (xputune/examples/h3c-hygon-p800: 8 NUMA nodes, 8 P800
                      on nodes 1 1 3 3 5 5 7 7) serving at TP 8 through `xputune launch
                      sglang` (--numa-node and XPUTUNE_HICACHE_NUMA from the plan, a
                      64 GB HostBuffer per rank): rank 3's pool bound to node 3 with every
                      page on node 1 (the LKML shape), rank 5's pool on node 5 on 4 KB pages
                      where THP was asked for; the other six where planned
  seedbox-tp8-shared  the same box at TP 8, --strategy shared: one TP-shared MLA buffer in
                      /dev/shm (unnamed, "(deleted)"), interleaved over nodes 0-7, on shmem
                      THP (the box with thp.shmem_enabled [advise], as `xputune apply` sets it)
  small-tp2-plain     the small test box (2 nodes, 2 cards on node 1) running SGLang without
                      xputune at TP 2: no plugin variables, so the plan is the cards' node
                      from the topology; it runs under `numactl --preferred=1` (every
                      mapping of its ranks shows prefer:1) and both ranks asked for
                      hugetlbfs pages (SGLANG_HUGEPAGE_SIZE=2MB): rank 0's pool got them on
                      node 1; rank 1's fell back to 4 KB pages and, node 1 running short,
                      the soft policy let 40% land on node 0 (the hwloc-devel shape)

Deterministic tarballs (sorted members, mtime 0, uid/gid 0, USTAR, xz) like
tests/fixtures/build_fixtures.py; `--check` rebuilds in memory and compares.

    python tests/placement/build_recordings.py [--check]
"""

from __future__ import annotations

import io
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.placement.shapes import (
    GIB,
    KB,
    MIB,
    PAGE,
    Mapping,
    library,
    net_tcp,
    nul_joined,
    stat,
    status,
    titled,
)

HERE = Path(__file__).resolve().parent
OUT = HERE / "recordings"
REPO = HERE.parents[1]
SEED = REPO / "xputune" / "examples" / "h3c-hygon-p800.tar.xz"
SMALL = REPO / "tests" / "fixtures" / "recordings" / "small-base.tar.xz"

SEED_NODE_CPUS = {n: tuple(range(16 * n, 16 * n + 16)) + tuple(range(128 + 16 * n, 144 + 16 * n))
                  for n in range(8)}  # fmt: skip
SMALL_NODE_CPUS = {0: (*range(0, 8), *range(16, 24)), 1: (*range(8, 16), *range(24, 32))}
#: 64 GB as a HostBuffer maps it: SGLang's pool bytes (64e9 less a token) in whole 2 MiB.
POOL_64GB = (64_000_000_000 // (2 * MIB)) * 2 * MIB
LAUNCHER = 4100
PORT_HEX = "0100007F:7530"  # 127.0.0.1:30000
LISTEN_INODE = 882231

Files = dict[str, bytes]


def _launcher_argv(extra: list[str], python: str = "/opt/sglang/bin/python3") -> list[str]:
    return [python, "-m", "sglang.launch_server", "--model-path", "/models/GLM-5", *extra,
            "--host", "127.0.0.1", "--port", "30000"]  # fmt: skip


def _environ(extra: dict[str, str]) -> bytes:
    base = {
        "PATH": "/opt/sglang/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
        "HOME": "/root", "LANG": "C.UTF-8", "SHELL": "/bin/bash", "USER": "root",
        "PYTHONUNBUFFERED": "1", "SGLANG_PLUGINS": "xputune",
    }  # fmt: skip
    return nul_joined([f"{k}={v}" for k, v in {**base, **extra}.items()])


def _process_maps(node: int, heap_node: int, pool: Mapping | None, seed: int,
                  task: str = "default") -> list[Mapping]:  # fmt: skip
    """A scheduler's address space: python, a few libraries, heap, a staging buffer, the pool,
    the stack and the kernel's own pages. Every mapping without a policy of its own shows
    the task's (`task`: SGLang's --numa-node sets prefer:N, numactl --preferred=N the same)."""
    base = 0x55D0C0A00000 + seed * 0x1000000
    maps = [
        Mapping(base, 0x6D000, "r--p", "/opt/sglang/bin/python3.11", "fd:01", 1835321,
                pages={node: 109}, anon=False, dirty=False, mapmax=11, flags="rd mr mw me"),
        Mapping(base + 0x6D000, 0x2D5000, "r-xp", "/opt/sglang/bin/python3.11", "fd:01",
                1835321, 0x6D000, pages={node: 601}, anon=False, dirty=False, mapmax=11,
                flags="rd ex mr mw me"),
        Mapping(base + 0x3000000, 0x2A51000, "rw-p", "[heap]", pages={heap_node: 10217}),
    ]  # fmt: skip
    top = 0x7F3A00000000 - seed * 0x2000000000
    maps.append(Mapping(top - 2 * GIB - 8 * MIB, 2 * GIB, pages={heap_node: 2 * GIB // PAGE},
                        flags="rd wr mr mw me ac"))  # fmt: skip
    if pool is not None:
        maps.append(pool)
        maps.append(Mapping(pool.start + pool.size, 2 * MIB - 0x1000))  # the buffer's slack
    at = top + 0x10000000
    for i, lib in enumerate(("libtorch_cpu.so", "libxpurt.so", "libc.so.6")):
        maps += library(at, f"/opt/sglang/lib/{lib}", 2233100 + i, node)
        at += 0x1000000
    stack = 0x7FFD3A000000 - seed * 0x100000
    maps += [
        Mapping(stack, 0x21000, "rw-p", "[stack]", pages={node: 19},
                flags="rd wr mr mw me gd ac"),
        Mapping(stack + 0x80000, 0x4000, "r--p", "[vvar]", pages={},
                flags="rd mr pf io de dd sd"),
        Mapping(stack + 0x84000, 0x2000, "r-xp", "[vdso]", pages={node: 2}, anon=False,
                dirty=False, mapmax=40, flags="rd ex mr mw me de sd"),
    ]  # fmt: skip
    for m in maps:
        if m is not pool:
            m.policy = task
    return sorted(maps, key=lambda m: m.start)


def _proc(files: Files, pid: int, *, name: str, ppid: int, cmdline: bytes, environ: bytes,
          cpus: tuple[int, ...], mems: tuple[int, ...], maps: list[Mapping], threads: int,
          cpu: int, ncpus: int, fds: dict[int, str] | None = None) -> None:  # fmt: skip
    rss = sum(m.resident for m in maps)
    p = f"proc/{pid}"
    files[f"{p}/status"] = status(name, pid, ppid, cpus, mems, threads, rss // KB,
                                  ncpus).encode()  # fmt: skip
    files[f"{p}/stat"] = stat(pid, name, ppid, LAUNCHER, threads, rss // PAGE, cpu).encode()
    files[f"{p}/cmdline"] = cmdline
    files[f"{p}/environ"] = environ
    files[f"{p}/comm"] = (name[:15] + "\n").encode()
    files[f"{p}/smaps"] = "".join(m.smaps() for m in maps).encode()
    files[f"{p}/numa_maps"] = "".join(m.numa_line() for m in maps).encode()
    for fd, target in (fds or {}).items():
        files[f"{p}/fd/{fd}"] = ("LINK:" + target).encode()


def _launcher(files: Files, argv: list[str], env: bytes, node_cpus: dict[int, tuple[int, ...]],
              ncpus: int, task: str = "default") -> None:  # fmt: skip
    every = tuple(sorted(c for cpus in node_cpus.values() for c in cpus))
    nodes = tuple(node_cpus)
    maps = _process_maps(nodes[0], nodes[0], None, 0, task)
    fds = {0: "/dev/pts/0", 1: "/dev/pts/0", 2: "/dev/pts/0", 3: "anon_inode:[eventpoll]",
           17: f"socket:[{LISTEN_INODE}]", 18: "socket:[882240]"}  # fmt: skip
    _proc(files, LAUNCHER, name="python3", ppid=3990, cmdline=nul_joined(argv), environ=env,
          cpus=every, mems=nodes, maps=maps, threads=37, cpu=3, ncpus=ncpus, fds=fds)  # fmt: skip
    files["proc/net/tcp"] = net_tcp([
        ("00000000:0016", "00000000:0000", "0A", 21877),
        (PORT_HEX, "00000000:0000", "0A", LISTEN_INODE),
        ("0100007F:9C41", "00000000:0000", "0A", 882301),
        ("0100007F:7530", "0100007F:D2E8", "01", 882599),
    ]).encode()  # fmt: skip
    any6 = "00000000000000000000000000000000"
    files["proc/net/tcp6"] = net_tcp([(f"{any6}:0016", f"{any6}:0000", "0A", 21879)]).encode()
    argv_len = len(nul_joined(["/opt/sglang/bin/python3", "-c", "from multiprocessing.spawn "
                               "import spawn_main; spawn_main(tracker_fd=9, pipe_handle=41)",
                               "--multiprocessing-fork"]))  # fmt: skip
    detok = _process_maps(nodes[0], nodes[0], None, 9, task)
    _proc(files, 4170, name="sglang::detokenizer", ppid=LAUNCHER,
          cmdline=titled("sglang::detokenizer", argv_len), environ=b"\0" * 2811, cpus=every,
          mems=nodes, maps=detok, threads=4, cpu=7, ncpus=ncpus)  # fmt: skip


SPAWN_ARGV_LEN = 131


def _rank(files: Files, tp: int, pid: int, *, title: str, node: int, cpus: tuple[int, ...],
          mems: tuple[int, ...], pool: Mapping, ncpus: int, task: str) -> None:  # fmt: skip
    maps = _process_maps(node, node, pool, tp + 1, task)
    _proc(files, pid, name=title, ppid=LAUNCHER, cmdline=titled(title, SPAWN_ARGV_LEN),
          environ=b"\0" * 2811, cpus=cpus, mems=mems, maps=maps, threads=84, cpu=cpus[0],
          ncpus=ncpus)  # fmt: skip


def _pool(tp: int, *, policy: str, pages: dict[int, int], huge: bool, size: int = POOL_64GB,
          seed: int | None = None) -> Mapping:  # fmt: skip
    start = 0x7F3A00000000 - ((tp + 1) if seed is None else seed) * 0x2000000000 - 0x1C00000000
    resident = sum(pages.values()) * PAGE
    return Mapping(start, size, policy=policy, pages=pages, huge=resident if huge else 0,
                   flags="rd wr mr mw me ac hg dc", thp_eligible=1)  # fmt: skip


def seedbox_drift() -> Files:
    files: Files = {}
    nodes = (1, 1, 3, 3, 5, 5, 7, 7)
    env = _environ({
        "XPU_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "XPUTUNE_HICACHE_LIFO": "1",
        "XPUTUNE_HICACHE_ASYNC": "1", "XPUTUNE_HICACHE_COUNT_ONCE": "1",
        "XPUTUNE_HICACHE_KERNELS": "1", "XPUTUNE_HICACHE_NUMA": " ".join(map(str, nodes)),
    })  # fmt: skip
    argv = _launcher_argv([
        "--tp-size", "8", "--numa-node", *map(str, nodes), "--enable-hierarchical-cache",
        "--hicache-size", "64", "--hicache-mem-layout", "layer_first", "--hicache-io-backend",
        "kernel", "--hicache-write-policy", "write_through_selective",
    ])  # fmt: skip
    _launcher(files, argv, env, SEED_NODE_CPUS, 256)
    every = tuple(range(8))
    pages = POOL_64GB // PAGE
    for tp, node in enumerate(nodes):
        on = 1 if tp == 3 else node  # rank 3: bound to 3, every page on 1 (cpuset rebind)
        pool = _pool(tp, policy=f"bind:{node}", pages={on: pages}, huge=tp != 5)
        _rank(files, tp, 4161 + tp, title=f"sglang::scheduler_TP{tp}", node=node,
              cpus=SEED_NODE_CPUS[node], mems=every, pool=pool, ncpus=256,
              task=f"prefer:{node}")  # fmt: skip
    return files


def seedbox_shared() -> Files:
    files: Files = {}
    cards = (1, 1, 3, 3, 5, 5, 7, 7)
    env = _environ({
        "XPU_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "XPUTUNE_HICACHE_LIFO": "1",
        "XPUTUNE_HICACHE_KERNELS": "1", "XPUTUNE_HICACHE_TP_SHARED": "1",
    })  # fmt: skip
    argv = _launcher_argv([
        "--tp-size", "8", "--numa-node", *map(str, cards), "--enable-hierarchical-cache",
        "--hicache-size", "64", "--hicache-mem-layout", "layer_first",
    ])  # fmt: skip
    _launcher(files, argv, env, SEED_NODE_CPUS, 256)
    every = tuple(range(8))
    size = POOL_64GB + 2 * MIB  # data, then the rank-agreement header, rounded to 2 MiB
    per_node = POOL_64GB // PAGE // 8
    for tp, node in enumerate(cards):
        # rank 0 faulted every page in under interleave; the others mapped them by reading
        pool = Mapping(0x7E0000000000, size, "rw-s", "/dev/shm/#1572 (deleted)", "00:1b", 1572,
                       policy="interleave:0-7", pages={n: per_node for n in every},
                       huge=POOL_64GB, flags="rd wr sh mr mw me ms hg", thp_eligible=1,
                       mapmax=8, anon=False)  # fmt: skip
        _rank(files, tp, 4161 + tp, title=f"sglang::scheduler_TP{tp}", node=node,
              cpus=SEED_NODE_CPUS[node], mems=every, pool=pool, ncpus=256,
              task=f"prefer:{node}")  # fmt: skip
    thp = "sys/kernel/mm/transparent_hugepage/shmem_enabled"
    files[thp] = b"always within_size [advise] never deny force\n"
    return files


def small_plain() -> Files:
    files: Files = {}
    env = _environ({"XPU_VISIBLE_DEVICES": "0,1", "SGLANG_HUGEPAGE_SIZE": "2MB"})
    argv = _launcher_argv(["--tp-size", "2", "--enable-hierarchical-cache", "--hicache-size",
                           "16"], python="/usr/bin/python3")  # fmt: skip
    _launcher(files, argv, env, SMALL_NODE_CPUS, 32, task="prefer:1")
    size = 16_000_000_000 // (2 * MIB) * 2 * MIB
    huge = Mapping(0x7F1C00000000, size, "rw-s", "/anon_hugepage (deleted)", "00:0f", 20011,
                   policy="prefer:1", pages={1: size // (2 * MIB)}, page_kb=2048,
                   flags="rd wr sh mr mw me ms de ht", hugetlb=True, anon=False)  # fmt: skip
    four_k = size // PAGE
    split = Mapping(0x7F1800000000, size, policy="prefer:1",
                    pages={1: four_k * 6 // 10, 0: four_k - four_k * 6 // 10},
                    flags="rd wr mr mw me ac", thp_eligible=1)  # fmt: skip
    every = tuple(range(32))
    for tp, pool in enumerate((huge, split)):
        _rank(files, tp, 4161 + tp, title=f"sglang::scheduler_TP{tp}", node=1, cpus=every,
              mems=(0, 1), pool=pool, ncpus=32, task="prefer:1")  # fmt: skip
    return files


RECORDINGS: dict[str, tuple[Path, Callable[[], Files]]] = {
    "seedbox-tp8-drift": (SEED, seedbox_drift),
    "seedbox-tp8-shared": (SEED, seedbox_shared),
    "small-tp2-plain": (SMALL, small_plain),
}


def _member(name: str, data: bytes | None = None, link: str | None = None) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if link is not None:
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, link, 0o777
    elif data is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.size, info.mode = len(data), 0o444
    return info


def build(name: str) -> bytes:
    """The recording `name`, uncompressed: the base host's members with the server's /proc."""
    base, make = RECORDINGS[name]
    files = make()
    members: dict[str, tuple[bytes | None, str | None]] = {}
    with tarfile.open(base) as src:
        top = src.getnames()[0].split("/")[0]
        for info in src.getmembers():
            rel = info.name[len(top) :].lstrip("/")
            if info.issym():
                members[rel] = (None, info.linkname)
            elif info.isdir():
                members[rel] = (None, None)
            elif info.isfile():
                fh = src.extractfile(info)
                members[rel] = (fh.read() if fh else b"", None)
    for path, data in files.items():
        if data.startswith(b"LINK:"):
            members[path] = (None, data[5:].decode())
        else:
            members[path] = (data, None)
        parts = path.split("/")
        for i in range(1, len(parts)):
            members.setdefault("/".join(parts[:i]), (None, None))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        tar.addfile(_member(name))
        for rel in sorted(k for k in members if k):
            data, link = members[rel]
            info = _member(f"{name}/{rel}", data, link)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def path(name: str) -> Path:
    return OUT / f"{name}.tar.xz"


def main(argv: list[str]) -> int:
    import lzma

    check = "--check" in argv
    stale = []
    OUT.mkdir(exist_ok=True)
    for name in RECORDINGS:
        data = build(name)
        target = path(name)
        current = lzma.decompress(target.read_bytes()) if target.exists() else None
        if current == data:
            continue
        if check:
            stale.append(name)
            continue
        target.write_bytes(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME))
        print(f"wrote {target.relative_to(REPO)}")
    if stale:
        print(f"out of date: {', '.join(stale)} (python tests/placement/build_recordings.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
