"""metrics, labels and fleet report: one box's state for Prometheus and Kubernetes, many boxes'
probes side by side."""

from __future__ import annotations

import sys

from xputune.cli import exits
from xputune.cli.options import EXAMPLE, FORMAT, MAX_EXPIRY_MINUTES, PROFILE, ROOT
from xputune.cli.output import Format, console, emit_data, note
from xputune.cli.spec import Arg, Command, Opt, Request
from xputune.host import open_host

JUDGE = PROFILE.but(
    help="Judge drift against this profile (name or .yaml file). Default: the one `xputune "
    "recommend` picks for this host."
)
METRICS = Command(
    ("metrics",),
    "xputune.cli.fleet_cmds:metrics",
    (
        ROOT,
        EXAMPLE,
        JUDGE,
        Opt("textfile", ("--textfile",), "Write DIR/xputune.prom atomically (for "
            "node_exporter's --collector.textfile.directory) instead of printing.",
            kind="path", metavar="DIR"),
    ),
)  # fmt: skip
LABELS = Command(
    ("labels",),
    "xputune.cli.fleet_cmds:labels",
    (
        Opt("nfd", ("--nfd",), "Node Feature Discovery's features.d folder, usually "
            "/etc/kubernetes/node-feature-discovery/features.d ('-' prints instead).",
            kind="path", metavar="DIR", required=True),
        ROOT,
        EXAMPLE,
        JUDGE,
        Opt("expiry", ("--expiry",), "NFD drops the labels this long after the write unless "
            "rewritten (0: never expire; at most a year).", kind="int", min=0,
            max=MAX_EXPIRY_MINUTES, default=60, metavar="MINUTES"),
    ),
)  # fmt: skip
FLEET_REPORT = Command(
    ("fleet", "report"),
    "xputune.cli.fleet_cmds:report",
    (FORMAT,),
    args=(
        Arg("files", "FILES...", "`xputune probe --format json` files, and optionally "
            "`xputune check --format json` files (node7.probe.json and node7.check.json are "
            "both host node7).", multiple=True),
    ),
    exits=(exits.DIFFERENCE,),
)  # fmt: skip


def _host(root: str | None, example: str | None, profile: str | None):
    from xputune.fleet.judge import host_name, judge
    from xputune.topology.discover import discover

    view = open_host(root, example)
    topo = discover(view)
    return topo, host_name(view), judge(view, topo, profile)


def metrics(req: Request) -> None:
    """Print the host's layout, links, PCIe ordering and drift as Prometheus metrics.

    Text exposition format, names prefixed xputune_, values in base units: per card its NUMA
    node, uplink group, PCIe link speed (transfers per second) and width now and at most, a
    0/1 degraded flag; ID-based ordering (0/1) of every port on each card's path; per knob the
    places that drift from the profile (the same rows as `xputune check`); _info metrics for
    the host and each card. A value that cannot be read has no sample. Where `xputune watch`
    runs, also its counters (events by kind, drift found and re-applies per knob), the last
    re-apply's time and result, and the places backing off. Where `xputune verify` ran, the
    last verification per rank: xputune_kv_pool_bytes{rank,node} (the pool's resident bytes
    on each NUMA node), its share on the planned node and on huge pages, and
    xputune_kv_pool_drift{rank} (0/1).

    Examples:

        xputune metrics --example h3c-hygon-p800
        xputune metrics --textfile /var/lib/node_exporter/textfile_collector
    """
    from xputune.fleet import watchstate
    from xputune.fleet.atomic import write_atomic
    from xputune.fleet.metrics import exposition
    from xputune.tune import verifystate

    topo, host, judgement = _host(req.root, req.example, req.profile)
    view = open_host(req.root, req.example)
    watch, warning = watchstate.read(view)  # where `xputune watch` runs
    if warning:
        note(f"xputune: warning: {warning}")
    verification, warning = verifystate.read(view)  # where `xputune verify` ran
    if warning:
        note(f"xputune: warning: {warning}")
    text = exposition(topo, host, judgement, watch, verification=verification)
    if req.textfile is None:
        sys.stdout.write(text)
    else:
        path = write_atomic(req.textfile, "xputune.prom", text)
        note(f"wrote {path}")


def labels(req: Request) -> None:
    """Write node labels for the scheduler as a Node Feature Discovery local feature file.

    Labels (prefix xputune.io/): card-count, card-model, card-vendor, card-numa-nodes (the node
    of each card, e.g. 1-1-3-3-5-5-7-7), numa-nodes-with-cards, cards-per-numa-node, uplinks,
    uplink-shared, cards-per-uplink, degraded-links, ido (on, off, partial, unknown), strategy
    (the binding strategy `xputune plan` would pick: all-nodes where IDO allows it, else
    local), profile and profile-holds. The file (DIR/xputune) is replaced atomically and
    starts with a `# +expiry-time=` directive, so a node whose writer stopped loses them.

    Examples:

        xputune labels --nfd /etc/kubernetes/node-feature-discovery/features.d
        xputune labels --nfd - --example h3c-hygon-p800
    """
    from datetime import timedelta

    from xputune.fleet.atomic import write_atomic
    from xputune.fleet.labels import FILE_NAME, feature_file
    from xputune.fleet.labels import labels as make_labels

    topo, _, judgement = _host(req.root, req.example, req.profile)
    text = feature_file(make_labels(topo, judgement),
                        expiry=timedelta(minutes=req.expiry) if req.expiry else None)  # fmt: skip
    if req.nfd == "-":
        sys.stdout.write(text)
    else:
        path = write_atomic(req.nfd, FILE_NAME, text)
        note(f"wrote {path}")


def report(req: Request) -> int:
    """Which hosts drift, which cards run degraded links, which hosts differ in layout.

    Each file is a probe or a check document of one host (told apart by content); the host is
    the file name without .json, .probe.json or .check.json. Layout is the card models and
    count, cards per NUMA node and cards per uplink; a host differs when any of these is not
    what most hosts have. Drift needs the host's check file. A file that is not such a
    document, or is of a newer schema_version, is refused with its name (exit 2).

    Exit status: 0 when nothing stands out, 1 when a host drifts, a link is degraded or a
    layout differs.

    Example:

        for h in $(cat hosts); do ssh $h xputune probe -f json > $h.probe.json; \\
            done
        xputune fleet report *.probe.json *.check.json
    """
    from xputune.fleet.report import build, has_findings, load_files

    doc = build(load_files(req.files))
    if req.fmt is not Format.table:
        emit_data(doc, req.fmt)
    else:
        _render(doc)
    return exits.DIFFERENCE if has_findings(doc) else exits.OK


def _render(doc) -> None:
    from rich.table import Table

    from xputune.cli.output import ID, TEXT, add_row, text
    from xputune.fleet.report import describe_link

    out = console()
    table = Table(header_style="bold")
    for name, kw in (
        ("Host", ID),
        ("Cards", TEXT),
        ("Per NUMA node", TEXT),
        ("Per uplink", TEXT),
        ("IDO", ID),
        ("Links", TEXT),
        ("Check", TEXT),
    ):
        table.add_column(name, **kw)  # fmt: skip
    for row in doc["hosts"]:
        layout = row["layout"] or {}
        differs = row["layout_differs"]

        def cell(aspect: str, layout=layout, differs=differs):
            return text(layout.get(aspect, "-"), style="red" if aspect in differs else "")

        degraded = len(row["degraded_links"])
        links = text(f"{degraded} degraded", "red") if degraded else ("ok" if layout else "-")
        check = row["check"]
        if check is None:
            verdict = text("no check file", "yellow")
        elif check["ok"]:
            verdict = text(f"{check['profile']}: holds", "green")
        else:
            knobs = ", ".join(check["not_holding"])
            verdict = text(f"{check['profile']}: {knobs}", "red")
        add_row(table, row["host"], cell("cards"), cell("cards_per_numa_node"),
                cell("cards_per_uplink"), row["ido"] or "-", links, verdict)  # fmt: skip
    out.print(table)
    majority = doc["majority_layout"]
    if any(majority.values()):
        shown = "; ".join(f"{k.replace('_', ' ')} {v}" for k, v in majority.items() if v)
        out.print(text(f"majority layout: {shown}"), soft_wrap=True)
    for d in doc["degraded_links"]:
        what = d["card"] or f"uplink {d['bdf']}"
        out.print(text(f"degraded: {d['host']} {what} ({d['bdf']}) at {describe_link(d)}"),
                  soft_wrap=True)  # fmt: skip
    summary = []
    if doc["drifting_hosts"]:
        summary.append(f"{len(doc['drifting_hosts'])} drift ({', '.join(doc['drifting_hosts'])})")
    if doc["layout_outliers"]:
        summary.append(f"{len(doc['layout_outliers'])} differ in layout "
                       f"({', '.join(doc['layout_outliers'])})")  # fmt: skip
    if doc["unchecked_hosts"]:
        summary.append(f"{len(doc['unchecked_hosts'])} without a check file")
    hosts = len(doc["hosts"])
    out.print(text(f"{hosts} host{'s' * (hosts != 1)}: " + ("; ".join(summary) or
                                                          "nothing stands out")),
              soft_wrap=True)  # fmt: skip
