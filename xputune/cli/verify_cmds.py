"""verify: where a running SGLang server's ranks and their host KV pools really are."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xputune.cli import exits
from xputune.cli.options import FORMAT, KEEP, ROOT
from xputune.cli.output import Format, console, emit_data, note
from xputune.cli.spec import Command, Opt, Request

if TYPE_CHECKING:
    from rich.console import Console

#: pid_max's ceiling on 64-bit Linux (PID_MAX_LIMIT, 2^22).
MAX_PID = 1 << 22

URL = Opt(
    "url", ("--url",), "The running server's address, e.g. http://127.0.0.1:30000: its ranks "
    "are the processes below the one listening on that port (and, on the live host, it says "
    "how large its pool is).", kind="name", metavar="URL",
)  # fmt: skip
PID = Opt(
    "pid", ("--pid",), "The server's launcher (`xputune launch sglang` or `python -m "
    "sglang.launch_server`): its ranks are the scheduler processes below it.",
    kind="int", min=1, max=MAX_PID, metavar="PID",
)  # fmt: skip
VERIFY = Command(
    ("verify",),
    "xputune.cli.verify_cmds:verify",
    (URL, PID, ROOT.but(help="Read a recording instead of the live host: a tarball or a folder "
                       "holding proc/ (the server's /proc/PID files) and sys/."), KEEP,
     FORMAT),
    exits=(exits.DIFFERENCE,),
)  # fmt: skip


def verify(req: Request) -> int:
    """Read where each rank's host KV pool really lives, and say what differs from the plan.

    Finds every scheduler process of the server (SGLang titles them sglang::scheduler_TP<n>)
    below --pid or below the process listening on --url's port, and reads for each: the CPUs
    it may run on (Cpus_allowed_list) against its planned node, and the mapping that holds its
    host KV pool (/proc/PID/smaps and numa_maps: the anonymous or /dev/shm mapping of the
    pool's size, which the server's /server_info or its --hicache-size gives): bytes per
    NUMA node, share on huge pages, its policy, its size. The plan is the rank's
    XPUTUNE_HICACHE_NUMA (or TP-shared interleave) from the launcher, else --numa-node, else
    its card's node. Drift is a pool off its node, an interleave that misses nodes, 4 KB pages
    where huge pages were planned, CPUs off the node: each named with its fix. What cannot be
    read is unknown with a warning, not drift. The result is kept for `xputune status` and
    `xputune metrics` (in /var/lib/xputune, when writable).

    Exit status 0 when every rank is where it was planned (or unknown), 1 on drift.

    Examples:

        xputune verify --url http://127.0.0.1:30000
        xputune verify --pid 4100 --format json | jq '.ranks[] | {rank, verdict}'
        xputune verify --root node7-procs.tar.xz --pid 4100
    """
    from xputune.host import open_host
    from xputune.measure.verify import keep as kept_in
    from xputune.measure.verify import verify as read

    if req.url is None and req.pid is None:
        from xputune.errors import XputuneError

        raise XputuneError("give the server's --url or its launcher's --pid")
    view = open_host(req.root)
    doc = read(view, req.url, req.pid)
    kept = kept_in(view, doc) if req.keep else None
    if req.fmt is not Format.table:
        emit_data(doc, req.fmt)
    else:
        render(doc, console())
    if kept:
        note(kept)
    return exits.DIFFERENCE if doc["drift"] else exits.OK


def _share(pool: dict[str, Any] | None) -> str:
    """Where the pool's pages are: "n1 60%, n0 40%"; past two nodes, "n0-7 12-13%"."""
    if pool is None or not pool.get("nodes"):
        return "?"
    nodes = sorted(pool["nodes"], key=lambda n: (-n["bytes"], n["node"]))
    if len(nodes) <= 2:
        return ", ".join(f"n{n['node']} {100 * n['share']:.0f}%" for n in nodes)
    from xputune.host.values import format_cpulist

    shares = [100 * n["share"] for n in nodes]
    spread = f"{min(shares):.0f}-{max(shares):.0f}%" if round(min(shares)) != round(
        max(shares)) else f"{min(shares):.0f}%"  # fmt: skip
    return f"n{format_cpulist([n['node'] for n in nodes])} {spread}"


def _size(pool: dict[str, Any] | None) -> str:
    if pool is None:
        return "?"
    n = pool["size_bytes"]
    return f"{n / 2**30:.1f}G" if n >= 2**30 else f"{n / 2**20:.1f}M"


def _plan(plan: dict[str, Any]) -> str:
    """The planned node ("n3"), or the nodes a shared pool interleaves over ("n0-7")."""
    nodes = plan["nodes"]
    if plan["mode"] == "interleave":
        from xputune.host.values import format_cpulist

        return f"n{format_cpulist(nodes)}" if nodes else "?"
    return f"n{nodes[0]}" if nodes else "?"


STYLE = {"ok": "green", "drift": "red", "unknown": "yellow"}


def rows_table(doc: dict[str, Any]) -> Any:
    from xputune.cli.output import ID, add_row, new_table, text

    title = text(f"Ranks of pid {doc['server']['pid']} on {doc['host']}")
    table = new_table(title, [("rank", ID), ("plan", ID), "CPUs", "pool", ("policy", ID),
                              "pages", "huge", "verdict"])  # fmt: skip
    for r in doc["ranks"]:
        pool = r["pool"]
        huge = pool and pool["huge_share"]
        add_row(
            table, r["rank"], _plan(r["plan"]), r["cpus"]["on_node"] or "?",
            _size(pool), (pool or {}).get("policy") or "?", _share(pool),
            "?" if huge is None or pool is None else f"{100 * huge:.0f}%",
            text(r["verdict"], STYLE.get(r["verdict"], "")),
        )  # fmt: skip
    return table


def render(doc: dict[str, Any], out: Console) -> None:
    """The ranks' table, each finding with its fix, the summary, then the warnings."""
    from xputune.cli.output import bullets, is_quiet, print_fitted, text
    from xputune.placement.report import summary

    parts: list[Any] = [rows_table(doc)]
    for r in doc["ranks"]:
        for f in r["findings"]:
            parts.append(text(f"{r['rank']} (pid {r['pid']}) {f['kind']}: {f['text']}", "red"))
            parts.append(bullets([f"fix: {f['fix']}"], mark="    "))
    from xputune.placement.pool import gib

    expected = doc["pool_expected_bytes"]
    size = gib(expected) if expected else "unknown"
    parts.append(text(f"pool size expected: {size} ({doc['pool_expected_from']})", "dim"))
    parts.append(text(summary(doc), STYLE.get(doc["verdict"], "")))
    print_fitted(out, *parts)
    if not is_quiet():
        for r in doc["ranks"]:
            for line in r["notes"]:
                out.print(text(f"note: {r['rank']}: {line}", "dim"), soft_wrap=True)
        for warning in doc["warnings"]:
            out.print(text(f"warning: {warning}", "yellow"), soft_wrap=True)
