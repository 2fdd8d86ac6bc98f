"""Every command's arguments, fuzzed: no call may end in a traceback.

Each command of the full application gets RUNS calls drawn from its declared parameters
(arg_fuzz.py: good values, noise of the parameter's kind, hostile paths, repeated and unknown
options), run in-process through xputune.cli.entry.main inside the cage (cage.py: no process
starts, nothing is written outside the test's folder, the live host view is read-only, every
run has an alarm, watch stops after one wait). A run passes when nothing left main(), no
traceback was printed, and an exit status other than 0, 1 or 3 came with exactly one
`xputune: error:` line (or help).

Seeded and deterministic: XPUTUNE_FUZZ_SEED and XPUTUNE_FUZZ_RUNS (calls per command) widen
it by hand.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli import arg_fuzz
from tests.cli.cage import Cage
from tests.conftest import SEED_BOX

SEED = int(os.environ.get("XPUTUNE_FUZZ_SEED", "20"))
RUNS = int(os.environ.get("XPUTUNE_FUZZ_RUNS", "42"))
COMMANDS = arg_fuzz.commands()
#: Calls the fuzz draws that end in a traceback in code outside the CLI that another change
#: is reworking; PLACE is the folder of the command's files. Each is a strict xfail below (and
#: left out of the fuzz), so the fix turns it into a failure until it is taken off this list.


def _ids() -> list[str]:
    return [" ".join(words) for words, _ in COMMANDS]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("words", "params"), COMMANDS, ids=_ids())
def test_no_call_ends_in_a_traceback(words, params, tmp_path: Path) -> None:
    place = arg_fuzz.build_place(tmp_path / "place", str(SEED_BOX), words)
    problems: list[str] = []
    with Cage(tmp_path) as cage:
        for argv in arg_fuzz.calls(SEED, words, params, place, RUNS):
            why = arg_fuzz.run(cage, argv).problem()
            if why is not None:
                problems.append(f"{arg_fuzz.shown(argv)}\n  {why}")
    assert not problems, f"{len(problems)} of {RUNS} calls failed:\n\n" + "\n\n".join(problems)
    assert not cage.trips  # nothing was refused quietly either


def _words(argv: tuple[str, ...]) -> tuple[str, ...]:
    return max((w for w, _ in COMMANDS if argv[: len(w)] == w), key=len)


# -- what the fuzz found, pinned (each was a traceback) ------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["tiers", "--measured", "PLACE/measured.csv", "--capacity", "nan"],
        ["tiers", "--measured", "PLACE/measured.csv", "--capacity", "inf"],
        ["tiers", "--measured", "PLACE/measured.csv", "--l1", "9" * 5000],
        ["model", "--point", "inf:1", "--point", "1:2"],
        ["model", "--point", "1:nan", "--point", "2:3"],  # printed "T(n) = nan ms" before
        ["plan", "--example", "h3c-hygon-p800", "-m", "glm-5", "--tp", "8", "--tier", "9" * 5000],
        ["plan", "--example", "h3c-hygon-p800", "-m", "glm-5", "--tp", "8", "--tier", "²"],
        ["bench", "host", "--size", "9" * 5000],  # refused before any memory is touched
    ],
    ids=lambda argv: " ".join(a[:12] for a in argv[:5]),
)
def test_numbers_written_as_text_are_one_line(argv: list[str], tmp_path: Path) -> None:
    place = arg_fuzz.build_place(tmp_path / "place", str(SEED_BOX), _words(tuple(argv)))
    with Cage(tmp_path) as cage:
        outcome = arg_fuzz.run(cage, [a.replace("PLACE", str(place.root)) for a in argv])
    assert outcome.problem() is None and outcome.code == 2, outcome.err
    (line,) = outcome.err.splitlines()
    assert line.startswith("xputune: error: ") and len(line) < 200


def test_a_stack_pass_that_could_not_be_built_closes_quietly(monkeypatch) -> None:
    """tiers on a host without a C compiler: one line, then no traceback from __del__."""
    from xputune.errors import XputuneError
    from xputune.plan import stackdist

    def no_compiler():
        raise XputuneError("building stackdist failed: no cc")

    monkeypatch.setattr(stackdist, "_kernel", no_compiler)
    for kind in (stackdist.StackStream, stackdist.IdCounter):
        with pytest.raises(XputuneError):
            kind()
        kind.__new__(kind).close()  # what __del__ does with a half-built object
