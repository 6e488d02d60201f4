"""The timeline of a very long session drawn from at most a few thousand steps, its peaks kept.

A chart of 100,000 turns is ~20 MB of figure JSON and seconds of browser work for pixels that
cannot show it: consecutive steps are grouped into buckets and each bucket is drawn by its
step with the largest total (a peak is never smoothed away), plus every step named in ``keep``
(compactions, stops, the selected step) so markers still sit on a drawn point. No streamlit.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

__all__ = ["MAX_STEPS", "peak_steps"]

#: Steps drawn at most (plus the kept ones).
MAX_STEPS = 2_000
_TOTAL = ("system", "skills", "tools", "summary", "conversation", "tool_results")


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
