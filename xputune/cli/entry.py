"""Console-script entry point: run the typer app, turn user errors into one line."""

from __future__ import annotations

import sys

from xputune.errors import XputuneError


def main(argv: list[str] | None = None) -> int:
    from xputune.cli.app import app

    try:
        rv = app(
            args=argv if argv is not None else sys.argv[1:],
            prog_name="xputune",
            standalone_mode=False,
        )
    except XputuneError as exc:
        sys.stderr.write(f"xputune: error: {exc}\n")
        return exc.exit_code
    except SystemExit as exc:  # typer.Exit and friends
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:
        sys.stderr.write("xputune: interrupted\n")
        return 130
    except BrokenPipeError:
        return 141
    except Exception as exc:  # click usage errors carry their own exit code
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            return exc.exit_code
        if isinstance(exc, click.exceptions.Abort):
            sys.stderr.write("xputune: aborted\n")
            return 1
        raise
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
