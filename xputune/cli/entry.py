"""Console-script entry point: run the typer app, turn user errors into one line."""

from __future__ import annotations

import sys

from xputune.errors import XputuneError


def main(argv: list[str] | None = None) -> int:
    """Run xputune; user errors print one line, usage errors print click's usage text."""
    args = argv if argv is not None else sys.argv[1:]
    try:
        from xputune.cli.probe_run import fast_probe

        if fast_probe(args):
            return 0
        from xputune.cli.app import app

        app(args=args, prog_name="xputune")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
