"""What each SGLang release accepts of the flags xputune emits or reads: data, one row a release.

Read from each release's own argument parser (`ServerArgs.add_cli_args`; sglang/srt/
server_args.py and srt/arg_groups/fields/ of the 0.5.20, 0.5.21, 0.5.22 and 0.5.23 wheels) and
checked against it by tests/server/test_release_flags.py for every release whose environment
the lanes have. What changed for the launcher, release by release:

  - 0.5.21: `--hicache-host-memory-fraction` (default 0.8): with neither --hicache-size nor
    --hicache-ratio, SGLang sizes L2 itself, its default ratio cut down until the pools fit
    that fraction of host-wide free memory (cgroup-bounded, less 10 GiB) split evenly over the
    ranks: blind to NUMA. An explicit --hicache-size (> 0) or --hicache-ratio turns it off.
    The storage backend `tensorcast`. `/clear_hicache_storage_backend` is gone
    (`POST /hicache/storage-backend/clear`, which 0.5.20 has too, stays).
  - 0.5.22: `--attn-dp-size` (also `--attention-data-parallel-size`); `--dp-size N
    --enable-dp-attention` is deprecated (SGLang reads it as --attn-dp-size N, --dp-size 1).
    The storage backend `seaweedfs`.
  - 0.5.23: `--enable-hicache` spells --enable-hierarchical-cache too;
    `GET /get_hicache_l3_cache_layout`.

No flag xputune emits was removed or renamed in the range. A release outside this table is
untested: the launcher then asks that release's own parser for its option strings and storage
backends (launch/preflight.py) and builds a Release from them (`from_parser`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xputune.sglang.targets import NEWEST, OLDEST

SUPPORTED_RANGE = f"{OLDEST}-{NEWEST}"

#: The flags xputune emits or reads, by canonical name, with every spelling some release in
#: the table accepts (the first that a release accepts is the one xputune writes).
SPELLINGS: dict[str, tuple[str, ...]] = {
    "--tp-size": ("--tp-size", "--tensor-parallel-size"),
    "--model-path": ("--model-path", "--model"),
    "--device": ("--device",),
    "--page-size": ("--page-size",),
    "--enable-hierarchical-cache": ("--enable-hierarchical-cache", "--enable-hicache"),
    "--hicache-size": ("--hicache-size",),
    "--hicache-ratio": ("--hicache-ratio",),
    "--hicache-host-memory-fraction": ("--hicache-host-memory-fraction",),
    "--hicache-mem-layout": ("--hicache-mem-layout",),
    "--hicache-io-backend": ("--hicache-io-backend",),
    "--hicache-write-policy": ("--hicache-write-policy",),
    "--hicache-storage-backend": ("--hicache-storage-backend",),
    "--hicache-storage-backend-extra-config": ("--hicache-storage-backend-extra-config",),
    "--hicache-storage-prefetch-policy": ("--hicache-storage-prefetch-policy",),
    "--numa-node": ("--numa-node",),
    "--disaggregation-mode": ("--disaggregation-mode",),
    "--disaggregation-ib-device": ("--disaggregation-ib-device",),
    "--dp-size": ("--dp-size", "--data-parallel-size"),
    "--enable-dp-attention": ("--enable-dp-attention",),
    "--attn-dp-size": ("--attn-dp-size", "--attention-data-parallel-size"),
}

_ALL_RELEASES = frozenset(s for names in SPELLINGS.values() for s in names) - {
    "--enable-hicache",
    "--hicache-host-memory-fraction",
    "--attn-dp-size",
    "--attention-data-parallel-size",
}
_BACKENDS_0520 = (
    "file", "sim", "mooncake", "npu_memcache", "hf3fs", "nixl", "aibrix", "dynamic", "eic",
    "simm", "mori", "shm",
)  # fmt: skip


@dataclass(frozen=True)
class Release:
    """One SGLang release as the launcher speaks to it."""

    version: str
    #: Option strings it accepts: for a release of the table, those of SPELLINGS it has; for
    #: an untested one, every option string of its parser.
    options: frozenset[str]
    #: --hicache-storage-backend's choices.
    storage_backends: tuple[str, ...]
    tested: bool = True

    def accepts(self, flag: str) -> bool:
        return flag in self.options

    def spelling(self, canon: str) -> str | None:
        """How this release spells the flag xputune calls `canon`, or None: it has none."""
        for name in SPELLINGS.get(canon, (canon,)):
            if name in self.options:
                return name
        return None

    @property
    def sizes_l2_itself(self) -> bool:
        """Whether it sizes L2 from --hicache-host-memory-fraction when no size is given."""
        return "--hicache-host-memory-fraction" in self.options

    @property
    def attn_dp(self) -> bool:
        """Whether it has --attn-dp-size (and so deprecates --enable-dp-attention)."""
        return "--attn-dp-size" in self.options


def _row(version: str, added: tuple[str, ...], backends: tuple[str, ...]) -> Release:
    return Release(version, _ALL_RELEASES | frozenset(added), backends)


_FRACTION = ("--hicache-host-memory-fraction",)
_ATTN_DP = ("--attn-dp-size", "--attention-data-parallel-size")

RELEASES: dict[str, Release] = {
    "0.5.20": _row("0.5.20", (), _BACKENDS_0520),
    "0.5.21": _row("0.5.21", _FRACTION, (*_BACKENDS_0520, "tensorcast")),
    "0.5.22": _row("0.5.22", _FRACTION + _ATTN_DP, (*_BACKENDS_0520, "tensorcast", "seaweedfs")),
    "0.5.23": _row(
        "0.5.23",
        (*_FRACTION, *_ATTN_DP, "--enable-hicache"),
        (*_BACKENDS_0520, "tensorcast", "seaweedfs"),
    ),
}
TESTED = tuple(RELEASES)


def from_parser(version: str, options: list[str], storage_backends: list[str]) -> Release:
    """An untested release, as its own parser describes it."""
    return Release(version, frozenset(options), tuple(storage_backends), tested=False)


def version_key(version: str) -> tuple[int, ...]:
    """(0, 5, 23) of "0.5.23" or "0.5.23.post1"; the leading numbers only."""
    out = []
    for part in version.split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        out.append(int(digits))
        if digits != part:
            break
    return tuple(out)


def outside_range(version: str) -> str | None:
    """'older'/'newer' when `version` lies outside the supported range, else None."""
    key = version_key(version)
    if key < version_key(OLDEST):
        return "older"
    if key > version_key(NEWEST):
        return "newer"
    return None
