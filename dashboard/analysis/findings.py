"""Findings as the dashboard shows them (pure): labels, savings and money in words, one frame row
per finding, and markers per turn or per model call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:  # annotations only: the findings load in a child process (dashboard.actions)
    from engine.findings import Finding


#: How the dashboard names each kind of finding.
FINDING_LABELS = {
    "repeated_read": "Repeated read",
    "stale_result": "Stale result",
    "unused_result": "Unused result",
    "unused_tools": "Unused tools",
    "uncached_prefix": "Uncached prefix",
    "stale_thinking": "Stale thinking",
    "ineffective_compaction": "Ineffective compaction",
    "lost_constraint": "Lost constraint",
    "cache_rebuild": "Cache rebuild",
}
FINDING_COLUMNS = ("turn", "kind", "title", "tokens", "usd", "fix", "detail", "requests", "exact", "messages")


def money_text(usd: float | None) -> str:
    if usd is None:
        return "price unknown"
    return f"${usd:,.4f}" if usd < 1 else f"${usd:,.2f}"


def savings_text(finding: Finding) -> str:
    """What fixing a finding would save, in one line."""
    if finding.tokens == 0:
        return "Nothing to save in tokens: the fix keeps more in context"
    estimate = "" if finding.exact else " (estimated)"
    text = f"Would save {finding.tokens:,} input tokens{estimate} over {finding.requests:,} request(s)"
    if finding.money is not None:
        text += f", about {money_text(finding.money)}"
    return text


def findings_frame(findings: Sequence[Finding]) -> pd.DataFrame:
    """One row per finding, largest savings first (``tokens`` desc, then turn)."""
    rows = [
        (
            f.turn_index, FINDING_LABELS.get(f.kind, f.kind), f.title, f.tokens, f.money, f.fix, f.detail,
            f.requests, f.exact, ", ".join(f"#{s}" for s in f.message_seqs),
        )
        for f in findings
    ]  # fmt: skip
    frame = pd.DataFrame(rows, columns=list(FINDING_COLUMNS))
    return frame.sort_values(["tokens", "turn"], ascending=[False, True], kind="stable").reset_index(
        drop=True
    )


def findings_markers(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per turn with findings: ``turn``, ``count``, ``tokens`` and ``titles`` (raw, not escaped)."""
    if frame.empty:
        return pd.DataFrame(columns=["turn", "count", "tokens", "titles"])
    grouped = frame.sort_values("tokens", ascending=False, kind="stable").groupby("turn", sort=True)
    return grouped.agg(
        count=("title", "size"), tokens=("tokens", "sum"), titles=("title", list)
    ).reset_index()


def findings_per_call(markers: pd.DataFrame, calls: pd.DataFrame) -> pd.DataFrame:
    """Finding markers moved onto the model-call axis of :func:`per_call`: each at the first call of
    its turn (markers for turns without a call are dropped)."""
    if markers.empty or calls.empty:
        return markers.iloc[0:0]
    first = calls.groupby("real_turn")["turn"].min()
    moved = markers[markers["turn"].isin(first.index)]
    return moved.assign(turn=[int(first[t]) for t in moved["turn"]]).reset_index(drop=True)
