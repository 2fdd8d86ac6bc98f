"""xputune tiers and xputune model through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xputune.cli.entry import main


def _run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _trace(tmp_path: Path) -> Path:
    lines = []
    for i in range(40):
        ids = [0, 1 + i % 3, 10 + i % 3] if i % 2 else [0, 20 + i]
        lines.append(
            json.dumps(
                {
                    "timestamp": i,
                    "input_length": 512 * len(ids) - 100,
                    "output_length": 1,
                    "hash_ids": ids,
                }
            )
        )
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_tiers_json_contract(tmp_path: Path, capsys) -> None:
    rc, out, _ = _run(
        capsys,
        "tiers",
        "--trace",
        str(_trace(tmp_path)),
        "--capacity",
        "512",
        "--capacity",
        "2K",
        "--format",
        "json",
    )
    assert rc == 0
    data = json.loads(out)
    assert data["schema_version"] == 1
    assert [p["capacity_tokens"] for p in data["curve"]] == [512, 2000]
    assert all(0.0 <= p["hit_rate"] <= 1.0 for p in data["curve"])
    assert data["curve"][0]["hit_rate"] <= data["curve"][1]["hit_rate"]


def test_tiers_default_grid_table_plot_and_measured(tmp_path: Path, capsys) -> None:
    table = tmp_path / "m.csv"
    table.write_text("capacity_tokens,hit_rate,ttft_ms\n1024,0.2,900\n2048,0.2,880\n8192,0.5,700\n")
    svg = tmp_path / "c.svg"
    rc, out, _ = _run(
        capsys,
        "tiers",
        "--trace",
        str(_trace(tmp_path)),
        "--l1",
        "1024",
        "--measured",
        str(table),
        "--model",
        "glm-5",
        "--tp",
        "8",
        "--plot",
        str(svg),
    )
    assert rc == 0
    assert "L1 prefix hit rate" in out and "stop-at-plateau stops at 1024" in out
    assert svg.read_text().startswith("<svg")
    rc, out, _ = _run(
        capsys,
        "tiers",
        "--trace",
        str(_trace(tmp_path)),
        "--l1",
        "1024",
        "--measured",
        str(table),
        "-f",
        "json",
    )
    data = json.loads(out)
    assert data["measured"]["plateau_rule"]["disagrees"]
    assert len(data["tiers"]) == len(data["curve"])


def test_bad_trace_is_one_line_naming_the_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input_length": 10, "hash_ids": [1]}\n{"input_length": -3, "hash_ids": []}\n')
    rc, _, err = _run(capsys, "tiers", "--trace", str(bad))
    assert rc == 2 and "line 2" in err and "input_length" in err and "Traceback" not in err
    rc, _, err = _run(capsys, "tiers", "--trace", str(tmp_path / "missing.jsonl"))
    assert rc == 2 and "not found" in err


def test_png_without_matplotlib_is_a_clear_error(tmp_path: Path, capsys) -> None:
    pytest.importorskip("numpy")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        rc, _, err = _run(
            capsys, "tiers", "--trace", str(_trace(tmp_path)), "--plot", str(tmp_path / "c.png")
        )
        assert rc == 2 and "matplotlib" in err
    else:
        pytest.skip("matplotlib is installed")


def test_model_seed(capsys) -> None:
    rc, out, _ = _run(capsys, "model", "--seed", "--recompute-us-per-token", "28.24", "-f", "json")
    assert rc == 0
    data = json.loads(out)
    assert abs(data["break_even"]["tokens"] - 3000) < 50
    assert abs(data["transfer"]["implied_bytes_per_token"] - 100_189) < 1
    assert abs(data["transfer"]["implied_over_model"] - 1.0) < 0.005


def test_model_fits_points(capsys) -> None:
    rc, out, _ = _run(
        capsys,
        "model",
        "--point",
        "1000:792.6",
        "--point",
        "8K:887.4",
        "--point",
        "32K:1222.8",
        "--recompute-point",
        "1000:760",
        "--recompute-point",
        "32000:1650",
        "-f",
        "json",
    )
    assert rc == 0
    data = json.loads(out)
    assert len(data["load_fit"]["points"]) == 3
    assert data["break_even"]["tokens"] > 0


def test_model_needs_inputs(capsys) -> None:
    rc, _, err = _run(capsys, "model")
    assert rc == 2 and "--point" in err


# -- one vocabulary: a flag means the same in plan, model, tiers and launch -----------------------

SEED = ("--example", "h3c-hygon-p800")
GLM5 = {
    "model_type": "glm_moe_dsa", "num_hidden_layers": 78, "kv_lora_rank": 512,
    "qk_rope_head_dim": 64, "index_head_dim": 128, "num_attention_heads": 64,
}  # fmt: skip


def _config(tmp_path: Path) -> Path:
    folder = tmp_path / "GLM-5"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GLM5))
    return folder


def _plan_json(capsys, *args: str) -> dict:
    rc, out, err = _run(capsys, "plan", *SEED, "-f", "json", *args)
    assert rc == 0, err
    return json.loads(out)


def test_plan_tp_defaults_to_the_cards_of_the_host(capsys) -> None:
    data = _plan_json(capsys, "--model", "glm-5")
    assert data["model"]["tp"] == 8 and len(data["ranks"]) == 8


def test_every_spelling_of_a_model_gives_one_geometry(tmp_path: Path, capsys) -> None:
    folder = _config(tmp_path)
    sizes = set()
    for spelling in ("glm-5", "GLM5", "zai-org/GLM-5", str(folder), str(folder / "config.json")):
        model = _plan_json(capsys, "--model", spelling, "--tp", "8")["model"]
        sizes.add(model["bytes_per_token_per_rank"])
    assert len(sizes) == 1
    for spelling in ("zai-org/GLM-5", str(folder)):
        rc, out, err = _run(capsys, "model", "--fit-a", "700", "--fit-b", "13", "--tp", "8",
                            "--model", spelling, "-f", "json")  # fmt: skip
        assert rc == 0, err
        assert json.loads(out)["transfer"]["bytes_per_token_per_rank"] in sizes


def test_one_json_key_for_bytes_per_token_per_rank(tmp_path: Path, capsys) -> None:
    plan = _plan_json(capsys, "--model", "glm-5", "--tp", "8")["model"]
    _, out, _ = _run(capsys, "tiers", "--trace", str(_trace(tmp_path)), "--model", "glm-5",
                      "--tp", "8", "-f", "json")  # fmt: skip
    tiers = json.loads(out)["model"]
    _, out, _ = _run(capsys, "model", "--seed", "-f", "json")
    model = json.loads(out)["transfer"]
    assert plan["bytes_per_token_per_rank"] == tiers["bytes_per_token_per_rank"]
    assert model["bytes_per_token_per_rank"] == plan["bytes_per_token_per_rank"]
    for doc in (plan, tiers, model):
        assert "bytes_per_token_rank" not in doc and "model_bytes_per_token" not in doc


def test_commands_without_a_host_ask_for_tp(tmp_path: Path, capsys) -> None:
    rc, out, err = _run(capsys, "tiers", "--trace", str(_trace(tmp_path)), "--model", "glm-5")
    assert rc != 0 and out == "" and "give --tp N" in err
    rc, _, err = _run(capsys, "model", "--fit-a", "1", "--fit-b", "1", "--model", "nope")
    assert rc != 0 and "unknown model 'nope'" in err


def test_a_tp_size_sglang_refuses_is_an_error_unless_forced(capsys, run_cli) -> None:
    code, out, err = run_cli("plan", "--example", "h3c-hygon-p800", "--model", "glm-5", "--tp", "3")
    assert code == 2 and out == ""
    assert "does not divide the model's 64 attention heads" in err and "--force" in err
    data = _plan_json(capsys, "--model", "glm-5", "--tp", "3", "--force")
    assert any("does not divide the model's 64 attention heads" in w for w in data["warnings"])
    assert any("does not divide the 8 cards" in w for w in data["warnings"])
    plain = [w for w in _plan_json(capsys, "--model", "glm-5", "--tp", "8")["warnings"]
             if w.startswith("TP ")]  # fmt: skip
    assert plain == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [("no/such/dir/c.svg", "no such directory"), ("c.pdf", ".svg or .png"), ("d.svg", "directory")],
)
def test_unwritable_plot_is_refused_before_the_trace_is_read(
    tmp_path: Path, capsys, name: str, expected: str
) -> None:
    # The trace does not exist: a refusal that names the plot proves nothing was read first.
    missing = tmp_path / "never-read.jsonl"
    plot = tmp_path / name
    if name == "d.svg":
        plot.mkdir()
    rc, _, err = _run(capsys, "tiers", "--trace", str(missing), "--plot", str(plot))
    assert rc == 2 and expected in err and "not found" not in err, err


@pytest.mark.parametrize("compress", ["plain", "gzip"])
def test_trace_progress_counts_the_bytes_on_disk(tmp_path: Path, compress: str) -> None:
    import gzip

    from xputune.userfiles import open_trace

    path = _trace(tmp_path)
    if compress == "gzip":
        packed = tmp_path / "t.jsonl.gz"
        packed.write_bytes(gzip.compress(path.read_bytes()))
        path = packed
    seen: list[int] = []
    with open_trace(path, seen.append) as stream:
        text = stream.read()
    assert text.startswith(b'{"timestamp": 0') and sum(seen) == path.stat().st_size
