"""How a launch (of SGLang, of L3 donors) says it will not run: one reason a line, each with its
own fix (a sentence of them once ran one reason's fix after another's), and the status the exit
table gives the situation, the same for the real run and its --dry-run."""

from __future__ import annotations

import sys
from typing import NoReturn


def refuse(reasons: list[str], status: int, what: str = "the launch") -> NoReturn:
    """Stop a real run before it starts anything: one reason says itself in the error line;
    several are said one a line and the error line counts them."""
    from xputune.launch.sglang import LaunchError
    from xputune.userfiles import printable

    if len(reasons) == 1:
        error = LaunchError(reasons[0])
    else:
        for reason in reasons:
            sys.stderr.write(printable(f"refused: {reason}") + "\n")
        error = LaunchError(f"{len(reasons)} reasons refuse {what}, each above with its fix")
    error.exit_code = status
    raise error


def would_refuse(reasons: list[str]) -> None:
    """What a dry run says instead: each reason on its line."""
    from xputune.userfiles import printable

    for reason in reasons:
        sys.stderr.write(printable(f"would refuse: {reason}") + "\n")
