"""`xputune kernels ...` and `xputune bench copy` through the CLI's entry point, as a user runs
them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from xputune.cli.entry import main


@pytest.fixture
def app(capsys, monkeypatch):
    """Runs `xputune ARGS`: .invoke(args, env=...) gives .exit_code and .output (stdout and
    stderr, as a terminal shows them)."""

    def invoke(args: list[str], env: dict[str, str] | None = None) -> SimpleNamespace:
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        code = main(list(args))
        out = capsys.readouterr()
        return SimpleNamespace(exit_code=code, output=out.out + out.err, stdout=out.out)

    return SimpleNamespace(invoke=invoke)


SEED = ["--tokens", "32768", "--page-size", "64", "--layers", "78", "--item-size", "1152"]


def test_plan_json_reproduces_the_seed_counts(app) -> None:
    result = app.invoke(
        ["kernels", "plan", *SEED, "-l", "layer_first", "-l", "page_first_direct", "-f", "json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1
    counts = {row["layout"]: row["segments"] for row in data["layouts"]}
    assert counts["layer_first"] == 78
    assert counts["page_first_direct"] == 32768 // 64 * 78
    by_layout = {row["layout"]: row for row in data["layouts"]}
    assert by_layout["page_first_direct"]["vs_layer_first"] == 512


def test_plan_table_shows_both_counts(app) -> None:
    result = app.invoke(["kernels", "plan", *SEED, "-l", "layer_first",
                                 "-l", "page_first_direct"], env={"COLUMNS": "120"})  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "39,936" in result.output and "78" in result.output


def test_plan_rejects_nonsense(app) -> None:
    result = app.invoke(["kernels", "plan", "--item-size", "0"])
    assert result.exit_code != 0


def test_build_reports_each_backend(app) -> None:
    result = app.invoke(["kernels", "build", "-f", "json"])
    data = json.loads(result.stdout)
    status = {row["backend"]: row["status"] for row in data["backends"]}
    for built in ("host", "stackdist (tiers)", "xpu (test runtime)"):  # a checkout: here
        assert status[built] == "built", data
    assert set(status) == {"host", "stackdist (tiers)", "xpu (test runtime)", "cuda", "xpu"}


def test_bench_copy_json_side_by_side(app) -> None:
    result = app.invoke(["bench", "copy", "--tokens", "256", "--page-size", "16",
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
