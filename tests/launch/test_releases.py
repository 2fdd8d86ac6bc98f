"""The per-release table (launch/releases.py) and what the launcher writes for each release:
flags in the release's spelling and none it refuses, an explicit per-rank --hicache-size,
--disaggregation-ib-device per rank and only on a PD server, notes on the user's own flags
(never rewritten), and the storage backends it lists."""

from __future__ import annotations

import json

import pytest

from xputune.launch.releases import (
    NEWEST,
    OLDEST,
    RELEASES,
    SPELLINGS,
    TESTED,
    from_parser,
    outside_range,
    version_key,
)
from xputune.launch.sglang import for_release, split_flags

OURS = ["--tp-size", "8", "--enable-hierarchical-cache", "--hicache-size", "32",
        "--hicache-mem-layout", "layer_first", "--numa-node", "1", "1"]  # fmt: skip
PD = ["--disaggregation-ib-device", '{"0":"mlx5_0","1":"mlx5_0"}']


def test_the_range_and_what_each_release_changed() -> None:
    assert TESTED == ("0.5.20", "0.5.21", "0.5.22", "0.5.23")
    assert (OLDEST, NEWEST) == ("0.5.20", "0.5.23")
    r20, r21, r22, r23 = (RELEASES[v] for v in TESTED)
    assert not r20.sizes_l2_itself and all(r.sizes_l2_itself for r in (r21, r22, r23))
    assert not r20.attn_dp and not r21.attn_dp and r22.attn_dp and r23.attn_dp
    assert "tensorcast" not in r20.storage_backends and "tensorcast" in r21.storage_backends
    assert "seaweedfs" not in r21.storage_backends and "seaweedfs" in r22.storage_backends
    assert r23.storage_backends == r22.storage_backends
    assert not r22.accepts("--enable-hicache") and r23.accepts("--enable-hicache")
    for release in RELEASES.values():  # no flag xputune emits was removed or renamed
        for canon in ("--tp-size", "--enable-hierarchical-cache", "--hicache-size",
                      "--hicache-mem-layout", "--hicache-io-backend", "--hicache-write-policy",
                      "--numa-node", "--disaggregation-ib-device", "--hicache-storage-backend",
                      "--hicache-storage-backend-extra-config",
                      "--hicache-storage-prefetch-policy"):  # fmt: skip
            assert release.spelling(canon) == canon
        assert {"mooncake", "file"} <= set(release.storage_backends)
        assert release.options <= {s for names in SPELLINGS.values() for s in names}


def test_versions_compare_by_their_numbers() -> None:
    assert version_key("0.5.23") == (0, 5, 23) and version_key("0.5.23.post1") == (0, 5, 23)
    assert version_key("0.6.0rc1") == (0, 6, 0) and version_key("garbage") == ()
    assert outside_range("0.5.19") == "older" and outside_range("0.5.24") == "newer"
    assert outside_range("0.5.21") is None and outside_range("0.5.23.post1") is None


@pytest.mark.parametrize("version", TESTED)
def test_every_release_takes_our_flags_as_they_are(version) -> None:
    flags, _ = for_release(OURS, ["--model-path", "m"], RELEASES[version], PD)
    assert flags == OURS  # no PD flag without --disaggregation-mode


@pytest.mark.parametrize("mode", ["prefill", "decode", "null"])
def test_the_ib_device_map_only_on_a_pd_server(mode) -> None:
    user = ["--model-path", "m", "--disaggregation-mode", mode]
    flags, _ = for_release(OURS, user, RELEASES[NEWEST], PD)
    if mode == "null":
        assert "--disaggregation-ib-device" not in flags
    else:
        assert flags[-2:] == PD and json.loads(flags[-1]) == {"0": "mlx5_0", "1": "mlx5_0"}


def test_the_explicit_size_is_said_where_sglang_would_size_l2_itself() -> None:
    _, notes = for_release(OURS, [], RELEASES["0.5.20"])
    assert notes == []
    for version in ("0.5.21", "0.5.23"):
        _, [note] = for_release(OURS, [], RELEASES[version])
        assert note.startswith("note: --hicache-size 32 is explicit, per rank: sglang ")
        assert "--hicache-host-memory-fraction auto-sizing" in note and "blind to NUMA" in note
    _, notes = for_release(OURS, ["--hicache-ratio", "2"], RELEASES[NEWEST])
    assert notes == []  # the user sized it: nothing of ours to explain


def test_the_users_own_fraction_wins_over_the_plans_size() -> None:
    user = ["--model-path", "m", "--hicache-host-memory-fraction", "0.5"]
    flags, [note] = for_release(OURS, user, RELEASES[NEWEST])
    assert "--hicache-size" not in flags
    assert note.startswith("note: your --hicache-host-memory-fraction sizes L2")
    assert "the plan's --hicache-size 32 per rank is left out" in note
    flags, [warning] = for_release(OURS, user, RELEASES["0.5.20"])
    assert "--hicache-size" in flags  # 0.5.20 has no fraction: SGLang will refuse the flag
    assert warning == (
        "warning: sglang 0.5.20 has no --hicache-host-memory-fraction: SGLang will refuse it"
    )


def test_a_size_of_zero_without_a_ratio_is_said_to_leave_l2_to_sglang() -> None:
    _, [note] = for_release(OURS, ["--hicache-size", "0"], RELEASES["0.5.22"])
    assert note.startswith("note: your --hicache-size 0 without --hicache-ratio leaves L2 to ")
    assert for_release(OURS, ["--hicache-size", "0"], RELEASES["0.5.20"])[1] == []
    assert for_release(OURS, ["--hicache-size=0", "--hicache-ratio", "2"],
                       RELEASES["0.5.22"])[1] == []  # fmt: skip


def test_dp_attention_is_noted_where_deprecated_and_never_rewritten() -> None:
    user = ["--model-path", "m", "--dp-size", "8", "--enable-dp-attention", "--hicache-size", "8"]
    for version in ("0.5.20", "0.5.21"):
        assert for_release(OURS, user, RELEASES[version])[1] == []
    for version in ("0.5.22", "0.5.23"):
        flags, [note] = for_release(OURS, user, RELEASES[version])
        assert note.startswith(f"note: --enable-dp-attention is deprecated in sglang {version}")
        assert "write --attn-dp-size N (yours is passed as given)" in note
        assert "--attn-dp-size" not in flags  # ours never add or rewrite it
    _, [warning, _] = for_release(OURS, ["--attn-dp-size", "8"], RELEASES["0.5.21"])
    assert warning == (
        "warning: sglang 0.5.21 has no --attn-dp-size: SGLang will refuse it (it came in "
        "0.5.22; before it: --dp-size N --enable-dp-attention)"
    )
    user = ["--attention-data-parallel-size", "8", "--hicache-ratio", "2"]
    assert for_release(OURS, user, RELEASES["0.5.23"])[1] == []


def test_a_storage_backend_the_release_lacks_is_said() -> None:
    user = ["--hicache-storage-backend", "seaweedfs", "--hicache-ratio", "2"]
    _, [warning] = for_release(OURS, user, RELEASES["0.5.21"])
    assert warning.startswith("warning: sglang 0.5.21 has no storage backend 'seaweedfs'")
    assert for_release(OURS, user, RELEASES["0.5.22"])[1] == []


def test_an_untested_release_gets_its_own_spellings_and_nothing_it_lacks() -> None:
    release = from_parser(
        "0.5.99",
        ["--model-path", "--tensor-parallel-size", "--enable-hicache", "--hicache-size",
         "--hicache-mem-layout", "--port", "--page-size"],
        ["file"],
    )  # fmt: skip
    flags, notes = for_release(OURS, ["--model-path", "m", "--tp", "8", "--bogus", "1"], release)
    assert split_flags(flags) == [
        ("--tensor-parallel-size", ["8"]),
        ("--enable-hicache", []),
        ("--hicache-size", ["32"]),
        ("--hicache-mem-layout", ["layer_first"]),
    ]
    assert "warning: sglang 0.5.99 has no --numa-node: left out" in notes
    # the user's own flags are checked against all its options, a unique prefix taken
    assert "warning: sglang 0.5.99 has no --bogus: SGLang will refuse it" in notes
    assert "warning: sglang 0.5.99 has no --tp: SGLang will refuse it" in notes  # no --tp-size
    _, notes = for_release(OURS, ["--tensor", "8", "--page", "1"], release)
    assert not any("SGLang will refuse" in n for n in notes)
