"""`xputune kernels ...` and `xputune bench copy` through typer, as a user runs them."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from xputune.cli import kernels_cmds
from xputune.cli.entry import main
from xputune.kernels.cases import OPERATORS

runner = CliRunner()


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    app.command("noop")(lambda: None)  # a second command keeps sub-groups addressable by name
    kernels_cmds.register(app)
    return app


SEED = ["--tokens", "32768", "--page-size", "64", "--layers", "78", "--item-size", "1152"]


def test_plan_json_reproduces_the_seed_counts(app: typer.Typer) -> None:
    result = runner.invoke(
        app,
        ["kernels", "plan", *SEED, "-l", "layer_first", "-l", "page_first_direct", "-f", "json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["schema_version"] == 1
    counts = {row["layout"]: row["segments"] for row in data["layouts"]}
    assert counts["layer_first"] == 78
    assert counts["page_first_direct"] == 32768 // 64 * 78
    by_layout = {row["layout"]: row for row in data["layouts"]}
    assert by_layout["page_first_direct"]["vs_layer_first"] == 512


def test_plan_table_shows_both_counts(app: typer.Typer) -> None:
    result = runner.invoke(app, ["kernels", "plan", *SEED, "-l", "layer_first",
                                 "-l", "page_first_direct"], env={"COLUMNS": "120"})  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "39,936" in result.output and "78" in result.output


def test_plan_rejects_nonsense(app: typer.Typer) -> None:
    result = runner.invoke(app, ["kernels", "plan", "--item-size", "0"])
    assert result.exit_code != 0


def test_build_reports_each_backend(app: typer.Typer) -> None:
    result = runner.invoke(app, ["kernels", "build", "-f", "json"])
    data = json.loads(result.output)
    status = {row["backend"]: row["status"] for row in data["backends"]}
    for built in ("host", "stackdist (tiers)", "xpu (test runtime)"):  # a checkout: here
        assert status[built] == "built", data
    assert set(status) == {"host", "stackdist (tiers)", "xpu (test runtime)", "cuda", "xpu"}


def test_bench_copy_json_side_by_side(app: typer.Typer) -> None:
    result = runner.invoke(app, ["bench", "copy", "--tokens", "256", "--page-size", "16",
                                 "--repeats", "1", "-f", "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{") :])
    assert data["schema_version"] == 1 and data["backend"] == "host"
    rows = {(r["layout"], r["direction"]): r for r in data["results"]}
    assert len(rows) == 6
    assert rows[("page_first_direct", "h2d")]["segments"] == 256 // 16
    for r in rows.values():
        assert r["gbps"] > 0 and r["baseline_gbps"] > 0 and r["ratio"] > 0
        assert r["bytes"] == 256 * 1152 and r["seconds"] > 0


def test_user_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "copy", "--layers", "3", "--pool-layers", "2", "--tokens", "64"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("xputune: error:") and "pool holds 2 layers" in err


def test_bench_app_is_open_for_other_benchmarks() -> None:
    names = {c.name for c in kernels_cmds.bench_app.registered_commands}
    assert "copy" in names


@pytest.mark.slow
def test_selftest_passes_here(app: typer.Typer) -> None:
    result = runner.invoke(app, ["kernels", "selftest", "--rounds", "1", "-f", "json"])
    data = json.loads(result.output)
    assert result.exit_code == 0 and data["ok"], result.output
    tested = {r["operator"] for r in data["results"] if not r["detail"].startswith("skipped")}
    assert tested == set(OPERATORS) and len(tested) == 11
