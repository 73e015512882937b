"""Output for every listing: a rich table for people, JSON and CSV for scripts.

rich is imported by the functions that draw, not here: every command module imports this one,
and `pal --help` then starts without it.
"""

from __future__ import annotations

import csv
import errno
import functools
import json
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

FORMATS = ("table", "json", "csv")
F = TypeVar("F", bound=Callable[..., Any])


class _FormatChoice(click.Choice):  # type: ignore[type-arg]
    """The output formats; a value that belongs to another option now is refused with its name."""

    def __init__(self, choices: Sequence[str], moved: Mapping[str, str]) -> None:
        super().__init__(list(choices))
        self.moved = dict(moved)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value in self.moved:
            self.fail(f"{value!r} is not an output format: give {self.moved[value]} {value} "
                      f"(--format says what is printed: {', '.join(map(str, self.choices))})", param, ctx)
        return super().convert(value, param, ctx)


def output_options(choices: Sequence[str], help_text: str, *,
                   moved: Mapping[str, str] | None = None) -> Callable[[F], F]:
    """--format CHOICE and --json (the same as --format json), handed to the command as one
    `fmt`: every command that prints takes the same two options. `moved`: values once given to
    this command's --format that another option takes now (value -> that option)."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def command(*args: Any, fmt: str, as_json: bool, **kwargs: Any) -> Any:
            if as_json and fmt not in (choices[0], "json"):
                raise click.UsageError(f"--json and --format {fmt} ask for two formats: give one")
            return fn(*args, fmt="json" if as_json else fmt, **kwargs)

        command = click.option("--json", "as_json", is_flag=True, help="Same as --format json.")(command)
        command = click.option("--format", "fmt", type=_FormatChoice(choices, moved or {}), default=choices[0],
                               show_default=True, help=help_text)(command)
        return command  # type: ignore[return-value]

    return decorate


#: a command that prints tables: table for people, json or csv for scripts
format_option = output_options(FORMATS, "table for people; json or csv for scripts.")
#: a command that prints lines, not a table (nothing to export as CSV)
text_format_option = output_options(
    ("table", "json"), "table: lines for people (this command prints no table, so no csv); json for scripts.")

wide_option = click.option(
    "--wide", is_flag=True,
    help="Every column, full UUIDs and model names, however wide (default: fit the terminal).",
)


@dataclass(frozen=True)
class Column:
    """One table column. Cells are never cut: a `wrap` column (free text: reasons, bin lists)
    wraps onto more lines, every other one keeps its full width; when the table still does not
    fit the terminal, `optional` columns are dropped, rightmost first (--wide keeps them all)."""

    header: str
    value: Callable[[Mapping[str, Any]], Any]
    justify: str = "left"
    wrap: bool | None = None  # None: wrap only free text (a cell longer than KEEP_WHOLE characters)
    optional: bool = False


#: Cells up to this long (node names, full GPU UUIDs, numbers, dates) are never wrapped or cut.
KEEP_WHOLE = 40


def fmt_float(value: float | None, digits: int = 3) -> str:
    from pal_slurm.numfmt import fmt_num

    return fmt_num(value, digits)


def terminal_width(env: Mapping[str, str] | None = None) -> int | None:
    """COLUMNS when set (as shells and `COLUMNS=80 pal ...` do), else None: the terminal's own."""
    value = (os.environ if env is None else env).get("COLUMNS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


#: Tables written to a pipe or a file (no terminal, no COLUMNS) are laid out for this width.
PIPE_WIDTH = 100


@functools.cache
def _console_class() -> type[Console]:
    """rich's Console, except that a reader gone away raises BrokenPipeError: rich's own answer
    is SystemExit(1), which would bypass the CLI's one exit code for a closed pipe (141)."""
    from rich.console import Console

    class PalConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader of the output has gone")

    return PalConsole


def new_console(**kwargs: Any) -> Console:
    """A rich console that ends a closed pipe as the CLI does (`_console_class`)."""
    return _console_class()(**kwargs)


def console(width: int | None = None) -> Console:
    """A terminal (or COLUMNS) gives the width; a pipe or file without COLUMNS gets PIPE_WIDTH columns."""
    width = width or terminal_width()
    if width is not None:
        return new_console(soft_wrap=False, highlight=False, width=width)
    out = new_console(soft_wrap=False, highlight=False)
    if not out.is_terminal:
        out = new_console(soft_wrap=False, highlight=False, width=PIPE_WIDTH)
    return out


def prose(text: str, *, err: bool = False) -> None:
    """A line of prose (a title, a legend, a note): wrapped at word boundaries on a terminal (or at
    COLUMNS), written whole to a pipe or a file, so that grep and scripts see one line."""
    text = "\n".join(printable(line) for line in text.split("\n"))
    if terminal_width() is None:
        stream = sys.stderr if err else sys.stdout
        if not stream.isatty():
            click.echo(text, err=err)
            return
    out = console()
    if err:
        out = new_console(soft_wrap=False, highlight=False, width=out.width, stderr=True)
    out.print(text, markup=False, highlight=False)


def json_safe(data: Any) -> Any:
    """`data` with every float that JSON cannot carry (NaN, +-inf: a metric without a value) as None."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, Mapping):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(v) for v in data]
    return data


def json_text(data: Any) -> str:
    """Valid JSON, always: a metric without a value is null, never a bare NaN."""
    return json.dumps(json_safe(data), indent=2, default=str, ensure_ascii=False, allow_nan=False)


def emit_json(data: Any) -> None:
    click.echo(json_text(data))


def emit_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], fmt: str, *, title: str | None = None,
              json_data: Any = None, wide: bool = False, legend: str | None = None) -> None:
    """Render `rows`; JSON gets `json_data` when given (the full structure), else the rows."""
    if fmt == "json":
        emit_json(rows if json_data is None else json_data)
    elif fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([" ".join(c.header.split()) for c in columns])  # a two-line table header is one CSV name
        for row in rows:
            writer.writerow(["" if (v := c.value(row)) is None or (isinstance(v, float) and not math.isfinite(v))
                             else csv_cell(v) for c in columns])
    else:
        print_table(rows, columns, title=title, wide=wide, legend=legend)


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    cells = [[_cell(c.value(row)) for c in columns] for row in rows]
    for i, c in enumerate(columns):
        longest = max([*(len(line) for line in c.header.splitlines()), *(r[i].cell_len for r in cells)])
        if c.wrap or (c.wrap is None and longest > KEEP_WHOLE):
            table.add_column(c.header, justify=c.justify, overflow="fold")  # type: ignore[arg-type]
        else:
            table.add_column(c.header, justify=c.justify, no_wrap=True, min_width=longest)  # type: ignore[arg-type]
    for r in cells:
        table.add_row(*r)
    return table


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], *, title: str | None = None,
                wide: bool = False, out: Console | None = None, legend: str | None = None) -> None:
    """A table that fits the console: optional columns go, rightmost first, until the columns'
    minimum widths fit; with `wide`, every column stays and the lines are as long as they need.
    The title is a line of prose above it and the legend one below it (`prose`: wrapped between
    words on a terminal, whole in a pipe), never squeezed to the table's width."""
    if title:
        prose(title)
    out = out or console()
    cols = list(columns)
    table = _table(rows, cols)
    if wide:
        need = _measure(out, table).maximum
        if need > out.width:
            out = new_console(soft_wrap=False, highlight=False, width=need, file=out.file)
    else:
        while _measure(out, table).minimum > out.width and any(c.optional for c in cols):
            cols.pop(max(i for i, c in enumerate(cols) if c.optional))
            table = _table(rows, cols)
        need = _measure(out, table).minimum
        if need > out.width:  # still too wide (many job classes): long lines rather than cut cells
            out = new_console(soft_wrap=False, highlight=False, width=need, file=out.file)
    out.print(table)
    if legend:
        prose(legend)


def _measure(out: Console, table: Table) -> Measurement:
    """The table's own minimum and natural widths (not clamped to the console's width)."""
    from rich.measure import Measurement

    return Measurement.get(out, out.options.update_width(100_000), table)


def _cell(value: Any) -> Text:
    """Plain Text, never markup, never a control sequence: node names, job names and UUIDs come
    from files and users."""
    from rich.text import Text

    if value is None:
        return Text("-")
    if isinstance(value, float):
        from pal_slurm.numfmt import fmt_num

        return Text(fmt_num(value))
    return Text(printable(str(value)))


def printable(text: str) -> str:
    """`text` with every control character shown escaped (`\\x1b`, `\\n`): an ESC or OSC
    sequence in a job name must not reach the admin's terminal, nor a newline forge a line."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?%?")


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet will not run: text that starts with = + - @ (or a tab or CR) and
    is not a number gets a leading apostrophe (a job name like `=HYPERLINK(...)`)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") and value != "-" \
            and not _NUMBER.fullmatch(value):
        return "'" + value
    return value
