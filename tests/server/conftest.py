"""The real-server lanes: `sglang.launch_server` on CPU, started by `xputune launch sglang`.

Every test here is marked `server` and skipped (with the reason) when the lane's packages are
missing (`python tests/sglang/install_sglang.py` installs them, web stack included). A test
that takes a `release` argument runs once per supported release the lanes prove
(tests/sglang/releases.py: the oldest, 0.5.20, and the newest, 0.5.23), each in that
release's own environment, and is skipped with the reason where that environment is
missing. Models are built at test time with random weights (tests/server/models.py); the
servers are small (1024-token device pool, 2048-token host pool, 2 layers) and each is
stopped by its pid, also when a test fails.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from tests.sglang import releases

HERE = Path(__file__).resolve().parent
NEEDS = ("sglang", "torch", "fastapi", "uvicorn", "uvloop", "transformers", "tokenizers")


def _lane_unavailable() -> str | None:
    for name in NEEDS:
        try:
            found = version(name)
        except PackageNotFoundError:
            return f"{name} is not installed (python tests/sglang/install_sglang.py)"
        if name == "sglang" and found != releases.OLDEST:
            return f"sglang {found} is installed; this lane needs {releases.OLDEST}"
    return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "release" in metafunc.fixturenames:
        params = []
        for release in releases.RELEASES:
            reason = releases.unavailable(release)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            params.append(pytest.param(release, id=release, marks=marks))
        metafunc.parametrize("release", params)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _lane_unavailable()
    for item in items:
        if HERE not in Path(str(item.fspath)).resolve().parents:
            continue
        item.add_marker(pytest.mark.server)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # transformers decides once per process whether torchvision is there; the heavy lane
    # (tests/sglang), which runs after this one in the same process, imports sglang with the
    # GPU-only stand-ins in place, so they must be in place before transformers is first seen.
    from tests.server.models import build
    from tests.sglang import gpu_standins

    gpu_standins.install()

    root = tmp_path_factory.mktemp("models")
    return {kind: build(kind, root / kind) for kind in ("mla", "mha")}
