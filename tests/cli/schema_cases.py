"""The commands whose --format json output has a schema, each run on bundled data.

Shared by tests/cli/test_schemas.py (validates each live output against its shipped schema)
and tests/cli/schema_gen.py (drafts a schema from live outputs when a document changes).
A schema name is the command path joined by '-' (`kernels plan` -> kernels-plan).
"""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "devices" / "data" / "real"
EXAMPLE = ["--example", "h3c-hygon-p800"]


def _trace(tmp: Path) -> str:
    lines = []
    for i in range(40):
        ids = [0, 1 + i % 3, 10 + i % 3] if i % 2 else [0, 20 + i]
        doc = {"timestamp": i, "input_length": 512 * len(ids) - 100, "output_length": 1}
        lines.append(json.dumps({**doc, "hash_ids": ids}))
    path = tmp / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _tree(tmp: Path, *more: str, watched: bool = False) -> str:
    """The seed box example extracted, with one applied transaction to roll back (`more`:
    further apply flags); `watched`: and one pass of `watch --once` after it."""
    from xputune.cli.entry import main
    from xputune.host.open import example_path

    with tarfile.open(example_path("h3c-hygon-p800")) as tar:
        tar.extractall(tmp / "tree", filter="tar")
    root = str(next((tmp / "tree").iterdir()))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["apply", "--root", root, "--profile", "hygon-p800", *more, "-fjson"]) == 0
        if watched:
            assert main(["watch", "--once", "--root", root]) == 0
    return root


def _fleet(tmp: Path, *, tie: bool = False) -> list[str]:
    """Probe and check files of a small fleet, written into tmp; the files to report on.

    Default: two seed boxes (one checked, one not), an H100 box (a layout outlier), and a seed
    box whose first switch uplink is marked degraded with an unreadable width (no recording
    has one). tie: an H100 box and a small 2-card box (no majority in any aspect) and a host
    with only a check file (no layout).
    """
    from tests.fixtures.trees import host_tree

    def write(name: str, argv: list[str], edit: Callable[[dict], None] | None = None) -> str:
        doc = run_json(argv)[1]
        if edit is not None:
            edit(doc)
        path = tmp / name
        path.write_text(json.dumps(doc))
        return str(path)

    def degrade_uplink(doc: dict) -> None:
        doc["uplinks"][0]["link"].update(degraded=True, current_speed_gts=16.0, current_width=None)

    seed, h100 = EXAMPLE, ["--example", "nvidia-hgx-h100"]
    if tie:
        return [
            write("a.probe.json", ["probe", "--root", str(host_tree("small-base")), "-fjson"]),
            write("b.probe.json", ["probe", *h100, "-f", "json"]),
            write("c.check.json", ["check", *h100, "-f", "json"]),
        ]
    return [
        write("a.probe.json", ["probe", *seed, "-f", "json"]),
        write("a.check.json", ["check", *seed, "-f", "json"]),
        write("b.probe.json", ["probe", *seed, "-f", "json"]),
        write("c.probe.json", ["probe", *h100, "-f", "json"]),
        write("c.check.json", ["check", *h100, "-f", "json"]),
        write("d.json", ["probe", *seed, "-f", "json"], degrade_uplink),
    ]


def _fake_server(tmp: Path) -> str:
    """A stand-in SGLang server (tests/measure/fakesglang.py) for replay; its URL."""
    import atexit

    from tests.measure.fakesglang import FakeSGLang, write_model

    server = FakeSGLang(model_path=write_model(str(tmp / "model")), device_tokens=512).start()
    atexit.register(server.stop)
    return server.url


_PHASES = (
    "--block-tokens 64 -c 1 --per-request --recovery-margin 1000 "
    "--phases warm:20,measure:10,stress:20@c2,cool:0.1s,measure:10"
)


def _replay(tmp: Path, *more: str) -> list[str]:
    return ["replay", "--trace", _trace(tmp), "--url", _fake_server(tmp), *more, "-f", "json"]


def _sweep(tmp: Path, *more: str) -> list[str]:
    from tests.measure.fakesglang import write_model

    model = write_model(str(tmp / "model"))
    return [
        "sweep", "--trace", _trace(tmp), "--block-tokens", "64", "--stop-grace", "2",
        "-c", "1", *more, "-f", "json", "--", "--model-path", model, "--device", "cpu",
        "--max-total-tokens", "512",
    ]  # fmt: skip


def _l3_folder(tmp: Path) -> str:
    """A folder for the stand-in's file L3 store (the launcher wants it to exist)."""
    folder = tmp / "l3"
    folder.mkdir(exist_ok=True)
    return str(folder)


def fake_sglang_env(_tmp: Path) -> dict[str, str]:
    """Servers the sweep starts run the stand-in (tests/measure/fake_site) instead of SGLang."""
    import os

    site = ROOT / "tests" / "measure" / "fake_site"
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(site), str(ROOT)) if p)}


def _placement(name: str) -> str:
    """A recording of an SGLang server's /proc on a real host's /sys (tests/placement)."""
    return str(ROOT / "tests" / "placement" / "recordings" / f"{name}.tar.xz")


def _verified(tmp: Path) -> str:
    """The drifting TP 8 recording extracted, with its last verification kept in the tree."""
    from xputune.cli.entry import main

    with tarfile.open(_placement("seedbox-tp8-drift")) as tar:
        tar.extractall(tmp / "verified", filter="tar")
    root = str(next((tmp / "verified").iterdir()))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["verify", "--root", root, "--pid", "4100", "-fjson"]) == 1
    return root


Case = Callable[[Path], list[str]]

#: schema name -> one or more ways to produce the document (argv builders).
CASES: dict[str, list[Case]] = {
    "probe": [
        lambda _: ["probe", *EXAMPLE, "-f", "json"],
        lambda _: ["probe", "--example", "nvidia-hgx-h100", "-f", "json"],
    ],
    "smi": [
        lambda _: ["smi", "-i", str(REAL / "xpusmi-q-x-telegraf-p800-oam-8.xml"), "-f", "json"],
        lambda _: ["smi", "-i", str(REAL / "nvsmi-topo-h100-nv18-nic-rows.txt"), "-f", "json"],
        lambda _: ["smi", "-i", str(REAL / "nvsmi-q-x-hadoop-p100x2.xml"), "-f", "json"],
    ],
    "check": [lambda _: ["check", *EXAMPLE, "-f", "json"]],
    "apply": [lambda _: ["apply", *EXAMPLE, "--dry-run", "-f", "json"]],
    "rollback": [
        lambda tmp: ["rollback", "--root", _tree(tmp), "-f", "json"],
        lambda tmp: ["rollback", "--dry-run", "--root", _tree(tmp), "-f", "json"],
    ],
    "status": [
        lambda _: ["status", *EXAMPLE, "-f", "json"],
        lambda tmp: ["status", "--root", _tree(tmp), "-f", "json"],
        lambda tmp: [
            "status",
            "--root",
            _tree(tmp, "--persist", "--watch", watched=True),
            "-fjson",
        ],
        lambda tmp: ["status", "--root", _verified(tmp), "-fjson"],
    ],
    "verify": [
        lambda _: ["verify", "--root", _placement("seedbox-tp8-drift"), "--pid", "4100", "-fjson"],
        lambda _: [
            "verify",
            "--root",
            _placement("seedbox-tp8-shared"),
            "--url",
            "127.0.0.1:30000",
            "-fjson",
        ],
        lambda _: ["verify", "--root", _placement("small-tp2-plain"), "--pid", "4100", "-fjson"],
    ],
    "recommend": [lambda _: ["recommend", *EXAMPLE, "-f", "json"]],
    "profiles": [lambda _: ["profiles", "-f", "json"]],
    "profile": [
        lambda _: ["profiles", "generic", "-f", "json"],
        lambda _: ["profiles", "hygon-p800", "-f", "json"],
    ],
    "model": [lambda _: ["model", "--seed", "-f", "json"]],
    "tiers": [
        lambda tmp: ["tiers", "--trace", _trace(tmp), "-f", "json"],
        lambda tmp: ["tiers", "--trace", _trace(tmp), "--model", "glm-5", "--tp", "8", "-fjson"],
        lambda tmp: [
            "tiers",
            "--trace",
            _trace(tmp),
            "--l1",
            "512",
            "--l2",
            "1024",
            "--l3",
            "8192",
            "--model",
            "glm-5",
            "--tp",
            "8",
            "-fjson",
        ],
        lambda tmp: [
            "tiers",
            "--trace",
            _trace(tmp),
            "--l1",
            "512",
            "--l2",
            "1024",
            "--l3",
            "8192",
            "-fjson",
        ],
        lambda tmp: [
            "tiers",
            "--trace",
            _trace(tmp),
            "--l1",
            "512",
            "--l2",
            "1024",
            "--l3",
            "8192",
            "--instances",
            "1,2,4",
            "--routing",
            "cache_aware",
            "-fjson",
        ],
        lambda tmp: [
            "tiers",
            "--trace",
            _trace(tmp),
            "--l1",
            "512",
            "--l2",
            "1024",
            "--instances",
            "2",
            "-fjson",
        ],
    ],
    "plan": [
        lambda _: ["plan", *EXAMPLE, "--model", "glm-5", "--tp", "8", "-f", "json"],
        lambda _: [
            "plan",
            *EXAMPLE,
            "--model",
            "glm-5",
            "--strategy",
            "shared",
            "--node-reserve-gb",
            "48",
            "-f",
            "json",
        ],
        lambda _: [
            "plan",
            "--example",
            "nvidia-hgx-h100",
            "--model",
            "glm-5",
            "--tp",
            "8",
            "-f",
            "json",
        ],
        lambda _: [
            "plan",
            *EXAMPLE,
            "--model",
            "glm-5",
            "--tp",
            "8",
            "--l3",
            "mooncake",
            "--l3-pool-gb",
            "4096",
            "--l3-master",
            "10.0.0.5:50051",
            "-f",
            "json",
        ],
        lambda _: [
            "plan",
            *EXAMPLE,
            "--model",
            "glm-5",
            "--l3",
            "mooncake",
            "--role",
            "decode",
            "--l3-host",
            "10.0.0.9",
            "-f",
            "json",
        ],
        lambda _: [
            "plan",
            "--example",
            "nvidia-hgx-h100",
            "--model",
            "qwen3-32b",
            "--l3",
            "file",
            "--l3-dir",
            "/var/lib/l3",
            "-f",
            "json",
        ],
    ],
    "kernels-plan": [
        lambda _: [
            "kernels",
            "plan",
            "--tokens",
            "32768",
            "--page-size",
            "64",
            "--layers",
            "78",
            "--item-size",
            "1152",
            "-f",
            "json",
        ],
    ],
    "kernels-build": [lambda _: ["kernels", "build", "-f", "json"]],
    "kernels-selftest": [lambda _: ["kernels", "selftest", "--rounds", "1", "-f", "json"]],
    "bench-copy": [
        lambda _: [
            "bench",
            "copy",
            "--tokens",
            "256",
            "--page-size",
            "16",
            "--repeats",
            "1",
            "-f",
            "json",
        ],
    ],
    "bench-host": [lambda _: ["bench", "host", "--size", "8M", "--pin", "mlock", "-f", "json"]],
    "fleet-report": [
        lambda tmp: ["fleet", "report", *_fleet(tmp), "-f", "json"],
        lambda tmp: ["fleet", "report", *_fleet(tmp, tie=True), "-f", "json"],
    ],
    "replay": [
        lambda tmp: _replay(tmp, "--block-tokens", "64", "-c", "2", "--per-request"),
        lambda tmp: _replay(tmp, "--block-tokens", "32", "--speedup", "100", "--max-output", "2"),
        # a margin no drift passes: the verdict is "recovered", exit 0
        lambda tmp: _replay(tmp, *_PHASES.split()),
    ],
    "sweep": [
        lambda tmp: _sweep(tmp, "--sizes", "x1,x2,x4", "--baseline", "--min-gain", "0"),
        lambda tmp: _sweep(tmp, "--sizes", "x2"),
        lambda tmp: _sweep(
            tmp, "--sizes", "x1,x2", "--launch-opt", f"--l3 file --l3-dir {_l3_folder(tmp)}"
        ),
    ],
}

#: schema name -> the environment its cases run in (set for the case, then restored)
ENV: dict[str, Callable[[Path], dict[str, str]]] = {"sweep": fake_sglang_env}


def run_json(argv: list[str]) -> tuple[int, dict]:
    """Run xputune in-process; (exit code, the JSON document it printed)."""
    from xputune.cli.entry import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    text = out.getvalue()
    return code, json.loads(text[text.index("{") :])
