"""Test scaffold only: every Python process the server lane starts runs this at startup.

The lane puts this folder first on PYTHONPATH for `xputune launch sglang`, so SGLang's engine,
scheduler and detokenizer processes (spawned, so they import afresh) register the GPU-only
stand-ins of tests/sglang/gpu_standins.py (triton, torchvision, sgl_kernel: their registry
wheels cannot load beside torch's CPU build) before they import sglang, and, for the
"moved" scenario only (XPUTUNE_TEST_FAKE_RELEASE), tests/server/fake_release.py. Nothing may
call into a stand-in; tests/server/test_server_lane.py checks the server never did.
"""

import os
import sys

_repo = os.environ.get("XPUTUNE_TEST_REPO")
if _repo:
    if _repo not in sys.path:
        sys.path.insert(0, _repo)
    from tests.server import fake_release
    from tests.sglang import gpu_standins

    gpu_standins.install()
    fake_release.install()
