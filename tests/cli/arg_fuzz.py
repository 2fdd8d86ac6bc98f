"""The argument fuzz's machinery: argument lists drawn from each command's declared parameters,
and one caged in-process run of each (test_arg_fuzz.py holds the tests).

Values come from three pools: values that work (VALID, by option), noise of the parameter's
kind (empty, 10 KB, odd unicode, control characters, leading dash; for numbers also nan, inf,
1e300, 5000 digits, negatives, other spellings) and hostile paths (missing, a directory,
/dev/null, a FIFO, an empty file, garbage, JSON nested 100,000 deep, stdin). Calls also get
repeated options, unknown options, stray words and --opt=value forms. Everything is drawn from
random.Random(seed): the same seed gives the same calls.
"""

from __future__ import annotations

import io
import os
import random
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from tests.cli.cage import Cage, Caged, FuzzTimeout

#: Commands that change the host they are given: they always get a tree of the cage's own
#: unless the call names --root or --example itself (verify keeps its result in the tree's
#: state directory).
WRITERS = frozenset({("apply",), ("rollback",), ("watch",), ("verify",)})
#: Commands that write a file into a folder named on the command line (--textfile, --nfd):
#: the shared read-only tree is never offered to them as a path.
FILE_WRITERS = frozenset({("labels",), ("metrics",)})
#: Commands that get no --root of the big seed box: recording it takes seconds a call.
SMALL_ROOTS = frozenset({("record",)})
#: Commands whose work is heavy at their defaults: these small values are added unless drawn.
SMALL = {
    ("kernels", "plan"): ("--tokens", "256", "--layers", "2"),
    ("bench", "copy"): ("--tokens", "256", "--repeats", "1"),
    ("bench", "host"): ("--size", "64K"),
    ("kernels", "selftest"): ("--rounds", "1"),
}
ALARM_S = 20.0  # a run that takes longer is a hang

INT_NOISE = [
    "0", "-1", "-0", "+1", " 8", "08", "0x10", "1e3", "1.5", "nan", "inf", "", "9" * 20,
    "9" * 5000, "-" + "9" * 30, "4294967297",
]  # fmt: skip
FLOAT_NOISE = [
    "0", "-1", "-0.0", "nan", "NaN", "inf", "-inf", "Infinity", "1e300", "1e309", "-1e300",
    "1e-320", "9" * 5000, "", "0x1p3", "1_000", "1,5", " 2",
]  # fmt: skip
TEXT_NOISE = [
    "", " ", "-", "--", "-x", "x" * 10240, "é—ü\u202e", "\udcff\udcfe", "a\nb", "\t",
    "\x1b[31mred\x1b[0m", "\x07\x08\x7f", "a" * 255 + "/" + "b" * 300, "../../../../etc",
    "%s%n{0}", "[bold]x[/bold]", "=", ",", "x,,y", "0",
    # numbers written as text (--capacity 64K, --size 1G, --point TOKENS:MS, --tier 2)
    "nan", "inf", "-1", "1e300", "9" * 5000, "1e400K", "1:nan", "inf:1", "-5:3", "64KB", "²", "٣",
]  # fmt: skip


@dataclass
class Place:
    """The files and trees one command's fuzz points at (all inside the cage)."""

    root: Path
    mini: str
    mini_tar: str
    seed: str  # a shared read-only extraction: only commands that do not write get it
    paths: list[str] = field(default_factory=list)  # hostile ones
    files: dict[str, str] = field(default_factory=dict)  # good inputs by kind


def build_place(folder: Path, seed_tree: str, words: tuple[str, ...]) -> Place:
    """Trees, good input files and hostile paths under `folder` (made before the cage shuts)."""
    from tests.tune import minihost

    folder.mkdir(parents=True, exist_ok=True)
    mini = minihost.build(str(folder / "mini"))
    data = Path(__file__).resolve().parent.parent / "devices" / "data"
    place = Place(folder, mini, str(folder / "mini.tar.gz"), seed_tree)
    (folder / "dir").mkdir()
    (folder / "out").mkdir()
    (folder / "empty").write_bytes(b"")
    (folder / "garbage").write_bytes(bytes(random.Random(7).randrange(256) for _ in range(4096)))
    (folder / "garbage.tar.gz").write_bytes(b"\x1f\x8b" + b"\xff" * 100)
    (folder / "deep.json").write_text("[" * 100_000)
    (folder / "deep.yaml").write_text("- " * 50_000 + "x\n")
    (folder / "profile.yaml").write_text("name: fuzz\ninclude: generic\n")
    (folder / "config.json").write_text(
        '{"model_type": "glm_moe_dsa", "num_hidden_layers": 78, "kv_lora_rank": 512, '
        '"qk_rope_head_dim": 64, "index_head_dim": 128, "num_attention_heads": 64}'
    )
    os.mkfifo(folder / "fifo")
    os.mkfifo(folder / "fifo.tar.gz")
    place.paths = [
        str(folder / "missing"), str(folder / "dir"), "/dev/null", str(folder / "fifo"),
        str(folder / "fifo.tar.gz"), str(folder / "empty"), str(folder / "garbage"),
        str(folder / "garbage.tar.gz"), str(folder / "deep.json"), str(folder / "deep.yaml"),
        "-", str(folder / "missing" / "x.tar.gz"),
    ]  # fmt: skip
    trace = folder / "trace.jsonl"
    trace.write_text(
        "".join(
            f'{{"timestamp": {i}, "input_length": 1024, "output_length": 8, '
            f'"hash_ids": [{i % 3}, {i % 5 + 10}]}}\n'
            for i in range(40)
        )
    )
    (folder / "points.csv").write_text("tokens,ms\n1000,792.6\n8000,887.4\n32000,1212.4\n")
    (folder / "measured.csv").write_text(
        "capacity_tokens,hit_rate\n1000,0.2\n2000,0.3\n4000,0.31\n"
    )
    smi = sorted(p for p in (data / "xpusmi").iterdir() if p.suffix == ".txt")
    topo = sorted((data / "real").glob("nvsmi-topo-*.txt"))
    place.files = {
        "trace": str(trace),
        "points": str(folder / "points.csv"),
        "measured": str(folder / "measured.csv"),
        "smi": str(smi[0]) if smi else str(folder / "empty"),
        "topo": str(topo[0]) if topo else str(folder / "empty"),
        "profile": str(folder / "profile.yaml"),
        "config": str(folder / "config.json"),
    }
    from xputune.cli.entry import main

    with _quiet():
        main(["record", place.mini_tar, "--root", mini])
        for i, where in enumerate((["--root", mini], ["--example", "h3c-hygon-p800"])):
            for what in ("probe", "check"):
                text = _captured(lambda w=where, c=what: main([c, *w, "-f", "json"]))
                (folder / f"{what}-{i}.json").write_text(text)
    if words not in WRITERS | FILE_WRITERS and words not in SMALL_ROOTS:
        place.paths.append(seed_tree)
    if words == ("tiers",):  # its C pass is built on first use: not in the cage, which runs no cc
        from xputune.plan.stackdist import _kernel

        _kernel()
    return place


def valid(place: Place, command: tuple[str, ...], name: str) -> list[str]:
    """Values of option (or argument) `name` that do what they say."""
    f = place.files
    big = command not in WRITERS and command not in SMALL_ROOTS
    roots = [place.mini, place.mini_tar] + ([place.seed] if big else [])
    examples = ["h3c-hygon-p800", "nvidia-hgx-h100"]
    out = str(place.root / "out")
    table: dict[str, list[str]] = {
        "--root": roots,
        "--example": examples,
        "--fallback-example": examples,
        "--vendor-topo": [f["topo"]],
        "out": [f"{out}/rec.tar.gz", f"{out}/rec.tar.xz"],
        "--input": [f["smi"]],
        "--profile": ["hygon-p800", "generic", f["profile"]],
        "--only": ["pcie.ido", "thp.enabled", "shm.huge", "numa.balancing"],
        "--skip": ["pcie.ido", "shm.huge"],
        "--thp": ["never", "madvise", "always"],
        "--shm-huge": ["never", "within_size", "advise"],
        "--numa-balancing": ["on", "off"],
        "name": ["hygon-p800", "generic", "probe", "check"],
        "--point": ["1000:792.6", "8000:887.4", "32000:1212.4"],
        "--points": [f["points"]],
        "--fit-a": ["779.1"],
        "--fit-b": ["13.539"],
        "--recompute-us-per-token": ["28"],
        "--recompute-point": ["1000:30", "8000:200"],
        "--floor-ms": ["735"],
        "--bandwidth-gbps": ["7.4"],
        "--bytes-per-token": ["100000"],
        "--break-even-at": ["4096"],
        "--model": ["glm-5", "qwen3-32b", "deepseek-v3", f["config"]],
        "--config": [f["config"]],
        "--tp": ["8", "1", "2"],
        "--dtype": ["bf16", "fp8"],
        "--trace": [f["trace"]],
        "--block-size": ["512", "64"],
        "--capacity": ["64K", "2M", "1000"],
        "--l1": ["2K", "200K"],
        "--sample-rate": ["0.5", "1"],
        "--measured": [f["measured"]],
        "--tolerance": ["1", "0.5"],
        "--min-gain": ["1"],
        "--plot": [f"{out}/c.svg", f"{out}/c.png"],
        "--strategy": ["local", "all-nodes", "shared"],
        "--tier": ["1", "2", "64GB", "max"],
        "--cards": ["xpu0,xpu1", "0,1"],
        "--write-policy": ["write_through", "write_back"],
        "--features": ["lifo,async", "numa", "kernels"],
        "--stats-dir": [out],
        "--textfile": [out],
        "--nfd": [out],
        "--expiry": ["60", "0"],
        "--interval": ["0.05", "60"],
        "--max-reapplies": ["3"],
        "--window": ["600"],
        "--backoff": ["60"],
        "--backoff-max": ["3600"],
        "--tokens": ["256", "0"],
        "--page-size": ["64", "16"],
        "--layers": ["2", "1"],
        "--pool-layers": ["2"],
        "--item-size": ["64", "1152"],
        "--rounds": ["1"],
        "--seed": ["0", "7"],
        "--repeats": ["1"],
        "--threads": ["1", "0"],
        "--size": ["64K", "1M"],
        "--node": ["0"],
        "--pin": ["mlock", "auto"],
        "--device": ["host"],  # torch: importing it alone takes seconds
        "--pid": ["1", "4100"],
        "files": [str(place.root / f"{w}-{i}.json") for w in ("probe", "check") for i in (0, 1)],
    }
    return table.get(name, [])


@dataclass(frozen=True)
class Param:
    """One option or argument of a command's table (cli/spec.py), as the fuzz draws it."""

    name: str  # the runner's keyword
    opts: tuple[str, ...]  # its spellings; an argument's is its name
    secondary_opts: tuple[str, ...]  # a flag's "off" spelling
    option: bool
    is_flag: bool
    kind: type  # int, float or str (a choice: str, with its choices)
    choices: tuple[str, ...]
    min: float | None
    max: float | None
    metavar: str
    required: bool
    nargs: int  # -1: an argument that takes every remaining word

    @classmethod
    def of(cls, item: Any) -> Param:
        kind = {"int": int, "float": float, "flag": bool}.get(item.kind, str)
        if hasattr(item, "names"):  # an option
            return cls(
                item.dest, item.names, (item.negative,) if item.negative else (), True,
                item.flag, kind, item.choices, item.min, item.max, item.placeholder(),
                item.required, 1,
            )  # fmt: skip
        return cls(
            item.dest, (item.dest,), (), False, False, kind, (), None, None, item.metavar,
            item.required, -1 if item.multiple else 1,
        )  # fmt: skip


def _kind(param: Param) -> type:
    return param.kind


def _value(rng: random.Random, place: Place, command: tuple[str, ...], param: Any) -> str:
    kind = _kind(param)
    key = param.opts[0] if param.opts[0].startswith("-") else param.name
    good = valid(place, command, key)
    if param.choices:
        good = good or list(param.choices)
    elif kind is int:
        good = good or [str(param.min or 1)]
    elif kind is float:
        good = good or ["1"]
    else:
        good = good or ["x"]
    roll = rng.random()
    if roll < 0.5:
        return rng.choice(good)
    if kind is int:
        return rng.choice(INT_NOISE)
    if kind is float:
        return rng.choice(FLOAT_NOISE)
    if param.choices:
        return rng.choice([g.upper() for g in good] + TEXT_NOISE)
    if roll < 0.75:
        return rng.choice(place.paths)
    return rng.choice(TEXT_NOISE)


def draw_argv(
    rng: random.Random, place: Place, words: tuple[str, ...], params: list[Any]
) -> list[str]:
    """One call of command `words`: mostly sensible, often hostile."""
    options = [p for p in params if p.option]
    arguments = [p for p in params if not p.option]
    args: list[str] = []
    chosen = rng.sample(options, k=min(len(options), rng.randint(0, 5)))
    if chosen and rng.random() < 0.15:
        chosen.append(rng.choice(chosen))  # an option given twice
    for p in chosen:
        names = [*p.opts, *p.secondary_opts]
        flag = rng.choice(names)
        if p.is_flag:
            args.append(flag if rng.random() < 0.95 else f"{flag}=x")
            continue
        value = _value(rng, place, words, p)
        if flag.startswith("--") and rng.random() < 0.2:
            args.append(f"{flag}={value}")
        else:
            args += [flag, value]
    for p in arguments:
        if not p.required and rng.random() < 0.3:
            continue
        count = rng.randint(1, 3) if p.nargs == -1 else 1
        args += [_value(rng, place, words, p) for _ in range(count)]
    roll = rng.random()
    if roll < 0.06:
        args.insert(rng.randint(0, len(args)), rng.choice(["--bogus", "-Z", "extra", "--"]))
    elif roll < 0.08:
        args.append(rng.choice(["--help", "-h"]))
    if words == ("launch", "sglang") and rng.random() < 0.5:
        args += ["--", *rng.sample(["--tp", "8", "--model-path", "x", "--port", "-1"], k=2)]
    for name, value in zip(SMALL.get(words, ())[::2], SMALL.get(words, ())[1::2], strict=True):
        if not any(a == name or a.startswith(name + "=") for a in args):
            args = [name, value, *args]
    if words in WRITERS and not any(
        a.split("=")[0] in ("--root", "--example") for a in args if a.startswith("--")
    ):
        args = ["--root", place.mini, *args]
    return [*words, *args]


def commands() -> list[tuple[tuple[str, ...], list[Param]]]:
    """Every command: (its words, its options and arguments, as their tables declare them)."""
    from xputune.cli import registry

    found = []
    for words in registry.COMMANDS:
        cmd = registry.load(words)
        found.append((words, [Param.of(item) for item in (*cmd.all_options, *cmd.args)]))
    return found


# -- one run ---------------------------------------------------------------------------------
@dataclass
class Outcome:
    argv: list[str]
    code: int | None
    out: str
    err: str
    escaped: str | None  # the traceback of an exception that left main()
    seconds: float

    def problem(self) -> str | None:
        """Why this run is a bug, or None."""
        if self.escaped is not None:
            return f"exception left main():\n{self.escaped}"
        if "Traceback (most recent call last)" in self.out + self.err:
            return f"a traceback was printed:\n{self.err[-3000:]}"
        if not isinstance(self.code, int):
            return f"exit code {self.code!r}"
        if self.code in (0, 1, 3):
            return None
        errors = [line for line in self.err.splitlines() if line.startswith("xputune: error: ")]
        if len(errors) == 1 or "Usage:" in self.out + self.err:
            return None
        return f"exit {self.code} without one error line: {self.err[-2000:]!r}"


def _stream(errors: str = "strict") -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors=errors, write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    raw = stream.buffer
    assert isinstance(raw, io.BytesIO)
    return raw.getvalue().decode("utf-8", "replace")


@dataclass
class _Streams:
    out: io.TextIOWrapper
    err: io.TextIOWrapper


def _swap() -> Any:
    """Streams as a real process has them (stderr never fails to encode; an exception in a
    __del__ is printed there, as Python prints it, instead of going to pytest's hook)."""
    streams = _Streams(_stream(), _stream("backslashreplace"))
    stdin = io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8")
    return streams, mock.patch.multiple(
        sys,
        stdout=streams.out,
        stderr=streams.err,
        stdin=stdin,
        unraisablehook=sys.__unraisablehook__,
    )


class _quiet:
    def __enter__(self) -> None:
        self.streams, self.patch = _swap()
        self.patch.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.patch.__exit__(*exc)


def _captured(call: Any) -> str:
    streams, patch = _swap()
    with patch:
        call()
    return _text(streams.out)


def run(cage: Cage, argv: list[str]) -> Outcome:
    """argv through xputune.cli.entry.main, in the cage, with its output captured."""
    from xputune.cli.entry import main

    streams, patch = _swap()
    escaped = None
    code: int | None = None
    start = time.perf_counter()
    with patch:
        try:
            with cage.alarm(ALARM_S):
                code = main(list(argv))
        except (Caged, FuzzTimeout, Exception):  # every escape is the finding
            escaped = traceback.format_exc()
    seconds = time.perf_counter() - start
    return Outcome(argv, code, _text(streams.out), _text(streams.err), escaped, seconds)


def shown(argv: list[str]) -> str:
    """argv for a report: long values cut, so a failure message stays readable."""
    return " ".join(repr(a) if len(a) <= 80 else repr(a[:40] + f"...<{len(a)}>") for a in argv)


def calls(
    seed: int, words: tuple[str, ...], params: list[Any], place: Place, n: int
) -> Iterator[list[str]]:
    rng = random.Random(f"{seed}:{' '.join(words)}")
    for _ in range(n):
        yield draw_argv(rng, place, words, params)


__all__ = [
    "ALARM_S",
    "Outcome",
    "Place",
    "build_place",
    "calls",
    "commands",
    "run",
    "shown",
]
