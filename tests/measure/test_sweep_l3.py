"""A sweep with an L3 tier (measure/l3store.py): every size starts with an empty store, or the
sweep says why not. Whole sweeps through `xputune launch sglang` with the stand-in server,
whose L3 outlives it in a file as SGLang's stores do (tests/measure/fakesglang.py): a file
store gets a new folder per size and the second size finds none of the first's pages (with
--keep-l3 it finds them all: the check tells the two apart); a Mooncake-like pool is refused,
or emptied through each size's server with --clear-l3; the tier check covers L3."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

import pytest

from tests.measure.fakesglang import write_model
from xputune.cli import exits
from xputune.errors import XputuneError
from xputune.measure import l3store
from xputune.measure.serverproc import Command

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "tests" / "measure" / "fake_site"
SLICE = str(ROOT / "tests" / "data" / "traces" / "mooncake-conversation-1171-1570.jsonl")
HICACHE = ["--enable-hierarchical-cache", "--hicache-size", "0"]


def _command(*flags: str, env: dict[str, str] | None = None) -> Command:
    return Command(["python", "-m", "sglang.launch_server"], list(flags), env or {})


# ------------------------------------------------------------------------------ policy


def test_the_policy_follows_the_backend(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(l3store.FILE_DIR, raising=False)
    own = str(tmp_path)
    assert l3store.policy(_command(*HICACHE), clear=False, keep=False, own=own) is None
    off = _command("--hicache-storage-backend", "mooncake")  # HiCache off: no L3 either
    assert l3store.policy(off, clear=False, keep=False, own=own) is None
    launcher = _command(*HICACHE, "--hicache-storage-backend", "file",
                        env={l3store.FILE_DIR: "/data/l3"})  # fmt: skip
    got = l3store.policy(launcher, clear=False, keep=False, own=own)
    assert got == l3store.Policy("file", "own_folder", "/data/l3", "launcher")
    assert l3store.policy(launcher, clear=True, keep=False, own=own) == got  # nothing to clear
    kept = l3store.policy(launcher, clear=False, keep=True, own=own)
    assert kept == l3store.Policy("file", "kept", "/data/l3", "launcher")
    bare = _command(*HICACHE, "--hicache-storage-backend=file")
    assert l3store.policy(bare, clear=False, keep=False, own=own) == l3store.Policy(
        "file", "own_folder", own, "sweep"
    )
    assert l3store.policy(bare, clear=False, keep=True, own=own).folder == "/tmp/hicache"
    monkeypatch.setenv(l3store.FILE_DIR, "/srv/pages")
    assert l3store.policy(bare, clear=False, keep=False, own=own).folder_from == "environment"
    pool = _command("--enable-hicache", "--hicache-storage-backend", "mooncake")
    assert l3store.policy(pool, clear=True, keep=False, own=own).between_sizes == "cleared"
    assert l3store.policy(pool, clear=False, keep=True, own=own).between_sizes == "kept"


@pytest.mark.parametrize(
    ("flags", "clear", "keep", "says"),
    [
        (("--hicache-storage-backend", "mooncake"), False, False, "Give --clear-l3"),
        (("--hicache-storage-backend", "mooncake"), True, True, "contradict"),
        ((), True, False, "--clear-l3: this sweep's servers have no L3 tier"),
        ((), False, True, "--keep-l3: this sweep's servers have no L3 tier"),
    ],
)
def test_a_choice_that_cannot_be_made_is_refused(flags, clear: bool, keep: bool, says: str,
                                                 tmp_path) -> None:  # fmt: skip
    with pytest.raises(XputuneError, match=says):
        l3store.policy(_command(*HICACHE, *flags), clear=clear, keep=keep, own=str(tmp_path))


def test_each_size_gets_a_new_folder_and_only_it_is_removed(tmp_path) -> None:
    (tmp_path / "users.bin").write_text("theirs")
    policy = l3store.Policy("file", "own_folder", str(tmp_path), "launcher")
    a, env_a = l3store.prepare(policy, 1, "x2")
    b, _ = l3store.prepare(policy, 2, "x4")
    assert env_a == {l3store.FILE_DIR: a.folder} and a.folder != b.folder
    for store in (a, b):
        folder = Path(store.folder)
        assert folder.parent == tmp_path and not any(folder.iterdir())
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for i in range(3):
        (Path(a.folder) / f"page-{i}.bin").write_bytes(b"kv")
    os.symlink(tmp_path / "users.bin", Path(a.folder) / "link.bin")  # not followed, not counted
    l3store.finish(a)
    assert a.pages == 3 and a.removed and not Path(a.folder).exists()
    assert (tmp_path / "users.bin").read_text() == "theirs"
    assert a.document(policy)["folder"] == a.folder and a.document(policy)["pages_written"] == 3
    kept = l3store.Policy("mooncake", "kept", None, None)
    assert l3store.prepare(kept, 1, "x2") == (l3store.StepStore(), {})
    l3store.finish(b)


# ------------------------------------------------------------------------- whole sweeps


@pytest.fixture
def stand_in(tmp_path, monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SITE), str(ROOT)]))
    record = tmp_path / "starts.jsonl"
    monkeypatch.setenv("FAKE_SGLANG_ARGV", str(record))
    monkeypatch.delenv(l3store.FILE_DIR, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the sweep's log folder
    store = tmp_path / "l3"
    store.mkdir()
    (store / "users.txt").write_text("theirs\n")
    return {"model": write_model(str(tmp_path / "model")), "record": str(record),
            "store": str(store)}  # fmt: skip


def _starts(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _sweep(run_cli, stand_in, *more: str, sglang: tuple[str, ...] = (), block: str = "1"):
    code, out, err = run_cli(
        "sweep", "--trace", SLICE, "--sizes", "x1,x2", "--min-gain", "0", "--block-tokens", block,
        "-n", "150", "-c", "1", "--max-output", "1", "--stop-grace", "2", "-f", "json", *more,
        "--", "--model-path", stand_in["model"], "--device", "cpu", "--max-total-tokens", "512",
        *sglang,
    )  # fmt: skip
    return code, (json.loads(out) if out else None), err


def _file(stand_in) -> list[str]:
    return ["--launch-opt", f"--l3 file --l3-dir {stand_in['store']}"]


def _storage(doc: dict) -> list[float]:
    return [s["measured"]["hit_rate"]["storage"] for s in doc["steps"]]


def _within_reuse(step: dict, doc: dict) -> bool:
    """The size served no more than the slice can reuse at all (the run's own bound over)."""
    m = step["measured"]
    bound = m["requests"]["completed"] / m["tokens"]["input"] + 0.01
    return m["hit_rate"]["total"] <= doc["max_hit_rate"] + bound


def test_a_file_store_gets_a_new_folder_per_size(run_cli, stand_in) -> None:
    code, doc, err = _sweep(run_cli, stand_in, *_file(stand_in))
    assert code == exits.OK, err
    assert doc["l3"] == {"backend": "file", "between_sizes": "own_folder",
                         "folder": stand_in["store"], "folder_from": "launcher"}  # fmt: skip
    given = [s["env"][l3store.FILE_DIR] for s in _starts(stand_in["record"])]
    steps = doc["steps"]
    assert given == [s["l3"]["folder"] for s in steps] and len(set(given)) == 2
    for step in steps:
        folder = Path(step["l3"]["folder"])
        assert folder.parent == Path(stand_in["store"])
        assert step["l3"]["pages_written"] == 1 and step["l3"]["removed"]  # the stand-in's file
        assert _within_reuse(step, doc), step["measured"]["hit_rate"]
        assert step["predicted"]["storage"] == "unbounded"
        assert [r["tier"] for r in step["comparison"]][-2:] == ["storage", "total"]
    shares = _storage(doc)
    assert shares[0] > 0 and shares[0] == pytest.approx(shares[1], abs=0.005)  # both cold
    assert os.listdir(stand_in["store"]) == ["users.txt"]


def test_kept_the_second_size_counts_the_firsts_pages(run_cli, stand_in) -> None:
    """The control: with --keep-l3 the second size finds every page the first stored, its
    first-time prompts' too, and serves far more than the slice can reuse."""
    code, doc, err = _sweep(run_cli, stand_in, *_file(stand_in), "--keep-l3")
    assert code == exits.OK, err
    assert doc["l3"]["between_sizes"] == "kept" and doc["l3"]["folder"] == stand_in["store"]
    first, second = doc["steps"]
    assert _within_reuse(first, doc) and not _within_reuse(second, doc)
    assert _storage(doc)[1] > 0.5 > _storage(doc)[0]
    assert any("--keep-l3" in n for n in doc["notes"])
    assert sorted(os.listdir(stand_in["store"])) == ["fake-l3.keys", "users.txt"]


def test_the_table_shows_l3_per_size(run_cli, stand_in) -> None:
    code, out, err = run_cli(
        "sweep", "--trace", SLICE, "--sizes", "x2", "--block-tokens", "1", "-n", "40", "-c", "1",
        "--max-output", "1", "--stop-grace", "2", *_file(stand_in), "--", "--model-path",
        stand_in["model"], "--device", "cpu", "--max-total-tokens", "512",
    )  # fmt: skip
    assert code == exits.OK, err
    flat = " ".join(out.split())
    assert "storage" in flat and "each size started with a new empty folder of its own" in flat


def test_a_shared_pool_is_refused_unless_chosen(run_cli, stand_in, monkeypatch,
                                                tmp_path) -> None:  # fmt: skip
    pool = tmp_path / "pool.keys"
    monkeypatch.setenv("FAKE_SGLANG_POOL", str(pool))
    mooncake = ("--hicache-storage-backend", "mooncake")
    code, doc, err = _sweep(run_cli, stand_in, sglang=mooncake)
    assert code == exits.USAGE and doc is None and len(err.splitlines()) == 1
    assert "Give --clear-l3" in err and "--keep-l3" in err
    assert not Path(stand_in["record"]).exists()  # nothing was started
    # another instance's pages in the pool: kept, the first size counts them as its own
    code, warm, err = _sweep(run_cli, stand_in, "--keep-l3", sglang=mooncake)
    assert code == exits.OK, err
    assert pool.exists() and not _within_reuse(warm["steps"][1], warm)
    # emptied through each size's server before its replay: neither size finds them
    code, doc, err = _sweep(run_cli, stand_in, "--clear-l3", sglang=mooncake)
    assert code == exits.OK, err
    assert doc["l3"]["between_sizes"] == "cleared"
    assert all(s["l3"]["cleared"] and _within_reuse(s, doc) for s in doc["steps"])
    shares = _storage(doc)
    assert shares[0] == pytest.approx(shares[1], abs=0.005) and shares[0] < 0.5


def test_a_clear_that_fails_stops_the_sweep_in_one_line(run_cli, stand_in, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_SGLANG_CLEAR_FAIL", "1")
    code, _, err = _sweep(run_cli, stand_in, "--clear-l3",
                          sglang=("--hicache-storage-backend", "mooncake"))  # fmt: skip
    assert code == exits.USAGE and len(err.splitlines()) == 1
    assert "POST http://127.0.0.1:" in err and "/hicache/storage-backend/clear: HTTP 400" in err
    (start,) = _starts(stand_in["record"])  # the first size only, and it was stopped
    with pytest.raises(ProcessLookupError):
        os.kill(start["pid"], 0)


def test_the_tier_check_covers_l3(run_cli, stand_in, monkeypatch) -> None:
    """A store that takes every write and keeps none: L3 is named dead at every size (two
    tokens a block: the prediction gives L3 more than the run's own bound)."""
    monkeypatch.setenv("FAKE_SGLANG_L3_DROP", "1")
    code, doc, err = _sweep(run_cli, stand_in, *_file(stand_in), block="2")
    assert code == exits.DIFFERENCE, err
    for step in doc["steps"]:
        (dead,) = [f for f in step["tier_check"]["findings"] if f["tier"] == "storage"]
        assert dead["verdict"] == "dead" and step["measured"]["hit_rate"]["storage"] == 0
