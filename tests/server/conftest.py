"""The real-server lane: `sglang.launch_server` on CPU, started by `xputune launch sglang`.

Every test here is marked `server` and skipped (with the reason) when the heavy lane's
packages are missing (`python tests/sglang/install_sglang.py` installs them, web stack
included). Models are built at test time with random weights (tests/server/models.py); the
servers are small (1024-token device pool, 2048-token host pool, 2 layers) and each is stopped
by its pid, also when a test fails.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
NEEDS = ("sglang", "torch", "fastapi", "uvicorn", "uvloop", "transformers", "tokenizers")


def _lane_unavailable() -> str | None:
    for name in NEEDS:
        try:
            found = version(name)
        except PackageNotFoundError:
            return f"{name} is not installed (python tests/sglang/install_sglang.py)"
        if name == "sglang" and found != "0.5.20":
            return f"sglang {found} is installed; this lane needs 0.5.20"
    return None


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
