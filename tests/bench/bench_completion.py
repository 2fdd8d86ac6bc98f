"""One TAB completion, as the shell runs it: median of fresh bash processes.

Target (docs/benchmarks.md): one completion within 50 ms, whatever the shell asks (a command,
an option, an option's value). Each round starts a fresh `bash --norc`, sources the script
`xputune --show-completion bash` prints, sets the words the way readline would and calls the
function the script registers, then prints the answer; the anchor is the same bash doing
nothing (`true`), so the figure that counts is completion minus anchor. The script is asked for
once, from the `xputune` beside this Python.

    python tests/bench/bench_completion.py [--runs 20]
"""

from __future__ import annotations

import argparse
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

XPUTUNE = Path(sys.executable).parent / "xputune"
#: (what was typed, the index of the word being completed)
ASKS = [
    ("xputune ch", 1),
    ("xputune check --pro", 2),
    ("xputune check --profile ", 3),
    ("xputune launch sglang --strategy ", 4),
]


def script() -> tuple[str, str]:
    """The completion script and the name of the function it registers."""
    text = subprocess.run(
        [str(XPUTUNE), "--show-completion", "bash"], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"complete .*-F (\S+) xputune", text)
    if not found:
        raise SystemExit("the bash script registers no function for xputune")
    return text, found[1]


def timed(line: str) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(["bash", "--norc", "-c", line], capture_output=True, text=True)
    return time.perf_counter() - start, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    text, function = script()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "xputune.bash"
        path.write_text(text)
        bin_dir = shlex.quote(str(XPUTUNE.parent))
        print(f"{'asked':36} {'median ms':>9} {'min':>6} {'max':>6}  answer (first words)")
        for typed, cword in ASKS:
            words = typed.split() + ([""] if typed.endswith(" ") else [])
            array = " ".join(shlex.quote(w) for w in words)
            line = (
                f"PATH={bin_dir}:$PATH; source {shlex.quote(str(path))}; COMP_WORDS=({array}); "
                f"COMP_CWORD={cword}; COMP_LINE={shlex.quote(typed)}; COMP_POINT={len(typed)}; "
                f"{function} xputune {shlex.quote(words[cword])} {shlex.quote(words[cword - 1])};"
                ' printf "%s\\n" "${COMPREPLY[@]}"'
            )
            spent, anchor, answer = [], [], ""
            for _ in range(runs):
                took, answer = timed(line)
                spent.append(took * 1000)
                anchor.append(timed("true")[0] * 1000)
            net = [s - a for s, a in zip(spent, anchor, strict=True)]
            first = " ".join(answer.split()[:4])
            print(
                f"{typed!r:36} {statistics.median(net):9.1f} {min(net):6.1f} {max(net):6.1f}"
                f"  {first}"
            )
        print(f"(bash itself: median {statistics.median(anchor):.1f} ms, subtracted)")


if __name__ == "__main__":
    main()
