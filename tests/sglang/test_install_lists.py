"""tests/sglang/install_sglang.py's lists: one exact pin per package, no GPU-only package, and
each release's own exact pins where it states them (read from the installed release's METADATA;
no network)."""

from __future__ import annotations

import re
from importlib.metadata import distributions

import pytest

from tests.sglang import install_sglang as inst
from tests.sglang.releases import RELEASES


@pytest.mark.parametrize("release", RELEASES)
def test_each_lane_pins_every_package_once_and_no_gpu_only_one(release: str) -> None:
    lane = inst.LANES[release]
    names = [inst._norm(name) for name, _ in inst._requirements(lane)]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert not set(names) & {inst._norm(n) for n in inst.GPU_ONLY_DISTS}
    assert "torch" not in names and "triton" not in names
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+]*", v) for _, v in inst._requirements(lane))


@pytest.mark.parametrize("release", RELEASES)
def test_each_lane_keeps_its_releases_own_exact_pins(release: str) -> None:
    lane = inst.LANES[release]
    found = [
        d for d in distributions(path=inst._site_packages(lane)) if d.metadata["Name"] == "sglang"
    ]
    if not found or found[0].version != release:
        pytest.skip(f"sglang {release} is not installed (tests/sglang/install_sglang.py)")
    ours = {inst._norm(name): want for name, want in inst._requirements(lane)}
    ours["torch"] = lane.torch.split("+")[0]
    stated = {}
    for req in found[0].requires or []:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==([^;\s]+)\s*(?:;.*)?", req.strip())
        if m and "extra ==" not in req:
            stated[inst._norm(m[1])] = m[2]
    assert "torch" in stated and "transformers" in stated, stated  # the parse found the pins
    mismatched = {n: (v, ours[n]) for n, v in stated.items() if n in ours and ours[n] != v}
    assert not mismatched, mismatched
