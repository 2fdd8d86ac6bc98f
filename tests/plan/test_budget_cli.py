"""`plan` and `launch sglang` with per-node L2 budgets, through the real entry point: the two
bundled boxes as recorded (idle: the static share sets the top), a copy of the seed box with
one node short of memory (the ladder stops lower, for every rank), and what the plan says
about where SGLang's own pools land."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import copy_tree
from tests.launch.fakepython import GOOD, fake_python
from tests.plan.busy_node import make_busy
from xputune.launch.prefault import VARIABLE

SEED = ("--example", "h3c-hygon-p800")
GLM5 = ("--model", "glm-5", "--tp", "8")


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch) -> None:
    monkeypatch.delenv("XPUTUNE_SGLANG_PYTHON", raising=False)
    monkeypatch.delenv(VARIABLE, raising=False)
    monkeypatch.setenv("COLUMNS", "80")


@pytest.fixture(scope="module")
def busy(tmp_path_factory) -> Path:
    """The seed box with 130 GB held on node 3 (xpu2 and xpu3's node)."""
    root = copy_tree("h3c-hygon-p800", tmp_path_factory.mktemp("busy") / "box")
    make_busy(root, 3, held_gb=130)
    return root


def _fits(text: str, width: int = 80) -> None:
    """The tables and notes fit; the command after "SGLang:" keeps a JSON word whole."""
    shown = text.split("\nSGLang:", 1)[0]
    assert "…" not in shown and "SGLang:" in text
    assert not [line for line in shown.splitlines() if len(line) > width]


def _budget_rows(out: str) -> dict[str, list[str]]:
    """The rows of the budget table, by node."""
    table = out.split("L2 budget per NUMA node (GB, free now)", 1)[1].split("└", 1)[0]
    rows = [line.strip("│ ").split("│") for line in table.splitlines() if line.startswith("│")]
    return {cells[0].strip(): [c.strip() for c in cells] for cells in rows}


@pytest.mark.parametrize(
    "example, nodes, sharers",
    [("h3c-hygon-p800", [1, 3, 5, 7], 2), ("nvidia-hgx-h100", [0, 1], 4)],
)
def test_the_bundled_boxes_show_each_node_s_budget(
    run_cli, example: str, nodes: list[int], sharers: int
) -> None:
    code, out, err = run_cli("plan", "--example", example, *GLM5)
    assert code == 0, err
    _fits(out)
    rows = _budget_rows(out)
    assert sorted(map(int, rows)) == nodes
    assert not any(r[-1].endswith("<") for r in rows.values())  # idle: nothing cut
    assert "which sets the ladder's top" in " ".join(out.split())
    code, doc, _ = run_cli("plan", "--example", example, *GLM5, "-f", "json")
    cap = json.loads(doc)["capacity"]
    assert cap["limited_by"] == "static share" and cap["node_reserve_gb"] == 20.0
    assert [n["node"] for n in cap["node_budgets"]] == nodes
    for n in cap["node_budgets"]:
        assert n["sharers"] == sharers and n["l2_per_card_gb"] >= cap["per_rank_max_gb"]
        assert n["free_gb"] > n["l2_room_gb"] > 0
    assert cap["tiers"][-1]["hicache_size_gb"] == int(cap["per_rank_max_gb"])


def test_a_node_short_of_memory_stops_the_ladder_lower(run_cli, busy: Path) -> None:
    code, idle, _ = run_cli("plan", *SEED, *GLM5, "-f", "json")
    code, out, err = run_cli("plan", "--root", str(busy), *GLM5)
    assert code == 0, err
    _fits(out)
    flat = " ".join(out.split())
    assert "L2 tiers (max 17.0 GB per rank: node 3's budget)" in flat
    rows = _budget_rows(out)
    assert rows["3"][-1] == "17.0 <" and rows["1"][-1] == "80.0"
    assert "the ladder stops at 17 GB per rank: node 3 has 75.5 GB free" in flat
    assert "--hicache-size 16 " in flat  # the middle of the shorter ladder
    code, doc, _ = run_cli("plan", "--root", str(busy), *GLM5, "-f", "json")
    cap = json.loads(doc)["capacity"]
    assert cap["limited_by"] == "node budget" and cap["tightest_node"] == 3
    sizes = [t["hicache_size_gb"] for t in cap["tiers"]]
    assert sizes == [8, 16, 17] and max(sizes) < json.loads(idle)["capacity"]["per_rank_max_gb"]
    code, _, err = run_cli("plan", "--root", str(busy), *GLM5, "--tier", "64GB")
    assert code == 2 and "exceeds the maximum of 17GB per rank (node 3's budget" in err


def test_the_reserve_flag_moves_the_budget(run_cli, busy: Path) -> None:
    def top(*extra: str) -> float:
        code, doc, err = run_cli("plan", "--root", str(busy), *GLM5, *extra, "-f", "json")
        assert code == 0, err
        return json.loads(doc)["capacity"]["per_rank_max_gb"]

    assert top("--node-reserve-gb", "10") == pytest.approx(top() + 5, abs=0.1)  # 2 cards
    code, _, err = run_cli("plan", "--root", str(busy), *GLM5, "--node-reserve-gb", "100")
    assert code == 2 and err.count("\n") == 1
    assert "no host memory left for L2: node 3 has 75.5 GB free" in err
    code, _, err = run_cli("plan", *SEED, *GLM5, "--node-reserve-gb", "-1")
    assert code == 2 and "--node-reserve-gb" in err


def test_l3_segments_come_off_their_node(run_cli, busy: Path) -> None:
    args = ("plan", "--root", str(busy), *GLM5, "--l3", "mooncake", "--l3-segment-gb", "64")
    code, doc, err = run_cli(*args, "-f", "json")
    assert code == 0, err
    data = json.loads(doc)
    node3 = next(n for n in data["capacity"]["node_budgets"] if n["node"] == 3)
    assert node3["l3_gb"] == 16.0  # 8 GB a rank, two ranks there
    assert data["capacity"]["per_rank_max_gb"] == pytest.approx(17.0 - 8.0, abs=0.1)
    assert all(n["fits"] for n in data["l3"]["nodes"])
    code, out, _ = run_cli(*args)
    assert _budget_rows(out)["3"][4] == "16.0"


def test_launch_uses_the_same_budget(run_cli, busy: Path) -> None:
    code, out, err = run_cli(
        "launch", "sglang", "-n", "--root", str(busy), "--", "--model-path", "zai-org/GLM-5",
        "--tp", "8",
    )  # fmt: skip
    assert code in (0, 1), err
    flat = " ".join(err.split())
    assert "max 17 GB: node 3's budget" in flat
    assert "--hicache-size 16" in " ".join(out.split())
    code, out, err = run_cli(
        "launch", "sglang", "-n", "--root", str(busy), "--node-reserve-gb", "10", "--",
        "--model-path", "zai-org/GLM-5", "--tp", "8",
    )  # fmt: skip
    assert code in (0, 1), err
    assert "max 22 GB: node 3's budget" in " ".join(err.split())  # 10 GB less, over 2 cards


def test_the_plan_says_where_sglang_s_own_pools_land(run_cli, tmp_path: Path, monkeypatch) -> None:
    new = fake_python(tmp_path / "b", {**GOOD, "sglang": "0.5.23"})
    old = fake_python(tmp_path / "a", {**GOOD, "sglang": "0.5.20"})
    code, out, err = run_cli("plan", *SEED, *GLM5, "--python", str(new))
    assert code == 0, err
    flat = " ".join(out.split())
    assert "--hicache-size 32 is explicit, per rank: sglang 0.5.23's" in flat
    assert "runs each rank under numactl --membind to its --numa-node" in flat
    assert f"{VARIABLE}=N from N threads that inherit the binding" in flat
    assert "allocates the pools itself (plugin feature numa): huge pages bound" in flat
    code, doc, _ = run_cli("plan", *SEED, *GLM5, "--python", str(old), "-f", "json")
    assert not any(VARIABLE in n for n in json.loads(doc)["sglang"]["notes"])  # not in 0.5.20
