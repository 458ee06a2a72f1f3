"""What every command prints, in one place: text tables for people, strict JSON for machines.

A command builds its data once and says how it reads as text; :class:`Output` prints one or the other, as
``--output`` (or a command's ``--json``) asks. Text tables are drawn with ``rich`` when stdout is a terminal
and as plain aligned columns otherwise, so that what scripts read never changes with the terminal. Long
commands show a progress bar on stderr when it is a terminal (:func:`progress`).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import click

T = TypeVar("T")
TEXT, JSON = "text", "json"


@dataclass(frozen=True)
class Column(Generic[T]):
    """One column of a text table: its header and how an item shows in it."""

    header: str
    value: Callable[[T], Any]


def json_value(value: Any) -> Any:
    """A value as strict JSON can hold it (docs/operations/cli.md).

    NaN and infinities become the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``
    (JSON has no such numbers); binary becomes base64; decimals become strings, so
    no digit is lost to a float; dates and times become ISO 8601 strings.
    """
    import base64
    import datetime
    import decimal
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return format(value, "f")  # never exponent notation: "-0.000000001", not "-1E-9"
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return value


def to_json(data: Any, indent: int | None = 2) -> str:
    return json.dumps(json_value(data), indent=indent, allow_nan=False, default=str)


def text_table(items: Iterable[T], columns: Sequence[Column[T]]) -> str:
    """``items`` as a table of ``columns``: drawn by rich on a terminal, plain aligned columns elsewhere."""
    rows = [["" if v is None else str(v) for v in (c.value(item) for c in columns)] for item in items]
    headers = [c.header for c in columns]
    if sys.stdout.isatty():
        return _rich_table(rows, headers)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    body = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([line, "  ".join("-" * w for w in widths), *body])


def _rich_table(rows: list[list[str]], headers: list[str]) -> str:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(*headers, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for row in rows:
        table.add_row(*row)
    console = Console(width=max(80, Console().width), highlight=False)
    with console.capture() as captured:
        console.print(table)
    return captured.get().rstrip("\n")


def cell(value: Any) -> Any:
    """A value as a person reads it: nested values, binary and decimals in their JSON form, not Python's repr."""
    import decimal

    if isinstance(value, dict | list | tuple | bytes | decimal.Decimal):
        plain = json_value(value)
        return plain if isinstance(plain, str) else to_json(plain, indent=None)
    return value


class Output:
    """Prints a command's result as text or as JSON."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    @property
    def json(self) -> bool:
        return self.kind == JSON

    def emit(self, data: Any, text: str | Callable[[], str]) -> None:
        """``data`` as JSON, or the text (a function of nothing, when building it costs something)."""
        if self.json:
            click.echo(to_json(data))
        else:
            click.echo(text() if callable(text) else text)

    def rows(self, rows: Any, limit: int, what: str) -> None:
        """The first ``limit`` rows of an Arrow table (0: all): one JSON object per line, or a text table."""
        total = rows.num_rows
        if limit:
            rows = rows.slice(0, limit)
        records = rows.to_pylist()
        if self.json:
            for record in records:
                click.echo(to_json(record, indent=None))
            return
        columns = [Column(name, _field(name)) for name in rows.column_names]
        click.echo(text_table(records, columns))
        click.echo(f"({len(records)} of {total} {what})")


def _field(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda record: cell(record[name])


def progress(items: Sequence[T], what: str) -> Iterator[T]:
    """``items`` one by one, with a progress bar on stderr when it is a terminal."""
    if not sys.stderr.isatty() or len(items) < 2:
        yield from items
        return
    from rich.console import Console
    from rich.progress import track

    yield from track(items, description=what, console=Console(stderr=True), transient=True)


@contextlib.contextmanager
def step_progress(what: str) -> Iterator[Callable[[int, int, str], None]]:
    """A reporter of a long command's steps (done, total, what the last one did): a progress bar on stderr
    when it is a terminal, a line per step elsewhere."""
    if not sys.stderr.isatty():
        yield lambda done, total, line: click.echo(line, err=True)
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)
        yield lambda done, total, line: bar.update(task, completed=done, total=total, description=f"{what}: {line}")


@contextlib.contextmanager
def quiet_progress(what: str) -> Iterator[Callable[[int, int], None]]:
    """A reporter of (done, total) drawn as a progress bar on stderr when it is a terminal, and silent
    elsewhere (a command whose output is the data: a pipe should get nothing on stderr but errors)."""
    if not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
