"""A sweep step built from records, for the analysis tests (test_sweep.py, test_noise.py): a
server of a 100-token device pool on 0.5.20, its L2 given, no storage."""

from __future__ import annotations

from xputune.measure.replay import ReplayRun
from xputune.measure.server import ServerInfo
from xputune.measure.stats import Record
from xputune.measure.sweep import Size, Step


def step(label: str, size: Size | None, records: list[Record], host_tokens: int) -> Step:
    info = ServerInfo(
        url="u", version="0.5.20", model_path=None, tp_size=1, page_size=1, device_tokens=100,
        max_req_input_len=None, radix_cache=True, hicache=size is not None, hicache_ratio=None,
        hicache_size_gb=0.0, write_policy=None, storage_backend=None, chunked_prefill=None,
        host_tokens=host_tokens, host_source="ratio", vocab_size=None,
    )  # fmt: skip
    run = ReplayRun(records, elapsed=1.0, stop="done", unsent=0, abandoned=0)
    return Step(label, size, "log", info=info, run=run, start_s=1.0, replay_s=1.0, stop_s=1.0)
