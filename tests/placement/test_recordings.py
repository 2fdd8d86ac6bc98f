"""`xputune verify` on recordings of real shapes (tests/placement/recordings, built by
build_recordings.py): multi-node placement judged right, each unknown said and not taken for
drift, the user's own mistakes one line, the result kept for status and metrics."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from tests.placement import build_recordings
from xputune.host import open_host
from xputune.placement.judge import reachable

DRIFT = str(build_recordings.path("seedbox-tp8-drift"))
SHARED = str(build_recordings.path("seedbox-tp8-shared"))
PLAIN = str(build_recordings.path("small-tp2-plain"))
GIB = 1 << 30


def _json(run_cli, *args: str) -> tuple[int, dict]:
    code, out, _err = run_cli("verify", *args, "-f", "json")
    return code, json.loads(out)


def _extract(recording: str, dest: Path) -> Path:
    with tarfile.open(recording) as tar:
        tar.extractall(dest, filter="tar")
    return next(dest.iterdir())


def test_the_recordings_are_up_to_date() -> None:
    assert build_recordings.main(["--check"]) == 0


def test_rank_3_off_its_node_and_rank_5_on_small_pages_are_named(run_cli) -> None:
    code, out, err = run_cli("verify", "--root", DRIFT, "--pid", "4100")
    assert code == 1, err
    assert "TP3 (pid 4164) off-node: pool 100% on node 1; planned node 3 (policy bind:3)" in out
    assert "`migratepages 4164 1 3`" in out and "numa_balancing=1" in out
    assert "TP5 (pid 4166) small-pages: pool on 4 KB pages only; huge pages were planned" in out
    assert "thp.defrag [madvise]" in out
    assert "8 ranks of pid 4100: drift in TP3 (off-node), TP5 (small-pages)" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_the_drift_document(run_cli) -> None:
    code, doc = _json(run_cli, "--root", DRIFT, "--pid", "4100")
    assert code == 1 and doc["drift"] and doc["drifting"] == ["TP3", "TP5"]
    assert doc["pool_expected_bytes"] == 64 * 10**9
    ranks = {r["rank"]: r for r in doc["ranks"]}
    planned = [ranks[f"TP{i}"]["plan"]["nodes"] for i in range(8)]
    assert planned == [[1], [1], [3], [3], [5], [5], [7], [7]]
    for name, r in ranks.items():
        assert r["plan"]["source"].startswith("XPUTUNE_HICACHE_NUMA[")
        assert r["plan"]["source"].endswith("in the environment of pid 4100")  # blank own
        assert r["cpus"]["on_node"] == "all" and r["pool"]["kind"] == "anon"
        assert r["pool"]["size_bytes"] == build_recordings.POOL_64GB
        assert r["verdict"] == ("drift" if name in ("TP3", "TP5") else "ok"), r
    assert ranks["TP3"]["pool"]["nodes"] == [
        {"node": 1, "bytes": build_recordings.POOL_64GB, "share": 1.0}
    ]
    assert [f["kind"] for f in ranks["TP3"]["findings"]] == ["off-node"]
    assert ranks["TP5"]["pool"]["huge_share"] == 0 and "hg" in ranks["TP5"]["pool"]["vm_flags"]
    assert [f["kind"] for f in ranks["TP5"]["findings"]] == ["small-pages"]
    assert doc["warnings"] == []


def test_found_by_its_port_as_well(run_cli) -> None:
    code, doc = _json(run_cli, "--root", DRIFT, "--url", "http://127.0.0.1:30000")
    assert code == 1 and doc["server"]["pid"] == 4100
    assert doc["server"]["found_by"] == "pid 4100, listening on port 30000"


def test_a_shared_pool_interleaved_over_every_node_holds(run_cli) -> None:
    code, doc = _json(run_cli, "--root", SHARED, "--url", "127.0.0.1:30000")
    assert code == 0 and doc["verdict"] == "ok"
    for r in doc["ranks"]:
        assert r["plan"]["mode"] == "interleave" and r["plan"]["nodes"] == list(range(8))
        pool = r["pool"]
        assert pool["kind"] == "shmem" and pool["name"] == "/dev/shm/#1572 (deleted)"
        assert pool["policy"] == "interleave:0-7" and len(pool["nodes"]) == 8
        assert pool["huge_share"] == 1.0


def test_plain_sglang_judged_against_its_cards_node(run_cli) -> None:
    code, doc = _json(run_cli, "--root", PLAIN, "--pid", "4100")
    assert code == 1 and doc["drifting"] == ["TP1"]
    first, second = doc["ranks"]
    assert first["plan"]["source"].startswith("the node of xpu0 (XPU_VISIBLE_DEVICES[0]")
    assert first["pool"]["kind"] == "hugetlb" and first["pool"]["policy"] == "prefer:1"
    assert first["pool"]["kernel_page_bytes"] == 2 << 20 and first["verdict"] == "ok"
    assert first["cpus"]["on_node"] == "some" and first["notes"]  # not bound: a note only
    assert second["pool"]["policy"] == "prefer:1"
    assert {n["node"]: n["share"] for n in second["pool"]["nodes"]} == {0: 0.4, 1: 0.6}
    kinds = [f["kind"] for f in second["findings"]]
    assert kinds == ["off-node", "small-pages"]
    assert "SGLANG_HUGEPAGE_SIZE" in second["findings"][1]["fix"]
    assert "preferred, not bound" in second["findings"][0]["fix"]


# -- the user's mistakes: one line, exit 2 ---------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--pid", "999"), "no process 999 on"),
        (("--pid", "4170"), "no SGLang scheduler process"),  # the detokenizer
        (("--url", "http://127.0.0.1:1"), "nothing listens on TCP port 1 on"),
        (("--url", "ftp://x"), "give http://HOST:PORT"),
        ((), "give the server's --url or its launcher's --pid"),
    ],
)
def test_what_the_user_got_wrong_is_one_line(run_cli, args: tuple[str, ...], said: str) -> None:
    code, out, err = run_cli("verify", "--root", DRIFT, *args)
    assert code == 2 and out == ""
    assert err.startswith("xputune: error: ") and said in err and len(err.splitlines()) == 1


# -- what cannot be read is unknown with a warning, never drift ---------------------------------


def _edit(root: Path, path: str, text: str | bytes | None) -> None:
    target = root / path.lstrip("/")
    target.chmod(0o644)
    if text is None:
        target.unlink()
    else:
        target.write_bytes(text.encode() if isinstance(text, str) else text)


def test_no_mapping_of_the_expected_size_is_unknown(run_cli, tmp_path: Path) -> None:
    root = _extract(DRIFT, tmp_path)
    argv = (root / "proc/4100/cmdline").read_bytes().replace(b"--hicache-size\x0064",
                                                             b"--hicache-size\x00300")  # fmt: skip
    _edit(root, "proc/4100/cmdline", argv)
    code, doc = _json(run_cli, "--root", str(root), "--pid", "4100", "--no-keep")
    assert code == 0 and doc["verdict"] == "unknown" and len(doc["unknown"]) == 8
    assert all(r["pool"] is None for r in doc["ranks"])
    assert any("no anonymous or shared-memory mapping of about 279.40 GiB" in w and
               "the largest is 59.60 GiB" in w for w in doc["warnings"])  # fmt: skip


def test_garbage_and_missing_files_are_warnings(run_cli, tmp_path: Path) -> None:
    root = _extract(DRIFT, tmp_path)
    numa = (root / "proc/4164/numa_maps").read_text()
    _edit(root, "proc/4164/numa_maps", numa.replace(" bind:3 anon=", " bind:@ anon="))
    smaps = (root / "proc/4166/smaps").read_text()
    _edit(root, "proc/4166/smaps", "garbage line\n" + smaps.replace("THPeligible:", "THPelig:"))
    _edit(root, "proc/4167/numa_maps", None)
    _edit(root, "proc/4168/status", "Name:\tsglang::schedul\nCpus_allowed_list:\tbanana\n")
    code, doc = _json(run_cli, "--root", str(root), "--pid", "4100", "--no-keep")
    ranks = {r["rank"]: r for r in doc["ranks"]}
    assert ranks["TP3"]["verdict"] == "unknown" and ranks["TP3"]["pool"]["nodes"] is None
    assert ranks["TP5"]["verdict"] == "drift"  # its pool is still read around the bad lines
    assert ranks["TP6"]["verdict"] == "unknown"
    assert ranks["TP7"]["cpus"]["on_node"] is None and ranks["TP7"]["mems_allowed"] is None
    text = "\n".join(doc["warnings"])
    for path in ("/proc/4164/numa_maps", "/proc/4166/smaps", "/proc/4167/numa_maps",
                 "/proc/4168/status"):  # fmt: skip
        assert path in text, text
    assert code == 1 and doc["drifting"] == ["TP5"]


def test_without_any_environment_the_plan_comes_from_the_command_line(run_cli, tmp_path) -> None:
    root = _extract(DRIFT, tmp_path)
    _edit(root, "proc/4100/environ", b"\0" * 64)
    code, doc = _json(run_cli, "--root", str(root), "--pid", "4100", "--no-keep")
    assert all(r["plan"]["source"].startswith("--numa-node[") for r in doc["ranks"])
    assert all(r["plan"]["huge_pages"] is None for r in doc["ranks"])  # unknown, not "no"
    assert doc["drifting"] == ["TP3"] and code == 1  # small pages cannot be judged now
    assert any("no readable environment" in w for w in doc["warnings"])


def test_a_pool_nothing_bound_is_named_so(run_cli, tmp_path: Path) -> None:
    root = _extract(DRIFT, tmp_path)
    numa = (root / "proc/4164/numa_maps").read_text()
    _edit(root, "proc/4164/numa_maps", numa.replace(" bind:3 anon=", " default anon="))
    code, doc = _json(run_cli, "--root", str(root), "--pid", "4100", "--no-keep")
    (finding,) = doc["ranks"][3]["findings"]
    assert code == 1 and finding["text"].endswith("(policy default)")
    assert finding["fix"].startswith("nothing bound the pool (policy default")


def test_cpus_off_their_node_are_drift(run_cli, tmp_path: Path) -> None:
    root = _extract(DRIFT, tmp_path)
    status = (root / "proc/4161/status").read_text()
    _edit(root, "proc/4161/status", status.replace("Cpus_allowed_list:\t16-31,144-159",
                                                    "Cpus_allowed_list:\t0-15"))  # fmt: skip
    _code, doc = _json(run_cli, "--root", str(root), "--pid", "4100", "--no-keep")
    tp0 = doc["ranks"][0]
    assert tp0["cpus"]["on_node"] == "none" and tp0["findings"][0]["kind"] == "cpus-off-node"
    assert "`taskset -apc 16-31,144-159 4161`" in tp0["findings"][0]["fix"]


def test_huge_pages_need_room_for_one() -> None:
    mib = 1 << 20
    assert reachable(0, mib) == 0 and reachable(mib, 5 * mib) == 0.5
    assert reachable(0, 64 * mib) == 1.0


# -- kept for status and metrics -----------------------------------------------------------------


def test_the_result_is_kept_for_status_and_metrics(run_cli, tmp_path: Path) -> None:
    root = _extract(DRIFT, tmp_path)
    code, out, err = run_cli("verify", "--root", str(root), "--pid", "4100", "-q")
    assert code == 1 and err == ""
    kept = root / "var/lib/xputune/verify.json"
    assert kept.stat().st_mode & 0o777 == 0o600
    code, out, _ = run_cli("status", "--root", str(root), "-f", "json")
    v = json.loads(out)["verification"]
    assert v["verdict"] == "drift" and v["drifting"] == ["TP3", "TP5"] and v["ranks"] == 8
    code, out, _ = run_cli("status", "--root", str(root))
    assert "drift in TP3, TP5" in out and "see `xputune verify`" in out
    code, out, _ = run_cli("metrics", "--root", str(root))
    assert 'xputune_kv_pool_bytes{rank="3",node="1"} 63998787584' in out
    assert 'xputune_kv_pool_drift{rank="3"} 1' in out and 'xputune_kv_pool_drift{rank="0"} 0' in out
    assert 'xputune_kv_pool_huge_page_ratio{rank="5"} 0' in out
    assert 'xputune_kv_pool_on_planned_node_ratio{rank="3"} 0' in out
    assert "xputune_verify_drifting_ranks 2" in out


def test_a_damaged_kept_result_is_a_warning(run_cli, tmp_path: Path) -> None:
    root = _extract(DRIFT, tmp_path)
    assert run_cli("verify", "--root", str(root), "--pid", "4100", "-q")[0] == 1
    kept = root / "var/lib/xputune/verify.json"
    doc = json.loads(kept.read_text())
    doc["ranks"][0]["pool"]["nodes"][0]["bytes"] = "many"
    kept.write_text(json.dumps(doc))
    _, out, _ = run_cli("status", "--root", str(root), "-f", "json")
    data = json.loads(out)
    assert data["verification"] is None
    assert any("ranks[0].pool.nodes[0].bytes" in w for w in data["warnings"])
    _code, out, err = run_cli("metrics", "--root", str(root))
    assert "xputune_kv_pool" not in out and "last verification" in err


def test_a_recording_keeps_nothing(run_cli) -> None:
    view = open_host(DRIFT)
    code, _, err = run_cli("verify", "--root", DRIFT, "--pid", "4100")
    assert code == 1 and "kept" not in err and not view.exists("/var/lib/xputune/verify.json")


def test_the_series_parse_as_prometheus_text(run_cli, tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    root = _extract(PLAIN, tmp_path)
    assert run_cli("verify", "--root", str(root), "--pid", "4100", "-q")[0] == 1
    _, out, _ = run_cli("metrics", "--root", str(root))
    samples = [s for f in text_string_to_metric_families(out) for s in f.samples]

    def series(name: str) -> list:
        return [s for s in samples if s.name == name]

    pool = {(s.labels["rank"], s.labels["node"]): s.value for s in series("xputune_kv_pool_bytes")}
    size = 16_000_000_000 // (2 << 20) * (2 << 20)
    assert pool[("0", "1")] == size
    assert pool[("1", "1")] + pool[("1", "0")] == size and pool[("1", "0")] < pool[("1", "1")]
    drift = {s.labels["rank"]: s.value for s in series("xputune_kv_pool_drift")}
    assert drift == {"0": 0, "1": 1}
    kinds = {s.labels["rank"]: s.labels["kind"] for s in series("xputune_kv_pool_info")}
    assert kinds == {"0": "hugetlb", "1": "anon"}
