"""Test scaffold only: SGLang's own benchmark client (`python -m sglang.benchmark.serving`), run
in a lane release's environment beside the GPU-only stand-ins (tests/server/standin_site on
PYTHONPATH, as for the servers: importing the client pulls in sglang.srt, hence triton).

sglang.benchmark.datasets imports Hugging Face `datasets` at module level for its MMMU
dataset; the lane's environments do not install it (pyarrow and more), and the Mooncake mode
never calls it. Where it is missing, a stand-in takes its name whose load_dataset raises, so a
run that did reach it would fail loudly. Everything else is the release's own code, run as
`-m sglang.benchmark.serving` runs it (tests/server/anchor.py builds the command line).
"""

import importlib.util
import runpy
import sys
import types

if importlib.util.find_spec("datasets") is None:
    _stand_in = types.ModuleType("datasets")

    def load_dataset(*args, **kwargs):
        raise RuntimeError("Hugging Face datasets is not installed in the lane (a stand-in)")

    _stand_in.load_dataset = load_dataset
    sys.modules["datasets"] = _stand_in

sys.argv[0] = "sglang.benchmark.serving"
runpy.run_module("sglang.benchmark.serving", run_name="__main__", alter_sys=True)
