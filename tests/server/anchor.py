"""SGLang's own benchmark beside replay: the anchor (docs/measure.md, "Beside SGLang's own
benchmark").

`python -m sglang.benchmark.serving --backend sglang --dataset-name mooncake --cache-report`
(0.5.20 and 0.5.23 alike) makes each Mooncake request's prompt as text, from its hash_ids
alone (sglang/benchmark/datasets/mooncake.py, round 1, no chat template: the lane's tokenizer
has none, so the fallback "role: content" line):

    "user: Round 1: " + for each id: f"{id}" + " ".join(["hi"] * 128)
                      + "Tell me a story based on this context."

and sends it to /generate as "text" with the trace's output_length; input_length is never
read. `--cache-report` sums, over the successful requests, meta_info's cached_tokens and
cached_tokens_details (device, host, storage) of each stream's last chunk: token-weighted, as
replay's shares are. It prints each tier as a share of the *cached* tokens and the hit rate as
cached / prompt tokens, where a prompt's length is the client's own tokenization in 0.5.20 and
the server's meta_info.prompt_tokens in 0.5.23.

So the two clients can be run on one workload: the slice derived here (`derive_slice`) has
every block id relabelled to a five-digit number (a bijection: shared prefixes stay exactly
what they were), so every one of the benchmark's blocks is the same number of tokens, and
replay is told that number (`--block-size B --block-tokens B`) and the benchmark's text after
the blocks as an uncached tail (input_length = B * blocks + tail). What is left is what the
two clients cannot share, each bounded for the run by `bound` (the derivation is in the docs):
the benchmark's shared head, its digits a block may share with a sibling's, its identical
prompts served whole, replay's synthesized tokens shared by chance, and reuses whose distance
lies so close to a tier's capacity that the clients' few tokens of difference could decide.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.server.server import REPO, STANDIN_SITE

RUNNER = Path(__file__).resolve().parent / "anchor_bench.py"
TIERS = ("device", "host", "storage")
LABEL_BASE = 10_000  # every relabelled id has five digits (up to 90,000 distinct blocks)
LABEL_SPAN = 90_000
LABEL_STRIDE = 7_919  # a prime: rank -> rank * stride mod span is a bijection
HI_WORDS = 128  # "hi" words per block in the benchmark's Mooncake prompts (0.5.20, 0.5.23)
HEAD_TEXT = "user: Round 1: "
TAIL_TEXT = "Tell me a story based on this context."


def block_text(block_id: int) -> str:
    return f"{block_id}" + " ".join(["hi"] * HI_WORDS)


def bench_prompt(ids: tuple[int, ...] | list[int]) -> str:
    """The text the benchmark sends for a request of these block ids (round 1)."""
    return HEAD_TEXT + "".join(block_text(i) for i in ids) + TAIL_TEXT


@dataclass(frozen=True)
class Slice:
    path: Path
    ids: list[tuple[int, ...]]  # relabelled block ids, per request, in trace order
    head: int  # tokens the benchmark puts before the blocks
    block: int  # tokens of each block in the benchmark's prompts (replay: --block-tokens)
    tail: int  # tokens the benchmark puts after the blocks (replay: the uncached tail)

    def bench_tokens(self, r: int) -> int:
        return self.head + self.block * len(self.ids[r]) + self.tail

    def replay_tokens(self, r: int) -> int:
        return self.block * len(self.ids[r]) + self.tail


def derive_slice(source: Path, dest: Path, requests: int, max_blocks: int, tokenizer: Any) -> Slice:
    """The first `requests` of `source`, each cut to its first `max_blocks` blocks (a prefix of
    a prefix is a prefix), each block id relabelled to label(its rank of first sight), one
    output token, input_length = block * blocks + tail (replay's --block-size is `block`)."""
    encode = _encoder(tokenizer)
    labels: dict[int, int] = {}
    rows, ids = [], []
    with open(source) as fh:
        for line in fh:
            if len(rows) == requests:
                break
            if not line.strip():
                continue
            record = json.loads(line)
            new = tuple(labels.setdefault(i, label(len(labels))) for i in
                        record["hash_ids"][:max_blocks])  # fmt: skip
            ids.append(new)
            rows.append((record["timestamp"], new))
    if len(labels) > LABEL_SPAN:
        raise ValueError(f"{len(labels)} distinct blocks do not fit five-digit labels")
    head, tail = len(encode(HEAD_TEXT)), len(encode(TAIL_TEXT))
    widths = {len(encode(block_text(b))) for b in labels.values()}
    if len(widths) != 1:
        raise ValueError(f"blocks of different token counts: {sorted(widths)}")
    (block,) = widths
    with open(dest, "w") as out:
        for at, new in rows:
            out.write(json.dumps({"timestamp": at, "input_length": block * len(new) + tail,
                                  "output_length": 1, "hash_ids": list(new)}) + "\n")  # fmt: skip
    return Slice(dest, ids, head, block, tail)


def label(rank: int) -> int:
    """The five-digit id of the rank-th block seen. Consecutive ranks are spread over the
    range, so siblings share fewer leading digits (the benchmark's prompts share those as
    tokens: the "digits" term of the bound)."""
    return LABEL_BASE + rank * LABEL_STRIDE % LABEL_SPAN


def _encoder(tokenizer: Any):
    return lambda text: tokenizer.encode(text, add_special_tokens=True)


# ------------------------------------------------------------------------ running the benchmark


def bench_command(python: Path, url: str, trace: Path, requests: int, out: Path) -> list[str]:
    """SGLang's benchmark on the derived slice: cold (no warmup request: its warmup prompt is
    made with 512 "hi" per block, unlike the measured ones, and is not flushed unless asked),
    one request at a time (--max-concurrency 1) in trace order (slowdown 0: every arrival at
    once, the semaphore lets them through first come, first served)."""
    return [
        str(python), str(RUNNER), "--backend", "sglang", "--base-url", url,
        "--dataset-name", "mooncake", "--dataset-path", str(trace),
        "--num-prompts", str(requests), "--mooncake-slowdown-factor", "0",
        "--max-concurrency", "1", "--warmup-requests", "0", "--cache-report",
        "--output-file", str(out), "--output-details", "--disable-tqdm", "--seed", "0",
    ]  # fmt: skip


def bench_environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(STANDIN_SITE), str(REPO), env.get("PYTHONPATH", "")) if p
    )
    env["XPUTUNE_TEST_REPO"] = str(REPO)
    env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("XPUTUNE_STANDIN_CALLS", None)
    return env


def has_benchmark(python: Path) -> str | None:
    """Why `python`'s SGLang has no Mooncake --cache-report benchmark, or None when it has."""
    try:
        out = subprocess.run(
            [str(python), str(RUNNER), "--help"], env=bench_environment(),
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return f"sglang.benchmark.serving does not start: {exc}"
    if out.returncode != 0:
        return f"sglang.benchmark.serving does not start: {out.stderr.strip()[-300:]}"
    needed = ("--cache-report", "mooncake", "--mooncake-slowdown-factor", "--warmup-requests",
              "--max-concurrency", "--output-details")  # fmt: skip
    missing = [flag for flag in needed if flag not in out.stdout]
    return f"sglang.benchmark.serving has no {', '.join(missing)}" if missing else None


# ------------------------------------------------------------------------------ the bound


def _lcp(a: Any, b: Any) -> int:
    import numpy as np

    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def _common_blocks(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def accidental(prompts: list[Any], ids: list[tuple[int, ...]], structural) -> list[int]:
    """Per request, the most tokens a cache could serve it beyond its shared blocks: the longest
    common prefix with any earlier prompt less what their common blocks explain
    (`structural(r, j)`: tokens of request r's first j blocks, shared head included), at most
    the prompt less its last token (SGLang never serves that one)."""
    out = []
    for r, prompt in enumerate(prompts):
        best = 0
        for q in range(r):
            j = _common_blocks(ids[r], ids[q])
            s = structural(r, j)
            lcp = min(_lcp(prompt, prompts[q]), len(prompt) - 1)
            best = max(best, lcp - s)
        out.append(best)
    return out


def at_risk(
    ids: list[tuple[int, ...]], block: int, tail: int, caps: dict[str, int], node: int,
    drift: list[int], base: int,
) -> dict[str, list[tuple[int, int]]]:  # fmt: skip
    """Reuses whose LRU distance lies so close to a tier's capacity that the two clients could
    differ on them: (request, block position) per tier ("device": L1; "host": the host pool,
    which holds every block under write_through). A block's distance is the tokens of
    everything touched more recently than it (a request's shallower blocks count as more
    recent than its deeper ones: leaves go first), plus itself, with replay's footprints (a
    block; a tail and its output token). A server that evicts whole nodes (at most `node`
    tokens) holds between cap - node and cap tokens, and the benchmark's footprint over the
    reuse window differs from replay's by at most base + drift[q] + ... + drift[r-1] (`bound`):
    a reuse is at risk when its distance lies within [cap - node - that, cap + that]."""
    stamp: dict[Any, tuple[int, int]] = {}
    size: dict[Any, int] = {}
    before = [0]
    for d in drift:
        before.append(before[-1] + d)  # before[r]: drift of requests 0 .. r-1
    out: dict[str, list[tuple[int, int]]] = {t: [] for t in caps}
    for r, path in enumerate(ids):
        for j, b in enumerate(path):
            if b not in stamp:
                break  # the rest of the path was never seen (a prefix chain)
            mine = stamp[b]
            depth = block + sum(size[k] for k, s in stamp.items() if s > mine)
            window = base + before[r] - before[mine[0]]
            for tier, cap in caps.items():
                if cap - node - window <= depth <= cap + window:
                    out[tier].append((r, j))
        for j, b in enumerate(path):
            stamp[b], size[b] = (r, -j), block
        stamp[("tail", r)], size[("tail", r)] = (r, -len(path)), tail + 1
    return out


@dataclass
class Bound:
    """bench - replay per tier, in tokens: `head` exactly, plus a residual in [lo, hi]."""

    head: dict[str, int]
    lo: dict[str, int]
    hi: dict[str, int]
    terms: dict[str, int] = field(default_factory=dict)  # each effect's tokens, for the table
    risky: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    per_request: list[tuple[int, int, int]] = field(default_factory=list)  # (head, -lo, hi)


def bound(sl: Slice, bench_prompts: list[Any], replay_prompts: list[Any],
          caps: dict[str, int]) -> Bound:  # fmt: skip
    n = len(sl.ids)
    bench_acc = accidental(bench_prompts, sl.ids, lambda r, j: sl.head + sl.block * j)
    replay_acc = accidental(replay_prompts, sl.ids, lambda r, j: sl.block * j)
    dups = [any(sl.ids[q] == sl.ids[r] for q in range(r)) for r in range(n)]
    digits = sum(a for a, d in zip(bench_acc, dups, strict=True) if not d)
    whole = sum(a for a, d in zip(bench_acc, dups, strict=True) if d)
    chance = sum(replay_acc)
    # How far the two clients' footprints can drift apart over the run: the head (stored
    # once), what the benchmark stores once and replay twice (shared digits, an identical
    # prompt's tail), what replay shares by chance.
    drift = [a + d + c for a, d, c in zip(bench_acc, dups, replay_acc, strict=True)]
    longest = max(sl.bench_tokens(r) for r in range(n))
    risky = at_risk(sl.ids, sl.block, sl.tail, caps, longest, drift, sl.head)
    l1 = sl.block * len(risky.get("device", []))
    l2 = sl.block * len(risky.get("host", []))
    head = {"device": sl.head * (n - 1), "host": 0, "storage": 0}
    head["total"] = head["device"]
    up = sum(bench_acc)
    lo = {"device": -chance - l1, "host": -chance - l1 - l2, "storage": 0, "total": -chance - l2}
    hi = {"device": up + l1, "host": up + l1 + l2, "storage": 0, "total": up + l2}
    terms = {"head": sl.head * (n - 1), "digits": digits, "identical prompts": whole,
             "chance": chance, "L1 boundary": l1, "L2 boundary": l2}  # fmt: skip
    per = [(sl.head if r else 0, replay_acc[r], bench_acc[r]) for r in range(n)]
    return Bound(head, lo, hi, terms, risky, per)


# ------------------------------------------------------------------------- side by side


@dataclass
class Side:
    prompt: int
    tokens: dict[str, int]  # device, host, storage, total

    def share(self, tier: str) -> float:
        return self.tokens[tier] / self.prompt if self.prompt else 0.0


def bench_side(result: dict[str, Any]) -> Side:
    c = result["cache_report"]
    tokens = {"device": c["device_cached_tokens"] or 0, "host": c["host_cached_tokens"] or 0,
              "storage": c["storage_cached_tokens"] or 0}  # fmt: skip
    tokens["total"] = c["total_cached_tokens"]
    return Side(c["total_prompt_tokens"], tokens)


def replay_side(doc: dict[str, Any]) -> Side:
    t = doc["measured"]["tokens"]
    tokens = {tier: t[f"cached_{tier}"] for tier in TIERS}
    tokens["total"] = sum(tokens.values())
    return Side(t["input"], tokens)


def compare(bench: Side, replay: Side, b: Bound) -> list[dict[str, Any]]:
    """Per tier: both shares of prompt tokens, their difference, the part the head explains
    and the interval the difference must lie in."""
    rows = []
    for tier in (*TIERS, "total"):
        diff = bench.share(tier) - replay.share(tier)
        base = replay.tokens[tier] + b.head[tier]
        explained = base / bench.prompt - replay.share(tier)
        low = (base + b.lo[tier]) / bench.prompt - replay.share(tier)
        high = (base + b.hi[tier]) / bench.prompt - replay.share(tier)
        rows.append({"tier": tier, "bench": bench.share(tier), "replay": replay.share(tier),
                     "difference": diff, "explained": explained, "low": low, "high": high,
                     "within": low - 1e-12 <= diff <= high + 1e-12})  # fmt: skip
    return rows


def table(title: str, bench: Side, replay: Side, rows: list[dict[str, Any]], b: Bound,
          printed: dict[str, Any]) -> str:  # fmt: skip
    pct = lambda x: f"{100 * x:6.2f}%"  # noqa: E731
    pts = lambda x: f"{100 * x:+6.2f}"  # noqa: E731
    lines = [title,
             f"{'':9}{'benchmark.serving --cache-report':>36}   {'xputune replay':>22}",
             f"{'prompt':9}{bench.prompt:>26,} tokens{'':6}{replay.prompt:>15,} tokens",
             f"{'':9}{'tokens':>12}{'of prompt':>12}{'of cached':>12}   "
             f"{'tokens':>10}{'of prompt':>12}"]  # fmt: skip
    for tier in (*TIERS, "total"):
        cached = printed.get(tier)
        lines.append(
            f"{tier:9}{bench.tokens[tier]:>12,}{pct(bench.share(tier)):>12}"
            f"{(f'{cached:.1f}%' if cached is not None else ''):>12}   "
            f"{replay.tokens[tier]:>10,}{pct(replay.share(tier)):>12}"
        )
    lines.append("benchmark - replay, points of prompt tokens: the head explains, the rest within "
                 "the bound")  # fmt: skip
    for row in rows:
        lines.append(
            f"{row['tier']:9}{pts(row['difference'])}  head {pts(row['explained'])}  "
            f"residual {pts(row['difference'] - row['explained'])} within "
            f"[{pts(row['low'] - row['explained'])}, {pts(row['high'] - row['explained'])}]"
            f"  {'yes' if row['within'] else 'NO'}"
        )
    lines.append("terms (tokens): " + ", ".join(f"{k} {v:,}" for k, v in b.terms.items()))
    return "\n".join(lines)


def per_request_outliers(result: dict[str, Any], doc: dict[str, Any], b: Bound,
                         block: int) -> list[dict[str, Any]]:  # fmt: skip
    """Requests whose own difference (benchmark - replay - head, per tier) lies outside their
    own share of the bound: where a disagreement sits, when there is one."""
    out = []
    l1 = {r for r, _ in b.risky.get("device", [])}
    l2 = {r for r, _ in b.risky.get("host", [])}
    for r, (mine, theirs) in enumerate(zip(doc["per_request"], result["cached_tokens_details"],
                                           strict=True)):  # fmt: skip
        theirs = theirs or {}
        head, chance, acc = b.per_request[r]
        risk1 = block * sum(1 for q, _ in b.risky.get("device", []) if q == r) if r in l1 else 0
        risk2 = block * sum(1 for q, _ in b.risky.get("host", []) if q == r) if r in l2 else 0
        diff = {t: int(theirs.get(t) or 0) - int(mine["cached"][t]) for t in TIERS}
        diff["device"] -= head
        diff["total"] = sum(diff[t] for t in TIERS)
        limits = {"device": (-chance - risk1, acc + risk1),
                  "host": (-chance - risk1 - risk2, acc + risk1 + risk2),
                  "storage": (0, 0), "total": (-chance - risk2, acc + risk2)}  # fmt: skip
        bad = {t: diff[t] for t, (lo, hi) in limits.items() if not lo <= diff[t] <= hi}
        if bad:
            out.append({"request": r, "difference": bad, "replay": mine["cached"],
                        "benchmark": theirs, "limits": limits})  # fmt: skip
    return out
