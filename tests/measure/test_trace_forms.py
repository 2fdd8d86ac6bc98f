"""replay and sweep read every trace form `tiers` reads, through the one opener
(userfiles.open_trace): plain, gzip and zstd, told apart by their bytes, never their names; a
truncated or corrupt compressed trace is one line for all three commands."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.measure.fakesglang import FakeSGLang, write_model

ROOT = Path(__file__).resolve().parents[2]
SLICE = ROOT / "tests" / "data" / "traces" / "mooncake-conversation-1171-1570.jsonl"


def _forms(tmp_path: Path) -> dict[str, Path]:
    text = b"".join(SLICE.read_bytes().splitlines(keepends=True)[:40])
    plain = tmp_path / "t.jsonl"
    plain.write_bytes(text)
    forms = {"plain": plain}
    packed = tmp_path / "t.data"  # no telling suffix: the bytes decide
    packed.write_bytes(gzip.compress(text))
    forms["gzip"] = packed
    try:
        import zstandard
    except ImportError:
        return forms
    zst = tmp_path / "t.bin"
    zst.write_bytes(zstandard.ZstdCompressor().compress(text))
    forms["zstd"] = zst
    return forms


@pytest.fixture
def fake(tmp_path) -> Iterator[FakeSGLang]:
    with FakeSGLang(model_path=write_model(str(tmp_path / "m")), device_tokens=1024) as server:
        yield server


def test_replay_reads_every_form_tiers_reads(run_cli, fake, tmp_path: Path) -> None:
    forms = _forms(tmp_path)
    docs = {}
    for name, path in forms.items():
        args = ["--trace", str(path), "-f", "json"]
        code, out, err = run_cli("tiers", *args)
        assert code == 0, err
        tiers = json.loads(out)["trace"]
        code, out, err = run_cli("replay", "--url", fake.url, "--block-tokens", "1", "-c", "4",
                                 "--max-output", "1", *args)  # fmt: skip
        assert code == 0, (name, err)
        trace = json.loads(out)["trace"]
        docs[name] = (tiers["requests"], trace["requests"], trace["input_tokens"])
    assert len(set(docs.values())) == 1, docs  # the same requests, whatever the form
    assert docs["plain"][0] == 40


def test_sweep_reads_them_through_the_same_opener(tmp_path: Path) -> None:
    from xputune.cli.measure_cmds import TraceFormat, _read_trace

    slices = {
        name: _read_trace(str(path), TraceFormat.auto, None, 5, 20)
        for name, path in _forms(tmp_path).items()
    }
    assert len({tuple(s.requests) for s in slices.values()}) == 1
    assert all(len(s.requests) == 20 and s.skipped == 5 for s in slices.values())


@pytest.mark.parametrize("form", ["gzip", "zstd"])
def test_a_broken_compressed_trace_is_one_line(run_cli, fake, tmp_path: Path, form) -> None:
    forms = _forms(tmp_path)
    if form not in forms:
        pytest.skip("zstandard (the zstd extra) is not installed")
    cut = tmp_path / "cut"
    data = forms[form].read_bytes()
    cut.write_bytes(data[: len(data) // 2] + (b"\0" * 64 if form == "zstd" else b""))
    for argv in (["tiers"], ["replay", "--url", fake.url, "-c", "1"]):
        code, _, err = run_cli(*argv, "--trace", str(cut))
        assert code == 2 and len(err.splitlines()) == 1, (argv, err)
        assert "cannot read the trace" in err and "Traceback" not in err


def test_there_is_one_trace_opener() -> None:
    """Decompression of traces lives in userfiles.open_trace only: no command opens one its
    own way (a second opener is how replay once lacked zstd). Recordings of hosts are
    tarballs, opened by host/tarread.py: not traces."""
    opener = re.compile(r"GzipFile\(|ZstdDecompressor\(|x1f\\x8b|x28\\xb5")
    found = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "xputune").rglob("*.py"))
        if opener.search(path.read_text()) and path.parent.name != "host"
    ]
    assert found == ["xputune/userfiles.py"], found
