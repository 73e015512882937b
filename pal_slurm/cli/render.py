"""Output for every listing: a rich table for people, JSON and CSV for scripts."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

FORMATS = ("table", "json", "csv")
format_option = click.option(
    "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
    help="table for people; json or csv for scripts.",
)


@dataclass(frozen=True)
class Column:
    header: str
    value: Callable[[Mapping[str, Any]], Any]
    justify: str = "left"


def fmt_float(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def console() -> Console:
    """A terminal gets its own width; a pipe or file gets wide lines rather than truncated cells."""
    out = Console(soft_wrap=False, highlight=False)
    if not out.is_terminal:
        out = Console(soft_wrap=False, highlight=False, width=200)
    return out


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str, ensure_ascii=False))


def emit_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], fmt: str, *, title: str | None = None,
              json_data: Any = None) -> None:
    """Render `rows`; JSON gets `json_data` when given (the full structure), else the rows."""
    if fmt == "json":
        emit_json(rows if json_data is None else json_data)
    elif fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([c.header for c in columns])
        for row in rows:
            writer.writerow(["" if (v := c.value(row)) is None else v for c in columns])
    else:
        table = Table(title=title, title_justify="left", show_lines=False)
        for c in columns:
            table.add_column(c.header, justify=c.justify)  # type: ignore[arg-type]
        for row in rows:
            table.add_row(*[_cell(c.value(row)) for c in columns])
        console().print(table)


def _cell(value: Any) -> Text:
    """Plain Text, never markup: node names and UUIDs come from files and users."""
    if value is None:
        return Text("-")
    if isinstance(value, float):
        return Text(f"{value:.3f}")
    return Text(str(value))
