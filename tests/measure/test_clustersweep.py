"""`sweep --instances`: clusters launched, replayed through the router and stopped, run by run.

What it refuses is held in one line each (before anything starts); the options a run without
L3 drops and the store each run gets; and one whole sweep of clusters on this machine: the
stand-in SGLang of tests/measure/fakesglang.py behind the real sglang-router, started by the
real `xputune launch cluster`, its document valid against the sweep schema. The same sweep on
real SGLang servers is the cluster lane's (tests/server/test_cluster_lane.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from tests.measure.fakesglang import write_model
from xputune.cli.schema_cmds import schema_text
from xputune.errors import XputuneError
from xputune.measure.clustersweep import (
    _launch_argv,
    parse_instances,
    parse_routings,
    without_l3,
)
from xputune.measure.sweep import ClusterRun

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "tests" / "measure" / "fake_site"
TRACE = str(ROOT / "tests" / "data" / "traces" / "mooncake-conversation-1171-1570.jsonl")


def test_instances_and_routings_parse_and_say_what_is_wrong() -> None:
    assert parse_instances("4, 1,2,2") == [4, 1, 2]
    assert parse_routings("cache_aware,round_robin,cache_aware") == ["cache_aware", "round_robin"]
    with pytest.raises(XputuneError, match="'0' is not a count of instances \\(1 to 64\\)"):
        parse_instances("0,2")
    with pytest.raises(XputuneError, match="'power_of_two' is not a policy the sweep predicts"):
        parse_routings("round_robin,power_of_two")


def test_a_run_without_l3_drops_every_l3_option_and_keeps_the_rest() -> None:
    opts = ["--force", "--l3", "file", "--l3-dir=/data/l3", "--l3-prefetch", "wait_complete",
            "--write-policy", "write_through"]  # fmt: skip
    assert without_l3(opts) == ["--force", "--write-policy", "write_through"]
    with_l3 = _launch_argv(ClusterRun(2, "round_robin", True), opts, ["--device", "cpu"],
                           30000, 30001, "/data/l3/run-1")  # fmt: skip
    cut = with_l3.index("cluster")
    assert with_l3[cut + 1 : cut + 9] == [
        "--instances",
        "2",
        "--router",
        "round_robin",
        "--router-port",
        "30000",
        "--first-port",
        "30001",
    ]
    # the run's own folder replaces the user's, once
    assert with_l3.count("--l3-dir") == 1 and "--l3-dir=/data/l3" not in with_l3
    assert with_l3[with_l3.index("--l3-dir") + 1] == "/data/l3/run-1"
    private = _launch_argv(ClusterRun(2, "round_robin", False), opts, ["--device", "cpu"],
                           30000, 30001, None)  # fmt: skip
    assert not [w for w in private if w.startswith("--l3")]
    assert private[-3:] == ["--", "--device", "cpu"]


SWEEP = ["sweep", "--trace", TRACE, "-n", "4", "-c", "1"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--compare-l3"], "--compare-l3 compares clusters: give --instances"),
        (["--instances", "2", "--baseline"], "--baseline is a sweep of sizes"),
        (["--instances", "2", "--sizes", "x2,x4"], "give --sizes one size"),
        (["--instances", "2,x"], "'x' is not a count of instances"),
        (["--instances", "2", "--routing", "power_of_two"], "not a policy the sweep predicts"),
        (["--instances", "2", "--launch-opt", "--router cache_aware"],
         "--launch-opt --router: the sweep sets the cluster's shape"),
        (["--instances", "2", "--", "--port", "30000"], "sets --port for every instance"),
    ],
)  # fmt: skip
def test_what_a_sweep_of_clusters_refuses_in_one_line(run_cli, args, says) -> None:
    code, out, err = run_cli(*SWEEP, *args)
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err, err


@pytest.mark.timeout(300)
def test_two_instances_with_and_without_the_shared_l3(run_cli, tmp_path, monkeypatch) -> None:
    """Two runs of two stand-in servers behind the real router, with the file L3 and without:
    each a step of the document, valid, every request through the router, the store's own
    folder per run, the workers the router listed, and every set stopped (its ports free)."""
    pytest.importorskip("sglang_router", reason="sglang-router is not installed here")
    import tempfile

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SITE), str(ROOT)]))
    monkeypatch.setenv("XPUTUNE_SGLANG_PYTHON", sys.executable)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the sweep's logs
    store = tmp_path / "l3"
    store.mkdir()
    model = write_model(str(tmp_path / "model"))
    code, out, err = run_cli(
        *SWEEP[:-4], "-n", "12", "-c", "1", "--block-tokens", "8", "--stop-grace", "5",
        "--sizes", "x2", "--instances", "2", "--compare-l3", "--launch-opt",
        f"--force --l3 file --l3-dir {store}", "-f", "json", "--", "--model-path", model,
        "--device", "cpu", "--max-total-tokens", "1024",
    )  # fmt: skip
    assert code in (0, 1), err  # 1: the tier check named something (said in the document)
    doc = json.loads(out)
    errors = list(Draft202012Validator(json.loads(schema_text("sweep"))).iter_errors(doc))
    assert not errors, [e.message for e in errors[:5]]
    assert doc["cluster"] is True and doc["valid"], doc["invalid_reasons"]
    assert doc["l3"]["between_sizes"] == "own_folder" and doc["knee"] is None
    steps = doc["steps"]
    assert [s["label"] for s in steps] == ["2 rr +L3", "2 rr"]
    assert [s["cluster"]["l3"] for s in steps] == [True, False]
    for step in steps:
        assert step["cluster"]["instances"] == 2 and step["cluster"]["routing"] == "round_robin"
        assert len(step["cluster"]["workers"]) == 2
        # the stand-ins publish no counters: the spread is the model's alone
        assert step["cluster"]["requests_per_worker"] == {"measured": None, "predicted": [6, 6]}
        assert step["measured"]["requests"]["completed"] == 12
        assert step["comparison"] and step["predicted"]["hit_rate"]["total"] is not None
    shared, private = steps
    assert shared["server"]["storage_backend"] == "file"
    assert private["server"]["storage_backend"] is None
    assert shared["l3"]["removed"] and not os.listdir(store)  # its own folder, gone after it
    assert [d["from"] for d in doc["differences"]] == ["2 rr +L3"]
    assert any("round_robin routing exactly" in n for n in doc["notes"])
    import socket

    for step in steps:  # every member of each set stopped: nobody listens where they did
        for url in step["cluster"]["workers"]:
            port = int(url.rsplit(":", 1)[1])
            with socket.socket() as s:
                assert s.connect_ex(("127.0.0.1", port)) != 0, url
