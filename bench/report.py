"""What every benchmark returns (a :class:`Table`), how it is timed, and how it is rendered.

A benchmark module exposes ``run(quick: bool) -> Table | list[Table]``. Tables hold raw
numbers; :func:`render_markdown` formats them, so the runner, the README and the smoke test
all read the same cells. A cell that could not be measured is a string saying why.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Cell = int | float | str | None


@dataclass
class Table:
    """One benchmark's result: a titled grid of cells, the baseline it is measured against, notes."""

    title: str
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    baseline: str = ""
    notes: list[str] = field(default_factory=list)

    def add(self, *cells: Cell) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(
                f"{self.title}: row has {len(cells)} cells, table has {len(self.columns)} columns"
            )
        self.rows.append(list(cells))

    def as_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "columns": self.columns,
            "rows": self.rows,
            "baseline": self.baseline,
            "notes": self.notes,
        }


def timed(fn: Callable[[], Any], *, repeat: int = 5, min_time: float = 0.0) -> float:
    """Best wall time of one call of ``fn``, in seconds, over ``repeat`` calls (at least one;
    more until ``min_time`` seconds have passed, up to 1,000 calls). The best, not the median:
    on a shared machine the other calls measure the neighbours as much as the code."""
    gc.collect()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < max(1, repeat) or (time.perf_counter() - started < min_time and len(times) < 1_000):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def fmt_cell(value: Cell) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        magnitude = abs(value)
        if magnitude >= 1000:
            return f"{value:,.0f}"
        if magnitude >= 100:
            return f"{value:.0f}"
        if magnitude >= 10:
            return f"{value:.1f}"
        if magnitude >= 0.1 or magnitude == 0:
            return f"{value:.2f}"
        return f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_table(table: Table) -> str:
    lines = [f"### {table.title}", ""]
    if table.baseline:
        lines += [f"Baseline: {table.baseline}", ""]
    if table.rows:
        lines.append("| " + " | ".join(fmt_cell(c) for c in table.columns) + " |")
        lines.append("|" + "|".join("---" for _ in table.columns) + "|")
        lines += ["| " + " | ".join(fmt_cell(c) for c in row) + " |" for row in table.rows]
    else:
        lines.append("No rows measured.")
    if table.notes:
        lines.append("")
        lines += [f"- {note}" for note in table.notes]
    return "\n".join(lines) + "\n"


def render_markdown(tables: Sequence[Table], *, header: Sequence[str] = ()) -> str:
    parts = ["## ctxdesk benchmarks", "", *header, ""] if header else ["## ctxdesk benchmarks", ""]
    parts += [render_table(t) for t in tables]
    return "\n".join(parts)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def us(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1_000_000.0
