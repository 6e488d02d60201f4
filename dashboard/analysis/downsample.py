"""The timeline of a very long session drawn from at most a few thousand steps, its peaks kept.

A chart of 100,000 turns is ~20 MB of figure JSON and seconds of browser work for pixels that
cannot show it: consecutive steps are grouped into buckets and each bucket is drawn by its
step with the largest total (a peak is never smoothed away), plus every step named in ``keep``
(compactions, stops, the selected step) so markers still sit on a drawn point. No streamlit.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

__all__ = ["HIDDEN_CALL_SHARE", "MAX_STEPS", "hides_a_larger_call", "peak_steps"]

#: Steps drawn at most (plus the kept ones).
MAX_STEPS = 2_000
_TOTAL = ("system", "skills", "tools", "summary", "conversation", "tool_results")
#: A turn drawn by its last call hides a larger one when its largest is this much bigger (a compaction
#: or a cleared result within the turn; calls of a turn otherwise only grow).
HIDDEN_CALL_SHARE = 1.1


def hides_a_larger_call(turns: pd.DataFrame) -> bool:
    """Whether the timeline by turn (each turn drawn by its last call: ``projected_tokens``; its
    largest: ``peak_projected``) hides a call larger than the one drawn: the session's peak would
    not be on the chart (Qwen Code's compress fixture: 99,769 tokens in turn 0, drawn as 20,856)."""
    if turns.empty or "peak_projected" not in turns.columns:
        return False
    drawn = turns["projected_tokens"].fillna(0)
    return bool((turns["peak_projected"].fillna(0) > drawn * HIDDEN_CALL_SHARE).any())


def peak_steps(
    frame: pd.DataFrame, *, max_steps: int = MAX_STEPS, keep: Iterable[int] = (), key: str = "turn"
) -> pd.DataFrame:
    """``frame`` (one row per step, ordered by ``key``) reduced to about ``max_steps`` rows: the
    row with the largest component total of each run of consecutive steps, the first and last
    step, and the steps in ``keep``. Shorter frames come back unchanged."""
    if len(frame) <= max_steps:
        return frame
    columns = [c for c in _TOTAL if c in frame.columns]
    total = frame[columns].sum(axis=1) if columns else pd.Series(0, index=frame.index)
    bucket = pd.Series(range(len(frame)), index=frame.index) * max_steps // len(frame)
    peaks = total.groupby(bucket).idxmax()
    wanted = set(int(k) for k in keep)
    chosen = frame.index.isin(peaks.to_numpy()) | frame[key].isin(wanted).to_numpy()
    chosen[0] = chosen[-1] = True
    return frame[chosen]
