"""A live probe reads config spaces word by word (HostView.read_sparse): the same discovery.

Every recording, and every broken tree whose config spaces are garbled, truncated or missing,
discovers to the very same Topology read the live host's way as read whole; so does the live
host itself, as root and (where this runs as root) as nobody, who sees 64-byte headers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.trees import broken_tree, host_tree, load_cases, recording_names
from xputune.host.view import DirView
from xputune.topology.discover import discover

#: The broken trees whose config spaces are what is odd (and one that loses them).
CONFIG_CASES = [
    name
    for name, case in load_cases().items()
    if any("/config" in str(mutation) for mutation in case.get("mutations") or [])
]


def _both(root: str) -> tuple[str, str]:
    whole = DirView(root)
    sparse = DirView(root)
    sparse.sparse_reads = True
    return repr(discover(whole)), repr(discover(sparse))


@pytest.mark.parametrize("name", recording_names())
def test_recordings_discover_alike_read_sparsely(name: str) -> None:
    whole, sparse = _both(str(host_tree(name)))
    assert sparse == whole


def test_the_odd_config_spaces_are_found() -> None:
    assert len(CONFIG_CASES) >= 4, CONFIG_CASES


@pytest.mark.parametrize("case", CONFIG_CASES)
def test_odd_config_spaces_discover_alike_read_sparsely(case: str, tmp_path: Path) -> None:
    whole, sparse = _both(str(broken_tree(case, tmp_path / "tree")))
    assert sparse == whole


LIVE = """
import sys
from xputune.host.view import DirView
from xputune.topology.discover import discover
out = []
for sparse in (False, True):
    view = DirView("/")
    view.sparse_reads = sparse
    topo = discover(view)
    out.append(repr((topo.pci, topo.cards, topo.nics, topo.uplinks, topo.relations)))
sys.exit(0 if out[0] == out[1] else 1)
"""


@pytest.mark.skipif(not os.path.isdir("/sys/bus/pci/devices"), reason="no sysfs here")
@pytest.mark.parametrize("user", ["self", "nobody"])
def test_the_live_host_discovers_alike_read_sparsely(user: str) -> None:
    argv = [sys.executable, "-c", LIVE]
    if user == "nobody":
        if os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"):
            pytest.skip("needs root and setpriv to read as nobody")
        argv = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
