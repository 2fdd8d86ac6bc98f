"""Output helpers shared by every command: tables, notes, shell lines, JSON and YAML.

Tables follow the real width: the terminal's, else $COLUMNS, else 80 when stdout is not a
terminal (as rich and coreutils do), so piped output is the same bytes on any machine. A table
that cannot fit is split into column blocks that repeat its key columns (as numactl and lstopo
do) instead of cutting cells: identifiers (card names, bus ids, CPU lists, NICs) are never
wrapped or truncated, descriptive text wraps.

Text from data (card, model, NIC, host and profile names, values a vendor tool or a recording
printed, paths) is printed as text: every table cell, header, title and line built from it
goes through text(), which escapes what is not printable (an ESC shows as \x1b, a bidi
override as \u202e) and hands rich a Text, which rich never reads as markup; the console
makes no emoji of `:ab:` either (a bus id 0000:ab:00.0 stays a bus id). rich markup is kept
for the literal strings of our own code, and a str cell is taken as such: data never is one.

JSON and YAML output hold only finite numbers: every number the schemas ship is a plain
number, so a NaN or an infinity in a document (a bug, or input no check caught) is refused
with one line naming its place instead of being written as invalid JSON.

rich is imported only inside the functions: it costs start-up time (docs/benchmarks.md: probe
start-up).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum

from xputune import trail
from xputune.errors import XputuneError
from xputune.userfiles import printable

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    from typing import Any

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

PIPE_WIDTH = 80  # width when stdout is not a terminal and COLUMNS is unset (rich, coreutils)
LONG_WORD = 10  # in descriptive text a longer word may fold rather than widen its column

#: add_column keywords for an identifier column (card, bus id, CPU list, NIC, uuid): never
#: wrapped, never cut; fit() moves it to another column block rather than narrowing it.
ID: dict[str, Any] = {"no_wrap": True, "overflow": "fold"}
#: add_column keywords for descriptive text: wraps at spaces, folds a long word, never "…".
TEXT: dict[str, Any] = {"overflow": "fold"}


#: -1 with --quiet, 1 with --verbose, else 0 (set once per run by cli/entry.py).
_verbosity = 0


def set_verbosity(*, quiet: bool = False, verbose: bool = False) -> None:
    """--quiet: only results and errors; --verbose: details too. Not both."""
    global _verbosity
    if quiet and verbose:
        raise XputuneError("give --quiet or --verbose, not both")
    _verbosity = -1 if quiet else 1 if verbose else 0
    if verbose:
        trail.start()
    else:
        trail.stop()


def is_quiet() -> bool:
    return _verbosity < 0


def note(line: str) -> None:
    """A note for the person at the terminal (stderr); --quiet drops it. Data is escaped."""
    if _verbosity >= 0:
        sys.stderr.write(printable(line) + "\n")


def consulted() -> None:
    """What --verbose adds, when the command ends (stderr): the host paths, user files and
    tools it consulted, each tool's time and the whole command's."""
    for line in trail.report():
        sys.stderr.write(f"xputune: {printable(line)}\n")


def shell_command(
    argv: Sequence[str],
    env: dict[str, str] | None = None,
    width: int = 80,
    expand: tuple[str, ...] = (),
) -> str:
    """A command as shell text that pastes as the same command: words quoted, and lines longer
    than `width` continued with ` \\` (a flag stays on the line of its value). Only a single
    word longer than a line can make one longer. A word holding one of `expand` (a shell
    parameter such as ${MOONCAKE_HOST:?...}) is double-quoted, so the shell expands it."""
    import shlex

    def quote(word: str) -> str:
        return f'"{word}"' if any(e in word for e in expand) else shlex.quote(word)

    words = [f"{k}={shlex.quote(v)}" for k, v in sorted((env or {}).items())]
    words += [quote(a) for a in argv]
    groups: list[str] = []
    for word in words:
        if (
            groups
            and not word.startswith("-")
            and groups[-1].startswith("-")
            and (" " not in groups[-1])
        ):
            groups[-1] += " " + word
        else:
            groups.append(word)
    # a flag whose value would not fit beside it on a line of its own goes above the value
    groups = [g for group in groups for g in (group.split(" ", 1) if len(group) + 4 > width
                                              and group.startswith("-") else [group])]  # fmt: skip
    lines: list[str] = []
    line = ""
    for group in groups:
        indent = "  " if lines else ""
        candidate = f"{line} {group}" if line else indent + group
        if line and len(candidate) + 2 > width:
            lines.append(line)
            line = "  " + group
        else:
            line = candidate
    lines.append(line)
    return " \\\n".join(lines)


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


def text(value: object, style: str = "") -> Text:
    """A value from data as rich must print it: literally (no markup, no emoji), with what is
    not printable escaped. Every cell, header and line made of data goes through this."""
    from rich.text import Text

    return Text(printable(str(value)), style=style)


def text_lines(values: Iterable[object], style: str = "") -> Text:
    """Lines of data (warnings, a legend), each as text() makes it, one under the other."""
    from rich.text import Text

    return Text("\n".join(printable(str(v)) for v in values), style=style)


def bullets(values: Iterable[object], mark: str = "  - ") -> Table:
    """A list of data, each item after `mark` and wrapped under its own first word (a
    hanging indent), not under the mark."""
    from rich.table import Table

    grid = Table.grid()
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for value in values:
        grid.add_row(mark, text(value))
    return grid


def add_row(table: Table, *cells: Any, **options: Any) -> None:
    """table.add_row with every str cell taken as data (text()): a renderer whose cells are
    all data, or styled Text, adds its rows through this."""
    table.add_row(*(text(c) if isinstance(c, str) else c for c in cells), **options)


def _non_finite(data: Any, where: str = "") -> str | None:
    """The place of the first NaN or infinity in a document (a.b[2].c), or None."""
    if isinstance(data, float):
        return None if math.isfinite(data) else where or "the document"
    if isinstance(data, dict):
        items: Iterable[tuple[str, Any]] = ((f"{where}.{k}" if where else str(k), v)
                                            for k, v in data.items())  # fmt: skip
    elif isinstance(data, list | tuple):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(data))
    else:
        return None
    for place, value in items:
        found = _non_finite(value, place)
        if found is not None:
            return found
    return None


def _refuse_non_finite(data: Any) -> None:
    place = _non_finite(data)
    if place is not None:
        raise XputuneError(
            f"the result holds a number that is not finite at {printable(place)}: nothing "
            "written (an input is out of range)"
        )


def emit_data(data: dict[str, Any], fmt: Format) -> None:
    """Machine-readable output: stable key order so the same input prints the same bytes,
    and valid JSON (a document holding a NaN or an infinity is refused, see the module)."""
    if fmt is Format.yaml:
        import yaml

        _refuse_non_finite(data)
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    else:
        from xputune.cli.jsontext import dumps  # json.dumps(indent=2)'s text, faster

        try:
            out = dumps(data)
        except ValueError:
            _refuse_non_finite(data)
            raise
        sys.stdout.write(out + "\n")


def columns() -> int:
    """The width to lay text out for: $COLUMNS, the terminal's, else 80 (piped)."""
    import shutil

    return output_width() or shutil.get_terminal_size((PIPE_WIDTH, 24)).columns


def output_width(stream: Any = None) -> int | None:
    """$COLUMNS when set, else None on a terminal (rich asks it), else 80."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdecimal() and int(columns) > 0:
        return int(columns)
    stream = sys.stdout if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return None if tty else PIPE_WIDTH


def console(stderr: bool = False) -> Console:
    """A rich console for tables, as wide as the output really is (see the module note)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(width=output_width(stream), stderr=stderr, emoji=False)


def new_table(
    title: str | Text, columns: Sequence[str | Text | tuple[str | Text, dict[str, Any]]]
) -> Table:
    """A left-titled table; each column is a header or (header, ID | TEXT | other keywords).

    Plain headers get TEXT (wrap, fold, never an ellipsis). Print it with print_fitted(). A
    title or header holding data is a text() (a str one is read as markup).
    """
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        header, options = column if isinstance(column, tuple) else (column, TEXT)
        table.add_column(header, **{**TEXT, **options})
    return table


def _span(out: Console, cell: Any) -> tuple[int, int]:
    """(widest line, longest word) of a cell, without rendering it where it is plain text."""
    from rich.measure import Measurement
    from rich.text import Text

    if isinstance(cell, str) and "[" in cell:
        cell = out.render_str(cell)
    plain = cell.plain if isinstance(cell, Text) else cell
    if not isinstance(plain, str):
        measured = Measurement.get(out, out.options.update_width(1 << 16), cell)
        return measured.maximum, measured.minimum
    from rich.cells import cell_len

    lines = plain.splitlines() or [""]
    words = plain.split() or [""]
    return max(map(cell_len, lines)), max(map(cell_len, words))


def _columns(out: Console, table: Table) -> list[tuple[int, int]]:
    """Each column's natural and narrowest content width, measured once.

    The narrowest never cuts an ID cell (its header may wrap); descriptive text may fold a
    word longer than LONG_WORD.
    """
    found = []
    for column in table.columns:
        head_wide, head_word = _span(out, column.header)
        wide, least = head_wide, min(head_word, LONG_WORD)
        for cell in column.cells:
            cell_wide, cell_word = _span(out, cell)
            wide = max(wide, cell_wide)
            least = max(least, cell_wide if column.no_wrap else min(cell_word, LONG_WORD))
        if column.min_width:
            least = max(least, column.min_width)
        found.append((wide, max(least, 1)))
    return found


def _wrap_id_headers(out: Console, table: Table) -> None:
    """Let an ID column's header wrap (its cells still never do) where the header is wider."""
    from rich.text import Text

    for column in table.columns:
        if not column.no_wrap or not column.cells:
            continue
        cells = max(_span(out, c)[0] for c in column.cells)
        header = column.header
        if isinstance(header, str):
            header = out.render_str(header)
        if isinstance(header, Text) and header.cell_len > cells:
            header.no_wrap = False
            header.overflow = "fold"
            column.header = header
            column.max_width = max(cells, max(map(len, header.plain.split()), default=1))


def _lay_out(table: Table, sizes: list[tuple[int, int]], room: int) -> None:
    """Fix column widths: narrow the widest wrappable column first, none below its narrowest.

    (rich's own collapse may narrow a column below its longest word, splitting "off/off".)
    """
    _, right, _, left = table.padding
    extra = left + right + 1
    widths = [wide for wide, _ in sizes]
    excess = sum(widths) + extra * len(widths) - room
    while excess > 0:
        slack = [i for i, w in enumerate(widths) if w > sizes[i][1]]
        if not slack:
            break
        widest = max(slack, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    for column, width in zip(table.columns, widths, strict=True):
        column.width = width


def fit(out: Console, table: Table, keys: int = 1) -> list[Table]:
    """The table itself when it fits the console, else column blocks each repeating `keys`.

    "Fits" means it can be laid out by wrapping descriptive columns only; ID cells are never
    narrowed. A block holds as many columns as fit; a column wider than the console on its
    own gets a block of its own (and folds, losing nothing). Wide output is left untouched.
    """
    from dataclasses import replace

    from rich.table import Table

    room = out.width - 1  # the left rule
    _, right, _, left = table.padding
    extra = left + right + 1
    sizes = _columns(out, table)
    if sum(wide + extra for wide, _ in sizes) <= room:
        return [table]
    _wrap_id_headers(out, table)
    widths = [least + extra for _, least in sizes]
    if sum(widths) <= room or len(table.columns) <= keys + 1:
        _lay_out(table, sizes, room)
        return [table]
    keys = min(keys, len(table.columns) - 1)
    key_width = sum(widths[:keys])
    blocks: list[list[int]] = []
    used = room + 1  # forces a first block
    for i in range(keys, len(table.columns)):
        if used + widths[i] > room and (not blocks or blocks[-1]):
            blocks.append([])
            used = key_width
        blocks[-1].append(i)
        used += widths[i]
    tables = []
    count = len(table.columns) - keys
    for block in blocks:
        first, last = block[0] - keys + 1, block[-1] - keys + 1
        span = f"column {first}" if first == last else f"columns {first}-{last}"
        title: Any = None
        if isinstance(table.title, str) and table.title:
            title = f"{table.title} ({span} of {count})"
        elif table.title:  # a Text holding data: kept as it is, never read as markup
            title = table.title.copy()
            title.append(f" ({span} of {count})")
        part = Table(
            title=title,
            title_justify=table.title_justify,
            box=table.box,
            padding=table.padding,
            show_header=table.show_header,
            header_style=table.header_style,
            show_lines=table.show_lines,
        )
        picked = [*range(keys), *block]
        for i in picked:
            part.columns.append(replace(table.columns[i], _cells=[], _index=len(part.columns)))
        for r, row in enumerate(table.rows):
            cells = [table.columns[i]._cells[r] for i in picked]
            part.add_row(*cells, style=row.style, end_section=row.end_section)
        _lay_out(part, [sizes[i] for i in picked], room)
        tables.append(part)
    return tables


def print_fitted(out: Console, *parts: Any, keys: int = 1) -> None:
    """Print renderables in order, each rich Table through fit() (one print: the same bytes)."""
    from rich.console import Group
    from rich.table import Table

    flat: list[Any] = []
    for part in parts:
        flat.extend(fit(out, part, keys) if isinstance(part, Table) else [part])
    out.print(Group(*flat))


@contextmanager
def progress(
    total: int | None, label: str, *, enabled: bool = True
) -> Iterator[Callable[[int], None]]:
    """Show a rich progress bar on stderr while the block runs; yields `advance(n)`.

    Silent (advance does nothing) when stderr is not a terminal or `enabled` is False (pass
    `fmt is Format.table` so that --format json stays quiet). `total` is in bytes (a transfer
    column and rate are shown) or None for an unknown size (a spinner and the count).

        with progress(size, "reading trace", enabled=fmt is Format.table) as advance:
            curve = read(path, on_bytes=advance)
    """
    if not enabled or _verbosity < 0 or not sys.stderr.isatty():
        yield lambda _n: None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    label_column = TextColumn("{task.description}")
    if total:
        columns = [label_column, BarColumn(), DownloadColumn(), TransferSpeedColumn()]
        columns.append(TimeRemainingColumn())
    else:
        columns = [SpinnerColumn(), label_column, DownloadColumn()]
    with Progress(*columns, console=console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total or None)

        def advance(n: int) -> None:
            bar.advance(task, n)

        yield advance
