"""A stand-in for `python -m sglang.launch_server`: its flags on the command line, the plugin's
variables in its environment, and one child retitled as SGLang titles a scheduler
("sglang::scheduler_TP0", through setproctitle: its cmdline becomes the title and its environ
NULs) holding an xputune HostBuffer as its host KV pool. It prints "PARENT CHILD" once the
buffer exists, then sleeps until it is killed. tests/placement/test_live.py runs it.

    python standin_server.py SIZE_BYTES NODE -- --model-path x --hicache-size GB ...
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time


def rank(size: int, node: int, ready: mp.Queue) -> None:
    import setproctitle

    from xputune.hicache.hostbuf import HostBuffer

    setproctitle.setproctitle("sglang::scheduler_TP0")
    buffer = HostBuffer(size, node=node)
    buffer.array()[::4096] = 1  # a numpy view over it, written: the pages are the pool's
    ready.put(os.getpid())
    time.sleep(600)


if __name__ == "__main__":
    size, node = int(sys.argv[1]), int(sys.argv[2])
    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    child = ctx.Process(target=rank, args=(size, node, ready), daemon=True)
    child.start()
    print(os.getpid(), ready.get(timeout=120), flush=True)
    child.join()
