"""Console-script entry point: run the typer app; every error a user can make is one line.

Start-up is kept short: plain calls of probe, check, plan and launch sglang --dry-run take a
typer-free fast path (cli/fastpath.py), any other command gets an app holding only
its own module (cli/app.py build), and plain option values skip pydantic (cli/coerce.py).

xputune's own errors (XputuneError) and click's usage errors (a bad option value, a missing
argument, an unknown option or command) read the same: `xputune: error: ...` on stderr, exit
code 2 for usage errors. --help, and a command group called without a command, stay rich.
"""

from __future__ import annotations

import re
import sys

from xputune.errors import XputuneError

# typer validates values with pydantic; its wording is rewritten in plain words.
_PLAIN = (
    (re.compile(r"Value error, "), ""),
    (re.compile(r"Input should be greater than or equal to (\S+)"), r"must be at least \1"),
    (re.compile(r"Input should be greater than (\S+)"), r"must be more than \1"),
    (re.compile(r"Input should be less than or equal to (\S+)"), r"must be at most \1"),
    (re.compile(r"Input should be less than (\S+)"), r"must be less than \1"),
    (re.compile(r"Input should be a valid integer.*"), "must be a whole number"),
    (re.compile(r"Input should be a valid number.*"), "must be a number"),
    (re.compile(r"Unable to parse input string as an integer, exceeded maximum size"), "too long"),
    (re.compile(r"Input should be "), "must be "),
    (re.compile(r" \[type=.*"), ""),
)
# A number option with both bounds (every one has them) says its whole range: one message for
# too small, too large, nan, inf and 5000 digits alike.
_OUT_OF_RANGE = re.compile(r"must be (at least|at most|more than|less than) \S+|too long")


def _number(value: float) -> str:
    """1024, 0.01, 10000000: as a person writes the bound."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def usage_line(exc) -> str:
    """A click exception as xputune's one line, with where to read more."""
    message = " ".join(exc.format_message().split()).rstrip(".")
    for pattern, plain in _PLAIN:
        message = pattern.sub(plain, message)
    param = getattr(exc, "param", None)
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is not None and high is not None:
        message = _OUT_OF_RANGE.sub(f"must be from {_number(low)} to {_number(high)}", message)
    if message[:1].isupper() and not message[1:2].isupper():
        message = message[0].lower() + message[1:]
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        message += f" (see '{ctx.command_path} --help')"
    return f"xputune: error: {message}\n"


def _run_app(args: list[str]) -> int:
    import typer

    from xputune.cli.app import build
    from xputune.cli.coerce import install

    install()
    app = build(args[0] if args else None)
    try:
        code = app(args=args, prog_name="xputune", standalone_mode=False)
    except typer.TyperException as exc:  # click's ClickException (typer vendors click)
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # a group called without a command prints its help, as it always did
        else:
            sys.stderr.write(usage_line(exc))
        return exc.exit_code
    except typer.Abort:
        sys.stderr.write("xputune: error: aborted\n")
        return 1
    # Non-standalone click returns Exit's code, or the command's return value (None).
    return code if isinstance(code, int) else 0


def main(argv: list[str] | None = None) -> int:
    """Run xputune; user and usage errors print one line and return a non-zero code."""
    args = argv if argv is not None else sys.argv[1:]
    try:
        from xputune.cli.fastpath import run

        code = run(args)
        return _run_app(args) if code is None else code
    except XputuneError as exc:
        sys.stderr.write(f"xputune: error: {exc}\n")
        return exc.exit_code
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    except BrokenPipeError:
        return 141


if __name__ == "__main__":
    sys.exit(main())
