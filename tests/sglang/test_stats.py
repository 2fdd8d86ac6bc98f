"""The plugin's counters and the stats file a server process writes (no sglang needed)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from xputune.sglang import stats


@pytest.fixture(autouse=True)
def fresh() -> None:
    stats.reset()
    yield
    stats.reset()


def test_snapshot_adds_counters_and_sources_and_survives_a_broken_source() -> None:
    stats.add("backup_tokens", 300)
    stats.add("backup_tokens", 4)
    stats.add_source(lambda: {"count_once_suppressed": 7})
    stats.add_source(lambda: 1 / 0)  # type: ignore[arg-type, return-value]
    assert stats.snapshot() == {"backup_tokens": 304, "count_once_suppressed": 7}


def test_file_is_written_atomically_and_kept_current(tmp_path: Path) -> None:
    stats.set_info(sglang="0.5.20", features=["lifo"])
    path = Path(stats.write(str(tmp_path)))
    data = json.loads(path.read_text())
    assert data["info"]["features"] == ["lifo"] and data["counters"] == {}
    assert not list(tmp_path.glob("*.tmp"))
    stats.start_writer(str(tmp_path), interval=0.05)
    stats.add("lifo_allocs")
    deadline = time.monotonic() + 5
    while json.loads(path.read_text())["counters"].get("lifo_allocs") != 1:
        assert time.monotonic() < deadline, path.read_text()
        time.sleep(0.05)
