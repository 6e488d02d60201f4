"""Two sessions, or two model calls, side by side (pure: pandas frames in, frames out; no streamlit,
no SQL): per-component tokens, provider usage, cost and cache, and what differs, in words.

Inputs are the frames the pages already query: a session's ``request`` events
(``dashboard.data.events``: one row per model call, ``<component>_tokens`` and ``provider_*``
columns), its priced calls (``dashboard.data.costs.call_costs``, joined on ``event_seq`` = the
event's ``seq``) and its row of ``sessions_overview``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from engine.events import COMPONENT_LABELS
from engine.limit import recorded_limit

#: The figures compared, in the order shown: (key, label, kind) with kind "tokens" | "usd" | "count" | "pct" | "text".
SESSION_METRICS: tuple[tuple[str, str, str], ...] = (
    ("model", "Model", "text"),
    ("calls", "Model calls", "count"),
    ("turns", "Turns", "count"),
    ("peak_tokens", "Peak context (tokens, our count)", "tokens"),
    ("limit_tokens", "Limit (tokens)", "tokens"),
    ("peak_usage_pct", "Peak use of the limit (%)", "pct"),
    ("compactions", "Compactions", "count"),
    ("forced_final", "Forced final turns", "count"),
    ("input_tokens", "Input tokens (uncached)", "tokens"),
    ("cache_read_tokens", "Cache reads (tokens)", "tokens"),
    ("cache_write_tokens", "Cache writes (tokens)", "tokens"),
    ("output_tokens", "Output tokens", "tokens"),
    ("cache_hit_pct", "Cache hit rate (% of input read from cache)", "pct"),
    ("cache_rebuilds", "Calls that rebuilt the cache", "count"),
    ("total_usd", "Cost (USD, list prices)", "usd"),
    ("lost_usd", "Lost to cache rebuilds (USD)", "usd"),
)
COMPONENTS = tuple(COMPONENT_LABELS)


def _num(value: Any) -> float | None:
    """A recorded number, or None when missing (None, NaN, NA)."""
    if value is None or value is pd.NA:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _sum(frame: pd.DataFrame, column: str) -> float | None:
    if frame.empty or column not in frame or frame[column].isna().all():
        return None
    return float(frame[column].fillna(0).sum())


def _hit_pct(read: float | None, written: float | None, uncached: float | None) -> float | None:
    total = (read or 0) + (written or 0) + (uncached or 0)
    return None if read is None or total == 0 else round(100 * read / total, 1)


def peak_request(requests: pd.DataFrame) -> pd.Series | None:
    """The call that sent the most (our count of what was sent), or None without calls."""
    if requests.empty:
        return None
    sizes = pd.to_numeric(requests["projected_tokens"], errors="coerce").fillna(0)
    return requests.loc[sizes.idxmax()]


def session_figures(
    overview_row: pd.Series | dict[str, Any], requests: pd.DataFrame, calls: pd.DataFrame
) -> dict[str, Any]:
    """A session's figures (``SESSION_METRICS`` keys) from its overview row, request events and priced calls."""
    row = dict(overview_row)
    read = _sum(calls, "cache_read_tokens")
    written = None
    if not calls.empty:
        written = (_sum(calls, "cache_write_5m_tokens") or 0) + (_sum(calls, "cache_write_1h_tokens") or 0)
    uncached = _sum(calls, "input_tokens")
    causes = calls["cache_cause"] if "cache_cause" in calls else pd.Series(dtype=object)
    return {
        "model": row.get("model"),
        "calls": len(requests),
        "turns": _num(row.get("turns")),
        "peak_tokens": _num(row.get("peak_tokens")),
        "limit_tokens": _num(row.get("limit_tokens")),
        "peak_usage_pct": _num(row.get("peak_usage_pct")),
        "compactions": _num(row.get("compactions")),
        "forced_final": _num(row.get("forced_final")),
        "input_tokens": uncached,
        "cache_read_tokens": read,
        "cache_write_tokens": written,
        "output_tokens": _sum(calls, "output_tokens"),
        "cache_hit_pct": _hit_pct(read, written, uncached),
        "cache_rebuilds": int(causes.notna().sum() - (causes == "cold_start").sum())
        if not calls.empty
        else None,
        "total_usd": _sum(calls, "total_usd"),
        "lost_usd": _sum(calls, "lost_usd"),
    }


def call_figures(
    request: pd.Series | dict[str, Any], cost: pd.Series | dict[str, Any] | None
) -> dict[str, Any]:
    """One call's figures: what was sent, what the provider reported, what it cost and why."""
    request, cost = dict(request), dict(cost) if cost is not None else {}
    written = None
    if cost:
        written = (_num(cost.get("cache_write_5m_tokens")) or 0) + (
            _num(cost.get("cache_write_1h_tokens")) or 0
        )
    read = _num(cost.get("cache_read_tokens")) if cost else _num(request.get("provider_cache_read_tokens"))
    uncached = _num(cost.get("input_tokens")) if cost else _num(request.get("provider_input_tokens"))
    return {
        "model": request.get("model"),
        "turn": _num(request.get("turn_index")),
        "sent_tokens": _num(request.get("projected_tokens")),
        "limit_tokens": recorded_limit(dict(request)),  # engine.limit's rule, as the timeline shows it
        "input_tokens": uncached,
        "cache_read_tokens": read,
        "cache_write_tokens": written if cost else _num(request.get("provider_cache_creation_tokens")),
        "output_tokens": _num(cost.get("output_tokens"))
        if cost
        else _num(request.get("provider_output_tokens")),
        "cache_hit_pct": _hit_pct(read, written, uncached),
        "total_usd": _num(cost.get("total_usd")),
        "lost_usd": _num(cost.get("lost_usd")),
        # A priced call with no cause read what it expected from the cache.
        "cache_cause": cost.get("cache_cause")
        if isinstance(cost.get("cache_cause"), str)
        else "none"
        if cost
        else None,
    }


#: The figures of one call, as compared.
CALL_METRICS: tuple[tuple[str, str, str], ...] = (
    ("model", "Model", "text"),
    ("turn", "Turn", "count"),
    ("sent_tokens", "Sent (tokens, our count)", "tokens"),
    ("limit_tokens", "Limit (tokens)", "tokens"),
    ("input_tokens", "Input tokens (uncached)", "tokens"),
    ("cache_read_tokens", "Cache reads (tokens)", "tokens"),
    ("cache_write_tokens", "Cache writes (tokens)", "tokens"),
    ("output_tokens", "Output tokens", "tokens"),
    ("cache_hit_pct", "Cache hit rate (% of input read from cache)", "pct"),
    ("total_usd", "Cost (USD, list prices)", "usd"),
    ("lost_usd", "Lost to a cache rebuild (USD)", "usd"),
    ("cache_cause", "Cache cause", "text"),
)


@dataclass(frozen=True)
class Comparison:
    """A side-by-side table (one row per figure: label, a, b, difference, differs) and what differs in words."""

    table: pd.DataFrame
    differences: tuple[str, ...]


def _shown(value: Any, kind: str) -> str:
    number = _num(value) if kind != "text" else None
    if kind == "text":
        return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
    if number is None:
        return "—"
    if kind == "usd":
        return f"${number:,.4f}"
    if kind == "pct":
        return f"{number:.1f}%"
    return f"{round(number):,}"


def _delta(a: Any, b: Any, kind: str) -> str:
    if kind == "text":
        return "" if a == b else "differs"
    x, y = _num(a), _num(b)
    if x is None or y is None:
        return "" if x is None and y is None else "only one recorded"
    if x == y:
        return ""
    if kind == "usd":
        return f"{y - x:+,.4f}"
    if kind == "pct":
        return f"{y - x:+.1f} pts"
    change = f"{round(y - x):+,}"
    return f"{change}, {100 * (y - x) / x:+.0f}%" if x else change


def compare(
    a: dict[str, Any],
    b: dict[str, Any],
    metrics: tuple[tuple[str, str, str], ...],
    names: tuple[str, str] = ("A", "B"),
) -> Comparison:
    """``a`` beside ``b`` (figures from :func:`session_figures` or :func:`call_figures`): every value
    as text (a missing one as an em-dash), the difference B - A, and sentences for what differs."""
    rows, words = [], []
    for key, label, kind in metrics:
        delta = _delta(a.get(key), b.get(key), kind)
        rows.append({"figure": label, names[0]: _shown(a.get(key), kind), names[1]: _shown(b.get(key), kind),
                     "difference (B − A)": delta, "differs": bool(delta)})  # fmt: skip
        if delta and kind != "text":
            words.append(f"{label}: {_shown(a.get(key), kind)} → {_shown(b.get(key), kind)} ({delta}).")
        elif delta:
            words.append(f"{label}: {_shown(a.get(key), kind)} in A, {_shown(b.get(key), kind)} in B.")
    return Comparison(pd.DataFrame(rows), tuple(words))


def compare_components(
    a: dict[str, int], b: dict[str, int], names: tuple[str, str] = ("A", "B")
) -> Comparison:
    """Tokens per component side by side, largest change first in the sentences."""
    rows, changes = [], []
    for component, label in COMPONENT_LABELS.items():
        x, y = int(a.get(component, 0) or 0), int(b.get(component, 0) or 0)
        if x == 0 and y == 0:
            continue
        delta = _delta(x, y, "tokens")
        rows.append(
            {"component": label, names[0]: x, names[1]: y, "difference (B − A)": y - x, "differs": x != y}
        )
        if x != y:
            changes.append((abs(y - x), f"{label}: {x:,} → {y:,} tokens ({delta})."))
    changes.sort(key=lambda c: -c[0])
    columns = ["component", names[0], names[1], "difference (B − A)", "differs"]
    return Comparison(pd.DataFrame(rows, columns=columns), tuple(text for _, text in changes))


def call_label(request: pd.Series | dict[str, Any], cost: pd.Series | dict[str, Any] | None = None) -> str:
    """``Call #3 · turn 1 · 3,557 tokens sent · $0.0097``: a call in a picker."""
    request = dict(request)
    parts = [f"Event #{int(request['seq'])}"]
    turn = _num(request.get("turn_index"))
    if turn is not None:
        parts.append(f"turn {int(turn)}")
    sent = _num(request.get("projected_tokens"))
    parts.append(f"{int(sent):,} tokens sent" if sent is not None else "size not recorded")
    usd = _num(dict(cost).get("total_usd")) if cost is not None else None
    if usd is not None:
        parts.append(f"${usd:,.4f}")
    return " · ".join(parts)
