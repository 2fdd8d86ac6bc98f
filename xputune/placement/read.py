"""Read a running server's ranks through a host view and judge each one (`xputune verify`).

Discovery's error policy throughout: a process that vanished, a file this user may not read
(another user's numa_maps needs root or the same uid), a garbage line, a pool that cannot be
found, each becomes an unknown with a warning naming the path, and the other ranks are still
read. Only the user's own mistakes stop it, in one line: a --pid that is no process here, or a
process with no SGLang scheduler at or below it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xputune.errors import XputuneError
from xputune.host.procinfo import status_field
from xputune.host.procmaps import parse_numa_maps, parse_smaps
from xputune.host.reader import Reader
from xputune.host.values import parse_cpulist
from xputune.placement import intent as intents
from xputune.placement.judge import Facts, Verdict, judge
from xputune.placement.pool import pick
from xputune.placement.procs import Processes, RankId, schedulers
from xputune.topology.model import Topology

#: Most bad lines named per file (the rest are counted).
_NAMED = 1


@dataclass
class Reading:
    """Every rank of one server, judged."""

    host: str  # the view's label
    top: int  # the server's process (the launcher's pid, or the one on its port)
    found_by: str  # how `top` was found, in words
    expected: int | None  # the pool's expected size in bytes
    expected_from: str  # where that came from, in words
    ranks: list[Verdict]
    warnings: list[str] = field(default_factory=list)

    @property
    def drifting(self) -> list[Verdict]:
        return [r for r in self.ranks if r.verdict == "drift"]

    @property
    def unknown(self) -> list[Verdict]:
        return [r for r in self.ranks if r.verdict == "unknown"]


def expected_from_argv(argv: tuple[str, ...]) -> tuple[int | None, str]:
    """(bytes, source) of the pool from --hicache-size GB (per rank; 0 means SGLang sizes it
    from --hicache-ratio or host memory, which the command line alone cannot tell)."""
    values = intents.flag(argv, "--hicache-size")
    text = values[-1] if values else ""
    try:
        gb = float(text)
    except ValueError:
        return None, "unknown"
    if not 0 < gb < 1e7:
        return None, "unknown"
    return int(gb * 1e9), f"--hicache-size {text} on the server's command line"


def _bad_lines(reader: Reader, path: str, bad: list) -> None:
    if bad:
        first = bad[0]
        more = f" ({len(bad)} such lines)" if len(bad) > _NAMED else ""
        reader.odd(path, first.value, f"{first.expected}{more}", "skipped")


def _cpulist(reader: Reader, path: str, status: str | None, key: str) -> tuple[int, ...] | None:
    if status is None:
        return None
    value = status_field(status, key, path)
    if value is None:
        reader.odd(path, None, f"expected a {key} line", "taken as unknown")
        return None
    return reader.parse(path, value, parse_cpulist)


def read_rank(
    reader: Reader,
    pid: int,
    rank: RankId,
    title: str,
    expected: int | None,
) -> Facts:
    """What the kernel says about one rank's process: its CPUs, its nodes, its pool."""
    base = f"/proc/{pid}"
    status = reader.text(f"{base}/status", required=True)
    cpus = _cpulist(reader, f"{base}/status", status, "Cpus_allowed_list")
    mems = _cpulist(reader, f"{base}/status", status, "Mems_allowed_list")
    smaps_text = reader.text(f"{base}/smaps", required=True)
    pool = None
    if smaps_text is not None:
        entries, bad = parse_smaps(smaps_text, f"{base}/smaps")
        _bad_lines(reader, f"{base}/smaps", bad)
        numa_text = reader.text(f"{base}/numa_maps")
        numa = {}
        if numa_text is None:
            reader.warn(f"{base}/numa_maps: not there (a kernel without NUMA?); pages per node "
                        "taken as unknown")  # fmt: skip
        else:
            numa, bad = parse_numa_maps(numa_text, f"{base}/numa_maps")
            _bad_lines(reader, f"{base}/numa_maps", bad)
        pool = pick(entries, numa, expected, reader.warnings, f"{base}/smaps")
        if pool is not None and pool.numa is None and numa_text is not None:
            reader.warn(f"{base}/numa_maps: no line for the pool at {pool.smaps.start:#x}; "
                        "pages per node taken as unknown")  # fmt: skip
    return Facts(pid, rank, title, cpus, mems, pool)


def read(
    reader: Reader,
    procs: Processes,
    top: int,
    found_by: str,
    topo: Topology | None,
    expected: int | None = None,
    expected_from: str = "unknown",
) -> Reading:
    """Find the schedulers at or below `top`, read and judge each (see the docstring)."""
    view = reader.view
    if not procs.exists(top):
        raise XputuneError(f"no process {top} on {view.label} ({found_by})")
    ranks = schedulers(procs, top)
    if not ranks:
        raise XputuneError(
            f"no SGLang scheduler process (titled sglang::scheduler...) at or below pid {top} "
            f"on {view.label} ({found_by}): is it an SGLang server, and has it started?"
        )
    if expected is None:
        expected, expected_from = expected_from_argv(intents.server_argv(procs, ranks[0][0], top))
    node_cpus = {n.id: n.cpus for n in topo.numa_nodes} if topo is not None else {}
    settings = topo.settings if topo is not None else None
    verdicts: list[Verdict] = []
    for pid, rank in ranks:
        facts = read_rank(reader, pid, rank, procs.title(pid), expected)
        env = intents.environ(procs, pid, top)
        if env.pid is None:
            reader.warn(
                f"/proc/{pid}/environ: no readable environment for {rank.label} or its "
                "parents; the plan is read from the command line and the topology"
            )
        argv = intents.server_argv(procs, pid, top)
        plan = intents.plan(env, argv, rank, topo, facts.mems, reader.warnings)
        if plan.mode == "unknown":
            reader.warn(
                f"{rank.label} (pid {pid}): no plan found (no XPUTUNE_HICACHE_NUMA, no "
                "--numa-node, no card on this host for it): reported, not judged"
            )
        verdicts.append(judge(facts, plan, node_cpus, settings))
    said = list(dict.fromkeys(reader.warnings))  # ranks share files (the launcher's environ)
    return Reading(view.label, top, found_by, expected, expected_from, verdicts, said)


__all__ = ["Reading", "expected_from_argv", "read", "read_rank"]
