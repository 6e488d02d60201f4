"""Plain-text tables for the terminal: the one cell formatter the CLI and the reports share.

Numbers are right-aligned with thousands separators, text left-aligned, None shown as ``-``
and booleans as yes/no; floats use the caller's format spec (the CLI ``g``, reports ``,.1f``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: How a float cell is written unless the caller says otherwise.
DEFAULT_FLOAT_FORMAT = "g"


def format_cell(value: Any, *, float_format: str = DEFAULT_FLOAT_FORMAT) -> str:
    """One table cell as text."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return format(value, float_format)
    return str(value)


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, float_format: str = DEFAULT_FLOAT_FORMAT
) -> str:
    """Rows under their headers and a dashed rule; a column of numbers (or None) aligns right."""
    cells = [[format_cell(v, float_format=float_format) for v in row] for row in rows]
    numeric = [
        bool(rows) and all(isinstance(row[i], int | float) or row[i] is None for row in rows)
        for i in range(len(headers))
    ]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(headers)]
    lines = []
    for values in [list(headers), ["-" * w for w in widths], *cells]:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def article(number: int) -> str:
    """``a`` or ``an`` before ``number`` read aloud (an 8,700-token limit, an 11-step plan, a 111,360-token
    limit): ``an`` when its leading group of digits is read from "eight", "eleven" or "eighteen"."""
    lead = f"{abs(number):,}".split(",")[0]
    return "an" if lead.startswith("8") or lead in ("11", "18") else "a"
