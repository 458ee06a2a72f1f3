"""A benchmark's headline figures, kept beside the code and drawn as the chart the documentation shows.

Every benchmark ends by calling :func:`record` with what it measured: the figures go to
``bench/results/<benchmark>.json`` and the chart to ``docs/charts/<benchmark>.png``, so the two are refreshed
together with each run. A run that measures only some of a chart's values (one size, one catalog, no peer)
calls :func:`record_values`, which keeps the others. ``python bench/figures.py`` draws every chart again
from the recorded figures.
"""

from __future__ import annotations

import datetime
import json
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CHARTS = ROOT / "docs" / "charts"


@dataclass
class Figures:
    """One chart: groups along the x axis, one bar per series in each group.

    The first series is icesink's; the others are the peers it was measured against in the same run.
    """

    benchmark: str  # the script's name, without .py
    title: str
    unit: str  # what the values are: "rows/s", "ms", "s"
    better: str  # "higher" or "lower"
    groups: list[str]
    series: dict[str, list[float | None]]  # name -> one value per group (None: not measured there)
    command: str
    measured: str = field(default_factory=lambda: datetime.date.today().isoformat())
    note: str = ""

    def __post_init__(self) -> None:
        if self.better not in ("higher", "lower"):
            raise ValueError(f"{self.benchmark}: better must be 'higher' or 'lower', not {self.better!r}")
        for name, values in self.series.items():
            if len(values) != len(self.groups):
                raise ValueError(
                    f"{self.benchmark}: series {name!r} has {len(values)} values for {len(self.groups)} groups"
                )


def record(figures: Figures) -> Path:
    """Keep the figures and draw their chart; returns the chart's path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{figures.benchmark}.json").write_text(json.dumps(asdict(figures), indent=2) + "\n")
    return draw(figures)


def record_values(benchmark: str, updates: dict[str, dict[str, float]], command: str) -> Path | None:
    """Record what a run measured into the benchmark's recorded figures, keeping the values it did not measure.

    ``updates`` gives series -> group -> value with the names of ``bench/results/<benchmark>.json``, whose
    title, unit, better, groups and series stay as they are: the chart keeps its shape. A value for a group
    the chart does not have is left out, and said so on stderr (add the group to the JSON to chart it); a
    series it does not have is an error. When values of earlier runs remain, the note names them with their
    dates, as ``<group> from <date>`` (or ``<series> from <date>``, or ``<series> in <group> from <date>``)
    joined by ``; ``, and is read back the next time. Returns the chart's path, or None if nothing was recorded.
    """
    path = RESULTS / f"{benchmark}.json"
    if not path.exists():
        raise FileNotFoundError(f"{path.relative_to(ROOT)} is missing: it defines the chart's title, groups and series")
    old = load(path)
    today = datetime.date.today().isoformat()
    series = {name: list(values) for name, values in old.series.items()}
    dates = _value_dates(old)
    recorded, skipped = 0, []
    for name, values in updates.items():
        if name not in series:
            raise ValueError(f"{benchmark}: the chart has no series {name!r}, only {list(series)}")
        for group, value in values.items():
            if group not in old.groups:
                skipped.append(group)
                continue
            series[name][old.groups.index(group)] = value
            dates[name, group] = today
            recorded += 1
    if skipped:
        shown = ", ".join(repr(group) for group in dict.fromkeys(skipped))
        print(f"{benchmark}: {shown} not recorded: the chart's groups are {old.groups}", file=sys.stderr)
    if not recorded:
        return None
    new = Figures(old.benchmark, old.title, old.unit, old.better, old.groups, series, command, today)
    new.note = _dates_note(new, dates)
    chart = record(new)
    print(f"{benchmark}: recorded in {path.relative_to(ROOT)} and {chart.relative_to(ROOT)}", file=sys.stderr)
    return chart


def _value_dates(figures: Figures) -> dict[tuple[str, str], str]:
    """(series, group) -> date of the value: ``measured``, unless a note written by record_values says otherwise."""
    dates = {(name, group): figures.measured for name in figures.series for group in figures.groups}
    for clause in figures.note.split("; "):
        where, _, date = clause.rpartition(" from ")
        try:
            datetime.date.fromisoformat(date)
        except ValueError:
            continue  # not a clause of record_values's (a note written by hand)
        for name, group in dates:
            if where in (group, name, f"{name} in {group}"):
                dates[name, group] = date
    return dates


def _dates_note(figures: Figures, dates: dict[tuple[str, str], str]) -> str:
    """The values older than ``figures.measured``: whole groups by their name, then whole series, then single values."""

    def present(cells: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        return {(name, group) for name, group in cells if figures.series[name][figures.groups.index(group)] is not None}

    clauses = []
    for date in sorted({date for date in dates.values() if date != figures.measured}, reverse=True):
        left = present(cell for cell, when in dates.items() if when == date)
        wheres = []
        for group in figures.groups:
            cells = present((name, group) for name in figures.series)
            if cells and cells <= left:
                wheres.append(group)
                left -= cells
        for name in figures.series:
            cells = present((name, group) for group in figures.groups)
            if cells and cells <= left:
                wheres.append(name)
                left -= cells
        wheres += [f"{name} in {group}" for name in figures.series for group in figures.groups if (name, group) in left]
        clauses += [f"{where} from {date}" for where in wheres]
    return "; ".join(clauses)


def draw(figures: Figures) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    CHARTS.mkdir(parents=True, exist_ok=True)
    width = 0.8 / len(figures.series)
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    for i, (name, values) in enumerate(figures.series.items()):
        xs = [g + (i - (len(figures.series) - 1) / 2) * width for g in range(len(figures.groups))]
        present = [(x, v) for x, v in zip(xs, values, strict=True) if v is not None]
        bars = ax.bar([x for x, _ in present], [v for _, v in present], width, label=name, zorder=2)
        ax.bar_label(bars, labels=[_short(v) for _, v in present], fontsize=7, padding=2)
    ax.set_xticks(range(len(figures.groups)), ["\n".join(textwrap.wrap(g, 16)) for g in figures.groups], fontsize=8)
    ax.set_ylabel(f"{figures.unit} ({figures.better} is better)")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: _short(value) if value else "0"))
    ax.set_title(figures.title, fontsize=11)
    ax.grid(axis="y", alpha=0.3, zorder=0)
    ax.margins(y=0.15)
    ax.legend(fontsize=8, frameon=False)
    fig.text(0.01, 0.01, f"{figures.command}  ·  {figures.measured}", fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = CHARTS / f"{figures.benchmark}.png"
    # No timestamps in the file: the same figures draw the same bytes.
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
    return path


def _short(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.2f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def load(path: Path) -> Figures:
    return Figures(**json.loads(path.read_text()))


def main() -> None:
    drawn = [draw(load(path)) for path in sorted(RESULTS.glob("*.json"))]
    for path in drawn:
        print(path.relative_to(ROOT))
    if not drawn:
        sys.exit(f"no recorded figures in {RESULTS.relative_to(ROOT)}: run a benchmark first")


if __name__ == "__main__":
    main()
