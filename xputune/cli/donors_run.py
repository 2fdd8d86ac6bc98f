"""`xputune launch l3-donors`: a decode node's DRAM donors for the L3 pool, run and supervised."""

from __future__ import annotations

import sys

from xputune.cli import exits
from xputune.cli.options import (
    EXAMPLE,
    L3_HOST,
    L3_MASTER,
    L3_POOL_GB,
    L3_PROTOCOL,
    L3_SEGMENT_GB,
    ROOT,
)
from xputune.cli.spec import Command, Opt, Request
from xputune.host import open_host

LAUNCH_DONORS = Command(
    ("launch", "l3-donors"),
    "xputune.cli.donors_run:run_donors",
    (
        L3_MASTER.but(help="mooncake_master's address, HOST:PORT: where every donor mounts "
                      "its segment (in Kubernetes its Service, "
                      "xputune-l3-master.NAMESPACE.svc:50051).", required=True),
        L3_HOST.but(help="This node's address, the one the other nodes reach its donors at (in "
                    "Kubernetes the pod's IP from the downward API). Default: $MOONCAKE_HOST."),
        L3_PROTOCOL.but(help="Mooncake's transport: rdma (default) or tcp."),
        L3_SEGMENT_GB.but(help="At most this many GB donated by the node, split over its "
                          "donors (default: all its NICs' nodes can spare)."),
        L3_POOL_GB.but(help="The whole pool's size in GB, to say how many nodes like this one "
                       "fill it."),
        Opt("force", ("--force",), "Run the donors unbound when numactl is missing. Never runs "
            "from --root/--example: those are dry runs only.", kind="flag", default=False),
        Opt("dry_run", ("--dry-run", "-n"), "Print one shell line per donor; run nothing.",
            kind="flag", default=False),
        ROOT,
        EXAMPLE,
    ),
    exits=(exits.DIFFERENCE, exits.UNSUPPORTED),
)  # fmt: skip


def run_donors(req: Request) -> int:
    """Run this decode node's DRAM donors for the L3 pool: one mooncake_client per RDMA NIC.

    Plans the donors as `xputune plan --l3 mooncake --role decode` does (each NIC's donor
    mounts what its NUMA node can spare after the OS, RDMA buffers and the decode ranks of
    every card; --l3-segment-gb caps the node's total), then starts each one bound with numactl
    to its NIC's node and supervises them as one set: SIGTERM and SIGINT are forwarded to all,
    and when one ends the others are stopped and the command exits with status 1, so systemd
    or Kubernetes restarts the whole set. Exits 0 when stopped by SIGTERM, 130 by SIGINT.

    It first says in one line what is missing: mooncake_client (the mooncake package's own
    binary, else PATH), numactl (--force runs the donors unbound, and says so), this node's
    address (--l3-host, else MOONCAKE_HOST), an RDMA NIC that is up: one reason a line, exit
    status 3. --dry-run prints the commands, one shell line per donor, runs nothing, and says
    each reason the run would be refused for on its line, ending with the run's status; with
    --root/--example it is the only way to run (nothing acts on this host with a recording's
    data). The master is one process per cluster: `xputune plan --l3 mooncake --role decode`
    prints its command.

    Examples:

        xputune launch l3-donors -n --example h3c-hygon-p800 --l3-master m1:50051

        xputune launch l3-donors --l3-master m1:50051 --l3-host 10.0.0.7 \\
            --l3-segment-gb 512
    """
    from xputune.cli.output import columns, shell_command
    from xputune.cli.refusals import refuse, would_refuse
    from xputune.launch import donors, policy
    from xputune.plan.l3 import HOST_VARIABLE, L3Request
    from xputune.topology.discover import discover
    from xputune.userfiles import printable

    policy.refuse_recording(bool(req.root or req.example), req.dry_run, "the donors")
    request = L3Request(
        "mooncake", pool_gb=req.l3_pool_gb, segment_gb=req.l3_segment_gb, protocol=req.l3_protocol,
        role="decode", master=req.l3_master, local_hostname=req.l3_host,
    )  # fmt: skip
    topo = discover(open_host(req.root, req.example))
    prepared = donors.prepare(topo, request, force=req.force, live=not req.dry_run)
    for line in prepared.notes:  # NIC names and the host's values: data
        sys.stderr.write(printable(line) + "\n")
    # what this host lacks (exit table: 3), the same status for the run and its dry run
    status = exits.UNSUPPORTED if prepared.refusals else exits.OK
    if prepared.refusals and not req.dry_run:
        refuse(prepared.refusals, status, "the donors")
    would_refuse(prepared.refusals)
    if req.dry_run:
        for command in prepared.commands:
            for line in shell_command(command, None, columns(), (HOST_VARIABLE,)).splitlines():
                print(printable(line))
        return status
    sys.stderr.flush()
    return donors.supervise(prepared.commands, prepared.names)
