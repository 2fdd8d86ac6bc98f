"""A sweep's server that dies before it is ready is reported by its cause, first and whole.

SGLang logs lines after the cause (a child's sigquit, warnings, `Killed`); the report once
joined the log's last three lines and cut them at 400 characters, so long lines after the
traceback pushed its cause (`No module named 'sglang'`) out of the one line the user sees.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from xputune.measure.client import Endpoint
from xputune.measure.serverproc import LaunchFailed, Server, _tail

CAUSE = "ModuleNotFoundError: No module named 'sglang'"
AFTER = [
    "[2026-12-05 13:00:01] Received sigquit from a child process. It usually means the child "
    "failed. " + "y" * 250,
    "Killed",
    "[2026-12-05 13:00:01] /usr/lib/python3/dist-packages/torch/cuda/__init__.py:61: "
    "FutureWarning: " + "z" * 250,
]
TRACEBACK = [
    "[2026-12-05 13:00:00] server_args=ServerArgs(model_path='/m', " + "x" * 300 + ")",
    "[2026-12-05 13:00:00] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    "    import sglang.srt.entrypoints.http_server",
    "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    CAUSE,
]


def _log(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_cause_comes_first_and_whole_before_what_was_logged_after_it(tmp_path) -> None:
    said = _tail(_log(tmp_path, [*TRACEBACK, *AFTER]))
    assert said.startswith(f": {CAUSE} (then: [2026-12-05 13:00:01] Received sigquit")
    assert said.endswith("...)") and len(said) < len(CAUSE) + 320


def test_the_last_of_chained_tracebacks_is_the_cause(tmp_path) -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in <module>',
        "KeyError: 'x'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "b.py", line 2, in <module>',
        "RuntimeError: not enough memory for the KV cache: " + "w" * 600,
    ]
    said = _tail(_log(tmp_path, lines))
    assert said == f": {lines[-1]}"  # whole, however long


def test_pythons_own_refusal_without_a_traceback_is_the_cause(tmp_path) -> None:
    line = (
        "/usr/bin/python3: Error while finding module specification for 'sglang.launch_server' "
        "(ModuleNotFoundError: No module named 'sglang')"
    )
    assert _tail(_log(tmp_path, ["x" * 500, line])) == f": {line}"


def test_a_log_without_a_cause_shows_its_last_lines_and_an_empty_one_nothing(tmp_path) -> None:
    said = _tail(_log(tmp_path, ["starting", "loading weights", "gives up at once"]))
    assert said == ": starting | loading weights | gives up at once"
    assert _tail(_log(tmp_path, [""])) == ""


def test_a_long_log_is_read_from_its_end_and_the_cause_found_there(tmp_path) -> None:
    noise = [f"warning {i}: " + "n" * 200 for i in range(2000)]  # ~420 KB before the cause
    said = _tail(_log(tmp_path, [*noise, *TRACEBACK, *AFTER]))
    assert said.startswith(f": {CAUSE} (then: ")


def test_a_server_that_dies_is_one_line_naming_its_cause_first(tmp_path) -> None:
    script = "import sys\nprint(sys.argv[1], file=sys.stderr)\nsys.exit(1)"
    text = "\n".join([*TRACEBACK, *AFTER])
    server = Server(
        [sys.executable, "-c", script, text], Endpoint("http", "127.0.0.1", 9), tmp_path / "log"
    )
    with pytest.raises(LaunchFailed) as err:
        server.start(30)
    message = str(err.value)
    assert message.startswith(f"the server exited with status 1 before it was ready: {CAUSE}")
    assert message.endswith(f" (log {tmp_path / 'log'})") and "\n" not in message
