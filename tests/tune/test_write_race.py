"""Writes under --root while another user keeps swapping directories of the tree for symlinks
that lead out of it (the tree's directories are theirs).

Before writes went by descriptor, a value was resolved inside the tree (refusing links out of
it) and then opened again by path: a directory swapped for a symlink in between sent the write
outside (4 of 30 apply/rollback runs when it was found), and some runs died with a traceback. Now
the resolved path is walked from the root O_NOFOLLOW: a swap is one clear error, never a write
outside, and apply rolls back or refuses in one line.
"""

from __future__ import annotations

import collections
import os
import shutil
from pathlib import Path

import pytest

from tests import otheruser
from tests.tune import minihost
from xputune.errors import XputuneError
from xputune.host.view import DirView

#: Directories of the tree the other user swaps, each with the value xputune writes in it.
SWAPPED = {
    "proc/sys/kernel": "/proc/sys/kernel/numa_balancing",
    "sys/kernel/mm/transparent_hugepage": "/sys/kernel/mm/transparent_hugepage/enabled",
    "sys/devices/pci0000:00": "/sys/devices/pci0000:00/0000:00:01.1/config",
    "proc/self": "/proc/self/mountinfo",
}

#: The other user's loop: swap each directory for a symlink to its copy outside the tree and
#: back, again and again; put everything back when told to stop. Prints how many swaps.
SWAP_DIRS = """
import os, sys, time
stop, pairs = sys.argv[1], sys.argv[2:]
dirs = list(zip(pairs[0::2], pairs[1::2]))
swaps = 0
def restore(d):
    if os.path.islink(d):
        os.unlink(d)
    if os.path.isdir(d + ".hide") and not os.path.lexists(d):
        os.rename(d + ".hide", d)
while not os.path.exists(stop):
    for d, out in dirs:
        try:
            os.rename(d, d + ".hide")
            os.symlink(out, d)
            swaps += 1
            time.sleep(0.0003)
        except OSError:
            pass
        finally:
            restore(d)
    time.sleep(0.001)
for d, _ in dirs:
    restore(d)
print(swaps)
"""


def _snapshot(folder: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder)] = fh.read()
    return out


@pytest.fixture
def raced():
    """(tree, outside copies, the attacker's argv, base folder): the tree's swapped
    directories' parents belong to the other user; the copies outside are what a write
    through a swapped-in link would change."""
    otheruser.require()
    with otheruser.reachable_dir() as base:
        tree = Path(minihost.build(str(base / "tree")))
        outside = base / "outside"
        outside.mkdir()
        args = []
        for i, rel in enumerate(SWAPPED):
            shutil.copytree(tree / rel, outside / str(i), symlinks=True)
            otheruser.give(tree / rel)
            otheruser.give((tree / rel).parent)
            args += [str(tree / rel), str(outside / str(i))]
        yield tree, outside, args, base


def test_write_bytes_never_lands_outside(raced) -> None:
    tree, outside, args, base = raced
    before = _snapshot(outside)
    outcomes: collections.Counter[str] = collections.Counter()
    with otheruser.attacker(SWAP_DIRS, *args, stop_file=base / "stop") as other:
        for _ in range(100):
            for path in SWAPPED.values():
                view = DirView(str(tree))  # a fresh view: resolve anew each time
                try:
                    data = view.read_bytes(path)
                    view.write_bytes(path, data)
                except FileNotFoundError:  # the directory was away for a moment
                    outcomes["missing"] += 1
                except XputuneError as exc:
                    outcomes[type(exc).__name__] += 1
                else:
                    outcomes["written"] += 1
    print(f"\n400 rewrites during {other.out.strip()} swaps: {dict(outcomes)}")
    assert int(other.out) > 0
    assert _snapshot(outside) == before  # not one byte outside the tree


def test_apply_and_rollback_under_the_swap_race(raced, run_cli) -> None:
    tree, outside, args, base = raced
    before = _snapshot(outside)
    original = minihost.snapshot(str(tree), exclude="var")
    lines: collections.Counter[str] = collections.Counter()
    codes: collections.Counter[str] = collections.Counter()
    with otheruser.attacker(SWAP_DIRS, *args, stop_file=base / "stop") as other:
        for _ in range(30):
            for verb in ("apply", "rollback"):
                select = ["--profile", "hygon-p800"] if verb == "apply" else []
                code, _, err = run_cli(verb, "--root", str(tree), *select)
                codes[f"{verb} {code}"] += 1
                errors = [x for x in err.splitlines() if x.startswith("xputune: error:")]
                assert len(errors) == (code != 0), err  # one line when it fails, no traceback
                assert "Traceback" not in err
                for x in errors:
                    lines[x.split(":")[2].strip()[:60]] += 1
    print(f"\n30 x apply + rollback during {other.out.strip()} swaps: {dict(codes)}")
    for line, n in lines.most_common(6):
        print(f"  {n} x {line}")
    assert int(other.out) > 0
    assert _snapshot(outside) == before  # nothing written outside the tree
    # Once the other user stops, a rollback puts the tree back as it was.
    code, _, err = run_cli("rollback", "--root", str(tree))
    assert code == 0, err
    assert minihost.snapshot(str(tree), exclude="var") == original
