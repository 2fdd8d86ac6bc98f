"""`xputune launch sglang`: probe, plan, check, then exec SGLang with all of it."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from xputune.cli import exits
from xputune.cli.options import EXAMPLE, KEEP, L3_SHARED, PLAN_SHARED, PROFILE, PYTHON, ROOT
from xputune.cli.spec import Command, Opt, Request
from xputune.host import open_host

TYPE_CHECKING = False
if TYPE_CHECKING:
    from xputune.launch.policy import Launch
    from xputune.launch.sglang import LaunchSpec

FEATURES = Opt(
    "features", ("--features",), "Cache plugin features, comma-separated: lifo, async, "
    "count-once, kernels, numa (host KV buffer on the plan's node), ghost, tp-shared "
    "(--strategy shared uses it instead of numa); 'none' for plain SGLang.",
    default="lifo,async,count-once,kernels,numa", metavar="LIST",
)  # fmt: skip
LAUNCH_PROFILE = PROFILE.but(help="Tuning profile to check against (default: the recommended one).")
FORCE = Opt(
    "force", ("--force",), "Launch despite critical drift, an L3 preflight refusal, a TP size "
    "SGLang refuses, and all-nodes without IDO. Never launches from --root/--example: those "
    "are dry runs only.", kind="flag", default=False,
)  # fmt: skip
DRY_RUN = Opt(
    "dry_run", ("--dry-run", "-n"), "Print the environment and command; run nothing. Ends as "
    "the launch would: 1 on critical drift, 3 where SGLang's environment lacks something or "
    "the L3 preflight refuses, else 0.", kind="flag", default=False,
)  # fmt: skip


def launch_request(req: Request, named, tp: int | None):  # -> policy.LaunchRequest
    """The launch's request from the flags both launch sglang and launch cluster take."""
    from xputune.cli.requests import plan_request
    from xputune.launch import policy

    return policy.LaunchRequest(
        plan=plan_request(named, req, tp),
        user_args=tuple(req.user_args),
        features=tuple(f.strip() for f in req.features.split(",") if f.strip() not in ("", "none")),
        profile=req.profile,
        force=req.force,
        stats_dir=getattr(req, "stats_dir", None),
        python=req.python,
    )


LAUNCH_SGLANG = Command(
    ("launch", "sglang"),
    "xputune.cli.launch_run:run_launch",
    (
        *PLAN_SHARED,
        *L3_SHARED,
        FEATURES,
        LAUNCH_PROFILE,
        FORCE,
        DRY_RUN,
        Opt("stats_dir", ("--stats-dir",), "Directory where each server process writes the "
            "cache plugin's counters (xputune-stats-<pid>.json).", kind="path",
            metavar="DIR"),
        Opt("verify", ("--verify",), "Stay beside SGLang instead of replacing this process: "
            "once the server answers, run `xputune verify` on it once and print where each "
            "rank's host KV pool landed (kept for `xputune status`).", kind="flag",
            default=False),
        KEEP.but(help="With --verify: keep the result as the last verification "
                 "(/var/lib/xputune), for `xputune status` and `metrics`."),
        Opt("verify_timeout", ("--verify-timeout",), "Seconds to wait for the server to "
            "answer before verifying (past it, it runs unverified).", kind="float", min=1,
            max=86400, default=1800, metavar="SECONDS"),
        PYTHON,
        ROOT,
        EXAMPLE,
    ),
    passthrough="user_args",
    passthrough_metavar="SGLANG_ARGS",
    exits=(exits.DIFFERENCE, exits.PERMISSION, exits.UNSUPPORTED),
)  # fmt: skip


def run_launch(req: Request) -> int | None:
    """Run `python -m sglang.launch_server` bound, sized and tuned for this machine.

    Computes --numa-node, --enable-hierarchical-cache, --hicache-size (explicit and per rank,
    so SGLang's own host-wide sizing stays off), --hicache-mem-layout layer_first,
    --hicache-io-backend and --hicache-write-policy from the probe and the plan, sets
    CUDA/XPU_VISIBLE_DEVICES and the cache plugin's switches, runs `xputune check` and
    refuses on critical drift unless --force, then merges your ARGS
    (after `--`, which separates xputune's options from SGLang's: an option before it that
    xputune does not know is an error, not passed on): your flags win, and each conflict is
    reported. A TP size SGLang refuses (one that does not divide the model's attention heads)
    is an error unless --force.

    SGLang runs in the Python named by --python (or XPUTUNE_SGLANG_PYTHON; default: the one
    running xputune), which is asked first what it has: its sglang release, whose flags are
    the ones written (0.5.20 to 0.5.23 are known; an untested release is asked for its own
    parser's options), and xputune's plugin (entry point group sglang.srt.plugins), which
    must load there and be this xputune's version. What is missing is one line with its fix
    and exit status 3, --force or not. A dry run says each refusal as a line of its own
    ("would refuse: ...", with its fix), prints the command anyway, and ends with the status
    the launch would: 3 for what SGLang's environment lacks, else 1 for critical drift, else
    3 for an L3 tier that cannot work here; 0 when it would launch.
    --disaggregation-ib-device is added, one RDMA device per rank, on a prefill or decode
    server (--disaggregation-mode in ARGS) only: SGLang reads it nowhere else.

    With `--device cpu` in ARGS it serves from host memory on a host without cards: no card
    bindings or drift check, the L2 tier sized from this host's memory, SGLang's CPU engine
    switched on, and the plugin features that apply (host-buffer and kernels added, numa
    dropped).

    With --verify it starts SGLang as its child instead of replacing itself, and once the
    server answers runs `xputune verify` on it once: where each rank's host KV pool landed
    (bytes per NUMA node, huge pages, CPUs), printed after the plugin's startup line and kept
    for `xputune status` and `metrics`. It then waits for SGLang, passes SIGTERM and SIGHUP
    on, and exits with SGLang's status.

    With --l3 mooncake (--l3-master HOST:PORT, --l3-protocol tcp|rdma) or --l3 file
    (--l3-dir DIR) it adds SGLang's storage tier: the backend, one extra-config (master,
    metadata server, protocol, device per rank, segment size) and the prefetch policy, with
    the layout the backend runs (page_first for Mooncake). It first checks that the master
    answers, that the mooncake package and libibverbs load, and that the segment fits, and says
    in one line what is missing (--force launches anyway).

    Examples:

        xputune launch sglang -n --example h3c-hygon-p800 -- --model-path \\
            zai-org/GLM-5 --tp 8
        xputune launch sglang --strategy shared --tier max -- --model-path \\
            /models/GLM-5 --tp 8

        xputune launch sglang -- --model-path /models/tiny-llama --device cpu
        xputune launch sglang --verify -- --model-path /m/GLM-5 --tp 8
        xputune launch sglang --python /opt/sglang/bin/python -- \\
            --model-path /m/GLM-5

        xputune launch sglang --l3 mooncake --l3-master m1:50051 -- --model-path \\
            /m/GLM-5
    """
    model, tp = req.model, req.tp  # this runner rewrites them
    from xputune.launch import policy, preflight
    from xputune.launch.cpu import is_cpu_device
    from xputune.launch.sglang import execute, user_value
    from xputune.plan.host_plan import RefusedTpError
    from xputune.plan.models import resolve_model
    from xputune.topology.discover import discover
    from xputune.userfiles import model_config, printable

    policy.refuse_recording(bool(req.root or req.example), req.dry_run)
    tp = policy.reconcile_tp(tp, req.user_args)
    model, config_text = policy.model_from_args(model, req.config, req.user_args)
    named = resolve_model(model, model_config(model, Path(config_text) if config_text else None))
    request = launch_request(req, named, tp)  # fmt: skip
    sglang = preflight.start(req.python)  # asks SGLang's interpreter while the host is read
    view = open_host(req.root, req.example)
    topo = discover(view)
    try:
        if is_cpu_device(user_value(req.user_args, "--device")):
            launch = policy.prepare_cpu(topo, request, sglang)
        else:
            launch = policy.prepare(view, topo, request, sglang)
    except RefusedTpError as exc:
        raise RefusedTpError(f"{exc} (--force launches it anyway)") from None
    refusals = list(launch.refusals)
    if launch.drifting:
        from xputune.cli.suggest import same_host, suggested

        profiled = ["--profile", req.profile] if req.profile else []
        fix = suggested(["apply", *profiled], view, req.root, mark="`")
        see = shlex.join(["xputune", "check", *profiled]) + same_host(req.root, req.example)
        refusals[0] += f": run {fix} (see `{see}`)"
    refusals = [f"{r}, or pass --force" for r in refusals]
    status = refusal_status(launch)
    if status is not None and not req.dry_run:
        from xputune.cli.refusals import refuse

        refuse(launch.blockers or refusals, status)
    # a dry run says each reason on its line, with its fix, and ends as the launch would
    launch.notes += [f"would refuse: {line}" for line in (*launch.blockers, *refusals)]
    for line in launch.notes:  # drift lines quote the host's values: data
        sys.stderr.write(printable(line) + "\n")
    if req.dry_run:
        from xputune.cli.output import columns, shell_command

        if req.verify:
            sys.stderr.write("note: would verify where each rank's KV pool lands once the "
                             "server answers\n")  # fmt: skip
        print(shell_command(launch.spec.argv, launch.spec.env, columns()))
        return status
    if req.verify:
        return launch_verified(launch.spec, req.verify_timeout, req.keep)
    execute(launch.spec)
    return None


def refusal_status(launch: Launch) -> int | None:
    """The status a real launch ends with before it runs anything, None when it would run.

    A dry run ends with it too, so `launch --dry-run && launch` tells "would launch" from
    "would refuse": what SGLang's environment lacks is 3 (checked first, --force or not),
    critical drift 1 (the exit table's difference: `xputune apply` fixes it), any other
    refusal (the L3 preflight) 3."""
    if launch.blockers:
        return exits.UNSUPPORTED
    if launch.refusals:
        return exits.DIFFERENCE if launch.drifting else exits.UNSUPPORTED
    return None


def launch_verified(spec: LaunchSpec, timeout: float, keep_result: bool = True) -> int:
    """SGLang as a child: verified once it answers (measure/supervise.py); its exit status."""
    from xputune.errors import XputuneError
    from xputune.measure.supervise import run_verified
    from xputune.measure.verify import keep, server_endpoint
    from xputune.measure.verify import verify as read

    endpoint = server_endpoint(tuple(spec.argv))
    if endpoint is None:
        raise XputuneError("cannot tell where the server will listen (--host, --port)")

    def say(line: str) -> None:
        from xputune.cli.output import note

        note(line)

    def ready(pid: int) -> None:
        from xputune.cli.output import console, text
        from xputune.cli.verify_cmds import STYLE, render
        from xputune.placement.report import summary

        view = open_host()
        try:
            doc = read(view, endpoint.url, pid)
        except XputuneError as exc:
            say(f"xputune verify: not verified: {exc}")
            return
        out = console(stderr=True)
        out.print(text(f"xputune verify: {summary(doc)}", STYLE.get(doc["verdict"], "")),
                  soft_wrap=True)  # fmt: skip
        render(doc, out)
        if keep_result:
            say(keep(view, doc))

    return run_verified(spec, endpoint, timeout, ready, say)
